/*
 * Where feed-bench's batches come from: one interface, three sources.
 *  - sync:   the training thread decodes each batch itself with a
 *            feed_engine (the common baseline: loading inside the loop);
 *  - local:  N loader threads on this host, each with its own feed_engine,
 *            fill pinned slots of a bounded in-order queue (DataLoader
 *            workers);
 *  - remote: libfeedclient streams batches from feedd servers.
 * Every source draws the same epoch plan (seeded permutation, drop_last) and
 * the same per-sample augmentation (seed, epoch, sample index).
 *
 * Threads: next() and release() are called by the training thread only.
 */
#ifndef FEED_BENCH_SOURCE_H
#define FEED_BENCH_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"
#include "feed/dataset.h"
#include "feed/transform.h"
#include "step.h"

typedef struct bench_batch {
    /* Host path: uint8 NHWC pixels and int64 labels (pinned on the GPU path). */
    const uint8_t *pixels;
    const int64_t *labels;
    void *copy_done; /* event the step records when pixels may be reused (host path) */
    /* Device path (remote on a GPU): fp32 NCHW normalised, labels on the device. */
    const void *device_data;
    const int64_t *device_labels;
    void *ready_event;
    uint32_t n;
    uint32_t bad_samples; /* samples the loader could not decode (substituted or zeroed) */
    void *handle;         /* the source's own */
} bench_batch;

typedef struct bench_source bench_source;

typedef struct source_ops {
    /* Blocks until the next batch is ready. 0 or a negative FEED_E code. */
    int (*next)(bench_source *src, bench_batch *out);
    /* The training thread is done with b (the step has been submitted). */
    void (*release)(bench_source *src, bench_batch *b);
    void (*close)(bench_source *src);
} source_ops;

struct bench_source {
    const source_ops *ops;
    const char *name;
};

typedef struct source_config {
    const char *data_path; /* ImageFolder or pack, for sync and local */
    const feed_dataset *dataset;
    feed_transform transform;
    uint32_t batch;
    uint64_t seed;
    uint32_t local_threads;
    bench_step *step;
    int device; /* CUDA device of the step, or -1 */
    /* remote */
    const char *const *targets;
    size_t num_targets;
    const char *dataset_name;
    uint32_t window;   /* per server */
    uint32_t prefetch; /* delivery slots */
    bool ordered;      /* plan order (false: as batches arrive) */
    feed_owner_routing owner_routing;
    feed_decode_lane decode_lane; /* and the rest of feed_loader_config's lane fields */
    double decode_share, decode_share_max;
    uint32_t decode_lane_threads;
    uint32_t rank, world; /* this client's share of each epoch (world >= 1) */
    float mean[3], std[3];
    /* feed_loader_config's trust fields (NULL: its defaults; token NULL takes $FEED_TOKEN). */
    const char *token, *tls_ca_file, *tls_cert_file, *tls_key_file;
} source_config;

int source_sync_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap);
int source_local_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap);
int source_remote_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap);

static inline void source_close(bench_source *s)
{
    if (s)
        s->ops->close(s);
}

/* Shared by sync and local: the plan and the decode of one batch. */

/* Batches per epoch with drop_last (count / batch). */
uint64_t plan_batches_per_epoch(uint64_t count, uint32_t batch);
/* The epoch's permutation of 0..count-1 (Fisher-Yates keyed by seed, epoch). */
void plan_permutation(uint64_t seed, uint32_t epoch, uint64_t count, uint64_t *perm);

typedef struct batch_maker batch_maker; /* one thread's engine and scratch */
int batch_maker_new(const source_config *cfg, batch_maker **out);
void batch_maker_free(batch_maker *m);
/*
 * Decode and augment global batch `seq` (epoch = seq / batches_per_epoch)
 * into pixels (batch x h x w x 3) and labels. Returns samples that failed
 * (their pixels are zeros, as the engine leaves them).
 */
uint32_t batch_maker_run(batch_maker *m, uint64_t seq, uint8_t *pixels, int64_t *labels);

#endif
