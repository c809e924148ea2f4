/*
 * The preprocessing worker pool. Each worker owns one feed_engine and one
 * read buffer. Work arrives as jobs (one batch each; a feedd_job is not what
 * users call a job, see share.h) on per-stream queues; workers take a few
 * samples of a queue's head job at a time, so one batch is spread over all
 * workers (low latency). Which queue is served next is share.h's order:
 * training jobs (SessionOpen.job) share the pool in proportion to their
 * weights, and the streams of one job take turns, so a stream with a deep
 * queue cannot starve one with one batch and a job with many streams cannot
 * starve one with few. Each sample is checksummed by the worker
 * that made it; the worker that finishes a job's last sample combines those
 * into job->crc and calls job->done on its own thread.
 *
 * A job with samples held in remote objects first goes through the fetch
 * stage (fetch.h): it waits in its queue's `fetching` list until their bytes
 * are in memory (or their batch deadline has passed) and only then joins the
 * queue's jobs, so a worker never waits on the network.
 *
 * Lock: pool->mu guards every queue's links, the share order (share.h) and
 * every queued job's next_claim/qlink. Callers may hold their own locks when
 * calling join, leave, submit and cancel (the pool never calls out while
 * holding mu, but for the metrics' leaf locks, and done is called with no
 * pool lock held). Lock order: pool->mu, then the fetch stage's.
 */
#ifndef FEED_SERVER_POOL_H
#define FEED_SERVER_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "engine.h"
#include "feed/dataset.h"
#include "feed/list.h"
#include "feed/transform.h"
#include "fetch.h"
#include "share.h"
#include "window.h"

typedef struct feedd_pool feedd_pool;
typedef struct feedd_job feedd_job;

#define FEEDD_SAMPLE_MSG_MAX 200 /* SampleError.message bound from the wire contract */
/* Training jobs with a share of their own at once (share.h's table); each holds ~200 bytes. */
#define FEEDD_JOBS_MAX 1024

struct feedd_job {
    /* Set by the submitter; read-only while the job is in the pool. */
    const feed_dataset *ds;
    uint32_t ds_id;
    const feed_transform *tf;
    const feed_augment *aug; /* after the crop; NULL or no steps: none */
    uint64_t seed;
    uint32_t epoch;
    /* BatchRequest.ownership NOT_OWNER: another server owns these samples; a miss is decoded
     * without admission to the cache. */
    bool not_owner;
    /* Its stream's share (feedd_pool_share): made from images at share_side (0 = not), through
     * the window when seated (seat.group >= 0). */
    uint32_t share_side;
    feedd_window_seat seat;
    const uint64_t *indices;
    uint32_t n;
    uint8_t *data;       /* n * sample_bytes; encoded: enc_off[n] */
    size_t sample_bytes; /* 0 for an encoded job */
    /* BatchRequest.encoded (encoded.h): NULL for pixels. Else n + 1 entries, sample i's room in
     * data being [enc_off[i], enc_off[i + 1]); status and errors are set at acceptance
     * (feedd_encoded_plan), a sample refused there is left as it is. */
    const uint64_t *enc_off;
    uint32_t *enc_len; /* encoded: n entries, the bytes each sample got, written by workers */
    size_t data_len;   /* encoded: the samples' bytes back to back from data, set before done */
    feed_sample_status *status;               /* n entries, written by workers */
    uint32_t *sample_crc;                     /* n entries, written by workers */
    char (*errors)[FEEDD_SAMPLE_MSG_MAX + 1]; /* n entries; "" unless the sample failed */
    void (*done)(feedd_job *job);
    void *user;
    uint32_t crc; /* CRC32C of data, set before done unless cancelled */
    /* The pool's. */
    uint32_t next_claim;       /* guarded by pool mu */
    feed_list_node qlink;      /* in its queue's jobs or running (guarded by pool mu), or the list
                                  cancel hands back */
    struct feedd_queue *queue; /* its queue while in running or fetching; guarded by pool mu */
    struct feedd_fetch_job *fetch; /* its fetched bytes (fetch.c); NULL: none */
    int fetch_rc;                  /* FEED_ENOMEM: its remote samples could not be fetched */
    uint64_t submit_ns;            /* when it was queued: its samples' wait is counted from here */
    atomic_uint remaining;
    atomic_bool cancelled;
    atomic_uint_fast64_t busy_ns;
};

