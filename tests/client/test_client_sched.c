/*
 * The client's scheduler (sched.c) driven by scripted events, with no
 * sockets, no threads, no sleeps and no clock: a scripted transport
 * (sched_transport) records every request the scheduler sends, every server
 * it drops and every reconnect it asks for; the test plays the servers' side
 * by handing packed Batch messages (wire.c readers over bytes) to
 * sched_batch_arrived / sched_land / sched_batch_landed in whatever order
 * the case needs, plays the training loop through sched_next / sched_release,
 * and passes the time of every event itself (that scripted world is
 * sched_script.c). Cases: replies in reverse order
 * delivered in plan order (the reorder window), every sample exactly once; a
 * failover that re-issues the failed server's batches and drops its late
 * duplicates; the batch deadline failing the server that owes and not the one
 * that does not, and not a server whose deep window queues requests far
 * longer than the deadline while it keeps answering; a stall, its retry after
 * the backoff and the server's return, each at the exact tick; a server failed
 * while two of its batches are landing; a protocol error on the live stream;
 * next() turning unavailable at the exact time (no server up, or one up that
 * lands nothing) and refusing a caller that holds prefetch batches; prefetch
 * across the epoch boundary kept by set_epoch(e + 1, 0); a transport that
 * refuses a request. Balancing and hedging, with servers that answer at their
 * own pace (play_epoch): a server ten times slower than two others, or one that
 * stops, costs under a tenth of what the two give alone; equal servers share
 * the work and nothing is asked twice; a straggler that recovers gets work
 * again; the batch next() waits for is hedged at the exact time, and either
 * reply may come first (the other is dropped), either server may fail, or
 * set_epoch may drop the batch, each delivered exactly once in plan order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "client_impl.h"
#include "sched_script.h"

static void test_reverse_replies_in_plan_order(void **state)
{
    (void)state;
    /* 5 batches through 3 slots (prefetch 1 + window 1 x 2 servers): slots are reused, so a
     * later batch sits in an earlier slot and arrives before the batches next() owes first. */
    loader *l = make_loader(40, 8, 2, 1, 1);
    dispatch(l);
    assert_int_equal(g.nreq, 2);
    assert_int_not_equal(g.req[0].server, g.req[1].server);
    for (uint32_t i = 1; i < g.nreq; i++)
        assert_true(g.req[i].id > g.req[i - 1].id);
    reply(l, &g.req[0]);
    dispatch(l);
    expect_epoch(l, 0, 0);
    assert_int_equal(l->stats.failovers, 0);
    assert_int_equal(l->stats.reissued, 0);
    free_loader(l);
}

static void test_failover_reissues_and_drops_late_duplicates(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 2, 2, 2);
    dispatch(l);
    assert_int_equal(g.nreq, 4);
    sent owed[4];
    uint32_t nowed = 0;
    for (uint32_t i = 0; i < g.nreq; i++)
        if (g.req[i].server == 0)
            owed[nowed++] = g.req[i];
    assert_int_equal(nowed, 2);
    const call_ctx *old_stream = l->servers[0].stream;

    fail_server(l, 0);
    assert_int_equal(g.dropped[0], 1);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 2);

    /* Server 1 answers what it owes; the freed window takes the re-issued batches. */
    assert_int_equal(answer_epoch(l, 0, false), 5);
    /* The failed server's replies arrive late, on its old stream: dropped, nothing changes. */
    uint32_t before = g.nreq;
    for (uint32_t i = 0; i < nowed; i++) {
        assert_int_not_equal(state_of(l, owed[i].id), SLOT_INFLIGHT);
        reply_from(l, 0, old_stream, &owed[i]);
    }
    assert_int_equal(g.nreq, before);
    assert_int_equal(l->stats.crc_errors, 0);
    expect_epoch(l, 0, 0);
    for (uint32_t i = 0; i < g.nreq; i++)
        if (g.req[i].id > owed[nowed - 1].id && g.req[i].epoch == 0)
            assert_int_equal(g.req[i].server, 1);
    free_loader(l);
}

