/*
 * The scheduler's balancing (client/src/sched/balance.c): per-server service-time
 * estimates from replies, the server expected to finish a new batch first,
 * stragglers, and the batch to hedge. Called by sched.c with the loader's mu
 * held; the time is passed in.
 */
#ifndef FEED_CLIENT_BALANCE_H
#define FEED_CLIENT_BALANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "client_impl.h"

/* Whether s can be sent requests now (up or connecting, with a stream). */
bool balance_takes_requests(const server *s);
/* A reply from s arrived at now: its service-time estimate moves toward the time it took. */
void balance_note_reply(server *s, uint64_t now);
/* The server other than `other` to send a new batch to; NULL if none has a free window. */
server *balance_pick_server(loader *l, const server *other, uint64_t now);
/* Plan order of two slots: this epoch's batches before the next epoch's. */
bool balance_plan_before(const loader *l, const slot *a, const slot *b);
/* The first piece in plan order a straggler has owed for far too long, to hedge; NULL if none. */
piece *balance_straggler_piece(loader *l, uint64_t now);
/* Whether s has room in its window for one more request. */
bool balance_has_window(const server *s);
/* usable[i] (l->num_servers of them): whether server i takes requests and is no straggler. */
void balance_usable_servers(loader *l, uint64_t now, bool *usable);

#endif
