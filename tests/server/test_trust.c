/*
 * feedd's trust options (trust.c, config.c) and libfeedclient's side of them
 * against real feedd processes on 127.0.0.1 port 0: the token file rules
 * (size cap, one line end stripped, empty and non-ASCII refused), the
 * constant-time match and the metadata check, the config keys from a file
 * and the command line, and feed_loader_open with a token and TLS (right,
 * wrong, missing; a refused token gives FEED_EAUTH at once, from open or
 * next(), and a refusing server among accepting ones is logged once), a
 * 0.3-sized config whose bytes past its end must be ignored, TLS against a
 * plaintext port, and a TLS port out of descriptors that recovers.
 * Certificates are made at test time by make_test_certs.sh (openssl).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <unistd.h>

#include <cmocka.h>
#include <grpc/status.h>

#include "config.h"
#include "feed/client.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feedtest.h"
#include "trust.h"

#define TOKEN "c-test-token.0123456789"
#define SERVED_MS 30000
#define REFUSED_MS 3000
/* An hour: a loader that waits for it instead of failing at once (a refused token) hangs the
 * test until its ctest timeout; no case may end by it. */
#define NEVER_MS 3600000u

static char g_root[256];
static char g_certs[512];
static char g_ds[600];

static void path_in(char *out, size_t cap, const char *dir, const char *name)
{
    assert_true(snprintf(out, cap, "%s/%s", dir, name) < (int)cap);
}

/* Writes data to g_root/name; out gets the path. */
static void write_named(const char *name, const void *data, size_t len, char *out, size_t cap)
{
    path_in(out, cap, g_root, name);
    assert_int_equal(feed_test_write_file(out, data, len), 0);
}

static int load_text(const char *text, size_t len, feedd_token *t, char *err, size_t cap)
{
    char path[512];
    write_named("tok", text, len, path, sizeof path);
    return feedd_token_load(path, "auth-token-file", t, err, cap);
}

