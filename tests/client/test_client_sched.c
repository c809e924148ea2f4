/*
 * The client's scheduler (sched.c) driven by scripted events, with no
 * sockets, no threads and no sleeps: a scripted transport (sched_transport)
 * records every request the scheduler sends and every server it drops, and
 * the test plays the servers' side by handing Batch messages to
 * sched_on_batch in whatever order the case needs. Cases: replies in reverse
 * order delivered in plan order (the reorder window), every sample exactly
 * once; a failover that re-issues the failed server's batches and drops its
 * late duplicates; the batch deadline failing the server that owes and not
 * the one that does not; prefetch across the epoch boundary kept by
 * set_epoch(e + 1, 0); a transport that refuses a request.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed.pb-c.h"
#include "feed/client.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/timeutil.h"
#include "loader_impl.h"
#include "plan.h"

#define SIDE 8u
#define CLASSES 4u
#define MAXREQ 256u
#define MAXN 16u

typedef struct sent {
    uint32_t server;
    uint64_t id;
    uint32_t epoch;
    uint32_t n;
    uint64_t idx[MAXN];
} sent;

/* What the scripted transport saw. */
static struct {
    sent req[MAXREQ];
    uint32_t nreq;
    uint32_t dropped[4];
    bool refuse;
} g;

static bool script_send(loader *l, server *s, uint64_t id, uint32_t epoch, const uint64_t *idx,
                        uint32_t n)
{
    if (g.refuse)
        return false;
    assert_true(g.nreq < MAXREQ && n <= MAXN);
    sent *r = &g.req[g.nreq++];
    r->server = (uint32_t)(s - l->servers);
    r->id = id;
    r->epoch = epoch;
    r->n = n;
    memcpy(r->idx, idx, n * sizeof(*idx));
    return true;
}

static void script_drop(loader *l, server *s)
{
    g.dropped[s - l->servers]++;
}

static const sched_transport script = {.send_request = script_send, .drop_server = script_drop};

static call_ctx g_streams[4]; /* stand-ins for the servers' live Stream calls */
static receiver g_rx;

static loader *make_loader(uint64_t samples, uint32_t batch, uint32_t nservers, uint32_t window,
                           uint32_t prefetch)
{
    memset(&g, 0, sizeof g);
    loader *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    feed_loader_config_default(&l->cfg);
    l->cfg.batch_size = batch;
    l->cfg.transform.out_h = l->cfg.transform.out_w = SIDE;
    l->cfg.dtype = FEED_DTYPE_UINT8;
    l->cfg.layout = FEED_LAYOUT_NHWC;
    l->cfg.device = FEED_DEVICE_HOST;
    l->cfg.window_per_server = window;
    l->cfg.prefetch = prefetch;
    l->cfg.seed = 7;
    l->cfg.batch_deadline_ms = 1000;
    l->transport = &script;
    l->num_samples = samples;
    l->num_classes = CLASSES;
    l->out_bytes = (size_t)batch * SIDE * SIDE * 3;
    l->max_message = l->out_bytes + (size_t)batch * 512 + 65536;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (uint32_t i = 0; i < nservers; i++) {
        server *s = &l->servers[i];
        snprintf(s->target, sizeof s->target, "script:%u", i);
        s->dns_target = -1;
        s->state = SRV_UP;
        s->stream = &g_streams[i];
        s->window = window;
        s->backoff_ms = CLIENT_BACKOFF_FIRST_MS;
    }
    l->num_servers = nservers;
    l->last_up_ns = l->progress_ns = feed_now_ns();
    client_plan plan, ahead;
    assert_int_equal(sched_build_plans(l, 0, 0, false, &plan, &ahead), 0);
    sched_reset_epoch(l, 0, 0, false, &plan, &ahead);
    g_rx.l = l;
    feed_buf_init(&g_rx.rbuf, l->max_message);
    assert_int_equal(wire_arena_init(&g_rx.arena, 65536 + (size_t)batch * 1024), 0);
    return l;
}

