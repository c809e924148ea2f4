/*
 * feed-augment-bench: what the per-sample augmentations cost on one core.
 * Every image of DATA is read into memory first; then, one thread, for each
 * pass over the images, three modes side by side on the same originals and
 * the same sample indices (which goes first alternates by image):
 *   plain   feed_engine_run, train SIZE (RandomResizedCrop + flip);
 *   recipe  the same plus feed_engine_augment with DESCRIPTION (default the
 *           preset torchvision-v2-recipe: TrivialAugmentWide +
 *           RandomErasing(p=0.1)), as feedd's pool does it;
 * and prints one line a pass: images, images per CPU-second of each mode
 * (thread CPU time, so other jobs on a shared machine do not count), the
 * recipe's time over plain's, and the augmentation alone in microseconds of
 * CPU per image.
 * Usage: feed-augment-bench DATA [PASSES] [SIZE] [DESCRIPTION]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "augment.h"
#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/transform.h"

/* This thread's CPU time: the 2-core machine is shared, so wall time would
 * count other jobs' turns as ours. */
static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    feed_dataset *ds;
    char err[256];
    if (argc < 2 || feed_dataset_open(argv[1], NULL, &ds, err, sizeof err)) {
        fprintf(stderr, "usage: feed-augment-bench DATA [PASSES] [SIZE] [DESCRIPTION] (%s)\n",
                argc < 2 ? "" : err);
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 1;
    uint32_t size = argc > 3 ? (uint32_t)atoi(argv[3]) : 176;
    feed_augment aug;
    if (feed_augment_parse(argc > 4 ? argv[4] : "torchvision-v2-recipe", &aug, err, sizeof err)) {
        fprintf(stderr, "feed-augment-bench: %s\n", err);
        return 2;
    }
    feed_engine *e;
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = t.out_w = size;
    uint64_t n = feed_dataset_count(ds);
    feed_buf *bufs = calloc(n, sizeof *bufs);
    const uint8_t **jp = calloc(n, sizeof *jp);
    size_t *len = calloc(n, sizeof *len);
    uint8_t *out = malloc((size_t)size * size * 3);
    if (!bufs || !jp || !len || !out || feed_engine_new(NULL, &e) != 0 ||
        feed_transform_validate(&t, err, sizeof err) != 0) {
        fprintf(stderr, "feed-augment-bench: out of memory or bad SIZE\n");
        return 2;
    }
    for (uint64_t i = 0; i < n; i++) {
        feed_buf_init(&bufs[i], 64u << 20);
        if (feed_dataset_read(ds, i, &bufs[i], &jp[i], &len[i]) != 0)
            len[i] = 0;
    }
    printf("pass images plain_img_s recipe_img_s recipe_over_plain augment_us\n");
    for (int p = 0; p < passes; p++) {
        uint64_t plain_ns = 0, recipe_ns = 0, aug_ns = 0, images = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (!len[i])
                continue;
            /* Which mode goes first alternates, so neither always finds the bytes warm. */
            uint64_t ns[2] = {0, 0}, ans = 0;
            feed_sample_status st = FEED_SAMPLE_OK;
            for (int k = 0; k < 2; k++) {
                int mode = (int)((i + (uint64_t)k) & 1); /* 0 plain, 1 recipe */
                uint64_t t0 = cpu_ns();
                feed_sample_status r =
                    feed_engine_run(e, jp[i], len[i], &t, 1, (uint32_t)p, i, out, NULL);
                uint64_t t1 = cpu_ns();
                if (r == FEED_SAMPLE_OK && mode == 1)
                    r = feed_engine_augment(e, &aug, out, size, size, 1, (uint32_t)p, i);
                uint64_t t2 = cpu_ns();
                ns[mode] = t2 - t0;
                if (mode == 1)
                    ans = t2 - t1;
                st = r != FEED_SAMPLE_OK ? r : st;
            }
            if (st != FEED_SAMPLE_OK)
                continue;
            plain_ns += ns[0];
            recipe_ns += ns[1];
            aug_ns += ans;
            images++;
        }
        printf("%d %llu %.1f %.1f %.3f %.1f\n", p, (unsigned long long)images,
               1e9 * (double)images / (double)plain_ns, 1e9 * (double)images / (double)recipe_ns,
               (double)recipe_ns / (double)plain_ns, (double)aug_ns / 1e3 / (double)images);
    }
    for (uint64_t i = 0; i < n; i++)
        feed_buf_free(&bufs[i]);
    free(bufs);
    free(jp);
    free(len);
    free(out);
    feed_engine_free(e);
    feed_dataset_close(ds);
    return 0;
}
