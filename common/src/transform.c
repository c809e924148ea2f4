/*
 * Transform specs and per-sample plans (see feed/transform.h). Pure functions
 * of their arguments: no state, any thread.
 *
 * Order of random draws for one train sample, all from the stream
 * feed_rng_init(seed, epoch, sample_index):
 *   for each of at most 10 attempts:
 *     1. u_area = feed_rng_uniform();
 *        area fraction = scale_min + (scale_max - scale_min) * u_area
 *     2. u_ratio = feed_rng_uniform();
 *        log ratio = log(ratio_min) + (log(ratio_max) - log(ratio_min)) * u_ratio
 *     if the box fits (0 < w <= img_w and 0 < h <= img_h):
 *     3. y = feed_rng_below(img_h - h + 1)
 *     4. x = feed_rng_below(img_w - w + 1)
 *        and stop attempting;
 *   (no draws for the centre-crop fallback)
 *   5. u_flip = feed_rng_uniform(); flip = u_flip < flip_prob. Drawn right
 *      after the crop's draws, whichever way the crop was found.
 * Eval makes no draws and never flips.
 *
 * This is torchvision's RandomResizedCrop.get_params step for step: w and h
 * use Python's round() (half to even, here rint() in the default rounding
 * mode), y is drawn before x as torchvision draws i before j, and the
 * fallback clamps the whole image's ratio into [ratio_min, ratio_max]. One
 * difference: torchvision's draws pass through float32 tensors; ours stay in
 * double, so the distributions are the same while a rare draw near a
 * rounding edge can give a box one pixel different for the same u.
 */
#include "feed/transform.h"

#include <math.h>
#include <stdio.h>

#include "feed/errors.h"
#include "feed/eval_box.h"
#include "feed/rng.h"

#define RRC_ATTEMPTS 10
/* Ratios and eval sizes beyond these are certainly mistakes. */
#define RATIO_LIMIT 100.0
#define RESIZE_SIZE_MAX 65536u

void feed_transform_default_train(feed_transform *t)
{
    t->mode = FEED_TRANSFORM_TRAIN;
    t->out_h = 224;
    t->out_w = 224;
    t->scale_min = 0.08;
    t->scale_max = 1.0;
    t->ratio_min = 3.0 / 4.0;
    t->ratio_max = 4.0 / 3.0;
    t->flip_prob = 0.5;
    t->resize_size = 256;
}

void feed_transform_default_eval(feed_transform *t)
{
    feed_transform_default_train(t);
    t->mode = FEED_TRANSFORM_EVAL;
    t->flip_prob = 0.0;
}

static int fail(char *msg, size_t cap, const char *text)
{
    if (cap > 0)
        snprintf(msg, cap, "%s", text);
    return FEED_EINVAL;
}

int feed_transform_validate(const feed_transform *t, char *msg, size_t msg_cap)
{
    if (msg_cap > 0)
        msg[0] = '\0';
    if (!t)
        return fail(msg, msg_cap, "transform is NULL");
    if (t->mode != FEED_TRANSFORM_TRAIN && t->mode != FEED_TRANSFORM_EVAL)
        return fail(msg, msg_cap, "transform.mode must be train (0) or eval (1)");
    if (t->out_h < FEED_TRANSFORM_MIN_SIDE || t->out_h > FEED_TRANSFORM_MAX_SIDE)
        return fail(msg, msg_cap, "transform.out_height must be in [8, 2048]");
    if (t->out_w < FEED_TRANSFORM_MIN_SIDE || t->out_w > FEED_TRANSFORM_MAX_SIDE)
        return fail(msg, msg_cap, "transform.out_width must be in [8, 2048]");
    if (t->mode == FEED_TRANSFORM_EVAL) {
        /* The shorter side after the resize must hold the centre crop. */
        uint32_t need = t->out_h > t->out_w ? t->out_h : t->out_w;
        if (t->resize_size < need || t->resize_size > RESIZE_SIZE_MAX)
            return fail(msg, msg_cap,
                        "transform.resize_size must be in [max(out_height, out_width), 65536]");
        return 0;
    }
    /* The negated comparisons also catch NaN. */
    if (!(t->scale_min > 0.0 && t->scale_min <= 1.0))
        return fail(msg, msg_cap, "transform.scale_min must be in (0, 1]");
    if (!(t->scale_max >= t->scale_min && t->scale_max <= 1.0))
        return fail(msg, msg_cap, "transform.scale_max must be in [scale_min, 1]");
    if (!(t->ratio_min >= 1.0 / RATIO_LIMIT && t->ratio_min <= RATIO_LIMIT))
        return fail(msg, msg_cap, "transform.ratio_min must be in [0.01, 100]");
    if (!(t->ratio_max >= t->ratio_min && t->ratio_max <= RATIO_LIMIT))
        return fail(msg, msg_cap, "transform.ratio_max must be in [ratio_min, 100]");
    if (!(t->flip_prob >= 0.0 && t->flip_prob <= 1.0))
        return fail(msg, msg_cap, "transform.flip_prob must be in [0, 1]");
    return 0;
}

