/*
 * The Stream call's state machine (server/service/stream_sm.h) driven by scripted
 * events: no sockets, no threads, no sleeps. Each test is one exact
 * interleaving, including the races that only timing reached before (a send
 * finishing after a cancel, a job done after a cancel, a drain with batches
 * queued, a cancel while a batch waits for memory).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "stream_sm.h"

static feedd_stream_sm sm;
static feedd_sm_out out;
static feedd_sm_job jobs[4];

/* Each event starts with an empty out, as stream.c's handlers do. */
static feedd_sm_out *fresh(void)
{
    memset(&out, 0, sizeof out);
    return &out;
}

/* The event dropped exactly job j. */
static bool discarded_only(const feedd_sm_job *j)
{
    const feed_list_node *n = out.discard.first;
    return n == &j->link && n == out.discard.last;
}

static bool nothing(const feedd_sm_out *o)
{
    return feed_list_empty(&o->discard) && !o->drop_work && !o->admit && !o->start && !o->send &&
           !o->arm_recv && !o->finish && !o->cancel;
}

static void open_stream(bool draining)
{
    feedd_sm_init(&sm);
    feedd_sm_open(&sm, draining, fresh());
}

/* A request for job j arrives, is read and accepted, and its memory is granted at once. */
static void request_started(feedd_sm_job *j, uint32_t window)
{
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    assert_true(nothing(&out));
    assert_true(feedd_sm_on_request(&sm, window, j, &out));
    feedd_sm_read_done(&sm, &out);
    assert_ptr_equal(out.admit, j);
    assert_true(out.arm_recv);
    assert_false(out.finish);
    feedd_sm_on_granted(&sm, j, true, fresh());
    assert_ptr_equal(out.start, j);
}

/* jobs[0] is being sent and jobs[1], done, is ready behind it. */
static void one_sending_one_ready(uint32_t window)
{
    open_stream(false);
    assert_true(out.arm_recv);
    assert_false(out.finish);
    request_started(&jobs[0], window);
    request_started(&jobs[1], window);
    feedd_sm_on_job_done(&sm, &jobs[0], false, fresh());
    assert_ptr_equal(out.send, &jobs[0]);
    /* One send in flight: the next finished batch waits behind it. */
    feedd_sm_on_job_done(&sm, &jobs[1], false, fresh());
    assert_true(nothing(&out));
}

static void test_batches_in_order_then_ok(void **state)
{
    (void)state;
    one_sending_one_ready(2);
    /* The client half-closes; the status waits for the last batch. */
    assert_false(feedd_sm_on_recv(&sm, false, fresh()));
    assert_true(nothing(&out));
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_ptr_equal(out.send, &jobs[1]);
    assert_false(out.finish);
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_OK);
    assert_string_equal(out.msg, "");
    /* Once only: RECV_CLOSE_ON_SERVER after the status asks for nothing. */
    feedd_sm_on_cancel(&sm, fresh());
    assert_false(out.finish);
    assert_true(feed_list_empty(&out.discard));
    assert_int_equal(sm.outstanding, 0);
}

static void test_window_full_fails_the_stream(void **state)
{
    (void)state;
    open_stream(false);
    request_started(&jobs[0], 1);
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    assert_false(feedd_sm_on_request(&sm, 1, &jobs[1], &out));
    feedd_sm_read_done(&sm, &out);
    assert_null(out.admit);
    assert_false(out.arm_recv);
    assert_true(out.drop_work);
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_string_equal(out.msg, "window: 1 batches already outstanding (window 1)");
    /* The pool still had jobs[0]: the transport takes it back. */
    feedd_sm_on_dropped(&sm, fresh());
    assert_true(nothing(&out));
    assert_int_equal(sm.outstanding, 0);
}

static void test_send_done_after_cancel(void **state)
{
    (void)state;
    one_sending_one_ready(3);

    feedd_sm_on_cancel(&sm, fresh());
    assert_true(out.drop_work);
    assert_true(discarded_only(&jobs[1]));
    assert_false(out.finish);
    /* The send's tag comes back after the cancel, failed: nothing more goes out. */
    feedd_sm_on_send_done(&sm, false, fresh());
    assert_null(out.send);
    assert_false(out.finish);
    assert_int_equal(sm.outstanding, 0);
}

static void test_send_done_ok_after_cancel(void **state)
{
    (void)state;
    open_stream(false);
    request_started(&jobs[0], 2);
    feedd_sm_on_job_done(&sm, &jobs[0], false, fresh());
    assert_ptr_equal(out.send, &jobs[0]);
    feedd_sm_on_cancel(&sm, fresh());
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_true(nothing(&out));
}

static void test_job_done_after_cancel(void **state)
{
    (void)state;
    open_stream(false);
    request_started(&jobs[0], 2);
    feedd_sm_on_cancel(&sm, fresh());
    assert_true(out.drop_work);
    /* A worker held it, so the pool did not hand it back; its done comes later. */
    feedd_sm_on_job_done(&sm, &jobs[0], true, fresh());
    assert_true(discarded_only(&jobs[0]));
    assert_null(out.send);
    assert_false(out.finish);
    assert_int_equal(sm.outstanding, 0);
    /* Even a done that was not marked cancelled is dropped once the call is over. */
    open_stream(false);
    request_started(&jobs[1], 2);
    feedd_sm_on_cancel(&sm, fresh());
    feedd_sm_on_job_done(&sm, &jobs[1], false, fresh());
    assert_true(discarded_only(&jobs[1]));
    assert_null(out.send);
}

