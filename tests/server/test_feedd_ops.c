/*
 * Integration tests of feedd's operation: many streams at once, the window
 * and memory caps (refusals, back-pressure, the memory FIFO), the stream
 * limit, draining on SIGTERM (with batches waiting, and past the drain
 * timeout), the metrics endpoint and the config file.
 * Real feedd processes on 127.0.0.1 port 0 over the fixture of feedd_it.h.
 *
 * Tests that need a batch "in flight" keep the server's send stuck by not
 * reading a batch much larger than the client's HTTP/2 stream window, kept
 * at 64 KiB by a channel without BDP probing (feedtest_channel_fixed_window;
 * a probing channel's window grows past any batch here), so nothing here
 * depends on timing.
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

/*
 * Window and memory caps. Batches of 384x384 samples (0.44 MB each) are not
 * read while the next requests go out, so the first batch's send is stuck in
 * HTTP/2 flow control and still counts: a later request meets the caps
 * deterministically. A refusal (window) follows the stuck batch once it is
 * read; a batch waiting for memory shows in feedd_waiting_batches and comes
 * once the stuck ones are read.
 *
 * Stuck needs the client's stream window to stay small, so the channels have
 * gRPC's BDP probing off (feedtest_channel_fixed_window): with it on, a
 * channel's window grows (to 32 MiB after the stream-memory case's 63 MB
 * drain), a 21 MB batch is then sent in full into the client's transport
 * and the server's memory for it freed. Each case also waits until that
 * batch is handed to gRPC (send_stuck) before the requests that must meet a
 * cap, so none depends on whether they or the batch's decode come first.
 */
static void drain_and_expect(feedtest_stream *a, grpc_status_code want, const char *needle)
{
    char details[512];
    Feed__V1__Batch *b;
    while ((b = feedtest_stream_recv(a)) != NULL) {
        assert_int_equal(b->crc32c, feed_crc32c(0, b->data.data, b->data.len));
        feed__v1__batch__free_unpacked(b, NULL);
    }
    grpc_status_code got = feedtest_stream_finish(a, details, sizeof details);
    if (got != want || !strstr(details, needle))
        fail_msg("want status %d with '%s', got %d '%s'", want, needle, got, details);
}

/* Send one batch and wait until the server has handed it to gRPC (where it stays: unread). */
static void send_stuck(const feed_test_server *s, feedtest_stream *a, Feed__V1__SessionOpen *open,
                       uint64_t batch_id, const uint64_t *idx, size_t n)
{
    double sent = scrape(s, "feedd_batches_total");
    assert_int_equal(send_batch(a, open, batch_id, 0, idx, n), 0);
    wait_metric(s, "feedd_batches_total", sent + 1);
}

