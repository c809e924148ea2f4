/*
 * Blocking gRPC C core client calls for tests and the wire benchmark; see
 * feedtest_grpc.h. Every call has its own pluck completion queue, so each op
 * is waited for by its own tag and a stream needs no event loop.
 */
#include "feedtest_grpc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "feed/errors.h"

#define STREAM_METHOD "/feed.v1.Feed/Stream"

/* Distinct tags per op kind; the pluck queue is per call. */
static char tag_send, tag_recv, tag_status, tag_unary;

static grpc_channel *channel_with(const char *target, bool bdp_probe)
{
    grpc_arg args[3];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = -1;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL;
    args[1].value.integer = 1;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_HTTP2_BDP_PROBE;
    args[2].value.integer = bdp_probe;
    grpc_channel_args ca = {3, args};
    grpc_channel_credentials *cred = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cred, &ca);
    grpc_channel_credentials_release(cred);
    return ch;
}

grpc_channel *feedtest_channel(const char *target)
{
    return channel_with(target, true);
}

grpc_channel *feedtest_channel_fixed_window(const char *target)
{
    return channel_with(target, false);
}

static gpr_timespec deadline_in(int seconds)
{
    return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(seconds, GPR_TIMESPAN));
}

static int pluck(grpc_completion_queue *cq, void *tag)
{
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : FEED_EIO;
}

static int read_byte_buffer(grpc_byte_buffer *bb, uint8_t **data, size_t *len)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return FEED_EIO;
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(all);
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        grpc_slice_unref(all);
        return FEED_ENOMEM;
    }
    memcpy(p, GRPC_SLICE_START_PTR(all), n);
    grpc_slice_unref(all);
    *data = p;
    *len = n;
    return 0;
}

static grpc_byte_buffer *pack_message(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

int feedtest_channel_ready(grpc_channel *ch, int deadline_s)
{
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline = deadline_in(deadline_s);
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(ch, 1);
    int rc = 0;
    while (st != GRPC_CHANNEL_READY && rc == 0) {
        grpc_channel_watch_connectivity_state(ch, st, deadline, cq, NULL);
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        rc = ev.success ? 0 : FEED_ETIMEDOUT;
        st = grpc_channel_check_connectivity_state(ch, 1);
    }
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    return rc;
}

int feedtest_stream_open(grpc_channel *ch, int deadline_s, feedtest_stream *s)
{
    memset(s, 0, sizeof *s);
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_static_string(STREAM_METHOD);
    s->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq, method, NULL,
                                       deadline_in(deadline_s), NULL);
    grpc_metadata_array_init(&s->md_initial);
    grpc_metadata_array_init(&s->md_trailing);
    grpc_op ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[1].data.recv_status_on_client.trailing_metadata = &s->md_trailing;
    ops[1].data.recv_status_on_client.status = &s->status;
    ops[1].data.recv_status_on_client.status_details = &s->details;
    if (grpc_call_start_batch(s->call, ops, 2, &tag_status, NULL) != GRPC_CALL_OK)
        return FEED_EIO;
    s->status_armed = 1;
    return 0;
}

static int send_bb(feedtest_stream *s, grpc_byte_buffer *bb)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    int rc = FEED_EIO;
    if (grpc_call_start_batch(s->call, &op, 1, &tag_send, NULL) == GRPC_CALL_OK)
        rc = pluck(s->cq, &tag_send);
    grpc_byte_buffer_destroy(bb);
    return rc;
}

int feedtest_stream_send(feedtest_stream *s, const Feed__V1__BatchRequest *req)
{
    return send_bb(s, pack_message(&req->base));
}

int feedtest_stream_open_batch(grpc_channel *ch, int deadline_s, const char *dataset,
                               const Feed__V1__TransformSpec *spec, const char *client_name,
                               const uint64_t *idx, size_t n, feedtest_stream *s)
{
    Feed__V1__SessionOpen open;
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    feed__v1__session_open__init(&open);
    open.dataset = (char *)dataset;
    open.transform = (Feed__V1__TransformSpec *)spec;
    open.seed = 5;
    open.window = 1;
    open.protocol_version = 1;
    open.client_name = (char *)client_name;
    r.open = &open;
    r.batch_id = 1;
    r.epoch = 1;
    r.n_indices = n;
    r.indices = (uint64_t *)idx;
    int rc = feedtest_stream_open(ch, deadline_s, s);
    return rc ? rc : feedtest_stream_send(s, &r);
}

int feedtest_stream_send_raw(feedtest_stream *s, const void *data, size_t len)
{
    grpc_slice sl = grpc_slice_from_copied_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return send_bb(s, bb);
}

int feedtest_stream_writes_done(feedtest_stream *s)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(s->call, &op, 1, &tag_send, NULL) != GRPC_CALL_OK)
        return FEED_EIO;
    return pluck(s->cq, &tag_send);
}

int feedtest_stream_recv_raw(feedtest_stream *s, uint8_t **data, size_t *len)
{
    grpc_byte_buffer *bb = NULL;
    int rc = feedtest_stream_recv_bb(s, &bb);
    if (rc != 1)
        return rc;
    rc = read_byte_buffer(bb, data, len);
    grpc_byte_buffer_destroy(bb);
    return rc < 0 ? rc : 1;
}

