/*
 * Prometheus exposition of feedd_metrics over libmicrohttpd (its own polling
 * thread). Rendering reads the atomics without locks; the numbers of one
 * scrape are each exact but not a consistent snapshot of each other.
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "feed/errors.h"
#include "feed/log.h"

feedd_metrics feedd_m;

struct feedd_metrics_server {
    struct MHD_Daemon *daemon;
};

#define RENDER_CAP (64 * 1024)

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
    counter(&t, "feedd_bytes_total", "Batch pixel bytes handed to gRPC.", ld(&m->bytes));
    counter(&t, "feedd_requests_total", "Batch requests accepted.", ld(&m->requests));
    counter(&t, "feedd_streams_total", "Stream calls opened.", ld(&m->streams_opened));
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
    counter(&t, "feedd_cache_hits_total", "Sample cache hits.", ld(&m->cache_hits));
    counter(&t, "feedd_cache_misses_total", "Sample cache misses.", ld(&m->cache_misses));
    counter(&t, "feedd_cache_evictions_total", "Sample cache evictions.", ld(&m->cache_evictions));
    gauge(&t, "feedd_cache_bytes", "Bytes held by the sample cache.", ldg(&m->cache_bytes));
    gauge(&t, "feedd_queue_depth", "Samples waiting for a worker.", ldg(&m->queue_depth));
    gauge(&t, "feedd_active_streams", "Open Stream calls.", ldg(&m->active_streams));
    gauge(&t, "feedd_inflight_batches", "Accepted batches not yet handed to gRPC.",
          ldg(&m->inflight_batches));
    gauge(&t, "feedd_waiting_batches",
          "Accepted batches waiting for batch memory (max-memory, max-stream-memory).",
          ldg(&m->waiting_batches));
    gauge(&t, "feedd_memory_bytes", "Batch buffers allocated.", ldg(&m->memory_bytes));
    gauge(&t, "feedd_serving", "1 while serving, 0 while draining.",
          atomic_load_explicit(&m->serving, memory_order_relaxed));
    *len = t.len;
    return t.p;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls)
{
    (void)cls;
    (void)version;
    (void)upload;
    (void)upload_len;
    (void)con_cls;
    struct MHD_Response *resp = NULL;
    unsigned code = MHD_HTTP_OK;
    if (strcmp(method, "GET") != 0) {
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
        if (!body)
            return MHD_NO;
        resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
        else
            free(body);
    }
    if (!resp)
        return MHD_NO;
    enum MHD_Result r = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return r;
}

int feedd_metrics_start(const char *addr, feedd_metrics_server **out, int *port)
{
    char host[128] = "0.0.0.0";
    const char *p = addr;
    const char *colon = strrchr(addr, ':');
    int rc = FEED_EINVAL;
    *out = NULL;
    if (colon) {
        size_t hl = (size_t)(colon - addr);
        if (hl == 0 || hl >= sizeof host)
            return FEED_EINVAL;
        memcpy(host, addr, hl);
        host[hl] = '\0';
        p = colon + 1;
    }
    char *end = NULL;
    long pv = strtol(p, &end, 10);
    if (end == p || *end != '\0' || pv < 0 || pv > 65535)
        return FEED_EINVAL;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)pv);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return FEED_EINVAL;
    feedd_metrics_server *m = calloc(1, sizeof *m);
    if (!m)
        return FEED_ENOMEM;
    m->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)pv,
                                 NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, 64u,
                                 MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!m->daemon) {
        rc = FEED_EIO;
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (!info || info->port == 0) {
        rc = FEED_EIO;
        goto fail;
    }
    *port = info->port;
    *out = m;
    return 0;
fail:
    feedd_metrics_stop(m);
    return rc;
}

void feedd_metrics_stop(feedd_metrics_server *m)
{
    if (!m)
        return;
    if (m->daemon)
        MHD_stop_daemon(m->daemon);
    free(m);
}
