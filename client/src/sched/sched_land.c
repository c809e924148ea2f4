/*
 * Scheduling, part three (see sched.c for the whole): a Batch arriving on a
 * server's stream is matched to the live request of a piece (mu held, a
 * receiver thread), landed into its slot unlocked (the piece is
 * PIECE_LANDING: nobody else touches it or its samples' places in the slot;
 * other pieces of the batch may land at the same time on other receivers),
 * then reported back with mu retaken. The receiver that lands a batch's last
 * piece (the slot's landed count reaches n) puts the samples in batch order
 * and lands the batch.
 */
#include <stdio.h>
#include <string.h>

#include "balance.h"

#include "feed/errors.h"
#include "feed/log.h"
#include "client_impl.h"
#include "normalize.h"
#include "policy.h"
#include "sched_impl.h"

/* Pieces land in piece order (raw, labels and status at [first, first + n) of their piece):
 * moves each sample to its place in the batch, following the permutation's cycles with one
 * sample of scratch. from[p] is the piece-order place of the sample that belongs at p; a place
 * done is marked from[p] = p. */
static void to_batch_order(loader *l, slot *sl)
{
    size_t sb = sched_sample_bytes(l);
    for (uint32_t k = 0; k < sl->n; k++)
        sl->from[sl->order[k]] = k;
    for (uint32_t start = 0; start < sl->n; start++) {
        if (sl->from[start] == start)
            continue;
        memcpy(sl->swap, sl->raw + (size_t)start * sb, sb);
        int64_t label = sl->labels[start];
        uint8_t status = sl->status[start];
        uint32_t p = start;
        for (;;) {
            uint32_t src = sl->from[p];
            sl->from[p] = p;
            if (src == start)
                break;
            memcpy(sl->raw + (size_t)p * sb, sl->raw + (size_t)src * sb, sb);
            sl->labels[p] = sl->labels[src];
            sl->status[p] = sl->status[src];
            p = src;
        }
        memcpy(sl->raw + (size_t)p * sb, sl->swap, sb);
        sl->labels[p] = label;
        sl->status[p] = status;
    }
}

/*
 * Lands a batch whose pieces have all landed (pixels in sl->raw, labels and status in theirs):
 * batch order, the bad-sample policy (policy.c), then normalisation (host) or the copy +
 * kernel (GPU). Runs unlocked. Sample errors are counted in stats when the batch is handed
 * out (feed_loader_next), not here: a landed batch of the next epoch may never be handed out.
 */
static int land(loader *l, slot *sl)
{
    uint32_t n = sl->n;
    size_t sb = sched_sample_bytes(l);
    uint32_t substituted;
    int rc = 0;
    if (sl->num_pieces > 1)
        to_batch_order(l, sl);
    sl->result = policy_bad_samples(l->cfg.bad_sample_policy, n, sl->status, sl->labels, sl->raw,
                                    sb, &substituted);
    feed_batch *fb = &sl->batch;
    memset(fb, 0, sizeof(*fb));
    fb->n = n;
    fb->c = 3;
    fb->h = l->cfg.transform.out_h;
    fb->w = l->cfg.transform.out_w;
    fb->dtype = l->cfg.dtype;
    fb->layout = l->cfg.layout;
    fb->bytes = (size_t)n * sb * client_dtype_size(l->cfg.dtype);
    fb->labels = sl->labels;
    fb->indices = sl->indices;
    fb->status = sl->status;
    fb->batch_number = sl->batch_number;
    fb->epoch = sl->epoch;
    fb->substituted = substituted;
    if (l->gpu) {
        if (client_gpu_slot_submit(l->gpu, sl->gpu, sl->raw, sl->labels, n, l->cfg.layout,
                                   l->cfg.mean, l->cfg.std)) {
            rc = FEED_ECUDA;
        } else {
            fb->data = client_gpu_slot_data(sl->gpu);
            fb->labels_device = client_gpu_slot_labels(sl->gpu);
            fb->ready_event = client_gpu_slot_ready_event(sl->gpu);
        }
    } else {
        if (sl->out != sl->raw)
            client_normalize_host(sl->raw, n, fb->h, fb->w, l->cfg.dtype, l->cfg.layout,
                                  l->cfg.mean, l->cfg.std, sl->out);
        fb->data = sl->out;
    }
    return rc;
}

