/*
 * Fuzz target: the client's reading of a Batch (client/src/net/wire.h), which
 * is what a server, or anything posing as one, sends. The steps are those of
 * a receiver (conn.c's receive_batch: sched_batch_arrived, then sched_land in
 * client/src/sched/sched.c), minus the locking: read up to
 * batch_id from the byte buffer's slices, read the rest with the pixels going
 * straight into the slot, unpack what is left into the bump arena (whose
 * target is the slot when the pixels did not go there), check it against the
 * request, then read labels and status as land() does. The first input byte
 * sets the slice size (1..256 bytes), so field boundaries fall across slices;
 * the rest is the message. The request: 2 samples of 8x8, epoch 3, indices
 * 5 and 9, 10 classes; batch_id is whatever the message says.
 */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/slice.h>

#include "feed/crc32c.h"
#include "feed/errors.h"
#include "fuzz.h"
#include "wire.h"

#define N 2
#define SIDE 8
#define RAW_BYTES (N * SIDE * SIDE * 3)
#define MAX_SLICES 4096
#define MAX_MESSAGE (4u << 20)

static const uint64_t indices[N] = {5, 9};
static feed_buf rest;
static wire_arena arena;
static int ready;

/* The fuzz bytes as gRPC would hand them over: a byte buffer of several slices. */
static grpc_byte_buffer *make_buffer(const uint8_t *data, size_t size, size_t chunk)
{
    static grpc_slice slices[MAX_SLICES];
    size_t n = 0;
    if (size / chunk >= MAX_SLICES)
        chunk = size / (MAX_SLICES - 1) + 1;
    for (size_t off = 0; off < size; off += chunk) {
        size_t k = size - off < chunk ? size - off : chunk;
        slices[n++] = grpc_slice_from_copied_buffer((const char *)data + off, k);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(slices, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(slices[i]);
    return bb;
}

/* The receive path's reading and checking of one Batch; 0 when it would be landed. */
static int read_batch(grpc_byte_buffer *bb, uint8_t *raw)
{
    wire_batch_reader r;
    char why[160];
    if (wire_batch_reader_init(&r, bb, &rest))
        return FEED_EPROTO;
    int rc = wire_batch_reader_id(&r);
    wire_expect e = {.batch_id = r.id,
                     .epoch = 3,
                     .indices = indices,
                     .n = N,
                     .h = SIDE,
                     .w = SIDE,
                     .num_classes = 10};
    if (rc == 0)
        rc = wire_batch_reader_finish(&r, raw, RAW_BYTES);
    if (rc == 0) {
        Feed__V1__Batch *b;
        rc = wire_unpack_batch(&arena, &r, raw, RAW_BYTES, &e, &b, why, sizeof why);
        /* What land() then trusts. */
        for (uint32_t i = 0; rc == 0 && i < N; i++)
            if (b->labels[i] >= 10 || (unsigned)b->status[i] >= FEED_SAMPLE_STATUS_COUNT ||
                b->indices[i] != indices[i])
                abort();
        if (rc == 0 && feed_crc32c(0, raw, RAW_BYTES) != b->crc32c)
            abort();
    }
    wire_batch_reader_destroy(&r);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t raw[RAW_BYTES];
    if (!ready) {
        grpc_init();
        feed_buf_init(&rest, MAX_MESSAGE);
        if (wire_arena_init(&arena, 65536 + N * 1024) != 0)
            abort();
        ready = 1;
    }
    if (size == 0)
        return 0;
    grpc_byte_buffer *bb = make_buffer(data + 1, size - 1, (size_t)data[0] + 1);
    if (!bb)
        abort();
    int rc = read_batch(bb, raw);
    if (rc != 0 && rc != FEED_EPROTO && rc != FEED_ECORRUPT && rc != FEED_ETOOBIG)
        abort();
    grpc_byte_buffer_destroy(bb);
    return 0;
}
