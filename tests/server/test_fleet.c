/*
 * Fleet sizing (server/fleet.c) without sockets: the desired-size formula on
 * exact inputs (the tf.data ratio, the starvation correction, hysteresis and
 * the per-window bound, both directions), and the table of loaders' reports
 * driven with a scripted clock (per-job sums, one loader counted once, the
 * label set bounded, loaders forgotten, the capacity from busy time).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feedtest.h"
#include "fleet.h"

#define SEC 1000000000ull
#define MS 1000000ull

static uint32_t desired(double rate, double wait, double capacity, uint32_t prev)
{
    feedd_fleet_job job = {rate, wait};
    double raw;
    return feedd_fleet_desired(&job, 1, capacity, prev, &raw);
}

/* tf.data's ratio: a job that does not wait needs its rate over one server's. */
static void test_desired_ratio(void **state)
{
    (void)state;
    assert_int_equal(desired(500, 0, 1000, 0), 1);
    assert_int_equal(desired(1000, 0, 1000, 0), 1);
    assert_int_equal(desired(2000, 0, 1000, 0), 2);
    assert_int_equal(desired(4000, 0, 1000, 0), 4);
    assert_int_equal(desired(0, 0, 1000, 0), 1);
    feedd_fleet_job jobs[3] = {{1500, 0}, {1500, 0}, {900, 0}};
    double raw;
    assert_int_equal(feedd_fleet_desired(jobs, 3, 1000, 0, &raw), 4);
    assert_true(raw > 3.89 && raw < 3.91);
}

/* A job that waits needs more than it receives: rate / (1 - wait), the wait capped at 0.9. */
static void test_desired_starvation(void **state)
{
    (void)state;
    /* One server, saturated: the job takes all of it and waits half the time. */
    assert_int_equal(desired(1000, 0.5, 1000, 0), 2);
    assert_int_equal(desired(1000, 0.75, 1000, 0), 4);
    assert_int_equal(desired(1000, 1.0, 1000, 0), 10);
    double raw;
    feedd_fleet_job nan_wait = {1000, 0.0 / 0.0};
    assert_int_equal(feedd_fleet_desired(&nan_wait, 1, 1000, 0, &raw), 1);
}

/* Up at once past an integer, down only 0.25 below the next one down; at most x2 and /2 a
 * window; never 0; no capacity yet keeps the previous size. */
static void test_desired_hysteresis_and_bound(void **state)
{
    (void)state;
    assert_int_equal(desired(2100, 0, 1000, 2), 3);
    assert_int_equal(desired(1100, 0, 1000, 2), 2);
    assert_int_equal(desired(760, 0, 1000, 2), 2);
    assert_int_equal(desired(750, 0, 1000, 2), 1);
    assert_int_equal(desired(2800, 0, 1000, 4), 4);
    assert_int_equal(desired(2750, 0, 1000, 4), 3);
    assert_int_equal(desired(10000, 0, 1000, 1), 2);
    assert_int_equal(desired(10000, 0, 1000, 2), 4);
    assert_int_equal(desired(10000, 0, 1000, 8), 10);
    assert_int_equal(desired(0, 0, 1000, 8), 4);
    assert_int_equal(desired(0, 0, 1000, 5), 3);
    assert_int_equal(desired(0, 0, 1000, 1), 1);
    assert_int_equal(desired(5000, 0, 0, 3), 3);
    assert_int_equal(desired(0, 0, 0, 4), 2);
    assert_int_equal(desired(5000, 0, 0, 0), 1);
    assert_int_equal(desired(1e9, 0, 1e-9, 0), 65536);
}

/* The desired size window after window, as tick() feeds it (prev: the last answer), for a job
 * whose demand is a given multiple of one server's capacity. */
static uint32_t settle(double multiple, double wait, uint32_t prev, int windows, uint32_t *path)
{
    for (int w = 0; w < windows; w++) {
        prev = desired(1000 * multiple * (1 - wait), wait, 1000, prev);
        if (path)
            path[w] = prev;
    }
    return prev;
}

/* Demand 0.5x, 1x, 2x and 4x of one server: from any fleet of 1 to 8 the size settles within
 * one server above the ideal (ceil of the multiple) and stays there; a job at half its rate
 * because it waits half the time counts as its unstarved demand. */
