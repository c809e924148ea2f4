/*
 * The transport memory guard (guard.h). One thread scans; the listeners'
 * threads add connections; completion-queue threads add credit and look
 * connections up by peer address. The table of watched connections is
 * indexed by descriptor, in pages allocated on first use and never moved
 * or freed before the guard stops, so credit and the authenticated flag
 * are atomics with no lock. The rest of an entry, and the hash of peer
 * addresses to descriptors (chained through the entries), are guarded by
 * mu, which is only held to read or write them: never across a system
 * call, an allocation or a log line. A descriptor gRPC has closed, or
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
#include <arpa/inet.h>
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
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "metrics.h"

#define GUARD_LOG_MS 10000
#define GUARD_PAGES (GUARD_MAX_FDS / GUARD_PAGE)

/* A peer's address as both the listener's sockaddr and gRPC's peer name give it. */
typedef struct peer_key {
    uint8_t addr[16]; /* IPv4 in the first 4 bytes, IPv4-mapped IPv6 as IPv4 */
    uint16_t port;
    uint8_t family; /* AF_INET, AF_INET6; 0: none */
} peer_key;

typedef struct conn {
    atomic_uint_fast64_t credit; /* bytes delivered as calls and messages, ever */
    atomic_bool authed;          /* made a Feed call that passed the token check */
    /* Guarded by the guard's mu. */
    ino_t ino;                         /* 0: not watched */
    uint64_t rx0, tx0, credit0, t0_ns; /* at the start of the allowance */
    peer_key key;
    int next; /* next descriptor + 1 in key's hash chain; 0: none */
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
    int buckets[GUARD_HASH]; /* descriptor + 1 heading each chain; guarded by mu */
    /* The guard thread's own. */
    uint64_t refreshed_ns, over_since_ns, logged_ns, cut_unlogged, trim_at_ns, trim_gap_ms;
    int trims_left, cursor;
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

static void key_of_addr(const struct sockaddr *addr, socklen_t len, peer_key *k)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(k, 0, sizeof *k);
    if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        k->family = AF_INET;
        memcpy(k->addr, &a->sin_addr, 4);
        k->port = ntohs(a->sin_port);
    } else if (addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        bool mapped = memcmp(&a->sin6_addr, v4mapped, sizeof v4mapped) == 0;
        k->family = mapped ? AF_INET : AF_INET6;
        memcpy(k->addr, (const uint8_t *)&a->sin6_addr + (mapped ? 12 : 0), mapped ? 4 : 16);
        k->port = ntohs(a->sin6_port);
    }
}

/* gRPC's peer name "ipv4:A.B.C.D:P" or "ipv6:[A::B]:P" (brackets maybe as %5B, %5D). */
static bool key_of_peer(const char *peer, peer_key *k)
{
    char host[64];
    size_t h = 0;
    bool v6 = strncmp(peer, "ipv6:", 5) == 0;
    memset(k, 0, sizeof *k);
    if (!v6 && strncmp(peer, "ipv4:", 5) != 0)
        return false;
    const char *p = peer + 5, *colon = strrchr(p, ':');
    if (!colon || colon[1] == '\0' || strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return false;
    while (p < colon && h < sizeof host - 1) {
        if (*p == '[' || *p == ']')
            p++;
        else if (strncmp(p, "%5B", 3) == 0 || strncmp(p, "%5D", 3) == 0)
            p += 3;
        else
            host[h++] = *p++;
    }
    host[h] = '\0';
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;
    long port = strtol(colon + 1, NULL, 10);
    if (port > 65535)
        return false;
    memset(&a6, 0, sizeof a6);
    memset(&a4, 0, sizeof a4);
    if (!v6 && inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)port);
        key_of_addr((struct sockaddr *)&a4, sizeof a4, k);
    } else if (v6 && inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)port);
        key_of_addr((struct sockaddr *)&a6, sizeof a6, k);
    }
    return k->family != 0;
}

