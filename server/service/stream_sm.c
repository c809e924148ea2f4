/*
 * The Stream call's state machine (see stream_sm.h). Pure: every function
 * changes only the machine and the out it is given. One thread drives it:
 * the stream's owner (stream.c).
 */
#include "stream_sm.h"

#include <stdio.h>
#include <string.h>

void feedd_sm_init(feedd_stream_sm *sm)
{
    memset(sm, 0, sizeof *sm);
    sm->code = GRPC_STATUS_OK;
}

bool feedd_sm_alive(const feedd_stream_sm *sm)
{
    return !sm->closed && !sm->failing && !sm->status_sent && !sm->stalled;
}

static void discard(feedd_sm_job *job, feedd_sm_out *out)
{
    feed_list_push_back(&out->discard, &job->link);
}

/* Everything accepted goes: ready batches here, the rest through drop_work. */
static void drop_work(feedd_stream_sm *sm, feedd_sm_out *out)
{
    while (!feed_list_empty(&sm->ready)) {
        sm->outstanding--;
        feed_list_push_back(&out->discard, feed_list_pop_front(&sm->ready));
    }
    out->drop_work = true;
}

static void finish(feedd_stream_sm *sm, grpc_status_code code, const char *msg, feedd_sm_out *out)
{
    sm->status_sent = true;
    sm->code = code;
    if (msg != sm->msg)
        snprintf(sm->msg, sizeof sm->msg, "%s", msg);
    out->finish = true;
    out->code = code;
    out->msg = sm->msg;
}

/* The status goes out once, never while a send is in flight, never after a cancel. */
static void maybe_finish(feedd_stream_sm *sm, feedd_sm_out *out)
{
    bool may = !sm->closed && !sm->status_sent && !sm->send_in_flight && !sm->stalled;
    bool idle = sm->outstanding == 0 && feed_list_empty(&sm->ready);
    if (may && sm->failing)
        finish(sm, sm->code, sm->msg, out);
    else if (may && idle && sm->recv_done && !sm->refused)
        finish(sm, GRPC_STATUS_OK, "", out);
    else if (may && idle && sm->draining)
        finish(sm, GRPC_STATUS_UNAVAILABLE, "server draining: no new batches", out);
}

static void try_send(feedd_stream_sm *sm, feedd_sm_out *out)
{
    if (!sm->send_in_flight && !feed_list_empty(&sm->ready) && feedd_sm_alive(sm)) {
        feed_list_node *n = feed_list_pop_front(&sm->ready);
        sm->outstanding--;
        sm->send_in_flight = true;
        out->send = FEED_LIST_ENTRY(n, feedd_sm_job, link);
    }
}

void feedd_sm_fail(feedd_stream_sm *sm, grpc_status_code code, const char *msg, feedd_sm_out *out)
{
    if (feedd_sm_alive(sm)) {
        sm->failing = true;
        sm->code = code;
        snprintf(sm->msg, sizeof sm->msg, "%s", msg);
        drop_work(sm, out);
        maybe_finish(sm, out);
    }
}

void feedd_sm_open(feedd_stream_sm *sm, bool draining, feedd_sm_out *out)
{
    sm->draining = draining;
    if (!draining && feedd_sm_alive(sm)) {
        sm->recv_armed = true;
        out->arm_recv = true;
    }
    maybe_finish(sm, out);
}

bool feedd_sm_on_recv(feedd_stream_sm *sm, bool got, feedd_sm_out *out)
{
    bool read = false;
    sm->recv_armed = false;
    if (!got || !feedd_sm_alive(sm)) {
        sm->recv_done = true;
    } else if (sm->draining) {
        /* Accept nothing more; the status follows the batches already accepted. */
        sm->recv_done = true;
        sm->refused = true;
    } else {
        read = true;
    }
    if (!read)
        maybe_finish(sm, out);
    return read;
}

void feedd_sm_read_done(feedd_stream_sm *sm, feedd_sm_out *out)
{
    if (!sm->recv_armed && !sm->recv_done && feedd_sm_alive(sm)) {
        sm->recv_armed = true;
        out->arm_recv = true;
    }
    maybe_finish(sm, out);
}