/* The INFLIGHT piece for which id is a live request to s; that request becomes its only one. */
static piece *find_request(loader *l, server *s, uint64_t id)
{
    piece *found = NULL;
    for (uint32_t i = 0; i < l->num_slots && !found; i++) {
        slot *sl = &l->slots[i];
        if (!sched_slot_active(sl))
            continue;
        for (uint32_t k = 0; k < sl->num_pieces && !found; k++) {
            piece *pc = &sl->pieces[k];
            if (pc->state != PIECE_INFLIGHT)
                continue;
            if (pc->hedge == s && pc->hedge_id == id) {
                pc->server = s;
                pc->request_id = id;
            } else if (pc->server != s || pc->request_id != id) {
                continue;
            }
            pc->hedge = NULL;
            pc->hedge_id = 0;
            found = pc;
        }
    }
    return found;
}

piece *sched_batch_arrived(loader *l, server *s, wire_batch_reader *r, uint64_t now)
{
    /* Only the fields before data are read under mu: batch_id comes first. */
    int rc = wire_batch_reader_id(r);
    if (rc) {
        sched_fail_server(
            l, s, rc == FEED_ETOOBIG ? "Batch beyond the size cap" : "malformed Batch", now);
        return NULL;
    }
    if (s->outstanding) {
        s->outstanding--;
        balance_note_reply(s, now);
    }
    s->progress_ns = now;
    if (s->state == SRV_CONNECTING) {
        /* It serves batches, not only Describe: now it gets a full window. */
        s->state = SRV_UP;
        s->down_since_ns = 0;
        s->absent = false;
        s->backoff_ms = CLIENT_BACKOFF_FIRST_MS;
        s->quiet = false;
        client_log(l, FEED_LOG_INFO, "server %s up (window %u)", s->target, s->window);
    }
    piece *pc = find_request(l, s, r->id);
    if (!pc) {
        client_log(l, FEED_LOG_DEBUG, "server %s: dropping reply %llu (no live request)", s->target,
                   (unsigned long long)r->id);
    } else {
        pc->state = PIECE_LANDING;
        pc->finished = false;
        sched_slot_sync(pc->slot);
    }
    return pc;
}

/* An encoded piece's reply: the bytes into the slot's capped enc buffer, each sample's place
 * there, its label and status; the lane decodes them later (PIECE_DECODE). FEED_ETOOBIG: the
 * reply passes decode_lane_max_bytes (its samples are then asked decoded). */
static int land_encoded(loader *l, piece *pc, wire_batch_reader *r, wire_arena *arena, char *why,
                        size_t why_cap)
{
    slot *sl = pc->slot;
    wire_expect e = {.batch_id = r->id,
                     .epoch = sl->epoch,
                     .indices = sl->sent + pc->first,
                     .n = pc->n,
                     .num_classes = l->num_classes};
    snprintf(why, why_cap, "malformed Batch");
    /* Labels are pinned: the slot's previous batch may still be on its way to the GPU. */
    int rc = sl->gpu ? client_gpu_slot_host_wait(sl->gpu) : 0;
    if (rc == 0)
        rc = wire_batch_reader_finish_encoded(r, &sl->enc);
    if (rc == FEED_ETOOBIG)
        snprintf(why, why_cap, "batch %llu: encoded reply beyond decode_lane_max_bytes (%llu)",
                 (unsigned long long)r->id, (unsigned long long)sl->enc.limit);
    if (rc == 0) {
        Feed__V1__Batch *b;
        rc = wire_unpack_encoded(arena, r, &sl->enc, &e, &b, why, why_cap);
        uint64_t off = 0;
        for (uint32_t i = 0; rc == 0 && i < pc->n; i++) {
            sl->labels[pc->first + i] = b->labels[i];
            sl->status[pc->first + i] = (uint8_t)b->status[i];
            sl->enc_off[pc->first + i] = off;
            sl->enc_len[pc->first + i] = b->encoded_lengths[i];
            off += b->encoded_lengths[i];
        }
    }
    return rc;
}

