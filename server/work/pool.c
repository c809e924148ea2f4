/*
 * Worker threads and the fair scheduler; see pool.h.
 *
 * Scheduling: share.h's order over the queues that have unclaimed samples.
 * A worker asks it for the next queue, takes up to `task` samples from that
 * queue's head job and charges them to the queue's job, so every job with
 * work gets its weight's share of samples and, inside a job, every stream a
 * turn per round whatever its depth. The per-job counters (metrics.h) are
 * added at the same points, under mu, so a scrape sees submitted and claimed
 * samples of all jobs at one point of this order.
 * A job with remote samples joins its queue (and the order) only once the
 * fetch stage (fetch.c) calls fetched().
 */
#include "pool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc_combine.h"
#include "encoded.h"
#include "feed/buf.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"
#include "feed/timeutil.h"
#include "fleet.h"
#include "metrics.h"

typedef struct worker {
    feedd_pool *pool;
    pthread_t thread;
    feed_engine *engine;
    feed_buf scratch;
    feedd_window_entry *spare; /* the header the share window takes for its next entry */
    feedd_crc_shift shift;     /* for shift_len-byte samples; rebuilt when the size changes */
    size_t shift_len;
    bool started;
} worker;

struct feedd_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    feedd_sched sched; /* guarded by mu */
    bool stop;         /* guarded by mu */
    uint32_t n_workers;
    uint32_t task;
    feedd_cache *cache;
    feedd_window *window;
    feedd_fetch *fetch;
    worker *workers;
};

static feedd_queue *queue_of(feedd_share_member *m)
{
    return FEED_LIST_ENTRY(m, feedd_queue, member);
}

/* Largest claim task_size gives: the share order's quantum. */
#define AUTO_TASK_MAX 8

static uint32_t task_size(const feedd_pool *p, uint32_t n)
{
    if (p->task)
        return p->task;
    /* About two tasks per worker per batch, 1..8 samples each. */
    uint32_t t = (n + 2 * p->n_workers - 1) / (2 * p->n_workers);
    return t < 1 ? 1 : t > AUTO_TASK_MAX ? AUTO_TASK_MAX : t;
}

/*
 * A sample's bytes: those the fetch stage fetched, else read here (local
 * bytes; or a remote sample the fetch stage skipped as cached and the cache
 * dropped since, the one case a worker reads the network). On failure set its
 * status and message (out zeroed).
 */
static int read_sample(worker *w, feedd_job *job, uint32_t pos, const uint8_t **jpeg, size_t *len,
                       feed_sample_status *st)
{
    char why[FEEDD_SAMPLE_MSG_MAX + 1] = "";
    const char *cause = NULL;
    int rc = feedd_fetch_bytes(job, pos, jpeg, len, &cause);
    if (rc == 0 && job->fetch_rc < 0 && feed_dataset_sample_object(job->ds, job->indices[pos]))
        rc = job->fetch_rc;
    if (rc == 0) {
        uint64_t t0 = feed_now_ns();
        rc = feed_dataset_read_why(job->ds, job->indices[pos], &w->scratch, jpeg, len, why,
                                   sizeof why);
        feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_READ], feed_now_ns() - t0);
        feedd_count(&feedd_m.stage_count[FEEDD_STAGE_READ], 1);
        cause = why;
    } else if (rc == 1) {
        rc = 0;
    }
    if (rc < 0) {
        *st = rc == FEED_ETOOBIG ? FEED_SAMPLE_TOO_LARGE : FEED_SAMPLE_IO_ERROR;
        memset(job->data + (size_t)pos * job->sample_bytes, 0, job->sample_bytes);
        /* The cause (a remote shard's HTTP status, timeout...) after the code, cut to fit. */
        if (rc == FEED_ETIMEDOUT && job->fetch)
            feedd_fetch_late_message(w->pool->fetch, job, pos, job->errors[pos],
                                     sizeof job->errors[pos]);
        else
            feed_set_err(job->errors[pos], sizeof job->errors[pos], "read: %s%s%s",
                         rc == FEED_ENOTFOUND ? "the file is gone (ENOENT): removed since the open"
                                              : feed_strerror(rc),
                         cause && cause[0] ? ": " : "", cause ? cause : "");
    }
    return rc;
}

static void count_stages(const feed_stage_times *times)
{
    feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_DECODE], times->decode_ns);
    feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_RESIZE], times->resize_ns);
    feedd_count(&feedd_m.stage_count[FEEDD_STAGE_DECODE], 1);
    feedd_count(&feedd_m.stage_count[FEEDD_STAGE_RESIZE], 1);
}

