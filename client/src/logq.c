/*
 * The loader's log queue: client_log() formats a message and queues it; one
 * log thread per loader (started only when cfg.log_fn is set) calls log_fn
 * with no loader lock held. A callback that takes another lock — Python's
 * GIL, say — therefore cannot deadlock against a training thread waiting for
 * the loader's mu inside next(). Messages keep their order and never two are
 * delivered at once.
 *
 * Bounded: LOG_QUEUE_CAP messages of LOG_MSG_CAP bytes each. When the
 * callback is slower than the loader logs, newer messages are dropped and
 * counted, and the count is delivered as a message of its own once there is
 * room. close() delivers what is queued before it returns. close() called
 * inside log_fn (on the log thread, which cannot join itself) delivers
 * nothing more: the log thread, detached, frees the loader once log_fn
 * returns, with the function close() handed it.
 *
 * Threads: client_log() from any thread, mu held or not (lock order: mu,
 * then q->mu; q->mu is a leaf); the log thread takes only q->mu.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/log.h"
#include "client_impl.h"

static void *log_main(void *arg)
{
    loader *l = arg;
    log_queue *q = &l->logq;
    char msg[LOG_MSG_CAP];
    pthread_mutex_lock(&q->mu);
    for (;;) {
        int level = FEED_LOG_WARN;
        if (q->len) {
            const log_entry *e = &q->entries[q->head];
            level = e->level;
            memcpy(msg, e->text, sizeof(msg));
            q->head = (q->head + 1) % LOG_QUEUE_CAP;
            q->len--;
        } else if (q->dropped) {
            snprintf(msg, sizeof(msg), "%llu log messages dropped (log callback too slow)",
                     (unsigned long long)q->dropped);
            q->dropped = 0;
        } else if (q->stop) {
            break;
        } else {
            pthread_cond_wait(&q->cond, &q->mu);
            continue;
        }
        pthread_mutex_unlock(&q->mu);
        l->cfg.log_fn(l->cfg.log_user, level, msg);
        pthread_mutex_lock(&q->mu);
        if (q->self_close)
            break;
    }
    void (*free_loader)(loader *) = q->self_close ? q->free_loader : NULL;
    pthread_mutex_unlock(&q->mu);
    if (free_loader)
        free_loader(l);
    return NULL;
}

int logq_start(loader *l)
{
    log_queue *q = &l->logq;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->initialised = true;
    if (!l->cfg.log_fn)
        return 0;
    if (pthread_create(&q->thread, NULL, log_main, l))
        return FEED_ENOMEM;
    q->started = true;
    return 0;
}

bool logq_on_log_thread(const loader *l)
{
    return l->logq.started && pthread_equal(pthread_self(), l->logq.thread);
}

void logq_close_from_log_thread(loader *l, void (*free_loader)(loader *l))
{
    log_queue *q = &l->logq;
    pthread_mutex_lock(&q->mu);
    q->stop = q->self_close = true;
    q->free_loader = free_loader;
    pthread_mutex_unlock(&q->mu);
    pthread_detach(q->thread);
    q->started = false;
}

void logq_stop(loader *l)
{
    log_queue *q = &l->logq;
    if (!q->initialised)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->mu);
    if (q->started)
        pthread_join(q->thread, NULL);
    q->started = false;
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->mu);
    q->initialised = false;
}

void client_log(loader *l, int level, const char *fmt, ...)
{
    log_queue *q = &l->logq;
    if (!l->cfg.log_fn || !q->started)
        return;
    char raw[LOG_MSG_CAP], msg[LOG_MSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* A server's status text and target names are quoted raw: escape them as feed_log does. */
    feed_log_escape(msg, sizeof(msg), raw);
    pthread_mutex_lock(&q->mu);
    if (q->len == LOG_QUEUE_CAP) {
        q->dropped++;
    } else {
        log_entry *e = &q->entries[(q->head + q->len) % LOG_QUEUE_CAP];
        e->level = level;
        memcpy(e->text, msg, sizeof(msg));
        q->len++;
        pthread_cond_signal(&q->cond);
    }
    pthread_mutex_unlock(&q->mu);
}
