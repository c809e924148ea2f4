/*
 * Unit tests of the decoded-sample cache (server/work/cache.c) on its own, with
 * synthetic images: the byte bound (slot tables and entries, evicted entries
 * still being read included), the admission and eviction policy under
 * per-epoch permutations (hit rate against cache/dataset, and against an LRU
 * model on the same accesses; also as one of four servers, which sees a
 * random quarter of each epoch), a working set that changes, and many threads
 * looking up, filling and evicting at once (run it under the ASan build).
 * Real JPEGs through a real feedd are in test_decoded_cache.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "feed/errors.h"
#include "metrics.h"

#define PIXELS 3000 /* bytes of each synthetic image */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void permute(uint64_t *v, uint64_t n, uint64_t *seed)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = rng_next(seed) % (i + 1);
        uint64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static uint64_t budget_for(uint64_t samples, uint64_t entries)
{
    return samples * 8 + entries * feedd_cache_charge(PIXELS);
}

/*
 * What a worker does for one sample: a hit, or a miss filled and offered.
 * 1 for a hit, 0 for a miss, -1 for a hit with another sample's pixels
 * (no cmocka assertion here: threads call it).
 */
static int touch(feedd_cache *c, uint32_t ds, uint64_t index)
{
    feed_decoded img;
    feedd_cache_entry *e = feedd_cache_get(c, ds, index, &img);
    if (e) {
        bool ok = img.pixels[0] == (uint8_t)index &&
                  img.pixels[PIXELS - 1] == (uint8_t)(index >> 8) && img.width == index;
        feedd_cache_release(c, e);
        return ok ? 1 : -1;
    }
    e = feedd_cache_reserve(c, ds, index, PIXELS);
    if (e) {
        uint8_t *px = feedd_cache_pixels(e);
        memset(px, (uint8_t)index, PIXELS);
        px[PIXELS - 1] = (uint8_t)(index >> 8);
        feed_decoded d = {.width = (uint32_t)index, .height = 1, .pixels = px};
        feedd_cache_publish(c, e, &d);
        feedd_cache_release(c, e);
    }
    return 0;
}

/* touch, in the test's own thread. */
static bool hit(feedd_cache *c, uint32_t ds, uint64_t index)
{
    int r = touch(c, ds, index);
    assert_true(r >= 0);
    return r == 1;
}

static void test_add_dataset(void **state)
{
    (void)state;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(1000, &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, 200, 256), FEED_ETOOBIG); /* 1600 B of slots */
    assert_int_equal(feedd_cache_add_dataset(c, 0, 100, 256), 0);
    assert_int_equal(feedd_cache_used(c), 800);
    assert_int_equal(feedd_cache_add_dataset(c, 0, 10, 256), FEED_EINVAL);
    assert_int_equal(feedd_cache_add_dataset(c, 64, 10, 256), FEED_EINVAL);
    assert_int_equal(feedd_cache_add_dataset(c, 1, 10, 0), FEED_EINVAL);
    assert_int_equal(feedd_cache_side(c, 0), 256);
    assert_int_equal(feedd_cache_side(c, 1), 0);
    assert_int_equal(feedd_cache_side(NULL, 0), 0);
    assert_int_equal(atomic_load(&feedd_m.cache_budget), 1000);
    feedd_cache_free(c);
    assert_int_equal(atomic_load(&feedd_m.cache_bytes), 0);
    assert_int_equal(atomic_load(&feedd_m.cache_budget), 0);
}

/*
 * A cache smaller than the dataset: the bytes never pass the budget, a full
 * cache admits nothing, and an entry evicted while a reader holds it keeps
 * its bytes charged until that reader lets go.
 */
