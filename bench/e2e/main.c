/*
 * feed-bench: does disaggregated preprocessing remove GPU starvation, and by
 * how much? Runs the same training step (step.h) on the same dataset, with the
 * same transform and seed, fed by three sources in turn (source.h): sync
 * (decode in the training loop), local (loader threads on this host), remote
 * (libfeedclient from feedd servers, which it can spawn and pin itself). For
 * each it measures images/s, the step's share of wall time from CUDA events,
 * NVML utilisation, GPM SM activity and DRAM bandwidth, GPU memory and PCIe
 * RX, the batch wait distribution and the CPU time loading costs this host;
 * writes CSV + JSON into --out and a table to stdout.
 *
 * This file: set-up (options.h resolves the command line, the default dataset
 * is generated, servers spawned), one run.h run per source, the report.
 * Threads: main runs the training loop; the sources, NVML sampler and client
 * run their own.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/transform.h"
#include "nvml.h"
#include "options.h"
#include "report.h"
#include "run.h"
#include "source.h"
#include "feedtest.h"
#include "step.h"

#define DEFAULT_DATA "data/default"

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

static void on_signal(int sig)
{
    (void)sig;
    bench_interrupted = 1;
}

/* --decode-lane's name (checked by bench_resolve_options) as the loader's value. */
static feed_decode_lane bench_decode_lane(const char *name)
{
    if (!name || strcmp(name, "off") == 0)
        return FEED_DECODE_LANE_OFF;
    if (strcmp(name, "cpu") == 0)
        return FEED_DECODE_LANE_CPU;
    return strcmp(name, "gpu") == 0 ? FEED_DECODE_LANE_GPU : FEED_DECODE_LANE_AUTO;
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
    const char *targets[BENCH_MAX_SERVERS];
    size_t ntargets = 0;
    char *servers_copy = NULL;
    bench_meta meta;
    memset(&ctx, 0, sizeof ctx);
    memset(runs, 0, sizeof runs);
    memset(&meta, 0, sizeof meta);

    bench_options *o = &ctx.opt;
    if (bench_parse_options(argc, argv, o) != 0)
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
    if (o->rank >= o->world || (o->world > 1 && (strcmp(o->sources, "remote") != 0))) {
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
    if (bench_resolve_options(o, gpu, sim) != 0)
        return 2;

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
        if (frc) {
            fprintf(stderr, "feed-bench: NVML absent, GPU utilisation not reported: %s\n",
                    meta.nvml_why);
            snprintf(meta.gpm_why, sizeof meta.gpm_why, "NVML absent");
        } else {
            meta.gpm_ok = nvml_gpm_available(ctx.nvml, meta.gpm_why, sizeof meta.gpm_why);
            if (!meta.gpm_ok)
                fprintf(stderr, "feed-bench: GPM metrics not reported: %s\n", meta.gpm_why);
        }
    } else {
        snprintf(meta.nvml_why, sizeof meta.nvml_why,
                 sim ? "no GPU (simulated step)" : "no GPU (CPU step)");
        snprintf(meta.gpm_why, sizeof meta.gpm_why, "%s", meta.nvml_why);
    }

    /* Remote targets: given, or spawned here. */
    if (strstr(o->sources, "remote")) {
        if (o->servers) {
            servers_copy = strdup(o->servers);
            for (char *save = NULL, *t = strtok_r(servers_copy, ",", &save);
                 t && ntargets < BENCH_MAX_SERVERS; t = strtok_r(NULL, ",", &save))
                targets[ntargets++] = t;
        }
        for (uint32_t i = 0; i < o->spawn && ntargets < BENCH_MAX_SERVERS; i++) {
            char logp[PATH_MAX], cpubuf[256], dataset_arg[PATH_MAX + 16], threads_arg[16];
            if (mkdir_p(o->out) != 0) {
                fprintf(stderr, "feed-bench: cannot create %s\n", o->out);
                goto out;
            }
            snprintf(logp, sizeof logp, "%s/feedd-%u.log", o->out, i);
            const char *cpus = bench_nth_cpu_list(o->server_cpus, i, cpubuf, sizeof cpubuf);
            if (o->server_cpus && !cpus) {
                fprintf(stderr, "feed-bench: --server-cpus has no list for server %u\n", i);
                goto out;
            }
            char cache_arg[32], bytes_arg[32];
            snprintf(cache_arg, sizeof cache_arg, ",cache=%u", o->server_cache_side);
            snprintf(dataset_arg, sizeof dataset_arg, "%s=%s%s", o->dataset_name, o->data,
                     o->server_cache_side ? cache_arg : "");
            snprintf(threads_arg, sizeof threads_arg, "%u", o->server_threads);
            snprintf(bytes_arg, sizeof bytes_arg, "%llu",
                     (unsigned long long)o->server_cache_bytes);
            const char *args[] = {"--dataset",
                                  dataset_arg,
                                  "--threads",
                                  threads_arg,
                                  "--cache-bytes",
                                  bytes_arg,
                                  o->token_file ? "--auth-token-file" : NULL,
                                  o->token_file,
                                  NULL};
            /* Metrics only for the cache report (scraped at the window's ends). */
            feed_test_server_opts so = {.feedd = feedd,
                                        .cpus = cpus,
                                        .log_path = logp,
                                        .no_metrics = !o->server_cache_side};
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
        .owner_routing = !o->owner_routing || strcmp(o->owner_routing, "auto") == 0
                             ? FEED_OWNER_ROUTING_AUTO
                         : strcmp(o->owner_routing, "off") == 0 ? FEED_OWNER_ROUTING_OFF
                                                                : FEED_OWNER_ROUTING_ON,
        .decode_lane = bench_decode_lane(o->decode_lane),
        .decode_share = o->decode_share,
        .decode_share_max = o->decode_share_max,
        .decode_lane_threads = o->decode_lane_threads,
        .rank = o->rank,
        .world = o->world,
        .mean = {0.485f, 0.456f, 0.406f},
        .std = {0.229f, 0.224f, 0.225f},
        .token = o->token,
        .tls_ca_file = o->tls_ca,
        .tls_cert_file = o->tls_cert,
        .tls_key_file = o->tls_key,
    };
    feed_transform_default_train(&sc.transform);
    sc.transform.out_h = sc.transform.out_w = o->size;

    char list[64];
    snprintf(list, sizeof list, "%s", o->sources);
    for (char *save = NULL, *name = strtok_r(list, ",", &save);
         name && nruns < 3 && !bench_interrupted; name = strtok_r(NULL, ",", &save)) {
        run_result *r = &runs[nruns++];
        bench_source *src = NULL;
        snprintf(r->source, sizeof r->source, "%s", name);
        err[0] = '\0';
        frc = bench_open_source(name, &sc, &src, err, sizeof err);
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
        bench_run_source(&ctx, src, r);
        source_close(src);
    }

    meta.command_line = cmdline;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(meta.started_utc, sizeof meta.started_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    gethostname(meta.host, sizeof meta.host - 1);
    meta.host_cpus = sysconf(_SC_NPROCESSORS_ONLN);
    meta.affinity_cpus = bench_affinity_cpus();
    meta.device_kind = sim ? "sim" : (gpu ? "cuda" : "cpu");
    meta.rank = o->rank;
    meta.world = o->world;
    meta.step = ctx.step->info;
    meta.model = o->model;
    meta.target_us_per_image = o->us_per_image;
    meta.model_source = gpu ? bench_preset_source : "CPU step: pooled-feature MLP, no ballast";
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
    meta.decode_lane = o->decode_lane ? o->decode_lane : "off";
    meta.decode_share = o->decode_share;
    meta.decode_share_max = o->decode_share_max;

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
