/*
 * Datasets as the server sees them: a count of samples, a label per sample,
 * class names, and the JPEG bytes of sample i.
 *
 * Three formats, chosen by what `path` is:
 *  - tar shards: a path or URL ending in .tar, a brace pattern
 *    (dir/shard-{000000..000146}.tar) or any http(s):// or s3:// location;
 *    WebDataset members KEY.jpg|jpeg (image) and KEY.cls (decimal label),
 *    read by ranges through feed/blob.h (see source/src/tar.c);
 *  - a directory: an ImageFolder tree root/<class>/<file>.{jpg,jpeg,JPEG};
 *    classes sorted by name (byte order) give labels 0..C-1, samples sorted by
 *    (class, file name);
 *  - any other file: a pack written by feed-pack (see source/src/pack.c for
 *    the layout), memory-mapped; every offset and length is checked against
 *    the file size at open, so a truncated or corrupt pack is refused.
 *
 * Class names must be valid UTF-8: they travel in DescribeResponse's
 * protobuf `string` fields, and strict clients (Python's protobuf, among
 * others) reject a whole message holding one that is not. Open refuses such a
 * dataset rather than escaping the name, so a name a client sees is always
 * the directory's own: an ImageFolder with a class directory whose name is
 * not UTF-8 fails with FEED_EINVAL, a pack holding one with FEED_ECORRUPT
 * (the pack writer refuses such names with FEED_EINVAL), and the message
 * names the class (label and name, other bytes as \xNN). Sample file names
 * are never sent, so they may be any bytes.
 *
 * A feed_dataset is immutable after open: any number of threads may call the
 * accessors at once. feed_dataset_read() uses only the caller's scratch.
 */
#ifndef FEED_DATASET_H
#define FEED_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "feed/buf.h"

typedef struct feed_dataset feed_dataset;

typedef struct feed_dataset_limits {
    uint64_t max_samples;      /* refuse larger datasets (default 100,000,000) */
    uint64_t max_sample_bytes; /* larger files are reported as too large (default 64 MiB) */
    /* Remote shards (s3://, http(s)://): endpoint, connections, read-ahead...; NULL = defaults. */
    const struct feed_blob_remote_options *remote;
    /*
     * Tar shards that cannot be read at open (missing, unreadable, damaged):
     * 0 (default) serves the dataset when every such shard has an index file
     * (SHARD.idx) giving its samples, which then fail each read (FEED_EIO, or
     * FEED_ENOTFOUND for a missing shard) while the other shards' are served;
     * 1 refuses the dataset on any. A shard whose samples cannot be listed
     * (no usable index, and its headers unreadable) refuses the dataset
     * either way: the index of every sample after it is unknown.
     */
    int refuse_bad_shards;
} feed_dataset_limits;

void feed_dataset_limits_default(feed_dataset_limits *lim);

/*
 * Open `path`. On failure returns a negative FEED_E code and writes a message
 * naming the path and the problem into err.
 */
int feed_dataset_open(const char *path, const feed_dataset_limits *lim, feed_dataset **out,
                      char *err, size_t err_cap);
void feed_dataset_close(feed_dataset *ds); /* accepts NULL */

uint64_t feed_dataset_count(const feed_dataset *ds);
uint32_t feed_dataset_num_classes(const feed_dataset *ds);
const char *feed_dataset_class_name(const feed_dataset *ds, uint32_t label);
/* "imagefolder", "pack" or "tar". */
const char *feed_dataset_format(const feed_dataset *ds);
/*
 * The dataset's fingerprint (feed/fingerprint.h: count, class names, each
 * sample's label and JPEG byte length, in order), 64 lowercase hex digits,
 * computed once at open without reading an image: a tree stats each file
 * there, a pack and tar shards read it off their index.
 */