/*
 * A sample made from the whole image decoded at `side`: a cached dataset's
 * (the decoded-sample cache) or a sharing stream's (the share window), so
 * that a hit and a miss give the same bytes. The cache first: on a hit, from
 * the cached image; a hit whose bytes changed since it was decoded (its
 * file's or shard's stamp, feed_dataset_sample_stamp) is dropped and made
 * again from the dataset, as an uncached server would: one stat() per cached
 * sample, so that no two servers disagree on a sample's bytes. Then, for a
 * seated stream, the window (window.h): its image, or this worker decodes it
 * for the group (into the cache when the cache admits it). Otherwise decode
 * alone: into a new cache entry when the budget has room, else scratch. A
 * sample that fails to decode is kept nowhere, nor one the client says
 * another server owns (job->not_owner) admitted to the cache.
 */
static feed_sample_status make_decoded(worker *w, feedd_job *job, uint32_t pos, uint32_t side,
                                       bool *hit)
{
    feedd_cache *cache = feedd_cache_side(w->pool->cache, job->ds_id) ? w->pool->cache : NULL;
    feedd_window *win = w->pool->window;
    uint64_t index = job->indices[pos];
    uint8_t *out = job->data + (size_t)pos * job->sample_bytes;
    feed_stage_times times = {0, 0};
    feed_decoded img;
    feed_sample_status st = FEED_SAMPLE_OK;
    uint64_t source = feed_dataset_sample_stamp(job->ds, index);
    feedd_cache_entry *entry = cache ? feedd_cache_get(cache, job->ds_id, index, &img) : NULL;
    if (entry && source && feedd_cache_source(entry) != source) {
        feedd_count(&feedd_m.cache_stale, 1);
        feedd_cache_drop(cache, job->ds_id, index, entry);
        feedd_cache_release(cache, entry);
        entry = NULL;
    }
    feedd_window_entry *shared = NULL;
    feedd_window_find how = FEEDD_WINDOW_ALONE;
    if (!entry && job->share_side && job->seat.group >= 0) {
        if (!w->spare)
            w->spare = feedd_window_spare_new();
        how =
            feedd_window_get(win, &job->seat, job->ds_id, index, source, &w->spare, &shared, &img);
    }
    *hit = entry != NULL || how == FEEDD_WINDOW_HIT;
    if (!*hit) {
        const uint8_t *jpeg = NULL;
        size_t len = 0;
        if (read_sample(w, job, pos, &jpeg, &len, &st) < 0) {
            if (shared) {
                feedd_window_abandon(win, shared);
                feedd_window_release(win, shared);
            }
            return st;
        }
        uint64_t t0 = feed_now_ns();
        if (shared) {
            st = feedd_window_decode(win, &job->seat, shared, cache && !job->not_owner, w->engine,
                                     jpeg, len, side, &img);
        } else if (job->not_owner || !cache) {
            st = feed_engine_decode(w->engine, jpeg, len, side, NULL, NULL, &img);
            if (cache)
                feedd_count(&feedd_m.cache_not_owned, 1);
        } else {
            st = feedd_cache_decode(cache, w->engine, job->ds_id, index, jpeg, len, side, &img,
                                    &entry);
        }
        times.decode_ns = feed_now_ns() - t0;
        if (entry)
            feedd_cache_set_source(entry, source);
        if (st != FEED_SAMPLE_OK) {
            memset(out, 0, job->sample_bytes);
            snprintf(job->errors[pos], sizeof job->errors[pos], "%s",
                     feed_engine_last_error(w->engine));
        }
    }
    if (st == FEED_SAMPLE_OK) {
        feed_stage_times rt;
        st = feed_engine_run_decoded(w->engine, &img, job->tf, job->seed, job->epoch, index, out,
                                     &rt);
        times.resize_ns = rt.resize_ns;
        if (st != FEED_SAMPLE_OK)
            snprintf(job->errors[pos], sizeof job->errors[pos], "%s",
                     feed_engine_last_error(w->engine));
    }
    if (entry)
        feedd_cache_release(cache, entry);
    if (shared)
        feedd_window_release(win, shared);
    count_stages(&times);
    return st;
}

/*
 * Whether a transform is served from a cache of shorter side `side`: not when
 * its output (eval: the resized shorter side) is larger than the cached
 * image, which would upscale what the original has.
 */
