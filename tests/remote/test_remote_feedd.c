/*
 * feedd serving tar shards from a real S3-compatible server (SigV4 checked)
 * and a real HTTP server, both started here on 127.0.0.1 port 0 with fault
 * proxies (servers.js), against the same shards on local disk: the same
 * batch bytes; a shard refused (403) or deleted mid-epoch gives per-sample
 * errors naming it while the other samples of the batch still come, and
 * feedd stays up; the secret key never shows in feedd's log, metrics or
 * per-sample messages. Every location kind carries planted secrets (a URL's
 * password, a presigned query's signature and credential, the S3 keys from
 * the environment): none shows in feedd's log (start, dataset errors,
 * index warnings, config errors), /metrics, Describe or the per-sample
 * messages, which carry the cause (the HTTP status). Shards are made by
 * feed-pack from real JPEGs.
 *
 * usage: test_remote_feedd NODE SERVERS_JS (FEED_BUILD_DIR names the build)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_grpc.h"
#include "remote_servers.h"

#define N_SAMPLES 24u /* 3 classes x 8, 8 a shard */
#define SHARDS "shard-{000000..000002}.tar"
#define PLANTED_PASSWORD "planted-Passw0rd"
#define PLANTED_SIG "p1anted5ignature"
#define PLANTED_CRED "PLANTEDCRED-20260101"
#define PRESIGN "?X-Amz-Credential=" PLANTED_CRED "&X-Amz-Signature=" PLANTED_SIG

static const char *const g_secrets[] = {REMOTE_TEST_SECRET, REMOTE_TEST_KEY, PLANTED_PASSWORD,
                                        PLANTED_SIG, PLANTED_CRED};

static const char *g_node, *g_script;
static remote_servers g_srv;
static feed_test_server g_feedd;
static grpc_channel *g_chan;
static char g_tmp[256], g_log[400];
static int g_httpproxy;

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "failed (%d): %s\n", rc, cmd);
    return rc;
}

static int setup(void **state)
{
    char cmd[2048], data[300], s3[512], http[512], local[512], ep[128], presigned[512];
    char badidx[512];
    const char *build = getenv("FEED_BUILD_DIR");
    feed_test_server_opts opts = {0};
    (void)state;
    if (!build || feed_test_tmpdir("feed-remote-feedd-", g_tmp, sizeof g_tmp) != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", g_tmp);
    snprintf(cmd, sizeof cmd,
             "'%s/server/tools/feed-gen-dataset' '%s/tree' --classes 3 --per-class 8 --seed 3 "
             ">/dev/null && mkdir '%s' && '%s/server/tools/feed-pack' '%s/tree' '%s/shard' "
             "--format tar --shard-samples 8 >/dev/null",
             build, g_tmp, data, build, g_tmp, data);
    if (run(cmd) != 0)
        return -1;
    /* bad-000000.tar: shard 0 with its index damaged (one byte), so the index is ignored. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cp shard-000000.tar bad-000000.tar && cp shard-000000.tar.idx "
             "bad-000000.tar.idx && printf '\\377' | dd of=bad-000000.tar.idx bs=1 seek=40 "
             "conv=notrunc 2>/dev/null",
             data);
    if (run(cmd) != 0 || remote_servers_start(&g_srv, g_node, g_script, data, 0) != 0)
        return -1;
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_ACCESS_KEY_ID", REMOTE_TEST_KEY, 1);
    setenv("AWS_SECRET_ACCESS_KEY", REMOTE_TEST_SECRET, 1); /* feedd inherits them */
    g_httpproxy = g_srv.httpproxy;
    snprintf(local, sizeof local, "local=%s/" SHARDS, data);
    snprintf(s3, sizeof s3, "s3=s3://" REMOTE_TEST_BUCKET "/" SHARDS);
    snprintf(http, sizeof http, "http=http://user:" PLANTED_PASSWORD "@127.0.0.1:%d/" SHARDS,
             g_srv.httpproxy);
    snprintf(presigned, sizeof presigned, "presigned=http://127.0.0.1:%d/shard-000000.tar" PRESIGN,
             g_srv.httpproxy);
    snprintf(badidx, sizeof badidx,
             "badidx=http://user:" PLANTED_PASSWORD "@127.0.0.1:%d/bad-000000.tar" PRESIGN,
             g_srv.httpproxy);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", g_srv.s3proxy);
    snprintf(g_log, sizeof g_log, "%s/feedd.log", g_tmp);
    opts.log_path = g_log;
    const char *args[] = {
        "--dataset", local,     "--dataset",        s3,     "--dataset",     http,
        "--dataset", presigned, "--dataset",        badidx, "--s3-endpoint", ep,
        "--threads", "2",       "--remote-retries", "1",    "--log-level",   "debug",
        NULL};
    if (feed_test_server_start_with(&opts, args, &g_feedd) != 0)
        return -1;
    g_chan = feedtest_channel(g_feedd.target);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_chan)
        grpc_channel_destroy(g_chan);
    feed_test_server_stop(&g_feedd);
    remote_servers_stop(&g_srv);
    feed_test_rmtree(g_tmp);
    return 0;
}

