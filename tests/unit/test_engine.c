/*
 * Unit tests for the preprocessing engine: the fast path (crop + DCT scaling +
 * partial decode) against the full-decode reference on real sample images and
 * on JPEGs made here with libjpeg in every layout the engine must handle;
 * determinism; the resize kernels against a double-precision formula; the
 * eval transform against resize-then-crop. Malformed input, limits and the
 * decoded path: test_engine_input.c; shared helpers: engine_testlib.h.
 *
 * PSNR bound, fast vs reference: 30 dB. The two differ only where the fast
 * path lets libjpeg's scaled IDCT do part of the downscale (its low-pass is
 * not the triangle filter's) and at the edges of the cropped decode window
 * (chroma upsampling sees an edge there). On the 1000 sample images the worst
 * case measured 35 dB; JPEG quality 90 itself is about 40 dB from its
 * source. A wrong crop, a one-pixel shift, a missed flip or a colour mix-up
 * all land under 25 dB, which test_psnr_discriminates checks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "engine.h"
#include "engine_testlib.h"
#include "feed/errors.h"
#include "feed/transform.h"
#include "resize.h"
#include "feedtest_skip.h"

/* ---- resize kernels ------------------------------------------------------------------- */

static double tri(double x)
{
    x = fabs(x);
    return x < 1 ? 1 - x : 0;
}

/* Pillow's BILINEAR resample of one axis in double precision. */
static double ref_sample(const uint8_t *in, size_t stride, uint32_t in_size, double in0, double in1,
                         uint32_t out, uint32_t i)
{
    double scale = (in1 - in0) / out, fs = scale < 1 ? 1 : scale, support = fs;
    double center = in0 + (i + 0.5) * scale;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0)
        xmin = 0;
    if (xmax > (int)in_size)
        xmax = (int)in_size;
    double sum = 0, ww = 0;
    for (int x = xmin; x < xmax; x++) {
        double w = tri((x - center + 0.5) / fs);
        sum += w * in[(size_t)x * stride];
        ww += w;
    }
    return sum / ww;
}

static void test_resize_kernels(void **state)
{
    (void)state;
    uint32_t seed = 1;
    static const struct {
        uint32_t in;
        double in0, in1;
        uint32_t out;
    } cases[] = {{340, 0, 340, 224},   {224, 0, 224, 224},         {100, 0, 100, 224},
                 {1, 0, 1, 224},       {1000, 0, 1000, 8},         {517, 3.25, 480.5, 97},
                 {4000, 0, 4000, 224}, {230, 0.875, 229.125, 224}, {33, 0, 33, 31}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        feed_resize_axis ax;
        feed_resize_axis_init(&ax);
        for (int flip = 0; flip < 2; flip++) {
            assert_int_equal(feed_resize_axis_plan(&ax, cases[c].in0, cases[c].in1, cases[c].in,
                                                   cases[c].out, flip),
                             0);
            uint32_t in = cases[c].in, out = cases[c].out;
            /* Rounding to nearest, plus each Q14 weight's own rounding
             * (half a unit in 2^14) times the largest sample value. */
            double tol = 0.5 + ax.taps * 0.5 * 255.0 / (1 << FEED_RESIZE_BITS) + 1e-9;
            size_t src_px = in + FEED_RESIZE_HSLACK(&ax);
            uint8_t *src = calloc(src_px, 4);
            size_t dn = (size_t)out * 3 + 4 > 77 ? (size_t)out * 3 + 4 : 77;
            uint8_t *d1 = calloc(dn, 1), *d2 = calloc(dn, 1);
            for (size_t i = 0; i < (size_t)in * 4; i++) {
                seed = seed * 1103515245u + 12345u;
                src[i] = (uint8_t)(i % 4 == 3 ? 0 : (seed >> 16) & 0xFF);
            }
            feed_resize_force_scalar(true);
            feed_resize_hrow(&ax, src, d1);
            feed_resize_force_scalar(false);
            feed_resize_hrow(&ax, src, d2);
            assert_memory_equal(d1, d2, (size_t)out * 3); /* SIMD == scalar */
            for (uint32_t i = 0; i < out; i++) {
                uint32_t from = flip ? out - 1 - i : i;
                for (int ch = 0; ch < 3; ch++) {
                    double want =
                        ref_sample(src + ch, 4, in, cases[c].in0, cases[c].in1, out, from);
                    double got = d1[(size_t)i * 3 + ch];
                    if (fabs(got - want) > tol)
                        fail_msg("case %zu px %u ch %d: got %.0f want %.3f", c, i, ch, got, want);
                }
            }
            /* Vertical: the same weights over rows of bytes. */
            if (!flip && in <= 1000) {
                size_t width = 77;
                uint8_t *rows = malloc((size_t)in * width);
                const uint8_t **ptr = malloc(ax.taps * sizeof *ptr);
                for (size_t i = 0; i < (size_t)in * width; i++) {
                    seed = seed * 1103515245u + 12345u;
                    rows[i] = (uint8_t)(seed >> 16);
                }
                for (uint32_t i = 0; i < out; i++) {
                    for (int k = 0; k < ax.count[i]; k++)
                        ptr[k] = rows + (size_t)(ax.start[i] + k) * width;
                    feed_resize_force_scalar(true);
                    feed_resize_vrow(ptr, ax.w + (size_t)i * ax.taps, ax.count[i], d1, width);
                    feed_resize_force_scalar(false);
                    feed_resize_vrow(ptr, ax.w + (size_t)i * ax.taps, ax.count[i], d2, width);
                    assert_memory_equal(d1, d2, width);
                    for (size_t x = 0; x < width; x++) {
                        double want =
                            ref_sample(rows + x, width, in, cases[c].in0, cases[c].in1, out, i);
                        if (fabs(d1[x] - want) > tol)
                            fail_msg("case %zu row %u byte %zu: got %d want %.3f (tol %.2f)", c, i,
                                     x, d1[x], want, tol);
                    }
                }
                free(ptr);
                free(rows);
            }
            free(src);
            free(d1);
            free(d2);
        }
        feed_resize_axis_free(&ax);
    }
    print_message("resize kernels: %s\n", feed_resize_kernel_name());
}

