/*
 * The share window (docs/design/server.md "Shared decode"): decoded source
 * images kept for the jobs that share them, so that jobs reading the same
 * dataset in the same order (a sweep: one data order seed, several
 * augmentation seeds) decode each image once between them.
 *
 * Groups and members: streams that send the same SessionOpen.share for the
 * same dataset form a group; each training job (SessionOpen.job; a stream
 * without a job name is a job of its own) is one member of its group, live
 * while one of its streams is joined. A group has at most
 * FEEDD_WINDOW_MEMBERS members; a job beyond that, or a group beyond
 * FEEDD_WINDOW_GROUPS, is not seated and decodes alone.
 *
 * Entries, keyed by (dataset, sample index), hold one decoded image (the
 * whole image at the dataset's share side, as the decoded-sample cache
 * holds it) and the set of members that have read it. An entry leaves the
 * window as soon as every live member of its group has read it (the live
 * members now: a job that left pins nothing), when its decode fails, or
 * when it is evicted. Readers hold a reference while they crop from it, so
 * an entry that left is freed at its last release.
 *
 * Bound: every entry's bytes (header, pixels, malloc's chunk headers) are
 * charged from the moment they are reserved until they are freed; the
 * count never passes the budget. When an image does not fit, the oldest
 * entries nobody is reading are evicted (FIFO); when that does not make
 * room, the image is decoded outside the window. An image the cache admits
 * (a dataset with both cache= and share=) is held by the cache; its window
 * entry charges only its header and keeps a reference to the cache's.
 *
 * A job that falls behind is never waited for: it finds its samples evicted
 * and decodes alone. So that it does not fill the window with images nobody
 * will read, the window remembers the last FEEDD_WINDOW_RECENT evictions with
 * the members that had read them: a miss on such a key by a member after
 * which every live member has read it is decoded alone, not inserted.
 * A group of one live member inserts nothing.
 *
 * Single flight: a worker that finds its sample being decoded by another
 * waits for it (at most FEEDD_WINDOW_WAIT_MS); on timeout or a failed or
 * withdrawn decode it decodes alone.
 *
 * Threads: any worker calls any function but new, add_dataset and free
 * (main thread, before and after the workers); join and leave come from the
 * service's threads. One mutex guards everything; nothing under it
 * allocates, frees, logs or calls out of this file but for metrics' atomic
 * counters. Lock order: a caller may hold no pool or stream lock.
 */
#ifndef FEED_SERVER_WINDOW_H
#define FEED_SERVER_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "engine.h"

#define FEEDD_WINDOW_MEMBERS 64
#define FEEDD_WINDOW_GROUPS 64
#define FEEDD_WINDOW_RECENT 1024
#define FEEDD_WINDOW_WAIT_MS 2000

typedef struct feedd_window feedd_window;
typedef struct feedd_window_entry feedd_window_entry;

/* A stream's seat: its group and member, or group -1 (not sharing). */
typedef struct feedd_window_seat {
    int group;
    int member;
} feedd_window_seat;

#define FEEDD_WINDOW_NO_SEAT ((feedd_window_seat){-1, -1})

/* What a lookup found. */
typedef enum feedd_window_find {
    FEEDD_WINDOW_HIT,    /* the image is in *img; release the entry after use */
    FEEDD_WINDOW_DECODE, /* decode into the entry (feedd_window_decode), then release it */
    FEEDD_WINDOW_ALONE,  /* decode outside the window */
} feedd_window_find;

/* Bytes the window charges for an entry of `pixel_bytes` own pixels. */
size_t feedd_window_charge(size_t pixel_bytes);
/* cache: the decoded-sample cache (NULL: none), which outlives the window. 0 or FEED_ENOMEM. */
int feedd_window_new(uint64_t budget_bytes, feedd_cache *cache, feedd_window **out);
/* Every entry must have been released and every seat left. Accepts NULL. */
void feedd_window_free(feedd_window *w);
/* Share dataset ds (< 64) at shorter side `side` (> 0). 0 or FEED_EINVAL. */
int feedd_window_add_dataset(feedd_window *w, uint32_t ds, uint32_t side);
/* Dataset ds's share side; 0 when not shared (or w is NULL). */
uint32_t feedd_window_side(const feedd_window *w, uint32_t ds);
/* Bytes charged now. */
uint64_t feedd_window_used(feedd_window *w);

/*
 * Seat a stream of job `job` ("" = a job of its own) in group (ds, share).
 * 0; FEED_EEXHAUSTED when the group has FEEDD_WINDOW_MEMBERS members or there is
 * no room for a new group (*seat is then FEEDD_WINDOW_NO_SEAT).
 */
int feedd_window_join(feedd_window *w, uint32_t ds, const char *share, const char *job,
                      feedd_window_seat *seat);
/* The stream leaves its seat (no-op for no seat); *seat becomes FEEDD_WINDOW_NO_SEAT. */
void feedd_window_leave(feedd_window *w, feedd_window_seat *seat);

/* A header for a future entry (not charged; a worker keeps one), or NULL. */
feedd_window_entry *feedd_window_spare_new(void);
void feedd_window_spare_free(feedd_window_entry *e);

/*
 * Look up sample `index` of dataset ds for seat (seated). source is the
 * sample's stamp (feed_dataset_sample_stamp; 0 = not known): an entry of
 * other bytes is withdrawn and not used. A lookup that inserts takes *spare
 * (sets it NULL); pass NULL there to insert nothing. *entry is set for HIT
 * and DECODE.
 */
feedd_window_find feedd_window_get(feedd_window *w, const feedd_window_seat *seat, uint32_t ds,
                                   uint64_t index, uint64_t source, feedd_window_entry **spare,
                                   feedd_window_entry **entry, feed_decoded *img);
/*
 * After DECODE: decode jpeg at `side` into entry e (its pixels in the window,
 * or in a new cache entry when admit is set and the cache admits it; else, the
 * window full, into the engine's scratch, and e is withdrawn). Publishes e:
 * waiters get the image, or decode alone when it failed. *img as
 * feed_engine_decode gives it.
 */
feed_sample_status feedd_window_decode(feedd_window *w, const feedd_window_seat *seat,
                                       feedd_window_entry *e, bool admit, feed_engine *eng,
                                       const uint8_t *jpeg, size_t len, uint32_t side,
                                       feed_decoded *img);
/*
 * Whether seat's group holds sample `index` of ds decoded, of the bytes of
 * stamp `source` (0 = not known), and not yet read by this member: what the
 * fetch stage skips (a hit needs no bytes). No wait, no change; a later
 * lookup may still miss (evicted since), and the worker then reads the bytes.
 */
bool feedd_window_ready(feedd_window *w, const feedd_window_seat *seat, uint32_t ds,
                        uint64_t index, uint64_t source);
/* After DECODE when the sample's bytes could not be read: withdraw e, as a failed decode. */
void feedd_window_abandon(feedd_window *w, feedd_window_entry *e);
/* Drop the reference HIT or DECODE gave. */
void feedd_window_release(feedd_window *w, feedd_window_entry *e);

#endif
