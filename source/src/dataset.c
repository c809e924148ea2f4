/*
 * Datasets: the public accessors and the open that picks the format (see
 * feed/dataset.h and dataset_impl.h). The formats are dataset_folder.c
 * (ImageFolder trees), pack.c (packs) and tar.c (tar shards); the accessors
 * reach them through ds->ops and never look at the format themselves.
 *
 * One thread opens; afterwards the dataset is immutable and every accessor
 * may be called from any number of threads.
 */
#include "feed/dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dataset_impl.h"
#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/strutil.h"

#define DEFAULT_MAX_SAMPLES 100000000u
#define DEFAULT_MAX_SAMPLE_BYTES (64u << 20)

void feed_dataset_limits_default(feed_dataset_limits *lim)
{
    lim->max_samples = DEFAULT_MAX_SAMPLES;
    lim->max_sample_bytes = DEFAULT_MAX_SAMPLE_BYTES;
    lim->remote = NULL;
    lim->refuse_bad_shards = 0;
}

int feed_dataset_check_class_name(const char *where, uint32_t label, const char *name, char *err,
                                  size_t err_cap)
{
    size_t len = strlen(name), bad = 0;
    if (feed_utf8_valid(name, len, &bad))
        return 0;
    /* The name cannot be printed as it is: that is the problem. */
    char shown[4 * FEED_DATASET_MAX_NAME + 1];
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 <= sizeof(shown); i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 0x20 && c < 0x7f)
            shown[o++] = (char)c;
        else
            o += (size_t)snprintf(shown + o, sizeof(shown) - o, "\\x%02x", c);
    }
    shown[o] = '\0';
    feed_set_err(err, err_cap,
                 "%s: class %u name '%s' is not valid UTF-8 (byte %zu); class names are "
                 "protobuf strings, which must be UTF-8: rename the class",
                 where, label, shown, bad);
    return FEED_EINVAL;
}

/* The formats, asked in this order whether they read a location. */
static const feed_dataset_ops *const formats[] = {
    &feed_dataset_tar_ops, /* before packs: a .tar file is a shard */
    &feed_dataset_folder_ops,
    &feed_dataset_pack_ops,
};

/* The fingerprint of an opened dataset (feed/fingerprint.h), into ds->fingerprint; where names
 * it in the message (redacted). */
static int take_fingerprint(struct feed_dataset *ds, const char *where, char *err, size_t err_cap)
{
    feed_fingerprint_writer w;
    int rc = feed_fingerprint_begin(&w, ds->count, ds->num_classes);
    for (uint32_t c = 0; !rc && c < ds->num_classes; c++)
        feed_fingerprint_add_class(&w, ds->class_names[c]);
    for (uint64_t i = 0; !rc && i < ds->count; i++)
        feed_fingerprint_add_sample(&w, ds->ops->label(ds, i), ds->ops->sample_length(ds, i));
    int fin = feed_fingerprint_finish(&w, ds->fingerprint);
    if (!rc)
        rc = fin;
    if (rc)
        feed_set_err(err, err_cap, "%s: cannot compute the dataset fingerprint (%s)", where,
                     feed_err_name(rc));
    return rc;
}

void feed_dataset_close(feed_dataset *ds)
{
    if (!ds)
        return;
    if (ds->ops)
        ds->ops->close(ds);
    free(ds->class_names);
    free(ds);
}

int feed_dataset_open(const char *path, const feed_dataset_limits *lim, feed_dataset **out,
                      char *err, size_t err_cap)
{
    int rc = 0;
    feed_dataset_limits dflt;
    struct feed_dataset *ds = NULL;
    const feed_dataset_ops *ops = NULL;
    struct stat st;
    const struct stat *stp = NULL;
    int stat_errno = 0;
    char where[4096]; /* path for messages (a URL without credentials or query) */
    *out = NULL;
    feed_set_err(err, err_cap, "%s", "");
    if (!path || !*path) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "dataset path is empty");
        goto out;
    }
    if (!lim) {
        feed_dataset_limits_default(&dflt);
        lim = &dflt;
    }
    if (stat(path, &st) == 0)
        stp = &st;
    else
        stat_errno = errno;
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]) && !ops; f++)
        if (formats[f]->claims(path, stp))
            ops = formats[f];
    feed_location_redact(path, where, sizeof where);
    if (!ops && !stp) {
        rc = stat_errno == ENOENT ? FEED_ENOTFOUND : FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", where, strerror(stat_errno));
        goto out;
    }
    if (!ops) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: neither a directory nor a regular file", where);
        goto out;
    }
    ds = calloc(1, sizeof(*ds));
    if (!ds) {
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", where);
        goto out;
    }
    ds->ops = ops;
    ds->max_sample_bytes = lim->max_sample_bytes;
    rc = ops->open(ds, path, lim, err, err_cap);
    if (!rc)
        rc = take_fingerprint(ds, where, err, err_cap);
