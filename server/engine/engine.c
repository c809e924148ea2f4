/*
 * The engine's sample assembly (see engine.h): one sample's run from JPEG
 * bytes (or a decoded image) into its slot of the caller's batch buffer,
 * joining decode.c's decoder to crop.c's resize pipeline, the full-decode
 * reference, and feed_engine_augment (augment.h's steps on the finished
 * sample, with the engine's scratch). Runs on the engine's worker thread.
 *
 * Fast path, in order:
 *   1. cheap checks on the bytes (empty, size limit, SOI);
 *   2. jpeg_read_header; declared size checked against the limits, and a
 *      multi-scan (progressive) image's coefficient buffer estimated and
 *      capped — all before libjpeg allocates anything sized by the image;
 *   3. the plan (crop box, flip) from the header's size;
 *   4. the smallest DCT scale 1/8, 1/4, 1/2 or 1 at which the scaled crop
 *      still covers the output in both dimensions;
 *   5. jpeg_crop_scanline to the crop's columns (libjpeg widens the window
 *      left to an iMCU boundary; the extra columns are skipped in our rows),
 *      jpeg_skip_scanlines to the crop's first row, jpeg_read_scanlines for
 *      the crop's rows only, then jpeg_abort_decompress: rows below the crop
 *      are never decoded;
 *   6. each decoded RGBX row goes through the horizontal pass (flip folded
 *      in) into a small ring of RGB rows; each output row is made by the
 *      vertical pass as soon as its rows are in the ring, straight into the
 *      caller's buffer.
 *
 * Cost: on ImageNet-sized JPEGs about 70% of a fast-path run is libjpeg's
 * Huffman decoding (decode_mcu), which no crop avoids: every row above the
 * crop's last one must be entropy-decoded, all columns of it. Only rows
 * below the crop, and the IDCT, colour conversion and resize of everything
 * outside the crop, are saved. See bench/results/preproc.md.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "feed/timeutil.h"

/* Decode, crop, resize, flip: the body of feed_engine_run, under its setjmp. */
static feed_sample_status run_fast(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, uint64_t seed, uint32_t epoch,
                                   uint64_t sample_index, uint8_t *out, size_t out_bytes,
                                   feed_stage_times *times)
{
    struct jpeg_decompress_struct *d = &e->dec;
    uint64_t t_start = feed_now_ns(), resize_ns = 0;
    bool cmyk;

    if (engine_read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return engine_fail_now(e, out, out_bytes, times);

    feed_sample_plan plan;
    feed_plan_sample(t, d->image_width, d->image_height, seed, epoch, sample_index, &plan);
    unsigned denom = engine_pick_denom(&plan.crop, t);
    d->scale_num = 1;
    d->scale_denom = denom;
    jpeg_start_decompress(d);
    e->status = engine_check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return engine_fail_now(e, out, out_bytes, times);

    engine_window win;
    engine_map_window(t, d->image_width, d->image_height, &plan, 1.0 / denom, d->output_width,
                      d->output_height, &win);
    uint32_t c0 = win.c0, c1 = win.c1, r0 = win.r0, r1 = win.r1;

    JDIMENSION xoff = c0, cw = c1 - c0;
    jpeg_crop_scanline(d, &xoff, &cw);
    uint32_t inner = c0 - xoff; /* crop_scanline moved the left edge to an iMCU boundary */

    if (engine_plan_axes(e, t, &win, plan.flip))
        goto nomem;
    size_t row_stride = (((size_t)cw + FEED_RESIZE_HSLACK(&e->hx)) * 4 + 63) & ~(size_t)63;
    if (engine_grow(&e->rows, &e->rows_cap, row_stride * BATCH_ROWS + 64 + ROW_SKEW))
        goto nomem;
    uint8_t *first = skewed(e->rows);
    for (int i = 0; i < BATCH_ROWS; i++)
        e->rowptr[i] = first + (size_t)i * row_stride;
    engine_pipeline pipe;
    if (engine_pipeline_init(&pipe, e, out))
        goto nomem;

    if (r0 > 0 && jpeg_skip_scanlines(d, r0) != r0) {
        e->status = FEED_SAMPLE_CORRUPT;
        engine_set_msg(e, e->status, "could not skip to row %u", r0);
        return engine_fail_now(e, out, out_bytes, times);
    }
    uint32_t need = r1 - r0;
    for (uint32_t done = 0; done < need;) {
        uint32_t want = need - done < BATCH_ROWS ? need - done : BATCH_ROWS;
        uint32_t got = 0;
        while (got < want) {
            JDIMENSION n = jpeg_read_scanlines(d, &e->rowptr[got], want - got);
            if (n == 0) {
                e->status = FEED_SAMPLE_CORRUPT;
                engine_set_msg(e, e->status, "decoder stopped at row %u", r0 + done + got);
                return engine_fail_now(e, out, out_bytes, times);
            }
            got += n;
        }
        uint64_t t0 = feed_now_ns();
        for (uint32_t i = 0; i < got; i++) {
            if (cmyk)
                engine_cmyk_to_rgbx(e->rowptr[i], cw, d->saw_Adobe_marker);
            engine_pipeline_push(&pipe, e->rowptr[i] + (size_t)inner * 4);
        }
        resize_ns += feed_now_ns() - t0;
        done += got;
    }
    if (d->output_scanline < d->output_height && !jpeg_has_multiple_scans(d) &&
        !engine_eoi_follows(d)) {
        e->status = FEED_SAMPLE_TRUNCATED;
        engine_set_msg(e, e->status, "no EOI marker after the scan data");
        return engine_fail_now(e, out, out_bytes, times);
    }
    jpeg_abort_decompress(d);
    if (times) {
        uint64_t total = feed_now_ns() - t_start;
        times->resize_ns = resize_ns;
        times->decode_ns = total > resize_ns ? total - resize_ns : 0;
    }
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    engine_set_msg(e, e->status, "out of memory for scratch buffers");
    return engine_fail_now(e, out, out_bytes, times);
}

/* Zero-fill the output of a run refused before decoding, when its size is known. */
static void zero_refused(const feed_transform *t, uint8_t *out)
{
    if (out && t && t->out_h >= FEED_TRANSFORM_MIN_SIDE && t->out_h <= FEED_TRANSFORM_MAX_SIDE &&
        t->out_w >= FEED_TRANSFORM_MIN_SIDE && t->out_w <= FEED_TRANSFORM_MAX_SIDE)
        memset(out, 0, (size_t)t->out_h * t->out_w * 3);
}

feed_sample_status feed_engine_run(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, uint64_t seed, uint32_t epoch,
                                   uint64_t sample_index, uint8_t *out, feed_stage_times *times)
{
    e->msg[0] = '\0';
    if (times)
        times->decode_ns = times->resize_ns = 0;
    e->status = engine_precheck(e, jpeg, len, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    size_t out_bytes = (size_t)t->out_h * t->out_w * 3;
    if (setjmp(e->err.jump))
        return engine_fail_now(e, out, out_bytes, times);
    return run_fast(e, jpeg, len, t, seed, epoch, sample_index, out, out_bytes, times);
}

/* RGB to RGBX, n pixels (the horizontal pass reads 4 bytes a pixel). */
static void rgb_to_rgbx(const uint8_t *src, uint32_t n, uint8_t *dst)
{
    for (uint32_t i = 0; i < n; i++) {
        dst[4 * (size_t)i] = src[3 * (size_t)i];
        dst[4 * (size_t)i + 1] = src[3 * (size_t)i + 1];
        dst[4 * (size_t)i + 2] = src[3 * (size_t)i + 2];
        dst[4 * (size_t)i + 3] = 0;
    }
}

feed_sample_status feed_engine_run_decoded(feed_engine *e, const feed_decoded *img,
                                           const feed_transform *t, uint64_t seed, uint32_t epoch,
                                           uint64_t sample_index, uint8_t *out,
                                           feed_stage_times *times)
{
    uint64_t t_start = feed_now_ns();
    e->msg[0] = '\0';
    if (times)
        times->decode_ns = times->resize_ns = 0;
    e->status = engine_precheck_transform(e, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    feed_sample_plan plan;
    feed_plan_sample(t, img->src_width, img->src_height, seed, epoch, sample_index, &plan);
    engine_window win;
    engine_map_window(t, img->src_width, img->src_height, &plan, img->scale_num / 8.0, img->width,
                      img->height, &win);
    uint32_t cw = win.c1 - win.c0;
    engine_pipeline pipe;
    if (engine_plan_axes(e, t, &win, plan.flip) ||
        engine_grow(&e->rows, &e->rows_cap, ((size_t)cw + FEED_RESIZE_HSLACK(&e->hx)) * 4) ||
        engine_pipeline_init(&pipe, e, out)) {
        e->status = FEED_SAMPLE_TOO_LARGE;
        engine_set_msg(e, e->status, "out of memory for scratch buffers");
        memset(out, 0, (size_t)t->out_h * t->out_w * 3);
        return e->status;
    }
    size_t stride = (size_t)img->width * 3;
    const uint8_t *src = img->pixels + (size_t)win.c0 * 3;
    for (uint32_t y = win.r0; y < win.r1; y++) {
        rgb_to_rgbx(src + (size_t)y * stride, cw, e->rows);
        engine_pipeline_push(&pipe, e->rows);
    }
    if (times)
        times->resize_ns = feed_now_ns() - t_start;
    return FEED_SAMPLE_OK;
}

/* ---- the reference --------------------------------------------------------------------- */

static feed_sample_status run_reference(feed_engine *e, const uint8_t *jpeg, size_t len,
                                        const feed_transform *t, uint64_t seed, uint32_t epoch,
                                        uint64_t sample_index, uint8_t *out, size_t out_bytes)
{
    struct jpeg_decompress_struct *d = &e->dec;
    bool cmyk;
    if (engine_read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return engine_fail_now(e, out, out_bytes, NULL);
    feed_sample_plan plan;
    feed_plan_sample(t, d->image_width, d->image_height, seed, epoch, sample_index, &plan);
    jpeg_start_decompress(d);
    e->status = engine_check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return engine_fail_now(e, out, out_bytes, NULL);
    uint32_t w = d->output_width, h = d->output_height;

    double box[4];
    bool reach = engine_source_box(t, w, h, &plan, box);
    double mx = reach ? engine_filter_reach(box[2] - box[0], t->out_w) : 0.0;
    double my = reach ? engine_filter_reach(box[3] - box[1], t->out_h) : 0.0;
    uint32_t x0 = (uint32_t)fmax(floor(box[0] - mx), 0.0);
    uint32_t x1 = (uint32_t)fmin(ceil(box[2] + mx), (double)w);
    uint32_t y0 = (uint32_t)fmax(floor(box[1] - my), 0.0);
    uint32_t y1 = (uint32_t)fmin(ceil(box[3] + my), (double)h);
    if (feed_resize_axis_plan(&e->hx, box[0] - x0, box[2] - x0, x1 - x0, t->out_w, plan.flip) ||
        feed_resize_axis_plan(&e->vy, box[1] - y0, box[3] - y0, y1 - y0, t->out_h, false))
        goto nomem;
    size_t stride = ((size_t)w + FEED_RESIZE_HSLACK(&e->hx)) * 4;
    stride = (stride + 63) & ~(size_t)63;
    e->ref_full = calloc((size_t)h * stride + 64 + ROW_SKEW, 1);
    if (!e->ref_full)
        goto nomem;
    uint8_t *full = skewed(e->ref_full);
    while (d->output_scanline < h) {
        JSAMPROW row = full + (size_t)d->output_scanline * stride;
        if (jpeg_read_scanlines(d, &row, 1) != 1) {
            e->status = FEED_SAMPLE_CORRUPT;
            engine_set_msg(e, e->status, "decoder stopped at row %u", d->output_scanline);
            return engine_fail_now(e, out, out_bytes, NULL);
        }
        if (cmyk)
            engine_cmyk_to_rgbx(row, w, d->saw_Adobe_marker);
    }
    jpeg_finish_decompress(d);

    engine_pipeline pipe;
    if (engine_pipeline_init(&pipe, e, out))
        goto nomem;
    for (uint32_t y = y0; y < y1; y++)
        engine_pipeline_push(&pipe, full + (size_t)y * stride + (size_t)x0 * 4);
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    engine_set_msg(e, e->status, "out of memory for the full-size image");
    return engine_fail_now(e, out, out_bytes, NULL);
}

feed_sample_status feed_engine_run_reference(feed_engine *e, const uint8_t *jpeg, size_t len,
                                             const feed_transform *t, uint64_t seed, uint32_t epoch,
                                             uint64_t sample_index, uint8_t *out)
{
    e->msg[0] = '\0';
    e->status = engine_precheck(e, jpeg, len, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    size_t out_bytes = (size_t)t->out_h * t->out_w * 3;
    feed_sample_status st;
    if (setjmp(e->err.jump))
        st = engine_fail_now(e, out, out_bytes, NULL);
    else
        st = run_reference(e, jpeg, len, t, seed, epoch, sample_index, out, out_bytes);
    free(e->ref_full);
    e->ref_full = NULL;
    return st;
}

feed_sample_status feed_engine_augment(feed_engine *e, const feed_augment *a, uint8_t *out,
                                       uint32_t out_h, uint32_t out_w, uint64_t seed,
                                       uint32_t epoch, uint64_t sample_index)
{
    size_t bytes = (size_t)out_h * out_w * 3;
    e->msg[0] = '\0';
    if (a->num_steps == 0)
        return FEED_SAMPLE_OK;
    if (engine_grow(&e->aug_tmp, &e->aug_tmp_cap, bytes)) {
        memset(out, 0, bytes);
        engine_set_msg(e, FEED_SAMPLE_TOO_LARGE, "out of memory for augmentation scratch");
        return FEED_SAMPLE_TOO_LARGE;
    }
    feed_aug_image img = {.px = out, .h = out_h, .w = out_w, .tmp = e->aug_tmp};
    feed_augment_apply(a, &img, seed, epoch, sample_index);
    return FEED_SAMPLE_OK;
}
