/*
 * The engine's crop and resize (see engine.h): where the plan's box lands on
 * a decoded (maybe DCT-scaled) image, which DCT scale the fast path can
 * decode at, and the two-pass resize pipeline that turns source rows into
 * output rows as they arrive, straight into the caller's buffer (flip folded
 * into the horizontal pass). Runs on the engine's worker thread.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "feed/eval_box.h"

/*
 * The source box the output is resized from: train's crop (torchvision crops,
 * then resizes, so nothing outside the crop counts) or eval's exact
 * fractional box (torchvision resizes the whole image, then crops, so the
 * pixels just outside the box count too). Returns whether they do.
 */
bool engine_source_box(const feed_transform *t, uint32_t w, uint32_t h,
                       const feed_sample_plan *plan, double box[4])
{
    bool eval = t->mode == FEED_TRANSFORM_EVAL;
    if (eval) {
        feed_plan_eval_box(t, w, h, box);
    } else {
        box[0] = plan->crop.x;
        box[1] = plan->crop.y;
        box[2] = (double)plan->crop.x + plan->crop.w;
        box[3] = (double)plan->crop.y + plan->crop.h;
    }
    return eval;
}

/* How far past a box of `len` input pixels resized to `out` the filter reaches (plus one). */
double engine_filter_reach(double len, uint32_t out)
{
    return fmax(1.0, len / out) + 1.0;
}

/* DCT scale denominator: 8, 4, 2 or 1, the largest whose scaled crop still covers the output. */
unsigned engine_pick_denom(const feed_crop_box *c, const feed_transform *t)
{
    for (unsigned denom = 8; denom > 1; denom /= 2)
        if (c->w >= (uint64_t)t->out_w * denom && c->h >= (uint64_t)t->out_h * denom)
            return denom;
    return 1;
}

void engine_map_window(const feed_transform *t, uint32_t src_w, uint32_t src_h,
                       const feed_sample_plan *plan, double scale, uint32_t avail_w,
                       uint32_t avail_h, engine_window *w)
{
    double box[4];
    bool reach = engine_source_box(t, src_w, src_h, plan, box);
    w->bx0 = box[0] * scale;
    w->bx1 = fmin(box[2] * scale, (double)avail_w);
    w->by0 = box[1] * scale;
    w->by1 = fmin(box[3] * scale, (double)avail_h);
    double mx = reach ? engine_filter_reach(w->bx1 - w->bx0, t->out_w) : 0.0;
    double my = reach ? engine_filter_reach(w->by1 - w->by0, t->out_h) : 0.0;
    w->c0 = (uint32_t)fmax(floor(w->bx0 - mx), 0.0);
    w->c1 = (uint32_t)fmin(ceil(w->bx1 + mx), (double)avail_w);
    w->r0 = (uint32_t)fmax(floor(w->by0 - my), 0.0);
    w->r1 = (uint32_t)fmin(ceil(w->by1 + my), (double)avail_h);
}

/* Plan both resize axes from a window. 0 or FEED_ENOMEM. */
int engine_plan_axes(feed_engine *e, const feed_transform *t, const engine_window *w, bool flip)
{
    if (feed_resize_axis_plan(&e->hx, w->bx0 - w->c0, w->bx1 - w->c0, w->c1 - w->c0, t->out_w,
                              flip) ||
        feed_resize_axis_plan(&e->vy, w->by0 - w->r0, w->by1 - w->r0, w->r1 - w->r0, t->out_h,
                              false))
        return FEED_ENOMEM;
    return 0;
}

/* ---- the resize pipeline --------------------------------------------------------------- */

/* Needs e->hx and e->vy planned. */
int engine_pipeline_init(engine_pipeline *p, feed_engine *e, uint8_t *out)
{
    p->e = e;
    p->out = out;
    p->out_stride = (size_t)e->hx.out * 3;
    p->ring_stride = (p->out_stride + 4 + 63) & ~(size_t)63;
    /* A window of taps rows plus the row being written never collide: see
     * pipeline_push. */
    p->ring_rows = e->vy.taps + 1;
    p->pushed = 0;
    p->next_y = 0;
    if (engine_grow(&e->ring, &e->ring_cap, p->ring_stride * p->ring_rows))
        return FEED_ENOMEM;
    if (e->vy.taps > e->vrows_cap) {
        const uint8_t **v = realloc(e->vrows, e->vy.taps * sizeof *v);
        if (!v)
            return FEED_ENOMEM;
        e->vrows = v;
        e->vrows_cap = e->vy.taps;
    }
    return 0;
}

/*
 * One source row (RGBX, readable for hx.in_size + FEED_RESIZE_HSLACK pixels) in; every
 * output row whose window is now complete out. Row r goes to ring slot
 * r % ring_rows; the oldest row a pending output still needs is at least
 * r + 1 - taps, so with ring_rows > taps nothing needed is overwritten.
 */
void engine_pipeline_push(engine_pipeline *p, const uint8_t *src)
{
    feed_engine *e = p->e;
    uint8_t *slot = e->ring + (size_t)(p->pushed % p->ring_rows) * p->ring_stride;
    feed_resize_hrow(&e->hx, src, slot);
    p->pushed++;
    const feed_resize_axis *vy = &e->vy;
    while (p->next_y < vy->out &&
           (uint32_t)(vy->start[p->next_y] + vy->count[p->next_y]) <= p->pushed) {
        uint32_t y = p->next_y;
        int n = vy->count[y];
        for (int k = 0; k < n; k++)
            e->vrows[k] =
                e->ring +
                (size_t)(((uint32_t)vy->start[y] + (uint32_t)k) % p->ring_rows) * p->ring_stride;
        feed_resize_vrow(e->vrows, vy->w + (size_t)y * vy->taps, n, p->out + y * p->out_stride,
                         p->out_stride);
        p->next_y++;
    }
}
