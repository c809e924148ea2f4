/*
 * Owner routing (client/src/sched/sched_route.c) driven by scripted events, in the
 * scripted world of sched_script.c: no sockets, threads, sleeps or clock.
 * Cases: every sample goes to its owner, marked OWNER, and each batch's
 * pieces land at their positions (every sample's own pixels, in plan
 * order); a failed owner's pieces go to each sample's next server in
 * rendezvous order, marked NOT_OWNER, and nothing else is asked again; a
 * server leaving (removed from DNS) hands its share to the next owners, now
 * OWNER; so does a listed server down for unavailable_timeout_ms, until it
 * serves again; a server joining or leaving changes the owner of its share only;
 * an owner that fails while one of its pieces lands and a second piece of
 * the same batch fails its checks: the batch is delivered once, whole; two
 * pieces landing at once, the completing one reporting first: the batch is
 * handed out only once both have reported; a
 * straggling owner is hedged to the next server and the epoch is delivered
 * exactly once; owner routing off sends batches whole.
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
#include "plan.h"
#include "sched_impl.h"
#include "sched_script.h"

/* A loader as make_loader's, routing by owner from the start (a server described the dataset
 * with a cache). */
static loader *make_routed(uint64_t samples, uint32_t batch, uint32_t nservers, uint32_t window,
                           uint32_t prefetch)
{
    loader *l = make_loader(samples, batch, nservers, window, prefetch);
    pthread_mutex_lock(&l->mu);
    sched_note_cache_side(l, &l->servers[0], 256);
    pthread_mutex_unlock(&l->mu);
    assert_true(l->routing);
    return l;
}

/* The owner of index among the servers not removed and not `skip` (UINT32_MAX: none skipped):
 * what sched_route_owner says with skip removed for the while. */
static uint32_t owner_without(loader *l, uint64_t index, uint32_t skip)
{
    bool was = skip < l->num_servers && l->servers[skip].removed;
    if (skip < l->num_servers)
        l->servers[skip].removed = true;
    uint32_t o = sched_route_owner(l, index);
    if (skip < l->num_servers)
        l->servers[skip].removed = was;
    return o;
}

/* Each sample of requests [from, g.nreq) once at most in `seen` (count per index). */
static void count_samples(uint32_t from, uint32_t *seen, uint32_t epoch)
{
    for (uint32_t i = from; i < g.nreq; i++)
        if (g.req[i].epoch == epoch)
            for (uint32_t k = 0; k < g.req[i].n; k++)
                seen[g.req[i].idx[k]]++;
}

static void test_each_sample_goes_to_its_owner(void **state)
{
    (void)state;
    loader *l = make_routed(256, 16, 4, 8, 2);
    dispatch(l);
    assert_true(g.nreq > 4);
    for (uint32_t i = 0; i < g.nreq; i++) {
        assert_int_equal(g.req[i].ownership, SCHED_OWNER);
        for (uint32_t k = 0; k < g.req[i].n; k++)
            assert_int_equal(sched_route_owner(l, g.req[i].idx[k]), g.req[i].server);
    }
    /* The pieces of a batch are its samples, each once. */
    uint32_t seen[256] = {0};
    count_samples(0, seen, 0);
    const uint32_t *want;
    uint32_t n;
    client_plan_batch(&l->plan, 0, &want, &n);
    for (uint32_t k = 0; k < n; k++)
        assert_int_equal(seen[want[k]], 1);
    /* Reverse replies: batches in plan order, every sample's pixels at its position. */
    expect_epoch(l, 0, 0);
    for (uint32_t i = 0; i < g.nreq; i++)
        for (uint32_t k = 0; k < g.req[i].n; k++)
            assert_int_equal(sched_route_owner(l, g.req[i].idx[k]), g.req[i].server);
    assert_int_equal(l->stats.reissued, 0);
    /* Rendezvous spreads the dataset: each of 4 servers owns 15-35% of 4096 samples. */
    uint32_t owned[4] = {0};
    for (uint64_t i = 0; i < 4096; i++)
        owned[sched_route_owner(l, i)]++;
    for (uint32_t s = 0; s < 4; s++)
        assert_true(owned[s] > 4096 * 15 / 100 && owned[s] < 4096 * 35 / 100);
    free_loader(l);
}

