/*
 * feed-wire-bench: how fast batches cross the wire from feedd servers to one
 * client process, as the servers' worker threads grow.
 *
 * Two modes separate the wire from preprocessing:
 *  - cache:   servers serve the dataset from the decoded-sample cache
 *             (,cache=256 and --cache-bytes) and the client asks for the
 *             same working set over and over, so after the warm-up every
 *             sample is a hit: no JPEG decoding, only the crop and resize
 *             from memory (~0.08 ms an image per core), gRPC, protobuf and
 *             the loopback/network;
 *  - preproc: no cache, indices sweep the dataset (a new epoch per pass):
 *             every sample is read, decoded and augmented.
 *
 * Servers are spawned by this binary (--servers N, fork/exec of feedd on
 * 127.0.0.1 port 0) or given (--target HOST:PORT, repeatable; then --threads
 * only labels the rows). Each stream has its own channel (its own TCP
 * connection) and its own client thread doing blocking receives; received
 * messages are counted, not copied (--verify unpacks each and checks the
 * CRC32C). Prints one table row per (mode, threads); --csv appends rows.
 *
 * Threads: main spawns servers and times; one client thread per stream.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>

#include "feed/crc32c.h"
#include "feed/opts.h"
#include "feed/timeutil.h"
#include "feedtest.h"
#include "feedtest_grpc.h"

#define MAX_SERVERS 32
#define MAX_STREAMS 512
#define MAX_LIST 32

typedef struct options {
    char feedd[PATH_MAX];
    char gen[PATH_MAX];
    char dataset[PATH_MAX];
    const char *targets[MAX_SERVERS];
    int n_targets;
    int servers;
    int streams_per_server;
    unsigned threads[MAX_LIST];
    int n_threads;
    bool mode_cache, mode_preproc;
    unsigned batch, side, window, working_set, cq_threads;
    double seconds, warmup;
    bool verify;
    const char *csv;
} options;

typedef struct client {
    const options *o;
    const char *target;
    int id;
    bool cache_mode;
    uint64_t num_samples;
    pthread_t thread;
    atomic_bool *stop;
    atomic_uint_fast64_t bytes, images;
    int failed;
    char error[256];
} client;

static void usage(void)
{
    fprintf(
        stderr,
        "usage: feed-wire-bench [options]\n"
        "  --servers N            spawn N feedd servers on 127.0.0.1 (default 1)\n"
        "  --target HOST:PORT     use a running server instead (repeatable; its dataset\n"
        "                         must be named 'bench' and, for cache mode, be served with "
        ",cache=SIDE)\n"
        "  --threads LIST         server worker threads per row, e.g. 1,2,4,8,16 (default 1,2)\n"
        "  --mode LIST            cache,preproc (default both)\n"
        "  --streams N            streams (connections) per server (default 2)\n"
        "  --batch N              samples per batch (default 64)\n"
        "  --side PX              output side (default 224: 150,528 bytes a sample)\n"
        "  --window N             batches outstanding per stream (default 4)\n"
        "  --working-set N        distinct samples in cache mode (default 256)\n"
        "  --cq-threads N         feedd --cq-threads (default: feedd's)\n"
        "  --seconds S            measured time per row (default 5)\n"
        "  --warmup S             unmeasured time first (default 2)\n"
        "  --dataset PATH         ImageFolder or pack (default $FEED_SAMPLE_DIR, else the\n"
        "                         ImageNet sample, else one made by feed-gen-dataset)\n"
        "  --feedd PATH           feedd binary (default: next to this build)\n"
        "  --gen PATH             feed-gen-dataset binary (default: next to this build)\n"
        "  --verify               unpack every batch and check its CRC32C\n"
        "  --csv FILE             append rows as CSV\n");
}

static int parse_list(const char *s, unsigned *out, int cap)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v = strtol(tok, NULL, 10);
        if (v <= 0 || v > 4096 || n >= cap)
            return -1;
        out[n++] = (unsigned)v;
    }
    return n;
}

static void build_dir_default(char *out, size_t cap, const char *rel)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    out[0] = '\0';
    if (n <= 0)
        return;
    exe[n] = '\0';
    /* <build>/bench/wire/feed-wire-bench */
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash)
            return;
        *slash = '\0';
    }
    snprintf(out, cap, "%.3900s/%s", exe, rel);
}