static void test_deadline_fails_only_the_server_that_owes(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 2, 2, 2);
    dispatch(l);
    for (uint32_t i = 0; i < g.nreq; i++)
        if (g.req[i].server == 1)
            reply(l, &g.req[i]);
    assert_int_equal(l->servers[1].outstanding, 0);
    assert_int_equal(l->servers[0].outstanding, 2);
    g.now += (uint64_t)l->cfg.batch_deadline_ms * MS + MS;
    tick(l);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(l->servers[1].state, SRV_UP);
    assert_int_equal(g.dropped[0], 1);
    assert_int_equal(g.dropped[1], 0);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 2);
    free_loader(l);
}

/* One server answers its oldest epoch-0 request every step_ms of scripted time, the clock
 * ticking before each reply, until nothing of epoch 0 is in flight. */
static void answer_oldest_every(loader *l, uint64_t step_ms)
{
    for (;;) {
        int oldest = -1;
        for (uint32_t i = 0; i < g.nreq && oldest < 0; i++)
            if (g.req[i].epoch == 0 && state_of(l, g.req[i].id) == SLOT_INFLIGHT)
                oldest = (int)i;
        if (oldest < 0)
            break;
        g.now += step_ms * MS;
        tick(l);
        reply(l, &g.req[oldest]);
        dispatch(l);
    }
}

/* One server with the whole epoch in its window answers one batch every 900 ms: the last
 * request waits 57 s, far past the 1 s deadline, but the server is never silent for 1 s, so
 * nothing fails and nothing is re-issued (the deadline counts silence, not queueing). */
static void test_deep_window_is_not_a_stall(void **state)
{
    (void)state;
    loader *l = make_loader(128, 2, 1, CLIENT_MAX_WINDOW, 2);
    dispatch(l);
    assert_int_equal(g.nreq, CLIENT_MAX_WINDOW);
    answer_oldest_every(l, 900);
    assert_true(g.now - T0 >= 57000 * MS);
    assert_int_equal(l->stats.failovers, 0);
    assert_int_equal(l->stats.reissued, 0);
    assert_int_equal(g.dropped[0], 0);
    expect_epoch(l, 0, 0);
    free_loader(l);
}

/* A healthy server shared by many clients can leave one of them without a batch for 15 s at a
 * time (64 clients of one feedd: bench/results/fairness-2core-2026-12-01). With the library's
 * default deadline it is not failed: keepalive finds dead servers, the deadline only catches a
 * connected one that sends nothing. With the old default (10 s) the first silence failed it. */
static void test_busy_shared_server_is_not_failed_by_default(void **state)
{
    (void)state;
    loader *l = make_loader(32, 2, 1, 4, 2);
    feed_loader_config defaults;
    feed_loader_config_default(&defaults);
    l->cfg.batch_deadline_ms = defaults.batch_deadline_ms;
    dispatch(l);
    answer_oldest_every(l, 15000);
    assert_int_equal(l->stats.failovers, 0);
    assert_int_equal(l->stats.reissued, 0);
    assert_int_equal(g.dropped[0], 0);
    expect_epoch(l, 0, 0);
    free_loader(l);
}

