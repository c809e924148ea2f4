/*
 * Fleet sizing; see fleet.h and docs/guide/sizing.md.
 *
 * Demand: each loader's last report, by its id, in a fixed table (mu). A
 * loader that has sent nothing for three windows (its own or this server's,
 * the longer) has left and is forgotten when the window next moves.
 *
 * Capacity: the workers add each sample's busy time to a counter per kind
 * (atomics, no lock); when the window moves, one server's sustainable rate is
 * threads x samples / busy seconds over the last FLEET_CAPACITY_WINDOWS
 * windows, which weighs decodes and cache hits as this server's traffic mixes
 * them. Several windows, because a worker's busy time per sample moves with
 * what else runs on its cores (on a shared 2-core host one window's estimate
 * moved by 2x from one window to the next). Fewer than
 * FEEDD_FLEET_MIN_SAMPLES in them keeps the last estimate: an idle server has
 * not become slower. The busy time is wall time less the time the workers sat
 * runnable on the run queue (the second field of /proc/self/task/TID/schedstat,
 * each worker registering its thread id with its first sample): waiting for a
 * core another process holds is not what the work costs, and counted it made
 * four servers sharing two cores each measure half a server, so the fleet's
 * answer grew with the fleet. A read from a disk or a bucket stays in: that is
 * what the work costs. Without schedstat the wall time is used as it is.
 *
 * Lock: fleet.mu, a leaf (the procfs reads under it do not block). Threads:
 * workers (sample), completion-queue threads (report), the metrics thread
 * (render).
 */
#include "fleet.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define KIND_COUNT FEEDD_FLEET_KINDS
/* Kinds below this are what the capacity counts: encoded samples cost a read and a copy, and
 * counted with decodes they would make the server look faster than its decodes are. */
#define KIND_CAPACITY FEEDD_FLEET_ENCODED

/* The most servers the desired size names; far beyond any fleet, it keeps the arithmetic
 * finite whatever a loader reports. */
#define FLEET_SERVERS_MAX 65536u
#define FLEET_CAPACITY_WINDOWS 3
/* Worker threads whose run-queue time is read; more are counted as wall time only. */
#define FLEET_WORKERS_MAX 1024u

typedef struct loader_entry {
    bool used;
    uint64_t id;
    char job[FEED_NAME_MAX + 1];
    double rate, wait;
    uint32_t servers;
    uint64_t window_ns;
    uint64_t seen_ns;
} loader_entry;

/* A job as the loaders' table sums it: name points into a loader entry. */
typedef struct job_sum {
    const char *name;
    double rate, wait_sum;
    uint32_t loaders;
} job_sum;

static struct {
    pthread_mutex_t mu;
    uint32_t threads;
    uint64_t window_ns;
    atomic_uint_fast64_t busy_ns[KIND_COUNT];
    atomic_uint_fast64_t samples[KIND_COUNT];
    /* Worker thread ids: a slot is claimed by n_tids, then its tid stored (0 until then). */
    atomic_uint n_tids;
    atomic_int tids[FLEET_WORKERS_MAX];
    /* Guarded by mu. */
    loader_entry loaders[FEEDD_FLEET_LOADERS_MAX];
    uint64_t window_start_ns; /* 0: no window yet */
    uint64_t busy_at_start, samples_at_start, queued_at_start;
    uint64_t queued; /* the workers' run-queue time, as last read */
    /* The last FLEET_CAPACITY_WINDOWS windows' samples and busy time, a ring at next_win. */
    uint64_t win_samples[FLEET_CAPACITY_WINDOWS], win_busy[FLEET_CAPACITY_WINDOWS],
        win_queued[FLEET_CAPACITY_WINDOWS];
    unsigned next_win;
    double capacity, demand, raw;
    uint32_t desired;
    uint32_t servers_seen; /* the most servers a live loader had up */
    uint64_t reports, dropped;
} fleet = {.mu = PTHREAD_MUTEX_INITIALIZER, .threads = 1, .window_ns = 10000000000ull};