static void test_resource_exhausted(void **state)
{
    (void)state;
    feed_test_server s2;
    /*
     * Sends stay stuck here until the test reads them, on purpose: so no
     * send-stall cancel (test_hostile tests that) and stream deadlines far
     * past the waits, and a loaded machine makes the test slower, not failed.
     */
    static const char *const extra[] = {"--threads",           "2",   /* workers */
                                        "--max-memory",        "64M", /* three 21 MB batches */
                                        "--max-stream-memory", "48M", /* two */
                                        "--send-stall-ms",     "0",   NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel_fixed_window(s2.target);
    grpc_channel *ch2 = feedtest_channel_fixed_window(s2.target);
    Feed__V1__TransformSpec spec = train_spec(384);
    Feed__V1__SessionOpen open;
    uint64_t idx[48];
    for (int i = 0; i < 48; i++)
        idx[i] = (uint64_t)(i % N_SAMPLES);
    feedtest_stream a, c;

    /*
     * Window 1: batch 1 is handed to gRPC (stuck), batch 2 waits behind it,
     * batch 3 is refused. The refusal is waited for: reading batch 1 before
     * request 3 is parsed lets batch 2 go and frees the window, and the
     * stream then waits for more (it failed that way on a loaded machine).
     */
    double refused = scrape(&s2, "feedd_requests_refused_total");
    make_open(&open, &spec, "good", 1, 1);
    assert_int_equal(feedtest_stream_open(ch, 300, &a), 0);
    send_stuck(&s2, &a, &open, 1, idx, 24);
    assert_int_equal(send_batch(&a, NULL, 2, 0, idx, 8), 0);
    assert_int_equal(send_batch(&a, NULL, 3, 0, idx, 8), 0);
    wait_metric(&s2, "feedd_requests_refused_total", refused + 1);
    drain_and_expect(&a, GRPC_STATUS_RESOURCE_EXHAUSTED, "window");

    /*
     * Stream memory is back-pressure: 21 MB + 21 MB fit 48 MB, the third 21 MB
     * waits (within the window) until the first is sent, then comes.
     */
    wait_memory_free(&s2);
    make_open(&open, &spec, "good", 1, 8);
    assert_int_equal(feedtest_stream_open(ch, 300, &a), 0);
    send_stuck(&s2, &a, &open, 0, idx, 48);
    for (int k = 1; k < 3; k++)
        assert_int_equal(send_batch(&a, NULL, (uint64_t)k, 0, idx, 48), 0);
    wait_metric(&s2, "feedd_waiting_batches", 1);
    feedtest_stream_writes_done(&a);
    drain_and_expect(&a, GRPC_STATUS_OK, "");

    /* Server memory the same: stream a holds 42 MB; stream c's second 21 MB waits for 64 MB. */
    wait_memory_free(&s2);
    double before = scrape(&s2, "feedd_requests_total");
    assert_int_equal(feedtest_stream_open(ch, 300, &a), 0);
    send_stuck(&s2, &a, &open, 1, idx, 48);
    assert_int_equal(send_batch(&a, NULL, 2, 0, idx, 48), 0);
    wait_metric(&s2, "feedd_requests_total", before + 2);
    assert_int_equal(feedtest_stream_open(ch2, 300, &c), 0);
    assert_int_equal(send_batch(&c, &open, 1, 0, idx, 48), 0);
    assert_int_equal(send_batch(&c, NULL, 2, 0, idx, 48), 0);
    wait_metric(&s2, "feedd_waiting_batches", 1);
    feedtest_stream_writes_done(&c);
    drain_and_expect(&c, GRPC_STATUS_OK, "");
    feedtest_stream_writes_done(&a);
    drain_and_expect(&a, GRPC_STATUS_OK, "");

    /* A stream cancelled with a batch waiting for memory leaves nothing behind. */
    wait_memory_free(&s2);
    assert_int_equal(feedtest_stream_open(ch, 300, &a), 0);
    send_stuck(&s2, &a, &open, 0, idx, 48);
    for (int k = 1; k < 3; k++)
        assert_int_equal(send_batch(&a, NULL, (uint64_t)k, 0, idx, 48), 0);
    wait_metric(&s2, "feedd_waiting_batches", 1);
    feedtest_stream_cancel(&a);
    assert_int_equal(feedtest_stream_finish(&a, NULL, 0), GRPC_STATUS_CANCELLED);
    wait_metric_zero(&s2, "feedd_active_streams");
    wait_memory_free(&s2);
    assert_true(scrape(&s2, "feedd_active_streams") == 0);
    assert_true(scrape(&s2, "feedd_waiting_batches") == 0);
    assert_true(scrape(&s2, "feedd_inflight_batches") == 0);

    grpc_channel_destroy(ch);
    grpc_channel_destroy(ch2);
    assert_int_equal(feed_test_server_stop(&s2), 0);
    assert_int_equal(s2.exit_status, 0);
}

typedef struct bp_arg {
    const char *target;
    int id;
    int batches;
    int good;
    grpc_status_code status;
    char details[256];
} bp_arg;

/*
 * One stream with window 4 that sends its next request as soon as a batch
 * arrives (libfeedclient's pattern), 16 samples of 96x96 (442 KB) a batch.
 */
static void *bp_worker(void *p)
{
    bp_arg *a = p;
    grpc_channel *ch = feedtest_channel(a->target);
    Feed__V1__TransformSpec spec = train_spec(96);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", (uint64_t)a->id, 4);
    feedtest_stream s;
    int sent = 0;
    a->status = GRPC_STATUS_UNKNOWN;
    if (feedtest_stream_open(ch, 120, &s) < 0)
        goto out;
    uint64_t idx[16];
    for (int i = 0; i < 16; i++)
        idx[i] = (uint64_t)((a->id * 5 + i) % N_SAMPLES);
    for (; sent < 4; sent++)
        send_batch(&s, sent == 0 ? &open : NULL, (uint64_t)sent, 0, idx, 16);
    Feed__V1__Batch *b;
    while ((b = feedtest_stream_recv(&s)) != NULL) {
        if (b->n_indices == 16 && b->data.len == 16 * 96 * 96 * 3 &&
            b->crc32c == feed_crc32c(0, b->data.data, b->data.len))
            a->good++;
        feed__v1__batch__free_unpacked(b, NULL);
        if (sent < a->batches)
            send_batch(&s, NULL, (uint64_t)sent++, 0, idx, 16);
        else if (sent++ == a->batches)
            feedtest_stream_writes_done(&s);
    }
    a->status = feedtest_stream_finish(&s, a->details, sizeof a->details);
out:
    grpc_channel_destroy(ch);
    return NULL;
}

/*
 * --max-memory holds about two batches, two streams keep four outstanding
 * each: batches wait for memory instead of ending the streams, and every one
 * arrives. A batch no cap could ever hold is still refused, as documented.
 */
static void test_memory_backpressure(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {"--threads", "2", "--max-memory", "1M", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    enum { N = 2, BATCHES = 12 };
    pthread_t th[N];
    bp_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (bp_arg){.target = s2.target, .id = i, .batches = BATCHES};
        assert_int_equal(pthread_create(&th[i], NULL, bp_worker, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (args[i].status != GRPC_STATUS_OK || args[i].good != BATCHES)
            fail_msg("stream %d: %d of %d batches, status %d '%s'", i, args[i].good, BATCHES,
                     args[i].status, args[i].details);
    }
    assert_true(scrape(&s2, "feedd_batches_total") == N * BATCHES);
    wait_memory_free(&s2);
    assert_true(scrape(&s2, "feedd_waiting_batches") == 0);

    /* 24 x 128x128 is 1.18 MB: beyond max_batch_bytes, which is clamped to the 1 MB caps. */
    grpc_channel *ch = feedtest_channel(s2.target);
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(ch, "", &code);
    assert_non_null(r);
    assert_int_equal(r->max_batch_bytes, 1 << 20);
    feed__v1__describe_response__free_unpacked(r, NULL);
    Feed__V1__TransformSpec spec = train_spec(128);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 1, 4);
    uint64_t idx[24];
    for (int i = 0; i < 24; i++)
        idx[i] = (uint64_t)i;
    expect_stream_error(ch, &open, idx, 24, GRPC_STATUS_INVALID_ARGUMENT, "max_batch_bytes");
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s2), 0);
    assert_int_equal(s2.exit_status, 0);
}

