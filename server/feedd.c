/*
 * feedd: parse the configuration, open the datasets, start the worker pool,
 * the gRPC service and the metrics endpoint, then wait for SIGTERM/SIGINT.
 * Signals are blocked in every thread and taken synchronously by one thread,
 * signal_main, with sigwait (no work in a handler). Until the service is up
 * a signal ends feedd at once with status 0 and one log line: start-up has
 * nothing to drain, and it can be stuck for hours in a dataset open against
 * a store that does not answer (reads x tries x --remote-timeout-ms per
 * shard). Once serving, signal_main counts signals and wakes the main
 * thread; the completion-queue threads check their own streams for stalled
 * sends on their ticks. On the first signal the service drains: main sets
 * the service's drain flag and each stream's owner acts on it at its next
 * tick, finishing accepted batches, refusing new ones; what is left after
 * --drain-timeout-ms is cancelled, and a second signal cuts the drain short.
 * If gRPC still holds cancelled calls STOP_GRACE_MS later (a client that
 * stopped reading), feedd exits without tearing down. Exit status 0 either
 * way. A watchdog thread ends the process if teardown still runs
 * EXIT_WATCHDOG_MS after that. Main thread only, but for signal_main and
 * the watchdog.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "cache.h"
#include "window.h"
#include "config.h"
#include "engine.h"
#include "fd_budget.h"
#include "feed/blob.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "fleet.h"
#include "metrics.h"
#include "pool.h"
#include "service.h"

/*
 * After the drain, how long gRPC may take to let go of cancelled calls
 * before feedd exits without tearing down (see feedd_service_stop).
 */
#define STOP_GRACE_MS 1000

/*
 * After the signal, however teardown goes (a library thread that never
 * returns), the process ends this long after the drain's deadline and the
 * grace for gRPC (watchdog_main).
 */
#define EXIT_WATCHDOG_MS 2000

/* The main thread waits for a signal in turns this long: signals_wait takes a bound. */
#define SIGNAL_WAIT_NS (3600ull * 1000000000ull)

/*
 * Describe lists every class name of a dataset; libfeedclient takes a reply
 * of up to 20 MiB whatever its batch size (CLIENT_MAX_DESCRIBE_BYTES in
 * client/src/net/conn.c), so a dataset whose names pass this is refused at
 * start. Names and their framing (3 bytes at most for a name of up to 255
 * bytes) count.
 */
#define FEEDD_DESCRIBE_NAMES_MAX (16u << 20)

/*
 * What signal_main shares with the main thread. phase moves STARTING ->
 * SERVING (the service is up: signals are counted for main to drain) or
 * STARTING -> STOPPING (start-up failed: teardown runs; signals are counted
 * and change nothing). Lock: mu, a leaf.
 */
enum { PHASE_STARTING, PHASE_SERVING, PHASE_STOPPING };
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* feed_cond_init; broadcast when count moves */
    sigset_t set;      /* SIGTERM, SIGINT; written before any thread starts */
    int phase;         /* mu */
    unsigned count;    /* mu: signals taken since start-up ended */
    int last;          /* mu: the last of them */
    const char *step;  /* mu: what start-up does now, for the log line */
    const char *what;  /* mu: on what (a dataset's name), or "" */
} g_sig = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .phase = PHASE_STARTING, .step = "starting", .what = ""};

/* Says what start-up does now; step and what outlive the start-up (literals, cfg). */
static void signals_step(const char *step, const char *what)
{
    pthread_mutex_lock(&g_sig.mu);
    g_sig.step = step;
    g_sig.what = what;
    pthread_mutex_unlock(&g_sig.mu);
}

static void signals_phase(int phase)
{
    pthread_mutex_lock(&g_sig.mu);
    g_sig.phase = phase;
    pthread_mutex_unlock(&g_sig.mu);
}

