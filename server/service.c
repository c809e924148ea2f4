/*
 * feedd's gRPC service (see service.h).
 *
 * Threads: `cq_threads` completion-queue threads, each with its own queue;
 * a call lives on the queue that accepted it. They parse requests (the
 * parsing and the checks that need no stream state are in request.c), start
 * sends and statuses, and never decode. Pool workers finish batches and may
 * start a send themselves (grpc_call_start_batch is thread-safe); the send's
 * completion comes back on the call's queue.
 *
 * A stream: RECV_CLOSE_ON_SERVER armed first, alone; one RECV_MESSAGE in
 * flight; at most `window` accepted batches not yet handed to gRPC; one
 * SEND_MESSAGE in flight (finished batches wait in a ready list, bounded by
 * the window); the status goes out once nothing is left to send. Batch
 * pixel bytes are handed to gRPC as a slice over the worker-written buffer
 * (no copy); the slice's destructor returns the memory to the cap.
 *
 * Memory caps are back-pressure: an accepted batch whose buffer would pass
 * --max-stream-memory or --max-memory waits (still counted in the window)
 * in one FIFO shared by all streams, mem_wait. Whenever memory frees, the
 * granter thread walks it from the head: a batch that fits both caps gets
 * its buffer and goes to the pool; one that fits the total but not its own
 * stream's cap is passed over (with the rest of its stream, which keeps each
 * stream's order) because only its own stream can free that memory; one
 * that does not fit the total stops the walk, so no later or smaller batch
 * overtakes it and none starves. New batches go straight to the pool only
 * when nothing waits.
 *
 * Locks, in this order: svc->mu (stream list, counters, shutdown state),
 * then stream->mu (everything in the stream marked "guarded by mu"), then
 * mem_wait.mu (a leaf: nothing else is locked, and no gRPC call made, while
 * it is held). A stream is freed when its reference count (one per pending
 * gRPC op, one per accepted job, one for the open call) drops to zero.
 */
#include "service.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "feed.pb-c.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "health.pb-c.h"
#include "metrics.h"
#include "request.h"

#define REQ_SLOTS_PER_METHOD 2
#define STATUS_MSG_MAX 256

typedef enum tag_kind {
    TAG_REQUEST,
    TAG_STREAM_RECV,
    TAG_STREAM_SEND,
    TAG_STREAM_CLOSE,
    TAG_STREAM_STATUS,
    TAG_UNARY_DONE,
    TAG_SHUTDOWN,
} tag_kind;

typedef struct tag {
    tag_kind kind;
    void *obj;
} tag;

typedef enum method {
    METHOD_STREAM,
    METHOD_DESCRIBE,
    METHOD_HEALTH,
    METHOD_OTHER,
    METHOD_COUNT
} method;

typedef struct cq_thread cq_thread;

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

struct cq_thread {
    feedd_service *svc;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool started;
    feedd_arena arena; /* unpacks this thread's requests */
    uint8_t *rbuf;     /* one request's bytes, max-request-bytes */
    req_slot *slots[METHOD_COUNT * REQ_SLOTS_PER_METHOD];
};

/*
 * Batch pixel memory: the header, then the bytes; freed by the slice
 * destructor, which gRPC may run after the service is gone (a transport
 * stream holding an unsent message is destroyed late), so the accounting it
 * updates is process-wide and lives as long as the process.
 */
static atomic_uint_fast64_t batch_mem_used;

typedef struct batch_job batch_job;

/*
 * Batches waiting for memory, and the granter's wake-up. Process-wide for the
 * same reason as batch_mem_used: the slice destructor kicks it.
 */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Guarded by mu. */
    batch_job *head, *tail; /* FIFO over every stream, linked by wait_prev/wait_next */
    uint64_t gen;           /* bumped whenever memory frees or a batch starts waiting */
    uint64_t pass;          /* the granter's walks, to mark streams passed over in one */
    bool stop;
} mem_wait = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0, false};

typedef struct batch_mem {
    size_t bytes;
    uint8_t data[];
} batch_mem;

typedef struct stream stream;

struct batch_job {
    feedd_job job;
    stream *owner;
    uint64_t batch_id;
    uint64_t bytes; /* of the pixel buffer */
    uint32_t crc;
    batch_mem *mem; /* NULL while the job waits for memory */
    uint64_t *indices;
    uint32_t *labels;
    feed_sample_status *status;
    uint32_t *sample_crc;
    char (*errors)[FEEDD_SAMPLE_MSG_MAX + 1];
    batch_job *ready_next;
    batch_job *wait_prev, *wait_next; /* mem_wait's list, guarded by mem_wait.mu */
};

struct stream {
    feedd_service *svc;
    cq_thread *cqt;
    grpc_call *call;
    char peer[128];
    tag t_recv, t_send, t_close, t_status;
    pthread_mutex_t mu;
    stream *prev, *next; /* svc->streams, guarded by svc->mu */
    /* Guarded by mu. */
    int refs;
    grpc_byte_buffer *recv_bb;
    int close_cancelled;
    bool recv_armed, recv_done, closed, failing, draining;
    bool refused; /* a request came in while draining */
    bool send_in_flight, sent_md, status_sent;
    grpc_status_code status_code;
    char status_msg[STATUS_MSG_MAX];
    grpc_slice status_slice;
    feedd_session sess;
    uint32_t outstanding; /* accepted, not yet handed to gRPC (waiting for memory too) */
    /*
     * Bytes of this stream's buffers, from the grant until the send completes.
     * Atomic: it only grows under mem_wait.mu (fast path or granter), and
     * shrinks under mu.
     */
    atomic_uint_fast64_t mem;
    uint64_t mem_sending;
    uint64_t wait_pass; /* guarded by mem_wait.mu: the granter's walk that passed it over */
    batch_job *ready_head, *ready_tail;
    feedd_queue q;
    uint64_t send_started_ns;
    uint64_t batches_sent, bytes_sent, requests;
};

/* A unary call (Describe, Health, or an unknown method) in flight. */
typedef struct unary {
    tag t;
    feedd_service *svc;
    grpc_call *call;
    grpc_byte_buffer *resp;
    grpc_slice details;
    int cancelled;
} unary;

