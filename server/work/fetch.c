/*
 * The fetch stage; see fetch.h for what it promises.
 *
 * Each remote sample of a submitted job becomes an item in one FIFO queue.
 * A fetch thread takes the first item whose store and object are under their
 * caps (so items of a capped store wait while the others pass them), reads it
 * with feed_dataset_read_why into a buffer of its own, and hands the buffer
 * (or the failure and its cause) to the item's job. The job's last item calls ready. Jobs wait for
 * their deadline in submit order, which is deadline order (one deadline for all), so the deadline
 * thread sleeps until the oldest one's. An expired job leaves the stage at once: its queued items
 * are dropped, its items in flight are orphaned (item->fj NULL) and freed by their thread when the
 * read returns.
 */
#include "fetch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/list.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "metrics.h"
#include "pool.h"

typedef struct fetch_slot {
    uint8_t *bytes; /* owned; NULL unless rc == 1 */
    size_t len;
    char *why;   /* owned; the cause of a failed read, or NULL */
    int rc;      /* 0 not (yet) fetched, 1 fetched, < 0 failed */
    bool wanted; /* queued for a fetch at submit */
} fetch_slot;

/* A job's state while and after it is fetched; job->fetch. */
struct feedd_fetch_job {
    feedd_job *job;
    feed_list_node link;     /* in f->fetching while fetching; guarded by f->mu */
    feed_list_node all_link; /* in f->all until released; guarded by f->mu */
    bool fetching;           /* guarded by f->mu */
    uint64_t deadline_ns;
    uint32_t left;    /* items not yet fetched or failed; guarded by f->mu */
    fetch_slot *slot; /* job->n; written under f->mu until ready, read-only after */
};

typedef struct fetch_item {
    feed_list_node link;        /* in f->queue or f->flight; guarded by f->mu */
    struct feedd_fetch_job *fj; /* NULL once orphaned; guarded by f->mu */
    const feed_dataset *ds;     /* outlives the stage */
    uint64_t index;
    uint32_t pos;
    const char *object; /* feed_dataset_sample_object */
    size_t store_len;   /* object[0, store_len) names its store */
} fetch_item;

struct feedd_fetch {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* an item queued, a cap or bytes freed, stop */
    pthread_cond_t timer; /* a job began fetching, stop */
    feed_list queue;      /* of fetch_item, FIFO */
    feed_list flight;     /* of fetch_item being read */
    feed_list fetching;   /* of feedd_fetch_job, by deadline */
    feed_list all;        /* of feedd_fetch_job, every one not yet released */
    uint64_t bytes;       /* fetched and not released */
    bool stop;
    feedd_fetch_limits lim;
    uint32_t object_fetches; /* cap per object: half the store's, rounded up */
    feedd_fetch_ready_fn ready;
    feedd_fetch_skip_fn skip;
    void *arg;
    pthread_t *threads;
    uint32_t n_threads;
    pthread_t deadline_thread;
    bool deadline_started;
};

void feedd_fetch_limits_default(feedd_fetch_limits *l)
{
    l->threads = 8;
    l->store_fetches = 4;
    l->deadline_ms = 20000;
    l->max_bytes = 64u << 20;
    l->max_sample_bytes = 64u << 20;
}

/* Length of "scheme://authority" at the front of a name ("s3://bucket" for s3). */
static size_t store_len(const char *object)
{
    const char *p = strstr(object, "://");
    const char *end = p ? strchr(p + 3, '/') : NULL;
    return end ? (size_t)(end - object) : strlen(object);
}

static bool same_store(const fetch_item *a, const fetch_item *b)
{
    return a->store_len == b->store_len && memcmp(a->object, b->object, a->store_len) == 0;
}

/* The first queued item whose store and object are under their caps. Under mu. */
static fetch_item *pick(feedd_fetch *f)
{
    if (f->bytes > 0 && f->bytes >= f->lim.max_bytes)
        return NULL;
    for (feed_list_node *n = f->queue.first; n; n = n->next) {
        fetch_item *it = FEED_LIST_ENTRY(n, fetch_item, link);
        uint32_t store = 0, object = 0;
        for (feed_list_node *m = f->flight.first; m; m = m->next) {
            const fetch_item *o = FEED_LIST_ENTRY(m, fetch_item, link);
            if (same_store(it, o)) {
                store++;
                object += o->object == it->object;
            }
        }
        if (store < f->lim.store_fetches && object < f->object_fetches)
            return it;
    }
    return NULL;
}

/*
 * Hands a fetched or failed item's outcome (why: the cause of a failure) to its job; true when
 * that was the job's last.
 */
static bool settle(feedd_fetch *f, fetch_item *it, int rc, feed_buf *buf, const char *why)
{
    struct feedd_fetch_job *fj = it->fj;
    fetch_slot *s = &fj->slot[it->pos];
    if (rc == 0) {
        s->bytes = buf->data;
        s->len = buf->len;
        s->rc = 1;
        f->bytes += buf->len;
        feed_buf_init(buf, buf->limit);
    } else {
        s->rc = rc;
        s->why = why[0] ? strdup(why) : NULL; /* out of memory: the code says it without */
    }
    if (--fj->left > 0)
        return false;
    feed_list_remove(&f->fetching, &fj->link);
    fj->fetching = false;
    return true;
}

