/*
 * Where feed-pack writes: one pack, tar shards (one writer at a time, each
 * shard renamed into place with its index when full), or an ImageFolder
 * tree (written under OUT.tmp.<pid> and renamed onto OUT when complete).
 * Owned by feed-pack's main thread; the SIGINT/SIGTERM handler removes the
 * file or directory being written.
 */
#ifndef FEED_SERVER_TOOLS_OUT_SINK_H
#define FEED_SERVER_TOOLS_OUT_SINK_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/pack.h"
#include "feed/tar.h"

#define SINK_DEFAULT_SHARD_SAMPLES 1000u

enum sink_format { SINK_PACK, SINK_TAR, SINK_FOLDER };

typedef struct out_sink {
    enum sink_format format;
    const char *dst;
    uint64_t count;
    uint32_t num_classes;
    const char *const *names;
    uint32_t shard_samples;
    feed_pack_writer *pack;
    feed_tar_writer *tar;
    uint64_t in_shard;
    size_t shards; /* finished or open */
    char tmp_dir[PATH_MAX];
    int tree_open;
    char written[PATH_MAX + 64]; /* what was written, for the summary */
} out_sink;

/* Start writing count samples of num_classes classes to dst. 0 or a FEED_E code with err. */
int sink_open(out_sink *s, enum sink_format format, const char *dst, uint64_t count,
              uint32_t num_classes, const char *const *names, uint32_t shard_samples, char *err,
              size_t err_cap);
/* Sample i (in index order). 0 or a FEED_E code with err. */
int sink_add(out_sink *s, uint64_t i, uint32_t label, const void *data, size_t len, char *err,
             size_t err_cap);
int sink_finish(out_sink *s, char *err, size_t err_cap);
/* Drop what is unfinished (safe after finish, and on a zeroed sink). */
void sink_abort(out_sink *s);

/* Write SHARD.idx beside each shard of a path or brace pattern; *n gets the count. */
int sink_index_shards(const char *location, size_t *n, char *err, size_t err_cap);

#endif
