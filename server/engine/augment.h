/*
 * Per-sample augmentations after the crop, on the uint8 HWC RGB sample in its
 * batch slot, as torchvision's tensor ops define them (transforms/
 * functional_tensor.py and autoaugment.py): an op table (augment_ops.c) and
 * the policies that draw from it (augment.c): TrivialAugmentWide,
 * RandAugment, AutoAugment (ImageNet policy), ColorJitter and RandomErasing.
 *
 * Every draw comes from the sample's own counter-based stream (feed/rng.h,
 * keyed by seed, epoch and sample index), at a counter offset of its own
 * (FEED_AUGMENT_CTR) so it does not depend on how many draws the crop took:
 * the same request gives the same bytes on every server and after resume.
 *
 * The description (the steps and their parameters) is feed/augment.h's,
 * parsed from the text on the wire (TransformSpec.augment).
 */
#ifndef FEED_SERVER_ENGINE_AUGMENT_H
#define FEED_SERVER_ENGINE_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/augment.h"
#include "feed/rng.h"

/* First Philox block of a sample's augmentation draws (the crop uses block 0..). */
#define FEED_AUGMENT_CTR 0x80000000u

/* The op table's entries, in TrivialAugmentWide's order (Identity first). */
typedef enum feed_aug_op {
    FEED_AUG_IDENTITY,
    FEED_AUG_SHEAR_X,
    FEED_AUG_SHEAR_Y,
    FEED_AUG_TRANSLATE_X,
    FEED_AUG_TRANSLATE_Y,
    FEED_AUG_ROTATE,
    FEED_AUG_BRIGHTNESS,
    FEED_AUG_COLOR,
    FEED_AUG_CONTRAST,
    FEED_AUG_SHARPNESS,
    FEED_AUG_POSTERIZE,
    FEED_AUG_SOLARIZE,
    FEED_AUG_AUTOCONTRAST,
    FEED_AUG_EQUALIZE,
    FEED_AUG_INVERT, /* AutoAugment's policies only */
    FEED_AUG_NUM_OPS
} feed_aug_op;

/* An image the ops work on: h rows of w RGB pixels, back to back. */
/* ColorJitter's adjustments, in the order its random permutation indexes them. */
typedef enum feed_aug_adjust_kind {
    FEED_AUG_ADJ_BRIGHTNESS,
    FEED_AUG_ADJ_CONTRAST,
    FEED_AUG_ADJ_SATURATION,
    FEED_AUG_ADJ_HUE,
} feed_aug_adjust_kind;

typedef struct feed_aug_image {
    uint8_t *px;
    uint32_t h, w;
    uint8_t *tmp;  /* h * w * 3 bytes of scratch for the ops that read while writing */
    bool bilinear; /* geometric ops interpolate bilinearly (torchvision's BILINEAR), else nearest */
} feed_aug_image;

/* Name as torchvision's _apply_op spells it ("ShearX"), or NULL past the table. */
const char *feed_aug_op_name(feed_aug_op op);
/* One op at a magnitude, exactly as torchvision's _apply_op with fill None (zeros).
 * Magnitudes are clamped to +-1e6 (NaN: 0), far past any policy's bins. */
void feed_aug_apply_op(feed_aug_op op, double magnitude, feed_aug_image *img);

/* adjust_brightness/contrast/saturation(factor) or adjust_hue(factor) as
 * torchvision's tensor functions; a factor beyond +-1e6 (or NaN) does nothing. */
void feed_aug_adjust(feed_aug_adjust_kind kind, double factor, feed_aug_image *img);

/*
 * Apply every step to img, drawing from (seed, epoch, sample_index)'s stream
 * at FEED_AUGMENT_CTR. img->tmp must hold h * w * 3 bytes.
 */
void feed_augment_apply(const feed_augment *a, feed_aug_image *img, uint64_t seed, uint32_t epoch,
                        uint64_t sample_index);

/*
 * The draws of one step, for the distribution tests: TrivialAugmentWide and
 * RandAugment fill ops[] and bins[] (bin -1: the op has no magnitude) and
 * signs[] (1 or -1) and return the count; RandomErasing returns 1 with the
 * box in box[] (top, left, height, width) when it erases, else 0;
 * ColorJitter returns 4 with its permutation in bins[0..3] and the factors
 * by feed_aug_adjust_kind in factors[] (NaN for an adjustment it skips).
 */
int feed_augment_draw(const feed_augment_step *s, feed_rng *rng, uint32_t h, uint32_t w,
                      feed_aug_op *ops, int *bins, int *signs, uint32_t box[4], double factors[4]);

#endif