static void free_loader(loader *l)
{
    sched_free_slots(l);
    client_plan_free(&l->plan);
    client_plan_free(&l->ahead);
    wire_arena_free(&g_rx.arena);
    feed_buf_free(&g_rx.rbuf);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

/* What a receiver does after every event. */
static void dispatch(loader *l)
{
    pthread_mutex_lock(&l->mu);
    sched_dispatch(l, true);
    pthread_mutex_unlock(&l->mu);
}

/* The server's reply to request r: pixels filled with a byte derived from the first index. */
static void reply_from(loader *l, uint32_t server_index, const call_ctx *from, const sent *r)
{
    Feed__V1__Batch b = FEED__V1__BATCH__INIT;
    size_t bytes = (size_t)r->n * SIDE * SIDE * 3;
    uint8_t *px = malloc(bytes);
    uint32_t labels[MAXN];
    Feed__V1__SampleStatus st[MAXN];
    assert_non_null(px);
    memset(px, (int)(r->idx[0] & 0xff), bytes);
    for (uint32_t i = 0; i < r->n; i++) {
        labels[i] = (uint32_t)(r->idx[i] % CLASSES);
        st[i] = FEED__V1__SAMPLE_STATUS__SAMPLE_OK;
    }
    b.batch_id = r->id;
    b.epoch = r->epoch;
    b.n_indices = r->n;
    b.indices = (uint64_t *)r->idx;
    b.n_labels = r->n;
    b.labels = labels;
    b.n_status = r->n;
    b.status = st;
    b.height = b.width = SIDE;
    b.channels = 3;
    b.data.len = bytes;
    b.data.data = px;
    b.crc32c = feed_crc32c(0, px, bytes);
    size_t len = feed__v1__batch__get_packed_size(&b);
    uint8_t *msg = malloc(len);
    assert_non_null(msg);
    feed__v1__batch__pack(&b, msg);
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)msg, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    pthread_mutex_lock(&l->mu);
    sched_on_batch(&g_rx, &l->servers[server_index], from, bb);
    pthread_mutex_unlock(&l->mu);
    grpc_byte_buffer_destroy(bb);
    free(msg);
    free(px);
}

static void reply(loader *l, const sent *r)
{
    reply_from(l, r->server, l->servers[r->server].stream, r);
}

static slot_state state_of(loader *l, uint64_t id);

/* Answers every request of `epoch` still in flight, newest or oldest first, dispatching after
 * each reply as a receiver does (the freed window takes more requests), until none is left. */
static uint32_t answer_epoch(loader *l, uint32_t epoch, bool newest_first)
{
    uint32_t answered = 0;
    for (;;) {
        int pick = -1;
        for (uint32_t i = 0; i < g.nreq; i++) {
            if (g.req[i].epoch != epoch || state_of(l, g.req[i].id) != SLOT_INFLIGHT)
                continue;
            if (pick < 0 || newest_first)
                pick = (int)i;
        }
        if (pick < 0)
            return answered;
        reply(l, &g.req[pick]);
        answered++;
        dispatch(l);
    }
}

static slot_state state_of(loader *l, uint64_t id)
{
    for (uint32_t i = 0; i < l->num_slots; i++)
        if (l->slots[i].request_id == id)
            return l->slots[i].state;
    return SLOT_FREE;
}

/* Takes the rest of the epoch, answering what is in flight newest first before each next():
 * plan order from `first`, indices as planned, pixels of the right reply; then FEED_EEOF. */
static void expect_epoch(loader *l, uint32_t epoch, uint64_t first)
{
    client_plan p;
    assert_int_equal(client_plan_build(&p, l->num_samples, l->cfg.seed, epoch, 0, 1,
                                       l->cfg.batch_size, false),
                     0);
    for (uint64_t k = first; k < p.batches; k++) {
        answer_epoch(l, epoch, true);
        feed_batch *b = NULL;
        assert_int_equal(feed_loader_next(l, &b), 0);
        const uint32_t *want;
        uint32_t n;
        client_plan_batch(&p, k, &want, &n);
        assert_int_equal(b->batch_number, k);
        assert_int_equal(b->epoch, epoch);
        assert_int_equal(b->n, n);
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(b->indices[i], want[i]);
            assert_int_equal(b->labels[i], want[i] % CLASSES);
        }
        assert_int_equal(((const uint8_t *)b->data)[0], want[0] & 0xff);
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
        dispatch(l);
    }
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), FEED_EEOF);
    client_plan_free(&p);
}

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

    pthread_mutex_lock(&l->mu);
    l->servers[0].state = SRV_UP;
    sched_fail_server(l, &l->servers[0], "scripted failure");
    pthread_mutex_unlock(&l->mu);
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
    uint64_t late = feed_now_ns() + (uint64_t)l->cfg.batch_deadline_ms * 1000000u + 1000000u;
    pthread_mutex_lock(&l->mu);
    sched_check_deadlines(l, late);
    pthread_mutex_unlock(&l->mu);
    assert_int_equal(l->servers[0].state, SRV_DOWN);
    assert_int_equal(l->servers[1].state, SRV_UP);
    assert_int_equal(g.dropped[0], 1);
    assert_int_equal(g.dropped[1], 0);
    assert_int_equal(l->stats.failovers, 1);
    assert_int_equal(l->stats.reissued, 2);
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
    assert_int_equal(feed_loader_set_epoch(l, 1, 0), 0);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reverse_replies_in_plan_order),
        cmocka_unit_test(test_failover_reissues_and_drops_late_duplicates),
        cmocka_unit_test(test_deadline_fails_only_the_server_that_owes),
        cmocka_unit_test(test_prefetch_across_the_epoch_is_kept),
        cmocka_unit_test(test_refused_request_fails_the_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
