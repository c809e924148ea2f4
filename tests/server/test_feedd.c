/*
 * Integration tests of feedd: real feedd processes on 127.0.0.1 port 0,
 * real JPEG datasets in a temp dir, and a client on plain gRPC C core +
 * protobuf-c (tests/support). Checks bytes against feed_engine_run computed
 * here, every error status of the contract, corrupt samples, cancel, the
 * ImageNet sample, per-image tables, a deleted file (many streams, limits,
 * draining, metrics and the config file: test_feedd_ops.c; the fixture:
 * feedd_it.h).
 *
 * Tests that need a batch "in flight" keep the server's send stuck by not
 * reading a batch much larger than HTTP/2's flow-control windows, so nothing
 * here depends on timing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "engine.h"
#include "feed/crc32c.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/transform.h"
#include "feedtest.h"
#include "feedtest_grpc.h"
#include "feedtest_skip.h"
#include "feedd_it.h"

/* ---- tests ---- */

static void test_describe(void **state)
{
    (void)state;
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(chan, "", &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    assert_non_null(r);
    assert_int_equal(r->protocol_version, 1);
    assert_int_equal(r->n_datasets, 2);
    assert_int_equal(r->server_threads, 2);
    assert_int_equal(r->max_batch_size, 64);
    assert_true(r->max_window >= 1);
    assert_true(r->max_batch_bytes > 0);
    assert_string_equal(r->datasets[0]->name, "good");
    assert_int_equal(r->datasets[0]->num_samples, N_SAMPLES);
    assert_int_equal(r->datasets[0]->n_class_names, CLASSES);
    assert_string_equal(r->datasets[0]->format, "imagefolder");
    feed__v1__describe_response__free_unpacked(r, NULL);

    r = feedtest_describe(chan, "bad", &code);
    assert_int_equal(code, GRPC_STATUS_OK);
    assert_int_equal(r->n_datasets, 1);
    assert_int_equal(r->datasets[0]->num_samples, 5);
    feed__v1__describe_response__free_unpacked(r, NULL);

    r = feedtest_describe(chan, "nope", &code);
    assert_null(r);
    assert_int_equal(code, GRPC_STATUS_NOT_FOUND);
}

static void test_health_and_unimplemented(void **state)
{
    (void)state;
    grpc_status_code code;
    assert_int_equal(feedtest_health(chan, "", &code), 1);
    assert_int_equal(feedtest_health(chan, "feed.v1.Feed", &code), 1);
    assert_int_equal(feedtest_health(chan, "other.Service", &code), -1);
    assert_int_equal(code, GRPC_STATUS_NOT_FOUND);

    Feed__V1__DescribeRequest req = FEED__V1__DESCRIBE_REQUEST__INIT;
    uint8_t *resp = NULL;
    size_t len = 0;
    char details[256];
    assert_int_equal(feedtest_unary(chan, "/feed.v1.Feed/NoSuchMethod", &req.base, 30, &resp, &len,
                                    &code, details, sizeof details),
                     0);
    free(resp);
    assert_int_equal(code, GRPC_STATUS_UNIMPLEMENTED);
}

/* Every sample of a few batches equals feed_engine_run on the same file. */
static void test_bytes_match_engine(void **state)
{
    (void)state;
    const uint32_t side = 64;
    const uint64_t seed = 1234;
    feed_dataset *ds = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(good_dir, NULL, &ds, err, sizeof err), 0);
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    feed_transform t;
    train_transform(side, &t);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    uint8_t *want = malloc(side * side * 3);

    Feed__V1__TransformSpec spec = train_spec(side);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", seed, 4);
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    uint64_t idx[3][8];
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 8; i++)
            idx[b][i] = (uint64_t)((b * 8 + i * 5 + 3) % N_SAMPLES);
        assert_int_equal(send_batch(&s, b == 0 ? &open : NULL, 100 + b, 2 + b, idx[b], 8), 0);
    }
    int seen = 0;
    for (int k = 0; k < 3; k++) {
        Feed__V1__Batch *r = feedtest_stream_recv(&s);
        assert_non_null(r);
        int b = (int)(r->batch_id - 100);
        assert_true(b >= 0 && b < 3);
        seen |= 1 << b;
        assert_int_equal(r->epoch, 2 + b);
        assert_int_equal(r->height, side);
        assert_int_equal(r->width, side);
        assert_int_equal(r->channels, 3);
        assert_int_equal(r->n_indices, 8);
        assert_int_equal(r->n_labels, 8);
        assert_int_equal(r->n_status, 8);
        assert_int_equal(r->n_errors, 0);
        assert_int_equal(r->data.len, 8 * side * side * 3);
        assert_int_equal(r->crc32c, feed_crc32c(0, r->data.data, r->data.len));
        assert_true(r->server_busy_ns > 0);
        for (int i = 0; i < 8; i++) {
            assert_int_equal(r->indices[i], idx[b][i]);
            assert_int_equal(r->labels[i], feed_dataset_label(ds, idx[b][i]));
            assert_int_equal(r->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
            const uint8_t *jpeg = NULL;
            size_t len = 0;
            assert_int_equal(feed_dataset_read(ds, idx[b][i], &scratch, &jpeg, &len), 0);
            assert_int_equal(
                feed_engine_run(e, jpeg, len, &t, seed, 2 + (uint32_t)b, idx[b][i], want, NULL),
                FEED_SAMPLE_OK);
            assert_memory_equal(r->data.data + (size_t)i * side * side * 3, want, side * side * 3);
        }
        feed__v1__batch__free_unpacked(r, NULL);
    }
    assert_int_equal(seen, 7);
    assert_int_equal(feedtest_stream_writes_done(&s), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    free(want);
    feed_buf_free(&scratch);
    feed_engine_free(e);
    feed_dataset_close(ds);
}


/* Two servers with different thread counts and task sizes make identical bytes. */
static void test_two_servers_identical(void **state)
{
    (void)state;
    feed_test_server other;
    static const char *const extra[] = {"--threads", "1", "--task-samples", "3", NULL};
    assert_int_equal(start_server(&other, extra), 0);
    grpc_channel *ch2 = feedtest_channel(other.target);
    uint64_t idx[12];
    for (int i = 0; i < 12; i++)
        idx[i] = (uint64_t)(23 - i);
    Feed__V1__Batch *a = fetch(chan, idx, 12, 5);
    Feed__V1__Batch *b = fetch(ch2, idx, 12, 5);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->data.len, b->data.len);
    assert_memory_equal(a->data.data, b->data.data, a->data.len);
    assert_int_equal(a->crc32c, b->crc32c);
    assert_memory_equal(a->labels, b->labels, 12 * sizeof *a->labels);
    /* A different epoch gives different crops. */
    Feed__V1__Batch *c = fetch(ch2, idx, 12, 6);
    assert_int_not_equal(a->crc32c, c->crc32c);
    feed__v1__batch__free_unpacked(a, NULL);
    feed__v1__batch__free_unpacked(b, NULL);
    feed__v1__batch__free_unpacked(c, NULL);
    grpc_channel_destroy(ch2);
    assert_int_equal(feed_test_server_stop(&other), 0);
    assert_int_equal(other.exit_status, 0);
}