static void test_bound(void **state)
{
    (void)state;
    const uint64_t n = 400, fit = 50;
    uint64_t budget = budget_for(n, fit);
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget, &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 3, n, 256), 0);
    uint64_t seed = 1, order[400];
    for (int epoch = 0; epoch < 4; epoch++) {
        permute(order, n, &seed);
        for (uint64_t i = 0; i < n; i++) {
            hit(c, 3, order[i]);
            assert_true(feedd_cache_used(c) <= budget);
            assert_true((uint64_t)atomic_load(&feedd_m.cache_bytes) <= budget);
        }
    }
    assert_true(feedd_cache_used(c) > budget - feedd_cache_charge(PIXELS));
    /* Full: a new entry does not fit. */
    assert_null(feedd_cache_reserve(c, 3, 0, PIXELS));
    /* Larger than the whole budget: never. */
    assert_null(feedd_cache_reserve(c, 3, 0, budget));
    feedd_cache_free(c);
    assert_int_equal(atomic_load(&feedd_m.cache_bytes), 0);

    /* A reader's reference outlives the eviction; the bytes stay charged until it is released. */
    assert_int_equal(feedd_cache_new(budget_for(4, 1), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, 4, 256), 0);
    assert_false(hit(c, 0, 2));
    feed_decoded img;
    feedd_cache_entry *held = feedd_cache_get(c, 0, 2, &img);
    assert_non_null(held);
    uint64_t ev0 = atomic_load(&feedd_m.cache_evictions);
    /* Two turns of the hand over the 4 slots with no lookup of 2: it goes. */
    for (int k = 0; k < 32 && atomic_load(&feedd_m.cache_evictions) == ev0; k++)
        hit(c, 0, (uint64_t)(k % 2));
    assert_true(atomic_load(&feedd_m.cache_evictions) > ev0);
    assert_int_equal(img.pixels[0], 2);
    assert_int_equal(feedd_cache_used(c), budget_for(4, 1));
    assert_null(feedd_cache_reserve(c, 0, 1, PIXELS)); /* still charged */
    feedd_cache_release(c, held);
    assert_int_equal(feedd_cache_used(c), 4 * 8);
    feedd_cache_free(c);
}

/*
 * LRU over the same accesses, as a model: a doubly linked list over sample
 * indices, capacity in entries.
 */
typedef struct lru_model {
    uint64_t cap, size, head, tail;
    uint64_t *prev, *next;
    bool *in;
} lru_model;

#define NIL UINT64_MAX

static void lru_unlink(lru_model *m, uint64_t i)
{
    if (m->prev[i] != NIL)
        m->next[m->prev[i]] = m->next[i];
    else
        m->head = m->next[i];
    if (m->next[i] != NIL)
        m->prev[m->next[i]] = m->prev[i];
    else
        m->tail = m->prev[i];
}

static bool lru_touch(lru_model *m, uint64_t i)
{
    bool hit = m->in[i];
    if (hit) {
        lru_unlink(m, i);
    } else if (m->size == m->cap) {
        uint64_t old = m->tail;
        lru_unlink(m, old);
        m->in[old] = false;
    } else {
        m->size++;
    }
    m->in[i] = true;
    m->prev[i] = NIL;
    m->next[i] = m->head;
    if (m->head != NIL)
        m->prev[m->head] = i;
    m->head = i;
    if (m->tail == NIL)
        m->tail = i;
    return hit;
}

/*
 * Per-epoch permutations over a dataset twice the cache: after the first
 * epoch the hit rate is cache/dataset (0.5) within a few percent, epoch
 * after epoch; LRU on the same accesses gets far less.
 */
static void test_hit_rate_permutations(void **state)
{
    (void)state;
    const uint64_t n = 4000, fit = 2000;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(n, fit), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, n, 256), 0);
    lru_model m = {.cap = fit, .head = NIL, .tail = NIL};
    m.prev = calloc(n, sizeof *m.prev);
    m.next = calloc(n, sizeof *m.next);
    m.in = calloc(n, sizeof *m.in);
    uint64_t *order = malloc(n * sizeof *order), seed = 7;
    assert_true(m.prev && m.next && m.in && order);
    uint64_t ev0 = atomic_load(&feedd_m.cache_evictions);
    for (int epoch = 0; epoch < 8; epoch++) {
        permute(order, n, &seed);
        uint64_t hits = 0, lru_hits = 0;
        for (uint64_t i = 0; i < n; i++) {
            hits += hit(c, 0, order[i]);
            lru_hits += lru_touch(&m, order[i]);
        }
        double rate = (double)hits / n, lru = (double)lru_hits / n;
        print_message("epoch %d: hit rate %.3f (cache/dataset 0.5), LRU %.3f\n", epoch, rate, lru);
        if (epoch >= 1) {
            assert_true(rate >= 0.45);
            assert_true(rate <= 0.5 + 1e-9);
            assert_true(lru < rate - 0.2);
        }
    }
    /* Every resident sample is asked for within a turn of the hand: nothing goes. */
    assert_int_equal(atomic_load(&feedd_m.cache_evictions), ev0);
    free(order);
    free(m.prev);
    free(m.next);
    free(m.in);
    feedd_cache_free(c);
}

