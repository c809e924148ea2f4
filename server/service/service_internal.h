/*
 * What the files of feedd's gRPC service share (see service.h for the API):
 *
 *   service.c     start/drain/stop, request slots, the completion-queue threads
 *   unary.c       Describe, Health/Check, UNIMPLEMENTED
 *   stream_sm.c   a Stream call's state machine, no I/O
 *   stream.c      a Stream call's transport: requests in, jobs to the pool, batches out
 *   memory.c      memory admission: the caps, the waiting FIFO, the granter thread
 *   batch_pack.c  a finished job as a Batch message, its pixels not copied
 *
 * Threads: `cq_threads` completion-queue threads, each with its own queue;
 * a call lives on the queue that accepted it. They parse requests (the
 * parsing and the checks that need no stream state are in request.c), start
 * sends and statuses, and never decode. Pool workers finish batches and may
 * start a send themselves (grpc_call_start_batch is thread-safe); the send's
 * completion comes back on the call's queue. The granter thread (memory.c)
 * hands waiting batches their memory and submits them to the pool. The
 * listener thread (listener.h) accepts connections and hands them to gRPC.
 *
 * Locks, in this order: svc->mu (stream list, counters, shutdown state),
 * then stream->mu (everything in the stream marked "guarded by mu"), then
 * the pool's mu (pool.h) or the memory's mu (memory.c), both leaves: nothing
 * else is locked, and no gRPC call made, while one is held. No gRPC call,
 * batch buffer allocation or log write is made under svc->mu or a stream's
 * mu either: stream.c makes them once the lock is released (its header), and
 * the walks over the streams (drain, stall checks: service.c each_stream)
 * hold each stream by a reference, not under svc->mu. A stream is freed when
 * its reference count (one per pending gRPC op, one per accepted job, one
 * for the open call, one per holder) drops to zero.
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
#define REQ_SLOTS_PER_METHOD 2
#define STREAM_LOG_LINES 3 /* most log lines one critical section of a stream makes */

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
};

typedef struct batch_job batch_job;

typedef struct stream stream;

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
    feedd_sm_job sm; /* the stream's state machine links it */
    feed_list_node alloc_link; /* in its stream's todo.alloc while its buffer is to be made */
};

/*
 * What a critical section of a stream decided to do once its lock is released (stream.c:
 * unlock_log_free): gRPC calls and buffer allocations are never made under it. Each item
 * that needs the stream holds a reference of its own, taken under the lock.
 */
typedef struct stream_todo {
    feed_list alloc;    /* jobs whose bytes the caps granted: make their buffers, then report */
    batch_job *send;    /* pack and send this batch; the job's reference becomes the send's */
    bool send_md;       /* with the initial metadata */
    bool recv;          /* arm the next RECV_MESSAGE */
    bool status;        /* send the status in status_slice (with the metadata if status_md) */
    bool status_md;
    grpc_status_code status_code;
    bool cancel;        /* cancel the call: with cancel_code and cancel_msg, or plain if OK */
    grpc_status_code cancel_code;
    char cancel_msg[STATUS_MSG_MAX];
} stream_todo;

/* A Stream call; see stream.c. */
struct stream {
    feedd_service *svc;
    cq_thread *cqt;
    grpc_call *call;
    uint64_t id; /* 1, 2, ... in the order streams opened; names it in metrics */
    char peer[128];
    int guard_fd; /* the connection's descriptor for the transport guard, or -1 (guard.h) */
    tag t_recv, t_send, t_close, t_status;
    pthread_mutex_t mu;
    feed_list_node link; /* in svc->streams, guarded by svc->mu */
    /* Guarded by mu. */
    feedd_stream_sm sm; /* what the call does next (stream_sm.h) */
    int refs;
    grpc_byte_buffer *recv_bb;
    int close_cancelled;
    bool sent_md;
    grpc_slice status_slice;
    feedd_session sess;
    /* Bytes of this stream's buffers, from the grant until the send completes (memory.h). */
    feedd_mem_account mem;
    uint64_t mem_sending;
    feedd_queue q;
    uint64_t send_started_ns;
    bool stall_cancelled; /* feedd_stream_check_stall cancelled the call */
    stream_todo todo;
    uint64_t batches_sent, bytes_sent, requests;
    /* Log lines made under mu, written once it is released (stream.c: unlock_log_free). */
    struct {
        int level;
        char text[STATUS_MSG_MAX + 192];
    } log[STREAM_LOG_LINES];
    int n_log;
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
    struct feedd_listener *listener;        /* accepts for server (listener.h) */
    feedd_handoff handoff;                  /* with TLS: how listener's connections reach gRPC */
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
    pthread_cond_t cv;
    /* Guarded by mu. */
    feed_list streams;   /* of stream, by link */
    size_t live_streams; /* allocated stream objects */
    size_t open_streams; /* calls whose close has not fired */
    size_t live_unary;
    bool shutting_down, shutdown_done;
    feedd_memory *memory; /* the service's; its granter thread runs from start to stop */
};

/* service.c: copy a message into dst, at most limit bytes. 0, FEED_EPROTO or FEED_ETOOBIG. */
int feedd_read_bb(grpc_byte_buffer *bb, size_t limit, uint8_t *dst, size_t *len);

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
/* The main thread, svc->mu not held, s held (feedd_stream_hold): the service drains. */
void feedd_stream_drain(stream *s);
/* The main thread, svc->mu not held, s held: cancel s if its pending send is older than
 * stall_ms. */
void feedd_stream_check_stall(stream *s, uint64_t now_ns, uint32_t stall_ms);
/* Under svc->mu: a reference on s for a walk over the streams, or false when s is going (its
 * references are gone; it leaves the list once svc->mu is released). */
bool feedd_stream_hold(stream *s);
/* svc->mu not held: drops feedd_stream_hold's reference. */
void feedd_stream_unhold(stream *s);
/* The granter thread: the job's bytes are reserved in both caps (memory.h's granted). */
void feedd_stream_on_granted(feedd_mem_waiter *w);
/* s->mu, counted per thread: feedd_stream_locks_held() is how many this thread holds (tests
 * check that no gRPC call or batch allocation is made while one is). */
void feedd_stream_lock(stream *s);
void feedd_stream_unlock(stream *s);
int feedd_stream_locks_held(void);

/* batch_pack.c: bj as a Batch message of h x w samples; takes bj->mem. NULL if it cannot. */
grpc_byte_buffer *feedd_batch_pack(batch_job *bj, uint32_t h, uint32_t w, const char *peer);

#endif
