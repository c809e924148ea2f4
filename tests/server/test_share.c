/*
 * The pool's order over jobs and streams (server/share.c) on its own:
 * scripted claims, no threads, no clock. Every member stays backlogged unless
 * the script unlinks it, so the counts are exact, not measured.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "share.h"

enum { QUANTUM = 8, MEMBERS = 9 };

typedef struct script {
    feedd_sched s;
    feedd_share_member m[MEMBERS];
    uint64_t member_claims[MEMBERS];
} script;

static script *script_new(uint32_t table_cap)
{
    script *sc = calloc(1, sizeof *sc);
    assert_non_null(sc);
    assert_int_equal(feedd_sched_init(&sc->s, QUANTUM, table_cap), 0);
    return sc;
}

static void script_free(script *sc)
{
    for (int i = 0; i < MEMBERS; i++)
        feedd_sched_leave(&sc->s, &sc->m[i]);
    feedd_sched_destroy(&sc->s);
    free(sc);
}

static int member_index(script *sc, feedd_share_member *m)
{
    return (int)(m - sc->m);
}

/* One claim of `k` samples from whatever the order picks; returns the member's index. */
static int claim(script *sc, uint32_t k)
{
    feedd_share_member *m = feedd_sched_next(&sc->s);
    assert_non_null(m);
    feedd_sched_charge(&sc->s, m, k);
    int i = member_index(sc, m);
    sc->member_claims[i]++;
    return i;
}

/* Claim sizes 1..QUANTUM from a fixed LCG: batches of any size end in short claims. */
static uint32_t claim_size(uint32_t *x)
{
    *x = *x * 1103515245u + 12345u;
    return 1 + (*x >> 16) % QUANTUM;
}

/*
 * Members 0..7 are one job ("big", 8 streams), member 8 another ("small", 1
 * stream), with weights wa and wb, all backlogged. After every claim, the
 * samples each job has had, divided by its weight, differ by at most one
 * turn's credit plus one claim: the DRR bound. Before jobs (each stream its
 * own turn) "big" got 8 samples for each of "small"'s.
 */
static void run_two_jobs(uint32_t wa, uint32_t wb, bool varied)
{
    script *sc = script_new(16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(feedd_sched_join(&sc->s, &sc->m[i], "big", wa), 0);
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[8], "small", wb), 0);
    for (int i = 0; i < MEMBERS; i++)
        feedd_sched_link(&sc->s, &sc->m[i]);
    uint64_t a = 0, b = 0;
    uint32_t x = 7;
    for (int step = 0; step < 5000; step++) {
        uint32_t k = varied ? claim_size(&x) : QUANTUM / 2;
        int i = claim(sc, k);
        if (i < 8)
            a += k;
        else
            b += k;
        /* a/wa - b/wb within one turn's credit plus one claim, scaled by wa*wb. */
        double d = (double)a * wb - (double)b * wa;
        if (d < 0)
            d = -d;
        double bound = (double)(wa > wb ? wa : wb) * QUANTUM * (wa > wb ? wb : wa) +
                       (double)QUANTUM * (wa > wb ? wa : wb);
        if (d > bound)
            fail_msg("after %d claims: big %llu, small %llu (weights %u:%u)", step + 1,
                     (unsigned long long)a, (unsigned long long)b, wa, wb);
    }
    /* Inside "big", the round robin of before: a claim per stream in turn. */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 8; i++) {
        lo = sc->member_claims[i] < lo ? sc->member_claims[i] : lo;
        hi = sc->member_claims[i] > hi ? sc->member_claims[i] : hi;
    }
    assert_true(hi - lo <= 1);
    script_free(sc);
}

static void test_equal_jobs(void **state)
{
    (void)state;
    run_two_jobs(1, 1, false);
    run_two_jobs(1, 1, true);
}

static void test_weighted_jobs(void **state)
{
    (void)state;
    run_two_jobs(2, 1, false);
    run_two_jobs(2, 1, true);
    run_two_jobs(1, 3, true);
}

/* Streams without a job name are a job each: exactly the stream round robin of before. */
static void test_unnamed_streams(void **state)
{
    (void)state;
    script *sc = script_new(16);
    for (int i = 0; i < MEMBERS; i++) {
        assert_int_equal(feedd_sched_join(&sc->s, &sc->m[i], "", 0), 0);
        feedd_sched_link(&sc->s, &sc->m[i]);
    }
    for (int round = 0; round < 20; round++)
        for (int i = 0; i < MEMBERS; i++)
            assert_int_equal(claim(sc, QUANTUM), i);
    script_free(sc);
}

/*
 * A job that runs out of work drops the credit it had left (it cannot bank
 * a turn while idle) and joins the end of the round when work comes back.
 */
static void test_idle_job_banks_nothing(void **state)
{
    (void)state;
    script *sc = script_new(16);
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[0], "a", 1), 0);
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[1], "b", 1), 0);
    feedd_sched_link(&sc->s, &sc->m[0]);
    feedd_sched_link(&sc->s, &sc->m[1]);
    assert_int_equal(claim(sc, 1), 0); /* a's turn: 7 samples of credit left */
    feedd_sched_unlink(&sc->s, &sc->m[0]);
    assert_true(feedd_sched_share_of(&sc->m[0])->credit <= 0);
    feedd_sched_link(&sc->s, &sc->m[0]);
    /* b's turn (8), then a's fresh one. */
    assert_int_equal(claim(sc, 4), 1);
    assert_int_equal(claim(sc, 4), 1);
    assert_int_equal(claim(sc, 8), 0);
    assert_int_equal(claim(sc, 8), 1);
    script_free(sc);
}

/* Names share, the table is bounded, a slot is reused once its job's streams are gone. */
static void test_table(void **state)
{
    (void)state;
    script *sc = script_new(2);
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[0], "a", 1), 0);
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[1], "a", 3), 0);
    assert_ptr_equal(feedd_sched_share_of(&sc->m[0]), feedd_sched_share_of(&sc->m[1]));
    assert_int_equal(feedd_sched_share_of(&sc->m[0])->weight, 3); /* the latest stream's */
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[2], "b", 1), 0);
    /* The table is full: "c" is served as a job of its own. */
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[3], "c", 2), 1);
    assert_ptr_equal(feedd_sched_share_of(&sc->m[3]), &sc->m[3].own);
    assert_int_equal(sc->m[3].own.weight, 2);
    feedd_sched_leave(&sc->s, &sc->m[3]);
    feedd_sched_leave(&sc->s, &sc->m[0]);
    feedd_sched_leave(&sc->s, &sc->m[1]);
    /* a's slot is free again. */
    assert_int_equal(feedd_sched_join(&sc->s, &sc->m[3], "c", 2), 0);
    assert_ptr_not_equal(feedd_sched_share_of(&sc->m[3]), &sc->m[3].own);
    feedd_sched_link(&sc->s, &sc->m[3]);
    feedd_sched_link(&sc->s, &sc->m[2]);
    /* c (weight 2) gets two claims of 8 per b's one. */
    assert_int_equal(claim(sc, 8), 3);
    assert_int_equal(claim(sc, 8), 3);
    assert_int_equal(claim(sc, 8), 2);
    assert_int_equal(claim(sc, 8), 3);
    script_free(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal_jobs),
        cmocka_unit_test(test_weighted_jobs),
        cmocka_unit_test(test_unnamed_streams),
        cmocka_unit_test(test_idle_job_banks_nothing),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
