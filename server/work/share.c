/*
 * Job shares, deficit round robin over jobs and round robin over a job's
 * streams; see share.h. Pure: no locks, no I/O, no clock.
 */
#include "share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"

int feedd_sched_init(feedd_sched *s, uint32_t quantum, uint32_t table_cap)
{
    memset(s, 0, sizeof *s);
    s->quantum = quantum ? quantum : 1;
    s->table = calloc(table_cap ? table_cap : 1, sizeof *s->table);
    if (!s->table)
        return FEED_ENOMEM;
    s->table_cap = table_cap;
    return 0;
}

void feedd_sched_destroy(feedd_sched *s)
{
    free(s->table);
    s->table = NULL;
}

feedd_share *feedd_sched_share_of(feedd_share_member *m)
{
    return m->share ? m->share : &m->own;
}

int feedd_sched_join(feedd_sched *s, feedd_share_member *m, const char *job, uint32_t weight)
{
    int rc = 0;
    feedd_share *sh = NULL, *free_slot = NULL;
    if (weight == 0)
        weight = 1;
    for (uint32_t i = 0; job[0] && i < s->table_cap && !sh; i++) {
        feedd_share *t = &s->table[i];
        if (t->members && strcmp(t->name, job) == 0)
            sh = t;
        else if (!t->members && !free_slot)
            free_slot = t;
    }
    if (!sh && job[0] && free_slot) {
        sh = free_slot;
        memset(sh, 0, sizeof *sh);
        snprintf(sh->name, sizeof sh->name, "%s", job);
    }
    if (!sh) {
        /* No name, or no room: a job of its own, as streams were before jobs. */
        rc = job[0] ? 1 : 0;
        sh = &m->own;
    }
    sh->members++;
    sh->weight = weight;
    m->share = sh;
    return rc;
}

/* The share after sh in the ring, wrapping. */
static feedd_share *share_after(feedd_sched *s, feedd_share *sh)
{
    feed_list_node *n = sh->rr.next ? sh->rr.next : s->ring.first;
    return FEED_LIST_ENTRY(n, feedd_share, rr);
}

static feedd_share_member *member_after(feedd_share *sh, feedd_share_member *m)
{
    feed_list_node *n = m->rr.next ? m->rr.next : sh->ring.first;
    return FEED_LIST_ENTRY(n, feedd_share_member, rr);
}

void feedd_sched_link(feedd_sched *s, feedd_share_member *m)
{
    if (m->linked)
        return;
    feedd_share *sh = feedd_sched_share_of(m);
    /* Just before the cursor: served last in this round, at both levels. */
    feed_list_insert_before(&sh->ring, sh->cursor ? &sh->cursor->rr : NULL, &m->rr);
    if (!sh->cursor)
        sh->cursor = m;
    m->linked = true;
    if (!sh->linked) {
        feed_list_insert_before(&s->ring, s->cursor ? &s->cursor->rr : NULL, &sh->rr);
        if (!s->cursor)
            s->cursor = sh;
        sh->linked = true;
    }
}

void feedd_sched_unlink(feedd_sched *s, feedd_share_member *m)
{
    if (!m->linked)
        return;
    feedd_share *sh = feedd_sched_share_of(m);
    feedd_share_member *next = member_after(sh, m);
    feed_list_remove(&sh->ring, &m->rr);
    if (sh->cursor == m)
        sh->cursor = next == m ? NULL : next;
    m->linked = false;
    if (!sh->cursor) {
        feedd_share *after = share_after(s, sh);
        feed_list_remove(&s->ring, &sh->rr);
        if (s->cursor == sh)
            s->cursor = after == sh ? NULL : after;
        sh->linked = false;
        sh->in_turn = false;
        if (sh->credit > 0)
            sh->credit = 0;
    }
}

void feedd_sched_leave(feedd_sched *s, feedd_share_member *m)
{
    feedd_sched_unlink(s, m);
    feedd_share *sh = feedd_sched_share_of(m);
    if (sh->members)
        sh->members--;
    m->share = NULL;
}

feedd_share_member *feedd_sched_next(feedd_sched *s)
{
    feedd_share *sh = s->cursor;
    if (!sh)
        return NULL;
    if (!sh->in_turn) {
        int64_t add = (int64_t)(sh->weight ? sh->weight : 1) * s->quantum;
        /* A debt is under one claim (<= quantum), so one turn's credit covers it. */
        sh->credit += add;
        sh->in_turn = true;
    }
    return sh->cursor;
}

void feedd_sched_charge(feedd_sched *s, feedd_share_member *m, uint32_t samples)
{
    feedd_share *sh = feedd_sched_share_of(m);
    sh->credit -= samples;
    sh->cursor = member_after(sh, m);
    if (sh->credit <= 0 && s->cursor == sh) {
        sh->in_turn = false;
        s->cursor = share_after(s, sh);
    }
}
