/*
 * libfeedclient — feeds a GPU training job from feedd servers.
 *
 * The loader plans each epoch itself (permutation from the seed, split by
 * rank/world, cut into batches), asks servers for batches by explicit sample
 * indices, keeps a bounded window of outstanding batches per server, re-issues
 * a failed server's batches to the others (every sample exactly once), and
 * hands batches out in plan order (or as they arrive with ordered = false).
 * On a GPU the pixels land in pinned host slots, are copied on the loader's
 * own CUDA stream and normalised there; feed_batch.ready_event tells the
 * training stream when a batch is ready, so the loader never blocks it.
 *
 * Threads: feed_loader_next() and feed_loader_set_epoch() are called from one
 * thread (the training loop). feed_loader_release(), feed_loader_stream_wait(),
 * feed_loader_get_stats() and feed_loader_server_stats() may be called from
 * any thread. The loader runs its own threads: 2 to 4 receivers (one gRPC
 * completion queue), for dns:/// targets one resolver, and with a log_fn one
 * log thread. Memory for delivery slots (pinned host memory, cudaMalloc) is
 * allocated only on the loader's own threads, never inside next() or
 * release(); close() leaves the calling thread's current CUDA device as it
 * found it.
 * Memory: the loader owns every feed_batch and everything it points to; a
 * batch stays valid until it is released. Pass NULL pointers nowhere except
 * where said.
 * fork(): a loader must not be used in a forked child; open a new one there.
 * The library never exits, never prints, never installs signal handlers; it
 * logs through cfg.log_fn, which is called only from the loader's log thread,
 * with no lock of the loader held (so a callback may take a lock of its own,
 * such as Python's GIL, even while another thread is inside next()), one
 * message at a time, in order. Messages wait in a bounded queue (64): when
 * the callback falls behind, newer ones are dropped and their count logged.
 * close() delivers the queued messages before it returns.
 *
 * Plan: the epoch permutation is Fisher-Yates over the RNG stream (seed,
 * epoch, FEED_RNG_PERMUTATION_STREAM); for world > 1 it is padded by wrapping
 * around to a multiple of world, as PyTorch's DistributedSampler does with
 * drop_last=False (every rank gets ceil(n/world) samples, so ranks stay in
 * step; the first few samples appear twice in an epoch), and rank r takes
 * positions r, r+world, ... drop_last then drops this rank's short last batch.
 * Memory: delivery slots hold a batch from request to release; at most
 * prefetch + window_per_server x (servers up, at least 1) are in use, capped at
 * max_slots (default and most 512). Slots are allocated as they are needed;
 * if an allocation fails once prefetch + 1 exist, the loader logs it and goes
 * on with those (it fails only if it cannot get prefetch + 1). With
 * S = h x w x 3 bytes per sample and B = batch_size, one slot takes
 *   host path: B x S (+ B x S x dtype size unless uint8 NHWC) + 17 x B bytes;
 *   GPU path:  pinned host B x S + 8 x B, device B x S x (1 + dtype size) + 8 x B
 * (fp32, B 256, 224 x 224: 36.75 MiB pinned + 183.75 MiB on the device).
 *
 * Every function returns 0 or a negative FEED_E code (feed/errors.h) unless
 * said otherwise; the codes each can return are listed with it.
 */
#ifndef FEED_CLIENT_H
#define FEED_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/errors.h"
#include "feed/export.h"
#include "feed/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; feed_client_version() gives the library's. */
#define FEED_CLIENT_VERSION_MAJOR 0
#define FEED_CLIENT_VERSION_MINOR 6
#define FEED_CLIENT_VERSION_PATCH 0
#define FEED_CLIENT_VERSION_STRING "0.6.0"
/* MAJOR << 16 | MINOR << 8 | PATCH, for comparisons. */
#define FEED_CLIENT_VERSION_NUM                                                                    \
    ((FEED_CLIENT_VERSION_MAJOR << 16) | (FEED_CLIENT_VERSION_MINOR << 8) |                        \
     FEED_CLIENT_VERSION_PATCH)

#define FEED_DEVICE_HOST (-1)

typedef struct feed_loader feed_loader;

