/*
 * Unit tests of the engine's augmentation units (server/engine/augment*.c):
 * the description's parser (defaults, the preset, refusals naming the
 * parameter), determinism of a sample's draws, every op on degenerate sizes
 * and at any magnitude without a crash, RandomErasing's fill, and
 * feed_engine_augment on a real decoded sample. Agreement with torchvision
 * itself is tests/python/test_augment.py's. Single-threaded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "engine.h"
#include "engine_testlib.h"
#include "feed/errors.h"
#include "feed/transform.h"

static void fill_pattern(uint8_t *px, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        px[i] = (uint8_t)((i * 131u + seed * 7u + (i >> 5) * 17u) & 0xFF);
}

static void preset_is_the_recipe(void **state)
{
    (void)state;
    feed_augment a;
    char msg[200];
    assert_int_equal(feed_augment_parse("  torchvision-v2-recipe ", &a, msg, sizeof msg), 0);
    assert_int_equal(a.num_steps, 2);
    assert_int_equal(a.steps[0].kind, FEED_AUGMENT_TRIVIAL_WIDE);
    assert_int_equal(a.steps[0].num_magnitude_bins, 31);
    assert_true(a.steps[0].bilinear); /* as the reference recipe's presets.py */
    assert_int_equal(a.steps[1].kind, FEED_AUGMENT_ERASING);
    assert_true(a.steps[1].p == 0.1);
    assert_true(a.steps[1].scale[0] == 0.02 && a.steps[1].scale[1] == 0.33);
    assert_true(a.steps[1].ratio[0] == 0.3 && a.steps[1].ratio[1] == 3.3);
    /* value=0 after ImageNet's Normalize: the mean, as the nearest pixel. */
    assert_int_equal(a.steps[1].fill[0], 124);
    assert_int_equal(a.steps[1].fill[1], 116);
    assert_int_equal(a.steps[1].fill[2], 104);
    assert_int_equal(feed_augment_parse("", &a, msg, sizeof msg), 0);
    assert_int_equal(a.num_steps, 0);
    assert_int_equal(feed_augment_parse(NULL, &a, msg, sizeof msg), 0);
    assert_int_equal(a.num_steps, 0);
}

static void parameters_parsed(void **state)
{
    (void)state;
    feed_augment a;
    char msg[200];
    assert_int_equal(feed_augment_parse("RandAugment(num_ops=3, magnitude=5, num_magnitude_bins="
                                        "11); RandomErasing(p=1, fill=(1, 2, 3), value=0.0);",
                                        &a, msg, sizeof msg),
                     0);
    assert_int_equal(a.num_steps, 2);
    assert_int_equal(a.steps[0].num_ops, 3);
    assert_int_equal(a.steps[0].magnitude, 5);
    assert_int_equal(a.steps[0].num_magnitude_bins, 11);
    /* Later parameters win: value=0 after fill. */
    assert_int_equal(a.steps[1].fill[0], 124);
    assert_int_equal(feed_augment_parse("RandomErasing(fill=7)", &a, msg, sizeof msg), 0);
    assert_int_equal(a.steps[0].fill[2], 7);
    /* ColorJitter as torchvision's _check_input: x -> [max(0, 1 - x), 1 + x], hue [-x, x]. */
    assert_int_equal(feed_augment_parse("ColorJitter(brightness=1.5, contrast=(0.2, 0.3), hue=0.1)",
                                        &a, msg, sizeof msg),
                     0);
    assert_true(a.steps[0].jitter[0][0] == 0.0 && a.steps[0].jitter[0][1] == 2.5);
    assert_true(a.steps[0].jitter[1][0] == 0.2 && a.steps[0].jitter[1][1] == 0.3);
    assert_true(a.steps[0].jitter[2][0] == 1.0 && a.steps[0].jitter[2][1] == 1.0);
    assert_true(a.steps[0].jitter[3][0] == -0.1 && a.steps[0].jitter[3][1] == 0.1);
}

