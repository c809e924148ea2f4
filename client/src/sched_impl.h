/*
 * What the scheduler's files (sched.c, sched_dispatch.c, sched_land.c) share
 * and nobody else uses. The loader's mu held unless said.
 */
#ifndef FEED_CLIENT_SCHED_IMPL_H
#define FEED_CLIENT_SCHED_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loader_impl.h"

/* Bytes of one sample as received: out_h x out_w x 3. Any thread. */
size_t sched_sample_bytes(const loader *l);
/* Servers up and not removed. */
uint32_t sched_servers_up(const loader *l);
/* Puts planned batches into free slots up to the cap; with may_grow it allocates slots as
 * needed, dropping mu meanwhile. false when the loader stopped or failed meanwhile. */
bool sched_fill(loader *l, bool may_grow);

#endif
