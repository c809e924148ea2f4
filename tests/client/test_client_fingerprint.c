/*
 * Dataset fingerprints end to end (issue 30, item 2): real feedd processes on
 * 127.0.0.1 port 0 serving generated ImageFolder trees of real JPEGs, and
 * libfeedclient choosing among them by DatasetInfo.fingerprint.
 * Cases: two servers serve version A and a third serves version B, the same
 * 48 samples and class names but for one image of another size; B answers
 * only after the loader took A's fingerprint (it is stopped with SIGSTOP
 * until then, so which server comes first is not left to chance): the loader
 * refuses B, warns naming both fingerprints and both servers, counts it once,
 * B serves no batch, and every sample's pixels are version A's, as a single
 * A server makes them. And the same tree served as a tree and as tar shards
 * made from it by feed-pack: one fingerprint, both used, the same pixels.
 * Main thread only, but for the log callback (receiver threads; g_log_mu).
 */
#include <pthread.h>
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
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"

#define CLASSES 4u
#define PER_CLASS 12u /* 48 samples, the example */
#define SIDE 32u
#define BATCH 4u
#define SEED 7u
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)
#define CHANGED 20u      /* the sample whose image differs in version B */
#define WAIT_POLLS 6000u /* x 20 ms: a hang guard, not a timing assumption */

static char g_root[256], g_a[512], g_b[512], g_shards[512];
static char g_fp_a[65], g_fp_b[65];
static uint64_t g_samples;

/* Warnings and errors the loader logged, for the refusal's message. */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[32][1024];
static size_t g_log_n;

typedef struct epoch_px {
    uint8_t *px;     /* [g_samples] samples by index */
    uint32_t *times; /* [g_samples] deliveries of each index */
} epoch_px;

static void capture_log(void *user, int level, const char *msg)
{
    (void)user;
    if (level <= 2) {
        pthread_mutex_lock(&g_log_mu);
        if (g_log_n < sizeof g_log / sizeof g_log[0])
            snprintf(g_log[g_log_n++], sizeof g_log[0], "%s", msg);
        pthread_mutex_unlock(&g_log_mu);
    }
    if (level <= 1 || getenv("FEED_TEST_VERBOSE"))
        fprintf(stderr, "  [client %d] %s\n", level, msg);
}

static void start(feed_test_server *s, const char *dataset_arg)
{
    const char *args[] = {"--dataset", dataset_arg, "--threads", "1", "--log-level", "warn", NULL};
    assert_int_equal(feed_test_server_start(args, s), 0);
}

static feed_loader *open_loader(const char *const *targets, size_t n)
{
    feed_loader_config c;
    feed_test_host_config(&c, targets, n, "fp", SIDE, BATCH, capture_log);
    c.seed = SEED;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    return l;
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

static void take_epoch(feed_loader *l, epoch_px *e)
{
    epoch_init(e);
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
    }
}

