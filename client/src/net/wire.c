/*
 * feed.v1 message handling for the client (see wire.h). Everything sized by
 * the wire is checked against what was asked for before it is trusted.
 */
#include "wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Makes the current span non-empty; false at the end of the message. */
static bool rd_fill(wire_batch_reader *r)
{
    while (r->off == r->cur_len) {
        if (r->have_slice) {
            grpc_slice_unref(r->slice);
            r->have_slice = false;
        }
        if (!r->grpc) {
            if (!r->flat)
                return false;
            r->cur = r->flat;
            r->cur_len = r->flat_len;
            r->flat = NULL;
        } else {
            if (!grpc_byte_buffer_reader_next(&r->rd, &r->slice))
                return false;
            r->have_slice = true;
            r->cur = GRPC_SLICE_START_PTR(r->slice);
            r->cur_len = GRPC_SLICE_LENGTH(r->slice);
        }
        r->off = 0;
    }
    return true;
}

/* n bytes: to dst (with *crc updated) and/or appended to echo. */
static int rd_bytes(wire_batch_reader *r, uint64_t n, uint8_t *dst, feed_buf *echo, uint32_t *crc)
{
    while (n) {
        if (!rd_fill(r))
            return FEED_EPROTO;
        size_t avail = r->cur_len - r->off;
        size_t k = n < avail ? (size_t)n : avail;
        const uint8_t *p = r->cur + r->off;
        if (dst) {
            memcpy(dst, p, k);
            *crc = feed_crc32c(*crc, dst, k);
            dst += k;
        }
        if (echo && feed_buf_append(echo, p, k))
            return FEED_ETOOBIG;
        r->off += k;
        n -= k;
    }
    return 0;
}

static int rd_varint(wire_batch_reader *r, uint64_t *v, feed_buf *echo)
{
    uint64_t x = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (!rd_fill(r))
            return FEED_EPROTO;
        uint8_t byte = r->cur[r->off++];
        if (echo && feed_buf_append(echo, &byte, 1))
            return FEED_ETOOBIG;
        x |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return FEED_EPROTO;
}

/* One top-level field; data (12) goes to dst once batch_id is known and dst is given. */
static int rd_field(wire_batch_reader *r, uint8_t *dst, size_t dst_len)
{
    uint64_t key, v;
    size_t mark = r->rest->len;
    int rc = rd_varint(r, &key, r->rest);
    if (rc)
        return rc;
    uint64_t field = key >> 3;
    switch (key & 7) {
    case 0:
        rc = rd_varint(r, &v, r->rest);
        if (!rc && field == 1) {
            r->have_id = true;
            r->id = v;
        }
        return rc;
    case 1:
        return rd_bytes(r, 8, NULL, r->rest, NULL);
    case 2:
        if (field == 12 && r->have_id && r->enc) {
            r->rest->len = mark;
            rc = rd_varint(r, &v, NULL);
            if (rc)
                return rc;
            if (r->data_direct)
                return FEED_EPROTO;
            if (v > r->enc->limit)
                return FEED_ETOOBIG;
            rc = feed_buf_reserve(r->enc, (size_t)v);
            if (rc)
                return rc;
            r->data_direct = true;
            r->data_len = (size_t)v;
            r->data_crc = 0;
            r->enc->len = (size_t)v;
            return rd_bytes(r, v, r->enc->data, NULL, &r->data_crc);
        }
        if (field == 12 && r->have_id && dst) {
            r->rest->len = mark; /* the key goes with the data, not into rest */
            rc = rd_varint(r, &v, NULL);
            if (rc)
                return rc;
            if (r->data_direct || v != dst_len)
                return FEED_EPROTO;
            r->data_direct = true;
            r->data_len = dst_len;
            r->data_crc = 0;
            return rd_bytes(r, v, dst, NULL, &r->data_crc);
        }
        rc = rd_varint(r, &v, r->rest);
        if (rc)
            return rc;
        if (v > r->rest->limit)
            return FEED_ETOOBIG;
        return rd_bytes(r, v, NULL, r->rest, NULL);
    case 5:
        return rd_bytes(r, 4, NULL, r->rest, NULL);
    default:
        return FEED_EPROTO;
    }
}

int wire_batch_reader_init(wire_batch_reader *r, grpc_byte_buffer *bb, feed_buf *rest)
{
    memset(r, 0, sizeof(*r));
    r->rest = rest;
    rest->len = 0;
    r->grpc = grpc_byte_buffer_reader_init(&r->rd, bb) != 0;
    return r->grpc ? 0 : FEED_EPROTO;
}