/* --feedd, --gen, --dataset: a path into a PATH_MAX buffer. */
static int set_path(void *ctx, const char *arg)
{
    return snprintf(ctx, PATH_MAX, "%s", arg) >= PATH_MAX;
}

static int add_target(void *ctx, const char *arg)
{
    options *o = ctx;
    if (o->n_targets >= MAX_SERVERS)
        return -1;
    o->targets[o->n_targets++] = arg;
    return 0;
}

static int set_threads(void *ctx, const char *arg)
{
    options *o = ctx;
    o->n_threads = parse_list(arg, o->threads, MAX_LIST);
    return 0;
}

static int set_mode(void *ctx, const char *arg)
{
    options *o = ctx;
    o->mode_cache = strstr(arg, "cache") != NULL;
    o->mode_preproc = strstr(arg, "preproc") != NULL;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){.threads = {1, 2},
                   .n_threads = 2,
                   .mode_cache = true,
                   .mode_preproc = true,
                   .batch = 64,
                   .side = 224,
                   .window = 4,
                   .working_set = 256,
                   .seconds = 5,
                   .warmup = 2};
    build_dir_default(o->feedd, sizeof o->feedd, "server/feedd");
    build_dir_default(o->gen, sizeof o->gen, "server/tools/feed-gen-dataset");
    uint32_t servers = 1, streams = 2;
    const feed_opt opts[] = {
        {.name = "servers", .u32 = &servers, .lo = 1, .hi = MAX_SERVERS},
        {.name = "target", .call = add_target, .ctx = o},
        {.name = "threads", .call = set_threads, .ctx = o},
        {.name = "mode", .call = set_mode, .ctx = o},
        {.name = "streams", .u32 = &streams, .lo = 1, .hi = MAX_STREAMS},
        {.name = "batch", .u32 = &o->batch, .lo = 1, .hi = UINT32_MAX},
        {.name = "side", .u32 = &o->side, .lo = 8, .hi = 2048},
        {.name = "window", .u32 = &o->window, .lo = 1, .hi = UINT32_MAX},
        {.name = "working-set", .u32 = &o->working_set, .lo = 1, .hi = UINT32_MAX},
        {.name = "cq-threads", .u32 = &o->cq_threads, .lo = 0, .hi = UINT32_MAX},
        {.name = "seconds", .dbl = &o->seconds, .dlo = 1e-3, .dhi = 1e6},
        {.name = "warmup", .dbl = &o->warmup, .dlo = 0, .dhi = 1e6},
        {.name = "dataset", .call = set_path, .ctx = o->dataset},
        {.name = "feedd", .call = set_path, .ctx = o->feedd},
        {.name = "gen", .call = set_path, .ctx = o->gen},
        {.name = "verify", .flag = &o->verify},
        {.name = "csv", .str = &o->csv},
        {.name = NULL},
    };
    int first;
    int pr = feed_opts_parse("feed-wire-bench", opts, argc, argv, &first);
    if (pr == 1) {
        usage();
        exit(0);
    }
    if (pr || first != argc) {
        usage();
        return -1;
    }
    o->servers = (int)servers;
    o->streams_per_server = (int)streams;
    if (o->n_targets)
        o->servers = o->n_targets;
    if (o->servers < 1 || o->servers > MAX_SERVERS || o->streams_per_server < 1 ||
        o->servers * o->streams_per_server > MAX_STREAMS || o->n_threads <= 0 || o->batch < 1 ||
        o->side < 8 || o->side > 2048 || o->window < 1 || o->working_set < 1 || o->seconds <= 0 ||
        (!o->mode_cache && !o->mode_preproc)) {
        fprintf(stderr, "feed-wire-bench: bad option values (see --help)\n");
        return -1;
    }
    return 0;
}

static int send_req(feedtest_stream *s, Feed__V1__SessionOpen *open, uint64_t id, uint32_t epoch,
                    const uint64_t *idx, unsigned n)
{
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    r.open = open;
    r.batch_id = id;
    r.epoch = epoch;
    r.n_indices = n;
    r.indices = (uint64_t *)idx;
    return feedtest_stream_send(s, &r);
}