int sched_land(loader *l, piece *pc, wire_batch_reader *r, wire_arena *arena, char *why,
               size_t why_cap)
{
    slot *sl = pc->slot;
    if (pc->encoded)
        return land_encoded(l, pc, r, arena, why, why_cap);
    size_t sb = sched_sample_bytes(l);
    wire_expect e = {.batch_id = r->id,
                     .epoch = sl->epoch,
                     .indices = sl->sent + pc->first,
                     .n = pc->n,
                     .h = l->cfg.transform.out_h,
                     .w = l->cfg.transform.out_w,
                     .num_classes = l->num_classes};
    size_t bytes = sb * pc->n;
    uint8_t *dst = sl->raw + sb * pc->first;
    snprintf(why, why_cap, "malformed Batch");
    /* The slot's previous batch may still be on its way to the GPU from this pinned memory. */
    int rc = sl->gpu ? client_gpu_slot_host_wait(sl->gpu) : 0;
    if (rc == 0)
        rc = wire_batch_reader_finish(r, dst, bytes);
    if (rc == 0) {
        Feed__V1__Batch *b;
        rc = wire_unpack_batch(arena, r, dst, bytes, &e, &b, why, why_cap);
        for (uint32_t i = 0; rc == 0 && i < pc->n; i++) {
            sl->labels[pc->first + i] = b->labels[i];
            sl->status[pc->first + i] = (uint8_t)b->status[i];
        }
    }
    /* The piece that completes the batch lands it, seeing the others' samples (acq_rel). */
    if (rc == 0 &&
        atomic_fetch_add_explicit(&sl->landed, pc->n, memory_order_acq_rel) + pc->n == sl->n) {
        pc->finished = true;
        rc = land(l, sl);
    }
    return rc;
}

/* pc has landed: done, and its slot READY once every piece is and the batch landed. */
static void piece_done(loader *l, piece *pc, uint64_t now)
{
    slot *sl = pc->slot;
    pc->state = PIECE_DONE;
    if (pc->encoded)
        sl->lane_done_ns = now;
    else
        sl->dec_done_ns = now;
    sl->complete = sl->complete || pc->finished;
    bool all_done = true;
    for (uint32_t k = 0; k < sl->num_pieces; k++)
        all_done = all_done && sl->pieces[k].state == PIECE_DONE;
    if (sl->complete && all_done) {
        sl->state = SLOT_READY;
        sl->ready_seq = ++l->ready_seq;
    } else {
        sched_slot_sync(sl);
        client_lane_wake(l); /* a GPU lane's checked piece may be the last one now */
    }
}

