/*
 * Owner routing (README "Owner routing"): every sample of the dataset has
 * one owning server, by rendezvous (highest-random-weight) hashing of (sample
 * index, server) over the servers the loader knows and has not seen leave
 * (removed from DNS) or be down for unavailable_timeout_ms (absent: back in
 * once it serves again); a server's identity is its target as the loader dials
 * it (a configured "host:port", or an address a DNS name yielded). A batch
 * is sent as one piece per server: each sample goes to the first server in
 * its rendezvous order that takes requests, which is its owner while the
 * owner is up; the request says OWNER when it is, and the server then admits
 * those samples to its decoded-sample cache, and NOT_OWNER when it stands
 * in, so the fleet's caches each hold their share and nothing twice. A
 * server joining or leaving changes the owner of only the samples it gains
 * or had. A straggler (balancing's test) keeps its share while its window
 * has room, so that its cache keeps its samples even while it is judged
 * slow for a while (a cold cache, one slow piece); what does not fit spills
 * to the next server, and what it owes for far too long is hedged to the
 * next server that is no straggler, neither admitted there. Part of the
 * scheduler (sched.c): the loader's mu held, no I/O, the time passed in.
 */
#include <stdlib.h>
#include <string.h>

#include "balance.h"

#include "feed/log.h"
#include "client_impl.h"
#include "sched_impl.h"

/* splitmix64's finaliser: a bijection that spreads every input bit. */
static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* FNV-1a of the target, mixed; never 0 (0 means not computed yet). */
static uint64_t route_key(server *s)
{
    if (!s->route_key) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *c = s->target; *c; c++)
            h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
        s->route_key = mix(h) | 1;
    }
    return s->route_key;
}

static uint64_t weight(uint64_t key, uint64_t index)
{
    return mix(key ^ mix(index + 0x9e3779b97f4a7c15ull));
}

uint32_t sched_route_owner(loader *l, uint64_t index)
{
    uint32_t owner = UINT32_MAX;
    uint64_t best = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (s->removed || s->absent)
            continue;
        uint64_t w = weight(route_key(s), index);
        if (owner == UINT32_MAX || w > best) {
            owner = i;
            best = w;
        }
    }
    return owner;
}

/* A server on its first Describe since the loader opened (never failed): its samples wait for
 * it instead of going to the next server uncached, which would leave them out of every cache
 * for an epoch. Not after a failure, whose retries may take the Describe deadline each. */
static bool first_describe(const server *s)
{
    return s->state == SRV_DESCRIBE && s->backoff_ms == CLIENT_BACKOFF_FIRST_MS && !s->batches;
}

/* Whether a server takes new pieces (route_dispatch's takes[]): not at all; yes; or, a
 * straggler, while its window has room, the rest spilling to the next server. */
enum { TAKES_NOT, TAKES_YES, TAKES_SPILL };

/* Where sample `index` goes: 2 x the server's index, + 1 when it is the owner; -1 when no
 * server takes it (takes[i]), or the first in its order is on its first Describe. */
static int64_t route_sample(loader *l, const uint8_t *takes, uint64_t index)
{
    uint32_t target = UINT32_MAX;
    uint64_t best = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        bool skip = takes[i] == TAKES_NOT ? s->removed || !first_describe(s)
                                          : takes[i] == TAKES_SPILL && !balance_has_window(s);
        if (skip)
            continue;
        uint64_t w = weight(route_key(s), index);
        if (target == UINT32_MAX || w > best) {
            target = i;
            best = w;
        }
    }
    if (target == UINT32_MAX || takes[target] == TAKES_NOT)
        return -1;
    return 2 * (int64_t)target + (sched_route_owner(l, index) == target);
}

/* For the samples of sl's pending pieces, sl->from[at] = route_sample + 1 (0: nowhere yet), so
 * that splitting costs one rendezvous per sample and server, whatever the number of pieces.
 * sl->from is to_batch_order's scratch, unused until the batch has landed; NULL in a slot
 * made before routing was on, which is never split. */
static void route_codes(loader *l, slot *sl, const uint8_t *takes)
{
    for (uint32_t k = 0; k < sl->num_pieces && sl->from; k++) {
        const piece *pc = &sl->pieces[k];
        for (uint32_t i = 0; pc->state == PIECE_PENDING && i < pc->n; i++)
            sl->from[pc->first + i] =
                (uint32_t)(route_sample(l, takes, sl->sent[pc->first + i]) + 1);
    }
}

/*
 * Keeps in pc the samples that go where its first one goes (by route_codes, reordering
 * sl->order, sl->sent and the codes within the piece) and moves the others into a new PENDING
 * piece, which the caller's walk splits in turn. With no room for another piece (or in a slot
 * made before routing was on), pc stays whole and goes to its first sample's server as
 * NOT_OWNER. Returns that route (route_sample's value).
 */
