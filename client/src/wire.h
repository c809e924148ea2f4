/*
 * feed.v1 messages as the client builds and checks them: BatchRequest
 * packing, a bounded bump allocator for unpacking a Batch (whose pixel field
 * can be pointed straight at a delivery slot), a scan of a Batch's batch_id
 * before unpacking, and the checks a Batch must pass. No I/O; any thread, but
 * an arena is owned by one thread.
 */
#ifndef FEED_CLIENT_WIRE_H
#define FEED_CLIENT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "feed.pb-c.h"
#include "feed/transform.h"

/*
 * Bump allocator for protobuf-c. Every allocation comes from one block of
 * `cap` bytes (reset per message) except one: the first request of exactly
 * `target_size` bytes returns `target` (the slot's pixel buffer), so the
 * unpacked Batch.data lands in the slot with no further copy.
 */
typedef struct wire_arena {
    ProtobufCAllocator pa;
    uint8_t *block;
    size_t cap, used;
    void *target;
    size_t target_size;
    int target_taken;
} wire_arena;

int wire_arena_init(wire_arena *a, size_t cap);
void wire_arena_free(wire_arena *a);
/* Start a new message; target may be NULL. */
void wire_arena_reset(wire_arena *a, void *target, size_t target_size);

/*
 * Finds field 1 (batch_id) of a serialized Batch without unpacking it. 0 with
 * *id set, or FEED_EPROTO (malformed, or no batch_id field: then it is 0).
 */
int wire_peek_batch_id(const uint8_t *p, size_t len, uint64_t *id);

/* Serialized BatchRequest as a grpc-ready byte buffer (grpc_byte_buffer *). */
typedef struct wire_open {
    const char *dataset;
    const feed_transform *transform;
    uint64_t seed;
    uint32_t window;
    const char *client_name;
} wire_open;
/* open may be NULL; n may be 0 only with open. NULL when out of memory. */
void *wire_pack_request(const wire_open *open, uint64_t batch_id, uint32_t epoch,
                        const uint64_t *indices, uint32_t n);

/* What a Batch must look like to be accepted. */
typedef struct wire_expect {
    uint64_t batch_id;
    uint32_t epoch;
    const uint64_t *indices;
    uint32_t n;
    uint32_t h, w;
    uint32_t num_classes; /* 0: labels unchecked */
} wire_expect;

/*
 * 0 if b matches e (ids, indices, counts, shape, dtype, layout, data size,
 * label range); FEED_ECORRUPT if only the CRC32C is wrong; FEED_EPROTO with a
 * reason in msg otherwise.
 */
int wire_check_batch(const Feed__V1__Batch *b, const wire_expect *e, char *msg, size_t msg_cap);

#endif