static void test_desired_settles(void **state)
{
    (void)state;
    static const double multiples[] = {0.5, 1, 2, 4};
    for (size_t i = 0; i < sizeof multiples / sizeof multiples[0]; i++) {
        uint32_t ideal = multiples[i] < 1 ? 1 : (uint32_t)multiples[i];
        for (uint32_t from = 1; from <= 8; from++) {
            for (int starved = 0; starved < 2; starved++) {
                uint32_t end = settle(multiples[i], starved ? 0.5 : 0, from, 8, NULL);
                assert_true(end >= ideal && end <= ideal + 1);
                assert_int_equal(settle(multiples[i], starved ? 0.5 : 0, end, 4, NULL), end);
            }
        }
    }
    /* From one server, 2x and 4x reach the ideal exactly (growth rounds up, not over). */
    assert_int_equal(settle(2, 0, 1, 8, NULL), 2);
    assert_int_equal(settle(4, 0, 1, 8, NULL), 4);
}

/* A step from 1x to 4x grows at most 2x a window (1, 2, 4); the step back down to 0.5x and then
 * to no demand at all shrinks at most by half a window, to one server and no lower. */
static void test_desired_steps(void **state)
{
    (void)state;
    uint32_t up[3], down[4];
    uint32_t n = settle(1, 0, 1, 2, NULL);
    assert_int_equal(n, 1);
    n = settle(4, 0, n, 3, up);
    assert_int_equal(up[0], 2);
    assert_int_equal(up[1], 4);
    assert_int_equal(up[2], 4);
    /* 8 servers' worth from 4: 8 at once (the bound allows 2x); 16x from 4: 8 first. */
    assert_int_equal(settle(8, 0, 4, 1, NULL), 8);
    assert_int_equal(settle(16, 0, 4, 1, NULL), 8);
    n = settle(0.5, 0, n, 4, down);
    assert_int_equal(down[0], 2);
    assert_int_equal(down[1], 1);
    assert_int_equal(down[3], 1);
    /* Idle from 8: 4, 2, 1, 1. */
    n = settle(0, 0, 8, 4, down);
    assert_int_equal(down[0], 4);
    assert_int_equal(down[1], 2);
    assert_int_equal(down[2], 1);
    assert_int_equal(down[3], 1);
    /* Hysteresis both ways around 2 servers: 1.8x holds 2, 2.1x grows to 3, 2.0x from 3 holds 3
     * (2 + 0.25 rounds up to 3), 1.75x from 3 comes down to 2. */
    assert_int_equal(settle(1.8, 0, 2, 3, NULL), 2);
    assert_int_equal(settle(2.1, 0, 2, 1, NULL), 3);
    assert_int_equal(settle(2.0, 0, 3, 3, NULL), 3);
    assert_int_equal(settle(1.75, 0, 3, 1, NULL), 2);
}

static char text[128 * 1024];

static double metric(const char *series)
{
    double v = -1;
    if (feed_test_metric(text, series, &v) != 0)
        return -1;
    return v;
}

/* 1000 samples of 2 ms each, half of them cache hits, and 3000 encoded samples of 10 us each
 * (left out of the capacity), from a worker thread that has exited when this returns: fleet.c
 * reads a live worker's run-queue time, which no script controls. */
static void *samples_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        feedd_fleet_sample(i % 2 == 0 ? FEEDD_FLEET_CACHE_HIT : FEEDD_FLEET_DECODE, 2 * MS);
        for (int k = 0; k < 3; k++)
            feedd_fleet_sample(FEEDD_FLEET_ENCODED, 10 * MS / 1000);
    }
    return NULL;
}

static void make_samples(void)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, samples_thread, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

static void report(const char *job, uint64_t id, double rate, double wait, uint32_t servers,
                   uint64_t now)
{
    feedd_demand d = {id, 1000, wait, rate, servers};
    feedd_fleet_report(job, &d, now);
}

/*
 * The table, with a 1 s window and a scripted clock: reports summed per job, a loader's
 * reports on several streams counted once, the desired size after a window, a quoted label,
 * the label set folded past FEEDD_FLEET_JOBS_MAX, loaders gone after three windows and the
 * fleet shrinking a window at a time.
 */
