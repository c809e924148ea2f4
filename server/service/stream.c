/*
 * A feed.v1.Feed/Stream call: the transport around its state machine
 * (stream_sm.h, which decides; this file does what it says). Requests come
 * in on the completion-queue thread that owns the call; each accepted batch
 * becomes a job that asks the memory caps for its buffer (memory.h) and
 * then goes to the pool; the batches go out one SEND_MESSAGE at a time,
 * packed without copying the pixels (batch_pack.c); the status goes out last.
 *
 * Protocol per call: RECV_CLOSE_ON_SERVER armed first, alone; one
 * RECV_MESSAGE in flight; one SEND_MESSAGE in flight.
 *
 * One owner: the call's completion-queue thread is the only one that runs
 * the machine, makes the stream's gRPC calls, allocates and packs its
 * batches, and frees it. The granter thread (a batch's bytes granted) and
 * pool workers (a batch done) post the job to the stream's inbox and wake
 * the owner with a zero-op batch on the call, which completes at once on
 * the owner's queue; while a wake is on its way no other is made, and the
 * owner takes the whole inbox when it comes. The owner also ticks its
 * streams (service.c: drain, stall). A stream lives until its machine says
 * its life is over (feedd_sm_finished): closed, no op in flight, no job out,
 * which also means no job in the inbox and no wake on its way.
 *
 * Locks: the inbox's, held for a list push or swap only (service_int.h
 * has the order). Nothing that can block, allocate a batch or log is done
 * under it. Still allocated on the owner per request: a request's index
 * arrays (job_new, a few bytes per sample, up to n x 201 B of error strings).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "feed.pb-c.h"
#include "encoded.h"
#include "guard.h"
#include "metrics.h"
#include "service_int.h"

/* How many inbox locks this thread holds: tests check it at every gRPC call and allocation. */
static _Thread_local int t_stream_locks;
/* Stream ops started by a thread other than the stream's owner: tests check that there are none. */
static atomic_int foreign_ops;

void feedd_stream_lock(stream *s)
{
    pthread_mutex_lock(&s->inbox_mu);
    t_stream_locks++;
}

void feedd_stream_unlock(stream *s)
{
    t_stream_locks--;
    pthread_mutex_unlock(&s->inbox_mu);
}

int feedd_stream_locks_held(void)
{
    return t_stream_locks;
}

int feedd_stream_foreign_ops(void)
{
    return atomic_load(&foreign_ops);
}

/* Every op of the stream's own goes through here: on the owner, never under a lock. */
static bool start_ops(stream *s, const grpc_op *ops, size_t n, tag *t)
{
    if (!pthread_equal(pthread_self(), s->cqt->thread))
        atomic_fetch_add(&foreign_ops, 1);
    return grpc_call_start_batch(s->call, ops, n, t, NULL) == GRPC_CALL_OK;
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
    feed_list_remove(&s->cqt->streams, &s->cq_link);
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
    pthread_mutex_destroy(&s->inbox_mu);
    free(s);
}

/* After every event: the machine says whether the stream's life is over. */
static void free_if_finished(stream *s)
{
    if (feedd_sm_finished(&s->sm))
        stream_free(s);
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
    free(bj->enc_off);
    free(bj->enc_len);
    free(bj);
}

static batch_job *job_of_waiter(feedd_mem_waiter *w)
{
    return (batch_job *)(void *)((char *)w - offsetof(batch_job, wait));
}

static batch_job *job_of_sm(feedd_sm_job *j)
{
    return (batch_job *)(void *)((char *)j - offsetof(batch_job, sm));
}

static void apply(stream *s, feedd_sm_out *out);

/* An accepted job that will not be sent. */
static void discard_job(stream *s, batch_job *bj)
{
    stream_mem_sub(s, bj->mem ? bj->mem->bytes : 0);
    feedd_gauge(&feedd_m.inflight_batches, -1);
    job_free(bj);
}

