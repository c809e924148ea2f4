/* Monotonic time helpers. */
#ifndef FEED_TIMEUTIL_H
#define FEED_TIMEUTIL_H

#include <stdint.h>
#include <time.h>

static inline uint64_t feed_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread, for per-stage accounting. */
static inline uint64_t feed_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