static bool key_eq(const peer_key *a, const peer_key *b)
{
    return a->family == b->family && a->port == b->port && memcmp(a->addr, b->addr, 16) == 0;
}

static uint32_t key_hash(const peer_key *k)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof k->addr; i++)
        h = (h ^ k->addr[i]) * 16777619u;
    h = (h ^ k->port) * 16777619u;
    return h % GUARD_HASH;
}

/* Take fd's entry out of its hash chain. mu held. */
static void unlink_key(feedd_guard *g, int fd, conn *c)
{
    if (!c->key.family)
        return;
    int *link = &g->buckets[key_hash(&c->key)];
    while (*link && *link != fd + 1)
        link = &entry(g, *link - 1)->next;
    if (*link)
        *link = c->next;
    c->next = 0;
    c->key.family = 0;
}

/* The descriptor watched for key, or -1. mu held. */
static int find_key(feedd_guard *g, const peer_key *k)
{
    int fd = g->buckets[key_hash(k)];
    while (fd && !key_eq(&entry(g, fd - 1)->key, k))
        fd = entry(g, fd - 1)->next;
    return fd - 1;
}

void feedd_guard_track(feedd_guard *g, int fd, const struct sockaddr *addr, socklen_t len)
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
    peer_key key;
    key_of_addr(addr, len, &key);
    atomic_store(&c->authed, false);
    uint64_t credit = atomic_load_explicit(&c->credit, memory_order_relaxed), rx = 0, tx = 0;
    if (!look(fd, st.st_ino, &rx, &tx))
        return;
    pthread_mutex_lock(&g->mu);
    unlink_key(g, fd, c);
    if (key.family) {
        int old = find_key(g, &key); /* a closed connection the scan has not seen yet */
        if (old >= 0)
            unlink_key(g, old, entry(g, old));
        c->key = key;
        int *head = &g->buckets[key_hash(&key)];
        c->next = *head;
        *head = fd + 1;
    }
    c->ino = st.st_ino;
    restart(c, rx, tx, credit, feed_now_ns());
    if (fd > atomic_load(&g->max_fd))
        atomic_store(&g->max_fd, fd);
    pthread_mutex_unlock(&g->mu);
}

int feedd_guard_fd_of(feedd_guard *g, const char *peer)
{
    int fd = -1;
    peer_key key;
    if (peer && sscanf(peer, "fd:%d", &fd) == 1)
        return fd >= 0 && fd < GUARD_MAX_FDS ? fd : -1;
    fd = -1;
    if (g && peer && key_of_peer(peer, &key)) {
        pthread_mutex_lock(&g->mu);
        fd = find_key(g, &key);
        pthread_mutex_unlock(&g->mu);
    }
    return fd;
}

