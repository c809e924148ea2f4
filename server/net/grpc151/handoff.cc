/*
 * handoff.h in C++: the handler gRPC 1.51 stores is a C++ object
 * (grpc_core::TcpServerFdHandler, src/core/lib/iomgr/tcp_server.h, not an
 * installed header) whose one method takes the descriptor. Its interface is
 * declared here as gRPC declares it: a virtual destructor, then
 * Handle(listener_fd, fd, pending_read) (checked against libgrpc.so.29's
 * vtable for it: two destructor slots, then Handle). Only that call crosses; nothing
 * here allocates, throws or is called by gRPC.
 */
#include "handoff.h"

#include <string.h>

#include "feed/errors.h"

/*
 * gRPC's own declaration, under its own name: a class of feedd's own (or
 * in an anonymous namespace) would let the compiler see that nothing
 * overrides the pure Handle and turn the call into a pure-virtual abort.
 */
namespace grpc_core {
class TcpServerFdHandler {
  public:
    virtual ~TcpServerFdHandler() = default;
    virtual void Handle(int listener_fd, int fd, grpc_byte_buffer *pending_read) = 0;
};
} // namespace grpc_core

namespace {

/* The argument's value is where gRPC writes its handler: one address, never copied. */
void *arg_copy(void *p)
{
    return p;
}

void arg_destroy(void *)
{
}

int arg_cmp(void *a, void *b)
{
    return a < b ? -1 : a > b;
}

const grpc_arg_pointer_vtable arg_vtable = {arg_copy, arg_destroy, arg_cmp};

} // namespace

extern "C" grpc_arg feedd_handoff_arg(feedd_handoff *h)
{
    grpc_arg a;
    memset(&a, 0, sizeof a);
    a.type = GRPC_ARG_POINTER;
    a.key = const_cast<char *>(FEEDD_HANDOFF_PORT);
    a.value.pointer.p = &h->handler;
    a.value.pointer.vtable = &arg_vtable;
    return a;
}

extern "C" int feedd_handoff_add_port(grpc_server *server, feedd_handoff *h,
                                      grpc_server_credentials *creds)
{
    h->handler = nullptr;
    grpc_server_add_http2_port(server, FEEDD_HANDOFF_PORT, creds);
    return h->handler ? 0 : FEED_EIO;
}

extern "C" void feedd_handoff_fd(feedd_handoff *h, int listener_fd, int fd)
{
    static_cast<grpc_core::TcpServerFdHandler *>(h->handler)->Handle(listener_fd, fd, nullptr);
}
