/*
 * A feed.v1.Feed/Stream call: the transport around its state machine
 * (stream_sm.h, which decides; this file does what it says). Requests come
 * in on the completion-queue thread that owns the call; each accepted batch
 * becomes a job that asks the memory caps for its buffer (memory.h) and
 * then goes to the pool; the pool worker that finishes it hands it back; the
 * batches go out one SEND_MESSAGE at a time, packed without copying the
 * pixels (batch_pack.c); the status goes out last.
 *
 * Protocol per call: RECV_CLOSE_ON_SERVER armed first, alone; one
 * RECV_MESSAGE in flight; one SEND_MESSAGE in flight.
 *
 * Ownership and threads: the stream object is the call's; it is touched
 * under s->mu by the call's completion-queue thread (requests, send and
 * close tags), by pool workers (on_job_done), by the granter thread
 * (feedd_stream_on_granted) and by the main thread (drain, stall checks).
 * Every handler feeds the event to s->sm and then runs apply() on what it
 * asked for. The stream is freed when its reference count (one per pending
 * gRPC op, one per accepted job, one for the open call, one per walker or
 * unlocked todo) drops to zero. Lock order: see service_internal.h.
 *
 * Nothing that can block or allocate a batch is done under s->mu: apply()
 * only records gRPC calls (start_batch, cancel), batch buffers to allocate
 * and batches to pack in s->todo, and log lines in s->log (defer_log); the
 * thread that releases the lock (unlock_log_free) makes them with the lock
 * released, then retakes it to tell the machine what failed or was
 * allocated, until nothing is left. An op made unlocked is never overtaken
 * by one decided later: the machine decides a status only once no send is in
 * flight, and arms a receive only after the previous one came back.
 * test_server_units (test_stream_lock_rule) checks the rule at every call.
 * Still under it: a request's index arrays (job_new) and the status slice.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include "feed.pb-c.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "guard.h"
#include "metrics.h"
#include "service_internal.h"

/* How many stream locks this thread holds: tests check it at every gRPC call and allocation. */
static _Thread_local int t_stream_locks;

void feedd_stream_lock(stream *s)
{
    pthread_mutex_lock(&s->mu);
    t_stream_locks++;
}

void feedd_stream_unlock(stream *s)
{
    t_stream_locks--;
    pthread_mutex_unlock(&s->mu);
}

int feedd_stream_locks_held(void)
{
    return t_stream_locks;
}

static void peer_of(grpc_call *call, char *out, size_t cap)
{
    char *p = grpc_call_get_peer(call);
    snprintf(out, cap, "%s", p ? p : "?");
    gpr_free(p);
}

static void stream_free(stream *s)
{
    feedd_service *svc = s->svc;
    pthread_mutex_lock(&svc->mu);
    feed_list_remove(&svc->streams, &s->link);
    svc->live_streams--;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    feedd_pool_leave(svc->pool, &s->q);
    grpc_slice_unref(s->status_slice);
    if (s->recv_bb)
        grpc_byte_buffer_destroy(s->recv_bb);
    grpc_call_unref(s->call);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* A log line for when s->mu is released. Under s->mu. */
static void defer_log(stream *s, feed_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void defer_log(stream *s, feed_log_level level, const char *fmt, ...)
{
    if (s->n_log < STREAM_LOG_LINES && level <= feed_log_get_level()) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->log[s->n_log].text, sizeof s->log[s->n_log].text, fmt, ap);
        va_end(ap);
        s->log[s->n_log++].level = (int)level;
    }
}

static void stream_mem_sub(stream *s, uint64_t bytes)
{
    feedd_memory_stream_release(s->svc->memory, &s->mem, bytes);
}

static void job_free(batch_job *bj)
{
    if (bj->mem)
        feedd_memory_buf_free(bj->mem);
    free(bj->indices);
    free(bj->labels);
    free(bj->status);
    free(bj->sample_crc);
    free(bj->errors);
    free(bj);
}

