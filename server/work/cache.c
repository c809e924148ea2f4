/*
 * The decoded-sample cache; see cache.h for the bound, the policy and the
 * threads. Lock order: one slot lock at a time, never held across a call out
 * of this file, a malloc or a free.
 *
 * A slot is an atomic uintptr_t: the entry's address, or 0, with SLOT_LOCKED
 * in the low bit while a thread takes a reference or swaps the pointer
 * (entries are aligned, so the bit is free). The cache holds one reference
 * to each entry in a slot; readers add theirs under the slot lock, so an
 * entry leaves its slot (eviction) and is freed (the last release) without
 * a reader ever touching freed memory.
 */
#include "cache.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "config.h"
#include "feed/errors.h"
#include "metrics.h"

#define SLOT_LOCKED ((uintptr_t)1)
/* Spins on a locked slot before yielding the CPU to its holder. */
#define SPINS_BEFORE_YIELD 64
/* What malloc adds to every chunk (glibc: one size word, 16-byte granules). */
#define MALLOC_OVERHEAD 16u

struct feedd_cache_entry {
    atomic_uint refs;
    atomic_bool referenced; /* the clock's bit: set by every hit, cleared by the hand */
    uint32_t ds;
    uint64_t index;
    size_t charge; /* bytes counted against the budget */
    atomic_uint_fast64_t source; /* the sample file's stamp when decoded; 0: not known */
    feed_decoded img;
    _Alignas(16) uint8_t pixels[];
};

typedef struct cached_dataset {
    uint32_t side; /* 0: not cached */
    uint64_t samples;
    _Atomic uintptr_t *slots;   /* [samples] */
    atomic_uint_fast64_t ticks; /* lookups; the hand is at slot (ticks / 2) % samples */
    /* step_idle_hand's view: ticks at the last visit, and visits since then
     * found no lookup of its own */
    atomic_uint_fast64_t idle_seen, quiet_visits;
} cached_dataset;

struct feedd_cache {
    uint64_t budget;
    atomic_uint_fast64_t used;
    /* Admissions refused for want of room and not yet answered by an
     * eviction (about total_samples at most: threads may each add one past
     * it): the hands evict only while it is above 0. */
    atomic_uint_fast64_t wanted;
    /* Set by add_dataset before any worker runs, read-only after: */
    uint64_t total_samples;               /* every cached dataset's samples */
    uint32_t cached[FEEDD_MAX_DATASETS]; /* the datasets added, in order */
    uint32_t ncached;
    atomic_uint next_idle; /* the next of cached[] a refusal visits */
    cached_dataset ds[FEEDD_MAX_DATASETS];
};

size_t feedd_cache_charge(size_t pixel_bytes)
{
    size_t n = sizeof(feedd_cache_entry) + pixel_bytes + MALLOC_OVERHEAD;
    return (n + 15) & ~(size_t)15;
}

