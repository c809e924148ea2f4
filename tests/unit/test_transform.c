/*
 * Unit tests for the transform plans: RandomResizedCrop against an
 * independent re-implementation of torchvision's get_params (same draws: the
 * same boxes; independent draws: the same distributions), the eval box,
 * validation messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "feed/errors.h"
#include "feed/eval_box.h"
#include "feed/rng.h"
#include "feed/transform.h"

/* ---- torchvision's RandomResizedCrop.get_params, written from its source ---------------- */

/* Python 3 round(): to nearest, ties to even. Written out, not rint(). */
static double py_round(double v)
{
    double f = floor(v), d = v - f;
    if (d > 0.5)
        return f + 1;
    if (d < 0.5)
        return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1;
}

typedef double (*uniform_fn)(void *state);
typedef uint64_t (*below_fn)(void *state, uint64_t n);

typedef struct tv_box {
    long i, j, h, w; /* torchvision's names: top, left, height, width */
    int fallback;
} tv_box;

/*
 *   for _ in range(10):
 *       target_area = area * uniform(scale[0], scale[1])
 *       aspect_ratio = exp(uniform(log(ratio[0]), log(ratio[1])))
 *       w = int(round(sqrt(target_area * aspect_ratio)))
 *       h = int(round(sqrt(target_area / aspect_ratio)))
 *       if 0 < w <= width and 0 < h <= height:
 *           i = randint(0, height - h + 1); j = randint(0, width - w + 1)
 *           return i, j, h, w
 *   in_ratio = width / height
 *   if in_ratio < min(ratio): w = width; h = int(round(w / min(ratio)))
 *   elif in_ratio > max(ratio): h = height; w = int(round(h * max(ratio)))
 *   else: w = width; h = height
 *   return (height - h) // 2, (width - w) // 2, h, w
 */
static tv_box tv_get_params(long width, long height, double smin, double smax, double rmin,
                            double rmax, uniform_fn uni, below_fn below, void *st)
{
    tv_box b = {0};
    double area = (double)height * (double)width;
    double lr0 = log(rmin), lr1 = log(rmax);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target_area = area * (smin + (smax - smin) * uni(st));
        double aspect = exp(lr0 + (lr1 - lr0) * uni(st));
        long w = (long)py_round(sqrt(target_area * aspect));
        long h = (long)py_round(sqrt(target_area / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            b.i = (long)below(st, (uint64_t)(height - h + 1));
            b.j = (long)below(st, (uint64_t)(width - w + 1));
            b.h = h;
            b.w = w;
            return b;
        }
    }
    double in_ratio = (double)width / (double)height;
    if (in_ratio < rmin) {
        b.w = width;
        b.h = (long)py_round(b.w / rmin);
    } else if (in_ratio > rmax) {
        b.h = height;
        b.w = (long)py_round(b.h * rmax);
    } else {
        b.w = width;
        b.h = height;
    }
    b.i = (height - b.h) / 2;
    b.j = (width - b.w) / 2;
    b.fallback = 1;
    return b;
}

static double rng_uni(void *st)
{
    return feed_rng_uniform(st);
}

static uint64_t rng_below(void *st, uint64_t n)
{
    return feed_rng_below(st, n);
}