static void test_stall_retry_and_return_by_the_clock(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 2, 2, 2);
    dispatch(l); /* T0: two requests to each server */
    assert_int_equal(sent_to(0, 0), 2);
    assert_int_equal(sent_to(1, 0), 2);

    /* Server 1 answers one at T0 + 600 ms; server 0 answers nothing. */
    g.now = T0 + 600 * MS;
    for (uint32_t i = 0; i < g.nreq; i++)
        if (g.req[i].server == 1) {
            reply(l, &g.req[i]);
            break;
        }
    dispatch(l);
    /* Exactly the deadline is not past it. */
    g.now = T0 + 1000 * MS;
    tick(l);
    assert_int_equal(l->stats.failovers, 0);
    assert_int_equal(l->last_up_ns, g.now);
    /* One nanosecond later server 0 has owed for longer than the deadline; server 1 replied
     * 400 ms ago, so it is fine though it owes too. */
    g.now += 1;
    tick(l);
    uint64_t failed_at = g.now;
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(l->servers[1].state, SRV_UP);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 2);
    assert_int_equal(g.dropped[0], 1);
    assert_int_equal(l->servers[0].retry_at_ns, failed_at + CLIENT_BACKOFF_FIRST_MS * MS);
    assert_int_equal(l->servers[0].backoff_ms, 2 * CLIENT_BACKOFF_FIRST_MS);

    /* The retry comes at the end of the backoff, not a tick earlier. */
    g.now = failed_at + CLIENT_BACKOFF_FIRST_MS * MS - 1;
    tick(l);
    assert_int_equal(g.connects[0], 0);
    g.now += 1;
    tick(l);
    assert_int_equal(g.connects[0], 1);
    assert_int_equal(g.connects[1], 0);
    assert_int_equal(l->stats.retries, 1);

    /* Back with a new stream: one batch as a probe, then a full window once it answers. */
    reconnect(l, 0);
    uint32_t mark = g.nreq;
    dispatch(l);
    assert_int_equal(sent_to(0, mark), 1);
    g.now += 10 * MS;
    for (uint32_t i = mark; i < g.nreq; i++)
        if (g.req[i].server == 0)
            reply(l, &g.req[i]);
    assert_int_equal(l->servers[0].state, SRV_UP);
    assert_int_equal(l->servers[0].backoff_ms, CLIENT_BACKOFF_FIRST_MS);
    expect_epoch(l, 0, 0);
    assert_int_equal(l->stats.failovers, 1);
    free_loader(l);
}

static void test_server_fails_while_its_batches_land(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 2, 2, 2);
    dispatch(l);
    sent owed[2];
    uint32_t nowed = 0;
    for (uint32_t i = 0; i < g.nreq && nowed < 2; i++)
        if (g.req[i].server == 0)
            owed[nowed++] = g.req[i];
    assert_int_equal(nowed, 2);
    const call_ctx *from = l->servers[0].stream;
    /* Two receivers take server 0's two replies; the second claims the wrong epoch. */
    arrival good, bad;
    arrive(l, &good, 0, from, &owed[0], owed[0].epoch);
    arrive(l, &bad, 0, from, &owed[1], owed[1].epoch + 1);
    assert_non_null(good.pc);
    assert_non_null(bad.pc);
    assert_int_equal(good.pc->slot->state, SLOT_LANDING);
    /* Meanwhile a third sees the stream end: nothing in flight to re-issue, both are landing. */
    fail_server(l, 0);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 0);
    /* The good one counts; the bad one is re-issued without failing server 0 a second time. */
    assert_int_equal(land(l, &good), 0);
    assert_int_equal(state_of(l, owed[0].id), SLOT_READY);
    assert_int_equal(land(l, &bad), FEED_EPROTO);
    assert_int_equal(state_of(l, owed[1].id), SLOT_PENDING);
    assert_int_equal(l->stats.reissued, 1);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(g.dropped[0], 1);
    uint32_t mark = g.nreq;
    answer_epoch(l, 0, false);
    assert_int_equal(sent_to(0, mark), 0);
    expect_epoch(l, 0, 0);
    free_loader(l);
}

static void test_protocol_error_fails_the_live_stream(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 1, 2, 2);
    dispatch(l);
    arrival a;
    arrive(l, &a, 0, l->servers[0].stream, &g.req[0], g.req[0].epoch + 1);
    assert_int_equal(land(l, &a), FEED_EPROTO);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(g.dropped[0], 1);
    assert_int_equal(l->stats.failovers, 1);
    /* The bad batch and the one still in flight: both wait for a server. */
    assert_int_equal(l->stats.reissued, 2);
    free_loader(l);
}

/* Servers that refuse the credentials (conn.c marks them refused from Describe's status): one
 * of two is failed and retried at the longest backoff while the other serves the epoch; when
 * both refuse, next() says FEED_EAUTH at once, whatever unavailable_timeout_ms; once one takes
 * the credentials on a retry, it serves again. */
