/*
 * feed.v1 messages as the client builds and checks them: BatchRequest
 * packing, a bounded bump allocator for unpacking a Batch (whose pixel field
 * can be pointed straight at a delivery slot), a scan of a Batch's batch_id
 * before unpacking, and the checks a Batch must pass. No I/O; any thread, but
 * an arena is owned by one thread.
 */
#ifndef FEED_CLIENT_WIRE_H
#define FEED_CLIENT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <protobuf-c/protobuf-c.h>

#include "feed.pb-c.h"
#include "feed/buf.h"
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
 * Reads a serialized Batch straight from where it arrived, so its pixels are
 * copied once: from the network slices (or one flat buffer) into the slot,
 * with the CRC32C computed on the way while the bytes are hot. Every other
 * field is copied unchanged into `rest`, which then unpacks (protobuf-c) as a
 * Batch without data. Should data come before batch_id (no serializer we know
 * does that), it goes into rest like any field. This is the scheduler's view
 * of an arrived Batch (sched.c): the transport makes one over a gRPC byte
 * buffer, a test over bytes it packed. Owned by one thread.
 */
typedef struct wire_batch_reader {
    bool grpc; /* reading rd's slices, else the one span in flat */
    grpc_byte_buffer_reader rd;
    grpc_slice slice; /* the slice cur points into, while have_slice */
    bool have_slice;
    const uint8_t *flat;
    size_t flat_len;
    const uint8_t *cur; /* the span being read: cur[off..cur_len) */
    size_t cur_len, off;
    feed_buf *rest;
    bool have_id;
    uint64_t id;      /* batch_id; 0 if the message has none */
    bool data_direct; /* data went to dst (or to enc) */
    size_t data_len;
    feed_buf *enc;     /* wire_batch_reader_finish_encoded's destination, else NULL */
    uint32_t data_crc; /* CRC32C of data, when data_direct */
} wire_batch_reader;

/* rest is emptied; 0 or FEED_EPROTO (unreadable buffer). bb must outlive r. */
int wire_batch_reader_init(wire_batch_reader *r, grpc_byte_buffer *bb, feed_buf *rest);
/* The same over len bytes at msg, which must outlive r. */
void wire_batch_reader_init_bytes(wire_batch_reader *r, const uint8_t *msg, size_t len,
                                  feed_buf *rest);
/* Reads up to and including batch_id. 0, FEED_EPROTO or FEED_ETOOBIG (rest's limit). */
int wire_batch_reader_id(wire_batch_reader *r);
/* Reads the rest; data of exactly dst_len bytes goes to dst, other sizes are FEED_EPROTO. */
int wire_batch_reader_finish(wire_batch_reader *r, uint8_t *dst, size_t dst_len);
/* The same for an encoded Batch (BatchRequest.encoded): data, of any length up to enc->limit,
 * goes to enc (emptied first; it grows to the data's length, never past its limit). 0,
 * FEED_EPROTO, FEED_ETOOBIG (data longer than enc->limit: nothing allocated for it) or
 * FEED_ENOMEM. */
int wire_batch_reader_finish_encoded(wire_batch_reader *r, feed_buf *enc);
void wire_batch_reader_destroy(wire_batch_reader *r);

/* Serialized BatchRequest as a grpc-ready byte buffer (grpc_byte_buffer *). */
typedef struct wire_open {
    const char *dataset;
    const feed_transform *transform;
    const char *augment; /* NULL: none */
    uint64_t seed; /* SessionOpen.seed: the augmentation seed */
    uint32_t window;
    const char *client_name;
    const char *job; /* SessionOpen.job; NULL: none */
    uint32_t job_weight;
    const char *share; /* SessionOpen.share; NULL: none */
} wire_open;
/* BatchRequest.demand (demand.h). */
typedef struct wire_demand {
    uint64_t loader;
    uint32_t window_ms;
    double wait_fraction, samples_per_second;
    uint32_t servers;
} wire_demand;
/* open may be NULL; n may be 0 only with open; ownership: BatchRequest.ownership (0: not
 * routed); encoded: BatchRequest.encoded (the samples' JPEG bytes, not pixels); demand NULL:
 * none. NULL when out of memory. */
void *wire_pack_request(const wire_open *open, uint64_t batch_id, uint32_t epoch,
                        const uint64_t *indices, uint32_t n, uint32_t ownership, bool encoded,
                        const wire_demand *demand);

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
 * reason in msg otherwise. data_crc: the data's CRC32C if already known, or
 * NULL to compute it here.
 */
int wire_check_batch(const Feed__V1__Batch *b, const wire_expect *e, const uint32_t *data_crc,
                     char *msg, size_t msg_cap);

/*
 * After wire_batch_reader_finish(r, dst, dst_len): unpacks the rest of the
 * message (r->rest) with arena a, puts the pixels in dst (already there, or
 * landed there by the unpack), and checks the Batch against e. *out points
 * into the arena until its next reset. 0, FEED_EPROTO (malformed or not what
 * was asked; msg says which) or FEED_ECORRUPT (CRC32C mismatch).
 */
int wire_unpack_batch(wire_arena *a, const wire_batch_reader *r, uint8_t *dst, size_t dst_len,
                      const wire_expect *e, Feed__V1__Batch **out, char *msg, size_t msg_cap);

/*
 * After wire_batch_reader_finish_encoded(r, enc): unpacks the rest with arena a and checks
 * the encoded Batch against e (ids, epoch, indices, counts, label range, statuses, no shape,
 * one encoded_length a sample, a failed sample with no bytes, the lengths adding up to the
 * data's, the CRC32C of the data). *out points into the arena until its next reset, its data
 * at enc. 0, FEED_EPROTO (msg says what) or FEED_ECORRUPT (CRC32C mismatch).
 */
int wire_unpack_encoded(wire_arena *a, const wire_batch_reader *r, const feed_buf *enc,
                        const wire_expect *e, Feed__V1__Batch **out, char *msg, size_t msg_cap);

#endif
