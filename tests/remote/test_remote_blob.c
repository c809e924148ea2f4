/*
 * The remote blob against real servers started here on 127.0.0.1 port 0
 * (servers.js): an S3-compatible server that checks every SigV4 signature, a
 * static HTTP server with Range support, and fault proxies in front of both
 * that answer 5xx, cut, stall, delay or lengthen responses on command.
 *
 * usage: test_remote_blob NODE SERVERS_JS
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/remote.h"
#include "feedtest.h"
#include "remote_servers.h"

#define OBJ_SIZE (1u << 20)

static const char *g_node, *g_script;
static remote_servers g_srv;
static char g_dir[512];
static uint8_t g_obj[OBJ_SIZE]; /* obj.bin's bytes */

static int setup(void **state)
{
    char path[600];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    (void)state;
    for (size_t i = 0; i < OBJ_SIZE; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g_obj[i] = (uint8_t)x;
    }
    if (feed_test_tmpdir("feed-remote-", g_dir, sizeof g_dir) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/obj.bin", g_dir);
    feed_test_write_file(path, g_obj, OBJ_SIZE);
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/copy%d.bin", g_dir, i);
        feed_test_write_file(path, g_obj, OBJ_SIZE);
    }
    snprintf(path, sizeof path, "%s/dir with space", g_dir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/dir with space/small.bin", g_dir);
    feed_test_write_file(path, g_obj, 1000);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    setenv("HOME", g_dir, 1); /* no ~/.aws of the machine's */
    return remote_servers_start(&g_srv, g_node, g_script, g_dir, 0);
}

static int teardown(void **state)
{
    (void)state;
    remote_servers_stop(&g_srv);
    feed_test_rmtree(g_dir);
    return 0;
}

static void set_creds(const char *secret)
{
    setenv("AWS_ACCESS_KEY_ID", REMOTE_TEST_KEY, 1);
    setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
}

static void options(feed_blob_options *o, char *endpoint, size_t cap, int port)
{
    memset(o, 0, sizeof *o);
    o->max_read_bytes = 4u << 20;
    o->remote.path_style = -1;
    o->remote.connections = 4;
    o->remote.readahead_bytes = 8u << 20;
    o->remote.timeout_ms = 10000;
    o->remote.retries = 3;
    snprintf(endpoint, cap, "http://127.0.0.1:%d", port);
    o->remote.endpoint = endpoint;
}

static feed_blob *open_ok(const char *loc, const feed_blob_options *o)
{
    feed_blob *b = NULL;
    char err[512] = "";
    int rc = feed_remote_blob_open(loc, o, &b, err, sizeof err);
    if (rc != 0)
        fail_msg("%s: %s (%s)", loc, feed_err_name(rc), err);
    return b;
}

static void check_ranges(feed_blob *b)
{
    static uint8_t buf[OBJ_SIZE];
    const uint64_t offs[][2] = {
        {1, 1},       {0, 4096}, {12345, 54321}, {OBJ_SIZE - 1, 1}, {OBJ_SIZE - 1000, 1000},
        {0, OBJ_SIZE}};
    char err[512];
    assert_int_equal(b->size, OBJ_SIZE);
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        memset(buf, 0, offs[i][1]);
        int rc = feed_blob_read(b, offs[i][0], offs[i][1], buf, err, sizeof err);
        if (rc != 0)
            fail_msg("read %llu+%llu: %s %s", (unsigned long long)offs[i][0],
                     (unsigned long long)offs[i][1], feed_err_name(rc), err);
        assert_memory_equal(buf, g_obj + offs[i][0], offs[i][1]);
    }
    assert_int_equal(feed_blob_read(b, OBJ_SIZE - 10, 11, buf, err, sizeof err), FEED_EINVAL);
}

static void test_s3_ranged_reads(void **state)
{
    feed_blob_options o;
    char ep[128];
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o);
    assert_int_not_equal(b->version, 0);
    assert_string_equal(b->name, "s3://" REMOTE_TEST_BUCKET "/obj.bin");
    check_ranges(b);
    feed_blob_close(b);
    /* A key that needs encoding (the signature covers the encoded path). */
    b = open_ok("s3://" REMOTE_TEST_BUCKET "/dir with space/small.bin", &o);
    assert_int_equal(b->size, 1000);
    feed_blob_close(b);
}

