/*
 * Scheduling: delivery slots, which batch goes to which server, failover,
 * retries, and landing a received batch into its slot. Five files: this one
 * (slots, epochs, delivery to next()), sched_dispatch.c (which server gets a
 * piece: balancing, hedging, probes), sched_route.c (owner routing),
 * sched_server.c (sending to a server, failover, the clock) and sched_land.c
 * (a Batch arriving and landing in its slot); sched_impl.h holds what they
 * share. Each calls only down that list's order of use: dispatch and route
 * send through sched_server.c, all of them use the slots here. No I/O and no clock:
 * its inputs are calls (a Batch arrived, as a wire.c reader; a server failed;
 * a clock tick; next() and release(); set_epoch), each with the time passed
 * in, and requests go out, connections are retried and failed
 * servers' calls are dropped through l->transport (conn.c's gRPC one, or
 * tests/client/test_client_sched.c's scripted one). Everything here runs with
 * the loader's mu held (see client_impl.h), except sched_land, which a
 * receiver thread runs unlocked on a piece in PIECE_LANDING, and the plan
 * building of set_epoch (training thread, sched_build_plans).
 *
 * A slot carries one batch from the moment it is planned until the caller
 * releases it; a re-issued batch keeps its slot, so the memory bound is
 * prefetch + window_per_server x servers up (at least one), capped at
 * max_slots (default CLIENT_MAX_SLOTS) and, once an allocation has failed, at
 * the slots there are. A batch is asked as pieces (client_impl.h): one, the
 * whole batch, unless owner routing (sched_route.c) splits it by the servers
 * its samples go to; the slot is READY when every piece has landed. Each
 * request gets a fresh batch_id; a reply is accepted only if its batch_id is
 * the live request of an INFLIGHT piece on the stream it arrived on, so late
 * duplicates and replies to dropped epochs are ignored. Failover, hedging
 * and probes below work on pieces.
 *
 * Balancing: each server's service time per batch is measured from its replies (an EWMA of
 * the time from progress_ns to its next Batch), and a new batch goes to the server with a free
 * window expected to finish it first, (outstanding + 1) x that time. A server's estimate is at
 * least how long it has been silent while owing, so one that stops falls behind at once. A
 * straggler (estimate beyond CLIENT_HEDGE_FACTOR x the median) gets no new work, and the
 * batches it has owed for long are asked of a second server too, in plan order before new
 * work; a server left idle while batches wait gets, every CLIENT_PROBE_MS, a copy of a batch
 * in flight elsewhere, which measures it again at no cost to delivery. A piece then carries two
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

#include "feed/errors.h"
#include "feed/log.h"
#include "client_impl.h"
#include "sched_impl.h"

size_t sched_sample_bytes(const loader *l)
{
    return (size_t)l->cfg.transform.out_h * l->cfg.transform.out_w * 3;
}

bool sched_slot_active(const slot *sl)
{
    return sl->state == SLOT_PENDING || sl->state == SLOT_INFLIGHT || sl->state == SLOT_LANDING;
}

void sched_slot_sync(slot *sl)
{
    bool landing = false, inflight = false;
    for (uint32_t k = 0; k < sl->num_pieces; k++) {
        piece_state st = sl->pieces[k].state;
        /* A lane thread's piece is written unlocked as a receiver's is; one waiting for a lane
         * thread is owed as one in flight is. */
        landing = landing || st == PIECE_LANDING || st == PIECE_LANE;
        inflight = inflight || st == PIECE_INFLIGHT || st == PIECE_DECODE;
    }
    if (sched_slot_active(sl))
        sl->state = landing ? SLOT_LANDING : inflight ? SLOT_INFLIGHT : SLOT_PENDING;
}

piece *sched_pending_piece(slot *sl)
{
    piece *found = NULL;
    for (uint32_t k = 0; k < sl->num_pieces && !found && sched_slot_active(sl); k++) {
        if (sl->pieces[k].state == PIECE_PENDING)
            found = &sl->pieces[k];
    }
    return found;
}

/* Pieces a slot with the decode lane has beyond its others: the encoded piece, and the piece
 * of its samples the lane sends back to the servers (sched_lane_done). */
#define LANE_PIECES 2u

/* routed: room for CLIENT_MAX_PIECES pieces (owner routing), else one; and LANE_PIECES more
 * with the decode lane. */
