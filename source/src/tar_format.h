/*
 * Tar shards inside: the index of one shard, built by scanning its headers
 * (tar_scan.c) or read from its index file (tar_index.c), and used by the
 * dataset format (tar.c), the writer (tar_write.c) and the fuzz target. Not
 * installed. Each function is called by one thread on its own index.
 *
 * Shards follow the WebDataset convention: a sample is a run of consecutive
 * members sharing a key (the member's path up to the first dot of its base
 * name, directories kept); KEY.jpg or KEY.jpeg is the image, KEY.cls its
 * label (a decimal integer), anything else (KEY.json, ...) is ignored. The
 * member `__classes__.txt` holds class names, one a line in label order.
 */
#ifndef FEED_COMMON_TAR_FORMAT_H
#define FEED_COMMON_TAR_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "feed/blob.h"

#define TAR_BLOCK 512u
#define TAR_SCAN_MIN (4u << 10)           /* bytes one header-scanning read asks for, at least */
#define TAR_SCAN_CHUNK (64u << 10)        /* and at most */
#define TAR_MAX_META_BYTES (64u << 10)    /* a pax header, a GNU long name */
#define TAR_MAX_LABEL_BYTES 32u           /* a KEY.cls member */
#define TAR_MAX_CLASSES_BYTES (16u << 20) /* the __classes__.txt member */
#define TAR_CLASSES_KEY "__classes__"

/* Index file beside a shard (SHARD.idx); every integer little-endian. */
#define TAR_IDX_MAGIC "FEEDTIDX"
#define TAR_IDX_VERSION 1u
#define TAR_IDX_HEADER_BYTES 48u
#define TAR_IDX_ENTRY_BYTES 16u
/*
 *   0  8  magic "FEEDTIDX"
 *   8  4  version (1)
 *   12 4  CRC32C of the whole file with this field read as 0
 *   16 8  the shard's size in bytes (the index is used only when it matches)
 *   24 8  sample count N
 *   32 8  class-name bytes K (the __classes__.txt member's contents, or 0)
 *   40 8  the shard's modification time in ns when it was indexed, for a
 *         local shard (0: unknown, as in indexes written before it was kept)
 *   48    N entries: u64 offset of the image bytes, u32 length, u32 label
 *         then K bytes of class names; the file ends there
 */

typedef struct tar_entry {
    uint64_t offset; /* of the image member's bytes in its shard */
    uint64_t length;
    uint32_t label;
    uint32_t shard; /* filled by tar.c */
} tar_entry;

typedef struct tar_index {
    tar_entry *v;
    size_t n, cap;
    char *classes; /* the __classes__.txt member (malloc'd, NUL-terminated) or NULL */
    size_t classes_len;
    uint64_t shard_mtime_ns; /* an index file's field 40 (tar_idx_parse), else 0 */
} tar_index;

void tar_index_free(tar_index *ix);
/* Appends a sample (its image member's bytes and its label). 0 or FEED_ENOMEM. */
int tar_index_push(tar_index *ix, uint64_t offset, uint64_t length, uint32_t label);

/*
 * Index the shard in b by reading its headers in chunks of TAR_SCAN_MIN to TAR_SCAN_CHUNK
 * (member bytes are skipped unread, except labels, class names and pax
 * headers). At most max_samples samples. 0, or FEED_ECORRUPT (damaged or
 * malformed: bad checksum, truncated member, missing label or image,
 * duplicate key), FEED_EUNSUPPORTED (a PNG image, a sparse or multi-volume
 * member), FEED_ETOOBIG (a cap), or the blob's error; err names the shard,
 * the member and the problem.
 */
int tar_scan(feed_blob *b, uint64_t max_samples, tar_index *out, char *err, size_t err_cap);

/*
 * Parse an index file's bytes for a shard of shard_bytes bytes
 * (TAR_IDX_ANY_SIZE: a shard that could not be opened, taken to have the
 * size the index was made for). 0, or FEED_ECORRUPT / FEED_ESTATE (made for
 * a shard of another size) / FEED_ETOOBIG with a message naming `name`.
 */
#define TAR_IDX_ANY_SIZE UINT64_MAX
int tar_idx_parse(const uint8_t *buf, size_t len, uint64_t shard_bytes, uint64_t max_samples,
                  const char *name, tar_index *out, char *err, size_t err_cap);

/* The bytes of an index file for ix (malloc'd into *out), made for a shard of shard_bytes last
 * modified at shard_mtime_ns (0: unknown). 0 or FEED_ENOMEM / FEED_ETOOBIG. */
int tar_idx_build(const tar_index *ix, uint64_t shard_bytes, uint64_t shard_mtime_ns,
                  uint8_t **out, size_t *len);

/* A local shard's modification time in ns; 0 for a URL or a path stat() cannot see. */
uint64_t tar_local_mtime_ns(const char *shard);

/* Whether h, the 512 bytes before an image member's bytes, holds the size an index's entry
 * gives that member (the size field only: damage elsewhere in it is for the read to find). */
int tar_header_fits(const uint8_t *h, uint64_t length);

/* The longest member name a ustar header holds whole: prefix, '/', name. */
#define TAR_MEMBER_NAME_MAX (155u + 1u + 100u)

/*
 * The member name in h, a header whose member should have `length` bytes (its index entry's),
 * into out (cap > TAR_MEMBER_NAME_MAX): 0, or -1 when h is no such header (bad checksum, another
 * size) or its name may not be whole (a name field filled to the end without a prefix, as a
 * GNU long-name or pax path member leaves it, or a name with control bytes).
 */
int tar_header_name(const uint8_t *h, uint64_t length, char *out, size_t cap);

/* Write buf to path through path.tmp.<pid> and a rename. 0 or FEED_EIO with err. */
int tar_write_file_atomic(const char *path, const uint8_t *buf, size_t len, char *err,
                          size_t err_cap);

#endif