/* An unrelated generator (splitmix64) for the distribution comparison. */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double sm_uni(void *st)
{
    return (double)(splitmix(st) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t sm_below(void *st, uint64_t n)
{
    return splitmix(st) % n; /* bias is irrelevant at these n */
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_defaults_validate(void **state)
{
    (void)state;
    feed_transform t;
    char msg[128];
    feed_transform_default_train(&t);
    assert_int_equal(t.out_h, 224);
    assert_int_equal(t.out_w, 224);
    assert_true(fabs(t.scale_min - 0.08) < 1e-12);
    assert_true(fabs(t.ratio_max - 4.0 / 3.0) < 1e-12);
    assert_true(fabs(t.flip_prob - 0.5) < 1e-12);
    assert_int_equal(feed_transform_validate(&t, msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    feed_transform_default_eval(&t);
    assert_int_equal(t.mode, FEED_TRANSFORM_EVAL);
    assert_int_equal(t.resize_size, 256);
    assert_int_equal(feed_transform_validate(&t, msg, sizeof msg), 0);
}

/* Each bad field is refused with a message that names it. */
static void test_validate_messages(void **state)
{
    (void)state;
    feed_transform t;
    char msg[128];

#define EXPECT_BAD(setup, field)                                                                   \
    do {                                                                                           \
        feed_transform_default_train(&t);                                                          \
        setup;                                                                                     \
        memset(msg, 'x', sizeof msg);                                                              \
        assert_int_equal(feed_transform_validate(&t, msg, sizeof msg), FEED_EINVAL);               \
        assert_non_null(strstr(msg, field));                                                       \
    } while (0)

    EXPECT_BAD(t.mode = (feed_transform_mode)7, "transform.mode");
    EXPECT_BAD(t.out_h = 4, "transform.out_height");
    EXPECT_BAD(t.out_w = 4096, "transform.out_width");
    EXPECT_BAD(t.scale_min = 0.0, "transform.scale_min must be in (0, 1]");
    EXPECT_BAD(t.scale_min = NAN, "transform.scale_min");
    EXPECT_BAD(t.scale_max = 1.5, "transform.scale_max");
    EXPECT_BAD((t.scale_min = 0.5, t.scale_max = 0.4), "transform.scale_max");
    EXPECT_BAD(t.ratio_min = -1.0, "transform.ratio_min");
    EXPECT_BAD((t.ratio_min = 2.0, t.ratio_max = 1.0), "transform.ratio_max");
    EXPECT_BAD(t.ratio_max = INFINITY, "transform.ratio_max");
    EXPECT_BAD(t.flip_prob = 1.01, "transform.flip_prob");
    EXPECT_BAD((t.mode = FEED_TRANSFORM_EVAL, t.resize_size = 100), "transform.resize_size");
#undef EXPECT_BAD

    /* msg is always terminated, even when short; NULL spec is refused. */
    feed_transform_default_train(&t);
    t.scale_min = 2.0;
    char small[8];
    assert_int_equal(feed_transform_validate(&t, small, sizeof small), FEED_EINVAL);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_int_equal(feed_transform_validate(NULL, msg, sizeof msg), FEED_EINVAL);
    assert_int_equal(feed_transform_validate(&t, NULL, 0), FEED_EINVAL);
    /* Eval ignores the train-only fields. */
    feed_transform_default_eval(&t);
    t.scale_min = -1;
    assert_int_equal(feed_transform_validate(&t, msg, sizeof msg), 0);
}

/* Same draws, same algorithm → the same box, for many images and keys. */
static void test_train_matches_torchvision_same_draws(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{500, 375}, {375, 500}, {224, 224}, {1, 1},     {7, 300},
                                        {300, 7},   {4000, 50}, {50, 4000}, {640, 480}, {2, 3}};
    feed_transform t;
    feed_transform_default_train(&t);
    int fallbacks = 0, flips = 0, n = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (uint64_t idx = 0; idx < 2000; idx++) {
            uint32_t w = sizes[s][0], h = sizes[s][1];
            feed_sample_plan plan;
            feed_plan_sample(&t, w, h, 42, 3, idx, &plan);
            feed_rng rng;
            feed_rng_init(&rng, 42, 3, idx);
            tv_box b = tv_get_params(w, h, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max,
                                     rng_uni, rng_below, &rng);
            bool flip = feed_rng_uniform(&rng) < t.flip_prob; /* drawn right after the crop */
            assert_int_equal(plan.crop.x, b.j);
            assert_int_equal(plan.crop.y, b.i);
            assert_int_equal(plan.crop.w, b.w);
            assert_int_equal(plan.crop.h, b.h);
            assert_int_equal(plan.flip, flip);
            assert_true(plan.crop.w >= 1 && plan.crop.h >= 1);
            assert_true(plan.crop.x + plan.crop.w <= w && plan.crop.y + plan.crop.h <= h);
            fallbacks += b.fallback;
            flips += flip;
            n++;
        }
    }
    assert_true(fallbacks > 0); /* the extreme shapes do fall back */
    assert_true(flips > n * 0.45 && flips < n * 0.55);
}

typedef struct moments {
    double area_mean, area_sd, lr_mean, lr_sd, fallback_rate;
} moments;

static moments measure(bool ours, uint32_t w, uint32_t h, int n)
{
    feed_transform t;
    feed_transform_default_train(&t);
    double sa = 0, saa = 0, sl = 0, sll = 0;
    int fb = 0;
    uint64_t sm = 12345;
    for (int k = 0; k < n; k++) {
        long bw, bh;
        int fallback;
        if (ours) {
            feed_sample_plan plan;
            feed_plan_sample(&t, w, h, 7, 0, (uint64_t)k, &plan);
            bw = plan.crop.w;
            bh = plan.crop.h;
            /* Replay the same stream to learn whether it fell back. */
            feed_rng rng;
            feed_rng_init(&rng, 7, 0, (uint64_t)k);
            fallback = tv_get_params(w, h, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max,
                                     rng_uni, rng_below, &rng)
                           .fallback;
        } else {
            tv_box b = tv_get_params(w, h, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max,
                                     sm_uni, sm_below, &sm);
            bw = b.w;
            bh = b.h;
            fallback = b.fallback;
        }
        double a = (double)bw * bh / ((double)w * h), lr = log((double)bw / bh);
        sa += a;
        saa += a * a;
        sl += lr;
        sll += lr * lr;
        fb += fallback;
    }
    moments m;
    m.area_mean = sa / n;
    m.area_sd = sqrt(saa / n - m.area_mean * m.area_mean);
    m.lr_mean = sl / n;
    m.lr_sd = sqrt(sll / n - m.lr_mean * m.lr_mean);
    m.fallback_rate = (double)fb / n;
    return m;
}

/*
 * Independent draws: the Philox-driven plans and the reference algorithm fed
 * by an unrelated generator agree in distribution. With n = 40000 the
 * standard error of a mean of a [0, 1] variable is under 0.0015, so 0.01 is
 * a > 6 sigma bound.
 */
static void test_train_distributions(void **state)
{
    (void)state;
    static const uint32_t sizes[][2] = {{500, 375}, {1000, 100}, {100, 1000}, {256, 256}};
    const int n = 40000;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        moments a = measure(true, sizes[s][0], sizes[s][1], n);
        moments b = measure(false, sizes[s][0], sizes[s][1], n);
        print_message("%ux%u: area %.4f/%.4f sd %.4f/%.4f logratio %.4f/%.4f sd %.4f/%.4f "
                      "fallback %.4f/%.4f\n",
                      sizes[s][0], sizes[s][1], a.area_mean, b.area_mean, a.area_sd, b.area_sd,
                      a.lr_mean, b.lr_mean, a.lr_sd, b.lr_sd, a.fallback_rate, b.fallback_rate);
        assert_true(fabs(a.area_mean - b.area_mean) < 0.01);
        assert_true(fabs(a.area_sd - b.area_sd) < 0.01);
        assert_true(fabs(a.lr_mean - b.lr_mean) < 0.01);
        assert_true(fabs(a.lr_sd - b.lr_sd) < 0.01);
        assert_true(fabs(a.fallback_rate - b.fallback_rate) < 0.01);
    }
    /* A 4:3 image hardly ever falls back; a 10:1 one mostly does. Both
     * numbers come from the algorithm, not from this implementation. */
    moments wide = measure(true, 1000, 100, n), usual = measure(true, 500, 375, n);
    assert_true(usual.fallback_rate < 0.01);
    assert_true(wide.fallback_rate > 0.5);
    /* Analytic check on a square image: (area a, log ratio l) is uniform on
     * [0.08, 1] x [-L, L] and a crop fits iff a <= exp(-|l|), so
     * E[a] = int (m^2 - 0.08^2) / 2 dl / int (m - 0.08) dl with m = exp(-|l|).
     * (Ten failed attempts in a row are too rare to matter here.) */
    double L = log(4.0 / 3.0), num = 0, den = 0;
    for (int k = 0; k < 100000; k++) {
        double l = -L + 2 * L * (k + 0.5) / 100000, m = exp(-fabs(l));
        num += (m * m - 0.0064) / 2;
        den += m - 0.08;
    }
    moments sq = measure(true, 1024, 1024, n);
    print_message("square: E[area] analytic %.4f, measured %.4f\n", num / den, sq.area_mean);
    assert_true(fabs(sq.area_mean - num / den) < 0.01);
    assert_true(fabs(sq.lr_mean) < 0.01);
    assert_true(sq.fallback_rate < 0.001);
}

static void test_plan_deterministic(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    feed_sample_plan a, b, c;
    feed_plan_sample(&t, 640, 480, 99, 1, 12345, &a);
    feed_plan_sample(&t, 640, 480, 99, 1, 12345, &b);
    assert_memory_equal(&a.crop, &b.crop, sizeof a.crop);
    assert_int_equal(a.flip, b.flip);
    int differ = 0;
    for (uint64_t i = 0; i < 16; i++) {
        feed_plan_sample(&t, 640, 480, 99, 2, 12345 + i, &c);
        differ += memcmp(&a.crop, &c.crop, sizeof a.crop) != 0;
    }
    assert_true(differ >= 15);
    /* flip_prob 0 and 1 change only the flip: it is drawn after the crop. */
    t.flip_prob = 0.0;
    feed_plan_sample(&t, 640, 480, 99, 1, 12345, &b);
    assert_false(b.flip);
    t.flip_prob = 1.0;
    feed_plan_sample(&t, 640, 480, 99, 1, 12345, &c);
    assert_true(c.flip);
    assert_memory_equal(&b.crop, &c.crop, sizeof b.crop);
    assert_memory_equal(&a.crop, &c.crop, sizeof a.crop);
}

/* Resize(256) then CenterCrop(224), mapped back to the source. */
static void test_eval_box(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_eval(&t);
    feed_sample_plan p;

    /* 500x375: resized to 341x256 (int(256*500/375) = 341), crop corner
     * (round(58.5) = 58, 16); back in the source by 500/341 and 375/256. */
    feed_plan_sample(&t, 500, 375, 1, 2, 3, &p);
    assert_false(p.flip);
    assert_int_equal(p.crop.x, 85);  /* rint(58 * 500/341) = rint(85.04) */
    assert_int_equal(p.crop.w, 328); /* rint(282 * 500/341) - 85 = 413 - 85 */
    assert_int_equal(p.crop.y, 23);  /* rint(16 * 375/256) = rint(23.44) */
    assert_int_equal(p.crop.h, 329); /* rint(240 * 375/256) - 23 = 352 - 23 */

    /* The exact box torchvision's resize-then-crop maps onto the output:
     * 300x200 resized to 384x256, crop corner (80, 16), scale 300/384. */
    double box[4];
    feed_plan_eval_box(&t, 300, 200, box);
    assert_true(box[0] == 62.5 && box[1] == 12.5 && box[2] == 237.5 && box[3] == 187.5);
    feed_plan_sample(&t, 300, 200, 1, 2, 3, &p);
    assert_int_equal(p.crop.x, 62); /* the rounded box (rint: halves to even) */
    assert_int_equal(p.crop.w, 176);

    /* Square: the centre 224/256 of each side. */
    feed_plan_sample(&t, 512, 512, 1, 2, 3, &p);
    assert_int_equal(p.crop.x, 32);
    assert_int_equal(p.crop.y, 32);
    assert_int_equal(p.crop.w, 448);
    assert_int_equal(p.crop.h, 448);

    /* Portrait mirrors landscape. */
    feed_sample_plan q;
    feed_plan_sample(&t, 375, 500, 1, 2, 3, &q);
    assert_int_equal(q.crop.x, 23);
    assert_int_equal(q.crop.y, 85);
    assert_int_equal(q.crop.w, 329);
    assert_int_equal(q.crop.h, 328);

    /* No randomness: the key does not matter. */
    feed_plan_sample(&t, 500, 375, 9, 9, 9, &q);
    feed_plan_sample(&t, 500, 375, 1, 2, 3, &p);
    assert_memory_equal(&p.crop, &q.crop, sizeof p.crop);
    assert_false(q.flip);

    /* Tiny and extreme images stay inside with w, h >= 1. */
    static const uint32_t sizes[][2] = {{1, 1}, {1, 1000}, {1000, 1}, {3, 2}, {16384, 16}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        feed_plan_sample(&t, sizes[s][0], sizes[s][1], 0, 0, 0, &p);
        assert_true(p.crop.w >= 1 && p.crop.h >= 1);
        assert_true(p.crop.x + p.crop.w <= sizes[s][0]);
        assert_true(p.crop.y + p.crop.h <= sizes[s][1]);
    }
}

/* A non-default spec: output size, scale and ratio ranges are honoured. */
static void test_train_custom(void **state)
{
    (void)state;
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = 96;
    t.out_w = 128;
    t.scale_min = 0.5;
    t.scale_max = 0.5;
    t.ratio_min = 2.0;
    t.ratio_max = 2.0;
    for (uint64_t i = 0; i < 200; i++) {
        feed_sample_plan p;
        feed_plan_sample(&t, 1000, 1000, 5, 0, i, &p);
        /* area 500000 at ratio 2: w = round(1000), h = round(500) */
        assert_int_equal(p.crop.w, 1000);
        assert_int_equal(p.crop.h, 500);
        assert_int_equal(p.crop.x, 0);
        assert_true(p.crop.y <= 500);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_validate),
        cmocka_unit_test(test_validate_messages),
        cmocka_unit_test(test_train_matches_torchvision_same_draws),
        cmocka_unit_test(test_train_distributions),
        cmocka_unit_test(test_plan_deterministic),
        cmocka_unit_test(test_eval_box),
        cmocka_unit_test(test_train_custom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