static void plan_train(const feed_transform *t, uint32_t img_w, uint32_t img_h, feed_rng *rng,
                       feed_crop_box *box)
{
    double area = (double)img_w * (double)img_h;
    double log_rmin = log(t->ratio_min), log_rmax = log(t->ratio_max);
    for (int attempt = 0; attempt < RRC_ATTEMPTS; attempt++) {
        double target_area =
            area * (t->scale_min + (t->scale_max - t->scale_min) * feed_rng_uniform(rng));
        double aspect = exp(log_rmin + (log_rmax - log_rmin) * feed_rng_uniform(rng));
        double wf = rint(sqrt(target_area * aspect));
        double hf = rint(sqrt(target_area / aspect));
        if (wf > 0.0 && wf <= (double)img_w && hf > 0.0 && hf <= (double)img_h) {
            uint32_t w = (uint32_t)wf, h = (uint32_t)hf;
            box->y = (uint32_t)feed_rng_below(rng, (uint64_t)(img_h - h) + 1);
            box->x = (uint32_t)feed_rng_below(rng, (uint64_t)(img_w - w) + 1);
            box->w = w;
            box->h = h;
            return;
        }
    }
    /* Centre-crop fallback with the ratio clamped into range. */
    double in_ratio = (double)img_w / (double)img_h;
    double wf = img_w, hf = img_h;
    if (in_ratio < t->ratio_min)
        hf = rint((double)img_w / t->ratio_min);
    else if (in_ratio > t->ratio_max)
        wf = rint((double)img_h * t->ratio_max);
    /* Rounding cannot push past the image, but keep the box inside regardless. */
    uint32_t w = wf < 1.0 ? 1u : wf > img_w ? img_w : (uint32_t)wf;
    uint32_t h = hf < 1.0 ? 1u : hf > img_h ? img_h : (uint32_t)hf;
    box->w = w;
    box->h = h;
    box->x = (img_w - w) / 2;
    box->y = (img_h - h) / 2;
}

/*
 * torchvision Resize(resize_size) then CenterCrop(out_h, out_w), as the box
 * of source pixels that the centre crop covers. Resize sets the shorter side
 * to resize_size and the longer to int(resize_size * long / short); the crop's
 * corner is int(round((resized - crop) / 2)). Edges map back to the source by
 * each axis's own scale, exactly (fractional).
 */
void feed_plan_eval_box(const feed_transform *t, uint32_t img_w, uint32_t img_h, double box[4])
{
    double rw, rh;
    if (img_w <= img_h) {
        rw = t->resize_size;
        rh = floor((double)t->resize_size * img_h / img_w);
    } else {
        rh = t->resize_size;
        rw = floor((double)t->resize_size * img_w / img_h);
    }
    double left = rint((rw - t->out_w) / 2.0), top = rint((rh - t->out_h) / 2.0);
    double sx = img_w / rw, sy = img_h / rh;
    box[0] = fmax(left * sx, 0.0);
    box[1] = fmax(top * sy, 0.0);
    box[2] = fmin((left + t->out_w) * sx, (double)img_w);
    box[3] = fmin((top + t->out_h) * sy, (double)img_h);
}

/* The eval box rounded to whole pixels, at least one a side, inside the image. */
static void plan_eval(const feed_transform *t, uint32_t img_w, uint32_t img_h, feed_crop_box *box)
{
    double b[4];
    feed_plan_eval_box(t, img_w, img_h, b);
    double x0 = rint(b[0]), x1 = rint(b[2]);
    double y0 = rint(b[1]), y1 = rint(b[3]);
    if (x0 > img_w - 1)
        x0 = img_w - 1;
    if (y0 > img_h - 1)
        y0 = img_h - 1;
    if (x1 < x0 + 1)
        x1 = x0 + 1;
    if (y1 < y0 + 1)
        y1 = y0 + 1;
    box->x = (uint32_t)x0;
    box->y = (uint32_t)y0;
    box->w = (uint32_t)(x1 - x0);
    box->h = (uint32_t)(y1 - y0);
}

void feed_plan_sample(const feed_transform *t, uint32_t img_w, uint32_t img_h, uint64_t seed,
                      uint32_t epoch, uint64_t sample_index, feed_sample_plan *out)
{
    if (img_w == 0)
        img_w = 1;
    if (img_h == 0)
        img_h = 1;
    if (t->mode == FEED_TRANSFORM_EVAL) {
        plan_eval(t, img_w, img_h, &out->crop);
        out->flip = false;
        return;
    }
    feed_rng rng;
    feed_rng_init(&rng, seed, epoch, sample_index);
    plan_train(t, img_w, img_h, &rng, &out->crop);
    out->flip = feed_rng_uniform(&rng) < t->flip_prob;
}