struct feedd_service {
    const feedd_config *cfg;
    const feedd_served_dataset *datasets;
    size_t n_datasets;
    feedd_request_env env; /* cfg and datasets, for request.c */
    feedd_pool *pool;
    grpc_server *server;
    void *methods[METHOD_COUNT];
    cq_thread *cqts;
    uint32_t n_cqts;
    tag t_shutdown;
    atomic_bool draining;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Guarded by mu. */
    stream *streams;
    size_t live_streams; /* allocated stream objects */
    size_t open_streams; /* calls whose close has not fired */
    size_t live_unary;
    bool shutting_down, shutdown_done;
    pthread_t granter; /* gives waiting batches their memory */
    bool granter_started;
};

/* ---- small helpers ---- */

static void peer_of(grpc_call *call, char *out, size_t cap)
{
    char *p = grpc_call_get_peer(call);
    snprintf(out, cap, "%s", p ? p : "?");
    gpr_free(p);
}

static int read_bb(grpc_byte_buffer *bb, size_t limit, uint8_t *dst, size_t *len)
{
    grpc_byte_buffer_reader r;
    size_t n = 0;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return FEED_EPROTO;
    grpc_slice s;
    int rc = 0;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        size_t l = GRPC_SLICE_LENGTH(s);
        if (l > limit - n)
            rc = FEED_ETOOBIG;
        else
            memcpy(dst + n, GRPC_SLICE_START_PTR(s), l);
        n += rc == 0 ? l : 0;
        grpc_slice_unref(s);
    }
    grpc_byte_buffer_reader_destroy(&r);
    *len = n;
    return rc;
}