/* ---- fast vs reference ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_sample_images(void **state)
{
    fixture *f = *state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    DIR *top = opendir(dir);
    assert_non_null(top);
    char **paths = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(top))) {
        if (de->d_name[0] == '.')
            continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        DIR *d = opendir(sub);
        if (!d)
            continue;
        struct dirent *fe;
        while ((fe = readdir(d))) {
            size_t l = strlen(fe->d_name);
            if (l < 5 ||
                (strcasecmp(fe->d_name + l - 5, ".jpeg") && strcasecmp(fe->d_name + l - 4, ".jpg")))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                paths = realloc(paths, cap * sizeof *paths);
            }
            paths[n] = malloc(strlen(sub) + l + 2);
            sprintf(paths[n], "%s/%s", sub, fe->d_name);
            n++;
        }
        closedir(d);
    }
    closedir(top);
    assert_true(n > 0);
    qsort(paths, n, sizeof *paths, cmp_str);
    /* Every 10th image: 100 of the 1000-image sample, enough and quick under ASan. */
    size_t step = n >= 500 ? 10 : 1, tested = 0;
    double worst = 99, sum = 0;
    for (size_t i = 0; i < n; i += step) {
        size_t len;
        uint8_t *jpg = read_file(paths[i], &len);
        assert_non_null(jpg);
        double p = compare_paths(f, jpg, len, paths[i], 3);
        worst = p < worst ? p : worst;
        sum += p;
        tested++;
        free(jpg);
    }
    print_message("sample images: %zu tested, worst PSNR %.2f dB, mean %.2f dB\n", tested, worst,
                  sum / tested);
    assert_true(tested >= 50 || n < 50);
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

