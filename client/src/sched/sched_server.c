/*
 * Scheduling, part three (see sched.c for the whole): what happens between
 * the scheduler and one server. A piece is sent to it (sched_send, for
 * sched_dispatch.c and sched_route.c alike); it fails (its pieces re-issued,
 * or moved to their hedge, and it is retried after its backoff); and on the
 * clock (sched_tick) its batch deadline, its retry and its absence from the
 * owner set are checked. The loader's mu held; the time is passed in;
 * requests go out and servers are dropped through l->transport.
 */
#include "feed/log.h"
#include "client_impl.h"
#include "sched_impl.h"

uint64_t sched_send(loader *l, piece *pc, server *s, bool second, uint32_t ownership, uint64_t now)
{
    slot *sl = pc->slot;
    uint64_t id = ++l->request_seq;
    if (second) {
        pc->hedge = s;
        pc->hedge_id = id;
    } else {
        pc->request_id = id;
        pc->server = s;
        pc->sent_ns = now;
        pc->ownership = ownership;
        pc->state = PIECE_INFLIGHT;
        sched_slot_sync(sl);
    }
    /* The server's deadline clock runs from now if it had nothing to do. */
    if (s->outstanding++ == 0)
        s->progress_ns = now;
    if (!l->transport->send_request(l, s, id, sl->epoch, sl->sent + pc->first, pc->n, ownership,
                                    pc->encoded)) {
        sched_fail_server(l, s, "send queue refused a request", now);
        return 0;
    }
    return id;
}

/* counted: a failover in stats and a warning, else a debug line (a server that never served). */
static void fail_server(loader *l, server *s, const char *why, bool counted, uint64_t now)
{
    uint32_t moved = 0;
    l->transport->drop_server(l, s);
    s->describe = s->stream = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (!sched_slot_active(sl))
            continue;
        for (uint32_t k = 0; k < sl->num_pieces; k++) {
            piece *pc = &sl->pieces[k];
            if (pc->state != PIECE_INFLIGHT)
                continue;
            if (pc->hedge == s) {
                pc->hedge = NULL;
                pc->hedge_id = 0;
            } else if (pc->server == s && pc->hedge) {
                /* The second request stays live; its age counts from now. */
                pc->server = pc->hedge;
                pc->request_id = pc->hedge_id;
                pc->sent_ns = now;
                pc->hedge = NULL;
                pc->hedge_id = 0;
            } else if (pc->server == s) {
                pc->state = PIECE_PENDING;
                pc->server = NULL;
                moved++;
            }
        }
        sched_slot_sync(sl);
    }
    l->stats.reissued += moved;
    if (counted) {
        l->stats.failovers++;
        client_log(l, FEED_LOG_WARN, "server %s failed (%s); %u pieces re-issued", s->target, why,
                   moved);
    } else {
        client_log(l, FEED_LOG_DEBUG, "server %s: %s", s->target, why);
    }
    s->state = SRV_DOWN;
    if (!s->down_since_ns)
        s->down_since_ns = now;
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

/* A server down for unavailable_timeout_ms leaves the owner set (routing's, sched_route.c)
 * until it is up again: waiting longer would leave its share out of every cache. */
static void note_absence(loader *l, server *s, uint64_t now)
{
    uint64_t limit = (uint64_t)l->cfg.unavailable_timeout_ms * 1000000u;
    bool absent = s->down_since_ns && now - s->down_since_ns >= limit;
    if (absent && !s->absent && l->routing)
        client_log(l, FEED_LOG_WARN,
                   "server %s down for %u ms: its samples have other owners until it is back",
                   s->target, l->cfg.unavailable_timeout_ms);
    s->absent = absent;
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
        note_absence(l, s, now);
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
    for (uint32_t i = 0; i < l->num_slots && !asking; i++)
        asking = sched_slot_active(&l->slots[i]);
    if (!asking)
        l->progress_ns = now;
    l->stats.servers_up = up;
    l->stats.servers_known = known;
}

bool sched_server_in_use(const loader *l, const server *s)
{
    bool used = false;
    for (uint32_t i = 0; i < l->num_slots && !used; i++) {
        const slot *sl = &l->slots[i];
        for (uint32_t k = 0; k < sl->num_pieces && !used && sched_slot_active(sl); k++) {
            const piece *pc = &sl->pieces[k];
            used = (pc->state == PIECE_INFLIGHT || pc->state == PIECE_LANDING) && pc->server == s;
        }
    }
    return used;
}

void sched_forget_server(loader *l, const server *s)
{
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        for (uint32_t k = 0; k < sl->num_pieces; k++) {
            if (sl->pieces[k].server == s)
                sl->pieces[k].server = NULL;
            if (sl->pieces[k].hedge == s)
                sl->pieces[k].hedge = NULL;
        }
    }
}