typedef enum feed_dtype {
    FEED_DTYPE_UINT8 = 0, /* raw pixels, no normalisation, layout still applied */
    FEED_DTYPE_FP16 = 1,
    FEED_DTYPE_BF16 = 2,
    FEED_DTYPE_FP32 = 3,
} feed_dtype;

typedef enum feed_layout {
    FEED_LAYOUT_NCHW = 0,
    FEED_LAYOUT_NHWC = 1,
} feed_layout;

typedef enum feed_bad_sample_policy {
    /* A failed sample is replaced by a good sample of the same batch (pixels
     * and label; the next good position after it, cyclically), counted in
     * stats and in feed_batch.substituted. indices and status keep what was
     * asked and what the server said. A batch with no good sample at all is
     * handed out with FEED_EBADSAMPLE as under FEED_BAD_SAMPLE_FAIL. */
    FEED_BAD_SAMPLE_SUBSTITUTE = 0,
    /* feed_loader_next() returns FEED_EBADSAMPLE; the batch is still handed
     * out so the caller can read feed_batch.status. */
    FEED_BAD_SAMPLE_FAIL = 1,
} feed_bad_sample_policy;

typedef void (*feed_client_log_fn)(void *user, int level, const char *message);

/* Owner routing (docs/design/client.md, owner routing): each sample of the dataset has one owning server,
 * by rendezvous hashing of (sample index, server target) over the servers the loader knows;
 * a batch goes out as one piece per owner, so that each server's decoded-sample cache holds
 * only its share and the fleet's caches add up. A down or straggling owner's samples go to
 * the next server in their rendezvous order, which serves them without caching them. */
typedef enum feed_owner_routing {
    FEED_OWNER_ROUTING_AUTO = 0, /* on once a server describes the dataset with cache_side > 0 */
    FEED_OWNER_ROUTING_OFF = 1,  /* every batch goes whole to the server balancing picks */
    FEED_OWNER_ROUTING_ON = 2,   /* on, with or without a cache */
} feed_owner_routing;

/* The decode lane (docs/design/client.md "Decode lane"): a share of each epoch's samples, chosen
 * by a pure function of (seed, epoch, sample), is fetched from the servers as JPEG bytes (which
 * costs a server a read, not a decode) and decoded by the loader itself. */
typedef enum feed_decode_lane {
    FEED_DECODE_LANE_OFF = 0, /* every sample decoded by the servers */
    /* On the loader's own CPU threads with the servers' engine: the same pixels and labels as
     * the servers', bit for bit. */
    FEED_DECODE_LANE_CPU = 1,
    /* On the GPU's JPEG engines (nvJPEG's hardware backend; device path only): pixels within
     * the tolerance docs/design/client.md states. open fails when they cannot be had. */
    FEED_DECODE_LANE_GPU = 2,
    FEED_DECODE_LANE_AUTO = 3, /* GPU when the JPEG engines can be had, else off */
} feed_decode_lane;

