/*
 * Scheduling, part two (see sched.c for the whole): which server each batch
 * is sent to (balance.c's choices), hedges and probes, a failed server's
 * batches re-issued, batch deadlines and retries on the clock. The loader's
 * mu held; the time is passed in; requests go out through l->transport.
 */
#include "balance.h"

#include "feed/log.h"
#include "loader_impl.h"
#include "sched_impl.h"

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

void sched_dispatch(loader *l, bool may_grow, uint64_t now)
{
    if (l->stop || !l->plan.samples || l->fatal)
        return;
    if (!sched_fill(l, may_grow))
        return;
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
