/*
 * Prometheus exposition of feedd_metrics over libmicrohttpd (its own polling
 * thread). Rendering reads the atomics without locks; the numbers of one
 * scrape are each exact but not a consistent snapshot of each other.
 *
 * Connections come from feedd's own listener (listener.h), not MHD's, which
 * busy-loops when accept() fails with EMFILE. At most METRICS_CONN_CAP
 * connections are kept: a new one beyond that evicts the one idle longest
 * by shutting its socket down, so idle or half-sent connections cannot lock
 * a scraper out; MHD then closes it on its next pass. Eviction runs on MHD's
 * thread, when MHD starts the new connection, so it is ordered with MHD's
 * reading: a connection whose request MHD has read is in the handler
 * already (MHD reads and runs the request in one pass), and one whose bytes
 * wait in the socket is not idle either, so neither is chosen; only a
 * connection that has sent nothing or an incomplete request is. (Evicting
 * from the listener's thread raced with that pass: a busy reconnecting
 * attacker evicted a scrape between MHD's read and its handler.) MHD itself
 * must never reach its own connection limit: libmicrohttpd 0.9.75 refusing
 * a connection added from another thread deadlocked its thread (a burst of
 * 1,500 connections left the port mute and SIGTERM hanging in
 * MHD_stop_daemon), so a connection that would take the last of
 * METRICS_CONN_SLOTS is closed by the listener instead. The table of
 * connections and the counts are guarded by mu: MHD's thread adds, evicts
 * and removes entries, the listener's thread counts arrivals. MHD's own log
 * goes through a rate limit. Locks: mu is a leaf (nothing else is taken
 * under it, no log line is written under it; the system calls under it,
 * ioctl and shutdown, do not block);
 * extra_mu is held across the extra renderer, which takes the service's
 * locks (service_int.h: svc->mu), so the order
 * is extra_mu, then those. jobs_mu (the per-job counters) is a leaf too, taken
 * under the pool's mu. With a token
 * (--metrics-token-file) every request must carry it as a bearer
 * Authorization header; the token is read-only once the server starts.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/remote.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "fleet.h"
#include "listener.h"
#include "trust.h"

feedd_metrics feedd_m;

/* Per-job counters (metrics.h). jobs_mu guards all of them and is a leaf: nothing is taken
 * under it, and the pool takes it under its mu. */
static pthread_mutex_t jobs_mu = PTHREAD_MUTEX_INITIALIZER;
static char job_names[FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX][FEEDD_JOB_LABEL_NAME_CAP];
static feedd_job_counts job_counts[FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX];
static int job_labels = FEEDD_JOB_LABEL_FIRST; /* labels in use */

int feedd_metrics_job_label(const char *job)
{
    int label = FEEDD_JOB_LABEL_UNNAMED;
    if (!job[0])
        return label;
    pthread_mutex_lock(&jobs_mu);
    label = FEEDD_JOB_LABEL_OTHER;
    for (int i = FEEDD_JOB_LABEL_FIRST; i < job_labels && label == FEEDD_JOB_LABEL_OTHER; i++)
        if (strcmp(job_names[i], job) == 0)
            label = i;
    if (label == FEEDD_JOB_LABEL_OTHER && job_labels < FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX &&
        strlen(job) < sizeof job_names[0]) {
        label = job_labels++;
        snprintf(job_names[label], sizeof job_names[label], "%s", job);
    }
    pthread_mutex_unlock(&jobs_mu);
    return label;
}

void feedd_metrics_job_add(int label, const feedd_job_counts *d)
{
    if (label < 0 || label >= FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX)
        label = FEEDD_JOB_LABEL_OTHER;
    pthread_mutex_lock(&jobs_mu);
    feedd_job_counts *c = &job_counts[label];
    c->submitted += d->submitted;
    c->claimed += d->claimed;
    c->dropped += d->dropped;
    c->bytes += d->bytes;
    c->queue_ns += d->queue_ns;
    pthread_mutex_unlock(&jobs_mu);
}