static void test_drain_sends_what_is_queued(void **state)
{
    (void)state;
    one_sending_one_ready(4);
    request_started(&jobs[2], 4);

    feedd_sm_on_drain(&sm, fresh());
    assert_true(nothing(&out));
    /* A request that comes in while draining is refused, not read. */
    assert_false(feedd_sm_on_recv(&sm, true, fresh()));
    assert_true(nothing(&out));
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_ptr_equal(out.send, &jobs[1]);
    feedd_sm_on_job_done(&sm, &jobs[2], false, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_ptr_equal(out.send, &jobs[2]);
    assert_false(out.finish);
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_UNAVAILABLE);
    assert_string_equal(out.msg, "server draining: no new batches");
}

static void test_drain_idle_and_before_open(void **state)
{
    (void)state;
    open_stream(false);
    feedd_sm_on_drain(&sm, fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_UNAVAILABLE);
    /* A stream that opens while the server drains reads nothing and ends at once. */
    open_stream(true);
    assert_false(out.arm_recv);
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_UNAVAILABLE);
    /* A client that half-closed before the drain gets OK. */
    open_stream(false);
    request_started(&jobs[0], 1);
    assert_false(feedd_sm_on_recv(&sm, false, fresh()));
    feedd_sm_on_drain(&sm, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_job_done(&sm, &jobs[0], false, fresh());
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_OK);
}

static void test_cancel_while_waiting_for_memory(void **state)
{
    (void)state;
    /* Still in the memory FIFO: the transport withdraws it. */
    open_stream(false);
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    assert_true(feedd_sm_on_request(&sm, 2, &jobs[0], &out));
    assert_ptr_equal(out.admit, &jobs[0]); /* and the caps make it wait */
    feedd_sm_on_cancel(&sm, fresh());
    assert_true(out.drop_work);
    assert_true(feed_list_empty(&out.discard));
    feedd_sm_on_dropped(&sm, fresh());
    assert_true(nothing(&out));
    assert_int_equal(sm.outstanding, 0);

    /* Already taken by the granter: its grant arrives after the cancel and starts nothing. */
    open_stream(false);
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    assert_true(feedd_sm_on_request(&sm, 2, &jobs[1], &out));
    feedd_sm_on_cancel(&sm, fresh());
    feedd_sm_on_granted(&sm, &jobs[1], true, fresh());
    assert_null(out.start);
    assert_true(discarded_only(&jobs[1]));
    assert_false(out.finish);
    assert_int_equal(sm.outstanding, 0);
}

static void test_failure_waits_for_the_send_in_flight(void **state)
{
    (void)state;
    one_sending_one_ready(3);
    /* A bad request: its batches go, but its status waits for the send's tag. */
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    feedd_sm_fail(&sm, GRPC_STATUS_INVALID_ARGUMENT, "request: bad", &out);
    feedd_sm_read_done(&sm, &out);
    assert_true(out.drop_work);
    assert_true(discarded_only(&jobs[1]));
    assert_false(out.arm_recv);
    assert_false(out.finish);
    /* A second failure does not replace the first. */
    feedd_sm_fail(&sm, GRPC_STATUS_INTERNAL, "other", fresh());
    assert_true(nothing(&out));
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_null(out.send);
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_INVALID_ARGUMENT);
    assert_string_equal(out.msg, "request: bad");
}

static void test_allocation_and_send_failures(void **state)
{
    (void)state;
    open_stream(false);
    assert_true(feedd_sm_on_recv(&sm, true, fresh()));
    assert_true(feedd_sm_on_request(&sm, 2, &jobs[0], &out));
    feedd_sm_on_granted(&sm, &jobs[0], false, fresh());
    assert_null(out.start);
    assert_true(discarded_only(&jobs[0]));
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_string_equal(out.msg, "memory: allocation failed");

    open_stream(false);
    request_started(&jobs[1], 2);
    feedd_sm_on_job_done(&sm, &jobs[1], false, fresh());
    assert_ptr_equal(out.send, &jobs[1]);
    feedd_sm_on_send_failed(&sm, GRPC_STATUS_INTERNAL, "could not pack a batch", fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_INTERNAL);
    assert_int_equal(sm.outstanding, 0);
}

/*
 * A send pending for send-stall-ms cancels the call, once, and nothing goes
 * out after it. The tick's clock may read before the send started (found on
 * the GPU machine when another thread sampled the clock: such a send read as
 * pending for 2^64 ns and a healthy stream was cancelled); that send has been
 * pending for 0 ms.
 */
