/*
 * A dataset's fingerprint: a SHA-256 over what a server serves under a name,
 * taken at open from what the format already knows (no image byte is read),
 * so that a client can refuse a server serving other data under the same
 * name and count (docs/design/data.md, the fingerprint).
 *
 * What goes in, in this order (integers little-endian):
 *   "feedd-dataset-fingerprint-v1" and a NUL;
 *   u64 sample count; u32 class count; each class name as u32 length + bytes;
 *   per sample, in index order: u32 label, u64 byte length of its JPEG.
 * Nothing about where the data lives (paths, shard names, URLs, offsets,
 * mtimes) goes in, so the same samples served as a tree, a pack or tar shards,
 * from a local disk or S3, give the same fingerprint, and any change of a
 * sample's length, label or position, or of a class name, gives another.
 * A length not known (a tree's file gone between listing and stat) goes in as
 * UINT64_MAX.
 *
 * The writer is a plain value owned by its caller; one thread at a time.
 */
#ifndef FEED_FINGERPRINT_H
#define FEED_FINGERPRINT_H

#include <stddef.h>
#include <stdint.h>

/* Lowercase hex of the 32-byte digest and its NUL. */
#define FEED_FINGERPRINT_HEX_SIZE 65

typedef struct feed_fingerprint_writer {
    void *md; /* the digest in progress (an EVP_MD_CTX) */
    int failed;
} feed_fingerprint_writer;

/* 0 or FEED_ENOMEM. Then add the header once, the classes, the samples, and finish. */
int feed_fingerprint_begin(feed_fingerprint_writer *w, uint64_t count, uint32_t num_classes);
void feed_fingerprint_add_class(feed_fingerprint_writer *w, const char *name);
void feed_fingerprint_add_sample(feed_fingerprint_writer *w, uint32_t label, uint64_t length);
/* Writes the hex digest into hex (FEED_FINGERPRINT_HEX_SIZE bytes) and frees w; 0 or
 * FEED_EIO (the digest failed; hex is then ""). Also frees a writer whose begin failed. */
int feed_fingerprint_finish(feed_fingerprint_writer *w, char *hex);

#endif
