/*
 * feedd serving tar shards from a real S3-compatible server (SigV4 checked)
 * and a real HTTP server, both started here on 127.0.0.1 port 0 with fault
 * proxies (servers.js), against the same shards on local disk: the same
 * batch bytes and the same dataset fingerprint; a shard refused (403) or
 * deleted mid-epoch gives per-sample errors naming it while the other
 * samples of the batch still come, and feedd stays up; the secret key never
 * shows in feedd's log, metrics or per-sample messages. Every location kind
 * carries planted secrets (a URL's password, a presigned query's signature
 * and credential, the S3 keys from the environment): none shows in feedd's
 * log (start, dataset errors, index warnings, config errors), /metrics,
 * Describe or the per-sample messages, which carry the cause (the HTTP
 * status). cache=SIDE on remote shards is not used, so a replaced object is
 * never served from a cache. Shards are made by feed-pack from real JPEGs.
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

static int setup(void **state)
{
    char cmd[2048], data[300], s3[512], http[512], local[512], ep[128], presigned[512];
    char badidx[512], lost[512], lostidx[512];
    const char *build = getenv("FEED_BUILD_DIR");
    feed_test_server_opts opts = {0};
    (void)state;
    if (!build || feed_test_tmpdir("feed-remote-feedd-", g_tmp, sizeof g_tmp) != 0)
        return -1;
    snprintf(data, sizeof data, "%s/data", g_tmp);
    if (remote_test_make_shards(build, g_tmp, data, 3, 8, 3, 8) != 0)
        return -1;
    /*
     * bad-000000.tar: shard 0 with its index damaged (one byte), so the index is ignored.
     * lost-000000.tar: no shard, shard 0's index (a bad shard, its samples known from the
     * index); lostidx-000000.tar: no shard, an index that is none (a dataset not served).
     */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cp shard-000000.tar bad-000000.tar && cp shard-000000.tar.idx "
             "bad-000000.tar.idx && printf '\\377' | dd of=bad-000000.tar.idx bs=1 seek=40 "
             "conv=notrunc 2>/dev/null && cp shard-000000.tar.idx lost-000000.tar.idx && "
             "printf 'no index' >lostidx-000000.tar.idx",
             data);
    if (remote_test_run(cmd) != 0 || remote_servers_start(&g_srv, g_node, g_script, data, 0) != 0)
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
    snprintf(lost, sizeof lost,
             "lost=http://user:" PLANTED_PASSWORD "@127.0.0.1:%d/lost-000000.tar" PRESIGN,
             g_srv.httpproxy);
    snprintf(lostidx, sizeof lostidx,
             "lostidx=http://user:" PLANTED_PASSWORD "@127.0.0.1:%d/lostidx-000000.tar" PRESIGN,
             g_srv.httpproxy);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", g_srv.s3proxy);
    snprintf(g_log, sizeof g_log, "%s/feedd.log", g_tmp);
    opts.log_path = g_log;
    const char *args[] = {
        "--dataset",        local,     "--dataset",     s3,      "--dataset", http,
        "--dataset",        presigned, "--dataset",     badidx,  "--dataset", lost,
        "--dataset",        lostidx,   "--s3-endpoint", ep,      "--threads", "2",
        "--remote-retries", "1",       "--log-level",   "debug", NULL};
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

