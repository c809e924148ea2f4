/*
 * Scheduling: delivery slots, which batch goes to which server, failover,
 * retries, and landing a received batch into its slot. No I/O and no clock:
 * its inputs are calls (a Batch arrived, as a wire.c reader; a server failed;
 * a clock tick; next() and release(); set_epoch), each with the time passed
 * in, and requests go out, connections are retried and failed
 * servers' calls are dropped through l->transport (conn.c's gRPC one, or
 * tests/client/test_client_sched.c's scripted one). Everything here runs with
 * the loader's mu held (see loader_impl.h), except sched_land, which a
 * receiver thread runs unlocked on a slot in SLOT_LANDING, and the plan
 * building of set_epoch (training thread, sched_build_plans).
 *
 * A slot carries one batch from the moment it is planned until the caller
 * releases it; a re-issued batch keeps its slot, so the memory bound is
 * prefetch + window_per_server x servers up (at least one), capped at
 * max_slots (default CLIENT_MAX_SLOTS) and, once an allocation has failed, at
 * the slots there are. Each request gets a fresh batch_id; a reply is accepted
 * only if its batch_id is the live request of an INFLIGHT slot on the stream
 * it arrived on, so late duplicates and replies to dropped epochs are ignored.
 *
 * Balancing: each server's service time per batch is measured from its replies (an EWMA of
 * the time from progress_ns to its next Batch), and a new batch goes to the server with a free
 * window expected to finish it first, (outstanding + 1) x that time. A server's estimate is at
 * least how long it has been silent while owing, so one that stops falls behind at once. A
 * straggler (estimate beyond CLIENT_HEDGE_FACTOR x the median) gets no new work, and the
 * batches it has owed for long are asked of a second server too, in plan order before new
 * work; a server left idle while batches wait gets, every CLIENT_PROBE_MS, a copy of a batch
 * in flight elsewhere, which measures it again at no cost to delivery. A slot then carries two
 * live requests (server/request_id and hedge/hedge_id): the first reply lands, the other is a
 * late duplicate, and a failure of either server leaves the other's request live.
 *
 * Across an epoch boundary: once every batch of the epoch has a slot, spare
 * capacity goes to batches of epoch + 1 (l->ahead, from batch 0), so the next
 * epoch does not start with nothing in flight. Those slots carry their own
 * epoch; next() never hands them out, and set_epoch(epoch + 1, 0) adopts them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"

#include "feed/errors.h"
#include "feed/log.h"
#include "loader_impl.h"
#include "normalize.h"
#include "policy.h"

static size_t sample_bytes(const loader *l)
{
    return (size_t)l->cfg.transform.out_h * l->cfg.transform.out_w * 3;
}

static int slot_alloc(loader *l, slot *sl)
{
    uint32_t bs = l->cfg.batch_size;
    size_t raw_bytes = sample_bytes(l) * bs;
    memset(sl, 0, sizeof(*sl));
    sl->indices = calloc(bs, sizeof(*sl->indices));
    sl->status = calloc(bs, sizeof(*sl->status));
    if (!sl->indices || !sl->status)
        return FEED_ENOMEM;
    if (l->gpu) {
        void *raw = NULL, *labels = NULL;
        int rc = client_gpu_host_alloc(l->gpu, raw_bytes, &raw);
        sl->raw = raw;
        if (!rc)
            rc = client_gpu_host_alloc(l->gpu, bs * sizeof(int64_t), &labels);
        sl->labels = labels;
        if (!rc)
            rc = client_gpu_slot_create(l->gpu, bs, l->cfg.transform.out_h, l->cfg.transform.out_w,
                                        l->cfg.dtype, &sl->gpu);
        return rc;
    }
    sl->labels = calloc(bs, sizeof(*sl->labels));
    sl->raw = malloc(raw_bytes);
    if (!sl->labels || !sl->raw)
        return FEED_ENOMEM;
    if (l->cfg.dtype == FEED_DTYPE_UINT8 && l->cfg.layout == FEED_LAYOUT_NHWC) {
        sl->out = sl->raw;
        return 0;
    }
    sl->out = malloc(l->out_bytes);
    return sl->out ? 0 : FEED_ENOMEM;
}

static void slot_release_memory(loader *l, slot *sl)
{
    free(sl->indices);
    free(sl->status);
    if (l->gpu) {
        client_gpu_host_free(sl->raw);
        client_gpu_host_free(sl->labels);
        client_gpu_slot_destroy(sl->gpu);
    } else {
        if (sl->out != sl->raw)
            free(sl->out);
        free(sl->raw);
        free(sl->labels);
    }
    memset(sl, 0, sizeof(*sl));
}

void sched_free_slots(loader *l)
{
    for (uint32_t i = 0; i < l->num_slots; i++)
        slot_release_memory(l, &l->slots[i]);
    l->num_slots = 0;
}

static uint32_t servers_up(const loader *l)
{
    uint32_t up = 0;
    for (uint32_t i = 0; i < l->num_servers; i++)
        up += !l->servers[i].removed && l->servers[i].state == SRV_UP;
    return up;
}

static slot *free_slot(loader *l)
{
    for (uint32_t i = 0; i < l->num_slots; i++) {
        if (l->slots[i].state == SLOT_FREE)
            return &l->slots[i];
    }
    return NULL;
}

/* Slots the loader may use at once: prefetch + window x servers up (at least one), at most
 * max_slots (or CLIENT_MAX_SLOTS), and no more than exist once an allocation has failed. */
