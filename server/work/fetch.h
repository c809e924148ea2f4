/*
 * The fetch stage: the bytes of samples held in remote objects (s3://,
 * http(s):// shards; feed_dataset_sample_object) are read here, on threads of
 * its own, before their job reaches the decode workers (pool.c). A decode
 * worker never waits on the network, so a slow or dead store holds fetch
 * threads only, never the workers every dataset shares.
 *
 * Caps: at most store_fetches reads in flight to one store (scheme://host[:port],
 * or an s3 bucket) and at most half of that, rounded up, to one object, so a
 * slow store leaves the threads to the others and a slow object leaves its
 * store to the rest of its objects. A job whose samples are not all fetched
 * deadline_ms after submit goes on to the decode workers anyway: its late
 * samples fail (SAMPLE_IO_ERROR, the message names the store and says it was
 * too slow), the rest are served. A read still in flight then finishes on
 * its fetch thread and its bytes are dropped.
 *
 * Memory: a fetch thread starts no read while the fetched bytes not yet
 * released reach max_bytes, so they stay under max_bytes + threads x the
 * largest sample. Submitted jobs are bounded by the streams' windows and the
 * server's memory grants, and so is the queue of samples to fetch.
 *
 * Threads: `threads` fetch threads and one deadline thread. submit, cancel
 * and release run on the caller's thread; ready is called from a fetch or the
 * deadline thread with no lock of this file held. Lock: f->mu guards the
 * queue, the reads in flight, every fetching job's state and the byte count.
 * Lock order: the pool's lock, then f->mu (pool_cancel calls cancel under it);
 * f->mu is never held while calling out.
 */
#ifndef FEED_SERVER_FETCH_H
#define FEED_SERVER_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct feedd_job feedd_job;
typedef struct feedd_fetch feedd_fetch;

typedef struct feedd_fetch_limits {
    uint32_t threads;          /* fetch threads (feedd: --remote-connections) */
    uint32_t store_fetches;    /* reads in flight to one store (--remote-store-fetches) */
    uint32_t deadline_ms;      /* from submit (--remote-batch-deadline-ms) */
    uint64_t max_bytes;        /* fetched and not released (--remote-readahead) */
    uint64_t max_sample_bytes; /* cap on one sample's bytes (--max-jpeg-bytes) */
} feedd_fetch_limits;

void feedd_fetch_limits_default(feedd_fetch_limits *l);

/* ready(arg, job): every remote sample of job has its bytes or has failed. */
typedef void (*feedd_fetch_ready_fn)(void *arg, feedd_job *job);

/* skip(arg, job, pos): sample pos needs no bytes (a decoded-sample cache hit); any thread. */
typedef bool (*feedd_fetch_skip_fn)(void *arg, const feedd_job *job, uint32_t pos);

/* 0 or FEED_ENOMEM. */
int feedd_fetch_new(const feedd_fetch_limits *l, feedd_fetch_ready_fn ready,
                    feedd_fetch_skip_fn skip, void *arg, feedd_fetch **out);
/* Stops and joins the threads (a read in flight is waited for); frees every job state. */
void feedd_fetch_free(feedd_fetch *f);

/* Whether job has a sample held in a remote object. Never does I/O. */
bool feedd_fetch_wants(const feedd_job *job);

/*
 * Starts fetching job's remote samples but those skip names. 1: the stage has
 * the job and calls ready once (maybe before this returns); FEED_ENOMEM:
 * nothing started, job->fetch stays NULL.
 */
int feedd_fetch_submit(feedd_fetch *f, feedd_job *job);

/*
 * Takes a submitted job out of the stage: true when it was still fetching
 * (ready will not be called; its reads in flight are dropped), false when its
 * ready call is under way. Either way release it once done with it.
 */
bool feedd_fetch_cancel(feedd_fetch *f, feedd_job *job);

/*
 * Sample pos of a job after ready: 1 with its bytes (valid until release),
 * 0 when it was not fetched (local, or skipped), or the negative code its
 * fetch failed with (FEED_ETIMEDOUT: not fetched by the deadline), then
 * *why its cause (feed_dataset_read_why's, valid until release) or NULL.
 */
int feedd_fetch_bytes(const feedd_job *job, uint32_t pos, const uint8_t **jpeg, size_t *len,
                      const char **why);
/* The message of sample pos late for the deadline: its store, and that it was too slow. */
void feedd_fetch_late_message(const feedd_fetch *f, const feedd_job *job, uint32_t pos, char *buf,
                              size_t cap);

/* Frees job's fetched bytes and state. Any thread; accepts a job never submitted. */
void feedd_fetch_release(feedd_fetch *f, feedd_job *job);

#endif
