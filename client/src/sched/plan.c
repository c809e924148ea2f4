/*
 * Epoch planning (see plan.h). Runs on whichever thread builds the plan; the
 * plan is immutable once built.
 */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/rng.h"

/* The epoch permutation: Fisher-Yates over the stream (seed, epoch, FEED_RNG_PERMUTATION_STREAM).
 * *out is the caller's to free. */
static int draw_permutation(uint64_t n, uint64_t seed, uint32_t epoch, uint32_t **out)
{
    uint32_t *perm = malloc(n * sizeof(*perm));
    *out = perm;
    if (!perm)
        return FEED_ENOMEM;
    for (uint64_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    feed_rng rng;
    feed_rng_init(&rng, seed, epoch, FEED_RNG_PERMUTATION_STREAM);
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = feed_rng_below(&rng, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    return 0;
}

/* Rank's share of list[0..m): the list padded by wrapping around to a multiple of world, rank
 * r taking positions r, r+world, ... (m == 0: nothing). */
static int split_list(client_plan *p, const uint32_t *list, uint64_t m, uint32_t rank,
                      uint32_t world, uint32_t batch_size, bool drop_last)
{
    uint64_t per_rank = m ? (m + world - 1) / world : 0;
    p->samples = malloc(per_rank ? per_rank * sizeof(*p->samples) : 1);
    if (!p->samples)
        return FEED_ENOMEM;
    /* Position k of the padded list is list[k mod m]: the wrap-around padding. */
    for (uint64_t t = 0; t < per_rank; t++)
        p->samples[t] = list[(rank + t * world) % m];
    p->count = per_rank;
    p->batches = per_rank / batch_size;
    if (!drop_last && per_rank % batch_size)
        p->batches++;
    return 0;
}

static void plan_init(client_plan *p, uint32_t batch_size)
{
    p->samples = NULL;
    p->count = 0;
    p->batches = 0;
    p->batch_size = batch_size;
}

int client_plan_build(client_plan *p, uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                      uint32_t rank, uint32_t world, uint32_t batch_size, bool drop_last)
{
    uint32_t *perm = NULL;
    int rc = FEED_EINVAL;

    plan_init(p, batch_size);
    if (dataset_size == 0 || world == 0 || rank >= world || batch_size == 0)
        goto out;
    rc = FEED_ETOOBIG;
    if (dataset_size > CLIENT_PLAN_MAX_SAMPLES)
        goto out;
    rc = draw_permutation(dataset_size, seed, epoch, &perm);
    if (rc)
        goto out;
    rc = split_list(p, perm, dataset_size, rank, world, batch_size, drop_last);
out:
    free(perm);
    if (rc)
        client_plan_free(p);
    return rc;
}

int client_plan_remaining(uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                          const client_resume_segment *segs, uint32_t num_segs, uint32_t **out,
                          uint64_t *count, char *why, size_t why_cap)
{
    uint32_t *perm = NULL, *left = NULL;
    uint8_t *consumed = NULL;
    int rc = FEED_EINVAL;

    *out = NULL;
    *count = 0;
    if (why_cap)
        why[0] = '\0';
    if (dataset_size == 0 || dataset_size > CLIENT_PLAN_MAX_SAMPLES)
        goto out;
    rc = draw_permutation(dataset_size, seed, epoch, &perm);
    if (rc)
        goto out;
    rc = FEED_ENOMEM;
    consumed = calloc(dataset_size, 1);
    left = malloc(dataset_size * sizeof(*left));
    if (!consumed || !left)
        goto out;
    /* Before the first segment nothing is consumed: what is left is the permutation. */
    memcpy(left, perm, dataset_size * sizeof(*left));
    uint64_t m = dataset_size;
    rc = FEED_EINVAL;
    for (uint32_t s = 0; s < num_segs; s++) {
        uint32_t world = segs[s].world;
        if (world == 0) {
            snprintf(why, why_cap, "segment %u has world 0", s);
            goto out;
        }
        uint64_t per_rank = m ? (m + world - 1) / world : 0;
        for (uint32_t r = 0; r < world; r++) {
            uint64_t c = segs[s].consumed[r];
            if (c > per_rank) {
                snprintf(why, why_cap,
                         "rank %u of world %u consumed %llu samples but its plan has %llu", r,
                         world, (unsigned long long)c, (unsigned long long)per_rank);
                goto out;
            }
            /* A padding copy marks its sample: a sample counts once however many copies of it
             * were handed out. */
            for (uint64_t t = 0; t < c; t++)
                consumed[left[(r + t * world) % m]] = 1;
        }
        m = 0;
        for (uint64_t k = 0; k < dataset_size; k++) {
            if (!consumed[perm[k]])
                left[m++] = perm[k];
        }
    }
    *out = left;
    *count = m;
    left = NULL;
    rc = 0;
out:
    free(perm);
    free(left);
    free(consumed);
    return rc;
}

int client_plan_resume(client_plan *p, uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                       const client_resume_segment *segs, uint32_t num_segs, uint32_t rank,
                       uint32_t world, uint32_t batch_size, bool drop_last, char *why,
                       size_t why_cap)
{
    uint32_t *left = NULL;
    uint64_t m = 0;
    int rc = FEED_EINVAL;

    plan_init(p, batch_size);
    if (why_cap)
        why[0] = '\0';
    if (world == 0 || rank >= world || batch_size == 0) {
        snprintf(why, why_cap, "rank %u of world %u", rank, world);
        goto out;
    }
    rc = client_plan_remaining(dataset_size, seed, epoch, segs, num_segs, &left, &m, why,
                               why_cap);
    if (rc)
        goto out;
    rc = split_list(p, left, m, rank, world, batch_size, drop_last);
out:
    free(left);
    if (rc)
        client_plan_free(p);
    return rc;
}

void client_plan_free(client_plan *p)
{
    free(p->samples);
    p->samples = NULL;
    p->count = 0;
    p->batches = 0;
}

void client_plan_batch(const client_plan *p, uint64_t b, const uint32_t **first, uint32_t *n)
{
    uint64_t start = b * p->batch_size;
    uint64_t left = p->count - start;
    *first = p->samples + start;
    *n = left < p->batch_size ? (uint32_t)left : p->batch_size;
}

bool client_lane_assigned(uint64_t seed, uint32_t epoch, uint64_t index, uint32_t share16)
{
    if (share16 == 0)
        return false;
    if (share16 >= 65536u)
        return true;
    feed_rng rng;
    feed_rng_init(&rng, seed, epoch, FEED_RNG_LANE_STREAM);
    /* Sample indices are below 2^32 (CLIENT_PLAN_MAX_SAMPLES): one block each. */
    rng.ctr[0] = (uint32_t)index;
    return (feed_rng_u32(&rng) >> 16) < share16;
}

uint32_t client_lane_share16(double share)
{
    if (!(share > 0.0))
        return 0;
    if (share >= 1.0)
        return 65536u;
    return (uint32_t)(share * 65536.0 + 0.5);
}