typedef struct feed_loader_config {
    /* sizeof(feed_loader_config) as the caller was compiled; feed_loader_config_init sets it.
     * A library newer than the caller's header reads only the fields this size covers and
     * defaults the rest; one older than it refuses a larger size (FEED_EINVAL). Fields are only
     * ever added at the end. */
    size_t struct_size;
    /* Servers: "host:port", "ipv4:127.0.0.1:5000", or "dns:///name:port"; a
     * DNS name is re-resolved every resolve_interval_ms and every address it
     * yields is used as a server. At most 256 targets/addresses. */
    const char *const *targets;
    size_t num_targets;
    const char *dataset;
    feed_transform transform;
    uint32_t batch_size;
    uint64_t seed;
    uint32_t epoch;
    uint64_t start_batch; /* resume: first batch of the epoch to deliver */
    uint32_t rank, world; /* data-parallel split, like DistributedSampler */
    bool drop_last;       /* drop the last short batch of this rank */
    bool ordered;         /* deliver in plan order (default true) */
    uint32_t window_per_server; /* outstanding batches per server (default 4, max 64) */
    uint32_t prefetch;          /* delivery slots ready ahead of next() (default 4, max 64) */
    /* Bound on delivery slots, i.e. on loader memory (see Memory above): 0 = prefetch +
     * window_per_server x servers up, at most 512; else at least prefetch + 1, at most 512. */
    uint32_t max_slots;
    feed_dtype dtype;
    feed_layout layout;
    float mean[3], std[3]; /* out = (pixel / 255 - mean) / std for float dtypes */
    int device;            /* CUDA device index or FEED_DEVICE_HOST */
    feed_bad_sample_policy bad_sample_policy;
    /* A server that owes batches and has sent none back for this long is counted stalled and
     * its batches re-issued (default 60000). Measured from its last reply (or from when it was
     * first given work), not from each request: a busy server with a deep window is fine as
     * long as batches keep coming. The same limit bounds an unanswered keepalive ping (one a
     * second), which finds a stopped or cut-off server that owes nothing; a server that is
     * only slow (a loaded host answering late) is never failed sooner. It is long because a healthy server shared by many clients can leave one
     * of them without a batch for tens of seconds, and failing it then sends that client to
     * the back of the server's queue. Make it longer than a server takes to make one batch. */
    uint32_t batch_deadline_ms;
    uint32_t unavailable_timeout_ms; /* no server for this long → next() fails (default 30000) */
    uint32_t resolve_interval_ms;    /* DNS re-resolution period (default 5000) */
    feed_client_log_fn log_fn;       /* NULL: no logging */
    void *log_user;
    /* 0.4: trust. The strings and files are read by feed_loader_open and need not outlive it. */
    /* Bearer token sent as "authorization: Bearer TOKEN" metadata on every call (feedd
     * --auth-token-file). NULL: the FEED_TOKEN environment variable if set, else none; "":
     * none. Visible ASCII, at most 4096 bytes. Without TLS it crosses the network in the
     * clear. */
    const char *token;
    /* PEM CA bundle the servers' certificates must chain to: with it every channel is TLS
     * (feedd --tls-cert); NULL: plaintext. A server's certificate must name the host or IP
     * address of its target. */
    const char *tls_ca_file;
    /* Client certificate chain and its key (PEM) for mutual TLS (feedd --tls-client-ca):
     * both or neither, and only with tls_ca_file. */
    const char *tls_cert_file;
    const char *tls_key_file;
    /* Which server each sample goes to (feed_owner_routing; default AUTO). */
    feed_owner_routing owner_routing;
    /* 0.5: per-sample augmentations after the crop, made by the servers: TransformSpec.augment
     * in proto/feed.proto (torchvision's names, e.g. "TrivialAugmentWide(); RandomErasing(p=0.1)"
     * or "torchvision-v2-recipe"). NULL or "": none. At most 1024 bytes; copied by
     * feed_loader_open. A description the servers refuse fails next() with their message. */
    const char *augment;
    /* The window over which the loader measures its own demand, milliseconds (0: 10000;
     * else 100..3600000): the fraction of wall time the calling thread waited in
     * feed_loader_next() and the samples per second it took, sent to the servers with every
     * request once a window has closed (docs/guide/sizing.md). */
    uint32_t demand_window_ms;
    /* The job this loader's streams belong to (proto/feed.proto SessionOpen.job; README
     * "Jobs share a server"): a server shares its workers between jobs in proportion to their
     * weights, not between streams, so a job's share does not grow with its rank count. Every
     * rank of one training run must name the same job. NULL or "": derived the same on every
     * rank: "run-" + TORCHELASTIC_RUN_ID when set and not "none"; else "dist-" + a digest of
     * MASTER_ADDR, MASTER_PORT, dataset and seed; else "proc-" + a digest of host, process id,
     * dataset and seed. At most 128 bytes of letters, digits and "_.-:/@+="; copied by
     * feed_loader_open. feed_loader_job says which name is in use. */
    const char *job;
    /* The job's weight against the other jobs on the same servers: 0 = 1, at most 100. Every
     * rank should send the same. */
    uint32_t job_weight;
    /* Decode sharing (docs/design/server.md "Shared decode"). The seed of each sample's
     * augmentation (crop box, flip, augment; sent to the servers as SessionOpen.seed) when
     * aug_seed_set; else seed keys both the epoch plan and the augmentation, as it always has. A sweep whose jobs share
     * decode keeps one seed (the same sample order) and gives each job its own aug_seed. */
    uint64_t aug_seed;
    bool aug_seed_set;
    /* The share group this loader's streams join (SessionOpen.share): the jobs that name the
     * same group for the same dataset get each source image decoded once for all of them while
     * it is in a server's share window (feedd --dataset NAME=PATH,share=SIDE). It saves decodes
     * only where the jobs ask for the same samples at about the same time: the same seed, world
     * and batch size. Pixels are the same as without it. NULL or "": none. The same characters
     * and length as job; copied by feed_loader_open. */
    const char *share;
    /* 0.6: the decode lane (feed_decode_lane; default OFF) and the share of samples it decodes,
     * in [0, 1], quantised to 1/65536. The share in force for an epoch is fixed when the epoch
     * starts and recorded in feed_loader_state, so a resume is exact. */
    feed_decode_lane decode_lane;
    double decode_share;
    /* CPU lane threads: 0 = 2, at most 16. */
    uint32_t decode_lane_threads;
    /* Most encoded bytes one batch's lane part may bring (the buffer each delivery slot holds
     * them in grows to at most this): 0 = 64 MiB; 4096 .. 1 GiB. A reply larger than this is
     * not read: its samples are asked of the servers decoded (stats.lane_rerequested). */
    uint64_t decode_lane_max_bytes;
    /* 0.7: 0 keeps decode_share for every epoch. Above 0 (at most 1) the share adapts between
     * epochs, from decode_share, never above this (docs/design/client.md "The lane's share"):
     * it grows while the step waits for the servers and the step's own GPU time (CUDA events)
     * has not grown by more than 5%, and backs off when it has; each decision is one log line.
     * The share for an epoch is decided once, before any of its batches is asked for. */
    double decode_share_max;
} feed_loader_config;

