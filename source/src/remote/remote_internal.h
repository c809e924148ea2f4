/*
 * The inside of a remote blob, shared by remote_blob.c (open, read, close),
 * remote_transfer.c (one HTTP request with caps, retries and the pool of
 * connections) and remote_readahead.c (hinted ranges fetched in the
 * background). Not installed; nothing outside source/src includes it.
 *
 * Process-wide state: the pool of curl handles (remote_transfer.c) and the
 * read-ahead queue and its workers (remote_readahead.c) are shared by every
 * remote blob of the process; they start with the first open and stop when
 * the last blob closes (remote_blob.c counts them). Lock order: the
 * read-ahead lock, then the pool lock (a worker holds neither while it
 * transfers).
 */
#ifndef FEED_COMMON_REMOTE_INTERNAL_H
#define FEED_COMMON_REMOTE_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/blob.h"
#include "feed/remote.h"

#define REMOTE_MAX_CONNECTIONS 256u /* cap on options.remote.connections */
#define REMOTE_MAX_WORKERS 64u      /* read-ahead threads, at most */
#define REMOTE_MAX_REDIRECTS 3u     /* hops of one request, when redirects are allowed */

typedef struct remote_blob {
    feed_blob base;
    feed_remote_target t;
    feed_remote_creds creds; /* wiped at close */
    char etag[256];          /* from the open's HEAD; "" when the server sent none */
    char last_modified[64];  /* likewise */
    uint64_t max_read;
    uint32_t timeout_ms;
    uint32_t retries;
    int redirects; /* FEED_REMOTE_REDIRECTS_NONE or _SAME_HOST (plain URLs only) */
} remote_blob;

/* What one request learned besides the body. */
typedef struct remote_resp {
    long status;
    uint64_t total; /* object size: Content-Range's total, or Content-Length of a 200 */
    int have_total; /* 2: from a whole Content-Range (with range_first/last), 1: Content-Length */
    uint64_t range_first, range_last; /* Content-Range's bytes, when have_total is 2 */
    char etag[256];
    char last_modified[64];
} remote_resp;

/* Process-wide counters (feed_remote_stats_get reads them). */
typedef struct remote_counters {
    _Atomic uint64_t requests, retries, bytes;
    _Atomic uint64_t readahead_done, readahead_hits, readahead_dropped;
} remote_counters;
extern remote_counters remote_stats;

/*
 * HEAD (dst NULL) or a ranged GET of exactly len bytes at offset into dst,
 * with retries and backoff on 5xx, 429, timeouts and cut connections. A GET
 * checks the response against what the open saw (size, ETag, Last-Modified)
 * and the range asked for (Content-Range), and refuses a body longer than
 * len. A redirect is followed only as b->redirects allows (at most
 * REMOTE_MAX_REDIRECTS hops). Returns 0 or a FEED_E code with a
 * message naming b's object; resp (may be NULL) gets the last response's
 * headers. Blocks while the pool has no free connection. Any thread.
 */
int remote_fetch(remote_blob *b, uint64_t offset, size_t len, uint8_t *dst, remote_resp *resp,
                 char *err, size_t err_cap);

/* The pool of connections: raise its size to at least n (capped). */
int remote_pool_start(uint32_t n);
/* Frees every idle handle; called when the last blob closes. */
void remote_pool_stop(void);

/* Read-ahead (remote_readahead.c). */
int remote_ra_start(uint32_t workers, uint64_t cap_bytes);
void remote_ra_stop(void);
void remote_ra_hint(remote_blob *b, const feed_blob_range *ranges, size_t n);
/*
 * Serves a read from a hinted range that matches exactly: waits while it is
 * in flight. Returns 1 with the bytes in dst; 0 when the range was not
 * fetched ahead: the caller reads it itself; or the negative FEED_E code its
 * fetch failed with after the retries, its message in err: the read fails so.
 */
int remote_ra_take(remote_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                   size_t err_cap);
/* Drops b's hints, waiting for its fetches in flight; before b is freed. */
void remote_ra_forget(remote_blob *b);

#endif