static void refusals_name_the_parameter(void **state)
{
    (void)state;
    static const struct {
        const char *text, *needle;
    } cases[] = {
        {"RandomErasing(p=-0.1)", "augment: RandomErasing.p must be in [0, 1]"},
        {"RandomErasing(ratio=(0, 1))", "RandomErasing.ratio must be"},
        {"RandomErasing(scale=(0.1))", "RandomErasing.scale must be"},
        {"RandomErasing(fill=(1, 2))", "RandomErasing.fill must be one number or three"},
        {"RandomErasing(fill=(1, 2, 3, 4))", "RandomErasing.fill has more than 3 numbers"},
        {"RandomErasing(fill=256)", "RandomErasing.fill gives a pixel outside"},
        {"RandAugment(num_ops=17)", "RandAugment.num_ops must be a whole number in [0, 16]"},
        {"RandAugment(num_magnitude_bins=5)", "RandAugment.magnitude must be below"},
        {"TrivialAugmentWide(p=1)", "TrivialAugmentWide: unknown parameter 'p'"},
        {"TrivialAugmentWide(", "expected a parameter name"},
        {"TrivialAugmentWide(num_magnitude_bins 3)", "num_magnitude_bins: expected '='"},
        {"(", "expected an augmentation name"},
        {"trivialaugmentwide()", "unknown augmentation 'trivialaugmentwide'"},
        {"torchvision-v2-recipe; RandomErasing()", "unknown augmentation"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        feed_augment a;
        char msg[200];
        assert_int_equal(feed_augment_parse(cases[i].text, &a, msg, sizeof msg), FEED_EINVAL);
        assert_non_null(strstr(msg, cases[i].needle));
        assert_int_equal(a.num_steps, 0);
    }
}

/* Every prefix of a valid description, and every byte value in one spot: no crash. */
static void any_text_is_safe(void **state)
{
    (void)state;
    const char *good = "RandAugment(num_ops=2, magnitude=9); RandomErasing(p=0.25, "
                       "scale=(0.02, 0.33), ratio=[0.3, 3.3], fill=(1, 2, 3))";
    char buf[256], msg[8];
    feed_augment a;
    for (size_t n = 0; n <= strlen(good); n++) {
        memcpy(buf, good, n);
        buf[n] = '\0';
        (void)feed_augment_parse(buf, &a, msg, sizeof msg);
        assert_true(a.num_steps <= FEED_AUGMENT_MAX_STEPS);
        for (int c = 1; c < 256; c++) {
            if (n == strlen(good))
                break;
            memcpy(buf, good, strlen(good) + 1);
            buf[n] = (char)c;
            (void)feed_augment_parse(buf, &a, msg, sizeof msg);
        }
    }
    assert_int_equal(feed_augment_parse(good, &a, NULL, 0), 0);
}

static void apply_is_deterministic_per_sample(void **state)
{
    (void)state;
    enum { H = 37, W = 41 };
    feed_augment a;
    char msg[200];
    assert_int_equal(
        feed_augment_parse("RandAugment(num_ops=4); TrivialAugmentWide(); AutoAugment(); "
                           "ColorJitter(brightness=0.4, hue=0.1); RandomErasing(p=0.5)",
                           &a, msg, sizeof msg),
        0);
    uint8_t orig[H * W * 3], x[H * W * 3], y[H * W * 3], tmp[H * W * 3];
    fill_pattern(orig, sizeof orig, 3);
    int differ = 0;
    for (uint64_t idx = 0; idx < 64; idx++) {
        memcpy(x, orig, sizeof x);
        memcpy(y, orig, sizeof y);
        feed_aug_image ix = {.px = x, .h = H, .w = W, .tmp = tmp};
        feed_aug_image iy = {.px = y, .h = H, .w = W, .tmp = tmp};
        feed_augment_apply(&a, &ix, 42, 3, idx);
        feed_augment_apply(&a, &iy, 42, 3, idx);
        assert_memory_equal(x, y, sizeof x);
        memcpy(y, orig, sizeof y);
        feed_augment_apply(&a, &iy, 42, 4, idx); /* another epoch */
        differ += memcmp(x, y, sizeof x) != 0;
    }
    assert_true(differ > 48);
}

static void ops_survive_any_size_and_magnitude(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 2}, {3, 3}, {5, 64}};
    static const double mags[] = {0.0,  -0.0,     1.0,       -1.0, 0.99, 255.0, -135.0, 1e6,
                                  -1e9, INFINITY, -INFINITY, NAN,  3.5,  8.0,   9.0,    -3.0};
    uint8_t px[5 * 64 * 3], tmp[5 * 64 * 3];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int op = 0; op <= FEED_AUG_NUM_OPS; op++)
            for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++) {
                fill_pattern(px, sizeof px, (unsigned)(op + m));
                feed_aug_image img = {.px = px, .h = sizes[s][0], .w = sizes[s][1], .tmp = tmp};
                feed_aug_apply_op((feed_aug_op)op, mags[m], &img);
                img.bilinear = true;
                feed_aug_apply_op((feed_aug_op)op, mags[m], &img);
                if (op < 4)
                    feed_aug_adjust((feed_aug_adjust_kind)op, mags[m], &img);
            }
    assert_null(feed_aug_op_name(FEED_AUG_NUM_OPS));
    assert_string_equal(feed_aug_op_name(FEED_AUG_SHEAR_X), "ShearX");
}

