/*
 * The decode lane in CPU mode (docs/design/client.md "Decode lane") against a real feedd over
 * gRPC, on real JPEGs (one of them corrupt): a share of the samples is fetched as JPEG bytes and
 * decoded by the loader with the servers' engine, and every batch must be what the lane off
 * gives, bit for bit: order, pixels, labels and statuses. The lane's count is the assignment
 * function's; shares 0 and 1; an augmentation; a resume at another world size keeps the
 * epoch's share from the state and every sample's pixels; a corrupt JPEG in the lane gets the
 * network path's status and zero pixels; an empty file (EMPTY in the encoded reply) and an
 * encoded reply beyond decode_lane_max_bytes are asked of the servers again, decoded; a server
 * killed mid-epoch under owner routing loses nothing and duplicates nothing; the share adapted
 * between epochs keeps its share on the host path and logs why.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "plan.h"

#define SIDE 32u
#define BATCH 6u
#define SAMPLES 41u /* 40 JPEGs and an empty file, the last sample */
#define EPOCH 1u
#define SEED 0x1a2eull
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)

static char g_root[256], g_ds[300];
static feed_test_server g_srv;
static const char *g_targets[1];
static uint64_t g_corrupt; /* the index of the corrupt JPEG */

/* The dataset's third file of its first class (sorted, as the tree indexes them) becomes a
 * corrupt JPEG: a valid start, then noise. */
static int corrupt_one(void)
{
    struct dirent **cls = NULL, **files = NULL;
    int nc = scandir(g_ds, &cls, NULL, alphasort), nf = -1, rc = -1;
    char dir[600], path[900];
    int first = -1;
    for (int i = 0; i < nc && first < 0; i++) {
        if (cls[i]->d_name[0] != '.')
            first = i;
    }
    if (first >= 0) {
        snprintf(dir, sizeof dir, "%s/%s", g_ds, cls[first]->d_name);
        nf = scandir(dir, &files, NULL, alphasort);
    }
    uint64_t at = 0;
    for (int i = 0; i < nf && rc < 0; i++) {
        if (files[i]->d_name[0] == '.')
            continue;
        if (at == 2) {
            uint8_t junk[600] = {0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x43, 0x00};
            for (size_t k = 7; k < sizeof junk; k++)
                junk[k] = (uint8_t)(k * 37u + 11u);
            snprintf(path, sizeof path, "%s/%s", dir, files[i]->d_name);
            rc = feed_test_write_file(path, junk, sizeof junk);
            g_corrupt = at;
        }
        at++;
    }
    for (int i = 0; i < nc; i++)
        free(cls[i]);
    for (int i = 0; i < nf; i++)
        free(files[i]);
    free(cls);
    free(files);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    char arg[400];
    if (feed_test_tmpdir("feed-lane", g_root, sizeof g_root) < 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_root);
    if (feed_test_make_imagefolder(g_ds, 2, SAMPLES / 2, 5) < 0 || corrupt_one() < 0)
        return -1;
    struct dirent **cls = NULL;
    int nc = scandir(g_ds, &cls, NULL, alphasort);
    char empty[900];
    snprintf(empty, sizeof empty, "%s/%s/zz_empty.jpg", g_ds, nc > 0 ? cls[nc - 1]->d_name : ".");
    for (int i = 0; i < nc; i++)
        free(cls[i]);
    free(cls);
    if (nc < 3 || feed_test_write_file(empty, "", 0) < 0)
        return -1;
    snprintf(arg, sizeof arg, "lane=%s", g_ds);
    const char *args[] = {"--dataset", arg, "--threads", "2", "--log-level", "warn", NULL};
    if (feed_test_server_start(args, &g_srv) != 0)
        return -1;
    g_targets[0] = g_srv.target;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_server_teardown(&g_srv, g_root);
}

