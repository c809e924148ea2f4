/*
 * Unit tests for resuming an epoch at another world size (plan.c client_plan_resume, state.c),
 * no sockets. A simulated run changes world size within one epoch (8 -> 6 -> 8 and others,
 * ranks consuming different numbers of batches, short last batches, a rank that consumed
 * nothing, one that finished its plan with its padding copy); the test keeps its own books of
 * which samples were handed out and checks each resumed rank's plan against the documented rule
 * (the samples nobody consumed, in permutation order, padded to a multiple of the new world,
 * rank r taking r, r+world, ...), that no sample consumed before a resume comes again after it,
 * and that the whole run hands out every sample. Then the same through the state byte strings
 * (feed_state_combine, feed_resume_plan) written as state.c documents them, and the refusals
 * of states that do not belong together.
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
#include "feedtest.h"
#include "plan.h"

#define MAX_SEGS 8
#define MAX_WORLD 16

/* The reference permutation (tests/support); never NULL here. */
static uint64_t *ref_perm(uint64_t n, uint64_t seed, uint32_t epoch)
{
    uint64_t *p = feed_test_ref_perm(n, seed, epoch);
    assert_non_null(p);
    return p;
}

/* One epoch run under a chain of worlds, with the test's own books. */
typedef struct sim {
    uint64_t n, seed;
    uint32_t epoch, batch;
    uint64_t *perm;
    uint32_t *handed;  /* per sample: times handed out over the run */
    uint8_t *done;     /* per sample: handed out in an earlier segment */
    uint32_t num_segs; /* segments finished */
    client_resume_segment segs[MAX_SEGS];
    uint64_t consumed[MAX_SEGS][MAX_WORLD];
} sim;

static void sim_init(sim *s, uint64_t n, uint64_t seed, uint32_t epoch, uint32_t batch)
{
    memset(s, 0, sizeof(*s));
    s->n = n;
    s->seed = seed;
    s->epoch = epoch;
    s->batch = batch;
    s->perm = ref_perm(n, seed, epoch);
    s->handed = calloc(n, sizeof(*s->handed));
    s->done = calloc(n, 1);
    assert_non_null(s->handed);
    assert_non_null(s->done);
}

static void sim_free(sim *s)
{
    free(s->perm);
    free(s->handed);
    free(s->done);
}

/* A segment under `world`: rank r consumes batches[r] batches of its plan (UINT32_MAX: all of
 * it). Checks each rank's plan against the documented rule. */
static void sim_segment(sim *s, uint32_t world, const uint32_t *batches)
{
    assert_true(world <= MAX_WORLD && s->num_segs < MAX_SEGS);
    uint64_t *left = malloc(s->n * sizeof(*left));
    uint32_t *in_seg = calloc(s->n, sizeof(*in_seg));
    assert_non_null(left);
    assert_non_null(in_seg);
    uint64_t m = 0;
    for (uint64_t k = 0; k < s->n; k++) {
        if (!s->done[s->perm[k]])
            left[m++] = s->perm[k];
    }
    uint64_t per_rank = m ? (m + world - 1) / world : 0;
    uint64_t pad = m ? per_rank * world - m : 0;
    for (uint32_t r = 0; r < world; r++) {
        client_plan p;
        char why[200];
        if (s->num_segs == 0)
            assert_int_equal(client_plan_build(&p, s->n, s->seed, s->epoch, r, world, s->batch,
                                               false), 0);
        else
            assert_int_equal(client_plan_resume(&p, s->n, s->seed, s->epoch, s->segs,
                                                s->num_segs, r, world, s->batch, false, why,
                                                sizeof(why)), 0);
        assert_int_equal(p.count, per_rank);
        assert_int_equal(p.batches, (per_rank + s->batch - 1) / s->batch);
        for (uint64_t t = 0; t < per_rank; t++)
            assert_int_equal(p.samples[t], left[(r + t * world) % m]);
        uint64_t take = batches[r] == UINT32_MAX ? per_rank : (uint64_t)batches[r] * s->batch;
        if (take > per_rank)
            take = per_rank;
        for (uint64_t t = 0; t < take; t++) {
            uint32_t x = p.samples[t];
            /* Never a sample a finished segment handed out. */
            assert_int_equal(s->done[x], 0);
            in_seg[x]++;
            s->handed[x]++;
        }
        s->consumed[s->num_segs][r] = take;
        client_plan_free(&p);
    }
    /* More than once within one segment only for the padding copies: position k of the padded
     * list is left[k mod m], so the first `pad` samples left have one copy more. */
    for (uint64_t k = 0; k < m; k++) {
        uint64_t copies = (per_rank * world) / m + (k < (per_rank * world) % m ? 1u : 0u);
        assert_true(in_seg[left[k]] <= copies);
        assert_true(copies == 1 || pad > 0);
    }
    for (uint64_t x = 0; x < s->n; x++) {
        if (in_seg[x])
            s->done[x] = 1;
    }
    s->segs[s->num_segs].world = world;
    s->segs[s->num_segs].consumed = s->consumed[s->num_segs];
    s->num_segs++;
    free(left);
    free(in_seg);
}

