/*
 * The transport memory guard (guard.h). One thread scans; the listener's
 * thread adds connections; completion-queue threads add credit. The table
 * of watched connections is indexed by descriptor, in pages allocated on
 * first use and never moved or freed before the guard stops, so credit is
 * an atomic add with no lock. The rest of an entry is guarded by mu, which
 * is only held to read or write entries. A descriptor gRPC has closed, or
 * reused for something else, is told by its inode, checked before each
 * look at it. Between that check and a shutdown() gRPC could close the
 * descriptor and the kernel give its number to a new socket, which would
 * be cut instead; the window is a few instructions, and the cost one
 * connection that its client reopens. Credit is keyed by descriptor alone:
 * a late message of a closed connection may credit its successor.
 */
#include "guard.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
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
#define GUARD_PAGES (GUARD_MAX_FDS / GUARD_PAGE)

typedef struct conn {
    atomic_uint_fast64_t credit; /* bytes delivered as calls and messages, ever */
    /* Guarded by the guard's mu. */
    ino_t ino;                         /* 0: not watched */
    uint64_t rx0, tx0, credit0, t0_ns; /* at the start of the allowance */
} conn;

struct feedd_guard {
    uint64_t rss_limit;
    uint64_t burst;
    int statm;    /* /proc/self/statm, open for good: no descriptor needed per reading */
    uint64_t rss; /* the last good reading */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    _Atomic(conn *) pages[GUARD_PAGES];
    atomic_int max_fd; /* highest descriptor tracked */
    atomic_uint_fast64_t ticks;
    pthread_t thread;
    /* The guard thread's own. */
    uint64_t refreshed_ns, over_since_ns, logged_ns, cut_unlogged;
    bool warned_over;
};

static atomic_bool warned_tcp_info, warned_fd, warned_oom;

static uint64_t read_rss(int fd)
{
    char buf[128];
    unsigned long long size = 0, resident = 0, shared = 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    if (sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3 || shared > resident)
        return 0;
    return (uint64_t)(resident - shared) * (uint64_t)sysconf(_SC_PAGESIZE);
}

uint64_t feedd_guard_rss(void)
{
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    uint64_t rss = fd >= 0 ? read_rss(fd) : 0;
    if (fd >= 0)
        close(fd);
    return rss;
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
    if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received) {
        if (!atomic_exchange(&warned_tcp_info, true))
            FEED_LOGW("transport guard: this kernel's TCP_INFO has no byte counts; connections "
                      "are not watched");
        return false;
    }
    *rx = ti.tcpi_bytes_received;
    *tx = ti.tcpi_bytes_acked;
    return true;
}

static conn *entry(feedd_guard *g, int fd)
{
    conn *page = atomic_load_explicit(&g->pages[fd / GUARD_PAGE], memory_order_acquire);
    return page ? &page[fd % GUARD_PAGE] : NULL;
}

/*
 * credit is read before rx and tx: a message delivered in between then
 * counts later, against bytes already counted, which only ever favours the
 * connection.
 */
static void restart(conn *c, uint64_t rx, uint64_t tx, uint64_t credit, uint64_t now)
{
    c->rx0 = rx;
    c->tx0 = tx;
    c->credit0 = credit;
    c->t0_ns = now;
}

void feedd_guard_track(feedd_guard *g, int fd)
{
    struct stat st;
    if (!g || fd < 0 || fstat(fd, &st) != 0)
        return;
    if (fd >= GUARD_MAX_FDS) {
        if (!atomic_exchange(&warned_fd, true))
            FEED_LOGW("transport guard: descriptor %d is above %d; such connections are not "
                      "watched",
                      fd, GUARD_MAX_FDS);
        return;
    }
    /* The page outside the lock; two listeners may race for it, the loser frees its own. */
    conn *page = entry(g, fd) ? NULL : calloc(GUARD_PAGE, sizeof *page);
    pthread_mutex_lock(&g->mu);
    if (page && !entry(g, fd)) {
        atomic_store_explicit(&g->pages[fd / GUARD_PAGE], page, memory_order_release);
        page = NULL;
    }
    conn *c = entry(g, fd);
    pthread_mutex_unlock(&g->mu);
    free(page);
    if (!c) {
        if (!atomic_exchange(&warned_oom, true))
            FEED_LOGW("transport guard: out of memory for its table; connection fd:%d not watched",
                      fd);
        return;
    }
    uint64_t credit = atomic_load_explicit(&c->credit, memory_order_relaxed), rx = 0, tx = 0;
    if (!look(fd, st.st_ino, &rx, &tx))
        return;
    pthread_mutex_lock(&g->mu);
    c->ino = st.st_ino;
    restart(c, rx, tx, credit, feed_now_ns());
    if (fd > atomic_load(&g->max_fd))
        atomic_store(&g->max_fd, fd);
    pthread_mutex_unlock(&g->mu);
}

int feedd_guard_fd_of(const char *peer)
{
    int fd = -1;
    return peer && sscanf(peer, "fd:%d", &fd) == 1 && fd >= 0 && fd < GUARD_MAX_FDS ? fd : -1;
}

void feedd_guard_credit(feedd_guard *g, int fd, uint64_t bytes)
{
    conn *c = g && fd >= 0 ? entry(g, fd) : NULL;
    if (c)
        atomic_fetch_add_explicit(&c->credit, bytes, memory_order_relaxed);
}

uint64_t feedd_guard_ticks(feedd_guard *g)
{
    return atomic_load(&g->ticks);
}

