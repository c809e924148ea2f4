/*
 * What the client library's parts share: the limits, the loader's state and
 * each part's entry points. loader.c and state.c (public API, training
 * thread) over sched/ (sched*.c: slots, dispatch, owner routing, failover,
 * landing), net/ (conn.c gRPC calls, io.c the receiver and dispatch threads,
 * servers.c the server table, resolve.c the DNS thread) and logq.c (the log
 * thread). Not the header of any one of them: each includes it, none owns it.
 *
 * Threads: the training thread (next/release/set_epoch/stats), receiver
 * threads (2 to CLIENT_MAX_RECEIVERS) that all run the one completion queue,
 * the dispatch thread (io.c), and a resolver thread when a target is
 * "dns:///...". One mutex, `mu`,
 * guards everything marked [mu]. A receiver drops `mu` only while it lands a
 * piece of a batch in state PIECE_LANDING (its slot SLOT_LANDING), whose samples' places
 * in the slot nobody else touches; several receivers land different pieces, of one batch
 * or several, at once, each with its own scratch. Any
 * thread in sched_dispatch drops it while it allocates a new slot (growing). The
 * resolver thread only posts address lists ([mu]); a receiver applies them.
 * Lock order: mu, then the log queue's mu (a leaf; logq.c); the resolver's own
 * dns_mu is never held with mu. cfg.log_fn is called only by the log thread,
 * with no lock held.
 * The training thread starts no gRPC operation and allocates no slot:
 * next()/release()/set_epoch() change the scheduler's state and wake the
 * dispatch thread (conn_dispatch_soon), which sends the requests they made
 * room for (sched_dispatch); slots are allocated only on the loader's own
 * threads. A caller's thread thus never waits in gRPC, and the receivers'
 * and the dispatcher's gRPC calls under mu are grpc_call_start_batch and
 * grpc_call_cancel, which do not block.
 */
#ifndef FEED_CLIENT_CLIENT_IMPL_H
#define FEED_CLIENT_CLIENT_IMPL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "feed/buf.h"
#include "demand.h"
#include "feed/client.h"
#include "gpu.h"
#include "job.h"
#include "plan.h"
#include "share_policy.h"
#include "wire.h"

#define CLIENT_MAX_SERVERS 256u
#define CLIENT_MAX_WINDOW 64u
#define CLIENT_MAX_PREFETCH 64u
#define CLIENT_MAX_SLOTS 512u
#define CLIENT_MAX_BATCH 65536u
#define CLIENT_TARGET_MAX 127u
/* Retry backoff for a failed server: doubles from the first to the last. */
#define CLIENT_BACKOFF_FIRST_MS 50u
#define CLIENT_BACKOFF_MAX_MS 2000u
/* Describe calls give up after this long (or unavailable_timeout_ms if shorter). */
#define CLIENT_DESCRIBE_DEADLINE_MS 5000u
/* Receiver threads: one polls gRPC while others copy pixels; more than one
 * per server buys little (a stream's messages arrive one at a time). */
#define CLIENT_MIN_RECEIVERS 2u
#define CLIENT_MAX_RECEIVERS 4u
/* Receiver loop period for timers (deadlines, retries, DNS results). */
#define CLIENT_TICK_MS 10u
/* Balancing and hedging (sched.c): a server whose expected time per batch is beyond
 * CLIENT_HEDGE_FACTOR x the median of the servers up is a straggler, and a batch it has owed
 * for longer than that (and CLIENT_HEDGE_FLOOR_MS) is asked of a second server; a server that
 * balancing leaves idle for CLIENT_PROBE_MS while batches wait gets a copy of one in flight. */
#define CLIENT_HEDGE_FACTOR 4u
#define CLIENT_HEDGE_FLOOR_MS 20u
/* With owner routing (sched_route.c) the same test is more tolerant: work moved off an owner is
 * decoded from the JPEG by a server that does not cache it, which costs several times what the
 * owner's cache hit does, and under load a server misses 4 x the median for a moment often. */
#define CLIENT_ROUTE_HEDGE_FACTOR 8u
#define CLIENT_ROUTE_HEDGE_FLOOR_MS 500u
#define CLIENT_PROBE_MS 100u
/* Owner routing (sched_route.c): most pieces one batch is split into; a piece that would need
 * more goes whole to its first sample's server, not admitted there. */
