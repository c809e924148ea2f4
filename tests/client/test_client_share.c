/*
 * Decode sharing, the client's side (feed_loader_config.aug_seed, aug_seed_set, share;
 * docs/design/server.md "Shared decode") against a real feedd over gRPC: the augmentation seed keys the pixels the
 * servers make while seed alone keys the order, an unset aug seed is exactly the seed (today's
 * pixels), the share name's checks, and a resume that names another aug seed is refused (rank
 * states, combined states, and states written before the aug seed, which mean aug seed = seed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"

#define SIDE 24u
#define BATCH 4u
#define SAMPLES 24u
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)

static char g_root[256], g_ds[300];
static feed_test_server g_srv;
static char g_target[64];

static int setup(void **state)
{
    (void)state;
    char arg[400];
    if (feed_test_tmpdir("feed-share", g_root, sizeof g_root) < 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_root);
    if (feed_test_make_imagefolder(g_ds, 2, SAMPLES / 2, 9) < 0)
        return -1;
    snprintf(arg, sizeof arg, "share=%s", g_ds);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "warn", NULL};
    if (feed_test_server_start(args, &g_srv) != 0)
        return -1;
    snprintf(g_target, sizeof g_target, "%s", g_srv.target);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_server_teardown(&g_srv, g_root);
}

static const char *g_targets[1];

static void config(feed_loader_config *c, uint64_t seed)
{
    g_targets[0] = g_target;
    feed_loader_config_default(c);
    c->targets = g_targets;
    c->num_targets = 1;
    c->dataset = "share";
    c->transform.out_h = c->transform.out_w = SIDE;
    c->batch_size = BATCH;
    c->seed = seed;
    c->dtype = FEED_DTYPE_UINT8;
    c->layout = FEED_LAYOUT_NHWC;
    c->device = FEED_DEVICE_HOST;
    c->batch_deadline_ms = 120000;
    c->unavailable_timeout_ms = 120000;
}

/* One epoch: the sample order and each sample's pixels, by sample index. */
typedef struct epoch_run {
    uint64_t order[SAMPLES];
    uint8_t pixels[SAMPLES][SAMPLE_BYTES];
} epoch_run;

static void run_epoch(const feed_loader_config *c, epoch_run *out)
{
    feed_loader *l = NULL;
    feed_batch *b = NULL;
    size_t n = 0;
    memset(out, 0, sizeof(*out));
    assert_int_equal(feed_loader_open(c, &l), 0);
    assert_int_equal(feed_loader_dataset_size(l), SAMPLES);
    for (;;) {
        int rc = feed_loader_next(l, &b);
        if (rc == FEED_EEOF)
            break;
        assert_int_equal(rc, 0);
        assert_int_equal(b->bytes, (size_t)b->n * SAMPLE_BYTES);
        for (uint32_t i = 0; i < b->n; i++) {
            assert_true(n < SAMPLES);
            assert_true(b->indices[i] < SAMPLES);
            out->order[n++] = b->indices[i];
            memcpy(out->pixels[b->indices[i]], (const uint8_t *)b->data + i * SAMPLE_BYTES,
                   SAMPLE_BYTES);
        }
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
    }
    assert_int_equal(n, SAMPLES);
    feed_loader_close(l);
}

static size_t samples_differing(const epoch_run *a, const epoch_run *b)
{
    size_t d = 0;
    for (size_t i = 0; i < SAMPLES; i++)
        d += memcmp(a->pixels[i], b->pixels[i], SAMPLE_BYTES) != 0;
    return d;
}

/* seed keys the order, aug_seed the pixels; unset, aug_seed is the seed. */
static void test_aug_seed_keys_pixels_not_order(void **state)
{
    (void)state;
    epoch_run *plain = malloc(sizeof(*plain)), *same = malloc(sizeof(*same)),
              *other = malloc(sizeof(*other)), *swapped = malloc(sizeof(*swapped)),
              *by_seed = malloc(sizeof(*by_seed));
    assert_non_null(plain && same && other && swapped && by_seed);
    feed_loader_config c;

    config(&c, 5);
    run_epoch(&c, plain); /* no aug seed: what every loader did before it */
    c.aug_seed = 5;
    c.aug_seed_set = true;
    run_epoch(&c, same);
    assert_memory_equal(plain->order, same->order, sizeof(plain->order));
    assert_int_equal(samples_differing(plain, same), 0);

    /* A field left at 5 without aug_seed_set is not an aug seed. */
    c.aug_seed = 9;
    c.aug_seed_set = false;
    run_epoch(&c, swapped);
    assert_int_equal(samples_differing(plain, swapped), 0);

    /* Another aug seed: the same order, other crops. */
    c.aug_seed_set = true;
    run_epoch(&c, other);
    assert_memory_equal(plain->order, other->order, sizeof(plain->order));
    assert_true(samples_differing(plain, other) > SAMPLES / 2);

    /* The pixels are those of the aug seed alone: seed 9 without an aug seed crops each sample
     * as (seed 5, aug seed 9) does, in its own order. */
    config(&c, 9);
    run_epoch(&c, by_seed);
    assert_memory_not_equal(plain->order, by_seed->order, sizeof(plain->order));
    assert_int_equal(samples_differing(other, by_seed), 0);
    free(plain);
    free(same);
    free(other);
    free(swapped);
    free(by_seed);
}