static bool cache_serves(const feed_transform *t, uint32_t side)
{
    uint32_t need = t->out_h > t->out_w ? t->out_h : t->out_w;
    if (t->mode == FEED_TRANSFORM_EVAL && t->resize_size > need)
        need = t->resize_size;
    return side && need <= side;
}

/* A failed sample's message, prefixed with where its bytes are (feed_dataset_sample_where, at
 * most half the message), the reason cut to what is left. After an I/O error the dataset is not
 * read again for it (a tar member's name): that read would fail or wait out the same retries;
 * nor is a remote object ever, which would put the network in a worker's way. */
static void name_failed_sample(feedd_job *job, uint32_t pos, feed_sample_status st)
{
    char where[FEEDD_SAMPLE_MSG_MAX / 2 + 1], why[FEEDD_SAMPLE_MSG_MAX + 1];
    int may_read =
        st != FEED_SAMPLE_IO_ERROR && !feed_dataset_sample_object(job->ds, job->indices[pos]);
    feed_dataset_sample_where(job->ds, job->indices[pos], may_read, where, sizeof where);
    if (where[0]) {
        memcpy(why, job->errors[pos], sizeof why);
        if (snprintf(job->errors[pos], sizeof job->errors[pos], "%s: %s", where, why) < 0)
            memcpy(job->errors[pos], why, sizeof why);
    }
}

/*
 * A sample of an encoded job: its bytes, read as a decode reads them (the
 * fetch stage's, else the dataset's), copied into its room; nothing decoded,
 * nothing cached. A sample refused at acceptance keeps its status. Bytes
 * beyond the room are a tree's file that grew since the open: an I/O error,
 * as a file that changed under a read is.
 */
static void make_encoded(worker *w, feedd_job *job, uint32_t pos)
{
    uint64_t t0 = feed_now_ns();
    feed_sample_status st = job->status[pos];
    size_t room = (size_t)(job->enc_off[pos + 1] - job->enc_off[pos]);
    job->enc_len[pos] = 0;
    if (st == FEED_SAMPLE_OK) {
        const uint8_t *jpeg = NULL;
        size_t len = 0;
        if (read_sample(w, job, pos, &jpeg, &len, &st) == 0) {
            if (len == 0) {
                st = FEED_SAMPLE_EMPTY;
                snprintf(job->errors[pos], sizeof job->errors[pos], "encoded: zero bytes");
            } else if (len > room) {
                st = FEED_SAMPLE_IO_ERROR;
                snprintf(job->errors[pos], sizeof job->errors[pos],
                         "read: %zu bytes, more than the %zu at open: changed since the open", len,
                         room);
            } else {
                memcpy(job->data + job->enc_off[pos], jpeg, len);
                job->enc_len[pos] = (uint32_t)len;
            }
        }
    }
    if (st != FEED_SAMPLE_OK)
        name_failed_sample(job, pos, st);
    job->status[pos] = st;
    feedd_count(&feedd_m.sample_status[st], 1);
    feedd_count(&feedd_m.samples, 1);
    uint64_t busy = feed_now_ns() - t0;
    atomic_fetch_add_explicit(&job->busy_ns, busy, memory_order_relaxed);
    feedd_fleet_sample(FEEDD_FLEET_ENCODED, busy);
}

static void make_sample(worker *w, feedd_job *job, uint32_t pos)
{
    uint64_t index = job->indices[pos];
    uint8_t *out = job->data + (size_t)pos * job->sample_bytes;
    feed_sample_status st = FEED_SAMPLE_OK;
    uint64_t t0 = feed_now_ns();
    job->errors[pos][0] = '\0';
    uint32_t side = feedd_cache_side(w->pool->cache, job->ds_id);
    bool hit = false;

    if (!cache_serves(job->tf, side))
        side = job->share_side;
    if (side) {
        st = make_decoded(w, job, pos, side, &hit);
    } else {
        const uint8_t *jpeg = NULL;
        size_t len = 0;
        if (read_sample(w, job, pos, &jpeg, &len, &st) == 0) {
            feed_stage_times times = {0, 0};
            st = feed_engine_run(w->engine, jpeg, len, job->tf, job->seed, job->epoch, index, out,
                                 &times);
            count_stages(&times);
            if (st != FEED_SAMPLE_OK)
                snprintf(job->errors[pos], sizeof job->errors[pos], "%s",
                         feed_engine_last_error(w->engine));
        }
    }
    if (st == FEED_SAMPLE_OK && job->aug && job->aug->num_steps > 0) {
        st = feed_engine_augment(w->engine, job->aug, out, job->tf->out_h, job->tf->out_w,
                                 job->seed, job->epoch, index);
        if (st != FEED_SAMPLE_OK)
            snprintf(job->errors[pos], sizeof job->errors[pos], "%s",
                     feed_engine_last_error(w->engine));
    }
    if (st != FEED_SAMPLE_OK)
        name_failed_sample(job, pos, st);
    job->sample_crc[pos] = feed_crc32c(0, out, job->sample_bytes);
    job->status[pos] = st;
    feedd_count(&feedd_m.sample_status[st], 1);
    feedd_count(&feedd_m.samples, 1);
    uint64_t busy = feed_now_ns() - t0;
    atomic_fetch_add_explicit(&job->busy_ns, busy, memory_order_relaxed);
    feedd_fleet_sample(hit ? FEEDD_FLEET_CACHE_HIT : FEEDD_FLEET_DECODE, busy);
}