#define CLIENT_MAX_PIECES 64u

typedef struct feed_loader loader;
typedef struct server server;

/* What the scheduler asks of the transport, so that sched.c itself does no I/O: conn.c
 * provides the gRPC one (conn_transport), the scheduler's tests a scripted one. Called
 * with mu held. */
typedef struct sched_transport {
    /* Queue request `id` for batch (epoch, indices[n]) on s's live stream, with
     * BatchRequest.ownership (a FEED__V1__CACHE_OWNERSHIP__ value; 0: not routed) and
     * BatchRequest.encoded; false if refused. */
    bool (*send_request)(loader *l, server *s, uint64_t id, uint32_t epoch, const uint64_t *indices,
                         uint32_t n, uint32_t ownership, bool encoded);
    /* s failed: cancel its calls (their remaining tags free them) and drop its channel. */
    void (*drop_server)(loader *l, server *s);
    /* s is down and due for a retry: start Describe (then a stream) on a fresh channel, moving
     * s to SRV_DESCRIBE; false if that cannot start (the scheduler then fails s again). */
    bool (*connect)(loader *l, server *s);
} sched_transport;

#define LOG_QUEUE_CAP 64u
#define LOG_MSG_CAP 512u

typedef struct log_entry {
    int level;
    char text[LOG_MSG_CAP];
} log_entry;

/* Messages waiting for the log thread (logq.c). */
typedef struct log_queue {
    pthread_mutex_t mu;
    pthread_cond_t cond;             /* [mu] a message, or stop */
    log_entry entries[LOG_QUEUE_CAP]; /* [mu] ring */
    uint32_t head, len;              /* [mu] */
    uint64_t dropped;                /* [mu] since the last delivered drop count */
    bool stop;                       /* [mu] */
    bool self_close;                 /* [mu] close() ran inside log_fn: the log thread frees */
    void (*free_loader)(loader *l);  /* set with self_close: what the log thread ends with */
    bool initialised, started;       /* open/close only */
    pthread_t thread;
} log_queue;

/* One receiver thread and its scratch, used only by that thread. */
typedef struct receiver {
    loader *l;
    pthread_t thread;
    bool started;
    feed_buf rbuf; /* a Batch's fields other than its pixels */
    wire_arena arena;
} receiver;

typedef enum slot_state {
    SLOT_FREE,     /* no batch */
    SLOT_PENDING,  /* has a batch, waiting for a server */
    SLOT_INFLIGHT, /* requested from `server` */
    SLOT_LANDING,  /* a receiver thread is writing it, mu not held */
    SLOT_READY,    /* complete, not yet handed out */
    SLOT_HANDED,   /* the caller holds it */
} slot_state;

typedef enum piece_state {
    PIECE_PENDING,  /* waiting for a server */
    PIECE_INFLIGHT, /* requested from `server` */
    PIECE_LANDING,  /* a receiver thread is writing it, mu not held */
    PIECE_DONE,     /* landed */
    PIECE_DECODE,   /* encoded: its bytes landed, waiting for a lane thread */
    PIECE_LANE,     /* encoded: a lane thread decodes it, mu not held (counts as LANDING) */
} piece_state;

typedef struct slot slot;

/* A part of a slot's batch asked of one server as one request: the samples at positions
 * sl->order[first .. first + n) of the batch, sent as sl->sent[first .. first + n). Its
 * pixels land at raw[first .. first + n) (samples of sample_bytes), put in batch order
 * once every piece has landed. Without owner routing a batch is one piece. */
