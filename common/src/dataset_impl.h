/*
 * The inside of a feed_dataset, shared by dataset.c (the public accessors and
 * the ImageFolder reader) and pack.c (the pack reader). Not installed; nothing
 * outside common/src includes it. Filled by one thread at open, read-only
 * afterwards.
 */
#ifndef FEED_COMMON_DATASET_IMPL_H
#define FEED_COMMON_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "feed/dataset.h"

/* Caps that do not depend on the caller's limits. */
#define FEED_DATASET_MAX_CLASSES 1000000u /* more classes than any public dataset */
#define FEED_DATASET_MAX_NAME 255u        /* bytes in one class or file name (NAME_MAX) */
#define FEED_DATASET_MAX_PATH 4095u       /* bytes in one sample path (PATH_MAX - 1) */

enum dataset_format { DATASET_IMAGEFOLDER, DATASET_PACK };

struct feed_dataset {
    enum dataset_format format;
    uint64_t count;
    uint32_t num_classes;
    uint64_t max_sample_bytes;
    const char **class_names; /* num_classes entries (tree: into names; pack: into map) */

    /* ImageFolder. */
    char *names;           /* class names then sample paths, NUL-terminated, back to back */
    uint64_t *path_offset; /* count entries: offset of sample i's path in names */
    uint32_t *labels;      /* count entries */

    /* Pack (see pack.c). */
    const uint8_t *map;
    size_t map_len;
    const uint8_t *index; /* count entries of FEED_PACK_ENTRY_BYTES, inside map */
};

/*
 * dataset.c: 0 when class `label`'s name is valid UTF-8 (it travels in a
 * protobuf `string`), else FEED_EINVAL with err naming where, the label and
 * the name (bytes outside printable ASCII written as \xNN).
 */
int feed_dataset_check_class_name(const char *where, uint32_t label, const char *name, char *err,
                                  size_t err_cap);

/* pack.c: open a regular file as a pack into ds (zeroed by the caller). */
int feed_pack_open_into(struct feed_dataset *ds, const char *path, const feed_dataset_limits *lim,
                        char *err, size_t err_cap);
void feed_pack_unmap(struct feed_dataset *ds);
/* pack.c: entry i of an open pack. */
void feed_pack_entry(const struct feed_dataset *ds, uint64_t i, uint64_t *offset, uint32_t *length,
                     uint32_t *label);

#endif
