/*
 * Unit tests of the engine's crop and resize unit (server/engine/crop.c): the
 * DCT scale the fast path picks, the plan's box mapped onto a scaled image,
 * and the row pipeline (identity, flip, rows arriving one at a time).
 * Single-threaded; no JPEG involved.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "feed/transform.h"

static void pick_denom_covers_output(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    feed_crop_box big = {.x = 0, .y = 0, .w = 2000, .h = 1800};
    feed_crop_box mid = {.x = 0, .y = 0, .w = 500, .h = 460};
    feed_crop_box small = {.x = 0, .y = 0, .w = 100, .h = 300};
    assert_int_equal(engine_pick_denom(&big, &t), 8);
    assert_int_equal(engine_pick_denom(&mid, &t), 2);
    assert_int_equal(engine_pick_denom(&small, &t), 1);
}

static void map_window_scales_train_box(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    feed_sample_plan plan = {.crop = {.x = 10, .y = 20, .w = 100, .h = 50}, .flip = false};
    engine_window w;
    engine_map_window(&t, 400, 300, &plan, 0.5, 200, 150, &w);
    assert_true(w.bx0 == 5.0 && w.bx1 == 55.0 && w.by0 == 10.0 && w.by1 == 35.0);
    assert_int_equal(w.c0, 5);
    assert_int_equal(w.c1, 55);
    assert_int_equal(w.r0, 10);
    assert_int_equal(w.r1, 35);
}

/* Eval's box reaches past itself by the filter's support, clipped to the image. */
static void map_window_eval_reach_clipped(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_eval(&t);
    feed_sample_plan plan = {0};
    engine_window w;
    engine_map_window(&t, 256, 256, &plan, 1.0, 256, 256, &w);
    assert_true(w.c0 < (uint32_t)w.bx0 && w.c1 > (uint32_t)w.bx1);
    assert_true(w.c1 <= 256 && w.r1 <= 256);
}

/* Push an RGBX image through the pipeline at size out x out from a box of the same size. */
static void run_pipeline(feed_engine *e, const uint8_t *rgbx, uint32_t n, bool flip, uint8_t *out)
{
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = t.out_w = n;
    engine_window w = {.bx0 = 0, .bx1 = n, .by0 = 0, .by1 = n, .c0 = 0, .c1 = n, .r0 = 0, .r1 = n};
    assert_int_equal(engine_plan_axes(e, &t, &w, flip), 0);
    engine_pipeline p;
    assert_int_equal(engine_pipeline_init(&p, e, out), 0);
    size_t stride = ((size_t)n + FEED_RESIZE_HSLACK(&e->hx)) * 4;
    uint8_t *row = calloc(stride, 1);
    assert_non_null(row);
    for (uint32_t y = 0; y < n; y++) {
        memcpy(row, rgbx + (size_t)y * n * 4, (size_t)n * 4);
        engine_pipeline_push(&p, row);
    }
    assert_int_equal(p.next_y, n);
    free(row);
}

static void pipeline_identity_and_flip(void **state)
{
    (void)state;
    enum { N = 16 };
    uint8_t rgbx[N * N * 4], out[N * N * 3], flipped[N * N * 3];
    for (size_t i = 0; i < sizeof rgbx; i++)
        rgbx[i] = (uint8_t)(i * 37 + 11);
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    run_pipeline(e, rgbx, N, false, out);
    run_pipeline(e, rgbx, N, true, flipped);
    for (uint32_t y = 0; y < N; y++)
        for (uint32_t x = 0; x < N; x++)
            for (int c = 0; c < 3; c++) {
                uint8_t src = rgbx[((size_t)y * N + x) * 4 + (size_t)c];
                assert_int_equal(out[((size_t)y * N + x) * 3 + (size_t)c], src);
                assert_int_equal(flipped[((size_t)y * N + (N - 1 - x)) * 3 + (size_t)c], src);
            }
    feed_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pick_denom_covers_output),
        cmocka_unit_test(map_window_scales_train_box),
        cmocka_unit_test(map_window_eval_reach_clipped),
        cmocka_unit_test(pipeline_identity_and_flip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
