/*
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11). The counter is (block, epoch, index low, index high) and the key is
 * the seed, so neighbouring samples and epochs get unrelated streams.
 */
#include "feed/rng.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void feed_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void feed_rng_init(feed_rng *r, uint64_t seed, uint32_t epoch, uint64_t stream)
{
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = epoch;
    r->ctr[2] = (uint32_t)stream;
    r->ctr[3] = (uint32_t)(stream >> 32);
    r->used = 4;
}

uint32_t feed_rng_u32(feed_rng *r)
{
    if (r->used == 4) {
        feed_philox4x32_10(r->ctr, r->key, r->out);
        r->ctr[0]++;
        r->used = 0;
    }
    return r->out[r->used++];
}

double feed_rng_uniform(feed_rng *r)
{
    uint64_t hi = feed_rng_u32(r) >> 5; /* 27 bits */
    uint64_t lo = feed_rng_u32(r) >> 6; /* 26 bits */
    return (double)((hi << 26) | lo) * (1.0 / 9007199254740992.0);
}

uint64_t feed_rng_below(feed_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = ((uint64_t)feed_rng_u32(r) << 32) | feed_rng_u32(r);
    } while (x >= limit);
    return x % n;
}
