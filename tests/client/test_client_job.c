/*
 * The loader's job (feed_loader_config.job, job_weight; README "Jobs share a
 * server") against a real feedd over gRPC: the name in use, the default rule
 * from the launcher's environment (the same on every rank), that every
 * stream sends it (feedd counts the samples under that job), and the checks.
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

#define SIDE 32u
#define BATCH 4u

static char g_root[256], g_ds[300];
static feed_test_server g_srv;
static char g_target[64];

static int setup(void **state)
{
    (void)state;
    char arg[400];
    if (feed_test_tmpdir("feed-job", g_root, sizeof g_root) < 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_root);
    if (feed_test_make_imagefolder(g_ds, 2, 8, 3) < 0)
        return -1;
    snprintf(arg, sizeof arg, "jobs=%s", g_ds);
    const char *args[] = {"--dataset", arg, "--threads", "1", "--log-level", "warn", NULL};
    if (feed_test_server_start(args, &g_srv) != 0)
        return -1;
    snprintf(g_target, sizeof g_target, "%s", g_srv.target);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_server_teardown(&g_srv, g_root);
}

static void config(feed_loader_config *c, const char *const *targets, uint32_t rank,
                   uint32_t world)
{
    feed_loader_config_default(c);
    c->targets = targets;
    c->num_targets = 1;
    c->dataset = "jobs";
    c->transform.out_h = c->transform.out_w = SIDE;
    c->batch_size = BATCH;
    c->seed = 5;
    c->rank = rank;
    c->world = world;
    c->dtype = FEED_DTYPE_UINT8;
    c->layout = FEED_LAYOUT_NHWC;
    c->device = FEED_DEVICE_HOST;
    c->batch_deadline_ms = 120000;
    c->unavailable_timeout_ms = 120000;
}

/* One batch through l: its stream has opened with the job by then. */
static void take_one(feed_loader *l)
{
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
}

static double job_samples(const char *job)
{
    char series[256];
    double v = 0;
    snprintf(series, sizeof series, "feedd_job_samples_total{job=\"%s\"}", job);
    return feed_test_scrape(g_srv.metrics_port, series, &v) == 0 ? v : 0;
}

static void clear_env(void)
{
    unsetenv("TORCHELASTIC_RUN_ID");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
}

/* Ranks of one torchrun job derive one name, and feedd serves both under it. */
static void test_default_same_on_every_rank(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    clear_env();
    setenv("MASTER_ADDR", "10.1.2.3", 1);
    setenv("MASTER_PORT", "29500", 1);
    feed_loader_config c0, c1;
    config(&c0, targets, 0, 2);
    config(&c1, targets, 1, 2);
    feed_loader *l0 = NULL, *l1 = NULL;
    assert_int_equal(feed_loader_open(&c0, &l0), 0);
    assert_int_equal(feed_loader_open(&c1, &l1), 0);
    char job[160];
    snprintf(job, sizeof job, "%s", feed_loader_job(l0)); /* l0's, gone at its close */
    assert_string_equal(job, feed_loader_job(l1));
    assert_int_equal(strncmp(job, "dist-", 5), 0);
    assert_int_equal(strlen(job), 5 + 16);
    take_one(l0);
    take_one(l1);
    assert_true(job_samples(job) >= 2 * BATCH);
    feed_loader_close(l0);
    feed_loader_close(l1);

    /* Another master port is another job. */
    setenv("MASTER_PORT", "29501", 1);
    assert_int_equal(feed_loader_open(&c0, &l0), 0);
    assert_string_not_equal(feed_loader_job(l0), job);
    feed_loader_close(l0);

    /* torchrun's run id wins; its "none" (no --rdzv-id) does not. */
    setenv("TORCHELASTIC_RUN_ID", "sweep 42", 1);
    assert_int_equal(feed_loader_open(&c0, &l0), 0);
    assert_string_equal(feed_loader_job(l0), "run-sweep_42");
    feed_loader_close(l0);
    setenv("TORCHELASTIC_RUN_ID", "none", 1);
    assert_int_equal(feed_loader_open(&c0, &l0), 0);
    assert_int_equal(strncmp(feed_loader_job(l0), "dist-", 5), 0);
    feed_loader_close(l0);

    /* No launcher: the process. */
    clear_env();
    assert_int_equal(feed_loader_open(&c0, &l0), 0);
    assert_int_equal(strncmp(feed_loader_job(l0), "proc-", 5), 0);
    feed_loader_close(l0);
}

/* An explicit name and weight go on the stream; bad ones are refused at open. */
static void test_explicit_job(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    clear_env();
    feed_loader_config c;
    config(&c, targets, 0, 1);
    c.job = "team-a/sweep:7";
    c.job_weight = 3;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    assert_string_equal(feed_loader_job(l), "team-a/sweep:7");
    take_one(l);
    assert_true(job_samples("team-a/sweep:7") >= BATCH);
    feed_loader_close(l);

    c.job_weight = 101;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.job_weight = 1;
    c.job = "has space";
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    char longer[130];
    memset(longer, 'j', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    c.job = longer;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_same_on_every_rank),
        cmocka_unit_test(test_explicit_job),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