/* share: the job name's rules, copied at open; a loader with a share name serves as before. */
static void test_share_name(void **state)
{
    (void)state;
    feed_loader_config c;
    feed_loader *l = NULL;
    feed_batch *b = NULL;
    char name[64];
    config(&c, 5);
    snprintf(name, sizeof name, "sweep/lr:7");
    c.share = name;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    memset(name, 'x', sizeof name - 1); /* the loader keeps its own copy */
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(b->n, BATCH);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    feed_loader_close(l);

    c.share = "";
    assert_int_equal(feed_loader_open(&c, &l), 0);
    feed_loader_close(l);
    c.share = "has space";
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    char longer[130];
    memset(longer, 's', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    c.share = longer;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    longer[128] = '\0';
    assert_int_equal(feed_loader_open(&c, &l), 0);
    feed_loader_close(l);
}

/* l's rank state after `batches` of epoch 0; the caller frees it. */
static uint8_t *state_of(feed_loader *l, uint64_t batches, size_t *len)
{
    assert_int_equal(feed_loader_state(l, 0, batches, NULL, 0, len), FEED_ETOOBIG);
    uint8_t *buf = malloc(*len);
    assert_non_null(buf);
    assert_int_equal(feed_loader_state(l, 0, batches, buf, *len, len), 0);
    return buf;
}

static void open_with(feed_loader_config *c, bool set, uint64_t aug_seed, feed_loader **l)
{
    c->aug_seed_set = set;
    c->aug_seed = aug_seed;
    assert_int_equal(feed_loader_open(c, l), 0);
}

/* A state names its aug seed; a loader with another refuses it, saying so. */
static void test_resume_refuses_another_aug_seed(void **state)
{
    (void)state;
    feed_loader_config c;
    feed_loader *a = NULL, *b = NULL;
    char why[256];
    size_t len = 0, len_b = 0;
    config(&c, 5);
    open_with(&c, true, 11, &a);
    uint8_t *st = state_of(a, 2, &len);

    open_with(&c, true, 12, &b);
    assert_int_equal(feed_loader_resume(b, st, len, why, sizeof why), FEED_EINVAL);
    assert_non_null(strstr(why, "aug_seed differs"));
    assert_non_null(strstr(why, "11"));
    assert_non_null(strstr(why, "12"));
    feed_loader_close(b);
    open_with(&c, false, 0, &b); /* aug seed = seed = 5 */
    assert_int_equal(feed_loader_resume(b, st, len, why, sizeof why), FEED_EINVAL);
    assert_non_null(strstr(why, "aug_seed differs"));
    feed_loader_close(b);
    open_with(&c, true, 11, &b);
    assert_int_equal(feed_loader_resume(b, st, len, why, sizeof why), 0);

    /* Ranks of one world must agree too. */
    feed_loader_close(a);
    feed_loader_close(b);
    free(st);
    c.world = 2;
    open_with(&c, true, 11, &a);
    st = state_of(a, 1, &len);
    c.rank = 1;
    open_with(&c, true, 13, &b);
    uint8_t *st_b = state_of(b, 1, &len_b);
    const void *states[] = {st, st_b};
    size_t lens[] = {len, len_b};
    size_t out_len = 0;
    uint8_t out[4096];
    assert_int_equal(
        feed_state_combine(states, lens, 2, out, sizeof out, &out_len, why, sizeof why),
        FEED_EINVAL);
    assert_non_null(strstr(why, "aug_seed differs"));
    feed_loader_close(a);
    feed_loader_close(b);
    free(st);
    free(st_b);
}

/* A state from before the aug seed (version 1: the 56-byte header, no aug seed) was written by
 * a loader whose aug seed was its seed: it resumes there and nowhere else. */
static void test_resume_state_before_aug_seed(void **state)
{
    (void)state;
    feed_loader_config c;
    feed_loader *a = NULL, *b = NULL;
    char why[256];
    size_t len = 0;
    config(&c, 5);
    open_with(&c, false, 0, &a);
    uint8_t *st = state_of(a, 2, &len);
    assert_true(len > 72);
    assert_int_equal(st[4], 3);
    /* The same state as version 1 wrote it (no aug seed, no decode lane share). */
    uint8_t *v1 = malloc(len - 16);
    assert_non_null(v1);
    memcpy(v1, st, 56);
    memcpy(v1 + 56, st + 72, len - 72);
    v1[4] = 1;

    open_with(&c, false, 0, &b);
    assert_int_equal(feed_loader_resume(b, v1, len - 16, why, sizeof why), 0);
    feed_loader_close(b);
    open_with(&c, true, 5, &b);
    assert_int_equal(feed_loader_resume(b, v1, len - 16, why, sizeof why), 0);
    feed_loader_close(b);
    open_with(&c, true, 6, &b);
    assert_int_equal(feed_loader_resume(b, v1, len - 16, why, sizeof why), FEED_EINVAL);
    assert_non_null(strstr(why, "aug_seed differs"));
    feed_loader_close(b);
    feed_loader_close(a);
    free(st);
    free(v1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aug_seed_keys_pixels_not_order),
        cmocka_unit_test(test_share_name),
        cmocka_unit_test(test_resume_refuses_another_aug_seed),
        cmocka_unit_test(test_resume_state_before_aug_seed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
