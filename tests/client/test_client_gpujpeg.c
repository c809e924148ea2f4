/*
 * GPU JPEG decode (client/src/gpudec/gpujpeg.h, ctest label gpu) against the
 * server's engine on the CPU, on real JPEGs: the ImageNet sample's when
 * $FEED_SAMPLE_DIR holds it (up to 96 images), else JPEGs written here with
 * libjpeg (sizes 120 .. 2400 a side, so strong downscales are covered).
 *  - PSNR of the uint8 output against feed_engine_run's for the same
 *    (seed, epoch, index, transform), train and eval: mean >= 30 dB and every
 *    image >= 25 dB (docs/design/client.md, "GPU JPEG decode"); the fp32 NCHW,
 *    fp16 and bf16 NHWC outputs of the same batch are exactly the uint8 one
 *    normalised as deliver/normalize.c does;
 *  - a progressive JPEG is reported unsupported and left as zero pixels;
 *  - not-a-JPEG, a header with garbage after it and a zeroed frame size fail
 *    with zero pixels, and do not spoil the good images of their batch.
 * Skips, saying why, when built without CUDA, without a device, or when the
 * device's hardware decoder cannot be opened (unless FEED_GPUJPEG_REQUIRED=1,
 * as the GPU machine's suite sets: then that fails).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feedtest.h"
#include "feedtest_skip.h"
#include "gpujpeg.h"

#ifdef FEED_HAVE_CUDA
#include <dirent.h>
#include <math.h>
#include <sys/stat.h>

#include <cuda_runtime_api.h>
#include <jpeglib.h>

#include "engine.h"
#include "normalize.h"

#define MAX_IMAGES 96u
#define BATCH 32u

typedef struct image {
    uint8_t *bytes;
    size_t len;
} image;

static client_gpujpeg *g_h;
static image g_img[MAX_IMAGES];
static unsigned g_nimg;
static char g_tmp[512];
static const float g_mean[3] = {0.485f, 0.456f, 0.406f}, g_std[3] = {0.229f, 0.224f, 0.225f};

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static int read_file(const char *path, image *im)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    im->bytes = n > 0 && n < (64l << 20) ? malloc((size_t)n) : NULL;
    im->len = im->bytes ? fread(im->bytes, 1, (size_t)n, f) : 0;
    fclose(f);
    return im->len == (size_t)n && n > 0 ? 0 : -1;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The first image of each class folder of the ImageNet sample, in name order. */
static void load_sample(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *names[1100];
    unsigned nn = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nn < 1100)
        if (e->d_name[0] != '.')
            names[nn++] = strdup(e->d_name);
    closedir(d);
    qsort(names, nn, sizeof names[0], by_name);
    for (unsigned i = 0; i < nn && g_nimg < MAX_IMAGES; i++) {
        char cdir[1024];
        snprintf(cdir, sizeof cdir, "%s/%s", dir, names[i]);
        DIR *c = opendir(cdir);
        if (!c)
            continue;
        char first[256] = "";
        while ((e = readdir(c)))
            if (e->d_name[0] != '.' && (!first[0] || strcmp(e->d_name, first) < 0))
                snprintf(first, sizeof first, "%s", e->d_name);
        closedir(c);
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", cdir, first);
        if (first[0] && read_file(path, &g_img[g_nimg]) == 0)
            g_nimg++;
    }
    for (unsigned i = 0; i < nn; i++)
        free(names[i]);
}

static void make_images(void)
{
    static const unsigned sides[][2] = {{120, 96},   {500, 375},  {375, 500},   {640, 480},
                                        {1024, 768}, {333, 1000}, {1600, 1200}, {2400, 1800}};
    assert_int_equal(feed_test_tmpdir("gpujpeg", g_tmp, sizeof g_tmp), 0);
    for (unsigned i = 0; i < 24; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%u.jpg", g_tmp, i);
        const unsigned *s = sides[i % 8];
        assert_int_equal(feed_test_write_jpeg(path, s[0], s[1], i + 1, 75 + (int)(i % 4) * 5), 0);
        assert_int_equal(read_file(path, &g_img[g_nimg]), 0);
        g_nimg++;
    }
}