static void test_stalled_send_cancels_once(void **state)
{
    (void)state;
    uint64_t t0 = 5000000000ull;
    open_stream(false);
    request_started(&jobs[0], 2);
    request_started(&jobs[1], 2);
    feedd_sm_on_job_done(&sm, &jobs[0], false, fresh());
    assert_ptr_equal(out.send, &jobs[0]);
    feedd_sm_on_send_started(&sm, t0);
    feedd_sm_on_tick(&sm, t0 - 1, false, 1000, 64, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_tick(&sm, t0 + 999999999ull, false, 1000, 64, fresh());
    assert_true(nothing(&out));
    /* Off: never. */
    feedd_sm_on_tick(&sm, t0 + 3600000000000ull, false, 0, 64, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_tick(&sm, t0 + 1000000000ull, false, 1000, 64, fresh());
    assert_true(out.cancel);
    assert_int_equal(out.cancel_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_string_equal(out.cancel_msg, "a batch send made no progress for 1000 ms (send-stall-ms "
                                        "1000): the client stopped reading; 64 bytes held");
    assert_false(out.finish);
    feedd_sm_on_tick(&sm, t0 + 2000000000ull, false, 1000, 64, fresh());
    assert_true(nothing(&out));
    /* The batch behind it and the status never go out; the close ends the stream. */
    feedd_sm_on_job_done(&sm, &jobs[1], false, fresh());
    assert_true(discarded_only(&jobs[1]));
    assert_null(out.send);
    feedd_sm_on_send_done(&sm, false, fresh());
    assert_null(out.send);
    assert_false(out.finish);
    feedd_sm_on_cancel(&sm, fresh());
    feedd_sm_on_recv(&sm, false, fresh());
    assert_true(feedd_sm_finished(&sm));
}

/* A tick that sees the server draining is the drain, once. */
static void test_tick_drains(void **state)
{
    (void)state;
    open_stream(false);
    feedd_sm_on_tick(&sm, 1, false, 1000, 0, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_tick(&sm, 2, true, 1000, 0, fresh());
    assert_true(out.finish);
    assert_int_equal(out.code, GRPC_STATUS_UNAVAILABLE);
    feedd_sm_on_status_started(&sm, true, fresh());
    assert_true(nothing(&out));
    feedd_sm_on_tick(&sm, 3, true, 1000, 0, fresh());
    assert_true(nothing(&out));
}

/*
 * The machine says when the stream's life is over: the call closed, no
 * receive, send or status in flight, no job anywhere. Each of those keeps it.
 */
static void test_end_of_life(void **state)
{
    (void)state;
    open_stream(false);
    request_started(&jobs[0], 2);
    feedd_sm_on_job_done(&sm, &jobs[0], false, fresh());
    assert_ptr_equal(out.send, &jobs[0]);
    feedd_sm_on_send_started(&sm, 10);
    assert_false(feedd_sm_on_recv(&sm, false, fresh()));
    assert_false(feedd_sm_finished(&sm)); /* a send in flight, not closed */
    feedd_sm_on_send_done(&sm, true, fresh());
    assert_true(out.finish);
    feedd_sm_on_status_started(&sm, true, fresh());
    assert_false(feedd_sm_finished(&sm)); /* the status in flight */
    feedd_sm_on_cancel(&sm, fresh());
    assert_false(feedd_sm_finished(&sm)); /* still the status */
    feedd_sm_on_status_done(&sm);
    assert_true(feedd_sm_finished(&sm));

    /* Closed with a receive armed and a job in a worker's hands. */
    open_stream(false);
    request_started(&jobs[1], 2);
    feedd_sm_on_cancel(&sm, fresh());
    assert_true(out.drop_work);
    assert_false(feedd_sm_finished(&sm));
    assert_false(feedd_sm_on_recv(&sm, false, fresh()));
    assert_false(feedd_sm_finished(&sm)); /* the job */
    feedd_sm_on_job_done(&sm, &jobs[1], true, fresh());
    assert_true(discarded_only(&jobs[1]));
    assert_true(feedd_sm_finished(&sm));

    /* A status that cannot start: the call is cancelled instead, plainly. */
    open_stream(false);
    feedd_sm_on_recv(&sm, false, fresh());
    assert_true(out.finish);
    feedd_sm_on_status_started(&sm, false, fresh());
    assert_true(out.cancel);
    assert_int_equal(out.cancel_code, GRPC_STATUS_OK);
    assert_false(feedd_sm_finished(&sm));
    feedd_sm_on_cancel(&sm, fresh());
    assert_true(feedd_sm_finished(&sm));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batches_in_order_then_ok),
        cmocka_unit_test(test_window_full_fails_the_stream),
        cmocka_unit_test(test_send_done_after_cancel),
        cmocka_unit_test(test_send_done_ok_after_cancel),
        cmocka_unit_test(test_job_done_after_cancel),
        cmocka_unit_test(test_drain_sends_what_is_queued),
        cmocka_unit_test(test_drain_idle_and_before_open),
        cmocka_unit_test(test_cancel_while_waiting_for_memory),
        cmocka_unit_test(test_failure_waits_for_the_send_in_flight),
        cmocka_unit_test(test_allocation_and_send_failures),
        cmocka_unit_test(test_stalled_send_cancels_once),
        cmocka_unit_test(test_tick_drains),
        cmocka_unit_test(test_end_of_life),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
