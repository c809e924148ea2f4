/*
 * Fleet sizing (docs/guide/sizing.md): what the loaders report of their own
 * demand (BatchRequest.demand, kept per loader and summed per job), what this
 * server can make (its workers' busy time per sample, decode and cache hit as
 * they come; encoded samples, a copy each, are counted apart and left out),
 * and from the two the number of servers the fleet should have, exported as
 * feedd_fleet_desired_servers for an autoscaler.
 *
 * One process-wide instance. feedd_fleet_sample is lock-free (atomics, any
 * worker); reports and renders take the instance's mutex, a leaf (nothing is
 * taken and nothing logged under it). The window moves on when a report or a
 * scrape finds it due, never more than once per window however many scrapers
 * there are, so the desired size does not depend on the scrape rate.
 */
#ifndef FEED_SERVER_FLEET_H
#define FEED_SERVER_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/names.h"

/* Bounds: loaders remembered (one more report is dropped and counted) and jobs exported by
 * name (the rest are summed under job="_other"); a job key is a name (feed/names.h). */
#define FEEDD_FLEET_LOADERS_MAX 256u
#define FEEDD_FLEET_JOBS_MAX 32u
/* Wait fractions above this count as this much in the starvation correction: 1 / (1 - 0.9)
 * multiplies a job's rate by at most 10 (a loader that waited all the time says nothing of
 * how much faster it would go). */
#define FEEDD_FLEET_WAIT_CAP 0.9
/* A lower desired size needs the raw size this far below the next integer down: a fleet of
 * 2 shrinks to 1 only once raw <= 0.75 (hysteresis against flapping at an integer). */
#define FEEDD_FLEET_HYSTERESIS 0.25
/* Samples a window needs before its capacity replaces the last one. */
#define FEEDD_FLEET_MIN_SAMPLES 16u

/* A Demand message, checked (request.c). */
typedef struct feedd_demand {
    uint64_t loader;
    uint32_t window_ms;
    double wait_fraction;
    double samples_per_second;
    uint32_t servers;
} feedd_demand;

/* One job's demand in a window, the input of feedd_fleet_desired. */
typedef struct feedd_fleet_job {
    double samples_per_second; /* summed over its loaders */
    double wait_fraction;      /* mean over its loaders */
} feedd_fleet_job;

/*
 * The formula, pure (test_server_units drives it). raw = sum over jobs of
 * rate / (1 - min(wait, FEEDD_FLEET_WAIT_CAP)), over capacity (one server's
 * samples/s). The result: ceil(raw) when above prev; ceil(raw +
 * FEEDD_FLEET_HYSTERESIS) when that is below prev; else prev; then bounded to
 * [ceil(prev / 2), 2 * prev] and to at least 1. prev 0 (no previous window)
 * takes ceil(raw) unbounded. No demand is raw 0 with or without a capacity;
 * demand with capacity <= 0 (not measured yet) keeps prev (1 if 0), raw 0.
 */
uint32_t feedd_fleet_desired(const feedd_fleet_job *jobs, size_t n_jobs, double capacity,
                             uint32_t prev, double *raw_out);

/* Before any other call: the workers the pool runs and the window's length. */
void feedd_fleet_init(uint32_t threads, uint32_t window_ms);
/* What a worker made of a sample: decoded from the JPEG, made from the decoded cache, or its
 * bytes copied for an encoded batch (not a decode: left out of the capacity). */
typedef enum feedd_fleet_kind {
    FEEDD_FLEET_DECODE,
    FEEDD_FLEET_CACHE_HIT,
    FEEDD_FLEET_ENCODED,
    FEEDD_FLEET_KINDS
} feedd_fleet_kind;

/* A worker finished one sample of this kind after busy_ns of work. */
void feedd_fleet_sample(feedd_fleet_kind kind, uint64_t busy_ns);
/* A loader's report on a stream of job `job` (at most FEED_NAME_MAX bytes kept). */
void feedd_fleet_report(const char *job, const feedd_demand *d, uint64_t now_ns);
/* The fleet's metrics as Prometheus text at buf (at most cap bytes, NUL-terminated); returns
 * the length written. Moves the window on first when it is due. */
size_t feedd_fleet_render(char *buf, size_t cap, uint64_t now_ns);

#endif