static void test_synthetic_layouts(void **state)
{
    fixture *f = *state;
    static const struct {
        const char *name;
        jpg_spec s;
    } cases[] = {
        {"4:2:0", {.w = 640, .h = 480, .kind = K_YCC, .hs = 2, .vs = 2}},
        {"4:4:4", {.w = 500, .h = 375, .kind = K_YCC, .hs = 1, .vs = 1}},
        {"4:2:2", {.w = 333, .h = 517, .kind = K_YCC, .hs = 2, .vs = 1}},
        {"4:4:0", {.w = 517, .h = 333, .kind = K_YCC, .hs = 1, .vs = 2}},
        {"grayscale", {.w = 320, .h = 241, .kind = K_GRAY}},
        {"progressive 4:2:0",
         {.w = 600, .h = 400, .kind = K_YCC, .hs = 2, .vs = 2, .progressive = true}},
        {"progressive gray", {.w = 300, .h = 301, .kind = K_GRAY, .progressive = true}},
        {"restart every row",
         {.w = 480, .h = 360, .kind = K_YCC, .hs = 2, .vs = 2, .restart_rows = 1}},
        {"arithmetic coded", {.w = 400, .h = 300, .kind = K_YCC, .hs = 2, .vs = 2, .arith = true}},
        {"RGB colour space", {.w = 300, .h = 200, .kind = K_RGB}},
        {"CMYK", {.w = 300, .h = 200, .kind = K_CMYK}},
        {"YCCK", {.w = 256, .h = 300, .kind = K_YCCK}},
        {"large 4:2:0 (DCT 1/8)", {.w = 2400, .h = 1800, .kind = K_YCC, .hs = 2, .vs = 2}},
        {"1x1", {.w = 1, .h = 1, .kind = K_YCC, .hs = 2, .vs = 2}},
        {"7x300", {.w = 7, .h = 300, .kind = K_YCC, .hs = 2, .vs = 2}},
        {"300x7", {.w = 300, .h = 7, .kind = K_YCC, .hs = 2, .vs = 2}},
        {"2x2 gray", {.w = 2, .h = 2, .kind = K_GRAY}},
        {"9x17 4:4:4", {.w = 9, .h = 17, .kind = K_YCC, .hs = 1, .vs = 1}},
        {"17x9 progressive", {.w = 17, .h = 9, .kind = K_YCC, .progressive = true}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len;
        uint8_t *jpg = make_jpeg(&cases[c].s, &len);
        double p = compare_paths(f, jpg, len, cases[c].name, 6);
        print_message("%-24s worst PSNR %.2f dB\n", cases[c].name, p);
        free(jpg);
    }
}

/* Flat images come out flat, in the right colour, for every colour model. */
static void test_colours(void **state)
{
    fixture *f = *state;
    static const struct {
        jpg_spec s;
        uint8_t want[3];
    } cases[] = {
        {{.w = 320, .h = 240, .kind = K_YCC, .flat = true, .colour = {200, 100, 50}},
         {200, 100, 50}},
        {{.w = 320, .h = 240, .kind = K_RGB, .flat = true, .colour = {10, 240, 130}},
         {10, 240, 130}},
        {{.w = 99, .h = 77, .kind = K_GRAY, .flat = true, .colour = {77}}, {77, 77, 77}},
        /* libjpeg writes an Adobe marker with CMYK, so the values read back
         * as inverted CMYK: C = 255 - 10, M = 255 - 200, Y = 255 - 30,
         * K = 255 - 40; R = (255 - K) - C (255 - K) / 255 = 40 - 38.4. */
        {{.w = 64, .h = 48, .kind = K_CMYK, .flat = true, .colour = {10, 200, 30, 40}}, {2, 31, 5}},
        {{.w = 64, .h = 48, .kind = K_YCCK, .flat = true, .colour = {10, 200, 30, 40}}, {2, 31, 5}},
    };
    feed_transform t;
    feed_transform_default_train(&t);
    size_t n = (size_t)t.out_h * t.out_w * 3;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t len;
        uint8_t *jpg = make_jpeg(&cases[c].s, &len);
        for (int k = 0; k < 4; k++) {
            assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 1, 0, (uint64_t)k, f->a, NULL),
                             FEED_SAMPLE_OK);
            for (size_t i = 0; i < n; i++) {
                int d = (int)f->a[i] - cases[c].want[i % 3];
                if (d < -3 || d > 3)
                    fail_msg("case %zu byte %zu: %d, want %d", c, i, f->a[i], cases[c].want[i % 3]);
            }
        }
        free(jpg);
    }
}

/* flip_prob 1 and 0 share the crop (the flip is drawn last): exact mirrors. */
static void test_flip_is_mirror(void **state)
{
    fixture *f = *state;
    jpg_spec s = {.w = 640, .h = 427, .kind = K_YCC, .hs = 2, .vs = 2};
    size_t len;
    uint8_t *jpg = make_jpeg(&s, &len);
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = 100;
    t.out_w = 150;
    for (int k = 0; k < 10; k++) {
        t.flip_prob = 0.0;
        assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 3, 0, (uint64_t)k, f->a, NULL), 0);
        t.flip_prob = 1.0;
        assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 3, 0, (uint64_t)k, f->b, NULL), 0);
        for (uint32_t y = 0; y < t.out_h; y++)
            for (uint32_t x = 0; x < t.out_w; x++)
                assert_memory_equal(f->a + ((size_t)y * t.out_w + x) * 3,
                                    f->b + ((size_t)y * t.out_w + (t.out_w - 1 - x)) * 3, 3);
    }
    free(jpg);
}