static void *signal_main(void *arg)
{
    (void)arg;
    for (;;) {
        int sig = 0;
        if (sigwait(&g_sig.set, &sig) != 0)
            continue;
        pthread_mutex_lock(&g_sig.mu);
        if (g_sig.phase == PHASE_STARTING) {
            FEED_LOGI("signal %d during start-up (%s%s%s): exiting without serving", sig,
                      g_sig.step, g_sig.what[0] ? " " : "", g_sig.what);
            fflush(stderr);
            _exit(0);
        }
        g_sig.count++;
        g_sig.last = sig;
        pthread_cond_broadcast(&g_sig.cv);
        pthread_mutex_unlock(&g_sig.mu);
    }
    return NULL;
}

/*
 * Blocks SIGTERM and SIGINT in this thread, so in every thread started
 * after it, and starts signal_main. Runs before any other thread starts.
 */
static int signals_start(void)
{
    pthread_t t;
    int rc = FEED_ENOMEM;
    sigemptyset(&g_sig.set);
    sigaddset(&g_sig.set, SIGTERM);
    sigaddset(&g_sig.set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &g_sig.set, NULL);
    if (feed_cond_init(&g_sig.cv) == 0 && pthread_create(&t, NULL, signal_main, NULL) == 0) {
        pthread_detach(t);
        rc = 0;
    }
    return rc;
}

/* Waits up to wait_ns for the signal count to pass seen; returns the count, *sig the last. */
static unsigned signals_wait(unsigned seen, uint64_t wait_ns, int *sig)
{
    uint64_t until = feed_now_ns() + wait_ns;
    pthread_mutex_lock(&g_sig.mu);
    while (g_sig.count == seen && feed_cond_wait_until(&g_sig.cv, &g_sig.mu, until) == 0)
        ;
    unsigned n = g_sig.count;
    *sig = g_sig.last;
    pthread_mutex_unlock(&g_sig.mu);
    return n;
}

/* 0 when Describe can list ds's class names (FEEDD_DESCRIBE_NAMES_MAX), else FEED_ETOOBIG, said. */
static int check_describe_size(const char *name, const feed_dataset *ds)
{
    uint32_t n = feed_dataset_num_classes(ds);
    uint64_t bytes = 0;
    for (uint32_t c = 0; c < n; c++)
        bytes += strlen(feed_dataset_class_name(ds, c)) + 3u;
    if (bytes <= FEEDD_DESCRIBE_NAMES_MAX)
        return 0;
    FEED_LOGE("dataset %s: its %u class names take %llu bytes in Describe, over the %u a client "
              "takes",
              name, n, (unsigned long long)bytes, FEEDD_DESCRIBE_NAMES_MAX);
    return FEED_ETOOBIG;
}

/* Write "PORT\n" to path atomically (temp file + rename): readers never see half a number. */
static int write_port_file(const char *path, int port)
{
    char tmp[FEEDD_PATH_MAX + 16];
    int rc = FEED_EIO;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return FEED_EINVAL;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return FEED_EIO;
    if (fprintf(f, "%d\n", port) > 0)
        rc = 0;
    if (fclose(f) != 0)
        rc = FEED_EIO;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = FEED_EIO;
    if (rc < 0)
        FEED_LOGE("cannot write port file %s: %s", path, strerror(errno));
    return rc;
}

/*
 * Every connection costs a descriptor, and the default soft limit (1024)
 * is a few hundred idle clients: take the hard limit, which needs no
 * privilege.
 */
static void raise_nofile_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        FEED_LOGW("open-file limit: %s", strerror(errno));
    } else if (rl.rlim_cur < rl.rlim_max) {
        rlim_t was = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            FEED_LOGI("open-file limit raised from %llu to %llu", (unsigned long long)was,
                      (unsigned long long)rl.rlim_cur);
        else
            FEED_LOGW("open-file limit stays %llu (hard %llu): %s", (unsigned long long)was,
                      (unsigned long long)rl.rlim_max, strerror(errno));
    } else {
        FEED_LOGI("open-file limit %llu (the hard limit)", (unsigned long long)rl.rlim_cur);
    }
}

