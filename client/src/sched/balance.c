/*
 * Which server gets a batch and which batches are asked of a second server:
 * the scheduler's choices from each server's measured service time (see
 * sched.c's Balancing). Reads the loader's state, changes only a server's
 * estimate; no I/O, no clock (the time is passed in). The loader's mu held.
 */
#include "balance.h"

bool balance_takes_requests(const server *s)
{
    return !s->removed && (s->state == SRV_UP || s->state == SRV_CONNECTING) && s->stream;
}

/* The shortest measured service time among servers up (0: none measured), which a server
 * not measured yet is assumed to have: a new or returning server is given a chance, and
 * SRV_CONNECTING's window of one bounds what that risks. */
static uint64_t fastest_service(const loader *l)
{
    uint64_t fastest = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        const server *s = &l->servers[i];
        if (!s->removed && s->state == SRV_UP && s->service_ns &&
            (!fastest || s->service_ns < fastest))
            fastest = s->service_ns;
    }
    return fastest;
}

/* The time s is expected to take per batch from now. */
static uint64_t service_estimate(const server *s, uint64_t fastest, uint64_t now)
{
    uint64_t est = s->service_ns ? s->service_ns : fastest;
    if (s->outstanding && now - s->progress_ns > est)
        est = now - s->progress_ns;
    return est;
}

/* The lower median of the measured service times of the servers up; 0 if none is measured. */
static uint64_t median_service(const loader *l)
{
    uint64_t v[CLIENT_MAX_SERVERS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        const server *s = &l->servers[i];
        if (s->removed || s->state != SRV_UP || !s->service_ns)
            continue;
        uint32_t j = n++;
        for (; j > 0 && v[j - 1] > s->service_ns; j--)
            v[j] = v[j - 1];
        v[j] = s->service_ns;
    }
    return n ? v[(n - 1) / 2] : 0;
}

/* The estimate beyond which a server is a straggler: CLIENT_HEDGE_FACTOR x the median, at
 * least CLIENT_HEDGE_FLOOR_MS (with owner routing CLIENT_ROUTE_HEDGE_FACTOR and _FLOOR_MS);
 * UINT64_MAX (none is) while no server is measured. */
static uint64_t straggler_limit(const loader *l)
{
    uint64_t median = median_service(l);
    if (!median)
        return UINT64_MAX;
    uint64_t limit =
        (uint64_t)(l->routing ? CLIENT_ROUTE_HEDGE_FACTOR : CLIENT_HEDGE_FACTOR) * median;
    uint64_t floor =
        (uint64_t)(l->routing ? CLIENT_ROUTE_HEDGE_FLOOR_MS : CLIENT_HEDGE_FLOOR_MS) * 1000000u;
    return limit > floor ? limit : floor;
}

/*
 * The server other than `other` with a free window expected to finish a new batch first:
 * (outstanding + 1) x its estimate, the most free window among equals (so before anything is
 * measured, the most free window wins); NULL if there is none. Never a straggler: what it takes
 * lands far behind the others' and holds up delivery in plan order; it gets only copies
 * (probe_idle_servers) until it has caught up. Any other server with a free window gets work:
 * holding a batch back for a faster server whose window is full would leave batches unsent,
 * and fewer of them already on their way, when servers stop.
 */
bool balance_has_window(const server *s)
{
    /* A server that has not yet answered a batch gets one, as a probe (see SRV_CONNECTING). */
    return s->outstanding < (s->state == SRV_UP ? s->window : 1);
}

void balance_usable_servers(loader *l, uint64_t now, bool *usable)
{
    uint64_t fastest = fastest_service(l), limit = straggler_limit(l);
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        usable[i] = balance_takes_requests(s) && service_estimate(s, fastest, now) <= limit;
    }
}

server *balance_pick_server(loader *l, const server *other, uint64_t now)
{
    uint64_t fastest = fastest_service(l), limit = straggler_limit(l);
    uint64_t best_cost = 0;
    uint32_t best_free = 0;
    server *best = NULL;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (s == other || !balance_takes_requests(s))
            continue;
        uint32_t window = s->state == SRV_UP ? s->window : 1;
        uint64_t est = service_estimate(s, fastest, now);
        if (s->outstanding >= window || est > limit)
            continue;
        uint64_t cost = (uint64_t)(s->outstanding + 1) * est;
        uint32_t free_window = window - s->outstanding;
        if (!best || cost < best_cost || (cost == best_cost && free_window > best_free)) {
            best = s;
            best_cost = cost;
            best_free = free_window;
        }
    }
    return best;
}

/* Plan order: this epoch's batches before the next epoch's, so that a re-issued batch next()
 * waits for does not queue behind prefetched ones. */
bool balance_plan_before(const loader *l, const slot *a, const slot *b)
{
    bool a_ahead = a->epoch != l->epoch, b_ahead = b->epoch != l->epoch;
    if (a_ahead != b_ahead)
        return !a_ahead;
    return a->batch_number < b->batch_number;
}

/* In plan order, the first piece owed by a straggler, with no second request yet, that it has
 * owed for longer than the others take by far: it should be asked of another server too. */
piece *balance_straggler_piece(loader *l, uint64_t now)
{
    uint64_t limit = straggler_limit(l);
    if (limit == UINT64_MAX)
        return NULL;
    uint64_t fastest = fastest_service(l);
    piece *best = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (sl->state != SLOT_INFLIGHT && sl->state != SLOT_LANDING)
            continue;
        for (uint32_t k = 0; k < sl->num_pieces; k++) {
            piece *pc = &sl->pieces[k];
            if (pc->state != PIECE_INFLIGHT || pc->hedge || now - pc->sent_ns <= limit ||
                service_estimate(pc->server, fastest, now) <= limit)
                continue;
            if (!best || balance_plan_before(l, sl, best->slot))
                best = pc;
        }
    }
    return best;
}

void balance_note_reply(server *s, uint64_t now)
{
    /* Late duplicates count too: they took the server as long. Faster replies weigh more
     * (1/2, else 1/4), so that a server that recovers catches up within a few probes; one that
     * is slower than it looks falls behind anyway, its silence raising its estimate. */
    uint64_t took = now - s->progress_ns;
    if (!s->service_ns)
        s->service_ns = took;
    else if (took < s->service_ns)
        s->service_ns = (s->service_ns + took) / 2;
    else
        s->service_ns = s->service_ns - s->service_ns / 4 + took / 4;
}