static double job_demand(double rate, double wait)
{
    if (!(wait > 0))
        wait = 0;
    if (wait > FEEDD_FLEET_WAIT_CAP)
        wait = FEEDD_FLEET_WAIT_CAP;
    return rate / (1.0 - wait);
}

static double fleet_demand(const feedd_fleet_job *jobs, size_t n_jobs)
{
    double sum = 0;
    for (size_t i = 0; i < n_jobs; i++)
        sum += job_demand(jobs[i].samples_per_second, jobs[i].wait_fraction);
    return sum;
}

/* ceil(x) as a server count in 0..FLEET_SERVERS_MAX; x within 1e-9 above an integer is that
 * integer (1000 / (1 - 0.9) / 1000 is 10.000000000000002 in doubles). */
static uint32_t servers_ceil(double x)
{
    if (!(x > 1e-9))
        return 0;
    if (x >= FLEET_SERVERS_MAX)
        return FLEET_SERVERS_MAX;
    return (uint32_t)ceil(x - 1e-9);
}

uint32_t feedd_fleet_desired(const feedd_fleet_job *jobs, size_t n_jobs, double capacity,
                             uint32_t prev, double *raw_out)
{
    uint32_t want = prev ? prev : 1;
    double raw = 0, demand = fleet_demand(jobs, n_jobs);
    /* No demand needs no capacity to be sized: an idle server shrinks even if it never made a
     * sample, so that one the balancer left alone does not hold a fleet at its last size. */
    if (capacity > 0 || !(demand > 0)) {
        raw = demand > 0 ? demand / capacity : 0;
        uint32_t up = servers_ceil(raw);
        uint32_t down = servers_ceil(raw + FEEDD_FLEET_HYSTERESIS);
        if (prev == 0 || up > prev)
            want = up;
        else if (down < prev)
            want = down;
        if (prev) {
            uint32_t lo = prev / 2 + prev % 2;
            uint32_t hi = prev > FLEET_SERVERS_MAX / 2 ? FLEET_SERVERS_MAX : 2 * prev;
            want = want < lo ? lo : want > hi ? hi : want;
        }
        if (want < 1)
            want = 1;
    }
    *raw_out = raw;
    return want;
}

void feedd_fleet_init(uint32_t threads, uint32_t window_ms)
{
    pthread_mutex_lock(&fleet.mu);
    fleet.threads = threads ? threads : 1;
    fleet.window_ns = (uint64_t)(window_ms ? window_ms : 10000) * 1000000u;
    pthread_mutex_unlock(&fleet.mu);
}

void feedd_fleet_sample(feedd_fleet_kind kind, uint64_t busy_ns)
{
    static _Thread_local bool registered;
    if (!registered) {
        registered = true;
        unsigned slot = atomic_fetch_add(&fleet.n_tids, 1);
        if (slot < FLEET_WORKERS_MAX)
            atomic_store(&fleet.tids[slot], (int)gettid());
    }
    int k = (unsigned)kind < KIND_COUNT ? (int)kind : FEEDD_FLEET_DECODE;
    atomic_fetch_add_explicit(&fleet.busy_ns[k], busy_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&fleet.samples[k], 1, memory_order_relaxed);
}

/* Summed over the kinds the capacity counts. */
static uint64_t total(atomic_uint_fast64_t *c)
{
    uint64_t sum = 0;
    for (int k = 0; k < KIND_CAPACITY; k++)
        sum += atomic_load_explicit(&c[k], memory_order_relaxed);
    return sum;
}

/* The registered workers' time on the run queue, ns: schedstat's second field, summed. A thread
 * that has exited (a pool stopped in a test) or a kernel without schedstat adds nothing. */
