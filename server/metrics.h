/*
 * feedd's counters and gauges, all atomics (any thread updates them with
 * relaxed increments), and the Prometheus text endpoint served by
 * libmicrohttpd on its own thread. One process-wide instance, feedd_metrics.
 */
#ifndef FEED_SERVER_METRICS_H
#define FEED_SERVER_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/errors.h"
#include "feed/names.h"

typedef enum feedd_stage {
    FEEDD_STAGE_READ,
    FEEDD_STAGE_DECODE,
    FEEDD_STAGE_RESIZE,
    FEEDD_STAGE_SEND,
    FEEDD_STAGE_COUNT
} feedd_stage;

/* gRPC status codes feedd ends streams with, counted per code (index = code, 0..16). */
#define FEEDD_STATUS_CODES 17

typedef struct feedd_metrics {
    atomic_uint_fast64_t samples;  /* samples made (any status) */
    atomic_uint_fast64_t batches;  /* batches handed to gRPC */
    atomic_uint_fast64_t bytes;    /* Batch.data bytes handed to gRPC */
    atomic_uint_fast64_t requests; /* batch requests accepted */
    atomic_uint_fast64_t requests_refused; /* batch requests that failed their stream */
    atomic_uint_fast64_t sample_status[FEED_SAMPLE_STATUS_COUNT];
    atomic_uint_fast64_t stage_ns[FEEDD_STAGE_COUNT];
    atomic_uint_fast64_t stage_count[FEEDD_STAGE_COUNT];
    atomic_uint_fast64_t streams_opened;
    atomic_uint_fast64_t streams_stalled; /* cancelled by send-stall-ms */
    atomic_uint_fast64_t stream_status[FEEDD_STATUS_CODES];
    atomic_uint_fast64_t unauthenticated; /* Feed calls refused for want of the token */
    atomic_uint_fast64_t connections_cut; /* by the transport guard (guard.h) */
    atomic_uint_fast64_t cache_hits, cache_misses, cache_evictions;
    atomic_uint_fast64_t cache_not_owned; /* misses not admitted: another server owns them */
    atomic_int_fast64_t cache_entries;    /* images in the decoded-sample cache */
    atomic_uint_fast64_t cache_stale; /* hits dropped: the sample's file changed on disk */
    atomic_int_fast64_t cache_bytes;  /* charged to the decoded-sample cache */
    atomic_int_fast64_t cache_budget; /* its --cache-bytes while it exists */
    /* The share window (window.h): lookups that found the image, decodes into it, samples of
     * sharing streams decoded alone, entries evicted before every member read them, bytes. */
    atomic_uint_fast64_t share_hits, share_decodes, share_alone, share_evictions, share_waits;
    atomic_int_fast64_t share_window_bytes;
    atomic_uint_fast64_t remote_late; /* remote samples failed: not fetched by the batch deadline */
    atomic_int_fast64_t queue_depth;      /* samples waiting for a worker */
    atomic_int_fast64_t active_streams;   /* open Stream calls */
    atomic_int_fast64_t inflight_batches; /* accepted, not yet handed to gRPC */
    atomic_int_fast64_t waiting_batches;  /* accepted, waiting for batch memory */
    atomic_int_fast64_t memory_bytes;     /* batch buffers allocated */
    atomic_int_fast64_t rss_bytes;        /* resident memory, as the guard last read it */
    atomic_int_fast64_t rss_limit;        /* the guard's limit; 0 without a guard */
    atomic_int_fast64_t transport_over;   /* 1 while rss_bytes > rss_limit */
    atomic_int_fast64_t tls_cert_not_after; /* the TLS certificate's notAfter, Unix s; 0: none */
    atomic_int tls_cert_valid;              /* 1 while now is within its window at start */
    atomic_int serving;                   /* 1 SERVING, 0 draining */
    atomic_int_fast64_t datasets_refused; /* datasets not served: they could not be opened */
    atomic_int_fast64_t bad_shards;       /* shards served without their bytes (failing reads) */
    atomic_uint_fast64_t jobs_over_cap;   /* streams of a new job beyond FEEDD_JOBS_MAX (pool.h) */
} feedd_metrics;

extern feedd_metrics feedd_m;

/*
 * Per-job counters (SessionOpen.job; pool.c counts). Label values are bounded:
 * the first FEEDD_JOB_LABELS_MAX job names seen get their own label for the
 * life of the process, the rest are counted under FEEDD_JOB_LABEL_OTHER, and
 * streams without a job name under FEEDD_JOB_LABEL_UNNAMED. Each job's numbers
 * are written together under one leaf lock and rendered under it, so one
 * scrape shows all jobs at the same instant (the fairness test compares them).
 */
#define FEEDD_JOB_LABELS_MAX 32
#define FEEDD_JOB_LABEL_NAME_CAP (FEED_NAME_MAX + 1)
enum { FEEDD_JOB_LABEL_UNNAMED = 0, FEEDD_JOB_LABEL_OTHER = 1, FEEDD_JOB_LABEL_FIRST = 2 };

typedef struct feedd_job_counts {
    uint64_t submitted; /* samples queued for a worker */
    uint64_t claimed;   /* samples workers took (made, or cancelled in their hands) */
    uint64_t dropped;   /* samples cancelled before a worker took them */
    uint64_t bytes;     /* pixel bytes of the claimed samples */
    uint64_t queue_ns;  /* summed over claimed samples: from the batch's submit to the claim */
} feedd_job_counts;

/* The label for job name ("" = unnamed), taking a free one for a new name. Any thread. */
int feedd_metrics_job_label(const char *job);
/* Add d to label's counters. Any thread (pool.c calls it under its mu: jobs_mu is a leaf). */
void feedd_metrics_job_add(int label, const feedd_job_counts *d);

static inline void feedd_count(atomic_uint_fast64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static inline void feedd_gauge(atomic_int_fast64_t *g, int64_t delta)
{
    atomic_fetch_add_explicit(g, delta, memory_order_relaxed);
}

typedef struct feedd_metrics_server feedd_metrics_server;

/*
 * Serve GET /metrics on addr ("[HOST:]PORT", port 0 = ephemeral); *port gets
 * the bound port. With token_file not "", only to requests that carry
 * "Authorization: Bearer TOKEN" (trust.h's feedd_token_load reads it; 401
 * otherwise). 0 or FEED_EINVAL / FEED_EIO / FEED_ENOMEM, logged.
 */
int feedd_metrics_start(const char *addr, const char *token_file, feedd_metrics_server **out,
                        int *port);
void feedd_metrics_stop(feedd_metrics_server *m); /* accepts NULL */
/* The exposition text (malloc'd, NUL-terminated) or NULL. */
char *feedd_metrics_render(size_t *len);
/*
 * Text a subsystem appends to every scrape (the service's per-stream
 * gauges): fn writes at most cap bytes at buf and returns how many. Set
 * NULL before arg goes away: once this returns, no call of the old fn is
 * running. Any thread.
 */
typedef size_t (*feedd_metrics_extra_fn)(void *arg, char *buf, size_t cap);
void feedd_metrics_set_extra(feedd_metrics_extra_fn fn, void *arg);

#endif