int feedtest_stream_recv_bb(feedtest_stream *s, grpc_byte_buffer **bb)
{
    grpc_op ops[2];
    size_t n = 0;
    *bb = NULL;
    memset(ops, 0, sizeof ops);
    if (!s->initial_md_received) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n].data.recv_initial_metadata.recv_initial_metadata = &s->md_initial;
        n++;
        s->initial_md_received = 1;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n].data.recv_message.recv_message = bb;
    n++;
    if (grpc_call_start_batch(s->call, ops, n, &tag_recv, NULL) != GRPC_CALL_OK)
        return FEED_EIO;
    if (pluck(s->cq, &tag_recv) < 0 || !*bb) {
        s->ended = 1;
        return 0;
    }
    s->bytes_received += grpc_byte_buffer_length(*bb);
    return 1;
}

Feed__V1__Batch *feedtest_stream_recv(feedtest_stream *s)
{
    uint8_t *data = NULL;
    size_t len = 0;
    if (feedtest_stream_recv_raw(s, &data, &len) != 1)
        return NULL;
    Feed__V1__Batch *b = feed__v1__batch__unpack(NULL, len, data);
    free(data);
    return b;
}

void feedtest_stream_cancel(feedtest_stream *s)
{
    grpc_call_cancel(s->call, NULL);
}

grpc_status_code feedtest_stream_finish(feedtest_stream *s, char *details, size_t cap)
{
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    if (s->status_armed && pluck(s->cq, &tag_status) == 0)
        code = s->status;
    if (details && cap) {
        size_t n = s->status_armed ? GRPC_SLICE_LENGTH(s->details) : 0;
        if (n >= cap)
            n = cap - 1;
        if (n)
            memcpy(details, GRPC_SLICE_START_PTR(s->details), n);
        details[n] = '\0';
    }
    grpc_slice_unref(s->details);
    grpc_metadata_array_destroy(&s->md_initial);
    grpc_metadata_array_destroy(&s->md_trailing);
    grpc_call_unref(s->call);
    grpc_completion_queue_shutdown(s->cq);
    while (
        grpc_completion_queue_pluck(s->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
        GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(s->cq);
    memset(s, 0, sizeof *s);
    return code;
}

int feedtest_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                   int deadline_s, uint8_t **resp, size_t *resp_len, grpc_status_code *code,
                   char *details, size_t cap)
{
    int rc = FEED_EIO;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice m = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL,
                                               deadline_in(deadline_s), NULL);
    grpc_slice_unref(m);
    grpc_metadata_array md_i, md_t;
    grpc_metadata_array_init(&md_i);
    grpc_metadata_array_init(&md_t);
    grpc_byte_buffer *out = pack_message(req), *in = NULL;
    grpc_slice det = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_i;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_t;
    ops[5].data.recv_status_on_client.status = code;
    ops[5].data.recv_status_on_client.status_details = &det;
    *resp = NULL;
    *resp_len = 0;
    if (grpc_call_start_batch(call, ops, 6, &tag_unary, NULL) != GRPC_CALL_OK)
        goto out;
    if (pluck(cq, &tag_unary) < 0)
        goto out;
    rc = 0;
    if (in)
        rc = read_byte_buffer(in, resp, resp_len);
    if (details && cap) {
        size_t n = GRPC_SLICE_LENGTH(det) < cap ? GRPC_SLICE_LENGTH(det) : cap - 1;
        memcpy(details, GRPC_SLICE_START_PTR(det), n);
        details[n] = '\0';
    }
out:
    if (in)
        grpc_byte_buffer_destroy(in);
    grpc_byte_buffer_destroy(out);
    grpc_slice_unref(det);
    grpc_metadata_array_destroy(&md_i);
    grpc_metadata_array_destroy(&md_t);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    return rc;
}

Feed__V1__DescribeResponse *feedtest_describe(grpc_channel *ch, const char *dataset,
                                              grpc_status_code *code)
{
    Feed__V1__DescribeRequest req = FEED__V1__DESCRIBE_REQUEST__INIT;
    req.dataset = (char *)(dataset ? dataset : "");
    uint8_t *data = NULL;
    size_t len = 0;
    Feed__V1__DescribeResponse *r = NULL;
    if (feedtest_unary(ch, "/feed.v1.Feed/Describe", &req.base, 30, &data, &len, code, NULL, 0) <
        0) {
        *code = GRPC_STATUS_UNAVAILABLE;
        return NULL;
    }
    if (*code == GRPC_STATUS_OK && data)
        r = feed__v1__describe_response__unpack(NULL, len, data);
    free(data);
    return r;
}

int feedtest_health(grpc_channel *ch, const char *service, grpc_status_code *code)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    req.service = (char *)(service ? service : "");
    uint8_t *data = NULL;
    size_t len = 0;
    int st = -1;
    if (feedtest_unary(ch, "/grpc.health.v1.Health/Check", &req.base, 30, &data, &len, code, NULL,
                       0) < 0) {
        *code = GRPC_STATUS_UNAVAILABLE;
        return -1;
    }
    if (*code == GRPC_STATUS_OK && data) {
        Grpc__Health__V1__HealthCheckResponse *r =
            grpc__health__v1__health_check_response__unpack(NULL, len, data);
        if (r) {
            st = (int)r->status;
            grpc__health__v1__health_check_response__free_unpacked(r, NULL);
        }
    }
    free(data);
    return st;
}