/* Wait for drained streams or the deadline; a signal after the seen-th ends the wait. */
static void drain(feedd_service *svc, unsigned seen, uint32_t timeout_ms)
{
    uint64_t deadline = feed_now_ns() + (uint64_t)timeout_ms * 1000000u;
    feedd_service_drain(svc);
    for (;;) {
        size_t open = feedd_service_open_streams(svc);
        if (open == 0) {
            FEED_LOGI("drained");
            return;
        }
        uint64_t now = feed_now_ns();
        if (now >= deadline) {
            FEED_LOGW("drain timeout (%u ms): cancelling %zu streams", timeout_ms, open);
            return;
        }
        uint64_t wait = deadline - now < 10000000u ? deadline - now : 10000000u;
        int sig = 0;
        if (signals_wait(seen, wait, &sig) != seen) {
            FEED_LOGW("second signal: stopping now, cancelling %zu streams", open);
            return;
        }
    }
}

/* Sleeps until *arg (feed_now_ns()), then ends the process: teardown took too long. */
static void *watchdog_main(void *arg)
{
    feed_sleep_until(*(const uint64_t *)arg);
    FEED_LOGE("teardown still not done %d ms after the drain's deadline and the stop grace: "
              "exiting without it",
              EXIT_WATCHDOG_MS);
    fflush(stderr);
    _exit(0);
    return NULL;
}

/* The watchdog for a drain of timeout_ms starting now; a thread that cannot start is said. */
static void start_watchdog(uint32_t timeout_ms)
{
    static uint64_t until;
    pthread_t t;
    until = feed_now_ns() + ((uint64_t)timeout_ms + STOP_GRACE_MS + EXIT_WATCHDOG_MS) * 1000000u;
    if (pthread_create(&t, NULL, watchdog_main, &until) == 0)
        pthread_detach(t);
    else
        FEED_LOGW("no exit watchdog (cannot start a thread): teardown is not bounded");
}