static uint32_t slot_cap(const loader *l)
{
    uint32_t up = servers_up(l);
    uint64_t cap = l->cfg.prefetch + (uint64_t)l->cfg.window_per_server * (up ? up : 1);
    uint32_t max = l->cfg.max_slots ? l->cfg.max_slots : CLIENT_MAX_SLOTS;
    if (cap > max)
        cap = max;
    if (l->slots_capped && cap > l->num_slots)
        cap = l->num_slots;
    return (uint32_t)cap;
}

/*
 * Allocates one more slot with mu dropped: pinning and cudaMalloc of a slot take milliseconds
 * and must not hold up receivers or next(). Only one thread grows at a time (l->growing), and
 * only it appends to slots[], so slots[num_slots] stays ours while unlocked; close() joins the
 * receivers before it frees slots, and is never called while the training thread is here.
 */
static void grow(loader *l)
{
    slot fresh;
    l->growing = true;
    pthread_mutex_unlock(&l->mu);
    int rc = slot_alloc(l, &fresh);
    if (rc)
        slot_release_memory(l, &fresh);
    pthread_mutex_lock(&l->mu);
    l->growing = false;
    if (rc == 0) {
        l->slots[l->num_slots++] = fresh;
    } else if (l->num_slots > l->cfg.prefetch) {
        /* Enough to keep going (the caller's prefetch plus one being fetched): a soft cap. */
        l->slots_capped = true;
        client_log(l, FEED_LOG_WARN,
                   "cannot allocate delivery slot %u (%s); carrying on with %u slots",
                   l->num_slots + 1, feed_strerror(rc), l->num_slots);
    } else {
        client_log(l, FEED_LOG_ERROR, "cannot allocate a delivery slot: %s", feed_strerror(rc));
        l->fatal = rc;
    }
}

static void assign(slot *sl, const client_plan *plan, uint32_t epoch, uint64_t batch_number)
{
    const uint32_t *samples;
    uint32_t n;
    client_plan_batch(plan, batch_number, &samples, &n);
    for (uint32_t i = 0; i < n; i++)
        sl->indices[i] = samples[i];
    sl->n = n;
    sl->batch_number = batch_number;
    sl->epoch = epoch;
    sl->server = NULL;
    sl->hedge = NULL;
    sl->hedge_id = 0;
    sl->result = 0;
    sl->state = SLOT_PENDING;
}

static slot *first_pending(loader *l)
{
    slot *best = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sl->state == SLOT_PENDING && (!best || balance_plan_before(l, sl, best)))
            best = sl;
    }
    return best;
}

/* Sends sl's batch to s as a new request, whose batch_id it returns; 0 if the transport
 * refused it (s is then failed, which puts sl back as it was before the call). */