/* After a segment that consumed everything: every sample was handed out, and each more than
 * once only within one segment's padding (sim_segment checked that). */
static void sim_check_complete(const sim *s)
{
    for (uint64_t x = 0; x < s->n; x++)
        assert_true(s->handed[x] >= 1 && s->done[x]);
}

static void test_resume_8_6_8(void **state)
{
    (void)state;
    sim s;
    /* 84 samples, batch 4: world 8 plans 11 each (4 padding copies), short last batches. */
    sim_init(&s, 84, 7, 2, 4);
    /* Uneven: nothing, a short last batch reached (rank 7 finishes: its last sample is the
     * padding copy of position 3, whose own rank consumed nothing, so the copy alone marks that
     * sample), a rank further than the others (one that died mid-step is behind them). */
    uint32_t a[8] = {0, 1, 2, 0, 1, 3, 0, UINT32_MAX};
    sim_segment(&s, 8, a);
    uint32_t b[6] = {1, 0, 2, 1, 0, 1};
    sim_segment(&s, 6, b);
    uint32_t c[8] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX,
                     UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    sim_segment(&s, 8, c);
    sim_check_complete(&s);
    sim_free(&s);
}

static void test_resume_many_shapes(void **state)
{
    (void)state;
    static const struct {
        uint64_t n;
        uint32_t batch, w0, w1, w2;
    } cases[] = {
        {1000, 32, 8, 6, 8}, {1000, 7, 3, 5, 2}, {97, 5, 4, 16, 1},
        {10, 3, 8, 3, 7},    {1, 1, 2, 3, 1},    {513, 64, 1, 4, 12},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sim s;
        sim_init(&s, cases[i].n, 1000 + i, (uint32_t)i, cases[i].batch);
        uint32_t a[MAX_WORLD], b[MAX_WORLD], c[MAX_WORLD];
        for (uint32_t r = 0; r < MAX_WORLD; r++) {
            a[r] = (r * 7 + (uint32_t)i) % 4; /* 0..3 batches, differing by rank */
            b[r] = (r % 3 == 1) ? UINT32_MAX : (r * 5 + 1) % 3;
            c[r] = UINT32_MAX;
        }
        sim_segment(&s, cases[i].w0, a);
        sim_segment(&s, cases[i].w1, b);
        sim_segment(&s, cases[i].w2, c);
        sim_check_complete(&s);
        sim_free(&s);
    }
}