static grpc_byte_buffer *pack_copy(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

/* Memory freed: wake the granter if a batch waits. Any thread, any locks but mem_wait.mu. */
static void mem_kick(void)
{
    pthread_mutex_lock(&mem_wait.mu);
    mem_wait.gen++;
    if (mem_wait.head)
        pthread_cond_signal(&mem_wait.cv);
    pthread_mutex_unlock(&mem_wait.mu);
}

static void batch_mem_release(void *p)
{
    batch_mem *m = p;
    atomic_fetch_sub(&batch_mem_used, m->bytes);
    feedd_gauge(&feedd_m.memory_bytes, -(int64_t)m->bytes);
    free(m);
    mem_kick();
}

/* ---- request slots ---- */

static void arm_slot(req_slot *slot);

static req_slot *slot_new(cq_thread *cqt, method m)
{
    req_slot *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t.kind = TAG_REQUEST;
    s->t.obj = s;
    s->cqt = cqt;
    s->m = m;
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

/* ---- unary calls ---- */

static void unary_done(unary *u);

static void unary_finish(feedd_service *svc, grpc_call *call, grpc_byte_buffer *resp,
                         grpc_status_code code, const char *msg)
{
    unary *u = calloc(1, sizeof *u);
    if (!u) {
        if (resp)
            grpc_byte_buffer_destroy(resp);
        grpc_call_cancel_with_status(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
        grpc_call_unref(call);
        return;
    }
    u->t.kind = TAG_UNARY_DONE;
    u->t.obj = u;
    u->svc = svc;
    u->call = call;
    u->resp = resp;
    u->details = grpc_slice_from_copied_string(msg ? msg : "");
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (resp) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = resp;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &u->details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &u->cancelled;
    pthread_mutex_lock(&svc->mu);
    svc->live_unary++;
    pthread_mutex_unlock(&svc->mu);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, &u->t, NULL);
    if (e != GRPC_CALL_OK) {
        FEED_LOGE("unary start_batch failed: %d; cancelling the call", (int)e);
        grpc_call_cancel(call, NULL);
        unary_done(u); /* its tag will never come: release what the tag would have */
    }
}

static void unary_done(unary *u)
{
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

static void handle_describe(cq_thread *cqt, grpc_call *call, grpc_byte_buffer *payload)
{
    feedd_service *svc = cqt->svc;
    const feedd_config *cfg = svc->cfg;
    uint8_t buf[4096];
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
        unary_finish(svc, call, NULL, GRPC_STATUS_UNAVAILABLE,
                     "server draining: open no new streams here");
        goto out;
    }
    if (payload) {
        grpc_status_code code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, sizeof msg, "request: not a valid feed.v1.DescribeRequest");
        if (read_bb(payload, sizeof buf, buf, &len) == 0)
            code = feedd_request_describe(&svc->env, buf, len, &req, msg, sizeof msg);
        if (code != GRPC_STATUS_OK) {
            unary_finish(svc, call, NULL, code, msg);
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
        uint32_t nc = feed_dataset_num_classes(d->ds);
        names[n] = calloc(nc ? nc : 1, sizeof(char *));
        if (!names[n]) {
            unary_finish(svc, call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
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
    unary_finish(svc, call, pack_copy(&resp.base), GRPC_STATUS_OK, NULL);
out:
    for (size_t i = 0; i < n + 1 && i < FEEDD_MAX_DATASETS; i++)
        free(names[i]);
    if (req)
        feed__v1__describe_request__free_unpacked(req, NULL);
}

static void handle_health(cq_thread *cqt, grpc_call *call, grpc_byte_buffer *payload)
{
    feedd_service *svc = cqt->svc;
    uint8_t buf[1024];
    size_t len = 0;
    Grpc__Health__V1__HealthCheckRequest *req = NULL;
    if (payload && read_bb(payload, sizeof buf, buf, &len) == 0)
        req = grpc__health__v1__health_check_request__unpack(NULL, len, buf);
    if (!req && payload) {
        unary_finish(svc, call, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                     "request: not a valid grpc.health.v1.HealthCheckRequest");
        return;
    }
    const char *service = req && req->service ? req->service : "";
    if (service[0] && strcmp(service, "feed.v1.Feed") != 0) {
        unary_finish(svc, call, NULL, GRPC_STATUS_NOT_FOUND, "service: unknown service");
    } else {
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        resp.status = atomic_load(&svc->draining)
                          ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                          : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        unary_finish(svc, call, pack_copy(&resp.base), GRPC_STATUS_OK, NULL);
    }
    if (req)
        grpc__health__v1__health_check_request__free_unpacked(req, NULL);
}

/* ---- streams ---- */

static void stream_free(stream *s)
{
    feedd_service *svc = s->svc;
    pthread_mutex_lock(&svc->mu);
    if (s->prev)
        s->prev->next = s->next;
    else
        svc->streams = s->next;
    if (s->next)
        s->next->prev = s->prev;
    svc->live_streams--;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    grpc_slice_unref(s->status_slice);
    if (s->recv_bb)
        grpc_byte_buffer_destroy(s->recv_bb);
    grpc_call_unref(s->call);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Drop a reference; call with s->mu held; unlocks it. */
static void stream_unref_unlock(stream *s)
{
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last)
        stream_free(s);
}

static void stream_mem_sub(stream *s, uint64_t bytes)
{
    if (bytes) {
        atomic_fetch_sub(&s->mem, bytes);
        mem_kick();
    }
}

/* Under mem_wait.mu. */
static void wait_unlink_locked(batch_job *bj)
{
    if (bj->wait_prev)
        bj->wait_prev->wait_next = bj->wait_next;
    else
        mem_wait.head = bj->wait_next;
    if (bj->wait_next)
        bj->wait_next->wait_prev = bj->wait_prev;
    else
        mem_wait.tail = bj->wait_prev;
    bj->wait_prev = bj->wait_next = NULL;
    feedd_gauge(&feedd_m.waiting_batches, -1);
}

static void job_free(batch_job *bj)
{
    if (bj->mem)
        batch_mem_release(bj->mem);
    free(bj->indices);
    free(bj->labels);
    free(bj->status);
    free(bj->sample_crc);
    free(bj->errors);
    free(bj);
}

/* A job that will not be sent; under s->mu. Drops its stream reference count too. */
static void discard_job_locked(stream *s, batch_job *bj)
{
    s->outstanding--;
    stream_mem_sub(s, bj->mem ? bj->mem->bytes : 0);
    feedd_gauge(&feedd_m.inflight_batches, -1);
    job_free(bj);
    s->refs--;
}

/* Drop queued and ready work; under s->mu. The caller holds a reference. */
static void drop_work_locked(stream *s)
{
    batch_job *bj = (batch_job *)(void *)feedd_pool_cancel(s->svc->pool, &s->q);
    while (bj) {
        batch_job *next = (batch_job *)(void *)bj->job.qnext;
        discard_job_locked(s, bj);
        bj = next;
    }
    while (s->ready_head) {
        bj = s->ready_head;
        s->ready_head = bj->ready_next;
        discard_job_locked(s, bj);
    }
    s->ready_tail = NULL;
    /* Jobs waiting for memory; one the granter already took is its to dispose of. */
    batch_job *waiting = NULL;
    pthread_mutex_lock(&mem_wait.mu);
    for (batch_job *w = mem_wait.head, *next; w; w = next) {
        next = w->wait_next;
        if (w->owner == s) {
            wait_unlink_locked(w);
            w->wait_next = waiting;
            waiting = w;
        }
    }
    if (waiting) {
        /* One of them may have been the head that held the others back. */
        mem_wait.gen++;
        pthread_cond_signal(&mem_wait.cv);
    }
    pthread_mutex_unlock(&mem_wait.mu);
    while (waiting) {
        bj = waiting;
        waiting = bj->wait_next;
        discard_job_locked(s, bj);
    }
}

static void send_status_locked(stream *s, grpc_status_code code, const char *msg)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    s->status_sent = true;
    s->status_code = code;
    snprintf(s->status_msg, sizeof s->status_msg, "%s", msg ? msg : "");
    s->status_slice = grpc_slice_from_copied_string(s->status_msg);
    if (!s->sent_md) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        s->sent_md = true;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n++].data.send_status_from_server.status_details = &s->status_slice;
    s->refs++;
    if (grpc_call_start_batch(s->call, ops, n, &s->t_status, NULL) != GRPC_CALL_OK) {
        s->refs--;
        grpc_call_cancel(s->call, NULL);
    }
    if ((unsigned)code < FEEDD_STATUS_CODES)
        feedd_count(&feedd_m.stream_status[code], 1);
    if (code != GRPC_STATUS_OK)
        FEED_LOGI("stream %s: ending with status %d: %s", s->peer, (int)code, s->status_msg);
}

/* End the stream with an error now: queued and ready batches are dropped. Under s->mu. */
static void fail_locked(stream *s, grpc_status_code code, const char *msg)
{
    if (s->failing || s->status_sent || s->closed)
        return;
    s->failing = true;
    s->status_code = code;
    snprintf(s->status_msg, sizeof s->status_msg, "%s", msg);
    drop_work_locked(s);
}

static void maybe_finish_locked(stream *s)
{
    if (s->closed || s->status_sent || s->send_in_flight)
        return;
    if (s->failing) {
        char msg[STATUS_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", s->status_msg);
        send_status_locked(s, s->status_code, msg);
        return;
    }
    if (s->outstanding > 0 || s->ready_head)
        return;
    if (s->recv_done && !s->refused)
        send_status_locked(s, GRPC_STATUS_OK, NULL);
    else if (s->draining)
        send_status_locked(s, GRPC_STATUS_UNAVAILABLE, "server draining: no new batches");
}

/* ---- zero-copy packing of a Batch ---- */

typedef struct slice_sink {
    ProtobufCBuffer base;
    const uint8_t *pixels;
    size_t pixels_len;
    batch_mem *mem;
    grpc_slice meta; /* everything but the pixels, written in order */
    size_t meta_len, meta_cut;
    grpc_slice out[4];
    size_t n_out;
    bool overflow;
} slice_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    slice_sink *k = (slice_sink *)b;
    if (data == k->pixels && len == k->pixels_len && k->mem && k->n_out + 2 <= 4) {
        if (k->meta_len > k->meta_cut)
            k->out[k->n_out++] = grpc_slice_sub(k->meta, k->meta_cut, k->meta_len);
        k->meta_cut = k->meta_len;
        k->out[k->n_out++] =
            grpc_slice_new_with_user_data(k->mem->data, len, batch_mem_release, k->mem);
        k->mem = NULL; /* owned by the slice now */
        return;
    }
    if (len > GRPC_SLICE_LENGTH(k->meta) - k->meta_len) {
        k->overflow = true;
        return;
    }
    memcpy(GRPC_SLICE_START_PTR(k->meta) + k->meta_len, data, len);
    k->meta_len += len;
}

/* Build the Batch message for bj; takes ownership of bj->mem. NULL if it cannot. */
static grpc_byte_buffer *pack_batch(stream *s, batch_job *bj)
{
    grpc_byte_buffer *bb = NULL;
    uint32_t n = bj->job.n;
    Feed__V1__SampleStatus *st = malloc(n * sizeof *st);
    Feed__V1__SampleError *errs = NULL, **errp = NULL;
    uint32_t n_err = 0;
    if (!st)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        st[i] = (Feed__V1__SampleStatus)bj->status[i];
        n_err += bj->status[i] != FEED_SAMPLE_OK;
    }
    if (n_err) {
        errs = calloc(n_err, sizeof *errs);
        errp = calloc(n_err, sizeof *errp);
        if (!errs || !errp)
            goto out;
        for (uint32_t i = 0, e = 0; i < n; i++) {
            if (bj->status[i] == FEED_SAMPLE_OK)
                continue;
            feed__v1__sample_error__init(&errs[e]);
            errs[e].position = i;
            errs[e].index = bj->indices[i];
            errs[e].status = st[i];
            errs[e].message = bj->errors[i];
            errp[e] = &errs[e];
            e++;
        }
    }
    Feed__V1__Batch m = FEED__V1__BATCH__INIT;
    m.batch_id = bj->batch_id;
    m.epoch = bj->job.epoch;
    m.n_indices = n;
    m.indices = bj->indices;
    m.n_labels = n;
    m.labels = bj->labels;
    m.n_status = n;
    m.status = st;
    m.n_errors = n_err;
    m.errors = errp;
    m.height = s->sess.tf.out_h;
    m.width = s->sess.tf.out_w;
    m.channels = 3;
    m.dtype = FEED__V1__DTYPE__DTYPE_UINT8;
    m.layout = FEED__V1__LAYOUT__LAYOUT_NHWC;
    m.data.len = bj->mem->bytes;
    m.data.data = bj->mem->data;
    m.crc32c = bj->crc;
    m.server_busy_ns = atomic_load(&bj->job.busy_ns);

    size_t total = feed__v1__batch__get_packed_size(&m);
    slice_sink k = {.base = {sink_append},
                    .pixels = bj->mem->data,
                    .pixels_len = bj->mem->bytes,
                    .mem = bj->mem};
    k.meta = grpc_slice_malloc(total - bj->mem->bytes);
    bj->mem = NULL;
    feed__v1__batch__pack_to_buffer(&m, &k.base);
    if (k.meta_len > k.meta_cut)
        k.out[k.n_out++] = grpc_slice_sub(k.meta, k.meta_cut, k.meta_len);
    if (!k.overflow && !k.mem)
        bb = grpc_raw_byte_buffer_create(k.out, k.n_out);
    else
        FEED_LOGE("stream %s: packing batch %llu failed", s->peer,
                  (unsigned long long)bj->batch_id);
    if (k.mem)
        batch_mem_release(k.mem);
    for (size_t i = 0; i < k.n_out; i++)
        grpc_slice_unref(k.out[i]);
    grpc_slice_unref(k.meta);
out:
    free(st);
    free(errs);
    free(errp);
    return bb;
}

/* Start the next send if none is in flight; under s->mu. */
static void try_send_locked(stream *s)
{
    while (!s->send_in_flight && s->ready_head && !s->closed && !s->status_sent && !s->failing) {
        batch_job *bj = s->ready_head;
        s->ready_head = bj->ready_next;
        if (!s->ready_head)
            s->ready_tail = NULL;
        size_t bytes = bj->mem->bytes;
        grpc_byte_buffer *bb = pack_batch(s, bj);
        s->outstanding--;
        feedd_gauge(&feedd_m.inflight_batches, -1);
        job_free(bj);
        s->refs--; /* the job's reference */
        if (!bb) {
            stream_mem_sub(s, bytes);
            fail_locked(s, GRPC_STATUS_INTERNAL, "could not pack a batch");
            return;
        }
        grpc_op ops[2];
        size_t n = 0;
        memset(ops, 0, sizeof ops);
        if (!s->sent_md) {
            ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
            s->sent_md = true;
        }
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = bb;
        s->mem_sending = bytes;
        s->send_in_flight = true;
        s->send_started_ns = feed_now_ns();
        s->refs++;
        grpc_call_error e = grpc_call_start_batch(s->call, ops, n, &s->t_send, NULL);
        grpc_byte_buffer_destroy(bb); /* the call holds its own reference to the slices */
        if (e != GRPC_CALL_OK) {
            FEED_LOGE("stream %s: send failed to start: %d", s->peer, (int)e);
            s->send_in_flight = false;
            stream_mem_sub(s, bytes);
            s->refs--;
            fail_locked(s, GRPC_STATUS_INTERNAL, "send failed");
            return;
        }
        s->batches_sent++;
        s->bytes_sent += bytes;
        feedd_count(&feedd_m.batches, 1);
        feedd_count(&feedd_m.bytes, bytes);
    }
}

/* Pool worker thread: the last sample of a batch is done. */
static void on_job_done(feedd_job *job)
{
    batch_job *bj = (batch_job *)(void *)job;
    stream *s = bj->owner;
    bj->crc = job->crc;
    pthread_mutex_lock(&s->mu);
    if (s->closed || s->failing || s->status_sent || atomic_load(&job->cancelled)) {
        s->refs++; /* discard drops the job's reference; keep ours for the unlock below */
        discard_job_locked(s, bj);
        maybe_finish_locked(s);
        stream_unref_unlock(s);
        return;
    }
    bj->ready_next = NULL;
    if (s->ready_tail)
        s->ready_tail->ready_next = bj;
    else
        s->ready_head = bj;
    s->ready_tail = bj;
    s->refs++; /* try_send may drop the job's reference */
    try_send_locked(s);
    maybe_finish_locked(s);
    stream_unref_unlock(s);
}

static void arm_recv_locked(stream *s)
{
    if (s->recv_armed || s->recv_done || s->closed || s->status_sent || s->failing)
        return;
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->recv_bb;
    s->refs++;
    s->recv_armed = true;
    if (grpc_call_start_batch(s->call, &op, 1, &s->t_recv, NULL) != GRPC_CALL_OK) {
        s->refs--;
        s->recv_armed = false;
        s->recv_done = true;
    }
}

/* Take bytes from --max-memory if they fit. Under mem_wait.mu (growth happens only there). */
static bool reserve_memory(const feedd_config *cfg, uint64_t bytes)
{
    bool ok = atomic_load(&batch_mem_used) + bytes <= cfg->max_memory;
    if (ok) {
        atomic_fetch_add(&batch_mem_used, bytes);
        feedd_gauge(&feedd_m.memory_bytes, (int64_t)bytes);
    }
    return ok;
}

/* Give back a grant whose buffer could not be allocated. */
static void unreserve(stream *s, uint64_t bytes)
{
    atomic_fetch_sub(&batch_mem_used, bytes);
    feedd_gauge(&feedd_m.memory_bytes, -(int64_t)bytes);
    stream_mem_sub(s, bytes);
}

/* Everything of a job but its pixel buffer, which waits for the memory caps. */
static batch_job *job_new(stream *s, const Feed__V1__BatchRequest *r, size_t sample_bytes)
{
    uint32_t n = (uint32_t)r->n_indices;
    batch_job *bj = calloc(1, sizeof *bj);
    if (!bj)
        return NULL;
    bj->indices = malloc(n * sizeof *bj->indices);
    bj->labels = malloc(n * sizeof *bj->labels);
    bj->status = malloc(n * sizeof *bj->status);
    bj->sample_crc = malloc(n * sizeof *bj->sample_crc);
    bj->errors = malloc(n * sizeof *bj->errors);
    if (!bj->indices || !bj->labels || !bj->status || !bj->sample_crc || !bj->errors) {
        job_free(bj);
        return NULL;
    }
    const feed_dataset *ds = s->svc->datasets[s->sess.ds_id].ds;
    memcpy(bj->indices, r->indices, n * sizeof *bj->indices);
    for (uint32_t i = 0; i < n; i++)
        bj->labels[i] = feed_dataset_label(ds, r->indices[i]);
    bj->bytes = (uint64_t)n * sample_bytes;
    bj->owner = s;
    bj->batch_id = r->batch_id;
    bj->job.ds = ds;
    bj->job.ds_id = s->sess.ds_id;
    bj->job.tf = &s->sess.tf;
    bj->job.seed = s->sess.seed;
    bj->job.epoch = r->epoch;
    bj->job.indices = bj->indices;
    bj->job.n = n;
    bj->job.sample_bytes = sample_bytes;
    bj->job.status = bj->status;
    bj->job.sample_crc = bj->sample_crc;
    bj->job.errors = bj->errors;
    bj->job.done = on_job_done;
    bj->job.user = s;
    return bj;
}

/* The pixel buffer, once both caps have granted its bytes; false when malloc fails. */
static bool job_alloc_mem(batch_job *bj)
{
    bj->mem = malloc(sizeof *bj->mem + (size_t)bj->bytes);
    if (bj->mem) {
        bj->mem->bytes = (size_t)bj->bytes;
        bj->job.data = bj->mem->data;
    }
    return bj->mem != NULL;
}

/*
 * A granted job (its bytes reserved in both caps) gets its buffer and goes
 * to the pool, unless its stream ended meanwhile. Under s->mu; the caller
 * holds a reference of its own besides the job's.
 */
static void start_granted_locked(stream *s, batch_job *bj)
{
    bool have = job_alloc_mem(bj);
    if (!have) {
        unreserve(s, bj->bytes);
        fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED, "memory: allocation failed");
    }
    if (!have || s->closed || s->failing || s->status_sent)
        discard_job_locked(s, bj);
    else
        feedd_pool_submit(s->svc->pool, &s->q, &bj->job);
}

/*
 * One walk of mem_wait from the head (see the top of the file); returns the
 * jobs granted, linked by wait_next, their bytes reserved. Under mem_wait.mu.
 */
static batch_job *grant_locked(const feedd_config *cfg)
{
    batch_job *granted = NULL, **tail = &granted;
    uint64_t pass = ++mem_wait.pass;
    for (batch_job *bj = mem_wait.head, *next; bj; bj = next) {
        next = bj->wait_next;
        stream *s = bj->owner; /* alive: the job holds a reference */
        if (s->wait_pass == pass)
            continue;
        if (atomic_load(&s->mem) + bj->bytes > cfg->max_stream_memory) {
            s->wait_pass = pass;
            continue;
        }
        if (!reserve_memory(cfg, bj->bytes))
            break;
        atomic_fetch_add(&s->mem, bj->bytes);
        wait_unlink_locked(bj);
        *tail = bj;
        tail = &bj->wait_next;
    }
    return granted;
}

/* The granter thread: a walk whenever memory frees or a batch starts waiting. */
static void *granter_main(void *arg)
{
    feedd_service *svc = arg;
    pthread_mutex_lock(&mem_wait.mu);
    uint64_t seen = mem_wait.gen;
    while (!mem_wait.stop) {
        if (seen == mem_wait.gen || !mem_wait.head) {
            pthread_cond_wait(&mem_wait.cv, &mem_wait.mu);
            continue;
        }
        seen = mem_wait.gen;
        batch_job *granted = grant_locked(svc->cfg);
        pthread_mutex_unlock(&mem_wait.mu);
        while (granted) {
            batch_job *bj = granted;
            stream *s = bj->owner;
            granted = bj->wait_next;
            bj->wait_next = NULL;
            pthread_mutex_lock(&s->mu);
            s->refs++; /* the job's may go with it */
            start_granted_locked(s, bj);
            maybe_finish_locked(s);
            stream_unref_unlock(s);
        }
        pthread_mutex_lock(&mem_wait.mu);
    }
    pthread_mutex_unlock(&mem_wait.mu);
    return NULL;
}

/* One BatchRequest; under s->mu, on the CQ thread. */
static void handle_request_locked(stream *s, const uint8_t *buf, size_t len)
{
    feedd_service *svc = s->svc;
    const feedd_config *cfg = svc->cfg;
    char msg[STATUS_MSG_MAX];
    feedd_batch_request req;
    grpc_status_code code = feedd_request_batch(&svc->env, &s->cqt->arena, buf, len, s->peer,
                                                &s->sess, &req, msg, sizeof msg);
    if (code != GRPC_STATUS_OK) {
        fail_locked(s, code, msg);
        return;
    }
    if (!req.r)
        return;
    uint64_t bytes = req.bytes;
    if (s->outstanding >= s->sess.window) {
        snprintf(msg, sizeof msg, "window: %u batches already outstanding (window %u)",
                 s->outstanding, s->sess.window);
        fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        return;
    }
    /*
     * config.c clamps max-batch-bytes (checked in request.c) to both caps, so
     * this cannot happen; were that to change, such a batch would wait forever.
     */
    if (bytes > cfg->max_stream_memory || bytes > cfg->max_memory) {
        snprintf(msg, sizeof msg, "memory: a batch of %llu bytes can never fit max-stream-memory",
                 (unsigned long long)bytes);
        fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        return;
    }
    batch_job *bj = job_new(s, req.r, req.sample_bytes);
    if (!bj) {
        fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED, "memory: allocation failed");
        return;
    }
    s->outstanding++;
    s->requests++;
    s->refs++; /* the job's */
    feedd_gauge(&feedd_m.inflight_batches, 1);
    feedd_count(&feedd_m.requests, 1);
    /* Straight to the pool only when nothing waits: a waiting batch is never overtaken. */
    pthread_mutex_lock(&mem_wait.mu);
    bool now = !mem_wait.head && atomic_load(&s->mem) + bytes <= cfg->max_stream_memory &&
               reserve_memory(cfg, bytes);
    if (now) {
        atomic_fetch_add(&s->mem, bytes);
    } else {
        bj->wait_prev = mem_wait.tail;
        if (mem_wait.tail)
            mem_wait.tail->wait_next = bj;
        else
            mem_wait.head = bj;
        mem_wait.tail = bj;
        mem_wait.gen++;
        feedd_gauge(&feedd_m.waiting_batches, 1);
        pthread_cond_signal(&mem_wait.cv);
    }
    pthread_mutex_unlock(&mem_wait.mu);
    if (now)
        start_granted_locked(s, bj);
}

