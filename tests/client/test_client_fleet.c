/*
 * The fleet-sharded decoded cache end to end: real feedd processes on
 * 127.0.0.1 port 0 with a decoded-sample cache each, libfeedclient routing
 * each sample to its owner (on by default: the servers describe the dataset
 * with cache_side > 0), real JPEGs (an ImageFolder encoded with libjpeg by
 * the test support; the ImageNet sample under FEED_SAMPLE_DIR where it exists).
 * Cases: over four servers every sample is cached once in the fleet
 * (feedd_cache_entries adds up to the dataset, each server holds a share,
 * nothing is decoded twice), the second epoch is all hits, and the pixels
 * equal those of a single server that caches nothing (a hit and a miss give
 * the same bytes); a server killed mid-epoch costs no sample and no
 * duplicate, the survivors stand in for it without admitting its samples,
 * and the pixels stay those of the single server. Main thread only.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"
#include "client_impl.h"
#include "sched_impl.h"

#define FLEET 4u
#define SIDE 32u      /* the loader's output */
#define CACHE_SIDE 64 /* the servers' cache=SIDE */
#define BATCH 16u
#define SEED 99u
#define MAX_SAMPLES 1024u
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)

static char g_root[256], g_dir[512], g_arg[600];
static uint64_t g_samples;

typedef struct epoch_px {
    uint8_t *px;     /* [g_samples] samples by index */
    uint32_t *times; /* [g_samples] deliveries of each index */
} epoch_px;

static void start(feed_test_server *s, const char *cache_bytes)
{
    const char *args[] = {"--dataset", g_arg,         "--cache-bytes", cache_bytes, "--threads",
                          "1",         "--log-level", "warn",          NULL};
    assert_int_equal(feed_test_server_start(args, s), 0);
}

static double scrape(const feed_test_server *s, const char *series)
{
    double v = -1;
    int rc = feed_test_scrape(s->metrics_port, series, &v);
    if (rc)
        fail_msg("%s on %s: %s", series, s->target, feed_strerror(rc));
    return v;
}

static double fleet_sum(const feed_test_server *s, uint32_t n, const char *series, int skip)
{
    double sum = 0;
    for (uint32_t i = 0; i < n; i++)
        if ((int)i != skip)
            sum += scrape(&s[i], series);
    return sum;
}

/* After the loader is closed: waits (up to IDLE_POLLS x 20 ms) for every server but `skip` to
 * have no batch in hand, so that counters stop moving (a hedged piece's owner, or batches of
 * the next epoch fetched ahead, may still be at work when an epoch ends). */
#define IDLE_POLLS 3000
static void wait_idle(const feed_test_server *s, int skip)
{
    double busy = fleet_sum(s, FLEET, "feedd_inflight_batches", skip);
    for (int i = 0; i < IDLE_POLLS && busy > 0; i++) {
        usleep(20000);
        busy = fleet_sum(s, FLEET, "feedd_inflight_batches", skip);
    }
    assert_int_equal(busy, 0);
}

static feed_loader *open_loader(const char *const *targets, size_t n, uint32_t epoch)
{
    feed_loader_config c;
    feed_test_host_config(&c, targets, n, "fleet", SIDE, BATCH, NULL);
    c.seed = SEED;
    c.epoch = epoch;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    return l;
}

/* Takes batches into e (pixels by sample index, deliveries counted) until EOF; after `kill_after`
 * batches, SIGKILLs victim (NULL: none). Returns the batches taken. */
static uint32_t take_epoch(feed_loader *l, epoch_px *e, uint32_t kill_after,
                           feed_test_server *victim)
{
    uint32_t batches = 0;
    for (;;) {
        feed_batch *b = NULL;
        int rc = feed_loader_next(l, &b);
        if (rc == FEED_EEOF)
            break;
        assert_int_equal(rc, 0);
        for (uint32_t i = 0; i < b->n; i++) {
            uint64_t idx = b->indices[i];
            assert_true(idx < g_samples);
            e->times[idx]++;
            memcpy(e->px + idx * SAMPLE_BYTES, (const uint8_t *)b->data + i * SAMPLE_BYTES,
                   SAMPLE_BYTES);
        }
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
        if (++batches == kill_after && victim)
            feed_test_server_kill(victim);
    }
    return batches;
}

static void epoch_init(epoch_px *e)
{
    e->px = calloc(g_samples, SAMPLE_BYTES);
    e->times = calloc(g_samples, sizeof(*e->times));
    assert_non_null(e->px);
    assert_non_null(e->times);
}

static void epoch_free(epoch_px *e)
{
    free(e->px);
    free(e->times);
}

