/*
 * feedd's gRPC service (see service.h): start, drain, stop and free, the
 * request slots that accept calls, and the completion-queue threads that
 * run every gRPC event and hand it to unary.c or stream.c. How the files of
 * the service divide the work, which thread runs what and the lock order
 * (svc->mu, then a stream's inbox, then the pool's or the memory's):
 * service_int.h. Each completion-queue thread ticks the streams it owns
 * every FEEDD_TICK_MS; the main thread only sets the service's flags.
 *
 * Ownership: the main thread owns the service object and calls start, drain,
 * stop and free; each completion-queue thread owns its queue, its request
 * slots, its arena and its request buffer. The service owns its memory
 * accounting (memory.h) and starts and stops its granter thread; a start
 * that fails gives back everything it had started.
 */
#include "service.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/support/alloc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "certcheck.h"
#include "guard.h"
#include "listener.h"
#include "memory.h"
#include "metrics.h"
#include "service_int.h"

/* A pending grpc_server_request_call, re-armed after each call it accepts. */
typedef struct req_slot {
    tag t;
    cq_thread *cqt;
    method m;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_call_details details;
    grpc_byte_buffer *payload;
} req_slot;

static void arm_slot(req_slot *slot);

static req_slot *slot_new(cq_thread *cqt, method m)
{
    req_slot *s = calloc(1, sizeof *s);
    if (s) {
        s->t.kind = TAG_REQUEST;
        s->t.obj = s;
        s->cqt = cqt;
        s->m = m;
    }
    return s;
}

static void arm_slot(req_slot *slot)
{
    feedd_service *svc = slot->cqt->svc;
    grpc_call_error e;
    slot->call = NULL;
    slot->payload = NULL;
    grpc_metadata_array_init(&slot->md);
    if (slot->m == METHOD_OTHER) {
        grpc_call_details_init(&slot->details);
        e = grpc_server_request_call(svc->server, &slot->call, &slot->details, &slot->md,
                                     slot->cqt->cq, slot->cqt->cq, &slot->t);
    } else {
        e = grpc_server_request_registered_call(svc->server, svc->methods[slot->m], &slot->call,
                                                &slot->deadline, &slot->md,
                                                slot->m == METHOD_STREAM ? NULL : &slot->payload,
                                                slot->cqt->cq, slot->cqt->cq, &slot->t);
    }
    if (e != GRPC_CALL_OK)
        FEED_LOGE("request_call failed: %d", (int)e);
}

static void slot_reset(req_slot *slot)
{
    grpc_metadata_array_destroy(&slot->md);
    if (slot->m == METHOD_OTHER)
        grpc_call_details_destroy(&slot->details);
}

/*
 * Whether call may reach feed.v1.Feed as far as the transport goes: always
 * without TLS; with TLS only over it, as the Health port's plaintext
 * connections share the server.
 */
static bool call_over_tls(const feedd_service *svc, grpc_call *call)
{
    bool tls = !svc->health_creds;
    grpc_auth_context *ctx = tls ? NULL : grpc_call_auth_context(call);
    if (ctx) {
        grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(
            ctx, GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME);
        for (const grpc_auth_property *p = grpc_auth_property_iterator_next(&it); p && !tls;
             p = grpc_auth_property_iterator_next(&it))
            tls = p->value_length == strlen(GRPC_SSL_TRANSPORT_SECURITY_TYPE) &&
                  memcmp(p->value, GRPC_SSL_TRANSPORT_SECURITY_TYPE, p->value_length) == 0;
        grpc_auth_context_release(ctx);
    }
    return tls;
}

/*
 * What reached the service on the call's connection, credited to it for
 * the transport guard (guard.h); returns the connection's descriptor there,
 * or -1.
 */
static int credit_call(feedd_service *svc, grpc_call *call, grpc_byte_buffer *payload)
{
    if (!svc->guard)
        return -1;
    char *peer = grpc_call_get_peer(call);
    int fd = feedd_guard_fd_of(svc->guard, peer);
    feedd_guard_credit(svc->guard, fd,
                       GUARD_CALL_CREDIT + (payload ? grpc_byte_buffer_length(payload) : 0));
    gpr_free(peer);
    return fd;
}