static void test_refused_servers(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 2, 2, 2);
    l->cfg.unavailable_timeout_ms = 3600000;
    dispatch(l);
    l->servers[1].refused = true;
    fail_server(l, 1);
    assert_int_equal(l->servers[1].retry_at_ns, g.now + CLIENT_BACKOFF_MAX_MS * MS);
    feed_batch *b = NULL;
    expect_epoch(l, 0, 0);
    assert_int_equal(l->servers[1].batches, 0);
    set_epoch_at(l, 1, 0);
    l->servers[0].refused = true;
    fail_server(l, 0);
    assert_int_equal(next_at(l, &b, NULL), FEED_EAUTH);
    assert_int_equal(next_at(l, &b, NULL), FEED_EAUTH);
    assert_null(b);
    g.now += CLIENT_BACKOFF_MAX_MS * MS;
    tick(l);
    l->servers[0].refused = false; /* its Describe was answered */
    reconnect(l, 0);
    dispatch(l);
    assert_int_equal(next_at(l, &b, NULL), SCHED_WAIT);
    expect_epoch(l, 1, 0);
    free_loader(l);
}

/* No server up: next() waits exactly until the last time one was up plus the unavailable
 * timeout, then says FEED_EUNAVAILABLE, and says it again at once. */
static void test_unavailable_by_the_clock(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 1, 2, 2);
    l->cfg.unavailable_timeout_ms = 2000;
    l->cfg.batch_deadline_ms = 5000; /* so the clock that counts is the down one */
    dispatch(l);
    g.now += 10 * MS;
    tick(l); /* up: the availability clock reads T0 + 10 ms */
    fail_server(l, 0);
    feed_batch *b;
    uint64_t wait = 0;
    g.now += 500 * MS;
    assert_int_equal(next_at(l, &b, &wait), SCHED_WAIT);
    assert_int_equal(wait, 1500 * MS);
    g.now = T0 + 10 * MS + 2000 * MS - 1;
    tick(l); /* down: the clock stays */
    assert_int_equal(next_at(l, &b, &wait), SCHED_WAIT);
    assert_int_equal(wait, 1);
    g.now += 1;
    assert_int_equal(next_at(l, &b, NULL), FEED_EUNAVAILABLE);
    assert_int_equal(next_at(l, &b, NULL), FEED_EUNAVAILABLE);
    assert_null(b);
    free_loader(l);
}

/* A server that is up and takes requests but lands nothing: unavailable once nothing has
 * landed for the longer of the two timeouts, though a server is up all along. */
static void test_stuck_up_server_by_the_clock(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 1, 2, 2);
    l->cfg.unavailable_timeout_ms = 2000;
    l->cfg.batch_deadline_ms = 3000;
    dispatch(l);
    feed_batch *b;
    uint64_t wait = 0;
    g.now += 2999 * MS;
    assert_int_equal(next_at(l, &b, &wait), SCHED_WAIT);
    assert_int_equal(wait, MS);
    g.now += MS;
    assert_int_equal(next_at(l, &b, NULL), FEED_EUNAVAILABLE);
    /* A batch that lands puts it right: delivered in plan order from the first. */
    reply(l, &g.req[0]);
    assert_int_equal(next_at(l, &b, NULL), 0);
    assert_int_equal(b->batch_number, 0);
    free_loader(l);
}

/* The caller may hold `prefetch` batches; one more next() is a misuse, not a wait. */
static void test_next_beyond_prefetch(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 1, 4, 2);
    dispatch(l);
    answer_epoch(l, 0, false);
    feed_batch *b0, *b1, *b2;
    assert_int_equal(next_at(l, &b0, NULL), 0);
    assert_int_equal(next_at(l, &b1, NULL), 0);
    assert_int_equal(next_at(l, &b2, NULL), FEED_ESTATE);
    release_at(l, b0);
    assert_int_equal(next_at(l, &b2, NULL), 0);
    assert_int_equal(b2->batch_number, 2);
    assert_int_equal(l->stats.batches, 3);
    free_loader(l);
}