/* feedd_metrics_set_extra's; extra_mu is held across each call of extra_fn. */
static pthread_mutex_t extra_mu = PTHREAD_MUTEX_INITIALIZER;
static feedd_metrics_extra_fn extra_fn;
static void *extra_arg;

void feedd_metrics_set_extra(feedd_metrics_extra_fn fn, void *arg)
{
    pthread_mutex_lock(&extra_mu);
    extra_fn = fn;
    extra_arg = arg;
    pthread_mutex_unlock(&extra_mu);
}

#define METRICS_CONN_CAP 64
/*
 * MHD's own limit: room for evicted connections MHD has not closed yet (a
 * burst of 2,000 filled 256 before MHD's thread closed any, and refused
 * the scrape that came with it). Each takes at most METRICS_CONN_MEMORY.
 */
#define METRICS_CONN_SLOTS (16 * METRICS_CONN_CAP)
#define METRICS_CONN_MEMORY (16u << 10)
#define METRICS_FULL_WAIT_S 1
#define METRICS_IDLE_TIMEOUT_S 5u
#define METRICS_LOG_MS 1000

typedef struct metrics_conn {
    bool used, evicted, in_request;
    int fd;
    uint64_t idle_since_ns;
} metrics_conn;

struct feedd_metrics_server {
    struct MHD_Daemon *daemon;
    feedd_listener *listener;
    feedd_token token;
    pthread_mutex_t mu;
    pthread_cond_t closed; /* MHD closed a connection */
    /* Guarded by mu. */
    metrics_conn conns[METRICS_CONN_SLOTS];
    size_t live; /* handed to MHD and not closed yet (started or not) */
    size_t held; /* started by MHD, not evicted and not closed yet */
    uint64_t log_last_ns, log_dropped, refused, refused_log_ns;
};

/* Room for the per-stream gauges (service.c) and FEEDD_FLEET_JOBS_MAX jobs (fleet.c). */
#define RENDER_CAP (128 * 1024)

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

static uint64_t ld(atomic_uint_fast64_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static int64_t ldg(atomic_int_fast64_t *g)
{
    return atomic_load_explicit(g, memory_order_relaxed);
}

static void counter(text *t, const char *name, const char *help, uint64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
        (unsigned long long)v);
}

static void gauge(text *t, const char *name, const char *help, int64_t v)
{
    put(t, "# HELP %s %s\n# TYPE %s gauge\n%s %lld\n", name, help, name, name, (long long)v);
}

/* The per-job series, all read at one instant (under jobs_mu; rendered after it). */
static void render_jobs(text *t)
{
    static const char *const help[4][2] = {
        {"feedd_job_samples_total", "Samples workers took for the job (made, or stopped by a "
                                    "cancel), per SessionOpen.job."},
        {"feedd_job_bytes_total", "Pixel bytes of those samples, per job."},
        {"feedd_job_queue_seconds_total",
         "Time samples waited for a worker (from their batch's arrival to a worker taking them), "
         "summed over the job's samples; divided by feedd_job_samples_total: the mean wait."},
        {"feedd_job_queued_samples", "Samples of the job waiting for a worker now."},
    };
    char names[FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX][FEEDD_JOB_LABEL_NAME_CAP];
    feedd_job_counts c[FEEDD_JOB_LABEL_FIRST + FEEDD_JOB_LABELS_MAX];
    pthread_mutex_lock(&jobs_mu);
    int n = job_labels;
    memcpy(c, job_counts, sizeof c);
    memcpy(names, job_names, sizeof names);
    pthread_mutex_unlock(&jobs_mu);
    snprintf(names[FEEDD_JOB_LABEL_UNNAMED], sizeof names[0], "(unnamed)");
    snprintf(names[FEEDD_JOB_LABEL_OTHER], sizeof names[0], "(other)");
    for (int k = 0; k < 4; k++) {
        put(t, "# HELP %s %s\n# TYPE %s %s\n", help[k][0], help[k][1], help[k][0],
            k == 3 ? "gauge" : "counter");
        for (int i = 0; i < n; i++) {
            if (i < FEEDD_JOB_LABEL_FIRST && !c[i].submitted)
                continue;
            if (k == 2)
                put(t, "%s{job=\"%s\"} %.6f\n", help[k][0], names[i], (double)c[i].queue_ns / 1e9);
            else
                put(t, "%s{job=\"%s\"} %llu\n", help[k][0], names[i],
                    (unsigned long long)(k == 0   ? c[i].claimed
                                         : k == 1 ? c[i].bytes
                                                  : c[i].submitted - c[i].claimed - c[i].dropped));
        }
    }
}

