/*
 * The augmentation op table (see augment.h): one small function per op over
 * a uint8 HWC RGB image, each as torchvision's tensor op on a uint8 image
 * (transforms/functional_tensor.py, reached through autoaugment._apply_op).
 * Runs on the engine's worker thread; no allocation (scratch is the caller's).
 *
 * Arithmetic follows torchvision's dtypes so the bytes agree: colour blends
 * in float32 then truncate toward zero (Tensor.to(uint8)); the sharpness
 * blur rounds (its k/13 sums never tie, so the integer division here is
 * exact); posterize, solarize, invert and equalize are integer and exact.
 * Geometric ops compute the inverse affine matrix as
 * functional._get_inverse_affine_matrix does, map each output pixel's centre
 * through it in float32 as _gen_affine_grid and grid_sample(align_corners=
 * False) do, and take the nearest pixel (round half to even) or the bilinear
 * blend of four, zero outside.
 * To add an op: a function below, an entry in OPS, its magnitudes in augment.c.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "augment.h"

typedef void (*op_fn)(feed_aug_image *img, double magnitude);

static size_t npx(const feed_aug_image *img)
{
    return (size_t)img->h * img->w;
}

/* Tensor.to(uint8) of a float32 clamped to [0, 255]: truncation (NaN, from a
 * magnitude no policy draws, gives 0 rather than undefined behaviour). */
static uint8_t to_u8(float v)
{
    if (!(v > 0.0f))
        return 0;
    return v >= 255.0f ? 255 : (uint8_t)v;
}

/* _blend(img1, img2, ratio) for one value: ratio * a + (1 - ratio) * b in float32. */
static uint8_t blend1(float ratio, float one_minus, float a, float b)
{
    return to_u8(ratio * a + one_minus * b);
}

/* rgb_to_grayscale on uint8: (0.2989 r + 0.587 g + 0.114 b) in float32, truncated. */
static uint8_t gray(const uint8_t *p)
{
    float l = 0.2989f * (float)p[0] + 0.587f * (float)p[1];
    l = l + 0.114f * (float)p[2];
    return (uint8_t)l;
}

/* ---- geometry ---- */

