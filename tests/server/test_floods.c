/*
 * HTTP/2 header floods against real feedd processes on 127.0.0.1 port 0
 * (issue 22, findings 1 and 2): a client opens a header block and sends
 * CONTINUATION frames without END_HEADERS, which gRPC 1.51 buffers whole,
 * over plain TCP and over TLS (OpenSSL, the handshake completed, no token).
 * Each test bounds what the flood adds to feedd's peak memory and checks
 * that feedd cut the connection, counted it and still serves.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_grpc.h"

static char tmp_root[256];
static char data_dir[300];
static char certs[400];

#define FLOOD_BYTES (32u << 20)
#define FLOOD_CHUNK 16384

/* A TCP connection to 127.0.0.1:port; -1 if connect fails. */
static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* VmRSS or VmHWM of a process, in bytes; 0 if unreadable. */
static uint64_t proc_mem(pid_t pid, const char *key)
{
    char path[64], line[256];
    uint64_t kib = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, strlen(key)) == 0)
            kib = strtoull(line + strlen(key) + 1, NULL, 10);
    if (f)
        fclose(f);
    return kib << 10;
}

static size_t h2_frame(uint8_t *out, uint8_t type, uint8_t flags, uint32_t stream,
                       const uint8_t *payload, uint32_t len)
{
    out[0] = (uint8_t)(len >> 16);
    out[1] = (uint8_t)(len >> 8);
    out[2] = (uint8_t)len;
    out[3] = type;
    out[4] = flags;
    out[5] = (uint8_t)(stream >> 24);
    out[6] = (uint8_t)(stream >> 16);
    out[7] = (uint8_t)(stream >> 8);
    out[8] = (uint8_t)stream;
    if (len)
        memcpy(out + 9, payload, len);
    return 9 + len;
}