typedef struct piece {
    slot *slot;
    piece_state state; /* [mu] */
    uint32_t first, n; /* [mu] */
    uint32_t ownership; /* [mu] INFLIGHT: what the live request said (BatchRequest.ownership) */
    uint64_t request_id; /* [mu] batch_id of the live request */
    server *server;      /* [mu] while INFLIGHT/LANDING */
    uint64_t sent_ns;    /* [mu] INFLIGHT: when the live request was sent */
    /* INFLIGHT: a second live request for the same piece (a hedge past a straggler, or a
     * probe), or NULL; whichever reply comes first lands, the other is a late duplicate. */
    server *hedge;     /* [mu] */
    uint64_t hedge_id; /* [mu] its batch_id */
    bool finished;     /* LANDING, its receiver's: it landed the batch's last piece */
    /* [mu] asked as BatchRequest.encoded, for the decode lane (lane/lane.c). At most one
     * piece of a slot is encoded: owner routing does not split it (encoded requests do not
     * touch a server's cache), so its bytes have the slot's `enc` to themselves. */
    bool encoded;
    /* [mu] GPU lane: its samples were checked (the others sent back); it is decoded once the
     * rest of its batch has landed, by the lane thread that lands the batch. */
    bool lane_checked;
} piece;

struct slot {
    /* Aggregate of its pieces while it carries a batch not yet landed: LANDING if one is,
     * else INFLIGHT if one is, else PENDING. */
    slot_state state;      /* [mu] */
    uint64_t batch_number; /* [mu] */
    uint32_t epoch;        /* [mu] l->epoch, or l->epoch + 1 for a prefetched batch */
    uint32_t n;            /* [mu] */
    uint64_t ready_seq;    /* [mu] arrival order, for ordered=false */
    int result;            /* 0 or FEED_EBADSAMPLE, returned by next() */
    piece *pieces;         /* [mu] max_pieces of them, num_pieces in use */
    uint32_t num_pieces, max_pieces;
    uint32_t *order;       /* [mu] piece order -> position in the batch */
    uint64_t *sent;        /* [mu] indices in piece order */
    _Atomic uint32_t landed; /* samples of pieces landed; the piece that completes it finishes */
    /* [mu] the batch is landed (its finishing piece has reported); READY once every piece has
     * reported too, so that no receiver still holds a piece of a slot handed out and reused. */
    bool complete;
    uint8_t *swap;         /* one sample, to put pieces in batch order; NULL: one piece only */
    uint32_t *from;        /* batch_size places for that */
    /* Buffers sized for batch_size samples; pinned on the GPU path. */
    uint64_t *indices;
    int64_t *labels;
    uint8_t *status;
    uint8_t *raw; /* n x h x w x 3 uint8 as received */
    void *out;    /* host path: normalised output (may be raw) */
    client_gpu_slot *gpu;
    feed_batch batch; /* what next() hands out */
    /* The decode lane (NULL/empty when it is off): the encoded piece's bytes, capped at
     * decode_lane_max_bytes, and each of its samples' offset and length there, in piece order
     * (indexed like sent); written by the piece's receiver (LANDING), read by its lane thread
     * (LANE). lane_n: samples of the batch the lane decoded, for stats and demand; lane_back:
     * samples it sent back to the servers (stats). */
    feed_buf enc;
    uint64_t *enc_off;
    uint32_t *enc_len;
    uint32_t lane_n;    /* [mu] */
    uint32_t lane_back; /* [mu] */
    /* When its decoded pieces and its encoded piece last finished, this use (0: not yet) [mu]:
     * the lane's share of a wait for it (client_lane_note_wait). */
    uint64_t dec_done_ns, lane_done_ns;
};

typedef enum call_kind { CALL_DESCRIBE, CALL_STREAM } call_kind;
typedef enum tag_kind { TAG_UNARY, TAG_START, TAG_SEND, TAG_RECV, TAG_STATUS } tag_kind;

typedef struct call_ctx call_ctx;
typedef struct call_tag {
    call_ctx *call;
    tag_kind kind;
} call_tag;

#define CALL_QUEUE_CAP (CLIENT_MAX_WINDOW + 2u)

/* One gRPC call. Freed by a receiver thread once no op is in flight. */
struct call_ctx {
    loader *l;
    server *srv; /* [mu] NULL once detached (failed, cancelled) */
    call_kind kind;
    grpc_call *call;
    int ops; /* [mu] batches in flight */
    grpc_metadata_array md_initial, md_trailing;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *send_bb; /* [mu] message being sent */
    grpc_byte_buffer *recv_bb;
    grpc_byte_buffer *queue[CALL_QUEUE_CAP]; /* [mu] bounded send queue */
    uint32_t q_head, q_len;
    bool sending;
    call_tag t_unary, t_start, t_send, t_recv, t_status;
};