static void test_resume_nothing_left(void **state)
{
    (void)state;
    sim s;
    sim_init(&s, 40, 3, 0, 8);
    uint32_t all[4] = {UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    sim_segment(&s, 4, all);
    sim_check_complete(&s);
    /* The epoch is over: every rank of any world gets an empty plan. */
    client_plan p;
    char why[200];
    assert_int_equal(client_plan_resume(&p, s.n, s.seed, s.epoch, s.segs, s.num_segs, 2, 3, 8,
                                        false, why, sizeof(why)), 0);
    assert_int_equal(p.count, 0);
    assert_int_equal(p.batches, 0);
    client_plan_free(&p);
    sim_free(&s);
}

/* ---- the state byte strings, written as state.c's header comment lays them out ---- */

typedef struct ident {
    uint64_t n, seed, dataset_hash, transform_hash;
    uint32_t epoch, batch;
} ident;

static size_t put(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

/* A rank state: chain = the finished segments of s (num_segs of them). */
static size_t rank_state(uint8_t *buf, const ident *id, const sim *s, uint32_t num_segs,
                         uint32_t world, uint32_t rank, uint64_t consumed)
{
    size_t o = 0;
    o += put(buf + o, 0x54534446u, 4);
    o += put(buf + o, 1, 2);
    o += put(buf + o, 1, 2);
    o += put(buf + o, id->n, 8);
    o += put(buf + o, id->seed, 8);
    o += put(buf + o, id->dataset_hash, 8);
    o += put(buf + o, id->transform_hash, 8);
    o += put(buf + o, id->epoch, 4);
    o += put(buf + o, id->batch, 4);
    o += put(buf + o, 0, 4);
    o += put(buf + o, num_segs, 4);
    for (uint32_t g = 0; g < num_segs; g++) {
        o += put(buf + o, s->segs[g].world, 4);
        o += put(buf + o, 0, 4);
        for (uint32_t r = 0; r < s->segs[g].world; r++)
            o += put(buf + o, s->segs[g].consumed[r], 8);
    }
    o += put(buf + o, world, 4);
    o += put(buf + o, rank, 4);
    o += put(buf + o, consumed, 8);
    return o;
}

/* Combines the states segment `g` of s left (one per rank, given in reverse rank order). */
static size_t combine_segment(const ident *id, const sim *s, uint32_t g, uint8_t *out,
                              size_t cap)
{
    uint8_t bufs[MAX_WORLD][4096];
    const void *ptrs[MAX_WORLD];
    size_t lens[MAX_WORLD];
    uint32_t world = s->segs[g].world;
    for (uint32_t r = 0; r < world; r++) {
        uint32_t k = world - 1 - r;
        lens[k] = rank_state(bufs[k], id, s, g, world, r, s->segs[g].consumed[r]);
        ptrs[k] = bufs[k];
    }
    size_t len = 0;
    char why[200];
    int rc = feed_state_combine(ptrs, lens, world, out, cap, &len, why, sizeof(why));
    if (rc)
        fail_msg("combine: %s", why);
    return len;
}

/* feed_resume_plan of the combined state equals the plan the simulation checked. */
static void check_resume_plan(const sim *s, const uint8_t *st, size_t len, uint32_t world)
{
    for (uint32_t r = 0; r < world; r++) {
        client_plan p;
        char why[200];
        assert_int_equal(client_plan_resume(&p, s->n, s->seed, s->epoch, s->segs, s->num_segs,
                                            r, world, s->batch, false, why, sizeof(why)), 0);
        uint64_t got[256];
        size_t count = 0;
        assert_int_equal(feed_resume_plan(st, len, r, world, got, 256, &count, why,
                                          sizeof(why)), 0);
        assert_int_equal(count, p.count);
        for (size_t t = 0; t < count; t++)
            assert_int_equal(got[t], p.samples[t]);
        client_plan_free(&p);
    }
}

static void test_state_combine_8_6_8(void **state)
{
    (void)state;
    sim s;
    sim_init(&s, 84, 7, 2, 4);
    ident id = {84, 7, 0x1234, 0x5678, 2, 4};
    uint32_t a[8] = {0, 1, 2, 2, 1, 3, 0, UINT32_MAX};
    sim_segment(&s, 8, a);
    static uint8_t st[1 << 16];
    size_t len = combine_segment(&id, &s, 0, st, sizeof(st));
    /* One segment's header + 8 counts after the 72-byte header: the rank states given are
     * version 1 (before the aug seed), the combined state is version 3 with aug seed = seed
     * and decode lane share 0 (bytes 64..71). */
    assert_int_equal(len, 72 + 8 + 8 * 8);
    assert_int_equal(st[4], 3);
    assert_int_equal(st[56], 7);
    for (int i = 57; i < 72; i++)
        assert_int_equal(st[i], 0);
    size_t need = 0;
    const void *one[1] = {st};
    size_t lens[1] = {len};
    char why[200];
    /* A combined state is not a rank's. */
    assert_int_equal(feed_state_combine(one, lens, 1, NULL, 0, &need, why, sizeof(why)),
                     FEED_EINVAL);
    assert_non_null(strstr(why, "combined state"));
    check_resume_plan(&s, st, len, 6);
    uint32_t b[6] = {1, 0, 2, 1, 0, 1};
    sim_segment(&s, 6, b);
    /* The 6 resumed ranks' states carry the first segment: combined, two segments. */
    len = combine_segment(&id, &s, 1, st, sizeof(st));
    assert_int_equal(len, 72 + (8 + 8 * 8) + (8 + 6 * 8));
    check_resume_plan(&s, st, len, 8);
    /* Too small a buffer says how much is needed. */
    uint8_t small[8];
    uint8_t bufs[6][4096];
    const void *ptrs[6];
    size_t ls[6];
    for (uint32_t r = 0; r < 6; r++) {
        ls[r] = rank_state(bufs[r], &id, &s, 1, 6, r, s.segs[1].consumed[r]);
        ptrs[r] = bufs[r];
    }
    assert_int_equal(feed_state_combine(ptrs, ls, 6, small, sizeof(small), &need, why,
                                        sizeof(why)), FEED_ETOOBIG);
    assert_int_equal(need, len);
    sim_free(&s);
}

/* Combines 4 rank states where state 2 is altered by `tweak`; expects `want` in why. */
static void expect_refused(void (*tweak)(ident *id, uint32_t *world, uint32_t *rank,
                                         uint64_t *consumed),
                           size_t count, const char *want)
{
    sim s;
    sim_init(&s, 50, 9, 1, 4);
    uint8_t bufs[4][4096];
    const void *ptrs[4];
    size_t lens[4];
    for (uint32_t r = 0; r < count; r++) {
        ident id = {50, 9, 0x1234, 0x5678, 1, 4};
        uint32_t world = 4, rank = r;
        uint64_t consumed = 4;
        if (r == 2)
            tweak(&id, &world, &rank, &consumed);
        lens[r] = rank_state(bufs[r], &id, &s, 0, world, rank, consumed);
        ptrs[r] = bufs[r];
    }
    uint8_t out[4096];
    size_t len;
    char why[200] = "";
    assert_int_equal(feed_state_combine(ptrs, lens, count, out, sizeof(out), &len, why,
                                        sizeof(why)), FEED_EINVAL);
    if (!strstr(why, want))
        fail_msg("why \"%s\" does not say \"%s\"", why, want);
    sim_free(&s);
}

static void other_seed(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)w, (void)r, (void)c;
    id->seed = 10;
}

static void other_size(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)w, (void)r, (void)c;
    id->n = 51;
}

