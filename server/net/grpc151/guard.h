/*
 * The transport memory guard (server/net/grpc151/: it reads gRPC 1.51's peer
 * names, "fd:N" for a descriptor handed over, and watches only connections
 * feedd's own listener accepted). gRPC core 1.51 buffers an HTTP/2 header block
 * of any size (a HEADERS frame followed by CONTINUATION frames without
 * END_HEADERS) and no channel argument of that version bounds it, so one
 * connection could take all the host's memory. feedd's own listeners hand
 * every connection, plaintext and TLS, to gRPC and to this guard, and the
 * service credits a connection with what reached it as calls and messages.
 * A connection's unexplained bytes are those it sent less its credit and
 * less 1/GUARD_TX_SHARE of the bytes feedd sent on it (HTTP/2 window
 * updates); its allowance is burst + GUARD_IDLE_RATE a second (pings), the
 * latter at most GUARD_IDLE_CAP, and starts again whenever all it sent is
 * accounted for. Two rules shut a connection down, and gRPC then frees what
 * it held for it:
 *   - until it has made a Feed call that passed the token check
 *     (feedd_guard_authenticated), every GUARD_TICK_MS (in turns of
 *     GUARD_UNAUTH_PER_TICK), once its
 *     unexplained bytes exceed the allowance, whatever the memory: no token,
 *     no more memory than that;
 *   - after that, the same test while the process's anonymous resident
 *     memory is above the limit (read every GUARD_TICK_MS); while it is
 *     under, allowances also restart every GUARD_REFRESH_MS.
 * Bytes that reached feedd as requests are never held against a
 * connection, so only one that sends what gRPC holds without delivering it
 * is cut. After a cut, the allocator's free memory is returned to the
 * system then and GUARD_TRIMS times more at growing intervals, as gRPC frees
 * a cut connection's buffers on its own threads a little later.
 */
#ifndef FEED_SERVER_GRPC151_GUARD_H
#define FEED_SERVER_GRPC151_GUARD_H

#include <stdint.h>
#include <sys/socket.h>

#define GUARD_TICK_MS 10
/* While memory is under the limit, allowances restart this often. */
#define GUARD_REFRESH_MS 500
#define GUARD_IDLE_RATE 1024u       /* bytes a second of pings and settings ... */
#define GUARD_IDLE_CAP (256u << 10) /* ... up to this many */
#define GUARD_TX_SHARE 256          /* window updates: at most 1 byte per this many sent */
/*
 * A call's headers: more than one takes on the wire once HPACK has indexed
 * them, fewer than the first call of a connection (the burst covers it).
 */
#define GUARD_CALL_CREDIT 256
#define GUARD_MSG_CREDIT 64           /* a message's frame and gRPC prefix */
#define GUARD_BURST_EXTRA (64u << 10) /* burst: max-request-bytes and this */
#define GUARD_PAGE 1024               /* watched descriptors, in pages of this many */
#define GUARD_MAX_FDS (1 << 20)       /* descriptors above this are not watched */
/* After a cut, malloc_trim again this many times, GUARD_TRIM_FIRST_MS apart and then 4x longer each. */
#define GUARD_TRIMS 4
#define GUARD_TRIM_FIRST_MS 20
#define GUARD_HASH 4096 /* buckets of the peer-address table */
/*
 * Connections not authenticated yet judged a tick, in turn (two system
 * calls each): with more of them, each is judged every
 * unauthenticated / GUARD_UNAUTH_PER_TICK ticks, and the memory limit's
 * every-tick scan of all is the backstop.
 */
#define GUARD_UNAUTH_PER_TICK 256
/* Over the limit this long without a cut: said once, the limit may be too low. */
#define GUARD_OVER_WARN_MS 60000

typedef struct feedd_guard feedd_guard;

#ifdef FEEDD_GRPC151_CORE

/*
 * Start the guard's thread: cut floods while anonymous resident memory
 * (resident less file-backed and shared pages) is above rss_limit bytes;
 * burst is what a connection may have received and not yet delivered (a
 * request in flight). 0, FEED_EIO (/proc/self/statm unreadable) or
 * FEED_ENOMEM.
 */
int feedd_guard_start(uint64_t rss_limit, uint64_t burst, feedd_guard **out);
/* Anonymous resident memory now, in bytes; 0 if /proc cannot tell. */
uint64_t feedd_guard_rss(void);
/*
 * Watch connected socket fd, just accepted from peer addr (any thread),
 * as not authenticated yet. NULL g: nothing.
 */
void feedd_guard_track(feedd_guard *g, int fd, const struct sockaddr *addr, socklen_t len);
/*
 * The descriptor of the connection gRPC names peer: "fd:N" (a plaintext
 * connection handed over by descriptor), or the address of a watched one
 * ("ipv4:A.B.C.D:PORT", "ipv6:[..]:PORT", a TLS connection); -1 if none.
 * NULL g: the "fd:N" form only. Any thread; takes the guard's mu.
 */
int feedd_guard_fd_of(feedd_guard *g, const char *peer);
/* Connection fd made a call that passed the token check. Any thread, lock-free. */
void feedd_guard_authenticated(feedd_guard *g, int fd);
/*
 * bytes reached the service on connection fd (a call's headers and
 * payload, a message). Any thread, lock-free; fd -1 or a descriptor not
 * watched: nothing.
 */
void feedd_guard_credit(feedd_guard *g, int fd, uint64_t bytes);
/* Ticks the guard has completed (tests wait on it). */
uint64_t feedd_guard_ticks(feedd_guard *g);
/* Stop the thread and free. NULL is fine. */
void feedd_guard_stop(feedd_guard *g);
#else
/*
 * Built without server/net/grpc151 (feedd.cmake): no guard is ever started, and
 * what the service calls on its NULL guard does nothing, as it does on a
 * NULL guard when built with it.
 */
static inline int feedd_guard_fd_of(feedd_guard *g, const char *peer)
{
    (void)g;
    (void)peer;
    return -1;
}
static inline void feedd_guard_authenticated(feedd_guard *g, int fd)
{
    (void)g;
    (void)fd;
}
static inline void feedd_guard_credit(feedd_guard *g, int fd, uint64_t bytes)
{
    (void)g;
    (void)fd;
    (void)bytes;
}
static inline void feedd_guard_stop(feedd_guard *g)
{
    (void)g;
}
#endif

#endif