static void config(feed_loader_config *c, feed_decode_lane lane, double share)
{
    feed_test_host_config(c, g_targets, 1, "lane", SIDE, BATCH, NULL);
    c->seed = SEED;
    c->epoch = EPOCH;
    c->bad_sample_policy = FEED_BAD_SAMPLE_FAIL; /* statuses and pixels as they came */
    c->decode_lane = lane;
    c->decode_share = share;
}

/* What a run delivered: the order, and per sample index its pixels, label and status and how
 * often it came. */
typedef struct run {
    uint32_t epoch; /* the batches' epoch: EPOCH unless set */
    uint64_t order[2 * SAMPLES];
    size_t n;
    uint8_t pixels[SAMPLES][SAMPLE_BYTES];
    int64_t labels[SAMPLES];
    uint8_t status[SAMPLES];
    uint32_t seen[SAMPLES];
    feed_loader_stats stats;
} run;

static run *run_new(void)
{
    run *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->epoch = EPOCH;
    return r;
}

/* Takes batches from l until EOF, or `batches` of them (0: all), into r. */
static void take(feed_loader *l, run *r, uint64_t batches)
{
    feed_batch *b = NULL;
    for (uint64_t k = 0; batches == 0 || k < batches; k++) {
        int rc = feed_loader_next(l, &b);
        if (rc == FEED_EEOF)
            break;
        assert_true(rc == 0 || rc == FEED_EBADSAMPLE);
        assert_int_equal(b->bytes, (size_t)b->n * SAMPLE_BYTES);
        assert_int_equal(b->epoch, r->epoch);
        for (uint32_t i = 0; i < b->n; i++) {
            uint64_t idx = b->indices[i];
            assert_true(idx < SAMPLES && r->n < 2 * SAMPLES);
            r->order[r->n++] = idx;
            r->seen[idx]++;
            memcpy(r->pixels[idx], (const uint8_t *)b->data + i * SAMPLE_BYTES, SAMPLE_BYTES);
            r->labels[idx] = b->labels[i];
            r->status[idx] = b->status[i];
        }
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
    }
    assert_int_equal(feed_loader_get_stats(l, &r->stats, sizeof r->stats), 0);
}

static void run_epoch(const feed_loader_config *c, run *r)
{
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(c, &l), 0);
    assert_int_equal(feed_loader_dataset_size(l), SAMPLES);
    take(l, r, 0);
    feed_loader_close(l);
}

/* Every sample came once, in the same order, with the same pixels, labels and statuses. */
static void assert_same(const run *a, const run *b)
{
    assert_int_equal(a->n, SAMPLES);
    assert_int_equal(b->n, SAMPLES);
    assert_memory_equal(a->order, b->order, SAMPLES * sizeof(uint64_t));
    for (uint64_t i = 0; i < SAMPLES; i++) {
        assert_int_equal(a->seen[i], 1);
        assert_int_equal(b->seen[i], 1);
        assert_int_equal(a->labels[i], b->labels[i]);
        assert_int_equal(a->status[i], b->status[i]);
        if (memcmp(a->pixels[i], b->pixels[i], SAMPLE_BYTES) != 0)
            fail_msg("sample %llu: pixels differ", (unsigned long long)i);
    }
}

static uint32_t assigned(uint64_t seed, uint32_t epoch, double share, const uint64_t *idx, size_t n)
{
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += client_lane_assigned(seed, epoch, idx[i], client_lane_share16(share));
    return k;
}

/* Half the samples through the lane: what the lane off gives, bit for bit; the lane decoded
 * exactly the samples the assignment names and the servers the rest; the same with an
 * augmentation, which the lane applies as the servers do. */