/* A call accepted: hand it on, then re-arm the slot unless the server is shutting down. */
static void dispatch(req_slot *slot)
{
    cq_thread *cqt = slot->cqt;
    feedd_service *svc = cqt->svc;
    grpc_call *call = slot->call;
    grpc_byte_buffer *payload = slot->payload;
    int fd = credit_call(svc, call, payload);
    /* Health stays open so that probes need no secret; it tells nothing about the data. */
    if (slot->m != METHOD_HEALTH && !call_over_tls(svc, call)) {
        feedd_count(&feedd_m.unauthenticated, 1);
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_UNAUTHENTICATED,
                           "this port serves grpc.health.v1.Health only; feed.v1.Feed needs TLS");
        goto done;
    }
    if (slot->m != METHOD_HEALTH && !feedd_token_allows(&svc->token, &slot->md)) {
        feedd_count(&feedd_m.unauthenticated, 1);
        FEED_LOGD("call without the right bearer token: UNAUTHENTICATED");
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_UNAUTHENTICATED,
                           "this server needs 'authorization: Bearer TOKEN' metadata with its "
                           "token");
        goto done;
    }
    if (slot->m != METHOD_HEALTH)
        feedd_guard_authenticated(svc->guard, fd);
    switch (slot->m) {
    case METHOD_STREAM:
        feedd_stream_start(cqt, call);
        break;
    case METHOD_DESCRIBE:
        feedd_unary_describe(svc, call, payload);
        break;
    case METHOD_HEALTH:
        feedd_unary_health(svc, call, payload);
        break;
    default:
        feedd_unary_unimplemented(svc, call, slot->details.method);
        break;
    }
done:
    if (payload)
        grpc_byte_buffer_destroy(payload);
    slot_reset(slot);
    pthread_mutex_lock(&svc->mu);
    bool rearm = !svc->shutting_down;
    pthread_mutex_unlock(&svc->mu);
    if (rearm)
        arm_slot(slot);
}

/* A slot's tag; ok false: the server is shutting down and the slot is done. */
static void on_request(req_slot *slot, bool ok)
{
    if (ok)
        dispatch(slot);
    else
        slot_reset(slot);
}

/* Tick this thread's streams when FEEDD_TICK_MS have passed, however busy its queue is. */
static void maybe_tick(cq_thread *cqt)
{
    uint64_t now = feed_now_ns();
    if (now - cqt->last_tick_ns >= (uint64_t)FEEDD_TICK_MS * 1000000u) {
        cqt->last_tick_ns = now;
        feedd_stream_tick_all(cqt, now);
    }
}

static void *cq_main(void *arg)
{
    cq_thread *cqt = arg;
    feedd_service *svc = cqt->svc;
    cqt->last_tick_ns = feed_now_ns();
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            cqt->cq, gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                  gpr_time_from_millis(FEEDD_TICK_MS, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        maybe_tick(cqt);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        tag *t = ev.tag;
        bool ok = ev.success != 0;
        switch (t->kind) {
        case TAG_REQUEST:
            on_request(t->obj, ok);
            break;
        case TAG_STREAM_RECV:
            feedd_stream_on_recv(t->obj, ok);
            break;
        case TAG_STREAM_SEND:
            feedd_stream_on_send(t->obj, ok);
            break;
        case TAG_STREAM_STATUS:
            feedd_stream_on_status(t->obj);
            break;
        case TAG_STREAM_CLOSE:
            feedd_stream_on_close(t->obj);
            break;
        case TAG_STREAM_WAKE:
            feedd_stream_on_wake(t->obj);
            break;
        case TAG_UNARY_DONE:
            feedd_unary_done(t->obj);
            break;
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&svc->mu);
            svc->shutdown_done = true;
            pthread_cond_broadcast(&svc->cv);
            pthread_mutex_unlock(&svc->mu);
            break;
        }
    }
    return NULL;
}

/*
 * Shut every completion queue down, let its thread (or, where none started,
 * this one) take it to GRPC_QUEUE_SHUTDOWN, and destroy it. After the server
 * is destroyed or was never started.
 */
static void close_queues(feedd_service *svc)
{
    for (uint32_t i = 0; svc->cqts && i < svc->n_cqts; i++)
        if (svc->cqts[i].cq)
            grpc_completion_queue_shutdown(svc->cqts[i].cq);
    for (uint32_t i = 0; svc->cqts && i < svc->n_cqts; i++) {
        cq_thread *c = &svc->cqts[i];
        if (c->started)
            pthread_join(c->thread, NULL);
        else if (c->cq)
            while (
                grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN)
                ;
        if (c->cq)
            grpc_completion_queue_destroy(c->cq);
        c->cq = NULL;
        c->started = false;
    }
}