static void test_token_file_rules(void **state)
{
    (void)state;
    feedd_token t;
    char err[1200];
    static const struct {
        const char *text;
        const char *expect; /* NULL: refused */
    } cases[] = {
        {"abc\n", "Bearer abc"},
        {"abc\r\n", "Bearer abc"},
        {"abc", "Bearer abc"},
        {"", NULL},
        {"\n", NULL},
        {"\r\n", NULL},
        {"abc\n\n", NULL},
        {"two words\n", NULL},
        {"tab\there", NULL},
        {"caf\xc3\xa9\n", NULL},
        {" lead\n", NULL},
        {"x\ny\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = load_text(cases[i].text, strlen(cases[i].text), &t, err, sizeof err);
        if (cases[i].expect) {
            assert_int_equal(rc, 0);
            assert_string_equal(t.expect, cases[i].expect);
            assert_true(feedd_token_required(&t));
        } else {
            assert_int_equal(rc, FEED_EINVAL);
            assert_non_null(strstr(err, "auth-token-file"));
        }
        feedd_token_free(&t);
    }
    assert_int_equal(load_text("", 0, &t, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "empty token"));
    assert_int_equal(load_text("a\0b", 3, &t, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "NUL"));

    /* The cap counts the file's bytes, line end included. */
    char *big = malloc(FEED_TOKEN_FILE_MAX + 2);
    assert_non_null(big);
    memset(big, 'k', FEED_TOKEN_FILE_MAX + 1);
    assert_int_equal(load_text(big, FEED_TOKEN_FILE_MAX, &t, err, sizeof err), 0);
    assert_int_equal(t.expect_len, strlen("Bearer ") + FEED_TOKEN_FILE_MAX);
    feedd_token_free(&t);
    assert_int_equal(load_text(big, FEED_TOKEN_FILE_MAX + 1, &t, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "larger than 4096 bytes"));
    free(big);

    assert_int_equal(feedd_token_load("/nonexistent/token", "x", &t, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "cannot open"));
    assert_int_equal(feedd_token_load("", "x", &t, err, sizeof err), 0);
    assert_false(feedd_token_required(&t));
    assert_true(feedd_token_matches(&t, "", 0));
}

static bool matches(const feedd_token *t, const char *v)
{
    return feedd_token_matches(t, v, strlen(v));
}

static void test_token_matching(void **state)
{
    (void)state;
    feedd_token t;
    char err[1200];
    assert_int_equal(load_text(TOKEN "\n", strlen(TOKEN) + 1, &t, err, sizeof err), 0);
    assert_true(matches(&t, "Bearer " TOKEN));
    assert_true(matches(&t, "bearer " TOKEN));
    assert_true(matches(&t, "BEARER " TOKEN));
    assert_false(matches(&t, TOKEN));
    assert_false(matches(&t, "Bearer"));
    assert_false(matches(&t, "Bearer "));
    assert_false(matches(&t, ""));
    assert_false(matches(&t, "Basic " TOKEN));
    assert_false(matches(&t, "Bearer  " TOKEN));
    assert_false(matches(&t, "Bearer " TOKEN "x"));
    assert_false(matches(&t, "Bearer " TOKEN "\n"));
    char shorter[] = "Bearer " TOKEN;
    shorter[sizeof shorter - 2] = '\0';
    assert_false(matches(&t, shorter));
    /* Every single-byte change anywhere in the token is caught. */
    char v[] = "Bearer " TOKEN;
    for (size_t i = strlen("Bearer "); i < sizeof v - 1; i++) {
        v[i] ^= 1;
        assert_false(matches(&t, v));
        v[i] ^= 1;
    }
    assert_true(matches(&t, v));

    /*
     * Metadata: exactly one authorization entry, and it carries the token;
     * other keys do not count. Issue 22 finding 6: with several, any one
     * that matched was accepted.
     */
    grpc_metadata md[3];
    grpc_metadata_array arr = {0, 3, md};
    assert_false(feedd_token_allows(&t, &arr));
    md[0].key = grpc_slice_from_static_string("x-token");
    md[0].value = grpc_slice_from_static_string("Bearer " TOKEN);
    md[1].key = grpc_slice_from_static_string("authorization");
    md[1].value = grpc_slice_from_static_string("Bearer wrong");
    arr.count = 2;
    assert_false(feedd_token_allows(&t, &arr));
    md[2].key = grpc_slice_from_static_string("authorization");
    md[2].value = grpc_slice_from_static_string("Bearer " TOKEN);
    arr.count = 3;
    assert_false(feedd_token_allows(&t, &arr));
    md[1].value = grpc_slice_from_static_string("Bearer " TOKEN);
    assert_false(feedd_token_allows(&t, &arr));
    md[1].key = grpc_slice_from_static_string("x-other");
    assert_true(feedd_token_allows(&t, &arr));
    feedd_token_free(&t);
    arr.count = 0;
    assert_true(feedd_token_allows(&t, &arr));
}

static int parse(feedd_config *cfg, char *err, size_t cap, int argc, const char **argv)
{
    return feedd_config_parse(argc, (char **)argv, cfg, err, cap);
}

static void test_config_keys(void **state)
{
    (void)state;
    static feedd_config cfg;
    char err[1200], conf[512];
    static const char text[] = "tls-cert = /c.pem\ntls-key = /k.pem\ntls-client-ca = /ca.pem\n"
                               "auth-token-file = /tok\nmetrics-token-file = /mtok\n";
    write_named("feedd.conf", text, sizeof text - 1, conf, sizeof conf);
    const char *a1[] = {"feedd", "--config", conf, "--dataset", "x=/tmp"};
    assert_int_equal(parse(&cfg, err, sizeof err, 5, a1), 0);
    assert_string_equal(cfg.tls_cert, "/c.pem");
    assert_string_equal(cfg.tls_key, "/k.pem");
    assert_string_equal(cfg.tls_client_ca, "/ca.pem");
    assert_string_equal(cfg.auth_token_file, "/tok");
    assert_string_equal(cfg.metrics_token_file, "/mtok");
    const char *a2[] = {"feedd", "--dataset", "x=/tmp"};
    assert_int_equal(parse(&cfg, err, sizeof err, 3, a2), 0);
    assert_string_equal(cfg.tls_cert, "");
    assert_string_equal(cfg.auth_token_file, "");
    const char *a3[] = {"feedd", "--dataset", "x=/tmp", "--tls-cert", "/c.pem"};
    assert_int_equal(parse(&cfg, err, sizeof err, 5, a3), FEED_EINVAL);
    assert_non_null(strstr(err, "tls-cert and tls-key go together"));
    const char *a4[] = {"feedd", "--dataset", "x=/tmp", "--tls-key=/k.pem"};
    assert_int_equal(parse(&cfg, err, sizeof err, 4, a4), FEED_EINVAL);
    const char *a5[] = {"feedd", "--dataset", "x=/tmp", "--tls-client-ca", "/ca.pem"};
    assert_int_equal(parse(&cfg, err, sizeof err, 5, a5), FEED_EINVAL);
    assert_non_null(strstr(err, "mutual TLS needs tls-cert"));
}

/* Log messages of one loader, for the assertions on why it failed. */
typedef struct log_text {
    char text[8192];
    size_t len;
    int refusals;                /* errors and warnings that say a server refused the token */
    atomic_int describe_failed; /* warnings of a failed Describe, read while the loader runs */
} log_text;

static void on_log(void *user, int level, const char *message)
{
    log_text *l = user;
    if (level <= FEED_LOG_WARN && strstr(message, "refused the bearer token"))
        l->refusals++;
    if (level <= FEED_LOG_WARN && strstr(message, "Describe failed"))
        atomic_fetch_add(&l->describe_failed, 1);
    int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", message);
    if (n > 0 && (size_t)n < sizeof l->text - l->len)
        l->len += (size_t)n;
}

static void loader_config(feed_loader_config *cfg, const char **target, log_text *log)
{
    feed_loader_config_default(cfg);
    cfg->targets = target;
    cfg->num_targets = 1;
    cfg->dataset = "d";
    cfg->batch_size = 4;
    cfg->transform.out_h = cfg->transform.out_w = 32;
    cfg->dtype = FEED_DTYPE_UINT8;
    cfg->layout = FEED_LAYOUT_NHWC;
    cfg->device = FEED_DEVICE_HOST;
    cfg->log_fn = on_log;
    cfg->log_user = log;
    memset(log, 0, sizeof *log);
}

/*
 * Samples of one epoch through cfg, or the code open or next returned;
 * timeout_ms is how long open waits for a server: SERVED_MS where one must
 * answer (a loaded machine), REFUSED_MS where none can.
 */
static int64_t run_epoch(feed_loader_config *cfg, uint32_t timeout_ms)
{
    feed_loader *l = NULL;
    int64_t samples = 0;
    cfg->unavailable_timeout_ms = timeout_ms;
    int rc = feed_loader_open(cfg, &l);
    while (rc == 0) {
        feed_batch *b = NULL;
        rc = feed_loader_next(l, &b);
        if (rc == 0) {
            samples += b->n;
            rc = feed_loader_release(l, b, NULL);
        }
    }
    feed_loader_close(l);
    return rc == FEED_EEOF ? samples : rc;
}

static void cert(char *out, size_t cap, const char *name)
{
    path_in(out, cap, g_certs, name);
}

static void test_loader_token_and_tls(void **state)
{
    (void)state;
    char tok[512], crt[512], key[512], ca[512], other_ca[512];
    write_named("token", TOKEN "\n", strlen(TOKEN) + 1, tok, sizeof tok);
    cert(crt, sizeof crt, "server.pem");
    cert(key, sizeof key, "server.key");
    cert(ca, sizeof ca, "ca.pem");
    cert(other_ca, sizeof other_ca, "other-ca.pem");
    feed_test_server tls;
    const char *args[] = {"--dataset", g_ds, "--threads",         "1", "--tls-cert", crt,
                          "--tls-key", key,  "--auth-token-file", tok, NULL};
    assert_int_equal(feed_test_server_start(args, &tls), 0);
    const char *target = tls.target;
    feed_loader_config cfg;
    log_text log;

    loader_config(&cfg, &target, &log);
    cfg.token = TOKEN;
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, SERVED_MS), 12);

    loader_config(&cfg, &target, &log);
    cfg.token = "wrong";
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);
    assert_non_null(strstr(log.text, "refused the bearer token"));

    loader_config(&cfg, &target, &log);
    cfg.token = "";
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);
    assert_non_null(strstr(log.text, "UNAUTHENTICATED"));

    /* From the environment when the config has none. */
    setenv("FEED_TOKEN", TOKEN, 1);
    loader_config(&cfg, &target, &log);
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, SERVED_MS), 12);
    unsetenv("FEED_TOKEN");

    loader_config(&cfg, &target, &log);
    cfg.token = TOKEN;
    assert_int_equal(run_epoch(&cfg, REFUSED_MS), FEED_EUNAVAILABLE);
    assert_non_null(strstr(log.text, "Describe failed"));

    loader_config(&cfg, &target, &log);
    cfg.token = TOKEN;
    cfg.tls_ca_file = other_ca;
    assert_int_equal(run_epoch(&cfg, REFUSED_MS), FEED_EUNAVAILABLE);
    assert_non_null(strstr(log.text, "certificate verify failed"));

    loader_config(&cfg, &target, &log);
    cfg.token = TOKEN;
    cfg.tls_ca_file = "/nonexistent/ca.pem";
    assert_int_equal(run_epoch(&cfg, REFUSED_MS), FEED_EINVAL);
    assert_non_null(strstr(log.text, "tls_ca_file"));

    loader_config(&cfg, &target, &log);
    cfg.token = "has space";
    assert_int_equal(run_epoch(&cfg, REFUSED_MS), FEED_EINVAL);
    assert_non_null(strstr(log.text, "visible ASCII"));
    assert_int_equal(feed_test_server_stop(&tls), 0);
}

