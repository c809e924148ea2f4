/*
 * libfeedclient over tar shards, against real feedd processes on 127.0.0.1:
 * a whole epoch from three feedd serving shards (written from real JPEGs with
 * feed/tar.h), one of them killed (SIGKILL) mid-epoch, comes out exactly
 * once, in plan order, with the labels and bytes of the same epoch read from
 * one feedd serving the ImageFolder tree the shards were made from; a shard
 * with 200,000 classes opens with small batches (Describe's limit). Skips
 * (exit FEED_TEST_SKIP, saying why) when feedd has not been built.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/buf.h"
#include "feed/client.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/tar.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"

#define CLASSES 4u
#define PER_CLASS 24u
#define NSAMPLES (CLASSES * PER_CLASS)
#define SIDE 32u
#define BATCH 8u
#define MAXBATCHES 64u
#define SEED 77u
#define EPOCH 2u
#define SETTLE_POLLS 6000 /* 20 ms polls for a failover that must come: 120 s */

typedef struct rec {
    uint64_t batch_number;
    uint32_t n;
    uint64_t idx[BATCH];
    int64_t lab[BATCH];
    uint8_t *data;
    size_t bytes;
} rec;

typedef struct run {
    rec r[MAXBATCHES];
    size_t count;
} run;

static char g_root[256];
static char g_tree_arg[400], g_tar_arg[400];

static void run_free(run *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->r[i].data);
    r->count = 0;
}

static void cfg(feed_loader_config *c, const char *const *targets, size_t n)
{
    feed_test_host_config(c, targets, n, "small", SIDE, BATCH, NULL);
    c->seed = SEED;
    c->epoch = EPOCH;
    c->window_per_server = 1;
    c->batch_deadline_ms = SETTLE_POLLS * 20;
    c->unavailable_timeout_ms = SETTLE_POLLS * 20;
}

static int take(feed_loader *l, run *r)
{
    feed_batch *b = NULL;
    int rc = feed_loader_next(l, &b);
    if (rc != 0)
        return rc;
    assert_true(r->count < MAXBATCHES);
    rec *x = &r->r[r->count++];
    x->batch_number = b->batch_number;
    x->n = b->n;
    memcpy(x->idx, b->indices, b->n * sizeof(uint64_t));
    memcpy(x->lab, b->labels, b->n * sizeof(int64_t));
    x->bytes = b->bytes;
    x->data = malloc(b->bytes);
    assert_non_null(x->data);
    memcpy(x->data, b->data, b->bytes);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    return 0;
}

static void collect_all(feed_loader *l, run *r)
{
    int rc;
    while ((rc = take(l, r)) == 0)
        ;
    assert_int_equal(rc, FEED_EEOF);
}

/* Shards of the tree at dir, 10 samples each, as prefix-000000.tar ...; their count. */
static size_t write_shards(const char *dir, const char *prefix)
{
    feed_dataset *ds = NULL;
    char err[512], path[400], key[32];
    assert_int_equal(feed_dataset_open(dir, NULL, &ds, err, sizeof err), 0);
    const char *names[CLASSES];
    assert_int_equal(feed_dataset_num_classes(ds), CLASSES);
    for (uint32_t c = 0; c < CLASSES; c++)
        names[c] = feed_dataset_class_name(ds, c);
    feed_buf scratch;
    feed_buf_init(&scratch, 16u << 20);
    size_t shards = 0;
    for (uint64_t first = 0; first < NSAMPLES; first += 10, shards++) {
        snprintf(path, sizeof path, "%s-%06zu.tar", prefix, shards);
        feed_tar_writer *w = NULL;
        assert_int_equal(feed_tar_writer_open(path, CLASSES, names, &w, err, sizeof err), 0);
        for (uint64_t i = first; i < first + 10 && i < NSAMPLES; i++) {
            const uint8_t *data;
            size_t len;
            assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
            snprintf(key, sizeof key, "s%06llu", (unsigned long long)i);
            assert_int_equal(feed_tar_writer_add(w, key, feed_dataset_label(ds, i), data, len), 0);
        }
        assert_int_equal(feed_tar_writer_finish(w, err, sizeof err), 0);
    }
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
    return shards;
}

static feed_test_server g_srv[4];
static int g_n;

static void spawn(const char *dataset_arg)
{
    const char *args[] = {"--dataset", dataset_arg, "--threads", "1", "--log-level", "warn", NULL};
    assert_int_equal(feed_test_server_start(args, &g_srv[g_n]), 0);
    g_n++;
}