/*
 * gRPC's own limits, for its own listener (--listener grpc, or
 * server/net/grpc151 not usable): no transport guard watches these
 * connections, so gRPC's resource quota gets --transport-memory, and a
 * connection may not open more streams than the process serves. Appends to
 * args from n; returns the new count; *quota gets a reference the caller
 * drops once the server holds its own.
 */
static int fallback_args(const feedd_config *cfg, grpc_arg *args, int n,
                         grpc_resource_quota **quota)
{
    args[n++] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_MAX_CONCURRENT_STREAMS, {.integer = (int)cfg->max_streams}};
    if (cfg->transport_memory) {
        *quota = grpc_resource_quota_create("feedd");
        if (*quota) {
            grpc_resource_quota_resize(*quota, cfg->transport_memory < (uint64_t)SIZE_MAX / 2
                                                   ? (size_t)cfg->transport_memory
                                                   : SIZE_MAX / 2);
            args[n].type = GRPC_ARG_POINTER;
            args[n].key = (char *)GRPC_ARG_RESOURCE_QUOTA;
            args[n].value.pointer.p = *quota;
            args[n++].value.pointer.vtable = grpc_resource_quota_arg_vtable();
        }
    }
    return n;
}

/* The server, its queues and methods, neither bound nor started. 0 or FEED_ENOMEM. */
static int make_server(feedd_service *svc)
{
    static const char *const paths[METHOD_OTHER] = {
        "/feed.v1.Feed/Stream", "/feed.v1.Feed/Describe", "/grpc.health.v1.Health/Check"};
    const feedd_config *cfg = svc->cfg;
    int rc = FEED_ENOMEM;
    /*
     * No SO_REUSEPORT: a second feedd on a taken port must fail, not share it.
     * Keepalive: the server pings idle connections so a vanished client's
     * streams (and their batch memory) go within 40 s; clients may ping every
     * 500 ms, with or without calls, without being told off (libfeedclient
     * pings every second to find a stopped server fast).
     */
    grpc_arg args[12];
    int n = 0;
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER,
                         GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                         {.integer = (int)cfg->max_request_bytes}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}};
    args[n++] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, {.integer = 500}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = 30000}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = 10000}};
    args[n++] =
        (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, {.integer = 1}};
    /*
     * Idle connections (issue 28): gRPC closes one that has had no call for
     * the timeout, and one whose handshake (TLS, then the client's HTTP/2
     * SETTINGS) has not completed in it; a connection feedd hands over by
     * descriptor has no handshake and only the first rule.
     */
    if (cfg->idle_timeout_ms) {
        args[n++] = (grpc_arg){GRPC_ARG_INTEGER,
                               GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                               {.integer = (int)cfg->idle_timeout_ms}};
        args[n++] = (grpc_arg){GRPC_ARG_INTEGER,
                               GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                               {.integer = (int)(cfg->idle_timeout_ms < FEEDD_HANDSHAKE_MS_MAX
                                                     ? cfg->idle_timeout_ms
                                                     : FEEDD_HANDSHAKE_MS_MAX)}};
    }
    grpc_resource_quota *quota = NULL;
    if (!svc->own_listener)
        n = fallback_args(cfg, args, n, &quota);
#ifdef FEEDD_GRPC151_CORE
    else
        args[n++] = feedd_handoff_arg(&svc->handoff); /* used by the TLS port only */
#endif
    grpc_channel_args ca = {(size_t)n, args};
    svc->server = grpc_server_create(&ca, NULL);
    if (quota)
        grpc_resource_quota_unref(quota); /* the server holds its own reference */
    svc->n_cqts = cfg->cq_threads;
    svc->cqts = calloc(svc->n_cqts, sizeof *svc->cqts);
    if (!svc->server || !svc->cqts)
        goto out;
    for (uint32_t i = 0; i < svc->n_cqts; i++) {
        cq_thread *c = &svc->cqts[i];
        c->svc = svc;
        c->cq = grpc_completion_queue_create_for_next(NULL);
        /* Packed varints expand up to 8x into uint64 arrays; the rest is small. */
        size_t arena_cap = 9 * (size_t)cfg->max_request_bytes + 65536;
        feedd_arena_init(&c->arena, malloc(arena_cap), arena_cap);
        c->rbuf = malloc((size_t)cfg->max_request_bytes);
        if (!c->arena.base || !c->rbuf)
            goto out;
        grpc_server_register_completion_queue(svc->server, c->cq, NULL);
    }
    for (int m = 0; m < METHOD_OTHER; m++) {
        svc->methods[m] = grpc_server_register_method(
            svc->server, paths[m], NULL,
            m == METHOD_STREAM ? GRPC_SRM_PAYLOAD_NONE : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (!svc->methods[m])
            goto out;
    }
    rc = 0;
out:
    return rc;
}