static int group_setup(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    struct stat st;
    if (dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        load_sample(dir);
    if (g_nimg == 0)
        make_images();
    printf("# %u images from %s\n", g_nimg, g_tmp[0] ? "libjpeg here" : dir);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (unsigned i = 0; i < g_nimg; i++)
        free(g_img[i].bytes);
    if (g_tmp[0])
        feed_test_rmtree(g_tmp);
    return 0;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0.0)
        return 99.0;
    return 10.0 * log10(255.0 * 255.0 * (double)n / se);
}

/* Decode n images with the module into a fresh device buffer, image i to place pos[i] (NULL:
 * i); the bytes come back in *host. */
static void gpu_run_at(const uint8_t *const *jpeg, const size_t *len, const feed_sample_plan *plan,
                       const uint32_t *pos, uint32_t n, const feed_transform *t, feed_dtype dt,
                       feed_layout lay, feed_sample_status *status, void **host, size_t *bytes)
{
    *bytes = (size_t)n * 3 * t->out_h * t->out_w * client_dtype_size(dt);
    void *d = NULL;
    CK(cudaMalloc(&d, *bytes));
    CK(cudaMemset(d, 0x5a, *bytes)); /* every element must be written */
    client_gpujpeg_batch b = {.n = n,
                              .jpeg = jpeg,
                              .len = len,
                              .plan = plan,
                              .pos = pos,
                              .t = t,
                              .mean = g_mean,
                              .std = g_std,
                              .dtype = dt,
                              .layout = lay,
                              .dst = d};
    assert_int_equal(client_gpujpeg_decode_batch(g_h, &b, status), 0);
    *host = malloc(*bytes);
    CK(cudaMemcpy(*host, d, *bytes, cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
}

static void gpu_run(const uint8_t *const *jpeg, const size_t *len, const feed_sample_plan *plan,
                    uint32_t n, const feed_transform *t, feed_dtype dt, feed_layout lay,
                    feed_sample_status *status, void **host, size_t *bytes)
{
    gpu_run_at(jpeg, len, plan, NULL, n, t, dt, lay, status, host, bytes);
}

/* The other dtypes and layouts of the same batch against the uint8 NHWC output. */
static void check_dtypes(const uint8_t *const *jpeg, const size_t *len,
                         const feed_sample_plan *plan, uint32_t n, const feed_transform *t,
                         const uint8_t *u8)
{
    feed_sample_status st[BATCH];
    size_t plane = (size_t)t->out_h * t->out_w, bytes;
    void *out;
    /* Each image at the place the decode lane names (here: the batch reversed). */
    uint32_t pos[BATCH];
    for (uint32_t s = 0; s < n; s++)
        pos[s] = n - 1 - s;
    gpu_run_at(jpeg, len, plan, pos, n, t, FEED_DTYPE_UINT8, FEED_LAYOUT_NHWC, st, &out, &bytes);
    for (uint32_t s = 0; s < n; s++)
        assert_memory_equal((uint8_t *)out + (size_t)pos[s] * plane * 3, u8 + s * plane * 3,
                            plane * 3);
    free(out);
    gpu_run(jpeg, len, plan, n, t, FEED_DTYPE_FP32, FEED_LAYOUT_NCHW, st, &out, &bytes);
    for (uint32_t s = 0; s < n; s++)
        for (size_t p = 0; p < plane; p++)
            for (int c = 0; c < 3; c++) {
                float want =
                    client_normalize_value(u8[(s * plane + p) * 3 + c], g_mean[c], g_std[c]);
                float got = ((float *)out)[(s * 3 + (size_t)c) * plane + p];
                assert_memory_equal(&got, &want, sizeof got);
            }
    free(out);
    for (int dt = FEED_DTYPE_FP16; dt <= FEED_DTYPE_BF16; dt++) {
        gpu_run(jpeg, len, plan, n, t, (feed_dtype)dt, FEED_LAYOUT_NHWC, st, &out, &bytes);
        for (size_t i = 0; i < (size_t)n * plane * 3; i++) {
            float v = client_normalize_value(u8[i], g_mean[i % 3], g_std[i % 3]);
            uint16_t want = dt == FEED_DTYPE_FP16 ? client_f32_to_f16(v) : client_f32_to_bf16(v);
            assert_int_equal(((uint16_t *)out)[i], want);
        }
        free(out);
    }
}

/* PSNR against the server's engine, batch by batch; returns the number of images compared. */
static unsigned compare(const feed_transform *t, const char *mode, double *mean_out,
                        double *min_out)
{
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    size_t sample = (size_t)3 * t->out_h * t->out_w;
    uint8_t *ref = malloc(sample * BATCH);
    double sum = 0.0, worst = 1e9;
    unsigned compared = 0, unsupported = 0;
    for (unsigned first = 0; first < g_nimg; first += BATCH) {
        const uint8_t *jpeg[BATCH];
        size_t len[BATCH];
        feed_sample_plan plan[BATCH];
        uint64_t idx[BATCH];
        uint32_t n = 0;
        for (unsigned i = first; i < g_nimg && i < first + BATCH; i++) {
            uint32_t w, h;
            if (!client_gpujpeg_supported(g_h, g_img[i].bytes, g_img[i].len, &w, &h)) {
                unsupported++;
                continue;
            }
            idx[n] = 1000 + i;
            feed_plan_sample(t, w, h, 42, 3, idx[n], &plan[n]);
            feed_sample_status st = feed_engine_run(e, g_img[i].bytes, g_img[i].len, t, 42, 3,
                                                    idx[n], ref + n * sample, NULL);
            if (st != FEED_SAMPLE_OK)
                continue;
            jpeg[n] = g_img[i].bytes;
            len[n] = g_img[i].len;
            n++;
        }
        if (n == 0)
            continue;
        feed_sample_status status[BATCH];
        void *out;
        size_t bytes;
        gpu_run(jpeg, len, plan, n, t, FEED_DTYPE_UINT8, FEED_LAYOUT_NHWC, status, &out, &bytes);
        for (uint32_t s = 0; s < n; s++) {
            assert_int_equal(status[s], FEED_SAMPLE_OK);
            double p = psnr((uint8_t *)out + s * sample, ref + s * sample, sample);
            if (p < 25.0)
                printf("# %s: image %u (index %llu, crop %ux%u) at %.2f dB\n", mode,
                       (unsigned)(idx[s] - 1000), (unsigned long long)idx[s], plan[s].crop.w,
                       plan[s].crop.h, p);
            sum += p;
            worst = p < worst ? p : worst;
            compared++;
        }
        if (first == 0)
            check_dtypes(jpeg, len, plan, n, t, out);
        free(out);
    }
    free(ref);
    feed_engine_free(e);
    *mean_out = compared ? sum / compared : 0.0;
    *min_out = worst;
    printf("# %s: %u images, PSNR mean %.2f dB, worst %.2f dB, %u unsupported\n", mode, compared,
           *mean_out, worst, unsupported);
    return compared;
}

static void test_psnr_train(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    double mean, worst;
    assert_true(compare(&t, "train", &mean, &worst) >= g_nimg * 9 / 10);
    assert_true(mean >= 30.0);
    assert_true(worst >= 25.0);
}

static void test_psnr_eval(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_eval(&t);
    double mean, worst;
    assert_true(compare(&t, "eval", &mean, &worst) >= g_nimg * 9 / 10);
    assert_true(mean >= 30.0);
    assert_true(worst >= 25.0);
}

/* A progressive encoding of a w x h gradient, in memory (free it). */
static uint8_t *progressive_jpeg(unsigned w, unsigned h, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *mem = NULL;
    unsigned long size = 0;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &mem, &size);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    while (c.next_scanline < h) {
        for (unsigned x = 0; x < w; x++) {
            row[3 * x] = (uint8_t)x;
            row[3 * x + 1] = (uint8_t)c.next_scanline;
            row[3 * x + 2] = (uint8_t)(x + c.next_scanline);
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&c, &rp, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    *len = size;
    return mem;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* Bad images beside a good one: each fails with zero pixels, the good one stays right. */
static void test_bad_images(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    uint32_t w, h;
    unsigned gi = 0;
    while (gi + 1 < g_nimg &&
           !client_gpujpeg_supported(g_h, g_img[gi].bytes, g_img[gi].len, &w, &h))
        gi++;
    const image *good = &g_img[gi];
    size_t plen;
    uint8_t *prog = progressive_jpeg(320, 240, &plen);
    assert_false(client_gpujpeg_supported(g_h, prog, plen, &w, &h));
    static const uint8_t not_jpeg[] = "GIF89a this is not a JPEG at all";
    uint8_t garbage[512];
    garbage[0] = 0xFF;
    garbage[1] = 0xD8;
    for (size_t i = 2; i < sizeof garbage; i++)
        garbage[i] = (uint8_t)(i * 37 + 11);
    /* The good image with its frame's height and width zeroed: walk the marker segments
     * (an EXIF thumbnail inside APP1 has a frame header of its own) to SOF0..SOF2. */
    uint8_t *nosize = malloc(good->len);
    memcpy(nosize, good->bytes, good->len);
    bool found = false;
    for (size_t i = 2; i + 9 < good->len && nosize[i] == 0xFF && !found;) {
        if (nosize[i + 1] >= 0xC0 && nosize[i + 1] <= 0xC2) {
            memset(nosize + i + 5, 0, 4);
            found = true;
        }
        i += 2 + ((size_t)nosize[i + 2] << 8 | nosize[i + 3]);
    }
    assert_true(found);
    const uint8_t *jpeg[5] = {good->bytes, prog, not_jpeg, garbage, nosize};
    size_t len[5] = {good->len, plen, sizeof not_jpeg, sizeof garbage, good->len};
    feed_sample_plan plan[5];
    assert_true(client_gpujpeg_supported(g_h, good->bytes, good->len, &w, &h));
    for (int i = 0; i < 5; i++)
        feed_plan_sample(&t, i == 0 ? w : 320, i == 0 ? h : 240, 7, 0, (uint64_t)i, &plan[i]);
    feed_sample_status st[5];
    void *out;
    size_t bytes, sample = (size_t)3 * t.out_h * t.out_w;
    gpu_run(jpeg, len, plan, 5, &t, FEED_DTYPE_UINT8, FEED_LAYOUT_NHWC, st, &out, &bytes);
    assert_int_equal(st[0], FEED_SAMPLE_OK);
    assert_int_equal(st[1], FEED_SAMPLE_UNSUPPORTED);
    assert_int_equal(st[2], FEED_SAMPLE_NOT_JPEG);
    assert_int_not_equal(st[3], FEED_SAMPLE_OK);
    assert_int_not_equal(st[4], FEED_SAMPLE_OK);
    for (int i = 1; i < 5; i++)
        assert_true(all_zero((uint8_t *)out + i * sample, sample));
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    uint8_t *ref = malloc(sample);
    assert_int_equal(feed_engine_run(e, good->bytes, good->len, &t, 7, 0, 0, ref, NULL),
                     FEED_SAMPLE_OK);
    double p = psnr(out, ref, sample);
    printf("# bad images: statuses %s %s %s %s %s, good neighbour %.2f dB\n",
           feed_sample_status_name(st[0]), feed_sample_status_name(st[1]),
           feed_sample_status_name(st[2]), feed_sample_status_name(st[3]),
           feed_sample_status_name(st[4]), p);
    assert_true(p >= 25.0);
    /* A truncated copy beside the good one: whatever the engine makes of it, no crash, and the
     * good image is unchanged. */
    const uint8_t *jt[2] = {good->bytes, good->bytes};
    size_t lt[2] = {good->len, good->len / 2};
    void *out2;
    gpu_run(jt, lt, plan, 2, &t, FEED_DTYPE_UINT8, FEED_LAYOUT_NHWC, st, &out2, &bytes);
    assert_int_equal(st[0], FEED_SAMPLE_OK);
    assert_memory_equal(out2, out, sample);
    free(out2);
    free(ref);
    feed_engine_free(e);
    free(out);
    free(nosize);
    free(prog);
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return FEED_TEST_SKIP;
    }
    char why[256];
    if (client_gpujpeg_open(0, &g_h, why, sizeof why) != 0) {
        const char *req = getenv("FEED_GPUJPEG_REQUIRED");
        printf("%s: GPU JPEG decode off: %s\n", req && *req == '1' ? "FAIL" : "SKIP", why);
        return req && *req == '1' ? 1 : FEED_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_psnr_train),
        cmocka_unit_test(test_psnr_eval),
        cmocka_unit_test(test_bad_images),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    client_gpujpeg_close(g_h);
    return rc;
}
#else
int main(void)
{
    char why[256];
    client_gpujpeg *h = NULL;
    if (client_gpujpeg_open(0, &h, why, sizeof why) == 0)
        return 1;
    printf("SKIP: GPU JPEG decode off: %s\n", why);
    return FEED_TEST_SKIP;
}
#endif