static void apply(stream *s, feedd_sm_out *out);

static bool todo_empty(const stream_todo *t)
{
    return feed_list_empty(&t->alloc) && !t->send && !t->recv && !t->status && !t->cancel;
}

/* What running a todo unlocked leaves for the machine. */
typedef struct todo_report {
    feed_list allocated;     /* jobs whose buffer was tried (bj->mem NULL: it failed) */
    bool pack_failed, send_failed; /* the batch could not be packed; its send did not start */
    uint64_t send_bytes;
    bool recv_failed, status_failed;
} todo_report;

/* ops zeroed, SEND_INITIAL_METADATA first when md: the index of the op that follows it. */
static size_t after_metadata(grpc_op ops[2], bool md)
{
    memset(ops, 0, 2 * sizeof *ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA; /* overwritten by the caller's op when !md */
    return md ? 1 : 0;
}

/* s->mu NOT held; the caller holds a reference. Makes the calls and allocations t says, in
 * stream_sm.h's order, and says in r what the machine must hear. */
static void run_todo(stream *s, stream_todo *t, todo_report *r)
{
    memset(r, 0, sizeof *r);
    if (t->cancel) {
        if (t->cancel_code == GRPC_STATUS_OK)
            grpc_call_cancel(s->call, NULL);
        else
            grpc_call_cancel_with_status(s->call, t->cancel_code, t->cancel_msg, NULL);
    }
    while (!feed_list_empty(&t->alloc)) {
        batch_job *bj = FEED_LIST_ENTRY(feed_list_pop_front(&t->alloc), batch_job, alloc_link);
        bj->mem = feedd_memory_buf_new(s->svc->memory, bj->wait.bytes);
        if (bj->mem)
            bj->job.data = bj->mem->data;
        else
            feedd_memory_unreserve(s->svc->memory, &s->mem, bj->wait.bytes);
        feed_list_push_back(&r->allocated, &bj->alloc_link);
    }
    if (t->send) {
        batch_job *bj = t->send;
        r->send_bytes = bj->mem->bytes;
        grpc_byte_buffer *bb = feedd_batch_pack(bj, s->sess.tf.out_h, s->sess.tf.out_w, s->peer);
        job_free(bj);
        if (!bb) {
            r->pack_failed = true;
        } else {
            grpc_op ops[2];
            size_t n = after_metadata(ops, t->send_md);
            ops[n].op = GRPC_OP_SEND_MESSAGE;
            ops[n].data.send_message.send_message = bb;
            r->send_failed =
                grpc_call_start_batch(s->call, ops, n + 1, &s->t_send, NULL) != GRPC_CALL_OK;
            grpc_byte_buffer_destroy(bb); /* the call holds its own reference to the slices */
            if (!r->send_failed) {
                feedd_count(&feedd_m.batches, 1);
                feedd_count(&feedd_m.bytes, r->send_bytes);
            }
        }
    }
    if (t->recv) {
        grpc_op op;
        memset(&op, 0, sizeof op);
        op.op = GRPC_OP_RECV_MESSAGE;
        op.data.recv_message.recv_message = &s->recv_bb;
        r->recv_failed = grpc_call_start_batch(s->call, &op, 1, &s->t_recv, NULL) != GRPC_CALL_OK;
    }
    if (t->status) {
        grpc_op ops[2];
        size_t n = after_metadata(ops, t->status_md);
        ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[n].data.send_status_from_server.status = t->status_code;
        ops[n].data.send_status_from_server.status_details = &s->status_slice;
        r->status_failed =
            grpc_call_start_batch(s->call, ops, n + 1, &s->t_status, NULL) != GRPC_CALL_OK;
    }
}

/* Under s->mu again: the machine hears what run_todo left, and the failed ops' references go. */
static void report_todo(stream *s, todo_report *r)
{
    feedd_sm_out out = {0};
    while (!feed_list_empty(&r->allocated)) {
        batch_job *bj =
            FEED_LIST_ENTRY(feed_list_pop_front(&r->allocated), batch_job, alloc_link);
        feedd_sm_on_granted(&s->sm, &bj->sm, bj->mem != NULL, &out);
        apply(s, &out);
        memset(&out, 0, sizeof out);
    }
    if (r->pack_failed || r->send_failed) {
        if (r->send_failed)
            defer_log(s, FEED_LOG_ERROR, "stream %s: send failed to start", s->peer);
        stream_mem_sub(s, r->send_bytes);
        s->mem_sending = 0;
        s->batches_sent--;
        s->bytes_sent -= r->send_bytes;
        s->refs--;
        feedd_sm_on_send_failed(&s->sm, GRPC_STATUS_INTERNAL,
                                r->pack_failed ? "could not pack a batch" : "send failed", &out);
        apply(s, &out);
        memset(&out, 0, sizeof out);
    }
    if (r->recv_failed) {
        s->refs--;
        feedd_sm_on_recv(&s->sm, false, &out);
        apply(s, &out);
    }
    if (r->status_failed) {
        s->refs--;
        s->todo.cancel = true;
        s->todo.cancel_code = GRPC_STATUS_OK;
    }
}

/*
 * Release s->mu, then make what the critical section decided (s->todo: gRPC calls, buffer
 * allocations) and write the log lines made under it; what that leaves for the machine is
 * reported under the lock again, until nothing is left. last: the stream's last reference
 * went; it is freed once nothing is left to do. While a todo runs unlocked the stream holds a
 * reference for it, so no other thread frees it meanwhile.
 */
static void unlock_log_free(stream *s, bool last)
{
    for (;;) {
        stream_todo t = s->todo;
        memset(&s->todo, 0, sizeof s->todo);
        bool work = !todo_empty(&t);
        if (work) {
            s->refs++;
            last = false;
        }
        int n = s->n_log;
        struct {
            int level;
            char text[sizeof s->log[0].text];
        } lines[STREAM_LOG_LINES];
        for (int i = 0; i < n; i++) {
            lines[i].level = s->log[i].level;
            memcpy(lines[i].text, s->log[i].text, sizeof lines[i].text);
        }
        s->n_log = 0;
        feedd_stream_unlock(s);
        if (last)
            stream_free(s);
        for (int i = 0; i < n; i++)
            feed_log((feed_log_level)lines[i].level, "%s", lines[i].text);
        if (!work)
            return;
        todo_report r;
        run_todo(s, &t, &r);
        feedd_stream_lock(s);
        report_todo(s, &r);
        last = --s->refs == 0;
    }
}

/* Drop a reference; call with s->mu held; unlocks it. */
static void stream_unref_unlock(stream *s)
{
    unlock_log_free(s, --s->refs == 0);
}

static batch_job *job_of_waiter(feedd_mem_waiter *w)
{
    return (batch_job *)(void *)((char *)w - offsetof(batch_job, wait));
}

static batch_job *job_of_sm(feedd_sm_job *j)
{
    return (batch_job *)(void *)((char *)j - offsetof(batch_job, sm));
}

/* An accepted job that will not be sent; under s->mu. Drops the job's stream reference too. */
static void discard_job_locked(stream *s, batch_job *bj)
{
    stream_mem_sub(s, bj->mem ? bj->mem->bytes : 0);
    feedd_gauge(&feedd_m.inflight_batches, -1);
    job_free(bj);
    s->refs--;
}

/* drop_work: the stream's jobs back from the pool queue and the memory FIFO. Under s->mu. */
static void take_back_jobs_locked(stream *s)
{
    feedd_sm_out out = {0};
    feed_list jobs = {0};
    feedd_pool_cancel(s->svc->pool, &s->q, &jobs);
    while (!feed_list_empty(&jobs)) {
        feedd_job *job = FEED_LIST_ENTRY(feed_list_pop_front(&jobs), feedd_job, qlink);
        discard_job_locked(s, (batch_job *)(void *)job);
        feedd_sm_on_dropped(&s->sm, &out);
    }
    /* One granted already (by the granter, or waiting in a todo for its buffer) is discarded
     * when its grant is reported: the machine no longer takes work. */
    feed_list waiting = {0};
    feedd_memory_withdraw(s->svc->memory, &s->mem, &waiting);
    while (!feed_list_empty(&waiting)) {
        feed_list_node *n = feed_list_pop_front(&waiting);
        discard_job_locked(s, job_of_waiter(FEED_LIST_ENTRY(n, feedd_mem_waiter, link)));
        feedd_sm_on_dropped(&s->sm, &out);
    }
    apply(s, &out);
}

/* The machine accepted bj: it holds a stream reference until it is sent or dropped. */
static void admit_locked(stream *s, batch_job *bj)
{
    s->requests++;
    s->refs++;
    feedd_gauge(&feedd_m.inflight_batches, 1);
    feedd_count(&feedd_m.requests, 1);
    /* Straight to its buffer when nothing waits: a waiting batch is never overtaken. */
    if (feedd_memory_admit(s->svc->memory, &bj->wait))
        feed_list_push_back(&s->todo.alloc, &bj->alloc_link);
}

/* bj goes out once s->mu is released; the machine no longer counts it. Under s->mu. */
static void send_locked(stream *s, batch_job *bj)
{
    uint64_t bytes = bj->mem->bytes;
    feedd_gauge(&feedd_m.inflight_batches, -1);
    s->todo.send = bj; /* the job's reference becomes the send's */
    s->todo.send_md = !s->sent_md;
    s->sent_md = true;
    s->mem_sending = bytes;
    s->send_started_ns = feed_now_ns();
    s->batches_sent++;
    s->bytes_sent += bytes;
}

static void arm_recv_locked(stream *s)
{
    s->refs++;
    s->todo.recv = true;
}

static void send_status_locked(stream *s, grpc_status_code code, const char *msg)
{
    s->status_slice = grpc_slice_from_copied_string(msg);
    s->todo.status = true;
    s->todo.status_md = !s->sent_md;
    s->todo.status_code = code;
    s->sent_md = true;
    s->refs++;
    if ((unsigned)code < FEEDD_STATUS_CODES)
        feedd_count(&feedd_m.stream_status[code], 1);
    if (code != GRPC_STATUS_OK)
        defer_log(s, FEED_LOG_INFO, "stream %s: ending with status %d: %s", s->peer, (int)code,
                  msg);
}

/*
 * Do what the machine asked, in stream_sm.h's order. Under s->mu; the caller
 * holds a reference of its own, so none of this frees the stream.
 */
static void apply(stream *s, feedd_sm_out *out)
{
    while (!feed_list_empty(&out->discard)) {
        feed_list_node *n = feed_list_pop_front(&out->discard);
        discard_job_locked(s, job_of_sm(FEED_LIST_ENTRY(n, feedd_sm_job, link)));
    }
    if (out->drop_work)
        take_back_jobs_locked(s);
    if (out->admit)
        admit_locked(s, job_of_sm(out->admit));
    if (out->start)
        feedd_pool_submit(s->svc->pool, &s->q, &job_of_sm(out->start)->job);
    if (out->send)
        send_locked(s, job_of_sm(out->send));
    if (out->arm_recv)
        arm_recv_locked(s);
    if (out->finish)
        send_status_locked(s, out->code, out->msg);
}

/* Pool worker thread: the last sample of a batch is done. */
static void on_job_done(feedd_job *job)
{
    batch_job *bj = (batch_job *)(void *)job;
    stream *s = bj->owner;
    feedd_sm_out out = {0};
    bj->crc = job->crc;
    feedd_stream_lock(s);
    s->refs++; /* the job's may go while we work */
    feedd_sm_on_job_done(&s->sm, &bj->sm, atomic_load(&job->cancelled), &out);
    apply(s, &out);
    stream_unref_unlock(s);
}

/* Everything of a job but its pixel buffer, which waits for the memory caps. NULL: no memory. */
static batch_job *job_new(stream *s, const Feed__V1__BatchRequest *r, size_t sample_bytes)
{
    uint32_t n = (uint32_t)r->n_indices;
    batch_job *bj = calloc(1, sizeof *bj);
    if (bj) {
        bj->indices = malloc(n * sizeof *bj->indices);
        bj->labels = malloc(n * sizeof *bj->labels);
        bj->status = malloc(n * sizeof *bj->status);
        bj->sample_crc = malloc(n * sizeof *bj->sample_crc);
        bj->errors = malloc(n * sizeof *bj->errors);
        if (!bj->indices || !bj->labels || !bj->status || !bj->sample_crc || !bj->errors) {
            job_free(bj);
            bj = NULL;
        }
    }
    if (bj) {
        const feed_dataset *ds = s->svc->datasets[s->sess.ds_id].ds;
        memcpy(bj->indices, r->indices, n * sizeof *bj->indices);
        for (uint32_t i = 0; i < n; i++)
            bj->labels[i] = feed_dataset_label(ds, r->indices[i]);
        bj->wait.acct = &s->mem;
        bj->wait.bytes = (uint64_t)n * sample_bytes;
        bj->owner = s;
        bj->batch_id = r->batch_id;
        bj->job.ds = ds;
        bj->job.ds_id = s->sess.ds_id;
        bj->job.tf = &s->sess.tf;
        bj->job.aug = &s->sess.aug;
        bj->job.seed = s->sess.seed;
        bj->job.epoch = r->epoch;
        bj->job.not_owner = r->ownership == FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_NOT_OWNER;
        bj->job.indices = bj->indices;
        bj->job.n = n;
        bj->job.sample_bytes = sample_bytes;
        bj->job.status = bj->status;
        bj->job.sample_crc = bj->sample_crc;
        bj->job.errors = bj->errors;
        bj->job.done = on_job_done;
        bj->job.user = s;
    }
    return bj;
}

/* One BatchRequest's bytes; under s->mu, on the CQ thread. Reports to the machine in out. */
static void handle_request_locked(stream *s, const uint8_t *buf, size_t len, feedd_sm_out *out)
{
    feedd_service *svc = s->svc;
    const feedd_config *cfg = svc->cfg;
    char msg[STATUS_MSG_MAX];
    feedd_batch_request req;
    bool was_open = s->sess.opened;
    grpc_status_code code = feedd_request_batch(&svc->env, &s->cqt->arena, buf, len, s->peer,
                                                &s->sess, &req, msg, sizeof msg);
    if (!was_open && s->sess.opened)
        feedd_pool_join(svc->pool, &s->q, s->sess.job, s->sess.job_weight, s->peer);
    /*
     * config.c clamps max-batch-bytes (checked in request.c) to both caps, so
     * the second check cannot fail; were that to change, such a batch would
     * wait forever. A request without r only opened the session.
     */
    bool refused = true;
    if (code != GRPC_STATUS_OK) {
        feedd_sm_fail(&s->sm, code, msg, out);
    } else if (req.r && (req.bytes > cfg->max_stream_memory || req.bytes > cfg->max_memory)) {
        snprintf(msg, sizeof msg, "memory: a batch of %llu bytes can never fit max-stream-memory",
                 (unsigned long long)req.bytes);
        feedd_sm_fail(&s->sm, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, out);
    } else if (req.r) {
        batch_job *bj = job_new(s, req.r, req.sample_bytes);
        if (!bj)
            feedd_sm_fail(&s->sm, GRPC_STATUS_RESOURCE_EXHAUSTED, "memory: allocation failed", out);
        else if (!feedd_sm_on_request(&s->sm, s->sess.window, &bj->sm, out))
            job_free(bj); /* never accepted: no reference, nothing counted */
        else
            refused = false;
    } else {
        refused = false;
    }
    if (refused)
        feedd_count(&feedd_m.requests_refused, 1);
}

void feedd_stream_on_recv(stream *s, bool ok)
{
    feedd_sm_out out = {0};
    feedd_stream_lock(s);
    grpc_byte_buffer *bb = s->recv_bb;
    s->recv_bb = NULL;
    if (bb)
        feedd_guard_credit(s->svc->guard, s->guard_fd,
                           GUARD_MSG_CREDIT + grpc_byte_buffer_length(bb));
    if (feedd_sm_on_recv(&s->sm, ok && bb, &out)) {
        /*
         * gRPC itself refuses a message over max-request-bytes (its receive
         * limit) with RESOURCE_EXHAUSTED before it gets here. Should one
         * still come (say, larger once decompressed), it gets the same code,
         * as the contract promises; a message that cannot be read at all is
         * malformed.
         */
        size_t cap = (size_t)s->svc->cfg->max_request_bytes, len = 0;
        uint8_t *buf = s->cqt->rbuf;
        int rc = feedd_read_bb(bb, cap, buf, &len);
        if (rc == FEED_ETOOBIG)
            feedd_sm_fail(&s->sm, GRPC_STATUS_RESOURCE_EXHAUSTED,
                          "request: larger than max-request-bytes", &out);
        else if (rc < 0)
            feedd_sm_fail(&s->sm, GRPC_STATUS_INVALID_ARGUMENT,
                          "request: the message could not be read", &out);
        else
            handle_request_locked(s, buf, len, &out);
        feedd_sm_read_done(&s->sm, &out);
    }
    if (bb)
        grpc_byte_buffer_destroy(bb);
    apply(s, &out);
    stream_unref_unlock(s);
}

void feedd_stream_on_send(stream *s, bool ok)
{
    feedd_sm_out out = {0};
    feedd_stream_lock(s);
    uint64_t dt = feed_now_ns() - s->send_started_ns;
    feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_SEND], dt);
    feedd_count(&feedd_m.stage_count[FEEDD_STAGE_SEND], 1);
    stream_mem_sub(s, s->mem_sending);
    s->mem_sending = 0;
    feedd_sm_on_send_done(&s->sm, ok, &out);
    apply(s, &out);
    stream_unref_unlock(s);
}

