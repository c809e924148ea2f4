/*
 * Transform spec and per-sample plan. The plan (crop box in source pixels and
 * the flip) is a pure function of (spec, image size, seed, epoch, index), so
 * client, server and tests agree on it without talking.
 *
 * Train: torchvision RandomResizedCrop(size, scale, ratio) — area fraction
 * drawn uniformly in [scale_min, scale_max], log aspect ratio uniformly in
 * [log ratio_min, log ratio_max], 10 attempts, then the centre-crop fallback —
 * then a horizontal flip with probability flip_prob.
 * Eval: resize the shorter side to resize_size, then centre crop out_h x out_w;
 * expressed here as the equivalent source box, so both modes share one path.
 */
#ifndef FEED_TRANSFORM_H
#define FEED_TRANSFORM_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "feed/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum feed_transform_mode {
    FEED_TRANSFORM_TRAIN = 0,
    FEED_TRANSFORM_EVAL = 1,
} feed_transform_mode;

/* Output side bounds: anything else is refused by feed_transform_validate. */
#define FEED_TRANSFORM_MIN_SIDE 8u
#define FEED_TRANSFORM_MAX_SIDE 2048u

typedef struct feed_transform {
    feed_transform_mode mode;
    uint32_t out_h, out_w;  /* output size, default 224 x 224 */
    double scale_min, scale_max; /* train: area fraction, default 0.08 .. 1 */
    double ratio_min, ratio_max; /* train: aspect w/h, default 3/4 .. 4/3 */
    double flip_prob;        /* train: horizontal flip probability, default 0.5 */
    uint32_t resize_size;    /* eval: shorter side before centre crop, default 256 */
} feed_transform;

typedef struct feed_crop_box {
    uint32_t x, y, w, h; /* in source pixels; always inside the image, w, h >= 1 */
} feed_crop_box;

typedef struct feed_sample_plan {
    feed_crop_box crop;
    bool flip;
} feed_sample_plan;

FEED_EXPORT void feed_transform_default_train(feed_transform *t);
FEED_EXPORT void feed_transform_default_eval(feed_transform *t);

/*
 * 0 if the spec is usable, else FEED_EINVAL with a message naming the field
 * in msg (always NUL-terminated when msg_cap > 0). Bounds and field names are
 * those of feed.v1.TransformSpec in proto/feed.proto ("transform.out_height"
 * for out_h), the one statement of them, since feedd sends the message as is.
 */
FEED_EXPORT int feed_transform_validate(const feed_transform *t, char *msg, size_t msg_cap);

/* The plan for one sample of an img_w x img_h image (both >= 1). */
FEED_EXPORT void feed_plan_sample(const feed_transform *t, uint32_t img_w, uint32_t img_h,
                                  uint64_t seed, uint32_t epoch, uint64_t sample_index,
                                  feed_sample_plan *out);

#ifdef __cplusplus
}
#endif
#endif
