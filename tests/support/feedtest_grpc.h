/*
 * A blocking gRPC C core client for tests and the wire benchmark: one channel
 * per server, one completion queue (pluck) per call, so a thread can own a
 * stream without any event loop. Independent of libfeedclient on purpose: the
 * server is tested against the wire contract, not against our own client.
 * A feedtest_stream is owned by one thread at a time.
 */
#ifndef FEED_TESTS_SUPPORT_FEEDTEST_GRPC_H
#define FEED_TESTS_SUPPORT_FEEDTEST_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "feed.pb-c.h"
#include "health.pb-c.h"

/* Insecure channel, unlimited receive size, its own TCP connection. */
grpc_channel *feedtest_channel(const char *target);
/*
 * The same with gRPC's BDP probing off, so the client's HTTP/2 stream window
 * stays at the protocol's 64 KiB: a message the test does not read stays in
 * flight on the server, however much the connection carried before. With
 * probing on (feedtest_channel) the window follows the measured
 * bandwidth-delay product, with no cap below any batch size (loopback reached
 * 32 MiB after one 63 MB drain), so an unread batch that fits is buffered by
 * the client's transport and the server's send finishes.
 */
grpc_channel *feedtest_channel_fixed_window(const char *target);
/*
 * Connect ch and wait until it is READY (a call started before may fail
 * fast on a connection attempt that failed; the channel retries those),
 * or deadline_s passed: 0 or FEED_ETIMEDOUT.
 */
int feedtest_channel_ready(grpc_channel *ch, int deadline_s);

typedef struct feedtest_stream {
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata_array md_initial;
    grpc_metadata_array md_trailing;
    grpc_status_code status;
    grpc_slice details;
    int status_armed;
    int initial_md_received;
    int ended; /* a RECV_MESSAGE returned no message */
    uint64_t bytes_received;
} feedtest_stream;

/* Open /feed.v1.Feed/Stream with a deadline deadline_s from now. 0 or FEED_EIO. */
int feedtest_stream_open(grpc_channel *ch, int deadline_s, feedtest_stream *s);
/* Pack and send one request; 0, or FEED_EIO when the call is dead. */
int feedtest_stream_send(feedtest_stream *s, const Feed__V1__BatchRequest *req);
/*
 * feedtest_stream_open, then the stream's first request: a session on dataset with spec (seed
 * 5, window 1, protocol 1, client_name) and batch 1 of epoch 1 over idx[0, n). 0, or the
 * open's or the send's error.
 */
int feedtest_stream_open_batch(grpc_channel *ch, int deadline_s, const char *dataset,
                               const Feed__V1__TransformSpec *spec, const char *client_name,
                               const uint64_t *idx, size_t n, feedtest_stream *s);
/* Send raw bytes as one message (malformed-request tests). */
int feedtest_stream_send_raw(feedtest_stream *s, const void *data, size_t len);
/* Half-close. */
int feedtest_stream_writes_done(feedtest_stream *s);
/*
 * Receive the next message as raw bytes (malloc'd into *data, length *len).
 * Returns 1 with a message, 0 at end of stream, FEED_EIO on failure.
 */
int feedtest_stream_recv_raw(feedtest_stream *s, uint8_t **data, size_t *len);
/* As recv_raw without the copy: *bb is the caller's (grpc_byte_buffer_destroy). */
int feedtest_stream_recv_bb(feedtest_stream *s, grpc_byte_buffer **bb);
/* As recv_raw, unpacked: NULL at end of stream or on error. Free with
 * feed__v1__batch__free_unpacked(b, NULL). */
Feed__V1__Batch *feedtest_stream_recv(feedtest_stream *s);
/* Cancel from the client side. */
void feedtest_stream_cancel(feedtest_stream *s);
/* Wait for the status; details copied into buf (NUL-terminated). Releases everything. */
grpc_status_code feedtest_stream_finish(feedtest_stream *s, char *details, size_t cap);

/*
 * A unary call: send req, receive one response packed in *resp (malloc'd) /
 * *resp_len. *code and details get the status. 0 when the call ran (any
 * status), FEED_EIO when it could not be made.
 */
int feedtest_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                   int deadline_s, uint8_t **resp, size_t *resp_len, grpc_status_code *code,
                   char *details, size_t cap);

/* Describe; NULL unless the status was OK (then *code is GRPC_STATUS_OK). */
Feed__V1__DescribeResponse *feedtest_describe(grpc_channel *ch, const char *dataset,
                                              grpc_status_code *code);
/* Health/Check: the serving status, or -1 with *code set when the call failed. */
int feedtest_health(grpc_channel *ch, const char *service, grpc_status_code *code);

#endif