static uint64_t send_to(loader *l, slot *sl, server *s, bool second, uint64_t now)
{
    uint64_t id = ++l->request_seq;
    if (second) {
        sl->hedge = s;
        sl->hedge_id = id;
    } else {
        sl->request_id = id;
        sl->server = s;
        sl->sent_ns = now;
        sl->state = SLOT_INFLIGHT;
    }
    /* The server's deadline clock runs from now if it had nothing to do. */
    if (s->outstanding++ == 0)
        s->progress_ns = now;
    if (!l->transport->send_request(l, s, id, sl->epoch, sl->indices, sl->n)) {
        sched_fail_server(l, s, "send queue refused a request", now);
        return 0;
    }
    return id;
}

/* A measured server up that has had nothing to do for CLIENT_PROBE_MS while batches wait
 * (balancing holds them back from it) gets a copy of the newest batch in flight elsewhere: its
 * reply measures it again, so a server that recovers gets work back, and the copy cannot delay
 * delivery (whichever reply comes first lands). */
static void probe_idle_servers(loader *l, uint64_t now)
{
    if (!first_pending(l))
        return;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (!balance_takes_requests(s) || s->state != SRV_UP || !s->service_ns || s->outstanding ||
            now - s->progress_ns < (uint64_t)CLIENT_PROBE_MS * 1000000u)
            continue;
        slot *newest = NULL;
        for (uint32_t j = 0; j < l->num_slots; j++) {
            slot *sl = &l->slots[j];
            if (sl->state == SLOT_INFLIGHT && !sl->hedge && sl->server != s &&
                (!newest || sl->request_id > newest->request_id))
                newest = sl;
        }
        if (!newest)
            return;
        send_to(l, newest, s, true, now);
    }
}

/* Puts planned batches into free slots up to the cap. Returns whether one more slot should be
 * allocated for them. */
static bool fill_slots(loader *l)
{
    uint32_t cap = slot_cap(l);
    uint32_t in_use = 0;
    for (uint32_t i = 0; i < l->num_slots; i++)
        in_use += l->slots[i].state != SLOT_FREE;
    bool wanted = false;
    while (l->next_assign < l->plan.batches && in_use < cap) {
        slot *sl = free_slot(l);
        wanted = !sl;
        if (!sl)
            break;
        assign(sl, &l->plan, l->epoch, l->next_assign++);
        in_use++;
    }
    /* Same bound as above: prefetching the next epoch never takes more slots. */
    while (!wanted && l->next_assign == l->plan.batches && l->ahead.samples &&
           l->ahead_assign < l->ahead.batches && in_use < cap) {
        slot *sl = free_slot(l);
        wanted = !sl;
        if (!sl)
            break;
        assign(sl, &l->ahead, l->epoch + 1, l->ahead_assign++);
        in_use++;
    }
    return wanted && l->num_slots < cap && !l->growing;
}

void sched_dispatch(loader *l, bool may_grow, uint64_t now)
{
    if (l->stop || !l->plan.samples || l->fatal)
        return;
    /* grow() drops mu: whatever changed meanwhile is seen by the next fill_slots. */
    while (fill_slots(l) && may_grow) {
        grow(l);
        if (l->stop || l->fatal)
            return;
    }
    for (;;) {
        slot *sl = first_pending(l);
        slot *late = balance_straggler_batch(l, now);
        if (late && (!sl || balance_plan_before(l, late, sl))) {
            server *s = balance_pick_server(l, late->server, now);
            if (s) {
                if (send_to(l, late, s, true, now))
                    l->stats.hedged++;
                continue;
            }
        }
        server *s = sl ? balance_pick_server(l, NULL, now) : NULL;
        if (!s)
            break;
        send_to(l, sl, s, false, now);
    }
    probe_idle_servers(l, now);
}