void wire_batch_reader_init_bytes(wire_batch_reader *r, const uint8_t *msg, size_t len,
                                  feed_buf *rest)
{
    memset(r, 0, sizeof(*r));
    r->rest = rest;
    rest->len = 0;
    r->flat = len ? msg : NULL;
    r->flat_len = len;
}

int wire_batch_reader_id(wire_batch_reader *r)
{
    while (!r->have_id && rd_fill(r)) {
        int rc = rd_field(r, NULL, 0);
        if (rc)
            return rc;
    }
    return 0;
}

int wire_batch_reader_finish(wire_batch_reader *r, uint8_t *dst, size_t dst_len)
{
    while (rd_fill(r)) {
        int rc = rd_field(r, dst, dst_len);
        if (rc)
            return rc;
    }
    return 0;
}

int wire_batch_reader_finish_encoded(wire_batch_reader *r, feed_buf *enc)
{
    enc->len = 0;
    r->enc = enc;
    return wire_batch_reader_finish(r, NULL, 0);
}

void wire_batch_reader_destroy(wire_batch_reader *r)
{
    if (r->have_slice)
        grpc_slice_unref(r->slice);
    r->have_slice = false;
    if (r->grpc)
        grpc_byte_buffer_reader_destroy(&r->rd);
    r->grpc = false;
}

void *wire_pack_request(const wire_open *open, uint64_t batch_id, uint32_t epoch,
                        const uint64_t *indices, uint32_t n, uint32_t ownership, bool encoded,
                        const wire_demand *demand)
{
    Feed__V1__BatchRequest req = FEED__V1__BATCH_REQUEST__INIT;
    Feed__V1__Demand dm = FEED__V1__DEMAND__INIT;
    if (demand) {
        dm.loader = demand->loader;
        dm.window_ms = demand->window_ms;
        dm.wait_fraction = demand->wait_fraction;
        dm.samples_per_second = demand->samples_per_second;
        dm.servers = demand->servers;
        req.demand = &dm;
    }
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
        if (open->augment)
            ts.augment = (char *)open->augment;
        so.dataset = (char *)open->dataset;
        so.transform = &ts;
        so.seed = open->seed;
        so.window = open->window;
        so.protocol_version = FEED__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
        so.client_name = (char *)open->client_name;
        so.job = (char *)(open->job ? open->job : "");
        so.job_weight = open->job_weight;
        so.share = (char *)(open->share ? open->share : "");
        req.open = &so;
    }
    req.batch_id = batch_id;
    req.epoch = epoch;
    req.n_indices = n;
    req.indices = (uint64_t *)indices;
    req.ownership = (Feed__V1__CacheOwnership)ownership;
    req.encoded = encoded;

    size_t size = feed__v1__batch_request__get_packed_size(&req);
    grpc_slice s = grpc_slice_malloc(size);
    feed__v1__batch_request__pack(&req, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* What a Batch of either kind must match first: its ids and its counts (encoded: one length a
 * sample too). NULL when it does. */
static const char *check_head(const Feed__V1__Batch *b, const wire_expect *e, bool encoded)
{
    if (b->batch_id != e->batch_id)
        return "batch_id";
    if (b->epoch != e->epoch)
        return "epoch";
    if (b->n_indices != e->n || b->n_labels != e->n || b->n_status != e->n || b->n_errors > e->n ||
        (encoded && b->n_encoded_lengths != e->n))
        return "sample count";
    return NULL;
}

/* Each sample's index, label and status (encoded: no bytes for a failed one). */
static const char *check_each(const Feed__V1__Batch *b, const wire_expect *e, bool encoded)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (b->indices[i] != e->indices[i])
            return "indices";
        if (e->num_classes && b->labels[i] >= e->num_classes)
            return "label range";
        if ((unsigned)b->status[i] >= FEED_SAMPLE_STATUS_COUNT)
            return "sample status";
        if (encoded && b->status[i] != FEED__V1__SAMPLE_STATUS__SAMPLE_OK && b->encoded_lengths[i])
            return "bytes of a failed sample";
    }
    return NULL;
}

