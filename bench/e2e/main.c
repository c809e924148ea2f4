/*
 * feed-bench: does disaggregated preprocessing remove GPU starvation, and by
 * how much? Runs the same training step (step.h) on the same dataset, with the
 * same transform and seed, fed by three sources in turn (source.h): sync
 * (decode in the training loop), local (loader threads on this host), remote
 * (libfeedclient from feedd servers, which it can spawn and pin itself). For
 * each it measures images/s, the step's share of wall time from CUDA events,
 * NVML utilisation and PCIe RX, the batch wait distribution and the CPU time
 * loading costs this host; writes CSV + JSON into --out and a table to stdout.
 *
 * Threads: main runs the training loop; the sources, NVML sampler and client
 * run their own. A run keeps at most two steps in flight: batch k+1 is
 * fetched while step k runs on the GPU, as a training loop that reads its
 * loss one step late does.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"
#include "feed/timeutil.h"
#include "feed/transform.h"
#include "nvml.h"
#include "report.h"
#include "source.h"
#include "feedtest.h"
#include "step.h"

#define MAX_SERVERS 64
#define MAX_RECORDS 2000000u
#define MAX_NVML 100000u
#define MAX_BATCH 4096u
#define INFLIGHT 2u
#define DEFAULT_DATASET_NAME "bench"
#define DEFAULT_DATA "data/default"

/*
 * Presets: GPU time per image of a real training step, measured by
 * bench/e2e/calibrate_presets.py on one H200 (torch 2.11.0+cu130,
 * torchvision 0.26, bf16 autocast, channels_last, SGD with momentum, batch
 * 256, synthetic input on the GPU, eager mode), 2026-11-29; the raw output is
 * in bench/results/e2e-presets.md. The benchmark reproduces only the time.
 */
typedef struct model_preset {
    const char *name;
    double us_per_image;
} model_preset;

static const model_preset presets[] = {
    {"resnet18", 75.5},
    {"resnet50", 211.7},
    {"vit-b16", 435.3},
    {"mlp", 0.0}, /* the bare MLP, no ballast */
};
static const char preset_source[] =
    "GPU us/image of torchvision's model training step (bf16 autocast, batch 256) measured on "
    "an H200 by bench/e2e/calibrate_presets.py; reproduced by calibrated ballast GEMMs";

typedef struct options {
    char sources[64];
    const char *data;
    const char *out;
    const char *device; /* auto, cpu, cuda, none */
    const char *model;
    double us_per_image; /* < 0: the preset's */
    uint32_t batch, steps, warmup, hidden, local_threads;
    double seconds, lr;
    uint64_t seed;
    const char *servers;
    uint32_t spawn, server_threads;
    const char *server_cpus;
    const char *feedd, *gen_tool;
    const char *dataset_name; /* asked of every server, and what spawned ones serve */
    uint32_t window, prefetch, gen_classes, gen_per_class;
    uint32_t size;
    uint32_t rank, world; /* remote: this client's share of the epoch */
    bool unordered;
} options;

static volatile sig_atomic_t interrupted;

