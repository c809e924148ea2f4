/*
 * The loader's demand window; see demand.h. Runs on whichever loader thread
 * holds mu: the training thread (next) and the dispatch thread (requests).
 */
#include "demand.h"

#include <sys/random.h>

void client_demand_init(client_demand *d, uint32_t window_ms, uint64_t id, uint64_t now)
{
    *d = (client_demand){0};
    /* The id only has to differ between the loaders of one fleet; without the kernel's
     * randomness the clock and the struct's address are as good. */
    if (!id && getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id)
        id = now ^ ((uint64_t)(uintptr_t)d << 16);
    d->id = id ? id : 1;
    if (!window_ms)
        window_ms = CLIENT_DEMAND_WINDOW_DEFAULT_MS;
    d->window_ns = (uint64_t)window_ms * 1000000u;
    d->start_ns = now;
}

static void add_wait(client_demand *d, uint64_t since, uint64_t now)
{
    if (since < d->start_ns)
        since = d->start_ns;
    if (now > since)
        d->wait_ns += now - since;
}

void client_demand_consumed(client_demand *d, uint64_t wait_since, uint64_t now, uint32_t n)
{
    /* The wait for the first batch is the loader filling its pipeline (connections, the first
     * requests), not the fleet falling short: counted, it made a job's first report say it
     * waited most of its window, and the fleet's first answer ten times its size. */
    if (!d->started) {
        d->started = true;
        d->start_ns = now;
        d->wait_ns = 0;
        d->samples = 0;
        d->busy_ns = 0;
        d->steps = 0;
        d->batches = 0;
        return;
    }
    add_wait(d, wait_since, now);
    d->samples += n;
    d->batches++;
}

void client_demand_step(client_demand *d, uint64_t ns)
{
    d->busy_ns += ns;
    d->steps++;
}

bool client_demand_due(client_demand *d, uint64_t waiting_since, uint64_t now)
{
    uint64_t span = now - d->start_ns;
    if (d->started && now > d->start_ns && span >= d->window_ns) {
        if (waiting_since)
            add_wait(d, waiting_since, now);
        /* Steps' GPU times, when the window has them, measure starvation on the GPU itself:
         * busy is the mean step time times the batches handed out, since a caller that runs
         * ahead of the GPU leaves some steps untimed (client_gpu_slot_stream_wait). */
        double wait = d->steps >= CLIENT_DEMAND_MIN_STEPS
                          ? 1.0 - (double)d->busy_ns / d->steps * d->batches / (double)span
                          : (double)d->wait_ns / (double)span;
        if (wait < 0)
            wait = 0;
        d->wait_fraction = wait > 1 ? 1 : wait;
        d->samples_per_second = (double)d->samples * 1e9 / (double)span;
        uint64_t ms = span / 1000000u;
        d->last_ms = ms > CLIENT_DEMAND_WINDOW_MAX_MS ? CLIENT_DEMAND_WINDOW_MAX_MS : (uint32_t)ms;
        d->have = true;
        d->start_ns = now;
        d->wait_ns = 0;
        d->samples = 0;
        d->busy_ns = 0;
        d->steps = 0;
        d->batches = 0;
    }
    return d->have;
}