static int64_t split(loader *l, slot *sl, piece *pc, const uint8_t *takes)
{
    int64_t route = -1;
    uint32_t kept = 1;
    /* With the decode lane, one piece stays free for the samples it sends back. */
    uint32_t room = sl->max_pieces - (l->lane ? 1u : 0u);
    if (!sl->from) {
        route = route_sample(l, takes, sl->sent[pc->first]);
        kept = pc->n;
    } else {
        uint32_t code = sl->from[pc->first];
        route = (int64_t)code - 1;
        for (uint32_t k = 1; k < pc->n; k++) {
            uint32_t at = pc->first + k;
            if (sl->from[at] != code)
                continue;
            uint32_t to = pc->first + kept++;
            uint64_t idx = sl->sent[at];
            uint32_t pos = sl->order[at];
            sl->sent[at] = sl->sent[to];
            sl->order[at] = sl->order[to];
            sl->from[at] = sl->from[to];
            sl->sent[to] = idx;
            sl->order[to] = pos;
            sl->from[to] = code;
        }
    }
    if (kept < pc->n && sl->num_pieces < room) {
        piece *rest = &sl->pieces[sl->num_pieces++];
        memset(rest, 0, sizeof(*rest));
        rest->slot = sl;
        rest->state = PIECE_PENDING;
        rest->first = pc->first + kept;
        rest->n = pc->n - kept;
        pc->n = kept;
    } else if ((kept < pc->n || !sl->from) && route >= 0) {
        route &= ~(int64_t)1;
    }
    return route;
}

/* The hedge for a straggler's piece: the first server in its first sample's rendezvous order,
 * other than the one that owes it, that is usable and has a free window; NULL if none. */
static server *hedge_target(loader *l, const piece *pc, const bool *usable)
{
    uint64_t index = pc->slot->sent[pc->first];
    server *target = NULL;
    uint64_t best = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        server *s = &l->servers[i];
        if (!usable[i] || s == pc->server || !balance_has_window(s))
            continue;
        uint64_t w = weight(route_key(s), index);
        if (!target || w > best) {
            target = s;
            best = w;
        }
    }
    return target;
}

typedef struct planned {
    uint64_t key; /* plan order: next epoch's after this one's, then batch number */
    slot *sl;
} planned;

static int by_plan(const void *a, const void *b)
{
    uint64_t x = ((const planned *)a)->key, y = ((const planned *)b)->key;
    return x < y ? -1 : x > y;
}

/* takes[i] from balancing's usable[i] (no straggler) and whether i takes requests at all. */
static void taking_servers(loader *l, uint64_t now, bool *usable, uint8_t *takes)
{
    balance_usable_servers(l, now, usable);
    for (uint32_t i = 0; i < l->num_servers; i++)
        takes[i] = !balance_takes_requests(&l->servers[i]) ? TAKES_NOT
                   : usable[i]                             ? TAKES_YES
                                                           : TAKES_SPILL;
}

/* Sends what it can of sl's pending pieces, splitting them by route. The decode lane's encoded
 * piece goes whole where balancing sends a batch: a server reads the bytes and decodes
 * nothing, so no cache gains from its owner having it. */
static void route_slot(loader *l, slot *sl, bool *usable, uint8_t *takes, uint64_t now)
{
    route_codes(l, sl, takes);
    for (uint32_t k = 0; k < sl->num_pieces; k++) {
        piece *pc = &sl->pieces[k];
        if (pc->state != PIECE_PENDING)
            continue;
        if (pc->encoded) {
            server *any = balance_pick_server(l, NULL, now);
            if (any && !sched_send(l, pc, any, false, 0, now)) {
                taking_servers(l, now, usable, takes);
                route_codes(l, sl, takes);
            }
            continue;
        }
        int64_t route = split(l, sl, pc, takes);
        if (route < 0)
            continue;
        server *s = &l->servers[route / 2];
        if (!balance_has_window(s))
            continue;
        if (!sched_send(l, pc, s, false, (route & 1) ? SCHED_OWNER : SCHED_NOT_OWNER, now)) {
            taking_servers(l, now, usable, takes); /* s failed */
            route_codes(l, sl, takes);
        }
    }
}

void sched_route_dispatch(loader *l, uint64_t now)
{
    bool usable[CLIENT_MAX_SERVERS];
    uint8_t takes[CLIENT_MAX_SERVERS];
    planned waiting[CLIENT_MAX_SLOTS];
    uint32_t n = 0;
    balance_usable_servers(l, now, usable);
    for (;;) {
        piece *late = balance_straggler_piece(l, now);
        server *s = late ? hedge_target(l, late, usable) : NULL;
        if (!s)
            break;
        if (sched_send(l, late, s, true, SCHED_NOT_OWNER, now))
            l->stats.hedged++;
        else
            balance_usable_servers(l, now, usable);
    }
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        if (!sched_pending_piece(sl))
            continue;
        waiting[n].key = (uint64_t)(sl->epoch != l->epoch) << 63 | sl->batch_number;
        waiting[n++].sl = sl;
    }
    qsort(waiting, n, sizeof(*waiting), by_plan);
    taking_servers(l, now, usable, takes);
    for (uint32_t i = 0; i < n; i++)
        route_slot(l, waiting[i].sl, usable, takes, now);
}

uint32_t sched_route_window(const loader *l, uint32_t window, uint32_t max_window)
{
    uint64_t members = 0;
    for (uint32_t i = 0; i < l->num_servers; i++)
        members += !l->servers[i].removed;
    uint64_t w = (uint64_t)window * (members ? members : 1);
    if (max_window && w > max_window)
        w = max_window;
    if (w > CLIENT_MAX_WINDOW)
        w = CLIENT_MAX_WINDOW;
    return w < window ? window : (uint32_t)w;
}

void sched_note_cache_side(loader *l, server *s, uint32_t cache_side)
{
    s->cache_side = cache_side;
    if (!l->routing && (l->cfg.owner_routing == FEED_OWNER_ROUTING_ON ||
                        (l->cfg.owner_routing == FEED_OWNER_ROUTING_AUTO && cache_side))) {
        l->routing = true;
        client_log(l, FEED_LOG_INFO, "owner routing on (server %s caches the dataset at %u)",
                   s->target, cache_side);
    }
}
