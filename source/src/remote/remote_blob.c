/*
 * The remote blob: feed_remote_blob_open resolves an s3:// or http(s)://
 * location (remote_location.c), loads credentials, sends a HEAD for the
 * object's size and version, and returns a feed_blob whose reads are ranged
 * GETs (remote_transfer.c) or ranges fetched ahead (remote_readahead.c).
 *
 * Opens, reads and prefetches may come from any thread at once (the blob is
 * read-only after open). Open and close also count the remote blobs of the
 * process under open_lock: the first open starts the shared pool and
 * read-ahead workers, the last close stops them, so no thread and no
 * connection outlives the blobs. Lock order: open_lock, then the read-ahead
 * lock, then the pool lock.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/strutil.h"
#include "remote_internal.h"

remote_counters remote_stats;

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t open_count; /* guarded by open_lock */

/* FNV-1a of the version text (ETag, else Last-Modified): 0 when there is none. */
static uint64_t version_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static int remote_read(feed_blob *base, uint64_t offset, size_t len, uint8_t *dst, char *err,
                       size_t err_cap)
{
    remote_blob *b = (remote_blob *)base;
    int rc = 0;
    if (len > b->max_read) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: a read of %zu bytes is over the cap of %llu", base->name,
                     len, (unsigned long long)b->max_read);
    } else if (offset > base->size || len > base->size - offset) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: bytes %llu..%llu are outside the object (%llu bytes)",
                     base->name, (unsigned long long)offset, (unsigned long long)(offset + len),
                     (unsigned long long)base->size);
    } else if (len > 0) {
        rc = remote_ra_take(b, offset, len, dst, err, err_cap);
        rc = rc == 0 ? remote_fetch(b, offset, len, dst, NULL, err, err_cap) : rc < 0 ? rc : 0;
    }
    return rc;
}

static void remote_prefetch(feed_blob *base, const feed_blob_range *ranges, size_t n)
{
    remote_ra_hint((remote_blob *)base, ranges, n);
}

static void release_process_state(void)
{
    pthread_mutex_lock(&open_lock);
    if (--open_count == 0) {
        remote_ra_stop();
        remote_pool_stop();
    }
    pthread_mutex_unlock(&open_lock);
}

static void remote_close(feed_blob *base)
{
    remote_blob *b = (remote_blob *)base;
    remote_ra_forget(b);
    feed_remote_creds_wipe(&b->creds);
    free(base->name);
    free(b);
    release_process_state();
}

/* No stamp: the object's version now costs a request (feed_blob_ops.stamp). */
static const feed_blob_ops remote_ops = {remote_read, remote_prefetch, remote_close, NULL};

static int acquire_process_state(const feed_blob_options *o)
{
    int rc;
    pthread_mutex_lock(&open_lock);
    rc = remote_pool_start(o->remote.connections);
    if (rc == 0)
        rc = remote_ra_start(o->remote.connections, o->remote.readahead_bytes);
    if (rc == 0)
        open_count++;
    else if (open_count == 0)
        remote_pool_stop();
    pthread_mutex_unlock(&open_lock);
    return rc;
}

int feed_remote_blob_open(const char *location, const feed_blob_options *opts, feed_blob **out,
                          char *err, size_t err_cap)
{
    feed_blob_options defaults;
    const feed_blob_options *o = opts;
    remote_blob *b = NULL;
    remote_resp resp;
    int counted = 0;
    int rc = FEED_ENOMEM;

    *out = NULL;
    if (!o) {
        feed_blob_options_default(&defaults);
        o = &defaults;
    }
    b = calloc(1, sizeof *b);
    if (!b) {
        feed_set_err(err, err_cap, "out of memory opening a remote object");
        goto out;
    }
    rc = feed_remote_target_resolve(location, &o->remote, &b->t, err, err_cap);
    if (rc < 0)
        goto out;
    rc = FEED_ENOMEM;
    b->base.ops = &remote_ops;
    b->base.name = strdup(b->t.name);
    if (!b->base.name)
        goto out;
    b->max_read = o->max_read_bytes;
    b->timeout_ms = o->remote.timeout_ms ? o->remote.timeout_ms : 30000;
    b->retries = o->remote.retries;
    b->redirects = o->remote.redirects;
    if (b->t.s3) {
        rc = feed_remote_creds_load(&b->creds, err, err_cap);
        if (rc < 0)
            goto out;
    }
    rc = acquire_process_state(o);
    if (rc < 0) {
        feed_set_err(err, err_cap, "%s: cannot start the transfer pool (%s)", b->base.name,
                     feed_strerror(rc));
        goto out;
    }
    counted = 1;
    rc = remote_fetch(b, 0, 0, NULL, &resp, err, err_cap);
    if (rc < 0)
        goto out;
    if (!resp.have_total) {
        rc = FEED_EPROTO;
        feed_set_err(err, err_cap, "%s: the server did not say the object's size", b->base.name);
        goto out;
    }
    b->base.size = resp.total;
    memcpy(b->etag, resp.etag, sizeof b->etag);
    memcpy(b->last_modified, resp.last_modified, sizeof b->last_modified);
    b->base.version = version_hash(b->etag[0] ? b->etag : b->last_modified);
    *out = &b->base;
    b = NULL;
out:
    if (b) {
        feed_remote_creds_wipe(&b->creds);
        free(b->base.name);
        free(b);
        if (counted)
            release_process_state();
    }
    return rc;
}

void feed_remote_stats_get(feed_remote_stats *s)
{
    s->requests = atomic_load(&remote_stats.requests);
    s->retries = atomic_load(&remote_stats.retries);
    s->bytes = atomic_load(&remote_stats.bytes);
    s->readahead_done = atomic_load(&remote_stats.readahead_done);
    s->readahead_hits = atomic_load(&remote_stats.readahead_hits);
    s->readahead_dropped = atomic_load(&remote_stats.readahead_dropped);
}
