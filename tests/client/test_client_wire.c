/*
 * The client's Batch reader and checks (client/src/net/wire.c), no sockets: the
 * reader over gRPC slices and over one flat span (pixels straight into the
 * slot, any slicing, truncations, fields out of order), the Batch checks
 * against what was asked, and the bump allocator; the BatchRequest that opens a stream carries
 * what the loader opens it with (the augmentation seed, job, share); an encoded Batch (the
 * decode lane's) read into a capped buffer and checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <grpc/grpc.h>

#include "feed.pb-c.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/transform.h"
#include "wire.h"

/* A packed Batch for batch_id/indices with n samples of h x w. */
static uint8_t *pack_batch(uint64_t id, const uint64_t *idx, uint32_t n, uint32_t h, uint32_t w,
                           uint8_t fill, int corrupt_crc, size_t *len)
{
    Feed__V1__Batch b = FEED__V1__BATCH__INIT;
    size_t bytes = (size_t)n * h * w * 3;
    uint8_t *px = malloc(bytes);
    uint32_t labels[8];
    Feed__V1__SampleStatus st[8];
    assert_true(n <= 8);
    memset(px, fill, bytes);
    for (uint32_t i = 0; i < n; i++) {
        labels[i] = i;
        st[i] = FEED__V1__SAMPLE_STATUS__SAMPLE_OK;
    }
    b.batch_id = id;
    b.epoch = 2;
    b.n_indices = n;
    b.indices = (uint64_t *)idx;
    b.n_labels = n;
    b.labels = labels;
    b.n_status = n;
    b.status = st;
    b.height = h;
    b.width = w;
    b.channels = 3;
    b.data.len = bytes;
    b.data.data = px;
    b.crc32c = feed_crc32c(0, px, bytes) ^ (corrupt_crc ? 1u : 0u);
    *len = feed__v1__batch__get_packed_size(&b);
    uint8_t *buf = malloc(*len);
    feed__v1__batch__pack(&b, buf);
    free(px);
    return buf;
}

/* The packed message cut into slices of `piece` bytes, as gRPC would hand it over. */
static grpc_byte_buffer *sliced(const uint8_t *msg, size_t len, size_t piece)
{
    grpc_slice sl[4096];
    size_t n = 0;
    for (size_t off = 0; off < len; off += piece) {
        size_t k = len - off < piece ? len - off : piece;
        assert_true(n < 4096);
        sl[n++] = grpc_slice_from_copied_buffer((const char *)msg + off, k);
    }
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, n);
    for (size_t i = 0; i < n; i++)
        grpc_slice_unref(sl[i]);
    return bb;
}

/* Reads a whole Batch through an initialised reader into dst, then destroys the reader: the
 * first error, or 0. */
static int read_through(wire_batch_reader *r, uint8_t *dst, size_t dst_len)
{
    int rc = wire_batch_reader_id(r);
    if (rc == 0)
        rc = wire_batch_reader_finish(r, dst, dst_len);
    wire_batch_reader_destroy(r);
    return rc;
}

