/*
 * The transport memory guard (guard.h). One thread; the table of watched
 * connections is indexed by descriptor and grows with the largest one
 * tracked. A descriptor gRPC has closed, or reused for something else, is
 * told by its inode: fstat() before each look at it. Between that fstat
 * and a shutdown() gRPC could close the descriptor and the number be
 * reused by a new socket; the window is a few instructions and the cost a
 * connection its client reopens, so no lock with gRPC is attempted.
 */
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "metrics.h"

#define GUARD_LOG_MS 10000

typedef struct conn {
    ino_t ino;                         /* 0: slot free */
    uint64_t credit;                   /* bytes delivered as calls and messages, ever */
    uint64_t rx0, tx0, credit0, t0_ns; /* at the start of the allowance */
} conn;

struct feedd_guard {
    uint64_t rss_limit;
    uint64_t burst;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    conn *conns; /* indexed by descriptor */
    size_t cap;
    pthread_t thread;
    uint64_t refreshed_ns;
    uint64_t logged_ns;
    uint64_t cut_unlogged;
};

uint64_t feedd_guard_rss(void)
{
    char buf[128];
    unsigned long long size = 0, resident = 0, shared = 0;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3 || shared > resident)
        return 0;
    return (uint64_t)(resident - shared) * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Bytes fd has received and sent, and whether it is still the socket of inode ino. */
static bool look(int fd, ino_t ino, uint64_t *rx, uint64_t *tx)
{
    struct stat st;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != ino)
        return false;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0)
        return false;
    bool full =
        len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received;
    *rx = full ? ti.tcpi_bytes_received : 0;
    *tx = full ? ti.tcpi_bytes_acked : 0;
    return true;
}

static void restart(conn *c, uint64_t rx, uint64_t tx, uint64_t now)
{
    c->rx0 = rx;
    c->tx0 = tx;
    c->credit0 = c->credit;
    c->t0_ns = now;
}

void feedd_guard_track(feedd_guard *g, int fd)
{
    struct stat st;
    if (!g || fd < 0 || fd >= GUARD_MAX_FDS || fstat(fd, &st) != 0)
        return;
    pthread_mutex_lock(&g->mu);
    if ((size_t)fd >= g->cap) {
        size_t cap = g->cap ? g->cap : 256;
        while (cap <= (size_t)fd)
            cap *= 2;
        conn *c = realloc(g->conns, cap * sizeof *c);
        if (c) {
            memset(c + g->cap, 0, (cap - g->cap) * sizeof *c);
            g->conns = c;
            g->cap = cap;
        }
    }
    uint64_t rx = 0, tx = 0;
    if ((size_t)fd < g->cap && look(fd, st.st_ino, &rx, &tx)) {
        conn *c = &g->conns[fd];
        *c = (conn){.ino = st.st_ino};
        restart(c, rx, tx, feed_now_ns());
    }
    pthread_mutex_unlock(&g->mu);
}

void feedd_guard_credit(feedd_guard *g, const char *peer, uint64_t bytes)
{
    int fd = -1;
    if (!g || !peer || sscanf(peer, "fd:%d", &fd) != 1 || fd < 0)
        return;
    pthread_mutex_lock(&g->mu);
    if ((size_t)fd < g->cap && g->conns[fd].ino)
        g->conns[fd].credit += bytes;
    pthread_mutex_unlock(&g->mu);
}

/* Memory is under the limit: every allowance starts again from now. */
static void refresh(feedd_guard *g, uint64_t now)
{
    for (size_t fd = 0; fd < g->cap; fd++) {
        conn *c = &g->conns[fd];
        uint64_t rx = 0, tx = 0;
        if (c->ino && look((int)fd, c->ino, &rx, &tx))
            restart(c, rx, tx, now);
        else
            c->ino = 0;
    }
    g->refreshed_ns = now;
}

/* Memory is over the limit: cut every connection past its allowance. */
static void cut_floods(feedd_guard *g, uint64_t now, uint64_t rss)
{
    uint64_t cut = 0;
    for (size_t fd = 0; fd < g->cap; fd++) {
        conn *c = &g->conns[fd];
        uint64_t rx = 0, tx = 0;
        if (!c->ino || !look((int)fd, c->ino, &rx, &tx)) {
            c->ino = 0;
            continue;
        }
        uint64_t explained = (c->credit - c->credit0) + (tx - c->tx0) / GUARD_TX_SHARE;
        uint64_t allowed = g->burst + GUARD_IDLE_RATE * (now - c->t0_ns) / 1000000000u;
        if (rx - c->rx0 > explained + allowed) {
            shutdown((int)fd, SHUT_RDWR);
            c->ino = 0;
            cut++;
        }
    }
    if (!cut)
        return;
    feedd_count(&feedd_m.connections_cut, cut);
    malloc_trim(0);
    g->cut_unlogged += cut;
    if (now - g->logged_ns >= (uint64_t)GUARD_LOG_MS * 1000000u) {
        FEED_LOGW("memory %llu MiB is over the transport limit %llu MiB: cut %llu connection(s) "
                  "that sent more than %llu KiB which gRPC held without delivering a call or a "
                  "message (an HTTP/2 flood)",
                  (unsigned long long)(rss >> 20), (unsigned long long)(g->rss_limit >> 20),
                  (unsigned long long)g->cut_unlogged, (unsigned long long)(g->burst >> 10));
        g->logged_ns = now;
        g->cut_unlogged = 0;
    }
}

static void *guard_main(void *arg)
{
    feedd_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        if (g->stop)
            break;
        uint64_t rss = feedd_guard_rss(), now = feed_now_ns();
        bool over = rss > g->rss_limit;
        atomic_store_explicit(&feedd_m.rss_bytes, (int64_t)rss, memory_order_relaxed);
        atomic_store_explicit(&feedd_m.transport_over, over ? 1 : 0, memory_order_relaxed);
        if (over)
            cut_floods(g, now, rss);
        else if (now - g->refreshed_ns >= (uint64_t)GUARD_REFRESH_MS * 1000000u)
            refresh(g, now);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int feedd_guard_start(uint64_t rss_limit, uint64_t burst, feedd_guard **out)
{
    feedd_guard *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g)
        return FEED_ENOMEM;
    g->rss_limit = rss_limit;
    g->burst = burst;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_store_explicit(&feedd_m.rss_limit, (int64_t)rss_limit, memory_order_relaxed);
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return FEED_ENOMEM;
    }
    *out = g;
    return 0;
}

void feedd_guard_stop(feedd_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g->conns);
    free(g);
}