static void test_prefetch_across_the_epoch_is_kept(void **state)
{
    (void)state;
    loader *l = make_loader(16, 8, 1, 4, 2); /* 2 batches an epoch; 6 slots */
    dispatch(l);
    assert_int_equal(g.nreq, 4);
    const uint32_t epochs[4] = {0, 0, 1, 1};
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(g.req[i].epoch, epochs[i]);
        reply(l, &g.req[i]);
    }
    dispatch(l);
    expect_epoch(l, 0, 0);
    set_epoch_at(l, 1, 0);
    dispatch(l);
    for (uint32_t i = 4; i < g.nreq; i++)
        assert_int_equal(g.req[i].epoch, 2); /* only the next prefetch; epoch 1 is kept */
    expect_epoch(l, 1, 0);
    free_loader(l);
}

static void test_refused_request_fails_the_server(void **state)
{
    (void)state;
    loader *l = make_loader(40, 8, 1, 2, 2);
    g.refuse = true;
    dispatch(l);
    assert_int_equal(g.nreq, 0);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(g.dropped[0], 1);
    free_loader(l);
}

/* One epoch of 96 batches against servers that take service_ms[i] per batch (see play_epoch). */
static played play(uint32_t nservers, uint32_t window, const uint64_t *service_ms)
{
    uint64_t service_ns[4] = {0};
    for (uint32_t i = 0; i < nservers; i++)
        service_ns[i] = service_ms[i] * MS;
    loader *l = make_loader(96 * 8, 8, nservers, window, 4);
    played p = play_epoch(l, 0, service_ns);
    free_loader(l);
    return p;
}

/* Issue 11's straggler: three servers, one ten times slower than the other two. The epoch
 * must take at most 1/0.9 of what the two healthy servers take alone, with a small window and
 * a deep one. */
static void test_straggler_costs_under_a_tenth(void **state)
{
    (void)state;
    const uint32_t windows[2] = {4, 16};
    bool fast_enough = true;
    for (uint32_t w = 0; w < 2; w++) {
        const uint64_t healthy[2] = {10, 10}, with_slow[3] = {10, 10, 100};
        played two = play(2, windows[w], healthy);
        played three = play(3, windows[w], with_slow);
        print_message("window %u: two healthy %llu ms, with the straggler %llu ms (%u requests "
                      "to it)\n",
                      windows[w], (unsigned long long)(two.elapsed_ns / MS),
                      (unsigned long long)(three.elapsed_ns / MS), three.requests[2]);
        fast_enough = fast_enough && three.elapsed_ns * 9 <= two.elapsed_ns * 10;
    }
    assert_true(fast_enough);
}

/* Equal servers: no batch is asked twice, and each server gets a third of the work. */
static void test_equal_servers_are_not_hedged(void **state)
{
    (void)state;
    const uint64_t ms[3] = {10, 10, 10};
    played p = play(3, 4, ms);
    print_message("three equal servers: %llu ms, requests %u %u %u\n",
                  (unsigned long long)(p.elapsed_ns / MS), p.requests[0], p.requests[1],
                  p.requests[2]);
    assert_int_equal(p.hedged, 0);
    for (uint32_t i = 0; i < 3; i++)
        assert_true(p.requests[i] >= 30);
}

/* A server that answers nothing (stopped, well within the batch deadline) costs no more than
 * the straggler: its batches are asked of the others once it has been silent for long. */
static void test_stopped_server_is_hedged_before_the_deadline(void **state)
{
    (void)state;
    const uint64_t healthy[2] = {10, 10}, with_stopped[3] = {10, 10, 0};
    played two = play(2, 4, healthy);
    played three = play(3, 4, with_stopped);
    print_message("two healthy %llu ms, with one stopped %llu ms\n",
                  (unsigned long long)(two.elapsed_ns / MS),
                  (unsigned long long)(three.elapsed_ns / MS));
    assert_true(three.elapsed_ns < 1000 * MS);
    assert_true(three.elapsed_ns * 9 <= two.elapsed_ns * 10);
    assert_true(three.hedged >= 4);
}