static void test_wire_batch(void **state)
{
    (void)state;
    grpc_init();
    const uint64_t idx[3] = {5, 9, 1};
    const size_t raw = 3 * 4 * 6 * 3;
    size_t len;
    uint8_t *msg = pack_batch(0x123456789ull, idx, 3, 4, 6, 0x5A, 0, &len);
    wire_arena a;
    feed_buf rest;
    feed_buf_init(&rest, 1 << 20);
    assert_int_equal(wire_arena_init(&a, 65536), 0);
    uint8_t *dst = calloc(1, raw);
    wire_expect e = {.batch_id = 0x123456789ull,
                     .epoch = 2,
                     .indices = idx,
                     .n = 3,
                     .h = 4,
                     .w = 6,
                     .num_classes = 10};
    char why[128];
    /* Any slicing: batch_id found, pixels straight into dst with their CRC, rest unpacks. */
    const size_t pieces[] = {1, 2, 3, 7, 64, 100000};
    for (size_t pi = 0; pi < sizeof pieces / sizeof pieces[0]; pi++) {
        grpc_byte_buffer *bb = sliced(msg, len, pieces[pi]);
        wire_batch_reader r;
        memset(dst, 0, raw);
        assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
        assert_int_equal(wire_batch_reader_id(&r), 0);
        assert_int_equal(r.id, 0x123456789ull);
        assert_int_equal(wire_batch_reader_finish(&r, dst, raw), 0);
        assert_true(r.data_direct);
        assert_int_equal(r.data_crc, feed_crc32c(0, dst, raw));
        assert_int_equal(dst[0], 0x5A);
        assert_int_equal(dst[raw - 1], 0x5A);
        assert_true(rest.len < len - raw + 1);
        wire_arena_reset(&a, NULL, 0);
        Feed__V1__Batch *b = feed__v1__batch__unpack(&a.pa, rest.len, rest.data);
        assert_non_null(b);
        assert_int_equal(b->data.len, 0);
        b->data.data = dst;
        b->data.len = r.data_len;
        assert_int_equal(wire_check_batch(b, &e, &r.data_crc, why, sizeof why), 0);
        wire_batch_reader_destroy(&r);
        grpc_byte_buffer_destroy(bb);
    }
    /* The same message as one flat span (the scheduler's tests hand Batches over this way). */
    wire_batch_reader r;
    memset(dst, 0, raw);
    wire_batch_reader_init_bytes(&r, msg, len, &rest);
    assert_int_equal(wire_batch_reader_id(&r), 0);
    assert_int_equal(r.id, 0x123456789ull);
    assert_int_equal(wire_batch_reader_finish(&r, dst, raw), 0);
    assert_true(r.data_direct);
    assert_int_equal(r.data_crc, feed_crc32c(0, dst, raw));
    assert_int_equal(dst[raw - 1], 0x5A);
    wire_batch_reader_destroy(&r);
    /* Wrong data size for the slot, and every truncation, fail cleanly. */
    grpc_byte_buffer *bb = sliced(msg, len, 5);
    assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
    assert_int_equal(wire_batch_reader_id(&r), 0);
    assert_int_equal(wire_batch_reader_finish(&r, dst, raw - 1), FEED_EPROTO);
    wire_batch_reader_destroy(&r);
    grpc_byte_buffer_destroy(bb);
    for (size_t cut = 1; cut < len; cut += 37) {
        /* Never reads past the end (ASan build); a cut inside the pixels is an error, the same
         * over slices and over one span. */
        bb = sliced(msg, len - cut, 11);
        assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
        int rc = read_through(&r, dst, raw);
        grpc_byte_buffer_destroy(bb);
        wire_batch_reader_init_bytes(&r, msg, len - cut, &rest);
        assert_int_equal(read_through(&r, dst, raw), rc);
        if (len - cut < raw)
            assert_int_equal(rc, FEED_EPROTO);
    }
    const uint8_t garbage[] = {0x0F, 0xFF};
    bb = sliced(garbage, sizeof garbage, 1);
    assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
    assert_int_equal(wire_batch_reader_id(&r), FEED_EPROTO);
    wire_batch_reader_destroy(&r);
    grpc_byte_buffer_destroy(bb);
    free(msg);

    /* batch_id after the data (legal protobuf): data stays in rest, unpack lands it in dst. */
    uint8_t *noid = pack_batch(0, idx, 3, 4, 6, 0x33, 0, &len);
    uint8_t *late = malloc(len + 2);
    memcpy(late, noid, len);
    late[len] = 0x08; /* field 1, varint */
    late[len + 1] = 0x07;
    bb = sliced(late, len + 2, 9);
    assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
    assert_int_equal(wire_batch_reader_id(&r), 0);
    assert_int_equal(r.id, 7);
    assert_int_equal(wire_batch_reader_finish(&r, dst, raw), 0);
    assert_false(r.data_direct);
    memset(dst, 0, raw);
    wire_arena_reset(&a, dst, raw);
    Feed__V1__Batch *b = feed__v1__batch__unpack(&a.pa, rest.len, rest.data);
    assert_non_null(b);
    assert_ptr_equal(b->data.data, dst);
    assert_int_equal(dst[0], 0x33);
    e.batch_id = 7;
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), 0);
    e.h = 5;
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), FEED_EPROTO);
    e.h = 4;
    const uint64_t other[3] = {5, 9, 2};
    e.indices = other;
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), FEED_EPROTO);
    assert_non_null(strstr(why, "indices"));
    e.indices = idx;
    e.num_classes = 2; /* label 2 is out of range */
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), FEED_EPROTO);
    e.num_classes = 10;
    uint32_t wrong = b->crc32c ^ 1u;
    assert_int_equal(wire_check_batch(b, &e, &wrong, why, sizeof why), FEED_ECORRUPT);
    /* More SampleErrors than samples: refused (a hostile server could size
     * the errors array to take the slot the pixels land in). */
    size_t n_errors = b->n_errors;
    b->n_errors = e.n + 1;
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), FEED_EPROTO);
    assert_non_null(strstr(why, "sample count"));
    b->n_errors = n_errors;
    wire_batch_reader_destroy(&r);
    grpc_byte_buffer_destroy(bb);
    free(noid);
    free(late);

    /* A corrupt CRC on the wire is told apart from a malformed batch. */
    msg = pack_batch(7, idx, 3, 4, 6, 0x11, 1, &len);
    wire_arena_reset(&a, dst, raw);
    b = feed__v1__batch__unpack(&a.pa, len, msg);
    assert_non_null(b);
    assert_int_equal(wire_check_batch(b, &e, NULL, why, sizeof why), FEED_ECORRUPT);
    free(msg);

    /* A message larger than the arena and not matching the target fails to unpack. */
    msg = pack_batch(8, idx, 3, 128, 128, 0, 0, &len);
    wire_arena_reset(&a, dst, raw);
    assert_null(feed__v1__batch__unpack(&a.pa, len, msg));
    free(msg);
    free(dst);
    feed_buf_free(&rest);
    wire_arena_free(&a);
    grpc_shutdown();
}