/* DESCRIBE: Describe in flight. CONNECTING: stream open, no Batch back yet; it gets one batch
 * at a time and its failure is not a failover, so a server that answers Describe but refuses
 * batches (draining) neither attracts work nor counts as a failed server. UP: a Batch came
 * back on the live stream. */
typedef enum server_state { SRV_DOWN, SRV_DESCRIBE, SRV_CONNECTING, SRV_UP } server_state;

struct server {
    char target[CLIENT_TARGET_MAX + 1];
    int dns_target; /* index into cfg targets for DNS-found servers, else -1 */
    bool removed;   /* [mu] vanished from DNS */
    bool seen;      /* [mu] scratch for applying a DNS result */
    bool ever_tried;
    bool quiet;            /* [mu] Describe failure already logged for this outage */
    /* [mu] its last answer refused our credentials (UNAUTHENTICATED or PERMISSION_DENIED);
     * cleared by any other answer. Retried at CLIENT_BACKOFF_MAX_MS: a redeployed server may
     * take the token, but a refusal is not worth a fast retry. */
    bool refused;
    int32_t last_status;   /* [mu] its last failed answer's gRPC status, 0 after a Describe */
    char last_error[200];  /* [mu] and the server's text with it */
    char fingerprint[65];  /* [mu] its last Describe's dataset fingerprint, "" if none */
    bool fingerprint_differs; /* [mu] refused for it (policy_check_fingerprint) */
    server_state state;    /* [mu] */
    grpc_channel *channel; /* [mu] */
    call_ctx *describe;    /* [mu] */
    call_ctx *stream;      /* [mu] */
    uint32_t window;       /* [mu] */
    uint32_t outstanding;  /* [mu] requests sent on the live stream, not yet answered */
    uint64_t progress_ns;  /* [mu] last Batch on the live stream, or outstanding went 0 -> 1 */
    /* EWMA of the time from progress_ns to its next Batch: what it takes per batch when busy
     * (1/rate); 0 until measured since it last came up. */
    uint64_t service_ns;   /* [mu] */
    uint64_t retry_at_ns;  /* [mu] */
    uint32_t backoff_ms;   /* [mu] */
    uint64_t batches;      /* [mu] */
    uint32_t cache_side;   /* [mu] its last Describe's DatasetInfo.cache_side */
    /* [mu] Owner routing's key for it (sched_route.c): a hash of target, 0 until needed. */
    uint64_t route_key;
    uint64_t down_since_ns; /* [mu] when it last failed, 0 while it is up (or never failed) */
    /* [mu] down for unavailable_timeout_ms (sched_tick): out of the owner set until it is up
     * again, so that its share is cached by the next owners meanwhile (sched_route.c). */
    bool absent;
};

/* One "dns:///host:port" target and its latest resolution. */
typedef struct dns_target {
    int cfg_index;
    char host[CLIENT_TARGET_MAX + 1];
    char port[16];
    char (*addrs)[CLIENT_TARGET_MAX + 1]; /* [mu] CLIENT_MAX_SERVERS entries */
    uint32_t num_addrs;                   /* [mu] */
    uint64_t gen;                         /* [mu] bumped on each successful resolution */
    uint64_t applied_gen;                 /* [mu] */
} dns_target;

struct feed_loader {
    feed_loader_config cfg; /* immutable; strings below are our copies */
    char *dataset;
    char *augment; /* cfg.augment copied; NULL: none */
    char job[FEED_NAME_MAX + 1];   /* cfg.job, or the derived name (job.h); cfg.job points here */
    char share[FEED_NAME_MAX + 1]; /* cfg.share copied ("": none); cfg.share points here */
    uint64_t aug_seed;             /* cfg.aug_seed if aug_seed_set, else cfg.seed */
    char **targets;
    /* The transport's (net/), from conn_start to conn_stop, then read-only: what every channel and call
     * carries (cfg's token and TLS files are read there and not kept). */
    grpc_channel_credentials *creds;
    grpc_metadata auth_md; /* "authorization: Bearer TOKEN" */
    size_t auth_md_count;  /* 0: no token */

