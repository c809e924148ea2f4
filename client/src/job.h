/*
 * The loader's job name (SessionOpen.job): checks and the default rule; see job.c.
 */
#ifndef FEED_CLIENT_JOB_H
#define FEED_CLIENT_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/names.h"

#define CLIENT_JOB_WEIGHT_MAX 100

/* A name feedd accepts (feed/names.h), and not "". */
bool client_job_valid(const char *job);
/*
 * The default name (cap >= FEED_NAME_MAX + 1): "run-" and TORCHELASTIC_RUN_ID
 * (other bytes as '_', cut to fit) when set and not "none"; else "dist-" and a
 * digest of MASTER_ADDR, MASTER_PORT, dataset and seed when both are set;
 * else "proc-" and a digest of host name, process id, dataset and seed.
 */
void client_job_default(const char *dataset, uint64_t seed, char *out, size_t cap);

#endif