void feedd_stream_on_status(stream *s)
{
    feedd_stream_lock(s);
    stream_unref_unlock(s);
}

void feedd_stream_on_close(stream *s)
{
    feedd_service *svc = s->svc;
    feedd_sm_out out = {0};
    feedd_stream_lock(s);
    feedd_sm_on_cancel(&s->sm, &out);
    apply(s, &out);
    defer_log(s, FEED_LOG_INFO,
              "stream %s: closed%s client='%s' requests=%llu batches=%llu bytes=%llu", s->peer,
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

/*
 * A new stream object joins the service's list and arms RECV_CLOSE_ON_SERVER;
 * then the machine opens it (or fails it at once past max-streams).
 */
static void stream_open(stream *s)
{
    feedd_service *svc = s->svc;
    s->t_recv = (tag){TAG_STREAM_RECV, s};
    s->t_send = (tag){TAG_STREAM_SEND, s};
    s->t_close = (tag){TAG_STREAM_CLOSE, s};
    s->t_status = (tag){TAG_STREAM_STATUS, s};
    s->status_slice = grpc_empty_slice();
    feedd_sm_init(&s->sm);
    peer_of(s->call, s->peer, sizeof s->peer);
    s->guard_fd = feedd_guard_fd_of(svc->guard, s->peer);
    pthread_mutex_init(&s->mu, NULL);

    pthread_mutex_lock(&svc->mu);
    bool too_many = svc->open_streams >= svc->cfg->max_streams;
    s->id = atomic_fetch_add_explicit(&feedd_m.streams_opened, 1, memory_order_relaxed) + 1;
    feed_list_push_front(&svc->streams, &s->link);
    svc->live_streams++;
    svc->open_streams++;
    pthread_mutex_unlock(&svc->mu);
    feedd_gauge(&feedd_m.active_streams, 1);

    /* Unlocked: no other thread touches s yet (walkers skip a stream with no reference), and
     * its tags come to this thread, after this function. */
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->close_cancelled;
    bool close_armed = grpc_call_start_batch(s->call, &op, 1, &s->t_close, NULL) == GRPC_CALL_OK;
    feedd_stream_lock(s);
    s->refs = 2; /* the open call and the RECV_CLOSE op */
    if (!close_armed) {
        /* Its tag will never come, and only that tag ends the stream: end it here. */
        defer_log(s, FEED_LOG_ERROR,
                  "stream %s: RECV_CLOSE_ON_SERVER failed to start; cancelling the call", s->peer);
        s->todo.cancel = true;
        s->todo.cancel_code = GRPC_STATUS_OK;
    } else {
        feedd_sm_out out = {0};
        defer_log(s, FEED_LOG_INFO, "stream %s: connected", s->peer);
        if (too_many) {
            char msg[128];
            snprintf(msg, sizeof msg, "streams: %u streams open (max-streams)",
                     svc->cfg->max_streams);
            feedd_sm_fail(&s->sm, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, &out);
        } else {
            feedd_sm_open(&s->sm, atomic_load(&svc->draining), &out);
        }
        apply(s, &out);
    }
    unlock_log_free(s, false);
    if (!close_armed)
        feedd_stream_on_close(s); /* drops the open call's reference and the close op's */
}

void feedd_stream_start(cq_thread *cqt, grpc_call *call)
{
    stream *s = calloc(1, sizeof *s);
    if (!s) {
        feedd_unary_finish(cqt->svc, call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        s->svc = cqt->svc;
        s->cqt = cqt;
        s->call = call;
        stream_open(s);
    }
}

void feedd_stream_on_granted(feedd_mem_waiter *w)
{
    batch_job *bj = job_of_waiter(w);
    stream *s = bj->owner; /* alive: the job holds a reference */
    feedd_stream_lock(s);
    feed_list_push_back(&s->todo.alloc, &bj->alloc_link);
    unlock_log_free(s, false);
}

void feedd_stream_check_stall(stream *s, uint64_t now_ns, uint32_t stall_ms)
{
    feedd_stream_lock(s);
    uint64_t pending_ms = s->mem_sending ? feedd_sm_send_pending_ms(s->send_started_ns, now_ns) : 0;
    if (s->mem_sending && !s->stall_cancelled && pending_ms >= stall_ms) {
        char msg[STATUS_MSG_MAX];
        snprintf(msg, sizeof msg,
                 "a batch send made no progress for %llu ms (send-stall-ms %u): the client "
                 "stopped reading; %llu bytes held",
                 (unsigned long long)pending_ms, stall_ms,
                 (unsigned long long)atomic_load(&s->mem.used));
        defer_log(s, FEED_LOG_WARN, "stream %s (%s): cancelled: %s", s->peer,
                  s->sess.client_name, msg);
        s->stall_cancelled = true;
        feedd_count(&feedd_m.streams_stalled, 1);
        s->todo.cancel = true;
        s->todo.cancel_code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        memcpy(s->todo.cancel_msg, msg, sizeof s->todo.cancel_msg);
    }
    unlock_log_free(s, false);
}

void feedd_stream_drain(stream *s)
{
    feedd_sm_out out = {0};
    feedd_stream_lock(s);
    feedd_sm_on_drain(&s->sm, &out);
    apply(s, &out);
    unlock_log_free(s, false);
}

bool feedd_stream_hold(stream *s)
{
    feedd_stream_lock(s);
    bool held = s->refs > 0;
    if (held)
        s->refs++;
    feedd_stream_unlock(s);
    return held;
}

void feedd_stream_unhold(stream *s)
{
    feedd_stream_lock(s);
    stream_unref_unlock(s);
}