static void test_error_statuses(void **state)
{
    (void)state;
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    uint64_t idx[2] = {0, 1};

    make_open(&open, &spec, "missing", 1, 1);
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_NOT_FOUND, "open.dataset");

    make_open(&open, &spec, "good", 1, 1);
    uint64_t out_of_range[2] = {0, N_SAMPLES};
    expect_stream_error(chan, &open, out_of_range, 2, GRPC_STATUS_INVALID_ARGUMENT, "indices[1]");

    uint64_t big[65] = {0};
    expect_stream_error(chan, &open, big, 65, GRPC_STATUS_INVALID_ARGUMENT, "max_batch_size");

    Feed__V1__TransformSpec bad = train_spec(32);
    bad.scale_min = 2.0;
    make_open(&open, &bad, "good", 1, 1);
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_INVALID_ARGUMENT, "transform.scale");

    bad = train_spec(4);
    make_open(&open, &bad, "good", 1, 1);
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_INVALID_ARGUMENT, "transform.out");

    bad = train_spec(32);
    bad.augment = "TrivialAugmentWide(); RandomErasing(p=2)";
    make_open(&open, &bad, "good", 1, 1);
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_INVALID_ARGUMENT,
                        "transform.augment: RandomErasing.p must be in [0, 1]");

    bad = train_spec(32);
    bad.mode = (Feed__V1__TransformMode)7;
    make_open(&open, &bad, "good", 1, 1);
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_INVALID_ARGUMENT, "transform.mode");

    make_open(&open, &spec, "good", 1, 1);
    open.protocol_version = 9;
    expect_stream_error(chan, &open, idx, 2, GRPC_STATUS_INVALID_ARGUMENT, "open.protocol_version");

    /* No open in the first request. */
    feedtest_stream s;
    char details[512];
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    assert_int_equal(send_batch(&s, NULL, 1, 0, idx, 2), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, details, sizeof details),
                     GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(details, "open"));

    /* A second open. */
    make_open(&open, &spec, "good", 1, 2);
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    assert_int_equal(send_batch(&s, &open, 1, 0, idx, 2), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(send_batch(&s, &open, 2, 0, idx, 2), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, details, sizeof details),
                     GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(details, "already open"));

    /* An empty request after the open. */
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    assert_int_equal(send_batch(&s, &open, 1, 0, NULL, 0), 0);
    assert_int_equal(send_batch(&s, NULL, 2, 0, NULL, 0), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, details, sizeof details),
                     GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(details, "indices"));

    /* Bytes that are not a BatchRequest. */
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    assert_int_equal(feedtest_stream_send_raw(&s, junk, sizeof junk), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, details, sizeof details),
                     GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(details, "request"));

    /* The server is still fine. */
    grpc_status_code code;
    assert_int_equal(feedtest_health(chan, "", &code), 1);
}