/*
 * Fairness of the wait for memory: --max-memory holds two 10.6 MB batches.
 * Stream a has two batches in memory (unread, stuck in flow control) and six
 * waiting; stream b's one batch waits behind them. Stream a then reads one
 * batch and asks for another, seven times: first come, first served gives
 * b's batch the memory a's seventh batch frees, ahead of a's newer requests,
 * so it arrives although a has stopped reading. A scheduler that let a's
 * newer batches pass would leave it waiting (until the call's deadline).
 */
static void test_memory_fifo(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {"--threads", "2", "--max-memory", "24M", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel_fixed_window(s2.target);
    grpc_channel *ch2 = feedtest_channel_fixed_window(s2.target);
    Feed__V1__TransformSpec spec = train_spec(384);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 3, 8);
    uint64_t idx[24];
    for (int i = 0; i < 24; i++)
        idx[i] = (uint64_t)i;
    feedtest_stream a, b;
    assert_int_equal(feedtest_stream_open(ch, 60, &a), 0);
    for (int k = 0; k < 8; k++)
        assert_int_equal(send_batch(&a, k == 0 ? &open : NULL, (uint64_t)k, 0, idx, 24), 0);
    wait_metric(&s2, "feedd_waiting_batches", 6);
    assert_int_equal(feedtest_stream_open(ch2, 60, &b), 0);
    assert_int_equal(send_batch(&b, &open, 100, 0, idx, 24), 0);
    wait_metric(&s2, "feedd_waiting_batches", 7);
    for (int k = 0; k < 7; k++) {
        Feed__V1__Batch *r = feedtest_stream_recv(&a);
        assert_non_null(r);
        feed__v1__batch__free_unpacked(r, NULL);
        assert_int_equal(send_batch(&a, NULL, (uint64_t)(8 + k), 0, idx, 24), 0);
    }
    Feed__V1__Batch *r = feedtest_stream_recv(&b);
    assert_non_null(r);
    assert_int_equal(r->batch_id, 100);
    assert_int_equal(r->crc32c, feed_crc32c(0, r->data.data, r->data.len));
    feed__v1__batch__free_unpacked(r, NULL);
    feedtest_stream_writes_done(&b);
    drain_and_expect(&b, GRPC_STATUS_OK, "");
    feedtest_stream_writes_done(&a);
    drain_and_expect(&a, GRPC_STATUS_OK, "");
    grpc_channel_destroy(ch);
    grpc_channel_destroy(ch2);
    assert_int_equal(feed_test_server_stop(&s2), 0);
    assert_int_equal(s2.exit_status, 0);
}

