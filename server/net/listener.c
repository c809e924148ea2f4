/*
 * feedd's listening sockets (listener.h). One thread per listener owns the
 * socket and its wake-up pipe; the main thread opens, starts and closes it.
 * The thread blocks in poll() on both; when accept4() fails for want of a
 * resource (EMFILE, ENFILE, ENOBUFS, ENOMEM) it stops polling the socket,
 * which would stay readable and spin, and tries again LISTENER_RETRY_MS
 * later, logging the failures at most once per LISTENER_LOG_MS. Pending
 * connections wait in the kernel's backlog meanwhile; those whose peer gave
 * up are accepted later and end at once. Before that point, a connection
 * whose descriptor lands in the last reserve of the open-file limit is
 * closed at once (the kernel hands out the lowest free number, so such a
 * number means the rest are in use): the descriptors the process needs for
 * its own files and the connections it serves stay free.
 */
#include "listener.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "feed/timeutil.h"

struct feedd_listener {
    int fd;
    int wake[2]; /* closing writes a byte to wake[1] */
    char what[32];
    feedd_listener_fn fn;
    void *arg;
    pthread_t thread;
    bool started;
    int fd_ceiling; /* accepted descriptors at or above this are closed at once */
};

/* Split addr into host and port; an empty or missing host is 0.0.0.0. */
static int split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    const char *p = colon ? colon + 1 : addr;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0) {
        h = "0.0.0.0";
        hl = strlen(h);
    }
    if (hl >= hcap || strlen(p) == 0 || strlen(p) >= pcap || strspn(p, "0123456789") != strlen(p))
        return FEED_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, p);
    return atoi(port) <= 65535 ? 0 : FEED_EINVAL;
}

static int bind_first(const struct addrinfo *ai)
{
    int fd = -1;
    for (; ai && fd < 0; ai = ai->ai_next) {
        int one = 1;
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
            close(fd);
            fd = -1;
        }
    }
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int port = -1;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET)
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return port;
}

int feedd_listener_open(const char *addr, const char *what, feedd_listener **out, int *port)
{
    char host[256], service[8];
    struct addrinfo *res = NULL;
    int rc = split_addr(addr, host, sizeof host, service, sizeof service);
    *out = NULL;
    if (rc != 0)
        return rc;
    feedd_listener *l = calloc(1, sizeof *l);
    if (!l)
        return FEED_ENOMEM;
    l->fd = -1;
    l->wake[0] = l->wake[1] = -1;
    snprintf(l->what, sizeof l->what, "%s", what);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    rc = FEED_EINVAL;
    if (getaddrinfo(host, service, &hints, &res) != 0)
        goto fail;
    rc = FEED_EIO;
    l->fd = bind_first(res);
    freeaddrinfo(res);
    if (l->fd < 0 || pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) != 0)
        goto fail;
    *port = bound_port(l->fd);
    if (*port <= 0)
        goto fail;
    *out = l;
    return 0;
fail:
    FEED_LOGE("%s: cannot listen on %s: %s", what, addr, strerror(errno));
    feedd_listener_close(l);
    return rc;
}

static bool out_of_resources(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* The open-file limit less its reserve (listener.h), read when the thread starts. */
static int fd_ceiling(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        rl.rlim_cur > INT32_MAX)
        return INT32_MAX;
    int limit = (int)rl.rlim_cur;
    int reserve = LISTENER_FD_RESERVE_MIN + limit / LISTENER_FD_RESERVE_SHARE;
    return limit > 2 * reserve ? limit - reserve : limit / 2;
}

static void hand_over(feedd_listener *l, int fd, const struct sockaddr *addr, socklen_t len)
{
    int one = 1;
    char host[64] = "?", port[8] = "?";
    if (addr->sa_family == AF_INET || addr->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* gRPC names a connection it did not accept "fd:N": this line maps N to the peer. */
    if (feed_log_get_level() >= FEED_LOG_DEBUG) {
        getnameinfo(addr, len, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV);
        FEED_LOGD("%s: fd:%d is %s port %s", l->what, fd, host, port);
    }
    l->fn(l->arg, fd, addr, len);
}

static void *accept_main(void *arg)
{
    feedd_listener *l = arg;
    uint64_t failures = 0, last_log_ns = 0, refused = 0, refused_log_ns = 0;
    bool stop = false;
    while (!stop) {
        struct pollfd p[2] = {{l->wake[0], POLLIN, 0}, {l->fd, POLLIN, 0}};
        bool backing_off = failures > 0;
        int n = poll(p, backing_off ? 1 : 2, backing_off ? LISTENER_RETRY_MS : -1);
        if (n < 0 && errno != EINTR) {
            FEED_LOGE("%s: poll: %s", l->what, strerror(errno));
            stop = true;
        }
        if (n > 0 && p[0].revents)
            stop = true;
        while (!stop) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            int fd = accept4(l->fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            int err = fd < 0 ? errno : 0;
            bool drained = err == EAGAIN || err == EWOULDBLOCK;
            if ((fd >= 0 || drained) && failures) {
                FEED_LOGI("%s: accepting again after %llu failed accepts", l->what,
                          (unsigned long long)failures);
                failures = 0;
            }
            if (fd >= l->fd_ceiling) {
                close(fd);
                uint64_t now = feed_now_ns();
                if (refused++ == 0 ||
                    now - refused_log_ns >= (uint64_t)LISTENER_LOG_MS * 1000000u) {
                    FEED_LOGW("%s: refused a connection: descriptor %d is in the reserve kept "
                              "below the open-file limit (%llu refused so far, out of descriptors "
                              "or memory)",
                              l->what, fd, (unsigned long long)refused);
                    refused_log_ns = now;
                }
                continue;
            }
            if (fd >= 0) {
                hand_over(l, fd, (struct sockaddr *)&ss, len);
                continue;
            }
            if (err == EINTR || err == ECONNABORTED || err == EPROTO)
                continue;
            if (!drained) {
                uint64_t now = feed_now_ns();
                if (failures == 0 || now - last_log_ns >= (uint64_t)LISTENER_LOG_MS * 1000000u) {
                    FEED_LOGW("%s: accept: %s (%llu times so far)%s; retrying every %d ms", l->what,
                              strerror(err), (unsigned long long)failures + 1,
                              out_of_resources(err) ? ", out of descriptors or memory" : "",
                              LISTENER_RETRY_MS);
                    last_log_ns = now;
                }
                failures++;
            }
            break;
        }
    }
    return NULL;
}

int feedd_listener_start(feedd_listener *l, feedd_listener_fn fn, void *arg)
{
    l->fn = fn;
    l->arg = arg;
    l->fd_ceiling = fd_ceiling();
    l->started = pthread_create(&l->thread, NULL, accept_main, l) == 0;
    return l->started ? 0 : FEED_ENOMEM;
}

int feedd_listener_fd(const feedd_listener *l)
{
    return l->fd;
}

void feedd_listener_close(feedd_listener *l)
{
    if (l) {
        if (l->started) {
            static const char byte = 1;
            while (write(l->wake[1], &byte, 1) < 0 && errno == EINTR)
                ;
            pthread_join(l->thread, NULL);
        }
        if (l->fd >= 0)
            close(l->fd);
        if (l->wake[0] >= 0)
            close(l->wake[0]);
        if (l->wake[1] >= 0)
            close(l->wake[1]);
        free(l);
    }
}
