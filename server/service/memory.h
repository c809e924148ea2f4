/*
 * Memory admission for batch pixel buffers: --max-memory over the whole
 * service and --max-stream-memory per stream, as back-pressure. An accepted
 * batch whose buffer would pass either cap waits in one FIFO shared by all
 * streams. Whenever memory frees, the granter thread walks it from the head:
 * a batch that fits both caps is granted; one that fits the total but not its
 * own stream's cap is passed over (with the rest of its stream, which keeps
 * each stream's order) because only its own stream can free that memory; one
 * that does not fit the total stops the walk, so no later or smaller batch
 * overtakes it and none starves. A new batch is granted at once only when
 * nothing waits.
 *
 * Ownership: one feedd_memory per service, made by feedd_service_start, with
 * the granter thread it starts. It is reference-counted: the service holds
 * one reference and every pixel buffer holds one, because gRPC may drop a
 * buffer (the slice destructor) after the service is freed. The waiters and
 * accounts are the caller's (one account per stream, one waiter per batch).
 *
 * Threads: admit and withdraw on any thread (a stream's owner, its
 * completion-queue thread); buffers are freed on any thread; the granter calls
 * granted() on its own thread with no lock of this module held. Lock: mu, a
 * leaf (nothing else is taken, and no gRPC call made, while it is held).
 */
#ifndef FEED_SERVER_MEMORY_H
#define FEED_SERVER_MEMORY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/list.h"

typedef struct feedd_memory feedd_memory;

/* One stream's share. Zero-initialise it. */
typedef struct feedd_mem_account {
    /*
     * Bytes granted to the stream and not yet given back. Atomic: it grows
     * only under the memory's mu, and shrinks on the stream's owner.
     */
    atomic_uint_fast64_t used;
    uint64_t wait_pass; /* guarded by the memory's mu: the walk that passed it over */
} feedd_mem_account;

/* One batch asking for bytes. The caller sets acct and bytes. */
typedef struct feedd_mem_waiter {
    feedd_mem_account *acct;
    uint64_t bytes;
    feed_list_node link; /* in the FIFO (guarded by the memory's mu), or a list handed back */
} feedd_mem_waiter;

/* A pixel buffer: the header, then the bytes. */
typedef struct feedd_mem_buf {
    feedd_memory *owner;
    size_t bytes;
    uint8_t data[];
} feedd_mem_buf;

/*
 * Caps in bytes; granted(w) runs on the granter thread for each waiter the
 * FIFO grants (its bytes reserved in both caps). Starts the granter.
 * 0 or FEED_ENOMEM (nothing is left behind).
 */
int feedd_memory_new(uint64_t max_memory, uint64_t max_stream_memory,
                     void (*granted)(feedd_mem_waiter *w), feedd_memory **out);
/* Join the granter; nothing may wait any more. Accepts NULL. */
void feedd_memory_stop(feedd_memory *m);
/* Drop the service's reference (after stop); buffers still out keep it alive. Accepts NULL. */
void feedd_memory_unref(feedd_memory *m);

/* true: w's bytes are reserved in both caps now; false: w waits for granted(). */
bool feedd_memory_admit(feedd_memory *m, feedd_mem_waiter *w);
/* Move every waiter of acct from the FIFO to the end of *out (linked by their link). */
void feedd_memory_withdraw(feedd_memory *m, feedd_mem_account *acct, feed_list *out);
/* The stream's cap: give back bytes of acct (its send finished, or its batch was dropped). */
void feedd_memory_stream_release(feedd_memory *m, feedd_mem_account *acct, uint64_t bytes);

/* The buffer for a grant of bytes; NULL when malloc fails (then call unreserve). */
feedd_mem_buf *feedd_memory_buf_new(feedd_memory *m, uint64_t bytes);
/* Give a grant whose buffer could not be allocated back to both caps. */
void feedd_memory_unreserve(feedd_memory *m, feedd_mem_account *acct, uint64_t bytes);
/* Free a buffer and give its bytes back to the total cap; any thread (a slice destructor). */
void feedd_memory_buf_free(void *buf);

/* Bytes reserved in the total cap now. */
uint64_t feedd_memory_used(feedd_memory *m);

#endif