/* Every queue's request slots, armed; after grpc_server_start. 0 or FEED_ENOMEM. */
static int arm_slots(feedd_service *svc)
{
    int rc = 0;
    for (uint32_t i = 0; i < svc->n_cqts && rc == 0; i++) {
        cq_thread *c = &svc->cqts[i];
        for (int k = 0; k < METHOD_COUNT * REQ_SLOTS_PER_METHOD && rc == 0; k++) {
            c->slots[k] = slot_new(c, (method)(k / REQ_SLOTS_PER_METHOD));
            if (c->slots[k])
                arm_slot(c->slots[k]);
            else
                rc = FEED_ENOMEM;
        }
    }
    return rc;
}

/*
 * Order: the memory accounting and its granter, then the server (not
 * started), then the completion-queue threads, which may wait on queues of
 * a server not started yet, then the port, then the start. A failure before
 * the start unwinds in reverse; one after it goes through stop, as a running
 * service would.
 */
int feedd_service_start(const feedd_config *cfg, const feedd_served_dataset *datasets, size_t n,
                        feedd_pool *pool, feedd_service **out, int *port)
{
    int rc = FEED_ENOMEM;
    feedd_service *svc = calloc(1, sizeof *svc);
    if (!svc)
        goto out;
    svc->cfg = cfg;
    svc->datasets = datasets;
    svc->n_datasets = n;
    svc->env = (feedd_request_env){cfg, datasets, n};
    svc->pool = pool;
    svc->t_shutdown = (tag){TAG_SHUTDOWN, svc};
    pthread_mutex_init(&svc->mu, NULL);
    feed_cond_init(&svc->cv);
    atomic_init(&svc->draining, false);
    rc = feedd_memory_new(cfg->max_memory, cfg->max_stream_memory, feedd_stream_on_granted,
                          &svc->memory);
    if (rc != 0)
        goto fail;
    svc->own_listener = feedd_ports_choose_listener(cfg);
    rc = make_server(svc);
    if (rc != 0)
        goto fail;
    for (uint32_t i = 0; i < svc->n_cqts && rc == 0; i++) {
        cq_thread *c = &svc->cqts[i];
        c->started = pthread_create(&c->thread, NULL, cq_main, c) == 0;
        rc = c->started ? 0 : FEED_ENOMEM;
    }
    if (rc == 0)
        rc = feedd_ports_bind(svc, port);
    if (rc != 0)
        goto fail;
    grpc_server_start(svc->server);
    rc = arm_slots(svc);
#ifdef FEEDD_GRPC151_CORE
    if (rc == 0 && svc->own_listener)
        rc = feedd_ports_start_own(svc);
#endif
    if (rc != 0)
        goto fail_started;
    atomic_store(&feedd_m.serving, 1);
    *out = svc;
    goto out;
fail_started:
    if (feedd_service_stop(svc, 10000) == 0)
        feedd_service_free(svc);
    goto out;
fail:
    feedd_listener_close(svc->listener);
    svc->listener = NULL;
    feedd_listener_close(svc->health_listener);
    svc->health_listener = NULL;
    if (svc->server)
        grpc_server_destroy(svc->server);
    svc->server = NULL;
    close_queues(svc);
    feedd_memory_stop(svc->memory);
    feedd_service_free(svc);
out:
    return rc;
}

void feedd_service_drain(feedd_service *svc)
{
    /* Each completion-queue thread drains its streams at its next tick. */
    atomic_store(&svc->draining, true);
    atomic_store(&feedd_m.serving, 0);
}

int feedd_service_health_port(const feedd_service *svc)
{
    return svc->health_port;
}

size_t feedd_service_open_streams(feedd_service *svc)
{
    pthread_mutex_lock(&svc->mu);
    size_t n = svc->open_streams;
    pthread_mutex_unlock(&svc->mu);
    return n;
}