/*
 * A message over max-request-bytes is refused by gRPC itself (its receive
 * limit) with RESOURCE_EXHAUSTED, the code feed.proto documents for it.
 */
/* BatchRequest.demand (fleet sizing): a valid report rides with a batch and is counted under
 * the session's job; each out-of-range field ends the stream naming it; requests without one
 * (every other test) are served as always. */
static void test_demand_report(void **state)
{
    (void)state;
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    uint64_t idx[2] = {0, 1};
    double before = scrape(&srv, "feedd_fleet_reports_total");
    Feed__V1__Demand d = FEED__V1__DEMAND__INIT;
    d.loader = 0x5eed;
    d.window_ms = 10000;
    d.wait_fraction = 0.25;
    d.samples_per_second = 300;
    d.servers = 1;
    make_open(&open, &spec, "good", 1, 1);
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    r.open = &open;
    r.batch_id = 1;
    r.n_indices = 2;
    r.indices = idx;
    r.demand = &d;
    feedtest_stream s;
    char details[512];
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    assert_int_equal(feedtest_stream_send(&s, &r), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    feed__v1__batch__free_unpacked(b, NULL);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, details, sizeof details), GRPC_STATUS_OK);
    assert_true(scrape(&srv, "feedd_fleet_reports_total") == before + 1);
    assert_true(scrape(&srv, "feedd_fleet_job_loaders{job=\"test_feedd\"}") >= 1);

    static const struct {
        const char *field;
        uint64_t loader;
        uint32_t window_ms, servers;
        double wait, rate;
    } bad[] = {
        {"demand.loader", 0, 10000, 1, 0.5, 10},
        {"demand.window_ms", 1, 99, 1, 0.5, 10},
        {"demand.window_ms", 1, 3600001, 1, 0.5, 10},
        {"demand.wait_fraction", 1, 10000, 1, 1.5, 10},
        {"demand.wait_fraction", 1, 10000, 1, -0.1, 10},
        {"demand.wait_fraction", 1, 10000, 1, 0.0 / 0.0, 10},
        {"demand.samples_per_second", 1, 10000, 1, 0.5, -1},
        {"demand.samples_per_second", 1, 10000, 1, 0.5, 2e9},
        {"demand.servers", 1, 10000, 65537, 0.5, 10},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d.loader = bad[i].loader;
        d.window_ms = bad[i].window_ms;
        d.servers = bad[i].servers;
        d.wait_fraction = bad[i].wait;
        d.samples_per_second = bad[i].rate;
        assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
        (void)feedtest_stream_send(&s, &r);
        assert_null(feedtest_stream_recv(&s));
        grpc_status_code got = feedtest_stream_finish(&s, details, sizeof details);
        if (got != GRPC_STATUS_INVALID_ARGUMENT || !strstr(details, bad[i].field))
            fail_msg("bad demand %zu: want INVALID_ARGUMENT naming %s, got %d '%s'", i,
                     bad[i].field, got, details);
    }
    assert_true(scrape(&srv, "feedd_fleet_reports_total") == before + 1);
}