int wire_check_batch(const Feed__V1__Batch *b, const wire_expect *e, const uint32_t *data_crc,
                     char *msg, size_t msg_cap)
{
    const char *why = check_head(b, e, false);
    if (!why && (b->height != e->h || b->width != e->w || b->channels != 3))
        why = "shape";
    else if (!why &&
             (b->dtype != FEED__V1__DTYPE__DTYPE_UINT8 || b->layout != FEED__V1__LAYOUT__LAYOUT_NHWC))
        why = "dtype/layout";
    else if (!why && b->data.len != (size_t)e->n * e->h * e->w * 3)
        why = "data size";
    if (!why)
        why = check_each(b, e, false);
    if (why) {
        snprintf(msg, msg_cap, "batch %llu: unexpected %s", (unsigned long long)e->batch_id, why);
        return FEED_EPROTO;
    }
    uint32_t crc = data_crc ? *data_crc : feed_crc32c(0, b->data.data, b->data.len);
    if (crc != b->crc32c) {
        snprintf(msg, msg_cap, "batch %llu: CRC32C mismatch", (unsigned long long)e->batch_id);
        return FEED_ECORRUPT;
    }
    return 0;
}

int wire_unpack_batch(wire_arena *a, const wire_batch_reader *r, uint8_t *dst, size_t dst_len,
                      const wire_expect *e, Feed__V1__Batch **out, char *msg, size_t msg_cap)
{
    *out = NULL;
    wire_arena_reset(a, r->data_direct ? NULL : dst, dst_len);
    Feed__V1__Batch *b = feed__v1__batch__unpack(&a->pa, r->rest->len, r->rest->data);
    if (!b) {
        snprintf(msg, msg_cap, "batch %llu: malformed Batch", (unsigned long long)e->batch_id);
        return FEED_EPROTO;
    }
    if (r->data_direct) {
        b->data.data = dst;
        b->data.len = r->data_len;
    } else if (a->target_taken && b->data.data != dst) {
        /* dst went to another field of the pixels' size: a hostile message;
         * reading on would alias that field with the pixels. */
        snprintf(msg, msg_cap, "batch %llu: malformed Batch", (unsigned long long)e->batch_id);
        return FEED_EPROTO;
    }
    int rc = wire_check_batch(b, e, r->data_direct ? &r->data_crc : NULL, msg, msg_cap);
    if (rc)
        return rc;
    if (b->data.data != dst)
        memcpy(dst, b->data.data, dst_len);
    *out = b;
    return 0;
}

/* The checks of an encoded Batch that wire_check_batch makes of a pixel one, where they differ:
 * no shape, and one length a sample that add up to the data's. */
static const char *check_encoded(const Feed__V1__Batch *b, const wire_expect *e)
{
    const char *why = check_head(b, e, true);
    if (!why && (b->height || b->width || b->channels))
        why = "shape (an encoded batch has none)";
    if (!why)
        why = check_each(b, e, true);
    uint64_t sum = 0;
    for (uint32_t i = 0; !why && i < e->n; i++)
        sum += b->encoded_lengths[i];
    if (!why && sum != b->data.len)
        why = "encoded lengths (they do not add up to the data)";
    return why;
}

int wire_unpack_encoded(wire_arena *a, const wire_batch_reader *r, const feed_buf *enc,
                        const wire_expect *e, Feed__V1__Batch **out, char *msg, size_t msg_cap)
{
    *out = NULL;
    wire_arena_reset(a, NULL, 0);
    Feed__V1__Batch *b = feed__v1__batch__unpack(&a->pa, r->rest->len, r->rest->data);
    if (!b) {
        snprintf(msg, msg_cap, "batch %llu: malformed Batch", (unsigned long long)e->batch_id);
        return FEED_EPROTO;
    }
    /* No data field at all: an empty batch (every sample failed), CRC32C of nothing. Data
     * before batch_id (no serializer we know writes that) is not read into enc: refused. */
    const char *why = NULL;
    if (r->data_direct) {
        b->data.data = enc->data;
        b->data.len = r->data_len;
    } else if (b->data.len) {
        why = "data before batch_id";
    }
    if (!why)
        why = check_encoded(b, e);
    if (why) {
        snprintf(msg, msg_cap, "batch %llu: unexpected %s", (unsigned long long)e->batch_id, why);
        return FEED_EPROTO;
    }
    uint32_t crc = r->data_direct ? r->data_crc : 0;
    if (crc != b->crc32c) {
        snprintf(msg, msg_cap, "batch %llu: CRC32C mismatch", (unsigned long long)e->batch_id);
        return FEED_ECORRUPT;
    }
    *out = b;
    return 0;
}