char *feedd_metrics_render(size_t *len)
{
    static const char *const stages[FEEDD_STAGE_COUNT] = {"read", "decode", "resize", "send"};
    feedd_metrics *m = &feedd_m;
    text t = {malloc(RENDER_CAP), 0, RENDER_CAP};
    if (!t.p)
        return NULL;
    t.p[0] = '\0';
    counter(&t, "feedd_samples_total", "Samples made, any status.", ld(&m->samples));
    counter(&t, "feedd_batches_total", "Batches handed to gRPC.", ld(&m->batches));
    counter(&t, "feedd_bytes_total",
            "Batch data bytes handed to gRPC (pixels, or encoded samples).", ld(&m->bytes));
    counter(&t, "feedd_requests_total", "Batch requests accepted.", ld(&m->requests));
    counter(&t, "feedd_requests_refused_total",
            "Batch requests refused (bad request, window, memory), each ending its stream.",
            ld(&m->requests_refused));
    counter(&t, "feedd_streams_total", "Stream calls opened.", ld(&m->streams_opened));
    counter(&t, "feedd_streams_stalled_total",
            "Streams cancelled because a send made no progress for send-stall-ms.",
            ld(&m->streams_stalled));
    put(&t, "# HELP feedd_decode_errors_total Failed samples by kind.\n"
            "# TYPE feedd_decode_errors_total counter\n");
    for (int s = 1; s < FEED_SAMPLE_STATUS_COUNT; s++)
        put(&t, "feedd_decode_errors_total{kind=\"%s\"} %llu\n",
            feed_sample_status_name((feed_sample_status)s),
            (unsigned long long)ld(&m->sample_status[s]));
    put(&t, "# HELP feedd_stage_seconds_total Time spent per stage (send: from handing a "
            "batch to gRPC to the write completing).\n"
            "# TYPE feedd_stage_seconds_total counter\n");
    for (int s = 0; s < FEEDD_STAGE_COUNT; s++)
        put(&t, "feedd_stage_seconds_total{stage=\"%s\"} %.6f\n", stages[s],
            (double)ld(&m->stage_ns[s]) / 1e9);
    put(&t, "# HELP feedd_stage_ops_total Operations timed per stage.\n"
            "# TYPE feedd_stage_ops_total counter\n");
    for (int s = 0; s < FEEDD_STAGE_COUNT; s++)
        put(&t, "feedd_stage_ops_total{stage=\"%s\"} %llu\n", stages[s],
            (unsigned long long)ld(&m->stage_count[s]));
    put(&t, "# HELP feedd_stream_status_total Streams ended, by gRPC status code.\n"
            "# TYPE feedd_stream_status_total counter\n");
    for (int c = 0; c < FEEDD_STATUS_CODES; c++)
        if (ld(&m->stream_status[c]))
            put(&t, "feedd_stream_status_total{code=\"%d\"} %llu\n", c,
                (unsigned long long)ld(&m->stream_status[c]));
    counter(&t, "feedd_unauthenticated_total",
            "Feed calls refused (UNAUTHENTICATED) for want of the bearer token.",
            ld(&m->unauthenticated));
    counter(&t, "feedd_connections_cut_total",
            "Connections shut down by the transport guard: resident memory over "
            "feedd_resident_limit_bytes and the connection sending faster than a feed client.",
            ld(&m->connections_cut));
    counter(&t, "feedd_cache_hits_total", "Decoded-sample cache lookups that found the image.",
            ld(&m->cache_hits));
    counter(&t, "feedd_cache_misses_total",
            "Decoded-sample cache lookups that decoded the JPEG instead.", ld(&m->cache_misses));
    counter(&t, "feedd_cache_evictions_total",
            "Decoded images evicted (not asked for in a turn of the clock, ~2 epochs).",
            ld(&m->cache_evictions));
    counter(&t, "feedd_cache_not_owned_total",
            "Cache misses decoded without admission: the client routes by owner and another "
            "server owns the sample (BatchRequest.ownership NOT_OWNER).",
            ld(&m->cache_not_owned));
    gauge(&t, "feedd_datasets_refused",
          "Datasets not served: they could not be opened at start (the log says why).",
          ldg(&m->datasets_refused));
    gauge(&t, "feedd_bad_shards",
          "Tar shards that could not be read at start, served from their index files: each of "
          "their samples fails (io_error).",
          ldg(&m->bad_shards));
    gauge(&t, "feedd_shard_files_open",
          "Descriptors of local tar shards open now, in use or kept (at most --shard-files "
          "kept, plus one per reader past it).",
          (int64_t)feed_blob_open_files());
    gauge(&t, "feedd_cache_entries", "Images held in the decoded-sample cache.",
          ldg(&m->cache_entries));
    counter(&t, "feedd_cache_stale_total",
            "Cache hits dropped and made again because the sample's file changed on disk.",
            ld(&m->cache_stale));
    gauge(&t, "feedd_cache_bytes",
          "Bytes charged to the decoded-sample cache: slot tables and images, never above "
          "feedd_cache_budget_bytes.",
          ldg(&m->cache_bytes));
    gauge(&t, "feedd_cache_budget_bytes", "The decoded-sample cache's budget (--cache-bytes).",
          ldg(&m->cache_budget));
    counter(&t, "feedd_share_hits_total",
            "Samples of sharing streams made from an image another job decoded into the share "
            "window.",
            ld(&m->share_hits));
    counter(&t, "feedd_share_decodes_total",
            "Images a sharing stream decoded into the share window for its group.",
            ld(&m->share_decodes));
    counter(&t, "feedd_share_alone_total",
            "Samples of sharing streams decoded for themselves alone: no other live job in the "
            "group, the window full, the image evicted before the job read it, or a decode "
            "waited for too long.",
            ld(&m->share_alone));
    counter(&t, "feedd_share_waits_total",
            "Lookups of sharing streams that found their image being decoded by another worker "
            "and waited for it (single flight), at most 2 s each.",
            ld(&m->share_waits));
    counter(&t, "feedd_share_evictions_total",
            "Share window images evicted to make room before every job of their group read them.",
            ld(&m->share_evictions));
    gauge(&t, "feedd_share_window_bytes",
          "Bytes charged to the share window (headers and images), never above "
          "--share-window-bytes.",
          ldg(&m->share_window_bytes));
    feed_remote_stats rs;
    feed_remote_stats_get(&rs);
    counter(&t, "feedd_remote_requests_total",
            "HTTP requests to remote datasets (s3://, http(s)://), retries included.",
            rs.requests);
    counter(&t, "feedd_remote_retries_total",
            "Remote requests sent again after a 5xx, 429, timeout or cut connection.",
            rs.retries);
    counter(&t, "feedd_remote_bytes_total", "Body bytes received from remote datasets.",
            rs.bytes);
    counter(&t, "feedd_remote_readahead_hits_total",
            "Remote sample reads served by bytes fetched ahead (--remote-readahead).",
            rs.readahead_hits);
    counter(&t, "feedd_remote_readahead_dropped_total",
            "Read-ahead hints dropped: no room under --remote-readahead.", rs.readahead_dropped);
    counter(&t, "feedd_remote_late_samples_total",
            "Remote samples failed because their store had not delivered them within "
            "--remote-batch-deadline-ms.",
            ld(&m->remote_late));
    gauge(&t, "feedd_queue_depth", "Samples waiting for a worker.", ldg(&m->queue_depth));
    render_jobs(&t);
    counter(&t, "feedd_jobs_over_cap_total",
            "Streams naming a job beyond the 1024 jobs a server shares its workers between, "
            "served each as a job of its own.",
            ld(&m->jobs_over_cap));
    gauge(&t, "feedd_active_streams", "Open Stream calls.", ldg(&m->active_streams));
    gauge(&t, "feedd_inflight_batches", "Accepted batches not yet handed to gRPC.",
          ldg(&m->inflight_batches));
    gauge(&t, "feedd_waiting_batches",
          "Accepted batches waiting for batch memory (max-memory, max-stream-memory).",
          ldg(&m->waiting_batches));
    gauge(&t, "feedd_memory_bytes", "Batch buffers allocated.", ldg(&m->memory_bytes));
    gauge(&t, "feedd_resident_bytes",
          "Anonymous resident memory of the process (resident less file and shared pages), read "
          "every 10 ms by the transport guard; 0 without it.",
          ldg(&m->rss_bytes));
    gauge(&t, "feedd_resident_limit_bytes",
          "The transport guard's limit (0: no guard): above it, connections that flood are cut.",
          ldg(&m->rss_limit));
    gauge(&t, "feedd_transport_over_limit", "1 while feedd_resident_bytes is above the limit.",
          ldg(&m->transport_over));
    gauge(&t, "feedd_tls_cert_not_after_seconds",
          "The TLS certificate's notAfter (Unix time), read at start; 0 without TLS.",
          ldg(&m->tls_cert_not_after));
    gauge(&t, "feedd_tls_cert_valid",
          "1 if the TLS certificate was within its validity window at start; 0 if expired, not "
          "yet valid or without TLS.",
          atomic_load_explicit(&m->tls_cert_valid, memory_order_relaxed));
    gauge(&t, "feedd_serving", "1 while serving, 0 while draining.",
          atomic_load_explicit(&m->serving, memory_order_relaxed));
    t.len += feedd_fleet_render(t.p + t.len, t.cap - t.len, feed_now_ns());
    pthread_mutex_lock(&extra_mu);
    if (extra_fn)
        t.len += extra_fn(extra_arg, t.p + t.len, t.cap - t.len - 1);
    pthread_mutex_unlock(&extra_mu);
    t.p[t.len] = '\0';
    *len = t.len;
    return t.p;
}

