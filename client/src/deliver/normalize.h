/*
 * Host-side normalisation: uint8 HWC samples (the wire format) to the dtype and
 * layout the training job asked for, out = (pixel / 255 - mean) / std computed
 * in fp32 exactly as the CUDA kernel computes it, then rounded to fp16/bf16
 * with round-to-nearest-even. Pure functions; any thread.
 */
#ifndef FEED_CLIENT_NORMALIZE_H
#define FEED_CLIENT_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"

/* Bytes per element of dtype (1, 2, 2, 4). */
size_t client_dtype_size(feed_dtype dtype);

/* fp32 → IEEE binary16 / bfloat16, round to nearest, ties to even; NaN stays NaN. */
uint16_t client_f32_to_f16(float f);
uint16_t client_f32_to_bf16(float f);

/* The fp32 value before dtype rounding, for pixel p of channel c. */
static inline float client_normalize_value(uint8_t p, float mean, float std)
{
    return ((float)p / 255.0f - mean) / std;
}

/*
 * n samples of h x w x 3 uint8 in `raw` → `out` (n*3*h*w elements of dtype in
 * layout). For FEED_DTYPE_UINT8 only the layout changes (mean/std unused).
 * raw and out must not overlap.
 */
void client_normalize_host(const uint8_t *raw, uint32_t n, uint32_t h, uint32_t w, feed_dtype dtype,
                           feed_layout layout, const float mean[3], const float std[3], void *out);

#endif
