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
    free(ax->pairs);
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

static int reserve_pairs(feed_resize_axis *ax, uint32_t in_size, uint32_t taps)
{
    size_t n = ((size_t)in_size + taps + 4) * 8;
    if (n > ax->cap_pairs) {
        int16_t *p = realloc(ax->pairs, n * sizeof *p);
        if (!p)
            return FEED_ENOMEM;
        ax->pairs = p;
        ax->cap_pairs = n;
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
    /* Widest window Pillow's rule can give; the real widest is found below
     * and the stride shrinks to it, rounded up to a whole pair of taps. */
    uint32_t taps = (uint32_t)ceil(support) * 2 + 1;
    if (taps > in_size)
        taps = in_size;
    taps = (taps + 1) & ~1u;
    int rc = reserve(ax, out, taps);
    if (!rc)
        rc = reserve_pairs(ax, in_size, taps);
    if (rc)
        return rc;
    ax->out = out;
    ax->in_size = in_size;
    memset(ax->w, 0, (size_t)out * taps * sizeof *ax->w);

    int widest = 1;
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
        if (n > widest)
            widest = n;
    }
    /* Repack the weights to the narrower stride. */
    uint32_t used = ((uint32_t)widest + 1) & ~1u;
    for (uint32_t i = 1; i < out && used < taps; i++)
        memmove(ax->w + (size_t)i * used, ax->w + (size_t)i * taps, used * sizeof *ax->w);
    ax->taps = used;
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
 * The horizontal pass runs in two steps so that its inner loop needs no
 * shuffles (one shuffle port is the bottleneck on most x86 cores):
 *  1. widen the row once into overlapping pairs: position i holds the int16s
 *     (r_i r_i+1 g_i g_i+1 b_i b_i+1 x_i x_i+1);
 *  2. each output pixel is then, per pair of taps, one load, one broadcast of
 *     the weight pair (w_k, w_k+1) and one vpmaddwd giving (r g b x) sums.
 */
__attribute__((target("avx2"))) static void widen_pairs_avx2(const uint8_t *src, uint32_t n,
                                                             int16_t *pairs)
{
    uint32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * (size_t)i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * (size_t)i + 4));
        __m256i lo = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
        __m256i hi = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b));
        _mm256_storeu_si256((__m256i *)(void *)(pairs + 8 * (size_t)i), lo);
        _mm256_storeu_si256((__m256i *)(void *)(pairs + 8 * (size_t)i + 16), hi);
    }
    for (; i < n; i++)
        for (int c = 0; c < 4; c++) {
            pairs[8 * (size_t)i + 2 * c] = src[4 * (size_t)i + c];
            pairs[8 * (size_t)i + 2 * c + 1] = src[4 * (size_t)i + 4 + c];
        }
}

__attribute__((target("avx2"), always_inline)) static inline __m128i
hpixel_avx2(const int16_t *p, const int16_t *w, uint32_t taps)
{
    __m128i acc = _mm_set1_epi32(HALF);
    for (uint32_t k = 0; k < taps; k += 2) {
        /* vbroadcastss from memory is a load only; a register broadcast would
         * compete for the shuffle port. */
        __m128i wk = _mm_castps_si128(_mm_broadcast_ss((const float *)(const void *)(w + k)));
        __m128i px = _mm_loadu_si128((const __m128i *)(const void *)(p + 8 * (size_t)k));
        acc = _mm_add_epi32(acc, _mm_madd_epi16(px, wk));
    }
    return _mm_srai_epi32(acc, FEED_RESIZE_BITS);
}

/* The body, inlined once per common tap count so the tap loop unrolls. */
__attribute__((target("avx2"), always_inline)) static inline void
hrow_avx2_body(const feed_resize_axis *ax, const int16_t *pairs, uint8_t *dst, uint32_t taps)
{
    uint32_t out = ax->out;
    const int32_t *start = ax->start;
    const int16_t *w = ax->w;
    /* RGBX RGBX RGBX RGBX → RGB RGB RGB RGB and 4 bytes of don't-care. */
    const __m128i to_rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    uint32_t x = 0;
    for (; x + 4 <= out; x += 4) {
        __m128i p0 = hpixel_avx2(pairs + 8 * (size_t)start[x], w + (size_t)x * taps, taps);
        __m128i p1 =
            hpixel_avx2(pairs + 8 * (size_t)start[x + 1], w + (size_t)(x + 1) * taps, taps);
        __m128i p2 =
            hpixel_avx2(pairs + 8 * (size_t)start[x + 2], w + (size_t)(x + 2) * taps, taps);
        __m128i p3 =
            hpixel_avx2(pairs + 8 * (size_t)start[x + 3], w + (size_t)(x + 3) * taps, taps);
        __m128i v = _mm_packus_epi16(_mm_packs_epi32(p0, p1), _mm_packs_epi32(p2, p3));
        _mm_storeu_si128((__m128i *)(void *)(dst + 3 * (size_t)x), _mm_shuffle_epi8(v, to_rgb));
    }
    for (; x < out; x++) {
        __m128i p = hpixel_avx2(pairs + 8 * (size_t)start[x], w + (size_t)x * taps, taps);
        p = _mm_packus_epi16(_mm_packs_epi32(p, p), p);
        uint32_t rgbx = (uint32_t)_mm_cvtsi128_si32(p);
        memcpy(dst + 3 * (size_t)x, &rgbx, 4);
    }
}

__attribute__((target("avx2"))) static void hrow_avx2(feed_resize_axis *ax, const uint8_t *src,
                                                      uint8_t *dst)
{
    uint32_t taps = ax->taps;
    widen_pairs_avx2(src, ax->in_size + taps, ax->pairs);
    switch (taps) {
    case 2:
        hrow_avx2_body(ax, ax->pairs, dst, 2);
        break;
    case 4:
        hrow_avx2_body(ax, ax->pairs, dst, 4);
        break;
    case 6:
        hrow_avx2_body(ax, ax->pairs, dst, 6);
        break;
    case 8:
        hrow_avx2_body(ax, ax->pairs, dst, 8);
        break;
    default:
        hrow_avx2_body(ax, ax->pairs, dst, taps);
        break;
    }
}

#define VROW_MAX_PAIRS 32

__attribute__((target("avx2"))) static size_t
vrow_avx2(const uint8_t *const *rows, const int16_t *w, int n, uint8_t *dst, size_t nbytes)
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
            __m256i rb =
                2 * j + 1 < n
                    ? _mm256_loadu_si256((const __m256i *)(const void *)(rows[2 * j + 1] + i))
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

void feed_resize_hrow(feed_resize_axis *ax, const uint8_t *src_rgbx, uint8_t *dst_rgb)
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
