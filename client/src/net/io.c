/*
 * The transport's threads: 2 to CLIENT_MAX_RECEIVERS receivers that all run
 * the loader's one completion queue (one can poll gRPC while others copy
 * pixels), each finished op handed to conn.c (conn_complete), the clock
 * (DNS results, the scheduler's tick) and a dispatch; and the dispatch
 * thread, which sends what the training thread's calls made room for
 * (conn_dispatch_soon), so that thread never starts a gRPC operation. The
 * loader's mu held except while a receiver polls or lands (client_impl.h).
 */
#include <grpc/support/time.h>

#include "feed/errors.h"
#include "feed/timeutil.h"
#include "client_impl.h"
#include "trust.h"

/* Timers: DNS results, then the scheduler's clock (deadlines, retries, availability). */
static void tick(loader *l, uint64_t now)
{
    servers_apply_dns(l);
    sched_tick(l, now);
}

static void *io_main(void *arg)
{
    receiver *rx = arg;
    loader *l = rx->l;
    if (l->gpu)
        client_gpu_bind_thread(l->gpu);
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop) {
            for (uint32_t i = 0; i < l->num_servers; i++) {
                server *s = &l->servers[i];
                if (s->describe)
                    conn_abandon(s->describe);
                if (s->stream)
                    conn_abandon(s->stream);
                s->describe = s->stream = NULL;
                s->state = SRV_DOWN;
            }
            if (l->live_calls == 0)
                break;
        }
        pthread_mutex_unlock(&l->mu);
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(CLIENT_TICK_MS, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(l->cq, until, NULL);
        pthread_mutex_lock(&l->mu);
        if (ev.type == GRPC_OP_COMPLETE)
            conn_complete(rx, ev.tag, ev.success != 0);
        uint64_t now = feed_now_ns();
        if (now - l->last_tick_ns >= CLIENT_TICK_MS * 1000000ull) {
            l->last_tick_ns = now;
            tick(l, now);
        }
        sched_dispatch(l, true, now);
        pthread_cond_broadcast(&l->cond);
    }
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void conn_dispatch_soon(loader *l)
{
    l->dispatch_due = true;
    pthread_cond_signal(&l->dispatch_cond);
}

/* The dispatch thread: sends what next(), release() and set_epoch() made room for. */
static void *dispatch_main(void *arg)
{
    loader *l = arg;
    if (l->gpu)
        client_gpu_bind_thread(l->gpu);
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (!l->dispatch_due) {
            pthread_cond_wait(&l->dispatch_cond, &l->mu);
            continue;
        }
        l->dispatch_due = false;
        sched_dispatch(l, true, feed_now_ns());
        pthread_cond_broadcast(&l->cond);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int conn_start(loader *l)
{
    int trc = client_trust_open(l);
    if (trc)
        return trc;
    l->cq = grpc_completion_queue_create_for_next(NULL);
    if (!l->cq)
        return FEED_ENOMEM;
    uint32_t n = l->num_servers + 1;
    n = n < CLIENT_MIN_RECEIVERS ? CLIENT_MIN_RECEIVERS : n;
    n = n > CLIENT_MAX_RECEIVERS ? CLIENT_MAX_RECEIVERS : n;
    for (uint32_t i = 0; i < n; i++) {
        receiver *rx = &l->receivers[i];
        rx->l = l;
        feed_buf_init(&rx->rbuf, l->max_message);
        l->num_receivers++;
        int rc = wire_arena_init(&rx->arena, 65536 + (size_t)l->cfg.batch_size * 1024);
        if (rc)
            return rc;
        if (pthread_create(&rx->thread, NULL, io_main, rx))
            return FEED_ENOMEM;
        rx->started = true;
    }
    if (pthread_create(&l->dispatch_thread, NULL, dispatch_main, l))
        return FEED_ENOMEM;
    l->dispatch_started = true;
    return 0;
}

void conn_stop(loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->dispatch_cond);
    pthread_mutex_unlock(&l->mu);
    if (l->dispatch_started)
        pthread_join(l->dispatch_thread, NULL);
    l->dispatch_started = false;
    for (uint32_t i = 0; i < l->num_receivers; i++) {
        receiver *rx = &l->receivers[i];
        if (rx->started)
            pthread_join(rx->thread, NULL);
        rx->started = false;
        wire_arena_free(&rx->arena);
        feed_buf_free(&rx->rbuf);
    }
    l->num_receivers = 0;
    for (uint32_t i = 0; i < l->num_servers; i++) {
        if (l->servers[i].channel)
            grpc_channel_destroy(l->servers[i].channel);
        l->servers[i].channel = NULL;
    }
    if (l->cq) {
        grpc_completion_queue_shutdown(l->cq);
        for (;;) {
            grpc_event ev =
                grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN)
                break;
        }
        grpc_completion_queue_destroy(l->cq);
        l->cq = NULL;
    }
    client_trust_close(l);
}
