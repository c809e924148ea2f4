/*
 * A slow object store must not stall the rest of feedd. One feedd with two
 * decode workers (--threads 2) serves the same tar shards from local disk and
 * from a real HTTP server (servers.js) whose fault proxy drip-feeds one
 * object's bodies at a byte a second:
 *  - a local dataset's batches are all served while the slow object's reads
 *    are still pending (the decode workers never wait on the network);
 *  - in the HTTP dataset, a batch over a fast and a slow shard is served:
 *    the fast shards' samples equal the local ones, the slow shard's fail at
 *    the batch deadline with a message naming the store;
 *  - a sample whose object answers 500 every time is asked for R+1 times
 *    (--remote-retries R), not once by a read-ahead and again by the read.
 * The assertions are on outcomes and on what the store saw; the waits are
 * only hang guards.
 *
 * usage: test_remote_slow NODE SERVERS_JS (FEED_BUILD_DIR names the build)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "feedtest.h"
#include "feedtest_grpc.h"
#include "remote_servers.h"

#define N_SAMPLES 24u /* 3 classes x 8, 8 a shard */
#define SHARD_SAMPLES 8u
#define SHARDS "shard-{000000..000002}.tar"
#define RETRIES 1
#define GUARD_S 120 /* hang guard on one stream: a local batch takes milliseconds */

static const char *g_node, *g_script;
static remote_servers g_srv;
static feed_test_server g_feedd;
static grpc_channel *g_chan;
static char g_tmp[256], g_store[64];

