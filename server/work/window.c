/*
 * The share window; see window.h for what it keeps, the bound and the
 * threads. Everything below is guarded by w->mu. Memory is allocated and
 * freed only outside it: a lookup that inserts takes the caller's spare
 * header, a reservation evicts under the lock into a local list and frees
 * that list after unlocking, before its own malloc, so the bytes allocated
 * never pass the budget either.
 */
#include "window.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "feed/errors.h"
#include "feed/list.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "metrics.h"
#include "share.h"

#define BUCKETS 4096u
/* What malloc adds to every chunk (glibc: one size word, 16-byte granules). */
#define MALLOC_OVERHEAD 16u

typedef enum { DECODING, READY, FAILED } entry_state;

struct feedd_window_entry {
    feedd_window_entry *hnext; /* its bucket's chain while in the table */
    feed_list_node fifo;       /* w->fifo while in the table; a free list after */
    uint32_t ds;
    uint64_t index;
    int group;
    uint32_t gen;     /* its group's gen when inserted */
    uint64_t readers; /* members that have read it (decoded it, or hit) */
    unsigned refs;    /* workers decoding, waiting on or reading it */
    entry_state state;
    bool in_table;
    uint64_t source;
    size_t charge;             /* bytes counted against the budget */
    uint8_t *pixels;           /* its own pixels, or NULL */
    feedd_cache_entry *cached; /* or the cache's entry that holds them */
    feed_decoded img;
};

typedef struct member {
    char job[FEED_NAME_MAX + 1]; /* "" with streams > 0: a stream that is a job of its own */
    uint32_t streams;                 /* 0: a free seat */
} member;

typedef struct group {
    char share[FEED_NAME_MAX + 1];
    uint32_t ds;
    uint32_t gen;     /* counts reuses of this slot, so old evictions are not taken for its own */
    uint32_t streams; /* 0: a free slot */
    uint64_t live;    /* bit m: member m has a stream */
    member members[FEEDD_WINDOW_MEMBERS];
} group;

/* An eviction remembered: who had read (ds, index) of group/gen. */
typedef struct recent {
    uint64_t index;
    uint64_t readers;
    uint32_t ds, gen;
    int group; /* -1: an empty record */
} recent;

struct feedd_window {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* an entry left DECODING */
    uint64_t budget;
    uint64_t used;      /* mirrored in feedd_m.share_window_bytes, updated under mu */
    feedd_cache *cache; /* NULL: no dataset cached */
    uint32_t side[FEEDD_MAX_DATASETS];
    feedd_window_entry **buckets;
    feed_list fifo; /* entries in the table, oldest first */
    group *groups;
    recent recents[FEEDD_WINDOW_RECENT];
    uint32_t next_recent;
};

size_t feedd_window_charge(size_t pixel_bytes)
{
    size_t head = (sizeof(feedd_window_entry) + MALLOC_OVERHEAD + 15) & ~(size_t)15;
    size_t pix = pixel_bytes ? (pixel_bytes + MALLOC_OVERHEAD + 15) & ~(size_t)15 : 0;
    return head + pix;
}

static uint32_t bucket_of(uint32_t ds, uint64_t index)
{
    uint64_t h = (index ^ ((uint64_t)ds << 56)) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 40) % BUCKETS;
}

int feedd_window_new(uint64_t budget_bytes, feedd_cache *cache, feedd_window **out)
{
    feedd_window *w = calloc(1, sizeof *w);
    if (!w)
        return FEED_ENOMEM;
    w->buckets = calloc(BUCKETS, sizeof *w->buckets);
    w->groups = calloc(FEEDD_WINDOW_GROUPS, sizeof *w->groups);
    if (!w->buckets || !w->groups || feed_cond_init(&w->cv) != 0) {
        free(w->buckets);
        free(w->groups);
        free(w);
        return FEED_ENOMEM;
    }
    pthread_mutex_init(&w->mu, NULL);
    w->budget = budget_bytes;
    w->cache = cache;
    for (uint32_t i = 0; i < FEEDD_WINDOW_RECENT; i++)
        w->recents[i].group = -1;
    *out = w;
    return 0;
}