/* One epoch from a single server that caches nothing: its budget holds the slot table only. */
static void reference(uint32_t epoch, epoch_px *e)
{
    feed_test_server s;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)(g_samples * 8 + 64));
    start(&s, bytes);
    const char *t[1] = {s.target};
    feed_loader *l = open_loader(t, 1, epoch);
    epoch_init(e);
    take_epoch(l, e, 0, NULL);
    feed_loader_close(l);
    assert_int_equal(scrape(&s, "feedd_cache_entries"), 0);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

static void expect_same(const epoch_px *got, const epoch_px *want)
{
    for (uint64_t i = 0; i < g_samples; i++) {
        if (got->times[i] != 1)
            fail_msg("sample %llu delivered %u times", (unsigned long long)i, got->times[i]);
        if (memcmp(got->px + i * SAMPLE_BYTES, want->px + i * SAMPLE_BYTES, SAMPLE_BYTES))
            fail_msg("sample %llu: pixels differ from the single server's", (unsigned long long)i);
    }
}

/* How many samples each server owns, by the loader's rendezvous hashing over their targets. */
static void owned_by(const feed_test_server *s, uint64_t *owned)
{
    loader *fake = calloc(1, sizeof(*fake));
    assert_non_null(fake);
    for (uint32_t i = 0; i < FLEET; i++) {
        snprintf(fake->servers[i].target, sizeof fake->servers[i].target, "%s", s[i].target);
        owned[i] = 0;
    }
    fake->num_servers = FLEET;
    for (uint64_t k = 0; k < g_samples; k++)
        owned[sched_route_owner(fake, k)]++;
    free(fake);
}

/*
 * Epochs from `first` on until the fleet's caches hold the dataset (at most MAX_WARM): an owner
 * judged a straggler with a full window spills samples to the next server, which serves them
 * uncached, so the first epoch on a loaded machine may leave some out; the owner admits them
 * when it next gets them. Each epoch exactly once. Returns the next epoch.
 */
#define MAX_WARM 10u
static uint32_t warm_up(feed_loader *l, const feed_test_server *s, uint32_t first)
{
    uint32_t e = first;
    double entries = 0;
    while (entries < (double)g_samples && e < first + MAX_WARM) {
        epoch_px got;
        epoch_init(&got);
        assert_int_equal(feed_loader_set_epoch(l, e, 0), 0);
        take_epoch(l, &got, 0, NULL);
        for (uint64_t k = 0; k < g_samples; k++)
            assert_int_equal(got.times[k], 1);
        epoch_free(&got);
        entries = fleet_sum(s, FLEET, "feedd_cache_entries", -1);
        print_message("after epoch %u: %.0f of %llu samples cached in the fleet\n", e, entries,
                      (unsigned long long)g_samples);
        e++;
    }
    assert_int_equal(entries, (double)g_samples);
    return e;
}

static void test_fleet_caches_add_up(void **state)
{
    (void)state;
    epoch_px want;
    reference(0, &want);
    feed_test_server s[FLEET];
    const char *t[FLEET];
    for (uint32_t i = 0; i < FLEET; i++) {
        start(&s[i], "64M");
        t[i] = s[i].target;
    }
    feed_loader *l = open_loader(t, FLEET, 0);
    epoch_px got;
    epoch_init(&got);
    take_epoch(l, &got, 0, NULL);
    expect_same(&got, &want);
    epoch_free(&got);
    /* Measured below: the epoch after `next`, which the loader fetched ahead during the last
     * warm epoch (all of it, with 160 samples) before the counters could be read. */
    uint32_t next = warm_up(l, s, 1) + 1;
    /* The dataset once in the fleet, each server exactly its share (none holds more, and the
     * shares add up to the dataset). */
    uint64_t owned[FLEET];
    owned_by(s, owned);
    for (uint32_t i = 0; i < FLEET; i++) {
        double e = scrape(&s[i], "feedd_cache_entries");
        print_message("server %u: %.0f cached, owns %llu\n", i, e, (unsigned long long)owned[i]);
        assert_int_equal(e, (double)owned[i]);
    }
    /* A warm epoch: every owner's lookup hits; a miss is only a stand-in's, not admitted. */
    double misses0 = fleet_sum(s, FLEET, "feedd_cache_misses_total", -1);
    double stood0 = fleet_sum(s, FLEET, "feedd_cache_not_owned_total", -1);
    double hits0 = fleet_sum(s, FLEET, "feedd_cache_hits_total", -1);
    epoch_px want_next;
    reference(next, &want_next);
    epoch_init(&got);
    assert_int_equal(feed_loader_set_epoch(l, next, 0), 0);
    take_epoch(l, &got, 0, NULL);
    expect_same(&got, &want_next);
    feed_loader_close(l);
    wait_idle(s, -1);
    double misses = fleet_sum(s, FLEET, "feedd_cache_misses_total", -1) - misses0;
    double hits = fleet_sum(s, FLEET, "feedd_cache_hits_total", -1) - hits0;
    print_message("warm epoch %u (and what was fetched ahead): %.0f hits, %.0f misses\n", next,
                  hits, misses);
    assert_true(hits >= 1);
    assert_int_equal(misses, fleet_sum(s, FLEET, "feedd_cache_not_owned_total", -1) - stood0);
    assert_int_equal(fleet_sum(s, FLEET, "feedd_cache_entries", -1), (double)g_samples);
    for (uint32_t i = 0; i < FLEET; i++)
        assert_int_equal(feed_test_server_stop(&s[i]), 0);
    epoch_free(&got);
    epoch_free(&want);
    epoch_free(&want_next);
}

