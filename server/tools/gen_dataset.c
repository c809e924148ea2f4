/*
 * feed-gen-dataset OUT_DIR [--classes N] [--per-class M] [--seed S]
 *
 * Writes the project's default dataset: synthetic JPEGs in ImageFolder layout
 * (OUT_DIR/class_NNN/img_NNNNN.jpg), made with libjpeg from nothing but the seed, so
 * the benchmark and the tests never need external files.
 *
 * What varies, so the server meets what real data throws at it: sides from 64
 * to 1200 pixels (log-uniform), aspect ratios from 1:4 to 4:1, quality 70..95,
 * chroma 4:2:0 / 4:2:2 / 4:4:4, grayscale, progressive scans, restart markers,
 * and the extensions .jpg/.jpeg/.JPEG.
 *
 * What makes a class learnable from an augmented 224x224 crop: each class has
 * its own pair of colours (hue from a golden-ratio sequence, and its
 * complement darker) mixed by a sinusoidal stripe pattern at its own
 * orientation; the stripe period is a fraction of the image's shorter side,
 * so even a small crop shows a stripe or two. Per image: random phase, period,
 * colour jitter, a brightness ramp and per-pixel noise, so no two images are
 * alike. Grayscale images keep only the orientation cue.
 *
 * Deterministic: sample g's every choice comes from feed_rng keyed by
 * (seed, 0, g), and libjpeg's output is a function of its input. Single
 * thread; a few hundred images take about a second.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "feed/rng.h"
#include "feed/opts.h"

#define MAX_CLASSES 1000u
#define MAX_PER_CLASS 100000u
#define MIN_SIDE 64.0
#define MAX_SIDE 1200.0
#define LUT_SIZE 1024

struct gen_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
};

static void on_jpeg_error(j_common_ptr cinfo)
{
    struct gen_err *e = (struct gen_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jmp, 1);
}

typedef struct class_look {
    float a[3], b[3]; /* the two colours, 0..255 */
    float cos_t, sin_t;
} class_look;

static void hsv_to_rgb(double h, double s, double v, float rgb[3])
{
    /* Each sixth of the hue circle takes r, g, b from (v, p, q, t) in its own order. */
    static const int pick[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                   {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    h = (h - floor(h)) * 6.0;
    int i = (int)h;
    double f = h - i;
    const double vpqt[4] = {v, v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))};
    for (int k = 0; k < 3; k++)
        rgb[k] = (float)(vpqt[pick[i % 6][k]] * 255.0);
}

static void make_look(uint32_t c, uint32_t classes, class_look *lk)
{
    const double golden = 0.6180339887498949;
    double hue = classes <= 12 ? (double)c / classes : fmod(c * golden, 1.0);
    hsv_to_rgb(hue, 0.85, 0.95, lk->a);
    hsv_to_rgb(hue + 0.5 + 0.15 * fmod(c * 0.37, 1.0), 0.6, 0.35, lk->b);
    /* Orientations spread over half a turn, out of step with the hues. */
    double theta = M_PI * fmod(c * 0.3819660112501051 + 0.05, 1.0);
    lk->cos_t = (float)cos(theta);
    lk->sin_t = (float)sin(theta);
}

/* The sample's geometry and encoding, drawn from its own RNG stream. */
typedef struct sample_plan {
    int w, h;
    int quality;
    int gray, progressive, restart_rows;
    int h_samp, v_samp; /* luma sampling factors: 2x2 = 4:2:0, 2x1 = 4:2:2, 1x1 = 4:4:4 */
    const char *ext;
} sample_plan;