static void test_http_ranged_reads(void **state)
{
    feed_blob_options o;
    char ep[128], url[256];
    (void)state;
    options(&o, ep, sizeof ep, g_srv.s3);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin?token=hunter2", g_srv.http);
    feed_blob *b = open_ok(url, &o);
    assert_null(strstr(b->name, "hunter2"));
    check_ranges(b);
    feed_blob_close(b);
}

static void test_wrong_credentials(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    feed_blob *b = NULL;
    (void)state;
    set_creds("wrong-secret-hunter2");
    options(&o, ep, sizeof ep, g_srv.s3);
    assert_int_equal(
        feed_remote_blob_open("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o, &b, err, sizeof err),
        FEED_EAUTH);
    assert_null(b);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/obj.bin"));
    assert_non_null(strstr(err, "403"));
    assert_null(strstr(err, "hunter2"));
    assert_null(strstr(err, "Signature="));
    /* An unknown key id: refused too. */
    setenv("AWS_ACCESS_KEY_ID", "NOSUCHKEY", 1);
    assert_int_equal(
        feed_remote_blob_open("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o, &b, err, sizeof err),
        FEED_EAUTH);
    assert_null(strstr(err, "hunter2"));
    /* The right key, then a 403 from the store mid-way: the read names the object. */
    set_creds(REMOTE_TEST_SECRET);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", g_srv.s3proxy);
    b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy0.bin", &o);
    uint8_t buf[100];
    assert_int_equal(remote_servers_cmd(&g_srv, "deny copy0.bin", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 0, sizeof buf, buf, err, sizeof err), FEED_EAUTH);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/copy0.bin"));
    assert_int_equal(remote_servers_cmd(&g_srv, "allow copy0.bin", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 0, sizeof buf, buf, err, sizeof err), 0);
    feed_blob_close(b);
}

static void test_not_found(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "", url[256];
    feed_blob *b = NULL;
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    assert_int_equal(
        feed_remote_blob_open("s3://" REMOTE_TEST_BUCKET "/missing.tar", &o, &b, err, sizeof err),
        FEED_ENOTFOUND);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/missing.tar"));
    snprintf(url, sizeof url, "http://user:hunter2@127.0.0.1:%d/missing.tar", g_srv.http);
    assert_int_equal(feed_remote_blob_open(url, &o, &b, err, sizeof err), FEED_ENOTFOUND);
    assert_non_null(strstr(err, "missing.tar"));
    assert_null(strstr(err, "hunter2"));
    /* Deleted after the open: the read says so. */
    b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy1.bin", &o);
    assert_int_equal(remote_servers_cmd(&g_srv, "delete copy1.bin", NULL, NULL), 0);
    uint8_t buf[10];
    assert_int_equal(feed_blob_read(b, 0, sizeof buf, buf, err, sizeof err), FEED_ENOTFOUND);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/copy1.bin"));
    feed_blob_close(b);
}

static void test_changed_object(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    uint8_t buf[64];
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy2.bin", &o);
    assert_int_equal(remote_servers_cmd(&g_srv, "replace copy2.bin", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 100, sizeof buf, buf, err, sizeof err), FEED_ESTATE);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/copy2.bin"));
    feed_blob_close(b);
}

/* Through the fault proxy: 5xx, cuts and stalls are retried; an over-long body is not. */
static void test_faults_retried(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    static uint8_t buf[200000];
    feed_remote_stats before, after;
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3proxy);
    o.remote.timeout_ms = 1000;
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o);

    feed_remote_stats_get(&before);
    assert_int_equal(remote_servers_cmd(&g_srv, "status 503 2", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 1000, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 1000, sizeof buf);
    feed_remote_stats_get(&after);
    assert_int_equal(after.retries - before.retries, 2);

    assert_int_equal(remote_servers_cmd(&g_srv, "cut 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 7, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 7, sizeof buf);
    feed_remote_stats_get(&before);
    assert_int_equal(before.retries - after.retries, 1);

    /* A stalled response runs into the timeout and is sent again. */
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 99, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 99, sizeof buf);

    /* A slow store: every request delayed, the bytes still exact. */
    assert_int_equal(remote_servers_cmd(&g_srv, "delay 50", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 5000, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 5000, sizeof buf);
    assert_int_equal(remote_servers_cmd(&g_srv, "delay 0", NULL, NULL), 0);

    /* More 5xx than retries: FEED_EIO naming the object and the status. */
    assert_int_equal(remote_servers_cmd(&g_srv, "status 500 4", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 0, 10, buf, err, sizeof err), FEED_EIO);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/obj.bin"));
    assert_non_null(strstr(err, "500"));

    /* A body longer than the range asked for: refused, not retried, not written past. */
    buf[10] = 0xA5;
    feed_remote_stats_get(&before);
    assert_int_equal(remote_servers_cmd(&g_srv, "overlong 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 0, 10, buf, err, sizeof err), FEED_EPROTO);
    assert_non_null(strstr(err, "more than the 10 bytes"));
    assert_int_equal(buf[10], 0xA5);
    feed_remote_stats_get(&after);
    assert_int_equal(after.retries, before.retries);
    feed_blob_close(b);
}

/*
 * A 30x is not followed by default (the object server could send feedd
 * anywhere its network reaches); with same-host redirects, one to the same
 * scheme and host:port is, one to another port is not.
 */
static void test_redirects(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "", url[256], cmd[64];
    static uint8_t buf[5000];
    feed_blob *b = NULL;
    (void)state;
    options(&o, ep, sizeof ep, g_srv.s3);
    o.remote.retries = 0;
    snprintf(url, sizeof url, "http://user:hunter2@127.0.0.1:%d/copy3.bin?token=hunter2",
             g_srv.httpproxy);
    snprintf(cmd, sizeof cmd, "redirect %d 1", g_srv.http); /* another port: another server */
    assert_int_equal(remote_servers_cmd(&g_srv, cmd, NULL, NULL), 0);
    assert_int_equal(feed_remote_blob_open(url, &o, &b, err, sizeof err), FEED_EIO);
    assert_null(b);
    if (!strstr(err, "/copy3.bin: redirected (HTTP 302)") || !strstr(err, "not followed"))
        fail_msg("%s", err);
    assert_null(strstr(err, "hunter2"));

    /* Opened, then redirected on a read: the read fails the same way. */
    b = open_ok(url, &o);
    assert_int_equal(remote_servers_cmd(&g_srv, "redirect 0 1", NULL, NULL), 0); /* itself */
    assert_int_equal(feed_blob_read(b, 10, sizeof buf, buf, err, sizeof err), FEED_EIO);
    assert_non_null(strstr(err, "redirected (HTTP 302)"));
    feed_blob_close(b);

    /* same-host: followed to the same host:port, refused to another port. */
    o.remote.redirects = FEED_REMOTE_REDIRECTS_SAME_HOST;
    b = open_ok(url, &o);
    assert_int_equal(remote_servers_cmd(&g_srv, "redirect 0 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 10, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 10, sizeof buf);
    assert_int_equal(remote_servers_cmd(&g_srv, cmd, NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 10, sizeof buf, buf, err, sizeof err), FEED_EIO);
    if (!strstr(err, "another scheme or host; not followed"))
        fail_msg("%s", err);
    assert_null(strstr(err, "hunter2"));
    feed_blob_close(b);
}

/* A 500 whose body never ends: a small prefix is read, then the connection is closed. */
static void test_endless_error_body(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "", url[256];
    uint8_t buf[100];
    feed_remote_stats before, after;
    (void)state;
    options(&o, ep, sizeof ep, g_srv.s3);
    o.remote.retries = 0;
    o.remote.timeout_ms = 3000; /* a hang guard: the request should end long before */
    snprintf(url, sizeof url, "http://127.0.0.1:%d/copy4.bin", g_srv.httpproxy);
    feed_blob *b = open_ok(url, &o);
    feed_remote_stats_get(&before);
    assert_int_equal(remote_servers_cmd(&g_srv, "endless 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 0, sizeof buf, buf, err, sizeof err), FEED_EIO);
    feed_remote_stats_get(&after);
    if (!strstr(err, "copy4.bin: HTTP 500"))
        fail_msg("%s", err);
    if (after.bytes - before.bytes > 64 * 1024)
        fail_msg("%llu bytes of the error body read",
                 (unsigned long long)(after.bytes - before.bytes));
    /* The next request is served (on a new connection). */
    assert_int_equal(feed_blob_read(b, 0, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj, sizeof buf);
    feed_blob_close(b);
}

/* A 206 must say, in Content-Range, the range that was asked for. */
static void test_range_protocol_errors(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "", url[256];
    uint8_t buf[64];
    (void)state;
    options(&o, ep, sizeof ep, g_srv.s3);
    o.remote.retries = 0;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/obj.bin", g_srv.httpproxy);
    feed_blob *b = open_ok(url, &o);
    assert_int_equal(remote_servers_cmd(&g_srv, "norange 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 100, sizeof buf, buf, err, sizeof err), FEED_EPROTO);
    if (!strstr(err, "206 without a valid Content-Range") || strstr(err, "changed"))
        fail_msg("%s", err);
    /* Bytes 99-162 with an honest Content-Range, for 100-163: refused. */
    assert_int_equal(remote_servers_cmd(&g_srv, "shift 1", NULL, NULL), 0);
    assert_int_equal(feed_blob_read(b, 100, sizeof buf, buf, err, sizeof err), FEED_EPROTO);
    if (!strstr(err, "sent bytes 99-162 for a request of bytes 100-163"))
        fail_msg("%s", err);
    assert_int_equal(feed_blob_read(b, 100, sizeof buf, buf, err, sizeof err), 0);
    assert_memory_equal(buf, g_obj + 100, sizeof buf);
    feed_blob_close(b);
}

static void test_read_cap(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    static uint8_t buf[OBJ_SIZE];
    feed_remote_stats before, after;
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    o.max_read_bytes = 4096;
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o);
    feed_remote_stats_get(&before);
    assert_int_equal(feed_blob_read(b, 0, 4097, buf, err, sizeof err), FEED_ETOOBIG);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/obj.bin"));
    feed_remote_stats_get(&after);
    assert_int_equal(after.requests, before.requests); /* refused before any request */
    assert_int_equal(feed_blob_read(b, 0, 4096, buf, err, sizeof err), 0);
    feed_blob_close(b);
}

/* Hinted ranges are fetched in the background; a later read takes them. */
static void test_readahead(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    uint8_t buf[8192];
    feed_remote_stats before, now;
    feed_blob_range r[8];
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    o.remote.readahead_bytes = 8 * sizeof buf;
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy3.bin", &o);
    for (size_t i = 0; i < 8; i++)
        r[i] = (feed_blob_range){i * 100000, sizeof buf};
    feed_remote_stats_get(&before);
    feed_blob_prefetch(b, r, 8);
    /* A ninth hint does not fit the budget while the first eight are unread (and fresh). */
    feed_blob_range extra = {900000, sizeof buf};
    feed_blob_prefetch(b, &extra, 1);
    do {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL); /* waiting for the workers' event, no timing asserted */
        feed_remote_stats_get(&now);
    } while (now.readahead_done - before.readahead_done < 8);
    assert_int_equal(now.readahead_dropped - before.readahead_dropped, 1);
    /* The object is gone now: hinted reads still come from what was fetched. */
    assert_int_equal(remote_servers_cmd(&g_srv, "delete copy3.bin", NULL, NULL), 0);
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(feed_blob_read(b, r[i].offset, sizeof buf, buf, err, sizeof err), 0);
        assert_memory_equal(buf, g_obj + r[i].offset, sizeof buf);
    }
    feed_remote_stats_get(&now);
    assert_int_equal(now.readahead_hits - before.readahead_hits, 8);
    assert_int_equal(feed_blob_read(b, 1, 10, buf, err, sizeof err), FEED_ENOTFOUND);
    feed_blob_close(b);
}

/* One range hinted twice (two batches, or a batch and its hedge, want the same sample) is
 * fetched once and serves both reads: before, the second read went to the network. The reads
 * wait for the fetch themselves, so no waiting here; requests less retries count what went out. */
static void test_readahead_shared(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    uint8_t buf[8192];
    feed_remote_stats before, now;
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3);
    o.remote.readahead_bytes = 8 * sizeof buf;
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy4.bin", &o);
    feed_blob_range r = {300000, sizeof buf};
    feed_remote_stats_get(&before);
    feed_blob_prefetch(b, &r, 1);
    feed_blob_prefetch(b, &r, 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(feed_blob_read(b, r.offset, sizeof buf, buf, err, sizeof err), 0);
        assert_memory_equal(buf, g_obj + r.offset, sizeof buf);
    }
    feed_remote_stats_get(&now);
    assert_int_equal(now.readahead_done - before.readahead_done, 1);
    assert_int_equal(now.readahead_hits - before.readahead_hits, 2);
    assert_int_equal((now.requests - now.retries) - (before.requests - before.retries), 1);
    /* Both hints are used up: a third read asks the store. */
    assert_int_equal(feed_blob_read(b, r.offset, sizeof buf, buf, err, sizeof err), 0);
    feed_remote_stats_get(&now);
    assert_int_equal(now.readahead_hits - before.readahead_hits, 2);
    assert_int_equal((now.requests - now.retries) - (before.requests - before.retries), 2);
    feed_blob_close(b);
}

/* A hinted range whose fetch failed after its retries hands that failure to the read, which
 * does not ask the store again: R+1 requests for a dead range. Before, the read started over
 * and the store saw 2(R+1). */
static void test_readahead_failure_handed_to_read(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    uint8_t buf[4096];
    feed_remote_stats before, now;
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3proxy);
    o.remote.retries = 2;
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/copy4.bin", &o);
    feed_blob_range r = {12345, sizeof buf};
    feed_remote_stats_get(&before);
    assert_int_equal(remote_servers_cmd(&g_srv, "status 500 1000", NULL, NULL), 0);
    feed_blob_prefetch(b, &r, 1);
    assert_int_equal(feed_blob_read(b, r.offset, sizeof buf, buf, err, sizeof err), FEED_EIO);
    assert_int_equal(remote_servers_cmd(&g_srv, "status 500 0", NULL, NULL), 0);
    assert_non_null(strstr(err, "s3://" REMOTE_TEST_BUCKET "/copy4.bin"));
    assert_non_null(strstr(err, "500"));
    feed_remote_stats_get(&now);
    assert_int_equal(now.readahead_done - before.readahead_done, 1);
    assert_int_equal(now.requests - before.requests, o.remote.retries + 1);
    feed_blob_close(b);
}

typedef struct reader_arg {
    feed_blob *b;
    int index;
    int failures;
} reader_arg;

static void *reader(void *p)
{
    reader_arg *a = p;
    uint8_t *buf = malloc(65536);
    char err[256];
    for (int i = 0; buf && i < 10; i++) {
        uint64_t off = (uint64_t)(a->index * 10 + i) * 9973;
        if (feed_blob_read(a->b, off, 65536, buf, err, sizeof err) != 0 ||
            memcmp(buf, g_obj + off, 65536) != 0)
            a->failures++;
    }
    free(buf);
    return NULL;
}

/* Connections are reused, and no more than `connections` are open at once. */
static void test_connection_pool(void **state)
{
    feed_blob_options o;
    char ep[128], err[512] = "";
    uint8_t buf[1000];
    long c0, c1, c2;
    pthread_t th[8];
    reader_arg args[8];
    (void)state;
    set_creds(REMOTE_TEST_SECRET);
    options(&o, ep, sizeof ep, g_srv.s3proxy);
    o.remote.connections = 2;
    o.remote.readahead_bytes = 0;
    assert_int_equal(remote_servers_cmd(&g_srv, "stats", NULL, &c0), 0);
    feed_blob *b = open_ok("s3://" REMOTE_TEST_BUCKET "/obj.bin", &o);
    for (int i = 0; i < 20; i++)
        assert_int_equal(feed_blob_read(b, (uint64_t)i * 1000, sizeof buf, buf, err, sizeof err),
                         0);
    assert_int_equal(remote_servers_cmd(&g_srv, "stats", NULL, &c1), 0);
    assert_int_equal(c1 - c0, 1); /* the open's HEAD and 20 reads on one connection */
    assert_int_equal(remote_servers_cmd(&g_srv, "delay 20", NULL, NULL), 0);
    for (int i = 0; i < 8; i++) {
        args[i] = (reader_arg){b, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    assert_int_equal(remote_servers_cmd(&g_srv, "delay 0", NULL, &c2), 0);
    if (c2 - c0 > 2)
        fail_msg("%ld connections", c2 - c0);
    feed_blob_close(b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_s3_ranged_reads),
        cmocka_unit_test(test_http_ranged_reads),
        cmocka_unit_test(test_wrong_credentials),
        cmocka_unit_test(test_not_found),
        cmocka_unit_test(test_changed_object),
        cmocka_unit_test(test_faults_retried),
        cmocka_unit_test(test_redirects),
        cmocka_unit_test(test_endless_error_body),
        cmocka_unit_test(test_range_protocol_errors),
        cmocka_unit_test(test_read_cap),
        cmocka_unit_test(test_readahead),
        cmocka_unit_test(test_readahead_shared),
        cmocka_unit_test(test_readahead_failure_handed_to_read),
        cmocka_unit_test(test_connection_pool),
    };
    if (argc < 3) {
        fprintf(stderr, "usage: %s NODE SERVERS_JS\n", argv[0]);
        return 2;
    }
    g_node = argv[1];
    g_script = argv[2];
    return cmocka_run_group_tests(tests, setup, teardown);
}
