/*
 * A straightforward reference for normalisation, independent of the
 * library's table and bit tricks: the formula per pixel in fp32, and
 * round-to-nearest-even to fp16/bf16 by searching for the nearest
 * representable value. Used by test_client_unit (host path) and
 * test_client_gpu (the CUDA kernel).
 */
#ifndef FEED_TESTS_CLIENT_NORM_REF_H
#define FEED_TESTS_CLIENT_NORM_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "feed/client.h"

static inline double ref_half_value(uint16_t h)
{
    int exp = (h >> 10) & 31;
    int mant = h & 1023;
    double v;
    if (exp == 0)
        v = ldexp(mant, -24);
    else if (exp == 31)
        v = mant ? NAN : INFINITY;
    else
        v = ldexp(mant + 1024, exp - 25);
    return (h & 0x8000) ? -v : v;
}

/* Nearest binary16 to v, ties to even; |v| at or past 65520 overflows to infinity. */
static inline uint16_t ref_f16(float f)
{
    double v = f;
    if (isnan(v))
        return 0x7E00;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    if (a >= 65520.0)
        return sign | 0x7C00;
    /* Largest positive half h with value <= a (values increase with the bits). */
    uint16_t lo = 0, hi = 0x7BFF;
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (ref_half_value(mid) <= a)
            lo = mid;
        else
            hi = (uint16_t)(mid - 1);
    }
    double below = ref_half_value(lo);
    double above = lo == 0x7BFF ? 65536.0 : ref_half_value((uint16_t)(lo + 1));
    uint16_t pick;
    if (a - below < above - a)
        pick = lo;
    else if (a - below > above - a)
        pick = (uint16_t)(lo + 1);
    else
        pick = (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | pick;
}

static inline double ref_bf16_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Nearest bfloat16 to a finite f, ties to even (no overflow in test ranges). */
static inline uint16_t ref_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    uint16_t t = (uint16_t)(u >> 16);
    uint16_t t1 = (uint16_t)(t + 1);
    double d0 = fabs(ref_bf16_value(t) - (double)f);
    double d1 = fabs(ref_bf16_value(t1) - (double)f);
    if (d0 < d1)
        return t;
    if (d1 < d0)
        return t1;
    return (t & 1) ? t1 : t;
}

/*
 * Reference for the whole batch: element (s, y, x, c) of n x h x w x 3 uint8
 * raw goes to the layout's position as dtype. Returns a mismatch count when
 * compared against got (bytes of dtype), and the first mismatch index.
 */
static inline size_t ref_normalize_compare(const uint8_t *raw, uint32_t n, uint32_t h, uint32_t w,
                                           feed_dtype dtype, feed_layout layout,
                                           const float mean[3], const float std[3], const void *got,
                                           size_t *first_bad)
{
    size_t bad = 0;
    size_t plane = (size_t)h * w;
    const uint8_t *g8 = got;
    *first_bad = (size_t)-1;
    for (size_t s = 0; s < n; s++) {
        for (uint32_t y = 0; y < h; y++) {
            for (uint32_t x = 0; x < w; x++) {
                for (uint32_t c = 0; c < 3; c++) {
                    uint8_t p = raw[((s * h + y) * w + x) * 3 + c];
                    size_t o = layout == FEED_LAYOUT_NCHW
                                   ? s * 3 * plane + c * plane + (size_t)y * w + x
                                   : ((s * h + y) * w + x) * 3 + c;
                    float v = ((float)p / 255.0f - mean[c]) / std[c];
                    int ok;
                    if (dtype == FEED_DTYPE_UINT8) {
                        ok = g8[o] == p;
                    } else if (dtype == FEED_DTYPE_FP32) {
                        float gv;
                        memcpy(&gv, g8 + o * 4, 4);
                        ok = memcmp(&gv, &v, 4) == 0;
                    } else {
                        uint16_t gv, want = dtype == FEED_DTYPE_FP16 ? ref_f16(v) : ref_bf16(v);
                        memcpy(&gv, g8 + o * 2, 2);
                        ok = gv == want;
                    }
                    if (!ok && bad++ == 0)
                        *first_bad = o;
                }
            }
        }
    }
    return bad;
}

#endif