size_t feedd_service_render_streams(void *arg, char *buf, size_t cap)
{
    feedd_service *svc = arg;
    size_t len = 0;
    int n = snprintf(buf, cap,
                     "# HELP feedd_stream_memory_bytes Batch memory a stream holds (granted, "
                     "not yet sent).\n# TYPE feedd_stream_memory_bytes gauge\n");
    len = n > 0 && (size_t)n < cap ? (size_t)n : 0;
    pthread_mutex_lock(&svc->mu);
    for (feed_list_node *node = svc->streams.first; node && len < cap; node = node->next) {
        stream *s = FEED_LIST_ENTRY(node, stream, link);
        char client[2 * FEEDD_CLIENT_NAME_MAX + 1];
        size_t c = 0;
        /* Printable ASCII already; a label value escapes only these two. */
        for (const char *p = s->client; *p; p++) {
            if (*p == '"' || *p == '\\')
                client[c++] = '\\';
            client[c++] = *p;
        }
        client[c] = '\0';
        n = snprintf(buf + len, cap - len,
                     "feedd_stream_memory_bytes{stream=\"%llu\",peer=\"%s\",client=\"%s\"} %llu\n",
                     (unsigned long long)s->id, s->peer, client,
                     (unsigned long long)atomic_load(&s->mem.used));
        len = n > 0 && (size_t)n < cap - len ? len + (size_t)n : len;
    }
    pthread_mutex_unlock(&svc->mu);
    return len;
}

/*
 * Wait until gRPC has let go of every call, or grace_ms passed. Streams go
 * once their close fires and workers drop their jobs (bounded by one
 * sample), but gRPC holds a cancelled call whose message is stuck in flow
 * control until the peer's side of the connection moves, which a client
 * that stopped reading may never do.
 */
static bool wait_calls_gone(feedd_service *svc, uint32_t grace_ms)
{
    uint64_t until = feed_now_ns() + (uint64_t)grace_ms * 1000000u;
    bool done = true;
    pthread_mutex_lock(&svc->mu);
    while (done && !(svc->shutdown_done && svc->live_streams == 0 && svc->live_unary == 0)) {
        if (feed_cond_wait_until(&svc->cv, &svc->mu, until) != 0) {
            FEED_LOGW("shutdown: %zu streams and %zu calls still held by gRPC after %u ms",
                      svc->live_streams, svc->live_unary, grace_ms);
            done = false;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    return done;
}

int feedd_service_stop(feedd_service *svc, uint32_t grace_ms)
{
    int rc = 0;
    /* First: no connection may reach a server that shuts down. */
    feedd_listener_close(svc->listener);
    svc->listener = NULL;
    feedd_listener_close(svc->health_listener);
    svc->health_listener = NULL;
    if (svc->server) {
        pthread_mutex_lock(&svc->mu);
        svc->shutting_down = true;
        pthread_mutex_unlock(&svc->mu);
        grpc_server_shutdown_and_notify(svc->server, svc->cqts[0].cq, &svc->t_shutdown);
        grpc_server_cancel_all_calls(svc->server);
        rc = wait_calls_gone(svc, grace_ms) ? 0 : FEED_ETIMEDOUT;
    }
    if (svc->server && rc == 0) {
        FEED_LOGD("shutdown: gRPC server shut down, streams gone");
        /* No stream is left, so no batch waits for memory. */
        feedd_memory_stop(svc->memory);
        grpc_server_destroy(svc->server);
        svc->server = NULL;
        close_queues(svc);
    }
    return rc;
}

void feedd_service_free(feedd_service *svc)
{
    if (svc) {
        for (uint32_t i = 0; svc->cqts && i < svc->n_cqts; i++) {
            for (size_t k = 0; k < METHOD_COUNT * REQ_SLOTS_PER_METHOD; k++)
                free(svc->cqts[i].slots[k]);
            free(svc->cqts[i].arena.base);
            free(svc->cqts[i].rbuf);
        }
        free(svc->cqts);
        /* Last: completion-queue threads credit it until they are gone. */
        feedd_guard_stop(svc->guard);
        feedd_memory_unref(svc->memory);
        if (svc->creds)
            grpc_server_credentials_release(svc->creds);
        if (svc->health_creds)
            grpc_server_credentials_release(svc->health_creds);
        feedd_token_free(&svc->token);
        pthread_cond_destroy(&svc->cv);
        pthread_mutex_destroy(&svc->mu);
        free(svc);
    }
}
