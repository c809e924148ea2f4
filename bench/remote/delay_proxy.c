/*
 * feed-delay-proxy: a TCP proxy on 127.0.0.1 that holds every chunk it
 * forwards for half a round trip in each direction, so that a server on this
 * machine looks --rtt-ms away. For the remote-dataset benchmark
 * (bench/remote/run.sh): one thread and epoll, a few microseconds of CPU per
 * chunk, so that the proxy does not take the cores the comparison measures.
 *
 *   feed-delay-proxy --upstream PORT --rtt-ms MS [--port-file FILE]
 *
 * Prints "port N" on stdout once it listens (port 0: the kernel's choice).
 * Each connection holds at most QUEUE_CAP bytes per direction; past that it
 * stops reading that side until the queue drains. Runs until killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK_MAX (64u << 10)
#define QUEUE_CAP (8u << 20)
#define MAX_EVENTS 64

typedef struct chunk {
    struct chunk *next;
    uint64_t due_ns; /* when it may be written */
    size_t len, off; /* len 0: the sender's end of stream, due at due_ns */
    char data[];
} chunk;

typedef struct pipe_dir pipe_dir;
typedef struct conn conn;

/* One direction: bytes read from `from`, written to `to` once due. */
struct pipe_dir {
    conn *c;
    int from, to;
    chunk *head, *tail;
    size_t queued;
    int reading; /* EPOLLIN wanted on from */
    int blocked; /* a due chunk did not fit: EPOLLOUT wanted on to */
    int done;    /* the end of stream was passed on */
    int eof_seen; /* from reached its end */
};

/* What an epoll event names: one socket of a connection. */
typedef struct conn_end {
    conn *c;
    int side;
} conn_end;

struct conn {
    int fd[2];       /* client, upstream */
    pipe_dir dir[2]; /* client -> upstream, upstream -> client */
    conn_end end[2];
    int closed; /* sockets closed; freed by the main loop's next sweep */
    int hup;    /* 1 + the side that hung up: close once what it sent is delivered */
    conn *next_all;
};

static int g_ep;
static uint64_t g_half_ns;
static conn *g_all;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* epoll interest for fd: EPOLLIN if its reading direction wants bytes, EPOLLOUT if the
 * direction writing to it has a due chunk that did not fit. */
static void rearm(conn *c, int side)
{
    int fd = c->fd[side];
    pipe_dir *rd = &c->dir[side];     /* reads fd */
    pipe_dir *wr = &c->dir[1 - side]; /* writes fd */
    struct epoll_event ev = {0};
    ev.events = (rd->reading ? EPOLLIN : 0u) | (wr->blocked ? EPOLLOUT : 0u);
    ev.data.ptr = &c->end[side];
    epoll_ctl(g_ep, EPOLL_CTL_MOD, fd, &ev);
}

static void conn_close(conn *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    for (int i = 0; i < 2; i++) {
        epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd[i], NULL);
        close(c->fd[i]);
        for (chunk *k = c->dir[i].head; k;) {
            chunk *n = k->next;
            free(k);
            k = n;
        }
        c->dir[i].head = c->dir[i].tail = NULL;
    }
}

static void enqueue(pipe_dir *d, chunk *k)
{
    k->next = NULL;
    k->due_ns = now_ns() + g_half_ns;
    if (d->tail)
        d->tail->next = k;
    else
        d->head = k;
    d->tail = k;
    d->queued += k->len;
}

static void on_readable(conn *c, int side)
{
    pipe_dir *d = &c->dir[side];
    while (d->reading && d->queued < QUEUE_CAP) {
        chunk *k = malloc(sizeof *k + CHUNK_MAX);
        if (!k) {
            conn_close(c);
            return;
        }
        ssize_t r = read(d->from, k->data, CHUNK_MAX);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
            free(k);
            break;
        }
        if (r < 0) {
            free(k);
            conn_close(c);
            return;
        }
        k->len = (size_t)r;
        k->off = 0;
        enqueue(d, k);
        if (r == 0) {
            d->reading = 0;
            d->eof_seen = 1;
        }
    }
    if (d->queued >= QUEUE_CAP)
        d->reading = 0;
    rearm(c, side);
}

