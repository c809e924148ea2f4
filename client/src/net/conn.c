/*
 * gRPC for the loader: one channel and one bidi Stream call per server, a
 * unary Describe before each stream, all on one completion queue that the
 * receiver threads (io.c) run, handing each finished op here
 * (conn_complete). A call context is freed by the receiver that finishes its
 * last op in flight (an op counts until its handler returns), so a late tag
 * never touches freed memory. A context is detached (srv = NULL)
 * when its server is failed; whatever it still delivers is dropped, which is
 * what makes re-issued batches exactly-once. Locks: the loader's mu only
 * (client_impl.h); its gRPC calls under it (start_batch, cancel) do not
 * block.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"
#include "client_impl.h"
#include "policy.h"
#include "sched_impl.h"
#include "trust.h"

static gpr_timespec ms_from_now(uint32_t ms)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* The transport reads the clock for the scheduler's events. */
static void server_failed(loader *l, server *s, const char *why)
{
    sched_fail_server(l, s, why, feed_now_ns());
}

static call_ctx *call_new(loader *l, server *s, call_kind kind)
{
    call_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->l = l;
    c->srv = s;
    c->kind = kind;
    grpc_metadata_array_init(&c->md_initial);
    grpc_metadata_array_init(&c->md_trailing);
    c->details = grpc_empty_slice();
    c->t_unary = (call_tag){c, TAG_UNARY};
    c->t_start = (call_tag){c, TAG_START};
    c->t_send = (call_tag){c, TAG_SEND};
    c->t_recv = (call_tag){c, TAG_RECV};
    c->t_status = (call_tag){c, TAG_STATUS};
    l->live_calls++;
    return c;
}

static void call_free(call_ctx *c)
{
    if (c->call)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md_initial);
    grpc_metadata_array_destroy(&c->md_trailing);
    grpc_slice_unref(c->details);
    if (c->send_bb)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb)
        grpc_byte_buffer_destroy(c->recv_bb);
    for (uint32_t i = 0; i < c->q_len; i++)
        grpc_byte_buffer_destroy(c->queue[(c->q_head + i) % CALL_QUEUE_CAP]);
    c->l->live_calls--;
    free(c);
}

void conn_abandon(call_ctx *c)
{
    c->srv = NULL;
    if (c->call)
        grpc_call_cancel(c->call, NULL);
}

static int start_batch(call_ctx *c, const grpc_op *ops, size_t n, call_tag *tag)
{
    grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
    if (e != GRPC_CALL_OK)
        return FEED_EPROTO;
    c->ops++;
    return 0;
}

#define CLIENT_KEEPALIVE_MS 1000

/*
 * The largest Describe reply taken, whatever the batch size: feedd refuses
 * to serve a dataset whose class names pass 16 MiB (FEEDD_DESCRIBE_NAMES_MAX
 * in server/feedd.c), and 262,144 classes (FEED_DATASET_MAX_CLASSES) add
 * at most 3 bytes of framing each. The channel's receive limit is this or
 * the batch message, the larger; a Batch is still held to its slot's size
 * and its receiver's capped buffer (wire.c).
 */
#define CLIENT_MAX_DESCRIBE_BYTES (20u << 20)

static int channel_ensure(loader *l, server *s)
{
    if (s->channel)
        return 0;
    size_t limit = l->max_message > CLIENT_MAX_DESCRIBE_BYTES ? l->max_message
                                                               : CLIENT_MAX_DESCRIBE_BYTES;
    int max_msg = limit > 0x7FFFFFFF ? 0x7FFFFFFF : (int)limit;
    /*
     * A ping every CLIENT_KEEPALIVE_MS, data or not (feedd allows it), and the connection
     * dropped when one goes unanswered for batch_deadline_ms: the one limit on a server's
     * silence, so a stopped server or a cut link that owes nothing is found as one that owes
     * batches is. Not sooner: on a loaded host a healthy server, or this process reading the
     * batches queued ahead of the answer, can take seconds to answer a ping, and failing it
     * threw away what it was making only to ask it again (hedging, not the ping, moves a
     * stalled server's batches to the others fast).
     */
    int silence_ms = l->cfg.batch_deadline_ms > 0x7FFFFFFF ? 0x7FFFFFFF
                                                           : (int)l->cfg.batch_deadline_ms;
    grpc_arg args[7] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = max_msg},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, .value.integer = 1},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_TIME_MS,
         .value.integer = CLIENT_KEEPALIVE_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
         .value.integer = silence_ms},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
         .value.integer = 0},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = CLIENT_BACKOFF_FIRST_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = CLIENT_BACKOFF_MAX_MS},
    };
    grpc_channel_args ca = {.num_args = 7, .args = args};
    s->channel = grpc_channel_create(s->target, l->creds, &ca);
    return s->channel ? 0 : FEED_ENOMEM;
}