static void test_max_streams(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {"--threads", "1", "--max-streams", "1", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel(s2.target);
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 1, 1);
    uint64_t idx[2] = {0, 1};
    feedtest_stream a;
    assert_int_equal(feedtest_stream_open(ch, 60, &a), 0);
    assert_int_equal(send_batch(&a, &open, 1, 0, idx, 2), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&a);
    assert_non_null(b);
    feed__v1__batch__free_unpacked(b, NULL);
    expect_stream_error(ch, &open, idx, 2, GRPC_STATUS_RESOURCE_EXHAUSTED, "max-streams");
    feedtest_stream_writes_done(&a);
    assert_null(feedtest_stream_recv(&a));
    assert_int_equal(feedtest_stream_finish(&a, NULL, 0), GRPC_STATUS_OK);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s2), 0);
}

/*
 * SIGTERM while a stream has accepted batches in flight (its client is not
 * reading): Health says NOT_SERVING, new streams and new requests get
 * UNAVAILABLE, the accepted batches all arrive intact, the process exits 0.
 */
static void test_graceful_shutdown(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {"--threads", "2", "--drain-timeout-ms", "60000", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel(s2.target);
    Feed__V1__TransformSpec spec = train_spec(384);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 8, 3);
    uint64_t idx[40];
    for (int i = 0; i < 40; i++)
        idx[i] = (uint64_t)(i % N_SAMPLES);
    feedtest_stream a;
    assert_int_equal(feedtest_stream_open(ch, 120, &a), 0);
    for (int b = 0; b < 3; b++)
        assert_int_equal(send_batch(&a, b == 0 ? &open : NULL, (uint64_t)b, 0, idx, 40), 0);
    wait_metric(&s2, "feedd_requests_total", 3);

    assert_int_equal(feed_test_server_signal(&s2, SIGTERM), 0);
    grpc_status_code code;
    int health = -1;
    /* Until the server says NOT_SERVING (2): the drain starts when it has handled the signal. */
    while ((health = feedtest_health(ch, "", &code)) != 2)
        sleep_ms(10);
    /* Describe says so too, so that clients open no new streams here. */
    assert_null(feedtest_describe(ch, "", &code));
    assert_int_equal(code, GRPC_STATUS_UNAVAILABLE);
    expect_stream_error(ch, &open, idx, 2, GRPC_STATUS_UNAVAILABLE, "draining");
    /* A new request on the old stream is refused; the three accepted batches still come. */
    assert_int_equal(send_batch(&a, NULL, 3, 0, idx, 40), 0);
    int got = 0;
    Feed__V1__Batch *b;
    while ((b = feedtest_stream_recv(&a)) != NULL) {
        assert_true(b->batch_id < 3);
        assert_int_equal(b->crc32c, feed_crc32c(0, b->data.data, b->data.len));
        assert_int_equal(b->data.len, 40 * 384 * 384 * 3);
        got++;
        feed__v1__batch__free_unpacked(b, NULL);
    }
    assert_int_equal(got, 3);
    char details[256];
    assert_int_equal(feedtest_stream_finish(&a, details, sizeof details), GRPC_STATUS_UNAVAILABLE);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_wait(&s2, 60000), 0);
    assert_int_equal(s2.exit_status, 0);
    feed_test_server_kill(&s2);
}

