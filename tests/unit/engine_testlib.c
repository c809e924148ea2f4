/* Helpers of the engine's unit tests; see engine_testlib.h. */
#include "engine_testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "feed/transform.h"

uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return b;
}

uint8_t *read_data(const char *name, size_t *len)
{
    const char *dir = getenv("FEED_TEST_DATA");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "tests/data", name);
    uint8_t *b = read_file(path, len);
    if (!b)
        fail_msg("cannot read %s (FEED_TEST_DATA)", path);
    return b;
}

double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0)
        return 99.0;
    return 10.0 * log10(255.0 * 255.0 / (se / n));
}

bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

uint8_t pattern(const jpg_spec *s, uint32_t x, uint32_t y, int ch)
{
    if (s->flat)
        return s->colour[ch];
    double u = (x + 0.5) / s->w, v = (y + 0.5) / s->h, val;
    switch (ch) {
    case 0:
        val = 128 + 90 * sin(6.3 * u + 2 * v) + 20 * sin(x / 3.0);
        break;
    case 1:
        val = 30 + 200 * u * (1 - 0.5 * v) + 15 * cos(y / 2.5);
        break;
    case 2:
        val = 60 + 150 * v + 25 * sin((x + y) / 4.0);
        break;
    default:
        val = 40 + 60 * u * v;
        break;
    }
    if (s->busy)
        val += 60 * sin(x / 1.3 + ch) * cos(y / 1.7);
    return (uint8_t)(val < 0 ? 0 : val > 255 ? 255 : val);
}

/* A JPEG made with libjpeg; free() the result. */
uint8_t *make_jpeg(const jpg_spec *s, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr em;
    c.err = jpeg_std_error(&em);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = s->w;
    c.image_height = s->h;
    int comps = s->kind == K_GRAY ? 1 : s->kind == K_CMYK || s->kind == K_YCCK ? 4 : 3;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    if (s->kind == K_RGB)
        jpeg_set_colorspace(&c, JCS_RGB);
    if (s->kind == K_YCCK)
        jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, s->quality ? s->quality : 90, TRUE);
    if (s->kind == K_YCC) {
        c.comp_info[0].h_samp_factor = s->hs ? s->hs : 2;
        c.comp_info[0].v_samp_factor = s->vs ? s->vs : 2;
    }
    if (s->progressive)
        jpeg_simple_progression(&c);
    c.arith_code = s->arith;
    c.optimize_coding = s->optimize;
    c.restart_in_rows = s->restart_rows;
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)s->w * comps);
    for (uint32_t y = 0; y < s->h; y++) {
        for (uint32_t x = 0; x < s->w; x++)
            for (int ch = 0; ch < comps; ch++)
                row[(size_t)x * comps + ch] = pattern(s, x, y, ch);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
    return buf;
}

int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || feed_engine_new(NULL, &f->e) != 0)
        return -1;
    f->a = malloc(FEED_TRANSFORM_MAX_SIDE * 256 * 3);
    f->b = malloc(FEED_TRANSFORM_MAX_SIDE * 256 * 3);
    *state = f;
    return 0;
}

int teardown(void **state)
{
    fixture *f = *state;
    feed_engine_free(f->e);
    free(f->a);
    free(f->b);
    free(f);
    return 0;
}

/*
 * Fast path and reference for one image over a few keys and output sizes.
 * Returns the lowest PSNR seen; fails on any status but OK.
 */
double compare_paths(fixture *f, const uint8_t *jpg, size_t len, const char *what, int keys)
{
    static const uint32_t sizes[][2] = {{224, 224}, {64, 64}, {96, 128}};
    double worst = 99.0;
    for (int mode = 0; mode < 2; mode++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            feed_transform t;
            if (mode == 0)
                feed_transform_default_train(&t);
            else
                feed_transform_default_eval(&t);
            t.out_h = sizes[s][0];
            t.out_w = sizes[s][1];
            if (mode == 1)
                t.resize_size = t.out_h > t.out_w ? t.out_h * 8 / 7 : t.out_w * 8 / 7;
            size_t n = (size_t)t.out_h * t.out_w * 3;
            for (int k = 0; k < (mode == 0 ? keys : 1); k++) {
                feed_sample_status s1 =
                    feed_engine_run(f->e, jpg, len, &t, 77, 1, (uint64_t)k, f->a, NULL);
                if (s1 != FEED_SAMPLE_OK)
                    fail_msg("%s: fast path: %s", what, feed_engine_last_error(f->e));
                feed_sample_status s2 =
                    feed_engine_run_reference(f->e, jpg, len, &t, 77, 1, (uint64_t)k, f->b);
                if (s2 != FEED_SAMPLE_OK)
                    fail_msg("%s: reference: %s", what, feed_engine_last_error(f->e));
                double p = psnr(f->a, f->b, n);
                if (p < worst)
                    worst = p;
                if (p < PSNR_BOUND)
                    fail_msg("%s: %s %ux%u key %d: PSNR %.2f dB < %.0f", what,
                             mode ? "eval" : "train", t.out_h, t.out_w, k, p, PSNR_BOUND);
            }
        }
    }
    return worst;
}