/* The metric catches the mistakes the bound is meant to catch. */
static void test_psnr_discriminates(void **state)
{
    fixture *f = *state;
    jpg_spec s = {.w = 640, .h = 480, .kind = K_YCC, .hs = 2, .vs = 2, .busy = true};
    size_t len;
    uint8_t *jpg = make_jpeg(&s, &len);
    feed_transform t;
    feed_transform_default_eval(&t);
    size_t n = (size_t)t.out_h * t.out_w * 3;
    assert_int_equal(feed_engine_run_reference(f->e, jpg, len, &t, 0, 0, 0, f->b), 0);
    /* flipped */
    feed_transform_default_train(&t);
    t.scale_min = t.scale_max = 1.0;
    t.ratio_min = t.ratio_max = 4.0 / 3.0; /* the whole image, as eval nearly is */
    t.flip_prob = 1.0;
    assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 0, 0, 0, f->a, NULL), 0);
    double flipped = psnr(f->a, f->b, n);
    /* shifted by one output pixel */
    memmove(f->a, f->b + 3, n > 3 ? n - 3 : 0); /* n > 3 always; says so to GCC -O3 */
    double shifted = psnr(f->a, f->b, n);
    /* red and blue swapped */
    for (size_t i = 0; i < n; i += 3) {
        f->a[i] = f->b[i + 2];
        f->a[i + 1] = f->b[i + 1];
        f->a[i + 2] = f->b[i];
    }
    double swapped = psnr(f->a, f->b, n);
    print_message("PSNR of mistakes: flipped %.1f, shifted %.1f, R/B swapped %.1f dB\n", flipped,
                  shifted, swapped);
    assert_true(flipped < 25 && shifted < 25 && swapped < 25);
    free(jpg);
}

/* ---- determinism ---------------------------------------------------------------------- */

typedef struct thread_job {
    const uint8_t *jpg;
    size_t len;
    uint8_t *out;
    int status;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    feed_engine *e;
    feed_transform t;
    feed_transform_default_train(&t);
    j->status = feed_engine_new(NULL, &e);
    if (j->status == 0)
        j->status = feed_engine_run(e, j->jpg, j->len, &t, 11, 4, 1234, j->out, NULL);
    feed_engine_free(e);
    return NULL;
}

static void test_determinism(void **state)
{
    fixture *f = *state;
    jpg_spec s = {.w = 800, .h = 600, .kind = K_YCC, .hs = 2, .vs = 2};
    jpg_spec other = {.w = 300, .h = 500, .kind = K_GRAY, .progressive = true};
    size_t len, olen;
    uint8_t *jpg = make_jpeg(&s, &len), *ojpg = make_jpeg(&other, &olen);
    feed_transform t;
    feed_transform_default_train(&t);
    size_t n = (size_t)t.out_h * t.out_w * 3;
    feed_stage_times times;
    assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 11, 4, 1234, f->a, &times), 0);
    assert_true(times.decode_ns > 0);
    assert_string_equal(feed_engine_last_error(f->e), "");
    /* Other work in between, then the same key again: the same bytes. */
    assert_int_equal(feed_engine_run(f->e, ojpg, olen, &t, 11, 4, 99, f->b, NULL), 0);
    size_t bad_len;
    uint8_t *bad = read_data("truncated.jpg", &bad_len);
    assert_int_not_equal(feed_engine_run(f->e, bad, bad_len, &t, 1, 1, 1, f->b, NULL), 0);
    assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 11, 4, 1234, f->b, NULL), 0);
    assert_memory_equal(f->a, f->b, n);
    /* Another thread with its own engine: the same bytes. */
    thread_job job = {jpg, len, malloc(n), -1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_main, &job), 0);
    pthread_join(th, NULL);
    assert_int_equal(job.status, 0);
    assert_memory_equal(f->a, job.out, n);
    /* A different key: different bytes. */
    assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 11, 4, 1235, f->b, NULL), 0);
    assert_true(memcmp(f->a, f->b, n) != 0);
    free(job.out);
    free(bad);
    free(jpg);
    free(ojpg);
}

/* ---- eval against resize-then-crop --------------------------------------------------- */