typedef struct feed_batch {
    void *data;             /* device pointer (GPU) or host pointer, n*c*h*w elements */
    size_t bytes;           /* size of data */
    const int64_t *labels_device; /* n labels on the device; NULL on the host path */
    const int64_t *labels;        /* n labels in host memory */
    const uint64_t *indices;      /* n sample indices */
    const uint8_t *status;        /* n feed_sample_status values as the server sent them */
    uint32_t n, c, h, w;
    feed_dtype dtype;
    feed_layout layout;
    uint32_t epoch;
    uint64_t batch_number;  /* position in this rank's plan for the epoch */
    uint32_t substituted;   /* samples replaced under FEED_BAD_SAMPLE_SUBSTITUTE */
    uint64_t wait_ns;       /* how long feed_loader_next() blocked for this batch */
    void *ready_event;      /* cudaEvent_t recorded when data is ready; NULL on the host path */
} feed_batch;

typedef struct feed_loader_stats {
    uint64_t batches;         /* handed out by next() */
    uint64_t samples;
    uint64_t bytes_received;  /* pixel bytes off the wire (and the decode lane's JPEG bytes) */
    uint64_t wait_ns_total;   /* summed over next() calls */
    uint64_t wait_ns_max;
    uint64_t failovers;       /* servers failed after serving a batch, or stalled (deadline) */
    uint64_t reissued;        /* batches re-issued to another server */
    uint64_t retries;         /* reconnection attempts */
    uint64_t crc_errors;      /* batches whose CRC32C did not match (re-issued) */
    /* Failed samples by status, in batches handed out by next(); [0] unused. */
    uint64_t sample_errors[FEED_SAMPLE_STATUS_COUNT];
    uint32_t servers_known;
    uint32_t servers_up;      /* those that have answered a batch on their live stream */
    /* Batches also asked of a second server while a straggler still owed them (long past
     * what the other servers take); the later reply is dropped. */
    uint64_t hedged;
    /* The dataset fingerprint the loader holds the servers to (proto/feed.proto
     * DatasetInfo.fingerprint, 64 hex digits): taken from the first server it used that stated
     * one; "" while none has. */
    char dataset_fingerprint[65];
    /* Servers refused because their fingerprint differed (or was malformed): other data under
     * the same name and count. Counted once each time a server goes from used or unchecked to
     * refused, not at every retry; their batches are never used. */
    uint64_t fingerprint_refused;
    /* The decode lane, in batches handed out by next(): samples it decoded; and samples it was
     * given but asked the servers to decode after all (a status other than OK in the encoded
     * reply, an image the GPU's engines do not take, a reply beyond decode_lane_max_bytes). */
    uint64_t lane_decoded;
    uint64_t lane_rerequested;
    /* Device path: steps whose own GPU time the loader measured (CUDA events from
     * feed_loader_stream_wait to the next next() on the caller's stream), which the demand's
     * wait and the lane's share rest on. A step stays unmeasured when its stream never passed
     * through feed_loader_stream_wait, or when the caller, running ahead of the GPU, used its
     * slot again before that step's time could be read. */
    uint64_t steps_timed;
} feed_loader_stats;

