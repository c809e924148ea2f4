/*
 * Separable antialiasing resize for the engine (internal; the tests use it
 * directly). Triangle filter whose support widens with the downscale factor,
 * the same kernel and coordinate convention as Pillow's resize with
 * Image.BILINEAR and a float box: output pixel i samples the input around
 * in0 + (i + 0.5) * (in1 - in0) / out, and the window is clipped to the input
 * range [0, in_size) with the weights renormalised.
 *
 * Weights are Q14 integers that sum exactly to 1 << 14, so a flat input stays
 * flat; the AVX2 and the scalar kernels do the same integer arithmetic and give
 * identical bytes.
 *
 * The horizontal pass reads RGBX (4 bytes per pixel) and writes RGB; the
 * vertical pass works on byte rows. One feed_resize_axis per axis; all memory
 * is owned by the caller's scratch (feed_resize_axis_reserve grows it).
 */
#ifndef FEED_SERVER_ENGINE_RESIZE_H
#define FEED_SERVER_ENGINE_RESIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FEED_RESIZE_BITS 14

typedef struct feed_resize_axis {
    uint32_t out;     /* output samples */
    uint32_t in_size; /* valid input range [0, in_size) */
    uint32_t taps;    /* weights per output: the widest window, rounded up to even */
    int32_t *start;   /* [out] first input index of each window */
    int32_t *count;   /* [out] window length before padding */
    int16_t *w;       /* [out * taps] */
    int16_t *pairs;   /* horizontal-pass scratch: 8 int16 per input position */
    size_t cap_out, cap_w, cap_pairs; /* allocated entries */
} feed_resize_axis;

void feed_resize_axis_init(feed_resize_axis *ax);
void feed_resize_axis_free(feed_resize_axis *ax);

/*
 * Plan one axis: the box [in0, in1) of an input of in_size samples onto out
 * samples. reverse: output i takes the window of output out - 1 - i (the flip).
 * Returns 0 or FEED_ENOMEM. Needs 0 <= in0 < in1 <= in_size, out >= 1.
 */
int feed_resize_axis_plan(feed_resize_axis *ax, double in0, double in1, uint32_t in_size,
                          uint32_t out, bool reverse);

/* Pixels past in_size that the horizontal pass may read (with zero weights). */
#define FEED_RESIZE_HSLACK(ax) ((ax)->taps + 8)

/*
 * Horizontal pass: one RGBX row, readable for in_size + FEED_RESIZE_HSLACK
 * pixels (the slack must hold defined bytes), into ax->out RGB pixels at dst,
 * which must have 4 spare bytes past 3 * out. Uses ax->pairs as scratch.
 */
void feed_resize_hrow(feed_resize_axis *ax, const uint8_t *src_rgbx, uint8_t *dst_rgb);

/* Vertical pass for one output row: n source rows with weights w, nbytes wide. */
void feed_resize_vrow(const uint8_t *const *rows, const int16_t *w, int n, uint8_t *dst,
                      size_t nbytes);

/* Which kernels run: "avx2" or "scalar". */
const char *feed_resize_kernel_name(void);
/* Force the scalar kernels (tests compare them with the SIMD ones). */
void feed_resize_force_scalar(bool on);

#endif