/* drop_work: the stream's jobs back from the pool queue and the memory FIFO. */
static void take_back_jobs(stream *s)
{
    feedd_sm_out out = {0};
    feed_list jobs = {0};
    feedd_pool_cancel(s->svc->pool, &s->q, &jobs);
    while (!feed_list_empty(&jobs)) {
        feedd_job *job = FEED_LIST_ENTRY(feed_list_pop_front(&jobs), feedd_job, qlink);
        discard_job(s, (batch_job *)(void *)job);
        feedd_sm_on_dropped(&s->sm, &out);
    }
    /* One the granter already took out of the FIFO comes back through the inbox and is
     * discarded then: the machine no longer takes work. */
    feed_list waiting = {0};
    feedd_memory_withdraw(s->svc->memory, &s->mem, &waiting);
    while (!feed_list_empty(&waiting)) {
        feed_list_node *n = feed_list_pop_front(&waiting);
        discard_job(s, job_of_waiter(FEED_LIST_ENTRY(n, feedd_mem_waiter, link)));
        feedd_sm_on_dropped(&s->sm, &out);
    }
    apply(s, &out);
}

/* The caps reserved bj's bytes: its buffer, then the machine hears whether there is one. */
static void granted(stream *s, batch_job *bj)
{
    feedd_sm_out out = {0};
    bj->mem = feedd_memory_buf_new(s->svc->memory, bj->wait.bytes);
    if (bj->mem)
        bj->job.data = bj->mem->data;
    else
        feedd_memory_unreserve(s->svc->memory, &s->mem, bj->wait.bytes);
    feedd_sm_on_granted(&s->sm, &bj->sm, bj->mem != NULL, &out);
    apply(s, &out);
}

/* The machine accepted bj: to the memory caps, straight to its buffer when nothing waits. */
static void admit(stream *s, batch_job *bj)
{
    s->requests++;
    feedd_gauge(&feedd_m.inflight_batches, 1);
    feedd_count(&feedd_m.requests, 1);
    if (feedd_memory_admit(s->svc->memory, &bj->wait))
        granted(s, bj);
}