/*
 * One connection: under the limit (over false), restart its allowance;
 * over it, restart it when all it sent is accounted for, else say whether
 * it is past it. Called with mu held, ino read under it.
 */
static bool judge(feedd_guard *g, conn *c, bool over, uint64_t rx, uint64_t tx, uint64_t credit,
                  uint64_t now)
{
    uint64_t received = rx - c->rx0;
    uint64_t explained = (credit - c->credit0) + (tx - c->tx0) / GUARD_TX_SHARE;
    if (!over || received <= explained) {
        restart(c, rx, tx, credit, now);
        return false;
    }
    /* A connection tracked during this scan started after now. */
    uint64_t ms = now > c->t0_ns ? (now - c->t0_ns) / 1000000u : 0;
    uint64_t idle = ms * GUARD_IDLE_RATE / 1000u;
    return received - explained > g->burst + (idle < GUARD_IDLE_CAP ? idle : GUARD_IDLE_CAP);
}

/* Every watched connection judged; returns how many were shut down. */
static uint64_t scan(feedd_guard *g, bool over, uint64_t now)
{
    uint64_t cut = 0;
    int max_fd = atomic_load(&g->max_fd);
    for (int fd = 0; fd <= max_fd; fd++) {
        conn *c = entry(g, fd);
        if (!c) {
            fd += GUARD_PAGE - 1 - fd % GUARD_PAGE;
            continue;
        }
        pthread_mutex_lock(&g->mu);
        ino_t ino = c->ino;
        pthread_mutex_unlock(&g->mu);
        if (!ino)
            continue;
        uint64_t credit = atomic_load_explicit(&c->credit, memory_order_relaxed), rx = 0, tx = 0;
        bool alive = look(fd, ino, &rx, &tx), flood = false;
        pthread_mutex_lock(&g->mu);
        if (c->ino == ino) {
            flood = alive && judge(g, c, over, rx, tx, credit, now);
            if (!alive || flood)
                c->ino = 0;
        }
        pthread_mutex_unlock(&g->mu);
        if (flood) {
            feedd_count(&feedd_m.connections_cut, 1); /* counted before its peer can see it */
            shutdown(fd, SHUT_RDWR);
            cut++;
        }
    }
    return cut;
}

static void after_scan(feedd_guard *g, bool over, uint64_t cut, uint64_t now)
{
    if (!over)
        g->over_since_ns = 0;
    else if (!g->over_since_ns || cut)
        g->over_since_ns = now;
    if (over && !g->warned_over &&
        now - g->over_since_ns >= (uint64_t)GUARD_OVER_WARN_MS * 1000000u) {
        FEED_LOGW("memory %llu MiB has been over the transport limit %llu MiB for %d s with no "
                  "flood to cut: the workers' scratch and the allocator's arenas may need more "
                  "than --transport-memory (the guard still cuts floods)",
                  (unsigned long long)(g->rss >> 20), (unsigned long long)(g->rss_limit >> 20),
                  GUARD_OVER_WARN_MS / 1000);
        g->warned_over = true;
    }
    if (!cut)
        return;
    malloc_trim(0);
    g->cut_unlogged += cut;
    if (now - g->logged_ns >= (uint64_t)GUARD_LOG_MS * 1000000u) {
        FEED_LOGW("memory %llu MiB is over the transport limit %llu MiB: cut %llu connection(s) "
                  "that sent more than %llu KiB which gRPC held without delivering a call or a "
                  "message (an HTTP/2 flood)",
                  (unsigned long long)(g->rss >> 20), (unsigned long long)(g->rss_limit >> 20),
                  (unsigned long long)g->cut_unlogged, (unsigned long long)(g->burst >> 10));
        g->logged_ns = now;
        g->cut_unlogged = 0;
    }
}

static void *guard_main(void *arg)
{
    feedd_guard *g = arg;
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&g->mu);
        if (!g->stop)
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        bool stop = g->stop;
        pthread_mutex_unlock(&g->mu);
        if (stop)
            break;
        uint64_t rss = read_rss(g->statm), now = feed_now_ns();
        if (rss)
            g->rss = rss;
        bool over = g->rss > g->rss_limit;
        atomic_store_explicit(&feedd_m.rss_bytes, (int64_t)g->rss, memory_order_relaxed);
        atomic_store_explicit(&feedd_m.transport_over, over ? 1 : 0, memory_order_relaxed);
        uint64_t cut = 0;
        if (over || now - g->refreshed_ns >= (uint64_t)GUARD_REFRESH_MS * 1000000u) {
            cut = scan(g, over, now);
            if (!over)
                g->refreshed_ns = now;
        }
        after_scan(g, over, cut, now);
        atomic_fetch_add(&g->ticks, 1);
    }
    return NULL;
}

int feedd_guard_start(uint64_t rss_limit, uint64_t burst, feedd_guard **out)
{
    *out = NULL;
    int statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (statm < 0) {
        FEED_LOGE("transport guard: /proc/self/statm: %s", strerror(errno));
        return FEED_EIO;
    }
    feedd_guard *g = calloc(1, sizeof *g);
    if (!g) {
        close(statm);
        return FEED_ENOMEM;
    }
    g->rss_limit = rss_limit;
    g->burst = burst;
    g->statm = statm;
    g->rss = read_rss(statm);
    if (!g->rss)
        FEED_LOGW("transport guard: /proc/self/statm gives no reading; until it does, memory "
                  "counts as under the limit");
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
        close(statm);
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
    for (int i = 0; i < GUARD_PAGES; i++)
        free(atomic_load(&g->pages[i]));
    close(g->statm);
    free(g);
}
