/*
 * sched_script.h: the scripted transport, servers, training loop and clock
 * of test_client_sched.
 */
#include "sched_script.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed.pb-c.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "plan.h"

static bool script_send(loader *l, server *s, uint64_t id, uint32_t epoch, const uint64_t *idx,
                        uint32_t n, uint32_t ownership, bool encoded)
{
    (void)encoded; /* the scripts run without the decode lane */
    if (g.refuse)
        return false;
    assert_true(g.nreq < MAXREQ && n <= MAXN);
    sent *r = &g.req[g.nreq++];
    r->server = (uint32_t)(s - l->servers);
    r->id = id;
    r->epoch = epoch;
    r->n = n;
    r->ownership = ownership;
    memcpy(r->idx, idx, n * sizeof(*idx));
    return true;
}

static void script_drop(loader *l, server *s)
{
    g.dropped[s - l->servers]++;
}

/* As conn.c's: Describe goes out; the case plays its answer (see reconnect). */
static bool script_connect(loader *l, server *s)
{
    g.connects[s - l->servers]++;
    s->state = SRV_DESCRIBE;
    return true;
}

static const sched_transport script = {
    .send_request = script_send, .drop_server = script_drop, .connect = script_connect};

script_state g;
call_ctx g_streams[4];
call_ctx g_new_streams[4];

loader *make_loader(uint64_t samples, uint32_t batch, uint32_t nservers, uint32_t window,
                    uint32_t prefetch)
{
    memset(&g, 0, sizeof g);
    g.now = T0;
    for (uint32_t i = 0; i < 4; i++)
        g.busy[i] = -1;
    loader *l = calloc(1, sizeof(*l));
    assert_non_null(l);
    feed_loader_config_default(&l->cfg);
    l->cfg.batch_size = batch;
    l->cfg.transform.out_h = l->cfg.transform.out_w = SIDE;
    l->cfg.dtype = FEED_DTYPE_UINT8;
    l->cfg.layout = FEED_LAYOUT_NHWC;
    l->cfg.device = FEED_DEVICE_HOST;
    l->cfg.window_per_server = window;
    l->cfg.prefetch = prefetch;
    l->cfg.seed = 7;
    l->cfg.batch_deadline_ms = 1000;
    l->transport = &script;
    l->num_samples = samples;
    l->num_classes = CLASSES;
    l->out_bytes = (size_t)batch * SIDE * SIDE * 3;
    l->max_message = l->out_bytes + (size_t)batch * 512 + 65536;
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cond, &ca);
    pthread_condattr_destroy(&ca);
    for (uint32_t i = 0; i < nservers; i++) {
        server *s = &l->servers[i];
        snprintf(s->target, sizeof s->target, "script:%u", i);
        s->dns_target = -1;
        s->state = SRV_UP;
        s->ever_tried = true;
        s->stream = &g_streams[i];
        s->window = window;
        s->backoff_ms = CLIENT_BACKOFF_FIRST_MS;
    }
    l->num_servers = nservers;
    l->last_up_ns = l->progress_ns = g.now;
    client_plan plan, ahead;
    assert_int_equal(sched_build_plans(l, 0, 0, false, &plan, &ahead), 0);
    sched_reset_epoch(l, 0, 0, false, &plan, &ahead);
    return l;
}

