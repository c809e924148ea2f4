/*
 * Writing tar shards and shard index files (see feed/tar.h). A writer is
 * owned by one thread. Members are POSIX ustar with mode 0644, owner 0 and
 * mtime 0, so the same samples always give the same bytes.
 */
#include "feed/tar.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset_impl.h"
#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/strutil.h"
#include "tar_format.h"

#define MAX_KEY 80u
#define MAX_MEMBER_BYTES ((uint64_t)1 << 33) /* 11 octal digits */

struct feed_tar_writer {
    char *path;
    char *tmp_path;
    FILE *f;
    uint64_t pos;
    tar_index ix;
};

void feed_tar_writer_abort(feed_tar_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp_path);
    }
    tar_index_free(&w->ix);
    free(w->tmp_path);
    free(w->path);
    free(w);
}

static void octal(char *field, size_t width, uint64_t v)
{
    snprintf(field, width, "%0*llo", (int)width - 1, (unsigned long long)v);
}

/* One member: header, bytes, padding. */
static int write_member(feed_tar_writer *w, const char *name, const void *data, size_t len)
{
    uint8_t h[TAR_BLOCK];
    static const uint8_t zeros[TAR_BLOCK];
    memset(h, 0, sizeof(h));
    memcpy(h, name, strlen(name));
    octal((char *)h + 100, 8, 0644);
    octal((char *)h + 108, 8, 0);
    octal((char *)h + 116, 8, 0);
    octal((char *)h + 124, 12, len);
    octal((char *)h + 136, 12, 0);
    memset(h + 148, ' ', 8);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (size_t i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    size_t pad = (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK;
    if (fwrite(h, 1, TAR_BLOCK, w->f) != TAR_BLOCK || (len && fwrite(data, 1, len, w->f) != len) ||
        (pad && fwrite(zeros, 1, pad, w->f) != pad))
        return FEED_EIO;
    w->pos += TAR_BLOCK + len + pad;
    return 0;
}

int feed_tar_writer_open(const char *path, uint32_t num_classes, const char *const *class_names,
                         feed_tar_writer **out, char *err, size_t err_cap)
{
    int rc = 0;
    feed_buf names;
    feed_buf_init(&names, TAR_MAX_CLASSES_BYTES);
    feed_tar_writer *w = calloc(1, sizeof(*w));
    *out = NULL;
    if (!w || !(w->path = strdup(path)) ||
        asprintf(&w->tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        if (w)
            w->tmp_path = NULL;
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", path);
        goto out;
    }
    for (uint32_t c = 0; c < num_classes && !rc; c++) {
        size_t n = strlen(class_names[c]);
        if (n == 0 || n > FEED_DATASET_MAX_NAME || strpbrk(class_names[c], "\r\n")) {
            rc = FEED_EINVAL;
            feed_set_err(err, err_cap, "%s: class %u name must be 1..%u bytes without a line break",
                         path, c, FEED_DATASET_MAX_NAME);
            goto out;
        }
        rc = feed_dataset_check_class_name(path, c, class_names[c], err, err_cap);
        if (!rc &&
            (feed_buf_append(&names, class_names[c], n) || feed_buf_append(&names, "\n", 1))) {
            rc = FEED_ETOOBIG;
            feed_set_err(err, err_cap, "%s: class names over %u bytes", path,
                         TAR_MAX_CLASSES_BYTES);
        }
    }
    if (rc)
        goto out;
    int fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && !(w->f = fdopen(fd, "wb")))
        close(fd);
    if (!w->f) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        goto out;
    }
    if (num_classes) {
        rc = write_member(w, TAR_CLASSES_KEY ".txt", names.data, names.len);
        if (!rc && !(w->ix.classes = malloc(names.len + 1)))
            rc = FEED_ENOMEM;
        if (!rc) {
            memcpy(w->ix.classes, names.data, names.len);
            w->ix.classes[names.len] = '\0';
            w->ix.classes_len = names.len;
        }
        if (rc)
            feed_set_err(err, err_cap, "%s: cannot write: %s", w->tmp_path, feed_strerror(rc));
    }
out:
    feed_buf_free(&names);
    if (rc) {
        feed_tar_writer_abort(w);
        w = NULL;
    }
    *out = w;
    return rc;
}

int feed_tar_writer_add(feed_tar_writer *w, const char *key, uint32_t label, const void *data,
                        size_t len)
{
    char name[MAX_KEY + 8], cls[16];
    size_t klen = strlen(key);
    if (klen == 0 || klen > MAX_KEY || strchr(key, '.') || label >= FEED_DATASET_MAX_CLASSES)
        return FEED_EINVAL;
    if ((uint64_t)len >= MAX_MEMBER_BYTES || len > UINT32_MAX)
        return FEED_ETOOBIG;
    if (w->ix.n == w->ix.cap) {
        size_t cap = w->ix.cap ? w->ix.cap * 2 : 256;
        tar_entry *v = realloc(w->ix.v, cap * sizeof(*v));
        if (!v)
            return FEED_ENOMEM;
        w->ix.v = v;
        w->ix.cap = cap;
    }
    uint64_t at = w->pos + TAR_BLOCK;
    snprintf(name, sizeof(name), "%s.jpg", key);
    int rc = write_member(w, name, data, len);
    if (rc)
        return rc;
    snprintf(name, sizeof(name), "%s.cls", key);
    int n = snprintf(cls, sizeof(cls), "%u", label);
    rc = write_member(w, name, cls, (size_t)n);
    if (rc)
        return rc;
    w->ix.v[w->ix.n++] = (tar_entry){.offset = at, .length = len, .label = label, .shard = 0};
    return 0;
}

/* fsync the directory holding path so a rename into it is durable. */
static void sync_parent(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

int tar_write_file_atomic(const char *path, const uint8_t *buf, size_t len, char *err,
                          size_t err_cap)
{
    int rc = 0;
    char *tmp = NULL;
    FILE *f = NULL;
    if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        tmp = NULL;
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", path);
        goto out;
    }
    f = fopen(tmp, "wbe");
    if (!f || fwrite(buf, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: cannot write: %s", tmp, strerror(errno));
        goto out;
    }
    int c = fclose(f);
    f = NULL;
    if (c != 0 || rename(tmp, path) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: cannot write: %s", path, strerror(errno));
        goto out;
    }
    sync_parent(path);
out:
    if (f)
        fclose(f);
    if (rc && tmp)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* Write ix as path.idx for a shard of shard_bytes, with a local shard's modification time. */
static int write_idx(const char *shard_path, const char *idx_path, const tar_index *ix,
                     uint64_t shard_bytes, char *err, size_t err_cap)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = tar_idx_build(ix, shard_bytes, tar_local_mtime_ns(shard_path), &buf, &len);
    if (rc)
        feed_set_err(err, err_cap, "%s: cannot build its index (%s)", shard_path,
                     feed_strerror(rc));
    else
        rc = tar_write_file_atomic(idx_path, buf, len, err, err_cap);
    free(buf);
    return rc;
}

int feed_tar_writer_finish(feed_tar_writer *w, char *err, size_t err_cap)
{
    int rc = 0;
    char *idx = NULL;
    static const uint8_t end[2 * TAR_BLOCK];
    if (fwrite(end, 1, sizeof(end), w->f) != sizeof(end) || fflush(w->f) != 0 ||
        fsync(fileno(w->f)) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: write failed: %s", w->tmp_path, strerror(errno));
        goto out;
    }
    w->pos += sizeof(end);
    FILE *f = w->f;
    w->f = NULL;
    if (fclose(f) != 0 || rename(w->tmp_path, w->path) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: write failed: %s", w->path, strerror(errno));
        unlink(w->tmp_path);
        goto out;
    }
    sync_parent(w->path);
    if (asprintf(&idx, "%s.idx", w->path) < 0) {
        idx = NULL;
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", w->path);
        goto out;
    }
    rc = write_idx(w->path, idx, &w->ix, w->pos, err, err_cap);
out:
    free(idx);
    feed_tar_writer_abort(w);
    return rc;
}

int feed_tar_write_index(const char *shard, const char *idx_path, char *err, size_t err_cap)
{
    feed_blob *b = NULL;
    tar_index ix = {0};
    int rc = feed_blob_open(shard, NULL, &b, err, err_cap);
    if (!rc)
        rc = tar_scan(b, UINT64_MAX, &ix, err, err_cap);
    if (!rc)
        rc = write_idx(shard, idx_path, &ix, b->size, err, err_cap);
    tar_index_free(&ix);
    feed_blob_close(b);
    return rc;
}
