/*
 * feedd's memory admission (server/service/memory.h) on its own: no gRPC, no pool.
 * The granter is a real thread; the tests wait for the grants they expect
 * (a condition variable, no sleeps) and check their order, which is the
 * whole contract: first come first served over every stream, a batch that
 * does not fit the total holds back everything behind it, one that only
 * misses its own stream's cap is passed over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "memory.h"

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    feedd_mem_waiter *order[8];
    int n;
} grants = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0};

static void on_granted(feedd_mem_waiter *w)
{
    pthread_mutex_lock(&grants.mu);
    if (grants.n < 8)
        grants.order[grants.n] = w;
    grants.n++;
    pthread_cond_broadcast(&grants.cv);
    pthread_mutex_unlock(&grants.mu);
}

/* Wait for the n-th grant; the deadline only turns a lost grant into a failure, not a hang. */
static void wait_grants(int n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&grants.mu);
    int rc = 0;
    while (grants.n < n && rc == 0)
        rc = pthread_cond_timedwait(&grants.cv, &grants.mu, &until);
    pthread_mutex_unlock(&grants.mu);
    if (rc != 0)
        fail_msg("%d of %d grants (rc %d)", grants.n, n, rc);
}

static feedd_memory *open_memory(uint64_t total, uint64_t per_stream)
{
    feedd_memory *m = NULL;
    grants.n = 0;
    assert_int_equal(feedd_memory_new(total, per_stream, on_granted, &m), 0);
    return m;
}

static void close_memory(feedd_memory *m)
{
    feedd_memory_stop(m);
    feedd_memory_unref(m);
}

static void test_fifo_over_streams(void **state)
{
    (void)state;
    feedd_memory *m = open_memory(100, 100);
    feedd_mem_account a = {0}, b = {0}, c = {0};
    feedd_mem_waiter wa = {&a, 60, {0}}, wb = {&b, 60, {0}}, wc = {&c, 10, {0}};
    assert_true(feedd_memory_admit(m, &wa));
    feedd_mem_buf *buf = feedd_memory_buf_new(m, 60);
    assert_non_null(buf);
    assert_int_equal(feedd_memory_used(m), 60);
    /* b does not fit the total; c would, but may not overtake b. */
    assert_false(feedd_memory_admit(m, &wb));
    assert_false(feedd_memory_admit(m, &wc));
    feedd_memory_stream_release(m, &a, 60); /* a's send finished... */
    feedd_memory_buf_free(buf);             /* ...and gRPC dropped the bytes */
    wait_grants(2);
    assert_ptr_equal(grants.order[0], &wb);
    assert_ptr_equal(grants.order[1], &wc);
    assert_int_equal(feedd_memory_used(m), 70);
    assert_int_equal(atomic_load(&b.used), 60);
    feedd_memory_unreserve(m, &b, 60);
    feedd_memory_unreserve(m, &c, 10);
    assert_int_equal(feedd_memory_used(m), 0);
    close_memory(m);
}

static void test_stream_cap_is_passed_over(void **state)
{
    (void)state;
    feedd_memory *m = open_memory(100, 50);
    feedd_mem_account x = {0}, y = {0};
    feedd_mem_waiter x1 = {&x, 40, {0}}, x2 = {&x, 20, {0}}, x3 = {&x, 5, {0}}, y1 = {&y, 30, {0}};
    assert_true(feedd_memory_admit(m, &x1));
    /* x2 misses x's own cap; x3 stays behind it (x's order); y1 goes past both. */
    assert_false(feedd_memory_admit(m, &x2));
    assert_false(feedd_memory_admit(m, &x3));
    assert_false(feedd_memory_admit(m, &y1));
    wait_grants(1);
    assert_ptr_equal(grants.order[0], &y1);
    /* Only x itself can make room for x2. */
    feedd_memory_unreserve(m, &x, 40);
    wait_grants(3);
    assert_ptr_equal(grants.order[1], &x2);
    assert_ptr_equal(grants.order[2], &x3);
    assert_int_equal(atomic_load(&x.used), 25);
    assert_int_equal(feedd_memory_used(m), 55);
    feedd_memory_unreserve(m, &x, 25);
    feedd_memory_unreserve(m, &y, 30);
    close_memory(m);
}

static void test_withdraw_unblocks_the_rest(void **state)
{
    (void)state;
    feedd_memory *m = open_memory(100, 100);
    feedd_mem_account a = {0}, b = {0}, c = {0};
    feedd_mem_waiter wa = {&a, 90, {0}}, wb = {&b, 50, {0}}, wb2 = {&b, 1, {0}}, wc = {&c, 10, {0}};
    assert_true(feedd_memory_admit(m, &wa));
    assert_false(feedd_memory_admit(m, &wb));
    assert_false(feedd_memory_admit(m, &wb2));
    assert_false(feedd_memory_admit(m, &wc));
    /* b's stream is cancelled: its waiters come back, and c, no longer behind b, fits. */
    feed_list back = {0};
    feedd_memory_withdraw(m, &b, &back);
    assert_ptr_equal(back.first, &wb.link);
    assert_ptr_equal(back.last, &wb2.link);
    wait_grants(1);
    assert_ptr_equal(grants.order[0], &wc);
    feedd_memory_unreserve(m, &a, 90);
    feedd_memory_unreserve(m, &c, 10);
    assert_int_equal(feedd_memory_used(m), 0);
    close_memory(m);
}

/* A buffer outlives the service's reference, as one gRPC drops late does. */
static void test_buffer_outlives_the_service(void **state)
{
    (void)state;
    feedd_memory *m = open_memory(100, 100);
    feedd_mem_account a = {0};
    feedd_mem_waiter w = {&a, 8, {0}};
    assert_true(feedd_memory_admit(m, &w));
    feedd_mem_buf *buf = feedd_memory_buf_new(m, 8);
    assert_non_null(buf);
    memset(buf->data, 0xab, 8);
    close_memory(m);
    feedd_memory_buf_free(buf); /* the last reference: ASan sees any use after free */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_over_streams),
        cmocka_unit_test(test_stream_cap_is_passed_over),
        cmocka_unit_test(test_withdraw_unblocks_the_rest),
        cmocka_unit_test(test_buffer_outlives_the_service),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