/* _get_inverse_affine_matrix(center, angle, translate, scale=1, shear) (degrees). */
static void inverse_affine(double cx, double cy, double angle, double tx, double ty, double shx,
                           double shy, double m[6])
{
    const double rad = M_PI / 180.0;
    double rot = angle * rad, sx = shx * rad, sy = shy * rad;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d;
    m[1] = -b;
    m[2] = 0.0;
    m[3] = -c;
    m[4] = a;
    m[5] = 0.0;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/*
 * Round half to even (nearbyintf in the default rounding mode) for |v| < 2^22,
 * without the libm call baseline x86-64 makes for nearbyintf: adding 1.5 * 2^23
 * leaves no fraction bits, so the addition itself rounds.
 */
static float round_even(float v)
{
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

/* floorf for |v| < 2^31. */
static float floor_small(float v)
{
    float t = (float)(int32_t)v;
    return t > v ? t - 1.0f : t;
}

/*
 * grid_sample(mode="bilinear", padding_mode="zeros", align_corners=False) at
 * (sx, sy), as its CPU kernel sums the four taps in float32 (a tap outside
 * the image is 0), then rounded half to even (_cast_squeeze_out) into dst.
 */
static void bilinear_pixel(const feed_aug_image *img, float sx, float sy, uint8_t *dst)
{
    memset(dst, 0, 3);
    if (!(sx > -2.0f && sx < (float)img->w + 1.0f && sy > -2.0f && sy < (float)img->h + 1.0f))
        return;
    float x0 = floor_small(sx), y0 = floor_small(sy);
    float we = sx - x0, ww = 1.0f - we, ns = sy - y0, nn = 1.0f - ns;
    const float wt[4] = {nn * ww, nn * we, ns * ww, ns * we}; /* nw, ne, sw, se */
    int64_t xi = (int64_t)x0, yi = (int64_t)y0;
    if (xi >= 0 && xi + 1 < img->w && yi >= 0 && yi + 1 < img->h) {
        /* All four taps inside: the same sums without the zero taps' tests. */
        const uint8_t *n = img->tmp + ((size_t)yi * img->w + (size_t)xi) * 3;
        const uint8_t *so = n + (size_t)img->w * 3;
        for (int c = 0; c < 3; c++) {
            float v = (float)n[c] * wt[0];
            v = v + (float)n[c + 3] * wt[1];
            v = v + (float)so[c] * wt[2];
            v = v + (float)so[c + 3] * wt[3];
            v = round_even(v);
            dst[c] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
        }
        return;
    }
    const uint8_t *tap[4];
    for (int k = 0; k < 4; k++) {
        int64_t x = xi + (k & 1), y = yi + (k >> 1);
        tap[k] = x >= 0 && x < img->w && y >= 0 && y < img->h
                     ? img->tmp + ((size_t)y * img->w + (size_t)x) * 3
                     : NULL;
    }
    for (int c = 0; c < 3; c++) {
        float v = (tap[0] ? (float)tap[0][c] : 0.0f) * wt[0];
        v = v + (tap[1] ? (float)tap[1][c] : 0.0f) * wt[1];
        v = v + (tap[2] ? (float)tap[2][c] : 0.0f) * wt[2];
        v = v + (tap[3] ? (float)tap[3][c] : 0.0f) * wt[3];
        v = round_even(v); /* v is within [0, 255] */
        dst[c] = v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
    }
}

/* F_t.affine with zero fill (nearest, or bilinear when img->bilinear), through img->tmp. */
static void warp(feed_aug_image *img, const double md[6])
{
    uint32_t w = img->w, h = img->h;
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    /* theta / [0.5 w, 0.5 h], in float32 as torch holds it. */
    float r0 = (float)md[0] / hw, r1 = (float)md[1] / hw, r2 = (float)md[2] / hw;
    float r3 = (float)md[3] / hh, r4 = (float)md[4] / hh, r5 = (float)md[5] / hh;
    memcpy(img->tmp, img->px, npx(img) * 3);
    for (uint32_t y = 0; y < h; y++) {
        float py = -hh + 0.5f + (float)y;
        uint8_t *dst = img->px + (size_t)y * w * 3;
        for (uint32_t x = 0; x < w; x++) {
            float px = -hw + 0.5f + (float)x;
            float gx = px * r0 + py * r1 + r2;
            float gy = px * r3 + py * r4 + r5;
            float sx = ((gx + 1.0f) * (float)w - 1.0f) / 2.0f;
            float sy = ((gy + 1.0f) * (float)h - 1.0f) / 2.0f;
            if (img->bilinear) {
                bilinear_pixel(img, sx, sy, dst + (size_t)x * 3);
                continue;
            }
            /* Beyond +-2^21 no rounding lands inside the image (sides <= 4096). */
            bool near = fabsf(sx) < 2097152.0f && fabsf(sy) < 2097152.0f;
            float ix = near ? round_even(sx) : -1.0f, iy = near ? round_even(sy) : -1.0f;
            if (ix >= 0.0f && ix < (float)w && iy >= 0.0f && iy < (float)h)
                memcpy(dst + (size_t)x * 3, img->tmp + ((size_t)iy * w + (size_t)ix) * 3, 3);
            else
                memset(dst + (size_t)x * 3, 0, 3);
        }
    }
}

/* ShearX/Y: affine with shear = degrees(atan(magnitude)) about the top-left corner. */
static void op_shear_x(feed_aug_image *img, double mag)
{
    double m[6];
    inverse_affine(-0.5 * img->w, -0.5 * img->h, 0.0, 0.0, 0.0, atan(mag) * 180.0 / M_PI, 0.0, m);
    warp(img, m);
}

static void op_shear_y(feed_aug_image *img, double mag)
{
    double m[6];
    inverse_affine(-0.5 * img->w, -0.5 * img->h, 0.0, 0.0, 0.0, 0.0, atan(mag) * 180.0 / M_PI, m);
    warp(img, m);
}

/*
 * TranslateX/Y: translate by int(magnitude) pixels (toward zero). A whole-
 * pixel shift samples within float32 error of pixel centres, so bilinear
 * rounds to the nearest pixel's value: the nearest path gives its bytes.
 */
static void translate(feed_aug_image *img, double tx, double ty)
{
    double m[6];
    bool bilinear = img->bilinear;
    inverse_affine(0.0, 0.0, 0.0, tx, ty, 0.0, 0.0, m);
    img->bilinear = false;
    warp(img, m);
    img->bilinear = bilinear;
}

static void op_translate_x(feed_aug_image *img, double mag)
{
    translate(img, trunc(mag), 0.0);
}

static void op_translate_y(feed_aug_image *img, double mag)
{
    translate(img, 0.0, trunc(mag));
}

/* F.rotate(angle) about the centre: the inverse matrix of -angle. */
static void op_rotate(feed_aug_image *img, double mag)
{
    double m[6];
    inverse_affine(0.0, 0.0, -mag, 0.0, 0.0, 0.0, 0.0, m);
    warp(img, m);
}

/* ---- colour ---- */

static void op_identity(feed_aug_image *img, double mag)
{
    (void)img;
    (void)mag;
}

/* adjust_brightness(f): blend with black. */
static void adjust_brightness(feed_aug_image *img, double f)
{
    float r = (float)f, om = (float)(1.0 - f);
    size_t n = npx(img) * 3;
    for (size_t i = 0; i < n; i++)
        img->px[i] = blend1(r, om, (float)img->px[i], 0.0f);
}

/* adjust_saturation(f): blend with the pixel's grey. */
static void adjust_saturation(feed_aug_image *img, double f)
{
    float r = (float)f, om = (float)(1.0 - f);
    size_t n = npx(img);
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = img->px + i * 3;
        float g = (float)gray(p);
        for (int c = 0; c < 3; c++)
            p[c] = blend1(r, om, (float)p[c], g);
    }
}

/* adjust_contrast(f): blend with the mean grey (float32; the sum is exact). */
static void adjust_contrast(feed_aug_image *img, double f)
{
    float r = (float)f, om = (float)(1.0 - f);
    size_t n = npx(img);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += gray(img->px + i * 3);
    float mean = (float)sum / (float)n;
    for (size_t i = 0; i < n * 3; i++)
        img->px[i] = blend1(r, om, (float)img->px[i], mean);
}

/*
 * adjust_hue(f): through HSV in float32 as _rgb2hsv and _hsv2rgb compute it
 * (Pillow's formulas), hue shifted by f modulo 1, back to uint8 by truncation.
 */
static void hue_pixel(uint8_t *px, float f)
{
    float r = (float)px[0] / 255.0f, g = (float)px[1] / 255.0f, b = (float)px[2] / 255.0f;
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    bool eqc = maxc == minc;
    float cr = maxc - minc, div = eqc ? 1.0f : cr;
    float s = cr / (eqc ? 1.0f : maxc);
    float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    float hr = maxc == r ? bc - gc : 0.0f;
    float hg = maxc == g && maxc != r ? 2.0f + rc - bc : 0.0f;
    float hb = maxc != g && maxc != r ? 4.0f + gc - rc : 0.0f;
    float h = fmodf((hr + hg + hb) / 6.0f + 1.0f, 1.0f);
    /* (h + f) % 1.0 as torch.remainder: fmod, then the divisor's sign. */
    h = fmodf(h + f, 1.0f);
    if (h < 0.0f)
        h += 1.0f;
    float i = floorf(h * 6.0f), fr = h * 6.0f - i;
    float v = maxc;
    float p = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
    float q = fminf(fmaxf(v * (1.0f - s * fr), 0.0f), 1.0f);
    float t = fminf(fmaxf(v * (1.0f - s * (1.0f - fr)), 0.0f), 1.0f);
    int sector = ((int)i % 6 + 6) % 6;
    static const int pick[6][3] = {{0, 3, 1}, {2, 0, 1}, {1, 0, 3},
                                   {1, 2, 0}, {3, 1, 0}, {0, 1, 2}};
    const float val[4] = {v, p, q, t}; /* pick's indices: v, p, q, t */
    for (int c = 0; c < 3; c++)
        px[c] = to_u8(val[pick[sector][c]] * 255.0f);
}

static void adjust_hue(feed_aug_image *img, double f)
{
    size_t n = npx(img);
    for (size_t i = 0; i < n; i++)
        hue_pixel(img->px + i * 3, (float)f);
}

static void op_brightness(feed_aug_image *img, double mag)
{
    adjust_brightness(img, 1.0 + mag);
}

static void op_color(feed_aug_image *img, double mag)
{
    adjust_saturation(img, 1.0 + mag);
}

static void op_contrast(feed_aug_image *img, double mag)
{
    adjust_contrast(img, 1.0 + mag);
}

/* adjust_sharpness(1 + magnitude): blend with the [1 1 1; 1 5 1; 1 1 1]/13 blur of the interior. */
static void op_sharpness(feed_aug_image *img, double mag)
{
    uint32_t w = img->w, h = img->h;
    if (w <= 2 || h <= 2)
        return;
    double f = 1.0 + mag;
    float r = (float)f, om = (float)(1.0 - f);
    size_t stride = (size_t)w * 3;
    memcpy(img->tmp, img->px, npx(img) * 3);
    /* The border keeps its pixels as the blurred image, but is blended too:
     * r * v + (1 - r) * v in float32 is not always v. */
    for (uint32_t y = 0; y < h; y++) {
        const uint8_t *mid = img->tmp + (size_t)y * stride;
        bool inner_row = y > 0 && y + 1 < h;
        uint8_t *dst = img->px + (size_t)y * stride;
        for (size_t i = 0; i < stride; i++) {
            unsigned blur = mid[i];
            if (inner_row && i >= 3 && i + 3 < stride) {
                const uint8_t *up = mid - stride, *dn = mid + stride;
                unsigned s = up[i - 3] + up[i] + up[i + 3] + mid[i - 3] + 5u * mid[i] + mid[i + 3] +
                             dn[i - 3] + dn[i] + dn[i + 3];
                blur = (2 * s + 13) / 26; /* round(s / 13); s / 13 never ends in .5 */
            }
            dst[i] = blend1(r, om, (float)mid[i], (float)blur);
        }
    }
}

/* posterize(int(magnitude)): keep the top bits. */
static void op_posterize(feed_aug_image *img, double mag)
{
    int bits = mag >= 8.0 ? 8 : mag >= 0.0 ? (int)mag : 0;
    uint8_t mask = (uint8_t)(0xFF00u >> bits);
    size_t n = npx(img) * 3;
    for (size_t i = 0; i < n; i++)
        img->px[i] &= mask;
}

/* solarize(threshold): invert values >= threshold. */
static void op_solarize(feed_aug_image *img, double mag)
{
    size_t n = npx(img) * 3;
    for (size_t i = 0; i < n; i++)
        if ((double)img->px[i] >= mag)
            img->px[i] = (uint8_t)(255 - img->px[i]);
}

/* autocontrast: each channel stretched to [0, 255] in float32, truncated. */
static void op_autocontrast(feed_aug_image *img, double mag)
{
    (void)mag;
    size_t n = npx(img);
    for (int c = 0; c < 3; c++) {
        uint8_t lo = 255, hi = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t v = img->px[i * 3 + (size_t)c];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        if (hi == lo)
            continue; /* torchvision: minimum 0, scale 1, the channel unchanged */
        float mn = (float)lo, scale = 255.0f / ((float)hi - mn);
        for (size_t i = 0; i < n; i++) {
            uint8_t *v = &img->px[i * 3 + (size_t)c];
            *v = to_u8(((float)*v - mn) * scale);
        }
    }
}

/* equalize: torchvision's _scale_channel per channel (integer). */
static void op_equalize(feed_aug_image *img, double mag)
{
    (void)mag;
    size_t n = npx(img);
    for (int c = 0; c < 3; c++) {
        uint64_t hist[256] = {0};
        for (size_t i = 0; i < n; i++)
            hist[img->px[i * 3 + (size_t)c]]++;
        int last = 255;
        while (last > 0 && hist[last] == 0)
            last--;
        /* Every nonzero bin but the last one: all pixels but the brightest value's. */
        uint64_t step = (n - hist[last]) / 255;
        if (step == 0)
            continue;
        uint8_t lut[256];
        uint64_t cum = 0;
        for (int v = 0; v < 256; v++) {
            uint64_t l = (cum + step / 2) / step; /* lut shifted right by one: cumsum before v */
            lut[v] = (uint8_t)(l > 255 ? 255 : l);
            cum += hist[v];
        }
        for (size_t i = 0; i < n; i++) {
            uint8_t *v = &img->px[i * 3 + (size_t)c];
            *v = lut[*v];
        }
    }
}

static void op_invert(feed_aug_image *img, double mag)
{
    (void)mag;
    size_t n = npx(img) * 3;
    for (size_t i = 0; i < n; i++)
        img->px[i] = (uint8_t)(255 - img->px[i]);
}

static const struct {
    const char *name;
    op_fn fn;
} OPS[FEED_AUG_NUM_OPS] = {
    [FEED_AUG_IDENTITY] = {"Identity", op_identity},
    [FEED_AUG_SHEAR_X] = {"ShearX", op_shear_x},
    [FEED_AUG_SHEAR_Y] = {"ShearY", op_shear_y},
    [FEED_AUG_TRANSLATE_X] = {"TranslateX", op_translate_x},
    [FEED_AUG_TRANSLATE_Y] = {"TranslateY", op_translate_y},
    [FEED_AUG_ROTATE] = {"Rotate", op_rotate},
    [FEED_AUG_BRIGHTNESS] = {"Brightness", op_brightness},
    [FEED_AUG_COLOR] = {"Color", op_color},
    [FEED_AUG_CONTRAST] = {"Contrast", op_contrast},
    [FEED_AUG_SHARPNESS] = {"Sharpness", op_sharpness},
    [FEED_AUG_POSTERIZE] = {"Posterize", op_posterize},
    [FEED_AUG_SOLARIZE] = {"Solarize", op_solarize},
    [FEED_AUG_AUTOCONTRAST] = {"AutoContrast", op_autocontrast},
    [FEED_AUG_EQUALIZE] = {"Equalize", op_equalize},
    [FEED_AUG_INVERT] = {"Invert", op_invert},
};

const char *feed_aug_op_name(feed_aug_op op)
{
    return (unsigned)op < FEED_AUG_NUM_OPS ? OPS[op].name : NULL;
}

/* Beyond any bin of any policy; keeps every conversion to float and int defined. */
#define MAGNITUDE_LIMIT 1e6

void feed_aug_adjust(feed_aug_adjust_kind kind, double factor, feed_aug_image *img)
{
    if (!(factor >= -MAGNITUDE_LIMIT && factor <= MAGNITUDE_LIMIT) || img->h == 0 || img->w == 0)
        return;
    switch (kind) {
    case FEED_AUG_ADJ_BRIGHTNESS:
        adjust_brightness(img, factor);
        break;
    case FEED_AUG_ADJ_CONTRAST:
        adjust_contrast(img, factor);
        break;
    case FEED_AUG_ADJ_SATURATION:
        adjust_saturation(img, factor);
        break;
    case FEED_AUG_ADJ_HUE:
        adjust_hue(img, factor);
        break;
    }
}

void feed_aug_apply_op(feed_aug_op op, double magnitude, feed_aug_image *img)
{
    if (!(magnitude >= -MAGNITUDE_LIMIT))
        magnitude = magnitude > 0.0 ? MAGNITUDE_LIMIT : magnitude < 0.0 ? -MAGNITUDE_LIMIT : 0.0;
    if (magnitude > MAGNITUDE_LIMIT)
        magnitude = MAGNITUDE_LIMIT;
    if ((unsigned)op < FEED_AUG_NUM_OPS && img->h > 0 && img->w > 0)
        OPS[op].fn(img, magnitude);
}
