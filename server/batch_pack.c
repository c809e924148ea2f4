/*
 * A finished job as a feed.v1.Batch message (service_internal.h's
 * feedd_batch_pack). The pixel bytes are not copied: they go to gRPC as a
 * slice over the buffer the workers wrote, whose destructor gives the memory
 * back to the caps (memory.h). Runs on whichever thread starts the send (a
 * completion-queue thread or a pool worker), under the stream's lock; it
 * touches only the job it is given.
 */
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "feed.pb-c.h"
#include "feed/log.h"
#include "service_internal.h"

typedef struct slice_sink {
    ProtobufCBuffer base;
    const uint8_t *pixels;
    size_t pixels_len;
    feedd_mem_buf *mem;
    grpc_slice meta; /* everything but the pixels, written in order */
    size_t meta_len, meta_cut;
    grpc_slice out[4];
    size_t n_out;
    bool overflow;
} slice_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    slice_sink *k = (slice_sink *)b;
    if (data == k->pixels && len == k->pixels_len && k->mem && k->n_out + 2 <= 4) {
        if (k->meta_len > k->meta_cut)
            k->out[k->n_out++] = grpc_slice_sub(k->meta, k->meta_cut, k->meta_len);
        k->meta_cut = k->meta_len;
        k->out[k->n_out++] =
            grpc_slice_new_with_user_data(k->mem->data, len, feedd_memory_buf_free, k->mem);
        k->mem = NULL; /* owned by the slice now */
        return;
    }
    if (len > GRPC_SLICE_LENGTH(k->meta) - k->meta_len) {
        k->overflow = true;
        return;
    }
    memcpy(GRPC_SLICE_START_PTR(k->meta) + k->meta_len, data, len);
    k->meta_len += len;
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
    m.height = h;
    m.width = w;
    m.channels = 3;
    m.dtype = FEED__V1__DTYPE__DTYPE_UINT8;
    m.layout = FEED__V1__LAYOUT__LAYOUT_NHWC;
    m.data.len = bj->mem->bytes;
    m.data.data = bj->mem->data;
    m.crc32c = bj->crc;
    m.server_busy_ns = atomic_load(&bj->job.busy_ns);

    size_t total = feed__v1__batch__get_packed_size(&m);
    slice_sink k = {.base = {sink_append},
                    .pixels = bj->mem->data,
                    .pixels_len = bj->mem->bytes,
                    .mem = bj->mem};
    k.meta = grpc_slice_malloc(total - bj->mem->bytes);
    bj->mem = NULL;
    feed__v1__batch__pack_to_buffer(&m, &k.base);
    if (k.meta_len > k.meta_cut)
        k.out[k.n_out++] = grpc_slice_sub(k.meta, k.meta_cut, k.meta_len);
    if (!k.overflow && !k.mem)
        bb = grpc_raw_byte_buffer_create(k.out, k.n_out);
    else
        FEED_LOGE("stream %s: packing batch %llu failed", peer, (unsigned long long)bj->batch_id);
    if (k.mem)
        feedd_memory_buf_free(k.mem);
    for (size_t i = 0; i < k.n_out; i++)
        grpc_slice_unref(k.out[i]);
    grpc_slice_unref(k.meta);
out:
    free(st);
    free(errs);
    free(errp);
    return bb;
}
