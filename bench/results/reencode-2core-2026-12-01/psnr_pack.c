/*
 * psnr_pack: what a re-encoded pack gives up, as the model sees it. For every
 * sample of ORIG (a tree or pack) and the same index of PACK (made from it
 * by feed-pack, same order), the engine's sample of each (eval: resize 256,
 * centre crop 224; or train with the same seed, epoch and index, a third
 * argument), and the PSNR between the two; prints min / 1st percentile /
 * median over the samples.
 * Build from the repository root after scripts/build.sh build:
 *   gcc -O2 -o psnr_pack bench/results/reencode-2core-2026-12-01/psnr_pack.c \
 *     -Iserver/engine -Icommon/include build/server/engine/libfeedengine.a \
 *     build/common/libfeedcommon.a -ljpeg -lm -lpthread
 *   ./psnr_pack ORIG PACK [train]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"

#define SIDE 224

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int sample(feed_engine *e, feed_dataset *ds, feed_buf *sc, const feed_transform *t,
                  uint64_t i, uint8_t *out)
{
    const uint8_t *j;
    size_t len;
    if (feed_dataset_read(ds, i, sc, &j, &len) != 0)
        return -1;
    return feed_engine_run(e, j, len, t, 7, 1, i, out, NULL) == FEED_SAMPLE_OK ? 0 : -1;
}

int main(int argc, char **argv)
{
    feed_dataset *a, *b;
    char err[256];
    if (argc < 3 || feed_dataset_open(argv[1], NULL, &a, err, sizeof err) ||
        feed_dataset_open(argv[2], NULL, &b, err, sizeof err)) {
        fprintf(stderr, "usage: psnr_pack ORIG PACK [train] (%s)\n", err);
        return 2;
    }
    feed_transform t;
    if (argc > 3) {
        feed_transform_default_train(&t);
    } else {
        feed_transform_default_eval(&t);
        t.resize_size = 256;
    }
    t.out_h = t.out_w = SIDE;
    feed_engine *e;
    feed_engine_new(NULL, &e);
    feed_buf sc;
    feed_buf_init(&sc, 64 << 20);
    uint64_t n = feed_dataset_count(a);
    if (feed_dataset_count(b) != n) {
        fprintf(stderr, "psnr_pack: %llu vs %llu samples\n", (unsigned long long)n,
                (unsigned long long)feed_dataset_count(b));
        return 1;
    }
    double *ps = malloc(n * sizeof *ps);
    uint8_t *x = malloc(SIDE * SIDE * 3), *y = malloc(SIDE * SIDE * 3);
    size_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (sample(e, a, &sc, &t, i, x) || sample(e, b, &sc, &t, i, y))
            continue;
        double se = 0;
        for (size_t p = 0; p < SIDE * SIDE * 3; p++) {
            double d = (double)x[p] - y[p];
            se += d * d;
        }
        double mse = se / (SIDE * SIDE * 3);
        ps[k++] = mse == 0 ? 99 : 10 * log10(255.0 * 255 / mse);
    }
    qsort(ps, k, sizeof *ps, cmpd);
    printf("%s: n=%zu PSNR min %.2f p1 %.2f median %.2f dB\n", argc > 3 ? "train" : "eval", k,
           ps[0], ps[k / 100], ps[k / 2]);
    return 0;
}
