/*
 * Job shares: the order in which the worker pool serves its queues, as a
 * core without threads, jobs or clocks (pool.c holds the lock and the work).
 *
 * Users say "job": every stream of one training run sends the same
 * SessionOpen.job. Here that is a share (in pool.h a feedd_job is one batch).
 * Two levels:
 *  - shares with work are served deficit round robin counted in samples: a
 *    share's turn adds weight x quantum samples of credit, each claim spends
 *    the samples it takes, and the share passes the turn on once its credit is
 *    spent. quantum is at least the largest claim, so one turn always allows
 *    a claim and credit never falls below -quantum; a share that runs out of
 *    work keeps a debt and drops a surplus (a job cannot bank credit while idle).
 *    Over any stretch in which two shares both have work, each gets samples
 *    in proportion to its weight, within one turn (weight x quantum) plus one claim;
 *  - inside a share, its members (one per stream) with work take one claim
 *    each in turn: the per-stream round robin the pool had before jobs.
 * A stream with no job name is a share of its own (the one embedded in its
 * member), so old clients are scheduled as before, one share per stream.
 * Named shares live in a table of table_cap made at init: a stream that
 * names a new job while the table is full is served as a job of its own
 * (join says so; the pool logs and counts it).
 *
 * Not thread-safe: the caller serializes every call (pool.c: under its mu).
 * A member is zeroed by its owner before its first use and must have no work
 * linked when it leaves.
 */
#ifndef FEED_SERVER_SHARE_H
#define FEED_SERVER_SHARE_H

#include <stdbool.h>
#include <stdint.h>

#include "feed/list.h"
#include "feed/names.h"

/* SessionOpen.job: a name as feed/names.h has it (request.c checks); job_weight
 * 1..FEEDD_JOB_WEIGHT_MAX. */
#define FEEDD_JOB_WEIGHT_MAX 100

typedef struct feedd_share_member feedd_share_member;

typedef struct feedd_share {
    char name[FEED_NAME_MAX + 1]; /* "": a stream's own share */
    uint32_t weight;              /* 1..FEEDD_JOB_WEIGHT_MAX; 0 is taken as 1 */
    uint32_t members;             /* named: streams joined; 0 = a free table slot */
    int label;                    /* its metrics label (metrics.h), set by the pool */
    feed_list ring;               /* of feedd_share_member with work, by rr */
    feedd_share_member *cursor;   /* the member to serve next; NULL = no work */
    feed_list_node rr;            /* in the scheduler's ring while linked */
    bool linked;
    bool in_turn;   /* its credit was added for the turn it is in */
    int64_t credit; /* samples it may still claim this turn; may be negative (a debt) */
} feedd_share;

/* A stream's place in the order; embedded in its pool queue. */
struct feedd_share_member {
    feedd_share *share; /* NULL before join: its own share, weight 1 */
    feedd_share own;
    feed_list_node rr; /* in its share's ring while linked */
    bool linked;       /* it has unclaimed samples */
};

typedef struct feedd_sched {
    feed_list ring;      /* of feedd_share with work, by rr */
    feedd_share *cursor; /* the share whose turn it is; NULL = no work */
    uint32_t quantum;    /* samples per turn per unit of weight; >= the largest claim */
    feedd_share *table;  /* named shares */
    uint32_t table_cap;
} feedd_sched;

/* 0 or FEED_ENOMEM. */
int feedd_sched_init(feedd_sched *s, uint32_t quantum, uint32_t table_cap);
void feedd_sched_destroy(feedd_sched *s);
/*
 * m (zeroed, or left) joins the job called job with weight (0 = 1): a named
 * share shared with the other streams of that job, or its own share for "".
 * The weight becomes the share's. 0, or 1 when the table is full and m was
 * given its own share instead.
 */
int feedd_sched_join(feedd_sched *s, feedd_share_member *m, const char *job, uint32_t weight);
/* m leaves its share (unlinked first if it still has work linked). */
void feedd_sched_leave(feedd_sched *s, feedd_share_member *m);
/* The share m is served under. */
feedd_share *feedd_sched_share_of(feedd_share_member *m);
/* m has work: join the order (last of this round, in its share and its share in the ring). */
void feedd_sched_link(feedd_sched *s, feedd_share_member *m);
/* m has no more work: leave the order. */
void feedd_sched_unlink(feedd_sched *s, feedd_share_member *m);
/* The member to serve next, its share's turn started if it was not; NULL = no work. */
feedd_share_member *feedd_sched_next(feedd_sched *s);
/* m (from next) had `samples` (1..quantum) claimed: spend them and move the order on. */
void feedd_sched_charge(feedd_sched *s, feedd_share_member *m, uint32_t samples);

#endif