static void test_table(void **state)
{
    (void)state;
    feedd_fleet_init(2, 1000);
    uint64_t t = 1000 * SEC;
    feedd_fleet_render(text, sizeof text, t);
    assert_int_equal((int)metric("feedd_fleet_desired_servers"), 0);
    assert_true(metric("feedd_fleet_capacity_samples_per_second") == 0);
    /* 1000 samples of 2 ms each on 2 threads: 1000 samples/s, whatever the encoded ones. */
    make_samples();
    /* Job a: two loaders (one seen on two streams), waiting half the time; job "b\"q": one. */
    report("a", 11, 800, 0.5, 1, t + 100 * MS);
    report("a", 11, 800, 0.5, 1, t + 110 * MS);
    report("a", 12, 800, 0.5, 1, t + 120 * MS);
    report("b\"q", 13, 400, 0, 1, t + 130 * MS);
    t += 1100 * MS;
    size_t len = feedd_fleet_render(text, sizeof text, t);
    assert_true(len > 0 && len < sizeof text);
    assert_true(metric("feedd_fleet_job_loaders{job=\"a\"}") == 2);
    assert_true(metric("feedd_fleet_job_samples_per_second{job=\"a\"}") == 1600);
    assert_true(metric("feedd_fleet_job_wait_fraction{job=\"a\"}") == 0.5);
    assert_true(metric("feedd_fleet_job_loaders{job=\"b\\\"q\"}") == 1);
    assert_true(metric("feedd_fleet_capacity_samples_per_second") == 1000);
    assert_true(metric("feedd_fleet_worker_samples_total{kind=\"cache_hit\"}") == 500);
    assert_true(metric("feedd_fleet_worker_samples_total{kind=\"encoded\"}") == 3000);
    /* a: 1600 / (1 - 0.5) = 3200, b: 400; 3.6 servers, from the 1 the loaders see: 2. */
    assert_true(metric("feedd_fleet_demand_samples_per_second") == 3600);
    assert_true(metric("feedd_fleet_desired_servers_raw") == 3.6);
    assert_int_equal((int)metric("feedd_fleet_desired_servers"), 2);
    assert_int_equal((int)metric("feedd_fleet_servers_seen"), 1);
    /* A second render in the same window moves nothing. */
    feedd_fleet_render(text, sizeof text, t + 10 * MS);
    assert_int_equal((int)metric("feedd_fleet_desired_servers"), 2);
    /* The next window: 4 (the capacity kept, no samples in it). */
    report("a", 11, 800, 0.5, 1, t + 500 * MS);
    t += 1000 * MS;
    feedd_fleet_render(text, sizeof text, t);
    assert_int_equal((int)metric("feedd_fleet_desired_servers"), 4);
    assert_true(metric("feedd_fleet_capacity_samples_per_second") == 1000);
    /* 40 more jobs, 42 in all: 32 by name, the other 10 summed under _other. */
    for (uint64_t j = 0; j < 40; j++) {
        char name[16];
        snprintf(name, sizeof name, "j%02u", (unsigned)j);
        report(name, 100 + j, 1, 0, 4, t + 1 * MS);
    }
    feedd_fleet_render(text, sizeof text, t + 2 * MS);
    unsigned named = 0;
    for (const char *p = text; (p = strstr(p, "feedd_fleet_job_loaders{job=")); p++)
        named++;
    assert_int_equal(named, FEEDD_FLEET_JOBS_MAX + 1);
    assert_true(metric("feedd_fleet_job_loaders{job=\"_other\"}") == 42 - FEEDD_FLEET_JOBS_MAX);
    /* Nobody reports for three windows: every loader is forgotten, and the size halves
     * each window down to 1. */
    uint32_t seen[6];
    for (int w = 0; w < 6; w++) {
        t += 1000 * MS;
        feedd_fleet_render(text, sizeof text, t);
        seen[w] = (uint32_t)metric("feedd_fleet_desired_servers");
    }
    assert_true(metric("feedd_fleet_job_loaders{job=\"a\"}") == -1);
    assert_true(metric("feedd_fleet_demand_samples_per_second") == 0);
    for (int w = 1; w < 6; w++)
        assert_true(seen[w] <= seen[w - 1] && seen[w] * 2 >= seen[w - 1]);
    assert_int_equal(seen[5], 1);
    /* The table's bound: past FEEDD_FLEET_LOADERS_MAX loaders, reports are dropped. */
    for (uint64_t id = 1; id <= FEEDD_FLEET_LOADERS_MAX + 5; id++)
        report("many", 1000 + id, 1, 0, 1, t + 1 * MS);
    feedd_fleet_render(text, sizeof text, t + 2 * MS);
    assert_true(metric("feedd_fleet_reports_dropped_total") == 5);
    assert_true(metric("feedd_fleet_job_loaders{job=\"many\"}") == FEEDD_FLEET_LOADERS_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_desired_ratio),
        cmocka_unit_test(test_desired_starvation),
        cmocka_unit_test(test_desired_hysteresis_and_bound),
        cmocka_unit_test(test_desired_settles),
        cmocka_unit_test(test_desired_steps),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