/* The whole image as RGB, decoded by libjpeg here; free() it. */
static uint8_t *decode_rgb(const uint8_t *jpg, size_t len, uint32_t *w, uint32_t *h)
{
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr em;
    d.err = jpeg_std_error(&em);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpg, (unsigned long)len);
    assert_int_equal(jpeg_read_header(&d, TRUE), JPEG_HEADER_OK);
    d.out_color_space = JCS_RGB;
    d.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&d);
    *w = d.output_width;
    *h = d.output_height;
    uint8_t *rgb = malloc((size_t)*w * *h * 3);
    while (d.output_scanline < *h) {
        JSAMPROW r = rgb + (size_t)d.output_scanline * *w * 3;
        jpeg_read_scanlines(&d, &r, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return rgb;
}

/*
 * torchvision's eval, Resize(resize_size) of the whole image and then
 * CenterCrop, in double precision: Pillow's filter over the full image
 * evaluated only where the crop lands.
 */
static void resize_then_crop(const uint8_t *rgb, uint32_t w, uint32_t h, const feed_transform *t,
                             uint8_t *out)
{
    double rw, rh;
    if (w <= h) {
        rw = t->resize_size;
        rh = floor((double)t->resize_size * h / w);
    } else {
        rh = t->resize_size;
        rw = floor((double)t->resize_size * w / h);
    }
    double left = rint((rw - t->out_w) / 2.0), top = rint((rh - t->out_h) / 2.0);
    double *rows = malloc(sizeof(double) * h * t->out_w * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < t->out_w; x++)
            for (int c = 0; c < 3; c++)
                rows[((size_t)y * t->out_w + x) * 3 + c] = ref_sample(
                    rgb + (size_t)y * w * 3 + c, 3, w, 0.0, w, (uint32_t)rw, (uint32_t)left + x);
    for (uint32_t y = 0; y < t->out_h; y++)
        for (uint32_t x = 0; x < t->out_w; x++)
            for (int c = 0; c < 3; c++) {
                /* ref_sample reads uint8; the vertical pass runs on the doubles here. */
                double scale = h / rh, fs = scale < 1 ? 1 : scale;
                double center = (top + y + 0.5) * scale;
                int ymin = (int)(center - fs + 0.5), ymax = (int)(center + fs + 0.5);
                ymin = ymin < 0 ? 0 : ymin;
                ymax = ymax > (int)h ? (int)h : ymax;
                double sum = 0, ww = 0;
                for (int k = ymin; k < ymax; k++) {
                    double wt = tri((k - center + 0.5) / fs);
                    sum += wt * rows[((size_t)k * t->out_w + x) * 3 + c];
                    ww += wt;
                }
                double v = rint(sum / ww);
                out[((size_t)y * t->out_w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    free(rows);
}

/*
 * Eval resizes from the exact fractional box torchvision's resize-then-crop
 * maps onto the output, with the pixels around it, on ordinary and on
 * extreme (1 pixel wide) images.
 */
static void test_eval_matches_resize_then_crop(void **state)
{
    fixture *f = *state;
    static const struct {
        uint32_t w, h;
    } sizes[] = {{300, 200}, {200, 300}, {500, 375}, {1, 4000}, {3000, 2}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        jpg_spec spec = {.w = sizes[i].w,
                         .h = sizes[i].h,
                         .kind = K_YCC,
                         .hs = 1,
                         .vs = 1,
                         .quality = 95,
                         .busy = true};
        size_t len;
        uint8_t *jpg = make_jpeg(&spec, &len);
        uint32_t w, h;
        uint8_t *rgb = decode_rgb(jpg, len, &w, &h);
        feed_transform t;
        feed_transform_default_eval(&t);
        size_t n = (size_t)t.out_h * t.out_w * 3;
        uint8_t *want = malloc(n);
        resize_then_crop(rgb, w, h, &t, want);
        assert_int_equal(feed_engine_run_reference(f->e, jpg, len, &t, 0, 0, 0, f->b),
                         FEED_SAMPLE_OK);
        assert_int_equal(feed_engine_run(f->e, jpg, len, &t, 0, 0, 0, f->a, NULL), FEED_SAMPLE_OK);
        double pr = psnr(f->b, want, n), pf = psnr(f->a, want, n);
        print_message("eval %ux%u: reference %.1f dB, fast %.1f dB\n", w, h, pr, pf);
        if (pr < 40.0 || pf < 40.0)
            fail_msg("eval %ux%u against resize-then-crop: reference %.1f dB, fast %.1f dB < 40", w,
                     h, pr, pf);
        free(want);
        free(rgb);
        free(jpg);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test_setup_teardown(test_sample_images, setup, teardown),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample() ? cmocka_run_group_tests(sample_tests, NULL, NULL)
                                       : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resize_kernels),
        cmocka_unit_test_setup_teardown(test_synthetic_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_colours, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flip_is_mirror, setup, teardown),
        cmocka_unit_test_setup_teardown(test_psnr_discriminates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_determinism, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_matches_resize_then_crop, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
