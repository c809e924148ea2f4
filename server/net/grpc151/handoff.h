/*
 * (server/net/grpc151/: built against gRPC core 29 only, feedd.cmake; used only
 * when that core is the one loaded, service.c.)
 * Handing a connection feedd accepted itself to gRPC's server with any
 * credentials, TLS included. gRPC 1.51's C API takes such a connection
 * (grpc_server_add_channel_from_fd) only without TLS; its chttp2 server
 * also has the path that C++'s ExternalConnectionAcceptor uses: a port
 * named "external:NAME" whose server channel argument NAME (a pointer)
 * receives a handler that takes accepted descriptors, and runs the
 * port's handshakes (TLS) on them. handoff.cc drives that path from C.
 * Thread: the listener's (any one thread at a time per handler).
 */
#ifndef FEED_SERVER_GRPC151_HANDOFF_H
#define FEED_SERVER_GRPC151_HANDOFF_H

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FEEDD_HANDOFF_PORT "external:feedd"

typedef struct feedd_handoff {
    void *handler; /* gRPC's, set by grpc_server_add_http2_port; gRPC deletes it at shutdown */
} feedd_handoff;

/*
 * The server channel argument that grpc_server_create must get for
 * FEEDD_HANDOFF_PORT; h must outlive the server.
 */
grpc_arg feedd_handoff_arg(feedd_handoff *h);
/*
 * Add FEEDD_HANDOFF_PORT to server with creds (before grpc_server_start).
 * 0, or FEED_EIO when gRPC gave no handler.
 */
int feedd_handoff_add_port(grpc_server *server, feedd_handoff *h, grpc_server_credentials *creds);
/*
 * gRPC owns fd from here (it closes it, on failure too). listener_fd is
 * the socket it was accepted on. Only after grpc_server_start and before
 * grpc_server_shutdown_and_notify.
 */
void feedd_handoff_fd(feedd_handoff *h, int listener_fd, int fd);

#ifdef __cplusplus
}
#endif

#endif
