/*
 * A finished job as a feed.v1.Batch message (service_int.h's
 * feedd_batch_pack). The pixel bytes are not copied: the message is packed
 * without them and the data field's key and length are written here, so the
 * pixels go to gRPC as a slice over the buffer the workers wrote, whose
 * destructor gives the memory back to the caps (memory.h). The client's
 * reader (client/src/net/wire.c) takes that field straight into its slot.
 *
 * Runs on whichever thread starts the send (a completion-queue thread or a
 * pool worker), under the stream's lock; it touches only the job it is given.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "feed.pb-c.h"
#include "feed/log.h"
#include "service_int.h"

/* Batch.data: field 12, length-delimited (proto/feed.proto). */
#define DATA_KEY ((12u << 3) | 2u)
#define VARINT_MAX 10

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/* A slice with m packed into it, then extra (len bytes) after it. */
static grpc_slice pack_slice(const Feed__V1__Batch *m, const uint8_t *extra, size_t len)
{
    size_t n = feed__v1__batch__get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n + len);
    feed__v1__batch__pack(m, GRPC_SLICE_START_PTR(s));
    if (len)
        memcpy(GRPC_SLICE_START_PTR(s) + n, extra, len);
    return s;
}

grpc_byte_buffer *feedd_batch_pack(batch_job *bj, uint32_t h, uint32_t w, const char *peer)
{
    grpc_byte_buffer *bb = NULL;
    uint32_t n = bj->job.n;
    Feed__V1__SampleStatus *st = malloc(n * sizeof *st);
    Feed__V1__SampleError *errs = NULL, **errp = NULL;
    uint32_t n_err = 0;
    if (!st)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        st[i] = (Feed__V1__SampleStatus)bj->status[i];
        n_err += bj->status[i] != FEED_SAMPLE_OK;
    }
    if (n_err) {
        errs = calloc(n_err, sizeof *errs);
        errp = calloc(n_err, sizeof *errp);
        if (!errs || !errp)
            goto out;
        for (uint32_t i = 0, e = 0; i < n; i++) {
            if (bj->status[i] == FEED_SAMPLE_OK)
                continue;
            feed__v1__sample_error__init(&errs[e]);
            errs[e].position = i;
            errs[e].index = bj->indices[i];
            errs[e].status = st[i];
            errs[e].message = bj->errors[i];
            errp[e] = &errs[e];
            e++;
        }
    }
    Feed__V1__Batch m = FEED__V1__BATCH__INIT;
    m.batch_id = bj->batch_id;
    m.epoch = bj->job.epoch;
    m.n_indices = n;
    m.indices = bj->indices;
    m.n_labels = n;
    m.labels = bj->labels;
    m.n_status = n;
    m.status = st;
    m.n_errors = n_err;
    m.errors = errp;
    bool encoded = bj->enc_off != NULL;
    if (!encoded) {
        m.height = h;
        m.width = w;
        m.channels = 3;
        m.dtype = FEED__V1__DTYPE__DTYPE_UINT8;
        m.layout = FEED__V1__LAYOUT__LAYOUT_NHWC;
    }
    /*
     * protobuf-c writes fields in number order, so the message is the fields
     * before data (1-11), data's key, length and bytes, then the fields after
     * it (13-15), each part packed on its own: the same bytes as packing the
     * whole Batch, with the pixels a slice of their own. Like protobuf-c,
     * empty data (proto3) is left out. An encoded batch's data is the first
     * data_len bytes of its buffer; the slice frees the whole buffer.
     */
    Feed__V1__Batch after = FEED__V1__BATCH__INIT;
    after.crc32c = bj->crc;
    after.server_busy_ns = atomic_load(&bj->job.busy_ns);
    if (encoded) {
        after.n_encoded_lengths = n;
        after.encoded_lengths = bj->enc_len;
    }
    feedd_mem_buf *mem = bj->mem;
    bj->mem = NULL;
    size_t data_len = encoded ? bj->job.data_len : mem->bytes;
    uint8_t prefix[2 * VARINT_MAX];
    size_t prefix_len = 0;
    if (data_len) {
        prefix_len = put_varint(prefix, DATA_KEY);
        prefix_len += put_varint(prefix + prefix_len, data_len);
    }
    grpc_slice parts[3];
    size_t n_parts = 0;
    parts[n_parts++] = pack_slice(&m, prefix, prefix_len);
    if (data_len)
        parts[n_parts++] =
            grpc_slice_new_with_user_data(mem->data, data_len, feedd_memory_buf_free, mem);
    else
        feedd_memory_buf_free(mem);
    if (feed__v1__batch__get_packed_size(&after))
        parts[n_parts++] = pack_slice(&after, NULL, 0);
    bb = grpc_raw_byte_buffer_create(parts, n_parts);
    for (size_t i = 0; i < n_parts; i++)
        grpc_slice_unref(parts[i]);
out:
    if (!bb)
        FEED_LOGE("stream %s: packing batch %llu failed", peer, (unsigned long long)bj->batch_id);
    free(st);
    free(errs);
    free(errp);
    return bb;
}