/* One batch of samples [0, N_SAMPLES) of ds, epoch 1, seed 5, train 48x48. */
static Feed__V1__Batch *fetch_all(const char *ds)
{
    Feed__V1__TransformSpec spec = FEED__V1__TRANSFORM_SPEC__INIT;
    Feed__V1__SessionOpen open;
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    uint64_t idx[N_SAMPLES];
    feedtest_stream s;
    for (uint64_t i = 0; i < N_SAMPLES; i++)
        idx[i] = i;
    spec.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
    spec.out_height = spec.out_width = 48;
    spec.flip_prob = 0.5;
    feed__v1__session_open__init(&open);
    open.dataset = (char *)ds;
    open.transform = &spec;
    open.seed = 5;
    open.window = 1;
    open.protocol_version = 1;
    open.client_name = (char *)"test_remote_feedd";
    r.open = &open;
    r.batch_id = 1;
    r.epoch = 1;
    r.n_indices = N_SAMPLES;
    r.indices = idx;
    assert_int_equal(feedtest_stream_open(g_chan, 120, &s), 0);
    assert_int_equal(feedtest_stream_send(&s, &r), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    assert_non_null(b);
    assert_int_equal(b->n_status, N_SAMPLES);
    return b;
}

static size_t sample_bytes(const Feed__V1__Batch *b)
{
    return (size_t)b->height * b->width * b->channels;
}

/* text (from where) holds none of the planted secrets. */
static void expect_no_secret(const char *text, const char *where)
{
    for (size_t i = 0; i < sizeof g_secrets / sizeof g_secrets[0]; i++)
        if (strstr(text, g_secrets[i]))
            fail_msg("%s holds the planted secret '%s'", where, g_secrets[i]);
    if (strstr(text, "Signature=") || strstr(text, "X-Amz-"))
        fail_msg("%s holds a signature or a presigned query", where);
}

/* The whole of a file, NUL-terminated, in a static buffer (1 MiB at most). */
static const char *slurp(const char *path)
{
    static char text[1 << 20];
    FILE *f = fopen(path, "r");
    size_t n;
    assert_non_null(f);
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    return text;
}

/* Samples [lo, hi) failed with IO_ERROR saying why; the others equal ref's. */
static void expect_failed_range(const Feed__V1__Batch *b, const Feed__V1__Batch *ref, size_t lo,
                                size_t hi, const char *why)
{
    size_t sb = sample_bytes(ref);
    for (size_t i = 0; i < N_SAMPLES; i++) {
        if (i >= lo && i < hi) {
            assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
        } else {
            assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
            assert_memory_equal(b->data.data + i * sb, ref->data.data + i * sb, sb);
        }
    }
    assert_int_equal(b->n_errors, hi - lo);
    for (size_t e = 0; e < b->n_errors; e++) {
        if (!strstr(b->errors[e]->message, why))
            fail_msg("want '%s' in: %s", why, b->errors[e]->message);
        expect_no_secret(b->errors[e]->message, "a per-sample message");
    }
}

/* feedd's log so far holds needle (it names the shard and the cause). */
static void expect_log(const char *needle)
{
    const char *log = slurp(g_log);
    if (!strstr(log, needle))
        fail_msg("feedd's log lacks '%s'", needle);
    expect_no_secret(log, "feedd's log");
}

static void test_same_batches(void **state)
{
    (void)state;
    Feed__V1__Batch *ref = fetch_all("local");
    const char *remote[] = {"s3", "http"};
    for (size_t i = 0; i < N_SAMPLES; i++)
        assert_int_equal(ref->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    for (size_t d = 0; d < 2; d++) {
        Feed__V1__Batch *b = fetch_all(remote[d]);
        assert_int_equal(b->data.len, ref->data.len);
        assert_memory_equal(b->data.data, ref->data.data, ref->data.len);
        assert_memory_equal(b->labels, ref->labels, N_SAMPLES * sizeof *ref->labels);
        assert_int_equal(b->crc32c, ref->crc32c);
        feed__v1__batch__free_unpacked(b, NULL);
    }
    feed__v1__batch__free_unpacked(ref, NULL);
}

static void test_shard_refused_then_deleted(void **state)
{
    (void)state;
    Feed__V1__Batch *ref = fetch_all("local");
    assert_int_equal(remote_servers_cmd(&g_srv, "deny shard-000001.tar", NULL, NULL), 0);
    Feed__V1__Batch *b = fetch_all("s3");
    expect_failed_range(b, ref, 8, 16, "credentials refused");
    feed__v1__batch__free_unpacked(b, NULL);
    expect_log("s3://" REMOTE_TEST_BUCKET
               "/shard-000001.tar: access refused (HTTP 403 AccessDenied)");
    b = fetch_all("http");
    /* The client sees the cause, not only the code. */
    expect_failed_range(b, ref, 8, 16,
                        "credentials refused by the server: access refused (HTTP 403");
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(remote_servers_cmd(&g_srv, "allow shard-000001.tar", NULL, NULL), 0);

    assert_int_equal(remote_servers_cmd(&g_srv, "delete shard-000002.tar", NULL, NULL), 0);
    b = fetch_all("s3");
    expect_failed_range(b, ref, 16, 24, "gone");
    feed__v1__batch__free_unpacked(b, NULL);
    expect_log("s3://" REMOTE_TEST_BUCKET "/shard-000002.tar: not found (HTTP 404 NoSuchKey)");
    b = fetch_all("http");
    expect_failed_range(b, ref, 16, 24,
                        "gone (ENOENT): removed since the open: not found (HTTP 404)");
    feed__v1__batch__free_unpacked(b, NULL);
    feed__v1__batch__free_unpacked(ref, NULL);
}

/* No line of text holds both a and b. */
static void expect_no_line_with(const char *text, const char *a, const char *b)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, "\n");
        const char *hit = strstr(p, a);
        if (hit && hit < p + n) {
            const char *hb = strstr(p, b);
            if (hb && hb < p + n)
                fail_msg("a line holds '%s' and '%s': %.*s", a, b, (int)n, p);
        }
        p += n + (p[n] == '\n');
    }
}

