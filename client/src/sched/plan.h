/*
 * The epoch plan: which sample indices this rank gets, in which order, cut
 * into batches. A pure function of (dataset size, seed, epoch, rank, world,
 * batch size, drop_last), so a resumed job and every server agree on it.
 * Built by the loader (under its lock), read-only afterwards.
 */
#ifndef FEED_CLIENT_PLAN_H
#define FEED_CLIENT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
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

/*
 * Resume at another world size (README "Resume at another world size"). An epoch run under a
 * chain of worlds is a list of segments: segment 0 ran the normal plan above under its world;
 * each later one ran the plan below, built from what the earlier ones left. consumed[r] counts
 * the plan entries (samples) rank r of that segment had handed to its caller, from the first:
 * those samples are done, and a sample counts once however many of its padding copies were
 * handed out.
 */
typedef struct client_resume_segment {
    uint32_t world;
    const uint64_t *consumed; /* [world] */
} client_resume_segment;

/* The samples of the epoch that no segment consumed, in permutation order (*out: the caller
 * frees it; *count may be 0). 0, FEED_EINVAL (a segment's world is 0 or a rank consumed more
 * than its plan held: why says which), FEED_ENOMEM. */
int client_plan_remaining(uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                          const client_resume_segment *segs, uint32_t num_segs, uint32_t **out,
                          uint64_t *count, char *why, size_t why_cap);
/* This rank's plan for the rest of the epoch: the remaining samples (client_plan_remaining),
 * padded by wrapping around to a multiple of world as DistributedSampler pads (so the first
 * few remaining samples are handed out twice when world does not divide them), rank r taking
 * positions r, r+world, ..., cut into batches as above. With nothing left, an empty plan (0
 * batches). 0, FEED_EINVAL (why says what), FEED_ENOMEM. */
int client_plan_resume(client_plan *p, uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                       const client_resume_segment *segs, uint32_t num_segs, uint32_t rank,
                       uint32_t world, uint32_t batch_size, bool drop_last, char *why,
                       size_t why_cap);
/*
 * The decode lane's assignment (docs/design/client.md "Decode lane"): whether the client
 * decodes sample `index` of `epoch` itself, at a share of share16 / 65536. A pure function
 * of (seed, epoch, index, share): the first word of block `index` of the RNG stream (seed,
 * epoch, FEED_RNG_LANE_STREAM), its top 16 bits below share16. Independent of rank and world,
 * so a resume at another world size keeps it. share16 0: never; 65536 or more: always.
 */
bool client_lane_assigned(uint64_t seed, uint32_t epoch, uint64_t index, uint32_t share16);
/* A share in [0, 1] quantised to 1/65536 (0 .. 65536), rounded to nearest. */
uint32_t client_lane_share16(double share);
/* Samples of batch b (b < p->batches): *first points into p->samples. */
void client_plan_batch(const client_plan *p, uint64_t b, const uint32_t **first, uint32_t *n);

#endif