static void test_oversized_request(void **state)
{
    (void)state;
    feedtest_stream s;
    size_t n = 2u << 20; /* default max-request-bytes is 1M */
    uint8_t *junk = calloc(1, n);
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    feedtest_stream_send_raw(&s, junk, n);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_RESOURCE_EXHAUSTED);
    free(junk);
}

/* Corrupt files get their status and message; the batch still arrives. */
static void test_corrupt_samples(void **state)
{
    (void)state;
    Feed__V1__TransformSpec spec = train_spec(40);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "bad", 3, 1);
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
    uint64_t idx[5] = {2, 0, 3, 1, 4}; /* 0,1 good; 2 empty, 3 garbage, 4 truncated */
    assert_int_equal(send_batch(&s, &open, 9, 0, idx, 5), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    size_t px = 40 * 40 * 3;
    assert_int_equal(b->data.len, 5 * px);
    assert_int_equal(b->crc32c, feed_crc32c(0, b->data.data, b->data.len));
    assert_int_equal(b->status[0], FEED__V1__SAMPLE_STATUS__SAMPLE_EMPTY);
    assert_int_equal(b->status[1], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(b->status[2], FEED__V1__SAMPLE_STATUS__SAMPLE_NOT_JPEG);
    assert_int_equal(b->status[3], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_true(b->status[4] == FEED__V1__SAMPLE_STATUS__SAMPLE_TRUNCATED ||
                b->status[4] == FEED__V1__SAMPLE_STATUS__SAMPLE_CORRUPT);
    assert_int_equal(b->n_errors, 3);
    assert_int_equal(b->errors[0]->position, 0);
    assert_int_equal(b->errors[0]->index, 2);
    assert_int_equal(b->errors[1]->position, 2);
    assert_int_equal(b->errors[1]->status, FEED__V1__SAMPLE_STATUS__SAMPLE_NOT_JPEG);
    assert_int_equal(b->errors[2]->position, 4);
    for (size_t i = 0; i < b->n_errors; i++)
        assert_true(strlen(b->errors[i]->message) <= 200);
    static const uint8_t zeros[40 * 40 * 3];
    assert_memory_equal(b->data.data, zeros, px);
    assert_memory_equal(b->data.data + 2 * px, zeros, px);
    assert_memory_equal(b->data.data + 4 * px, zeros, px);
    assert_memory_not_equal(b->data.data + px, zeros, px);
    feed__v1__batch__free_unpacked(b, NULL);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);

    assert_true(scrape(&srv, "feedd_decode_errors_total{kind=\"empty\"}") >= 1);
    assert_true(scrape(&srv, "feedd_decode_errors_total{kind=\"not_jpeg\"}") >= 1);
}

/* --max-pixels reaches the decoder: every image here is larger, so every sample is TOO_LARGE. */
static void test_max_pixels(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {"--threads", "1", "--max-pixels", "100", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel(s2.target);
    uint64_t idx[3] = {0, 9, 17};
    Feed__V1__Batch *b = fetch(ch, idx, 3, 0);
    assert_non_null(b);
    assert_int_equal(b->n_errors, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b->status[i], FEED__V1__SAMPLE_STATUS__SAMPLE_TOO_LARGE);
        assert_int_equal(b->errors[i]->index, idx[i]);
    }
    static const uint8_t zeros[3 * 48 * 48 * 3];
    assert_memory_equal(b->data.data, zeros, sizeof zeros);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_true(scrape(&s2, "feedd_decode_errors_total{kind=\"too_large\"}") == 3);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s2), 0);
}