/* counted: a failover in stats and a warning, else a debug line (a server that never served). */
static void fail_server(loader *l, server *s, const char *why, bool counted, uint64_t now)
{
    uint32_t moved = 0;
    l->transport->drop_server(l, s);
    s->describe = s->stream = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sl->state != SLOT_INFLIGHT)
            continue;
        if (sl->hedge == s) {
            sl->hedge = NULL;
            sl->hedge_id = 0;
        } else if (sl->server == s && sl->hedge) {
            /* The second request stays live; its age counts from now. */
            sl->server = sl->hedge;
            sl->request_id = sl->hedge_id;
            sl->sent_ns = now;
            sl->hedge = NULL;
            sl->hedge_id = 0;
        } else if (sl->server == s) {
            sl->state = SLOT_PENDING;
            sl->server = NULL;
            moved++;
        }
    }
    l->stats.reissued += moved;
    if (counted) {
        l->stats.failovers++;
        client_log(l, FEED_LOG_WARN, "server %s failed (%s); %u batches re-issued", s->target, why,
                   moved);
    } else {
        client_log(l, FEED_LOG_DEBUG, "server %s: %s", s->target, why);
    }
    s->state = SRV_DOWN;
    s->outstanding = 0;
    s->service_ns = 0;
    if (s->refused)
        s->backoff_ms = CLIENT_BACKOFF_MAX_MS;
    s->retry_at_ns = now + (uint64_t)s->backoff_ms * 1000000u;
    s->backoff_ms =
        s->backoff_ms * 2 > CLIENT_BACKOFF_MAX_MS ? CLIENT_BACKOFF_MAX_MS : s->backoff_ms * 2;
}

void sched_fail_server(loader *l, server *s, const char *why, uint64_t now)
{
    fail_server(l, s, why, s->state == SRV_UP, now);
}

/* A server is stalled when it owes replies and has sent none for batch_deadline_ms. Not the age
 * of each batch: a busy server with a deep window keeps batches queued longer than one batch
 * takes, and that is load, not failure. */
static void check_deadlines(loader *l, uint64_t now)
{
    uint64_t limit = (uint64_t)l->cfg.batch_deadline_ms * 1000000u;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        /* Counted even before its first batch: it took work and went silent, which a
         * server that refuses streams (draining) does not. */
        if (!s->removed && s->stream && s->outstanding && now - s->progress_ns > limit)
            fail_server(l, s, "no reply within the batch deadline", true, now);
    }
}

void sched_tick(loader *l, uint64_t now)
{
    check_deadlines(l, now);
    bool any_up = false;
    uint32_t up = 0, known = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (s->removed)
            continue;
        known++;
        if (s->state == SRV_UP) {
            any_up = true;
            up++;
        } else if (s->state == SRV_DOWN && now >= s->retry_at_ns && !l->stop) {
            if (s->ever_tried)
                l->stats.retries++;
            s->ever_tried = true;
            if (!l->transport->connect(l, s))
                sched_fail_server(l, s, "cannot start Describe", now);
        }
    }
    if (any_up)
        l->last_up_ns = now;
    bool asking = false;
    for (uint32_t i = 0; i < l->num_slots && !asking; i++) {
        slot_state st = l->slots[i].state;
        asking = st == SLOT_PENDING || st == SLOT_INFLIGHT || st == SLOT_LANDING;
    }
    if (!asking)
        l->progress_ns = now;
    l->stats.servers_up = up;
    l->stats.servers_known = known;
}

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
    size_t sb = sample_bytes(l);
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
    size_t raw_bytes = sample_bytes(l) * sl->n;
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
        l->stats.bytes_received += sample_bytes(l) * sl->n;
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

bool sched_keeps_ahead(const loader *l, uint32_t epoch, uint64_t start_batch)
{
    return start_batch == 0 && l->ahead.samples && l->epoch != UINT32_MAX && epoch == l->epoch + 1;
}

bool sched_drops_slot(const slot *sl, uint32_t epoch, bool keep)
{
    if (sl->state == SLOT_FREE || sl->state == SLOT_HANDED)
        return false;
    return !keep || sl->epoch != epoch;
}

int sched_build_plans(const loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                      client_plan *plan, client_plan *ahead)
{
    const feed_loader_config *c = &l->cfg;
    int rc = 0;
    memset(plan, 0, sizeof(*plan));
    memset(ahead, 0, sizeof(*ahead));
    if (!keep) {
        rc = client_plan_build(plan, l->num_samples, c->seed, epoch, c->rank, c->world,
                               c->batch_size, c->drop_last);
        if (!rc && start_batch > plan->batches)
            rc = FEED_EINVAL;
    }
    /* The last representable epoch has no next one to prefetch. */
    if (!rc && epoch != UINT32_MAX)
        rc = client_plan_build(ahead, l->num_samples, c->seed, epoch + 1, c->rank, c->world,
                               c->batch_size, c->drop_last);
    if (rc) {
        client_plan_free(plan);
        client_plan_free(ahead);
    }
    return rc;
}

