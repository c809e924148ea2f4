/*
 * Counter-based random numbers (Philox4x32-10). A stream is keyed by
 * (seed, epoch, sample index): every random choice for a sample comes from its
 * own stream, so the bytes a sample gets depend on nothing else — not the
 * server, the thread, nor the order samples are processed in.
 *
 * A feed_rng is a small value owned by one thread; there is no shared state.
 */
#ifndef FEED_RNG_H
#define FEED_RNG_H

#include <stdint.h>

typedef struct feed_rng {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t out[4];
    unsigned used; /* words of out[] already handed out */
} feed_rng;

/* Sample index reserved for the client's epoch permutation stream. */
#define FEED_RNG_PERMUTATION_STREAM UINT64_MAX
/* Stream reserved for the client's decode lane assignment (which samples the client decodes
 * itself): block s of (seed, epoch, FEED_RNG_LANE_STREAM) decides sample s. */
#define FEED_RNG_LANE_STREAM (UINT64_MAX - 1)

void feed_rng_init(feed_rng *r, uint64_t seed, uint32_t epoch, uint64_t stream);
uint32_t feed_rng_u32(feed_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double feed_rng_uniform(feed_rng *r);
/* Uniform integer in [0, n), unbiased (rejection); n > 0. */
uint64_t feed_rng_below(feed_rng *r, uint64_t n);

/* One Philox4x32-10 block: exposed for the known-answer test. */
void feed_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