/* Cancel with batches outstanding; the server cleans up and keeps serving. */
static void test_cancel_mid_stream(void **state)
{
    (void)state;
    Feed__V1__TransformSpec spec = train_spec(128);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 5, 8);
    for (int round = 0; round < 3; round++) {
        feedtest_stream s;
        assert_int_equal(feedtest_stream_open(chan, 60, &s), 0);
        uint64_t idx[16];
        for (int i = 0; i < 16; i++)
            idx[i] = (uint64_t)i;
        for (int b = 0; b < 8; b++)
            assert_int_equal(send_batch(&s, b == 0 ? &open : NULL, (uint64_t)b, 0, idx, 16), 0);
        if (round > 0) {
            Feed__V1__Batch *r = feedtest_stream_recv(&s);
            assert_non_null(r);
            feed__v1__batch__free_unpacked(r, NULL);
        }
        feedtest_stream_cancel(&s);
        assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_CANCELLED);
    }
    /* Memory and in-flight work return to zero once the cancelled streams are gone. */
    for (int i = 0; i < 6000; i++) {
        if (scrape(&srv, "feedd_active_streams") == 0 && scrape(&srv, "feedd_memory_bytes") == 0)
            break;
        sleep_ms(10);
    }
    assert_true(scrape(&srv, "feedd_active_streams") == 0);
    assert_true(scrape(&srv, "feedd_memory_bytes") == 0);
    assert_true(scrape(&srv, "feedd_inflight_batches") == 0);
    uint64_t idx[2] = {1, 2};
    Feed__V1__Batch *b = fetch(chan, idx, 2, 0);
    assert_non_null(b);
    feed__v1__batch__free_unpacked(b, NULL);
}

/* Real ImageNet JPEGs, when the sample is present: bytes equal the engine's. */
static void test_imagenet_sample(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    char arg[1200];
    snprintf(arg, sizeof arg, "in=%s", dir);
    const char *args[] = {"--dataset", arg, "--threads", "2", "--log-level", "warn", NULL};
    feed_test_server s2;
    assert_int_equal(feed_test_server_start(args, &s2), 0);
    grpc_channel *ch = feedtest_channel(s2.target);
    Feed__V1__TransformSpec spec = train_spec(224);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "in", 42, 1);
    uint64_t idx[8] = {0, 101, 202, 303, 404, 505, 606, 707};
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(ch, 120, &s), 0);
    assert_int_equal(send_batch(&s, &open, 1, 3, idx, 8), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    feed_dataset *ds = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(dir, NULL, &ds, err, sizeof err), 0);
    feed_engine *e = NULL;
    assert_int_equal(feed_engine_new(NULL, &e), 0);
    feed_transform t;
    train_transform(224, &t);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    uint8_t *want = malloc(224 * 224 * 3);
    for (int i = 0; i < 8; i++) {
        const uint8_t *jpeg;
        size_t len;
        assert_int_equal(feed_dataset_read(ds, idx[i], &scratch, &jpeg, &len), 0);
        feed_sample_status st = feed_engine_run(e, jpeg, len, &t, 42, 3, idx[i], want, NULL);
        assert_int_equal(b->status[i], (int)st);
        assert_memory_equal(b->data.data + (size_t)i * 224 * 224 * 3, want, 224 * 224 * 3);
    }
    free(want);
    feed_buf_free(&scratch);
    feed_engine_free(e);
    feed_dataset_close(ds);
    feed__v1__batch__free_unpacked(b, NULL);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s2), 0);
}