static void set_in_request(feedd_metrics_server *m, struct MHD_Connection *conn, bool on)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    metrics_conn *c = ci ? ci->socket_context : NULL;
    if (c) {
        pthread_mutex_lock(&m->mu);
        c->in_request = on;
        c->idle_since_ns = feed_now_ns();
        pthread_mutex_unlock(&m->mu);
    }
}

typedef struct auth_seen {
    const char *value;
    unsigned n;
} auth_seen;

/* MHD's header iterator: count the Authorization headers, keep the last. */
static enum MHD_Result count_auth(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    auth_seen *a = cls;
    (void)kind;
    if (strcasecmp(key, "Authorization") == 0) {
        a->value = value ? value : "";
        a->n++;
    }
    return MHD_YES;
}

/* Whether the request carries the token: exactly one Authorization header, and it matches. */
static bool request_allowed(feedd_metrics_server *m, struct MHD_Connection *conn)
{
    auth_seen a = {"", 0};
    if (!feedd_token_required(&m->token))
        return true;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_auth, &a);
    return a.n == 1 && feedd_token_matches(&m->token, a.value, strlen(a.value));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)upload_len;
    (void)con_cls;
    feedd_metrics_server *m = cls;
    struct MHD_Response *resp = NULL;
    unsigned code = MHD_HTTP_OK;
    set_in_request(m, conn, true);
    if (!request_allowed(m, conn)) {
        static const char msg[] = "this endpoint needs 'Authorization: Bearer TOKEN'\n";
        code = MHD_HTTP_UNAUTHORIZED;
        resp = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        if (resp)
            MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    } else if (strcmp(method, "GET") != 0) {
        static const char msg[] = "only GET\n";
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, "/metrics") != 0 && strcmp(url, "/") != 0) {
        static const char msg[] = "not found; try /metrics\n";
        code = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    } else {
        size_t len = 0;
        char *body = feedd_metrics_render(&len);
        if (body)
            resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
        else
            free(body);
    }
    enum MHD_Result r = MHD_NO;
    if (resp) {
        r = MHD_queue_response(conn, code, resp);
        MHD_destroy_response(resp);
    }
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)con_cls;
    (void)toe;
    set_in_request(cls, conn, false);
}

