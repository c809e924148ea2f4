/*
 * feed-psnr-pack: what a re-encoded pack gives up, as the model sees it. For
 * every sample of ORIG (a tree or pack) and the same index of PACK (made from
 * it by feed-pack, same order), the engine's sample of each (eval: resize 256,
 * centre crop 224; or train with the same seed, epoch and index, with "train"
 * as a third argument), and the PSNR between the two; prints min / 1st
 * percentile / median over the samples. One thread; everything it allocates
 * is freed at its one exit.
 * Usage: feed-psnr-pack ORIG PACK [train] (built with the project).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/transform.h"

#define SIDE 224
#define PIXELS (SIDE * SIDE * 3)
/* One PSNR per sample: the cap keeps a mistaken path from sizing the array. */
#define MAX_SAMPLES (64u << 20)
/* The largest compressed sample read; ImageNet's are a few MB at most. */
#define MAX_SAMPLE_BYTES (64u << 20)
/* Identical samples have no finite PSNR; this stands for "no loss". */
#define PSNR_IDENTICAL 99.0

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int sample(feed_engine *e, const feed_dataset *ds, feed_buf *scratch,
                  const feed_transform *t, uint64_t i, uint8_t *out)
{
    const uint8_t *jpeg;
    size_t len;
    if (feed_dataset_read(ds, i, scratch, &jpeg, &len) != 0)
        return -1;
    /* Seed 7, epoch 1: the same train crop for both sides of a pair. */
    return feed_engine_run(e, jpeg, len, t, 7, 1, i, out, NULL) == FEED_SAMPLE_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    feed_dataset *orig = NULL, *pack = NULL;
    feed_engine *e = NULL;
    feed_buf scratch;
    double *psnr = NULL;
    uint8_t *x = NULL, *y = NULL;
    char err[256] = "";
    feed_transform t;
    uint64_t n;
    size_t k = 0;
    int train = argc > 3 && strcmp(argv[3], "train") == 0;
    int rc = 1;

    feed_buf_init(&scratch, MAX_SAMPLE_BYTES);
    if (argc < 3 || argc > 4 || (argc == 4 && !train)) {
        fprintf(stderr, "usage: feed-psnr-pack ORIG PACK [train]\n");
        rc = 2;
        goto out;
    }
    if (feed_dataset_open(argv[1], NULL, &orig, err, sizeof err) != 0 ||
        feed_dataset_open(argv[2], NULL, &pack, err, sizeof err) != 0) {
        fprintf(stderr, "feed-psnr-pack: %s\n", err);
        goto out;
    }
    if (train) {
        feed_transform_default_train(&t);
    } else {
        feed_transform_default_eval(&t);
        t.resize_size = 256;
    }
    t.out_h = t.out_w = SIDE;
    n = feed_dataset_count(orig);
    if (feed_dataset_count(pack) != n || n == 0 || n > MAX_SAMPLES) {
        fprintf(stderr, "feed-psnr-pack: %llu vs %llu samples (1 to %u, the same in both)\n",
                (unsigned long long)n, (unsigned long long)feed_dataset_count(pack), MAX_SAMPLES);
        goto out;
    }
    psnr = malloc(n * sizeof *psnr);
    x = malloc(PIXELS);
    y = malloc(PIXELS);
    if (!psnr || !x || !y || feed_engine_new(NULL, &e) != 0) {
        fprintf(stderr, "feed-psnr-pack: out of memory\n");
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        double se = 0, mse;
        if (sample(e, orig, &scratch, &t, i, x) != 0 || sample(e, pack, &scratch, &t, i, y) != 0)
            continue;
        for (size_t p = 0; p < PIXELS; p++) {
            double d = (double)x[p] - y[p];
            se += d * d;
        }
        mse = se / PIXELS;
        psnr[k++] = mse == 0 ? PSNR_IDENTICAL : 10 * log10(255.0 * 255 / mse);
    }
    if (k == 0) {
        fprintf(stderr, "feed-psnr-pack: no sample decoded on both sides\n");
        goto out;
    }
    qsort(psnr, k, sizeof *psnr, cmpd);
    printf("%s: n=%zu PSNR min %.2f p1 %.2f median %.2f dB\n", train ? "train" : "eval", k,
           psnr[0], psnr[k / 100], psnr[k / 2]);
    rc = 0;
out:
    free(y);
    free(x);
    free(psnr);
    feed_engine_free(e);
    feed_buf_free(&scratch);
    feed_dataset_close(pack);
    feed_dataset_close(orig);
    return rc;
}