static void usage(FILE *f)
{
    feed_loader_config lc;
    feed_loader_config_default(&lc);
    fputs("usage: feed-bench [options]\n"
          "  --source LIST        sync,local,remote (default: all three, in that order)\n"
          "  --data PATH          ImageFolder dir or pack (default: data/default, generated\n"
          "                       with feed-gen-dataset when missing)\n"
          "  --dataset NAME       remote: the dataset name asked of the servers (and served\n"
          "                       by spawned ones; default " DEFAULT_DATASET_NAME ")\n"
          "  --out DIR            results: summary.csv/json, batches.csv, nvml.csv (default "
          "out/bench)\n"
          "  --device D           auto (default: CUDA if a device is found), cuda, cpu, or\n"
          "                       none: a simulated step that only takes the model's time\n"
          "                       per image (no GPU, almost no CPU: many clients per host)\n"
          "  --model P            resnet18, resnet50, vit-b16, mlp (GPU time per image of the\n"
          "                       step; default resnet50 on a GPU, mlp on the CPU)\n"
          "  --us-per-image X     override the preset's GPU time per image\n"
          "  --step-us-per-image X   the same (the simulated step's time per image)\n"
          "  --rank R --world W   remote: this client is rank R of W (DistributedSampler\n"
          "                       split of each epoch; default 0 of 1)\n"
          "  --batch N            batch size (default 256 on a GPU, 32 on the CPU)\n"
          "  --steps N            measured batches per source (0: until --seconds)\n"
          "  --seconds S          measured seconds per source (default 30 GPU, 10 CPU; 0: "
          "--steps)\n"
          "  --warmup N           batches before measuring (default 5 GPU, 2 CPU)\n"
          "  --local-threads N    loader threads of the local source (default: CPUs available)\n"
          "  --servers LIST       remote: host:port,... of running feedd servers\n"
          "  --spawn-servers M    remote: start M feedd here (default 1 unless --servers)\n"
          "  --server-threads K   threads per spawned feedd (default: CPUs available)\n"
          "  --server-cpus L      pin spawned feedd: one CPU list for all, or one per server\n"
          "                       separated by ':' (e.g. 4-9:10-15)\n"
          "  --feedd PATH         feedd binary (default: next to this build)\n"
          "  --gen-tool PATH      feed-gen-dataset binary (default: next to this build)\n",
          f);
    fprintf(f,
            "  --window N           remote: outstanding batches per server (default %u)\n"
            "  --prefetch N         remote: delivery slots ready ahead of next() (default %u)\n",
            lc.window_per_server, lc.prefetch);
    fputs("  --unordered          remote: batches as they arrive, not in plan order\n"
          "  --hidden N --lr X --seed N --size N   model width, SGD rate, seed, image side\n",
          f);
}

static const model_preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

static int parse_double(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        return FEED_EINVAL;
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    enum {
        O_SOURCE = 256,
        O_DATA,
        O_DATASET,
        O_OUT,
        O_DEVICE,
        O_MODEL,
        O_USPI,
        O_BATCH,
        O_STEPS,
        O_SECONDS,
        O_WARMUP,
        O_LOCAL,
        O_SERVERS,
        O_SPAWN,
        O_SRVTHREADS,
        O_SRVCPUS,
        O_FEEDD,
        O_GEN,
        O_WINDOW,
        O_PREFETCH,
        O_HIDDEN,
        O_LR,
        O_SEED,
        O_SIZE,
        O_UNORDERED,
        O_RANK,
        O_WORLD,
        O_HELP
    };
    static const struct option longopts[] = {
        {"source", required_argument, NULL, O_SOURCE},
        {"data", required_argument, NULL, O_DATA},
        {"dataset", required_argument, NULL, O_DATASET},
        {"out", required_argument, NULL, O_OUT},
        {"device", required_argument, NULL, O_DEVICE},
        {"model", required_argument, NULL, O_MODEL},
        {"us-per-image", required_argument, NULL, O_USPI},
        {"step-us-per-image", required_argument, NULL, O_USPI},
        {"rank", required_argument, NULL, O_RANK},
        {"world", required_argument, NULL, O_WORLD},
        {"batch", required_argument, NULL, O_BATCH},
        {"steps", required_argument, NULL, O_STEPS},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"local-threads", required_argument, NULL, O_LOCAL},
        {"servers", required_argument, NULL, O_SERVERS},
        {"spawn-servers", required_argument, NULL, O_SPAWN},
        {"server-threads", required_argument, NULL, O_SRVTHREADS},
        {"server-cpus", required_argument, NULL, O_SRVCPUS},
        {"feedd", required_argument, NULL, O_FEEDD},
        {"gen-tool", required_argument, NULL, O_GEN},
        {"window", required_argument, NULL, O_WINDOW},
        {"prefetch", required_argument, NULL, O_PREFETCH},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"lr", required_argument, NULL, O_LR},
        {"seed", required_argument, NULL, O_SEED},
        {"size", required_argument, NULL, O_SIZE},
        {"unordered", no_argument, NULL, O_UNORDERED},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    uint32_t u = 0;
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_SOURCE:
            if (strlen(optarg) >= sizeof o->sources)
                bad = 1;
            else
                snprintf(o->sources, sizeof o->sources, "%s", optarg);
            break;
        case O_DATA:
            o->data = optarg;
            break;
        case O_DATASET:
            o->dataset_name = optarg;
            break;
        case O_OUT:
            o->out = optarg;
            break;
        case O_DEVICE:
            o->device = optarg;
            break;
        case O_MODEL:
            o->model = optarg;
            break;
        case O_USPI:
            bad |= parse_double(optarg, &o->us_per_image) != 0;
            break;
        case O_BATCH:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->batch) != 0;
            break;
        case O_RANK:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->rank) != 0;
            break;
        case O_WORLD:
            bad |= feed_parse_u32(optarg, 1, UINT32_MAX, &o->world) != 0;
            break;
        case O_STEPS:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->steps) != 0;
            break;
        case O_SECONDS:
            bad |= parse_double(optarg, &o->seconds) != 0;
            break;
        case O_WARMUP:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->warmup) != 0;
            break;
        case O_LOCAL:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->local_threads) != 0;
            break;
        case O_SERVERS:
            o->servers = optarg;
            break;
        case O_SPAWN:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->spawn) != 0;
            break;
        case O_SRVTHREADS:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->server_threads) != 0;
            break;
        case O_SRVCPUS:
            o->server_cpus = optarg;
            break;
        case O_FEEDD:
            o->feedd = optarg;
            break;
        case O_GEN:
            o->gen_tool = optarg;
            break;
        case O_WINDOW:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->window) != 0;
            break;
        case O_PREFETCH:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->prefetch) != 0;
            break;
        case O_HIDDEN:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->hidden) != 0;
            break;
        case O_LR:
            bad |= parse_double(optarg, &o->lr) != 0;
            break;
        case O_SEED:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &u) != 0;
            o->seed = u;
            break;
        case O_SIZE:
            bad |= feed_parse_u32(optarg, 0, UINT32_MAX, &o->size) != 0;
            break;
        case O_UNORDERED:
            o->unordered = true;
            break;
        case O_HELP:
            usage(stdout);
            exit(0);
        default:
            bad = 1;
            break;
        }
    }
    if (bad || optind != argc) {
        usage(stderr);
        return FEED_EINVAL;
    }
    return 0;
}