/* Draining finishes batches that were waiting for memory too: all four arrive, then exit 0. */
static void test_drain_with_waiting_batches(void **state)
{
    (void)state;
    feed_test_server s2;
    static const char *const extra[] = {
        "--threads", "2", "--max-memory", "24M", "--drain-timeout-ms", "60000", NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel_fixed_window(s2.target);
    Feed__V1__TransformSpec spec = train_spec(384);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 4, 4);
    uint64_t idx[24];
    for (int i = 0; i < 24; i++)
        idx[i] = (uint64_t)i;
    feedtest_stream a;
    assert_int_equal(feedtest_stream_open(ch, 120, &a), 0);
    for (int k = 0; k < 4; k++)
        assert_int_equal(send_batch(&a, k == 0 ? &open : NULL, (uint64_t)k, 0, idx, 24), 0);
    wait_metric(&s2, "feedd_waiting_batches", 1); /* two 10.6 MB batches fill 24 MB */
    /* All four accepted before the drain starts: a request still unread at SIGTERM would be
     * refused, as draining should (seen once on a loaded machine: 3 of 4). */
    wait_metric(&s2, "feedd_requests_total", 4);
    assert_int_equal(feed_test_server_signal(&s2, SIGTERM), 0);
    int got = 0;
    Feed__V1__Batch *b;
    while ((b = feedtest_stream_recv(&a)) != NULL) {
        assert_int_equal(b->crc32c, feed_crc32c(0, b->data.data, b->data.len));
        got++;
        feed__v1__batch__free_unpacked(b, NULL);
    }
    assert_int_equal(got, 4);
    assert_int_equal(feedtest_stream_finish(&a, NULL, 0), GRPC_STATUS_UNAVAILABLE);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_wait(&s2, 60000), 0);
    assert_int_equal(s2.exit_status, 0);
    feed_test_server_kill(&s2);
}

/*
 * A client that never reads keeps its batches in flight: feedd gives up after
 * --drain-timeout-ms (SIGINT here), or at once on a second signal, and still
 * exits 0 with the stuck stream cancelled.
 */
