/*
 * Fleet sizing end to end (README "Fleet sizing"): real feedd processes on
 * 127.0.0.1 port 0, libfeedclient reporting its training thread's demand on
 * its requests, real JPEGs (an ImageFolder the test support encodes). Only
 * relations that hold at any speed are asserted here (CI runs this on a
 * loaded 2-core machine and under ASan): the servers export a job's demand
 * under its name, a paced job's rate is bounded by its pace, a job whose
 * server was stopped reports a wait above 0, the desired size is at least
 * one server, and a fleet without demand comes back to one. What the desired
 * size is for given demand and capacity (1x, 2x, 4x, 0.5x, hysteresis, the
 * per-window bound) is test_fleet's, on scripted inputs. Polls are hang
 * guards only. Main thread only, but for the thread that resumes a stopped
 * server.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"

#define SIDE 32u
/* The job the loaders name (cfg.job): feedd counts their demand under it. */
#define JOB "demand-test"
/* Hang guard of each wait for a metric: polls, each after a batch or 100 ms. */
#define POLLS 1200

static char g_root[256], g_arg[600];

static void start(feed_test_server *s)
{
    const char *args[] = {"--dataset",         g_arg,  "--threads", "1", "--log-level", "warn",
                          "--fleet-window-ms", "1000", NULL};
    assert_int_equal(feed_test_server_start(args, s), 0);
}

/* One GET /metrics (NULL if it failed): every value a check reads comes from one snapshot, so
 * that a loader forgotten or reported again between two scrapes cannot mix two states. */
static char *snapshot(const feed_test_server *s)
{
    int status = 0;
    char *body = NULL;
    if (feed_test_http_get(s->metrics_port, "/metrics", &status, &body) != 0 || status != 200) {
        free(body);
        body = NULL;
    }
    return body;
}

/* A series' value in a snapshot; -1 when absent. */
static double val(const char *body, const char *series)
{
    double v = -1;
    return body && feed_test_metric(body, series, &v) == 0 ? v : -1;
}

static feed_loader *open_loader(const char *const *targets, size_t n, uint32_t batch)
{
    feed_loader_config c;
    feed_test_host_config(&c, targets, n, "demand", SIDE, batch, NULL);
    c.demand_window_ms = 300;
    c.job = JOB;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    return l;
}

