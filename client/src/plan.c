/*
 * Epoch planning (see plan.h). Runs on whichever thread builds the plan; the
 * plan is immutable once built.
 */
#include "plan.h"

#include <stdlib.h>

#include "feed/errors.h"
#include "feed/rng.h"

int client_plan_build(client_plan *p, uint64_t dataset_size, uint64_t seed, uint32_t epoch,
                      uint32_t rank, uint32_t world, uint32_t batch_size, bool drop_last)
{
    uint32_t *perm = NULL;
    int rc = FEED_EINVAL;

    p->samples = NULL;
    p->count = 0;
    p->batches = 0;
    p->batch_size = batch_size;
    if (dataset_size == 0 || world == 0 || rank >= world || batch_size == 0)
        goto out;
    rc = FEED_ETOOBIG;
    if (dataset_size > CLIENT_PLAN_MAX_SAMPLES)
        goto out;
    rc = FEED_ENOMEM;
    perm = malloc(dataset_size * sizeof(*perm));
    uint64_t per_rank = (dataset_size + world - 1) / world;
    p->samples = malloc(per_rank * sizeof(*p->samples));
    if (!perm || !p->samples)
        goto out;

    for (uint64_t i = 0; i < dataset_size; i++)
        perm[i] = (uint32_t)i;
    feed_rng rng;
    feed_rng_init(&rng, seed, epoch, FEED_RNG_PERMUTATION_STREAM);
    for (uint64_t i = dataset_size - 1; i > 0; i--) {
        uint64_t j = feed_rng_below(&rng, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* Position k of the padded list is perm[k mod n]: the wrap-around padding. */
    for (uint64_t t = 0; t < per_rank; t++)
        p->samples[t] = perm[(rank + t * world) % dataset_size];
    p->count = per_rank;
    p->batches = per_rank / batch_size;
    if (!drop_last && per_rank % batch_size)
        p->batches++;
    rc = 0;
out:
    free(perm);
    if (rc) {
        free(p->samples);
        p->samples = NULL;
    }
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
