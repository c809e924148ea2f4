/*
 * Scheduling, part two (see sched.c for the whole): which server each piece
 * of a batch is sent to (balance.c's choices, or owner routing's in
 * sched_route.c), hedges and probes; sending and failing a server are
 * sched_server.c's. The loader's mu held; the time is passed in.
 */
#include "balance.h"

#include "feed/log.h"
#include "client_impl.h"
#include "sched_impl.h"

static slot *first_pending(loader *l)
{
    slot *best = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sched_pending_piece(sl) && (!best || balance_plan_before(l, sl, best)))
            best = sl;
    }
    return best;
}

/* A measured server up that has had nothing to do for CLIENT_PROBE_MS while batches wait
 * (balancing holds them back from it) gets a copy of the newest piece in flight elsewhere: its
 * reply measures it again, so a server that recovers gets work back, and the copy cannot delay
 * delivery (whichever reply comes first lands). A copy is never admitted to its cache. */
static void probe_idle_servers(loader *l, uint64_t now)
{
    /* Owner routing gives every server its share (a straggler while its window has room). */
    if (l->routing || !first_pending(l))
        return;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (!balance_takes_requests(s) || s->state != SRV_UP || !s->service_ns || s->outstanding ||
            now - s->progress_ns < (uint64_t)CLIENT_PROBE_MS * 1000000u)
            continue;
        piece *newest = NULL;
        for (uint32_t j = 0; j < l->num_slots; j++) {
            slot *sl = &l->slots[j];
            if (!sched_slot_active(sl))
                continue;
            for (uint32_t k = 0; k < sl->num_pieces; k++) {
                piece *pc = &sl->pieces[k];
                if (pc->state == PIECE_INFLIGHT && !pc->hedge && pc->server != s &&
                    (!newest || pc->request_id > newest->request_id))
                    newest = pc;
            }
        }
        if (!newest)
            return;
        sched_send(l, newest, s, true, l->routing ? SCHED_NOT_OWNER : 0, now);
    }
}

void sched_dispatch(loader *l, bool may_grow, uint64_t now)
{
    if (l->stop || !l->plan.samples || l->fatal)
        return;
    if (!sched_fill(l, may_grow))
        return;
    if (l->routing) {
        sched_route_dispatch(l, now);
    } else {
        for (;;) {
            slot *sl = first_pending(l);
            piece *late = balance_straggler_piece(l, now);
            if (late && (!sl || balance_plan_before(l, late->slot, sl))) {
                server *s = balance_pick_server(l, late->server, now);
                if (s) {
                    if (sched_send(l, late, s, true, 0, now))
                        l->stats.hedged++;
                    continue;
                }
            }
            server *s = sl ? balance_pick_server(l, NULL, now) : NULL;
            if (!s)
                break;
            sched_send(l, sched_pending_piece(sl), s, false, 0, now);
        }
    }
    probe_idle_servers(l, now);
}