    pthread_mutex_t mu;
    pthread_cond_t cond; /* [mu] any slot/server change */
    bool stop;           /* [mu] */
    /* The dispatch thread (io.c): it runs sched_dispatch whenever dispatch_due is set. */
    pthread_cond_t dispatch_cond; /* [mu] dispatch_due or stop */
    bool dispatch_due;            /* [mu] */
    pthread_t dispatch_thread;
    bool dispatch_started;

    grpc_completion_queue *cq;
    receiver receivers[CLIENT_MAX_RECEIVERS];
    uint32_t num_receivers;
    uint64_t last_tick_ns; /* [mu] */
    int live_calls;        /* [mu] call_ctx not yet freed */

    server servers[CLIENT_MAX_SERVERS]; /* [mu] */
    uint32_t num_servers;               /* [mu] */

    dns_target *dns; /* cfg order among DNS targets */
    uint32_t num_dns;
    pthread_t dns_thread;
    bool dns_started;
    pthread_mutex_t dns_mu; /* guards dns_stop for the resolver's timed wait */
    pthread_cond_t dns_cond;
    bool dns_stop;

    /* Dataset, learned from Describe. */
    uint64_t num_samples;   /* [mu] 0 until known */
    uint32_t num_classes;   /* [mu] */
    /* [mu] the server that set stats.dataset_fingerprint, for the refusal's message */
    char fingerprint_from[CLIENT_TARGET_MAX + 1];
    bool notfound_seen;     /* [mu] */
    uint32_t describe_done; /* [mu] Describe calls finished, any outcome */

    /* The epoch. */
    /* plan, epoch, ahead and chain change only in open, set_epoch and resume, on the training
     * thread, which may therefore read them without mu. */
    client_plan plan;      /* [mu] */
    uint32_t epoch;        /* [mu] */
    uint64_t next_assign;  /* [mu] next batch number to put in a slot */
    client_plan ahead;     /* [mu] plan of epoch + 1, prefetched once plan is all assigned */
    /* [mu] The worlds this epoch ran under before this one, when feed_loader_resume resumed it
     * at another world size (plan is then the rest of the epoch); NULL for a normal plan. */
    struct resume_chain *chain;
    uint64_t ahead_assign; /* [mu] next batch number of ahead to put in a slot */
    uint64_t next_deliver; /* [mu] ordered: next batch number next() returns */
    uint64_t delivered;    /* [mu] this epoch */
    uint64_t to_deliver;   /* [mu] batches - start_batch */
    uint64_t request_seq;  /* [mu] last batch_id used */
    uint64_t ready_seq;    /* [mu] */
    int fatal;             /* [mu] error next() must report */
    /* [mu] Owner routing (sched_route.c): on once, for good, when cfg.owner_routing is ON, or
     * AUTO and a server described the dataset with cache_side > 0. */
    bool routing;

    slot slots[CLIENT_MAX_SLOTS]; /* [mu] */
    uint32_t num_slots;           /* [mu] allocated */
    bool growing;                 /* [mu] a thread is allocating slots[num_slots], mu dropped */
    bool slots_capped;            /* [mu] an allocation failed: no more slots */
    uint32_t handed;              /* [mu] */
    uint64_t next_since_ns;       /* [mu] start of a next() wait that FEED_ETIMEDOUT cut; 0: none */

    uint64_t last_up_ns;     /* [mu] last time some server was up */
    uint64_t progress_ns;    /* [mu] last batch landed, or last time nothing was asked */
    feed_loader_stats stats; /* [mu] */
    client_demand demand;    /* [mu] what the training thread waited and took (demand.h) */

    size_t max_message;