static void test_lane_half(void **state)
{
    (void)state;
    for (int augmented = 0; augmented < 2; augmented++) {
        run *off = run_new(), *on = run_new();
        feed_loader_config c;
        config(&c, FEED_DECODE_LANE_OFF, 0.0);
        if (augmented)
            c.augment = "TrivialAugmentWide(); RandomErasing(p=0.5)";
        run_epoch(&c, off);
        config(&c, FEED_DECODE_LANE_CPU, 0.5);
        c.decode_lane_threads = 3;
        if (augmented)
            c.augment = "TrivialAugmentWide(); RandomErasing(p=0.5)";
        run_epoch(&c, on);
        assert_same(off, on);
        assert_int_equal(off->status[g_corrupt] != FEED_SAMPLE_OK, 1);
        uint32_t want = assigned(SEED, EPOCH, 0.5, on->order, SAMPLES);
        /* The empty file, if the lane's, comes back EMPTY and goes to the servers again. */
        uint32_t back = assigned(SEED, EPOCH, 0.5, (const uint64_t[]){SAMPLES - 1}, 1);
        assert_in_range(want, 2, SAMPLES - 1);
        assert_int_equal(on->stats.lane_decoded, want - back);
        assert_int_equal(on->stats.lane_rerequested, back);
        assert_int_equal(off->stats.lane_decoded, 0);
        free(off);
        free(on);
    }
}

/* Share 0: the lane decodes nothing; share 1: everything; both as the lane off. */
static void test_lane_edges(void **state)
{
    (void)state;
    run *off = run_new(), *none = run_new(), *all = run_new();
    feed_loader_config c;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    run_epoch(&c, off);
    config(&c, FEED_DECODE_LANE_CPU, 0.0);
    run_epoch(&c, none);
    config(&c, FEED_DECODE_LANE_CPU, 1.0);
    c.decode_lane_threads = 1;
    run_epoch(&c, all);
    assert_same(off, none);
    assert_same(off, all);
    assert_int_equal(none->stats.lane_decoded, 0);
    assert_int_equal(all->stats.lane_decoded, SAMPLES - 1);
    assert_int_equal(all->stats.lane_rerequested, 1);
    assert_int_equal(all->status[SAMPLES - 1], FEED_SAMPLE_EMPTY);
    free(off);
    free(none);
    free(all);
}

/* A corrupt JPEG in the lane: the status the servers give it and zero pixels; its neighbours
 * in the batch are intact, and under the substitute policy it is replaced as on the network
 * path. */
static void test_lane_corrupt(void **state)
{
    (void)state;
    for (int substitute = 0; substitute < 2; substitute++) {
        run *off = run_new(), *on = run_new();
        feed_loader_config c;
        config(&c, FEED_DECODE_LANE_OFF, 0.0);
        if (substitute)
            c.bad_sample_policy = FEED_BAD_SAMPLE_SUBSTITUTE;
        run_epoch(&c, off);
        config(&c, FEED_DECODE_LANE_CPU, 1.0);
        if (substitute)
            c.bad_sample_policy = FEED_BAD_SAMPLE_SUBSTITUTE;
        run_epoch(&c, on);
        assert_same(off, on);
        assert_int_equal(on->status[g_corrupt], FEED_SAMPLE_CORRUPT);
        assert_int_equal(on->stats.sample_errors[FEED_SAMPLE_CORRUPT], 1);
        static const uint8_t zero[SAMPLE_BYTES];
        if (substitute)
            assert_memory_not_equal(on->pixels[g_corrupt], zero, SAMPLE_BYTES);
        else
            assert_memory_equal(on->pixels[g_corrupt], zero, SAMPLE_BYTES);
        free(off);
        free(on);
    }
}

/* Encoded replies beyond decode_lane_max_bytes are not read: their samples are asked again,
 * decoded, and the epoch is what the lane off gives. */
static void test_lane_cap(void **state)
{
    (void)state;
    run *off = run_new(), *on = run_new();
    feed_loader_config c;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    run_epoch(&c, off);
    config(&c, FEED_DECODE_LANE_CPU, 1.0);
    c.decode_lane_max_bytes = 4096;
    run_epoch(&c, on);
    assert_same(off, on);
    assert_true(on->stats.lane_rerequested > 0);
    assert_int_equal(on->stats.lane_decoded + on->stats.lane_rerequested, SAMPLES);
    free(off);
    free(on);
}