static void other_dataset(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)w, (void)r, (void)c;
    id->dataset_hash = 1;
}

static void other_transform(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)w, (void)r, (void)c;
    id->transform_hash = 1;
}

static void other_epoch(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)w, (void)r, (void)c;
    id->epoch = 2;
}

static void same_rank(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)id, (void)w, (void)c;
    *r = 1;
}

static void other_world(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)id, (void)r, (void)c;
    *w = 5;
}

static void nothing(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)id, (void)w, (void)r, (void)c;
}

static void too_many(ident *id, uint32_t *w, uint32_t *r, uint64_t *c)
{
    (void)id, (void)w, (void)r;
    *c = 14; /* world 4 of 50 samples plans 13 per rank */
}

static void test_state_refusals(void **state)
{
    (void)state;
    expect_refused(other_seed, 4, "seed differs");
    expect_refused(other_size, 4, "dataset size differs");
    expect_refused(other_dataset, 4, "dataset differs");
    expect_refused(other_transform, 4, "transform differs");
    expect_refused(other_epoch, 4, "epoch differs");
    expect_refused(same_rank, 4, "rank 1 appears twice");
    expect_refused(other_world, 4, "world differs");
    expect_refused(nothing, 3, "rank 3 of world 4 is missing");

    /* A rank that consumed more than its plan holds: refused when the plan is computed. */
    sim s;
    sim_init(&s, 50, 9, 1, 4);
    ident id = {50, 9, 0x1234, 0x5678, 1, 4};
    uint8_t bufs[4][4096];
    const void *ptrs[4];
    size_t lens[4];
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t w = 4, rr = r;
        uint64_t c = 4;
        if (r == 2)
            too_many(&id, &w, &rr, &c);
        lens[r] = rank_state(bufs[r], &id, &s, 0, 4, r, c);
        ptrs[r] = bufs[r];
    }
    uint8_t out[4096];
    size_t len, count;
    char why[200];
    assert_int_equal(feed_state_combine(ptrs, lens, 4, out, sizeof(out), &len, why, sizeof(why)),
                     0);
    uint64_t samples[64];
    assert_int_equal(feed_resume_plan(out, len, 0, 3, samples, 64, &count, why, sizeof(why)),
                     FEED_EINVAL);
    assert_non_null(strstr(why, "rank 2 of world 4 consumed 14 samples but its plan has 13"));

    /* Malformed: truncated, a bad magic, a rank state where a combined one is wanted. */
    assert_int_equal(feed_resume_plan(out, len - 1, 0, 3, samples, 64, &count, why, sizeof(why)),
                     FEED_EINVAL);
    assert_non_null(strstr(why, "malformed"));
    out[0] ^= 1;
    assert_int_equal(feed_resume_plan(out, len, 0, 3, samples, 64, &count, why, sizeof(why)),
                     FEED_EINVAL);
    assert_non_null(strstr(why, "not a feedclient state"));
    assert_int_equal(feed_resume_plan(bufs[0], lens[0], 0, 3, samples, 64, &count, why,
                                      sizeof(why)), FEED_EINVAL);
    assert_non_null(strstr(why, "combine the states of every rank first"));
    sim_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_8_6_8),
        cmocka_unit_test(test_resume_many_shapes),
        cmocka_unit_test(test_resume_nothing_left),
        cmocka_unit_test(test_state_combine_8_6_8),
        cmocka_unit_test(test_state_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
