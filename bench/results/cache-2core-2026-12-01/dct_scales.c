/*
 * dct_scales: libjpeg-turbo alone, every image of a data set decoded whole
 * at scale N/8 for N = 1..8 (RGBX, ISLOW, fancy upsampling, as the engine
 * sets it up); ms per image for each N.
 *   gcc -O2 -o dct_scales bench/results/cache-2core-2026-12-01/dct_scales.c \
 *     -Icommon/include build/common/libfeedcommon.a -ljpeg -lm
 *   ./dct_scales DATA
 */
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/timeutil.h"
int main(int argc, char **argv)
{
    feed_dataset *ds;
    char err[256];
    feed_dataset_open(argv[1], NULL, &ds, err, sizeof err);
    uint64_t n = feed_dataset_count(ds);
    feed_buf sc;
    feed_buf_init(&sc, 64 << 20);
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr em;
    d.err = jpeg_std_error(&em);
    jpeg_create_decompress(&d);
    uint8_t *row = malloc(20000 * 4);
    for (int N = 1; N <= 8; N++) {
        uint64_t t = 0;
        for (uint64_t i = 0; i < n; i++) {
            const uint8_t *j;
            size_t len;
            feed_dataset_read(ds, i, &sc, &j, &len);
            uint64_t t0 = feed_now_ns();
            jpeg_mem_src(&d, j, len);
            jpeg_read_header(&d, TRUE);
            d.out_color_space = JCS_EXT_RGBX;
            d.dct_method = JDCT_ISLOW;
            d.do_fancy_upsampling = TRUE;
            d.scale_num = N;
            d.scale_denom = 8;
            jpeg_start_decompress(&d);
            while (d.output_scanline < d.output_height) {
                JSAMPROW r = row;
                jpeg_read_scanlines(&d, &r, 1);
            }
            jpeg_finish_decompress(&d);
            t += feed_now_ns() - t0;
        }
        printf("N=%d %.3f ms/img\n", N, t / 1e6 / n);
    }
}
