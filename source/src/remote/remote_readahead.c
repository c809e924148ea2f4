/*
 * Read-ahead for remote blobs: ranges hinted with feed_blob_prefetch are
 * fetched in the background by a few worker threads into buffers, and a later
 * read of exactly such a range takes its bytes (waiting while the fetch is in
 * flight) instead of asking the network again. A range hinted again before it
 * was read (two batches or a batch and its hedge want the same sample) is
 * fetched once and serves as many reads as it was hinted. A fetch that failed
 * after its retries hands its failure and message to the reads it was for:
 * asking the store again would double the requests and the wait for a dead
 * range.
 *
 * Process-wide and bounded: the bytes of every hinted range not yet read,
 * queued or fetched, stay under the largest readahead_bytes an open asked for.
 * A hint that does not fit first pushes out fetched ranges left unread for
 * RA_STALE_NS (a hint the reader never followed must not hold the budget
 * forever), else it is dropped: ranges fetched for a reader that is merely
 * behind are never pushed out by newer hints. Workers: as many as the largest connections
 * asked for (at most REMOTE_MAX_WORKERS); each holds one pool connection
 * while it fetches, so read-ahead and direct reads share the same bound.
 *
 * Threads: the workers run worker(); hint, take and forget run in the
 * caller's thread (take may wait; hint never does I/O). ra_lock guards every
 * field of ra and every entry; a worker drops it while it fetches. Lock order:
 * ra_lock before the pool's lock (remote_transfer.c), never held across a
 * transfer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/timeutil.h"
#include "remote_internal.h"

#define RA_STALE_NS (10ull * 1000000000ull)

enum ra_state { RA_QUEUED, RA_FETCHING, RA_DONE };

typedef struct ra_entry {
    struct ra_entry *next;
    remote_blob *blob;
    uint64_t offset;
    size_t len;
    enum ra_state state;
    int rc;
    char err[256];    /* the failed fetch's message */
    uint32_t wanted;  /* hints not yet read; the entry leaves the list at 0 */
    uint32_t users;   /* readers waiting for it or copying it: not pushed out, not freed */
    uint64_t done_ns; /* feed_now_ns() when the fetch finished */
    uint8_t *buf;
} ra_entry;

static pthread_mutex_t ra_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ra_work = PTHREAD_COND_INITIALIZER; /* a range was queued, or stop */
static pthread_cond_t ra_done = PTHREAD_COND_INITIALIZER; /* a fetch finished */

static struct {
    ra_entry *head, *tail; /* hint order */
    uint64_t bytes;        /* sum of len over the list */
    uint64_t cap;
    pthread_t workers[REMOTE_MAX_WORKERS];
    uint32_t n_workers;
    int stop;
} ra;

static void unlink_entry(ra_entry *e)
{
    ra_entry **pp = &ra.head;
    ra_entry *prev = NULL;
    while (*pp && *pp != e) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = e->next;
        if (ra.tail == e)
            ra.tail = prev;
        ra.bytes -= e->len;
    }
}

static void free_entry(ra_entry *e)
{
    free(e->buf);
    free(e);
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ra_lock);
    while (!ra.stop) {
        ra_entry *e = ra.head;
        while (e && e->state != RA_QUEUED)
            e = e->next;
        if (!e) {
            pthread_cond_wait(&ra_work, &ra_lock);
            continue;
        }
        e->state = RA_FETCHING;
        pthread_mutex_unlock(&ra_lock);
        e->buf = malloc(e->len ? e->len : 1);
        e->rc = e->buf
                    ? remote_fetch(e->blob, e->offset, e->len, e->buf, NULL, e->err, sizeof e->err)
                    : FEED_ENOMEM;
        pthread_mutex_lock(&ra_lock);
        e->state = RA_DONE;
        e->done_ns = feed_now_ns();
        atomic_fetch_add(&remote_stats.readahead_done, 1);
        pthread_cond_broadcast(&ra_done);
    }
    pthread_mutex_unlock(&ra_lock);
    return NULL;
}

int remote_ra_start(uint32_t workers, uint64_t cap_bytes)
{
    int rc = 0;
    if (workers > REMOTE_MAX_WORKERS)
        workers = REMOTE_MAX_WORKERS;
    pthread_mutex_lock(&ra_lock);
    if (cap_bytes > ra.cap)
        ra.cap = cap_bytes;
    ra.stop = 0;
    while (ra.cap > 0 && ra.n_workers < workers) {
        if (pthread_create(&ra.workers[ra.n_workers], NULL, worker, NULL) != 0) {
            rc = ra.n_workers > 0 ? 0 : FEED_ENOMEM; /* fewer workers still work */
            break;
        }
        ra.n_workers++;
    }
    pthread_mutex_unlock(&ra_lock);
    return rc;
}

