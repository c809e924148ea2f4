/*
 * Memory admission (see memory.h). Owned by the service; the granter thread
 * is started by feedd_memory_new and joined by feedd_memory_stop. The object
 * itself lives until the service and every pixel buffer have let go of it.
 */
#include "memory.h"

#include <pthread.h>
#include <stdlib.h>

#include "feed/errors.h"
#include "metrics.h"

struct feedd_memory {
    uint64_t max_memory, max_stream_memory;
    void (*granted)(feedd_mem_waiter *w);
    atomic_uint_fast64_t used; /* grows only under mu */
    atomic_uint refs;          /* the service's and one per buffer */
    pthread_t granter;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Guarded by mu. */
    feed_list fifo; /* of feedd_mem_waiter, over every stream */
    uint64_t gen;   /* bumped whenever memory frees or a batch starts waiting */
    uint64_t pass;  /* the granter's walks, to mark accounts passed over in one */
    bool stop;
};

static void memory_destroy(feedd_memory *m)
{
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* Memory freed: wake the granter if a batch waits. Any thread, any locks but mu. */
static void kick(feedd_memory *m)
{
    pthread_mutex_lock(&m->mu);
    m->gen++;
    if (!feed_list_empty(&m->fifo))
        pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Take bytes from the total cap if they fit. Under mu (growth happens only there). */
static bool reserve_locked(feedd_memory *m, uint64_t bytes)
{
    bool ok = atomic_load(&m->used) + bytes <= m->max_memory;
    if (ok) {
        atomic_fetch_add(&m->used, bytes);
        feedd_gauge(&feedd_m.memory_bytes, (int64_t)bytes);
    }
    return ok;
}

static void total_release(feedd_memory *m, uint64_t bytes)
{
    atomic_fetch_sub(&m->used, bytes);
    feedd_gauge(&feedd_m.memory_bytes, -(int64_t)bytes);
    kick(m);
}

/* Under mu. */
static void unlink_locked(feedd_memory *m, feedd_mem_waiter *w)
{
    feed_list_remove(&m->fifo, &w->link);
    feedd_gauge(&feedd_m.waiting_batches, -1);
}

/*
 * One walk of the FIFO from the head (see memory.h); moves the waiters it
 * grants, their bytes reserved, to *granted. Under mu.
 */
static void grant_locked(feedd_memory *m, feed_list *granted)
{
    uint64_t pass = ++m->pass;
    for (feed_list_node *n = m->fifo.first, *next; n; n = next) {
        next = n->next;
        feedd_mem_waiter *w = FEED_LIST_ENTRY(n, feedd_mem_waiter, link);
        feedd_mem_account *a = w->acct;
        if (a->wait_pass == pass)
            continue;
        if (atomic_load(&a->used) + w->bytes > m->max_stream_memory) {
            a->wait_pass = pass;
            continue;
        }
        if (!reserve_locked(m, w->bytes))
            break;
        atomic_fetch_add(&a->used, w->bytes);
        unlink_locked(m, w);
        feed_list_push_back(granted, &w->link);
    }
}

/* The granter thread: a walk whenever memory frees or a batch starts waiting. */
static void *granter_main(void *arg)
{
    feedd_memory *m = arg;
    /*
     * gen starts at 0 and only grows, so a batch that began waiting (or
     * memory that freed) before this thread first ran still gets its walk.
     */
    uint64_t seen = 0;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        if (seen == m->gen || feed_list_empty(&m->fifo)) {
            pthread_cond_wait(&m->cv, &m->mu);
            continue;
        }
        seen = m->gen;
        feed_list granted = {0};
        grant_locked(m, &granted);
        pthread_mutex_unlock(&m->mu);
        while (!feed_list_empty(&granted))
            m->granted(FEED_LIST_ENTRY(feed_list_pop_front(&granted), feedd_mem_waiter, link));
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

int feedd_memory_new(uint64_t max_memory, uint64_t max_stream_memory,
                     void (*granted)(feedd_mem_waiter *w), feedd_memory **out)
{
    int rc = FEED_ENOMEM;
    feedd_memory *m = calloc(1, sizeof *m);
    if (!m)
        goto out;
    m->max_memory = max_memory;
    m->max_stream_memory = max_stream_memory;
    m->granted = granted;
    atomic_init(&m->used, 0);
    atomic_init(&m->refs, 1);
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->granter, NULL, granter_main, m) != 0) {
        memory_destroy(m);
        goto out;
    }
    *out = m;
    rc = 0;
out:
    return rc;
}

void feedd_memory_stop(feedd_memory *m)
{
    if (m) {
        pthread_mutex_lock(&m->mu);
        m->stop = true;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->granter, NULL);
    }
}

void feedd_memory_unref(feedd_memory *m)
{
    if (m && atomic_fetch_sub(&m->refs, 1) == 1)
        memory_destroy(m);
}

bool feedd_memory_admit(feedd_memory *m, feedd_mem_waiter *w)
{
    feedd_mem_account *a = w->acct;
    pthread_mutex_lock(&m->mu);
    bool now = feed_list_empty(&m->fifo) &&
               atomic_load(&a->used) + w->bytes <= m->max_stream_memory &&
               reserve_locked(m, w->bytes);
    if (now) {
        atomic_fetch_add(&a->used, w->bytes);
    } else {
        feed_list_push_back(&m->fifo, &w->link);
        m->gen++;
        feedd_gauge(&feedd_m.waiting_batches, 1);
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return now;
}

void feedd_memory_withdraw(feedd_memory *m, feedd_mem_account *acct, feed_list *out)
{
    bool any = false;
    pthread_mutex_lock(&m->mu);
    for (feed_list_node *n = m->fifo.first, *next; n; n = next) {
        next = n->next;
        feedd_mem_waiter *w = FEED_LIST_ENTRY(n, feedd_mem_waiter, link);
        if (w->acct == acct) {
            unlink_locked(m, w);
            feed_list_push_back(out, &w->link);
            any = true;
        }
    }
    if (any) {
        /* One of them may have been the head that held the others back. */
        m->gen++;
        pthread_cond_signal(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
}

void feedd_memory_stream_release(feedd_memory *m, feedd_mem_account *acct, uint64_t bytes)
{
    if (bytes) {
        atomic_fetch_sub(&acct->used, bytes);
        kick(m);
    }
}

feedd_mem_buf *feedd_memory_buf_new(feedd_memory *m, uint64_t bytes)
{
    feedd_mem_buf *b = malloc(sizeof *b + (size_t)bytes);
    if (b) {
        b->owner = m;
        b->bytes = (size_t)bytes;
        atomic_fetch_add(&m->refs, 1);
    }
    return b;
}

void feedd_memory_unreserve(feedd_memory *m, feedd_mem_account *acct, uint64_t bytes)
{
    atomic_fetch_sub(&m->used, bytes);
    feedd_gauge(&feedd_m.memory_bytes, -(int64_t)bytes);
    feedd_memory_stream_release(m, acct, bytes);
}

void feedd_memory_buf_free(void *buf)
{
    feedd_mem_buf *b = buf;
    feedd_memory *m = b->owner;
    uint64_t bytes = b->bytes;
    free(b);
    total_release(m, bytes);
    feedd_memory_unref(m);
}

uint64_t feedd_memory_used(feedd_memory *m)
{
    return atomic_load(&m->used);
}
