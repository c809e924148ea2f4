/*
 * The two sources that preprocess on the GPU host itself:
 *  - sync: the training thread decodes each batch into one of two pinned
 *    slots (while the step of the previous batch may still run on the GPU);
 *  - local: local_threads loader threads, each with its own feed_engine, fill
 *    a bounded ring of 2 x local_threads pinned slots in batch order, like
 *    PyTorch DataLoader workers with prefetch_factor 2.
 *
 * Local ring: slot k % Q holds batch k. A loader that took batch k waits until
 * the slot's free_for == k (batch k - Q released by the training thread),
 * then waits for the GPU copy out of the slot (copy_done event), fills it and
 * marks it ready. Guarded by local_source.lock: next_seq, consumed, stop and
 * every slot's state/seq/free_for. The pixels of a slot belong to whoever
 * holds it in FILLING (loader) or READY (training thread) state.
 */
#include "source.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/rng.h"
#include "engine.h"

#define MAX_LOCAL_THREADS 256u
#define SCRATCH_LIMIT (64u << 20)

uint64_t plan_batches_per_epoch(uint64_t count, uint32_t batch)
{
    return batch ? count / batch : 0;
}

void plan_permutation(uint64_t seed, uint32_t epoch, uint64_t count, uint64_t *perm)
{
    feed_rng r;
    feed_rng_init(&r, seed, epoch, FEED_RNG_PERMUTATION_STREAM);
    for (uint64_t i = 0; i < count; i++)
        perm[i] = i;
    for (uint64_t i = count; i > 1; i--) {
        uint64_t j = feed_rng_below(&r, i);
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

struct batch_maker {
    const feed_dataset *ds;
    feed_transform transform;
    uint32_t batch;
    uint64_t seed;
    uint64_t count, per_epoch;
    feed_engine *engine;
    feed_buf scratch;
    uint64_t *perm;
    uint32_t perm_epoch;
    bool perm_valid;
};

int batch_maker_new(const source_config *cfg, batch_maker **out)
{
    int rc = FEED_ENOMEM;
    batch_maker *m = calloc(1, sizeof *m);
    if (!m)
        goto out;
    m->ds = cfg->dataset;
    m->transform = cfg->transform;
    m->batch = cfg->batch;
    m->seed = cfg->seed;
    m->count = feed_dataset_count(cfg->dataset);
    m->per_epoch = plan_batches_per_epoch(m->count, cfg->batch);
    feed_buf_init(&m->scratch, SCRATCH_LIMIT);
    if (m->per_epoch == 0) {
        rc = FEED_EINVAL;
        goto out;
    }
    m->perm = calloc(m->count, sizeof *m->perm);
    if (!m->perm)
        goto out;
    rc = feed_engine_new(NULL, &m->engine);
    if (rc)
        goto out;
    *out = m;
    m = NULL;
out:
    batch_maker_free(m);
    return rc;
}

void batch_maker_free(batch_maker *m)
{
    if (!m)
        return;
    feed_engine_free(m->engine);
    feed_buf_free(&m->scratch);
    free(m->perm);
    free(m);
}

uint32_t batch_maker_run(batch_maker *m, uint64_t seq, uint8_t *pixels, int64_t *labels)
{
    const uint32_t epoch = (uint32_t)(seq / m->per_epoch);
    const uint64_t first = (seq % m->per_epoch) * m->batch;
    const size_t sample_bytes = (size_t)m->transform.out_h * m->transform.out_w * 3;
    uint32_t bad = 0;
    if (!m->perm_valid || m->perm_epoch != epoch) {
        plan_permutation(m->seed, epoch, m->count, m->perm);
        m->perm_epoch = epoch;
        m->perm_valid = true;
    }
    for (uint32_t i = 0; i < m->batch; i++) {
        uint64_t idx = m->perm[first + i];
        uint8_t *dst = pixels + i * sample_bytes;
        const uint8_t *jpeg = NULL;
        size_t len = 0;
        labels[i] = feed_dataset_label(m->ds, idx);
        if (feed_dataset_read(m->ds, idx, &m->scratch, &jpeg, &len) != 0) {
            memset(dst, 0, sample_bytes);
            bad++;
            continue;
        }
        if (feed_engine_run(m->engine, jpeg, len, &m->transform, m->seed, epoch, idx, dst, NULL) !=
            FEED_SAMPLE_OK)
            bad++;
    }
    return bad;
}

/* One pinned slot: pixels, labels and the event after which the GPU has copied them. */
typedef struct host_slot {
    uint8_t *pixels;
    int64_t *labels;
    void *copy_done;
    enum { SLOT_FREE, SLOT_FILLING, SLOT_READY } state;
    uint64_t seq, free_for;
    uint32_t bad;
} host_slot;

static int slots_alloc(bench_step *step, host_slot *slots, uint32_t count, size_t pixel_bytes,
                       uint32_t batch)
{
    for (uint32_t i = 0; i < count; i++) {
        slots[i].pixels = step->ops->host_alloc(step, pixel_bytes);
        slots[i].labels = step->ops->host_alloc(step, batch * sizeof(int64_t));
        slots[i].copy_done = step->ops->event_new(step);
        slots[i].free_for = i;
        if (!slots[i].pixels || !slots[i].labels || (step->info.on_gpu && !slots[i].copy_done))
            return FEED_ENOMEM;
    }
    return 0;
}

static void slots_free(bench_step *step, host_slot *slots, uint32_t count)
{
    if (!slots)
        return;
    for (uint32_t i = 0; i < count; i++) {
        step->ops->event_sync(step, slots[i].copy_done);
        step->ops->event_free(step, slots[i].copy_done);
        step->ops->host_free(step, slots[i].pixels);
        step->ops->host_free(step, slots[i].labels);
    }
}

/* The batch that hands slot's n samples to the training thread. */
static void slot_batch(const host_slot *slot, uint32_t n, bench_batch *b)
{
    memset(b, 0, sizeof *b);
    b->pixels = slot->pixels;
    b->labels = slot->labels;
    b->copy_done = slot->copy_done;
    b->n = n;
    b->bad_samples = slot->bad;
}

/* ---- sync ---- */

typedef struct sync_source {
    bench_source base;
    bench_step *step;
    batch_maker *maker;
    host_slot slots[2];
    uint32_t batch;
    uint64_t seq;
} sync_source;

static int sync_next(bench_source *base, bench_batch *b)
{
    sync_source *s = (sync_source *)base;
    host_slot *slot = &s->slots[s->seq % 2];
    s->step->ops->event_sync(s->step, slot->copy_done);
    slot->bad = batch_maker_run(s->maker, s->seq, slot->pixels, slot->labels);
    slot_batch(slot, s->batch, b);
    s->seq++;
    return 0;
}

static void sync_release(bench_source *base, bench_batch *b)
{
    (void)base, (void)b;
}

static void sync_close(bench_source *base)
{
    sync_source *s = (sync_source *)base;
    slots_free(s->step, s->slots, 2);
    batch_maker_free(s->maker);
    free(s);
}

static const source_ops sync_ops = {sync_next, sync_release, sync_close};

int source_sync_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap)
{
    int rc = FEED_ENOMEM;
    sync_source *s = calloc(1, sizeof *s);
    if (!s)
        goto out;
    s->base.ops = &sync_ops;
    s->base.name = "sync";
    s->step = cfg->step;
    s->batch = cfg->batch;
    rc = batch_maker_new(cfg, &s->maker);
    if (rc) {
        snprintf(err, err_cap, "sync: cannot set up the decoder: %s", feed_strerror(rc));
        goto out;
    }
    rc = slots_alloc(cfg->step, s->slots, 2,
                     (size_t)cfg->batch * cfg->transform.out_h * cfg->transform.out_w * 3,
                     cfg->batch);
    if (rc) {
        snprintf(err, err_cap, "sync: cannot allocate pinned slots");
        goto out;
    }
    *out = &s->base;
    s = NULL;
out:
    if (s)
        sync_close(&s->base);
    return rc;
}

/* ---- local ---- */

typedef struct local_source local_source;

typedef struct local_worker {
    local_source *src;
    batch_maker *maker;
    pthread_t thread;
    bool started;
} local_worker;

struct local_source {
    bench_source base;
    bench_step *step;
    uint32_t batch, nthreads, nslots;
    host_slot *slots;
    local_worker *workers;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t next_seq; /* lock: next batch a loader takes */
    uint64_t consumed; /* lock: next batch the training thread takes */
    bool stop;         /* lock */
};

static void *local_worker_main(void *arg)
{
    local_worker *w = arg;
    local_source *s = w->src;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        uint64_t seq = s->next_seq++;
        host_slot *slot = &s->slots[seq % s->nslots];
        while (!s->stop && !(slot->state == SLOT_FREE && slot->free_for == seq))
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->stop)
            break;
        slot->state = SLOT_FILLING;
        pthread_mutex_unlock(&s->lock);

        s->step->ops->event_sync(s->step, slot->copy_done);
        uint32_t bad = batch_maker_run(w->maker, seq, slot->pixels, slot->labels);

        pthread_mutex_lock(&s->lock);
        slot->bad = bad;
        slot->seq = seq;
        slot->state = SLOT_READY;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static int local_next(bench_source *base, bench_batch *b)
{
    local_source *s = (local_source *)base;
    pthread_mutex_lock(&s->lock);
    host_slot *slot = &s->slots[s->consumed % s->nslots];
    while (!(slot->state == SLOT_READY && slot->seq == s->consumed))
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    slot_batch(slot, s->batch, b);
    b->handle = slot;
    return 0;
}

static void local_release(bench_source *base, bench_batch *b)
{
    local_source *s = (local_source *)base;
    host_slot *slot = b->handle;
    pthread_mutex_lock(&s->lock);
    slot->state = SLOT_FREE;
    slot->free_for = s->consumed + s->nslots;
    s->consumed++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void local_close(bench_source *base)
{
    local_source *s = (local_source *)base;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    for (uint32_t i = 0; s->workers && i < s->nthreads; i++) {
        if (s->workers[i].started)
            pthread_join(s->workers[i].thread, NULL);
        batch_maker_free(s->workers[i].maker);
    }
    slots_free(s->step, s->slots, s->nslots);
    free(s->slots);
    free(s->workers);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const source_ops local_ops = {local_next, local_release, local_close};

int source_local_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap)
{
    int rc = FEED_ENOMEM;
    local_source *s = NULL;
    if (cfg->local_threads == 0 || cfg->local_threads > MAX_LOCAL_THREADS) {
        snprintf(err, err_cap, "local: --local-threads must be 1..%u", MAX_LOCAL_THREADS);
        return FEED_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        return FEED_ENOMEM;
    s->base.ops = &local_ops;
    s->base.name = "local";
    s->step = cfg->step;
    s->batch = cfg->batch;
    s->nthreads = cfg->local_threads;
    s->nslots = 2 * cfg->local_threads;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->slots = calloc(s->nslots, sizeof *s->slots);
    s->workers = calloc(s->nthreads, sizeof *s->workers);
    if (!s->slots || !s->workers)
        goto out;
    rc = slots_alloc(cfg->step, s->slots, s->nslots,
                     (size_t)cfg->batch * cfg->transform.out_h * cfg->transform.out_w * 3,
                     cfg->batch);
    if (rc) {
        snprintf(err, err_cap, "local: cannot allocate %u pinned slots", s->nslots);
        goto out;
    }
    for (uint32_t i = 0; i < s->nthreads; i++) {
        s->workers[i].src = s;
        rc = batch_maker_new(cfg, &s->workers[i].maker);
        if (rc) {
            snprintf(err, err_cap, "local: cannot set up decoder %u: %s", i, feed_strerror(rc));
            goto out;
        }
    }
    for (uint32_t i = 0; i < s->nthreads; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, local_worker_main, &s->workers[i]) != 0) {
            snprintf(err, err_cap, "local: cannot start loader thread %u", i);
            rc = FEED_ENOMEM;
            goto out;
        }
        s->workers[i].started = true;
    }
    *out = &s->base;
    s = NULL;
    rc = 0;
out:
    if (s)
        local_close(&s->base);
    return rc;
}