/* A straggler that becomes as fast as the others gets its share back in the next epoch. */
static void test_recovered_server_gets_work_again(void **state)
{
    (void)state;
    const uint64_t slow[3] = {10, 10, 100}, healthy[3] = {10, 10, 10};
    loader *l = make_loader(96 * 8, 8, 3, 4, 4);
    uint64_t ns[3];
    for (uint32_t i = 0; i < 3; i++)
        ns[i] = slow[i] * MS;
    played before = play_epoch(l, 0, ns);
    for (uint32_t i = 0; i < 3; i++)
        ns[i] = healthy[i] * MS;
    set_epoch_at(l, 1, 0);
    played after = play_epoch(l, 1, ns);
    print_message("slow: requests %u %u %u; recovered: requests %u %u %u, %llu ms\n",
                  before.requests[0], before.requests[1], before.requests[2], after.requests[0],
                  after.requests[1], after.requests[2],
                  (unsigned long long)(after.elapsed_ns / MS));
    assert_true(before.requests[2] * 10 < before.requests[0]);
    assert_true(after.requests[2] * 2 >= after.requests[0]);
    free_loader(l);
}

/*
 * Three servers, window 1, prefetch 1 (4 slots, 5 batches): servers 1 and 2 answer batches 1
 * and 2 at T0 + 10 ms and server 1 batch 3 at T0 + 20 ms, so the servers take 10 ms a batch;
 * server 0 says nothing about batch 0, the one next() waits for. Past 4 x 10 ms, and not a
 * nanosecond before, batch 0 is asked of server 1 too. Returns the two requests for batch 0
 * (*first to server 0, *hedge to server 1).
 */
static loader *hedged_head(sent *first, sent *hedge)
{
    loader *l = make_loader(40, 8, 3, 1, 1);
    dispatch(l);
    assert_int_equal(g.nreq, 3);
    g.now = T0 + 10 * MS;
    reply(l, &g.req[1]);
    reply(l, &g.req[2]);
    dispatch(l);
    assert_int_equal(g.nreq, 4);
    assert_int_equal(g.req[3].server, 1);
    g.now = T0 + 20 * MS;
    reply(l, &g.req[3]);
    dispatch(l);
    assert_int_equal(g.nreq, 4);
    feed_batch *b;
    assert_int_equal(next_at(l, &b, NULL), SCHED_WAIT);
    g.now = T0 + CLIENT_HEDGE_FACTOR * 10 * MS;
    tick(l);
    dispatch(l);
    assert_int_equal(g.nreq, 4);
    g.now += 1;
    dispatch(l);
    assert_int_equal(g.nreq, 5);
    assert_int_equal(g.req[0].server, 0);
    assert_int_equal(g.req[4].server, 1);
    assert_memory_equal(g.req[4].idx, g.req[0].idx, g.req[0].n * sizeof(uint64_t));
    assert_int_equal(l->stats.hedged, 1);
    assert_int_equal(l->stats.reissued, 0);
    assert_int_equal(l->stats.failovers, 0);
    *first = g.req[0];
    *hedge = g.req[4];
    return l;
}

static void test_hedge_lands_and_the_late_reply_is_dropped(void **state)
{
    (void)state;
    sent first, hedge;
    loader *l = hedged_head(&first, &hedge);
    reply(l, &hedge);
    feed_batch *b;
    assert_int_equal(next_at(l, &b, NULL), 0);
    assert_int_equal(b->batch_number, 0);
    release_at(l, b);
    /* The straggler answers after all: a late duplicate, dropped; its window is free again. */
    reply(l, &first);
    assert_int_equal(l->servers[0].outstanding, 0);
    assert_int_equal(state_of(l, first.id), SLOT_FREE);
    expect_epoch(l, 0, 1);
    assert_int_equal(l->stats.batches, 5);
    assert_int_equal(l->stats.failovers, 0);
    assert_int_equal(g.dropped[0], 0);
    free_loader(l);
}

/* The straggler's own reply comes first: it lands, and the hedge's is the late duplicate. */
static void test_straggler_answers_before_its_hedge(void **state)
{
    (void)state;
    sent first, hedge;
    loader *l = hedged_head(&first, &hedge);
    reply(l, &first);
    feed_batch *b;
    assert_int_equal(next_at(l, &b, NULL), 0);
    assert_int_equal(b->batch_number, 0);
    release_at(l, b);
    reply(l, &hedge);
    assert_int_equal(l->servers[1].outstanding, 0);
    expect_epoch(l, 0, 1);
    assert_int_equal(l->stats.batches, 5);
    free_loader(l);
}