static void *fetch_main(void *arg)
{
    feedd_fetch *f = arg;
    feed_buf buf;
    feed_buf_init(&buf, (size_t)f->lim.max_sample_bytes);
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        fetch_item *it = pick(f);
        if (!it) {
            pthread_cond_wait(&f->work, &f->mu);
            continue;
        }
        feed_list_remove(&f->queue, &it->link);
        feed_list_push_back(&f->flight, &it->link);
        pthread_mutex_unlock(&f->mu);

        const uint8_t *data = NULL;
        size_t len = 0;
        char why[FEEDD_SAMPLE_MSG_MAX + 1];
        uint64_t t0 = feed_now_ns();
        int rc = feed_dataset_read_why(it->ds, it->index, &buf, &data, &len, why, sizeof why);
        feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_READ], feed_now_ns() - t0);
        feedd_count(&feedd_m.stage_count[FEEDD_STAGE_READ], 1);

        pthread_mutex_lock(&f->mu);
        feed_list_remove(&f->flight, &it->link);
        pthread_cond_broadcast(&f->work); /* its store and object have a read less */
        feedd_job *done = it->fj && settle(f, it, rc, &buf, why) ? it->fj->job : NULL;
        free(it);
        if (done) {
            pthread_mutex_unlock(&f->mu);
            f->ready(f->arg, done);
            pthread_mutex_lock(&f->mu);
        }
    }
    pthread_mutex_unlock(&f->mu);
    feed_buf_free(&buf);
    return NULL;
}

/* Takes fj out of the stage: drops its queued items, orphans those in flight. Under mu. */
static void detach(feedd_fetch *f, struct feedd_fetch_job *fj)
{
    feed_list_node *n = f->queue.first;
    while (n) {
        fetch_item *it = FEED_LIST_ENTRY(n, fetch_item, link);
        n = n->next;
        if (it->fj == fj) {
            feed_list_remove(&f->queue, &it->link);
            free(it);
        }
    }
    for (n = f->flight.first; n; n = n->next) {
        fetch_item *it = FEED_LIST_ENTRY(n, fetch_item, link);
        if (it->fj == fj)
            it->fj = NULL;
    }
    feed_list_remove(&f->fetching, &fj->link);
    fj->fetching = false;
}

void feedd_fetch_late_message(const feedd_fetch *f, const feedd_job *job, uint32_t pos, char *buf,
                              size_t cap)
{
    const char *object = feed_dataset_sample_object(job->ds, job->indices[pos]);
    snprintf(buf, cap, "store %.*s too slow: not fetched within the batch deadline (%u ms)",
             object ? (int)store_len(object) : 0, object ? object : "", f->lim.deadline_ms);
}

/* The late samples of an expired job: failed with FEED_ETIMEDOUT. Under mu. */
static void expire(feedd_fetch *f, struct feedd_fetch_job *fj)
{
    feedd_job *job = fj->job;
    for (uint32_t i = 0; i < job->n; i++) {
        if (!fj->slot[i].wanted || fj->slot[i].rc != 0)
            continue;
        fj->slot[i].rc = FEED_ETIMEDOUT;
        feedd_count(&feedd_m.remote_late, 1);
    }
    detach(f, fj);
}