/* The open request as a server reads it: seed, job and share as given; none sends "". */
static void test_wire_open(void **state)
{
    (void)state;
    grpc_init();
    feed_transform t;
    feed_transform_default_train(&t);
    wire_open wo = {.dataset = "ds", .transform = &t, .seed = 0xfeed0000000009ull, .window = 4,
                    .client_name = "test", .job = "sweep", .job_weight = 2,
                    .share = "sweep/lr:7"};
    const uint64_t idx[2] = {3, 1};
    for (int pass = 0; pass < 2; pass++) {
        grpc_byte_buffer *bb = wire_pack_request(&wo, 7, 1, idx, 2, 0, pass == 1, NULL);
        assert_non_null(bb);
        grpc_byte_buffer_reader rd;
        assert_true(grpc_byte_buffer_reader_init(&rd, bb));
        grpc_slice flat = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        Feed__V1__BatchRequest *req = feed__v1__batch_request__unpack(
            NULL, GRPC_SLICE_LENGTH(flat), GRPC_SLICE_START_PTR(flat));
        assert_non_null(req);
        assert_non_null(req->open);
        assert_string_equal(req->open->dataset, "ds");
        assert_int_equal(req->open->seed, 0xfeed0000000009ull);
        assert_string_equal(req->open->job, pass ? "" : "sweep");
        assert_int_equal(req->open->job_weight, 2);
        assert_string_equal(req->open->share, pass ? "" : "sweep/lr:7");
        assert_int_equal(req->n_indices, 2);
        assert_int_equal(req->encoded, pass == 1);
        feed__v1__batch_request__free_unpacked(req, NULL);
        grpc_slice_unref(flat);
        grpc_byte_buffer_destroy(bb);
        wo.job = NULL;
        wo.share = NULL;
    }
    grpc_shutdown();
}

/* An encoded Batch of 3 samples: lengths len[i] of bytes i*7+j, status st[i]; tweak: 1 wrong
 * CRC, 2 lengths one short of the data, 3 a failed sample with bytes, 4 a shape set. */
