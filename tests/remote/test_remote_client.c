/*
 * libfeedclient over s3:// tar shards: an epoch from three feedd reading the
 * shards from a real S3-compatible server (SigV4 checked, servers.js on
 * 127.0.0.1 port 0), one of them killed (SIGKILL) mid-epoch, comes out
 * exactly once, in plan order, with the labels and bytes of the same epoch
 * from one feedd reading the same shards from local disk. Shards are written
 * by feed-pack from feed-gen-dataset's JPEGs.
 *
 * usage: test_remote_client NODE SERVERS_JS (FEED_BUILD_DIR names the build)
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "remote_servers.h"

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

static const char *g_node, *g_script;
static remote_servers g_s3;
static char g_root[256];
static char g_local_arg[400], g_s3_arg[400], g_endpoint[128];
static feed_test_server g_srv[4];
static int g_n;

static void spawn(const char *dataset_arg, int remote)
{
    const char *args[] = {"--dataset",
                          dataset_arg,
                          "--threads",
                          "1",
                          "--log-level",
                          "warn",
                          remote ? "--s3-endpoint" : NULL,
                          g_endpoint,
                          NULL};
    assert_int_equal(feed_test_server_start(args, &g_srv[g_n]), 0);
    g_n++;
}

static void test_kill_mid_epoch_over_s3_shards(void **state)
{
    (void)state;
    static run ref, got;
    feed_loader_config c;
    feed_loader *l = NULL;

    spawn(g_local_arg, 0);
    const char *local_target[] = {g_srv[0].target};
    cfg(&c, local_target, 1);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    collect_all(l, &ref);
    feed_loader_close(l);
    assert_int_equal(ref.count, NSAMPLES / BATCH);

    for (int i = 0; i < 3; i++)
        spawn(g_s3_arg, 1);
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

static int setup(void **state)
{
    char data[300];
    const char *build = getenv("FEED_BUILD_DIR");
    (void)state;
    if (!build || feed_test_tmpdir("feed-remote-client", g_root, sizeof g_root) != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", g_root);
    if (remote_test_make_shards(build, g_root, data, CLASSES, PER_CLASS, 5, 10) != 0 ||
        remote_servers_start(&g_s3, g_node, g_script, data, 0) != 0)
        return -1;
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_ACCESS_KEY_ID", REMOTE_TEST_KEY, 1);
    setenv("AWS_SECRET_ACCESS_KEY", REMOTE_TEST_SECRET, 1); /* the feedd inherit them */
    snprintf(g_endpoint, sizeof g_endpoint, "http://127.0.0.1:%d", g_s3.s3);
    snprintf(g_local_arg, sizeof g_local_arg, "small=%s/shard-{000000..000009}.tar", data);
    snprintf(g_s3_arg, sizeof g_s3_arg,
             "small=s3://" REMOTE_TEST_BUCKET "/shard-{000000..000009}.tar");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < g_n; i++)
        feed_test_server_kill(&g_srv[i]);
    remote_servers_stop(&g_s3);
    return feed_test_rmtree(g_root);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_mid_epoch_over_s3_shards),
    };
    if (argc < 3) {
        fprintf(stderr, "usage: %s NODE SERVERS_JS\n", argv[0]);
        return 2;
    }
    g_node = argv[1];
    g_script = argv[2];
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
