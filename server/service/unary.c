/*
 * feedd's unary calls: feed.v1.Feed/Describe, grpc.health.v1.Health/Check,
 * and UNIMPLEMENTED for any other method. Each runs on the completion-queue
 * thread that accepted the call and ends with one batch (initial metadata,
 * the reply, the status, RECV_CLOSE_ON_SERVER); the unary object owns the
 * call and the reply until that batch's tag comes back (feedd_unary_done).
 * svc->live_unary (under svc->mu) counts them, so stop waits for the last.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "feed.pb-c.h"
#include "feed/dataset.h"
#include "feed/log.h"
#include "health.pb-c.h"
#include "service_int.h"

/* A unary call (Describe, Health, or an unknown method) in flight. */
typedef struct unary {
    tag t;
    feedd_service *svc;
    grpc_call *call;
    grpc_byte_buffer *resp;
    grpc_slice details;
    int cancelled;
} unary;

static grpc_byte_buffer *pack_copy(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Start the call's one batch of ops; the unary object owns call and resp until its tag. */
static void unary_start(unary *u, grpc_status_code code)
{
    feedd_service *svc = u->svc;
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (u->resp) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = u->resp;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &u->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &u->cancelled;
    pthread_mutex_lock(&svc->mu);
    svc->live_unary++;
    pthread_mutex_unlock(&svc->mu);
    grpc_call_error e = grpc_call_start_batch(u->call, ops, n, &u->t, NULL);
    if (e != GRPC_CALL_OK) {
        FEED_LOGE("unary start_batch failed: %d; cancelling the call", (int)e);
        grpc_call_cancel(u->call, NULL);
        feedd_unary_done(u); /* its tag will never come: release what the tag would have */
    }
}

void feedd_unary_finish(feedd_service *svc, grpc_call *call, grpc_byte_buffer *resp,
                        grpc_status_code code, const char *msg)
{
    unary *u = calloc(1, sizeof *u);
    if (!u) {
        if (resp)
            grpc_byte_buffer_destroy(resp);
        grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
        grpc_call_unref(call);
    } else {
        u->t.kind = TAG_UNARY_DONE;
        u->t.obj = u;
        u->svc = svc;
        u->call = call;
        u->resp = resp;
        u->details = grpc_slice_from_copied_string(msg ? msg : "");
        unary_start(u, code);
    }
}

void feedd_unary_done(void *obj)
{
    unary *u = obj;
    feedd_service *svc = u->svc;
    if (u->resp)
        grpc_byte_buffer_destroy(u->resp);
    grpc_slice_unref(u->details);
    grpc_call_unref(u->call);
    free(u);
    pthread_mutex_lock(&svc->mu);
    svc->live_unary--;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
}

/*
 * The whole request message in a malloc'd buffer (free() it), or NULL when it
 * is past max-request-bytes (gRPC refuses those before we see them) or
 * memory is short.
 */
static uint8_t *read_request(const feedd_service *svc, grpc_byte_buffer *payload, size_t *len)
{
    size_t n = grpc_byte_buffer_length(payload);
    uint8_t *buf = n <= svc->cfg->max_request_bytes ? malloc(n ? n : 1) : NULL;
    if (buf && feedd_read_bb(payload, n, buf, len) != 0) {
        free(buf);
        buf = NULL;
    }
    return buf;
}

void feedd_unary_describe(feedd_service *svc, grpc_call *call, grpc_byte_buffer *payload)
{
    const feedd_config *cfg = svc->cfg;
    uint8_t *buf = NULL;
    size_t len = 0;
    Feed__V1__DescribeRequest *req = NULL;
    Feed__V1__DatasetInfo infos[FEEDD_MAX_DATASETS];
    Feed__V1__DatasetInfo *ptrs[FEEDD_MAX_DATASETS];
    char **names[FEEDD_MAX_DATASETS] = {0};
    Feed__V1__DescribeResponse resp = FEED__V1__DESCRIBE_RESPONSE__INIT;
    size_t n = 0;
    char msg[200];

    /*
     * Health already says NOT_SERVING; a client that asked Describe would go
     * on to open a stream that can only be refused, so refuse it here.
     */
    if (atomic_load(&svc->draining)) {
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_UNAVAILABLE,
                           "server draining: open no new streams here");
        goto out;
    }
    if (payload) {
        grpc_status_code code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, sizeof msg, "request: not a valid feed.v1.DescribeRequest");
        buf = read_request(svc, payload, &len);
        if (buf)
            code = feedd_request_describe(&svc->env, buf, len, &req, msg, sizeof msg);
        if (code != GRPC_STATUS_OK) {
            feedd_unary_finish(svc, call, NULL, code, msg);
            goto out;
        }
    }
    const char *want = req && req->dataset ? req->dataset : "";
    for (size_t i = 0; i < svc->n_datasets; i++) {
        const feedd_served_dataset *d = &svc->datasets[i];
        if (want[0] && strcmp(d->name, want) != 0)
            continue;
        Feed__V1__DatasetInfo *di = &infos[n];
        feed__v1__dataset_info__init(di);
        di->name = (char *)d->name;
        di->num_samples = feed_dataset_count(d->ds);
        di->format = (char *)feed_dataset_format(d->ds);
        di->cache_side = feedd_pool_cache_side(svc->pool, (uint32_t)i);
        di->share_side = feedd_pool_share_side(svc->pool, (uint32_t)i);
        di->fingerprint = (char *)feed_dataset_fingerprint(d->ds);
        uint32_t nc = feed_dataset_num_classes(d->ds);
        names[n] = calloc(nc ? nc : 1, sizeof(char *));
        if (!names[n]) {
            feedd_unary_finish(svc, call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        for (uint32_t c = 0; c < nc; c++)
            names[n][c] = (char *)feed_dataset_class_name(d->ds, c);
        di->n_class_names = nc;
        di->class_names = names[n];
        ptrs[n] = di;
        n++;
    }
    resp.protocol_version = FEED__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    resp.n_datasets = n;
    resp.datasets = ptrs;
    resp.server_threads = cfg->threads;
    resp.max_batch_size = cfg->max_batch;
    resp.max_window = cfg->max_window;
    resp.max_batch_bytes = cfg->max_batch_bytes;
    resp.server_version = (char *)FEED_VERSION;
    feedd_unary_finish(svc, call, pack_copy(&resp.base), GRPC_STATUS_OK, NULL);
out:
    for (size_t i = 0; i < n + 1 && i < FEEDD_MAX_DATASETS; i++)
        free(names[i]);
    if (req)
        feed__v1__describe_request__free_unpacked(req, NULL);
    free(buf);
}

void feedd_unary_health(feedd_service *svc, grpc_call *call, grpc_byte_buffer *payload)
{
    size_t len = 0;
    Grpc__Health__V1__HealthCheckRequest *req = NULL;
    uint8_t *buf = payload ? read_request(svc, payload, &len) : NULL;
    static const uint32_t service_field[] = {1}; /* HealthCheckRequest.service */
    int nul = buf ? feedd_wire_has_nul(buf, len, service_field, 1) : 0;
    if (buf && nul == 0)
        req = grpc__health__v1__health_check_request__unpack(NULL, len, buf);
    const char *service = req && req->service ? req->service : "";
    if (nul == 1) {
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                           "service: contains a NUL byte");
    } else if (!req && payload) {
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                           "request: not a valid grpc.health.v1.HealthCheckRequest");
    } else if (service[0] && strcmp(service, "feed.v1.Feed") != 0) {
        feedd_unary_finish(svc, call, NULL, GRPC_STATUS_NOT_FOUND, "service: unknown service");
    } else {
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = atomic_load(&svc->draining)
                          ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                          : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        feedd_unary_finish(svc, call, pack_copy(&resp.base), GRPC_STATUS_OK, NULL);
    }
    if (req)
        grpc__health__v1__health_check_request__free_unpacked(req, NULL);
    free(buf);
}

void feedd_unary_unimplemented(feedd_service *svc, grpc_call *call, grpc_slice method_name)
{
    char m[200];
    size_t ml = GRPC_SLICE_LENGTH(method_name);
    snprintf(m, sizeof m, "%.*s", (int)(ml < 150 ? ml : 150),
             (const char *)GRPC_SLICE_START_PTR(method_name));
    FEED_LOGD("unimplemented method %s", m);
    char msg[256];
    snprintf(msg, sizeof msg, "method %s is not implemented by feedd", m);
    feedd_unary_finish(svc, call, NULL, GRPC_STATUS_UNIMPLEMENTED, msg);
}