static uint8_t *pack_encoded(uint64_t id, const uint64_t *idx, const uint32_t *len,
                             const Feed__V1__SampleStatus *st, int tweak, size_t *out_len)
{
    Feed__V1__Batch b = FEED__V1__BATCH__INIT;
    uint8_t data[256];
    uint32_t labels[3] = {0, 1, 2}, lens[3];
    size_t total = 0;
    for (uint32_t i = 0; i < 3; i++) {
        for (uint32_t j = 0; j < len[i]; j++)
            data[total + j] = (uint8_t)(i * 7 + j);
        total += len[i];
        lens[i] = len[i];
    }
    if (tweak == 2)
        lens[0]--;
    b.batch_id = id;
    b.epoch = 2;
    b.n_indices = b.n_labels = b.n_status = b.n_encoded_lengths = 3;
    b.indices = (uint64_t *)idx;
    b.labels = labels;
    Feed__V1__SampleStatus status[3] = {st[0], st[1], st[2]};
    if (tweak == 3)
        status[0] = FEED__V1__SAMPLE_STATUS__SAMPLE_CORRUPT;
    b.status = status;
    b.encoded_lengths = lens;
    b.height = tweak == 4 ? 8 : 0;
    b.data.len = total;
    b.data.data = data;
    b.crc32c = feed_crc32c(0, data, total) ^ (tweak == 1 ? 1u : 0u);
    *out_len = feed__v1__batch__get_packed_size(&b);
    uint8_t *buf = malloc(*out_len);
    feed__v1__batch__pack(&b, buf);
    return buf;
}

/* An encoded Batch: its bytes land in the capped buffer whatever the slicing, and are checked;
 * data longer than the cap is FEED_ETOOBIG before anything is allocated for it. */
static void test_wire_encoded(void **state)
{
    (void)state;
    grpc_init();
    const uint64_t idx[3] = {9, 4, 6};
    const uint32_t len[3] = {40, 0, 25};
    const Feed__V1__SampleStatus st[3] = {FEED__V1__SAMPLE_STATUS__SAMPLE_OK,
                                          FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR,
                                          FEED__V1__SAMPLE_STATUS__SAMPLE_OK};
    wire_arena arena;
    assert_int_equal(wire_arena_init(&arena, 65536), 0);
    wire_expect e = {.batch_id = 5, .epoch = 2, .indices = idx, .n = 3, .num_classes = 3};
    for (int tweak = 0; tweak <= 4; tweak++) {
        for (size_t piece = 1; piece <= 128; piece *= 4) {
            size_t mlen;
            uint8_t *msg = pack_encoded(5, idx, len, st, tweak, &mlen);
            grpc_byte_buffer *bb = sliced(msg, mlen, piece);
            feed_buf rest, enc;
            feed_buf_init(&rest, 65536);
            feed_buf_init(&enc, 65);
            wire_batch_reader r;
            assert_int_equal(wire_batch_reader_init(&r, bb, &rest), 0);
            assert_int_equal(wire_batch_reader_id(&r), 0);
            assert_int_equal(wire_batch_reader_finish_encoded(&r, &enc), 0);
            Feed__V1__Batch *b;
            char why[160];
            int rc = wire_unpack_encoded(&arena, &r, &enc, &e, &b, why, sizeof why);
            wire_batch_reader_destroy(&r);
            if (tweak == 0) {
                assert_int_equal(rc, 0);
                assert_int_equal(enc.len, 65);
                assert_int_equal(b->encoded_lengths[2], 25);
                assert_int_equal(enc.data[40], 14); /* sample 2's first byte */
                assert_int_equal(b->status[1], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
            } else {
                assert_int_equal(rc, tweak == 1 ? FEED_ECORRUPT : FEED_EPROTO);
            }
            /* One byte of cap short: refused, and the buffer did not grow for it. */
            wire_batch_reader_init_bytes(&r, msg, mlen, &rest);
            feed_buf small;
            feed_buf_init(&small, 64);
            assert_int_equal(wire_batch_reader_id(&r), 0);
            assert_int_equal(wire_batch_reader_finish_encoded(&r, &small), FEED_ETOOBIG);
            assert_null(small.data);
            wire_batch_reader_destroy(&r);
            feed_buf_free(&small);
            feed_buf_free(&rest);
            feed_buf_free(&enc);
            grpc_byte_buffer_destroy(bb);
            free(msg);
        }
    }
    wire_arena_free(&arena);
    grpc_shutdown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_batch),
        cmocka_unit_test(test_wire_open),
        cmocka_unit_test(test_wire_encoded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