/* Take bytes if they fit under the budget; the count never passes it. */
static bool charge(feedd_cache *c, uint64_t bytes)
{
    uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
    do {
        if (bytes > c->budget || used > c->budget - bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&c->used, &used, used + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    feedd_gauge(&feedd_m.cache_bytes, (int64_t)bytes);
    return true;
}

/* The gauge drops before the count and rises after it, so it never reads above the budget. */
static void uncharge(feedd_cache *c, uint64_t bytes)
{
    feedd_gauge(&feedd_m.cache_bytes, -(int64_t)bytes);
    atomic_fetch_sub_explicit(&c->used, bytes, memory_order_relaxed);
}

/* Lock a slot; returns what it held (the bit clear). */
static uintptr_t slot_lock(_Atomic uintptr_t *s)
{
    unsigned spins = 0;
    uintptr_t v = atomic_load_explicit(s, memory_order_relaxed);
    for (;;) {
        if (!(v & SLOT_LOCKED) &&
            atomic_compare_exchange_weak_explicit(s, &v, v | SLOT_LOCKED, memory_order_acquire,
                                                  memory_order_relaxed))
            return v;
        if (v & SLOT_LOCKED) {
            if (++spins >= SPINS_BEFORE_YIELD) {
                sched_yield();
                spins = 0;
            }
            v = atomic_load_explicit(s, memory_order_relaxed);
        }
    }
}

/* Unlock a slot, leaving v (an entry or 0) in it. */
static void slot_unlock(_Atomic uintptr_t *s, uintptr_t v)
{
    atomic_store_explicit(s, v, memory_order_release);
}

int feedd_cache_new(uint64_t budget_bytes, feedd_cache **out)
{
    feedd_cache *c = calloc(1, sizeof *c);
    if (!c)
        return FEED_ENOMEM;
    c->budget = budget_bytes;
    atomic_init(&c->used, 0);
    atomic_init(&c->wanted, 0);
    feedd_gauge(&feedd_m.cache_budget, (int64_t)budget_bytes);
    *out = c;
    return 0;
}

void feedd_cache_free(feedd_cache *c)
{
    if (!c)
        return;
    for (uint32_t d = 0; d < FEEDD_MAX_DATASETS; d++) {
        cached_dataset *cd = &c->ds[d];
        if (!cd->side)
            continue;
        for (uint64_t i = 0; i < cd->samples; i++) {
            feedd_cache_entry *e = (feedd_cache_entry *)atomic_load(&cd->slots[i]);
            if (e) {
                feedd_gauge(&feedd_m.cache_entries, -1);
                feedd_cache_release(c, e);
            }
        }
        free((void *)cd->slots);
        uncharge(c, cd->samples * sizeof *cd->slots);
    }
    feedd_gauge(&feedd_m.cache_budget, -(int64_t)c->budget);
    free(c);
}

int feedd_cache_add_dataset(feedd_cache *c, uint32_t ds, uint64_t samples, uint32_t side)
{
    if (ds >= FEEDD_MAX_DATASETS || side == 0 || c->ds[ds].side)
        return FEED_EINVAL;
    cached_dataset *cd = &c->ds[ds];
    if (samples > UINT64_MAX / sizeof *cd->slots || !charge(c, samples * sizeof *cd->slots))
        return FEED_ETOOBIG;
    if (samples) {
        cd->slots = calloc(samples, sizeof *cd->slots);
        if (!cd->slots) {
            uncharge(c, samples * sizeof *cd->slots);
            return FEED_ENOMEM;
        }
    }
    cd->samples = samples;
    c->total_samples += samples;
    cd->side = side;
    atomic_init(&cd->ticks, 0);
    atomic_init(&cd->idle_seen, 0);
    atomic_init(&cd->quiet_visits, 0);
    c->cached[c->ncached++] = ds;
    return 0;
}

uint32_t feedd_cache_side(const feedd_cache *c, uint32_t ds)
{
    return c && ds < FEEDD_MAX_DATASETS ? c->ds[ds].side : 0;
}

uint64_t feedd_cache_used(const feedd_cache *c)
{
    return atomic_load_explicit(&c->used, memory_order_relaxed);
}

/* One refused admission answered by an eviction; false when none is waiting. */
static bool take_wanted(feedd_cache *c)
{
    uint_fast64_t w = atomic_load_explicit(&c->wanted, memory_order_relaxed);
    while (w && !atomic_compare_exchange_weak_explicit(&c->wanted, &w, w - 1, memory_order_relaxed,
                                                       memory_order_relaxed)) {
    }
    return w != 0;
}

/* Every second lookup: the hand's step (see cache.h). */
static void hand_step(feedd_cache *c, cached_dataset *cd)
{
    uint64_t t = atomic_fetch_add_explicit(&cd->ticks, 1, memory_order_relaxed);
    if (t & 1)
        return;
    _Atomic uintptr_t *s = &cd->slots[(t / 2) % cd->samples];
    if (!atomic_load_explicit(s, memory_order_relaxed))
        return;
    uintptr_t v = slot_lock(s);
    feedd_cache_entry *e = (feedd_cache_entry *)v;
    if (e && atomic_exchange_explicit(&e->referenced, false, memory_order_relaxed)) {
        slot_unlock(s, v);
        return;
    }
    if (e && !take_wanted(c)) {
        slot_unlock(s, v);
        return;
    }
    slot_unlock(s, 0);
    if (e) {
        feedd_count(&feedd_m.cache_evictions, 1);
        feedd_gauge(&feedd_m.cache_entries, -1);
        feedd_cache_release(c, e);
    }
}

bool feedd_cache_has(const feedd_cache *c, uint32_t ds, uint64_t index)
{
    return (atomic_load_explicit(&c->ds[ds].slots[index], memory_order_relaxed) &
            ~(uintptr_t)SLOT_LOCKED) != 0;
}

feedd_cache_entry *feedd_cache_get(feedd_cache *c, uint32_t ds, uint64_t index, feed_decoded *img)
{
    cached_dataset *cd = &c->ds[ds];
    _Atomic uintptr_t *s = &cd->slots[index];
    feedd_cache_entry *e = NULL;
    if (atomic_load_explicit(s, memory_order_relaxed)) {
        uintptr_t v = slot_lock(s);
        e = (feedd_cache_entry *)v;
        if (e) {
            atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
            atomic_store_explicit(&e->referenced, true, memory_order_relaxed);
        }
        slot_unlock(s, v);
    }
    if (e)
        *img = e->img;
    feedd_count(e ? &feedd_m.cache_hits : &feedd_m.cache_misses, 1);
    hand_step(c, cd);
    return e;
}

/*
 * A refused admission visits one cached dataset in turn. One that has had no
 * lookup of its own for as many visits as it has samples (nobody asks for it;
 * one asked for rarely still resets the count) gets a step of its hand at
 * every further visit, so what it holds ages out instead of keeping its room
 * for good.
 */
static void step_idle_hand(feedd_cache *c, uint32_t asking)
{
    if (!c->ncached)
        return;
    uint32_t d = c->cached[atomic_fetch_add_explicit(&c->next_idle, 1, memory_order_relaxed) %
                           c->ncached];
    cached_dataset *cd = &c->ds[d];
    if (d == asking || !cd->samples)
        return;
    uint64_t t = atomic_load_explicit(&cd->ticks, memory_order_relaxed);
    if (atomic_exchange_explicit(&cd->idle_seen, t, memory_order_relaxed) != t) {
        atomic_store_explicit(&cd->quiet_visits, 0, memory_order_relaxed);
        return;
    }
    if (atomic_fetch_add_explicit(&cd->quiet_visits, 1, memory_order_relaxed) < cd->samples)
        return;
    hand_step(c, cd);
    hand_step(c, cd);
    /* Its own hand's two ticks are not lookups. */
    atomic_store_explicit(&cd->idle_seen, t + 2, memory_order_relaxed);
}

feedd_cache_entry *feedd_cache_reserve(feedd_cache *c, uint32_t ds, uint64_t index,
                                       size_t pixel_bytes)
{
    size_t bytes = feedd_cache_charge(pixel_bytes);
    if (bytes < pixel_bytes || bytes > c->budget)
        return NULL; /* no eviction would make room for it */
    if (!charge(c, bytes)) {
        if (atomic_load_explicit(&c->wanted, memory_order_relaxed) < c->total_samples)
            atomic_fetch_add_explicit(&c->wanted, 1, memory_order_relaxed);
        step_idle_hand(c, ds);
        return NULL;
    }
    feedd_cache_entry *e = malloc(sizeof *e + pixel_bytes);
    if (!e) {
        uncharge(c, bytes);
        return NULL;
    }
    atomic_init(&e->refs, 1);
    atomic_init(&e->referenced, true);
    e->ds = ds;
    e->index = index;
    e->charge = bytes;
    e->img = (feed_decoded){0};
    return e;
}

uint8_t *feedd_cache_pixels(feedd_cache_entry *e)
{
    return e->pixels;
}

void feedd_cache_publish(feedd_cache *c, feedd_cache_entry *e, const feed_decoded *img)
{
    _Atomic uintptr_t *s = &c->ds[e->ds].slots[e->index];
    e->img = *img;
    e->img.pixels = e->pixels;
    uintptr_t v = slot_lock(s);
    if (v) {
        slot_unlock(s, v);
        return;
    }
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    slot_unlock(s, (uintptr_t)e);
    feedd_gauge(&feedd_m.cache_entries, 1);
}

void feedd_cache_release(feedd_cache *c, feedd_cache_entry *e)
{
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
        return;
    size_t bytes = e->charge;
    free(e);
    uncharge(c, bytes);
}

/* feed_engine_decode's buffer: a cache entry when one fits, else the engine's scratch. */
typedef struct reserve_ctx {
    feedd_cache *cache;
    uint32_t ds;
    uint64_t index;
    feedd_cache_entry *entry;
} reserve_ctx;

static uint8_t *reserve_entry(void *arg, const feed_decoded *dims, size_t bytes)
{
    (void)dims;
    reserve_ctx *r = arg;
    r->entry = feedd_cache_reserve(r->cache, r->ds, r->index, bytes);
    return r->entry ? feedd_cache_pixels(r->entry) : NULL;
}

feed_sample_status feedd_cache_decode(feedd_cache *c, feed_engine *e, uint32_t ds, uint64_t index,
                                      const uint8_t *jpeg, size_t len, uint32_t side,
                                      feed_decoded *img, feedd_cache_entry **entry)
{
    reserve_ctx r = {c, ds, index, NULL};
    feed_sample_status st = feed_engine_decode(e, jpeg, len, side, reserve_entry, &r, img);
    if (st == FEED_SAMPLE_OK && r.entry) {
        feedd_cache_publish(c, r.entry, img);
    } else if (r.entry) {
        feedd_cache_release(c, r.entry);
        r.entry = NULL;
    }
    *entry = r.entry;
    return st;
}

void feedd_cache_set_source(feedd_cache_entry *e, uint64_t source)
{
    atomic_store_explicit(&e->source, source, memory_order_relaxed);
}

uint64_t feedd_cache_source(const feedd_cache_entry *e)
{
    return atomic_load_explicit(&((feedd_cache_entry *)e)->source, memory_order_relaxed);
}

void feedd_cache_drop(feedd_cache *c, uint32_t ds, uint64_t index, feedd_cache_entry *e)
{
    _Atomic uintptr_t *s = &c->ds[ds].slots[index];
    uintptr_t v = slot_lock(s);
    bool held = v == (uintptr_t)e;
    slot_unlock(s, held ? 0 : v);
    if (held)
        feedd_cache_release(c, e);
}