/* Directory of this executable, for finding feedd and the tools beside it. */
static void exe_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) {
        snprintf(out, cap, ".");
        return;
    }
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
}

/* First existing executable of dir/../../rel_build and dir/name. */
static void find_tool(const char *dir, const char *rel_build, const char *name, char *out,
                      size_t cap)
{
    snprintf(out, cap, "%s/../../%s", dir, rel_build);
    if (access(out, X_OK) == 0)
        return;
    snprintf(out, cap, "%s/%s", dir, name);
}

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return FEED_EINVAL;
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return FEED_EIO;
        *p = '/';
    }
    return (mkdir(tmp, 0755) == 0 || errno == EEXIST) ? 0 : FEED_EIO;
}

/* Runs feed-gen-dataset to make the default dataset; 0 or FEED_EIO. */
static int generate_dataset(const char *tool, const char *dir, uint32_t classes, uint32_t per_class)
{
    char cls[16], per[16];
    snprintf(cls, sizeof cls, "%u", classes);
    snprintf(per, sizeof per, "%u", per_class);
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = '\0';
        if (mkdir_p(parent) != 0)
            return FEED_EIO;
    }
    fprintf(stderr, "feed-bench: generating the default dataset into %s (%s classes x %s)\n", dir,
            cls, per);
    pid_t pid = fork();
    if (pid < 0)
        return FEED_EIO;
    if (pid == 0) {
        const char *argv[] = {tool, dir, "--classes", cls, "--per-class", per, NULL};
        execv(tool, (char *const *)argv);
        fprintf(stderr, "feed-bench: cannot run %s: %s\n", tool, strerror(errno));
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    return (WIFEXITED(ws) && WEXITSTATUS(ws) == 0) ? 0 : FEED_EIO;
}

static uint64_t process_cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

typedef struct bench_ctx {
    options opt;
    bench_step *step;
    nvml_monitor *nvml;
    feed_test_server servers[MAX_SERVERS];
    uint32_t nspawned;
    bool progress_tty;
} bench_ctx;

static uint64_t servers_cpu_ns(const bench_ctx *c)
{
    uint64_t ns = 0;
    for (uint32_t i = 0; i < c->nspawned; i++)
        ns += feed_test_proc_cpu_ns(c->servers[i].pid);
    return ns;
}

