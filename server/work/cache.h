/*
 * The decoded-sample cache (--cache-bytes, and cache=SIDE on a --dataset):
 * reduced-size RGB images (feed_decoded, DCT-scaled at decode so the
 * shorter side is at least the dataset's SIDE), keyed by (dataset, sample
 * index) and never by epoch, seed or transform, so every training epoch after
 * the first finds them; workers crop, resize and flip from the pixels.
 *
 * Bound: the budget covers everything the cache holds: each cached dataset's
 * slot table (8 bytes a sample, charged when the dataset is added) and every
 * entry (header, pixels and malloc's chunk header) from the moment it is
 * reserved until its memory is freed, evicted entries still being read
 * included. Bytes are reserved with a compare-and-swap loop, so the count
 * never passes the budget, not even for a moment.
 *
 * Admission and eviction (epoch-random access): a miss is admitted only
 * into free budget; a full cache never evicts to make room. Eviction is a
 * clock hand per dataset that moves one slot every second lookup of that
 * dataset, so one turn takes two epochs' worth of lookups: it clears the
 * referenced bit of the entry it passes, and evicts an entry whose bit is
 * still clear, i.e. one not looked up for a whole turn, but only to answer
 * an admission refused for want of room (one eviction for each, counted up
 * to the number of slots): a cache with budget to spare evicts nothing, as
 * one of several servers sees a sample go a whole turn unasked. Under per-epoch
 * permutations every resident sample is looked up once an epoch, so none is
 * evicted and the hit rate settles at cache/dataset; a working set that
 * changes (another subset, a finished job) ages out within two turns; a
 * dataset nobody looks up any more gets a step of its hand from each
 * refused admission (the cached datasets visited in turn; idle is no lookup
 * of its own for as many visits as it has samples, so one still asked for,
 * however rarely, keeps its images), so it gives its room up too. LRU
 * instead keeps the samples used last, which the next permutation is as
 * likely to want last: 0.15 at cache/dataset 0.5, against 0.50 here
 * (tests/server/test_cache.c measures both on the same accesses).
 *
 * Threads: any worker calls any function but add_dataset and free (main
 * thread, before and after the workers). No global lock: each slot is its
 * own lock (the low bit of its pointer, held for a few instructions to take
 * a reference or swap the pointer), entries are reference-counted, and the
 * byte count and the hands are atomics. A reader copies out of an entry
 * while holding a reference, with no lock held.
 */
#ifndef FEED_SERVER_CACHE_H
#define FEED_SERVER_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

typedef struct feedd_cache feedd_cache;
typedef struct feedd_cache_entry feedd_cache_entry;

/* Bytes the cache charges for an entry of `pixel_bytes` pixels. */
size_t feedd_cache_charge(size_t pixel_bytes);

/* 0 or FEED_ENOMEM. */
int feedd_cache_new(uint64_t budget_bytes, feedd_cache **out);
/* Every entry must have been released. Accepts NULL. */
void feedd_cache_free(feedd_cache *c);
/*
 * Cache dataset number ds (< 64) of `samples` samples at shorter side
 * `side` (> 0). Its slot table is charged to the budget: FEED_ETOOBIG when
 * that alone does not fit, FEED_ENOMEM, FEED_EINVAL (ds out of range or
 * added twice), or 0.
 */
int feedd_cache_add_dataset(feedd_cache *c, uint32_t ds, uint64_t samples, uint32_t side);
/* The shorter side dataset ds is cached at; 0 when it is not cached (or c is NULL). */
uint32_t feedd_cache_side(const feedd_cache *c, uint32_t ds);
/* Bytes charged now (slot tables and entries). */
uint64_t feedd_cache_used(const feedd_cache *c);

/*
 * Look up sample `index` of dataset ds (index < its samples). A hit returns
 * the entry, referenced, with its image in *img; release it when done. A
 * miss returns NULL. Counts a hit or a miss, and moves the dataset's hand.
 */
feedd_cache_entry *feedd_cache_get(feedd_cache *c, uint32_t ds, uint64_t index, feed_decoded *img);
/* Whether (ds, index) has an entry now (a hint: it may be evicted next). Counts nothing. */
bool feedd_cache_has(const feedd_cache *c, uint32_t ds, uint64_t index);
/*
 * After a miss: a new entry for (ds, index) with room for pixel_bytes,
 * charged to the budget and referenced by the caller, or NULL when it does
 * not fit in the free budget (or malloc fails). Fill feedd_cache_pixels(e),
 * then publish or release it.
 */
feedd_cache_entry *feedd_cache_reserve(feedd_cache *c, uint32_t ds, uint64_t index,
                                       size_t pixel_bytes);
uint8_t *feedd_cache_pixels(feedd_cache_entry *e);
/*
 * Make a filled entry visible with its image (img->pixels must be its
 * pixels). When another worker published the same sample first, this entry
 * stays private and goes away at its release. The caller keeps its reference.
 */
void feedd_cache_publish(feedd_cache *c, feedd_cache_entry *e, const feed_decoded *img);
/* Drop a reference; the last one frees the entry and gives its bytes back. */
void feedd_cache_release(feedd_cache *c, feedd_cache_entry *e);

/*
 * The stamp of the bytes an entry was decoded from
 * (feed_dataset_sample_stamp: a file's or shard's size, times, inode), so
 * that bytes changed on disk are not served from the cache; 0 until set.
 * Any thread.
 */
void feedd_cache_set_source(feedd_cache_entry *e, uint64_t source);
uint64_t feedd_cache_source(const feedd_cache_entry *e);
/* Take e out of (ds, index)'s slot if it is still there; the caller keeps its own reference. */
void feedd_cache_drop(feedd_cache *c, uint32_t ds, uint64_t index, feedd_cache_entry *e);

/*
 * After a miss: decode jpeg with e at the shorter side `side` into a new
 * entry when the budget has room (published, referenced: *entry, release it
 * after use) or else into e's scratch (*entry NULL). The image is in *img.
 * A sample that fails to decode is not cached; the engine says why.
 */
feed_sample_status feedd_cache_decode(feedd_cache *c, feed_engine *e, uint32_t ds, uint64_t index,
                                      const uint8_t *jpeg, size_t len, uint32_t side,
                                      feed_decoded *img, feedd_cache_entry **entry);

#endif
