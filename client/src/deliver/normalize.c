/*
 * Host normalisation (see normalize.h). Because inputs are uint8, each channel
 * has only 256 possible outputs: a 3 x 256 table is computed once per call and
 * the pixels are looked up, which is both fast and bit-identical to computing
 * the formula per pixel. Runs on the loader's receiver threads.
 */
#include "normalize.h"

#include <string.h>

size_t client_dtype_size(feed_dtype dtype)
{
    switch (dtype) {
    case FEED_DTYPE_FP16:
    case FEED_DTYPE_BF16:
        return 2;
    case FEED_DTYPE_FP32:
        return 4;
    case FEED_DTYPE_UINT8:
    default:
        return 1;
    }
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/*
 * The branch-free conversion of Maratyszcza's FP16 library: scaling by 2^112
 * and 2^-110 lets the FPU do the round-to-nearest-even (including subnormals
 * and overflow to infinity) in fp32 arithmetic. Needs fp32 arithmetic without
 * excess precision, which x86-64 (SSE) and AArch64 give.
 */
uint16_t client_f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
    uint32_t w = f32_bits(f);
    uint32_t shl1_w = w + w;
    uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u)
        bias = 0x71000000u;
    base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
    uint32_t bits = f32_bits(base);
    uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    uint32_t mantissa_bits = bits & 0x00000FFFu;
    uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

uint16_t client_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/*
 * One sample's plane of pixels through a per-channel table into `out` of
 * element type T: NCHW writes three planes, NHWC interleaves. Each output
 * location is written once, in order, so the loops stream.
 */
#define NORMALIZE_SAMPLE(T, table, src, out, plane, layout)                                        \
    do {                                                                                           \
        T *o_ = (T *)(out);                                                                        \
        if ((layout) == FEED_LAYOUT_NCHW) {                                                        \
            for (size_t p_ = 0; p_ < (plane); p_++) {                                              \
                o_[p_] = (table)[0][(src)[3 * p_]];                                                \
                o_[(plane) + p_] = (table)[1][(src)[3 * p_ + 1]];                                  \
                o_[2 * (plane) + p_] = (table)[2][(src)[3 * p_ + 2]];                              \
            }                                                                                      \
        } else {                                                                                   \
            for (size_t p_ = 0; p_ < (plane); p_++) {                                              \
                o_[3 * p_] = (table)[0][(src)[3 * p_]];                                            \
                o_[3 * p_ + 1] = (table)[1][(src)[3 * p_ + 1]];                                    \
                o_[3 * p_ + 2] = (table)[2][(src)[3 * p_ + 2]];                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)

void client_normalize_host(const uint8_t *raw, uint32_t n, uint32_t h, uint32_t w, feed_dtype dtype,
                           feed_layout layout, const float mean[3], const float std[3], void *out)
{
    union {
        uint8_t u8[3][256];
        uint16_t u16[3][256];
        float f32[3][256];
    } lut;
    for (uint32_t c = 0; c < 3; c++) {
        for (uint32_t p = 0; p < 256; p++) {
            float v = client_normalize_value((uint8_t)p, mean[c], std[c]);
            switch (dtype) {
            case FEED_DTYPE_FP16:
                lut.u16[c][p] = client_f32_to_f16(v);
                break;
            case FEED_DTYPE_BF16:
                lut.u16[c][p] = client_f32_to_bf16(v);
                break;
            case FEED_DTYPE_FP32:
                lut.f32[c][p] = v;
                break;
            case FEED_DTYPE_UINT8:
            default:
                lut.u8[c][p] = (uint8_t)p;
                break;
            }
        }
    }
    size_t plane = (size_t)h * w;
    size_t esize = client_dtype_size(dtype);
    for (size_t sample = 0; sample < n; sample++) {
        const uint8_t *src = raw + sample * plane * 3;
        uint8_t *dst = (uint8_t *)out + sample * plane * 3 * esize;
        if (esize == 1)
            NORMALIZE_SAMPLE(uint8_t, lut.u8, src, dst, plane, layout);
        else if (esize == 2)
            NORMALIZE_SAMPLE(uint16_t, lut.u16, src, dst, plane, layout);
        else
            NORMALIZE_SAMPLE(float, lut.f32, src, dst, plane, layout);
    }
}