out:
    if (rc) {
        feed_dataset_close(ds);
        ds = NULL;
    }
    *out = ds;
    return rc;
}

uint64_t feed_dataset_count(const feed_dataset *ds)
{
    return ds->count;
}

uint32_t feed_dataset_num_classes(const feed_dataset *ds)
{
    return ds->num_classes;
}

const char *feed_dataset_class_name(const feed_dataset *ds, uint32_t label)
{
    return label < ds->num_classes ? ds->class_names[label] : NULL;
}

const char *feed_dataset_fingerprint(const feed_dataset *ds)
{
    return ds->fingerprint;
}

const char *feed_dataset_format(const feed_dataset *ds)
{
    return ds->ops->format;
}

uint32_t feed_dataset_label(const feed_dataset *ds, uint64_t i)
{
    return i < ds->count ? ds->ops->label(ds, i) : UINT32_MAX;
}

const char *feed_dataset_sample_path(const feed_dataset *ds, uint64_t i)
{
    if (!ds->ops->sample_path || i >= ds->count)
        return NULL;
    return ds->ops->sample_path(ds, i);
}

void feed_dataset_sample_where(const feed_dataset *ds, uint64_t i, int may_read, char *buf,
                               size_t cap)
{
    buf[0] = '\0';
    if (ds->ops->where && i < ds->count)
        ds->ops->where(ds, i, may_read, buf, cap);
}

uint64_t feed_dataset_sample_stamp(const feed_dataset *ds, uint64_t i)
{
    if (i >= ds->count || ds->unstamped)
        return 0;
    return ds->ops->stamp ? ds->ops->stamp(ds, i) : 2;
}

uint64_t feed_dataset_sample_length(const feed_dataset *ds, uint64_t i)
{
    if (i >= ds->count)
        return UINT64_MAX;
    return ds->ops->length_at_open ? ds->ops->length_at_open(ds, i) : ds->ops->sample_length(ds, i);
}

int feed_dataset_stamped(const feed_dataset *ds)
{
    return !ds->unstamped;
}

uint32_t feed_dataset_bad_shards(const feed_dataset *ds)
{
    return ds->bad_shards;
}

const char *feed_dataset_sample_object(const feed_dataset *ds, uint64_t i)
{
    return ds->ops->object && i < ds->count ? ds->ops->object(ds, i) : NULL;
}

void feed_dataset_prefetch(const feed_dataset *ds, const uint64_t *indices, size_t n)
{
    if (ds->ops->prefetch && n)
        ds->ops->prefetch(ds, indices, n);
}

int feed_dataset_read(const feed_dataset *ds, uint64_t i, feed_buf *scratch, const uint8_t **data,
                      size_t *len)
{
    *data = NULL;
    *len = 0;
    if (i >= ds->count)
        return FEED_EINVAL;
    return ds->ops->read(ds, i, scratch, data, len);
}

int feed_dataset_read_why(const feed_dataset *ds, uint64_t i, feed_buf *scratch,
                          const uint8_t **data, size_t *len, char *why, size_t why_cap)
{
    if (why_cap > 0)
        why[0] = '\0';
    if (!ds->ops->read_why || i >= ds->count)
        return feed_dataset_read(ds, i, scratch, data, len);
    *data = NULL;
    *len = 0;
    return ds->ops->read_why(ds, i, scratch, data, len, why, why_cap);
}