/* HPACK integer with a prefix of `bits` bits, first byte's other bits `first`. */
static size_t hpack_int(uint8_t *out, uint64_t v, int bits, uint8_t first)
{
    uint64_t limit = (1u << bits) - 1;
    size_t n = 0;
    if (v < limit) {
        out[n++] = (uint8_t)(first | v);
        return n;
    }
    out[n++] = (uint8_t)(first | limit);
    v -= limit;
    while (v >= 128) {
        out[n++] = (uint8_t)((v & 127) | 128);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* The flood's connection: plain TCP (ssl NULL) or TLS over fd. */
typedef struct wire {
    int fd;
    SSL *ssl;
} wire;

/* Bytes written (> 0), 0 to try again when writable, -1 once the server ended it. */
static ssize_t wire_send(wire *w, const uint8_t *p, size_t n)
{
    if (!w->ssl) {
        ssize_t r = send(w->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        return r >= 0 ? r : errno == EAGAIN || errno == EINTR ? 0 : -1;
    }
    int r = SSL_write(w->ssl, p, (int)n);
    int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(w->ssl, r);
    return r > 0 ? r : e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ ? 0 : -1;
}

/* Whether the server ended the connection (what it sent otherwise read and dropped). */
static bool wire_ended(wire *w)
{
    static uint8_t sink[65536];
    if (!w->ssl) {
        ssize_t r = recv(w->fd, sink, sizeof sink, MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR);
    }
    int r = SSL_read(w->ssl, sink, (int)sizeof sink);
    int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(w->ssl, r);
    return r <= 0 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
}

/* Write all of p, or stop when the server ends the connection (false). */
static bool wire_send_all(wire *w, const uint8_t *p, size_t n)
{
    size_t off = 0;
    bool ended = false;
    while (!ended && off < n) {
        struct pollfd pf = {w->fd, POLLIN | POLLOUT, 0};
        if (poll(&pf, 1, -1) < 0)
            continue;
        if (pf.revents & (POLLIN | POLLHUP | POLLERR))
            ended = wire_ended(w);
        ssize_t r = ended ? -1 : wire_send(w, p + off, n - off);
        ended = r < 0;
        off += r > 0 ? (size_t)r : 0;
    }
    return !ended;
}

/*
 * Connect (with TLS when ctx is set: the handshake completes, no token is
 * ever sent) and flood: a header of FLOOD_BYTES sent as CONTINUATION
 * frames, never END_HEADERS, until the server ends the connection (true)
 * or all of it is sent (false). *sent gets the bytes.
 */
static bool continuation_flood(int port, SSL_CTX *ctx, uint64_t *sent)
{
    static uint8_t frame[9 + FLOOD_CHUNK], chunk[FLOOD_CHUNK];
    uint8_t hdr[32];
    wire w = {tcp_connect(port), NULL};
    assert_true(w.fd >= 0);
    if (ctx) {
        w.ssl = SSL_new(ctx);
        assert_non_null(w.ssl);
        SSL_set_fd(w.ssl, w.fd);
        if (SSL_connect(w.ssl) != 1)
            fail_msg("TLS handshake with feedd failed: %s",
                     ERR_error_string(ERR_get_error(), NULL));
    }
    assert_int_equal(fcntl(w.fd, F_SETFL, fcntl(w.fd, F_GETFL) | O_NONBLOCK), 0);
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    bool open = wire_send_all(&w, (const uint8_t *)preface, sizeof preface - 1);
    size_t n = h2_frame(frame, 4, 0, 0, NULL, 0); /* SETTINGS, never acknowledging the server's */
    open = open && wire_send_all(&w, frame, n);
    size_t h = 0;
    hdr[h++] = 0x00; /* literal header, new name, not indexed */
    h += hpack_int(hdr + h, 1, 7, 0);
    hdr[h++] = 'x';
    h += hpack_int(hdr + h, FLOOD_BYTES, 7, 0);
    n = h2_frame(frame, 1, 0, 1, hdr, (uint32_t)h); /* HEADERS without END_HEADERS */
    open = open && wire_send_all(&w, frame, n);
    memset(chunk, 'a', sizeof chunk);
    n = h2_frame(frame, 9, 0, 1, chunk, FLOOD_CHUNK);
    *sent = 0;
    while (open && *sent < FLOOD_BYTES) {
        open = wire_send_all(&w, frame, n);
        *sent += open ? FLOOD_CHUNK : 0;
    }
    if (w.ssl)
        SSL_free(w.ssl);
    close(w.fd);
    return !open;
}

/*
 * A feedd serving the test's data set as "d" with more flags
 * (NULL-terminated, at most 12). gRPC grows the header buffer by copying;
 * under AddressSanitizer every old copy waits in its 256 MiB quarantine,
 * which the peak would then measure: this server gets a small one (no
 * effect without ASan).
 */
static int start_flooded(feed_test_server *s, const char *const *more)
{
    char ds[400];
    const char *args[16] = {"--dataset", ds, "--threads", "1"};
    size_t k = 4;
    snprintf(ds, sizeof ds, "d=%s", data_dir);
    for (; *more && k < 15; more++)
        args[k++] = *more;
    args[k] = NULL;
    const char *asan = getenv("ASAN_OPTIONS");
    char *saved = asan ? strdup(asan) : NULL;
    char opts[512];
    snprintf(opts, sizeof opts, "%s%squarantine_size_mb=4", asan ? asan : "", asan ? ":" : "");
    setenv("ASAN_OPTIONS", opts, 1);
    int rc = feed_test_server_start(args, s);
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    return rc;
}

/* What the flood's bound allows: the cut's budget, one guard tick of flood, gRPC's doubling. */
#define FLOOD_PEAK_BOUND (16u << 20)

/*
 * Flood s (TLS when ctx is set) and check: the connection was cut before
 * all was sent, the cut counted, feedd's peak within FLOOD_PEAK_BOUND of
 * its memory before, and feedd still answers scrapes.
 */
static void flood_and_check(feed_test_server *s, SSL_CTX *ctx, const char *what)
{
    uint64_t before = proc_mem(s->pid, "VmRSS:"), sent = 0;
    bool ended = continuation_flood(s->port, ctx, &sent);
    uint64_t peak = proc_mem(s->pid, "VmHWM:");
    double cut = -1, serving = -1;
    assert_int_equal(feed_test_scrape(s->metrics_port, "feedd_connections_cut_total", &cut), 0);
    assert_int_equal(feed_test_scrape(s->metrics_port, "feedd_serving", &serving), 0);
    int stop_rc = feed_test_server_stop(s);
    print_message("%s: %llu MiB sent, feedd %llu -> peak %llu MiB, %g cut\n", what,
                  (unsigned long long)(sent >> 20), (unsigned long long)(before >> 20),
                  (unsigned long long)(peak >> 20), cut);
    if (!ended)
        fail_msg("%s: the server took all %u MiB of one header block", what, FLOOD_BYTES >> 20);
    assert_true(cut >= 1);
    if (peak > before + FLOOD_PEAK_BOUND)
        fail_msg("%s: feedd's peak memory rose %llu MiB (bound %u)", what,
                 (unsigned long long)((peak - before) >> 20), FLOOD_PEAK_BOUND >> 20);
    assert_true(serving == 1);
    assert_int_equal(stop_rc, 0);
}

/*
 * The guard's first case (before issue 22): --max-memory 1M and
 * --transport-memory 8M, the flood cut once memory is over that limit.
 */
static void test_continuation_flood_is_cut(void **state)
{
    (void)state;
    const char *more[] = {"--max-memory", "1M", "--transport-memory", "8M", NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    flood_and_check(&s, NULL, "small limit");
}

/*
 * Finding 2: at default settings (--max-memory 1G, --transport-memory
 * 256M) the limit was 1.25 GiB over the start, so the same flood was taken
 * whole (32 MiB; a larger one was cut near +1.19 GiB and its memory kept).
 * A connection that has not passed a token check (here: made no Feed call
 * at all) now holds at most its small budget, whatever the memory.
 */
static void test_flood_at_defaults_is_cut_early(void **state)
{
    (void)state;
    const char *more[] = {NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    flood_and_check(&s, NULL, "defaults");
}

/*
 * Finding 1: the TLS port had no guard at all (gRPC accepted its
 * connections itself): a client that completed the handshake, with no
 * token, grew feedd by ~300 MiB for 254 MiB sent. Now feedd's listener
 * takes the TLS port too and the guard watches it like the plaintext one.
 */
static void test_tls_flood_without_token_is_cut(void **state)
{
    (void)state;
    char crt[512], key[512], tok[512];
    snprintf(crt, sizeof crt, "%s/server.pem", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(tok, sizeof tok, "%s/token", tmp_root);
    static const char token[] = "flood-test-token\n";
    assert_int_equal(feed_test_write_file(tok, token, sizeof token - 1), 0);
    const char *more[] = {"--tls-cert", crt, "--tls-key", key, "--auth-token-file", tok, NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    static const unsigned char alpn[] = "\x02h2";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    flood_and_check(&s, ctx, "TLS, no token");
    SSL_CTX_free(ctx);
}

static int group_setup(void **state)
{
    (void)state;
    char cmd[1200];
    if (feed_test_tmpdir("feedd-floods", tmp_root, sizeof tmp_root) < 0)
        return -1;
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp_root);
    snprintf(certs, sizeof certs, "%s/certs", tmp_root);
    snprintf(cmd, sizeof cmd, "%s %s", FEED_MAKE_TEST_CERTS, certs);
    if (system(cmd) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return feed_test_make_imagefolder(data_dir, 2, 4, 7) < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    feed_test_rmtree(tmp_root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_continuation_flood_is_cut),
        cmocka_unit_test(test_flood_at_defaults_is_cut_early),
        cmocka_unit_test(test_tls_flood_without_token_is_cut),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