static void test_kill_mid_epoch_over_shards(void **state)
{
    (void)state;
    static run ref, got;
    feed_loader_config c;
    feed_loader *l = NULL;

    spawn(g_tree_arg);
    const char *tree_target[] = {g_srv[0].target};
    cfg(&c, tree_target, 1);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    collect_all(l, &ref);
    feed_loader_close(l);
    assert_int_equal(ref.count, NSAMPLES / BATCH);

    for (int i = 0; i < 3; i++)
        spawn(g_tar_arg);
    const char *targets[] = {g_srv[1].target, g_srv[2].target, g_srv[3].target};
    cfg(&c, targets, 3);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    feed_loader_stats st;
    assert_int_equal(take(l, &got), 0);
    assert_int_equal(take(l, &got), 0);
    /* Kill one that is up (a batch came, so one is; the middle one when it is): a server that
     * never answered is no failover when it dies. */
    int victim = -1;
    for (uint32_t i = 0; i < 3; i++) {
        feed_server_stats ss;
        assert_int_equal(feed_loader_server_stats(l, i, &ss, sizeof ss), 0);
        if (ss.up && (victim < 0 || i == 1))
            victim = (int)i;
    }
    assert_true(victim >= 0);
    feed_test_server_kill(&g_srv[1 + victim]);
    collect_all(l, &got);
    for (int i = 0; i < SETTLE_POLLS; i++) {
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        if (st.failovers)
            break;
        usleep(20000);
    }
    assert_true(st.failovers >= 1);
    feed_loader_close(l);

    uint32_t seen[NSAMPLES] = {0};
    assert_int_equal(got.count, ref.count);
    for (size_t b = 0; b < got.count; b++) {
        const rec *x = &ref.r[b], *y = &got.r[b];
        assert_int_equal(x->batch_number, y->batch_number);
        assert_int_equal(x->n, y->n);
        assert_memory_equal(x->idx, y->idx, x->n * sizeof(uint64_t));
        assert_memory_equal(x->lab, y->lab, x->n * sizeof(int64_t));
        assert_int_equal(x->bytes, y->bytes);
        assert_memory_equal(x->data, y->data, x->bytes);
        for (uint32_t k = 0; k < y->n; k++)
            seen[y->idx[k]]++;
    }
    for (uint32_t i = 0; i < NSAMPLES; i++)
        assert_int_equal(seen[i], 1);
    run_free(&ref);
    run_free(&got);
}

/*
 * A shard whose largest label is 199,999: Describe lists 200,000 class names
 * (about 1.7 MB), far more than one Batch of 2 samples of 32x32. The loader
 * still opens (its Describe limit is not the batch message's) and reads it.
 */
static void test_many_classes_small_batches(void **state)
{
    (void)state;
    char tree[300], wide[300], arg[400], err[512];
    feed_dataset *ds = NULL;
    feed_tar_writer *w = NULL;
    feed_buf scratch;
    snprintf(tree, sizeof tree, "%s/small", g_root);
    snprintf(wide, sizeof wide, "%s/wide.tar", g_root);
    assert_int_equal(feed_dataset_open(tree, NULL, &ds, err, sizeof err), 0);
    assert_int_equal(feed_tar_writer_open(wide, 0, NULL, &w, err, sizeof err), 0);
    feed_buf_init(&scratch, 16u << 20);
    static const uint32_t labels[2] = {0, 199999};
    for (uint64_t i = 0; i < 2; i++) {
        const uint8_t *data;
        size_t len;
        char key[16];
        assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
        snprintf(key, sizeof key, "w%llu", (unsigned long long)i);
        assert_int_equal(feed_tar_writer_add(w, key, labels[i], data, len), 0);
    }
    assert_int_equal(feed_tar_writer_finish(w, err, sizeof err), 0);
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
    snprintf(arg, sizeof arg, "small=%s", wide);
    spawn(arg);
    const char *targets[] = {g_srv[g_n - 1].target};
    feed_loader_config c;
    feed_loader *l = NULL;
    static run got;
    cfg(&c, targets, 1);
    c.batch_size = 2;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    collect_all(l, &got);
    feed_loader_close(l);
    assert_int_equal(got.count, 1);
    assert_int_equal(got.r[0].n, 2);
    int64_t a = got.r[0].lab[0], b = got.r[0].lab[1];
    assert_true((a == 0 && b == 199999) || (a == 199999 && b == 0));
    run_free(&got);
}

static int setup(void **state)
{
    (void)state;
    char tree[300], prefix[300];
    if (feed_test_tmpdir("feed-client-tar", g_root, sizeof g_root) != 0)
        return -1;
    snprintf(tree, sizeof tree, "%s/small", g_root);
    snprintf(prefix, sizeof prefix, "%s/shard", g_root);
    if (feed_test_make_imagefolder(tree, CLASSES, PER_CLASS, 5) != 0)
        return -1;
    size_t n = write_shards(tree, prefix);
    snprintf(g_tree_arg, sizeof g_tree_arg, "small=%s", tree);
    snprintf(g_tar_arg, sizeof g_tar_arg, "small=%s-{000000..%06zu}.tar", prefix, n - 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < g_n; i++)
        feed_test_server_kill(&g_srv[i]);
    g_n = 0;
    return feed_test_rmtree(g_root);
}

int main(void)
{
    const char *build = getenv("FEED_BUILD_DIR");
    char feedd[512];
    struct stat st;
    snprintf(feedd, sizeof feedd, "%s/server/feedd", build ? build : "build");
    if (stat(feedd, &st) != 0) {
        printf("SKIP: feedd is not built (%s)\n", feedd);
        return FEED_TEST_SKIP;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill_mid_epoch_over_shards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_classes_small_batches, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