static void progress(const bench_ctx *c, const run_result *r, uint64_t window_t0, size_t first,
                     size_t retired, double *tmp)
{
    size_t n = r->nrecords > first ? r->nrecords - first : 0;
    size_t k = n < 1000 ? n : 1000; /* p99 of the last 1000 batches */
    double waits[1000];
    double secs = (double)(feed_now_ns() - window_t0) / 1e9;
    for (size_t i = 0; i < k; i++)
        waits[i] = r->records[r->nrecords - k + i].wait_ms;
    double p99 = k ? quantile(waits, k, 0.99, tmp) : 0.0;
    double ips = secs > 0 ? (double)n * c->opt.batch / secs : 0.0;
    double loss = retired ? r->records[retired - 1].loss : 0.0;
    fprintf(stderr, "%s  %-6s batch %6zu  %9.1f img/s  wait p99 %8.3f ms  loss %.3f   %s",
            c->progress_tty ? "\r" : "", r->source, r->nrecords, ips, p99, loss,
            c->progress_tty ? "" : "\n");
}

static int grow_records(run_result *r, size_t *cap)
{
    if (r->nrecords < *cap)
        return 0;
    if (*cap >= MAX_RECORDS)
        return FEED_ETOOBIG;
    size_t ncap = *cap ? *cap * 2 : 1024;
    if (ncap > MAX_RECORDS)
        ncap = MAX_RECORDS;
    batch_record *p = realloc(r->records, ncap * sizeof *p);
    if (!p)
        return FEED_ENOMEM;
    r->records = p;
    *cap = ncap;
    return 0;
}

/* Retire steps until at most `keep` are in flight, filling their records. */
static int retire_to(bench_ctx *c, run_result *r, size_t *retired, uint32_t keep)
{
    int rc = 0;
    step_result sr;
    while (c->step->ops->inflight(c->step) > keep) {
        rc = c->step->ops->retire(c->step, &sr);
        if (rc)
            break;
        if (*retired < r->nrecords) {
            r->records[*retired].step_ms = sr.step_ms;
            r->records[*retired].loss = sr.loss;
        }
        r->bad_labels += sr.bad_labels;
        (*retired)++;
    }
    return rc;
}

/* One source's run: warmup, measured window, summary. */
static void run_source(bench_ctx *c, bench_source *src, run_result *r)
{
    const options *o = &c->opt;
    size_t cap = 0, retired = 0;
    uint64_t window_t0 = 0, cpu0 = 0, srv0 = 0, step_cpu = 0, last_progress = 0;
    bool measuring = false;
    double tmp[1000];
    int rc = 0;
    r->warmup_batches = o->warmup;

    for (uint64_t seq = 0; !interrupted; seq++) {
        if (seq == o->warmup) {
            rc = retire_to(c, r, &retired, 0);
            if (rc)
                break;
            measuring = true;
            window_t0 = feed_now_ns();
            cpu0 = process_cpu_ns();
            srv0 = servers_cpu_ns(c);
            step_cpu = 0;
            if (c->nvml)
                nvml_window_start(c->nvml);
        }
        rc = grow_records(r, &cap);
        if (rc == FEED_ETOOBIG) {
            rc = 0;
            break;
        }
        if (rc)
            break;

        bench_batch b;
        uint64_t t0 = feed_now_ns();
        rc = src->ops->next(src, &b);
        uint64_t t1 = feed_now_ns();
        if (rc) {
            snprintf(r->error, sizeof r->error, "next(): %s", feed_strerror(rc));
            break;
        }
        batch_record *rec = &r->records[r->nrecords++];
        memset(rec, 0, sizeof *rec);
        rec->t_s = measuring ? (double)(t1 - window_t0) / 1e9 : -1.0;
        rec->wait_ms = (double)(t1 - t0) / 1e6;
        rec->n = b.n;
        rec->bad_samples = b.bad_samples;
        r->total_images += b.n;
        if (measuring) {
            r->batches++;
            r->images += b.n;
            r->bad_samples += b.bad_samples;
        }

        uint64_t s0 = feed_thread_cpu_ns();
        if (b.device_data)
            rc = c->step->ops->submit_device(c->step, b.device_data, b.device_labels, b.n,
                                             b.ready_event);
        else
            rc = c->step->ops->submit_host(c->step, b.pixels, b.labels, b.n, b.copy_done);
        src->ops->release(src, &b);
        if (rc == 0)
            rc = retire_to(c, r, &retired, INFLIGHT - 1);
        step_cpu += feed_thread_cpu_ns() - s0;
        if (rc) {
            snprintf(r->error, sizeof r->error, "step: %s", feed_strerror(rc));
            break;
        }

        uint64_t now = feed_now_ns();
        if (now - last_progress > 1000000000ull && measuring) {
            progress(c, r, window_t0, o->warmup, retired, tmp);
            last_progress = now;
        }
        if (measuring) {
            if (o->steps && r->batches >= o->steps)
                break;
            if (o->seconds > 0 && (double)(now - window_t0) / 1e9 >= o->seconds)
                break;
        }
    }
    uint64_t s0 = feed_thread_cpu_ns();
    int rrc = retire_to(c, r, &retired, 0);
    step_cpu += feed_thread_cpu_ns() - s0;
    if (rc == 0 && rrc) {
        rc = rrc;
        snprintf(r->error, sizeof r->error, "step: %s", feed_strerror(rc));
    }
    if (rc == 0 && interrupted) {
        rc = FEED_ECANCELED;
        snprintf(r->error, sizeof r->error, "interrupted");
    }
    r->status = rc;
    if (measuring) {
        uint64_t end = feed_now_ns();
        r->wall_s = (double)(end - window_t0) / 1e9;
        double cpu = (double)(process_cpu_ns() - cpu0) / 1e9 - (double)step_cpu / 1e9;
        r->loader_cpu_s = cpu > 0 ? cpu : 0.0;
        r->server_cpu_known = c->nspawned > 0 && strcmp(r->source, "remote") == 0;
        r->server_cpu_s = r->server_cpu_known ? (double)(servers_cpu_ns(c) - srv0) / 1e9 : 0.0;
        if (c->nvml) {
            nvml_window_stop(c->nvml);
            r->nvml = calloc(MAX_NVML, sizeof *r->nvml);
            r->nnvml = r->nvml ? nvml_window_samples(c->nvml, r->nvml, MAX_NVML) : 0;
        }
        progress(c, r, window_t0, o->warmup, retired, tmp);
        fputc('\n', stderr);
    }
    report_summarise(r);
}