static void plan_sample(feed_rng *r, uint32_t j, sample_plan *p)
{
    static const double aspects[] = {1.0,      4.0 / 3, 3.0 / 4, 3.0 / 2, 2.0 / 3,
                                     16.0 / 9, 2.0,     0.5,     4.0,     0.25};
    double lside = exp(log(MIN_SIDE) + feed_rng_uniform(r) * (log(MAX_SIDE) - log(MIN_SIDE)));
    double aspect = aspects[feed_rng_below(r, sizeof(aspects) / sizeof(aspects[0]))];
    double wd = aspect >= 1 ? lside : lside * aspect, hd = aspect >= 1 ? lside / aspect : lside;
    p->w = (int)(wd < 16 ? 16 : wd);
    p->h = (int)(hd < 16 ? 16 : hd);
    p->quality = 70 + (int)feed_rng_below(r, 26);
    p->gray = j % 10 == 6;
    p->progressive = j % 10 == 7 || j % 10 == 9;
    p->restart_rows = j % 10 == 8 ? 1 + (int)feed_rng_below(r, 4) : 0;
    p->h_samp = j % 10 == 5 || j % 10 == 9 ? 1 : 2;
    p->v_samp = j % 10 == 4 || p->h_samp == 1 ? 1 : 2;
    p->ext = j % 7 == 3 ? "JPEG" : j % 11 == 5 ? "jpeg" : "jpg";
}

/* Fills rows of RGB (or gray) pixels for one image. */
static void paint(feed_rng *r, const class_look *lk, const sample_plan *p, uint8_t *px,
                  const float *lut)
{
    int ch = p->gray ? 1 : 3;
    int short_side = p->w < p->h ? p->w : p->h;
    float period = (float)short_side / (3.0f + 5.0f * (float)feed_rng_uniform(r));
    if (period < 8.0f)
        period = 8.0f;
    float phase = (float)feed_rng_uniform(r);
    float jitter[3];
    for (int k = 0; k < 3; k++)
        jitter[k] = (float)(feed_rng_uniform(r) - 0.5) * 40.0f;
    float ramp = (float)(feed_rng_uniform(r) - 0.5) * 60.0f / (float)(p->w + p->h);
    float noise_amp = 10.0f + 20.0f * (float)feed_rng_uniform(r);
    uint32_t noise = feed_rng_u32(r) | 1u;
    float inv = (float)LUT_SIZE / period;
    for (int y = 0; y < p->h; y++) {
        uint8_t *row = px + (size_t)y * p->w * ch;
        for (int x = 0; x < p->w; x++) {
            float t = ((float)x * lk->cos_t + (float)y * lk->sin_t) * inv + phase * LUT_SIZE;
            int li = (int)t % LUT_SIZE;
            if (li < 0)
                li += LUT_SIZE;
            float m = lut[li];
            noise ^= noise << 13;
            noise ^= noise >> 17;
            noise ^= noise << 5;
            float n = ((float)(noise & 0xff) / 255.0f - 0.5f) * noise_amp + ramp * (float)(x + y);
            float rgb[3];
            for (int k = 0; k < 3; k++)
                rgb[k] = lk->a[k] * m + lk->b[k] * (1.0f - m) + jitter[k] + n;
            if (ch == 1)
                rgb[0] = 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2];
            for (int k = 0; k < ch; k++) {
                float v = rgb[k] < 0 ? 0 : rgb[k] > 255 ? 255 : rgb[k];
                row[x * ch + k] = (uint8_t)(v + 0.5f);
            }
        }
    }
}

