/*
 * Scheduling, part three (see sched.c for the whole): a Batch arriving on a
 * server's stream is matched to its live request (mu held, a receiver
 * thread), landed into its slot unlocked (the slot is SLOT_LANDING, nobody
 * else touches it), then reported back with mu retaken.
 */
#include <stdio.h>
#include <string.h>

#include "balance.h"

#include "feed/errors.h"
#include "feed/log.h"
#include "loader_impl.h"
#include "normalize.h"
#include "policy.h"
#include "sched_impl.h"

/*
 * Fills the slot from a checked Batch whose pixels are already in sl->raw:
 * labels, status, the bad-sample policy (policy.c), then normalisation (host) or the
 * copy + kernel (GPU). Runs unlocked. Sample errors are counted in stats when
 * the batch is handed out (feed_loader_next), not here: a landed batch of the
 * next epoch may never be handed out.
 */
static int land(loader *l, slot *sl, const Feed__V1__Batch *b)
{
    uint32_t n = sl->n;
    size_t sb = sched_sample_bytes(l);
    uint32_t substituted;
    for (uint32_t i = 0; i < n; i++) {
        sl->labels[i] = b->labels[i];
        sl->status[i] = (uint8_t)b->status[i];
    }
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
                                   l->cfg.mean, l->cfg.std))
            return FEED_ECUDA;
        fb->data = client_gpu_slot_data(sl->gpu);
        fb->labels_device = client_gpu_slot_labels(sl->gpu);
        fb->ready_event = client_gpu_slot_ready_event(sl->gpu);
        return 0;
    }
    if (sl->out != sl->raw)
        client_normalize_host(sl->raw, n, fb->h, fb->w, l->cfg.dtype, l->cfg.layout, l->cfg.mean,
                              l->cfg.std, sl->out);
    fb->data = sl->out;
    return 0;
}

/* The INFLIGHT slot for which id is a live request to s; that request becomes its only one. */
static slot *find_request(loader *l, server *s, uint64_t id)
{
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sl->state != SLOT_INFLIGHT)
            continue;
        if (sl->hedge == s && sl->hedge_id == id) {
            sl->server = s;
            sl->request_id = id;
        } else if (sl->server != s || sl->request_id != id) {
            continue;
        }
        sl->hedge = NULL;
        sl->hedge_id = 0;
        return sl;
    }
    return NULL;
}

slot *sched_batch_arrived(loader *l, server *s, wire_batch_reader *r, uint64_t now)
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
        s->backoff_ms = CLIENT_BACKOFF_FIRST_MS;
        s->quiet = false;
        client_log(l, FEED_LOG_INFO, "server %s up (window %u)", s->target, s->window);
    }
    slot *sl = find_request(l, s, r->id);
    if (!sl) {
        client_log(l, FEED_LOG_DEBUG, "server %s: dropping reply %llu (no live request)", s->target,
                   (unsigned long long)r->id);
        return NULL;
    }
    sl->state = SLOT_LANDING;
    return sl;
}

int sched_land(loader *l, slot *sl, wire_batch_reader *r, wire_arena *arena, char *why,
               size_t why_cap)
{
    wire_expect e = {.batch_id = r->id,
                     .epoch = sl->epoch,
                     .indices = sl->indices,
                     .n = sl->n,
                     .h = l->cfg.transform.out_h,
                     .w = l->cfg.transform.out_w,
                     .num_classes = l->num_classes};
    size_t raw_bytes = sched_sample_bytes(l) * sl->n;
    snprintf(why, why_cap, "malformed Batch");
    /* The slot's previous batch may still be on its way to the GPU from this pinned memory. */
    int rc = sl->gpu ? client_gpu_slot_host_wait(sl->gpu) : 0;
    if (rc == 0)
        rc = wire_batch_reader_finish(r, sl->raw, raw_bytes);
    if (rc == 0) {
        Feed__V1__Batch *b;
        rc = wire_unpack_batch(arena, r, sl->raw, raw_bytes, &e, &b, why, why_cap);
        if (rc == 0)
            rc = land(l, sl, b);
    }
    return rc;
}

void sched_batch_landed(loader *l, server *s, const call_ctx *from, slot *sl, int rc,
                        const char *why, uint64_t now)
{
    if (rc == 0) {
        sl->state = SLOT_READY;
        sl->ready_seq = ++l->ready_seq;
        l->progress_ns = now;
        s->batches++;
        l->stats.bytes_received += sched_sample_bytes(l) * sl->n;
        return;
    }
    sl->state = SLOT_PENDING;
    sl->server = NULL;
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
}
