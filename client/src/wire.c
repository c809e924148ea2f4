/*
 * feed.v1 message handling for the client (see wire.h). Everything sized by
 * the wire is checked against what was asked for before it is trusted.
 */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/slice.h>

#include "feed/crc32c.h"
#include "feed/errors.h"

static void *arena_alloc(void *data, size_t size)
{
    wire_arena *a = data;
    if (a->target && !a->target_taken && size == a->target_size) {
        a->target_taken = 1;
        return a->target;
    }
    size_t need = (size + 15) & ~(size_t)15;
    if (need < size || need > a->cap - a->used)
        return NULL;
    void *p = a->block + a->used;
    a->used += need;
    return p;
}

static void arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

int wire_arena_init(wire_arena *a, size_t cap)
{
    memset(a, 0, sizeof(*a));
    a->block = malloc(cap);
    if (!a->block)
        return FEED_ENOMEM;
    a->cap = cap;
    a->pa.alloc = arena_alloc;
    a->pa.free = arena_free;
    a->pa.allocator_data = a;
    return 0;
}

void wire_arena_free(wire_arena *a)
{
    free(a->block);
    a->block = NULL;
}

void wire_arena_reset(wire_arena *a, void *target, size_t target_size)
{
    a->used = 0;
    a->target = target;
    a->target_size = target_size;
    a->target_taken = 0;
}

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p == end)
            return FEED_EPROTO;
        uint8_t byte = *(*p)++;
        x |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return FEED_EPROTO;
}

int wire_peek_batch_id(const uint8_t *p, size_t len, uint64_t *id)
{
    const uint8_t *end = p + len;
    *id = 0;
    while (p < end) {
        uint64_t key, v;
        if (read_varint(&p, end, &key))
            return FEED_EPROTO;
        uint64_t field = key >> 3;
        switch (key & 7) {
        case 0:
            if (read_varint(&p, end, &v))
                return FEED_EPROTO;
            if (field == 1) {
                *id = v;
                return 0;
            }
            break;
        case 1:
            if ((size_t)(end - p) < 8)
                return FEED_EPROTO;
            p += 8;
            break;
        case 2:
            if (read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return FEED_EPROTO;
            p += v;
            break;
        case 5:
            if ((size_t)(end - p) < 4)
                return FEED_EPROTO;
            p += 4;
            break;
        default:
            return FEED_EPROTO;
        }
    }
    return FEED_EPROTO;
}

void *wire_pack_request(const wire_open *open, uint64_t batch_id, uint32_t epoch,
                        const uint64_t *indices, uint32_t n)
{
    Feed__V1__BatchRequest req = FEED__V1__BATCH_REQUEST__INIT;
    Feed__V1__SessionOpen so = FEED__V1__SESSION_OPEN__INIT;
    Feed__V1__TransformSpec ts = FEED__V1__TRANSFORM_SPEC__INIT;
    if (open) {
        const feed_transform *t = open->transform;
        ts.mode = t->mode == FEED_TRANSFORM_EVAL ? FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_EVAL
                                                 : FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
        ts.out_height = t->out_h;
        ts.out_width = t->out_w;
        ts.scale_min = t->scale_min;
        ts.scale_max = t->scale_max;
        ts.ratio_min = t->ratio_min;
        ts.ratio_max = t->ratio_max;
        ts.flip_prob = t->flip_prob;
        ts.resize_size = t->resize_size;
        so.dataset = (char *)open->dataset;
        so.transform = &ts;
        so.seed = open->seed;
        so.window = open->window;
        so.protocol_version = FEED__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
        so.client_name = (char *)open->client_name;
        req.open = &so;
    }
    req.batch_id = batch_id;
    req.epoch = epoch;
    req.n_indices = n;
    req.indices = (uint64_t *)indices;

    size_t size = feed__v1__batch_request__get_packed_size(&req);
    grpc_slice s = grpc_slice_malloc(size);
    feed__v1__batch_request__pack(&req, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

int wire_check_batch(const Feed__V1__Batch *b, const wire_expect *e, char *msg, size_t msg_cap)
{
    const char *why = NULL;
    if (b->batch_id != e->batch_id)
        why = "batch_id";
    else if (b->epoch != e->epoch)
        why = "epoch";
    else if (b->n_indices != e->n || b->n_labels != e->n || b->n_status != e->n)
        why = "sample count";
    else if (b->height != e->h || b->width != e->w || b->channels != 3)
        why = "shape";
    else if (b->dtype != FEED__V1__DTYPE__DTYPE_UINT8 || b->layout != FEED__V1__LAYOUT__LAYOUT_NHWC)
        why = "dtype/layout";
    else if (b->data.len != (size_t)e->n * e->h * e->w * 3)
        why = "data size";
    for (uint32_t i = 0; !why && i < e->n; i++) {
        if (b->indices[i] != e->indices[i])
            why = "indices";
        else if (e->num_classes && b->labels[i] >= e->num_classes)
            why = "label range";
        else if ((unsigned)b->status[i] >= FEED_SAMPLE_STATUS_COUNT)
            why = "sample status";
    }
    if (why) {
        snprintf(msg, msg_cap, "batch %llu: unexpected %s", (unsigned long long)e->batch_id, why);
        return FEED_EPROTO;
    }
    if (feed_crc32c(0, b->data.data, b->data.len) != b->crc32c) {
        snprintf(msg, msg_cap, "batch %llu: CRC32C mismatch", (unsigned long long)e->batch_id);
        return FEED_ECORRUPT;
    }
    return 0;
}
