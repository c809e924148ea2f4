/*
 * HTTP/2 header floods against real feedd processes on 127.0.0.1 port 0
 * (issue 22, findings 1 and 2): a client opens a header block and sends
 * CONTINUATION frames without END_HEADERS, which gRPC 1.51 buffers whole,
 * over plain TCP and over TLS (OpenSSL, the handshake completed, no token).
 * Each test bounds what the flood adds to feedd's peak memory and checks
 * that feedd cut the connection, counted it and still serves. And idle
 * connections (issue 28): clients that complete the TLS handshake, or also
 * HTTP/2's preface, and then send nothing, which feedd must close.
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
#include <dirent.h>
#include <sys/socket.h>
#include <time.h>
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
    ERR_clear_error(); /* SSL_get_error reads the thread's queue: another connection's error */
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
    ERR_clear_error();
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

/* A TLS client context offering h2, not checking the server's certificate. */
static SSL_CTX *client_ctx(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    assert_non_null(ctx);
    static const unsigned char alpn[] = "\x02h2";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn - 1);
    SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
}

static void sleep_ms_local(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
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
    if (!feed_test_feedd_own_listener()) {
        print_message("skipped: feedd runs on gRPC's own listener (README: \"On gRPC's own "
                      "listener\")\n");
        skip();
    }
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
    if (!feed_test_feedd_own_listener()) {
        print_message("skipped: feedd runs on gRPC's own listener (README: \"On gRPC's own "
                      "listener\")\n");
        skip();
    }
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
    if (!feed_test_feedd_own_listener()) {
        print_message("skipped: feedd runs on gRPC's own listener (README: \"On gRPC's own "
                      "listener\")\n");
        skip();
    }
    char crt[512], key[512], tok[512];
    snprintf(crt, sizeof crt, "%s/server.pem", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(tok, sizeof tok, "%s/token", tmp_root);
    static const char token[] = "flood-test-token\n";
    assert_int_equal(feed_test_write_file(tok, token, sizeof token - 1), 0);
    const char *more[] = {"--tls-cert", crt, "--tls-key", key, "--auth-token-file", tok, NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    SSL_CTX *ctx = client_ctx();
    flood_and_check(&s, ctx, "TLS, no token");
    SSL_CTX_free(ctx);
}

/* Descriptors a process has open (its /proc/PID/fd entries); -1 if unreadable. */
static int proc_fds(pid_t pid)
{
    char path[64];
    int n = -1;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    for (struct dirent *e = d ? readdir(d) : NULL; d && e; e = readdir(d))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return d ? n + 1 : -1;
}

/* Connections of the idle test; FLOOD_IDLE_CONNS overrides it (the README's 1,100). */
#define IDLE_CONNS 200
#define IDLE_CONNS_MAX 4000
/* The hang guard of the idle test: feedd's timeout in it is 1 s. */
#define IDLE_WAIT_MS 60000

static int idle_count(void)
{
    const char *e = getenv("FLOOD_IDLE_CONNS");
    long n = e ? strtol(e, NULL, 10) : IDLE_CONNS;
    return n < 1 ? 1 : n > IDLE_CONNS_MAX ? IDLE_CONNS_MAX : (int)n;
}

/* Bytes read (> 0), 0 when none are there yet, -1 once the server ended the connection. */
static ssize_t wire_recv(wire *w, uint8_t *p, size_t cap)
{
    if (!w->ssl) {
        ssize_t r = recv(w->fd, p, cap, MSG_DONTWAIT);
        return r > 0 ? r : r < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    }
    ERR_clear_error();
    int r = SSL_read(w->ssl, p, (int)cap);
    int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(w->ssl, r);
    return r > 0 ? r : e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
}

/*
 * An idle client: after the handshake it sends HTTP/2's preface and
 * SETTINGS (h2) or nothing at all. An h2 one then behaves as an idle gRPC
 * channel does: it acknowledges the server's SETTINGS and answers its
 * keepalive PINGs, and opens no stream.
 */
typedef struct idle_conn {
    wire w;
    bool h2, ended;
    uint8_t head[9]; /* the frame header being read */
    size_t have;     /* bytes of head, then of payload, read */
    uint32_t len;    /* the payload's length, once head is whole */
    uint8_t ping[8]; /* a PING's payload, to echo */
} idle_conn;

/* Write all of a short frame without reading (the reader is idle_pump); false once ended. */
static bool idle_send(wire *w, const uint8_t *p, size_t n)
{
    size_t off = 0;
    ssize_t r = 0;
    while (r >= 0 && off < n) {
        struct pollfd pf = {w->fd, POLLOUT, 0};
        r = poll(&pf, 1, -1) < 0 ? 0 : wire_send(w, p + off, n - off);
        off += r > 0 ? (size_t)r : 0;
    }
    return r >= 0;
}

/* Read what the server sent; answer SETTINGS and PING as an idle channel does. */
static void idle_pump(idle_conn *c)
{
    uint8_t buf[4096], out[32];
    ssize_t r;
    while (!c->ended && (r = wire_recv(&c->w, buf, sizeof buf)) != 0) {
        c->ended = r < 0;
        for (ssize_t i = 0; i < r && c->h2; i++) {
            if (c->have < 9) {
                c->head[c->have++] = buf[i];
                c->len = (uint32_t)c->head[0] << 16 | (uint32_t)c->head[1] << 8 | c->head[2];
            } else {
                if (c->head[3] == 6 && c->have - 9 < 8) /* PING */
                    c->ping[c->have - 9] = buf[i];
                c->have++;
            }
            if (c->have < 9 || c->have - 9 < c->len)
                continue;
            bool ack = c->head[4] & 1;
            if (c->head[3] == 4 && !ack) /* SETTINGS: acknowledge */
                c->ended = !idle_send(&c->w, out, h2_frame(out, 4, 1, 0, NULL, 0));
            else if (c->head[3] == 6 && !ack && c->len == 8) /* PING: answer */
                c->ended = !idle_send(&c->w, out, h2_frame(out, 6, 1, 0, c->ping, 8));
            c->have = 0;
        }
    }
}

/*
 * Open n connections to s (TLS when ctx is set, each handshake completed
 * before the next connection opens); every other one is an h2 idle client
 * (idle_conn), the others send nothing past the handshake. Then check that
 * feedd ends every one of them and that its descriptors come back to what
 * they were before (IDLE_WAIT_MS is only a hang guard).
 */
static void idle_and_check(feed_test_server *s, SSL_CTX *ctx, const char *what)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    uint8_t settings[9];
    size_t settings_len = h2_frame(settings, 4, 0, 0, NULL, 0);
    int n = idle_count(), ended = 0, fds_after = -1;
    idle_conn *c = calloc((size_t)n, sizeof *c);
    assert_non_null(c);
    int fds0 = proc_fds(s->pid);
    uint64_t rss0 = proc_mem(s->pid, "VmRSS:");
    for (int i = 0; i < n; i++) {
        c[i].w.fd = tcp_connect(s->port);
        assert_true(c[i].w.fd >= 0);
        if (ctx) {
            c[i].w.ssl = SSL_new(ctx);
            assert_non_null(c[i].w.ssl);
            SSL_set_fd(c[i].w.ssl, c[i].w.fd);
            if (SSL_connect(c[i].w.ssl) != 1)
                fail_msg("%s: TLS handshake %d failed: %s", what, i,
                         ERR_error_string(ERR_get_error(), NULL));
        }
        assert_int_equal(fcntl(c[i].w.fd, F_SETFL, fcntl(c[i].w.fd, F_GETFL) | O_NONBLOCK), 0);
        c[i].h2 = i % 2;
        if (c[i].h2) {
            assert_true(wire_send_all(&c[i].w, (const uint8_t *)preface, sizeof preface - 1));
            assert_true(wire_send_all(&c[i].w, settings, settings_len));
        }
    }
    for (int i = 0; i < n; i++)
        idle_pump(&c[i]);
    uint64_t rss_open = proc_mem(s->pid, "VmRSS:");
    int fds_open = proc_fds(s->pid), first_end_ms = -1, last_end_ms = -1;
    for (int waited = 0; ended < n && waited < IDLE_WAIT_MS; waited += 50) {
        int before = ended;
        ended = 0;
        for (int i = 0; i < n; i++) {
            struct pollfd pf = {c[i].w.fd, POLLIN, 0};
            if (!c[i].ended && poll(&pf, 1, 0) > 0)
                idle_pump(&c[i]);
            ended += c[i].ended;
        }
        if (ended > before) {
            first_end_ms = first_end_ms < 0 ? waited : first_end_ms;
            last_end_ms = waited;
        }
        if (ended < n)
            sleep_ms_local(50);
    }
    int ended_h2 = 0;
    for (int i = 0; i < n; i++) {
        ended_h2 += c[i].ended && c[i].h2;
        if (c[i].w.ssl)
            SSL_free(c[i].w.ssl);
        close(c[i].w.fd);
    }
    /* feedd closed its ends before ours saw them end; a descriptor may still be on its way. */
    for (int waited = 0; waited < IDLE_WAIT_MS; waited += 50) {
        fds_after = proc_fds(s->pid);
        if (fds_after <= fds0)
            break;
        sleep_ms_local(50);
    }
    uint64_t rss_after = proc_mem(s->pid, "VmRSS:");
    double serving = -1;
    assert_int_equal(feed_test_scrape(s->metrics_port, "feedd_serving", &serving), 0);
    print_message("%s: %d idle connections: feedd %llu KiB, %d fds; all open %llu KiB (+%lld), "
                  "%d fds; %d ended by feedd (%d of the %d h2 ones), from %d to %d ms of polls (about); "
                  "after %llu KiB, %d fds\n",
                  what, n, (unsigned long long)(rss0 >> 10), fds0,
                  (unsigned long long)(rss_open >> 10),
                  (long long)(rss_open >> 10) - (long long)(rss0 >> 10), fds_open, ended,
                  ended_h2, n / 2, first_end_ms, last_end_ms,
                  (unsigned long long)(rss_after >> 10), fds_after);
    free(c);
    assert_int_equal(feed_test_server_stop(s), 0);
    if (ended < n)
        fail_msg("%s: feedd left %d of %d idle connections open", what, n - ended, n);
    if (fds_after > fds0)
        fail_msg("%s: feedd holds %d descriptors, %d before the connections", what, fds_after,
                 fds0);
    assert_true(serving == 1);
}

/*
 * Issue 28, item 10: 1,100 clients that completed the TLS handshake and
 * then sent nothing were never closed (+80 MiB). feedd now closes a
 * connection with no call for --idle-timeout-ms, and one that has not
 * finished its handshake (TLS, then the client's HTTP/2 SETTINGS) in that
 * time; 1 s here.
 */
static void test_idle_tls_connections_are_closed(void **state)
{
    (void)state;
    char crt[512], key[512], tok[512];
    snprintf(crt, sizeof crt, "%s/server.pem", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(tok, sizeof tok, "%s/token", tmp_root);
    static const char token[] = "idle-test-token\n";
    assert_int_equal(feed_test_write_file(tok, token, sizeof token - 1), 0);
    const char *more[] = {"--tls-cert", crt, "--tls-key", key, "--auth-token-file", tok,
                          "--idle-timeout-ms", "1000", NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    SSL_CTX *ctx = client_ctx();
    idle_and_check(&s, ctx, "TLS");
    SSL_CTX_free(ctx);
}

/* The same on the plaintext port. */
static void test_idle_plaintext_connections_are_closed(void **state)
{
    (void)state;
    const char *more[] = {"--idle-timeout-ms", "1000", NULL};
    feed_test_server s;
    assert_int_equal(start_flooded(&s, more), 0);
    idle_and_check(&s, NULL, "plaintext");
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
        cmocka_unit_test(test_idle_tls_connections_are_closed),
        cmocka_unit_test(test_idle_plaintext_connections_are_closed),
    };
    /* ctest's runs on gRPC's own listener pick tests by name (tests/server/CMakeLists.txt). */
    const char *only = getenv("CMOCKA_FILTER"), *skip = getenv("CMOCKA_SKIP");
    if (only && only[0])
        cmocka_set_test_filter(only);
    if (skip && skip[0])
        cmocka_set_skip_filter(skip);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