void sched_batch_landed(loader *l, server *s, const call_ctx *from, piece *pc, int rc,
                        const char *why, uint64_t now)
{
    slot *sl = pc->slot;
    if (rc == 0) {
        l->progress_ns = now;
        s->batches++;
        if (pc->encoded) {
            /* The lane's thread decodes it: the slot waits for that as for a server. */
            l->stats.bytes_received += sl->enc.len;
            pc->state = PIECE_DECODE;
            sched_slot_sync(sl);
            client_lane_wake(l);
        } else {
            l->stats.bytes_received += sched_sample_bytes(l) * pc->n;
            piece_done(l, pc, now);
        }
        goto out;
    }
    pc->state = PIECE_PENDING;
    pc->server = NULL;
    sched_slot_sync(sl);
    if (rc == FEED_ETOOBIG && pc->encoded) {
        /* Not the server's fault: the same samples, decoded by the servers. */
        pc->encoded = false;
        sl->lane_back += pc->n;
        if (!l->lane_cap_logged)
            client_log(l, FEED_LOG_WARN,
                       "server %s: %s; its samples asked decoded (stats.lane_rerequested counts "
                       "them and later ones)",
                       s->target, why);
        l->lane_cap_logged = true;
        goto out;
    }
    l->stats.reissued++;
    if (rc == FEED_ECORRUPT) {
        l->stats.crc_errors++;
        client_log(l, FEED_LOG_WARN, "server %s: %s; re-issuing", s->target, why);
    } else if (rc == FEED_ECUDA) {
        l->fatal = FEED_ECUDA;
        client_log(l, FEED_LOG_ERROR, "CUDA copy/normalise failed");
    } else if (s->stream == from) {
        /* Not if another receiver already failed (and maybe reconnected) it meanwhile. */
        client_log(l, FEED_LOG_WARN, "server %s: %s", s->target, why);
        sched_fail_server(l, s, "protocol error", now);
    }
out:
    return;
}

/* Whether every piece of sl but pc has landed. */
static bool rest_done(const slot *sl, const piece *pc)
{
    bool done = true;
    for (uint32_t k = 0; k < sl->num_pieces; k++)
        done = done && (&sl->pieces[k] == pc || sl->pieces[k].state == PIECE_DONE);
    return done;
}

piece *sched_lane_take(loader *l)
{
    piece *found = NULL;
    for (uint32_t i = 0; i < l->num_slots && !found; i++) {
        slot *sl = &l->slots[i];
        for (uint32_t k = 0; k < sl->num_pieces && !found && sched_slot_active(sl); k++) {
            piece *pc = &sl->pieces[k];
            if (pc->state == PIECE_DECODE && (!pc->lane_checked || rest_done(sl, pc)))
                found = pc;
        }
    }
    if (found) {
        found->state = PIECE_LANE;
        found->finished = false;
        sched_slot_sync(found->slot);
    }
    return found;
}

int sched_lane_land(loader *l, piece *pc, uint32_t accepted)
{
    slot *sl = pc->slot;
    int rc = 0;
    if (accepted &&
        atomic_fetch_add_explicit(&sl->landed, accepted, memory_order_acq_rel) + accepted ==
            sl->n) {
        pc->finished = true;
        rc = land(l, sl);
    }
    return rc;
}

void sched_lane_done(loader *l, piece *pc, uint32_t accepted, bool hold, int rc, uint64_t now)
{
    slot *sl = pc->slot;
    l->progress_ns = now;
    if (rc) {
        l->fatal = rc;
        pc->state = PIECE_DONE; /* never READY: next() reports the error */
        sched_slot_sync(sl);
        client_log(l, FEED_LOG_ERROR, "decode lane: landing a batch failed: %s", feed_strerror(rc));
        return;
    }
    uint32_t back = pc->n - accepted;
    sl->lane_back += back;
    if (!hold)
        sl->lane_n += accepted;
    if (back && accepted) {
        /* slot_alloc keeps a piece for this (owner routing leaves it free). */
        piece *rest = &sl->pieces[sl->num_pieces++];
        memset(rest, 0, sizeof(*rest));
        rest->slot = sl;
        rest->state = PIECE_PENDING;
        rest->first = pc->first + accepted;
        rest->n = back;
        pc->n = accepted;
    } else if (back) {
        pc->encoded = false;
        pc->state = PIECE_PENDING;
        pc->server = NULL;
        sched_slot_sync(sl);
        return;
    }
    if (hold) {
        pc->lane_checked = true;
        pc->state = PIECE_DECODE;
        sched_slot_sync(sl);
        client_lane_wake(l);
        return;
    }
    piece_done(l, pc, now);
}