static void plan_batch(const client *c, uint64_t b, uint64_t *idx, uint32_t *epoch)
{
    const options *o = c->o;
    if (c->cache_mode) {
        uint64_t ws = o->working_set < c->num_samples ? o->working_set : c->num_samples;
        for (unsigned i = 0; i < o->batch; i++)
            idx[i] = (b * o->batch + i) % ws;
        *epoch = 0;
    } else {
        uint64_t base = (uint64_t)c->id * 7919 + b * o->batch;
        for (unsigned i = 0; i < o->batch; i++)
            idx[i] = (base + i) % c->num_samples;
        *epoch = (uint32_t)(base / c->num_samples);
    }
}

static bool verify_batch(grpc_byte_buffer *bb, unsigned want_n)
{
    grpc_byte_buffer_reader r;
    bool ok = false;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return false;
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    Feed__V1__Batch *b =
        feed__v1__batch__unpack(NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    if (b) {
        ok = b->n_indices == want_n && b->crc32c == feed_crc32c(0, b->data.data, b->data.len);
        feed__v1__batch__free_unpacked(b, NULL);
    }
    grpc_slice_unref(all);
    return ok;
}

static void *client_main(void *arg)
{
    client *c = arg;
    const options *o = c->o;
    grpc_channel *ch = feedtest_channel(c->target);
    feedtest_stream s;
    uint64_t *idx = calloc(o->batch, sizeof *idx);
    uint64_t next = 0;
    uint32_t epoch = 0;
    size_t sample_bytes = (size_t)o->side * o->side * 3;
    Feed__V1__TransformSpec spec = FEED__V1__TRANSFORM_SPEC__INIT;
    spec.out_height = spec.out_width = o->side;
    spec.flip_prob = 0.5;
    Feed__V1__SessionOpen open = FEED__V1__SESSION_OPEN__INIT;
    open.dataset = (char *)"bench";
    open.transform = &spec;
    open.seed = 1;
    open.window = o->window;
    open.client_name = (char *)"feed-wire-bench";
    if (!idx || feedtest_stream_open(ch, 3600, &s) < 0) {
        snprintf(c->error, sizeof c->error, "cannot open a stream to %s", c->target);
        c->failed = 1;
        goto out;
    }
    for (unsigned k = 0; k < o->window; k++, next++) {
        plan_batch(c, next, idx, &epoch);
        if (send_req(&s, k == 0 ? &open : NULL, next, epoch, idx, o->batch) < 0)
            break;
    }
    bool first = true;
    while (!atomic_load(c->stop)) {
        grpc_byte_buffer *bb = NULL;
        if (feedtest_stream_recv_bb(&s, &bb) != 1)
            break;
        if ((o->verify || first) && !verify_batch(bb, o->batch)) {
            snprintf(c->error, sizeof c->error, "bad batch from %s (CRC or size)", c->target);
            c->failed = 1;
        }
        first = false;
        grpc_byte_buffer_destroy(bb);
        atomic_fetch_add(&c->bytes, (uint64_t)o->batch * sample_bytes);
        atomic_fetch_add(&c->images, o->batch);
        plan_batch(c, next, idx, &epoch);
        if (send_req(&s, NULL, next++, epoch, idx, o->batch) < 0)
            break;
    }
    if (!atomic_load(c->stop) && !c->failed) {
        char details[256];
        feedtest_stream_cancel(&s);
        grpc_status_code code = feedtest_stream_finish(&s, details, sizeof details);
        snprintf(c->error, sizeof c->error, "stream to %.64s ended early: status %d %.120s",
                 c->target, (int)code, details);
        c->failed = 1;
        goto out;
    }
    feedtest_stream_cancel(&s);
    feedtest_stream_finish(&s, NULL, 0);
out:
    free(idx);
    grpc_channel_destroy(ch);
    return NULL;
}

/* utime + stime of a process in seconds. */
static double proc_cpu_s(pid_t pid)
{
    return (double)feed_test_proc_cpu_ns(pid) / 1e9;
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

typedef struct row {
    const char *mode;
    unsigned threads;
    int servers, streams;
    double gbps, imgps, srv_cores, cli_cores;
} row;

static int run_row(const options *o, bool cache_mode, unsigned threads, row *out)
{
    feed_test_server srv[MAX_SERVERS];
    const char *targets[MAX_SERVERS];
    client *clients = NULL;
    int n_srv = 0, rc = -1, n_cli = 0;
    atomic_bool stop;
    atomic_init(&stop, false);
    memset(srv, 0, sizeof srv);
    uint64_t num_samples = 0;

    if (o->n_targets) {
        for (int i = 0; i < o->n_targets; i++)
            targets[i] = o->targets[i];
    } else {
        char tbuf[16], dbuf[PATH_MAX + 24], cbuf[32], wbuf[16], qbuf[16];
        /* A decoded image at side 256 is well under 1 MiB; the slot tables are 8 bytes a sample. */
        uint64_t ws = (uint64_t)o->working_set << 20;
        snprintf(tbuf, sizeof tbuf, "%u", threads);
        snprintf(dbuf, sizeof dbuf, "bench=%s%s", o->dataset, cache_mode ? ",cache=256" : "");
        snprintf(cbuf, sizeof cbuf, "%llu", (unsigned long long)(ws + (64u << 20)));
        snprintf(wbuf, sizeof wbuf, "%u", o->window);
        snprintf(qbuf, sizeof qbuf, "%u", o->cq_threads);
        const char *args[24];
        int n = 0;
        args[n++] = "--threads";
        args[n++] = tbuf;
        args[n++] = "--dataset";
        args[n++] = dbuf;
        args[n++] = "--log-level";
        args[n++] = "warn";
        args[n++] = "--max-window";
        args[n++] = wbuf;
        args[n++] = "--max-memory";
        args[n++] = "8G";
        args[n++] = "--max-stream-memory";
        args[n++] = "4G";
        if (cache_mode) {
            args[n++] = "--cache-bytes";
            args[n++] = cbuf;
        }
        if (o->cq_threads) {
            args[n++] = "--cq-threads";
            args[n++] = qbuf;
        }
        args[n] = NULL;
        for (; n_srv < o->servers; n_srv++) {
            if (feed_test_server_start(args, &srv[n_srv]) < 0) {
                fprintf(stderr, "feed-wire-bench: cannot start feedd (%s)\n", o->feedd);
                goto out;
            }
            targets[n_srv] = srv[n_srv].target;
        }
    }
    {
        grpc_channel *ch = feedtest_channel(targets[0]);
        grpc_status_code code;
        Feed__V1__DescribeResponse *d = feedtest_describe(ch, "bench", &code);
        grpc_channel_destroy(ch);
        if (!d || d->n_datasets != 1) {
            fprintf(stderr, "feed-wire-bench: %s: Describe(bench) failed (status %d)\n", targets[0],
                    (int)code);
            goto out;
        }
        num_samples = d->datasets[0]->num_samples;
        feed__v1__describe_response__free_unpacked(d, NULL);
    }

    n_cli = o->servers * o->streams_per_server;
    clients = calloc((size_t)n_cli, sizeof *clients);
    if (!clients)
        goto out;
    for (int i = 0; i < n_cli; i++) {
        client *c = &clients[i];
        c->o = o;
        c->target = targets[i % o->servers];
        c->id = i;
        c->cache_mode = cache_mode;
        c->num_samples = num_samples;
        c->stop = &stop;
        atomic_init(&c->bytes, 0);
        atomic_init(&c->images, 0);
        if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
            n_cli = i;
            atomic_store(&stop, true);
            goto join;
        }
    }
    sleep_s(o->warmup);
    uint64_t b0 = 0, i0 = 0, b1 = 0, i1 = 0;
    double s0 = 0, s1 = 0;
    for (int i = 0; i < n_cli; i++) {
        b0 += atomic_load(&clients[i].bytes);
        i0 += atomic_load(&clients[i].images);
    }
    for (int i = 0; i < n_srv; i++)
        s0 += proc_cpu_s(srv[i].pid);
    double c0 = self_cpu_s();
    uint64_t t0 = feed_now_ns();
    sleep_s(o->seconds);
    uint64_t t1 = feed_now_ns();
    double c1 = self_cpu_s();
    for (int i = 0; i < n_srv; i++)
        s1 += proc_cpu_s(srv[i].pid);
    for (int i = 0; i < n_cli; i++) {
        b1 += atomic_load(&clients[i].bytes);
        i1 += atomic_load(&clients[i].images);
    }
    double dt = (double)(t1 - t0) / 1e9;
    out->mode = cache_mode ? "cache" : "preproc";
    out->threads = threads;
    out->servers = o->servers;
    out->streams = n_cli;
    out->gbps = (double)(b1 - b0) / dt / 1e9;
    out->imgps = (double)(i1 - i0) / dt;
    out->srv_cores = n_srv ? (s1 - s0) / dt : 0;
    out->cli_cores = (c1 - c0) / dt;
    rc = 0;
    atomic_store(&stop, true);
join:
    /* Stopping servers ends blocked receives; for --target, cancelling does. */
    for (int i = 0; i < n_srv; i++)
        feed_test_server_stop_timeout(&srv[i], 20000);
    n_srv = 0;
    for (int i = 0; i < n_cli; i++) {
        pthread_join(clients[i].thread, NULL);
        if (clients[i].failed && rc == 0) {
            fprintf(stderr, "feed-wire-bench: %s\n", clients[i].error);
            rc = -1;
        }
    }
out:
    for (int i = 0; i < n_srv; i++)
        feed_test_server_stop_timeout(&srv[i], 20000);
    free(clients);
    return rc;
}

static int ensure_dataset(options *o, char *tmp, size_t cap)
{
    tmp[0] = '\0';
    if (o->dataset[0])
        return 0;
    const char *env = getenv("FEED_SAMPLE_DIR");
    const char *fallback = "/work/shared/datasets/imagenet-sample";
    if (env && access(env, R_OK) == 0) {
        snprintf(o->dataset, sizeof o->dataset, "%s", env);
        return 0;
    }
    if (access(fallback, R_OK) == 0) {
        snprintf(o->dataset, sizeof o->dataset, "%s", fallback);
        return 0;
    }
    if (feed_test_tmpdir("feed-wire-bench", tmp, cap) < 0)
        return -1;
    snprintf(o->dataset, sizeof o->dataset, "%s/ds", tmp);
    char cmd[2 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "'%s' '%s' --classes 10 --per-class 40 >/dev/null", o->gen,
             o->dataset);
    if (system(cmd) != 0) {
        fprintf(stderr, "feed-wire-bench: no dataset and %s failed\n", o->gen);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    char tmp[PATH_MAX];
    int rc = 1;
    if (parse_args(argc, argv, &o) < 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    setenv("FEED_FEEDD", o.feedd, 1);
    if (ensure_dataset(&o, tmp, sizeof tmp) < 0)
        return 1;
    grpc_init();
    FILE *csv = o.csv ? fopen(o.csv, "a") : NULL;
    if (o.csv && !csv) {
        fprintf(stderr, "feed-wire-bench: cannot open %s\n", o.csv);
        goto out;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# feed-wire-bench: %d server(s), %d stream(s) each, batch %u x %ux%ux3 (%.1f MB), "
           "window %u, %.0f s per row after %.0f s warm-up, %ld cores on this host\n"
           "# dataset %s\n",
           o.servers, o.streams_per_server, o.batch, o.side, o.side,
           (double)o.batch * o.side * o.side * 3 / 1e6, o.window, o.seconds, o.warmup, cores,
           o.dataset);
    printf("| mode | servers | threads/server | streams | GB/s | images/s | server cores used | "
           "client cores used |\n|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    rc = 0;
    for (int m = 0; m < 2; m++) {
        bool cache_mode = m == 0;
        if ((cache_mode && !o.mode_cache) || (!cache_mode && !o.mode_preproc))
            continue;
        for (int t = 0; t < o.n_threads; t++) {
            row r;
            if (run_row(&o, cache_mode, o.threads[t], &r) < 0) {
                rc = 1;
                continue;
            }
            printf("| %s | %d | %u | %d | %.2f | %.0f | %.2f | %.2f |\n", r.mode, r.servers,
                   r.threads, r.streams, r.gbps, r.imgps, r.srv_cores, r.cli_cores);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%s,%d,%u,%d,%u,%u,%u,%.4f,%.1f,%.3f,%.3f\n", r.mode, r.servers,
                        r.threads, r.streams, o.batch, o.side, o.window, r.gbps, r.imgps,
                        r.srv_cores, r.cli_cores);
        }
    }
out:
    if (csv)
        fclose(csv);
    grpc_shutdown();
    if (tmp[0])
        feed_test_rmtree(tmp);
    return rc;
}