/* Batch CRC from the per-sample CRCs; the samples may have been made by any worker. */
static uint32_t batch_crc(worker *w, const feedd_job *job)
{
    if (w->shift_len != job->sample_bytes) {
        feedd_crc_shift_init(&w->shift, job->sample_bytes);
        w->shift_len = job->sample_bytes;
    }
    uint32_t crc = job->sample_crc[0];
    for (uint32_t i = 1; i < job->n; i++)
        crc = feedd_crc_append(&w->shift, crc, job->sample_crc[i]);
    return crc;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    feedd_pool *p = w->pool;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        feedd_share_member *m = NULL;
        while (!p->stop && !(m = feedd_sched_next(&p->sched)))
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop)
            break;
        feedd_queue *q = queue_of(m);
        feedd_job *job = FEED_LIST_ENTRY(q->jobs.first, feedd_job, qlink);
        uint32_t first = job->next_claim;
        uint32_t k = task_size(p, job->n);
        if (k > job->n - first)
            k = job->n - first;
        job->next_claim += k;
        if (job->next_claim == job->n) {
            /* Still reachable by cancel while its last samples are made. */
            feed_list_remove(&q->jobs, &job->qlink);
            feed_list_push_back(&q->running, &job->qlink);
            job->queue = q;
        }
        feedd_sched_charge(&p->sched, m, k);
        if (feed_list_empty(&q->jobs))
            feedd_sched_unlink(&p->sched, m);
        feedd_job_counts claimed = {.claimed = k,
                                    .bytes = (uint64_t)k * job->sample_bytes,
                                    .queue_ns = k * (feed_now_ns() - job->submit_ns)};
        feedd_metrics_job_add(q->label, &claimed);
        if (p->sched.cursor)
            pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);

        feedd_gauge(&feedd_m.queue_depth, -(int64_t)k);
        for (uint32_t i = first; i < first + k; i++) {
            if (atomic_load_explicit(&job->cancelled, memory_order_relaxed))
                break;
            if (job->enc_off)
                make_encoded(w, job, i);
            else
                make_sample(w, job, i);
        }
        if (atomic_fetch_sub(&job->remaining, k) == k) {
            pthread_mutex_lock(&p->mu);
            if (job->queue)
                feed_list_remove(&job->queue->running, &job->qlink);
            job->queue = NULL;
            pthread_mutex_unlock(&p->mu);
            feedd_fetch_release(p->fetch, job);
            if (!atomic_load_explicit(&job->cancelled, memory_order_relaxed))
                job->crc = job->enc_off ? feedd_encoded_finish(job) : batch_crc(w, job);
            job->done(job);
        }
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/*
 * The fetch stage's ready: job's remote bytes are in memory (or late), so it
 * joins its queue's jobs; a job cancelled meanwhile is finished here instead.
 */