/* SEND_INITIAL_METADATA with the token, if any. */
static void initial_metadata_op(const loader *l, grpc_op *op)
{
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->data.send_initial_metadata.count = l->auth_md_count;
    op->data.send_initial_metadata.metadata =
        l->auth_md_count ? (grpc_metadata *)&l->auth_md : NULL;
}

static bool start_describe(loader *l, server *s)
{
    call_ctx *c = NULL;
    Feed__V1__DescribeRequest req = FEED__V1__DESCRIBE_REQUEST__INIT;
    grpc_slice payload;
    int rc = channel_ensure(l, s);
    if (rc)
        goto fail;
    rc = FEED_ENOMEM;
    c = call_new(l, s, CALL_DESCRIBE);
    if (!c)
        goto fail;
    uint32_t deadline = CLIENT_DESCRIBE_DEADLINE_MS;
    if (l->cfg.unavailable_timeout_ms < deadline)
        deadline = l->cfg.unavailable_timeout_ms;
    c->call = grpc_channel_create_call(s->channel, NULL, GRPC_PROPAGATE_DEFAULTS, l->cq,
                                       grpc_slice_from_static_string("/feed.v1.Feed/Describe"),
                                       NULL, ms_from_now(deadline), NULL);
    if (!c->call)
        goto fail;
    req.dataset = l->dataset;
    size_t size = feed__v1__describe_request__get_packed_size(&req);
    payload = grpc_slice_malloc(size);
    feed__v1__describe_request__pack(&req, GRPC_SLICE_START_PTR(payload));
    c->send_bb = grpc_raw_byte_buffer_create(&payload, 1);
    grpc_slice_unref(payload);

    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    initial_metadata_op(l, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &c->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &c->md_trailing;
    ops[5].data.recv_status_on_client.status = &c->status;
    ops[5].data.recv_status_on_client.status_details = &c->details;
    rc = start_batch(c, ops, 6, &c->t_unary);
    if (rc)
        goto fail;
    s->describe = c;
    s->state = SRV_DESCRIBE;
    return true;
fail:
    if (c)
        call_free(c);
    return false;
}

static void start_stream(loader *l, server *s)
{
    call_ctx *c = call_new(l, s, CALL_STREAM);
    grpc_byte_buffer *open_bb = NULL;
    if (!c)
        goto fail;
    c->call = grpc_channel_create_call(s->channel, NULL, GRPC_PROPAGATE_DEFAULTS, l->cq,
                                       grpc_slice_from_static_string("/feed.v1.Feed/Stream"), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (!c->call)
        goto fail;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    initial_metadata_op(l, &op);
    if (start_batch(c, &op, 1, &c->t_start))
        goto fail;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &c->md_trailing;
    op.data.recv_status_on_client.status = &c->status;
    op.data.recv_status_on_client.status_details = &c->details;
    if (start_batch(c, &op, 1, &c->t_status))
        goto fail;
    grpc_op rops[2];
    memset(rops, 0, sizeof(rops));
    rops[0].op = GRPC_OP_RECV_INITIAL_METADATA;
    rops[0].data.recv_initial_metadata.recv_initial_metadata = &c->md_initial;
    rops[1].op = GRPC_OP_RECV_MESSAGE;
    rops[1].data.recv_message.recv_message = &c->recv_bb;
    if (start_batch(c, rops, 2, &c->t_recv))
        goto fail;
    s->stream = c;
    /* Up only once a Batch comes back (sched_batch_arrived): a draining server answers Describe
     * and then refuses the stream. Backoff and the quiet flag are reset then too. */
    s->state = SRV_CONNECTING;
    s->outstanding = 0;
    char name[64];
    snprintf(name, sizeof(name), "libfeedclient rank %u/%u", l->cfg.rank, l->cfg.world);
    wire_open wo = {.dataset = l->dataset,
                    .transform = &l->cfg.transform,
                    .augment = l->augment,
                    .seed = l->aug_seed,
                    .window = s->window,
                    .client_name = name,
                    .job = l->job,
                    .job_weight = l->cfg.job_weight,
                    .share = l->share};
    open_bb = wire_pack_request(&wo, 0, 0, NULL, 0, 0, false, NULL);
    if (!open_bb || !conn_send(l, s, open_bb))
        goto fail_up;
    client_log(l, FEED_LOG_DEBUG, "server %s: stream open", s->target);
    return;
fail:
    if (c && c->ops == 0)
        call_free(c);
    else if (c)
        conn_abandon(c);
fail_up:
    server_failed(l, s, "cannot start Stream");
}

/* Pops the next queued message into a SEND_MESSAGE op. */
static void pump_send(call_ctx *c)
{
    if (c->sending || c->q_len == 0 || !c->srv)
        return;
    c->send_bb = c->queue[c->q_head];
    c->q_head = (c->q_head + 1) % CALL_QUEUE_CAP;
    c->q_len--;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = c->send_bb;
    if (start_batch(c, &op, 1, &c->t_send)) {
        server_failed(c->l, c->srv, "send failed");
        return;
    }
    c->sending = true;
}

bool conn_send(loader *l, server *s, grpc_byte_buffer *bb)
{
    (void)l;
    call_ctx *c = s->stream;
    if (!c || c->q_len == CALL_QUEUE_CAP) {
        grpc_byte_buffer_destroy(bb);
        return false;
    }
    c->queue[(c->q_head + c->q_len) % CALL_QUEUE_CAP] = bb;
    c->q_len++;
    pump_send(c);
    return true;
}

static bool send_request(loader *l, server *s, uint64_t id, uint32_t epoch, const uint64_t *indices,
                         uint32_t n, uint32_t ownership, bool encoded)
{
    /* The demand rides on every request: a server that joined the fleet learns it with the
     * first batch it is asked for. */
    wire_demand dm, *demand = NULL;
    if (client_demand_due(&l->demand, l->next_since_ns, feed_now_ns())) {
        dm = (wire_demand){l->demand.id, l->demand.last_ms, l->demand.wait_fraction,
                           l->demand.samples_per_second, sched_servers_up(l)};
        demand = &dm;
    }
    grpc_byte_buffer *bb =
        wire_pack_request(NULL, id, epoch, indices, n, ownership, encoded, demand);
    return bb && conn_send(l, s, bb);
}

static void drop_server(loader *l, server *s)
{
    (void)l;
    if (s->describe)
        conn_abandon(s->describe);
    if (s->stream)
        conn_abandon(s->stream);
    if (s->channel) {
        grpc_channel_destroy(s->channel);
        s->channel = NULL;
    }
}

const sched_transport conn_transport = {
    .send_request = send_request, .drop_server = drop_server, .connect = start_describe};

/* The statuses that mean "not with these credentials": feedd answers UNAUTHENTICATED to a
 * missing or wrong token; PERMISSION_DENIED is what a proxy in front of it may say. A failed TLS
 * handshake is not among them: gRPC reports it as UNAVAILABLE, like a refused connection, with
 * the reason only in the details text. */
static bool refused_status(grpc_status_code st)
{
    return st == GRPC_STATUS_UNAUTHENTICATED || st == GRPC_STATUS_PERMISSION_DENIED;
}

static const char *status_name(grpc_status_code st)
{
    return st == GRPC_STATUS_UNAUTHENTICATED ? "UNAUTHENTICATED" : "PERMISSION_DENIED";
}

/* What a server's failed answer said, for feed_loader_server_stats. mu held. */
static void note_answer(server *s, grpc_status_code st, const char *details)
{
    s->last_status = (int32_t)st;
    snprintf(s->last_error, sizeof s->last_error, "%s", details ? details : "");
}

/* Whether s serves the data the loader's other servers serve (policy_check_fingerprint); the
 * first server used that states a fingerprint sets it. A refusal is warned of and counted once
 * per change, not at every retry. mu held. */
static bool check_fingerprint(loader *l, server *s, const char *got)
{
    char why[600];
    snprintf(s->fingerprint, sizeof s->fingerprint, "%s", got);
    bool use = policy_check_fingerprint(l->dataset, l->stats.dataset_fingerprint,
                                        l->fingerprint_from, s->target, got, why, sizeof why);
    if (!use) {
        if (!s->fingerprint_differs) {
            l->stats.fingerprint_refused++;
            client_log(l, FEED_LOG_WARN, "server %s: %s", s->target, why);
        }
        s->fingerprint_differs = true;
        server_failed(l, s, "dataset fingerprint differs");
    } else {
        s->fingerprint_differs = false;
        if (got[0] && !l->stats.dataset_fingerprint[0]) {
            snprintf(l->stats.dataset_fingerprint, sizeof l->stats.dataset_fingerprint, "%s", got);
            snprintf(l->fingerprint_from, sizeof l->fingerprint_from, "%s", s->target);
        }
    }
    return use;
}

static void on_describe(loader *l, call_ctx *c, bool ok)
{
    server *s = c->srv;
    Feed__V1__DescribeResponse *resp = NULL;
    feed_buf buf;
    feed_buf_init(&buf, CLIENT_MAX_DESCRIBE_BYTES);
    l->describe_done++;
    if (!s)
        goto out;
    s->describe = NULL;
    if (!ok || c->status != GRPC_STATUS_OK || !c->recv_bb) {
        char *d = grpc_slice_to_c_string(c->details);
        if (c->status == GRPC_STATUS_NOT_FOUND)
            l->notfound_seen = true;
        /* A server that stays down would log every retry: warn once per outage. A refused
         * token is a configuration error, said as one (at error level whenever the server
         * starts refusing, whatever it answered before); such a server is failed, and if every
         * server refuses, open and next() return FEED_EAUTH at once. */
        bool was_refused = s->refused;
        s->refused = refused_status(c->status);
        note_answer(s, c->status, d);
        if (s->refused)
            client_log(l, s->quiet && was_refused ? FEED_LOG_DEBUG : FEED_LOG_ERROR,
                       "server %s refused the bearer token (%s: %s); set "
                       "feed_loader_config.token or FEED_TOKEN to the server's token",
                       s->target, status_name(c->status), d ? d : "");
        else
            client_log(l, s->quiet ? FEED_LOG_DEBUG : FEED_LOG_WARN,
                       "server %s: Describe failed (status %d: %s)", s->target, (int)c->status,
                       d ? d : "");
        s->quiet = true;
        gpr_free(d);
        server_failed(l, s, "Describe failed");
        goto out;
    }
    grpc_byte_buffer_reader rd;
    grpc_slice sl;
    bool fits = true;
    if (!grpc_byte_buffer_reader_init(&rd, c->recv_bb)) {
        server_failed(l, s, "unreadable Describe reply");
        goto out;
    }
    while (fits && grpc_byte_buffer_reader_next(&rd, &sl)) {
        fits = feed_buf_append(&buf, GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl)) == 0;
        grpc_slice_unref(sl);
    }
    grpc_byte_buffer_reader_destroy(&rd);
    resp = fits ? feed__v1__describe_response__unpack(NULL, buf.len, buf.data) : NULL;
    if (!resp) {
        server_failed(l, s, "malformed Describe reply");
        goto out;
    }
    s->refused = false;
    note_answer(s, GRPC_STATUS_OK, NULL);
    const Feed__V1__DatasetInfo *info = NULL;
    for (size_t i = 0; i < resp->n_datasets; i++) {
        if (resp->datasets[i]->name && strcmp(resp->datasets[i]->name, l->dataset) == 0)
            info = resp->datasets[i];
    }
    policy_server_info pi = {.served = info != NULL,
                             .num_samples = info ? info->num_samples : 0,
                             .max_batch_size = resp->max_batch_size,
                             .max_batch_bytes = resp->max_batch_bytes,
                             .max_window = resp->max_window};
    char why[224];
    uint32_t window;
    switch (policy_check_server(&l->cfg, l->num_samples, &pi, &window, why, sizeof(why))) {
    case POLICY_NOT_SERVED:
        l->notfound_seen = true;
        server_failed(l, s, "dataset not served");
        goto out;
    case POLICY_SIZE_DIFFERS:
        client_log(l, FEED_LOG_ERROR, "server %s: %s", s->target, why);
        server_failed(l, s, "dataset size differs");
        goto out;
    case POLICY_BATCH_TOO_LARGE:
        client_log(l, FEED_LOG_ERROR, "server %s: %s", s->target, why);
        if (!l->num_samples)
            l->fatal = FEED_EINVAL;
        server_failed(l, s, "batch too large");
        goto out;
    case POLICY_USE:
        break;
    }
    if (!check_fingerprint(l, s, info->fingerprint ? info->fingerprint : ""))
        goto out;
    if (!l->num_samples) {
        l->num_samples = info->num_samples;
        l->num_classes = (uint32_t)info->n_class_names;
    }
    sched_note_cache_side(l, s, info->cache_side);
    s->window = l->routing ? sched_route_window(l, window, resp->max_window) : window;
    start_stream(l, s);
out:
    if (resp)
        feed__v1__describe_response__free_unpacked(resp, NULL);
    feed_buf_free(&buf);
}

/* A Batch arrived on s's stream call `from`: mu held on entry and exit, dropped while the
 * scheduler lands it into its slot. */
static void receive_batch(receiver *rx, server *s, const call_ctx *from, grpc_byte_buffer *bb)
{
    loader *l = rx->l;
    wire_batch_reader r;
    if (wire_batch_reader_init(&r, bb, &rx->rbuf)) {
        server_failed(l, s, "unreadable Batch");
        return;
    }
    piece *pc = sched_batch_arrived(l, s, &r, feed_now_ns());
    if (pc) {
        char why[160];
        pthread_mutex_unlock(&l->mu);
        int rc = sched_land(l, pc, &r, &rx->arena, why, sizeof(why));
        pthread_mutex_lock(&l->mu);
        sched_batch_landed(l, s, from, pc, rc, why, feed_now_ns());
    }
    wire_batch_reader_destroy(&r);
}

static void on_stream_tag(receiver *rx, call_tag *t, bool ok)
{
    loader *l = rx->l;
    call_ctx *c = t->call;
    switch (t->kind) {
    case TAG_START:
        if (!ok && c->srv)
            server_failed(l, c->srv, "stream start failed");
        break;
    case TAG_SEND:
        c->sending = false;
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
        if (!ok && c->srv)
            server_failed(l, c->srv, "send failed");
        else
            pump_send(c);
        break;
    case TAG_RECV: {
        grpc_byte_buffer *bb = c->recv_bb;
        c->recv_bb = NULL;
        if (!ok || !bb) {
            if (c->srv)
                server_failed(l, c->srv, "stream ended");
            if (bb)
                grpc_byte_buffer_destroy(bb);
            break;
        }
        server *s = c->srv;
        /* Ask for the next message first, so another receiver can take it while this one lands. */
        if (s && s->stream == c) {
            grpc_op op;
            memset(&op, 0, sizeof(op));
            op.op = GRPC_OP_RECV_MESSAGE;
            op.data.recv_message.recv_message = &c->recv_bb;
            if (start_batch(c, &op, 1, &c->t_recv)) {
                server_failed(l, s, "receive failed");
                s = NULL;
            }
        }
        if (s)
            receive_batch(rx, s, c, bb);
        grpc_byte_buffer_destroy(bb);
        break;
    }
    case TAG_STATUS:
        if (c->srv) {
            char *d = grpc_slice_to_c_string(c->details);
            /* Describe passed but the stream is refused for its credentials (a proxy that
             * checks per method): as a refused Describe, when this tag comes before a failed
             * receive has detached the call (feedd itself refuses Describe first). */
            if (c->srv->state == SRV_CONNECTING && refused_status(c->status))
                c->srv->refused = true;
            note_answer(c->srv, c->status, d);
            /* One that refuses every stream before its first batch would log each retry. */
            client_log(l, c->srv->quiet ? FEED_LOG_DEBUG : FEED_LOG_WARN,
                       "server %s: stream ended (status %d: %s)", c->srv->target, (int)c->status,
                       d ? d : "");
            c->srv->quiet = c->srv->quiet || c->srv->state == SRV_CONNECTING;
            gpr_free(d);
            server_failed(l, c->srv, "stream closed");
        }
        break;
    case TAG_UNARY:
        break;
    }
}

void conn_complete(receiver *rx, call_tag *t, bool ok)
{
    call_ctx *c = t->call;
    if (c->kind == CALL_DESCRIBE)
        on_describe(rx->l, c, ok);
    else
        on_stream_tag(rx, t, ok);
    c->ops--;
    if (c->ops == 0 && (!c->srv || c->kind == CALL_DESCRIBE))
        call_free(c);
}