/* A stream's queue of jobs; zero-initialise it. Fields are the pool's (guarded by pool mu). */
typedef struct feedd_queue {
    feed_list jobs;     /* of feedd_job, by qlink, in submission order */
    feed_list running;  /* of feedd_job, by qlink: all samples claimed, some still being made */
    feed_list fetching; /* of feedd_job, by qlink: in the fetch stage */
    feedd_share_member member; /* its place in the order (share.h); linked: unclaimed samples */
    int label;                 /* its job's metrics label (metrics.h) */
    uint32_t share_side;       /* feedd_pool_share: 0 = not sharing */
    feedd_window_seat seat;    /* valid while share_side; group -1: decodes alone */
} feedd_queue;

/*
 * Start `threads` workers and the fetch stage (fetch: NULL = its defaults).
 * cache may be NULL (no dataset cached); a dataset the cache has
 * (feedd_cache_side) is served from it when the transform asks for no more
 * than the cached size (see pool.c). window may be NULL (no dataset
 * shared); streams seated in it (feedd_pool_share) share decoded images.
 * task_samples 0 = auto. 0, FEED_ENOMEM or FEED_EINVAL (an engine could not
 * be made).
 */
int feedd_pool_new(uint32_t threads, const feed_engine_limits *lim, uint64_t max_jpeg_bytes,
                   feedd_cache *cache, feedd_window *window, uint32_t task_samples,
                   const feedd_fetch_limits *fetch, feedd_pool **out);
/* The decoded-sample cache's shorter side for dataset ds; 0 = not cached. Any thread. */
uint32_t feedd_pool_cache_side(const feedd_pool *p, uint32_t ds);
/* Stop and join the workers; queued work is dropped without done calls. Accepts NULL. */
void feedd_pool_free(feedd_pool *p);
/*
 * q (zeroed) joins the job called job ("" = a job of its own, as a stream
 * without a name is) with weight 1..FEEDD_JOB_WEIGHT_MAX (0 = 1); see share.h.
 * A queue that never joins is a job of its own with weight 1. A name beyond
 * the pool's FEEDD_JOBS_MAX jobs is served as a job of its own, logged with
 * peer and counted (feedd_jobs_over_cap_total).
 */
void feedd_pool_join(feedd_pool *p, feedd_queue *q, const char *job, uint32_t weight,
                     const char *peer);
/*
 * After join, for a stream that sent SessionOpen.share (non-empty): seat q in
 * the share window's group (ds, share) as a member of job ("" = its own).
 * Its samples are then made from the whole image decoded at the dataset's
 * share side, found in the window or not (a full group: never found, and
 * logged). A dataset without share= or a transform larger than the share
 * side: served as before, and logged once with peer.
 */
void feedd_pool_share(feedd_pool *p, feedd_queue *q, uint32_t ds, const feed_transform *tf,
                      const char *share, const char *job, const char *peer);
/* The share window's side for dataset ds; 0 = not shared. Any thread. */
uint32_t feedd_pool_share_side(const feedd_pool *p, uint32_t ds);
/* q leaves its job and its share seat; it has no work left in the pool (cancelled or finished). */
void feedd_pool_leave(feedd_pool *p, feedd_queue *q);
/* Queue a job (job->n >= 1) at the tail of q. */
void feedd_pool_submit(feedd_pool *p, feedd_queue *q, feedd_job *job);
/*
 * Drop q's unclaimed samples and stop its claimed ones: a worker makes no
 * sample of a cancelled job after the one in its hands. Jobs that this
 * leaves with no sample in a worker's hands go to the end of *finished (by
 * qlink) for the caller to dispose of, and their done is never called; the
 * others are marked cancelled and get their done call from the worker that
 * finishes them.
 */
void feedd_pool_cancel(feedd_pool *p, feedd_queue *q, feed_list *finished);

#endif