static uint64_t run_queue_ns(void)
{
    uint64_t sum = 0;
    unsigned n = atomic_load(&fleet.n_tids);
    for (unsigned i = 0; i < n && i < FLEET_WORKERS_MAX; i++) {
        int tid = atomic_load(&fleet.tids[i]);
        char path[64];
        unsigned long long run, queued;
        if (tid <= 0)
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fscanf(f, "%llu %llu", &run, &queued) == 2)
            sum += queued;
        fclose(f);
    }
    return sum;
}

/* The live loaders' reports summed per job into sums (at most FEEDD_FLEET_LOADERS_MAX). Under
 * mu. */
static size_t sum_jobs(job_sum *sums)
{
    size_t n = 0;
    for (size_t i = 0; i < FEEDD_FLEET_LOADERS_MAX; i++) {
        const loader_entry *e = &fleet.loaders[i];
        if (!e->used)
            continue;
        size_t j = 0;
        while (j < n && strcmp(sums[j].name, e->job) != 0)
            j++;
        if (j == n)
            sums[n++] = (job_sum){e->job, 0, 0, 0};
        sums[j].rate += e->rate;
        sums[j].wait_sum += e->wait;
        sums[j].loaders++;
    }
    return n;
}

/* Move the window on if it is due. Under mu. */
static void tick(uint64_t now)
{
    uint64_t busy = total(fleet.busy_ns), samples = total(fleet.samples);
    if (!fleet.window_start_ns) {
        fleet.window_start_ns = now;
        fleet.busy_at_start = busy;
        fleet.samples_at_start = samples;
        fleet.queued = fleet.queued_at_start = run_queue_ns();
        return;
    }
    if (now - fleet.window_start_ns < fleet.window_ns)
        return;
    fleet.queued = run_queue_ns();
    fleet.win_samples[fleet.next_win] = samples - fleet.samples_at_start;
    fleet.win_busy[fleet.next_win] = busy - fleet.busy_at_start;
    fleet.win_queued[fleet.next_win] =
        fleet.queued > fleet.queued_at_start ? fleet.queued - fleet.queued_at_start : 0;
    fleet.next_win = (fleet.next_win + 1) % FLEET_CAPACITY_WINDOWS;
    uint64_t d_samples = 0, d_busy = 0, d_queued = 0;
    for (unsigned w = 0; w < FLEET_CAPACITY_WINDOWS; w++) {
        d_samples += fleet.win_samples[w];
        d_busy += fleet.win_busy[w];
        d_queued += fleet.win_queued[w];
    }
    /* A worker also queues between its wake-up and its first sample, outside the busy time:
     * never take off more than half of it. */
    d_busy -= d_queued < d_busy / 2 ? d_queued : d_busy / 2;
    if (d_samples >= FEEDD_FLEET_MIN_SAMPLES && d_busy > 0)
        fleet.capacity = (double)fleet.threads * (double)d_samples * 1e9 / (double)d_busy;
    fleet.window_start_ns = now;
    fleet.busy_at_start = busy;
    fleet.samples_at_start = samples;
    fleet.queued_at_start = fleet.queued;
    uint32_t servers_seen = 0;
    for (size_t i = 0; i < FEEDD_FLEET_LOADERS_MAX; i++) {
        loader_entry *e = &fleet.loaders[i];
        uint64_t ttl = 3 * (e->window_ns > fleet.window_ns ? e->window_ns : fleet.window_ns);
        if (e->used && now - e->seen_ns > ttl)
            e->used = false;
        if (e->used && e->servers > servers_seen)
            servers_seen = e->servers;
    }
    job_sum sums[FEEDD_FLEET_LOADERS_MAX];
    feedd_fleet_job jobs[FEEDD_FLEET_LOADERS_MAX];
    size_t n = sum_jobs(sums);
    for (size_t j = 0; j < n; j++)
        jobs[j] = (feedd_fleet_job){sums[j].rate, sums[j].wait_sum / sums[j].loaders};
    /* The first window starts from the fleet the loaders see, so that it too is bounded. */
    fleet.servers_seen = servers_seen;
    uint32_t prev = fleet.desired ? fleet.desired : servers_seen;
    fleet.demand = fleet_demand(jobs, n);
    fleet.desired = feedd_fleet_desired(jobs, n, fleet.capacity, prev, &fleet.raw);
}

