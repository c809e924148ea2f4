/*
 * The per-sample augmentation description: torchvision's op names and
 * parameters as text (TransformSpec.augment in proto/feed.proto, the Python
 * Loader's augment=), parsed into steps the server's engine applies after the
 * crop (server/engine/augment.h). The client parses it too, so a bad
 * description fails feed_loader_open with the message the server would give.
 * Pure functions; any thread.
 */
#ifndef FEED_AUGMENT_H
#define FEED_AUGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Steps in one description, and its length in bytes: more is refused. */
#define FEED_AUGMENT_MAX_STEPS 8
#define FEED_AUGMENT_MAX_TEXT 1024
/* RandAugment's num_ops at most. */
#define FEED_AUGMENT_MAX_RAND_OPS 16u

typedef enum feed_augment_kind {
    FEED_AUGMENT_TRIVIAL_WIDE,
    FEED_AUGMENT_RAND,
    FEED_AUGMENT_AUTO,
    FEED_AUGMENT_ERASING,
    FEED_AUGMENT_COLOR_JITTER,
} feed_augment_kind;

typedef struct feed_augment_step {
    feed_augment_kind kind;
    uint32_t num_ops;            /* RandAugment: ops per sample, 0..16 (default 2) */
    uint32_t magnitude;          /* RandAugment: bin, 0..num_magnitude_bins-1 (default 9) */
    uint32_t num_magnitude_bins; /* TrivialAugmentWide 31, RandAugment 31; 2..1000 */
    bool bilinear;   /* TrivialAugmentWide, RandAugment, AutoAugment: interpolation=bilinear */
    double p;        /* RandomErasing: probability (default 0.5) */
    double scale[2]; /* RandomErasing: area fraction (default 0.02 .. 0.33) */
    double ratio[2]; /* RandomErasing: aspect h/w (default 0.3 .. 3.3) */
    uint8_t fill[3]; /* RandomErasing: the erased pixels' value */
    /* ColorJitter: factor ranges [min, max] for brightness, contrast, saturation and hue
     * (feed_aug_adjust_kind's order); an adjustment equal to its centre (1, or 0 for hue)
     * at both ends is skipped and draws nothing, as torchvision's None. */
    double jitter[4][2];
} feed_augment_step;

typedef struct feed_augment {
    uint32_t num_steps; /* 0: no augmentation */
    feed_augment_step steps[FEED_AUGMENT_MAX_STEPS];
} feed_augment;

/*
 * Parse a description: steps separated by ';', each Name(key=value, ...) with
 * torchvision's names and defaults, tuples as (a, b); or the preset
 * "torchvision-v2-recipe" (TrivialAugmentWide(interpolation=bilinear);
 * RandomErasing(p=0.1), as torchvision's reference recipe builds them).
 * interpolation is nearest (the default) or bilinear.
 * RandomErasing's `value` is torchvision's (after Normalize with ImageNet's
 * mean and std, default 0) and becomes the uint8 pixel nearest to it; `fill`
 * (0..255, one or three) gives the pixel directly. ColorJitter(brightness,
 * contrast, saturation, hue) takes a number x (brightness, contrast,
 * saturation: [max(0, 1 - x), 1 + x], x <= 100; hue: [-x, x], x <= 0.5) or a
 * pair (min, max) as torchvision does. "" or NULL: no steps.
 * Returns 0, or FEED_EINVAL with msg naming the step and parameter
 * ("augment: RandomErasing.p must be in [0, 1]").
 */
int feed_augment_parse(const char *text, feed_augment *out, char *msg, size_t msg_cap);

#ifdef __cplusplus
}
#endif
#endif