/*
 * World 2 with the lane at 0.5 takes two batches a rank; the combined state is resumed at world
 * 3 whose config says 1: the epoch keeps the state's 0.5 (the lane's count says so), every
 * sample comes (the first remaining ones twice, DistributedSampler's padding), each with the
 * pixels an uninterrupted run gives it.
 */
static void test_lane_resume(void **state)
{
    (void)state;
    run *ref = run_new(), *before = run_new(), *after = run_new();
    feed_loader_config c;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    run_epoch(&c, ref);
    static uint8_t states[2][4096];
    size_t lens[2];
    for (uint32_t r = 0; r < 2; r++) {
        feed_loader *l = NULL;
        config(&c, FEED_DECODE_LANE_CPU, 0.5);
        c.rank = r;
        c.world = 2;
        assert_int_equal(feed_loader_open(&c, &l), 0);
        take(l, before, 2);
        assert_int_equal(feed_loader_state(l, EPOCH, 2, states[r], sizeof states[r], &lens[r]), 0);
        feed_loader_close(l);
    }
    assert_int_equal(before->n, 2 * 2 * BATCH);
    static uint8_t combined[8192];
    size_t clen = 0;
    char why[200];
    const void *ptrs[2] = {states[0], states[1]};
    assert_int_equal(
        feed_state_combine(ptrs, lens, 2, combined, sizeof combined, &clen, why, sizeof why), 0);
    uint64_t lane = 0;
    for (uint32_t r = 0; r < 3; r++) {
        feed_loader *l = NULL;
        config(&c, FEED_DECODE_LANE_CPU, 1.0);
        c.rank = r;
        c.world = 3;
        assert_int_equal(feed_loader_open(&c, &l), 0);
        assert_int_equal(feed_loader_resume(l, combined, clen, why, sizeof why), 0);
        size_t from = after->n;
        take(l, after, 0);
        lane += after->stats.lane_decoded;
        assert_int_equal(after->stats.lane_decoded,
                         assigned(SEED, EPOCH, 0.5, after->order + from, after->n - from));
        feed_loader_close(l);
    }
    uint64_t left = SAMPLES - before->n;
    assert_int_equal(after->n, left + (3 - left % 3) % 3);
    assert_true(lane > 0 && lane < after->n); /* neither none nor the config's all */
    for (uint64_t i = 0; i < SAMPLES; i++) {
        assert_true(before->seen[i] + after->seen[i] >= 1);
        assert_true(before->seen[i] <= 1);
        const run *got = before->seen[i] ? before : after;
        assert_int_equal(got->labels[i], ref->labels[i]);
        assert_int_equal(got->status[i], ref->status[i]);
        if (memcmp(got->pixels[i], ref->pixels[i], SAMPLE_BYTES) != 0)
            fail_msg("sample %llu: pixels differ after the resume", (unsigned long long)i);
    }
    free(ref);
    free(before);
    free(after);
}

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_log_cv = PTHREAD_COND_INITIALIZER;
static char g_log[16384];

/* A log_fn keeping the loader's lines in g_log, waking wait_log. */
static void log_keep(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    pthread_mutex_lock(&g_log_mu);
    size_t at = strlen(g_log);
    snprintf(g_log + at, sizeof g_log - at, "%s\n", msg);
    pthread_cond_broadcast(&g_log_cv);
    pthread_mutex_unlock(&g_log_mu);
}

/* Until the loader has logged a line holding `needle` (no time limit: ctest's is the guard). */
static void wait_log(const char *needle)
{
    pthread_mutex_lock(&g_log_mu);
    while (!strstr(g_log, needle))
        pthread_cond_wait(&g_log_cv, &g_log_mu);
    pthread_mutex_unlock(&g_log_mu);
}