static void entry_free(feedd_window *w, feedd_window_entry *e)
{
    if (e->cached)
        feedd_cache_release(w->cache, e->cached);
    free(e->pixels);
    free(e);
}

/* Under mu. */
static void uncharge(feedd_window *w, uint64_t bytes)
{
    w->used -= bytes;
    feedd_gauge(&feedd_m.share_window_bytes, -(int64_t)bytes);
}

/*
 * Frees entries collected under the lock (by fifo), then gives back the bytes
 * they still hold (an evicted entry's went to the reservation that evicted it).
 */
static void free_list(feedd_window *w, feed_list *dead)
{
    uint64_t bytes = 0;
    while (!feed_list_empty(dead)) {
        feedd_window_entry *e =
            FEED_LIST_ENTRY(feed_list_pop_front(dead), feedd_window_entry, fifo);
        bytes += e->charge;
        entry_free(w, e);
    }
    if (!bytes)
        return;
    pthread_mutex_lock(&w->mu);
    uncharge(w, bytes);
    pthread_mutex_unlock(&w->mu);
}

void feedd_window_free(feedd_window *w)
{
    if (!w)
        return;
    feed_list dead = {NULL, NULL};
    while (!feed_list_empty(&w->fifo)) {
        feed_list_node *n = feed_list_pop_front(&w->fifo);
        feed_list_push_back(&dead, n);
    }
    free_list(w, &dead);
    free(w->buckets);
    free(w->groups);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

int feedd_window_add_dataset(feedd_window *w, uint32_t ds, uint32_t side)
{
    if (ds >= FEEDD_MAX_DATASETS || side == 0 || w->side[ds])
        return FEED_EINVAL;
    w->side[ds] = side;
    return 0;
}

uint32_t feedd_window_side(const feedd_window *w, uint32_t ds)
{
    return w && ds < FEEDD_MAX_DATASETS ? w->side[ds] : 0;
}

uint64_t feedd_window_used(feedd_window *w)
{
    pthread_mutex_lock(&w->mu);
    uint64_t used = w->used;
    pthread_mutex_unlock(&w->mu);
    return used;
}

/* Take e out of its bucket and the FIFO (under mu). */
static void unlink_entry(feedd_window *w, feedd_window_entry *e)
{
    feedd_window_entry **p = &w->buckets[bucket_of(e->ds, e->index)];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    e->hnext = NULL;
    feed_list_remove(&w->fifo, &e->fifo);
    e->in_table = false;
}

/* e leaves the table; onto *dead when nobody holds it (under mu). */
static void withdraw(feedd_window *w, feedd_window_entry *e, feed_list *dead)
{
    if (e->in_table)
        unlink_entry(w, e);
    if (e->refs == 0)
        feed_list_push_back(dead, &e->fifo);
}

/* Every live member of its group has read it (a group that went away has none). */
static bool read_by_all(const feedd_window *w, const feedd_window_entry *e)
{
    const group *g = &w->groups[e->group];
    return g->gen != e->gen || (g->live & ~e->readers) == 0;
}

int feedd_window_join(feedd_window *w, uint32_t ds, const char *share, const char *job,
                      feedd_window_seat *seat)
{
    int rc = FEED_EEXHAUSTED;
    *seat = FEEDD_WINDOW_NO_SEAT;
    pthread_mutex_lock(&w->mu);
    int gi = -1, free_gi = -1;
    for (int i = 0; i < FEEDD_WINDOW_GROUPS; i++) {
        group *g = &w->groups[i];
        if (g->streams && g->ds == ds && strcmp(g->share, share) == 0) {
            gi = i;
            break;
        }
        if (!g->streams && free_gi < 0)
            free_gi = i;
    }
    if (gi < 0 && free_gi >= 0) {
        gi = free_gi;
        group *g = &w->groups[gi];
        snprintf(g->share, sizeof g->share, "%s", share);
        g->ds = ds;
        g->gen++;
        g->live = 0;
    }
    if (gi >= 0) {
        group *g = &w->groups[gi];
        int mi = -1, free_mi = -1;
        for (int i = 0; i < FEEDD_WINDOW_MEMBERS; i++) {
            member *m = &g->members[i];
            if (m->streams && job[0] && strcmp(m->job, job) == 0) {
                mi = i;
                break;
            }
            if (!m->streams && free_mi < 0)
                free_mi = i;
        }
        if (mi < 0)
            mi = free_mi;
        if (mi >= 0) {
            member *m = &g->members[mi];
            if (!m->streams)
                snprintf(m->job, sizeof m->job, "%s", job);
            m->streams++;
            g->streams++;
            g->live |= 1ull << mi;
            *seat = (feedd_window_seat){gi, mi};
            rc = 0;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void feedd_window_leave(feedd_window *w, feedd_window_seat *seat)
{
    if (!w || seat->group < 0)
        return;
    feed_list dead = {NULL, NULL};
    pthread_mutex_lock(&w->mu);
    group *g = &w->groups[seat->group];
    member *m = &g->members[seat->member];
    g->streams--;
    if (--m->streams == 0) {
        uint64_t bit = 1ull << seat->member;
        g->live &= ~bit;
        /* Its seat may go to another job: forget what it read, and let go of what only it
         * had not. */
        for (feed_list_node *n = w->fifo.first; n;) {
            feedd_window_entry *e = FEED_LIST_ENTRY(n, feedd_window_entry, fifo);
            n = n->next;
            if (e->group != seat->group)
                continue;
            e->readers &= ~bit;
            if (e->state == READY && read_by_all(w, e))
                withdraw(w, e, &dead);
        }
        for (uint32_t i = 0; i < FEEDD_WINDOW_RECENT; i++)
            if (w->recents[i].group == seat->group)
                w->recents[i].readers &= ~bit;
    }
    pthread_mutex_unlock(&w->mu);
    free_list(w, &dead);
    *seat = FEEDD_WINDOW_NO_SEAT;
}

feedd_window_entry *feedd_window_spare_new(void)
{
    return calloc(1, sizeof(feedd_window_entry));
}

void feedd_window_spare_free(feedd_window_entry *e)
{
    free(e);
}

/* Group gi's entry for (ds, index): each group's readers are its own members. */
static feedd_window_entry *find(feedd_window *w, int gi, uint32_t ds, uint64_t index)
{
    feedd_window_entry *e = w->buckets[bucket_of(ds, index)];
    while (e && (e->index != index || e->ds != ds || e->group != gi || e->gen != w->groups[gi].gen))
        e = e->hnext;
    return e;
}

static recent *find_recent(feedd_window *w, int gi, uint32_t ds, uint64_t index)
{
    for (uint32_t i = 0; i < FEEDD_WINDOW_RECENT; i++) {
        recent *r = &w->recents[i];
        if (r->group == gi && r->index == index && r->ds == ds && r->gen == w->groups[gi].gen)
            return r;
    }
    return NULL;
}

/* Evict the oldest unreferenced finished entries until `bytes` more fit (under mu). */
static bool make_room(feedd_window *w, uint64_t bytes, feed_list *dead)
{
    feed_list_node *n = w->fifo.first;
    while (w->used + bytes > w->budget && n) {
        feedd_window_entry *e = FEED_LIST_ENTRY(n, feedd_window_entry, fifo);
        n = n->next;
        if (e->refs || e->state != READY)
            continue;
        if (!read_by_all(w, e)) {
            recent *r = &w->recents[w->next_recent++ % FEEDD_WINDOW_RECENT];
            *r = (recent){e->index, e->readers, e->ds, w->groups[e->group].gen, e->group};
            feedd_count(&feedd_m.share_evictions, 1);
        }
        /* Its bytes go to the reservation: they are freed before its malloc. */
        uncharge(w, e->charge);
        e->charge = 0;
        withdraw(w, e, dead);
    }
    if (w->used + bytes > w->budget)
        return false;
    w->used += bytes;
    feedd_gauge(&feedd_m.share_window_bytes, (int64_t)bytes);
    return true;
}

/*
 * Whether a miss by member bit inserts: not in a group of one live member,
 * nor for a key evicted lately after which every live member has read it.
 */
static bool worth_inserting(feedd_window *w, int gi, uint64_t bit, uint32_t ds, uint64_t index)
{
    group *g = &w->groups[gi];
    if ((g->live & ~bit) == 0)
        return false;
    recent *r = find_recent(w, gi, ds, index);
    if (!r)
        return true;
    r->readers |= bit;
    if ((g->live & ~r->readers) != 0)
        return true;
    r->group = -1;
    return false;
}

feedd_window_find feedd_window_get(feedd_window *w, const feedd_window_seat *seat, uint32_t ds,
                                   uint64_t index, uint64_t source, feedd_window_entry **spare,
                                   feedd_window_entry **entry, feed_decoded *img)
{
    feedd_window_find how = FEEDD_WINDOW_ALONE;
    uint64_t bit = 1ull << seat->member;
    feed_list dead = {NULL, NULL};
    uint64_t deadline = feed_now_ns() + (uint64_t)FEEDD_WINDOW_WAIT_MS * 1000000u;
    *entry = NULL;
    pthread_mutex_lock(&w->mu);
    feedd_window_entry *e = find(w, seat->group, ds, index);
    if (e && source && e->source && e->source != source) {
        withdraw(w, e, &dead);
        e = NULL;
    }
    if (e) {
        e->refs++;
        if (e->state == DECODING)
            feedd_count(&feedd_m.share_waits, 1);
        while (e->state == DECODING &&
               feed_cond_wait_until(&w->cv, &w->mu, deadline) != FEED_ETIMEDOUT) {
        }
        e->refs--;
        if (e->state == READY && (!source || !e->source || e->source == source)) {
            e->refs++;
            e->readers |= bit;
            *img = e->img;
            *entry = e;
            how = FEEDD_WINDOW_HIT;
            if (e->in_table && read_by_all(w, e))
                withdraw(w, e, &dead);
        } else if (!e->in_table && e->refs == 0) {
            feed_list_push_back(&dead, &e->fifo);
        }
    } else if (spare && *spare && worth_inserting(w, seat->group, bit, ds, index)) {
        feed_list no_room = {NULL, NULL};
        if (make_room(w, feedd_window_charge(0), &no_room)) {
            e = *spare;
            *spare = NULL;
            memset(e, 0, sizeof *e);
            e->ds = ds;
            e->index = index;
            e->group = seat->group;
            e->gen = w->groups[seat->group].gen;
            e->source = source;
            e->charge = feedd_window_charge(0);
            e->refs = 1;
            e->state = DECODING;
            e->in_table = true;
            e->hnext = w->buckets[bucket_of(ds, index)];
            w->buckets[bucket_of(ds, index)] = e;
            feed_list_push_back(&w->fifo, &e->fifo);
            *entry = e;
            how = FEEDD_WINDOW_DECODE;
        }
        while (!feed_list_empty(&no_room))
            feed_list_push_back(&dead, feed_list_pop_front(&no_room));
    }
    pthread_mutex_unlock(&w->mu);
    feedd_count(how == FEEDD_WINDOW_HIT ? &feedd_m.share_hits : &feedd_m.share_alone,
                how == FEEDD_WINDOW_DECODE ? 0 : 1);
    free_list(w, &dead);
    return how;
}

/* feed_engine_decode's buffer for a DECODE entry: the cache's, the window's, or scratch. */
typedef struct window_alloc {
    feedd_window *w;
    feedd_window_entry *e;
    bool admit; /* try the decoded-sample cache first */
} window_alloc;

bool feedd_window_ready(feedd_window *w, const feedd_window_seat *seat, uint32_t ds,
                        uint64_t index, uint64_t source)
{
    pthread_mutex_lock(&w->mu);
    const feedd_window_entry *e = find(w, seat->group, ds, index);
    bool ready = e && e->state == READY && !(e->readers & (1ull << seat->member)) &&
                 (!source || !e->source || e->source == source);
    pthread_mutex_unlock(&w->mu);
    return ready;
}

static uint8_t *alloc_pixels(void *arg, const feed_decoded *dims, size_t bytes)
{
    (void)dims;
    window_alloc *a = arg;
    feedd_window_entry *e = a->e;
    if (a->admit) {
        e->cached = feedd_cache_reserve(a->w->cache, e->ds, e->index, bytes);
        if (e->cached)
            return feedd_cache_pixels(e->cached);
    }
    uint64_t more = feedd_window_charge(bytes) - feedd_window_charge(0);
    if (more < bytes)
        return NULL;
    feed_list dead = {NULL, NULL};
    pthread_mutex_lock(&a->w->mu);
    bool fits = make_room(a->w, more, &dead);
    pthread_mutex_unlock(&a->w->mu);
    /* The evicted bytes went to this reservation: free them before the malloc. */
    free_list(a->w, &dead);
    if (!fits)
        return NULL;
    e->pixels = malloc(bytes);
    if (!e->pixels) {
        pthread_mutex_lock(&a->w->mu);
        uncharge(a->w, more);
        pthread_mutex_unlock(&a->w->mu);
        return NULL;
    }
    e->charge += more;
    return e->pixels;
}

/* The decode of e is over: READY with img, or FAILED and withdrawn. Wakes its waiters. */
static void publish(feedd_window *w, const feedd_window_seat *seat, feedd_window_entry *e,
                    const feed_decoded *img)
{
    feed_list dead = {NULL, NULL};
    pthread_mutex_lock(&w->mu);
    if (img) {
        e->img = *img;
        e->state = READY;
        e->readers |= 1ull << seat->member;
        if (e->in_table && read_by_all(w, e))
            withdraw(w, e, &dead);
    } else {
        e->state = FAILED;
        withdraw(w, e, &dead);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    free_list(w, &dead);
}

feed_sample_status feedd_window_decode(feedd_window *w, const feedd_window_seat *seat,
                                       feedd_window_entry *e, bool admit, feed_engine *eng,
                                       const uint8_t *jpeg, size_t len, uint32_t side,
                                       feed_decoded *img)
{
    feedd_cache *cache = w->cache;
    window_alloc a = {w, e, admit && cache};
    feed_sample_status st = feed_engine_decode(eng, jpeg, len, side, alloc_pixels, &a, img);
    bool kept = st == FEED_SAMPLE_OK && (e->pixels || e->cached);
    if (e->cached && st == FEED_SAMPLE_OK) {
        feedd_cache_set_source(e->cached, e->source);
        feedd_cache_publish(cache, e->cached, img);
    } else if (e->cached) {
        feedd_cache_release(cache, e->cached);
        e->cached = NULL;
    }
    if (kept) {
        feed_decoded held = *img;
        held.pixels = e->cached ? feedd_cache_pixels(e->cached) : e->pixels;
        *img = held;
    }
    feedd_count(kept ? &feedd_m.share_decodes : &feedd_m.share_alone, st == FEED_SAMPLE_OK);
    publish(w, seat, e, kept ? img : NULL);
    return st;
}

void feedd_window_abandon(feedd_window *w, feedd_window_entry *e)
{
    publish(w, NULL, e, NULL);
}

void feedd_window_release(feedd_window *w, feedd_window_entry *e)
{
    feed_list dead = {NULL, NULL};
    pthread_mutex_lock(&w->mu);
    e->refs--;
    if (!e->in_table && e->refs == 0)
        feed_list_push_back(&dead, &e->fifo);
    pthread_mutex_unlock(&w->mu);
    free_list(w, &dead);
}