static void test_loader_plaintext_and_old_config(void **state)
{
    (void)state;
    char ca[512];
    cert(ca, sizeof ca, "ca.pem");
    feed_test_server plain;
    const char *args[] = {"--dataset", g_ds, "--threads", "1", NULL};
    assert_int_equal(feed_test_server_start(args, &plain), 0);
    const char *target = plain.target;
    feed_loader_config cfg;
    log_text log;

    loader_config(&cfg, &target, &log);
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, REFUSED_MS), FEED_EUNAVAILABLE);
    assert_non_null(strstr(log.text, "Describe failed"));

    /* A caller built against 0.3 ends its struct before token: what lies past it is not read. */
    loader_config(&cfg, &target, &log);
    cfg.struct_size = offsetof(feed_loader_config, token);
    cfg.token = "not read";
    cfg.tls_ca_file = "/not/read";
    assert_int_equal(run_epoch(&cfg, SERVED_MS), 12);
    assert_int_equal(feed_test_server_stop(&plain), 0);
}

static void start_token_server(const char *token_path, const char *listen, feed_test_server *s)
{
    const char *args[] = {"--dataset",
                          g_ds,
                          "--threads",
                          "1",
                          "--auth-token-file",
                          token_path,
                          listen ? "--listen" : NULL,
                          listen,
                          NULL};
    assert_int_equal(feed_test_server_start(args, s), 0);
}