void free_loader(loader *l)
{
    sched_free_slots(l);
    client_plan_free(&l->plan);
    client_plan_free(&l->ahead);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void dispatch(loader *l)
{
    pthread_mutex_lock(&l->mu);
    sched_dispatch(l, true, g.now);
    pthread_mutex_unlock(&l->mu);
}

void tick(loader *l)
{
    pthread_mutex_lock(&l->mu);
    sched_tick(l, g.now);
    pthread_mutex_unlock(&l->mu);
}

void fail_server(loader *l, uint32_t server_index)
{
    pthread_mutex_lock(&l->mu);
    sched_fail_server(l, &l->servers[server_index], "scripted failure", g.now);
    pthread_mutex_unlock(&l->mu);
}

/* The server's reply to request r, claiming `epoch`: each sample's pixels derived from its
 * index (pixel_of). */
static uint8_t *pack_reply(const sent *r, uint32_t epoch, size_t *len)
{
    Feed__V1__Batch b = FEED__V1__BATCH__INIT;
    size_t bytes = (size_t)r->n * SIDE * SIDE * 3;
    uint8_t *px = malloc(bytes);
    uint32_t labels[MAXN];
    Feed__V1__SampleStatus st[MAXN];
    assert_non_null(px);
    for (uint32_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < SAMPLE_BYTES; j++)
            px[i * SAMPLE_BYTES + j] = pixel_of(r->idx[i], j);
    for (uint32_t i = 0; i < r->n; i++) {
        labels[i] = (uint32_t)(r->idx[i] % CLASSES);
        st[i] = FEED__V1__SAMPLE_STATUS__SAMPLE_OK;
    }
    b.batch_id = r->id;
    b.epoch = epoch;
    b.n_indices = r->n;
    b.indices = (uint64_t *)r->idx;
    b.n_labels = r->n;
    b.labels = labels;
    b.n_status = r->n;
    b.status = st;
    b.height = b.width = SIDE;
    b.channels = 3;
    b.data.len = bytes;
    b.data.data = px;
    b.crc32c = feed_crc32c(0, px, bytes);
    *len = feed__v1__batch__get_packed_size(&b);
    uint8_t *msg = malloc(*len);
    assert_non_null(msg);
    feed__v1__batch__pack(&b, msg);
    free(px);
    return msg;
}

void arrive(loader *l, arrival *a, uint32_t server_index, const call_ctx *from, const sent *r,
            uint32_t epoch)
{
    memset(a, 0, sizeof(*a));
    a->msg = pack_reply(r, epoch, &a->len);
    a->server = server_index;
    a->from = from;
    feed_buf_init(&a->rest, l->max_message);
    assert_int_equal(wire_arena_init(&a->arena, 65536 + (size_t)l->cfg.batch_size * 1024), 0);
    wire_batch_reader_init_bytes(&a->r, a->msg, a->len, &a->rest);
    pthread_mutex_lock(&l->mu);
    a->pc = sched_batch_arrived(l, &l->servers[server_index], &a->r, g.now);
    pthread_mutex_unlock(&l->mu);
}

int land_unlocked(loader *l, arrival *a)
{
    a->rc = a->pc ? sched_land(l, a->pc, &a->r, &a->arena, a->why, sizeof a->why) : 0;
    return a->rc;
}

void land_report(loader *l, arrival *a)
{
    if (a->pc) {
        pthread_mutex_lock(&l->mu);
        sched_batch_landed(l, &l->servers[a->server], a->from, a->pc, a->rc, a->why, g.now);
        pthread_mutex_unlock(&l->mu);
    }
    wire_batch_reader_destroy(&a->r);
    wire_arena_free(&a->arena);
    feed_buf_free(&a->rest);
    free(a->msg);
}

int land(loader *l, arrival *a)
{
    int rc = land_unlocked(l, a);
    land_report(l, a);
    return rc;
}

void reply_from(loader *l, uint32_t server_index, const call_ctx *from, const sent *r)
{
    arrival a;
    arrive(l, &a, server_index, from, r, r->epoch);
    assert_int_equal(land(l, &a), 0);
}

void reply(loader *l, const sent *r)
{
    reply_from(l, r->server, l->servers[r->server].stream, r);
}

uint32_t answer_epoch(loader *l, uint32_t epoch, bool newest_first)
{
    uint32_t answered = 0;
    for (;;) {
        int pick = -1;
        for (uint32_t i = 0; i < g.nreq; i++) {
            if (g.req[i].epoch != epoch || state_of(l, g.req[i].id) != SLOT_INFLIGHT)
                continue;
            if (pick < 0 || newest_first)
                pick = (int)i;
        }
        if (pick < 0)
            return answered;
        reply(l, &g.req[pick]);
        answered++;
        dispatch(l);
    }
}

slot_state state_of(loader *l, uint64_t id)
{
    static const slot_state of_piece[] = {[PIECE_PENDING] = SLOT_PENDING,
                                          [PIECE_INFLIGHT] = SLOT_INFLIGHT,
                                          [PIECE_LANDING] = SLOT_LANDING,
                                          [PIECE_DONE] = SLOT_READY};
    for (uint32_t i = 0; i < l->num_slots; i++) {
        slot *sl = &l->slots[i];
        for (uint32_t k = 0; k < sl->num_pieces; k++) {
            if (sl->pieces[k].request_id != id)
                continue;
            bool active = sl->state == SLOT_PENDING || sl->state == SLOT_INFLIGHT ||
                          sl->state == SLOT_LANDING;
            return active ? of_piece[sl->pieces[k].state] : sl->state;
        }
    }
    return SLOT_FREE;
}

int next_at(loader *l, feed_batch **out, uint64_t *wait)
{
    slot *sl = NULL;
    uint64_t w = 0;
    pthread_mutex_lock(&l->mu);
    int rc = sched_next(l, g.now, g.now, &sl, &w);
    if (rc == 0)
        sched_dispatch(l, true, g.now); /* what the dispatch thread then does */
    pthread_mutex_unlock(&l->mu);
    *out = rc == 0 ? &sl->batch : NULL;
    if (wait)
        *wait = w;
    return rc == 0 ? sl->result : rc;
}

void release_at(loader *l, feed_batch *b)
{
    pthread_mutex_lock(&l->mu);
    slot *sl = NULL;
    for (uint32_t i = 0; i < l->num_slots; i++)
        if (&l->slots[i].batch == b)
            sl = &l->slots[i];
    assert_non_null(sl);
    assert_int_equal(sl->state, SLOT_HANDED);
    sched_release(l, sl);
    sched_dispatch(l, true, g.now); /* what the dispatch thread then does */
    pthread_mutex_unlock(&l->mu);
}

void set_epoch_at(loader *l, uint32_t epoch, uint64_t start_batch)
{
    bool keep = sched_keeps_ahead(l, epoch, start_batch);
    client_plan plan, ahead;
    assert_int_equal(sched_build_plans(l, epoch, start_batch, keep, &plan, &ahead), 0);
    pthread_mutex_lock(&l->mu);
    sched_reset_epoch(l, epoch, start_batch, keep, &plan, &ahead);
    sched_dispatch(l, true, g.now); /* the dispatch thread */
    pthread_mutex_unlock(&l->mu);
}

/* Checks that b is batch k of plan p, as the right reply made it. */
uint8_t pixel_of(uint64_t index, size_t j)
{
    return (uint8_t)(index * 31 + j * 7);
}

void check_pixels(const feed_batch *b)
{
    const uint8_t *px = b->data;
    for (uint32_t i = 0; i < b->n; i++)
        for (size_t j = 0; j < SAMPLE_BYTES; j++)
            assert_int_equal(px[i * SAMPLE_BYTES + j], pixel_of(b->indices[i], j));
}

static void check_batch(const feed_batch *b, const client_plan *p, uint32_t epoch, uint64_t k)
{
    const uint32_t *want;
    uint32_t n;
    client_plan_batch(p, k, &want, &n);
    assert_int_equal(b->batch_number, k);
    assert_int_equal(b->epoch, epoch);
    assert_int_equal(b->n, n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(b->indices[i], want[i]);
        assert_int_equal(b->labels[i], want[i] % CLASSES);
    }
    check_pixels(b);
}

void expect_epoch(loader *l, uint32_t epoch, uint64_t first)
{
    client_plan p;
    assert_int_equal(
        client_plan_build(&p, l->num_samples, l->cfg.seed, epoch, 0, 1, l->cfg.batch_size, false),
        0);
    for (uint64_t k = first; k < p.batches; k++) {
        answer_epoch(l, epoch, true);
        feed_batch *b = NULL;
        assert_int_equal(next_at(l, &b, NULL), 0);
        check_batch(b, &p, epoch, k);
        release_at(l, b);
        dispatch(l);
    }
    feed_batch *b = NULL;
    assert_int_equal(next_at(l, &b, NULL), FEED_EEOF);
    client_plan_free(&p);
}

void reconnect(loader *l, uint32_t server_index)
{
    server *s = &l->servers[server_index];
    assert_int_equal(s->state, SRV_DESCRIBE);
    s->stream = &g_new_streams[server_index];
    s->state = SRV_CONNECTING;
    s->outstanding = 0;
}

uint32_t sent_to(uint32_t server_index, uint32_t from)
{
    uint32_t n = 0;
    for (uint32_t i = from; i < g.nreq; i++)
        n += g.req[i].server == server_index;
    return n;
}

played play_epoch(loader *l, uint32_t epoch, const uint64_t *service_ns)
{
    played out;
    memset(&out, 0, sizeof out);
    client_plan p;
    assert_int_equal(
        client_plan_build(&p, l->num_samples, l->cfg.seed, epoch, 0, 1, l->cfg.batch_size, false),
        0);
    uint32_t first = g.nreq;
    uint64_t start = g.now, k = 0;
    dispatch(l);
    while (k < p.batches) {
        g.now += MS;
        assert_true(g.now - start < 600000 * MS);
        if ((g.now - start) % (CLIENT_TICK_MS * MS) == 0)
            tick(l);
        for (uint32_t s = 0; s < l->num_servers && s < 4; s++) {
            if (!service_ns[s])
                continue;
            if (g.busy[s] >= 0 && g.now - g.began[s] >= service_ns[s]) {
                g.answered[g.busy[s]] = true;
                reply(l, &g.req[g.busy[s]]);
                g.busy[s] = -1;
                dispatch(l);
            }
            for (uint32_t i = 0; i < g.nreq && g.busy[s] < 0; i++) {
                if (g.req[i].server == s && !g.answered[i]) {
                    g.busy[s] = (int)i;
                    g.began[s] = g.now;
                }
            }
        }
        for (;;) {
            feed_batch *b = NULL;
            int rc = next_at(l, &b, NULL);
            if (rc == SCHED_WAIT)
                break;
            assert_int_equal(rc, 0);
            check_batch(b, &p, epoch, k++);
            release_at(l, b);
            dispatch(l);
            if (k == p.batches) {
                out.elapsed_ns = g.now - start;
                break;
            }
        }
    }
    feed_batch *b = NULL;
    assert_int_equal(next_at(l, &b, NULL), FEED_EEOF);
    for (uint32_t i = first; i < g.nreq; i++)
        out.requests[g.req[i].server]++;
    out.hedged = l->stats.hedged;
    client_plan_free(&p);
    return out;
}
