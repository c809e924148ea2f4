/*
 * Sharded LRU cache of augmented samples; see cache.h. Lock order: one shard
 * lock at a time, never held while calling out. The copy in and out happens
 * under the shard lock (entries are never referenced outside it), which
 * keeps eviction trivially safe; with 16 shards contention stays low.
 */
#include "cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/list.h"
#include "metrics.h"

#define SHARDS 16
#define BUCKETS 4096 /* per shard; chains stay short for ~100k entries */

typedef struct entry {
    struct entry *chain;
    feed_list_node lru; /* in the shard's lru */
    uint64_t hash;
    uint32_t dataset, epoch;
    uint64_t seed, index;
    feed_transform tf;
    uint32_t crc;
    size_t len;
    uint8_t data[];
} entry;

typedef struct shard {
    pthread_mutex_t mu;
    entry *buckets[BUCKETS]; /* guarded by mu */
    feed_list lru;           /* of entry, guarded by mu; first = most recent */
    uint64_t used, budget;
} shard;

struct feedd_cache {
    shard shards[SHARDS];
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static uint64_t dbl_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint64_t key_hash(const feedd_cache_key *k)
{
    const feed_transform *t = k->transform;
    uint64_t h = mix(0, k->dataset);
    h = mix(h, k->epoch);
    h = mix(h, k->seed);
    h = mix(h, k->index);
    h = mix(h, (uint64_t)t->mode << 48 | (uint64_t)t->out_h << 24 | t->out_w);
    h = mix(h, dbl_bits(t->scale_min));
    h = mix(h, dbl_bits(t->scale_max));
    h = mix(h, dbl_bits(t->ratio_min));
    h = mix(h, dbl_bits(t->ratio_max));
    h = mix(h, dbl_bits(t->flip_prob));
    return mix(h, t->resize_size);
}

static bool same_transform(const feed_transform *a, const feed_transform *b)
{
    return a->mode == b->mode && a->out_h == b->out_h && a->out_w == b->out_w &&
           a->scale_min == b->scale_min && a->scale_max == b->scale_max &&
           a->ratio_min == b->ratio_min && a->ratio_max == b->ratio_max &&
           a->flip_prob == b->flip_prob && a->resize_size == b->resize_size;
}

static entry **find(shard *s, const feedd_cache_key *k, uint64_t h)
{
    entry **pp = &s->buckets[(h >> 4) % BUCKETS];
    for (; *pp; pp = &(*pp)->chain) {
        entry *e = *pp;
        if (e->hash == h && e->dataset == k->dataset && e->epoch == k->epoch &&
            e->seed == k->seed && e->index == k->index && same_transform(&e->tf, k->transform))
            return pp;
    }
    return pp;
}

static void remove_entry(shard *s, entry *e)
{
    feedd_cache_key k = {e->dataset, e->epoch, e->seed, e->index, &e->tf};
    entry **pp = find(s, &k, e->hash);
    *pp = e->chain;
    feed_list_remove(&s->lru, &e->lru);
    s->used -= sizeof *e + e->len;
    feedd_gauge(&feedd_m.cache_bytes, -(int64_t)(sizeof *e + e->len));
    free(e);
}

int feedd_cache_new(uint64_t budget_bytes, feedd_cache **out)
{
    feedd_cache *c = calloc(1, sizeof *c);
    if (!c)
        return FEED_ENOMEM;
    for (int i = 0; i < SHARDS; i++) {
        pthread_mutex_init(&c->shards[i].mu, NULL);
        c->shards[i].budget = budget_bytes / SHARDS;
    }
    *out = c;
    return 0;
}

void feedd_cache_free(feedd_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < SHARDS; i++) {
        shard *s = &c->shards[i];
        while (!feed_list_empty(&s->lru))
            remove_entry(s, FEED_LIST_ENTRY(s->lru.first, entry, lru));
        pthread_mutex_destroy(&s->mu);
    }
    free(c);
}

bool feedd_cache_get(feedd_cache *c, const feedd_cache_key *k, uint8_t *dst, size_t len,
                     uint32_t *crc)
{
    uint64_t h = key_hash(k);
    shard *s = &c->shards[h % SHARDS];
    bool hit = false;
    pthread_mutex_lock(&s->mu);
    entry *e = *find(s, k, h);
    if (e && e->len == len) {
        memcpy(dst, e->data, len);
        *crc = e->crc;
        feed_list_remove(&s->lru, &e->lru);
        feed_list_push_front(&s->lru, &e->lru);
        hit = true;
    }
    pthread_mutex_unlock(&s->mu);
    feedd_count(hit ? &feedd_m.cache_hits : &feedd_m.cache_misses, 1);
    return hit;
}

void feedd_cache_put(feedd_cache *c, const feedd_cache_key *k, const uint8_t *src, size_t len,
                     uint32_t crc)
{
    uint64_t h = key_hash(k);
    shard *s = &c->shards[h % SHARDS];
    size_t need = sizeof(entry) + len;
    if (need > s->budget)
        return;
    entry *e = malloc(need);
    if (!e)
        return;
    e->hash = h;
    e->dataset = k->dataset;
    e->epoch = k->epoch;
    e->seed = k->seed;
    e->index = k->index;
    e->tf = *k->transform;
    e->len = len;
    e->crc = crc;
    e->chain = NULL;
    e->lru = (feed_list_node){NULL, NULL};
    memcpy(e->data, src, len);
    pthread_mutex_lock(&s->mu);
    entry *old = *find(s, k, h);
    if (old)
        remove_entry(s, old);
    while (s->used + need > s->budget && !feed_list_empty(&s->lru)) {
        remove_entry(s, FEED_LIST_ENTRY(s->lru.last, entry, lru));
        feedd_count(&feedd_m.cache_evictions, 1);
    }
    entry **pp = find(s, k, h);
    *pp = e;
    feed_list_push_front(&s->lru, &e->lru);
    s->used += need;
    feedd_gauge(&feedd_m.cache_bytes, (int64_t)need);
    pthread_mutex_unlock(&s->mu);
}