/* The share adapted between epochs (decode_share_max) on the host path: no step time is
 * measured there (it comes from CUDA events on the caller's stream), so the decision for the
 * next epoch keeps the share and says why in the log; that epoch's batches are what the lane
 * off gives. A maximum outside [0, 1] is refused. */
static void test_lane_adapt(void **state)
{
    (void)state;
    run *off = run_new(), *first = run_new(), *next = run_new();
    off->epoch = next->epoch = EPOCH + 1;
    feed_loader_config c;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    c.epoch = EPOCH + 1;
    run_epoch(&c, off);
    config(&c, FEED_DECODE_LANE_CPU, 0.25);
    c.decode_share_max = 1.5;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.decode_share_max = 0.75;
    c.log_fn = log_keep;
    g_log[0] = '\0';
    assert_int_equal(feed_loader_open(&c, &l), 0);
    take(l, first, 0);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 1, 0), 0);
    take(l, next, 0);
    feed_loader_close(l);
    assert_same(off, next);
    pthread_mutex_lock(&g_log_mu);
    if (!strstr(g_log, "decode lane: cpu, 2 threads, share 0.250, adapted between epochs") ||
        !strstr(g_log, "decode lane, epoch 2: share 0.250 kept: 0 steps measured, fewer than 32"))
        fail_msg("the log does not say what the lane decided:\n%s", g_log);
    pthread_mutex_unlock(&g_log_mu);
    free(off);
    free(first);
    free(next);
}

/*
 * Two servers with owner routing on (the decoded pieces split by owner, the encoded one whole),
 * the lane at 0.5, small batches; one server killed once both have answered a batch: every
 * sample once, in plan order, with the pixels of the lane off on one server, and the kill seen
 * as a failover. Waits are for events (a server up, the failover's log line), not for time.
 */
static void test_lane_server_killed(void **state)
{
    (void)state;
    run *ref = run_new(), *got = run_new();
    feed_loader_config c;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    run_epoch(&c, ref);
    feed_test_server s[2];
    char arg[400];
    snprintf(arg, sizeof arg, "lane=%s", g_ds);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "error", NULL};
    const char *targets[2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(feed_test_server_start(args, &s[i]), 0);
        targets[i] = s[i].target;
    }
    config(&c, FEED_DECODE_LANE_CPU, 0.5);
    c.targets = targets;
    c.num_targets = 2;
    c.owner_routing = FEED_OWNER_ROUTING_ON;
    c.window_per_server = 1;
    c.prefetch = 1;
    c.batch_size = 2;
    c.log_fn = log_keep;
    g_log[0] = '\0';
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    /* Batch by batch until both servers have answered one (a server that never did is no
     * failover when it dies); the epoch must not end first. */
    for (;;) {
        feed_server_stats ss[2];
        for (uint32_t i = 0; i < 2; i++)
            assert_int_equal(feed_loader_server_stats(l, i, &ss[i], sizeof ss[i]), 0);
        if (ss[0].up && ss[1].up)
            break;
        assert_true(got->n < SAMPLES);
        take(l, got, 1);
    }
    feed_test_server_kill(&s[0]);
    take(l, got, 0);
    wait_log("failed (");
    assert_int_equal(feed_loader_get_stats(l, &got->stats, sizeof got->stats), 0);
    print_message("lane, server killed: failovers %llu, reissued %llu, lane decoded %llu\n",
                  (unsigned long long)got->stats.failovers, (unsigned long long)got->stats.reissued,
                  (unsigned long long)got->stats.lane_decoded);
    feed_loader_close(l);
    feed_test_server_stop(&s[1]);
    assert_true(got->stats.failovers >= 1);
    assert_true(got->stats.lane_decoded > 0);
    assert_same(ref, got);
    free(ref);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lane_half),    cmocka_unit_test(test_lane_edges),
        cmocka_unit_test(test_lane_corrupt), cmocka_unit_test(test_lane_cap),
        cmocka_unit_test(test_lane_resume),  cmocka_unit_test(test_lane_server_killed),
        cmocka_unit_test(test_lane_adapt),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