/* Writes what is due in d; returns the next due time, or 0 when nothing waits. */
static uint64_t flush_dir(pipe_dir *d, uint64_t now)
{
    conn *c = d->c;
    while (d->head && !c->closed) {
        chunk *k = d->head;
        if (k->due_ns > now)
            return k->due_ns;
        if (k->len == 0) {
            shutdown(d->to, SHUT_WR);
            d->done = 1;
        } else {
            ssize_t w = write(d->to, k->data + k->off, k->len - k->off);
            if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                d->blocked = 1;
                return 0;
            }
            if (w < 0) {
                conn_close(c);
                return 0;
            }
            d->blocked = 0;
            k->off += (size_t)w;
            if (k->off < k->len)
                continue;
        }
        d->head = k->next;
        if (!d->head)
            d->tail = NULL;
        d->queued -= k->len;
        free(k);
        if (!d->reading && d->queued < QUEUE_CAP / 2 && !d->done && !d->eof_seen)
            d->reading = 1;
    }
    if (d->done && c->dir[0].done && c->dir[1].done)
        conn_close(c);
    return 0;
}

static void accept_all(int lfd, int upstream)
{
    for (;;) {
        int cfd = accept(lfd, NULL, NULL);
        if (cfd < 0)
            return;
        int ufd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)upstream),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        conn *c = calloc(1, sizeof *c);
        if (ufd < 0 || !c || connect(ufd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(cfd);
            if (ufd >= 0)
                close(ufd);
            free(c);
            continue;
        }
        nonblock(cfd);
        nonblock(ufd);
        c->fd[0] = cfd;
        c->fd[1] = ufd;
        for (int i = 0; i < 2; i++) {
            c->dir[i] = (pipe_dir){.c = c, .from = c->fd[i], .to = c->fd[1 - i], .reading = 1};
            c->end[i] = (conn_end){c, i};
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &c->end[i]};
            epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd[i], &ev);
        }
        c->next_all = g_all;
        g_all = c;
    }
}

int main(int argc, char **argv)
{
    int upstream = 0, rtt_ms = -1;
    const char *port_file = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--upstream"))
            upstream = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rtt-ms"))
            rtt_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--port-file"))
            port_file = argv[i + 1];
    }
    if (upstream <= 0 || upstream > 65535 || rtt_ms < 0) {
        fprintf(stderr, "usage: feed-delay-proxy --upstream PORT --rtt-ms MS [--port-file F]\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    g_half_ns = (uint64_t)rtt_ms * 500000u;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 512) ||
        getsockname(lfd, (struct sockaddr *)&sa, &len)) {
        perror("feed-delay-proxy: listen");
        return 1;
    }
    g_ep = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(g_ep, EPOLL_CTL_ADD, lfd, &lev);
    printf("port %d\n", ntohs(sa.sin_port));
    fflush(stdout);
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        if (f) {
            fprintf(f, "%d\n", ntohs(sa.sin_port));
            fclose(f);
        }
    }
    for (;;) {
        uint64_t now = now_ns(), next = 0;
        conn **pp = &g_all;
        while (*pp) {
            conn *c = *pp;
            for (int i = 0; i < 2 && !c->closed; i++) {
                uint64_t due = flush_dir(&c->dir[i], now);
                if (due && (!next || due < next))
                    next = due;
            }
            if (!c->closed && c->hup && !c->dir[c->hup - 1].head)
                conn_close(c);
            if (c->closed) {
                *pp = c->next_all;
                free(c);
                continue;
            }
            for (int i = 0; i < 2; i++)
                if (c->hup != 1 + i)
                    rearm(c, i);
            pp = &c->next_all;
        }
        int timeout = -1;
        if (next)
            timeout = (int)((next - now + 999999u) / 1000000u);
        struct epoll_event evs[MAX_EVENTS];
        int n = epoll_wait(g_ep, evs, MAX_EVENTS, timeout);
        for (int i = 0; i < n; i++) {
            conn_end *e = evs[i].data.ptr;
            if (!e)
                accept_all(lfd, upstream);
            else if (!e->c->closed && (evs[i].events & EPOLLERR))
                conn_close(e->c);
            else if (!e->c->closed && (evs[i].events & (EPOLLIN | EPOLLHUP)))
                on_readable(e->c, e->side);
            if (e && !e->c->closed && (evs[i].events & EPOLLHUP) && !e->c->hup) {
                /* Gone both ways: nothing more to read from it or write to it. */
                e->c->hup = 1 + e->side;
                epoll_ctl(g_ep, EPOLL_CTL_DEL, e->c->fd[e->side], NULL);
            }
        }
    }
}
