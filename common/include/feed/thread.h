/*
 * Condition variables on the monotonic clock and timed waits on them, as
 * libuv's uv_cond_init / uv_cond_timedwait: a wait is a span of time, so a
 * step of the wall clock (NTP, an operator) neither cuts it short nor makes
 * it last. Deadlines are in feed_now_ns()'s nanoseconds (feed/timeutil.h).
 * Any thread; the caller of a wait holds mu as pthread_cond_timedwait wants.
 */
#ifndef FEED_THREAD_H
#define FEED_THREAD_H

#include <pthread.h>
#include <stdint.h>

/* pthread_cond_init with CLOCK_MONOTONIC; 0 or pthread's error number. */
int feed_cond_init(pthread_cond_t *cond);
/* Waits on cond until woken or until feed_now_ns() reaches deadline_ns. 0 when woken (or
 * woken spuriously: the caller re-checks its predicate), FEED_ETIMEDOUT once the deadline has
 * passed. A caller that loops until a deadline passes the same deadline_ns each time. */
int feed_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t deadline_ns);
/* feed_cond_wait_until(now + timeout_ns): at most timeout_ns from the call. */
int feed_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mu, uint64_t timeout_ns);
/* Sleeps until feed_now_ns() reaches deadline_ns; a signal does not cut it short. */
void feed_sleep_until(uint64_t deadline_ns);

#endif
