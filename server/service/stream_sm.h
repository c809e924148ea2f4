/*
 * A Stream call's state machine, without I/O: it takes the call's events and
 * says what to do, and the transport (stream.c) does it. Nothing here locks,
 * allocates, or calls gRPC, so tests/server/test_stream_sm.c scripts any
 * interleaving of events with no sockets and no sleeps.
 *
 * Inputs: the call opened; a message arrived (or the client half-closed);
 * a batch request was read; its job got memory; a job is done; a send
 * started, finished or failed to start; the status finished or failed to
 * start; the call was cancelled (RECV_CLOSE_ON_SERVER); a tick of the
 * clock (the server drains, a send stalls); a check failed; the transport
 * took back a job.
 * Outputs (feedd_sm_out): arm the next receive, admit a job to the memory
 * caps, start a job in the pool, send a batch, free jobs, take the stream's
 * jobs back from the pool and the memory queue, finish with a status,
 * cancel the call.
 *
 * The rules it keeps: at most `window` accepted batches not yet handed to
 * gRPC; one send in flight, finished batches queued in order behind it; the
 * status goes out once, only when no send is in flight: a failure's status
 * at once (its batches dropped), OK after the client half-closed and every
 * accepted batch went out, UNAVAILABLE when draining and nothing is left;
 * after a cancel or a failed send nothing more goes out. A send pending for
 * stall_ms cancels the call (the client stopped reading). The stream's life
 * ends when the machine says so (feedd_sm_finished: closed, no gRPC op in
 * flight, no job out), as nghttp2's session says when a connection may go.
 *
 * Ownership: the machine is the stream's and is driven only by the stream's
 * owner, the call's completion-queue thread (stream.c); the jobs are the
 * transport's, the machine only links them (feedd_sm_job embedded in the
 * transport's job).
 */
#ifndef FEED_SERVER_STREAM_SM_H
#define FEED_SERVER_STREAM_SM_H

#include <stdbool.h>
#include <stdint.h>

#include <grpc/status.h>

#include "feed/list.h"

#define FEEDD_SM_MSG_MAX 256

/* Embedded in the transport's job; the machine's while it holds the job. */
typedef struct feedd_sm_job {
    feed_list_node link; /* in the ready list or an out's discard list */
} feedd_sm_job;

typedef struct feedd_stream_sm {
    uint32_t outstanding; /* accepted, not yet handed to gRPC (waiting for memory too) */
    feed_list ready;      /* done, waiting for the send in flight; in order */
    bool recv_armed, recv_done, closed, failing, draining;
    bool refused; /* a request came in while draining */
    bool send_in_flight, status_sent, status_in_flight;
    bool stalled;             /* the tick cancelled the call for a stalled send */
    uint64_t send_started_ns; /* of the send in flight */
    grpc_status_code code;    /* of a failure, then of the status sent */
    char msg[FEEDD_SM_MSG_MAX];
    char cancel_msg[FEEDD_SM_MSG_MAX];
} feedd_stream_sm;

/*
 * What an event asks of the transport; zero it before the first call for an
 * event. Several calls for one event may fill the same out. Do them in this
 * order: discard, drop_work, admit, start, send, arm_recv, finish, cancel.
 */
typedef struct feedd_sm_out {
    feed_list discard; /* free these jobs; no longer counted */
    bool drop_work; /* take the stream's jobs back (pool, memory queue): feedd_sm_on_dropped each */
    feedd_sm_job *admit; /* accepted: ask the memory caps for its bytes */
    feedd_sm_job *start; /* it has its memory: submit it to the pool */
    feedd_sm_job *send;  /* send this batch (no longer counted as outstanding) */
    bool arm_recv;       /* start the next RECV_MESSAGE */
    bool finish;         /* send the status code with msg */
    grpc_status_code code;
    const char *msg; /* in the machine; valid until its next event */
    bool cancel;     /* cancel the call: with cancel_code and cancel_msg, or plain if OK */
    grpc_status_code cancel_code;
    const char *cancel_msg; /* in the machine */
} feedd_sm_out;