/* ---- tables belong to their image ---- */

/* A w x h JPEG of a textured pattern; optimize: Huffman tables made for it. free() it. */
static uint8_t *encode_jpeg(unsigned w, unsigned h, int quality, bool optimize, size_t *len)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr em;
    c.err = jpeg_std_error(&em);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = w;
    c.image_height = h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    c.optimize_coding = optimize;
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    for (unsigned y = 0; y < h; y++) {
        for (unsigned x = 0; x < w; x++)
            for (unsigned ch = 0; ch < 3; ch++)
                row[x * 3 + ch] = (uint8_t)((x * (ch + 3) + y * (7 - ch) + (x * y) % 23) & 255);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
    return buf;
}

/* Write jpg to path without its marker segments of one kind (0xC4 DHT, 0xDB DQT) before SOS. */
static void write_without(const char *path, const uint8_t *jpg, size_t len, uint8_t marker)
{
    uint8_t *out = malloc(len);
    memcpy(out, jpg, 2);
    size_t i = 2, o = 2;
    while (i + 4 <= len && jpg[i] == 0xFF && jpg[i + 1] != 0xDA) {
        size_t seg = 2 + ((size_t)jpg[i + 2] << 8 | jpg[i + 3]);
        assert_true(i + seg <= len);
        if (jpg[i + 1] != marker) {
            memcpy(out + o, jpg + i, seg);
            o += seg;
        }
        i += seg;
    }
    assert_true(o < i);
    memcpy(out + o, jpg + i, len - i);
    assert_int_equal(feed_test_write_file(path, out, o + len - i), 0);
    free(out);
}

/* One sample of dataset "tables" (seed 8, epoch 3, train 40x40) on stream s; its status, its pixels
 * in px. */
