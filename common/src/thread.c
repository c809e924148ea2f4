/*
 * feed/thread.h: monotonic condition variables and their timed waits. No
 * state of its own; any thread.
 */
#include "feed/thread.h"

#include <errno.h>
#include <time.h>

#include "feed/errors.h"
#include "feed/timeutil.h"

int feed_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc)
        goto out;
    rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
out:
    return rc;
}

int feed_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    int rc = pthread_cond_timedwait(cond, mu, &ts);
    return rc == ETIMEDOUT ? FEED_ETIMEDOUT : 0;
}

int feed_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t timeout_ns)
{
    uint64_t now = feed_now_ns();
    uint64_t deadline = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
    return feed_cond_wait_until(cond, mu, deadline);
}

void feed_sleep_until(uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
                          .tv_nsec = (long)(deadline_ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}