/* One batch, the next epoch at the end of one; then sleeps pause_us (the training step). */
static void take(feed_loader *l, uint32_t *epoch, useconds_t pause_us)
{
    feed_batch *b = NULL;
    int rc = feed_loader_next(l, &b);
    if (rc == FEED_EEOF) {
        assert_int_equal(feed_loader_set_epoch(l, ++*epoch, 0), 0);
        rc = feed_loader_next(l, &b);
    }
    assert_int_equal(rc, 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    if (pause_us)
        usleep(pause_us);
}

/* The server has taken the loader's reports and moved a window on since: the job is there under
 * its name, with the two servers the loader has up. */
static bool sized(const char *m)
{
    return val(m, "feedd_fleet_job_loaders{job=\"" JOB "\"}") == 1 &&
           val(m, "feedd_fleet_servers_seen") == 2 && val(m, "feedd_fleet_desired_servers") >= 1;
}

/* A paced job over two servers: each server it uses exports it under the job's name, one
 * loader, a rate no higher than the pace allows (the loader sleeps 100 ms a batch of 4: at most
 * 40 samples/s, 1.5x for the window's edges), a wait fraction in [0, 1], and a desired size of at
 * least one server. Balancing may leave one server without work; at least one is used. */
static void test_job_reported_per_server(void **state)
{
    (void)state;
    feed_test_server s[2];
    start(&s[0]);
    start(&s[1]);
    const char *t[2] = {s[0].target, s[1].target};
    feed_loader *l = open_loader(t, 2, 4);
    uint32_t epoch = 0;
    char *m[2] = {NULL, NULL};
    for (int polls = 0; polls < POLLS; polls++) {
        for (int i = 0; i < 2; i++) {
            free(m[i]);
            m[i] = snapshot(&s[i]);
        }
        if (sized(m[0]) || sized(m[1]))
            break;
        take(l, &epoch, 100000);
    }
    int used = 0;
    for (int i = 0; i < 2; i++) {
        /* 0 until a server's first window has passed (one that was given no work may not
         * have got there yet). */
        assert_non_null(m[i]);
        assert_true(val(m[i], "feedd_fleet_desired_servers") >= 0);
        assert_true(val(m[i], "feedd_fleet_desired_servers_raw") >= 0);
        assert_true(val(m[i], "feedd_fleet_capacity_samples_per_second") >= 0);
        if (!sized(m[i]))
            continue;
        used++;
        assert_true(val(m[i], "feedd_fleet_desired_servers") >= 1);
        double rate = val(m[i], "feedd_fleet_job_samples_per_second{job=\"" JOB "\"}");
        double wait = val(m[i], "feedd_fleet_job_wait_fraction{job=\"" JOB "\"}");
        assert_true(rate >= 0 && rate <= 40.0 * 1.5);
        assert_true(wait >= 0 && wait <= 1);
        assert_true(val(m[i], "feedd_fleet_reports_total") > 0);
        assert_true(val(m[i], "feedd_fleet_reports_dropped_total") == 0);
    }
    free(m[0]);
    free(m[1]);
    assert_true(used > 0);
    feed_loader_close(l);
    assert_int_equal(feed_test_server_stop(&s[0]), 0);
    assert_int_equal(feed_test_server_stop(&s[1]), 0);
}

/* Takes batches while the server is stopped until next() finds none ready within 50 ms: the
 * training thread has run dry and waits (a timed-out next() goes on with the same wait, which
 * the loader counts when the batch comes). A hang guard bounds the batches the loader may hold. */
static void take_until_dry(feed_loader *l, uint32_t *epoch)
{
    for (int k = 0; k < 1000; k++) {
        feed_batch *b = NULL;
        int rc = feed_loader_next_timed(l, &b, 50);
        if (rc == FEED_ETIMEDOUT)
            return;
        if (rc == FEED_EEOF) {
            assert_int_equal(feed_loader_set_epoch(l, ++*epoch, 0), 0);
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
    }
    fail_msg("the loader never ran dry with its server stopped");
}

/*
 * A job that waits: the server is stopped (every thread, feed_test_server_pause) while the
 * loader takes batches until next() has run dry and waited (take_until_dry), then resumed: the
 * event, not a clock, decides when. That wait is in the loader's window, so the server exports a
 * wait fraction above 0 for the job; a round whose report has not reached the server yet is
 * tried again. Once the job leaves, it is forgotten and the fleet it wants
 * comes back to one server: no demand needs no capacity, whatever the server measured.
 */
static void test_waiting_job_then_idle_shrinks(void **state)
{
    (void)state;
    feed_test_server s;
    start(&s);
    const char *t[1] = {s.target};
    feed_loader *l = open_loader(t, 1, 8);
    uint32_t epoch = 0;
    char *m = NULL;
    take(l, &epoch, 0);
    for (int polls = 0; polls < POLLS / 10; polls++) {
        free(m);
        m = snapshot(&s);
        if (val(m, "feedd_fleet_job_wait_fraction{job=\"" JOB "\"}") > 0 &&
            val(m, "feedd_fleet_job_loaders{job=\"" JOB "\"}") == 1)
            break;
        assert_int_equal(feed_test_server_pause(&s), 0);
        take_until_dry(l, &epoch);
        assert_int_equal(feed_test_server_resume(&s), 0);
        take(l, &epoch, 0);
    }
    double wait = val(m, "feedd_fleet_job_wait_fraction{job=\"" JOB "\"}");
    fprintf(stderr, "  waiting job: wait fraction %.3f, %.1f samples/s, desired %.0f\n", wait,
            val(m, "feedd_fleet_job_samples_per_second{job=\"" JOB "\"}"),
            val(m, "feedd_fleet_desired_servers"));
    assert_true(wait > 0 && wait <= 1);
    assert_true(val(m, "feedd_fleet_job_loaders{job=\"" JOB "\"}") == 1);
    assert_true(val(m, "feedd_fleet_demand_samples_per_second") >= 0);
    feed_loader_close(l);
    /* Gone: forgotten after three windows, then the size halves each window down to 1. */
    for (int polls = 0; polls < POLLS; polls++) {
        free(m);
        m = snapshot(&s);
        if (val(m, "feedd_fleet_desired_servers") == 1 &&
            val(m, "feedd_fleet_job_loaders{job=\"" JOB "\"}") == -1)
            break;
        usleep(100000);
    }
    assert_non_null(m);
    assert_true(val(m, "feedd_fleet_job_loaders{job=\"" JOB "\"}") == -1);
    assert_true(val(m, "feedd_fleet_demand_samples_per_second") == 0);
    assert_true(val(m, "feedd_fleet_desired_servers") == 1);
    free(m);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

static int group_setup(void **state)
{
    char dir[512];
    *state = g_root;
    if (feed_test_tmp_imagefolder("client-demand", g_root, sizeof g_root, dir, sizeof dir, 4, 40,
                                  7))
        return -1;
    snprintf(g_arg, sizeof g_arg, "demand=%s", dir);
    return 0;
}

int main(void)
{
    if (!feed_test_have_feedd())
        return FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_reported_per_server),
        cmocka_unit_test(test_waiting_job_then_idle_shrinks),
    };
    return cmocka_run_group_tests(tests, group_setup, feed_test_group_rmtree);
}
