/*
 * The epoch plan: which sample indices this rank gets, in which order, cut
 * into batches. A pure function of (dataset size, seed, epoch, rank, world,
 * batch size, drop_last), so a resumed job and every server agree on it.
 * Built by the loader (under its lock), read-only afterwards.
 */
#ifndef FEED_CLIENT_PLAN_H
#define FEED_CLIENT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

/* Datasets larger than this are refused: the plan stores 32-bit indices. */
#define CLIENT_PLAN_MAX_SAMPLES ((uint64_t)UINT32_MAX)

typedef struct client_plan {
    uint32_t *samples; /* this rank's samples in delivery order */
    uint64_t count;    /* entries in samples */
    uint64_t batches;  /* batches this rank gets */
    uint32_t batch_size;
} client_plan;

/*
 * Permutation of 0..dataset_size-1 drawn with Fisher-Yates from the stream
 * (seed, epoch, FEED_RNG_PERMUTATION_STREAM); padded by wrapping around to a
 * multiple of world (PyTorch DistributedSampler, drop_last=False), then rank r
 * takes positions r, r+world, r+2*world, ... Batches are consecutive runs of
 * batch_size; a short last batch is kept unless drop_last.
 * 0, FEED_EINVAL, FEED_ETOOBIG or FEED_ENOMEM.
 */
int client_plan_build(client_plan *p, uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                      uint32_t rank, uint32_t world, uint32_t batch_size, bool drop_last);
void client_plan_free(client_plan *p);
/* Samples of batch b (b < p->batches): *first points into p->samples. */
void client_plan_batch(const client_plan *p, uint64_t b, const uint32_t **first, uint32_t *n);

#endif
