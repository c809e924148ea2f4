/*
 * psnr_decoded: per image of a data set, train 224x224 (or eval, a third
 * argument) through the engine's fast path and through the decoded path at
 * shorter side SIDE (feed_engine_decode + feed_engine_run_decoded, what a
 * cached dataset serves, hit or miss); prints PSNR min / 1st percentile /
 * median, the time of each step and the mean size of a decoded image.
 * Build from the repository root after scripts/build.sh build:
 *   gcc -O2 -o psnr_decoded bench/results/cache-2core-2026-12-01/psnr_decoded.c \
 *     -Iserver/engine -Icommon/include build/server/engine/libfeedengine.a \
 *     build/common/libfeedcommon.a -ljpeg -lm -lpthread
 *   ./psnr_decoded DATA SIDE [eval]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/timeutil.h"
static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv)
{
    feed_dataset *ds;
    char err[256];
    if (feed_dataset_open(argv[1], NULL, &ds, err, sizeof err)) {
        puts(err);
        return 1;
    }
    unsigned side = atoi(argv[2]);
    int eval = argc > 3;
    feed_engine *e;
    feed_engine_new(NULL, &e);
    feed_transform t;
    if (eval) {
        feed_transform_default_eval(&t);
        t.resize_size = 256;
    } else
        feed_transform_default_train(&t);
    t.out_h = t.out_w = 224;
    feed_buf sc;
    feed_buf_init(&sc, 64 << 20);
    uint64_t n = feed_dataset_count(ds);
    double *ps = malloc(n * sizeof *ps);
    size_t k = 0;
    uint8_t *a = malloc(224 * 224 * 3), *b = malloc(224 * 224 * 3);
    uint64_t tu = 0, tc = 0, td = 0;
    size_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *j;
        size_t len;
        feed_dataset_read(ds, i, &sc, &j, &len);
        uint64_t t0 = feed_now_ns();
        if (feed_engine_run(e, j, len, &t, 7, 1, i, a, NULL) != FEED_SAMPLE_OK)
            continue;
        uint64_t t1 = feed_now_ns();
        feed_decoded img;
        if (feed_engine_decode(e, j, len, side, NULL, NULL, &img) != FEED_SAMPLE_OK) {
            printf("dec fail %lu\n", i);
            continue;
        }
        uint64_t t2 = feed_now_ns();
        feed_engine_run_decoded(e, &img, &t, 7, 1, i, b, NULL);
        uint64_t t3 = feed_now_ns();
        tu += t1 - t0;
        td += t2 - t1;
        tc += t3 - t2;
        bytes += img.width * img.height * 3;
        double se = 0;
        for (size_t p = 0; p < 224 * 224 * 3; p++) {
            double d = (double)a[p] - b[p];
            se += d * d;
        }
        double mse = se / (224 * 224 * 3);
        ps[k++] = mse == 0 ? 99 : 10 * log10(255.0 * 255 / mse);
    }
    qsort(ps, k, sizeof *ps, cmpd);
    printf("n=%zu min %.2f p1 %.2f median %.2f ; uncached %.3f ms, decode %.3f ms, cached %.3f ms, "
           "mean entry %.0f KB\n",
           k, ps[0], ps[k / 100], ps[k / 2], tu / 1e6 / k, td / 1e6 / k, tc / 1e6 / k,
           bytes / 1024.0 / k);
}
