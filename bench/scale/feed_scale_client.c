/*
 * feed-scale-client: one training job's loader for the autoscaling
 * simulation (bench/scale/hpa_sim.py). A real libfeedclient loader whose
 * "GPU step" is a sleep of batch / rate seconds, so the job consumes at most
 * `rate` samples/s and waits in next() when the fleet is short. Every second
 * it prints one JSON line: samples taken, seconds waited in next(), epochs
 * completed and the exactly-once check of every completed epoch (each of the
 * rank's samples delivered once: `lost` and `dup` count the breaches). It
 * runs until --seconds pass or SIGTERM/SIGINT, then prints a summary line.
 * Single-threaded (the loader's own threads aside).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feed/client.h"
#include "feed/errors.h"

#define MAX_TARGETS 64
#define MAX_SAMPLES (1u << 24)

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop) {
    }
}

static void log_fn(void *user, int level, const char *msg)
{
    (void)user;
    if (level <= 1) /* errors and warnings */
        fprintf(stderr, "feed-scale-client: %s\n", msg);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: feed-scale-client --targets HOST:PORT[,HOST:PORT...] --dataset NAME\n"
            "         [--rate SAMPLES_PER_S (0: no step)] [--batch N (32)] [--size PX (32)]\n"
            "         [--rank R --world W] [--seconds S (0: until SIGTERM)]\n"
            "         [--demand-window-ms MS (10000)] [--job NAME (the loader's default)]\n");
}

int main(int argc, char **argv)
{
    const char *targets_arg = NULL, *dataset = NULL;
    double rate = 0, seconds = 0;
    unsigned batch = 32, size = 32, rank = 0, world = 1, demand_ms = 10000;
    const char *job = NULL;
    int rc = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--targets"))
            targets_arg = v;
        else if (!strcmp(k, "--dataset"))
            dataset = v;
        else if (!strcmp(k, "--rate"))
            rate = atof(v);
        else if (!strcmp(k, "--batch"))
            batch = (unsigned)atoi(v);
        else if (!strcmp(k, "--size"))
            size = (unsigned)atoi(v);
        else if (!strcmp(k, "--rank"))
            rank = (unsigned)atoi(v);
        else if (!strcmp(k, "--world"))
            world = (unsigned)atoi(v);
        else if (!strcmp(k, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(k, "--demand-window-ms"))
            demand_ms = (unsigned)atoi(v);
        else if (!strcmp(k, "--job"))
            job = v;
        else {
            usage();
            return 2;
        }
    }
    if (!targets_arg || !dataset || batch == 0 || rate < 0) {
        usage();
        return 2;
    }
    char *copy = strdup(targets_arg);
    const char *targets[MAX_TARGETS];
    size_t n_targets = 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && n_targets < MAX_TARGETS;
         t = strtok_r(NULL, ",", &save))
        targets[n_targets++] = t;
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    feed_loader_config c;
    feed_loader_config_default(&c);
    c.targets = targets;
    c.num_targets = n_targets;
    c.dataset = dataset;
    c.transform.out_h = c.transform.out_w = size;
    c.batch_size = batch;
    c.rank = rank;
    c.job = job;
    c.world = world;
    c.dtype = FEED_DTYPE_UINT8;
    c.layout = FEED_LAYOUT_NHWC;
    c.device = FEED_DEVICE_HOST;
    c.demand_window_ms = demand_ms;
    c.unavailable_timeout_ms = 120000;
    c.batch_deadline_ms = 120000;
    c.log_fn = log_fn;
    feed_loader *l = NULL;
    uint8_t *seen = NULL;
    int err = feed_loader_open(&c, &l);
    if (err) {
        fprintf(stderr, "feed-scale-client: open: %s\n", feed_strerror(err));
        goto out;
    }
    uint64_t count = feed_loader_dataset_size(l);
    if (count == 0 || count > MAX_SAMPLES || !(seen = calloc(count, 1)))
        goto out;
    uint64_t step_ns = rate > 0 ? (uint64_t)(batch * 1e9 / rate) : 0;
    uint64_t start = now_ns(), tick = start,
             end = seconds > 0 ? start + (uint64_t)(seconds * 1e9) : 0;
    uint64_t tick_samples = 0, tick_wait = 0, total_samples = 0, total_wait = 0;
    uint64_t epoch_samples = 0, lost = 0, dup = 0, epochs = 0;
    uint32_t epoch = 0;
    /* A rank's share of an epoch: count / world, rounded up (the loader pads like
     * DistributedSampler(drop_last=False)); the bench's datasets divide evenly. */
    uint64_t share = (count + world - 1) / world;
    printf(
        "{\"event\": \"start\", \"rank\": %u, \"world\": %u, \"rate\": %.1f, \"samples\": %llu}\n",
        rank, world, rate, (unsigned long long)count);
    fflush(stdout);
    while (!stop && (!end || now_ns() < end)) {
        feed_batch *b = NULL;
        uint64_t t0 = now_ns();
        err = feed_loader_next(l, &b);
        uint64_t waited = now_ns() - t0;
        tick_wait += waited;
        total_wait += waited;
        if (err == FEED_EEOF) {
            lost += epoch_samples < share ? share - epoch_samples : 0;
            memset(seen, 0, count);
            epoch_samples = 0;
            epochs++;
            if (feed_loader_set_epoch(l, ++epoch, 0) != 0)
                break;
            continue;
        }
        if (err && err != FEED_EBADSAMPLE) {
            fprintf(stderr, "feed-scale-client: next: %s\n", feed_strerror(err));
            break;
        }
        for (uint32_t i = 0; i < b->n; i++) {
            uint64_t idx = b->indices[i];
            if (idx >= count || seen[idx]++)
                dup++;
        }
        epoch_samples += b->n;
        tick_samples += b->n;
        total_samples += b->n;
        feed_loader_release(l, b, NULL);
        if (step_ns)
            sleep_ns(step_ns);
        uint64_t now = now_ns();
        if (now - tick >= 1000000000u) {
            printf("{\"t\": %.3f, \"dt\": %.3f, \"samples\": %llu, \"wait_s\": %.4f, "
                   "\"epochs\": %llu, \"lost\": %llu, \"dup\": %llu}\n",
                   (now - start) / 1e9, (now - tick) / 1e9, (unsigned long long)tick_samples,
                   tick_wait / 1e9, (unsigned long long)epochs, (unsigned long long)lost,
                   (unsigned long long)dup);
            fflush(stdout);
            tick = now;
            tick_samples = tick_wait = 0;
        }
    }
    feed_loader_stats st;
    feed_loader_get_stats(l, &st, sizeof st);
    printf("{\"event\": \"end\", \"seconds\": %.3f, \"samples\": %llu, \"wait_s\": %.3f, "
           "\"epochs\": %llu, \"lost\": %llu, \"dup\": %llu, \"failovers\": %llu, "
           "\"reissued\": %llu}\n",
           (now_ns() - start) / 1e9, (unsigned long long)total_samples, total_wait / 1e9,
           (unsigned long long)epochs, (unsigned long long)lost, (unsigned long long)dup,
           (unsigned long long)st.failovers, (unsigned long long)st.reissued);
    rc = lost || dup ? 1 : 0;
out:
    feed_loader_close(l);
    free(seen);
    free(copy);
    return rc;
}