/* One batch of samples [0, n) of ds, epoch 1, seed 5, train 48x48. */
static Feed__V1__Batch *fetch_n(const char *ds, size_t n)
{
    Feed__V1__TransformSpec spec = FEED__V1__TRANSFORM_SPEC__INIT;
    uint64_t idx[N_SAMPLES];
    feedtest_stream s;
    for (uint64_t i = 0; i < N_SAMPLES; i++)
        idx[i] = i;
    spec.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
    spec.out_height = spec.out_width = 48;
    spec.flip_prob = 0.5;
    assert_int_equal(
        feedtest_stream_open_batch(g_chan, 120, ds, &spec, "test_remote_feedd", idx, n, &s), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    assert_non_null(b);
    assert_int_equal(b->n_status, n);
    return b;
}

static Feed__V1__Batch *fetch_all(const char *ds)
{
    return fetch_n(ds, N_SAMPLES);
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

/* feedd_cache_hits_total of s. */
static double scrape_cache_hits(const feed_test_server *s)
{
    double v = -1;
    assert_int_equal(feed_test_scrape(s->metrics_port, "feedd_cache_hits_total", &v), 0);
    return v;
}

/* Dataset name's fingerprint as feedd describes it, into hex. */
static void describe_fingerprint(const char *name, char *hex, size_t cap)
{
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(g_chan, name, &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    assert_non_null(r);
    assert_int_equal(r->n_datasets, 1);
    snprintf(hex, cap, "%s", r->datasets[0]->fingerprint);
    feed__v1__describe_response__free_unpacked(r, NULL);
}

/* The same shards on disk, in S3 and behind HTTP: the same bytes, and the same fingerprint
 * (no URL, endpoint or credential goes into it). */
static void test_same_batches(void **state)
{
    (void)state;
    Feed__V1__Batch *ref = fetch_all("local");
    const char *remote[] = {"s3", "http"};
    char fp_local[80], fp[80];
    describe_fingerprint("local", fp_local, sizeof fp_local);
    assert_int_equal(strlen(fp_local), 64);
    for (size_t d = 0; d < 2; d++) {
        describe_fingerprint(remote[d], fp, sizeof fp);
        assert_string_equal(fp, fp_local);
    }
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

/*
 * A shard gone from the store whose index is there (a bad shard: served, each of its samples
 * failing) and a dataset not served (its only shard gone, its index none): the warnings, the
 * refusal and the per-sample messages name the objects redacted.
 */
static void test_bad_shard_and_refused_dataset_redacted(void **state)
{
    char line[400];
    (void)state;
    Feed__V1__Batch *b = fetch_n("lost", 8);
    assert_int_equal(b->n_errors, 8);
    for (size_t e = 0; e < b->n_errors; e++) {
        if (!strstr(b->errors[e]->message, "lost-000000.tar, member at byte"))
            fail_msg("want the shard named in: %s", b->errors[e]->message);
        expect_no_secret(b->errors[e]->message, "a per-sample message");
    }
    feed__v1__batch__free_unpacked(b, NULL);
    snprintf(line, sizeof line,
             "dataset: bad shard: http://127.0.0.1:%d/lost-000000.tar: ", g_httpproxy);
    expect_log(line);
    expect_log("of shard lost-000000.tar): the shard could not be read at open");
    snprintf(
        line, sizeof line,
        "dataset lostidx is not served: http://127.0.0.1:%d/lostidx-000000.tar: ", g_httpproxy);
    expect_log(line);
    snprintf(line, sizeof line,
             "the shard index http://127.0.0.1:%d/lostidx-000000.tar.idx is unusable too",
             g_httpproxy);
    expect_log(line);
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

/*
 * Issue 28 finding 4: with cache=SIDE on remote shards, a warm server kept serving an object's
 * old pixels as OK after the object was replaced, while an uncached server failed its samples
 * ("changed") and a fresh one served the new bytes. A hit cannot see the object's version without
 * a request, so feedd now serves such a dataset uncached (a warning; Describe's cache_side 0):
 * it answers as the uncached server does. Last: it replaces shard 0 in the store.
 */
static void test_remote_cache_never_outlives_its_object(void **state)
{
    (void)state;
    enum { N = 16 }; /* shards 0 and 1: an earlier test deleted shard 2 */
    char arg[512], ep[128], log[400];
    snprintf(arg, sizeof arg, "s3=s3://" REMOTE_TEST_BUCKET "/shard-{000000..000001}.tar,cache=64");
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", g_srv.s3proxy);
    snprintf(log, sizeof log, "%s/cached.log", g_tmp);
    const char *args[] = {"--dataset", arg, "--cache-bytes",    "16M", "--s3-endpoint", ep,
                          "--threads", "2", "--remote-retries", "1",   "--log-level",   "info",
                          NULL};
    feed_test_server_opts opts = {.log_path = log};
    feed_test_server cached;
    assert_int_equal(feed_test_server_start_with(&opts, args, &cached), 0);
    grpc_channel *plain = g_chan;
    g_chan = feedtest_channel(cached.target);
    Feed__V1__Batch *before = fetch_n("s3", N);
    Feed__V1__Batch *again = fetch_n("s3", N);
    assert_memory_equal(again->data.data, before->data.data, before->data.len);

    assert_int_equal(remote_servers_cmd(&g_srv, "replace shard-000000.tar", NULL, NULL), 0);
    Feed__V1__Batch *c = fetch_n("s3", N);
    grpc_channel *cch = g_chan;
    g_chan = plain;
    Feed__V1__Batch *p = fetch_n("s3", N);
    size_t sb = sample_bytes(before);
    for (size_t i = 0; i < N; i++) {
        if (i < 8 && c->status[i] == FEED__V1__SAMPLE_STATUS__SAMPLE_OK)
            fail_msg("sample %zu: served as OK from a replaced object", i);
        assert_int_equal(c->status[i], p->status[i]);
        if (i >= 8) {
            assert_int_equal(c->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
            assert_memory_equal(c->data.data + i * sb, before->data.data + i * sb, sb);
        }
    }
    grpc_status_code code;
    Feed__V1__DescribeResponse *d = feedtest_describe(cch, "s3", &code);
    assert_non_null(d);
    assert_int_equal(d->datasets[0]->cache_side, 0);
    feed__v1__describe_response__free_unpacked(d, NULL);
    assert_int_equal(scrape_cache_hits(&cached), 0);
    feed__v1__batch__free_unpacked(before, NULL);
    feed__v1__batch__free_unpacked(again, NULL);
    feed__v1__batch__free_unpacked(c, NULL);
    feed__v1__batch__free_unpacked(p, NULL);
    grpc_channel_destroy(cch);
    assert_int_equal(feed_test_server_stop(&cached), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_batches),
        cmocka_unit_test(test_shard_refused_then_deleted),
        cmocka_unit_test(test_presigned_shard_index),
        cmocka_unit_test(test_bad_shard_and_refused_dataset_redacted),
        cmocka_unit_test(test_no_secret_in_log_or_metrics),
        cmocka_unit_test(test_remote_cache_never_outlives_its_object),
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
