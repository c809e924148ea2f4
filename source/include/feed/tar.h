/*
 * Writing tar shards in the WebDataset convention that feed_dataset_open()
 * reads (see source/src/tar.c and tar_format.h): each sample is KEY.jpg and
 * KEY.cls (its decimal label); the first member, __classes__.txt, holds the
 * class names one a line. A writer is owned by one thread; it writes
 * PATH.tmp.<pid>, renames it onto PATH when finished, then writes the shard's
 * index beside it (PATH.idx), so a reader never sees a half-written shard and
 * opening one is a single small read.
 */
#ifndef FEED_TAR_H
#define FEED_TAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct feed_tar_writer feed_tar_writer;

/*
 * Start a shard. class_names (num_classes of them, 1..255 bytes of UTF-8
 * without a line break) go into __classes__.txt; num_classes 0 writes none.
 * 0 or a negative FEED_E code with a message in err.
 */
int feed_tar_writer_open(const char *path, uint32_t num_classes, const char *const *class_names,
                         feed_tar_writer **out, char *err, size_t err_cap);
/*
 * Append a sample: KEY.jpg with the bytes, KEY.cls with the label. key: 1..80
 * bytes, no '.', unique in the shard. 0, FEED_EINVAL, FEED_ETOOBIG (len at or
 * over 8 GiB) or FEED_EIO.
 */
int feed_tar_writer_add(feed_tar_writer *w, const char *key, uint32_t label, const void *data,
                        size_t len);
/*
 * End the archive, flush it to disk, rename it onto the path and write
 * PATH.idx. Frees w whatever the outcome; on failure nothing is left behind.
 */
int feed_tar_writer_finish(feed_tar_writer *w, char *err, size_t err_cap);
/* Drop an unfinished shard and its temporary file. Accepts NULL. */
void feed_tar_writer_abort(feed_tar_writer *w);

/*
 * The shards a location names: itself, or each name of a brace pattern
 * (`dir/shard-{000000..000146}.tar`; see source/src/tar.c). *out is an array
 * of *n malloc'd strings; free with feed_tar_shard_names_free. 0, FEED_EINVAL
 * (a brace that is not a decimal range), FEED_ETOOBIG (too many shards) or
 * FEED_ENOMEM, with err.
 */
int feed_tar_shard_names(const char *location, char ***out, size_t *n, char *err, size_t err_cap);
void feed_tar_shard_names_free(char **names, size_t n);

/* Scan an existing shard (a path or URL) and write its index to PATH.idx (a local path). */
int feed_tar_write_index(const char *shard, const char *idx_path, char *err, size_t err_cap);

#endif