const char *feed_dataset_fingerprint(const feed_dataset *ds);
/* Label of sample i (i < count). */
uint32_t feed_dataset_label(const feed_dataset *ds, uint64_t i);
/* Source path of sample i (ImageFolder) or NULL (pack, tar shards). */
const char *feed_dataset_sample_path(const feed_dataset *ds, uint64_t i);
/*
 * Where sample i's bytes are, for messages, in buf (cap > 0; always
 * NUL-terminated): a tree's CLASS/FILE, or a tar shard's object name (its
 * last path component, never credentials), the image member's name and its
 * byte offset ("shard-000003.tar, member 'KEY.jpg' at byte N"); "" for a
 * pack, whose messages name the index only. The member's name is read from
 * its header (one 512-byte read of the shard) when may_read is nonzero and
 * the header holds the whole name; else only the offset is given. Callers
 * pass 0 after an I/O error on the sample, when that read would fail too or
 * wait out the same retries. Safe from any thread, as feed_dataset_read.
 */
void feed_dataset_sample_where(const feed_dataset *ds, uint64_t i, int may_read, char *buf,
                               size_t cap);

/*
 * The remote object holding sample i's bytes, by its name for messages
 * (scheme://host[:port]/path: never userinfo nor a query), or NULL when they
 * are local (a tree, a pack, a local shard) or i is out of range. Valid while
 * ds is open; never does I/O. feedd fetches the samples that have one on
 * threads of their own (server/work/fetch.c).
 */
const char *feed_dataset_sample_object(const feed_dataset *ds, uint64_t i);

/*
 * The JPEG bytes of sample i. For a pack, *data points into the mapping and
 * scratch is untouched; for a tree the file, for tar shards the image member,
 * is read into scratch (bounded by both scratch->limit and max_sample_bytes).
 * Returns 0, FEED_ENOTFOUND (the file is gone: removed since the open),
 * FEED_EIO (any other failure to read it, or no longer a regular file, or a
 * shard cut or changed since the open), FEED_ETOOBIG or FEED_EINVAL (i out of
 * range).
 */
int feed_dataset_read(const feed_dataset *ds, uint64_t i, feed_buf *scratch, const uint8_t **data,
                      size_t *len);

/*
 * feed_dataset_read, and on failure the cause in why (why_cap bytes, always
 * NUL-terminated when why_cap > 0; "" when the code says all): for a remote
 * shard the HTTP status, a timeout, a refused redirect or a changed object,
 * naming no object (the caller says where the sample is) and never a
 * credential, a signature or a query.
 */
int feed_dataset_read_why(const feed_dataset *ds, uint64_t i, feed_buf *scratch,
                          const uint8_t **data, size_t *len, char *why, size_t why_cap);

/*
 * A stamp of sample i's bytes as they are now (i < count), for caches of
 * what was made from them: nonzero, and different whenever what
 * feed_dataset_read gives for i may have changed since another was taken
 * (a tree: its file's stat; local tar shards: the shard's stat; a pack: the
 * same always, its bytes being the mapping made at open). One stat() at
 * most. 0 when the dataset cannot tell without a request (remote shards:
 * then feed_dataset_stamped is 0, and nothing made from its bytes may be
 * kept as valid beyond the read it came from), or i out of range.
 */
uint64_t feed_dataset_sample_stamp(const feed_dataset *ds, uint64_t i);
/*
 * The byte length of sample i's JPEG as the dataset knew it at open (the
 * fingerprint's: a pack's or shard's index entry, a tree's stat then),
 * without I/O; UINT64_MAX when it was not known (a tree's file that was not
 * a regular file, or 4 GiB or more) or i is out of range. A tree's file
 * changed since the open reads back another length.
 */
uint64_t feed_dataset_sample_length(const feed_dataset *ds, uint64_t i);
/* 1 when feed_dataset_sample_stamp tells for every sample, 0 when it cannot. */
int feed_dataset_stamped(const feed_dataset *ds);

/*
 * Shards of a tar dataset that could not be read at open but whose samples
 * are known from their index file (SHARD.idx): their samples fail each read
 * (see feed_dataset_limits.bad_shards). 0 for other formats.
 */
uint32_t feed_dataset_bad_shards(const feed_dataset *ds);

/*
 * A hint that these samples will be read soon, in this order: tar shards
 * pass their byte ranges to feed_blob_prefetch (posix_fadvise WILLNEED for
 * local files, read-ahead for remote objects); trees and packs ignore it.
 * Never blocks on I/O. Indices out of range are ignored.
 */
void feed_dataset_prefetch(const feed_dataset *ds, const uint64_t *indices, size_t n);

#endif