static void on_stream_recv(stream *s, bool ok)
{
    pthread_mutex_lock(&s->mu);
    s->recv_armed = false;
    grpc_byte_buffer *bb = s->recv_bb;
    s->recv_bb = NULL;
    if (!ok || !bb) {
        s->recv_done = true;
    } else if (s->closed || s->status_sent || s->failing) {
        s->recv_done = true;
    } else if (s->draining) {
        /* Accept nothing more; the status follows the batches already accepted. */
        s->recv_done = true;
        s->refused = true;
    } else {
        /*
         * gRPC itself refuses a message over max-request-bytes (its receive
         * limit) with RESOURCE_EXHAUSTED before it gets here. Should one
         * still come (say, larger once decompressed), it gets the same code,
         * as the contract promises; a message that cannot be read at all is
         * malformed.
         */
        size_t cap = (size_t)s->svc->cfg->max_request_bytes, len = 0;
        uint8_t *buf = s->cqt->rbuf;
        int rc = read_bb(bb, cap, buf, &len);
        if (rc == FEED_ETOOBIG)
            fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED,
                        "request: larger than max-request-bytes");
        else if (rc < 0)
            fail_locked(s, GRPC_STATUS_INVALID_ARGUMENT, "request: the message could not be read");
        else
            handle_request_locked(s, buf, len);
        arm_recv_locked(s);
    }
    if (bb)
        grpc_byte_buffer_destroy(bb);
    maybe_finish_locked(s);
    stream_unref_unlock(s);
}

