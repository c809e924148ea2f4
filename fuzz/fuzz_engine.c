/*
 * Fuzz target: the JPEG engine (server/engine/engine.h), whose input is whatever
 * bytes a dataset file holds. Each input goes through the fast path twice,
 * seeded from the input so crops vary (a small train output, which mostly
 * decodes at 1/8 scale, and a larger eval output, which needs finer scales),
 * and through the reference path once. Like libjpeg-turbo's
 * fuzz/decompress.cc it reads every output byte, so uninitialised output
 * shows up under MSan, and it holds the engine to its contract: a failed
 * sample's output is all zero. A good fast-path sample then goes through
 * every augmentation policy (augment.h), drawn from the same seed.
 * Limits are lowered (1 Mpx) so a hostile header cannot make one run slow.
 */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "feed/crc32c.h"
#include "fuzz.h"

#define OUT_MAX (64 * 64 * 3)

static feed_engine *engine;
static feed_augment every_policy;
/* Where every output byte ends up, so no read is optimised away. */
static volatile unsigned sink;

static void run_one(const uint8_t *data, size_t size, const feed_transform *t, uint64_t seed,
                    int reference)
{
    static uint8_t out[OUT_MAX];
    size_t n = (size_t)t->out_h * t->out_w * 3;
    memset(out, 0xA5, n);
    feed_sample_status st = reference
                                ? feed_engine_run_reference(engine, data, size, t, seed, 1, 7, out)
                                : feed_engine_run(engine, data, size, t, seed, 1, 7, out, NULL);
    if (!reference && st == FEED_SAMPLE_OK)
        st = feed_engine_augment(engine, &every_policy, out, t->out_h, t->out_w, seed, 1, 7);
    unsigned acc = 0, any = 0;
    for (size_t i = 0; i < n; i++) {
        acc += out[i];
        any |= out[i];
    }
    if ((unsigned)st >= FEED_SAMPLE_STATUS_COUNT || (st != FEED_SAMPLE_OK && any != 0))
        abort();
    sink = acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!engine) {
        feed_engine_limits lim;
        feed_engine_limits_default(&lim);
        lim.max_pixels = 1u << 20;
        lim.max_side = 4096;
        if (feed_engine_new(&lim, &engine) != 0 ||
            feed_augment_parse("RandAugment(num_ops=3, interpolation=bilinear); AutoAugment(); "
                               "ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, "
                               "hue=0.1); TrivialAugmentWide(); RandomErasing(p=0.5)",
                               &every_policy, NULL, 0) != 0)
            abort();
    }
    uint64_t seed = feed_crc32c(0, data, size);
    feed_transform train, eval;
    feed_transform_default_train(&train);
    train.out_h = 24;
    train.out_w = 40;
    train.resize_size = 44;
    feed_transform_default_eval(&eval);
    eval.out_h = 64;
    eval.out_w = 64;
    eval.resize_size = 72;
    run_one(data, size, &train, seed, 0);
    run_one(data, size, &eval, seed, 0);
    run_one(data, size, &train, seed, 1);
    return 0;
}
