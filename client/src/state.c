/*
 * Elastic resume (feed/client.h "Elastic resume"; README "Resume at another world size"): the
 * state byte strings, joining the rank states of one world, and installing an epoch in a
 * loader, resumed or set (loader_install_epoch, for feed_loader_resume here and set_epoch in
 * loader.c). The codec, feed_state_combine, feed_state_epoch and feed_resume_plan are pure
 * functions (any thread, no loader). feed_loader_state reads the loader's epoch under mu;
 * feed_loader_resume runs on the training thread, like set_epoch (loader_install_epoch takes mu).
 *
 * Layout, little-endian, no padding:
 *   header (72 bytes): u32 magic "FDST", u16 version 3, u16 kind (1 rank, 2 combined),
 *     u64 dataset size, u64 seed, u64 dataset name hash, u64 transform hash, u32 epoch,
 *     u32 batch size, u8 drop_last, 3 zero bytes, u32 number of segments, u64 aug seed,
 *     u32 decode lane share in force for the epoch (0 .. 65536, client_lane_share16), 4 zero
 *     bytes;
 *   each segment: u32 world, u32 zero, u64 consumed[world];
 *   a rank state then: u32 world, u32 rank, u64 consumed.
 * In a rank state the segments are the worlds the epoch ran under before this rank's own; in a
 * combined state they are all of them, the last the world whose states were joined. Hashes are
 * FNV-1a 64 over the dataset name, and over the transform's fields and the augment text.
 * Version 1 (before the aug seed) is read too: its header ends before the aug seed (56 bytes),
 * and the loaders that wrote it keyed the augmentation with the seed. Version 2 (before the
 * decode lane) ends before the share (64 bytes): its epoch resumes with share 0.
 * The share is not identity: samples and pixels are the same whoever decodes them (the GPU
 * lane's within its tolerance); a combined state keeps the share of the first state given.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"

#include "client_impl.h"

#define STATE_MAGIC 0x54534446u /* "FDST" */
#define STATE_VERSION 3u
#define KIND_RANK 1u
#define KIND_COMBINED 2u
#define HEADER_BYTES 72u
#define HEADER_V2_BYTES 64u
#define HEADER_V1_BYTES 56u
#define SEGMENT_HEAD_BYTES 8u
#define RANK_TAIL_BYTES 16u

/* A state read back: segs[i].consumed point into counts, which the view owns. */
typedef struct state_view {
    uint32_t kind;
    uint64_t dataset_size, seed, aug_seed, dataset_hash, transform_hash;
    uint32_t epoch, batch_size;
    bool drop_last;
    resume_chain chain;
    uint32_t world, rank; /* rank state */
    uint64_t consumed;    /* rank state */
    uint32_t lane_share;  /* share16 in force for the epoch */
} state_view;

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211u;
    }
    return h;
}

#define FNV_START 14695981039346656037u

static uint64_t hash_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    return fnv1a(h, b, sizeof(b));
}

static uint64_t hash_double(uint64_t h, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof(v));
    return hash_u64(h, v);
}

