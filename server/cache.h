/*
 * A bounded in-memory cache of augmented samples, keyed by (dataset,
 * transform, seed, epoch, sample index), for --cache-bytes: repeated requests
 * skip reading and decoding so the wire becomes the bottleneck (the wire
 * benchmark), or a dataset that fits in memory is decoded once per epoch
 * plan. Sharded by key hash; each shard has its own lock, LRU list and an
 * equal share of the byte budget, and evicts least recently used entries.
 * Thread-safe: any worker calls get/put.
 */
#ifndef FEED_SERVER_CACHE_H
#define FEED_SERVER_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/transform.h"

typedef struct feedd_cache feedd_cache;

typedef struct feedd_cache_key {
    uint32_t dataset; /* the server's dataset number */
    uint32_t epoch;
    uint64_t seed;
    uint64_t index;
    const feed_transform *transform; /* compared by value */
} feedd_cache_key;

/* 0 or FEED_ENOMEM. */
int feedd_cache_new(uint64_t budget_bytes, feedd_cache **out);
void feedd_cache_free(feedd_cache *c); /* accepts NULL */
/* Copy a cached sample of exactly len bytes into dst, its CRC32C into *crc; false on a miss. */
bool feedd_cache_get(feedd_cache *c, const feedd_cache_key *k, uint8_t *dst, size_t len,
                     uint32_t *crc);
/*
 * Insert (or refresh) a sample and its CRC32C, evicting as needed; silently
 * skipped if it cannot fit.
 */
void feedd_cache_put(feedd_cache *c, const feedd_cache_key *k, const uint8_t *src, size_t len,
                     uint32_t crc);

#endif