typedef struct feed_server_stats {
    char target[128];
    bool up;           /* it has answered a batch on its live stream */
    uint64_t batches;  /* completed by this server */
    uint32_t outstanding;
    /* Its last failed answer since it last described the dataset: the gRPC status (0: none)
     * and the server's own text, e.g. why it refused the token; and whether that answer
     * refused the loader's credentials (what makes next() return FEED_EAUTH). A caller built
     * against a header without these passes a smaller out_size and gets the rest. */
    int32_t last_status;
    char last_error[200];
    bool refused;
    /* The fingerprint its last Describe stated ("" before it answered, or from a feedd older
     * than DatasetInfo.fingerprint, which is used unchecked), and whether the loader refused it for
     * differing from stats.dataset_fingerprint. */
    char fingerprint[65];
    bool fingerprint_differs;
} feed_server_stats;

/*
 * Fills the first size bytes of cfg with defaults (train transform 224, batch 256, ordered,
 * window 4, prefetch 4, fp32 NCHW with ImageNet mean/std, device 0, substitute) and sets
 * struct_size to size. size is sizeof(feed_loader_config) as the caller was compiled: nothing
 * past it is written, so a caller built against an older, smaller struct keeps working with a
 * newer library. 0, or FEED_EINVAL with nothing written (cfg NULL, size below the first layout
 * that carried struct_size (0.3) or above this library's).
 */
FEED_EXPORT int feed_loader_config_init(feed_loader_config *cfg, size_t size);
/*
 * feed_loader_config_init(cfg, sizeof *cfg). The function of the same name is for programs
 * built against a header of 0.5 or older, which passed no size: it fills the 0.4/0.5 layout
 * (up to and including tls_key_file) and sets struct_size to that; feed_loader_open defaults
 * the fields after it.
 */
FEED_EXPORT void(feed_loader_config_default)(feed_loader_config *cfg);
#define feed_loader_config_default(cfg) ((void)feed_loader_config_init((cfg), sizeof *(cfg)))

/* Validates cfg, connects (Describe) and starts the epoch. FEED_EINVAL for a
 * bad config (a bad token or an unreadable TLS file too), FEED_ENOTFOUND for an
 * unknown dataset, FEED_EAUTH at once when a server refuses the token
 * (UNAUTHENTICATED or PERMISSION_DENIED; the log has the server's message)
 * and no other can serve (each refuses too, or was tried and is down),
 * FEED_EUNAVAILABLE if no server answers within unavailable_timeout_ms (a
 * server that fails the TLS handshake does not answer; the log says why; one
 * that refuses the token among others is failed and retried every 2 s, the
 * others serve), FEED_ECUDA, FEED_ENOMEM. */
FEED_EXPORT int feed_loader_open(const feed_loader_config *cfg, feed_loader **out);
/* Stops receivers, frees everything. Accepts NULL. Outstanding batches become invalid.
 * May be called from the loader's own log_fn: it returns once every other
 * thread of the loader has stopped, log_fn is not called again for it, and
 * the log thread frees what is left once that log_fn call returns. */
FEED_EXPORT void feed_loader_close(feed_loader *l);

/* Next batch of the epoch. FEED_EEOF after the last one (call set_epoch to go
 * on), FEED_EINVAL (NULL argument), FEED_EUNAVAILABLE when no server answered for
 * unavailable_timeout_ms (or servers answered but no batch arrived for that long, or for
 * batch_deadline_ms if longer, while batches were wanted),
 * FEED_EAUTH at once while a server's last answer refused the token and no
 * other can serve (not sticky: a later call may succeed once a server takes it;
 * feed_loader_server_stats gives each server's reason: refused, last_error),
 * FEED_EBADSAMPLE for bad samples under the fail policy, or under substitute for a
 * batch with no good sample to substitute from (*out is set: release it too),
 * FEED_ESTATE if prefetch batches are held unreleased, FEED_ENOMEM or
 * FEED_ECUDA for a failure the loader cannot recover from. On the GPU path the
 * data may still be in flight: make the training stream wait on
 * b->ready_event (cudaStreamWaitEvent) before using data or labels_device. */