static void stuck_stream_stop(const char *drain_ms, int first_sig, int second_sig)
{
    feed_test_server s2;
    const char *const extra[] = {"--threads", "2", "--drain-timeout-ms", drain_ms, NULL};
    assert_int_equal(start_server(&s2, extra), 0);
    grpc_channel *ch = feedtest_channel_fixed_window(s2.target);
    Feed__V1__TransformSpec spec = train_spec(512); /* 16 x 0.8 MB: stuck unread */
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 8, 2);
    uint64_t idx[16];
    for (int i = 0; i < 16; i++)
        idx[i] = (uint64_t)(i % N_SAMPLES);
    feedtest_stream a;
    assert_int_equal(feedtest_stream_open(ch, 120, &a), 0);
    assert_int_equal(send_batch(&a, &open, 0, 0, idx, 16), 0);
    assert_int_equal(send_batch(&a, NULL, 1, 0, idx, 16), 0);
    wait_metric(&s2, "feedd_batches_total", 1);
    assert_int_equal(feed_test_server_signal(&s2, first_sig), 0);
    if (second_sig)
        assert_int_equal(feed_test_server_signal(&s2, second_sig), 0);
    /* Bounded well under the 60 s drain of the two-signal case. */
    assert_int_equal(feed_test_server_wait(&s2, 30000), 0);
    assert_int_equal(s2.exit_status, 0);
    Feed__V1__Batch *b;
    while ((b = feedtest_stream_recv(&a)) != NULL)
        feed__v1__batch__free_unpacked(b, NULL);
    assert_int_not_equal(feedtest_stream_finish(&a, NULL, 0), GRPC_STATUS_OK);
    grpc_channel_destroy(ch);
    feed_test_server_kill(&s2);
}

static void test_drain_timeout(void **state)
{
    (void)state;
    stuck_stream_stop("300", SIGINT, 0);
    stuck_stream_stop("60000", SIGTERM, SIGINT);
}

typedef struct worker_arg {
    const char *target;
    int id;
    int batches;
    int ok;
    int good;   /* batches received whole */
    int status; /* the stream's final status; -1: it never opened */
    char details[200];
} worker_arg;

static void *stream_worker(void *p)
{
    worker_arg *a = p;
    grpc_channel *ch = feedtest_channel(a->target);
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", (uint64_t)a->id, 2);
    feedtest_stream s;
    int good = 0, sent = 0;
    a->status = -1;
    /* A call started on a connection not up yet may fail fast on a loaded machine. */
    if (feedtest_channel_ready(ch, 120) < 0 || feedtest_stream_open(ch, 120, &s) < 0)
        goto out;
    uint64_t idx[6];
    for (int i = 0; i < 6; i++)
        idx[i] = (uint64_t)((a->id * 7 + i) % N_SAMPLES);
    /* Window 2: keep two outstanding, send the next after each receive. */
    for (; sent < 2; sent++)
        send_batch(&s, sent == 0 ? &open : NULL, (uint64_t)sent, 0, idx, 6);
    for (int got = 0; got < a->batches; got++) {
        Feed__V1__Batch *b = feedtest_stream_recv(&s);
        if (!b)
            break;
        if (b->n_indices == 6 && b->crc32c == feed_crc32c(0, b->data.data, b->data.len) &&
            b->batch_id < (uint64_t)a->batches)
            good++;
        feed__v1__batch__free_unpacked(b, NULL);
        if (sent < a->batches)
            send_batch(&s, NULL, (uint64_t)sent++, 0, idx, 6);
    }
    feedtest_stream_writes_done(&s);
    feedtest_stream_recv(&s);
    a->status = (int)feedtest_stream_finish(&s, a->details, sizeof a->details);
    a->good = good;
    a->ok = a->status == GRPC_STATUS_OK && good == a->batches;
out:
    grpc_channel_destroy(ch);
    return NULL;
}

