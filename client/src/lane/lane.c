/*
 * The decode lane (docs/design/client.md "Decode lane"): the loader decodes a share of each
 * epoch's samples itself, from the JPEG bytes the servers send for them (BatchRequest.encoded),
 * so that a server spends a read on them instead of a decode. Which samples is the plan's
 * (client_lane_assigned, sched.c's assign); this file owns the lane's threads and decoders.
 *
 * CPU mode: lane threads (decode_lane_threads), each with its own feed_engine (the servers'
 * engine, linked in), make each sample exactly as a server would (feed_engine_run with the
 * loader's transform, its augmentation seed, the epoch and the index, then feed_engine_augment):
 * the pixels are the servers', bit for bit. GPU mode: each lane thread drives the GPU's JPEG
 * engines through its own decoder (gpudec/gpujpeg.h: nvJPEG state, stream, arena) into the
 * batch's device slot, so that the decode of one batch overlaps the kernels and host work of
 * another's; its writes wait on the GPU for the slot's copy and normalisation (the slot's ready
 * event), which write the lane's places too.
 *
 * Threads: the lane threads take work from the slots themselves, under the loader's mu (an
 * encoded piece whose bytes landed is PIECE_DECODE; sched_lane_take), so the lane has no queue
 * of its own: its work is bounded by the slots. A piece taken is PIECE_LANE, its slot LANDING:
 * nobody else touches its samples' places, and set_epoch waits for it as for a receiver's
 * landing. The thread decodes with mu dropped, then reports (sched_lane_done) with mu held.
 * Lock order: the loader's mu only (client_log's queue is a leaf).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "feed/augment.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "gpujpeg.h"

#include "client_impl.h"
#include "sched_impl.h"

typedef struct lane_worker {
    loader *l;
    pthread_t thread;
    bool started;
    feed_engine *engine;     /* CPU mode */
    client_gpujpeg *gpujpeg; /* GPU mode: this thread's decoder */
    /* GPU mode: the batch's arguments, batch_size entries each. */
    const uint8_t **jpeg;
    size_t *len;
    feed_sample_plan *plan;
    uint32_t *pos;
    feed_sample_status *status;
} lane_worker;

struct client_lane {
    feed_decode_lane mode; /* CPU or GPU: what open decided */
    feed_augment aug;
    bool stop; /* [mu] */
    uint32_t num_workers;
    lane_worker workers[CLIENT_LANE_MAX_THREADS];
};

/* Swaps two samples' places in piece order (sent order), with everything that follows them. */
static void swap_samples(slot *sl, uint32_t a, uint32_t b)
{
    uint64_t idx = sl->sent[a], off = sl->enc_off[a];
    uint32_t pos = sl->order[a], len = sl->enc_len[a];
    int64_t label = sl->labels[a];
    uint8_t st = sl->status[a];
    sl->sent[a] = sl->sent[b];
    sl->order[a] = sl->order[b];
    sl->enc_off[a] = sl->enc_off[b];
    sl->enc_len[a] = sl->enc_len[b];
    sl->labels[a] = sl->labels[b];
    sl->status[a] = sl->status[b];
    sl->sent[b] = idx;
    sl->order[b] = pos;
    sl->enc_off[b] = off;
    sl->enc_len[b] = len;
    sl->labels[b] = label;
    sl->status[b] = st;
}

/* Puts the piece's samples the lane decodes first and returns their count; the others (a
 * status other than OK from the server, which the servers' decode then reports as the network
 * path does; in GPU mode an image the engines do not take) go back to the servers. */
static uint32_t accept_samples(client_lane *ln, lane_worker *lw, slot *sl, const piece *pc)
{
    uint32_t accepted = 0;
    for (uint32_t k = 0; k < pc->n; k++) {
        uint32_t at = pc->first + k;
        bool ok = sl->status[at] == FEED_SAMPLE_OK;
        uint32_t w, h;
        if (ok && ln->mode == FEED_DECODE_LANE_GPU)
            ok = client_gpujpeg_supported(lw->gpujpeg, sl->enc.data + sl->enc_off[at],
                                          sl->enc_len[at], &w, &h);
        if (ok) {
            if (k != accepted)
                swap_samples(sl, pc->first + accepted, at);
            accepted++;
        }
    }
    return accepted;
}

/* CPU mode: each accepted sample as a server makes it (server/work/pool.c make_sample), into
 * its place in piece order; a failed one gets the engine's status and zero pixels. */
static void decode_cpu(lane_worker *w, client_lane *ln, slot *sl, const piece *pc,
                       uint32_t accepted)
{
    loader *l = w->l;
    const feed_transform *t = &l->cfg.transform;
    size_t sb = sched_sample_bytes(l);
    for (uint32_t i = 0; i < accepted; i++) {
        uint32_t at = pc->first + i;
        uint8_t *out = sl->raw + sb * at;
        feed_sample_status st =
            feed_engine_run(w->engine, sl->enc.data + sl->enc_off[at], sl->enc_len[at], t,
                            l->aug_seed, sl->epoch, sl->sent[at], out, NULL);
        if (st == FEED_SAMPLE_OK && ln->aug.num_steps > 0)
            st = feed_engine_augment(w->engine, &ln->aug, out, t->out_h, t->out_w, l->aug_seed,
                                     sl->epoch, sl->sent[at]);
        sl->status[at] = (uint8_t)st;
    }
}