/* p=1 erases every sample; the box is filled with the fill and nothing else changes. */
static void erasing_fills_one_box(void **state)
{
    (void)state;
    enum { H = 50, W = 60 };
    feed_augment a;
    char msg[200];
    assert_int_equal(feed_augment_parse("RandomErasing(p=1, fill=(9, 8, 7))", &a, msg, sizeof msg),
                     0);
    uint8_t px[H * W * 3], tmp[H * W * 3];
    for (uint64_t idx = 0; idx < 32; idx++) {
        memset(px, 200, sizeof px);
        feed_aug_image img = {.px = px, .h = H, .w = W, .tmp = tmp};
        feed_augment_apply(&a, &img, 1, 0, idx);
        feed_rng rng;
        feed_rng_init(&rng, 1, 0, idx);
        rng.ctr[0] = FEED_AUGMENT_CTR;
        feed_aug_op ops[1];
        int bins[1], signs[1];
        uint32_t box[4];
        double factors[4];
        int n = feed_augment_draw(&a.steps[0], &rng, H, W, ops, bins, signs, box, factors);
        for (uint32_t y = 0; y < H; y++)
            for (uint32_t x = 0; x < W; x++) {
                bool in =
                    n && y >= box[0] && y < box[0] + box[2] && x >= box[1] && x < box[1] + box[3];
                const uint8_t *p = px + ((size_t)y * W + x) * 3;
                assert_int_equal(p[0], in ? 9 : 200);
                assert_int_equal(p[2], in ? 7 : 200);
            }
        if (n) {
            double area = (double)box[2] * box[3] / (H * W), ratio = (double)box[2] / box[3];
            assert_true(area >= 0.0 && area <= 0.34);
            assert_true(ratio >= 0.2 && ratio <= 4.0);
        }
    }
}

/* The engine's entry point on a real decoded sample: equals the policy on a copy. */
static void engine_augment_on_a_real_sample(void **state)
{
    (void)state;
    size_t len;
    uint8_t *jpg = read_data("good-420.jpg", &len);
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = t.out_w = 176;
    size_t bytes = (size_t)176 * 176 * 3;
    uint8_t *out = malloc(bytes), *want = malloc(bytes), *tmp = malloc(bytes);
    assert_true(out && want && tmp);
    feed_augment a;
    char msg[200];
    assert_int_equal(feed_augment_parse("torchvision-v2-recipe", &a, msg, sizeof msg), 0);
    for (uint64_t idx = 0; idx < 8; idx++) {
        assert_int_equal(feed_engine_run(e, jpg, len, &t, 5, 1, idx, out, NULL), FEED_SAMPLE_OK);
        memcpy(want, out, bytes);
        feed_aug_image img = {.px = want, .h = 176, .w = 176, .tmp = tmp};
        feed_augment_apply(&a, &img, 5, 1, idx);
        assert_int_equal(feed_engine_augment(e, &a, out, 176, 176, 5, 1, idx), FEED_SAMPLE_OK);
        assert_memory_equal(out, want, bytes);
    }
    free(out);
    free(want);
    free(tmp);
    free(jpg);
    feed_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(preset_is_the_recipe),
        cmocka_unit_test(parameters_parsed),
        cmocka_unit_test(refusals_name_the_parameter),
        cmocka_unit_test(any_text_is_safe),
        cmocka_unit_test(apply_is_deterministic_per_sample),
        cmocka_unit_test(ops_survive_any_size_and_magnitude),
        cmocka_unit_test(erasing_fills_one_box),
        cmocka_unit_test(engine_augment_on_a_real_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
