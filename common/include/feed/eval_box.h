/*
 * The exact source box of the eval transform, for the engine: a project
 * header, neither installed with libfeedclient nor exported by it (the public
 * plan, feed_plan_sample in feed/transform.h, gives the box rounded to whole
 * pixels). Pure; any thread.
 */
#ifndef FEED_EVAL_BOX_H
#define FEED_EVAL_BOX_H

#include <stdint.h>

#include "feed/transform.h"

/*
 * Eval: the exact source box {x0, y0, x1, y1} (fractional, inside the image)
 * that torchvision's Resize(resize_size) + CenterCrop(out_h, out_w) maps onto
 * the output; feed_plan_sample's crop is this box rounded to whole pixels.
 * torchvision resizes the whole image and then crops, so the pixels just
 * outside the box count too: the engine resizes from this box with them.
 */
void feed_plan_eval_box(const feed_transform *t, uint32_t img_w, uint32_t img_h, double box[4]);

#endif