FEED_EXPORT int feed_loader_next(feed_loader *l, feed_batch **out);
/* As feed_loader_next(), but returns FEED_ETIMEDOUT when no batch is ready within timeout_ms
 * (0: do not wait); *out is then NULL and nothing changes: the next call goes on with the same
 * wait (the unavailable and deadline clocks run on, and the batch's wait_ns counts from the
 * first call). For callers that must act between waits: Python checks for Ctrl-C. Since 0.5. */
FEED_EXPORT int feed_loader_next_timed(feed_loader *l, feed_batch **out, uint32_t timeout_ms);
/* The caller is done with b once `stream` has passed this point. On the GPU
 * path `stream` is a cudaStream_t, and NULL means the legacy default stream
 * (handle 0, PyTorch's default stream), not "now": pass the stream the step
 * ran on. On the host path NULL (or anything) means now. 0, FEED_EINVAL (b is
 * not a batch of l that the caller holds), FEED_ECUDA. Any thread. */
FEED_EXPORT int feed_loader_release(feed_loader *l, feed_batch *b, void *stream);
/* Start another epoch (or resume one) at start_batch. Drops batches not yet
 * handed out; batches the caller holds stay valid until released. Once every
 * batch of an epoch is requested, spare slots and window fetch the next epoch
 * from batch 0 (next() still ends the epoch with FEED_EEOF): set_epoch(epoch
 * + 1, 0) keeps that work, so the next epoch starts without a stall; any
 * other epoch or start_batch drops it. 0, FEED_EINVAL (start_batch past the
 * end of the epoch), FEED_ENOMEM. */
FEED_EXPORT int feed_loader_set_epoch(feed_loader *l, uint32_t epoch, uint64_t start_batch);
/* Batches this rank gets in the current epoch (in an epoch resumed by feed_loader_resume: of the
 * rest of it), and samples in the dataset. */
FEED_EXPORT uint64_t feed_loader_batches_per_epoch(const feed_loader *l);
FEED_EXPORT uint64_t feed_loader_dataset_size(const feed_loader *l);
/* The job name the loader sends (feed_loader_config.job, or the derived one); owned by l. */
FEED_EXPORT const char *feed_loader_job(const feed_loader *l);

/* Makes `stream` wait, on the device, until b's data and labels_device are
 * ready (cudaStreamWaitEvent on b->ready_event); the host does not block. On
 * the GPU path `stream` is a cudaStream_t and NULL means the legacy default
 * stream; on the host path it does nothing. 0, FEED_EINVAL (b is not a batch
 * of l that the caller holds), FEED_ECUDA. Any thread. */
FEED_EXPORT int feed_loader_stream_wait(feed_loader *l, const feed_batch *b, void *stream);

/* Named _get_ because feed_loader_stats is the struct's typedef. out_size is sizeof(*out) as
 * the caller was compiled: the library fills that much (fields are only ever added at the end),
 * so an older caller keeps working with a newer library. 0 or FEED_EINVAL (out_size smaller
 * than the first version of the struct or larger than this library's). */
FEED_EXPORT int feed_loader_get_stats(feed_loader *l, feed_loader_stats *out, size_t out_size);
/* Per-server stats; i < stats.servers_known; out_size as above. 0 or FEED_EINVAL (no server
 * i, or out_size out of range). */
FEED_EXPORT int feed_loader_server_stats(feed_loader *l, uint32_t i, feed_server_stats *out,
                                         size_t out_size);