/* Whether a connection's request bytes wait in its socket, unread by MHD. */
static bool has_unread(int fd)
{
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

/*
 * MHD's thread, mu held: with more than METRICS_CONN_CAP connections held,
 * shut down the one idle longest that is not in a request and has no bytes
 * waiting. One start evicts at most one connection, so an attacker's
 * reconnects churn one for one instead of emptying the table.
 */
static void evict_idlest(feedd_metrics_server *m)
{
    metrics_conn *idlest = NULL;
    if (m->held <= METRICS_CONN_CAP)
        return;
    for (size_t i = 0; i < METRICS_CONN_SLOTS; i++) {
        metrics_conn *c = &m->conns[i];
        if (c->used && !c->evicted && !c->in_request &&
            (!idlest || c->idle_since_ns < idlest->idle_since_ns) && !has_unread(c->fd))
            idlest = c;
    }
    if (idlest) {
        shutdown(idlest->fd, SHUT_RDWR);
        idlest->evicted = true;
        m->held--;
    }
}

/* MHD's thread: a connection starts or ends; its table entry is its socket context. */
static void on_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                      enum MHD_ConnectionNotificationCode toe)
{
    feedd_metrics_server *m = cls;
    pthread_mutex_lock(&m->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (size_t i = 0; i < METRICS_CONN_SLOTS && ci && !*socket_context; i++) {
            metrics_conn *c = &m->conns[i];
            if (!c->used) {
                *c = (metrics_conn){true, false, false, ci->connect_fd, feed_now_ns()};
                *socket_context = c;
                m->held++;
            }
        }
        evict_idlest(m);
    } else {
        metrics_conn *c = *socket_context;
        m->live -= m->live > 0;
        if (c && !c->evicted)
            m->held -= m->held > 0;
        if (c)
            c->used = false;
        *socket_context = NULL;
        pthread_cond_signal(&m->closed);
    }
    pthread_mutex_unlock(&m->mu);
}

