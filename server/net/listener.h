/*
 * A TCP listening socket of feedd's own and the thread that accepts on it,
 * handing each connection to a callback (gRPC's server, the metrics
 * server). It exists because gRPC core 1.51 stops accepting for good after
 * one accept4() error such as EMFILE, and libmicrohttpd busy-loops on it:
 * here an accept that fails for lack of descriptors or memory is retried
 * every LISTENER_RETRY_MS and logged at most once per LISTENER_LOG_MS, so
 * the port works again as soon as descriptors free up. A connection that
 * would take one of the last LISTENER_FD_RESERVE_MIN + limit /
 * LISTENER_FD_RESERVE_SHARE descriptors of the open-file limit is closed at
 * once, so that the connections already served and the dataset's files
 * still get theirs.
 */
#ifndef FEED_SERVER_LISTENER_H
#define FEED_SERVER_LISTENER_H

#include <sys/socket.h>

#define LISTENER_RETRY_MS 100
#define LISTENER_LOG_MS 10000
#define LISTENER_FD_RESERVE_MIN 16
#define LISTENER_FD_RESERVE_SHARE 64

typedef struct feedd_listener feedd_listener;

/*
 * Called on the listener's thread with a connected, non-blocking,
 * close-on-exec socket that it now owns (it must close it, or hand it to
 * something that will).
 */
typedef void (*feedd_listener_fn)(void *arg, int fd, const struct sockaddr *addr,
                                  socklen_t addrlen);

/*
 * Bind and listen on addr ("HOST:PORT", "[V6]:PORT", ":PORT" or "PORT";
 * no host means 0.0.0.0; port 0 = ephemeral). what names it in logs.
 * *port gets the bound port. 0, FEED_EINVAL (bad address), FEED_EIO or
 * FEED_ENOMEM. Nothing is accepted before feedd_listener_start.
 */
int feedd_listener_open(const char *addr, const char *what, feedd_listener **out, int *port);
/* Start the accepting thread. 0 or FEED_ENOMEM. */
int feedd_listener_start(feedd_listener *l, feedd_listener_fn fn, void *arg);
/* The listening socket (gRPC's external connections name it). */
int feedd_listener_fd(const feedd_listener *l);
/* Stop the thread (no callback runs after this returns), close the socket, free. NULL is fine. */
void feedd_listener_close(feedd_listener *l);

#endif