void feedd_guard_authenticated(feedd_guard *g, int fd)
{
    conn *c = g && fd >= 0 ? entry(g, fd) : NULL;
    if (c)
        atomic_store_explicit(&c->authed, true, memory_order_relaxed);
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
 * One connection: authenticated and under the limit (over false), restart
 * its allowance; otherwise restart it when all it sent is accounted for,
 * else say whether it is past it. Called with mu held, ino read under it.
 */
static bool judge(feedd_guard *g, conn *c, bool over, bool authed, uint64_t rx, uint64_t tx,
                  uint64_t credit, uint64_t now)
{
    uint64_t received = rx - c->rx0;
    uint64_t explained = (credit - c->credit0) + (tx - c->tx0) / GUARD_TX_SHARE;
    if ((authed && !over) || received <= explained) {
        restart(c, rx, tx, credit, now);
        return false;
    }
    /* A connection tracked during this scan started after now. */
    uint64_t ms = now > c->t0_ns ? (now - c->t0_ns) / 1000000u : 0;
    uint64_t idle = ms * GUARD_IDLE_RATE / 1000u;
    return received - explained > g->burst + (idle < GUARD_IDLE_CAP ? idle : GUARD_IDLE_CAP);
}

/* Judge the connection on fd, shut it down if it floods; whether it was. */
static bool judge_fd(feedd_guard *g, int fd, conn *c, bool over, bool authed, uint64_t now)
{
    pthread_mutex_lock(&g->mu);
    ino_t ino = c->ino;
    pthread_mutex_unlock(&g->mu);
    if (!ino)
        return false;
    uint64_t credit = atomic_load_explicit(&c->credit, memory_order_relaxed), rx = 0, tx = 0;
    bool alive = look(fd, ino, &rx, &tx), flood = false;
    pthread_mutex_lock(&g->mu);
    if (c->ino == ino) {
        flood = alive && judge(g, c, over, authed, rx, tx, credit, now);
        if (!alive || flood) {
            c->ino = 0;
            unlink_key(g, fd, c);
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (flood) {
        feedd_count(&feedd_m.connections_cut, 1); /* counted before its peer can see it */
        shutdown(fd, SHUT_RDWR);
    }
    return flood;
}

/*
 * all: every watched connection judged. Otherwise the ones not
 * authenticated yet, at most GUARD_UNAUTH_PER_TICK of them, going on from
 * where the last tick stopped (idle connections cannot make the guard spin).
 * Returns how many were shut down.
 */
static uint64_t scan(feedd_guard *g, bool over, bool all, uint64_t now)
{
    uint64_t cut = 0;
    int max_fd = atomic_load(&g->max_fd), looked = 0;
    int fd = all || g->cursor > max_fd ? 0 : g->cursor;
    for (int seen = 0; seen <= max_fd && (all || looked < GUARD_UNAUTH_PER_TICK);
         seen++, fd = fd < max_fd ? fd + 1 : 0) {
        conn *c = entry(g, fd);
        if (!c) {
            int skip = GUARD_PAGE - 1 - fd % GUARD_PAGE;
            seen += skip;
            fd += skip;
            continue;
        }
        bool authed = atomic_load_explicit(&c->authed, memory_order_relaxed);
        if (authed && !all)
            continue;
        looked++;
        cut += judge_fd(g, fd, c, over, authed, now);
    }
    g->cursor = fd;
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
    if (g->trims_left && now >= g->trim_at_ns) {
        malloc_trim(0);
        g->trims_left--;
        g->trim_gap_ms *= 4;
        g->trim_at_ns = now + g->trim_gap_ms * 1000000u;
    }
    if (!cut)
        return;
    malloc_trim(0);
    g->trims_left = GUARD_TRIMS;
    g->trim_gap_ms = GUARD_TRIM_FIRST_MS;
    g->trim_at_ns = now + g->trim_gap_ms * 1000000u;
    g->cut_unlogged += cut;
    if (now - g->logged_ns >= (uint64_t)GUARD_LOG_MS * 1000000u) {
        FEED_LOGW("transport guard: cut %llu connection(s) that sent more than %llu KiB which "
                  "gRPC held without delivering a call or a message (an HTTP/2 flood), before "
                  "any call passed the token check or while memory (%llu MiB) was over the "
                  "limit %llu MiB",
                  (unsigned long long)g->cut_unlogged, (unsigned long long)(g->burst >> 10),
                  (unsigned long long)(g->rss >> 20), (unsigned long long)(g->rss_limit >> 20));
        g->logged_ns = now;
        g->cut_unlogged = 0;
    }
}

static void *guard_main(void *arg)
{
    feedd_guard *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        if (!g->stop)
            feed_cond_timedwait(&g->cv, &g->mu, GUARD_TICK_MS * 1000000ull);
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
        bool all = over || now - g->refreshed_ns >= (uint64_t)GUARD_REFRESH_MS * 1000000u;
        uint64_t cut = scan(g, over, all, now);
        if (all && !over)
            g->refreshed_ns = now;
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
    feed_cond_init(&g->cv);
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