    client_gpu *gpu;  /* NULL on the host path */
    /* The decode lane (lane/lane.c; docs/design/client.md "Decode lane"): NULL when off. The
     * share (share16, client_lane_share16) that set_epoch puts in force, 0 when off; and the
     * one in force for epoch (a resumed state's for a resumed epoch; changed only with the
     * epoch, on the training thread). */
    struct client_lane *lane;
    pthread_cond_t lane_cond;  /* [mu] the lane's threads wait here: a piece to decode, or stop */
    uint32_t lane_share;       /* [mu]; changes only with client_lane_decide */
    uint32_t lane_share_epoch; /* [mu] */
    /* The share adapted between epochs (decode_share_max > 0, the lane on; lane/lane.c,
     * lane/share_policy.h): the policy, the epoch it decided the share of last (UINT32_MAX:
     * none), and what has been measured since that decision: its start (the first batch
     * handed out after it), the batches handed out since, the training thread's waits in
     * next() and the part of them the lane's samples alone held up, the last
     * CLIENT_LANE_STEPS step times (us) and the sum of every step time read (ns). [mu] */
    bool lane_adapt;
#define CLIENT_LANE_STEPS 1024u
    client_share_policy lane_policy;
    uint32_t lane_decided;
    uint64_t lane_t0_ns, lane_wait_ns, lane_only_wait_ns;
    uint64_t lane_batches, lane_steps_seen, lane_step_sum_ns;
    uint32_t lane_step_us[CLIENT_LANE_STEPS];
    /* The slot and stream of the last stream_wait (device path): the step that used it ends
     * where the training thread next calls next() (client_gpu_slot_mark_end). [mu] */
    slot *step_slot;
    void *step_stream;
    bool lane_cap_logged;      /* [mu] an encoded reply passed decode_lane_max_bytes, logged */
    size_t out_bytes; /* per slot output size at batch_size samples */
    const sched_transport *transport; /* set at open, immutable */

    log_queue logq;
};

