/*
 * The scripted world test_client_sched plays the scheduler (client/src/sched/sched.c)
 * against: a loader struct made by hand with one to four servers up, a
 * transport that records every request, drop and reconnect instead of doing
 * I/O, servers whose replies are Batch messages packed here and handed over
 * as wire.c readers over bytes, the training loop's next()/release()/
 * set_epoch() as scheduler calls, and a clock that only moves when a case
 * moves it (g.now). No sockets, threads or sleeps. Every helper takes and
 * drops the loader's mu as the real caller would.
 */
#ifndef FEED_TESTS_CLIENT_SCHED_SCRIPT_H
#define FEED_TESTS_CLIENT_SCHED_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"
#include "client_impl.h"

#define SIDE 8u
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)
#define CLASSES 4u
#define MAXREQ 1024u
#define MAXN 16u
#define MS 1000000ull
/* The scripted clock starts here; every event's time is T0 plus what the case says. */
#define T0 (1000ull * 1000 * MS)

typedef struct sent {
    uint32_t server;
    uint64_t id;
    uint32_t epoch;
    uint32_t n;
    uint32_t ownership; /* BatchRequest.ownership; 0 unless routed */
    uint64_t idx[MAXN];
} sent;

/* What the scripted transport saw, and the scripted clock. */
typedef struct script_state {
    sent req[MAXREQ];
    uint32_t nreq;
    uint32_t dropped[4];
    uint32_t connects[4];
    bool refuse;
    uint64_t now;
    /* play_epoch's servers: requests answered, and the one each works on (-1: none) since
     * when. Kept from one play_epoch to the next, as a server's queue is. */
    bool answered[MAXREQ];
    int busy[4];
    uint64_t began[4];
} script_state;
extern script_state g;

/* Stand-ins for the servers' live Stream calls, and for the ones they reconnect with. */
extern call_ctx g_streams[4];
extern call_ctx g_new_streams[4];

/* A Batch on its way through a receiver: read up to batch_id, then landed. */
typedef struct arrival {
    uint8_t *msg;
    size_t len;
    feed_buf rest;
    wire_arena arena;
    wire_batch_reader r;
    uint32_t server;
    const call_ctx *from;
    piece *pc; /* NULL: dropped */
    int rc;    /* land_unlocked's */
    char why[160];
} arrival;

/* A loader over `samples` samples in batches of `batch`, nservers servers up with `window`
 * each, epoch 0 planned; g reset, g.now = T0. */
loader *make_loader(uint64_t samples, uint32_t batch, uint32_t nservers, uint32_t window,
                    uint32_t prefetch);
void free_loader(loader *l);
/* What a receiver does after every event, at g.now. */
void dispatch(loader *l);
/* The clock tick, at g.now. */
void tick(loader *l);
/* Server server_index fails (its stream ended), at g.now. */
void fail_server(loader *l, uint32_t server_index);
/* The reply to r, claiming `epoch`, arrives on server_index's stream call `from`. */
void arrive(loader *l, arrival *a, uint32_t server_index, const call_ctx *from, const sent *r,
            uint32_t epoch);
/* Lands an arrival (unlocked, as a receiver does), then reports it; sched_land's rc. */
int land(loader *l, arrival *a);
/* The two halves of land: sched_land unlocked (its rc), then sched_batch_landed with mu and
 * the arrival freed. */
int land_unlocked(loader *l, arrival *a);
void land_report(loader *l, arrival *a);
/* The right reply to r, arrived on `from` and landed. */
void reply_from(loader *l, uint32_t server_index, const call_ctx *from, const sent *r);
/* The same on the stream r was sent on. */
void reply(loader *l, const sent *r);
/* Answers every request of `epoch` still in flight, newest or oldest first, dispatching
 * after each reply (the freed window takes more requests), until none is left; how many. */
uint32_t answer_epoch(loader *l, uint32_t epoch, bool newest_first);
/* The state of the piece whose live request is id, as a slot's (a landed piece: SLOT_READY),
 * while its batch is not landed; then its slot's (SLOT_FREE when none). */
slot_state state_of(loader *l, uint64_t id);
/* next() as loader.c asks it, at g.now: its code; *out the batch on 0; *wait (may be NULL)
 * on SCHED_WAIT. */
int next_at(loader *l, feed_batch **out, uint64_t *wait);
/* release() of b, handed out by next_at. */
void release_at(loader *l, feed_batch *b);
/* set_epoch as loader.c does it (no batch is landing in these scripts). */
void set_epoch_at(loader *l, uint32_t epoch, uint64_t start_batch);
/* Takes the rest of the epoch, answering what is in flight newest first before each next():
 * plan order from `first`, indices as planned, pixels of the right reply (check_batch); then
 * FEED_EEOF. */
void expect_epoch(loader *l, uint32_t epoch, uint64_t first);
/* A server is brought back as conn.c would after connect: Describe answered, a new stream
 * open (SRV_CONNECTING, one batch at a time until a Batch comes back). */
void reconnect(loader *l, uint32_t server_index);
/* Requests sent to server_index from g.req[from] on. */
uint32_t sent_to(uint32_t server_index, uint32_t from);

/* Byte j of sample `index`'s pixels in every scripted reply. */
uint8_t pixel_of(uint64_t index, size_t j);
/* Every sample of b has its own pixels (pixel_of of its index). */
void check_pixels(const feed_batch *b);

/* What play_epoch saw. */
typedef struct played {
    uint64_t elapsed_ns;  /* from the start to the epoch's last batch handed out */
    uint32_t requests[4]; /* requests each server received during the epoch */
    uint64_t hedged;      /* stats.hedged at the end */
} played;
/* Plays epoch `epoch` (set, none of it handed out yet) from batch 0 against servers that
 * each answer their requests one at a time in the order sent, taking service_ns[i] for each
 * (0: server i answers nothing), and a training loop that takes every batch as soon as next()
 * has it and releases it at once. The clock moves 1 ms a step, ticking every CLIENT_TICK_MS;
 * the scheduler dispatches after every event. Checks plan order, indices and pixels of every
 * batch, as expect_epoch does, and ends at FEED_EEOF. */
played play_epoch(loader *l, uint32_t epoch, const uint64_t *service_ns);

#endif