static void *deadline_main(void *arg)
{
    feedd_fetch *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        struct feedd_fetch_job *fj =
            f->fetching.first ? FEED_LIST_ENTRY(f->fetching.first, struct feedd_fetch_job, link)
                              : NULL;
        if (!fj) {
            pthread_cond_wait(&f->timer, &f->mu);
            continue;
        }
        if (feed_now_ns() < fj->deadline_ns) {
            feed_cond_wait_until(&f->timer, &f->mu, fj->deadline_ns);
            continue;
        }
        feedd_job *job = fj->job;
        expire(f, fj);
        pthread_mutex_unlock(&f->mu);
        f->ready(f->arg, job);
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

int feedd_fetch_new(const feedd_fetch_limits *l, feedd_fetch_ready_fn ready,
                    feedd_fetch_skip_fn skip, void *arg, feedd_fetch **out)
{
    feedd_fetch *f = calloc(1, sizeof *f);
    int rc = FEED_ENOMEM;
    if (!f)
        return FEED_ENOMEM;
    pthread_mutex_init(&f->mu, NULL);
    feed_cond_init(&f->work);
    feed_cond_init(&f->timer);
    f->lim = *l;
    if (f->lim.threads < 1)
        f->lim.threads = 1;
    if (f->lim.store_fetches < 1)
        f->lim.store_fetches = 1;
    f->object_fetches = (f->lim.store_fetches + 1) / 2;
    f->ready = ready;
    f->skip = skip;
    f->arg = arg;
    f->threads = calloc(f->lim.threads, sizeof *f->threads);
    if (!f->threads)
        goto fail;
    if (pthread_create(&f->deadline_thread, NULL, deadline_main, f) != 0)
        goto fail;
    f->deadline_started = true;
    for (; f->n_threads < f->lim.threads; f->n_threads++)
        if (pthread_create(&f->threads[f->n_threads], NULL, fetch_main, f) != 0)
            goto fail;
    *out = f;
    return 0;
fail:
    feedd_fetch_free(f);
    return rc;
}

static void free_state(feedd_fetch *f, struct feedd_fetch_job *fj)
{
    for (uint32_t i = 0; i < fj->job->n; i++) {
        if (fj->slot[i].rc == 1) {
            f->bytes -= fj->slot[i].len;
            free(fj->slot[i].bytes);
        }
        free(fj->slot[i].why);
    }
    feed_list_remove(&f->all, &fj->all_link);
    free(fj->slot);
    free(fj);
}

void feedd_fetch_free(feedd_fetch *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_broadcast(&f->work);
    pthread_cond_broadcast(&f->timer);
    pthread_mutex_unlock(&f->mu);
    for (uint32_t i = 0; i < f->n_threads; i++)
        pthread_join(f->threads[i], NULL);
    if (f->deadline_started)
        pthread_join(f->deadline_thread, NULL);
    while (!feed_list_empty(&f->queue))
        free(FEED_LIST_ENTRY(feed_list_pop_front(&f->queue), fetch_item, link));
    /* Jobs the pool dropped at its stop, fetched or not (it calls no done for them). */
    while (!feed_list_empty(&f->all))
        free_state(f, FEED_LIST_ENTRY(f->all.first, struct feedd_fetch_job, all_link));
    free(f->threads);
    pthread_cond_destroy(&f->work);
    pthread_cond_destroy(&f->timer);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

bool feedd_fetch_wants(const feedd_job *job)
{
    for (uint32_t i = 0; i < job->n; i++)
        if (feed_dataset_sample_object(job->ds, job->indices[i]))
            return true;
    return false;
}

int feedd_fetch_submit(feedd_fetch *f, feedd_job *job)
{
    struct feedd_fetch_job *fj = NULL;
    feed_list items = {NULL, NULL};
    uint32_t remote = 0;
    bool ready = false;
    int rc = FEED_ENOMEM;
    fj = calloc(1, sizeof *fj);
    if (!fj || !(fj->slot = calloc(job->n, sizeof *fj->slot)))
        goto out;
    for (uint32_t i = 0; i < job->n; i++) {
        const char *object = feed_dataset_sample_object(job->ds, job->indices[i]);
        fetch_item *it;
        if (!object || f->skip(f->arg, job, i))
            continue;
        it = calloc(1, sizeof *it);
        if (!it)
            goto out;
        *it = (fetch_item){.fj = fj,
                           .ds = job->ds,
                           .index = job->indices[i],
                           .pos = i,
                           .object = object,
                           .store_len = store_len(object)};
        feed_list_push_back(&items, &it->link);
        fj->slot[i].wanted = true;
        remote++;
    }
    fj->job = job;
    fj->left = remote;
    fj->fetching = remote > 0;
    fj->deadline_ns = feed_now_ns() + (uint64_t)f->lim.deadline_ms * 1000000u;
    pthread_mutex_lock(&f->mu);
    job->fetch = fj;
    feed_list_push_back(&f->all, &fj->all_link);
    if (remote) {
        feed_list_push_back(&f->fetching, &fj->link);
        while (!feed_list_empty(&items))
            feed_list_push_back(&f->queue, feed_list_pop_front(&items));
        pthread_cond_broadcast(&f->work);
        pthread_cond_signal(&f->timer);
    }
    pthread_mutex_unlock(&f->mu);
    ready = !remote; /* every remote sample cached: nothing to wait for */
    fj = NULL;
    rc = 1;
out:
    while (!feed_list_empty(&items))
        free(FEED_LIST_ENTRY(feed_list_pop_front(&items), fetch_item, link));
    if (fj) {
        free(fj->slot);
        free(fj);
    }
    if (ready)
        f->ready(f->arg, job);
    return rc;
}

bool feedd_fetch_cancel(feedd_fetch *f, feedd_job *job)
{
    bool taken = false;
    pthread_mutex_lock(&f->mu);
    if (job->fetch && job->fetch->fetching) {
        detach(f, job->fetch);
        taken = true;
    }
    pthread_mutex_unlock(&f->mu);
    return taken;
}

int feedd_fetch_bytes(const feedd_job *job, uint32_t pos, const uint8_t **jpeg, size_t *len,
                      const char **why)
{
    const fetch_slot *s;
    *why = NULL;
    if (!job->fetch)
        return 0;
    s = &job->fetch->slot[pos];
    *jpeg = s->bytes;
    *len = s->len;
    *why = s->why;
    return s->rc;
}

void feedd_fetch_release(feedd_fetch *f, feedd_job *job)
{
    if (!job->fetch)
        return;
    pthread_mutex_lock(&f->mu);
    free_state(f, job->fetch);
    pthread_cond_broadcast(&f->work); /* bytes freed */
    pthread_mutex_unlock(&f->mu);
    job->fetch = NULL;
}