static int open_source(const char *name, const source_config *sc, bench_source **out, char *err,
                       size_t cap)
{
    if (strcmp(name, "sync") == 0)
        return source_sync_open(sc, out, err, cap);
    if (strcmp(name, "local") == 0)
        return source_local_open(sc, out, err, cap);
    if (strcmp(name, "remote") == 0)
        return source_remote_open(sc, out, err, cap);
    snprintf(err, cap, "unknown source '%s' (sync, local, remote)", name);
    return FEED_EINVAL;
}

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int affinity_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return (int)sysconf(_SC_NPROCESSORS_ONLN);
    return CPU_COUNT(&set);
}

/* The i-th ':'-separated CPU list of spec (the only one when spec has no ':'). */
static const char *nth_cpu_list(const char *spec, uint32_t i, char *buf, size_t cap)
{
    const char *p = spec;
    if (!spec)
        return NULL;
    if (!strchr(spec, ':'))
        return spec;
    for (uint32_t k = 0; k < i && p; k++) {
        p = strchr(p, ':');
        p = p ? p + 1 : NULL;
    }
    if (!p)
        return NULL;
    size_t len = strcspn(p, ":");
    if (len == 0 || len >= cap)
        return NULL;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    int rc = 1, frc;
    char err[512] = "", dir[PATH_MAX], gen[PATH_MAX], feedd[PATH_MAX];
    char cmdline[2048] = "", servers_list[4096] = "";
    bench_ctx ctx;
    feed_dataset *ds = NULL;
    run_result runs[3];
    size_t nruns = 0;
    const char *targets[MAX_SERVERS];
    size_t ntargets = 0;
    char *servers_copy = NULL;
    bench_meta meta;
    memset(&ctx, 0, sizeof ctx);
    memset(runs, 0, sizeof runs);
    memset(&meta, 0, sizeof meta);

    options *o = &ctx.opt;
    snprintf(o->sources, sizeof o->sources, "sync,local,remote");
    o->out = "out/bench";
    o->dataset_name = DEFAULT_DATASET_NAME;
    o->device = "auto";
    o->us_per_image = -1.0;
    o->seconds = -1.0;
    o->warmup = UINT32_MAX;
    o->lr = 0.1;
    o->seed = 1;
    o->size = 224;
    o->gen_classes = 10;
    o->gen_per_class = 64;
    o->world = 1;
    if (parse_options(argc, argv, o) != 0)
        return 2;
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(cmdline);
        snprintf(cmdline + len, sizeof cmdline - len, "%s%s", i ? " " : "", argv[i]);
    }
    feed_log_set_level(FEED_LOG_WARN);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    ctx.progress_tty = isatty(STDERR_FILENO);

    /* The step first: it decides the defaults (GPU or CPU). */
    bool sim = strcmp(o->device, "none") == 0;
    bool want_gpu = strcmp(o->device, "cpu") != 0 && !sim;
    if (strcmp(o->device, "auto") != 0 && strcmp(o->device, "cpu") != 0 &&
        strcmp(o->device, "cuda") != 0 && !sim) {
        fprintf(stderr, "feed-bench: --device must be auto, cuda, cpu or none\n");
        return 2;
    }
    if (o->rank >= o->world ||
        (o->world > 1 && (strcmp(o->sources, "remote") != 0))) {
        fprintf(stderr, "feed-bench: --rank must be below --world, and --world > 1 needs "
                        "--source remote (only libfeedclient splits the epoch)\n");
        return 2;
    }
    bool gpu = want_gpu && step_cuda_device_count() > 0;
    if (strcmp(o->device, "cuda") == 0 && !gpu) {
        fprintf(stderr, "feed-bench: --device cuda but no CUDA device is usable\n");
        return 1;
    }
    if (!gpu && strcmp(o->device, "auto") == 0)
        fprintf(stderr, "feed-bench: no CUDA device found: using the CPU step (labelled cpu "
                        "in every output)\n");
    if (!o->model)
        o->model = gpu || sim ? "resnet50" : "mlp";
    const model_preset *preset = find_preset(o->model);
    if (!preset) {
        fprintf(stderr, "feed-bench: unknown --model %s (resnet18, resnet50, vit-b16, mlp)\n",
                o->model);
        return 2;
    }
    if (o->us_per_image < 0)
        o->us_per_image = gpu || sim ? preset->us_per_image : 0.0;
    if (!o->batch)
        o->batch = gpu || sim ? 256 : 32;
    if (o->seconds < 0)
        o->seconds = o->steps ? 0.0 : (gpu || sim ? 30.0 : 10.0);
    if (o->warmup == UINT32_MAX)
        o->warmup = gpu || sim ? 5 : 2;
    if (!o->hidden)
        o->hidden = gpu ? 1024 : 128;
    if (!o->local_threads)
        o->local_threads = (uint32_t)affinity_cpus();
    if (!o->server_threads)
        o->server_threads = (uint32_t)affinity_cpus();
    if (!o->servers && !o->spawn)
        o->spawn = 1;
    /* libfeedclient's own defaults, so that every output shows what is in effect. */
    feed_loader_config lc_default;
    feed_loader_config_default(&lc_default);
    if (!o->window)
        o->window = lc_default.window_per_server;
    if (!o->prefetch)
        o->prefetch = lc_default.prefetch;
    if (o->batch > MAX_BATCH || o->spawn > MAX_SERVERS || o->size < FEED_TRANSFORM_MIN_SIDE ||
        o->size > FEED_TRANSFORM_MAX_SIDE || (o->steps == 0 && o->seconds <= 0)) {
        fprintf(stderr,
                "feed-bench: batch 1..%u, spawn <= %u, size %u..%u, and --steps or "
                "--seconds > 0\n",
                MAX_BATCH, MAX_SERVERS, FEED_TRANSFORM_MIN_SIDE, FEED_TRANSFORM_MAX_SIDE);
        return 2;
    }

    exe_dir(dir, sizeof dir);
    if (o->gen_tool)
        snprintf(gen, sizeof gen, "%s", o->gen_tool);
    else
        find_tool(dir, "server/tools/feed-gen-dataset", "feed-gen-dataset", gen, sizeof gen);
    if (o->feedd)
        snprintf(feedd, sizeof feedd, "%s", o->feedd);
    else
        find_tool(dir, "server/feedd", "feedd", feedd, sizeof feedd);

    if (!o->data) {
        o->data = DEFAULT_DATA;
        if (!path_exists(o->data) &&
            generate_dataset(gen, o->data, o->gen_classes, o->gen_per_class) != 0) {
            fprintf(stderr, "feed-bench: could not generate %s with %s (give --data PATH)\n",
                    o->data, gen);
            goto out;
        }
    }
    frc = feed_dataset_open(o->data, NULL, &ds, err, sizeof err);
    if (frc) {
        fprintf(stderr, "feed-bench: %s\n", err);
        goto out;
    }

    step_config scfg = {
        .device = gpu ? 0 : -1,
        .batch = o->batch,
        .img_h = o->size,
        .img_w = o->size,
        .num_classes = feed_dataset_num_classes(ds),
        .hidden = o->hidden,
        .lr = o->lr,
        .target_us_per_image = o->us_per_image,
        .seed = o->seed,
        .mean = {0.485f, 0.456f, 0.406f},
        .std = {0.229f, 0.224f, 0.225f},
    };
    if (plan_batches_per_epoch(feed_dataset_count(ds), o->batch) == 0) {
        fprintf(stderr, "feed-bench: %s has %llu images, fewer than one batch of %u\n", o->data,
                (unsigned long long)feed_dataset_count(ds), o->batch);
        goto out;
    }
    err[0] = '\0';
    if (sim)
        frc = step_sim_open(&scfg, &ctx.step, err, sizeof err);
    else if (gpu)
        frc = step_cuda_open(&scfg, &ctx.step, err, sizeof err);
    else
        frc = step_cpu_open(&scfg, &ctx.step, err, sizeof err);
    if (frc) {
        fprintf(stderr, "feed-bench: training step: %s\n", err);
        goto out;
    }
    if (gpu)
        fprintf(stderr,
                "feed-bench: %s: MLP step %.2f ms + %u ballast GEMMs x %.3f ms -> %.2f ms/step "
                "(target %.1f us/image x %u = %.2f ms)\n",
                ctx.step->info.device_name, ctx.step->info.base_ms, ctx.step->info.ballast_gemms,
                ctx.step->info.ballast_gemm_ms, ctx.step->info.calibrated_ms, o->us_per_image,
                o->batch, o->us_per_image * o->batch / 1000.0);

    meta.nvml_ok = false;
    if (gpu) {
        frc = nvml_open(ctx.step->info.pci_bus_id, 100, &ctx.nvml, meta.nvml_why,
                        sizeof meta.nvml_why);
        meta.nvml_ok = frc == 0;
        if (frc)
            fprintf(stderr, "feed-bench: NVML absent, GPU utilisation not reported: %s\n",
                    meta.nvml_why);
    } else {
        snprintf(meta.nvml_why, sizeof meta.nvml_why, sim ? "no GPU (simulated step)"
                                                          : "no GPU (CPU step)");
    }

    /* Remote targets: given, or spawned here. */
    if (strstr(o->sources, "remote")) {
        if (o->servers) {
            servers_copy = strdup(o->servers);
            for (char *save = NULL, *t = strtok_r(servers_copy, ",", &save);
                 t && ntargets < MAX_SERVERS; t = strtok_r(NULL, ",", &save))
                targets[ntargets++] = t;
        }
        for (uint32_t i = 0; i < o->spawn && ntargets < MAX_SERVERS; i++) {
            char logp[PATH_MAX], cpubuf[256], dataset_arg[PATH_MAX + 16], threads_arg[16];
            if (mkdir_p(o->out) != 0) {
                fprintf(stderr, "feed-bench: cannot create %s\n", o->out);
                goto out;
            }
            snprintf(logp, sizeof logp, "%s/feedd-%u.log", o->out, i);
            const char *cpus = nth_cpu_list(o->server_cpus, i, cpubuf, sizeof cpubuf);
            if (o->server_cpus && !cpus) {
                fprintf(stderr, "feed-bench: --server-cpus has no list for server %u\n", i);
                goto out;
            }
            snprintf(dataset_arg, sizeof dataset_arg, "%s=%s", o->dataset_name, o->data);
            snprintf(threads_arg, sizeof threads_arg, "%u", o->server_threads);
            const char *args[] = {"--dataset", dataset_arg, "--threads", threads_arg, NULL};
            feed_test_server_opts so = {
                .feedd = feedd, .cpus = cpus, .log_path = logp, .no_metrics = true};
            frc = feed_test_server_start_with(&so, args, &ctx.servers[i]);
            if (frc) {
                fprintf(stderr, "feed-bench: feedd %u (%s, cpus %s): %s; see %s\n", i, feedd,
                        cpus ? cpus : "any", feed_strerror(frc), logp);
                goto out;
            }
            ctx.nspawned++;
            targets[ntargets++] = ctx.servers[i].target;
            fprintf(stderr, "feed-bench: spawned feedd %u (pid %d) on %s%s%s\n", i,
                    (int)ctx.servers[i].pid, ctx.servers[i].target, cpus ? ", cpus " : "",
                    cpus ? cpus : "");
        }
        for (size_t i = 0; i < ntargets; i++) {
            size_t len = strlen(servers_list);
            snprintf(servers_list + len, sizeof servers_list - len, "%s%s", i ? "," : "",
                     targets[i]);
        }
    }

    source_config sc = {
        .data_path = o->data,
        .dataset = ds,
        .batch = o->batch,
        .seed = o->seed,
        .local_threads = o->local_threads,
        .step = ctx.step,
        .device = scfg.device,
        .targets = targets,
        .num_targets = ntargets,
        .dataset_name = o->dataset_name,
        .window = o->window,
        .prefetch = o->prefetch,
        .ordered = !o->unordered,
        .rank = o->rank,
        .world = o->world,
        .mean = {0.485f, 0.456f, 0.406f},
        .std = {0.229f, 0.224f, 0.225f},
    };
    feed_transform_default_train(&sc.transform);
    sc.transform.out_h = sc.transform.out_w = o->size;

    char list[64];
    snprintf(list, sizeof list, "%s", o->sources);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name && nruns < 3 && !interrupted;
         name = strtok_r(NULL, ",", &save)) {
        run_result *r = &runs[nruns++];
        bench_source *src = NULL;
        snprintf(r->source, sizeof r->source, "%s", name);
        err[0] = '\0';
        frc = open_source(name, &sc, &src, err, sizeof err);
        if (frc) {
            r->status = frc;
            snprintf(r->error, sizeof r->error, "%s", err);
            fprintf(stderr, "feed-bench: %s\n", err);
            continue;
        }
        fprintf(stderr, "feed-bench: running %s\n", name);
        frc = ctx.step->ops->reset(ctx.step);
        if (frc) {
            r->status = frc;
            snprintf(r->error, sizeof r->error, "step reset: %s", feed_strerror(frc));
            source_close(src);
            continue;
        }
        run_source(&ctx, src, r);
        source_close(src);
    }

    meta.command_line = cmdline;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(meta.started_utc, sizeof meta.started_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    gethostname(meta.host, sizeof meta.host - 1);
    meta.host_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    meta.affinity_cpus = affinity_cpus();
    meta.device_kind = sim ? "sim" : (gpu ? "cuda" : "cpu");
    meta.rank = o->rank;
    meta.world = o->world;
    meta.step = ctx.step->info;
    meta.model = o->model;
    meta.target_us_per_image = o->us_per_image;
    meta.model_source = gpu ? preset_source : "CPU step: pooled-feature MLP, no ballast";
    meta.batch = o->batch;
    meta.img_h = meta.img_w = o->size;
    meta.hidden = o->hidden;
    meta.data_path = o->data;
    meta.dataset_name = o->dataset_name;
    meta.data_format = feed_dataset_format(ds);
    meta.data_count = feed_dataset_count(ds);
    meta.data_classes = feed_dataset_num_classes(ds);
    meta.seed = o->seed;
    meta.warmup = o->warmup;
    meta.steps = o->steps;
    meta.seconds = o->seconds;
    meta.local_threads = o->local_threads;
    meta.servers = servers_list;
    meta.spawned = ctx.nspawned;
    meta.server_threads = o->server_threads;
    meta.server_cpus = ctx.nspawned ? o->server_cpus : NULL;
    meta.window = o->window;
    meta.prefetch = o->prefetch;
    meta.ordered = !o->unordered;

    if (report_write(o->out, &meta, runs, nruns, err, sizeof err) != 0) {
        fprintf(stderr, "feed-bench: %s\n", err);
        goto out;
    }
    report_table(stdout, &meta, runs, nruns);
    printf("\nresults in %s (summary.csv, summary.json, batches.csv, nvml.csv)\n", o->out);
    rc = 0;
    for (size_t i = 0; i < nruns; i++)
        if (runs[i].status)
            rc = 1;
out:
    for (uint32_t i = 0; i < ctx.nspawned; i++)
        feed_test_server_stop_timeout(&ctx.servers[i], 5000);
    for (size_t i = 0; i < nruns; i++) {
        free(runs[i].records);
        free(runs[i].nvml);
    }
    nvml_close(ctx.nvml);
    step_close(ctx.step);
    feed_dataset_close(ds);
    free(servers_copy);
    return rc;
}
