/*
 * The transport memory guard. gRPC core 1.51 buffers an HTTP/2 header block
 * of any size (a HEADERS frame followed by CONTINUATION frames without
 * END_HEADERS) and no channel argument of that version bounds it, so one
 * connection could take all the host's memory. feedd's own listener hands
 * each plaintext connection to gRPC and to this guard, and the service
 * credits a connection with what reached it as calls and messages. Every
 * GUARD_TICK_MS the guard reads the process's anonymous resident memory;
 * while it is above the limit, a connection is shut down, and gRPC frees
 * what it held for it, once its received bytes, less its credit and less
 * 1/GUARD_TX_SHARE of the bytes feedd sent on it (HTTP/2 window updates),
 * exceed burst + GUARD_IDLE_RATE a second (pings), the latter at most
 * GUARD_IDLE_CAP. The allowance starts again whenever all a connection
 * sent is accounted for, and every GUARD_REFRESH_MS while memory is under
 * the limit. Bytes that reached feedd as requests are never held against a
 * connection, so only one that sends what gRPC holds without delivering it
 * is cut. TLS connections, which gRPC accepts itself, are not watched.
 */
#ifndef FEED_SERVER_GUARD_H
#define FEED_SERVER_GUARD_H

#include <stdint.h>

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
/* Over the limit this long without a cut: said once, the limit may be too low. */
#define GUARD_OVER_WARN_MS 60000

typedef struct feedd_guard feedd_guard;

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
/* Watch connected socket fd, just accepted (any thread). NULL g: nothing. */
void feedd_guard_track(feedd_guard *g, int fd);
/*
 * The descriptor in gRPC's peer name "fd:N" of a connection feedd's
 * listener handed over, or -1 for any other peer (TLS connections).
 */
int feedd_guard_fd_of(const char *peer);
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

#endif