/*
 * A presigned shard's index is SHARD.idx with the shard's query (".idx" on
 * the path, not after the query): found and used, so no warning for it.
 */
static void test_presigned_shard_index(void **state)
{
    (void)state;
    Feed__V1__Batch *ref = fetch_all("local");
    expect_no_line_with(slurp(g_log), "ignoring the shard index", "shard-000000");
    expect_log("dataset presigned: tar, 8 samples");
    feed__v1__batch__free_unpacked(ref, NULL);
}

/* feedd run to fail at start with args; its stderr appended to g_tmp/fail.log. */
static void run_failing_feedd(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s/server/feedd' --listen 127.0.0.1:0 %s >>'%s/fail.log' 2>&1",
             getenv("FEED_BUILD_DIR"), args, g_tmp);
    assert_int_not_equal(system(cmd), 0);
}

static void test_no_secret_in_log_or_metrics(void **state)
{
    int status = 0;
    char *body = NULL, path[400], args[1024];
    grpc_status_code code;
    (void)state;
    assert_int_equal(feed_test_http_get(g_feedd.metrics_port, "/metrics", &status, &body), 0);
    assert_int_equal(status, 200);
    expect_no_secret(body, "/metrics");
    free(body);
    Feed__V1__DescribeResponse *d = feedtest_describe(g_chan, "", &code);
    assert_non_null(d);
    size_t n = feed__v1__describe_response__get_packed_size(d);
    uint8_t *packed = malloc(n + 1);
    assert_non_null(packed);
    feed__v1__describe_response__pack(d, packed);
    packed[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (packed[i] == '\0')
            packed[i] = ' ';
    expect_no_secret((const char *)packed, "Describe");
    free(packed);
    feed__v1__describe_response__free_unpacked(d, NULL);
    expect_log("s3://" REMOTE_TEST_BUCKET); /* the log names objects, never the secret */
    /* The start's line for each dataset, and the warning for the damaged index. */
    snprintf(path, sizeof path, "(http://127.0.0.1:%d/" SHARDS ")", g_httpproxy);
    expect_log(path);
    snprintf(path, sizeof path, "(http://127.0.0.1:%d/shard-000000.tar)", g_httpproxy);
    expect_log(path);
    snprintf(path, sizeof path, "ignoring the shard index: http://127.0.0.1:%d/bad-000000.tar.idx",
             g_httpproxy);
    expect_log(path);

    /* Errors at start: a dataset that cannot open, a bad pattern, a bad --dataset. */
    snprintf(args, sizeof args,
             "--dataset 'gone=http://u:" PLANTED_PASSWORD "@127.0.0.1:%d/missing-{0..1}.tar" PRESIGN
             "'",
             g_httpproxy);
    run_failing_feedd(args);
    snprintf(args, sizeof args,
             "--dataset 'pat=http://u:" PLANTED_PASSWORD "@127.0.0.1:%d/x-{1..a}.tar" PRESIGN "'",
             g_httpproxy);
    run_failing_feedd(args);
    run_failing_feedd("--dataset 'https://u:" PLANTED_PASSWORD "@h.example/x.tar'");
    run_failing_feedd("--dataset 'https://u:" PLANTED_PASSWORD "@h.example/y.tar" PRESIGN "'");
    run_failing_feedd("'https://u:" PLANTED_PASSWORD "@h.example/x.tar" PRESIGN "'");
    snprintf(path, sizeof path, "%s/fail.log", g_tmp);
    const char *fail = slurp(path);
    if (!strstr(fail, "missing-0.tar: not found (HTTP 404)") ||
        !strstr(fail, "/x-{1..a}.tar: range {1..a} is not") ||
        !strstr(fail, "got 'https://h.example/x.tar'") ||
        !strstr(fail, "a name holds no ':' or '/' (NAME=PATH), got 'https://h.example/y.tar'") ||
        !strstr(fail, "unexpected argument 'https://h.example/x.tar'"))
        fail_msg("feedd's start errors are not the ones expected:\n%s", fail);
    expect_no_secret(fail, "feedd's start errors");
    /* feedd is still up: the local dataset serves whole batches. */
    Feed__V1__Batch *b = fetch_all("local");
    feed__v1__batch__free_unpacked(b, NULL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_batches),
        cmocka_unit_test(test_shard_refused_then_deleted),
        cmocka_unit_test(test_presigned_shard_index),
        cmocka_unit_test(test_no_secret_in_log_or_metrics),
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