/* ops zeroed, SEND_INITIAL_METADATA first when the stream has not sent it: the next op's index. */
static size_t after_metadata(stream *s, grpc_op ops[2])
{
    memset(ops, 0, 2 * sizeof *ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA; /* overwritten by the caller's op when sent */
    size_t n = s->sent_md ? 0 : 1;
    s->sent_md = true;
    return n;
}

/* Pack bj and start its SEND_MESSAGE; the machine no longer counts it. */
static void send_batch(stream *s, batch_job *bj)
{
    feedd_sm_out out = {0};
    uint64_t bytes = bj->mem->bytes;
    uint64_t sent = bj->enc_off ? bj->job.data_len : bytes;
    feedd_gauge(&feedd_m.inflight_batches, -1);
    grpc_byte_buffer *bb = feedd_batch_pack(bj, s->sess.tf.out_h, s->sess.tf.out_w, s->peer);
    job_free(bj);
    bool started = false;
    if (bb) {
        grpc_op ops[2];
        size_t n = after_metadata(s, ops);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        started = start_ops(s, ops, n + 1, &s->t_send);
        grpc_byte_buffer_destroy(bb); /* the call holds its own reference to the slices */
        if (!started)
            FEED_LOGE("stream %s: send failed to start", s->peer);
    }
    if (started) {
        s->mem_sending = bytes;
        s->batches_sent++;
        s->bytes_sent += sent;
        feedd_count(&feedd_m.batches, 1);
        feedd_count(&feedd_m.bytes, sent);
        feedd_sm_on_send_started(&s->sm, feed_now_ns());
    } else {
        stream_mem_sub(s, bytes);
        feedd_sm_on_send_failed(&s->sm, GRPC_STATUS_INTERNAL,
                                bb ? "send failed" : "could not pack a batch", &out);
        apply(s, &out);
    }
}

static void arm_recv(stream *s)
{
    feedd_sm_out out = {0};
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->recv_bb;
    if (!start_ops(s, &op, 1, &s->t_recv)) {
        feedd_sm_on_recv(&s->sm, false, &out);
        apply(s, &out);
    }
}

static void send_status(stream *s, grpc_status_code code, const char *msg)
{
    feedd_sm_out out = {0};
    if ((unsigned)code < FEEDD_STATUS_CODES)
        feedd_count(&feedd_m.stream_status[code], 1);
    if (code != GRPC_STATUS_OK)
        FEED_LOGI("stream %s: ending with status %d: %s", s->peer, (int)code, msg);
    grpc_slice_unref(s->status_slice);
    s->status_slice = grpc_slice_from_copied_string(msg);
    grpc_op ops[2];
    size_t n = after_metadata(s, ops);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &s->status_slice;
    feedd_sm_on_status_started(&s->sm, start_ops(s, ops, n + 1, &s->t_status), &out);
    apply(s, &out);
}

static void cancel_call(stream *s, grpc_status_code code, const char *msg)
{
    if (!pthread_equal(pthread_self(), s->cqt->thread))
        atomic_fetch_add(&foreign_ops, 1);
    if (code == GRPC_STATUS_OK)
        grpc_call_cancel(s->call, NULL);
    else
        grpc_call_cancel_with_status(s->call, code, msg, NULL);
}

/* Do what the machine asked, in stream_sm.h's order. On the owner. */
static void apply(stream *s, feedd_sm_out *out)
{
    while (!feed_list_empty(&out->discard)) {
        feed_list_node *n = feed_list_pop_front(&out->discard);
        discard_job(s, job_of_sm(FEED_LIST_ENTRY(n, feedd_sm_job, link)));
    }
    if (out->drop_work)
        take_back_jobs(s);
    if (out->admit)
        admit(s, job_of_sm(out->admit));
    if (out->start)
        feedd_pool_submit(s->svc->pool, &s->q, &job_of_sm(out->start)->job);
    if (out->send)
        send_batch(s, job_of_sm(out->send));
    if (out->arm_recv)
        arm_recv(s);
    if (out->finish)
        send_status(s, out->code, out->msg);
    if (out->cancel) {
        if (out->cancel_code != GRPC_STATUS_OK) {
            FEED_LOGW("stream %s (%s): cancelled: %s", s->peer, s->sess.client_name,
                      out->cancel_msg);
            feedd_count(&feedd_m.streams_stalled, 1);
        }
        cancel_call(s, out->cancel_code, out->cancel_msg);
    }
}

/* Another thread hands bj to its stream's owner: into the inbox, and a wake unless one is on
 * its way. The job keeps the stream alive until the owner has taken it. */
static void post(batch_job *bj, job_event ev)
{
    stream *s = bj->owner;
    bj->event = ev;
    feedd_stream_lock(s);
    feed_list_push_back(&s->inbox, &bj->inbox_link);
    bool wake = !s->wake_pending;
    s->wake_pending = true;
    feedd_stream_unlock(s);
    if (wake) {
        /* The owner takes the inbox only when this wake comes, and may free s as soon as it
         * has: the call is held by a reference of its own until the wake is started. A
         * zero-op batch completes at once on the call's queue; it cannot fail. */
        grpc_call *call = s->call;
        grpc_call_ref(call);
        if (grpc_call_start_batch(call, NULL, 0, &s->t_wake, NULL) != GRPC_CALL_OK)
            FEED_LOGE("a stream's wake failed to start");
        grpc_call_unref(call);
    }
}

/* Pool worker thread: the last sample of a batch is done. */
static void on_job_done(feedd_job *job)
{
    batch_job *bj = (batch_job *)(void *)job;
    bj->crc = job->crc;
    post(bj, JOB_DONE);
}

void feedd_stream_on_granted(feedd_mem_waiter *w)
{
    post(job_of_waiter(w), JOB_GRANTED);
}

void feedd_stream_on_wake(stream *s)
{
    feedd_stream_lock(s);
    feed_list events = s->inbox;
    memset(&s->inbox, 0, sizeof s->inbox);
    s->wake_pending = false;
    feedd_stream_unlock(s);
    while (!feed_list_empty(&events)) {
        batch_job *bj =
            FEED_LIST_ENTRY(feed_list_pop_front(&events), batch_job, inbox_link);
        if (bj->event == JOB_GRANTED) {
            granted(s, bj);
        } else {
            feedd_sm_out out = {0};
            feedd_sm_on_job_done(&s->sm, &bj->sm, atomic_load(&bj->job.cancelled), &out);
            apply(s, &out);
        }
    }
    free_if_finished(s);
}

/* Everything of a job but its pixel buffer, which waits for the memory caps. NULL: no memory. */
static batch_job *job_new(stream *s, const feedd_batch_request *req)
{
    const Feed__V1__BatchRequest *r = req->r;
    uint32_t n = (uint32_t)r->n_indices;
    size_t sample_bytes = req->sample_bytes;
    batch_job *bj = calloc(1, sizeof *bj);
    if (bj) {
        bj->indices = malloc(n * sizeof *bj->indices);
        bj->labels = malloc(n * sizeof *bj->labels);
        bj->status = malloc(n * sizeof *bj->status);
        bj->sample_crc = malloc(n * sizeof *bj->sample_crc);
        bj->errors = malloc(n * sizeof *bj->errors);
        if (req->encoded) {
            bj->enc_off = malloc((n + 1) * sizeof *bj->enc_off);
            bj->enc_len = malloc(n * sizeof *bj->enc_len);
        }
        if (!bj->indices || !bj->labels || !bj->status || !bj->sample_crc || !bj->errors ||
            (req->encoded && (!bj->enc_off || !bj->enc_len))) {
            job_free(bj);
            bj = NULL;
        }
    }
    if (bj) {
        const feed_dataset *ds = s->svc->datasets[s->sess.ds_id].ds;
        const feedd_config *cfg = s->svc->cfg;
        memcpy(bj->indices, r->indices, n * sizeof *bj->indices);
        for (uint32_t i = 0; i < n; i++)
            bj->labels[i] = feed_dataset_label(ds, r->indices[i]);
        bj->wait.acct = &s->mem;
        bj->wait.bytes = (uint64_t)n * sample_bytes;
        if (req->encoded)
            bj->wait.bytes =
                feedd_encoded_plan(ds, bj->indices, n, cfg->max_jpeg_bytes, cfg->max_batch_bytes,
                                   bj->enc_off, bj->status, bj->errors);
        bj->job.enc_off = bj->enc_off;
        bj->job.enc_len = bj->enc_len;
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

/* The session's client name, once it is known, for the metrics (under svc->mu). */
static void publish_client(stream *s)
{
    if (s->sess.opened && !s->client_published) {
        pthread_mutex_lock(&s->svc->mu);
        memcpy(s->client, s->sess.client_name, sizeof s->client);
        pthread_mutex_unlock(&s->svc->mu);
        s->client_published = true;
    }
}

/* One BatchRequest's bytes. Reports to the machine in out. */
static void handle_request(stream *s, const uint8_t *buf, size_t len, feedd_sm_out *out)
{
    feedd_service *svc = s->svc;
    const feedd_config *cfg = svc->cfg;
    char msg[STATUS_MSG_MAX];
    feedd_batch_request req;
    bool was_open = s->sess.opened;
    grpc_status_code code = feedd_request_batch(&svc->env, &s->cqt->arena, buf, len, s->peer,
                                                &s->sess, &req, msg, sizeof msg);
    if (!was_open && s->sess.opened) {
        feedd_pool_join(svc->pool, &s->q, s->sess.job, s->sess.job_weight, s->peer);
        if (s->sess.share[0])
            feedd_pool_share(svc->pool, &s->q, s->sess.ds_id, &s->sess.tf, s->sess.share,
                             s->sess.job, s->peer);
    }
    publish_client(s);
    if (code == GRPC_STATUS_OK && req.has_demand)
        feedd_fleet_report(feedd_session_job(&s->sess), &req.demand, feed_now_ns());
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
        batch_job *bj = job_new(s, &req);
        if (!bj)
            feedd_sm_fail(&s->sm, GRPC_STATUS_RESOURCE_EXHAUSTED, "memory: allocation failed", out);
        else if (!feedd_sm_on_request(&s->sm, s->sess.window, &bj->sm, out))
            job_free(bj); /* never accepted: nothing counted */
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
    /* A request that comes after the service began to drain is refused, not read, even
     * before the tick has drained this stream. */
    if (atomic_load(&s->svc->draining) && !s->sm.draining)
        feedd_sm_on_drain(&s->sm, &out);
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
            handle_request(s, buf, len, &out);
        feedd_sm_read_done(&s->sm, &out);
    }
    if (bb)
        grpc_byte_buffer_destroy(bb);
    apply(s, &out);
    free_if_finished(s);
}

void feedd_stream_on_send(stream *s, bool ok)
{
    feedd_sm_out out = {0};
    uint64_t dt = feed_now_ns() - s->sm.send_started_ns;
    feedd_count(&feedd_m.stage_ns[FEEDD_STAGE_SEND], dt);
    feedd_count(&feedd_m.stage_count[FEEDD_STAGE_SEND], 1);
    stream_mem_sub(s, s->mem_sending);
    s->mem_sending = 0;
    feedd_sm_on_send_done(&s->sm, ok, &out);
    apply(s, &out);
    free_if_finished(s);
}

void feedd_stream_on_status(stream *s)
{
    feedd_sm_on_status_done(&s->sm);
    free_if_finished(s);
}

void feedd_stream_on_close(stream *s)
{
    feedd_service *svc = s->svc;
    feedd_sm_out out = {0};
    feedd_sm_on_cancel(&s->sm, &out);
    apply(s, &out);
    FEED_LOGI("stream %s: closed%s client='%s' requests=%llu batches=%llu bytes=%llu", s->peer,
              s->close_cancelled ? " (cancelled)" : "", s->sess.client_name,
              (unsigned long long)s->requests, (unsigned long long)s->batches_sent,
              (unsigned long long)s->bytes_sent);
    feedd_gauge(&feedd_m.active_streams, -1);
    pthread_mutex_lock(&svc->mu);
    svc->open_streams--;
    pthread_cond_broadcast(&svc->cv);
    pthread_mutex_unlock(&svc->mu);
    free_if_finished(s);
}

static void tick(stream *s, uint64_t now_ns)
{
    feedd_sm_out out = {0};
    feedd_sm_on_tick(&s->sm, now_ns, atomic_load(&s->svc->draining), s->svc->cfg->send_stall_ms,
                     atomic_load(&s->mem.used), &out);
    apply(s, &out);
}

void feedd_stream_tick_all(cq_thread *cqt, uint64_t now_ns)
{
    feed_list_node *n = cqt->streams.first;
    while (n) {
        stream *s = FEED_LIST_ENTRY(n, stream, cq_link);
        n = n->next;
        tick(s, now_ns);
        free_if_finished(s);
    }
}

/*
 * A new stream joins its owner's and the service's lists and arms
 * RECV_CLOSE_ON_SERVER; then the machine opens it (or fails it at once past
 * max-streams).
 */
static void stream_open(stream *s)
{
    feedd_service *svc = s->svc;
    s->t_recv = (tag){TAG_STREAM_RECV, s};
    s->t_send = (tag){TAG_STREAM_SEND, s};
    s->t_close = (tag){TAG_STREAM_CLOSE, s};
    s->t_status = (tag){TAG_STREAM_STATUS, s};
    s->t_wake = (tag){TAG_STREAM_WAKE, s};
    s->status_slice = grpc_empty_slice();
    feedd_sm_init(&s->sm);
    peer_of(s->call, s->peer, sizeof s->peer);
    s->guard_fd = feedd_guard_fd_of(svc->guard, s->peer);
    pthread_mutex_init(&s->inbox_mu, NULL);
    feed_list_push_front(&s->cqt->streams, &s->cq_link);

    pthread_mutex_lock(&svc->mu);
    bool too_many = svc->open_streams >= svc->cfg->max_streams;
    s->id = atomic_fetch_add_explicit(&feedd_m.streams_opened, 1, memory_order_relaxed) + 1;
    feed_list_push_front(&svc->streams, &s->link);
    svc->live_streams++;
    svc->open_streams++;
    pthread_mutex_unlock(&svc->mu);
    feedd_gauge(&feedd_m.active_streams, 1);

    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->close_cancelled;
    if (!start_ops(s, &op, 1, &s->t_close)) {
        /* Its tag will never come, and only that tag ends the stream: end it here. */
        FEED_LOGE("stream %s: RECV_CLOSE_ON_SERVER failed to start; cancelling the call",
                  s->peer);
        cancel_call(s, GRPC_STATUS_OK, "");
        feedd_stream_on_close(s);
        return;
    }
    feedd_sm_out out = {0};
    FEED_LOGI("stream %s: connected", s->peer);
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
