/*
 * feed.v1 requests as feedd reads them, without gRPC: a BatchRequest is
 * unpacked into a completion-queue thread's arena and checked against the
 * stream's session (opening it when the request carries SessionOpen); a
 * DescribeRequest is unpacked and its dataset looked up. Only what can be
 * judged from the bytes, the session and the config is here; the checks that
 * need the stream's live state (window, memory) stay in service.c. Pure: no
 * locks, no I/O; the caller owns every argument. Fuzzed by fuzz/fuzz_request.c.
 */
#ifndef FEED_SERVER_REQUEST_H
#define FEED_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/status.h>

#include "augment.h"
#include "config.h"
#include "feed.pb-c.h"
#include "fleet.h"
#include "feed/dataset.h"
#include "feed/names.h"
#include "feed/transform.h"
#include "share.h"

#define FEEDD_CLIENT_NAME_MAX 128

typedef struct feedd_served_dataset {
    const char *name;
    const feed_dataset *ds;
} feedd_served_dataset;

/* What a request is judged against: the config and the served datasets. */
typedef struct feedd_request_env {
    const feedd_config *cfg;
    const feedd_served_dataset *datasets;
    size_t n_datasets;
} feedd_request_env;

/* Bump allocator for protobuf-c: every allocation comes from base[0, cap); reset per request. */
typedef struct feedd_arena {
    ProtobufCAllocator alloc;
    uint8_t *base;
    size_t used, cap;
} feedd_arena;

/* Points a at base (cap bytes, owned by the caller). */
void feedd_arena_init(feedd_arena *a, uint8_t *base, size_t cap);

/* The session a stream's first request opens; fixed afterwards. */
typedef struct feedd_session {
    bool opened;
    uint32_t ds_id;
    feed_transform tf;
    feed_augment aug; /* TransformSpec.augment, parsed */
    uint64_t seed;
    uint32_t window;                             /* 1..max_window */
    char client_name[FEEDD_CLIENT_NAME_MAX + 1]; /* printable ASCII */
    char job[FEED_NAME_MAX + 1];                 /* "": the stream is a job of its own */
    uint32_t job_weight;                         /* 1..FEEDD_JOB_WEIGHT_MAX */
    char share[FEED_NAME_MAX + 1];          /* SessionOpen.share; "": no sharing */
} feedd_session;

/* A BatchRequest that passed the checks. */
typedef struct feedd_batch_request {
    const Feed__V1__BatchRequest *r; /* in the arena; NULL: the request only opened the session */
    bool encoded;                    /* BatchRequest.encoded: sized at acceptance (encoded.h) */
    size_t sample_bytes;             /* out_h * out_w * 3; 0 when encoded */
    uint64_t bytes;                  /* n_indices * sample_bytes; 0 when encoded */
    bool has_demand;                 /* the request carried BatchRequest.demand, checked */
    feedd_demand demand;
} feedd_batch_request;

/*
 * The job a session's demand is counted under (fleet.h): one name per
 * training job, so that its ranks' reports add up: SessionOpen.job, or,
 * from a client that names no job (each of its streams a job of its own),
 * its client_name.
 */
const char *feedd_session_job(const feedd_session *sess);

/*
 * Unpack buf into a (reset first) and check it against *sess, opening the
 * session if the request carries SessionOpen (*sess is then filled and logged
 * with peer). GRPC_STATUS_OK with *out filled, or the code the stream fails
 * with and msg saying why. *sess may be opened even when a later check fails.
 */
grpc_status_code feedd_request_batch(const feedd_request_env *env, feedd_arena *a,
                                     const uint8_t *buf, size_t len, const char *peer,
                                     feedd_session *sess, feedd_batch_request *out, char *msg,
                                     size_t cap);

/*
 * Unpack a DescribeRequest (heap; free with feed__v1__describe_request__free_unpacked)
 * and check that the dataset it names, if any, is served. GRPC_STATUS_OK with
 * *out set, or a code with msg saying why and *out NULL.
 */
grpc_status_code feedd_request_describe(const feedd_request_env *env, const uint8_t *buf,
                                        size_t len, Feed__V1__DescribeRequest **out, char *msg,
                                        size_t cap);

/*
 * Whether a string field of the protobuf message buf[0, len) holds a NUL
 * byte, which protobuf-c's C strings would silently cut at: path names the
 * field by its numbers, outermost first (all but the last name embedded
 * messages), depth entries. 1 if any occurrence does, 0 if none, -1 if the
 * bytes are not a message this walk can read (then protobuf-c refuses them too).
 */
int feedd_wire_has_nul(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth);

/* Index of the dataset called name, or -1. */
int feedd_find_dataset(const feedd_request_env *env, const char *name);

/* Copy a received message into dst, at most limit bytes; *len gets the bytes copied. 0,
 * FEED_EPROTO (unreadable) or FEED_ETOOBIG. Any thread. */
int feedd_read_bb(grpc_byte_buffer *bb, size_t limit, uint8_t *dst, size_t *len);

#endif