static void test_many_streams(void **state)
{
    (void)state;
    enum { N = 12 };
    pthread_t th[N];
    worker_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (worker_arg){.target = srv.target, .id = i, .batches = 6};
        assert_int_equal(pthread_create(&th[i], NULL, stream_worker, &args[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (!args[i].ok)
            fail_msg("stream %d: %d of %d batches whole, status %d (%s)", i, args[i].good,
                     args[i].batches, args[i].status, args[i].details);
    }
}

static void test_metrics_endpoint(void **state)
{
    (void)state;
    uint64_t idx[3] = {4, 5, 6};
    Feed__V1__Batch *b = fetch(chan, idx, 3, 1);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_true(scrape(&srv, "feedd_batches_total") >= 1);
    assert_true(scrape(&srv, "feedd_samples_total") >= 3);
    assert_true(scrape(&srv, "feedd_bytes_total") >= 3 * 48 * 48 * 3);
    assert_true(scrape(&srv, "feedd_stage_seconds_total{stage=\"decode\"}") > 0);
    assert_true(scrape(&srv, "feedd_stage_ops_total{stage=\"send\"}") >= 1);
    assert_true(scrape(&srv, "feedd_serving") == 1);
    assert_true(scrape(&srv, "feedd_queue_depth") >= 0);
    int status = 0;
    char *body = NULL;
    assert_int_equal(feed_test_http_get(srv.metrics_port, "/nope", &status, &body), 0);
    assert_int_equal(status, 404);
    free(body);
}

static void test_config_file(void **state)
{
    (void)state;
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/feedd.conf", tmp_root);
    int n = snprintf(text, sizeof text,
                     "# test config\nthreads = 1\nmax-batch = 5\nmax-window = 3 # trailing\n"
                     "dataset = cfg=%s,cache=64\ncache-bytes = 8M\n",
                     good_dir);
    assert_int_equal(feed_test_write_file(path, text, (size_t)n), 0);
    feed_test_server s2;
    const char *args[] = {"--config", path, "--max-window", "2", NULL};
    assert_int_equal(feed_test_server_start(args, &s2), 0);
    grpc_channel *ch = feedtest_channel(s2.target);
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(ch, "", &code);
    assert_non_null(r);
    assert_int_equal(r->max_batch_size, 5);
    assert_int_equal(r->max_window, 2); /* the command line wins */
    assert_int_equal(r->server_threads, 1);
    assert_int_equal(r->n_datasets, 1);
    assert_string_equal(r->datasets[0]->name, "cfg");
    feed__v1__describe_response__free_unpacked(r, NULL);

    /* A cached dataset: the same request twice gives the same bytes, the second from the cache. */
    Feed__V1__TransformSpec spec = train_spec(48);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "cfg", 99, 1);
    uint64_t idx[4] = {0, 1, 2, 3};
    Feed__V1__Batch *b[2];
    for (int k = 0; k < 2; k++) {
        feedtest_stream s;
        assert_int_equal(feedtest_stream_open(ch, 60, &s), 0);
        assert_int_equal(send_batch(&s, &open, 1, 0, idx, 4), 0);
        b[k] = feedtest_stream_recv(&s);
        assert_non_null(b[k]);
        feedtest_stream_writes_done(&s);
        assert_null(feedtest_stream_recv(&s));
        assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    }
    assert_memory_equal(b[0]->data.data, b[1]->data.data, b[0]->data.len);
    feed__v1__batch__free_unpacked(b[0], NULL);
    feed__v1__batch__free_unpacked(b[1], NULL);
    assert_true(scrape(&s2, "feedd_cache_hits_total") >= 4);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s2), 0);

    /* Bad configurations make feedd exit at once with an error. */
    n = snprintf(text, sizeof text, "threads = lots\ndataset = x=%s\n", good_dir);
    assert_int_equal(feed_test_write_file(path, text, (size_t)n), 0);
    assert_int_not_equal(feed_test_server_start(args, &s2), 0);
    const char *bad_args[] = {"--dataset", "x=/nonexistent/dir", NULL};
    assert_int_not_equal(feed_test_server_start(bad_args, &s2), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_streams),
        cmocka_unit_test(test_resource_exhausted),
        cmocka_unit_test(test_memory_backpressure),
        cmocka_unit_test(test_memory_fifo),
        cmocka_unit_test(test_max_streams),
        cmocka_unit_test(test_graceful_shutdown),
        cmocka_unit_test(test_drain_with_waiting_batches),
        cmocka_unit_test(test_drain_timeout),
        cmocka_unit_test(test_metrics_endpoint),
        cmocka_unit_test(test_config_file),
    };
    /* CMOCKA_FILTER=test_resource_exhausted runs one case (a glob; cmocka's own syntax). */
    if (getenv("CMOCKA_FILTER"))
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