static void on_stream_send(stream *s, bool ok)
{
    pthread_mutex_lock(&s->mu);
    uint64_t dt = feed_now_ns() - s->send_started_ns;
    feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_SEND], dt);
    feedd_count(&feedd_m.stage_count[FEEDD_STAGE_SEND], 1);
    s->send_in_flight = false;
    stream_mem_sub(s, s->mem_sending);
    s->mem_sending = 0;
    if (!ok) {
        /* The call is dead: send no status; RECV_CLOSE will fire. */
        s->status_sent = true;
        drop_work_locked(s);
    }
    try_send_locked(s);
    maybe_finish_locked(s);
    stream_unref_unlock(s);
}

static void on_stream_status(stream *s)
{
    pthread_mutex_lock(&s->mu);
    stream_unref_unlock(s);
}

static void on_stream_close(stream *s)
{
    feedd_service *svc = s->svc;
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    drop_work_locked(s);
    FEED_LOGI("stream %s: closed%s client='%s' requests=%llu batches=%llu bytes=%llu", s->peer,
              s->close_cancelled ? " (cancelled)" : "", s->sess.client_name,
              (unsigned long long)s->requests, (unsigned long long)s->batches_sent,
              (unsigned long long)s->bytes_sent);
    s->refs--;              /* the open call's reference */
    stream_unref_unlock(s); /* the RECV_CLOSE op's */
    feedd_gauge(&feedd_m.active_streams, -1);
    pthread_mutex_lock(&svc->mu);
    svc->open_streams--;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
}

