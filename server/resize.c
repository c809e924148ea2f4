/*
 * Separable antialiasing resize (see resize.h). Called by the engine's worker
 * thread on its own scratch; no shared state except the test-only switch that
 * forces the scalar kernels.
 *
 * Kernels: scalar C everywhere, and AVX2 on x86-64 chosen at run time. Both
 * compute sum(w * p) + 2^13 >> 14 in 32-bit integers over the same weights,
 * so they agree to the byte.
 */
#include "resize.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#endif

#define ONE (1 << FEED_RESIZE_BITS)
#define HALF (1 << (FEED_RESIZE_BITS - 1))

static bool force_scalar;

void feed_resize_force_scalar(bool on)
{
    force_scalar = on;
}

static bool use_avx2(void)
{
#ifdef HAVE_AVX2_KERNELS
    return !force_scalar && __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

const char *feed_resize_kernel_name(void)
{
    return use_avx2() ? "avx2" : "scalar";
}

void feed_resize_axis_init(feed_resize_axis *ax)
{
    memset(ax, 0, sizeof *ax);
}

void feed_resize_axis_free(feed_resize_axis *ax)
{
    free(ax->start);
    free(ax->count);
    free(ax->w);
    memset(ax, 0, sizeof *ax);
}

static int reserve(feed_resize_axis *ax, uint32_t out, uint32_t taps)
{
    if (out > ax->cap_out) {
        int32_t *s = realloc(ax->start, (size_t)out * sizeof *s);
        if (!s)
            return FEED_ENOMEM;
        ax->start = s;
        int32_t *c = realloc(ax->count, (size_t)out * sizeof *c);
        if (!c)
            return FEED_ENOMEM;
        ax->count = c;
        ax->cap_out = out;
    }
    size_t nw = (size_t)out * taps;
    if (nw > ax->cap_w) {
        int16_t *w = realloc(ax->w, nw * sizeof *w);
        if (!w)
            return FEED_ENOMEM;
        ax->w = w;
        ax->cap_w = nw;
    }
    return 0;
}

static double triangle(double x)
{
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

int feed_resize_axis_plan(feed_resize_axis *ax, double in0, double in1, uint32_t in_size,
                          uint32_t out, bool reverse)
{
    double scale = (in1 - in0) / out;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = fscale; /* the triangle's support is 1 */
    /* Widest window Pillow's rule can give, padded to a multiple of 4. */
    uint32_t taps = (uint32_t)ceil(support) * 2 + 1;
    if (taps > in_size)
        taps = in_size;
    taps = (taps + 3) & ~3u;
    int rc = reserve(ax, out, taps);
    if (rc)
        return rc;
    ax->out = out;
    ax->in_size = in_size;
    ax->taps = taps;
    memset(ax->w, 0, (size_t)out * taps * sizeof *ax->w);

    for (uint32_t i = 0; i < out; i++) {
        double center = in0 + (i + 0.5) * scale;
        /* (int) truncates like Pillow's precompute_coeffs; clamped below. */
        int xmin = (int)(center - support + 0.5);
        int xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > (int)in_size)
            xmax = (int)in_size;
        if (xmax - xmin > (int)taps)
            xmax = xmin + (int)taps;
        if (xmax <= xmin) { /* cannot happen for a valid box; keep one tap */
            xmin = (int)floor(center);
            if (xmin > (int)in_size - 1)
                xmin = (int)in_size - 1;
            if (xmin < 0)
                xmin = 0;
            xmax = xmin + 1;
        }
        int n = xmax - xmin;
        double sum = 0.0;
        for (int k = 0; k < n; k++)
            sum += triangle((k + xmin - center + 0.5) / fscale);
        uint32_t dst = reverse ? out - 1 - i : i;
        int16_t *w = ax->w + (size_t)dst * taps;
        if (sum <= 0.0) { /* degenerate: nearest sample */
            w[0] = ONE;
        } else {
            int total = 0, big = 0;
            for (int k = 0; k < n; k++) {
                double kw = triangle((k + xmin - center + 0.5) / fscale);
                w[k] = (int16_t)lrint(kw / sum * ONE);
                total += w[k];
                if (w[k] > w[big])
                    big = k;
            }
            w[big] = (int16_t)(w[big] + (ONE - total)); /* exact sum: flat stays flat */
        }
        ax->start[dst] = xmin;
        ax->count[dst] = n;
    }
    return 0;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= FEED_RESIZE_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void hrow_scalar(const feed_resize_axis *ax, const uint8_t *src, uint8_t *dst)
{
    uint32_t taps = ax->taps;
    for (uint32_t x = 0; x < ax->out; x++) {
        const uint8_t *p = src + (size_t)ax->start[x] * 4;
        const int16_t *w = ax->w + (size_t)x * taps;
        int32_t r = HALF, g = HALF, b = HALF;
        for (int k = 0; k < ax->count[x]; k++) {
            r += w[k] * p[4 * k];
            g += w[k] * p[4 * k + 1];
            b += w[k] * p[4 * k + 2];
        }
        dst[3 * x] = clip8(r);
        dst[3 * x + 1] = clip8(g);
        dst[3 * x + 2] = clip8(b);
    }
}

static void vrow_scalar(const uint8_t *const *rows, const int16_t *w, int n, uint8_t *dst,
                        size_t from, size_t nbytes)
{
    for (size_t i = from; i < nbytes; i++) {
        int32_t acc = HALF;
        for (int k = 0; k < n; k++)
            acc += w[k] * rows[k][i];
        dst[i] = clip8(acc);
    }
}

#ifdef HAVE_AVX2_KERNELS
/*
 * Four taps per step: 4 RGBX pixels are shuffled to (r0 r1 g0 g1 b0 b1 x0 x1 |
 * r2 r3 ...), widened to 16 bits, and multiplied with the weight pairs
 * (w0 w1) in the low lane and (w2 w3) in the high lane by vpmaddwd.
 */
__attribute__((target("avx2"))) static void hrow_avx2(const feed_resize_axis *ax,
                                                      const uint8_t *src, uint8_t *dst)
{
    const __m128i shuf = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    const __m256i pick = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
    const __m128i half = _mm_set1_epi32(HALF);
    uint32_t taps = ax->taps;
    for (uint32_t x = 0; x < ax->out; x++) {
        const uint8_t *p = src + (size_t)ax->start[x] * 4;
        const int16_t *w = ax->w + (size_t)x * taps;
        __m256i acc = _mm256_setzero_si256();
        for (uint32_t k = 0; k < taps; k += 4) {
            __m128i px = _mm_loadu_si128((const __m128i *)(const void *)(p + 4 * k));
            __m256i v = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(px, shuf));
            __m128i w4 = _mm_loadl_epi64((const __m128i *)(const void *)(w + k));
            __m256i wv = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(w4), pick);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, wv));
        }
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
        s = _mm_srai_epi32(_mm_add_epi32(s, half), FEED_RESIZE_BITS);
        s = _mm_packus_epi16(_mm_packs_epi32(s, s), s);
        uint32_t rgbx = (uint32_t)_mm_cvtsi128_si32(s);
        memcpy(dst + 3 * (size_t)x, &rgbx, 4); /* the 4th byte is overwritten next */
    }
}

