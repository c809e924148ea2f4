/*
 * feedd's request parsing and checks (see request.h), and reading a
 * received message into a flat buffer. Runs on the completion-queue thread
 * that owns the call; the arena is that thread's.
 */
#include "request.h"

#include <stdio.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/names.h"

static void *arena_alloc(void *ud, size_t size)
{
    feedd_arena *a = ud;
    size_t off = (a->used + 15) & ~(size_t)15;
    if (size > a->cap || off > a->cap - size)
        return NULL;
    a->used = off + size;
    return a->base + off;
}

static void arena_free(void *ud, void *p)
{
    (void)ud;
    (void)p;
}

void feedd_arena_init(feedd_arena *a, uint8_t *base, size_t cap)
{
    a->base = base;
    a->cap = cap;
    a->used = 0;
    a->alloc = (ProtobufCAllocator){arena_alloc, arena_free, a};
}

/* The varint at *p, moving *p past it; false if it runs past end or past 64 bits. */
static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    bool done = false;
    for (unsigned shift = 0; shift < 64 && *p < end && !done; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7F) << shift;
        done = (b & 0x80) == 0;
    }
    *v = x;
    return done;
}

int feedd_wire_has_nul(const uint8_t *buf, size_t len, const uint32_t *path, size_t depth)
{
    const uint8_t *p = buf, *end = buf + len;
    int found = 0;
    while (p < end && found == 0) {
        uint64_t key, n;
        if (!wire_varint(&p, end, &key)) {
            found = -1;
            continue;
        }
        switch (key & 7) {
        case 0:
            found = wire_varint(&p, end, &n) ? 0 : -1;
            break;
        case 1:
        case 5:
            n = (key & 7) == 1 ? 8 : 4;
            if (n > (uint64_t)(end - p))
                found = -1;
            else
                p += n;
            break;
        case 2:
            if (!wire_varint(&p, end, &n) || n > (uint64_t)(end - p)) {
                found = -1;
            } else {
                if (key >> 3 == path[0])
                    found = depth == 1 ? memchr(p, 0, (size_t)n) != NULL
                                       : feedd_wire_has_nul(p, (size_t)n, path + 1, depth - 1);
                p += n;
            }
            break;
        default:
            found = -1; /* groups, which protobuf-c does not parse either */
            break;
        }
    }
    return found;
}