/* GPU mode, unlocked, once the batch landed and went to the device: pc's samples decoded by
 * the JPEG engines into the device slot at their batch positions, their statuses set. 0,
 * FEED_ECUDA, FEED_ENOMEM, FEED_EINVAL. */
static int gpu_decode(loader *l, lane_worker *w, slot *sl, const piece *pc)
{
    const feed_transform *t = &l->cfg.transform;
    int rc = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < pc->n; i++) {
        uint32_t at = pc->first + i, sw, sh;
        const uint8_t *jpeg = sl->enc.data + sl->enc_off[at];
        /* Accepted by accept_samples, which read the same header. */
        if (!client_gpujpeg_supported(w->gpujpeg, jpeg, sl->enc_len[at], &sw, &sh))
            continue;
        w->jpeg[n] = jpeg;
        w->len[n] = sl->enc_len[at];
        feed_plan_sample(t, sw, sh, l->aug_seed, sl->epoch, sl->sent[at], &w->plan[n]);
        w->pos[n] = sl->order[at];
        n++;
    }
    client_gpujpeg_batch b = {.n = n,
                              .jpeg = w->jpeg,
                              .len = w->len,
                              .plan = w->plan,
                              .pos = w->pos,
                              .t = t,
                              .mean = l->cfg.mean,
                              .std = l->cfg.std,
                              .dtype = l->cfg.dtype,
                              .layout = l->cfg.layout,
                              .dst = client_gpu_slot_data(sl->gpu),
                              .dst_after = client_gpu_slot_ready_event(sl->gpu)};
    if (n)
        rc = client_gpujpeg_decode_batch(w->gpujpeg, &b, w->status);
    for (uint32_t i = 0; rc == 0 && i < n; i++)
        sl->status[w->pos[i]] = (uint8_t)w->status[i];
    return rc;
}