/*
 * One of four servers: a client sends each batch to any server, so this
 * cache sees a random quarter of every epoch. Samples come back about every
 * four epochs, some after the hand's two turns (eight epochs here), so the
 * hand evicts a few; the hit rate stays about cache/dataset all the same.
 */
static void test_hit_rate_one_of_four_servers(void **state)
{
    (void)state;
    const uint64_t n = 4000, fit = 2000;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(n, fit), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, n, 256), 0);
    uint64_t *order = malloc(n * sizeof *order), seed = 9, pick = 3;
    assert_non_null(order);
    uint64_t hits = 0, asked = 0;
    for (int epoch = 0; epoch < 40; epoch++) {
        permute(order, n, &seed);
        for (uint64_t i = 0; i < n; i++) {
            if (rng_next(&pick) % 4)
                continue;
            bool h = hit(c, 0, order[i]);
            if (epoch >= 20) {
                hits += h;
                asked++;
            }
        }
    }
    double rate = (double)hits / asked;
    print_message("one of four servers, epochs 20-39: hit rate %.3f (cache/dataset 0.5)\n", rate);
    assert_true(rate >= 0.40);
    assert_true(rate <= 0.55);
    free(order);
    feedd_cache_free(c);
}

/*
 * A cache with room for the whole dataset, as one of two servers: each
 * sample comes back about every other epoch, often after a whole turn of the
 * hand. With free budget left nothing is evicted: once every sample is in,
 * every lookup hits (the GPU machine's two servers lost ~6% of their hits to
 * evictions that freed room nobody needed).
 */
static void test_room_left_evicts_nothing(void **state)
{
    (void)state;
    const uint64_t n = 2000;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(n, n), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, n, 256), 0);
    uint64_t *order = malloc(n * sizeof *order), seed = 11, pick = 5;
    assert_non_null(order);
    uint64_t ev0 = atomic_load(&feedd_m.cache_evictions), hits = 0, asked = 0;
    for (int epoch = 0; epoch < 30; epoch++) {
        permute(order, n, &seed);
        for (uint64_t i = 0; i < n; i++) {
            if (rng_next(&pick) % 2)
                continue;
            bool h = hit(c, 0, order[i]);
            if (epoch >= 20) {
                hits += h;
                asked++;
            }
        }
    }
    print_message("one of two servers, room for all: epochs 20-29 hit %llu of %llu, %llu evicted\n",
                  (unsigned long long)hits, (unsigned long long)asked,
                  (unsigned long long)(atomic_load(&feedd_m.cache_evictions) - ev0));
    assert_int_equal(atomic_load(&feedd_m.cache_evictions), ev0);
    assert_int_equal(hits, asked);
    free(order);
    feedd_cache_free(c);
}

/* A working set that changes: samples no longer asked for age out, the new ones come in. */
static void test_working_set_changes(void **state)
{
    (void)state;
    const uint64_t n = 1000, fit = 200;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(n, fit), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, n, 256), 0);
    for (int pass = 0; pass < 3; pass++)
        for (uint64_t i = 0; i < fit; i++)
            hit(c, 0, i);
    uint64_t ev0 = atomic_load(&feedd_m.cache_evictions), hits = 0;
    for (int pass = 0; pass < 30; pass++) {
        hits = 0;
        for (uint64_t i = 500; i < 500 + fit; i++)
            hits += hit(c, 0, i);
    }
    print_message("new working set after 30 passes: %llu of %llu hit\n", (unsigned long long)hits,
                  (unsigned long long)fit);
    assert_true(atomic_load(&feedd_m.cache_evictions) - ev0 >= fit * 9 / 10);
    assert_true(hits >= fit * 9 / 10);
    feedd_cache_free(c);
}

/*
 * A dataset nobody asks for any more (a job that finished) gives its room
 * to one that is asked for: every admission refused for want of room moves
 * the hand of an idle dataset too, so its images age out as a moved-on
 * working set does.
 */