/*
 * A refused token is a configuration error, not an outage: open, and next() once every server
 * refuses, fail with FEED_EAUTH at the servers' first answer instead of waiting
 * unavailable_timeout_ms; a server that refuses among others that accept is failed (logged
 * once) and the others serve.
 */
static void test_loader_refused_token_fails_fast(void **state)
{
    (void)state;
    char tok[512], other[512];
    write_named("token", TOKEN "\n", strlen(TOKEN) + 1, tok, sizeof tok);
    write_named("other-token", "another-token\n", strlen("another-token\n"), other, sizeof other);
    feed_test_server a, b;
    start_token_server(tok, NULL, &a);
    start_token_server(other, NULL, &b);
    feed_loader_config cfg;
    log_text log;
    feed_loader *l = NULL;

    const char *ta = a.target;
    loader_config(&cfg, &ta, &log);
    cfg.token = "wrong";
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);
    assert_non_null(strstr(log.text, "refused the bearer token"));
    assert_non_null(strstr(log.text, "UNAUTHENTICATED"));
    loader_config(&cfg, &ta, &log);
    cfg.token = "";
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);

    /*
     * Issue 22 finding 7: one refuses and the other is down (nothing
     * listens on its port): the refusal reaches the caller at once, where
     * the loader used to wait unavailable_timeout_ms for the down one.
     */
    int dfd, dport;
    char down[64];
    assert_int_equal(feed_test_port_reserve(&dfd, &dport), 0);
    feed_test_port_release(&dfd);
    snprintf(down, sizeof down, "127.0.0.1:%d", dport);
    const char *refusing_and_down[] = {a.target, down};
    loader_config(&cfg, refusing_and_down, &log);
    cfg.num_targets = 2;
    cfg.token = "wrong";
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);
    assert_non_null(strstr(log.text, "UNAUTHENTICATED"));

    /* Both refuse: still at once. */
    const char *both[] = {a.target, b.target};
    loader_config(&cfg, both, &log);
    cfg.num_targets = 2;
    cfg.token = "wrong";
    assert_int_equal(run_epoch(&cfg, NEVER_MS), FEED_EAUTH);

    /* b refuses TOKEN, a serves every batch; b is logged once, however often it is retried. */
    loader_config(&cfg, both, &log);
    cfg.num_targets = 2;
    cfg.token = TOKEN;
    cfg.batch_size = 1;
    cfg.unavailable_timeout_ms = NEVER_MS;
    assert_int_equal(feed_loader_open(&cfg, &l), 0);
    for (uint32_t epoch = 0; epoch < 3; epoch++) {
        int64_t samples = 0;
        int rc;
        feed_batch *bt = NULL;
        while ((rc = feed_loader_next(l, &bt)) == 0) {
            samples += bt->n;
            assert_int_equal(feed_loader_release(l, bt, NULL), 0);
        }
        assert_int_equal(rc, FEED_EEOF);
        assert_int_equal(samples, 12);
        assert_int_equal(feed_loader_set_epoch(l, epoch + 1, 0), 0);
    }
    feed_server_stats st;
    assert_int_equal(feed_loader_server_stats(l, 1, &st, sizeof st), 0);
    assert_false(st.up);
    assert_int_equal(st.batches, 0);
    feed_loader_close(l);
    l = NULL;
    assert_int_equal(log.refusals, 1);
    assert_int_equal(feed_test_server_stop(&b), 0);

    /* A server that served and comes back with another token: next() fails at once too. */
    int fd, port;
    char listen[64];
    assert_int_equal(feed_test_port_reserve(&fd, &port), 0);
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
    feed_test_server c;
    start_token_server(tok, listen, &c);
    const char *tc = c.target;
    loader_config(&cfg, &tc, &log);
    cfg.token = TOKEN;
    cfg.unavailable_timeout_ms = NEVER_MS;
    assert_int_equal(feed_loader_open(&cfg, &l), 0);
    feed_batch *bt = NULL;
    assert_int_equal(feed_loader_next(l, &bt), 0);
    assert_int_equal(feed_loader_release(l, bt, NULL), 0);
    assert_int_equal(feed_test_server_stop(&c), 0);
    /* The loader finds it down first (a warning), then refusing: the refusal is still an
     * error, not hidden behind the outage's once-only warning. */
    while (!atomic_load(&log.describe_failed))
        usleep(10 * 1000);
    start_token_server(other, listen, &c);
    assert_int_equal(feed_loader_set_epoch(l, 5, 0), 0);
    assert_int_equal(feed_loader_next(l, &bt), FEED_EAUTH);
    /* The server's reason, for a C caller without a log callback too. */
    feed_server_stats why;
    assert_int_equal(feed_loader_server_stats(l, 0, &why, sizeof why), 0);
    assert_true(why.refused);
    assert_int_equal(why.last_status, GRPC_STATUS_UNAUTHENTICATED);
    if (!strstr(why.last_error, "Bearer TOKEN"))
        fail_msg("last_error '%s' is not the server's reason", why.last_error);
    feed_loader_close(l);
    assert_int_equal(log.refusals, 1);
    assert_int_equal(feed_test_server_stop(&c), 0);
    feed_test_port_release(&fd);
    assert_int_equal(feed_test_server_stop(&a), 0);
}