#define VROW_MAX_PAIRS 32

__attribute__((target("avx2"))) static size_t vrow_avx2(const uint8_t *const *rows,
                                                       const int16_t *w, int n, uint8_t *dst,
                                                       size_t nbytes)
{
    int pairs = (n + 1) / 2;
    if (pairs > VROW_MAX_PAIRS)
        return 0;
    __m256i wv[VROW_MAX_PAIRS];
    for (int j = 0; j < pairs; j++) {
        uint16_t lo = (uint16_t)w[2 * j];
        uint16_t hi = 2 * j + 1 < n ? (uint16_t)w[2 * j + 1] : 0;
        wv[j] = _mm256_set1_epi32((int32_t)((uint32_t)lo | (uint32_t)hi << 16));
    }
    const __m256i zero = _mm256_setzero_si256();
    const __m256i half = _mm256_set1_epi32(HALF);
    size_t i = 0;
    for (; i + 32 <= nbytes; i += 32) {
        __m256i a0 = half, a1 = half, a2 = half, a3 = half;
        for (int j = 0; j < pairs; j++) {
            __m256i ra = _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * j] + i));
            __m256i rb = 2 * j + 1 < n ? _mm256_loadu_si256(
                                             (const __m256i *)(const void *)(rows[2 * j + 1] + i))
                                       : zero;
            __m256i lo = _mm256_unpacklo_epi8(ra, rb), hi = _mm256_unpackhi_epi8(ra, rb);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wv[j]));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wv[j]));
            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wv[j]));
            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wv[j]));
        }
        a0 = _mm256_srai_epi32(a0, FEED_RESIZE_BITS);
        a1 = _mm256_srai_epi32(a1, FEED_RESIZE_BITS);
        a2 = _mm256_srai_epi32(a2, FEED_RESIZE_BITS);
        a3 = _mm256_srai_epi32(a3, FEED_RESIZE_BITS);
        __m256i r = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), r);
    }
    return i;
}
#endif

void feed_resize_hrow(const feed_resize_axis *ax, const uint8_t *src_rgbx, uint8_t *dst_rgb)
{
#ifdef HAVE_AVX2_KERNELS
    if (use_avx2()) {
        hrow_avx2(ax, src_rgbx, dst_rgb);
        return;
    }
#endif
    hrow_scalar(ax, src_rgbx, dst_rgb);
}

void feed_resize_vrow(const uint8_t *const *rows, const int16_t *w, int n, uint8_t *dst,
                      size_t nbytes)
{
    size_t done = 0;
#ifdef HAVE_AVX2_KERNELS
    if (use_avx2())
        done = vrow_avx2(rows, w, n, dst, nbytes);
#endif
    vrow_scalar(rows, w, n, dst, done, nbytes);
}
