/*
 * Fuzz target: feedd's request parsing (server/service/request.h), the first code
 * that sees a client's bytes once gRPC has framed them. The first input byte
 * picks the method: odd, the rest is one DescribeRequest; even, the rest is
 * one Stream call, a sequence of BatchRequests each framed as a 16-bit
 * little-endian length and the bytes (the last frame takes what is left).
 * They go through one session, as on a stream, until one is refused, which
 * would end the stream. Every request that passes is held to what
 * service.c then relies on: an open session with a valid transform (and at
 * most FEED_AUGMENT_MAX_STEPS augmentation steps, TransformSpec.augment), a window
 * within bounds, indices in range and a batch within max_batch_bytes.
 * Two datasets are served, both a 10-sample pack made at first use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/log.h"
#include "feed/pack.h"
#include "fuzz.h"
#include "request.h"

#define SAMPLES 10
#define MAX_REQUEST_BYTES 65536

static feedd_config cfg;
static feedd_served_dataset served[2];
static feedd_request_env env;
static feedd_arena arena;

/* A pack of SAMPLES one-byte samples in two classes, opened and then unlinked. */
static feed_dataset *make_dataset(void)
{
    static const char *const names[] = {"cat", "dog"};
    char dir[] = "/tmp/feed-fuzz-XXXXXX", path[64], err[256];
    feed_pack_writer *w = NULL;
    feed_dataset *ds = NULL;
    if (!mkdtemp(dir))
        abort();
    snprintf(path, sizeof path, "%s/tiny.pack", dir);
    if (feed_pack_writer_open(path, SAMPLES, 2, names, &w, err, sizeof err) != 0)
        abort();
    for (uint32_t i = 0; i < SAMPLES; i++)
        if (feed_pack_writer_add(w, i % 2, "x", 1) != 0)
            abort();
    if (feed_pack_writer_finish(w, err, sizeof err) != 0 ||
        feed_dataset_open(path, NULL, &ds, err, sizeof err) != 0)
        abort();
    unlink(path);
    rmdir(dir);
    return ds;
}

static void init(void)
{
    feed_log_set_level(FEED_LOG_ERROR); /* session opens log at INFO */
    cfg.max_batch = 1024;
    cfg.max_window = 16;
    cfg.max_batch_bytes = 256u << 20;
    cfg.max_request_bytes = MAX_REQUEST_BYTES;
    const feed_dataset *ds = make_dataset();
    served[0] = (feedd_served_dataset){"train", ds};
    served[1] = (feedd_served_dataset){"val", ds};
    env = (feedd_request_env){&cfg, served, 2};
    /* service.c's sizing: packed varints expand up to 8x into uint64 arrays. */
    size_t cap = 9 * (size_t)MAX_REQUEST_BYTES + 65536;
    feedd_arena_init(&arena, malloc(cap), cap);
    if (!arena.base)
        abort();
}

static void check_batch(const feedd_session *sess, const feedd_batch_request *req)
{
    char why[160];
    if (!sess->opened || sess->ds_id >= env.n_datasets || sess->window < 1 ||
        sess->window > cfg.max_window || feed_transform_validate(&sess->tf, why, sizeof why) != 0 ||
        sess->aug.num_steps > FEED_AUGMENT_MAX_STEPS)
        abort();
    for (const char *c = sess->client_name; *c; c++)
        if (*c < 0x20 || *c > 0x7e)
            abort();
    const Feed__V1__BatchRequest *r = req->r;
    if (!r)
        return;
    if (r->n_indices == 0 || r->n_indices > cfg.max_batch || req->bytes > cfg.max_batch_bytes ||
        req->sample_bytes != (size_t)sess->tf.out_h * sess->tf.out_w * 3 ||
        req->bytes != r->n_indices * req->sample_bytes)
        abort();
    for (size_t i = 0; i < r->n_indices; i++)
        if (r->indices[i] >= SAMPLES)
            abort();
}

static void run_describe(const uint8_t *data, size_t size)
{
    char msg[256];
    Feed__V1__DescribeRequest *req = NULL;
    grpc_status_code code = feedd_request_describe(&env, data, size, &req, msg, sizeof msg);
    if ((code == GRPC_STATUS_OK) != (req != NULL))
        abort();
    if (req && req->dataset && req->dataset[0] && feedd_find_dataset(&env, req->dataset) < 0)
        abort();
    if (req)
        feed__v1__describe_request__free_unpacked(req, NULL);
}

static void run_stream(const uint8_t *data, size_t size)
{
    char msg[256];
    feedd_session sess = {0};
    grpc_status_code code = GRPC_STATUS_OK;
    while (size > 0 && code == GRPC_STATUS_OK) {
        size_t len = size < 2 ? 0 : (size_t)data[0] | (size_t)data[1] << 8;
        size_t skip = size < 2 ? size : 2;
        data += skip;
        size -= skip;
        len = len > size ? size : len;
        feedd_batch_request req;
        msg[0] = '\0';
        code = feedd_request_batch(&env, &arena, data, len, "fuzz", &sess, &req, msg, sizeof msg);
        if (code == GRPC_STATUS_OK)
            check_batch(&sess, &req);
        else if (msg[0] == '\0')
            abort(); /* a refusal always says why */
        data += len;
        size -= len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!env.cfg)
        init();
    if (size == 0)
        return 0;
    if (data[0] & 1)
        run_describe(data + 1, size - 1);
    else
        run_stream(data + 1, size - 1);
    return 0;
}
