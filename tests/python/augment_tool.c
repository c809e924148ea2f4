/*
 * feed-augment-tool: the engine's augmentation ops and policies driven from
 * the command line, for test_augment*.py (against torchvision) and the
 * augmentation benchmark. Test-only; single-threaded.
 *
 *   op NAME MAGNITUDE H W [bilinear]
 *                              raw HWC RGB on stdin, the op's output on stdout
 *                              (geometric ops: nearest, or bilinear)
 *   apply SPEC H W SEED EPOCH INDEX
 *                              the same with a whole description (augment.h)
 *   draw SPEC H W N SEED       for sample indices 0..N-1 of epoch 0, one line
 *                              each of the first step's draws: "Op bin sign"
 *                              per op ("" when none), or "top left h w" for
 *                              RandomErasing ("-" when it does not erase), or
 *                              ColorJitter's permutation ("2031") and its four
 *                              factors (nan when skipped)
 *   adjust KIND FACTOR H W     one of ColorJitter's adjustments (brightness,
 *                              contrast, saturation, hue) on stdin as op does
 *   parse SPEC                 0 and "ok", or 2 and the parser's message
 * Exit status 2 on a usage or input error, with a message on stderr.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment.h"
#include "feed/rng.h"

#define MAX_SIDE 4096u

static int usage(void)
{
    fprintf(
        stderr,
        "usage: feed-augment-tool op NAME MAG H W [bilinear] | adjust KIND FACTOR H W | apply SPEC "
        "H W SEED EPOCH INDEX | draw SPEC H W N SEED | parse SPEC\n");
    return 2;
}

static int read_side(const char *s, uint32_t *out)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || v == 0 || v > MAX_SIDE)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Read h * w * 3 bytes from stdin, run f, write them to stdout. */
static int filter_image(uint32_t h, uint32_t w, void (*f)(feed_aug_image *, void *), void *ctx)
{
    size_t n = (size_t)h * w * 3;
    int rc = 2;
    uint8_t *px = malloc(n), *tmp = malloc(n);
    if (!px || !tmp || fread(px, 1, n, stdin) != n) {
        fprintf(stderr, "feed-augment-tool: could not read %zu bytes\n", n);
        goto out;
    }
    feed_aug_image img = {.px = px, .h = h, .w = w, .tmp = tmp};
    f(&img, ctx);
    rc = fwrite(px, 1, n, stdout) == n ? 0 : 2;
out:
    free(px);
    free(tmp);
    return rc;
}

typedef struct op_args {
    feed_aug_op op;
    double mag;
    bool bilinear;
} op_args;

static void run_op(feed_aug_image *img, void *ctx)
{
    const op_args *a = ctx;
    img->bilinear = a->bilinear;
    feed_aug_apply_op(a->op, a->mag, img);
}

typedef struct adjust_args {
    feed_aug_adjust_kind kind;
    double factor;
} adjust_args;

static void run_adjust(feed_aug_image *img, void *ctx)
{
    const adjust_args *a = ctx;
    feed_aug_adjust(a->kind, a->factor, img);
}

typedef struct apply_args {
    feed_augment aug;
    uint64_t seed, index;
    uint32_t epoch;
} apply_args;

static void run_apply(feed_aug_image *img, void *ctx)
{
    const apply_args *a = ctx;
    feed_augment_apply(&a->aug, img, a->seed, a->epoch, a->index);
}

static int parse(const char *spec, feed_augment *aug)
{
    char msg[256];
    if (feed_augment_parse(spec, aug, msg, sizeof msg) != 0) {
        fprintf(stderr, "%s\n", msg);
        return -1;
    }
    return 0;
}

static int draw(const feed_augment *aug, uint32_t h, uint32_t w, uint64_t n, uint64_t seed)
{
    if (aug->num_steps == 0)
        return 2;
    for (uint64_t i = 0; i < n; i++) {
        feed_rng rng;
        feed_rng_init(&rng, seed, 0, i);
        rng.ctr[0] = FEED_AUGMENT_CTR;
        feed_aug_op ops[FEED_AUGMENT_MAX_RAND_OPS];
        int bins[FEED_AUGMENT_MAX_RAND_OPS], signs[FEED_AUGMENT_MAX_RAND_OPS];
        uint32_t box[4];
        double f[4];
        int k = feed_augment_draw(&aug->steps[0], &rng, h, w, ops, bins, signs, box, f);
        if (aug->steps[0].kind == FEED_AUGMENT_COLOR_JITTER) {
            printf("%d%d%d%d %.17g %.17g %.17g %.17g\n", bins[0], bins[1], bins[2], bins[3], f[0],
                   f[1], f[2], f[3]);
            continue;
        }
        if (aug->steps[0].kind == FEED_AUGMENT_ERASING) {
            if (k)
                printf("%u %u %u %u\n", box[0], box[1], box[2], box[3]);
            else
                printf("-\n");
            continue;
        }
        for (int j = 0; j < k; j++)
            printf("%s%s %d %d", j ? " " : "", feed_aug_op_name(ops[j]), bins[j], signs[j]);
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t h, w;
    if ((argc == 6 || (argc == 7 && strcmp(argv[6], "bilinear") == 0)) &&
        strcmp(argv[1], "op") == 0) {
        op_args a = {.op = FEED_AUG_NUM_OPS, .mag = strtod(argv[3], NULL), .bilinear = argc == 7};
        for (int k = 0; k < FEED_AUG_NUM_OPS; k++)
            if (strcmp(feed_aug_op_name((feed_aug_op)k), argv[2]) == 0)
                a.op = (feed_aug_op)k;
        if (a.op == FEED_AUG_NUM_OPS || read_side(argv[4], &h) || read_side(argv[5], &w))
            return usage();
        return filter_image(h, w, run_op, &a);
    }
    if (argc == 6 && strcmp(argv[1], "adjust") == 0) {
        static const char *const kinds[4] = {"brightness", "contrast", "saturation", "hue"};
        adjust_args a = {.kind = FEED_AUG_ADJ_HUE, .factor = strtod(argv[3], NULL)};
        int found = 0;
        for (int k = 0; k < 4; k++)
            if (strcmp(kinds[k], argv[2]) == 0) {
                a.kind = (feed_aug_adjust_kind)k;
                found = 1;
            }
        if (!found || read_side(argv[4], &h) || read_side(argv[5], &w))
            return usage();
        return filter_image(h, w, run_adjust, &a);
    }
    if (argc == 8 && strcmp(argv[1], "apply") == 0) {
        apply_args a = {.seed = strtoull(argv[5], NULL, 10),
                        .epoch = (uint32_t)strtoul(argv[6], NULL, 10),
                        .index = strtoull(argv[7], NULL, 10)};
        if (parse(argv[2], &a.aug) || read_side(argv[3], &h) || read_side(argv[4], &w))
            return usage();
        return filter_image(h, w, run_apply, &a);
    }
    if (argc == 7 && strcmp(argv[1], "draw") == 0) {
        feed_augment aug;
        if (parse(argv[2], &aug) || read_side(argv[3], &h) || read_side(argv[4], &w))
            return usage();
        return draw(&aug, h, w, strtoull(argv[5], NULL, 10), strtoull(argv[6], NULL, 10));
    }
    if (argc == 3 && strcmp(argv[1], "parse") == 0) {
        feed_augment aug;
        if (parse(argv[2], &aug))
            return 2;
        printf("ok %u\n", aug.num_steps);
        return 0;
    }
    return usage();
}
