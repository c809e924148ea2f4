/*
 * The simulated step (--device none): no model and no GPU, only the time an
 * accelerator would take. Each step occupies a simulated device for
 * target_us_per_image x n microseconds, starting when it is submitted or
 * when the previous step ends, whichever is later, exactly as a GPU queue
 * runs them; retire() sleeps until the oldest step's end. Busy fraction,
 * images/s and batch waits then measure starvation as on a real GPU, with no
 * GPU and almost no CPU, so many clients can share one host and one fleet
 * (the fleet-sizing benchmark, bench/fleet/).
 *
 * Loss is reported as 0: nothing is learnt. Used by the training thread only.
 */
#include "step.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "feed/errors.h"
#include "feed/timeutil.h"

#define SIM_INFLIGHT 8u

typedef struct sim_step {
    bench_step base;
    step_config cfg;
    uint64_t device_free_ns; /* when the simulated device finishes its queue */
    uint64_t end_ns[SIM_INFLIGHT];
    step_result results[SIM_INFLIGHT];
    uint32_t head, count;
} sim_step;

static int sim_submit_host(bench_step *base, const uint8_t *pixels, const int64_t *labels,
                           uint32_t n, void *copy_done)
{
    (void)pixels, (void)copy_done;
    sim_step *s = (sim_step *)base;
    if (s->count == SIM_INFLIGHT || n > s->cfg.batch)
        return FEED_ESTATE;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++)
        bad += labels[i] < 0 || (uint64_t)labels[i] >= s->cfg.num_classes;
    double us = s->cfg.target_us_per_image * n;
    uint64_t now = feed_now_ns();
    uint64_t start = s->device_free_ns > now ? s->device_free_ns : now;
    s->device_free_ns = start + (uint64_t)(us * 1000.0);
    uint32_t k = (s->head + s->count) % SIM_INFLIGHT;
    s->end_ns[k] = s->device_free_ns;
    s->results[k] = (step_result){.step_ms = us / 1000.0, .loss = 0.0, .n = n, .bad_labels = bad};
    s->count++;
    return 0;
}

static int sim_submit_device(bench_step *s, const void *data, const int64_t *labels, uint32_t n,
                             void *ready_event)
{
    (void)s, (void)data, (void)labels, (void)n, (void)ready_event;
    return FEED_EUNSUPPORTED;
}

static int sim_retire(bench_step *base, step_result *out)
{
    sim_step *s = (sim_step *)base;
    if (s->count == 0)
        return FEED_EEOF;
    uint64_t end = s->end_ns[s->head];
    struct timespec ts = {(time_t)(end / 1000000000u), (long)(end % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
        ;
    *out = s->results[s->head];
    s->head = (s->head + 1) % SIM_INFLIGHT;
    s->count--;
    return 0;
}

static uint32_t sim_inflight(const bench_step *base)
{
    return ((const sim_step *)base)->count;
}

static void *sim_stream(bench_step *s)
{
    (void)s;
    return NULL;
}

static void *sim_host_alloc(bench_step *s, size_t bytes)
{
    (void)s;
    return malloc(bytes);
}

static void sim_host_free(bench_step *s, void *p)
{
    (void)s;
    free(p);
}

static void *sim_event_new(bench_step *s)
{
    (void)s;
    return NULL;
}

static void sim_event_nop(bench_step *s, void *ev)
{
    (void)s, (void)ev;
}

static int sim_reset(bench_step *base)
{
    sim_step *s = (sim_step *)base;
    s->count = 0;
    s->device_free_ns = 0;
    return 0;
}

static void sim_close(bench_step *base)
{
    free(base);
}

static const step_ops sim_ops = {
    .submit_host = sim_submit_host,
    .submit_device = sim_submit_device,
    .retire = sim_retire,
    .inflight = sim_inflight,
    .stream = sim_stream,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .event_new = sim_event_new,
    .event_sync = sim_event_nop,
    .event_free = sim_event_nop,
    .reset = sim_reset,
    .close = sim_close,
};

int step_sim_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap)
{
    int rc = FEED_EINVAL;
    sim_step *s = NULL;
    if (cfg->batch == 0 || cfg->num_classes == 0 || !(cfg->target_us_per_image > 0) ||
        cfg->target_us_per_image > 1e6) {
        snprintf(err, err_cap,
                 "simulated step: batch >= 1, classes >= 1 and a step time per "
                 "image in (0, 1e6] us (--model or --step-us-per-image)");
        goto out;
    }
    rc = FEED_ENOMEM;
    s = calloc(1, sizeof *s);
    if (!s)
        goto out;
    s->base.ops = &sim_ops;
    s->cfg = *cfg;
    snprintf(s->base.info.device_name, sizeof s->base.info.device_name,
             "simulated (%.1f us/image, no GPU)", cfg->target_us_per_image);
    s->base.info.on_gpu = false;
    s->base.info.calibrated_ms = cfg->target_us_per_image * cfg->batch / 1000.0;
    *out = &s->base;
    s = NULL;
    rc = 0;
out:
    free(s);
    return rc;
}