/* A TCP connection to 127.0.0.1:port that sends nothing; -1 if connect fails. */
static int idle_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

#define FLOOD 200

/*
 * Finding 4 of issue 22: the TLS port out of descriptors. gRPC 1.51's own
 * listener stopped accepting for good at the first accept4() that failed
 * for want of descriptors, and feedd then exited with status 3: anyone who
 * could reach the port could restart the server. feedd's listener takes
 * the TLS port too (handoff.h): with 64 descriptors, 200 idle connections
 * exhaust them; a loader connected before keeps getting its batches, and
 * once the idle ones close a new loader is served and feedd stops with
 * status 0.
 */
static void test_tls_port_out_of_descriptors_recovers(void **state)
{
    (void)state;
    if (!feed_test_feedd_own_listener()) {
        print_message("skipped: feedd runs on gRPC's own listener (README: \"On gRPC's own "
                      "listener\")\n");
        skip();
    }
    char crt[512], key[512], ca[512], log_path[512];
    cert(crt, sizeof crt, "server.pem");
    cert(key, sizeof key, "server.key");
    cert(ca, sizeof ca, "ca.pem");
    path_in(log_path, sizeof log_path, g_root, "fd.log");
    feed_test_server_opts o = {.log_path = log_path, .nofile = 64};
    const char *args[] = {"--dataset", g_ds,        "--threads", "1", "--tls-cert",
                          crt,         "--tls-key", key,         NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start_with(&o, args, &s), 0);
    const char *target = s.target;
    feed_loader_config cfg;
    log_text log;
    loader_config(&cfg, &target, &log);
    cfg.tls_ca_file = ca;
    cfg.batch_size = 1;
    cfg.unavailable_timeout_ms = SERVED_MS;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&cfg, &l), 0);
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    static int fds[FLOOD];
    int opened = 0;
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = idle_connect(s.port);
        opened += fds[i] >= 0;
    }
    int64_t samples = 1;
    int rc;
    while ((rc = feed_loader_next(l, &b)) == 0) {
        samples += b->n;
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
    }
    feed_loader_close(l);
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    assert_int_equal(rc, FEED_EEOF);
    assert_int_equal(samples, 12);
    assert_int_equal(opened, FLOOD);
    loader_config(&cfg, &target, &log);
    cfg.tls_ca_file = ca;
    assert_int_equal(run_epoch(&cfg, SERVED_MS), 12);
    assert_int_equal(feed_test_server_stop(&s), 0);
    assert_int_equal(s.exit_status, 0);
    char *text = calloc(1, 65537);
    FILE *f = fopen(log_path, "r");
    assert_non_null(text);
    assert_non_null(f);
    assert_true(fread(text, 1, 65536, f) > 0);
    fclose(f);
    if (!strstr(text, "out of descriptors or memory"))
        fail_msg("feedd never ran out of descriptors: the test shows nothing");
    free(text);
}