static void test_idle_dataset_ages_out(void **state)
{
    (void)state;
    const uint64_t n = 1000, fit = 300;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(2 * n, fit), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, n, 256), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 1, n, 256), 0);
    for (int pass = 0; pass < 2; pass++)
        for (uint64_t i = 0; i < fit; i++)
            hit(c, 0, i);
    uint64_t hits = 0;
    for (int pass = 0; pass < 40; pass++) {
        hits = 0;
        for (uint64_t i = 0; i < fit; i++)
            hits += hit(c, 1, i);
    }
    print_message("dataset 1 after 40 passes, dataset 0 idle: %llu of %llu hit\n",
                  (unsigned long long)hits, (unsigned long long)fit);
    assert_true(hits >= fit * 9 / 10);
    feedd_cache_free(c);
}

/*
 * A dataset still asked for, only less often than one that thrashes beside
 * it, is not idle: it keeps its images. (Idle means no lookup of its own for
 * a whole dataset's worth of visits, not since the last visit: visits come
 * with the other dataset's refusals, as often as those happen.)
 */
static void test_slow_dataset_is_not_idle(void **state)
{
    (void)state;
    const uint64_t small = 200, big = 4000, fit = 1000;
    feedd_cache *c = NULL;
    assert_int_equal(feedd_cache_new(budget_for(small + big, fit), &c), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 0, small, 256), 0);
    assert_int_equal(feedd_cache_add_dataset(c, 1, big, 256), 0);
    uint64_t *order0 = malloc(small * sizeof *order0), *order1 = malloc(big * sizeof *order1);
    uint64_t seed0 = 13, seed1 = 17, at0 = small, hits = 0, asked = 0;
    assert_true(order0 && order1);
    for (int epoch = 0; epoch < 12; epoch++) {
        permute(order1, big, &seed1);
        for (uint64_t i = 0; i < big; i++) {
            hit(c, 1, order1[i]);
            if (i % 5)
                continue;
            if (at0 == small) {
                permute(order0, small, &seed0);
                at0 = 0;
            }
            bool h = hit(c, 0, order0[at0++]);
            if (epoch >= 6) {
                hits += h;
                asked++;
            }
        }
    }
    print_message("a dataset asked for at 1/5 the rate of a thrashing one: %llu of %llu hit\n",
                  (unsigned long long)hits, (unsigned long long)asked);
    assert_true(hits >= asked * 7 / 10);
    free(order0);
    free(order1);
    feedd_cache_free(c);
}

typedef struct hammer {
    feedd_cache *c;
    uint64_t budget, n;
    atomic_uint_fast64_t next_seed, hits;
    atomic_bool over, wrong;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    uint64_t seed = atomic_fetch_add(&h->next_seed, 1) * 1000003u;
    uint64_t hits = 0;
    for (int k = 0; k < 20000; k++) {
        uint64_t i = rng_next(&seed) % h->n;
        int r = touch(h->c, (uint32_t)(i & 1), i);
        if (r < 0)
            atomic_store(&h->wrong, true);
        hits += r == 1;
        if (feedd_cache_used(h->c) > h->budget)
            atomic_store(&h->over, true);
    }
    atomic_fetch_add(&h->hits, hits);
    return NULL;
}

/*
 * Eight threads over two datasets, the cache a quarter of them: lookups,
 * fills, publishing races for the same sample and evictions under readers,
 * all at once. Every hit has the pixels of its own sample; the bound holds
 * throughout; all bytes come back.
 */
static void test_threads(void **state)
{
    (void)state;
    const uint64_t n = 2000;
    hammer h = {.n = n};
    h.budget = budget_for(2 * n, n / 2);
    atomic_init(&h.next_seed, 1);
    atomic_init(&h.hits, 0);
    atomic_init(&h.over, false);
    atomic_init(&h.wrong, false);
    assert_int_equal(feedd_cache_new(h.budget, &h.c), 0);
    assert_int_equal(feedd_cache_add_dataset(h.c, 0, n, 256), 0);
    assert_int_equal(feedd_cache_add_dataset(h.c, 1, n, 320), 0);
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h), 0);
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    assert_false(atomic_load(&h.over));
    assert_false(atomic_load(&h.wrong));
    assert_true(atomic_load(&h.hits) > 0);
    feedd_cache_free(h.c);
    assert_int_equal(atomic_load(&feedd_m.cache_bytes), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_dataset),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_hit_rate_permutations),
        cmocka_unit_test(test_hit_rate_one_of_four_servers),
        cmocka_unit_test(test_room_left_evicts_nothing),
        cmocka_unit_test(test_working_set_changes),
        cmocka_unit_test(test_idle_dataset_ages_out),
        cmocka_unit_test(test_slow_dataset_is_not_idle),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