bool feedd_sm_on_request(feedd_stream_sm *sm, uint32_t window, feedd_sm_job *job, feedd_sm_out *out)
{
    bool accepted = sm->outstanding < window;
    if (accepted) {
        sm->outstanding++;
        out->admit = job;
    } else {
        char msg[FEEDD_SM_MSG_MAX];
        snprintf(msg, sizeof msg, "window: %u batches already outstanding (window %u)",
                 sm->outstanding, window);
        feedd_sm_fail(sm, GRPC_STATUS_RESOURCE_EXHAUSTED, msg, out);
    }
    return accepted;
}

void feedd_sm_on_granted(feedd_stream_sm *sm, feedd_sm_job *job, bool have, feedd_sm_out *out)
{
    if (!have)
        feedd_sm_fail(sm, GRPC_STATUS_RESOURCE_EXHAUSTED, "memory: allocation failed", out);
    if (!have || !feedd_sm_alive(sm)) {
        sm->outstanding--;
        discard(job, out);
    } else {
        out->start = job;
    }
    maybe_finish(sm, out);
}

void feedd_sm_on_job_done(feedd_stream_sm *sm, feedd_sm_job *job, bool cancelled, feedd_sm_out *out)
{
    if (cancelled || !feedd_sm_alive(sm)) {
        sm->outstanding--;
        discard(job, out);
    } else {
        feed_list_push_back(&sm->ready, &job->link);
        try_send(sm, out);
    }
    maybe_finish(sm, out);
}

void feedd_sm_on_send_started(feedd_stream_sm *sm, uint64_t now_ns)
{
    sm->send_started_ns = now_ns;
}

void feedd_sm_on_send_failed(feedd_stream_sm *sm, grpc_status_code code, const char *msg,
                             feedd_sm_out *out)
{
    sm->send_in_flight = false;
    feedd_sm_fail(sm, code, msg, out);
}

void feedd_sm_on_send_done(feedd_stream_sm *sm, bool ok, feedd_sm_out *out)
{
    sm->send_in_flight = false;
    if (!ok && !sm->status_sent) {
        /* The call is dead: send no status; RECV_CLOSE_ON_SERVER will fire. */
        sm->status_sent = true;
        drop_work(sm, out);
    }
    try_send(sm, out);
    maybe_finish(sm, out);
}

void feedd_sm_on_status_started(feedd_stream_sm *sm, bool ok, feedd_sm_out *out)
{
    sm->status_in_flight = ok;
    if (!ok) {
        /* Its tag will never come; only a cancel ends the call now. */
        out->cancel = true;
        out->cancel_code = GRPC_STATUS_OK;
        out->cancel_msg = "";
    }
}

void feedd_sm_on_status_done(feedd_stream_sm *sm)
{
    sm->status_in_flight = false;
}

void feedd_sm_on_cancel(feedd_stream_sm *sm, feedd_sm_out *out)
{
    if (!sm->closed) {
        sm->closed = true;
        drop_work(sm, out);
    }
}

void feedd_sm_on_drain(feedd_stream_sm *sm, feedd_sm_out *out)
{
    sm->draining = true;
    maybe_finish(sm, out);
}

void feedd_sm_on_tick(feedd_stream_sm *sm, uint64_t now_ns, bool draining, uint32_t stall_ms,
                      uint64_t held_bytes, feedd_sm_out *out)
{
    if (draining && !sm->draining)
        feedd_sm_on_drain(sm, out);
    uint64_t pending_ms = sm->send_in_flight && now_ns > sm->send_started_ns
                              ? (now_ns - sm->send_started_ns) / 1000000u
                              : 0;
    if (stall_ms && sm->send_in_flight && !sm->stalled && !sm->closed && pending_ms >= stall_ms) {
        sm->stalled = true;
        snprintf(sm->cancel_msg, sizeof sm->cancel_msg,
                 "a batch send made no progress for %llu ms (send-stall-ms %u): the client "
                 "stopped reading; %llu bytes held",
                 (unsigned long long)pending_ms, stall_ms, (unsigned long long)held_bytes);
        out->cancel = true;
        out->cancel_code = GRPC_STATUS_RESOURCE_EXHAUSTED;
        out->cancel_msg = sm->cancel_msg;
    }
}

void feedd_sm_on_dropped(feedd_stream_sm *sm, feedd_sm_out *out)
{
    sm->outstanding--;
    maybe_finish(sm, out);
}

bool feedd_sm_finished(const feedd_stream_sm *sm)
{
    return sm->closed && !sm->recv_armed && !sm->send_in_flight && !sm->status_in_flight &&
           sm->outstanding == 0 && feed_list_empty(&sm->ready);
}