void sched_reset_epoch(loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                       client_plan *plan, client_plan *ahead)
{
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sched_drops_slot(sl, epoch, keep))
            sl->state = SLOT_FREE;
    }
    if (keep) {
        /* The prefetched epoch becomes this one; its slots are already counted as assigned. */
        client_plan_free(&l->plan);
        l->plan = l->ahead;
        l->next_assign = l->ahead_assign;
    } else {
        client_plan_free(&l->plan);
        client_plan_free(&l->ahead);
        l->plan = *plan;
        l->next_assign = start_batch;
    }
    l->ahead = *ahead;
    l->ahead_assign = 0;
    memset(plan, 0, sizeof(*plan));
    memset(ahead, 0, sizeof(*ahead));
    l->epoch = epoch;
    l->next_deliver = start_batch;
    l->delivered = 0;
    l->to_deliver = l->plan.batches - start_batch;
}

static slot *ready_slot(loader *l)
{
    slot *best = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        /* A prefetched batch of the next epoch waits for set_epoch. */
        if (sl->state != SLOT_READY || sl->epoch != l->epoch)
            continue;
        if (l->cfg.ordered) {
            if (sl->batch_number == l->next_deliver)
                return sl;
        } else if (!best || sl->ready_seq < best->ready_seq) {
            best = sl;
        }
    }
    return best;
}

bool sched_all_refused(const loader *l)
{
    uint32_t refused = 0, pending = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        const server *s = &l->servers[i];
        if (s->removed)
            continue;
        if (s->refused)
            refused++;
        else if (s->state != SRV_DOWN || !s->ever_tried)
            pending++; /* up, or its first answer still to come */
    }
    return refused > 0 && pending == 0;
}

int sched_next(loader *l, uint64_t since, uint64_t now, slot **out, uint64_t *wait_ns)
{
    uint64_t timeout = (uint64_t)l->cfg.unavailable_timeout_ms * 1000000u;
    uint64_t progress_timeout = timeout;
    if (l->cfg.batch_deadline_ms > l->cfg.unavailable_timeout_ms)
        progress_timeout = (uint64_t)l->cfg.batch_deadline_ms * 1000000u;
    if (l->handed >= l->cfg.prefetch)
        return FEED_ESTATE;
    if (l->delivered == l->to_deliver)
        return FEED_EEOF;
    slot *sl = ready_slot(l);
    if (!sl) {
        if (l->fatal)
            return l->fatal;
        /* Not sticky: a server that takes the credentials on a retry serves the next call. */
        if (sched_all_refused(l))
            return FEED_EAUTH;
        /* Unavailable: no server up for the timeout, or servers that come up
         * but deliver nothing (one that fails every stream) for as long. */
        bool up = servers_up(l) > 0;
        uint64_t down_for = now - l->last_up_ns;
        uint64_t stuck_for = now - l->progress_ns;
        if ((!up && down_for >= timeout) || stuck_for >= progress_timeout)
            return FEED_EUNAVAILABLE;
        *wait_ns = up ? progress_timeout - stuck_for : timeout - down_for;
        return SCHED_WAIT;
    }
    sl->state = SLOT_HANDED;
    l->handed++;
    l->delivered++;
    if (l->cfg.ordered)
        l->next_deliver++;
    uint64_t waited = now - since;
    sl->batch.wait_ns = waited;
    l->stats.batches++;
    l->stats.samples += sl->n;
    for (uint32_t i = 0; i < sl->n; i++)
        if (sl->status[i] != FEED_SAMPLE_OK)
            l->stats.sample_errors[sl->status[i]]++;
    l->stats.wait_ns_total += waited;
    if (waited > l->stats.wait_ns_max)
        l->stats.wait_ns_max = waited;
    sched_dispatch(l, false, now);
    *out = sl;
    return 0;
}

void sched_release(loader *l, slot *sl, uint64_t now)
{
    sl->state = SLOT_FREE;
    l->handed--;
    sched_dispatch(l, false, now);
}