/*
 * The listener's thread: hand a connection to MHD; or, when MHD holds all
 * but one of its slots (evicted connections it has not closed yet) for
 * METRICS_FULL_WAIT_S, close it. Connections MHD has not started yet
 * count, or a burst would pass MHD's limit before any of it is started.
 */
static void on_connection(void *arg, int fd, const struct sockaddr *addr, socklen_t len)
{
    feedd_metrics_server *m = arg;
    uint64_t refused = 0, now = feed_now_ns();
    uint64_t until = now + (uint64_t)METRICS_FULL_WAIT_S * 1000000000u;
    pthread_mutex_lock(&m->mu);
    /* A burst outruns MHD's closing of what it evicts: wait for room, a while. */
    while (m->live + 1 >= METRICS_CONN_SLOTS &&
           feed_cond_wait_until(&m->closed, &m->mu, until) == 0)
        ;
    bool full = m->live + 1 >= METRICS_CONN_SLOTS;
    if (full && (m->refused++ == 0 || now - m->refused_log_ns >= 10000000000u)) {
        refused = m->refused;
        m->refused_log_ns = now;
    }
    m->live += !full;
    pthread_mutex_unlock(&m->mu);
    if (full) {
        close(fd);
        if (refused)
            FEED_LOGW("metrics: refused a connection: %d connections are open or closing (%llu "
                      "refused so far)",
                      METRICS_CONN_SLOTS, (unsigned long long)refused);
    } else if (MHD_add_connection(m->daemon, fd, addr, len) != MHD_YES) {
        pthread_mutex_lock(&m->mu);
        m->live -= m->live > 0;
        pthread_mutex_unlock(&m->mu);
    }
}