/* One epoch from a single server of `dataset_arg`. */
static void reference(const char *dataset_arg, epoch_px *e)
{
    feed_test_server s;
    start(&s, dataset_arg);
    const char *t[1] = {s.target};
    feed_loader *l = open_loader(t, 1);
    take_epoch(l, e);
    feed_loader_close(l);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

static int same_sample(const epoch_px *a, const epoch_px *b, uint64_t i)
{
    return memcmp(a->px + i * SAMPLE_BYTES, b->px + i * SAMPLE_BYTES, SAMPLE_BYTES) == 0;
}

static void expect_same(const epoch_px *got, const epoch_px *want, const char *what)
{
    for (uint64_t i = 0; i < g_samples; i++) {
        if (got->times[i] != 1)
            fail_msg("sample %llu delivered %u times", (unsigned long long)i, got->times[i]);
        if (!same_sample(got, want, i))
            fail_msg("sample %llu: pixels differ from %s", (unsigned long long)i, what);
    }
}

/* Server stats of the loader's server with this target. */
static feed_server_stats server_stats(feed_loader *l, const char *target)
{
    feed_loader_stats st;
    feed_server_stats ss;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    for (uint32_t i = 0; i < st.servers_known; i++) {
        assert_int_equal(feed_loader_server_stats(l, i, &ss, sizeof ss), 0);
        if (strcmp(ss.target, target) == 0)
            return ss;
    }
    fail_msg("server %s not known to the loader", target);
    return ss;
}

static size_t log_lines_with(const char *a, const char *b, const char *c, const char *d)
{
    size_t n = 0;
    pthread_mutex_lock(&g_log_mu);
    for (size_t i = 0; i < g_log_n; i++)
        n += strstr(g_log[i], a) && strstr(g_log[i], b) && strstr(g_log[i], c) &&
             strstr(g_log[i], d);
    pthread_mutex_unlock(&g_log_mu);
    return n;
}

static void test_other_version_refused(void **state)
{
    (void)state;
    char arg_a[600], arg_b[600];
    snprintf(arg_a, sizeof arg_a, "fp=%s", g_a);
    snprintf(arg_b, sizeof arg_b, "fp=%s", g_b);
    epoch_px want, want_b, got;
    reference(arg_a, &want);
    reference(arg_b, &want_b);
    /* The versions differ in the changed sample, and only there. */
    for (uint64_t i = 0; i < g_samples; i++)
        assert_int_equal(same_sample(&want, &want_b, i), i != CHANGED);

    feed_test_server a1, a2, b;
    start(&a1, arg_a);
    start(&a2, arg_a);
    start(&b, arg_b);
    assert_int_equal(feed_test_server_signal(&b, SIGSTOP), 0);
    const char *t[3] = {a1.target, b.target, a2.target};
    g_log_n = 0;
    feed_loader *l = open_loader(t, 3);
    assert_int_equal(feed_test_server_signal(&b, SIGCONT), 0);
    /* B joins once it answers Describe: wait for its verdict before taking batches. */
    feed_server_stats sb = server_stats(l, b.target);
    for (uint32_t i = 0; i < WAIT_POLLS && !sb.fingerprint_differs && !sb.up; i++) {
        usleep(20000);
        sb = server_stats(l, b.target);
    }
    take_epoch(l, &got);
    expect_same(&got, &want, "version A's (a single A server)");

    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    sb = server_stats(l, b.target);
    assert_true(sb.fingerprint_differs);
    assert_int_equal(sb.batches, 0);
    assert_string_equal(sb.fingerprint, g_fp_b);
    assert_int_equal(st.fingerprint_refused, 1);
    assert_string_equal(st.dataset_fingerprint, g_fp_a);
    assert_string_equal(server_stats(l, a1.target).fingerprint, g_fp_a);
    assert_false(server_stats(l, a2.target).fingerprint_differs);
    /* The warning names B, both fingerprints and the A server that set the expected one. */
    assert_int_equal(log_lines_with(b.target, g_fp_a, g_fp_b, a1.target) +
                         log_lines_with(b.target, g_fp_a, g_fp_b, a2.target),
                     1);
    feed_loader_close(l);
    assert_int_equal(feed_test_server_stop(&a1), 0);
    assert_int_equal(feed_test_server_stop(&a2), 0);
    assert_int_equal(feed_test_server_stop(&b), 0);
    epoch_free(&want);
    epoch_free(&want_b);
    epoch_free(&got);
}

static void test_tree_and_shards_agree(void **state)
{
    (void)state;
    char arg_tree[600], arg_tar[700];
    snprintf(arg_tree, sizeof arg_tree, "fp=%s", g_a);
    snprintf(arg_tar, sizeof arg_tar, "fp=%s-{000000..000002}.tar", g_shards);
    epoch_px want, got;
    reference(arg_tree, &want);
    feed_test_server tree, tar;
    start(&tree, arg_tree);
    start(&tar, arg_tar);
    const char *t[2] = {tree.target, tar.target};
    g_log_n = 0;
    feed_loader *l = open_loader(t, 2);
    take_epoch(l, &got);
    expect_same(&got, &want, "the tree's (a single tree server)");
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_int_equal(st.fingerprint_refused, 0);
    assert_string_equal(st.dataset_fingerprint, g_fp_a);
    feed_server_stats s_tree = server_stats(l, tree.target), s_tar = server_stats(l, tar.target);
    assert_string_equal(s_tree.fingerprint, g_fp_a);
    assert_string_equal(s_tar.fingerprint, g_fp_a);
    assert_false(s_tar.fingerprint_differs);
    feed_loader_close(l);
    assert_int_equal(feed_test_server_stop(&tree), 0);
    assert_int_equal(feed_test_server_stop(&tar), 0);
    epoch_free(&want);
    epoch_free(&got);
}

/* The dataset's fingerprint and size as feedd computes them at open. */
static int fingerprint_of(const char *dir, char *hex, uint64_t *count)
{
    feed_dataset *ds = NULL;
    char err[512];
    int rc = feed_dataset_open(dir, NULL, &ds, err, sizeof err);
    if (!rc) {
        snprintf(hex, 65, "%s", feed_dataset_fingerprint(ds));
        *count = feed_dataset_count(ds);
    }
    feed_dataset_close(ds);
    return rc;
}

static int group_setup(void **state)
{
    char cmd[2048], path[700];
    uint64_t count_b = 0;
    struct stat before, after;
    const char *bdir = getenv("FEED_BUILD_DIR");
    *state = g_root;
    if (feed_test_tmpdir("client-fingerprint", g_root, sizeof g_root))
        return -1;
    snprintf(g_a, sizeof g_a, "%s/a", g_root);
    snprintf(g_b, sizeof g_b, "%s/b", g_root);
    snprintf(g_shards, sizeof g_shards, "%s/shard", g_root);
    if (feed_test_make_imagefolder(g_a, CLASSES, PER_CLASS, 5))
        return -1;
    /* Version B: a copy of A (cp without -p: other mtimes) with one image re-drawn at another
     * size, under the same name. */
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", g_a, g_b);
    if (system(cmd) != 0)
        return -1;
    feed_dataset *ds = NULL;
    char err[512];
    if (feed_dataset_open(g_b, NULL, &ds, err, sizeof err))
        return -1;
    snprintf(path, sizeof path, "%s", feed_dataset_sample_path(ds, CHANGED));
    feed_dataset_close(ds);
    if (stat(path, &before) || feed_test_write_jpeg(path, 200, 120, 99, 85) || stat(path, &after))
        return -1;
    if (before.st_size == after.st_size)
        return -1;
    /* The same tree as three tar shards (16 samples each), by the pack tool. */
    snprintf(cmd, sizeof cmd,
             "'%s/server/tools/feed-pack' '%s' '%s' --format tar --shard-samples 16 > /dev/null",
             bdir, g_a, g_shards);
    if (system(cmd) != 0)
        return -1;
    if (fingerprint_of(g_a, g_fp_a, &g_samples) || fingerprint_of(g_b, g_fp_b, &count_b))
        return -1;
    return g_samples == CLASSES * PER_CLASS && count_b == g_samples && strcmp(g_fp_a, g_fp_b) != 0
               ? 0
               : -1;
}

int main(void)
{
    if (!feed_test_have_feedd())
        return FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_other_version_refused),
        cmocka_unit_test(test_tree_and_shards_agree),
    };
    return cmocka_run_group_tests(tests, group_setup, feed_test_group_rmtree);
}