static void test_dead_owner_piece_goes_to_next_owner_only(void **state)
{
    (void)state;
    /* 3 slots at most: every piece fits in its owner's window of 8, so what moves is seen. */
    loader *l = make_routed(240, 16, 4, 8, 2);
    l->cfg.max_slots = 3;
    dispatch(l);
    uint32_t mark = g.nreq;
    uint32_t lost[240] = {0};
    sent owed[64];
    uint32_t nowed = 0;
    for (uint32_t i = 0; i < g.nreq; i++) {
        if (g.req[i].server != 1)
            continue;
        owed[nowed++] = g.req[i];
        for (uint32_t k = 0; k < g.req[i].n; k++)
            lost[g.req[i].idx[k]]++;
    }
    assert_true(nowed > 0);
    const call_ctx *old_stream = l->servers[1].stream;
    fail_server(l, 1);
    dispatch(l);
    /* Re-sent: exactly server 1's samples, each to its next owner, not admitted there. */
    uint32_t again[240] = {0};
    count_samples(mark, again, 0);
    for (uint32_t i = mark; i < g.nreq; i++) {
        assert_int_not_equal(g.req[i].server, 1);
        assert_int_equal(g.req[i].ownership, SCHED_NOT_OWNER);
        for (uint32_t k = 0; k < g.req[i].n; k++)
            assert_int_equal(owner_without(l, g.req[i].idx[k], 1), g.req[i].server);
    }
    for (uint32_t i = 0; i < 240; i++)
        assert_int_equal(again[i], lost[i]);
    /* Server 1's late replies, on its old stream: dropped. */
    uint32_t before = g.nreq;
    for (uint32_t i = 0; i < nowed; i++)
        reply_from(l, 1, old_stream, &owed[i]);
    assert_int_equal(g.nreq, before);
    expect_epoch(l, 0, 0);
    assert_int_equal(sent_to(1, mark), 0);
    free_loader(l);
}

static void test_leaving_server_hands_its_share_to_the_next_owners(void **state)
{
    (void)state;
    loader *l = make_routed(240, 16, 4, 8, 2);
    l->cfg.max_slots = 3;
    dispatch(l);
    uint32_t mark = g.nreq;
    /* Server 2 leaves DNS (resolve.c fails and removes it): its share has new owners. */
    pthread_mutex_lock(&l->mu);
    sched_fail_server(l, &l->servers[2], "left DNS", g.now);
    l->servers[2].removed = true;
    pthread_mutex_unlock(&l->mu);
    dispatch(l);
    assert_true(g.nreq > mark);
    for (uint32_t i = mark; i < g.nreq; i++) {
        assert_int_equal(g.req[i].ownership, SCHED_OWNER);
        for (uint32_t k = 0; k < g.req[i].n; k++)
            assert_int_equal(sched_route_owner(l, g.req[i].idx[k]), g.req[i].server);
    }
    expect_epoch(l, 0, 0);
    free_loader(l);
}

/* A listed server that stays down: once it has been down for unavailable_timeout_ms its share
 * goes to the next owners as OWNER (cached there; before, NOT_OWNER for as long as it was
 * down, so its share was in no cache); back up, it owns its share again. */
static void test_absent_server_hands_its_share_over_until_back(void **state)
{
    (void)state;
    loader *l = make_routed(240, 16, 4, 8, 2);
    l->cfg.max_slots = 3;
    /* Short, and the batch deadline long, so that the clock can jump past it while the
     * others' replies are still owed. */
    l->cfg.unavailable_timeout_ms = 500;
    l->cfg.batch_deadline_ms = 60000;
    uint32_t owner0[240];
    for (uint64_t i = 0; i < 240; i++)
        owner0[i] = sched_route_owner(l, i);
    dispatch(l);
    fail_server(l, 1);
    dispatch(l);
    /* Still its owner a moment later: a restart does not move the share. */
    g.now += (uint64_t)(l->cfg.unavailable_timeout_ms - 1) * 1000000u;
    tick(l);
    for (uint64_t i = 0; i < 240; i++)
        assert_int_equal(sched_route_owner(l, i), owner0[i]);
    g.now += 1000000u;
    tick(l);
    uint32_t mark = g.nreq, moved = 0;
    expect_epoch(l, 0, 0);
    for (uint32_t i = mark; i < g.nreq; i++) {
        assert_int_not_equal(g.req[i].server, 1);
        for (uint32_t k = 0; k < g.req[i].n; k++) {
            uint64_t idx = g.req[i].idx[k];
            assert_int_equal(sched_route_owner(l, idx), owner_without(l, idx, 1));
            if (owner0[idx] == 1 && g.req[i].ownership == SCHED_OWNER)
                moved++;
        }
    }
    assert_true(moved > 0);
    /* Back: it serves a batch, and owns its share again. */
    pthread_mutex_lock(&l->mu);
    l->servers[1].retry_at_ns = g.now;
    pthread_mutex_unlock(&l->mu);
    tick(l);
    reconnect(l, 1);
    set_epoch_at(l, 1, 0);
    expect_epoch(l, 1, 0);
    assert_int_equal(l->servers[1].state, SRV_UP);
    for (uint64_t i = 0; i < 240; i++)
        assert_int_equal(sched_route_owner(l, i), owner0[i]);
    free_loader(l);
}