static void start_stream(cq_thread *cqt, grpc_call *call)
{
    feedd_service *svc = cqt->svc;
    stream *s = calloc(1, sizeof *s);
    if (!s) {
        unary_finish(svc, call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->svc = svc;
    s->cqt = cqt;
    s->call = call;
    s->t_recv = (tag){TAG_STREAM_RECV, s};
    s->t_send = (tag){TAG_STREAM_SEND, s};
    s->t_close = (tag){TAG_STREAM_CLOSE, s};
    s->t_status = (tag){TAG_STREAM_STATUS, s};
    s->status_slice = grpc_empty_slice();
    peer_of(call, s->peer, sizeof s->peer);
    pthread_mutex_init(&s->mu, NULL);

    pthread_mutex_lock(&svc->mu);
    bool too_many = svc->open_streams >= svc->cfg->max_streams;
    s->next = svc->streams;
    if (svc->streams)
        svc->streams->prev = s;
    svc->streams = s;
    svc->live_streams++;
    svc->open_streams++;
    pthread_mutex_unlock(&svc->mu);
    feedd_gauge(&feedd_m.active_streams, 1);
    feedd_count(&feedd_m.streams_opened, 1);

    pthread_mutex_lock(&s->mu);
    s->refs = 2; /* the open call and the RECV_CLOSE op */
    s->draining = atomic_load(&svc->draining);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->close_cancelled;
    bool close_armed = grpc_call_start_batch(call, &op, 1, &s->t_close, NULL) == GRPC_CALL_OK;
    if (!close_armed) {
        /* Its tag will never come, and only that tag ends the stream: end it here. */
        FEED_LOGE("stream %s: RECV_CLOSE_ON_SERVER failed to start; cancelling the call", s->peer);
        grpc_call_cancel(call, NULL);
    } else {
        FEED_LOGI("stream %s: connected", s->peer);
        if (too_many) {
            char msg[128];
            snprintf(msg, sizeof msg, "streams: %u streams open (max-streams)",
                     svc->cfg->max_streams);
            fail_locked(s, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
        } else if (!s->draining) {
            arm_recv_locked(s);
        }
        maybe_finish_locked(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (!close_armed)
        on_stream_close(s); /* drops the open call's reference and the close op's */
}

/* ---- the completion-queue threads ---- */

static void on_request(req_slot *slot, bool ok)
{
    cq_thread *cqt = slot->cqt;
    feedd_service *svc = cqt->svc;
    if (!ok) {
        slot_reset(slot);
        return; /* shutting down */
    }
    grpc_call *call = slot->call;
    grpc_byte_buffer *payload = slot->payload;
    switch (slot->m) {
    case METHOD_STREAM:
        start_stream(cqt, call);
        break;
    case METHOD_DESCRIBE:
        handle_describe(cqt, call, payload);
        break;
    case METHOD_HEALTH:
        handle_health(cqt, call, payload);
        break;
    default: {
        char m[200];
        size_t ml = GRPC_SLICE_LENGTH(slot->details.method);
        snprintf(m, sizeof m, "%.*s", (int)(ml < 150 ? ml : 150),
                 (const char *)GRPC_SLICE_START_PTR(slot->details.method));
        FEED_LOGD("unimplemented method %s", m);
        char msg[256];
        snprintf(msg, sizeof msg, "method %s is not implemented by feedd", m);
        unary_finish(svc, call, NULL, GRPC_STATUS_UNIMPLEMENTED, msg);
        break;
    }
    }
    if (payload)
        grpc_byte_buffer_destroy(payload);
    slot_reset(slot);
    pthread_mutex_lock(&svc->mu);
    bool rearm = !svc->shutting_down;
    pthread_mutex_unlock(&svc->mu);
    if (rearm)
        arm_slot(slot);
}

static void *cq_main(void *arg)
{
    cq_thread *cqt = arg;
    feedd_service *svc = cqt->svc;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(cqt->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        tag *t = ev.tag;
        bool ok = ev.success != 0;
        switch (t->kind) {
        case TAG_REQUEST:
            on_request(t->obj, ok);
            break;
        case TAG_STREAM_RECV:
            on_stream_recv(t->obj, ok);
            break;
        case TAG_STREAM_SEND:
            on_stream_send(t->obj, ok);
            break;
        case TAG_STREAM_STATUS:
            on_stream_status(t->obj);
            break;
        case TAG_STREAM_CLOSE:
            on_stream_close(t->obj);
            break;
        case TAG_UNARY_DONE:
            unary_done(t->obj);
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

int feedd_service_start(const feedd_config *cfg, const feedd_served_dataset *datasets, size_t n,
                        feedd_pool *pool, feedd_service **out, int *port)
{
    static const char *const paths[METHOD_OTHER] = {
        "/feed.v1.Feed/Stream", "/feed.v1.Feed/Describe", "/grpc.health.v1.Health/Check"};
    int rc = FEED_ENOMEM;
    feedd_service *svc = calloc(1, sizeof *svc);
    if (!svc)
        return FEED_ENOMEM;
    svc->cfg = cfg;
    svc->datasets = datasets;
    svc->n_datasets = n;
    svc->env = (feedd_request_env){cfg, datasets, n};
    svc->pool = pool;
    svc->t_shutdown = (tag){TAG_SHUTDOWN, svc};
    pthread_mutex_init(&svc->mu, NULL);
    pthread_cond_init(&svc->cv, NULL);
    atomic_init(&svc->draining, false);

    /*
     * No SO_REUSEPORT: a second feedd on a taken port must fail, not share it.
     * Keepalive: the server pings idle connections so a vanished client's
     * streams (and their batch memory) go within 40 s; clients may ping every
     * 5 s (libfeedclient pings every 10 s) without being told off.
     */
    grpc_arg args[6];
    args[0] = (grpc_arg){GRPC_ARG_INTEGER,
                         GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                         {.integer = (int)cfg->max_request_bytes}};
    args[1] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, {.integer = -1}};
    args[2] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_ALLOW_REUSEPORT, {.integer = 0}};
    args[3] = (grpc_arg){
        GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, {.integer = 5000}};
    args[4] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIME_MS, {.integer = 30000}};
    args[5] = (grpc_arg){GRPC_ARG_INTEGER, GRPC_ARG_KEEPALIVE_TIMEOUT_MS, {.integer = 10000}};
    grpc_channel_args ca = {6, args};
    svc->server = grpc_server_create(&ca, NULL);
    svc->n_cqts = cfg->cq_threads;
    svc->cqts = calloc(svc->n_cqts, sizeof *svc->cqts);
    if (!svc->server || !svc->cqts)
        goto fail;
    for (uint32_t i = 0; i < svc->n_cqts; i++) {
        cq_thread *c = &svc->cqts[i];
        c->svc = svc;
        c->cq = grpc_completion_queue_create_for_next(NULL);
        /* Packed varints expand up to 8x into uint64 arrays; the rest is small. */
        size_t arena_cap = 9 * (size_t)cfg->max_request_bytes + 65536;
        feedd_arena_init(&c->arena, malloc(arena_cap), arena_cap);
        c->rbuf = malloc((size_t)cfg->max_request_bytes);
        if (!c->arena.base || !c->rbuf)
            goto fail;
        grpc_server_register_completion_queue(svc->server, c->cq, NULL);
    }
    for (int m = 0; m < METHOD_OTHER; m++) {
        svc->methods[m] = grpc_server_register_method(
            svc->server, paths[m], NULL,
            m == METHOD_STREAM ? GRPC_SRM_PAYLOAD_NONE : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (!svc->methods[m])
            goto fail;
    }
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    *port = grpc_server_add_http2_port(svc->server, cfg->listen, creds);
    grpc_server_credentials_release(creds);
    if (*port <= 0) {
        FEED_LOGE("cannot listen on %s", cfg->listen);
        rc = FEED_EIO;
        goto fail;
    }
    grpc_server_start(svc->server);
    atomic_store(&feedd_m.serving, 1);
    for (uint32_t i = 0; i < svc->n_cqts; i++) {
        cq_thread *c = &svc->cqts[i];
        for (int m = 0; m < METHOD_COUNT; m++) {
            for (int k = 0; k < REQ_SLOTS_PER_METHOD; k++) {
                req_slot *slot = slot_new(c, (method)m);
                if (!slot)
                    goto fail_started;
                c->slots[m * REQ_SLOTS_PER_METHOD + k] = slot;
                arm_slot(slot);
            }
        }
        if (pthread_create(&c->thread, NULL, cq_main, c) != 0)
            goto fail_started;
        c->started = true;
    }
    pthread_mutex_lock(&mem_wait.mu);
    mem_wait.stop = false;
    pthread_mutex_unlock(&mem_wait.mu);
    if (pthread_create(&svc->granter, NULL, granter_main, svc) != 0)
        goto fail_started;
    svc->granter_started = true;
    *out = svc;
    return 0;
fail_started:
    if (feedd_service_stop(svc, 10000) == 0)
        feedd_service_free(svc);
    return FEED_ENOMEM;
fail:
    if (svc->server)
        grpc_server_destroy(svc->server);
    svc->server = NULL;
    for (uint32_t i = 0; svc->cqts && i < svc->n_cqts; i++) {
        if (svc->cqts[i].cq) {
            grpc_completion_queue_shutdown(svc->cqts[i].cq);
            while (grpc_completion_queue_next(svc->cqts[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                              NULL)
                       .type != GRPC_QUEUE_SHUTDOWN)
                ;
            grpc_completion_queue_destroy(svc->cqts[i].cq);
            svc->cqts[i].cq = NULL;
        }
    }
    feedd_service_free(svc);
    return rc;
}

void feedd_service_drain(feedd_service *svc)
{
    atomic_store(&svc->draining, true);
    atomic_store(&feedd_m.serving, 0);
    pthread_mutex_lock(&svc->mu);
    for (stream *s = svc->streams; s; s = s->next) {
        pthread_mutex_lock(&s->mu);
        s->draining = true;
        if (s->refs > 0)
            maybe_finish_locked(s);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&svc->mu);
}

size_t feedd_service_open_streams(feedd_service *svc)
{
    pthread_mutex_lock(&svc->mu);
    size_t n = svc->open_streams;
    pthread_mutex_unlock(&svc->mu);
    return n;
}

int feedd_service_stop(feedd_service *svc, uint32_t grace_ms)
{
    if (!svc->server)
        return 0;
    pthread_mutex_lock(&svc->mu);
    svc->shutting_down = true;
    pthread_mutex_unlock(&svc->mu);
    grpc_server_shutdown_and_notify(svc->server, svc->cqts[0].cq, &svc->t_shutdown);
    grpc_server_cancel_all_calls(svc->server);
    /*
     * Streams go once their close fires and workers drop their jobs (bounded
     * by one sample), but gRPC holds a cancelled call whose message is stuck
     * in flow control until the peer's side of the connection moves, which a
     * client that stopped reading may never do.
     */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += grace_ms / 1000;
    until.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    bool done = true;
    pthread_mutex_lock(&svc->mu);
    while (!(svc->shutdown_done && svc->live_streams == 0 && svc->live_unary == 0)) {
        if (pthread_cond_timedwait(&svc->cv, &svc->mu, &until) != 0) {
            FEED_LOGW("shutdown: %zu streams and %zu calls still held by gRPC after %u ms",
                      svc->live_streams, svc->live_unary, grace_ms);
            done = false;
            break;
        }
    }
    pthread_mutex_unlock(&svc->mu);
    if (!done)
        return FEED_ETIMEDOUT;
    FEED_LOGD("shutdown: gRPC server shut down, streams gone");
    /* No stream is left, so no batch waits for memory. */
    if (svc->granter_started) {
        pthread_mutex_lock(&mem_wait.mu);
        mem_wait.stop = true;
        pthread_cond_broadcast(&mem_wait.cv);
        pthread_mutex_unlock(&mem_wait.mu);
        pthread_join(svc->granter, NULL);
        svc->granter_started = false;
    }
    grpc_server_destroy(svc->server);
    svc->server = NULL;
    for (uint32_t i = 0; i < svc->n_cqts; i++)
        grpc_completion_queue_shutdown(svc->cqts[i].cq);
    for (uint32_t i = 0; i < svc->n_cqts; i++) {
        cq_thread *c = &svc->cqts[i];
        if (c->started)
            pthread_join(c->thread, NULL);
        else
            while (
                grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN)
                ;
        grpc_completion_queue_destroy(c->cq);
        c->cq = NULL;
        c->started = false;
    }
    return 0;
}

void feedd_service_free(feedd_service *svc)
{
    if (!svc)
        return;
    for (uint32_t i = 0; svc->cqts && i < svc->n_cqts; i++) {
        for (size_t k = 0; k < METHOD_COUNT * REQ_SLOTS_PER_METHOD; k++)
            free(svc->cqts[i].slots[k]);
        free(svc->cqts[i].arena.base);
        free(svc->cqts[i].rbuf);
    }
    free(svc->cqts);
    pthread_cond_destroy(&svc->cv);
    pthread_mutex_destroy(&svc->mu);
    free(svc);
}