static int slot_alloc(loader *l, slot *sl, bool routed)
{
    uint32_t bs = l->cfg.batch_size;
    size_t raw_bytes = sched_sample_bytes(l) * bs;
    memset(sl, 0, sizeof(*sl));
    sl->max_pieces = routed ? (bs < CLIENT_MAX_PIECES ? bs : CLIENT_MAX_PIECES) : 1;
    if (l->lane) {
        sl->max_pieces += LANE_PIECES;
        feed_buf_init(&sl->enc, (size_t)l->cfg.decode_lane_max_bytes);
        sl->enc_off = calloc(bs, sizeof(*sl->enc_off));
        sl->enc_len = calloc(bs, sizeof(*sl->enc_len));
        if (!sl->enc_off || !sl->enc_len)
            return FEED_ENOMEM;
    }
    sl->pieces = calloc(sl->max_pieces, sizeof(*sl->pieces));
    sl->indices = calloc(bs, sizeof(*sl->indices));
    sl->order = calloc(bs, sizeof(*sl->order));
    sl->sent = calloc(bs, sizeof(*sl->sent));
    sl->status = calloc(bs, sizeof(*sl->status));
    if (!sl->pieces || !sl->indices || !sl->order || !sl->sent || !sl->status)
        return FEED_ENOMEM;
    if (routed || l->lane) {
        sl->swap = malloc(sched_sample_bytes(l));
        sl->from = calloc(bs, sizeof(*sl->from));
        if (!sl->swap || !sl->from)
            return FEED_ENOMEM;
    }
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
    free(sl->pieces);
    free(sl->indices);
    free(sl->order);
    free(sl->sent);
    free(sl->swap);
    free(sl->from);
    free(sl->status);
    free(sl->enc_off);
    free(sl->enc_len);
    feed_buf_free(&sl->enc);
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

uint32_t sched_servers_up(const loader *l)
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
    uint32_t up = sched_servers_up(l);
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
    bool routed = l->routing;
    l->growing = true;
    pthread_mutex_unlock(&l->mu);
    int rc = slot_alloc(l, &fresh, routed);
    if (rc)
        slot_release_memory(l, &fresh);
    pthread_mutex_lock(&l->mu);
    l->growing = false;
    if (rc == 0) {
        slot *sl = &l->slots[l->num_slots++];
        *sl = fresh;
        for (uint32_t i = 0; i < sl->max_pieces; i++)
            sl->pieces[i].slot = sl;
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

uint32_t sched_lane_share(const loader *l, uint32_t epoch)
{
    return epoch == l->epoch ? l->lane_share_epoch : l->lane_share;
}

/* The batch's samples the decode lane takes (client_lane_assigned) go last in piece order, as
 * a second, encoded piece; the others first, as the decoded piece. Without the lane (or a
 * share of 0) the whole batch is one decoded piece. */
static void assign(loader *l, slot *sl, const client_plan *plan, uint32_t epoch,
                   uint64_t batch_number)
{
    const uint32_t *samples;
    uint32_t n, n_lane = 0;
    uint32_t share = l->lane ? sched_lane_share(l, epoch) : 0;
    client_plan_batch(plan, batch_number, &samples, &n);
    for (uint32_t i = 0; i < n; i++) {
        sl->indices[i] = samples[i];
        n_lane += client_lane_assigned(l->cfg.seed, epoch, samples[i], share);
    }
    for (uint32_t i = 0, dec = 0, enc = n - n_lane; i < n; i++) {
        uint32_t at = client_lane_assigned(l->cfg.seed, epoch, samples[i], share) ? enc++ : dec++;
        sl->sent[at] = samples[i];
        sl->order[at] = i;
    }
    sl->n = n;
    sl->batch_number = batch_number;
    sl->epoch = epoch;
    sl->result = 0;
    sl->complete = false;
    sl->lane_n = 0;
    sl->lane_back = 0;
    sl->dec_done_ns = sl->lane_done_ns = 0;
    sl->state = SLOT_PENDING;
    /* The decoded piece and the encoded one, each if it has samples; owner routing splits the
     * decoded piece when it is sent. */
    sl->num_pieces = 0;
    for (int encoded = 0; encoded < 2; encoded++) {
        uint32_t k = encoded ? n_lane : n - n_lane;
        if (k == 0)
            continue;
        piece *pc = &sl->pieces[sl->num_pieces++];
        memset(pc, 0, sizeof(*pc));
        pc->slot = sl;
        pc->state = PIECE_PENDING;
        pc->first = encoded ? n - n_lane : 0;
        pc->n = k;
        pc->encoded = encoded;
    }
    atomic_store_explicit(&sl->landed, 0, memory_order_relaxed);
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
        assign(l, sl, &l->plan, l->epoch, l->next_assign++);
        in_use++;
    }
    /* Same bound as above: prefetching the next epoch never takes more slots. */
    while (!wanted && l->next_assign == l->plan.batches && l->ahead.samples &&
           l->ahead_assign < l->ahead.batches && in_use < cap) {
        slot *sl = free_slot(l);
        wanted = !sl;
        if (!sl)
            break;
        if (l->ahead_assign == 0)
            client_lane_decide(l, l->epoch + 1); /* before any batch of it is asked for */
        assign(l, sl, &l->ahead, l->epoch + 1, l->ahead_assign++);
        in_use++;
    }
    return wanted && l->num_slots < cap && !l->growing;
}

bool sched_fill(loader *l, bool may_grow)
{
    /* grow() drops mu: whatever changed meanwhile is seen by the next fill_slots. */
    while (fill_slots(l) && may_grow) {
        grow(l);
        if (l->stop || l->fatal)
            return false;
    }
    return true;
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
        bool up = sched_servers_up(l) > 0;
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
    l->stats.lane_decoded += sl->lane_n;
    l->stats.lane_rerequested += sl->lane_back;
    for (uint32_t i = 0; i < sl->n; i++)
        if (sl->status[i] != FEED_SAMPLE_OK)
            l->stats.sample_errors[sl->status[i]]++;
    l->stats.wait_ns_total += waited;
    /* The servers' decoding is what demand sizes: the lane's samples cost them a read. */
    client_demand_consumed(&l->demand, since, now, sl->n - sl->lane_n);
    if (waited > l->stats.wait_ns_max)
        l->stats.wait_ns_max = waited;
    *out = sl;
    return 0;
}

void sched_release(loader *l, slot *sl)
{
    sl->state = SLOT_FREE;
    l->handed--;
}
