/*
 * Writing packs: the single-file dataset format feed-pack produces and
 * feed_dataset_open() maps (the layout is documented at the top of
 * source/src/pack.c; the offsets below are part of it). A writer is owned by
 * one thread; it writes to PATH.tmp.<pid> and renames onto PATH only when
 * finished, so a reader never sees a half-written pack.
 */
#ifndef FEED_PACK_H
#define FEED_PACK_H

#include <stddef.h>
#include <stdint.h>

#define FEED_PACK_MAGIC "FEEDPACK" /* 8 bytes, no NUL in the file */
#define FEED_PACK_VERSION 1u
#define FEED_PACK_HEADER_BYTES 80u
#define FEED_PACK_ENTRY_BYTES 16u

/* Header field offsets (little-endian, fixed width). */
#define FEED_PACK_OFF_MAGIC 0u         /* char[8] */
#define FEED_PACK_OFF_VERSION 8u       /* u32 */
#define FEED_PACK_OFF_HEADER_BYTES 12u /* u32 */
#define FEED_PACK_OFF_COUNT 16u        /* u64 samples */
#define FEED_PACK_OFF_CLASSES 24u      /* u32 classes */
#define FEED_PACK_OFF_CRC 28u          /* u32 CRC32C of bytes [0, data_offset), this field 0 */
#define FEED_PACK_OFF_INDEX 32u        /* u64 index offset */
#define FEED_PACK_OFF_NAMES 40u        /* u64 class-name table offset */
#define FEED_PACK_OFF_NAMES_BYTES 48u  /* u64 */
#define FEED_PACK_OFF_DATA 56u         /* u64 data offset */
#define FEED_PACK_OFF_DATA_BYTES 64u   /* u64 */
#define FEED_PACK_OFF_FLAGS 72u        /* u64, 0 in version 1 */

/* Index entry field offsets. */
#define FEED_PACK_ENTRY_OFF_OFFSET 0u /* u64 absolute file offset of the JPEG bytes */
#define FEED_PACK_ENTRY_OFF_LENGTH 8u /* u32 */
#define FEED_PACK_ENTRY_OFF_LABEL 12u /* u32 */

typedef struct feed_pack_writer feed_pack_writer;

/*
 * Start a pack of exactly `count` samples and `num_classes` classes (names
 * 1..255 bytes each, valid UTF-8: see feed/dataset.h). 0 or a negative FEED_E
 * code with a message in err.
 */
int feed_pack_writer_open(const char *path, uint64_t count, uint32_t num_classes,
                          const char *const *class_names, feed_pack_writer **out, char *err,
                          size_t err_cap);
/* Append the next sample (in index order). len <= UINT32_MAX, label < num_classes. */
int feed_pack_writer_add(feed_pack_writer *w, uint32_t label, const void *data, size_t len);
/*
 * Write index, names and header, flush to disk and rename onto the path.
 * Frees w whatever the outcome; on failure the temporary file is removed.
 */
int feed_pack_writer_finish(feed_pack_writer *w, char *err, size_t err_cap);
/* Drop an unfinished pack and its temporary file. Accepts NULL. */
void feed_pack_writer_abort(feed_pack_writer *w);

#endif