void remote_ra_stop(void)
{
    uint32_t n;
    pthread_mutex_lock(&ra_lock);
    ra.stop = 1;
    n = ra.n_workers;
    pthread_cond_broadcast(&ra_work);
    pthread_mutex_unlock(&ra_lock);
    for (uint32_t i = 0; i < n; i++)
        pthread_join(ra.workers[i], NULL);
    pthread_mutex_lock(&ra_lock);
    ra.n_workers = 0;
    ra.cap = 0;
    pthread_mutex_unlock(&ra_lock);
}

static ra_entry *find(const remote_blob *b, uint64_t offset, size_t len)
{
    ra_entry *e = ra.head;
    while (e && !(e->blob == b && e->offset == offset && e->len == len))
        e = e->next;
    return e;
}

/* Pushes out stale fetched ranges, oldest first, until len fits. */
static int make_room(size_t len)
{
    ra_entry *e = ra.head;
    uint64_t now = ra.bytes + len > ra.cap ? feed_now_ns() : 0;
    while (ra.bytes + len > ra.cap && e) {
        ra_entry *next = e->next;
        if (e->state == RA_DONE && !e->users && now - e->done_ns > RA_STALE_NS) {
            unlink_entry(e);
            free_entry(e);
        }
        e = next;
    }
    return ra.bytes + len <= ra.cap;
}

void remote_ra_hint(remote_blob *b, const feed_blob_range *ranges, size_t n)
{
    pthread_mutex_lock(&ra_lock);
    for (size_t i = 0; i < n && ra.n_workers > 0 && !ra.stop; i++) {
        const feed_blob_range *r = &ranges[i];
        ra_entry *e;
        if (r->length == 0 || r->length > b->max_read || r->offset > b->base.size ||
            r->length > b->base.size - r->offset)
            continue;
        e = find(b, r->offset, (size_t)r->length);
        if (e) {
            if (e->wanted < UINT32_MAX)
                e->wanted++;
            continue;
        }
        if (!make_room((size_t)r->length)) {
            atomic_fetch_add(&remote_stats.readahead_dropped, n - i);
            break;
        }
        e = calloc(1, sizeof *e);
        if (!e)
            break;
        e->blob = b;
        e->offset = r->offset;
        e->len = (size_t)r->length;
        e->state = RA_QUEUED;
        e->wanted = 1;
        if (ra.tail)
            ra.tail->next = e;
        else
            ra.head = e;
        ra.tail = e;
        ra.bytes += e->len;
        pthread_cond_signal(&ra_work);
    }
    pthread_mutex_unlock(&ra_lock);
}

int remote_ra_take(remote_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                   size_t err_cap)
{
    ra_entry *e;
    int served = 0, last = 0;
    pthread_mutex_lock(&ra_lock);
    e = find(b, offset, len);
    if (e && e->state == RA_QUEUED) {
        /*
         * Not started: it goes to the head of the queue, so the next free
         * worker fetches it. Fetching it here instead would wait for a pool
         * connection behind the workers anyway, and leave the entry to be
         * fetched a second time.
         */
        unlink_entry(e);
        e->next = ra.head;
        ra.head = e;
        if (!ra.tail)
            ra.tail = e;
        ra.bytes += e->len;
        pthread_cond_signal(&ra_work);
    }
    if (e) {
        e->users++;
        while (e->state != RA_DONE)
            pthread_cond_wait(&ra_done, &ra_lock);
        /* The read a hint was for; the last takes it off the list. A reader past the hints
         * (one more than were made, waiting with them) still shares the bytes. */
        if (e->wanted > 0 && --e->wanted == 0)
            unlink_entry(e);
    }
    pthread_mutex_unlock(&ra_lock);
    if (e) {
        if (e->rc == 0) {
            memcpy(dst, e->buf, len);
            served = 1;
            atomic_fetch_add(&remote_stats.readahead_hits, 1);
        } else {
            served = e->rc;
            if (err && err_cap)
                snprintf(err, err_cap, "%s", e->err[0] ? e->err : feed_strerror(e->rc));
        }
        pthread_mutex_lock(&ra_lock);
        last = --e->users == 0 && e->wanted == 0;
        pthread_mutex_unlock(&ra_lock);
        if (last)
            free_entry(e);
    }
    return served;
}

void remote_ra_forget(remote_blob *b)
{
    pthread_mutex_lock(&ra_lock);
    for (;;) {
        ra_entry *e = ra.head;
        int busy = 0;
        while (e) {
            ra_entry *next = e->next;
            if (e->blob == b && e->state == RA_FETCHING) {
                busy = 1;
            } else if (e->blob == b) {
                unlink_entry(e);
                free_entry(e);
            }
            e = next;
        }
        if (!busy)
            break;
        pthread_cond_wait(&ra_done, &ra_lock);
    }
    pthread_mutex_unlock(&ra_lock);
}