void feedd_sm_init(feedd_stream_sm *sm);
/* The call opened (RECV_CLOSE_ON_SERVER armed). draining: the server already drains. */
void feedd_sm_open(feedd_stream_sm *sm, bool draining, feedd_sm_out *out);
/*
 * A RECV_MESSAGE finished; got: with a message (false: the client
 * half-closed, or the receive failed). true: read the message, report what it
 * was (feedd_sm_on_request, feedd_sm_fail, or nothing for a request that only
 * opened the session), then call feedd_sm_read_done. false: drop it.
 */
bool feedd_sm_on_recv(feedd_stream_sm *sm, bool got, feedd_sm_out *out);
void feedd_sm_read_done(feedd_stream_sm *sm, feedd_sm_out *out);
/*
 * A batch request passed its checks and its job was made; window: the
 * session's. true: accepted (out->admit). false: the window is full, the
 * stream fails, and the job is still the caller's to free.
 */
bool feedd_sm_on_request(feedd_stream_sm *sm, uint32_t window, feedd_sm_job *job,
                         feedd_sm_out *out);
/* The memory caps granted an accepted job's bytes; have: its buffer could be allocated. */
void feedd_sm_on_granted(feedd_stream_sm *sm, feedd_sm_job *job, bool have, feedd_sm_out *out);
/* A job's last sample is done; cancelled: the pool was told to drop it. */
void feedd_sm_on_job_done(feedd_stream_sm *sm, feedd_sm_job *job, bool cancelled,
                          feedd_sm_out *out);
/* out->send's SEND_MESSAGE started at now_ns. */
void feedd_sm_on_send_started(feedd_stream_sm *sm, uint64_t now_ns);
/* out->send could not be started (packing or the gRPC call failed). */
void feedd_sm_on_send_failed(feedd_stream_sm *sm, grpc_status_code code, const char *msg,
                             feedd_sm_out *out);
/* A send's tag came back; ok false: the call is dead, send nothing more, no status. */
void feedd_sm_on_send_done(feedd_stream_sm *sm, bool ok, feedd_sm_out *out);
/* out->finish's status started; ok false: it could not start (the call is cancelled instead). */
void feedd_sm_on_status_started(feedd_stream_sm *sm, bool ok, feedd_sm_out *out);
/* The status's tag came back. */
void feedd_sm_on_status_done(feedd_stream_sm *sm);
/* RECV_CLOSE_ON_SERVER fired: the call is over (client cancel, deadline, shutdown, or done). */
void feedd_sm_on_cancel(feedd_stream_sm *sm, feedd_sm_out *out);
/* The server drains: accept nothing more, end once the accepted batches are sent. */
void feedd_sm_on_drain(feedd_stream_sm *sm, feedd_sm_out *out);
/*
 * The clock ticked at now_ns: draining, the server drains (once seen, the
 * same as feedd_sm_on_drain); stall_ms (0: never), cancel the call with
 * RESOURCE_EXHAUSTED when the send in flight has been pending that long: the
 * client stopped reading and holds its batches' memory.
 */
void feedd_sm_on_tick(feedd_stream_sm *sm, uint64_t now_ns, bool draining, uint32_t stall_ms,
                      uint64_t held_bytes, feedd_sm_out *out);
/* End the stream with code now (a request failed a check); its batches are dropped. */
void feedd_sm_fail(feedd_stream_sm *sm, grpc_status_code code, const char *msg, feedd_sm_out *out);
/* The transport took back one accepted job for drop_work and freed it. */
void feedd_sm_on_dropped(feedd_stream_sm *sm, feedd_sm_out *out);

/* Whether the stream still takes work (not failing, cancelled, stalled or finished). */
bool feedd_sm_alive(const feedd_stream_sm *sm);

/*
 * Whether the stream's life is over: the call closed, no gRPC op of it in
 * flight and no job of it anywhere (pool, memory queue, the owner's inbox).
 * The owner frees the stream then, and only then.
 */
bool feedd_sm_finished(const feedd_stream_sm *sm);

#endif
