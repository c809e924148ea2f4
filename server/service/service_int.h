/*
 * What the files of feedd's gRPC service share (see service.h for the API):
 *
 *   service.c     start/drain/stop, request slots, the completion-queue threads
 *   ports.c       which listener, credentials, binding the ports, feedd's listeners and guard
 *   request.c     parsing and checking requests, reading a message into a flat buffer
 *   unary.c       Describe, Health/Check, UNIMPLEMENTED
 *   stream_sm.c   a Stream call's state machine, no I/O
 *   stream.c      a Stream call's transport: requests in, jobs to the pool, batches out
 *   memory.c      memory admission: the caps, the waiting FIFO, the granter thread
 *   batch_pack.c  a finished job as a Batch message, its pixels not copied
 *
 * Threads: `cq_threads` completion-queue threads, each with its own queue;
 * a call lives on the queue that accepted it, and that thread owns it: it
 * parses the requests (the checks that need no stream state are in
 * request.c), runs the stream's state machine and makes every gRPC call of
 * the stream, and never decodes. Other threads never touch a stream's state:
 * pool workers (a batch done) and the granter thread (memory.c: a batch's
 * bytes granted) post the job to the stream's inbox and wake its owner with a
 * zero-op grpc_call_start_batch, which completes at once on the call's queue
 * (one wake at a time, coalesced), as libuv's workers hand finished work back
 * to the loop thread. Each completion-queue thread also ticks its own streams
 * every FEEDD_TICK_MS: the drain and the send-stall check. The main thread
 * only sets the service's flags. The listener thread (listener.h) accepts
 * connections and hands them to gRPC, where feedd's own listener runs
 * (server/net/grpc151; else gRPC accepts).
 *
 * Locks, in this order: svc->mu (the stream list the metrics read, counters,
 * shutdown state), then a stream's inbox_mu, then the pool's mu (pool.h) or
 * the memory's mu (memory.c). Each is held only around its own lists and
 * counters: no gRPC call, batch buffer allocation or log write is made under
 * any of them (test_server_units checks it at every call). A stream is freed
 * by its owner once its machine says its life is over (feedd_sm_finished):
 * no job of it is left anywhere, so no other thread can post to it.
 */
#ifndef FEED_SERVER_SERVICE_INTERNAL_H
#define FEED_SERVER_SERVICE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "config.h"
#include "feed/list.h"
#include "handoff.h"
#include "memory.h"
#include "pool.h"
#include "request.h"
#include "service.h"
#include "stream_sm.h"
#include "trust.h"

#define STATUS_MSG_MAX 256
/* gRPC's own default handshake timeout; --idle-timeout-ms shortens it, never lengthens it. */
#define FEEDD_HANDSHAKE_MS_MAX 120000
#define REQ_SLOTS_PER_METHOD 2
#define FEEDD_TICK_MS 100 /* how often a completion-queue thread ticks its streams */