/* logq.c — queues a message for the log thread; any thread, mu held or not. */
void client_log(loader *l, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int logq_start(loader *l); /* before any other thread; 0 or FEED_ENOMEM */
void logq_stop(loader *l); /* delivers what is queued, joins the log thread; after every other */
bool logq_on_log_thread(const loader *l); /* whether the caller is l's log thread (in log_fn) */
/* close() inside log_fn: nothing more is delivered and, once log_fn returns, the log thread
 * ends by calling free_loader(l) (loader.c's last step of close: the queue knows nothing of
 * what else a loader holds). */
void logq_close_from_log_thread(loader *l, void (*free_loader)(loader *l));

/* sched.c — with mu held, except where said; `now` is feed_now_ns() as the caller read it. */
/* Whether a live server's last answer refused the loader's credentials and no other can serve
 * (each refused too, or was tried and is down): then open and next() fail with FEED_EAUTH at
 * once rather than wait for a server. */
bool sched_all_refused(const loader *l);
/* Fills slots and sends requests. With may_grow (the loader's own threads only) it may drop and
 * retake mu to allocate a slot: callers must not rely on state across it. */
void sched_dispatch(loader *l, bool may_grow, uint64_t now);
/* s failed: its batches in flight are re-issued, it is retried after its backoff. */
void sched_fail_server(loader *l, server *s, const char *why, uint64_t now);
/* The clock (every CLIENT_TICK_MS on a receiver): batch deadlines, retries of servers that are
 * down (transport connect), the availability clock that next() reads, servers in stats. */
void sched_tick(loader *l, uint64_t now);
/* A Batch arrived on s's live stream, as reader r (wire.h) that has read nothing yet. Reads up
 * to its batch_id; returns the piece of a batch it answers, now PIECE_LANDING, or NULL when it
 * is dropped (no live request: a late duplicate) or was malformed (s failed). */
piece *sched_batch_arrived(loader *l, server *s, wire_batch_reader *r, uint64_t now);
/* mu NOT held (the piece is LANDING, nobody else touches it or its samples): reads the rest of
 * r into its slot, checks it, and if it is the batch's last piece lands the batch (policy,
 * normalise or GPU copy). 0, or FEED_EPROTO / FEED_ECORRUPT with why[why_cap] saying what was
 * wrong, or FEED_ECUDA. arena: the caller's scratch. */
int sched_land(loader *l, piece *pc, wire_batch_reader *r, wire_arena *arena, char *why,
               size_t why_cap);
/* sched_land's result rc, mu retaken: the piece is landed (its slot READY if it was the
 * last), or re-issued; a protocol error fails s unless its live stream is no longer `from`
 * (failed meanwhile). */
void sched_batch_landed(loader *l, server *s, const call_ctx *from, piece *pc, int rc,
                        const char *why, uint64_t now);
/* The decode lane's side of the scheduler (sched_land.c). A lane thread takes an encoded
 * piece whose bytes have landed (mu held; NULL if none; the piece is then PIECE_LANE; a GPU
 * lane's checked piece only once the rest of its batch has landed), decodes its first
 * `accepted` samples (piece order) into the slot unlocked, the others being left for the
 * servers, and then, still unlocked, lands them (sched_lane_land: the batch too if they
 * complete it, the GPU lane's decode after the copy; 0, FEED_ECUDA); then reports with mu
 * retaken (sched_lane_done): those samples are done (or, hold, wait as a checked piece), the
 * rest go back to the servers as a decoded piece of their own. */
piece *sched_lane_take(loader *l);
int sched_lane_land(loader *l, piece *pc, uint32_t accepted);
void sched_lane_done(loader *l, piece *pc, uint32_t accepted, bool hold, int rc, uint64_t now);
/* The share16 in force for a batch of `epoch` (the current epoch's, else the next one's). */
uint32_t sched_lane_share(const loader *l, uint32_t epoch);
/* Whether a piece in flight to s or being landed from it may still use s. */
bool sched_server_in_use(const loader *l, const server *s);
/* s's entry is reused for another server: pieces done or handed out forget it. */
void sched_forget_server(loader *l, const server *s);
/* s described the dataset with cache_side: owner routing turns on if the config allows. */
void sched_note_cache_side(loader *l, server *s, uint32_t cache_side);
/* A server's window (requests outstanding) under owner routing: a piece is about 1/N of a
 * batch over N servers, so window x N pieces keep as many samples in flight as `window`
 * batches do unrouted; at most max_window (the server's; 0: none) and CLIENT_MAX_WINDOW, at
 * least window. */
uint32_t sched_route_window(const loader *l, uint32_t window, uint32_t max_window);
/* next() at `now`, for a call that began at `since`: 0 with *out the batch's slot, now HANDED
 * and counted in stats (the caller then asks for a dispatch: conn_dispatch_soon) (its result, 0 or FEED_EBADSAMPLE, in (*out)->result); FEED_ESTATE
 * (the caller holds prefetch batches already), FEED_EEOF, the fatal error, FEED_EAUTH (every
 * server refuses the credentials: sched_all_refused), FEED_EUNAVAILABLE
 * (no server up for unavailable_timeout_ms, or nothing landed for the longer of that and
 * batch_deadline_ms); or SCHED_WAIT: nothing yet, ask again on a change or after *wait_ns. */
#define SCHED_WAIT 1
int sched_next(loader *l, uint64_t since, uint64_t now, slot **out, uint64_t *wait_ns);
/* release() of sl, a HANDED slot whose device copy the caller has released: it is free (the
 * caller then asks for a dispatch). */
void sched_release(loader *l, slot *sl);
void sched_free_slots(loader *l);
/* The worlds an epoch ran under before a resume (state.c); segs[i].consumed point into counts,
 * which the chain owns. */
typedef struct resume_chain {
    uint32_t num_segs;
    client_resume_segment segs[FEED_STATE_MAX_SEGMENTS];
    uint64_t *counts;
} resume_chain;
void resume_chain_free(resume_chain *c);
/* state.c: makes epoch current from start_batch with these plans (taken over, as
 * sched_reset_epoch takes them) and chain (taken over; NULL for a normal plan), with the decode
 * lane's share lane_share (share16) in force for it: set_epoch and feed_loader_resume.
 * Training thread, mu not held. */
void loader_install_epoch(loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                          client_plan *plan, client_plan *ahead, resume_chain *chain,
                          uint32_t lane_share);

/* Whether set_epoch(epoch, start_batch) continues into the prefetched epoch
 * (epoch + 1 of the current one, from batch 0) instead of dropping everything.
 * Training thread, mu held or not. */
bool sched_keeps_ahead(const loader *l, uint32_t epoch, uint64_t start_batch);
/* Whether that set_epoch drops sl's batch (sl not handed out). */
bool sched_drops_slot(const slot *sl, uint32_t epoch, bool keep);
/* The plans that set_epoch needs: *plan for epoch (left empty if keep: the
 * prefetched plan becomes current) and *ahead for epoch + 1 (empty for the
 * last epoch). Reads only what open fixed, so it may run without mu, on the
 * training thread. 0, FEED_EINVAL (start_batch past the end), FEED_ENOMEM. */
int sched_build_plans(const loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                      client_plan *plan, client_plan *ahead);
/* Switches to them, taking them over. mu held; no slot it drops is LANDING. */
void sched_reset_epoch(loader *l, uint32_t epoch, uint64_t start_batch, bool keep,
                       client_plan *plan, client_plan *ahead);

/* lane/lane.c: the decode lane's threads and decoders. */
#define CLIENT_LANE_MAX_THREADS 16u
#define CLIENT_LANE_DEFAULT_THREADS 2u
/* decode_lane_max_bytes: its default and bounds. */
#define CLIENT_LANE_DEFAULT_BYTES ((uint64_t)64 << 20)
#define CLIENT_LANE_MIN_BYTES 4096u
#define CLIENT_LANE_MAX_BYTES ((uint64_t)1 << 30)
typedef struct client_lane client_lane;
/* Decides the lane from the config (logging what and why) and sets l->lane (NULL: off). 0;
 * FEED_EINVAL or FEED_ECUDA (GPU asked for and not to be had; the log says why), FEED_ENOMEM.
 * After client_gpu_open, before conn_start. */
int client_lane_open(loader *l);
int client_lane_start(loader *l);       /* its threads; 0 or FEED_ENOMEM */
void client_lane_stop(loader *l);       /* joins them; mu not held */
void client_lane_free(client_lane *ln); /* accepts NULL */
/* An encoded piece is PIECE_DECODE (or a GPU lane's checked piece may now be the last of its
 * batch): a lane thread takes it. mu held. */
static inline void client_lane_wake(loader *l)
{
    if (l->lane)
        pthread_cond_signal(&l->lane_cond);
}
/* lane/adapt.c: the adapting share (l->lane_adapt; docs/design/client.md "The lane's share"),
 * mu held: next() handed out sl after waiting since `since` (0: no wait); a step's own GPU
 * time; and the decision of epoch `next`'s share (once per epoch: at the first prefetch of
 * it, or at set_epoch if none came first), logged with what it rests on. */
void client_lane_note_wait(loader *l, const slot *sl, uint64_t since, uint64_t now);
void client_lane_note_step(loader *l, uint64_t ns);
void client_lane_decide(loader *l, uint32_t next);

/* conn.c */
extern const sched_transport conn_transport;
/* A finished op of one of the loader's calls, on receiver rx, mu held: its handler runs (mu
 * dropped while a batch lands) and the call is freed after its last op. The op counts as in
 * flight until then: another receiver must not free the call meanwhile. */
void conn_complete(receiver *rx, call_tag *t, bool ok);
/* io.c: the transport's threads */
int conn_start(loader *l); /* starts the receiver threads and the dispatch thread */
void conn_stop(loader *l); /* stops them, cancels and frees every call */
/* Wakes the dispatch thread to run sched_dispatch: what the training thread calls instead of
 * sending itself. mu held. */
void conn_dispatch_soon(loader *l);
bool conn_send(loader *l, server *s, grpc_byte_buffer *bb); /* mu held; takes bb */
/* Detach c from its server and cancel it; its remaining tags free it. mu held. */
void conn_abandon(call_ctx *c);

/* resolve.c */
int resolve_init(loader *l); /* parses dns targets, resolves once */
int resolve_start(loader *l);
void resolve_stop(loader *l);
void resolve_free(loader *l);
/* "dns:///host:port" → host, port. 0 or FEED_EINVAL. */
int resolve_parse(const char *target, char *host, size_t host_cap, char *port, size_t port_cap);

/* servers.c, mu held */
int servers_add(loader *l, const char *target, int dns_index); /* index or <0 */
/* The DNS lists resolve.c posted since the last call, applied to the table: a receiver thread
 * on its tick, and open. */
void servers_apply_dns(loader *l);

#endif