static void test_join_and_leave_move_only_their_share(void **state)
{
    (void)state;
    enum { N = 8192 };
    loader *l = make_routed(N, 16, 4, 8, 2);
    uint8_t *before = malloc(N);
    assert_non_null(before);
    for (uint64_t i = 0; i < N; i++)
        before[i] = (uint8_t)sched_route_owner(l, i);
    /* A fifth server joins: only samples it now owns move, about a fifth of them. */
    server *s = &l->servers[4];
    snprintf(s->target, sizeof s->target, "script:4");
    l->num_servers = 5;
    uint32_t moved = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint32_t o = sched_route_owner(l, i);
        if (o != before[i]) {
            assert_int_equal(o, 4);
            moved++;
        }
    }
    assert_true(moved > N * 15 / 100 && moved < N * 25 / 100);
    /* Server 0 leaves instead: only its samples move, and to the others. */
    l->num_servers = 4;
    l->servers[0].removed = true;
    for (uint64_t i = 0; i < N; i++) {
        uint32_t o = sched_route_owner(l, i);
        if (before[i] == 0)
            assert_int_not_equal(o, 0);
        else
            assert_int_equal(o, before[i]);
    }
    free(before);
    free_loader(l);
}

/* The request among g.req[0..nreq) to server s for a piece of the batch holding index. */
static const sent *piece_of(uint32_t s, const uint32_t *batch, uint32_t n)
{
    for (uint32_t i = 0; i < g.nreq; i++) {
        if (g.req[i].server != s)
            continue;
        for (uint32_t k = 0; k < n; k++)
            if (g.req[i].idx[0] == batch[k])
                return &g.req[i];
    }
    return NULL;
}

static void test_exactly_once_under_a_failure_during_landing(void **state)
{
    (void)state;
    loader *l = make_routed(240, 16, 4, 8, 2);
    l->cfg.max_slots = 3; /* the two servers left have room for what moves */
    dispatch(l);
    const uint32_t *b0;
    uint32_t n0;
    client_plan_batch(&l->plan, 0, &b0, &n0);
    /* Two pieces of batch 0, from servers 0 and 1 (owners of some of its 16 samples). */
    const sent *p0 = NULL, *p1 = NULL;
    uint32_t s0 = 0, s1 = 0;
    for (uint32_t a = 0; a < 4 && !p1; a++)
        for (uint32_t b = a + 1; b < 4 && !p1; b++)
            if (piece_of(a, b0, n0) && piece_of(b, b0, n0)) {
                s0 = a;
                s1 = b;
                p0 = piece_of(a, b0, n0);
                p1 = piece_of(b, b0, n0);
            }
    assert_non_null(p1);
    sent r0 = *p0, r1 = *p1;
    arrival good, bad;
    arrive(l, &good, s0, l->servers[s0].stream, &r0, r0.epoch);
    arrive(l, &bad, s1, l->servers[s1].stream, &r1, r1.epoch + 1);
    assert_non_null(good.pc);
    assert_non_null(bad.pc);
    assert_ptr_equal(good.pc->slot, bad.pc->slot);
    assert_int_equal(good.pc->slot->state, SLOT_LANDING);
    /* Server s0 fails while its piece lands: the landing piece is not asked again. */
    fail_server(l, s0);
    uint32_t mark = g.nreq;
    assert_int_equal(land(l, &good), 0);
    assert_int_equal(land(l, &bad), FEED_EPROTO);
    assert_int_equal(l->servers[s1].state, SRV_DOWN);
    dispatch(l);
    uint32_t again[240] = {0};
    count_samples(mark, again, 0);
    for (uint32_t k = 0; k < r0.n; k++)
        assert_int_equal(again[r0.idx[k]], 0);
    for (uint32_t k = 0; k < r1.n; k++)
        assert_int_equal(again[r1.idx[k]], 1);
    for (uint32_t i = mark; i < g.nreq; i++)
        assert_true(g.req[i].server != s0 && g.req[i].server != s1);
    /* The rest of the epoch from the two servers left: each batch once, in order, whole. */
    expect_epoch(l, 0, 0);
    free_loader(l);
}

