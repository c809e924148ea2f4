/*
 * The loader's own demand, measured where the starvation is (README "Fleet
 * sizing"): over a window of demand_window_ms, the fraction of wall time the
 * training thread spent blocked in next() and the samples next() handed it
 * per second. On the device path, once steps' own GPU times come in
 * (client_demand_step: CUDA events on the caller's stream), the wait is the
 * fraction of the window the GPU spent outside the steps instead: a loop that
 * runs ahead of the GPU blocks in next() while the GPU still runs its last
 * step, so its host wait counts busy time as starvation (measured on the GPU
 * machine: 0.66 host wait at 66% GPU busy); the GPU's busy time is the mean
 * step time read times the batches handed out, as such a loop leaves some
 * steps untimed. The last complete window goes to the servers on every request
 * (BatchRequest.demand); feedd sums it per job and sizes the fleet from it.
 *
 * Pure: the caller passes the clock, holds the loader's mu, and owns the
 * struct (loader_impl.h's `demand` field, [mu]).
 */
#ifndef FEED_CLIENT_DEMAND_H
#define FEED_CLIENT_DEMAND_H

#include <stdbool.h>
#include <stdint.h>

/* feed_loader_config.demand_window_ms: default and bounds (proto/feed.proto's Demand.window_ms). */
#define CLIENT_DEMAND_WINDOW_DEFAULT_MS 10000u
#define CLIENT_DEMAND_WINDOW_MIN_MS 100u
#define CLIENT_DEMAND_WINDOW_MAX_MS 3600000u
/* Steps' GPU times a window needs before they, not the host's waits, say how much it waited. */
#define CLIENT_DEMAND_MIN_STEPS 8u

typedef struct client_demand {
    uint64_t id;        /* Demand.loader: random, not 0 */
    uint64_t window_ns; /* the configured length */
    uint64_t start_ns;  /* the open window's start */
    uint64_t wait_ns;   /* waits that ended in the open window, from its start at the earliest */
    uint64_t samples;   /* handed out in the open window */
    uint64_t busy_ns;   /* steps' GPU time read in the open window */
    uint32_t steps;     /* how many */
    uint32_t batches;   /* batches handed out in the open window (busy: mean step x batches) */
    bool started;       /* the first batch was handed out: the first window starts there */
    /* The last complete window; have is false until one has closed. */
    bool have;
    uint32_t last_ms;
    double wait_fraction, samples_per_second;
} client_demand;

/* A fresh window starting at now (and again at the first batch); id 0 draws one. */
void client_demand_init(client_demand *d, uint32_t window_ms, uint64_t id, uint64_t now);
/* next() handed out a batch of n samples at now after blocking since wait_since. */
void client_demand_consumed(client_demand *d, uint64_t wait_since, uint64_t now, uint32_t n);
/* A step's own GPU time, read now (the step ran shortly before). */
void client_demand_step(client_demand *d, uint64_t ns);
/* Close the open window if it has run its length; a wait still going on (waiting_since, 0:
 * none) counts up to now. Then whether a complete window is there to report. */
bool client_demand_due(client_demand *d, uint64_t waiting_since, uint64_t now);

#endif