static void fetched(void *arg, feedd_job *job)
{
    feedd_pool *p = arg;
    bool cancelled;
    pthread_mutex_lock(&p->mu);
    feedd_queue *q = job->queue;
    feed_list_remove(&q->fetching, &job->qlink);
    job->queue = NULL;
    cancelled = atomic_load(&job->cancelled);
    if (!cancelled) {
        feed_list_push_back(&q->jobs, &job->qlink);
        feedd_sched_link(&p->sched, &q->member);
        feedd_metrics_job_add(q->label, &(feedd_job_counts){.submitted = job->n});
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (cancelled) {
        feedd_gauge(&feedd_m.queue_depth, -(int64_t)job->n);
        feedd_fetch_release(p->fetch, job);
        job->done(job);
    }
}

/* The fetch stage's skip: a sample the decoded-sample cache holds, or one the share window
 * holds decoded for this stream's member, needs no bytes (unless the job wants its bytes). */
static bool cached(void *arg, const feedd_job *job, uint32_t pos)
{
    const feedd_pool *p = arg;
    uint64_t index = job->indices[pos];
    if (job->enc_off)
        return false;
    if (cache_serves(job->tf, feedd_cache_side(p->cache, job->ds_id)) &&
        feedd_cache_has(p->cache, job->ds_id, index))
        return true;
    return job->share_side && job->seat.group >= 0 &&
           feedd_window_ready(p->window, &job->seat, job->ds_id, index,
                              feed_dataset_sample_stamp(job->ds, index));
}

uint32_t feedd_pool_cache_side(const feedd_pool *p, uint32_t ds)
{
    return feedd_cache_side(p->cache, ds);
}

int feedd_pool_new(uint32_t threads, const feed_engine_limits *lim, uint64_t max_jpeg_bytes,
                   feedd_cache *cache, feedd_window *window, uint32_t task_samples,
                   const feedd_fetch_limits *fetch, feedd_pool **out)
{
    int rc = FEED_ENOMEM;
    feedd_fetch_limits fl;
    feedd_pool *p = calloc(1, sizeof *p);
    if (!p)
        return FEED_ENOMEM;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->n_workers = threads ? threads : 1;
    p->task = task_samples;
    p->cache = cache;
    p->window = window;
    if (feedd_sched_init(&p->sched, task_samples > AUTO_TASK_MAX ? task_samples : AUTO_TASK_MAX,
                         FEEDD_JOBS_MAX) < 0)
        goto fail;
    p->workers = calloc(p->n_workers, sizeof *p->workers);
    if (!p->workers)
        goto fail;
    if (fetch) {
        fl = *fetch;
    } else {
        feedd_fetch_limits_default(&fl);
        fl.max_sample_bytes = max_jpeg_bytes;
    }
    rc = feedd_fetch_new(&fl, fetched, cached, p, &p->fetch);
    if (rc < 0)
        goto fail;
    for (uint32_t i = 0; i < p->n_workers; i++) {
        worker *w = &p->workers[i];
        w->pool = p;
        feed_buf_init(&w->scratch, (size_t)max_jpeg_bytes);
        rc = feed_engine_new(lim, &w->engine);
        if (rc < 0)
            goto fail;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            rc = FEED_ENOMEM;
            goto fail;
        }
        w->started = true;
    }
    *out = p;
    return 0;
fail:
    feedd_pool_free(p);
    return rc;
}

void feedd_pool_free(feedd_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; p->workers && i < p->n_workers; i++) {
        worker *w = &p->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        feed_engine_free(w->engine);
        feed_buf_free(&w->scratch);
        feedd_window_spare_free(w->spare);
    }
    /* After the workers, which may still be making samples of fetched bytes. */
    feedd_fetch_free(p->fetch);
    free(p->workers);
    feedd_sched_destroy(&p->sched);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void feedd_pool_join(feedd_pool *p, feedd_queue *q, const char *job, uint32_t weight,
                     const char *peer)
{
    int label = feedd_metrics_job_label(job);
    pthread_mutex_lock(&p->mu);
    bool over = feedd_sched_join(&p->sched, &q->member, job, weight) != 0;
    q->label = label;
    pthread_mutex_unlock(&p->mu);
    if (over) {
        feedd_count(&feedd_m.jobs_over_cap, 1);
        FEED_LOGW("stream %s: job '%s' is over the %d jobs a server shares between: served as a "
                  "job of its own",
                  peer, job, FEEDD_JOBS_MAX);
    }
}

void feedd_pool_share(feedd_pool *p, feedd_queue *q, uint32_t ds, const feed_transform *tf,
                      const char *share, const char *job, const char *peer)
{
    uint32_t side = feedd_window_side(p->window, ds);
    if (!side) {
        FEED_LOGI("stream %s: share '%s' is not used: its dataset has no share=SIDE on this "
                  "server; each image is decoded for this stream alone",
                  peer, share);
        return;
    }
    if (!cache_serves(tf, side)) {
        FEED_LOGI("stream %s: share '%s' is not used: the transform's output is larger than the "
                  "dataset's share side %u; each image is decoded for this stream alone",
                  peer, share, side);
        return;
    }
    q->share_side = side;
    if (feedd_window_join(p->window, ds, share, job, &q->seat) < 0)
        FEED_LOGW("stream %s: share '%s' is full (%d jobs, %d groups at most): this stream "
                  "decodes alone, with the same pixels",
                  peer, share, FEEDD_WINDOW_MEMBERS, FEEDD_WINDOW_GROUPS);
}

