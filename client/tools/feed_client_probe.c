/*
 * feed-client-probe: pulls batches from feedd servers through libfeedclient
 * and reports what the training loop would see: images/s, pixel GB/s off the
 * wire, next() wait (p50/p99/max), next()'s own CPU time, and the loader's
 * CPU per GB received. A deployment smoke test and the client's throughput
 * measurement. Single-threaded main; the loader runs its own threads.
 *
 *   feed-client-probe --target HOST:PORT [--target ...] --dataset NAME [options]
 *   (feed-client-probe --help lists every option with its default)
 *
 * Trust, as feedd's options: --auth-token-file FILE (the same file feedd reads;
 * without it the library takes $FEED_TOKEN), --tls-ca FILE, and for mutual
 * TLS --tls-cert FILE --tls-key FILE.
 *
 * --same-epoch repeats epoch 0 (so a server's --cache-bytes cache serves it
 * and the client side is what is measured); --step-us sleeps that long per
 * batch to stand in for a training step.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/opts.h"
#include "feed/strutil.h"
#include "feed/timeutil.h"
#include "feed/token_file.h"

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

static int usage(FILE *f, int rc)
{
    fprintf(f,
            "usage: feed-client-probe --target HOST:PORT [--target ...] --dataset NAME [options]\n"
            "  --target T       a feedd server (host:port, ipv4:..., dns:///name:port);\n"
            "                   repeat for several (at most %d)\n"
            "  --dataset NAME   dataset to ask for (required)\n"
            "  --batch N        batch size (default 256)\n"
            "  --size S         output side, S x S (default 224)\n"
            "  --batches K      batches to take (default 200, at most %d)\n"
            "  --window W       outstanding batches per server (default 4)\n"
            "  --prefetch P     delivery slots ready ahead (default 4)\n"
            "  --device D       host (default) or a CUDA device number\n"
            "  --dtype T        u8, fp16, bf16 or fp32 (default fp32)\n"
            "  --layout L       nchw (default) or nhwc\n"
            "  --same-epoch     repeat epoch 0 (measures the client against a server's cache)\n"
            "  --step-us U      sleep U us per batch, standing in for a training step (default 0)\n"
            "  --decode-lane M  the decode lane: off (default), cpu, gpu or auto\n"
            "  --decode-share S the share of samples the lane decodes, 0..1 (default 0)\n"
            "  --decode-lane-threads N   CPU lane threads (default 2, at most 16)\n"
            "  --unavailable-timeout-ms T   fail when no server answers for T ms (default 30000)\n"
            "  --auth-token-file FILE   bearer token sent on every call, read as feedd reads its\n"
            "                   --auth-token-file (default: $FEED_TOKEN if set, else none)\n"
            "  --tls-ca FILE    PEM CA the servers' certificates must chain to: TLS on every\n"
            "                   channel (feedd --tls-cert); default plaintext\n"
            "  --tls-cert FILE --tls-key FILE   client certificate and key for mutual TLS\n"
            "                   (feedd --tls-client-ca); with --tls-ca\n"
            "  --help           print this\n"
            "exit status: 0, 1 (failed: the reason on stderr), 2 (bad command line)\n",
            MAX_TARGETS, MAX_SAMPLES);
    return rc;
}

/* Index of name in names (NULL-terminated), or -1. */
static int pick(const char *name, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return i;
    return -1;
}

typedef struct target_list {
    const char *targets[MAX_TARGETS];
    size_t n;
} target_list;

static int add_target(void *ctx, const char *arg)
{
    target_list *t = ctx;
    if (t->n == MAX_TARGETS)
        return -1;
    t->targets[t->n++] = arg;
    return 0;
}

static int set_device(void *ctx, const char *arg)
{
    int *device = ctx;
    uint32_t u;
    if (!strcmp(arg, "host")) {
        *device = FEED_DEVICE_HOST;
        return 0;
    }
    if (feed_parse_u32(arg, 0, 1024, &u))
        return -1;
    *device = (int)u;
    return 0;
}

static int set_dtype(void *ctx, const char *arg)
{
    static const char *const names[] = {"u8", "fp16", "bf16", "fp32", NULL};
    static const feed_dtype values[] = {FEED_DTYPE_UINT8, FEED_DTYPE_FP16, FEED_DTYPE_BF16,
                                        FEED_DTYPE_FP32};
    int k = pick(arg, names);
    if (k < 0)
        return -1;
    *(feed_dtype *)ctx = values[k];
    return 0;
}

static int set_layout(void *ctx, const char *arg)
{
    static const char *const names[] = {"nchw", "nhwc", NULL};
    int k = pick(arg, names);
    if (k < 0)
        return -1;
    *(feed_layout *)ctx = k == 1 ? FEED_LAYOUT_NHWC : FEED_LAYOUT_NCHW;
    return 0;
}