/* Everything that decides a sample's pixels besides (aug seed, epoch, index). */
static uint64_t transform_hash(const feed_loader_config *c)
{
    const feed_transform *t = &c->transform;
    uint64_t h = hash_u64(FNV_START, (uint64_t)t->mode);
    h = hash_u64(h, t->out_h);
    h = hash_u64(h, t->out_w);
    if (t->mode == FEED_TRANSFORM_TRAIN) {
        h = hash_double(h, t->scale_min);
        h = hash_double(h, t->scale_max);
        h = hash_double(h, t->ratio_min);
        h = hash_double(h, t->ratio_max);
        h = hash_double(h, t->flip_prob);
    } else {
        h = hash_u64(h, t->resize_size);
    }
    const char *aug = c->augment ? c->augment : "";
    return fnv1a(h, aug, strlen(aug));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void resume_chain_free(resume_chain *c)
{
    if (!c)
        return;
    free(c->counts);
    free(c);
}

void loader_install_epoch(loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                          client_plan *plan, client_plan *ahead, resume_chain *chain,
                          uint32_t lane_share)
{
    pthread_mutex_lock(&l->mu);
    /* A batch being written unlocked must not turn READY after its epoch is
     * dropped; prefetched batches that are kept may go on landing. */
    for (;;) {
        bool landing = false;
        for (uint32_t i = 0; i < l->num_slots; i++) {
            const slot *sl = &l->slots[i];
            landing = landing || (sl->state == SLOT_LANDING && sched_drops_slot(sl, epoch, keep));
        }
        if (!landing)
            break;
        feed_cond_timedwait(&l->cond, &l->mu, 10000000u);
    }
    l->lane_share_epoch = lane_share;
    sched_reset_epoch(l, epoch, start_batch, keep, plan, ahead);
    resume_chain_free(l->chain);
    l->chain = chain;
    l->next_since_ns = 0;
    conn_dispatch_soon(l);
    pthread_mutex_unlock(&l->mu);
}

static size_t chain_bytes(const resume_chain *c)
{
    size_t n = 0;
    for (uint32_t s = 0; s < c->num_segs; s++)
        n += SEGMENT_HEAD_BYTES + 8u * c->segs[s].world;
    return n;
}

/* Writes the state; extra, when not NULL, is one more segment after v->chain's (combine). */
static int encode(const state_view *v, const client_resume_segment *extra, void *buf, size_t cap,
                  size_t *len)
{
    size_t need = HEADER_BYTES + chain_bytes(&v->chain);
    if (extra)
        need += SEGMENT_HEAD_BYTES + 8u * extra->world;
    if (v->kind == KIND_RANK)
        need += RANK_TAIL_BYTES;
    *len = need;
    if (need > FEED_STATE_MAX_BYTES)
        return FEED_ETOOBIG;
    if (!buf || cap < need)
        return FEED_ETOOBIG;
    uint8_t *p = buf;
    memset(p, 0, HEADER_BYTES);
    put32(p, STATE_MAGIC);
    p[4] = STATE_VERSION & 0xff;
    p[6] = (uint8_t)v->kind;
    put64(p + 8, v->dataset_size);
    put64(p + 16, v->seed);
    put64(p + 24, v->dataset_hash);
    put64(p + 32, v->transform_hash);
    put32(p + 40, v->epoch);
    put32(p + 44, v->batch_size);
    p[48] = v->drop_last;
    put32(p + 52, v->chain.num_segs + (extra ? 1u : 0u));
    put64(p + 56, v->aug_seed);
    put32(p + 64, v->lane_share);
    p += HEADER_BYTES;
    for (uint32_t s = 0; s <= v->chain.num_segs; s++) {
        const client_resume_segment *seg = s < v->chain.num_segs ? &v->chain.segs[s] : extra;
        if (!seg)
            break;
        put32(p, seg->world);
        put32(p + 4, 0);
        p += SEGMENT_HEAD_BYTES;
        for (uint32_t r = 0; r < seg->world; r++, p += 8)
            put64(p, seg->consumed[r]);
    }
    if (v->kind == KIND_RANK) {
        put32(p, v->world);
        put32(p + 4, v->rank);
        put64(p + 8, v->consumed);
    }
    return 0;
}

static void view_free(state_view *v)
{
    free(v->chain.counts);
    v->chain.counts = NULL;
}

/* Reads a state, refusing anything malformed (nothing read is trusted: every count and length
 * is checked against the bytes there and the caps). */
static int decode(const void *buf, size_t len, state_view *v, char *why, size_t why_cap)
{
    const uint8_t *p = buf;
    int rc = FEED_EINVAL;
    memset(v, 0, sizeof(*v));
    if (!buf || len < HEADER_V1_BYTES || len > FEED_STATE_MAX_BYTES ||
        get32(p) != STATE_MAGIC) {
        snprintf(why, why_cap, "not a feedclient state");
        goto out;
    }
    if (p[4] < 1 || p[4] > STATE_VERSION || p[5] != 0) {
        snprintf(why, why_cap, "state version %u unknown", (unsigned)(p[4] | p[5] << 8));
        goto out;
    }
    size_t header = p[4] == 1 ? HEADER_V1_BYTES : p[4] == 2 ? HEADER_V2_BYTES : HEADER_BYTES;
    if (len < header) {
        snprintf(why, why_cap, "not a feedclient state");
        goto out;
    }
    v->kind = p[6];
    v->dataset_size = get64(p + 8);
    v->seed = get64(p + 16);
    v->dataset_hash = get64(p + 24);
    v->transform_hash = get64(p + 32);
    v->epoch = get32(p + 40);
    v->batch_size = get32(p + 44);
    v->drop_last = p[48] != 0;
    v->chain.num_segs = get32(p + 52);
    v->aug_seed = header >= HEADER_V2_BYTES ? get64(p + 56) : v->seed;
    v->lane_share = header >= HEADER_BYTES ? get32(p + 64) : 0;
    if ((v->kind != KIND_RANK && v->kind != KIND_COMBINED) || p[7] != 0 || v->lane_share > 65536u ||
        v->chain.num_segs > FEED_STATE_MAX_SEGMENTS || v->batch_size == 0 || v->dataset_size == 0) {
        snprintf(why, why_cap, "malformed state header");
        goto out;
    }
    /* First pass: the worlds, so the counts can be allocated once and bounded. */
    size_t off = header;
    uint64_t ranks = 0;
    for (uint32_t s = 0; s < v->chain.num_segs; s++) {
        if (len - off < SEGMENT_HEAD_BYTES)
            goto malformed;
        uint32_t world = get32(p + off);
        ranks += world;
        if (world == 0 || ranks > FEED_STATE_MAX_RANKS ||
            (len - off - SEGMENT_HEAD_BYTES) / 8 < world)
            goto malformed;
        v->chain.segs[s].world = world;
        off += SEGMENT_HEAD_BYTES + 8u * world;
    }
    if (len - off != (v->kind == KIND_RANK ? RANK_TAIL_BYTES : 0u) ||
        (v->kind == KIND_COMBINED && v->chain.num_segs == 0))
        goto malformed;
    rc = FEED_ENOMEM;
    v->chain.counts = malloc(ranks ? ranks * sizeof(uint64_t) : 1);
    if (!v->chain.counts)
        goto out;
    off = header;
    uint64_t *c = v->chain.counts;
    for (uint32_t s = 0; s < v->chain.num_segs; s++) {
        off += SEGMENT_HEAD_BYTES;
        v->chain.segs[s].consumed = c;
        for (uint32_t r = 0; r < v->chain.segs[s].world; r++, off += 8)
            *c++ = get64(p + off);
    }
    if (v->kind == KIND_RANK) {
        v->world = get32(p + off);
        v->rank = get32(p + off + 4);
        v->consumed = get64(p + off + 8);
        if (v->world == 0 || v->rank >= v->world || v->world > FEED_STATE_MAX_RANKS)
            goto malformed;
    }
    rc = 0;
    goto out;
malformed:
    rc = FEED_EINVAL;
    snprintf(why, why_cap, "malformed state (its lengths do not add up)");
out:
    if (rc)
        view_free(v);
    return rc;
}

static bool chains_equal(const resume_chain *a, const resume_chain *b)
{
    if (a->num_segs != b->num_segs)
        return false;
    for (uint32_t s = 0; s < a->num_segs; s++) {
        if (a->segs[s].world != b->segs[s].world ||
            memcmp(a->segs[s].consumed, b->segs[s].consumed,
                   a->segs[s].world * sizeof(uint64_t)) != 0)
            return false;
    }
    return true;
}

/* Names the first identity field where `a` (called what_a) and `b` differ; false if none. */
static bool identity_differs(const state_view *a, const char *what_a, const state_view *b,
                             const char *what_b, char *why, size_t why_cap)
{
    if (a->dataset_hash != b->dataset_hash)
        snprintf(why, why_cap, "dataset differs (%s names another dataset than %s)", what_a,
                 what_b);
    else if (a->dataset_size != b->dataset_size)
        snprintf(why, why_cap, "dataset size differs (%s: %llu samples, %s: %llu)", what_a,
                 (unsigned long long)a->dataset_size, what_b, (unsigned long long)b->dataset_size);
    else if (a->seed != b->seed)
        snprintf(why, why_cap, "seed differs (%s: %llu, %s: %llu)", what_a,
                 (unsigned long long)a->seed, what_b, (unsigned long long)b->seed);
    else if (a->aug_seed != b->aug_seed)
        snprintf(why, why_cap, "aug_seed differs (%s: %llu, %s: %llu)", what_a,
                 (unsigned long long)a->aug_seed, what_b, (unsigned long long)b->aug_seed);
    else if (a->transform_hash != b->transform_hash)
        snprintf(why, why_cap,
                 "transform differs (%s and %s differ in transform, size or augment)", what_a,
                 what_b);
    else
        return false;
    return true;
}

int feed_state_combine(const void *const *states, const size_t *lens, size_t count, void *buf,
                       size_t cap, size_t *len, char *why, size_t why_cap)
{
    state_view first, v;
    client_resume_segment seg = {0, NULL};
    uint64_t *consumed = NULL;
    uint8_t *seen = NULL;
    int rc = FEED_EINVAL;
    char name_a[32], name_b[32];

    memset(&first, 0, sizeof(first));
    if (why_cap)
        why[0] = '\0';
    if (!states || !lens || !len || count == 0 || count > FEED_STATE_MAX_RANKS) {
        snprintf(why, why_cap, "no states, or more than %u", FEED_STATE_MAX_RANKS);
        goto out;
    }
    *len = 0;
    for (size_t i = 0; i < count; i++) {
        rc = decode(states[i], lens[i], &v, why, why_cap);
        if (rc)
            goto out;
        rc = FEED_EINVAL;
        if (v.kind != KIND_RANK) {
            snprintf(why, why_cap, "state %zu is a combined state, not one rank's", i);
            view_free(&v);
            goto out;
        }
        if (i == 0) {
            first = v;
            rc = FEED_ENOMEM;
            consumed = calloc(first.world, sizeof(*consumed));
            seen = calloc(first.world, 1);
            if (!consumed || !seen)
                goto out;
            rc = FEED_EINVAL;
        } else {
            snprintf(name_a, sizeof(name_a), "rank %u", v.rank);
            snprintf(name_b, sizeof(name_b), "rank %u", first.rank);
            bool bad = identity_differs(&v, name_a, &first, name_b, why, why_cap);
            if (!bad && v.epoch != first.epoch)
                snprintf(why, why_cap, "epoch differs (rank %u: %u, rank %u: %u)", v.rank,
                         v.epoch, first.rank, first.epoch);
            else if (!bad && v.world != first.world)
                snprintf(why, why_cap, "world differs (rank %u: %u, rank %u: %u)", v.rank,
                         v.world, first.rank, first.world);
            else if (!bad && (v.batch_size != first.batch_size || v.drop_last != first.drop_last))
                snprintf(why, why_cap, "batch size or drop_last differs (rank %u and rank %u)",
                         v.rank, first.rank);
            else if (!bad && !chains_equal(&v.chain, &first.chain))
                snprintf(why, why_cap,
                         "rank %u and rank %u resumed this epoch from different states", v.rank,
                         first.rank);
            bad = bad || why[0];
            if (bad) {
                view_free(&v);
                goto out;
            }
        }
        if (seen[v.rank]) {
            snprintf(why, why_cap, "rank %u appears twice", v.rank);
            if (i)
                view_free(&v);
            goto out;
        }
        seen[v.rank] = 1;
        consumed[v.rank] = v.consumed;
        if (i)
            view_free(&v);
    }
    if (count != first.world) {
        for (uint32_t r = 0; r < first.world; r++) {
            if (!seen[r]) {
                snprintf(why, why_cap, "rank %u of world %u is missing (%zu states given)", r,
                         first.world, count);
                break;
            }
        }
        goto out;
    }
    if (first.chain.num_segs >= FEED_STATE_MAX_SEGMENTS) {
        snprintf(why, why_cap, "the epoch changed world size more than %d times",
                 FEED_STATE_MAX_SEGMENTS);
        goto out;
    }
    seg.world = first.world;
    seg.consumed = consumed;
    first.kind = KIND_COMBINED;
    rc = encode(&first, &seg, buf, cap, len);
out:
    view_free(&first);
    free(consumed);
    free(seen);
    return rc;
}

int feed_state_epoch(const void *state, size_t len, uint32_t *epoch)
{
    state_view v;
    char why[8];
    int rc = epoch ? decode(state, len, &v, why, sizeof(why)) : FEED_EINVAL;
    if (!rc) {
        *epoch = v.epoch;
        view_free(&v);
    }
    return rc;
}

int feed_resume_plan(const void *state, size_t len, uint32_t rank, uint32_t world,
                     uint64_t *samples, size_t cap, size_t *count, char *why, size_t why_cap)
{
    state_view v;
    uint32_t *left = NULL;
    uint64_t m = 0;
    int rc = FEED_EINVAL;
    memset(&v, 0, sizeof(v));
    if (why_cap)
        why[0] = '\0';
    if (!count)
        goto out;
    *count = 0;
    rc = decode(state, len, &v, why, why_cap);
    if (rc)
        goto out;
    rc = FEED_EINVAL;
    if (v.kind != KIND_COMBINED) {
        snprintf(why, why_cap, "a rank state: combine the states of every rank first");
        goto out;
    }
    if (world == 0 || rank >= world) {
        snprintf(why, why_cap, "rank %u of world %u", rank, world);
        goto out;
    }
    rc = client_plan_remaining(v.dataset_size, v.seed, v.epoch, v.chain.segs, v.chain.num_segs,
                               &left, &m, why, why_cap);
    if (rc)
        goto out;
    uint64_t per_rank = m ? (m + world - 1) / world : 0;
    *count = per_rank;
    rc = FEED_ETOOBIG;
    if (per_rank > cap || (per_rank && !samples))
        goto out;
    for (uint64_t t = 0; t < per_rank; t++)
        samples[t] = left[(rank + t * world) % m];
    rc = 0;
out:
    free(left);
    view_free(&v);
    return rc;
}

/* This loader's identity, as a state records it. cfg is fixed at open. */
static void loader_view(const loader *l, uint64_t num_samples, state_view *v)
{
    memset(v, 0, sizeof(*v));
    v->dataset_size = num_samples;
    v->seed = l->cfg.seed;
    v->aug_seed = l->aug_seed;
    v->dataset_hash = fnv1a(FNV_START, l->cfg.dataset, strlen(l->cfg.dataset));
    v->transform_hash = transform_hash(&l->cfg);
    v->batch_size = l->cfg.batch_size;
    v->drop_last = l->cfg.drop_last;
    v->world = l->cfg.world;
    v->rank = l->cfg.rank;
}

int feed_loader_state(feed_loader *l, uint32_t epoch, uint64_t batches, void *buf, size_t cap,
                      size_t *len)
{
    state_view v;
    int rc = FEED_EINVAL;
    if (!l || !len)
        return FEED_EINVAL;
    *len = 0;
    pthread_mutex_lock(&l->mu);
    loader_view(l, l->num_samples, &v);
    v.kind = KIND_RANK;
    v.epoch = epoch;
    v.lane_share = sched_lane_share(l, epoch);
    if (epoch == l->epoch) {
        if (batches > l->plan.batches)
            goto out;
        uint64_t samples = batches * l->cfg.batch_size;
        v.consumed = samples < l->plan.count ? samples : l->plan.count;
        if (l->chain)
            v.chain = *l->chain;
    } else if (batches) {
        goto out;
    }
    /* The chain's counts stay the loader's: encode only reads them. */
    rc = encode(&v, NULL, buf, cap, len);
out:
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* A heap copy of c, for the loader to keep while it runs the resumed epoch. */
static resume_chain *copy_chain(const resume_chain *c)
{
    uint64_t ranks = 0;
    for (uint32_t s = 0; s < c->num_segs; s++)
        ranks += c->segs[s].world;
    resume_chain *out = calloc(1, sizeof(*out));
    if (!out)
        return NULL;
    out->counts = malloc(ranks ? ranks * sizeof(uint64_t) : 1);
    if (!out->counts) {
        free(out);
        return NULL;
    }
    out->num_segs = c->num_segs;
    uint64_t *p = out->counts;
    for (uint32_t s = 0; s < c->num_segs; s++) {
        out->segs[s].world = c->segs[s].world;
        out->segs[s].consumed = p;
        memcpy(p, c->segs[s].consumed, c->segs[s].world * sizeof(uint64_t));
        p += c->segs[s].world;
    }
    return out;
}

int feed_loader_resume(feed_loader *l, const void *state, size_t len, char *why, size_t why_cap)
{
    state_view v, here;
    client_plan plan = {0}, ahead = {0};
    resume_chain *chain = NULL;
    uint64_t start = 0;
    char msg[256] = "";
    int rc = FEED_EINVAL;
    memset(&v, 0, sizeof(v));
    if (why_cap)
        why[0] = '\0';
    if (!l) {
        snprintf(msg, sizeof(msg), "no loader");
        goto out;
    }
    rc = decode(state, len, &v, msg, sizeof(msg));
    if (rc)
        goto out;
    /* num_samples is fixed once open returned; cfg always. */
    pthread_mutex_lock(&l->mu);
    loader_view(l, l->num_samples, &here);
    pthread_mutex_unlock(&l->mu);
    rc = FEED_EINVAL;
    if (identity_differs(&v, "the state", &here, "this loader", msg, sizeof(msg)))
        goto out;
    const feed_loader_config *c = &l->cfg;
    if (v.kind == KIND_RANK) {
        if (v.world != c->world || v.rank != c->rank) {
            snprintf(msg, sizeof(msg),
                     "world or rank differs (the state: rank %u of world %u, this loader: rank "
                     "%u of world %u); combine the states of every rank (feed_state_combine) to "
                     "resume at another world size",
                     v.rank, v.world, c->rank, c->world);
            goto out;
        }
        if (v.batch_size != c->batch_size || v.drop_last != c->drop_last) {
            snprintf(msg, sizeof(msg),
                     "batch size or drop_last differs (the state: %u%s, this loader: %u%s)",
                     v.batch_size, v.drop_last ? " drop_last" : "", c->batch_size,
                     c->drop_last ? " drop_last" : "");
            goto out;
        }
    }
    if (v.kind == KIND_RANK && v.chain.num_segs == 0)
        rc = client_plan_build(&plan, v.dataset_size, v.seed, v.epoch, c->rank, c->world,
                               c->batch_size, c->drop_last);
    else
        rc = client_plan_resume(&plan, v.dataset_size, v.seed, v.epoch, v.chain.segs,
                                v.chain.num_segs, c->rank, c->world, c->batch_size, c->drop_last,
                                msg, sizeof(msg));
    if (rc)
        goto out;
    if (v.kind == KIND_RANK) {
        /* A rank state's position is a batch boundary of the plan it was taken on. */
        rc = FEED_EINVAL;
        if (v.consumed > plan.count ||
            (v.consumed % c->batch_size && v.consumed != plan.count)) {
            snprintf(msg, sizeof(msg), "the state consumed %llu samples of a plan of %llu",
                     (unsigned long long)v.consumed, (unsigned long long)plan.count);
            goto out;
        }
        start = (v.consumed + c->batch_size - 1) / c->batch_size;
        if (start > plan.batches)
            start = plan.batches;
    }
    rc = FEED_ENOMEM;
    if (v.chain.num_segs) {
        chain = copy_chain(&v.chain);
        if (!chain)
            goto out;
    }
    rc = 0;
    if (v.epoch != UINT32_MAX)
        rc = client_plan_build(&ahead, v.dataset_size, v.seed, v.epoch + 1, c->rank, c->world,
                               c->batch_size, c->drop_last);
    if (rc)
        goto out;
    /* The share the epoch ran with, if this loader has a lane to run it (else none). */
    loader_install_epoch(l, v.epoch, start, false, &plan, &ahead, chain,
                         l->lane ? v.lane_share : 0);
    chain = NULL;
out:
    view_free(&v);
    client_plan_free(&plan);
    client_plan_free(&ahead);
    resume_chain_free(chain);
    if (rc) {
        snprintf(why, why_cap, "%s", msg);
        if (l)
            client_log(l, FEED_LOG_ERROR, "feed_loader_resume: %s", msg);
    }
    return rc;
}
