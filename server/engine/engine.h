/*
 * The preprocessing engine: JPEG bytes in, one augmented uint8 HWC RGB sample
 * out, written straight into the caller's buffer. No I/O, no threads of its
 * own: a feed_engine is one worker's decompressor and scratch buffers, used by
 * one thread at a time, and allocates nothing per image once warm.
 *
 * Fast path: read the header, plan the crop from the header's size, choose
 * the smallest DCT scale (1/8, 1/4, 1/2, 1) whose scaled crop still covers the
 * output size, decode only the crop's columns (jpeg_crop_scanline) and rows
 * (jpeg_skip_scanlines), resize with an antialiasing filter, flip, write.
 */
#ifndef FEED_SERVER_ENGINE_ENGINE_H
#define FEED_SERVER_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "feed/errors.h"
#include "feed/transform.h"

typedef struct feed_engine feed_engine;

typedef struct feed_engine_limits {
    uint64_t max_pixels;     /* declared width*height above this: TOO_LARGE (default 64 Mpx) */
    uint32_t max_side;       /* declared width or height above this: TOO_LARGE (default 16384) */
    uint64_t max_jpeg_bytes; /* input larger than this: TOO_LARGE (default 64 MiB) */
} feed_engine_limits;

void feed_engine_limits_default(feed_engine_limits *lim);

/* Nanoseconds spent in each stage of the last feed_engine_run, for metrics. */
typedef struct feed_stage_times {
    uint64_t decode_ns; /* header, decompression and colour conversion */
    uint64_t resize_ns; /* resize, flip and the write into the output */
} feed_stage_times;

/* 0, FEED_ENOMEM or FEED_EINVAL. lim == NULL takes the defaults. */
int feed_engine_new(const feed_engine_limits *lim, feed_engine **out);
void feed_engine_free(feed_engine *e); /* accepts NULL */

/*
 * Process one sample into out (t->out_h * t->out_w * 3 bytes, HWC RGB).
 * Returns FEED_SAMPLE_OK, or another status with out zero-filled and a
 * message available from feed_engine_last_error(). times may be NULL.
 */
feed_sample_status feed_engine_run(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, uint64_t seed, uint32_t epoch,
                                   uint64_t sample_index, uint8_t *out, feed_stage_times *times);

/*
 * The plain baseline: full-size decode, then the same plan, crop, resize and
 * flip. Used by the tests as the reference and by the benchmark as the ratio's
 * denominator. Slow on purpose; allocates as it needs.
 */
feed_sample_status feed_engine_run_reference(feed_engine *e, const uint8_t *jpeg, size_t len,
                                             const feed_transform *t, uint64_t seed,
                                             uint32_t epoch, uint64_t sample_index, uint8_t *out);

/* Message for the last failed run on this engine; "" after a success. */
const char *feed_engine_last_error(const feed_engine *e);

#endif
