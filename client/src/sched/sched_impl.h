/*
 * What the scheduler's files (sched*.c) share
 * and nobody else uses. The loader's mu held unless said.
 */
#ifndef FEED_CLIENT_SCHED_IMPL_H
#define FEED_CLIENT_SCHED_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_impl.h"

/* Bytes of one sample as received: out_h x out_w x 3. Any thread. */
size_t sched_sample_bytes(const loader *l);
/* Servers up and not removed. */
uint32_t sched_servers_up(const loader *l);
/* Puts planned batches into free slots up to the cap; with may_grow it allocates slots as
 * needed, dropping mu meanwhile. false when the loader stopped or failed meanwhile. */
bool sched_fill(loader *l, bool may_grow);

/* BatchRequest.ownership of a routed request (0: not routed). */
#define SCHED_OWNER FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_OWNER
#define SCHED_NOT_OWNER FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_NOT_OWNER

/* Whether sl carries a batch not yet landed (PENDING, INFLIGHT or LANDING). */
bool sched_slot_active(const slot *sl);
/* Sets an active slot's state from its pieces' (see slot.state). */
void sched_slot_sync(slot *sl);
/* An active slot's first PENDING piece, or NULL. */
piece *sched_pending_piece(slot *sl);

/* sched_server.c */
/* Sends pc to s as a new request (second: a hedge or probe beside its live one) with
 * BatchRequest.ownership; its batch_id, or 0 if the transport refused it (s is then failed,
 * which puts pc back as it was before the call). */
uint64_t sched_send(loader *l, piece *pc, server *s, bool second, uint32_t ownership, uint64_t now);

/* sched_route.c: owner routing, on once l->routing is. */
/* Hedges, then every pending piece in plan order: split by the servers its samples go to,
 * each sent when that server has a free window. */
void sched_route_dispatch(loader *l, uint64_t now);
/* The index in l->servers of the server that owns sample `index`: the highest rendezvous
 * weight among the servers not removed; UINT32_MAX when there is none. */
uint32_t sched_route_owner(loader *l, uint64_t index);

#endif