static void *lane_main(void *arg)
{
    lane_worker *w = arg;
    loader *l = w->l;
    client_lane *ln = l->lane;
    if (l->gpu)
        client_gpu_bind_thread(l->gpu);
    pthread_mutex_lock(&l->mu);
    while (!ln->stop) {
        piece *pc = sched_lane_take(l);
        if (!pc) {
            pthread_cond_wait(&l->lane_cond, &l->mu);
            continue;
        }
        pthread_mutex_unlock(&l->mu);
        slot *sl = pc->slot;
        uint32_t accepted;
        int rc = 0;
        bool hold = false;
        if (ln->mode == FEED_DECODE_LANE_CPU) {
            accepted = accept_samples(ln, w, sl, pc);
            decode_cpu(w, ln, sl, pc, accepted);
            rc = sched_lane_land(l, pc, accepted);
        } else if (!pc->lane_checked) {
            /* First the check, so that what the engines refuse goes to the servers at once;
             * the decode waits until the rest of the batch has landed (sched_lane_take). */
            accepted = accept_samples(ln, w, sl, pc);
            hold = true;
        } else {
            accepted = pc->n;
            memset(sl->raw + sched_sample_bytes(l) * pc->first, 0, sched_sample_bytes(l) * pc->n);
            rc = sched_lane_land(l, pc, accepted);
            /* Its landing completed the batch (the rest had landed), which went to the device. */
            if (rc == 0 && pc->finished)
                rc = gpu_decode(l, w, sl, pc);
        }
        pthread_mutex_lock(&l->mu);
        sched_lane_done(l, pc, accepted, hold, rc, feed_now_ns());
        conn_dispatch_soon(l);
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* The lane's threads' scratch and decoders (the first GPU decoder is decide's). */
static int worker_init(loader *l, client_lane *ln, lane_worker *w)
{
    uint32_t bs = l->cfg.batch_size;
    w->l = l;
    if (ln->mode == FEED_DECODE_LANE_CPU)
        return feed_engine_new(NULL, &w->engine);
    char why[200] = "";
    if (!w->gpujpeg && client_gpujpeg_open(l->cfg.device, &w->gpujpeg, why, sizeof why)) {
        client_log(l, FEED_LOG_WARN, "decode lane: one GPU decoder fewer: %s", why);
        return FEED_ECUDA;
    }
    w->jpeg = calloc(bs, sizeof(*w->jpeg));
    w->len = calloc(bs, sizeof(*w->len));
    w->plan = calloc(bs, sizeof(*w->plan));
    w->pos = calloc(bs, sizeof(*w->pos));
    w->status = calloc(bs, sizeof(*w->status));
    return w->jpeg && w->len && w->plan && w->pos && w->status ? 0 : FEED_ENOMEM;
}

static void worker_free(lane_worker *w)
{
    feed_engine_free(w->engine);
    client_gpujpeg_close(w->gpujpeg);
    free(w->jpeg);
    free(w->len);
    free(w->plan);
    free(w->pos);
    free(w->status);
}

/* Which mode the config gets here: CPU as asked; GPU when the JPEG engines open (which AUTO
 * falls back from to off, and GPU fails without). why says why not. */
static int decide(loader *l, client_lane *ln, char *why, size_t why_cap)
{
    feed_decode_lane asked = l->cfg.decode_lane;
    ln->mode = asked == FEED_DECODE_LANE_AUTO ? FEED_DECODE_LANE_GPU : asked;
    if (ln->mode == FEED_DECODE_LANE_CPU)
        return 0;
    if (!l->gpu) {
        snprintf(why, why_cap, "the GPU lane needs the device path (device is host)");
        return FEED_EINVAL;
    }
    if (l->cfg.batch_size > CLIENT_GPUJPEG_MAX_BATCH) {
        snprintf(why, why_cap, "batch_size above the GPU decoder's %u", CLIENT_GPUJPEG_MAX_BATCH);
        return FEED_EINVAL;
    }
    return client_gpujpeg_open(l->cfg.device, &ln->workers[0].gpujpeg, why, why_cap);
}

int client_lane_open(loader *l)
{
    char why[200] = "";
    int rc = 0;
    if (l->cfg.decode_lane == FEED_DECODE_LANE_OFF) {
        client_log(l, FEED_LOG_INFO, "decode lane off: not asked for");
        goto out;
    }
    client_lane *ln = calloc(1, sizeof(*ln));
    if (!ln)
        return FEED_ENOMEM;
    if (l->cfg.augment)
        feed_augment_parse(l->cfg.augment, &ln->aug, why, sizeof why);
    rc = decide(l, ln, why, sizeof why);
    if (rc) {
        client_lane_free(ln);
        if (l->cfg.decode_lane == FEED_DECODE_LANE_AUTO) {
            client_log(l, FEED_LOG_INFO, "decode lane off: %s", why);
            rc = 0;
        } else {
            client_log(l, FEED_LOG_ERROR, "decode lane %s unavailable: %s",
                       l->cfg.decode_lane == FEED_DECODE_LANE_GPU ? "gpu" : "cpu", why);
        }
        goto out;
    }
    ln->num_workers = l->cfg.decode_lane_threads;
    for (uint32_t i = 0; rc == 0 && i < ln->num_workers; i++) {
        rc = worker_init(l, ln, &ln->workers[i]);
        if (rc == FEED_ECUDA && i > 0) { /* the first opened: run on the decoders there are */
            ln->num_workers = i;
            rc = 0;
        }
    }
    if (rc) {
        client_lane_free(ln);
        goto out;
    }
    l->lane = ln;
    l->lane_share = client_lane_share16(l->cfg.decode_share);
    l->lane_adapt = l->cfg.decode_share_max > 0;
    l->lane_decided = UINT32_MAX;
    client_share_policy_init(&l->lane_policy, l->lane_share,
                             client_lane_share16(l->cfg.decode_share_max));
    if (l->lane_adapt)
        l->lane_share = l->lane_policy.share; /* decode_share above the maximum: the maximum */
    client_log(l, FEED_LOG_INFO, "decode lane: %s, %u thread%s, share %.3f%s%s",
               ln->mode == FEED_DECODE_LANE_GPU ? "gpu" : "cpu", ln->num_workers,
               ln->num_workers == 1 ? "" : "s", l->lane_share / 65536.0,
               l->cfg.decode_lane == FEED_DECODE_LANE_AUTO ? " (auto: the GPU's JPEG engines)" : "",
               l->lane_adapt ? ", adapted between epochs" : "");
out:
    return rc;
}

int client_lane_start(loader *l)
{
    client_lane *ln = l->lane;
    for (uint32_t i = 0; ln && i < ln->num_workers; i++) {
        if (pthread_create(&ln->workers[i].thread, NULL, lane_main, &ln->workers[i]))
            return FEED_ENOMEM;
        ln->workers[i].started = true;
    }
    return 0;
}

void client_lane_stop(loader *l)
{
    client_lane *ln = l->lane;
    if (!ln)
        return;
    pthread_mutex_lock(&l->mu);
    ln->stop = true;
    pthread_cond_broadcast(&l->lane_cond);
    pthread_mutex_unlock(&l->mu);
    for (uint32_t i = 0; i < ln->num_workers; i++) {
        if (ln->workers[i].started)
            pthread_join(ln->workers[i].thread, NULL);
        ln->workers[i].started = false;
    }
}

void client_lane_free(client_lane *ln)
{
    if (!ln)
        return;
    for (uint32_t i = 0; i < CLIENT_LANE_MAX_THREADS; i++)
        worker_free(&ln->workers[i]);
    free(ln);
}