void feedd_fleet_report(const char *job, const feedd_demand *d, uint64_t now_ns)
{
    pthread_mutex_lock(&fleet.mu);
    tick(now_ns);
    loader_entry *e = NULL, *free_entry = NULL;
    for (size_t i = 0; i < FEEDD_FLEET_LOADERS_MAX && !e; i++) {
        loader_entry *c = &fleet.loaders[i];
        if (c->used && c->id == d->loader)
            e = c;
        else if (!c->used && !free_entry)
            free_entry = c;
    }
    if (!e && free_entry) {
        e = free_entry;
        *e = (loader_entry){.used = true, .id = d->loader};
    }
    if (e) {
        snprintf(e->job, sizeof e->job, "%s", job);
        e->rate = d->samples_per_second;
        e->wait = d->wait_fraction;
        e->servers = d->servers;
        e->window_ns = (uint64_t)d->window_ms * 1000000u;
        e->seen_ns = now_ns;
        fleet.reports++;
    } else {
        fleet.dropped++;
    }
    pthread_mutex_unlock(&fleet.mu);
}

typedef struct out_text {
    char *p;
    size_t len, cap;
} out_text;

static void put(out_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_text *t, const char *fmt, ...)
{
    if (t->len + 1 >= t->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

/* A label value as Prometheus' text format quotes it (job keys are printable ASCII). */
static void put_label(out_text *t, const char *v)
{
    char esc[2 * FEED_NAME_MAX + 1];
    size_t n = 0;
    for (const char *c = v; *c && n + 2 < sizeof esc; c++) {
        if (*c == '"' || *c == '\\')
            esc[n++] = '\\';
        esc[n++] = *c;
    }
    esc[n] = '\0';
    put(t, "%s", esc);
}

static void header(out_text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One per-job series: the first FEEDD_FLEET_JOBS_MAX jobs by name, the rest as "_other". */
static void put_jobs(out_text *t, const job_sum *sums, size_t n, const char *name, int what)
{
    double other = 0, other_wait = 0;
    uint32_t other_loaders = 0;
    for (size_t j = 0; j < n; j++) {
        double v = what == 0   ? sums[j].rate
                   : what == 1 ? sums[j].wait_sum / sums[j].loaders
                               : (double)sums[j].loaders;
        if (j < FEEDD_FLEET_JOBS_MAX) {
            put(t, "%s{job=\"", name);
            put_label(t, sums[j].name);
            put(t, "\"} %.6g\n", v);
        } else {
            other += sums[j].rate;
            other_wait += sums[j].wait_sum;
            other_loaders += sums[j].loaders;
        }
    }
    if (other_loaders) {
        double v = what == 0 ? other : what == 1 ? other_wait / other_loaders : other_loaders;
        put(t, "%s{job=\"_other\"} %.6g\n", name, v);
    }
}

size_t feedd_fleet_render(char *buf, size_t cap, uint64_t now_ns)
{
    static const char *const kinds[KIND_COUNT] = {"decode", "cache_hit", "encoded"};
    job_sum sums[FEEDD_FLEET_LOADERS_MAX];
    out_text t = {buf, 0, cap};
    if (cap)
        buf[0] = '\0';
    pthread_mutex_lock(&fleet.mu);
    tick(now_ns);
    size_t n = sum_jobs(sums);
    header(&t, "feedd_fleet_job_samples_per_second", "gauge",
           "Samples per second the job's loaders handed their training threads, summed over "
           "its loaders (each loader's last window).");
    put_jobs(&t, sums, n, "feedd_fleet_job_samples_per_second", 0);
    header(&t, "feedd_fleet_job_wait_fraction", "gauge",
           "Fraction of wall time the job's training threads waited in next(), mean over its "
           "loaders.");
    put_jobs(&t, sums, n, "feedd_fleet_job_wait_fraction", 1);
    header(&t, "feedd_fleet_job_loaders", "gauge", "Loaders of the job reporting to this server.");
    put_jobs(&t, sums, n, "feedd_fleet_job_loaders", 2);
    header(&t, "feedd_fleet_demand_samples_per_second", "gauge",
           "Samples per second the jobs would consume unstarved: each job's rate / (1 - its "
           "wait fraction, at most 0.9), summed; as of the last window.");
    put(&t, "feedd_fleet_demand_samples_per_second %.6g\n", fleet.demand);
    header(&t, "feedd_fleet_capacity_samples_per_second", "gauge",
           "Samples per second this server can make of the work it is given: threads x samples "
           "/ worker busy seconds (less run-queue time) over the last 3 windows; 0 until "
           "measured.");
    put(&t, "feedd_fleet_capacity_samples_per_second %.6g\n", fleet.capacity);
    header(&t, "feedd_fleet_worker_seconds_total", "counter",
           "Worker busy time per sample kind (decode: from the JPEG; cache_hit: from the "
           "decoded-sample cache; encoded: bytes copied for an encoded batch, not in the "
           "capacity).");
    for (int k = 0; k < KIND_COUNT; k++)
        put(&t, "feedd_fleet_worker_seconds_total{kind=\"%s\"} %.6f\n", kinds[k],
            (double)atomic_load_explicit(&fleet.busy_ns[k], memory_order_relaxed) / 1e9);
    header(&t, "feedd_fleet_worker_run_queue_seconds_total", "counter",
           "Time the workers sat runnable waiting for a core (schedstat), taken off their busy "
           "time in the capacity; as of the last window.");
    put(&t, "feedd_fleet_worker_run_queue_seconds_total %.6f\n", (double)fleet.queued / 1e9);
    header(&t, "feedd_fleet_worker_samples_total", "counter", "Samples made per kind.");
    for (int k = 0; k < KIND_COUNT; k++)
        put(&t, "feedd_fleet_worker_samples_total{kind=\"%s\"} %llu\n", kinds[k],
            (unsigned long long)atomic_load_explicit(&fleet.samples[k], memory_order_relaxed));
    header(&t, "feedd_fleet_desired_servers_raw", "gauge",
           "Demand over capacity, before rounding, hysteresis and the per-window bound.");
    put(&t, "feedd_fleet_desired_servers_raw %.6g\n", fleet.raw);
    header(&t, "feedd_fleet_desired_servers", "gauge",
           "Servers the fleet should have, as this server sees it (README \"Fleet sizing\"); "
           "0 until the first window.");
    put(&t, "feedd_fleet_desired_servers %u\n", fleet.desired);
    header(&t, "feedd_fleet_servers_seen", "gauge",
           "The most servers a loader reporting to this server had up, as of the last window.");
    put(&t, "feedd_fleet_servers_seen %u\n", fleet.servers_seen);
    header(&t, "feedd_fleet_reports_total", "counter", "Demand reports taken from loaders.");
    put(&t, "feedd_fleet_reports_total %llu\n", (unsigned long long)fleet.reports);
    header(&t, "feedd_fleet_reports_dropped_total", "counter",
           "Demand reports dropped: the table of loaders was full.");
    put(&t, "feedd_fleet_reports_dropped_total %llu\n", (unsigned long long)fleet.dropped);
    header(&t, "feedd_fleet_window_seconds", "gauge", "The sizing window (--fleet-window-ms).");
    put(&t, "feedd_fleet_window_seconds %.3f\n", (double)fleet.window_ns / 1e9);
    pthread_mutex_unlock(&fleet.mu);
    return t.len;
}