static int set_lane(void *ctx, const char *arg)
{
    static const char *const names[] = {"off", "cpu", "gpu", "auto", NULL};
    static const feed_decode_lane values[] = {FEED_DECODE_LANE_OFF, FEED_DECODE_LANE_CPU,
                                              FEED_DECODE_LANE_GPU, FEED_DECODE_LANE_AUTO};
    int k = pick(arg, names);
    if (k < 0)
        return -1;
    *(feed_decode_lane *)ctx = values[k];
    return 0;
}

static int set_share(void *ctx, const char *arg)
{
    char *end = NULL;
    double v = strtod(arg, &end);
    if (!end || end == arg || *end || !(v >= 0.0 && v <= 1.0))
        return -1;
    *(double *)ctx = v;
    return 0;
}

int main(int argc, char **argv)
{
    target_list tl = {.n = 0};
    feed_loader_config c;
    feed_loader_config_default(&c);
    c.device = FEED_DEVICE_HOST;
    c.log_fn = log_stderr;
    uint64_t want = 200, step_us = 0;
    uint32_t size = 0;
    bool same_epoch = false;
    const char *token_file = NULL;
    static char token[FEED_TOKEN_FILE_MAX + 1];
    const feed_opt opts[] = {
        {.name = "target", .call = add_target, .ctx = &tl},
        {.name = "dataset", .str = &c.dataset},
        {.name = "batch", .u32 = &c.batch_size, .lo = 1, .hi = UINT32_MAX},
        {.name = "size", .u32 = &size, .lo = 1, .hi = UINT32_MAX},
        {.name = "batches", .u64 = &want, .lo = 1, .hi = MAX_SAMPLES},
        {.name = "window", .u32 = &c.window_per_server, .lo = 1, .hi = UINT32_MAX},
        {.name = "prefetch", .u32 = &c.prefetch, .lo = 1, .hi = UINT32_MAX},
        {.name = "device", .call = set_device, .ctx = &c.device},
        {.name = "dtype", .call = set_dtype, .ctx = &c.dtype},
        {.name = "layout", .call = set_layout, .ctx = &c.layout},
        {.name = "same-epoch", .flag = &same_epoch},
        {.name = "step-us", .u64 = &step_us, .lo = 0, .hi = 60000000u},
        {.name = "unavailable-timeout-ms",
         .u32 = &c.unavailable_timeout_ms,
         .lo = 1,
         .hi = UINT32_MAX},
        {.name = "decode-lane", .call = set_lane, .ctx = &c.decode_lane},
        {.name = "decode-share", .call = set_share, .ctx = &c.decode_share},
        {.name = "decode-lane-threads", .u32 = &c.decode_lane_threads, .lo = 0, .hi = 16},
        {.name = "auth-token-file", .str = &token_file},
        {.name = "tls-ca", .str = &c.tls_ca_file},
        {.name = "tls-cert", .str = &c.tls_cert_file},
        {.name = "tls-key", .str = &c.tls_key_file},
        {.name = NULL},
    };
    int first;
    int pr = feed_opts_parse("feed-client-probe", opts, argc, argv, &first);
    if (pr == 1)
        return usage(stdout, 0);
    if (pr || first != argc)
        return usage(stderr, 2);
    if (size)
        c.transform.out_h = c.transform.out_w = size;
    if (!tl.n || !c.dataset) {
        fprintf(stderr, "feed-client-probe: --target and --dataset are required\n");
        return usage(stderr, 2);
    }
    c.targets = tl.targets;
    c.num_targets = tl.n;
    if (token_file) {
        char err[512];
        if (feed_token_file_read(token_file, "--auth-token-file", token, sizeof token, err,
                                 sizeof err)) {
            fprintf(stderr, "feed-client-probe: %s\n", err);
            return 1;
        }
        c.token = token;
    }

    feed_loader *l = NULL;
    int rc = feed_loader_open(&c, &l);
    /* The loader keeps its own copy: leave none here. */
    explicit_bzero(token, sizeof token);
    if (rc) {
        fprintf(stderr, "feed-client-probe: open: %s (%s)\n", feed_strerror(rc), feed_err_name(rc));
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
        fprintf(stderr, "feed-client-probe: stopped: %s (%s)\n", feed_strerror(rc),
                feed_err_name(rc));
    if (got) {
        qsort(wait, got, sizeof(*wait), cmp_u64);
        qsort(cpu, got, sizeof(*cpu), cmp_u64);
        double gb = (double)(st1.bytes_received - st0.bytes_received) / 1e9;
        printf("batches %llu  images %llu  %.2f s  %.0f img/s  %.3f GB/s received\n",
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
        if (c.decode_lane != FEED_DECODE_LANE_OFF)
            printf("decode lane: %llu samples decoded here, %llu sent back to the servers\n",
                   (unsigned long long)(st1.lane_decoded - st0.lane_decoded),
                   (unsigned long long)(st1.lane_rerequested - st0.lane_rerequested));
    }
    free(wait);
    free(cpu);
    feed_loader_close(l);
    return rc ? 1 : 0;
}