/* GET /metrics with the given header lines ("K: V\r\n"...); the status, the body in *body. */
static int raw_get(int port, const char *headers, char *body, size_t cap)
{
    char req[512];
    int n = snprintf(req, sizeof req,
                     "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n",
                     headers);
    int fd = idle_connect(port), status = -1;
    size_t len = 0;
    assert_true(fd >= 0);
    assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    for (ssize_t r = 1; r > 0 && len < cap - 1; len += r > 0 ? (size_t)r : 0)
        r = recv(fd, body + len, cap - 1 - len, 0);
    body[len] = '\0';
    close(fd);
    if (sscanf(body, "HTTP/1.%*d %d", &status) != 1)
        status = -1;
    return status;
}

/*
 * Issue 22 finding 6. The metrics endpoint takes exactly one Authorization
 * header (with the right one first and a wrong one after, the first used
 * to pass), and an expired server certificate is a clear warning at start
 * and feedd_tls_cert_valid 0, a valid one 1 (it used to start silently).
 */
static void test_one_authorization_and_cert_dates(void **state)
{
    (void)state;
    char tok[512], crt[512], key[512], log_path[512];
    static char body[1 << 16];
    write_named("metrics-token", TOKEN "\n", strlen(TOKEN) + 1, tok, sizeof tok);
    cert(crt, sizeof crt, "expired.pem");
    cert(key, sizeof key, "expired.key");
    path_in(log_path, sizeof log_path, g_root, "expired.log");
    feed_test_server_opts o = {.log_path = log_path};
    const char *args[] = {"--dataset", g_ds,        "--threads", "1",   "--tls-cert",
                          crt,         "--tls-key", key,         "--metrics-token-file",
                          tok,         NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start_with(&o, args, &s), 0);
    double valid = -1;
    assert_int_equal(raw_get(s.metrics_port, "Authorization: Bearer " TOKEN "\r\n", body,
                             sizeof body),
                     200);
    assert_int_equal(feed_test_metric(body, "feedd_tls_cert_valid", &valid), 0);
    assert_true(valid == 0);
    assert_int_equal(raw_get(s.metrics_port,
                             "Authorization: Bearer " TOKEN "\r\nAuthorization: Bearer wrong\r\n",
                             body, sizeof body),
                     401);
    assert_int_equal(raw_get(s.metrics_port,
                             "Authorization: Bearer " TOKEN "\r\nAuthorization: Bearer " TOKEN
                             "\r\n",
                             body, sizeof body),
                     401);
    assert_int_equal(raw_get(s.metrics_port, "", body, sizeof body), 401);
    assert_int_equal(feed_test_server_stop(&s), 0);
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    size_t n = fread(body, 1, sizeof body - 1, f);
    body[n] = '\0';
    fclose(f);
    assert_non_null(strstr(body, "EXPIRED"));

    cert(crt, sizeof crt, "server.pem");
    cert(key, sizeof key, "server.key");
    assert_int_equal(feed_test_server_start_with(&o, args, &s), 0);
    assert_int_equal(raw_get(s.metrics_port, "Authorization: Bearer " TOKEN "\r\n", body,
                             sizeof body),
                     200);
    assert_int_equal(feed_test_metric(body, "feedd_tls_cert_valid", &valid), 0);
    assert_true(valid == 1);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

static int setup(void **state)
{
    (void)state;
    char cmd[1200];
    if (feed_test_tmpdir("trust", g_root, sizeof g_root))
        return -1;
    path_in(g_certs, sizeof g_certs, g_root, "certs");
    snprintf(cmd, sizeof cmd, "%s %s", FEED_MAKE_TEST_CERTS, g_certs);
    if (system(cmd) != 0)
        return -1;
    char dir[512];
    path_in(dir, sizeof dir, g_root, "ds");
    snprintf(g_ds, sizeof g_ds, "d=%s", dir);
    return feed_test_make_imagefolder(dir, 2, 6, 9);
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_rmtree(g_root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_file_rules),
        cmocka_unit_test(test_token_matching),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_loader_token_and_tls),
        cmocka_unit_test(test_loader_plaintext_and_old_config),
        cmocka_unit_test(test_loader_refused_token_fails_fast),
        cmocka_unit_test(test_tls_port_out_of_descriptors_recovers),
        cmocka_unit_test(test_one_authorization_and_cert_dates),
    };
    /* ctest's runs on gRPC's own listener pick tests by name (tests/server/CMakeLists.txt). */
    const char *only = getenv("CMOCKA_FILTER"), *skip = getenv("CMOCKA_SKIP");
    if (only && only[0])
        cmocka_set_test_filter(only);
    if (skip && skip[0])
        cmocka_set_skip_filter(skip);
    return cmocka_run_group_tests(tests, setup, teardown);
}