/* The straggler fails with the hedge in flight: the hedge stays the batch's live request,
 * nothing is re-issued, and its reply lands; the straggler's old stream is dropped. */
static void test_straggler_fails_after_the_hedge(void **state)
{
    (void)state;
    sent first, hedge;
    loader *l = hedged_head(&first, &hedge);
    const call_ctx *old_stream = l->servers[0].stream;
    fail_server(l, 0);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 0);
    uint32_t mark = g.nreq;
    dispatch(l);
    for (uint32_t i = mark; i < g.nreq; i++)
        assert_int_not_equal(g.req[i].idx[0], first.idx[0]);
    assert_int_equal(state_of(l, hedge.id), SLOT_INFLIGHT);
    reply_from(l, 0, old_stream, &first);
    assert_int_equal(state_of(l, hedge.id), SLOT_INFLIGHT);
    reply(l, &hedge);
    expect_epoch(l, 0, 0);
    assert_int_equal(l->stats.batches, 5);
    free_loader(l);
}

/* The hedge's server fails: the straggler's request is still live and its reply lands. */
static void test_hedge_server_fails(void **state)
{
    (void)state;
    sent first, hedge;
    loader *l = hedged_head(&first, &hedge);
    fail_server(l, 1);
    assert_int_equal(l->stats.reissued, 0);
    assert_int_equal(state_of(l, first.id), SLOT_INFLIGHT);
    reply(l, &first);
    expect_epoch(l, 0, 0);
    assert_int_equal(l->stats.batches, 5);
    free_loader(l);
}

/* set_epoch drops the hedged batch: both replies come late and are dropped, and the epoch
 * restarted at batch 2 is delivered exactly once from there. */
static void test_set_epoch_drops_a_hedged_batch(void **state)
{
    (void)state;
    sent first, hedge;
    loader *l = hedged_head(&first, &hedge);
    set_epoch_at(l, 0, 2);
    assert_int_equal(state_of(l, first.id), SLOT_FREE);
    reply(l, &hedge);
    reply(l, &first);
    assert_int_equal(l->servers[0].outstanding, 0);
    assert_int_equal(l->servers[1].outstanding, 0);
    expect_epoch(l, 0, 2);
    assert_int_equal(l->stats.batches, 3);
    free_loader(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reverse_replies_in_plan_order),
        cmocka_unit_test(test_failover_reissues_and_drops_late_duplicates),
        cmocka_unit_test(test_deadline_fails_only_the_server_that_owes),
        cmocka_unit_test(test_deep_window_is_not_a_stall),
        cmocka_unit_test(test_busy_shared_server_is_not_failed_by_default),
        cmocka_unit_test(test_stall_retry_and_return_by_the_clock),
        cmocka_unit_test(test_server_fails_while_its_batches_land),
        cmocka_unit_test(test_protocol_error_fails_the_live_stream),
        cmocka_unit_test(test_unavailable_by_the_clock),
        cmocka_unit_test(test_refused_servers),
        cmocka_unit_test(test_stuck_up_server_by_the_clock),
        cmocka_unit_test(test_next_beyond_prefetch),
        cmocka_unit_test(test_prefetch_across_the_epoch_is_kept),
        cmocka_unit_test(test_refused_request_fails_the_server),
        cmocka_unit_test(test_straggler_costs_under_a_tenth),
        cmocka_unit_test(test_equal_servers_are_not_hedged),
        cmocka_unit_test(test_stopped_server_is_hedged_before_the_deadline),
        cmocka_unit_test(test_recovered_server_gets_work_again),
        cmocka_unit_test(test_hedge_lands_and_the_late_reply_is_dropped),
        cmocka_unit_test(test_straggler_answers_before_its_hedge),
        cmocka_unit_test(test_straggler_fails_after_the_hedge),
        cmocka_unit_test(test_hedge_server_fails),
        cmocka_unit_test(test_set_epoch_drops_a_hedged_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