typedef enum tag_kind {
    TAG_REQUEST,
    TAG_STREAM_RECV,
    TAG_STREAM_SEND,
    TAG_STREAM_CLOSE,
    TAG_STREAM_STATUS,
    TAG_STREAM_WAKE,
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
typedef struct req_slot req_slot; /* service.c's */

/* A completion-queue thread and what it owns; the thread itself is the only user. */
struct cq_thread {
    feedd_service *svc;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool started;
    feedd_arena arena; /* unpacks this thread's requests */
    uint8_t *rbuf;     /* one request's bytes, max-request-bytes */
    req_slot *slots[METHOD_COUNT * REQ_SLOTS_PER_METHOD];
    feed_list streams;     /* the streams this thread owns, by cq_link */
    uint64_t last_tick_ns; /* when it last ticked them */
};

typedef struct batch_job batch_job;

typedef struct stream stream;

/* What a job posted to its stream's inbox says. */
typedef enum job_event {
    JOB_GRANTED, /* the memory caps reserved its bytes (the granter thread) */
    JOB_DONE,    /* its last sample is done (a pool worker) */
} job_event;

/* One accepted batch request: owned by its stream from acceptance until it is sent or dropped. */
struct batch_job {
    feedd_job job;
    stream *owner;
    uint64_t batch_id;
    feedd_mem_waiter wait; /* its pixel buffer's bytes, asked of the memory caps */
    uint32_t crc;
    feedd_mem_buf *mem; /* NULL until the memory caps grant the bytes */
    uint64_t *indices;
    uint32_t *labels;
    feed_sample_status *status;
    uint32_t *sample_crc;
    char (*errors)[FEEDD_SAMPLE_MSG_MAX + 1];
    uint64_t *enc_off;         /* encoded: job.enc_off's entries; else NULL */
    uint32_t *enc_len;         /* encoded: job.enc_len's entries; else NULL */
    feedd_sm_job sm;           /* the stream's state machine links it */
    feed_list_node inbox_link; /* in its stream's inbox, guarded by the stream's inbox_mu */
    job_event event;           /* what it was posted for */
};

/*
 * A Stream call; see stream.c. Everything but the inbox and the list link is
 * its owner's (cqt's thread): no lock guards it, no other thread reads it.
 */
struct stream {
    feedd_service *svc;
    cq_thread *cqt; /* the owner */
    grpc_call *call;
    uint64_t id; /* 1, 2, ... in the order streams opened; names it in metrics */
    char peer[128];
    int guard_fd; /* the connection's descriptor for the transport guard, or -1 (guard.h) */
    tag t_recv, t_send, t_close, t_status, t_wake;
    /* Guarded by svc->mu: the metrics read them. */
    feed_list_node link; /* in svc->streams */
    char client[FEEDD_CLIENT_NAME_MAX + 1];
    /* Bytes of this stream's buffers, from the grant until the send completes (memory.h);
     * its used count is atomic, read by the metrics. */
    feedd_mem_account mem;
    /* Guarded by inbox_mu, a leaf taken for a list push or swap only. */
    pthread_mutex_t inbox_mu;
    feed_list inbox;   /* of batch_job, by inbox_link */
    bool wake_pending; /* a wake is on its way to the owner; true exactly while inbox is not empty */
    /* The owner's. */
    feed_list_node cq_link; /* in cqt->streams */
    feedd_stream_sm sm;     /* what the call does next (stream_sm.h) */
    grpc_byte_buffer *recv_bb;
    int close_cancelled;
    bool sent_md;
    bool client_published; /* client copied from sess.client_name */
    grpc_slice status_slice;
    feedd_session sess;
    uint64_t mem_sending; /* bytes of the send in flight */
    feedd_queue q;
    uint64_t batches_sent, bytes_sent, requests;
};

/* Owned by the main thread (start/drain/stop); see the locks above. */
struct feedd_service {
    const feedd_config *cfg;
    const feedd_served_dataset *datasets;
    size_t n_datasets;
    feedd_request_env env; /* cfg and datasets, for request.c */
    feedd_pool *pool;
    grpc_server *server;
    grpc_server_credentials *creds;
    bool own_listener; /* feedd's listener and guard (server/net/grpc151), else gRPC's listener */
    struct feedd_listener *listener; /* accepts for server (listener.h) with own_listener */
#ifdef FEEDD_GRPC151_CORE
    feedd_handoff handoff; /* with TLS: how listener's connections reach gRPC */
#endif
    grpc_server_credentials *health_creds;  /* insecure, for health_listener's connections */
    struct feedd_listener *health_listener; /* --health-listen beside the TLS port, or NULL */
    struct feedd_guard *guard; /* watches the listeners' connections (guard.h); NULL when off */
    int health_port;
    feedd_token token; /* what every Feed call must carry (trust.h) */
    void *methods[METHOD_COUNT];
    cq_thread *cqts;
    uint32_t n_cqts;
    tag t_shutdown;
    atomic_bool draining;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* feed_cond_init: monotonic */
    /* Guarded by mu. */
    feed_list streams;   /* of stream, by link: for the metrics */
    size_t live_streams; /* allocated stream objects */
    size_t open_streams; /* calls whose close has not fired */
    size_t live_unary;
    bool shutting_down, shutdown_done;
    feedd_memory *memory; /* the service's; its granter thread runs from start to stop */
};

/* ports.c, on the main thread during feedd_service_start. Which listener takes the gRPC
 * ports (logged); load the token and credentials and bind the ports (0, FEED_EINVAL, FEED_EIO
 * or FEED_ENOMEM); after grpc_server_start, the guard and feedd's listeners (0 or FEED_ENOMEM). */
bool feedd_ports_choose_listener(const feedd_config *cfg);
int feedd_ports_bind(feedd_service *svc, int *port);
#ifdef FEEDD_GRPC151_CORE
int feedd_ports_start_own(feedd_service *svc);
#endif

/* unary.c, on a completion-queue thread. */
void feedd_unary_finish(feedd_service *svc, grpc_call *call, grpc_byte_buffer *resp,
                        grpc_status_code code, const char *msg);
void feedd_unary_done(void *unary);
void feedd_unary_describe(feedd_service *svc, grpc_call *call, grpc_byte_buffer *payload);
void feedd_unary_health(feedd_service *svc, grpc_call *call, grpc_byte_buffer *payload);
void feedd_unary_unimplemented(feedd_service *svc, grpc_call *call, grpc_slice method_name);

/* stream.c: a new Stream call, then its tags, on the call's completion-queue thread. */
void feedd_stream_start(cq_thread *cqt, grpc_call *call);
void feedd_stream_on_recv(stream *s, bool ok);
void feedd_stream_on_send(stream *s, bool ok);
void feedd_stream_on_status(stream *s);
void feedd_stream_on_close(stream *s);
void feedd_stream_on_wake(stream *s);
/* stream.c, on a completion-queue thread: tick every stream it owns (drain, stall). */
void feedd_stream_tick_all(cq_thread *cqt, uint64_t now_ns);
/* The granter thread: the job's bytes are reserved in both caps (memory.h's granted). */
void feedd_stream_on_granted(feedd_mem_waiter *w);
/* A stream's inbox_mu, counted per thread: feedd_stream_locks_held() is how many this thread
 * holds (tests check that no gRPC call or batch allocation is made while one is). */
void feedd_stream_lock(stream *s);
void feedd_stream_unlock(stream *s);
int feedd_stream_locks_held(void);
/* How many gRPC operations of a stream were started by a thread other than its owner; tests
 * check that it stays 0. */
int feedd_stream_foreign_ops(void);

/* batch_pack.c: bj as a Batch message of h x w samples; takes bj->mem. NULL if it cannot. */
grpc_byte_buffer *feedd_batch_pack(batch_job *bj, uint32_t h, uint32_t w, const char *peer);

#endif
