/*
 * The loader's job name (SessionOpen.job): checks and the default rule; see job.c.
 */
#ifndef FEED_CLIENT_JOB_H
#define FEED_CLIENT_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What feedd accepts (proto/feed.proto SessionOpen.job, server/share.h). */
#define CLIENT_JOB_MAX 128
#define CLIENT_JOB_CHARS "_.-:/@+="
#define CLIENT_JOB_WEIGHT_MAX 100

/* 1..CLIENT_JOB_MAX bytes, each a letter, a digit or one of CLIENT_JOB_CHARS. */
bool client_job_valid(const char *job);
/*
 * The default name (cap >= CLIENT_JOB_MAX + 1): "run-" and TORCHELASTIC_RUN_ID
 * (other bytes as '_', cut to fit) when set and not "none"; else "dist-" and a
 * digest of MASTER_ADDR, MASTER_PORT, dataset and seed when both are set;
 * else "proc-" and a digest of host name, process id, dataset and seed.
 */
void client_job_default(const char *dataset, uint64_t seed, char *out, size_t cap);

#endif