static void test_server_killed_mid_epoch(void **state)
{
    (void)state;
    feed_test_server s[FLEET];
    const char *t[FLEET];
    for (uint32_t i = 0; i < FLEET; i++) {
        start(&s[i], "64M");
        t[i] = s[i].target;
    }
    feed_loader *l = open_loader(t, FLEET, 0);
    uint32_t e = warm_up(l, s, 0);
    double before[FLEET];
    for (uint32_t i = 0; i < FLEET; i++)
        before[i] = scrape(&s[i], "feedd_cache_entries");

    /*
     * An epoch from warm caches with server 1 killed in it. Not epoch e, which the loader
     * fetched ahead during the last warm epoch (all of it, with 160 samples), but the one
     * after. Server 1 is stopped before the epoch starts, so it answers none of it and
     * whatever was asked of it is still owed when it is killed: re-issued, and the rest of its
     * share asked of the others. (Killed after two batches of epoch e instead, it could have
     * answered all its pieces already, and nothing was left to stand in for.)
     */
    e++;
    epoch_px want, got;
    reference(e, &want);
    epoch_init(&got);
    assert_int_equal(feed_test_server_signal(&s[1], SIGSTOP), 0);
    assert_int_equal(feed_loader_set_epoch(l, e, 0), 0);
    feed_test_server_kill(&s[1]);
    take_epoch(l, &got, 0, NULL);
    expect_same(&got, &want);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_true(st.failovers >= 1);
    feed_loader_close(l);
    wait_idle(s, 1);
    /* The survivors served server 1's samples without admitting them. */
    for (uint32_t i = 0; i < FLEET; i++)
        if (i != 1)
            assert_int_equal(scrape(&s[i], "feedd_cache_entries"), before[i]);
    double stood_in = fleet_sum(s, FLEET, "feedd_cache_not_owned_total", 1);
    print_message("survivors stood in for %.0f samples (server 1 cached %.0f)\n", stood_in,
                  before[1]);
    assert_true(stood_in > 0);
    for (uint32_t i = 0; i < FLEET; i++)
        if (i != 1)
            assert_int_equal(feed_test_server_stop(&s[i]), 0);
    epoch_free(&got);
    epoch_free(&want);
}

static int group_setup(void **state)
{
    *state = g_root;
    if (feed_test_tmpdir("client-fleet", g_root, sizeof g_root))
        return -1;
    /* ctest always sets FEED_SAMPLE_DIR; the sample is used where it exists (a clone
     * without ../shared gets the generated folder). */
    const char *sample = getenv("FEED_SAMPLE_DIR");
    struct stat st;
    if (sample && *sample && stat(sample, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(g_dir, sizeof g_dir, "%s", sample);
    } else {
        snprintf(g_dir, sizeof g_dir, "%s/data", g_root);
        if (feed_test_make_imagefolder(g_dir, 4, 40, 5))
            return -1;
    }
    snprintf(g_arg, sizeof g_arg, "fleet=%s,cache=%d", g_dir, CACHE_SIDE);
    /* The dataset's size, as a server describes it. */
    feed_test_server s;
    start(&s, "64M");
    const char *t[1] = {s.target};
    g_samples = MAX_SAMPLES;
    feed_loader *l = open_loader(t, 1, 0);
    g_samples = feed_loader_dataset_size(l);
    feed_loader_close(l);
    feed_test_server_stop(&s);
    return g_samples > 0 && g_samples <= MAX_SAMPLES ? 0 : -1;
}

int main(void)
{
    if (!feed_test_have_feedd())
        return FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fleet_caches_add_up),
        cmocka_unit_test(test_server_killed_mid_epoch),
    };
    return cmocka_run_group_tests(tests, group_setup, feed_test_group_rmtree);
}