/* MHD's log, at most one line per METRICS_LOG_MS, with how many were dropped. */
static void on_log(void *cls, const char *fmt, va_list ap)
{
    feedd_metrics_server *m = cls;
    uint64_t now = feed_now_ns(), dropped = 0;
    bool emit = false;
    pthread_mutex_lock(&m->mu);
    if (m->log_last_ns == 0 || now - m->log_last_ns >= (uint64_t)METRICS_LOG_MS * 1000000u) {
        emit = true;
        dropped = m->log_dropped;
        m->log_dropped = 0;
        m->log_last_ns = now;
    } else {
        m->log_dropped++;
    }
    pthread_mutex_unlock(&m->mu);
    if (emit) {
        char line[512];
        vsnprintf(line, sizeof line, fmt, ap);
        line[strcspn(line, "\n")] = '\0';
        FEED_LOGW("metrics: %s (%llu similar messages dropped)", line, (unsigned long long)dropped);
    }
}

int feedd_metrics_start(const char *addr, const char *token_file, feedd_metrics_server **out,
                        int *port)
{
    int rc = FEED_ENOMEM;
    char err[1200];
    *out = NULL;
    feedd_metrics_server *m = calloc(1, sizeof *m);
    if (!m)
        goto out;
    pthread_mutex_init(&m->mu, NULL);
    feed_cond_init(&m->closed);
    rc = feedd_token_load(token_file, "metrics-token-file", &m->token, err, sizeof err);
    if (rc != 0) {
        FEED_LOGE("%s", rc == FEED_ENOMEM ? "metrics: out of memory" : err);
        goto fail;
    }
    rc = feedd_listener_open(addr, "metrics", &m->listener, port);
    if (rc != 0)
        goto fail;
    rc = FEED_EIO;
    m->daemon = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC | MHD_USE_ERROR_LOG,
        0, NULL, NULL, handle, m, MHD_OPTION_EXTERNAL_LOGGER, on_log, m,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_CONN_SLOTS, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)METRICS_CONN_MEMORY, MHD_OPTION_CONNECTION_TIMEOUT,
        METRICS_IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION, on_notify, m,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, m, MHD_OPTION_END);
    if (!m->daemon) {
        FEED_LOGE("metrics: cannot start the HTTP server");
        goto fail;
    }
    rc = feedd_listener_start(m->listener, on_connection, m);
    if (rc != 0)
        goto fail;
    *out = m;
    goto out;
fail:
    feedd_metrics_stop(m);
out:
    return rc;
}

void feedd_metrics_stop(feedd_metrics_server *m)
{
    if (m) {
        feedd_listener_close(m->listener);
        if (m->daemon)
            MHD_stop_daemon(m->daemon);
        feedd_token_free(&m->token);
        pthread_cond_destroy(&m->closed);
        pthread_mutex_destroy(&m->mu);
        free(m);
    }
}
