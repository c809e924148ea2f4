/*
 * feed-client-probe: pulls batches from feedd servers through libfeedclient
 * and reports what the training loop would see: images/s, pixel GB/s off the
 * wire, next() wait (p50/p99/max), next()'s own CPU time, and the loader's
 * CPU per GB received. A deployment smoke test and the client's throughput
 * measurement. Single-threaded main; the loader runs its own threads.
 *
 *   feed-client-probe --target HOST:PORT [--target ...] --dataset NAME
 *       [--batch 256] [--size 224] [--batches 200] [--window 4] [--prefetch 4]
 *       [--device host|N] [--dtype u8|fp16|bf16|fp32] [--layout nchw|nhwc]
 *       [--same-epoch] [--step-us 0]
 *
 * --same-epoch repeats epoch 0 (so a server's --cache-bytes cache serves it
 * and the client side is what is measured); --step-us sleeps that long per
 * batch to stand in for a training step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/timeutil.h"

#ifdef FEED_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_TARGETS 64
#define MAX_SAMPLES 100000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void log_stderr(void *user, int level, const char *msg)
{
    (void)user;
    if (level <= 1)
        fprintf(stderr, "feed-client-probe: %s\n", msg);
}

static uint64_t process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int usage(void)
{
    fprintf(stderr, "usage: feed-client-probe --target HOST:PORT [--target ...] --dataset NAME\n"
                    "  [--batch N] [--size S] [--batches K] [--window W] [--prefetch P]\n"
                    "  [--device host|N] [--dtype u8|fp16|bf16|fp32] [--layout nchw|nhwc]\n"
                    "  [--same-epoch] [--step-us U]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *targets[MAX_TARGETS];
    size_t nt = 0;
    feed_loader_config c;
    feed_loader_config_default(&c);
    c.device = FEED_DEVICE_HOST;
    c.log_fn = log_stderr;
    uint64_t want = 200, step_us = 0;
    int same_epoch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--same-epoch")) {
            same_epoch = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--target") && nt < MAX_TARGETS)
            targets[nt++] = v;
        else if (!strcmp(a, "--dataset"))
            c.dataset = v;
        else if (!strcmp(a, "--batch"))
            c.batch_size = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--size"))
            c.transform.out_h = c.transform.out_w = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--batches"))
            want = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--window"))
            c.window_per_server = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--prefetch"))
            c.prefetch = (uint32_t)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--device"))
            c.device = !strcmp(v, "host") ? FEED_DEVICE_HOST : atoi(v);
        else if (!strcmp(a, "--layout"))
            c.layout = !strcmp(v, "nhwc") ? FEED_LAYOUT_NHWC : FEED_LAYOUT_NCHW;
        else if (!strcmp(a, "--step-us"))
            step_us = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--dtype"))
            c.dtype = !strcmp(v, "u8")     ? FEED_DTYPE_UINT8
                      : !strcmp(v, "fp16") ? FEED_DTYPE_FP16
                      : !strcmp(v, "bf16") ? FEED_DTYPE_BF16
                                           : FEED_DTYPE_FP32;
        else
            return usage();
    }
    if (!nt || !c.dataset || want == 0 || want > MAX_SAMPLES)
        return usage();
    c.targets = targets;
    c.num_targets = nt;

    feed_loader *l = NULL;
    int rc = feed_loader_open(&c, &l);
    if (rc) {
        fprintf(stderr, "feed-client-probe: open: %s\n", feed_strerror(rc));
        return 1;
    }
    uint64_t *wait = calloc(want, sizeof(*wait));
    uint64_t *cpu = calloc(want, sizeof(*cpu));
    uint64_t images = 0, got = 0;
    uint32_t epoch = 0;
    feed_loader_stats st0, st1;
    feed_loader_get_stats(l, &st0, sizeof st0);
    uint64_t t0 = feed_now_ns(), p0 = process_cpu_ns(), m0 = feed_thread_cpu_ns();
    while (got < want && wait && cpu) {
        feed_batch *b = NULL;
        uint64_t c0 = feed_thread_cpu_ns();
        rc = feed_loader_next(l, &b);
        uint64_t c1 = feed_thread_cpu_ns();
        if (rc == FEED_EEOF) {
            rc = feed_loader_set_epoch(l, same_epoch ? 0 : ++epoch, 0);
            if (rc)
                break;
            continue;
        }
        if (rc && rc != FEED_EBADSAMPLE)
            break;
        rc = 0;
#ifdef FEED_HAVE_CUDA
        if (b->ready_event)
            cudaEventSynchronize((cudaEvent_t)b->ready_event);
#endif
        wait[got] = b->wait_ns;
        cpu[got] = c1 - c0;
        got++;
        images += b->n;
        if (step_us)
            usleep((useconds_t)step_us);
        feed_loader_release(l, b, NULL);
    }
    double secs = (double)(feed_now_ns() - t0) / 1e9;
    /* Everything but the main thread (which may spin in cudaEventSynchronize). */
    uint64_t main_cpu = feed_thread_cpu_ns() - m0;
    uint64_t proc_cpu = process_cpu_ns() - p0;
    feed_loader_get_stats(l, &st1, sizeof st1);
    if (rc)
        fprintf(stderr, "feed-client-probe: stopped: %s\n", feed_strerror(rc));
    if (got) {
        qsort(wait, got, sizeof(*wait), cmp_u64);
        qsort(cpu, got, sizeof(*cpu), cmp_u64);
        double gb = (double)(st1.bytes_received - st0.bytes_received) / 1e9;
        printf("batches %llu  images %llu  %.2f s  %.0f img/s  %.3f GB/s pixels\n",
               (unsigned long long)got, (unsigned long long)images, secs, (double)images / secs,
               gb / secs);
        printf("next() wait ms: p50 %.3f  p99 %.3f  max %.3f\n", (double)wait[got / 2] / 1e6,
               (double)wait[got * 99 / 100] / 1e6, (double)wait[got - 1] / 1e6);
        printf("next() CPU us: p50 %.1f  p99 %.1f\n", (double)cpu[got / 2] / 1e3,
               (double)cpu[got * 99 / 100] / 1e3);
        printf("loader threads CPU: %.2f s (%.2f core-s per GB)  failovers %llu  reissued "
               "%llu\n",
               (double)(proc_cpu - main_cpu) / 1e9,
               gb > 0 ? (double)(proc_cpu - main_cpu) / 1e9 / gb : 0.0,
               (unsigned long long)st1.failovers, (unsigned long long)st1.reissued);
    }
    free(wait);
    free(cpu);
    feed_loader_close(l);
    return rc ? 1 : 0;
}