static int fetch_one(feedtest_stream *s, Feed__V1__SessionOpen *open, uint64_t batch_id,
                     uint64_t index, uint8_t *px)
{
    assert_int_equal(send_batch(s, open, batch_id, 3, &index, 1), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(s);
    assert_non_null(b);
    assert_int_equal(b->batch_id, batch_id);
    assert_int_equal(b->data.len, 40 * 40 * 3);
    memcpy(px, b->data.data, b->data.len);
    int st = b->status[0];
    feed__v1__batch__free_unpacked(b, NULL);
    return st;
}

/*
 * Through feedd with one worker: a sample without DHT gives the same bytes
 * on the fresh worker and after the worker decoded an image with tables of
 * its own; one without DQT is CORRUPT both times.
 */
static void test_tables_do_not_carry_over(void **state)
{
    (void)state;
    char dir[400], path[500], arg[450];
    snprintf(dir, sizeof dir, "%s/tables", tmp_root);
    snprintf(path, sizeof path, "%s/t", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    size_t other_len, plain_len;
    uint8_t *other = encode_jpeg(160, 120, 30, true, &other_len);
    uint8_t *plain = encode_jpeg(96, 80, 92, false, &plain_len);
    snprintf(path, sizeof path, "%s/t/a_other.jpg", dir);
    assert_int_equal(feed_test_write_file(path, other, other_len), 0);
    snprintf(path, sizeof path, "%s/t/b_no_dht.jpg", dir);
    write_without(path, plain, plain_len, 0xC4);
    snprintf(path, sizeof path, "%s/t/c_no_dqt.jpg", dir);
    write_without(path, plain, plain_len, 0xDB);
    snprintf(arg, sizeof arg, "tables=%s", dir);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "warn", NULL};
    static const int want[] = {FEED__V1__SAMPLE_STATUS__SAMPLE_OK,
                               FEED__V1__SAMPLE_STATUS__SAMPLE_CORRUPT};
    uint8_t *fresh = malloc(40 * 40 * 3), *warm = malloc(40 * 40 * 3),
            *scratch = malloc(40 * 40 * 3);
    for (uint64_t idx = 1; idx <= 2; idx++) {
        feed_test_server one;
        assert_int_equal(feed_test_server_start(args, &one), 0);
        grpc_channel *ch = feedtest_channel(one.target);
        Feed__V1__TransformSpec spec = train_spec(40);
        Feed__V1__SessionOpen open;
        make_open(&open, &spec, "tables", 8, 1);
        feedtest_stream s;
        assert_int_equal(feedtest_stream_open(ch, 60, &s), 0);
        assert_int_equal(fetch_one(&s, &open, 1, idx, fresh), want[idx - 1]);
        assert_int_equal(fetch_one(&s, NULL, 2, 0, scratch), FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
        assert_int_equal(fetch_one(&s, NULL, 3, idx, warm), want[idx - 1]);
        assert_memory_equal(fresh, warm, 40 * 40 * 3);
        assert_int_equal(feedtest_stream_writes_done(&s), 0);
        assert_null(feedtest_stream_recv(&s));
        assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
        grpc_channel_destroy(ch);
        assert_int_equal(feed_test_server_stop(&one), 0);
    }
    free(fresh);
    free(warm);
    free(scratch);
    free(other);
    free(plain);
}

/* A file deleted after the open is IO_ERROR, and the message says it is gone. */
static void test_deleted_file(void **state)
{
    (void)state;
    char dir[400], arg[450];
    snprintf(dir, sizeof dir, "%s/deleted", tmp_root);
    assert_int_equal(feed_test_make_imagefolder(dir, 1, 3, 21), 0);
    snprintf(arg, sizeof arg, "gone=%s", dir);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "warn", NULL};
    feed_test_server one;
    assert_int_equal(feed_test_server_start(args, &one), 0);
    feed_dataset *ds = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(dir, NULL, &ds, err, sizeof err), 0);
    assert_int_equal(unlink(feed_dataset_sample_path(ds, 1)), 0);
    feed_dataset_close(ds);

    grpc_channel *ch = feedtest_channel(one.target);
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "gone", 1, 1);
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(ch, 60, &s), 0);
    uint64_t idx[2] = {0, 1};
    assert_int_equal(send_batch(&s, &open, 1, 0, idx, 2), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_non_null(b);
    assert_int_equal(b->status[0], FEED__V1__SAMPLE_STATUS__SAMPLE_OK);
    assert_int_equal(b->status[1], FEED__V1__SAMPLE_STATUS__SAMPLE_IO_ERROR);
    assert_int_equal(b->n_errors, 1);
    assert_int_equal(b->errors[0]->index, 1);
    if (!strstr(b->errors[0]->message, "gone") || !strstr(b->errors[0]->message, "ENOENT"))
        fail_msg("message '%s' does not say the file is gone", b->errors[0]->message);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(feedtest_stream_writes_done(&s), 0);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&one), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test(test_imagenet_sample),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample()
                   ? cmocka_run_group_tests(sample_tests, group_setup, group_teardown)
                   : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_describe),           cmocka_unit_test(test_health_and_unimplemented),
        cmocka_unit_test(test_bytes_match_engine), cmocka_unit_test(test_two_servers_identical),
        cmocka_unit_test(test_error_statuses),     cmocka_unit_test(test_demand_report),
        cmocka_unit_test(test_oversized_request),
        cmocka_unit_test(test_corrupt_samples),    cmocka_unit_test(test_max_pixels),
        cmocka_unit_test(test_cancel_mid_stream),  cmocka_unit_test(test_tables_do_not_carry_over),
        cmocka_unit_test(test_deleted_file),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