static int setup(void **state)
{
    char data[300], http[512], local[512], log[400], retries[16];
    const char *build = getenv("FEED_BUILD_DIR");
    feed_test_server_opts opts = {0};
    (void)state;
    if (!build || feed_test_tmpdir("feed-remote-slow-", g_tmp, sizeof g_tmp) != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", g_tmp);
    if (remote_test_make_shards(build, g_tmp, data, 3, 8, 3, 8) != 0 ||
        remote_servers_start(&g_srv, g_node, g_script, data, 0) != 0)
        return -1;
    snprintf(local, sizeof local, "local=%s/" SHARDS, data);
    snprintf(g_store, sizeof g_store, "http://127.0.0.1:%d", g_srv.httpproxy);
    snprintf(http, sizeof http, "http=%s/" SHARDS, g_store);
    snprintf(log, sizeof log, "%s/feedd.log", g_tmp);
    snprintf(retries, sizeof retries, "%d", RETRIES);
    opts.log_path = log;
    /* A dripped read outlasts the test (no request timeout); the deadline ends the batch. */
    const char *args[] = {"--dataset",
                          local,
                          "--dataset",
                          http,
                          "--threads",
                          "2",
                          "--remote-retries",
                          retries,
                          "--remote-timeout-ms",
                          "3600000",
                          "--remote-batch-deadline-ms",
                          "10000",
                          NULL};
    if (feed_test_server_start_with(&opts, args, &g_feedd) != 0)
        return -1;
    g_chan = feedtest_channel(g_feedd.target);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    remote_servers_cmd(&g_srv, "undrip all", NULL, NULL);
    if (g_chan)
        grpc_channel_destroy(g_chan);
    feed_test_server_stop(&g_feedd);
    remote_servers_stop(&g_srv);
    feed_test_rmtree(g_tmp);
    return 0;
}

/* Opens a stream on ds and sends one batch of idx[0, n) (epoch 1, seed 5, train 48x48). */
static void send_batch(feedtest_stream *s, const char *ds, const uint64_t *idx, size_t n)
{
    Feed__V1__TransformSpec spec = FEED__V1__TRANSFORM_SPEC__INIT;
    spec.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
    spec.out_height = spec.out_width = 48;
    spec.flip_prob = 0.5;
    assert_int_equal(
        feedtest_stream_open_batch(g_chan, GUARD_S, ds, &spec, "test_remote_slow", idx, n, s), 0);
}

/* One batch of idx[0, n) of ds on a stream of its own; fails when none comes within the guard. */
static Feed__V1__Batch *fetch(const char *ds, const uint64_t *idx, size_t n)
{
    feedtest_stream s;
    send_batch(&s, ds, idx, n);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    if (!b)
        fail_msg("no batch of %s within %d s", ds, GUARD_S);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    assert_int_equal(b->n_status, n);
    return b;
}

static Feed__V1__Batch *fetch_all(const char *ds)
{
    uint64_t idx[N_SAMPLES];
    for (uint64_t i = 0; i < N_SAMPLES; i++)
        idx[i] = i;
    return fetch(ds, idx, N_SAMPLES);
}

static void test_local_served_while_store_drips(void **state)
{
    uint64_t slow[SHARD_SAMPLES];
    feedtest_stream s;
    (void)state;
    for (uint64_t i = 0; i < SHARD_SAMPLES; i++)
        slow[i] = i; /* all in shard-000000.tar */
    assert_int_equal(remote_servers_cmd(&g_srv, "drip shard-000000.tar", NULL, NULL), 0);
    send_batch(&s, "http", slow, SHARD_SAMPLES);
    assert_int_equal(remote_servers_wait_above(&g_srv, "dripping", 0, GUARD_S * 1000), 0);
    /* The slow store is being read; the local dataset is served all the same. */
    for (int k = 0; k < 5; k++) {
        Feed__V1__Batch *b = fetch_all("local");
        for (size_t i = 0; i < N_SAMPLES; i++)
            assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
        feed__v1__batch__free_unpacked(b, NULL);
    }
    /* And its reads are still pending. */
    assert_true(remote_servers_count(&g_srv, "dripping") >= 1);
    feedtest_stream_cancel(&s);
    feedtest_stream_finish(&s, NULL, 0);
    assert_int_equal(remote_servers_cmd(&g_srv, "undrip shard-000000.tar", NULL, NULL), 0);
}

static void test_fast_shards_served_slow_shard_fails(void **state)
{
    char why[128];
    (void)state;
    Feed__V1__Batch *ref = fetch_all("local");
    assert_int_equal(remote_servers_cmd(&g_srv, "drip shard-000001.tar", NULL, NULL), 0);
    Feed__V1__Batch *b = fetch_all("http");
    size_t sb = (size_t)ref->height * ref->width * ref->channels;
    snprintf(why, sizeof why, "store %s too slow", g_store);
    for (size_t i = 0; i < N_SAMPLES; i++) {
        if (i >= SHARD_SAMPLES && i < 2 * SHARD_SAMPLES) {
            assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
        } else {
            assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
            assert_memory_equal(b->data.data + i * sb, ref->data.data + i * sb, sb);
        }
    }
    assert_int_equal(b->n_errors, SHARD_SAMPLES);
    for (size_t e = 0; e < b->n_errors; e++)
        if (!strstr(b->errors[e]->message, why) ||
            !strstr(b->errors[e]->message, "shard-000001.tar"))
            fail_msg("want '%s' and the shard in: %s", why, b->errors[e]->message);
    /* Failed at the deadline, not by the store. */
    assert_true(remote_servers_count(&g_srv, "dripping") >= 1);
    feed__v1__batch__free_unpacked(b, NULL);
    feed__v1__batch__free_unpacked(ref, NULL);
    assert_int_equal(remote_servers_cmd(&g_srv, "undrip shard-000001.tar", NULL, NULL), 0);
}

static void test_dead_sample_asked_retries_plus_one(void **state)
{
    const uint64_t idx[1] = {2 * SHARD_SAMPLES}; /* the first sample of shard-000002.tar */
    long before = -1, after = -1;
    (void)state;
    assert_int_equal(remote_servers_cmd(&g_srv, "hits shard-000002.tar", &before, NULL), 0);
    assert_int_equal(remote_servers_cmd(&g_srv, "status 500 1000", NULL, NULL), 0);
    Feed__V1__Batch *b = fetch("http", idx, 1);
    assert_int_equal(remote_servers_cmd(&g_srv, "status 500 0", NULL, NULL), 0);
    assert_int_equal(b->status[0], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(remote_servers_cmd(&g_srv, "hits shard-000002.tar", &after, NULL), 0);
    assert_int_equal(after - before, RETRIES + 1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_served_while_store_drips),
        cmocka_unit_test(test_fast_shards_served_slow_shard_fails),
        cmocka_unit_test(test_dead_sample_asked_retries_plus_one),
    };
    if (argc < 3) {
        fprintf(stderr, "usage: %s NODE SERVERS_JS\n", argv[0]);
        return 2;
    }
    g_node = argv[1];
    g_script = argv[2];
    grpc_init();
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    grpc_shutdown();
    return rc;
}