int main(int argc, char **argv)
{
    static feedd_config cfg;
    char err[1200];
    char where[1024]; /* a dataset's location for the log: feed_location_redact */
    int rc = feedd_config_parse(argc, argv, &cfg, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "feedd: %s\n", err);
        return 2;
    }
    feed_log_set_level((feed_log_level)cfg.log_level);

    if (signals_start() < 0) {
        FEED_LOGE("cannot start the signal thread");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_nofile_limit();

    int exit_code = 1;
    feed_dataset *ds[FEEDD_MAX_DATASETS] = {0};
    feedd_served_dataset served[FEEDD_MAX_DATASETS];
    feedd_cache *cache = NULL;
    feedd_window *window = NULL;
    feedd_pool *pool = NULL;
    feedd_service *svc = NULL;
    feedd_metrics_server *metrics = NULL;
    bool grpc_up = false;

    feed_dataset_limits dlim;
    feed_dataset_limits_default(&dlim);
    dlim.max_sample_bytes = cfg.max_jpeg_bytes;
    feed_blob_remote_options remote = {
        .endpoint = cfg.s3_endpoint[0] ? cfg.s3_endpoint : NULL,
        .region = cfg.s3_region[0] ? cfg.s3_region : NULL,
        .path_style = strcmp(cfg.s3_addressing, "path") == 0      ? 1
                      : strcmp(cfg.s3_addressing, "virtual") == 0 ? 0
                                                                  : -1,
        .connections = cfg.remote_connections,
        .readahead_bytes = cfg.remote_readahead,
        .timeout_ms = cfg.remote_timeout_ms,
        .retries = cfg.remote_retries,
        .redirects = strcmp(cfg.remote_redirects, "same-host") == 0
                         ? FEED_REMOTE_REDIRECTS_SAME_HOST
                         : FEED_REMOTE_REDIRECTS_NONE,
    };
    dlim.remote = &remote;
    uint32_t shard_files = 0;
    if (feedd_fd_budget(&cfg, &shard_files, err, sizeof err) < 0) {
        FEED_LOGE("%s", err);
        goto out;
    }
    feed_blob_set_open_files(shard_files);
    /* A dataset that cannot be opened is not served; the others are (served[k]: conf[k]). */
    size_t n_served = 0;
    const feedd_dataset_arg *conf[FEEDD_MAX_DATASETS];
    for (size_t i = 0; i < cfg.n_datasets; i++) {
        dlim.refuse_bad_shards = cfg.datasets[i].refuse_bad_shards;
        signals_step("opening dataset", cfg.datasets[i].name);
        rc = feed_dataset_open(cfg.datasets[i].path, &dlim, &ds[i], err, sizeof err);
        if (rc == FEED_ENOMEM)
            goto out;
        if (rc < 0) {
            FEED_LOGE("dataset %s is not served: %s", cfg.datasets[i].name, err);
            feedd_gauge(&feedd_m.datasets_refused, 1);
            continue;
        }
        if (check_describe_size(cfg.datasets[i].name, ds[i]) < 0) {
            FEED_LOGE("dataset %s is not served", cfg.datasets[i].name);
            feedd_gauge(&feedd_m.datasets_refused, 1);
            continue;
        }
        conf[n_served] = &cfg.datasets[i];
        served[n_served].name = cfg.datasets[i].name;
        served[n_served++].ds = ds[i];
        feedd_gauge(&feedd_m.bad_shards, feed_dataset_bad_shards(ds[i]));
        feed_location_redact(cfg.datasets[i].path, where, sizeof where);
        FEED_LOGI("dataset %s: %s, %llu samples, %u classes, fingerprint %s (%s)",
                  cfg.datasets[i].name, feed_dataset_format(ds[i]),
                  (unsigned long long)feed_dataset_count(ds[i]), feed_dataset_num_classes(ds[i]),
                  feed_dataset_fingerprint(ds[i]), where);
    }
    if (n_served == 0) {
        FEED_LOGE("no dataset can be served");
        goto out;
    }
    for (size_t k = 0; k < n_served; k++) {
        uint32_t side = conf[k]->cache_side;
        if (!side)
            continue;
        if (!feed_dataset_stamped(served[k].ds)) {
            FEED_LOGW("dataset %s: cache=%u is ignored: a remote object's version cannot be "
                      "checked on each hit without a request, so a cached image could outlive "
                      "its bytes; served uncached",
                      conf[k]->name, side);
            continue;
        }
        rc = cache ? 0 : feedd_cache_new(cfg.cache_bytes, &cache);
        if (rc < 0)
            goto out;
        rc = feedd_cache_add_dataset(cache, (uint32_t)k, feed_dataset_count(served[k].ds), side);
        if (rc < 0) {
            FEED_LOGE("dataset %s: cache=%u: %s (its table takes 8 bytes a sample of the "
                      "--cache-bytes %llu)",
                      conf[k]->name, side, feed_strerror(rc), (unsigned long long)cfg.cache_bytes);
            goto out;
        }
        FEED_LOGI("dataset %s: decoded-sample cache, shorter side >= %u", conf[k]->name, side);
    }
    if (cfg.cache_bytes && !cache)
        FEED_LOGW("--cache-bytes %llu: no dataset has cache=SIDE, so nothing is cached",
                  (unsigned long long)cfg.cache_bytes);
    for (size_t k = 0; k < n_served; k++) {
        uint32_t side = conf[k]->share_side;
        if (!side)
            continue;
        rc = window ? 0 : feedd_window_new(cfg.share_window_bytes, cache, &window);
        if (rc < 0)
            goto out;
        feedd_window_add_dataset(window, (uint32_t)k, side);
        FEED_LOGI("dataset %s: decode shared between jobs that ask, shorter side >= %u, window "
                  "%llu bytes",
                  conf[k]->name, side, (unsigned long long)cfg.share_window_bytes);
    }
    if (cfg.share_window_bytes && !window)
        FEED_LOGW("--share-window-bytes %llu: no dataset has share=SIDE, so nothing is shared",
                  (unsigned long long)cfg.share_window_bytes);
    feed_engine_limits elim;
    feed_engine_limits_default(&elim);
    elim.max_pixels = cfg.max_pixels;
    elim.max_jpeg_bytes = cfg.max_jpeg_bytes;
    feedd_fetch_limits flim = {
        .threads = cfg.remote_connections,
        .store_fetches = cfg.remote_store_fetches,
        .deadline_ms = cfg.remote_batch_deadline_ms,
        .max_bytes = cfg.remote_readahead,
        .max_sample_bytes = cfg.max_jpeg_bytes,
    };
    signals_step("starting workers", "");
    feedd_fleet_init(cfg.threads, cfg.fleet_window_ms);
    rc = feedd_pool_new(cfg.threads, &elim, cfg.max_jpeg_bytes, cache, window, cfg.task_samples,
                        &flim, &pool);
    if (rc < 0) {
        FEED_LOGE("worker pool: %s", feed_strerror(rc));
        goto out;
    }
    grpc_init();
    grpc_up = true;
    int port = 0;
    signals_step("starting the gRPC service", "");
    rc = feedd_service_start(&cfg, served, n_served, pool, &svc, &port);
    if (rc < 0)
        goto out;
    /* From here a signal drains: clients may already have streams. */
    signals_phase(PHASE_SERVING);
    feedd_metrics_set_extra(feedd_service_render_streams, svc);
    if (cfg.metrics_listen[0]) {
        int mport = 0;
        rc = feedd_metrics_start(cfg.metrics_listen, cfg.metrics_token_file, &metrics, &mport);
        if (rc < 0)
            goto out;
        FEED_LOGI("metrics on port %d%s", mport,
                  cfg.metrics_token_file[0] ? ", bearer token required" : "");
        if (cfg.metrics_port_file[0] && write_port_file(cfg.metrics_port_file, mport) < 0)
            goto out;
    }
    FEED_LOGI("feedd %s listening on %s (port %d), %u workers, %u cq threads, max-memory %llu, "
              "cache %llu",
              FEED_VERSION, cfg.listen, port, cfg.threads, cfg.cq_threads,
              (unsigned long long)cfg.max_memory, (unsigned long long)cfg.cache_bytes);
    FEED_LOGI("gRPC port: %s, %s; Health open to all",
              cfg.tls_cert[0] ? cfg.tls_client_ca[0] ? "mutual TLS" : "TLS" : "plaintext",
              cfg.auth_token_file[0] ? "bearer token required on Feed calls" : "no token");
    int hport = feedd_service_health_port(svc);
    if (hport)
        FEED_LOGI("health port %d: plaintext, grpc.health.v1.Health only", hport);
    if (hport && cfg.health_port_file[0] && write_port_file(cfg.health_port_file, hport) < 0)
        goto out;
    if (cfg.port_file[0] && write_port_file(cfg.port_file, port) < 0)
        goto out;

    /* The completion-queue threads tick their own streams (drain, stalled sends): main waits. */
    int sig = 0;
    while (signals_wait(0, SIGNAL_WAIT_NS, &sig) == 0)
        ;
    FEED_LOGI("signal %d: draining (timeout %u ms)", sig, cfg.drain_timeout_ms);
    start_watchdog(cfg.drain_timeout_ms);
    exit_code = 0;
    drain(svc, 1, cfg.drain_timeout_ms);
out:
    if (!svc)
        signals_phase(PHASE_STOPPING);
    feedd_metrics_set_extra(NULL, NULL);
    if (svc) {
        if (feedd_service_stop(svc, STOP_GRACE_MS) < 0) {
            FEED_LOGW("exiting without cleanup");
            fflush(stderr);
            _exit(exit_code);
        }
        feedd_service_free(svc);
    }
    FEED_LOGD("service stopped");
    feedd_metrics_stop(metrics);
    feedd_pool_free(pool);
    feedd_window_free(window);
    feedd_cache_free(cache);
    FEED_LOGD("workers stopped");
    if (grpc_up)
        grpc_shutdown();
    for (size_t i = 0; i < cfg.n_datasets; i++)
        feed_dataset_close(ds[i]);
    FEED_LOGI("feedd stopped");
    return exit_code;
}