static int write_jpeg(const char *path, const sample_plan *p, uint8_t *px)
{
    struct jpeg_compress_struct c;
    struct gen_err jerr;
    FILE *volatile f = NULL;
    volatile int rc = -1;
    c.err = jpeg_std_error(&jerr.mgr);
    jerr.mgr.error_exit = on_jpeg_error;
    jpeg_create_compress(&c);
    if (setjmp(jerr.jmp)) {
        fprintf(stderr, "feed-gen-dataset: %s: %s\n", path, jerr.msg);
        goto out;
    }
    f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "feed-gen-dataset: %s: %s\n", path, strerror(errno));
        goto out;
    }
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)p->w;
    c.image_height = (JDIMENSION)p->h;
    c.input_components = p->gray ? 1 : 3;
    c.in_color_space = p->gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, p->quality, TRUE);
    if (!p->gray) {
        c.comp_info[0].h_samp_factor = p->h_samp;
        c.comp_info[0].v_samp_factor = p->v_samp;
    }
    if (p->progressive)
        jpeg_simple_progression(&c);
    c.restart_in_rows = p->restart_rows;
    jpeg_start_compress(&c, TRUE);
    int stride = p->w * c.input_components;
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = px + (size_t)c.next_scanline * stride;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    rc = 0;
out:
    jpeg_destroy_compress(&c);
    if (f && fclose(f) != 0 && rc == 0) {
        fprintf(stderr, "feed-gen-dataset: %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: feed-gen-dataset OUT_DIR [--classes N (1..%u, default 10)] "
            "[--per-class M (1..%u, default 40)] [--seed S (default 1)]\n",
            MAX_CLASSES, MAX_PER_CLASS);
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    fprintf(stderr, "feed-gen-dataset: mkdir %s: %s\n", path, strerror(errno));
    return -1;
}

/* The command line; 0, or after printing the usage 1 (--help) or -1 (wrong). */
static int parse_args(int argc, char **argv, const char **out_dir, uint32_t *classes,
                      uint32_t *per_class, uint32_t *seed)
{
    const feed_opt opts[] = {
        {.name = "classes", .u32 = classes, .lo = 1, .hi = MAX_CLASSES},
        {.name = "per-class", .u32 = per_class, .lo = 1, .hi = MAX_PER_CLASS},
        {.name = "seed", .u32 = seed, .lo = 0, .hi = UINT32_MAX},
        {.name = NULL},
    };
    int first;
    int pr = feed_opts_parse("feed-gen-dataset", opts, argc, argv, &first);
    *out_dir = pr == 0 && first + 1 == argc ? argv[first] : NULL;
    if (pr == 0 && (!*out_dir || strlen(*out_dir) > 3000))
        pr = -1;
    if (pr)
        usage();
    return pr;
}

int main(int argc, char **argv)
{
    int rc = 1;
    const char *out_dir = NULL;
    uint32_t classes = 10, per_class = 40, seed = 1;
    uint8_t *px = NULL;
    float lut[LUT_SIZE];
    char path[4096];

    int pr = parse_args(argc, argv, &out_dir, &classes, &per_class, &seed);
    if (pr) {
        rc = pr > 0 ? 0 : 1;
        goto out;
    }
    px = malloc((size_t)MAX_SIDE * (size_t)MAX_SIDE * 3);
    if (!px) {
        fprintf(stderr, "feed-gen-dataset: out of memory\n");
        goto out;
    }
    for (int i = 0; i < LUT_SIZE; i++)
        lut[i] = (float)(0.5 + 0.5 * sin(2.0 * M_PI * i / LUT_SIZE));
    if (make_dir(out_dir))
        goto out;
    uint64_t bytes = 0;
    for (uint32_t c = 0; c < classes; c++) {
        class_look lk;
        make_look(c, classes, &lk);
        snprintf(path, sizeof(path), "%s/class_%03u", out_dir, c);
        if (make_dir(path))
            goto out;
        for (uint32_t j = 0; j < per_class; j++) {
            uint64_t g = (uint64_t)c * per_class + j;
            feed_rng r;
            feed_rng_init(&r, seed, 0, g);
            sample_plan p;
            plan_sample(&r, j, &p);
            paint(&r, &lk, &p, px, lut);
            snprintf(path, sizeof(path), "%s/class_%03u/img_%05u.%s", out_dir, c, j, p.ext);
            if (write_jpeg(path, &p, px))
                goto out;
            struct stat st;
            if (stat(path, &st) == 0)
                bytes += (uint64_t)st.st_size;
        }
    }
    printf("feed-gen-dataset: %u classes x %u images, %llu bytes in %s (seed %u)\n", classes,
           per_class, (unsigned long long)bytes, out_dir, seed);
    rc = 0;
out:
    free(px);
    return rc;
}
