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
 *
 * Decoded path (the server's decoded-sample cache): feed_engine_decode turns
 * a whole JPEG into a reduced-size RGB image, DCT-scaled by N/8 at decode so
 * its shorter side stays at least a given size; feed_engine_run_decoded then
 * plans the sample in the original image's coordinates, as the fast path
 * does, maps the box onto the reduced image, and crops, resizes and flips
 * from its pixels.
 *
 * Augmentations (augment.h) come after either path, on the finished sample:
 * feed_engine_augment.
 */
#ifndef FEED_SERVER_ENGINE_ENGINE_H
#define FEED_SERVER_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "augment.h"
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

/*
 * A decoded, reduced-size image: RGB, height rows of width * 3 bytes back to
 * back, decoded from a src_width x src_height JPEG. The sample plan is drawn
 * in src coordinates, so it does not depend on the reduction; pixel x of the
 * image covers source columns [8x/N, 8(x+1)/N).
 */
typedef struct feed_decoded {
    uint32_t width, height;
    uint32_t src_width, src_height;
    uint32_t scale_num; /* N: the source scaled by N/8 (libjpeg rounds the sides up) */
    const uint8_t *pixels;
} feed_decoded;

/*
 * Where feed_engine_decode writes: called once the output size is known
 * (dims has everything but pixels) with the bytes needed; returns a buffer
 * of that many bytes, or NULL to use the engine's own scratch, which stays
 * valid until the next call on the engine.
 */
typedef uint8_t *(*feed_decoded_alloc)(void *ctx, const feed_decoded *dims, size_t bytes);

/*
 * The DCT scale numerator N (1..8, over 8) feed_engine_decode uses for a
 * w x h image: the smallest whose scaled shorter side (rounded up, as
 * libjpeg does) is at least min_side; 8 when the image is smaller than that
 * already (never upscaled).
 */
unsigned feed_decoded_scale(uint32_t w, uint32_t h, uint32_t min_side);

/*
 * Decode a whole JPEG at scale feed_decoded_scale(w, h, min_side) / 8 into
 * alloc's buffer (alloc may be NULL). Every row is decoded, so damage
 * anywhere in the image is found, whatever a crop would have read. Returns
 * FEED_SAMPLE_OK with *img set, or another status with a message
 * (feed_engine_last_error) and nothing in *img to use.
 */
feed_sample_status feed_engine_decode(feed_engine *e, const uint8_t *jpeg, size_t len,
                                      uint32_t min_side, feed_decoded_alloc alloc, void *ctx,
                                      feed_decoded *img);

/*
 * One sample from a decoded image: the plan (seed, epoch, sample_index) in
 * the source's coordinates, its box mapped onto img, then crop, resize and
 * flip into out as feed_engine_run does. Reads img only, so several engines
 * may run on one image at once. Fails only for an invalid transform or out
 * of memory (out zero-filled then).
 */
feed_sample_status feed_engine_run_decoded(feed_engine *e, const feed_decoded *img,
                                           const feed_transform *t, uint64_t seed, uint32_t epoch,
                                           uint64_t sample_index, uint8_t *out,
                                           feed_stage_times *times);

/*
 * Augment a finished out_h x out_w sample in place (augment.h), with the
 * engine's scratch. FEED_SAMPLE_OK, or TOO_LARGE (out zero-filled) when the
 * scratch cannot grow.
 */
feed_sample_status feed_engine_augment(feed_engine *e, const feed_augment *a, uint8_t *out,
                                       uint32_t out_h, uint32_t out_w, uint64_t seed,
                                       uint32_t epoch, uint64_t sample_index);

/* Message for the last failed run on this engine; "" after a success. */
const char *feed_engine_last_error(const feed_engine *e);

#endif