/* Two pieces of one batch land at once: the one that completes it (the second to add its
 * samples) reports first. The batch is not handed out until the other has reported too: were
 * it, the slot could be released and reused by the next batch before that receiver retook mu,
 * and its report would mark a piece of the new batch landed (the batch then never completes). */
static void test_batch_ready_only_when_every_piece_reported(void **state)
{
    (void)state;
    loader *l = make_routed(240, 16, 4, 8, 1);
    l->cfg.max_slots = 2;
    dispatch(l);
    const uint32_t *b0;
    uint32_t n0;
    client_plan_batch(&l->plan, 0, &b0, &n0);
    const sent *mine[4];
    uint32_t npieces = 0;
    for (uint32_t s = 0; s < 4; s++)
        if (piece_of(s, b0, n0))
            mine[npieces++] = piece_of(s, b0, n0);
    assert_true(npieces >= 2);
    /* Every piece but the first lands and reports; then the first and the last land at once. */
    for (uint32_t k = 2; k < npieces; k++)
        reply(l, mine[k]);
    arrival first, last;
    arrive(l, &first, mine[0]->server, l->servers[mine[0]->server].stream, mine[0], mine[0]->epoch);
    arrive(l, &last, mine[1]->server, l->servers[mine[1]->server].stream, mine[1], mine[1]->epoch);
    assert_int_equal(land_unlocked(l, &first), 0);
    assert_int_equal(land_unlocked(l, &last), 0);
    assert_true(last.pc->finished);
    slot *sl = last.pc->slot;
    land_report(l, &last);
    assert_int_equal(sl->state, SLOT_LANDING);
    feed_batch *b = NULL;
    assert_int_equal(next_at(l, &b, NULL), SCHED_WAIT);
    land_report(l, &first);
    assert_int_equal(sl->state, SLOT_READY);
    assert_int_equal(next_at(l, &b, NULL), 0);
    check_pixels(b);
    release_at(l, b);
    dispatch(l);
    expect_epoch(l, 0, 1);
    free_loader(l);
}

static void test_straggling_owner_is_hedged(void **state)
{
    (void)state;
    /* Under routing a straggler is 8 x the median and at least CLIENT_ROUTE_HEDGE_FLOOR_MS per
     * piece: one at 2 s a piece beside two at 50 ms. Left with its share it would hold the
     * epoch to its third of 96 batches at 2 s each (64 s); spilled and hedged, the epoch takes
     * under a third of that. */
    loader *l = make_routed(96 * 8, 8, 3, 4, 4);
    const uint64_t service_ns[3] = {50 * MS, 50 * MS, 2000 * MS};
    played p = play_epoch(l, 0, service_ns);
    print_message("routed, a straggler: %llu ms, hedged %llu, requests %u %u %u\n",
                  (unsigned long long)(p.elapsed_ns / MS), (unsigned long long)p.hedged,
                  p.requests[0], p.requests[1], p.requests[2]);
    assert_true(p.hedged > 0);
    assert_true(p.elapsed_ns < 64000 * MS / 3);
    free_loader(l);
}

static void test_routing_off_sends_whole_batches(void **state)
{
    (void)state;
    loader *l = make_loader(240, 16, 4, 8, 2);
    l->cfg.owner_routing = FEED_OWNER_ROUTING_OFF;
    pthread_mutex_lock(&l->mu);
    sched_note_cache_side(l, &l->servers[0], 256);
    pthread_mutex_unlock(&l->mu);
    assert_false(l->routing);
    dispatch(l);
    for (uint32_t i = 0; i < g.nreq; i++) {
        assert_int_equal(g.req[i].n, 16);
        assert_int_equal(g.req[i].ownership, 0);
    }
    expect_epoch(l, 0, 0);
    free_loader(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_sample_goes_to_its_owner),
        cmocka_unit_test(test_dead_owner_piece_goes_to_next_owner_only),
        cmocka_unit_test(test_leaving_server_hands_its_share_to_the_next_owners),
        cmocka_unit_test(test_absent_server_hands_its_share_over_until_back),
        cmocka_unit_test(test_join_and_leave_move_only_their_share),
        cmocka_unit_test(test_exactly_once_under_a_failure_during_landing),
        cmocka_unit_test(test_batch_ready_only_when_every_piece_reported),
        cmocka_unit_test(test_straggling_owner_is_hedged),
        cmocka_unit_test(test_routing_off_sends_whole_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
