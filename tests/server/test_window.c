/*
 * Unit tests of the share window (server/work/window.c) on its own, one
 * thread, real JPEGs through a real engine: member bits (an entry leaves once
 * every live member has read it), a member leaving (it pins nothing), FIFO
 * eviction of unread entries with the byte bound never passed, the evicted-key
 * memory (a member behind does not insert what the others have read), a
 * group of one (inserts nothing), failed decodes (kept nowhere), stale
 * source stamps, and single flight across two threads (a worker that finds
 * its image being decoded waits for it; one withdrawn sends it to decode alone). Through real feedd processes: tests/python/test_share_feedd.py.
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
#include <time.h>

#include "feed/errors.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "feedtest.h"
#include "metrics.h"
#include "window.h"

#define SIDE 32

typedef struct env {
    feed_engine *eng;
    uint8_t *jpeg;
    size_t len;
    size_t pixel_bytes; /* of the decoded image */
} env;

static void env_open(env *e)
{
    char dir[] = "/tmp/feed_window_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/a.jpg", dir);
    assert_int_equal(feed_test_write_jpeg(path, 64, 48, 7, 90), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    e->jpeg = malloc(1 << 20);
    e->len = fread(e->jpeg, 1, 1 << 20, f);
    fclose(f);
    remove(path);
    remove(dir);
    assert_int_equal(feed_engine_new(NULL, &e->eng), 0);
    feed_decoded img;
    assert_int_equal(feed_engine_decode(e->eng, e->jpeg, e->len, SIDE, NULL, NULL, &img),
                     FEED_SAMPLE_OK);
    e->pixel_bytes = (size_t)img.width * img.height * 3;
}

static void env_close(env *e)
{
    feed_engine_free(e->eng);
    free(e->jpeg);
}

/* One lookup by seat; decodes when asked. Returns what it found. */
static feedd_window_find touch(env *e, feedd_window *w, const feedd_window_seat *seat,
                               uint64_t index, uint64_t source)
{
    feedd_window_entry *spare = feedd_window_spare_new(), *entry = NULL;
    feed_decoded img;
    feedd_window_find how = feedd_window_get(w, seat, 0, index, source, &spare, &entry, &img);
    if (how == FEEDD_WINDOW_DECODE)
        assert_int_equal(
            feedd_window_decode(w, seat, entry, false, e->eng, e->jpeg, e->len, SIDE, &img),
            FEED_SAMPLE_OK);
    if (entry)
        feedd_window_release(w, entry);
    feedd_window_spare_free(spare);
    return how;
}

static uint64_t one_entry(const env *e)
{
    return feedd_window_charge(e->pixel_bytes);
}

/* A window of `budget` bytes sharing dataset 0 at SIDE. */
static feedd_window *window_of(uint64_t budget)
{
    feedd_window *w = NULL;
    assert_int_equal(feedd_window_new(budget, NULL, &w), 0);
    assert_int_equal(feedd_window_add_dataset(w, 0, SIDE), 0);
    return w;
}

