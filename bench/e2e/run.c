/* feed-bench's training loop over one source; see run.h. */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "feed/errors.h"
#include "feed/timeutil.h"

#define MAX_RECORDS 2000000u
#define MAX_NVML 100000u
#define INFLIGHT 2u

volatile sig_atomic_t bench_interrupted;

static uint64_t process_cpu_ns(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

static uint64_t servers_cpu_ns(const bench_ctx *c)
{
    uint64_t ns = 0;
    for (uint32_t i = 0; i < c->nspawned; i++)
        ns += feed_test_proc_cpu_ns(c->servers[i].pid);
    return ns;
}

/* Each spawned server's cache counters into r->cache (0 servers: none has metrics). */
static void scrape_caches(const bench_ctx *c, run_result *r)
{
    static const char *const series[] = {"feedd_cache_hits_total", "feedd_cache_misses_total",
                                         "feedd_cache_not_owned_total", "feedd_cache_entries",
                                         "feedd_cache_bytes"};
    r->ncache = 0;
    for (uint32_t i = 0; i < c->nspawned && i < REPORT_MAX_SERVERS; i++) {
        server_cache *sc = &r->cache[r->ncache];
        double v[5] = {0};
        bool ok = c->servers[i].metrics_port > 0;
        for (size_t k = 0; k < 5 && ok; k++)
            ok = feed_test_scrape(c->servers[i].metrics_port, series[k], &v[k]) == 0;
        if (!ok)
            continue;
        snprintf(sc->target, sizeof sc->target, "%s", c->servers[i].target);
        sc->hits = v[0];
        sc->misses = v[1];
        sc->not_owned = v[2];
        sc->entries = v[3];
        sc->bytes = v[4];
        r->ncache++;
    }
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

void bench_run_source(bench_ctx *c, bench_source *src, run_result *r)
{
    const bench_options *o = &c->opt;
    size_t cap = 0, retired = 0;
    uint64_t window_t0 = 0, cpu0 = 0, srv0 = 0, step_cpu = 0, last_progress = 0;
    bool measuring = false;
    run_result start; /* the caches' counters at the window's start */
    memset(&start, 0, sizeof start);
    bool caches = strcmp(r->source, "remote") == 0;
    double tmp[1000];
    int rc = 0;
    r->warmup_batches = o->warmup;

    for (uint64_t seq = 0; !bench_interrupted; seq++) {
        if (seq == o->warmup) {
            rc = retire_to(c, r, &retired, 0);
            if (rc)
                break;
            measuring = true;
            window_t0 = feed_now_ns();
            cpu0 = process_cpu_ns();
            srv0 = servers_cpu_ns(c);
            if (caches)
                scrape_caches(c, &start);
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
    if (rc == 0 && bench_interrupted) {
        rc = FEED_ECANCELED;
        snprintf(r->error, sizeof r->error, "bench_interrupted");
    }
    r->status = rc;
    if (measuring) {
        uint64_t end = feed_now_ns();
        r->wall_s = (double)(end - window_t0) / 1e9;
        double cpu = (double)(process_cpu_ns() - cpu0) / 1e9 - (double)step_cpu / 1e9;
        r->loader_cpu_s = cpu > 0 ? cpu : 0.0;
        r->server_cpu_known = c->nspawned > 0 && strcmp(r->source, "remote") == 0;
        r->server_cpu_s = r->server_cpu_known ? (double)(servers_cpu_ns(c) - srv0) / 1e9 : 0.0;
        if (caches)
            scrape_caches(c, r);
        for (uint32_t i = 0; caches && i < r->ncache && r->ncache == start.ncache; i++) {
            r->cache[i].hits -= start.cache[i].hits;
            r->cache[i].misses -= start.cache[i].misses;
            r->cache[i].not_owned -= start.cache[i].not_owned;
        }
        if (caches && r->ncache != start.ncache)
            r->ncache = 0; /* a server's metrics went away: no window to report */
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

int bench_open_source(const char *name, const source_config *sc, bench_source **out, char *err,
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
