/*
 * The inside of a feed_dataset: the fields every format shares and one ops
 * table per format (dataset_folder.c: ImageFolder trees; pack.c: packs;
 * tar.c: tar shards). dataset.c holds the public accessors and picks the
 * format at open by asking each format's `claims` in turn, so a new format is
 * one more ops table and one more line in dataset.c's list, and no accessor
 * switches on the format. Not installed; nothing outside source/src includes
 * it. Filled by one thread at open, read-only afterwards.
 */
#ifndef FEED_COMMON_DATASET_IMPL_H
#define FEED_COMMON_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "feed/dataset.h"
#include "feed/fingerprint.h"

/* Caps that do not depend on the caller's limits. */
/* More classes than any public dataset (Google Landmarks v2: 203,094), and Describe lists every
 * one: 262,144 names of up to 255 bytes fit the client's Describe limit (client/src/net/conn.c). */
#define FEED_DATASET_MAX_CLASSES 262144u
#define FEED_DATASET_MAX_NAME 255u        /* bytes in one class or file name (NAME_MAX) */
#define FEED_DATASET_MAX_PATH 4095u       /* bytes in one sample path (PATH_MAX - 1) */

typedef struct feed_dataset_ops {
    const char *format; /* feed_dataset_format() */
    /*
     * 1 when this format reads `location`. st is the location's stat, or NULL
     * when it is not a local file system object (a URL, a brace pattern).
     */
    int (*claims)(const char *location, const struct stat *st);
    /*
     * Fill ds (zeroed by the caller but for ops and max_sample_bytes): count,
     * num_classes, class_names (an array close frees) and impl. On failure
     * the caller calls close, so open leaves whatever it built in ds.
     */
    int (*open)(struct feed_dataset *ds, const char *location, const feed_dataset_limits *lim,
                char *err, size_t err_cap);
    /* i < count, checked by the caller. */
    uint32_t (*label)(const struct feed_dataset *ds, uint64_t i);
    /* NULL: the format has no per-sample file. */
    const char *(*sample_path)(const struct feed_dataset *ds, uint64_t i);
    /* NULL: nothing to say (feed_dataset_sample_where). */
    void (*where)(const struct feed_dataset *ds, uint64_t i, int may_read, char *buf, size_t cap);
    /* NULL: every sample is local. i < count; the contract of feed_dataset_sample_object. */
    const char *(*object)(const struct feed_dataset *ds, uint64_t i);
    /* i < count, checked by the caller; the contract of feed_dataset_read. */
    int (*read)(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch, const uint8_t **data,
                size_t *len);
    /*
     * NULL: read says all there is. Else read, and on failure the cause in
     * why (feed_dataset_read_why's contract); read calls it with a buffer
     * of its own.
     */
    int (*read_why)(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch,
                    const uint8_t **data, size_t *len, char *why, size_t why_cap);
    /*
     * NULL: the bytes are fixed at open (a pack's mapping), every stamp the
     * same. Else the contract of feed_dataset_sample_stamp; i < count.
     */
    uint64_t (*stamp)(const struct feed_dataset *ds, uint64_t i);
    /*
     * i < count, checked by the caller: the byte length of sample i's JPEG as
     * the format knows it without reading the image (an index entry, a
     * stat), or UINT64_MAX when it cannot be had. Called once per sample at
     * open, for the fingerprint (feed/fingerprint.h).
     */
    uint64_t (*sample_length)(const struct feed_dataset *ds, uint64_t i);
    /*
     * NULL: sample_length does no I/O, and feed_dataset_sample_length asks
     * it. Else, without I/O, what sample_length gave for i at open.
     */
    uint64_t (*length_at_open)(const struct feed_dataset *ds, uint64_t i);
    /* NULL: nothing to prefetch. The contract of feed_dataset_prefetch. */
    void (*prefetch)(const struct feed_dataset *ds, const uint64_t *indices, size_t n);
    /* Free impl (which may be half built). */
    void (*close)(struct feed_dataset *ds);
} feed_dataset_ops;

struct feed_dataset {
    const feed_dataset_ops *ops;
    uint64_t count;
    uint32_t num_classes;
    uint64_t max_sample_bytes;
    const char **class_names; /* num_classes entries, into the format's own storage */
    int unstamped;            /* 1: stamp cannot tell (feed_dataset_stamped) */
    uint32_t bad_shards;      /* feed_dataset_bad_shards */
    void *impl;               /* the format's own state */
    char fingerprint[FEED_FINGERPRINT_HEX_SIZE]; /* feed_dataset_fingerprint() */
};

extern const feed_dataset_ops feed_dataset_folder_ops; /* dataset_folder.c */
extern const feed_dataset_ops feed_dataset_pack_ops;   /* pack.c */
extern const feed_dataset_ops feed_dataset_tar_ops;    /* tar.c */

/*
 * dataset.c: 0 when class `label`'s name is valid UTF-8 (it travels in a
 * protobuf `string`), else FEED_EINVAL with err naming where, the label and
 * the name (bytes outside printable ASCII written as \xNN).
 */
int feed_dataset_check_class_name(const char *where, uint32_t label, const char *name, char *err,
                                  size_t err_cap);

#endif