static void test_members_read_then_free(void **state)
{
    (void)state;
    env e;
    env_open(&e);
    feedd_window *w = window_of(10 * one_entry(&e));
    feedd_window_seat a, b, c;
    assert_int_equal(feedd_window_join(w, 0, "sweep", "jobA", &a), 0);
    assert_int_equal(feedd_window_join(w, 0, "sweep", "jobB", &b), 0);
    assert_int_equal(feedd_window_join(w, 0, "sweep", "jobC", &c), 0);
    assert_false(feedd_window_ready(w, &b, 0, 1, 0));
    assert_int_equal(touch(&e, w, &a, 1, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(feedd_window_used(w), one_entry(&e));
    /* Ready (the fetch stage's skip) for the members that have not read it, not for A. */
    assert_true(feedd_window_ready(w, &b, 0, 1, 0));
    assert_true(feedd_window_ready(w, &c, 0, 1, 0));
    assert_false(feedd_window_ready(w, &a, 0, 1, 0));
    assert_false(feedd_window_ready(w, &b, 0, 2, 0));
    assert_int_equal(touch(&e, w, &b, 1, 0), FEEDD_WINDOW_HIT);
    assert_false(feedd_window_ready(w, &b, 0, 1, 0));
    assert_int_equal(feedd_window_used(w), one_entry(&e));
    /* A reads again (another epoch): still waiting for C. */
    assert_int_equal(touch(&e, w, &a, 1, 0), FEEDD_WINDOW_HIT);
    assert_int_equal(touch(&e, w, &c, 1, 0), FEEDD_WINDOW_HIT);
    assert_false(feedd_window_ready(w, &c, 0, 1, 0));
    assert_int_equal(feedd_window_used(w), 0);
    /* C leaves with an entry it has not read: it no longer pins it. */
    assert_int_equal(touch(&e, w, &a, 2, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(touch(&e, w, &b, 2, 0), FEEDD_WINDOW_HIT);
    assert_int_equal(feedd_window_used(w), one_entry(&e));
    feedd_window_leave(w, &c);
    assert_int_equal(feedd_window_used(w), 0);
    /* A group of one live member inserts nothing. */
    feedd_window_leave(w, &b);
    assert_int_equal(touch(&e, w, &a, 3, 0), FEEDD_WINDOW_ALONE);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_leave(w, &a);
    feedd_window_free(w);
    env_close(&e);
}

static void test_two_streams_one_member(void **state)
{
    (void)state;
    env e;
    env_open(&e);
    feedd_window *w = window_of(10 * one_entry(&e));
    feedd_window_seat a0, a1, b;
    assert_int_equal(feedd_window_join(w, 0, "s", "jobA", &a0), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "jobA", &a1), 0);
    assert_int_equal(a0.member, a1.member);
    assert_int_equal(feedd_window_join(w, 0, "s", "jobB", &b), 0);
    /* Another share name on the same dataset is another group: no hit across groups. */
    feedd_window_seat x, y;
    assert_int_equal(feedd_window_join(w, 0, "other", "jobX", &x), 0);
    assert_int_equal(feedd_window_join(w, 0, "other", "jobY", &y), 0);
    assert_int_not_equal(x.group, a0.group);
    assert_int_equal(touch(&e, w, &a0, 5, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(touch(&e, w, &x, 5, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(touch(&e, w, &y, 5, 0), FEEDD_WINDOW_HIT);
    /* One rank of A leaving does not make A leave. */
    feedd_window_leave(w, &a1);
    assert_int_equal(feedd_window_used(w), one_entry(&e));
    assert_int_equal(touch(&e, w, &b, 5, 0), FEEDD_WINDOW_HIT);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_leave(w, &a0);
    feedd_window_leave(w, &b);
    feedd_window_leave(w, &x);
    feedd_window_leave(w, &y);
    feedd_window_free(w);
    env_close(&e);
}

static void test_fifo_bound_and_behind(void **state)
{
    (void)state;
    env e;
    env_open(&e);
    uint64_t budget = 3 * one_entry(&e);
    feedd_window *w = window_of(budget);
    feedd_window_seat a, b;
    assert_int_equal(feedd_window_join(w, 0, "s", "A", &a), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "B", &b), 0);
    uint64_t ev0 = atomic_load(&feedd_m.share_evictions);
    /* A runs ahead over 8 samples: the window holds the last 3, oldest evicted first. */
    for (uint64_t i = 0; i < 8; i++) {
        assert_int_equal(touch(&e, w, &a, i, 0), FEEDD_WINDOW_DECODE);
        assert_true(feedd_window_used(w) <= budget);
    }
    assert_int_equal(atomic_load(&feedd_m.share_evictions) - ev0, 5);
    /* B, behind: 0..4 were evicted after A read them, so B decodes them alone, inserting
     * nothing; 5..7 are hits. */
    for (uint64_t i = 0; i < 5; i++) {
        assert_int_equal(touch(&e, w, &b, i, 0), FEEDD_WINDOW_ALONE);
        assert_true(feedd_window_used(w) <= budget);
    }
    assert_int_equal(feedd_window_used(w), budget);
    for (uint64_t i = 5; i < 8; i++)
        assert_int_equal(touch(&e, w, &b, i, 0), FEEDD_WINDOW_HIT);
    assert_int_equal(feedd_window_used(w), 0);
    /* The memory of an eviction is spent once every member has read it: the next epoch shares
     * sample 0 again. */
    assert_int_equal(touch(&e, w, &a, 0, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(touch(&e, w, &b, 0, 0), FEEDD_WINDOW_HIT);
    /* A window smaller than one image: everything alone, nothing charged. */
    feedd_window_leave(w, &a);
    feedd_window_leave(w, &b);
    feedd_window_free(w);
    assert_int_equal(feedd_window_new(one_entry(&e) - 1, NULL, &w), 0);
    assert_int_equal(feedd_window_add_dataset(w, 0, SIDE), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "A", &a), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "B", &b), 0);
    uint64_t alone0 = atomic_load(&feedd_m.share_alone);
    assert_int_equal(touch(&e, w, &a, 0, 0), FEEDD_WINDOW_DECODE); /* withdrawn: no room */
    assert_int_equal(atomic_load(&feedd_m.share_alone) - alone0, 1);
    assert_int_equal(feedd_window_used(w), 0);
    assert_int_equal(touch(&e, w, &b, 0, 0), FEEDD_WINDOW_DECODE);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_leave(w, &a);
    feedd_window_leave(w, &b);
    feedd_window_free(w);
    env_close(&e);
}

static void test_failed_and_stale(void **state)
{
    (void)state;
    env e;
    env_open(&e);
    feedd_window *w = window_of(10 * one_entry(&e));
    feedd_window_seat a, b;
    assert_int_equal(feedd_window_join(w, 0, "s", "A", &a), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "B", &b), 0);
    /* A broken JPEG: not kept, the next member decodes (and fails) for itself. */
    feedd_window_entry *spare = feedd_window_spare_new(), *entry = NULL;
    feed_decoded img;
    uint8_t junk[64] = {0xff, 0xd8, 0xff};
    assert_int_equal(feedd_window_get(w, &a, 0, 9, 0, &spare, &entry, &img), FEEDD_WINDOW_DECODE);
    assert_int_not_equal(
        feedd_window_decode(w, &a, entry, false, e.eng, junk, sizeof junk, SIDE, &img),
        FEED_SAMPLE_OK);
    feedd_window_release(w, entry);
    assert_int_equal(feedd_window_used(w), 0);
    assert_null(spare);
    spare = feedd_window_spare_new();
    assert_int_equal(feedd_window_get(w, &b, 0, 9, 0, &spare, &entry, &img), FEEDD_WINDOW_DECODE);
    feedd_window_abandon(w, entry);
    feedd_window_release(w, entry);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_spare_free(spare);
    /* Bytes changed on disk (another stamp): the old image is not served. */
    assert_int_equal(touch(&e, w, &a, 4, 111), FEEDD_WINDOW_DECODE);
    assert_true(feedd_window_ready(w, &b, 0, 4, 111));
    assert_false(feedd_window_ready(w, &b, 0, 4, 222));
    assert_int_equal(touch(&e, w, &b, 4, 222), FEEDD_WINDOW_DECODE);
    assert_int_equal(touch(&e, w, &a, 4, 222), FEEDD_WINDOW_HIT);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_leave(w, &a);
    feedd_window_leave(w, &b);
    feedd_window_free(w);
    env_close(&e);
}

/* A second worker's lookup of one sample, on a thread of its own. */
typedef struct lookup {
    feedd_window *w;
    feedd_window_seat seat;
    uint64_t index;
    feedd_window_find how;
    uint64_t took_ns;
    uint8_t *pixels; /* a copy of what a HIT gave, pixel_bytes long */
    size_t pixel_bytes;
} lookup;

static void *lookup_run(void *arg)
{
    lookup *l = arg;
    feedd_window_entry *spare = feedd_window_spare_new(), *entry = NULL;
    feed_decoded img;
    uint64_t t0 = feed_now_ns();
    l->how = feedd_window_get(l->w, &l->seat, 0, l->index, 0, &spare, &entry, &img);
    l->took_ns = feed_now_ns() - t0;
    if (l->how == FEEDD_WINDOW_HIT && (l->pixels = malloc(l->pixel_bytes)) != NULL)
        memcpy(l->pixels, img.pixels, l->pixel_bytes);
    if (entry)
        feedd_window_release(l->w, entry);
    feedd_window_spare_free(spare);
    return NULL;
}

/* Until a lookup has started waiting (feedd_share_waits_total moved past `before`). A hang
 * guard of 60 s, not a timing assertion. */
static void until_waiting(uint64_t before)
{
    uint64_t give_up = feed_now_ns() + 60ull * 1000000000u;
    while (atomic_load(&feedd_m.share_waits) == before) {
        assert_true(feed_now_ns() < give_up);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static void test_single_flight(void **state)
{
    (void)state;
    env e;
    env_open(&e);
    feedd_window *w = window_of(10 * one_entry(&e));
    feedd_window_seat a, b, c;
    assert_int_equal(feedd_window_join(w, 0, "s", "A", &a), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "B", &b), 0);
    assert_int_equal(feedd_window_join(w, 0, "s", "C", &c), 0);
    /* A's lookup inserts sample 5 and leaves its decode to A; B's, on another thread, finds
     * it decoding and waits; A decodes: B gets A's image, not a decode of its own. */
    feedd_window_entry *spare = feedd_window_spare_new(), *entry = NULL;
    feed_decoded img;
    assert_int_equal(feedd_window_get(w, &a, 0, 5, 0, &spare, &entry, &img), FEEDD_WINDOW_DECODE);
    uint64_t waits = atomic_load(&feedd_m.share_waits);
    lookup l = {.w = w, .seat = b, .index = 5, .pixel_bytes = e.pixel_bytes};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, lookup_run, &l), 0);
    until_waiting(waits);
    assert_int_equal(feedd_window_decode(w, &a, entry, false, e.eng, e.jpeg, e.len, SIDE, &img),
                     FEED_SAMPLE_OK);
    pthread_join(t, NULL);
    /* Only a wait past FEEDD_WINDOW_WAIT_MS (a machine stalled that long) may end alone. */
    if (l.how != FEEDD_WINDOW_HIT) {
        assert_int_equal(l.how, FEEDD_WINDOW_ALONE);
        assert_true(l.took_ns >= (uint64_t)FEEDD_WINDOW_WAIT_MS * 1000000u);
    } else {
        assert_non_null(l.pixels);
        assert_memory_equal(l.pixels, img.pixels, e.pixel_bytes);
        free(l.pixels);
    }
    feedd_window_release(w, entry);
    assert_int_equal(feedd_window_used(w), one_entry(&e)); /* C has not read it */
    assert_int_equal(touch(&e, w, &c, 5, 0), FEEDD_WINDOW_HIT);
    assert_int_equal(feedd_window_used(w), 0);
    /* A's decode is withdrawn (its bytes could not be read): the waiting B decodes alone. */
    if (!spare)
        spare = feedd_window_spare_new();
    assert_int_equal(feedd_window_get(w, &a, 0, 6, 0, &spare, &entry, &img), FEEDD_WINDOW_DECODE);
    waits = atomic_load(&feedd_m.share_waits);
    l = (lookup){.w = w, .seat = b, .index = 6, .pixel_bytes = e.pixel_bytes};
    assert_int_equal(pthread_create(&t, NULL, lookup_run, &l), 0);
    until_waiting(waits);
    feedd_window_abandon(w, entry);
    feedd_window_release(w, entry);
    pthread_join(t, NULL);
    assert_int_equal(l.how, FEEDD_WINDOW_ALONE);
    assert_int_equal(feedd_window_used(w), 0);
    feedd_window_spare_free(spare);
    feedd_window_leave(w, &a);
    feedd_window_leave(w, &b);
    feedd_window_leave(w, &c);
    feedd_window_free(w);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_read_then_free),
        cmocka_unit_test(test_two_streams_one_member),
        cmocka_unit_test(test_fifo_bound_and_behind),
        cmocka_unit_test(test_failed_and_stale),
        cmocka_unit_test(test_single_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