int feedd_find_dataset(const feedd_request_env *env, const char *name)
{
    for (size_t i = 0; i < env->n_datasets; i++)
        if (strcmp(env->datasets[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* "unknown dataset 'NAME' (this server has: a, b)" into msg: a client that asked for the wrong
 * name learns the right ones. */
static void unknown_dataset(const feedd_request_env *env, const char *field, const char *want,
                            char *msg, size_t cap)
{
    size_t n =
        (size_t)snprintf(msg, cap, "%s: unknown dataset '%.64s' (this server has:", field, want);
    for (size_t i = 0; i < env->n_datasets && n < cap; i++)
        n += (size_t)snprintf(msg + n, cap - n, "%s %s", i ? "," : "", env->datasets[i].name);
    if (n < cap)
        snprintf(msg + n, cap - n, ")");
}

/* Fill t from the wire spec with the contract's defaults; 0 or INVALID_ARGUMENT text. */
static int transform_from_wire(const Feed__V1__TransformSpec *w, feed_transform *t, char *msg,
                               size_t cap)
{
    Feed__V1__TransformSpec zero = FEED__V1__TRANSFORM_SPEC__INIT;
    if (!w)
        w = &zero;
    if (w->mode != FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN &&
        w->mode != FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_EVAL) {
        snprintf(msg, cap, "transform.mode: unknown mode %d", (int)w->mode);
        return FEED_EINVAL;
    }
    if (w->mode == FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_EVAL)
        feed_transform_default_eval(t);
    else
        feed_transform_default_train(t);
    if (w->out_height)
        t->out_h = w->out_height;
    if (w->out_width)
        t->out_w = w->out_width;
    if (w->scale_min != 0)
        t->scale_min = w->scale_min;
    if (w->scale_max != 0)
        t->scale_max = w->scale_max;
    if (w->ratio_min != 0)
        t->ratio_min = w->ratio_min;
    if (w->ratio_max != 0)
        t->ratio_max = w->ratio_max;
    t->flip_prob = w->flip_prob;
    if (w->resize_size) {
        t->resize_size = w->resize_size;
    } else {
        uint64_t side = t->out_h > t->out_w ? t->out_h : t->out_w;
        t->resize_size = (uint32_t)(side * 256 / 224);
    }
    char why[160];
    if (feed_transform_validate(t, why, sizeof why) < 0) {
        snprintf(msg, cap, "%s%s", strncmp(why, "transform.", 10) == 0 ? "" : "transform.", why);
        return FEED_EINVAL;
    }
    return 0;
}

/* TransformSpec.augment parsed; 0 or INVALID_ARGUMENT text naming the parameter. */
static int augment_from_wire(const Feed__V1__TransformSpec *w, feed_augment *a, char *msg,
                             size_t cap)
{
    char why[200];
    if (feed_augment_parse(w ? w->augment : NULL, a, why, sizeof why) != 0) {
        snprintf(msg, cap, "transform.%s", why);
        return FEED_EINVAL;
    }
    return 0;
}

/* A job or share name (field `what`) into out (FEED_NAME_MAX + 1 bytes); 0 or
 * INVALID_ARGUMENT text naming the field. The name keys the pool's shares (or the share
 * window's groups) and labels metrics, so it is refused, never cut or rewritten: two jobs must
 * not merge into one. */
static int name_from_wire(const char *what, const char *name, char *out, char *msg, size_t cap)
{
    size_t len = strlen(name), bad = 0;
    if (feed_name_check(name, &bad) != 0) {
        if (len > FEED_NAME_MAX)
            snprintf(msg, cap, "%s: %zu bytes > %d", what, len, FEED_NAME_MAX);
        else
            snprintf(msg, cap, "%s: byte %zu (0x%02x) is not a letter, digit or one of %s", what,
                     bad, (unsigned char)name[bad], FEED_NAME_CHARS);
        return FEED_EINVAL;
    }
    memcpy(out, name, len + 1);
    return 0;
}

/* SessionOpen.job, job_weight and share into sess; 0 or INVALID_ARGUMENT text naming the
 * field. */
static int job_from_wire(const Feed__V1__SessionOpen *o, feedd_session *sess, char *msg, size_t cap)
{
    if (name_from_wire("open.job", o->job ? o->job : "", sess->job, msg, cap) < 0)
        return FEED_EINVAL;
    if (o->job_weight > FEEDD_JOB_WEIGHT_MAX) {
        snprintf(msg, cap, "open.job_weight: %u > %d", o->job_weight, FEEDD_JOB_WEIGHT_MAX);
        return FEED_EINVAL;
    }
    sess->job_weight = o->job_weight ? o->job_weight : 1;
    return name_from_wire("open.share", o->share ? o->share : "", sess->share, msg, cap);
}

static grpc_status_code open_session(const feedd_request_env *env, const Feed__V1__SessionOpen *o,
                                     const char *peer, feedd_session *sess, char *msg, size_t cap)
{
    if (o->protocol_version != 0 &&
        o->protocol_version != FEED__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1) {
        snprintf(msg, cap, "open.protocol_version: %u is not supported (this server speaks 1)",
                 o->protocol_version);
        return GRPC_STATUS_INVALID_ARGUMENT;
    }
    int ds = feedd_find_dataset(env, o->dataset ? o->dataset : "");
    if (ds < 0) {
        unknown_dataset(env, "open.dataset", o->dataset ? o->dataset : "", msg, cap);
        return GRPC_STATUS_NOT_FOUND;
    }
    if (transform_from_wire(o->transform, &sess->tf, msg, cap) < 0)
        return GRPC_STATUS_INVALID_ARGUMENT;
    if (augment_from_wire(o->transform, &sess->aug, msg, cap) < 0)
        return GRPC_STATUS_INVALID_ARGUMENT;
    if (job_from_wire(o, sess, msg, cap) < 0)
        return GRPC_STATUS_INVALID_ARGUMENT;
    sess->ds_id = (uint32_t)ds;
    sess->seed = o->seed;
    sess->window = o->window ? o->window : 1;
    if (sess->window > env->cfg->max_window)
        sess->window = env->cfg->max_window;
    snprintf(sess->client_name, sizeof sess->client_name, "%s",
             o->client_name ? o->client_name : "");
    /* Free text from the wire goes into log lines: keep it printable ASCII. */
    for (char *c = sess->client_name; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
    sess->opened = true;
    FEED_LOGI("stream %s: session open client='%s' job='%s' weight=%u share='%s' dataset=%s "
              "mode=%s %ux%u window=%u",
              peer, sess->client_name, sess->job, sess->job_weight, sess->share,
              env->datasets[ds].name,
              sess->tf.mode == FEED_TRANSFORM_EVAL ? "eval" : "train", sess->tf.out_h,
              sess->tf.out_w, sess->window);
    return GRPC_STATUS_OK;
}

const char *feedd_session_job(const feedd_session *sess)
{
    return sess->job[0] ? sess->job : sess->client_name;
}

/* BatchRequest.demand into *d; 0 or INVALID_ARGUMENT text naming the field. NaN fails every
 * range check as written (!(x >= lo && x <= hi)). */
static int demand_from_wire(const Feed__V1__Demand *w, feedd_demand *d, char *msg, size_t cap)
{
    int rc = FEED_EINVAL;
    if (w->loader == 0) {
        snprintf(msg, cap, "demand.loader: 0 (a loader's id is not 0)");
        goto out;
    }
    if (w->window_ms < 100 || w->window_ms > 3600000) {
        snprintf(msg, cap, "demand.window_ms: %u is not in 100..3600000", w->window_ms);
        goto out;
    }
    if (!(w->wait_fraction >= 0 && w->wait_fraction <= 1)) {
        snprintf(msg, cap, "demand.wait_fraction: %g is not in 0..1", w->wait_fraction);
        goto out;
    }
    if (!(w->samples_per_second >= 0 && w->samples_per_second <= 1e9)) {
        snprintf(msg, cap, "demand.samples_per_second: %g is not in 0..1e9", w->samples_per_second);
        goto out;
    }
    if (w->servers > 65536) {
        snprintf(msg, cap, "demand.servers: %u is not in 0..65536", w->servers);
        goto out;
    }
    *d = (feedd_demand){w->loader, w->window_ms, w->wait_fraction, w->samples_per_second,
                        w->servers};
    rc = 0;
out:
    return rc;
}

grpc_status_code feedd_request_batch(const feedd_request_env *env, feedd_arena *a,
                                     const uint8_t *buf, size_t len, const char *peer,
                                     feedd_session *sess, feedd_batch_request *out, char *msg,
                                     size_t cap)
{
    const feedd_config *cfg = env->cfg;
    grpc_status_code code = GRPC_STATUS_INVALID_ARGUMENT;
    *out = (feedd_batch_request){0};
    a->used = 0;
    static const uint32_t open_dataset[] = {1, 1}; /* BatchRequest.open.dataset */
    static const uint32_t open_job[] = {1, 8};     /* BatchRequest.open.job */
    static const uint32_t open_share[] = {1, 10};  /* BatchRequest.open.share */
    int nul = feedd_wire_has_nul(buf, len, open_dataset, 2);
    int nul_job = nul == 0 ? feedd_wire_has_nul(buf, len, open_job, 2) : 0;
    int nul_share = nul == 0 && nul_job == 0 ? feedd_wire_has_nul(buf, len, open_share, 2) : 0;
    Feed__V1__BatchRequest *r = nul == 0 && nul_job == 0 && nul_share == 0
                                    ? feed__v1__batch_request__unpack(&a->alloc, len, buf)
                                    : NULL;
    if (nul == 1 || nul_job == 1 || nul_share == 1) {
        snprintf(msg, cap, "open.%s: contains a NUL byte",
                 nul == 1 ? "dataset" : nul_job == 1 ? "job" : "share");
        goto out;
    }
    if (!r) {
        snprintf(msg, cap, "request: not a valid feed.v1.BatchRequest");
        goto out;
    }
    if (r->open) {
        if (sess->opened) {
            snprintf(msg, cap,
                     "open: the session is already open (only the first request opens it)");
            goto out;
        }
        code = open_session(env, r->open, peer, sess, msg, cap);
        if (code != GRPC_STATUS_OK)
            goto out;
        code = GRPC_STATUS_INVALID_ARGUMENT;
    } else if (!sess->opened) {
        snprintf(msg, cap, "open: the first request must open a session");
        goto out;
    }
    if (r->demand) {
        if (demand_from_wire(r->demand, &out->demand, msg, cap) < 0)
            goto out;
        out->has_demand = true;
    }
    if ((unsigned)r->ownership > FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_NOT_OWNER) {
        snprintf(msg, cap, "ownership: %u is not a CacheOwnership", (unsigned)r->ownership);
        goto out;
    }
    if (r->n_indices == 0) {
        if (!r->open) {
            snprintf(msg, cap, "indices: a request with no indices");
            goto out;
        }
        code = GRPC_STATUS_OK;
        goto out;
    }
    if (r->n_indices > cfg->max_batch) {
        snprintf(msg, cap, "indices: %zu samples > max_batch_size %u", r->n_indices,
                 cfg->max_batch);
        goto out;
    }
    uint64_t count = feed_dataset_count(env->datasets[sess->ds_id].ds);
    for (size_t i = 0; i < r->n_indices; i++) {
        if (r->indices[i] >= count) {
            snprintf(msg, cap, "indices[%zu]: %llu >= num_samples %llu", i,
                     (unsigned long long)r->indices[i], (unsigned long long)count);
            goto out;
        }
    }
    if (r->encoded) {
        /* Laid out by the samples' lengths at acceptance (encoded.h), whose caps refuse
         * samples, never the request. */
        out->r = r;
        out->encoded = true;
        code = GRPC_STATUS_OK;
        goto out;
    }
    size_t sample_bytes = (size_t)sess->tf.out_h * sess->tf.out_w * 3;
    uint64_t bytes = (uint64_t)r->n_indices * sample_bytes;
    if (bytes > cfg->max_batch_bytes) {
        snprintf(msg, cap,
                 "indices: %zu samples of %ux%u are %llu bytes > max_batch_bytes "
                 "%llu",
                 r->n_indices, sess->tf.out_h, sess->tf.out_w, (unsigned long long)bytes,
                 (unsigned long long)cfg->max_batch_bytes);
        goto out;
    }
    out->r = r;
    out->sample_bytes = sample_bytes;
    out->bytes = bytes;
    code = GRPC_STATUS_OK;
out:
    return code;
}

grpc_status_code feedd_request_describe(const feedd_request_env *env, const uint8_t *buf,
                                        size_t len, Feed__V1__DescribeRequest **out, char *msg,
                                        size_t cap)
{
    grpc_status_code code = GRPC_STATUS_OK;
    static const uint32_t dataset[] = {1}; /* DescribeRequest.dataset */
    int nul = feedd_wire_has_nul(buf, len, dataset, 1);
    Feed__V1__DescribeRequest *req =
        nul == 0 ? feed__v1__describe_request__unpack(NULL, len, buf) : NULL;
    if (nul == 1) {
        code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, cap, "dataset: contains a NUL byte");
        goto out;
    }
    if (!req) {
        code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, cap, "request: not a valid feed.v1.DescribeRequest");
        goto out;
    }
    const char *want = req->dataset ? req->dataset : "";
    if (want[0] && feedd_find_dataset(env, want) < 0) {
        code = GRPC_STATUS_NOT_FOUND;
        unknown_dataset(env, "dataset", want, msg, cap);
        feed__v1__describe_request__free_unpacked(req, NULL);
        req = NULL;
    }
out:
    *out = req;
    return code;
}

int feedd_read_bb(grpc_byte_buffer *bb, size_t limit, uint8_t *dst, size_t *len)
{
    grpc_byte_buffer_reader r;
    size_t n = 0;
    int rc = FEED_EPROTO;
    if (grpc_byte_buffer_reader_init(&r, bb)) {
        grpc_slice s;
        rc = 0;
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
    }
    *len = n;
    return rc;
}