/*
 * Elastic resume (docs/design/client.md, resume at another world size). A state is a byte string
 * the library writes and reads (little-endian, versioned, at most FEED_STATE_MAX_BYTES): the
 * epoch's plan identity (dataset name and size, seed, augmentation seed, transform and augment,
 * batch size, drop_last), the epoch, and where the epoch stands. "Consumed" means handed to the
 * caller by next(): a batch handed out counts as done whether or not it was released or its step
 * finished. Exact with ordered = true (the default), where batches are handed out in plan
 * order. feed_loader_resume runs on the training thread, like set_epoch; the others on any.
 *
 * A rank state (feed_loader_state) records one rank: its world and rank, how many samples of
 * its plan for the epoch it consumed, and, in an epoch that itself was resumed at another world
 * size, the chain of worlds the epoch ran under before. A combined state (feed_state_combine)
 * joins the rank states of every rank of one world; a loader of any world size resumes it
 * (feed_loader_resume): the samples of the epoch that no rank consumed, in permutation order,
 * are padded by wrapping around to a multiple of the new world (as DistributedSampler pads; so
 * the first (world - left % world) % world of them are handed out twice), and rank r takes
 * positions r, r+world, ..., cut into batches. A sample counts as consumed once any copy of it
 * (a padding copy too) was handed out. Each sample's pixels are those it has in any run:
 * augmentation is keyed by (aug seed, epoch, sample index). The epoch after a resumed one follows
 * the normal plan for the new world. A resumed loader's rank states combine again, so an epoch
 * may change world size several times (at most FEED_STATE_MAX_SEGMENTS).
 */
#define FEED_STATE_MAX_BYTES ((size_t)64 << 20)
#define FEED_STATE_MAX_SEGMENTS 64
/* Most ranks over all the worlds one state records. */
#define FEED_STATE_MAX_RANKS (1u << 20)

/* This rank's state at (epoch, batch): `batches` of the epoch handed out to the caller. An
 * epoch other than the loader's current one is taken from its start (batches must be 0). Writes
 * at most cap bytes to buf and the length to *len; with too small a cap (0 and NULL buf too)
 * FEED_ETOOBIG and *len says how much is needed. 0, FEED_EINVAL (batches past the epoch's end),
 * FEED_ETOOBIG. */
FEED_EXPORT int feed_loader_state(feed_loader *l, uint32_t epoch, uint64_t batches, void *buf,
                                  size_t cap, size_t *len);
/* Joins the rank states of one world (count of them, one per rank, any order) into a combined
 * state, written to buf as above. 0, FEED_EINVAL (why, NUL-terminated when why_cap > 0, says
 * what: a missing or repeated rank, states of other epochs, datasets, seeds or transforms, a
 * malformed state), FEED_ETOOBIG, FEED_ENOMEM. */
FEED_EXPORT int feed_state_combine(const void *const *states, const size_t *lens, size_t count,
                                   void *buf, size_t cap, size_t *len, char *why,
                                   size_t why_cap);
/* Continues from state: a combined state at this loader's world and rank (any world), or a
 * rank state of this loader's world and rank (the same-world resume). Like set_epoch, drops the
 * batches not handed out. FEED_EINVAL when the state does not fit this loader: why names what
 * differs (dataset, dataset size, seed, aug_seed, transform, batch size or drop_last for a rank
 * state, world or rank for a rank state) and the log says it too; FEED_ENOMEM. */
FEED_EXPORT int feed_loader_resume(feed_loader *l, const void *state, size_t len, char *why,
                                   size_t why_cap);
/* The epoch a state (rank or combined) is of. 0 or FEED_EINVAL (not a well-formed state). */
FEED_EXPORT int feed_state_epoch(const void *state, size_t len, uint32_t *epoch);
/* The sample indices rank `rank` of `world` gets for the rest of the state's epoch, in order
 * (before the batch cut), without a loader: *count of them, at most cap written to samples
 * (FEED_ETOOBIG with the count needed). 0, FEED_EINVAL (why says what), FEED_ETOOBIG,
 * FEED_ENOMEM. */
FEED_EXPORT int feed_resume_plan(const void *state, size_t len, uint32_t rank, uint32_t world,
                                 uint64_t *samples, size_t cap, size_t *count, char *why,
                                 size_t why_cap);

/* The library's version: "MAJOR.MINOR.PATCH", never NULL; and as FEED_CLIENT_VERSION_NUM. */
FEED_EXPORT const char *feed_client_version(void);
FEED_EXPORT uint32_t feed_client_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