uint32_t feedd_pool_share_side(const feedd_pool *p, uint32_t ds)
{
    return feedd_window_side(p->window, ds);
}

void feedd_pool_leave(feedd_pool *p, feedd_queue *q)
{
    pthread_mutex_lock(&p->mu);
    feedd_sched_leave(&p->sched, &q->member);
    pthread_mutex_unlock(&p->mu);
    if (q->share_side)
        feedd_window_leave(p->window, &q->seat);
}

void feedd_pool_submit(feedd_pool *p, feedd_queue *q, feedd_job *job)
{
    job->next_claim = 0;
    job->queue = NULL;
    atomic_init(&job->remaining, job->n);
    atomic_init(&job->cancelled, false);
    atomic_init(&job->busy_ns, 0);
    job->submit_ns = feed_now_ns();
    feedd_gauge(&feedd_m.queue_depth, job->n);
    job->fetch = NULL;
    job->fetch_rc = 0;
    job->share_side = q->share_side;
    job->seat = q->share_side ? q->seat : FEEDD_WINDOW_NO_SEAT;
    if (feedd_fetch_wants(job)) {
        /* Linked before the stage has it: its ready call may come before submit returns. */
        pthread_mutex_lock(&p->mu);
        job->queue = q;
        feed_list_push_back(&q->fetching, &job->qlink);
        pthread_mutex_unlock(&p->mu);
        job->fetch_rc = feedd_fetch_submit(p->fetch, job);
        if (job->fetch_rc < 0)
            fetched(p, job);
        return;
    }
    /* Outside the lock: local tar shards have the kernel read the job's bytes ahead. */
    feed_dataset_prefetch(job->ds, job->indices, job->n);
    pthread_mutex_lock(&p->mu);
    feed_list_push_back(&q->jobs, &job->qlink);
    feedd_sched_link(&p->sched, &q->member);
    feedd_metrics_job_add(q->label, &(feedd_job_counts){.submitted = job->n});
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void feedd_pool_cancel(feedd_pool *p, feedd_queue *q, feed_list *finished)
{
    pthread_mutex_lock(&p->mu);
    feed_list jobs = q->jobs;
    q->jobs = (feed_list){NULL, NULL};
    feedd_sched_unlink(&p->sched, &q->member);
    /* Their samples are all claimed: the workers that hold them finish them (done). */
    for (feed_list_node *n = q->running.first; n; n = n->next)
        atomic_store(&FEED_LIST_ENTRY(n, feedd_job, qlink)->cancelled, true);
    feedd_job_counts dropped = {0};
    for (feed_list_node *n = jobs.first; n; n = n->next) {
        feedd_job *job = FEED_LIST_ENTRY(n, feedd_job, qlink);
        dropped.dropped += job->n - job->next_claim;
    }
    feedd_metrics_job_add(q->label, &dropped);
    /* Those the fetch stage gives back are finished here; the others' ready call is under way
     * and finishes them (fetched), as a worker would. */
    for (feed_list_node *n = q->fetching.first; n;) {
        feedd_job *job = FEED_LIST_ENTRY(n, feedd_job, qlink);
        n = n->next;
        atomic_store(&job->cancelled, true);
        if (feedd_fetch_cancel(p->fetch, job)) {
            feed_list_remove(&q->fetching, &job->qlink);
            job->queue = NULL;
            feed_list_push_back(&jobs, &job->qlink);
        }
    }
    pthread_mutex_unlock(&p->mu);
    while (!feed_list_empty(&jobs)) {
        feedd_job *job = FEED_LIST_ENTRY(feed_list_pop_front(&jobs), feedd_job, qlink);
        uint32_t unclaimed = job->n - job->next_claim;
        atomic_store(&job->cancelled, true);
        feedd_gauge(&feedd_m.queue_depth, -(int64_t)unclaimed);
        if (atomic_fetch_sub(&job->remaining, unclaimed) == unclaimed) {
            feedd_fetch_release(p->fetch, job);
            feed_list_push_back(finished, &job->qlink);
        }
    }
}
