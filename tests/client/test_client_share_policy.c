/*
 * The decode lane's share between epochs (client/src/lane/share_policy.h,
 * docs/design/client.md "The lane's share"), on scripted measurements: it
 * grows by the closed form while the step waits for the servers, by at most
 * CLIENT_SHARE_MAX_MOVE an epoch and never past the configured maximum;
 * backs off when the step slowed past CLIENT_SHARE_SLOWDOWN against the
 * lowest share measured, and then stays below that share; shrinks when the
 * lane was what the GPU waited for; holds when the step did not wait or too
 * few steps were measured. Each decision's log line names its numbers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "share_policy.h"

#define ONE CLIENT_SHARE_ONE
#define MS 1e6

static uint32_t q(double s)
{
    return (uint32_t)(s * ONE + 0.5);
}

/* One epoch: waited w of the time, lane_waits of it for the lane, steps of step_ms. */
static uint32_t epoch(client_share_policy *p, double w, double lane_waits, double step_ms,
                      uint64_t steps, char *why)
{
    client_share_epoch e = {.wait_fraction = w,
                            .gpu_idle = true,
                            .lane_waits = lane_waits,
                            .step_ns = step_ms * MS,
                            .steps = steps};
    uint32_t n = client_share_policy_next(p, &e, why, 256);
    assert_int_equal(n, p->share);
    return n;
}

static void test_grows_while_servers_are_short(void **state)
{
    (void)state;
    client_share_policy p;
    char why[256];
    client_share_policy_init(&p, 0, ONE);
    /* 30% waiting from share 0 wants 0.3; one epoch moves at most 0.25. */
    assert_int_equal(epoch(&p, 0.30, 0, 10, 100, why), q(0.25));
    assert_non_null(
        strstr(why, "share 0.000 -> 0.250: the GPU waited outside the steps 30.0% of the time"));
    /* Then the closed form: 1 - (1 - 0.25)(1 - 0.1) = 0.325, the step as fast as alone. */
    assert_int_equal(epoch(&p, 0.10, 0, 10.2, 100, why), q(0.325));
    /* No waiting: kept. */
    assert_int_equal(epoch(&p, 0.01, 0, 10.1, 100, why), q(0.325));
    assert_non_null(
        strstr(why, "share 0.325 kept: the GPU waited outside the steps 1.0% of the time"));
}

static void test_too_few_steps_hold(void **state)
{
    (void)state;
    client_share_policy p;
    char why[256];
    client_share_policy_init(&p, q(0.5), ONE);
    assert_int_equal(epoch(&p, 0.9, 0, 10, CLIENT_SHARE_MIN_STEPS - 1, why), q(0.5));
    assert_non_null(strstr(why, "31 steps measured, fewer than 32"));
    assert_int_equal(epoch(&p, 0.9, 0, 0, 1000, why), q(0.5));
    /* Nothing was measured, so no baseline was taken either. */
    assert_true(p.base_ns == 0);
}

static void test_backs_off_when_the_step_slows(void **state)
{
    (void)state;
    client_share_policy p;
    char why[256];
    client_share_policy_init(&p, 0, ONE);
    assert_int_equal(epoch(&p, 0.5, 0, 10, 100, why), q(0.25));
    /* 4% slower is within the tolerance: it keeps growing. */
    assert_int_equal(epoch(&p, 0.5, 0, 10.4, 100, why), q(0.5));
    /* 8% slower than at share 0: back by 0.25, and 0.5 is the ceiling. */
    assert_int_equal(epoch(&p, 0.5, 0, 10.8, 100, why), q(0.25));
    assert_non_null(strstr(why, "share 0.500 -> 0.250: the step took 8.0% longer than at share "
                                "0.000 (10.800 ms against 10.000 ms)"));
    /* Still waiting: grows again, but stops 1/16 below the share that slowed the step. */
    assert_int_equal(epoch(&p, 0.5, 0, 10.1, 100, why), q(0.5 - 1.0 / 16));
    assert_int_equal(epoch(&p, 0.5, 0, 10.2, 100, why), q(0.5 - 1.0 / 16));
    assert_non_null(
        strstr(why, "kept: the GPU waited outside the steps 50.0% of the time, but the share is at "
                    "its ceiling (0.500)"));
    /* A back-off never goes below the baseline's share. */
    client_share_policy_init(&p, q(0.1), ONE);
    assert_int_equal(epoch(&p, 0.5, 0, 10, 100, why), q(0.35));
    assert_int_equal(epoch(&p, 0.0, 0, 20, 100, why), q(0.1));
}

static void test_shrinks_when_the_lane_is_short(void **state)
{
    (void)state;
    client_share_policy p;
    char why[256];
    client_share_policy_init(&p, q(0.5), ONE);
    assert_int_equal(epoch(&p, 0.2, 0.8, 10, 100, why), q(0.4));
    assert_non_null(strstr(
        why, "share 0.500 -> 0.400: the GPU waited outside the steps 20.0% of the time, 80% of "
             "it for the lane's samples"));
}

static void test_configured_maximum(void **state)
{
    (void)state;
    client_share_policy p;
    char why[256];
    client_share_policy_init(&p, ONE, q(0.3));
    assert_int_equal(p.share, q(0.3));
    client_share_policy_init(&p, q(0.25), q(0.3));
    assert_int_equal(epoch(&p, 0.5, 0, 10, 100, why), q(0.3));
    assert_int_equal(epoch(&p, 0.5, 0, 10, 100, why), q(0.3));
    assert_non_null(strstr(why, "at its configured maximum (0.300)"));
    /* A share of 0 with a maximum of 0: the lane stays off. */
    client_share_policy_init(&p, 0, 0);
    assert_int_equal(epoch(&p, 0.9, 0, 10, 100, why), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_while_servers_are_short),
        cmocka_unit_test(test_too_few_steps_hold),
        cmocka_unit_test(test_backs_off_when_the_step_slows),
        cmocka_unit_test(test_shrinks_when_the_lane_is_short),
        cmocka_unit_test(test_configured_maximum),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
