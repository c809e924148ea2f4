/*
 * Blobs (see feed/blob.h): feed_blob_open chooses by the location's scheme;
 * a local path becomes a local-file blob read with pread, so any number of
 * threads read one descriptor at once without sharing a file position.
 * Remote locations go to feed_remote_blob_open (remote_blob.c).
 *
 * A local blob's version is mtime_ns ^ inode at open; each read checks
 * nothing further (a pread is one system call and adding an fstat to each
 * would double it): a file replaced by rename keeps the old inode open and
 * reads stay consistent, a file truncated in place gives short reads, which
 * are reported as FEED_ESTATE ("changed since open").
 */
#include "feed/blob.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/strutil.h"

#define DEFAULT_MAX_READ_BYTES (64u << 20)

void feed_blob_options_default(feed_blob_options *o)
{
    memset(o, 0, sizeof(*o));
    o->max_read_bytes = DEFAULT_MAX_READ_BYTES;
    o->remote.endpoint = NULL;
    o->remote.region = NULL;
    o->remote.path_style = -1;
    o->remote.connections = 8;
    o->remote.readahead_bytes = 64u << 20;
    o->remote.timeout_ms = 30000;
    o->remote.retries = 4;
}

int feed_blob_is_remote(const char *location)
{
    return strncmp(location, "http://", 7) == 0 || strncmp(location, "https://", 8) == 0 ||
           strncmp(location, "s3://", 5) == 0;
}

typedef struct local_blob {
    feed_blob b;
    int fd;
    uint64_t max_read_bytes;
} local_blob;

static int local_read(feed_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                      size_t err_cap)
{
    local_blob *l = (local_blob *)b;
    int rc = 0;
    uint64_t end;
    if (len > l->max_read_bytes) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: a read of %zu bytes is over the %llu-byte cap", b->name,
                     len, (unsigned long long)l->max_read_bytes);
        goto out;
    }
    if (__builtin_add_overflow(offset, (uint64_t)len, &end) || end > b->size) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: range [%llu, +%zu) lies outside its %llu bytes", b->name,
                     (unsigned long long)offset, len, (unsigned long long)b->size);
        goto out;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(l->fd, dst + got, len - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = FEED_EIO;
            feed_set_err(err, err_cap, "%s: read at %llu: %s", b->name,
                         (unsigned long long)(offset + got), strerror(errno));
            goto out;
        }
        if (r == 0) {
            rc = FEED_ESTATE;
            feed_set_err(err, err_cap,
                         "%s: ends at %llu, before the %llu bytes it had at open "
                         "(changed since open)",
                         b->name, (unsigned long long)(offset + got), (unsigned long long)b->size);
            goto out;
        }
        got += (size_t)r;
    }
out:
    return rc;
}

static void local_prefetch(feed_blob *b, const feed_blob_range *ranges, size_t n)
{
    local_blob *l = (local_blob *)b;
    for (size_t i = 0; i < n; i++)
        posix_fadvise(l->fd, (off_t)ranges[i].offset, (off_t)ranges[i].length, POSIX_FADV_WILLNEED);
}

static void local_close(feed_blob *b)
{
    local_blob *l = (local_blob *)b;
    if (l->fd >= 0)
        close(l->fd);
    free(b->name);
    free(l);
}

static const feed_blob_ops local_ops = {
    .read = local_read,
    .prefetch = local_prefetch,
    .close = local_close,
};

static int open_local(const char *path, const feed_blob_options *o, feed_blob **out, char *err,
                      size_t err_cap)
{
    int rc = 0;
    local_blob *l = calloc(1, sizeof(*l));
    if (!l || !(l->b.name = strdup(path))) {
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", path);
        goto out;
    }
    l->b.ops = &local_ops;
    l->max_read_bytes = o->max_read_bytes;
    l->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (l->fd < 0) {
        rc = errno == ENOENT ? FEED_ENOTFOUND : errno == EACCES ? FEED_EAUTH : FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(l->fd, &st) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: not a regular file", path);
        goto out;
    }
    l->b.size = (uint64_t)st.st_size;
    l->b.version = ((uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec) ^
                   (uint64_t)st.st_ino;
out:
    if (rc && l) {
        local_close(&l->b);
        l = NULL;
    }
    *out = l ? &l->b : NULL;
    return rc;
}

int feed_blob_open(const char *location, const feed_blob_options *o, feed_blob **out, char *err,
                   size_t err_cap)
{
    feed_blob_options dflt;
    if (!o) {
        feed_blob_options_default(&dflt);
        o = &dflt;
    }
    if (feed_blob_is_remote(location))
        return feed_remote_blob_open(location, o, out, err, err_cap);
    return open_local(location, o, out, err, err_cap);
}

void feed_blob_close(feed_blob *b)
{
    if (b)
        b->ops->close(b);
}
