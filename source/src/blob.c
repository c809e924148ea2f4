/*
 * Blobs (see feed/blob.h): feed_blob_open chooses by the location's scheme;
 * a local path becomes a local-file blob read with pread, so any number of
 * threads read one descriptor at once without sharing a file position.
 * Remote locations go to feed_remote_blob_open (remote/remote_blob.c). The
 * options' defaults and which locations are remote are blob_options.c's,
 * which both kinds use.
 *
 * A local blob is the file it was opened on: its device, inode, size and
 * modification time then. Every read stat()s the path first and fails with
 * FEED_ESTATE when the file there is another or was changed (replaced by a
 * rename, rewritten, truncated), FEED_ENOTFOUND when it is gone: a shard
 * index holds offsets into the file as it was, and no read may depend on
 * whether a descriptor of the old file happened to be still open. One stat
 * per read, as the tree format's open per sample.
 *
 * Descriptors: a local blob holds none of its own. A read takes its file's
 * from the process-wide cache `fds` (opened on demand, checked to be the same
 * file), and gives it back after; at most fds.limit stay open unused, the
 * least recently used closed first, and one in use is never closed. Lock:
 * fds.mu guards fds and every local blob's fd, users, prev and next; it is
 * held for list moves, counts and close() of an unused regular file (no
 * dirty data: read-only), never for an open() or a read.
 */
#include "feed/blob.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/strutil.h"

#define DEFAULT_OPEN_FILES 256u

typedef struct local_blob {
    feed_blob b; /* b.name is the path */
    uint64_t max_read_bytes;
    /* The file at open. */
    dev_t dev;
    ino_t ino;
    uint64_t mtime_ns;
    /* Guarded by fds.mu. */
    int fd;                         /* -1: not open */
    uint32_t users;                 /* reads using fd now */
    struct local_blob *prev, *next; /* in fds' idle list while open and unused */
} local_blob;

static struct {
    pthread_mutex_t mu;
    uint32_t limit;          /* descriptors kept open while unused */
    uint32_t open;           /* local blob descriptors open, in use or not */
    local_blob *head, *tail; /* open and unused, least recently used first */
} fds = {PTHREAD_MUTEX_INITIALIZER, DEFAULT_OPEN_FILES, 0, NULL, NULL};

void feed_blob_set_open_files(uint32_t n)
{
    pthread_mutex_lock(&fds.mu);
    fds.limit = n ? n : 1;
    pthread_mutex_unlock(&fds.mu);
}

uint32_t feed_blob_open_files(void)
{
    pthread_mutex_lock(&fds.mu);
    uint32_t n = fds.open;
    pthread_mutex_unlock(&fds.mu);
    return n;
}

/* Under fds.mu. */
static void idle_remove(local_blob *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        fds.head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        fds.tail = l->prev;
    l->prev = l->next = NULL;
}

/* Under fds.mu: l's descriptor is unused now, the most recently used. */
static void idle_add(local_blob *l)
{
    l->prev = fds.tail;
    l->next = NULL;
    if (fds.tail)
        fds.tail->next = l;
    else
        fds.head = l;
    fds.tail = l;
}

/* Under fds.mu: close unused descriptors, oldest first, down to the limit. */
static void evict(void)
{
    while (fds.open > fds.limit && fds.head) {
        local_blob *v = fds.head;
        idle_remove(v);
        close(v->fd);
        v->fd = -1;
        fds.open--;
    }
}

static uint64_t mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

/* 0 when st is the file l was opened on, else FEED_ESTATE with err. */
static int same_file(const local_blob *l, const struct stat *st, char *err, size_t err_cap)
{
    if (st->st_dev == l->dev && st->st_ino == l->ino && (uint64_t)st->st_size == l->b.size &&
        mtime_ns(st) == l->mtime_ns)
        return 0;
    feed_set_err(err, err_cap,
                 "%s: changed since it was opened (%s): its index no longer describes it; "
                 "restart feedd to serve the new file",
                 l->b.name,
                 st->st_dev != l->dev || st->st_ino != l->ino ? "another file is there now"
                 : (uint64_t)st->st_size != l->b.size         ? "its size changed"
                                                              : "it was modified");
    return FEED_ESTATE;
}

static int errno_code(int e)
{
    return e == ENOENT ? FEED_ENOTFOUND : e == EACCES || e == EPERM ? FEED_EAUTH : FEED_EIO;
}

/*
 * A descriptor of l's file, referenced (give it back with release): the cached
 * one, or a new one checked to be the same file. 0 or a FEED_E code with err.
 */
static int acquire(local_blob *l, int *fd, char *err, size_t err_cap)
{
    int rc = 0, nfd = -1;
    struct stat st;
    pthread_mutex_lock(&fds.mu);
    if (l->fd >= 0) {
        if (l->users++ == 0)
            idle_remove(l);
        *fd = l->fd;
        pthread_mutex_unlock(&fds.mu);
        goto out;
    }
    pthread_mutex_unlock(&fds.mu);
    nfd = open(l->b.name, O_RDONLY | O_CLOEXEC);
    if (nfd < 0) {
        rc = errno_code(errno);
        feed_set_err(err, err_cap, "%s: %s", l->b.name, strerror(errno));
        goto out;
    }
    if (fstat(nfd, &st) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", l->b.name, strerror(errno));
        goto out;
    }
    rc = same_file(l, &st, err, err_cap);
    if (rc)
        goto out;
    pthread_mutex_lock(&fds.mu);
    if (l->fd < 0) { /* else another reader opened it meanwhile: use that one */
        l->fd = nfd;
        nfd = -1;
        fds.open++;
        evict();
    } else if (l->users == 0) {
        idle_remove(l);
    }
    l->users++;
    *fd = l->fd;
    pthread_mutex_unlock(&fds.mu);
out:
    if (nfd >= 0)
        close(nfd);
    return rc;
}

static void release(local_blob *l)
{
    pthread_mutex_lock(&fds.mu);
    if (--l->users == 0) {
        idle_add(l);
        evict();
    }
    pthread_mutex_unlock(&fds.mu);
}

static int local_read(feed_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                      size_t err_cap)
{
    local_blob *l = (local_blob *)b;
    int rc = 0, fd = -1;
    uint64_t end;
    struct stat st;
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
    if (stat(b->name, &st) != 0) {
        rc = errno_code(errno);
        feed_set_err(err, err_cap, "%s: %s%s", b->name, strerror(errno),
                     errno == ENOENT ? " (removed since it was opened)" : "");
        goto out;
    }
    rc = same_file(l, &st, err, err_cap);
    if (!rc)
        rc = acquire(l, &fd, err, err_cap);
    if (rc)
        goto out;
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, dst + got, len - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = FEED_EIO;
            feed_set_err(err, err_cap, "%s: read at %llu: %s", b->name,
                         (unsigned long long)(offset + got), strerror(errno));
            break;
        }
        if (r == 0) {
            rc = FEED_ESTATE;
            feed_set_err(err, err_cap,
                         "%s: ends at %llu, before the %llu bytes it had at open "
                         "(changed since open)",
                         b->name, (unsigned long long)(offset + got), (unsigned long long)b->size);
            break;
        }
        got += (size_t)r;
    }
    release(l);
out:
    return rc;
}

/* Opens the file when its descriptor is not cached: an open() of a local file does no I/O that a
 * read-ahead hint would wait for. A file that changed is left for the read to report. */
static void local_prefetch(feed_blob *b, const feed_blob_range *ranges, size_t n)
{
    local_blob *l = (local_blob *)b;
    int fd;
    if (acquire(l, &fd, NULL, 0) != 0)
        return;
    for (size_t i = 0; i < n; i++)
        posix_fadvise(fd, (off_t)ranges[i].offset, (off_t)ranges[i].length, POSIX_FADV_WILLNEED);
    release(l);
}

uint64_t feed_file_stamp(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 1;
    uint64_t v[5] = {(uint64_t)st.st_ino, (uint64_t)st.st_dev, (uint64_t)st.st_size, mtime_ns(&st),
                     (uint64_t)st.st_ctim.tv_sec * 1000000000u + (uint64_t)st.st_ctim.tv_nsec};
    uint64_t h = 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < 5; i++) {
        h ^= v[i] + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
        h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9u;
    }
    return h > 1 ? h : h + 2;
}

static uint64_t local_stamp(feed_blob *b)
{
    return feed_file_stamp(b->name);
}

/* No read may be using l (the blob's owner closes it after its readers are done). */
static void local_close(feed_blob *b)
{
    local_blob *l = (local_blob *)b;
    pthread_mutex_lock(&fds.mu);
    if (l->fd >= 0) {
        idle_remove(l);
        close(l->fd);
        fds.open--;
    }
    pthread_mutex_unlock(&fds.mu);
    free(b->name);
    free(l);
}

static const feed_blob_ops local_ops = {
    .read = local_read,
    .prefetch = local_prefetch,
    .close = local_close,
    .stamp = local_stamp,
};

/* Opens the file to learn what it is, then leaves the descriptor in the cache. */
static int open_local(const char *path, const feed_blob_options *o, feed_blob **out, char *err,
                      size_t err_cap)
{
    int rc = 0, fd = -1;
    local_blob *l = calloc(1, sizeof(*l));
    if (!l || !(l->b.name = strdup(path))) {
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", path);
        goto out;
    }
    l->b.ops = &local_ops;
    l->max_read_bytes = o->max_read_bytes;
    l->fd = -1;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno_code(errno);
        feed_set_err(err, err_cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
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
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    l->mtime_ns = mtime_ns(&st);
    l->b.version = l->mtime_ns ^ (uint64_t)st.st_ino;
    pthread_mutex_lock(&fds.mu);
    l->fd = fd;
    fd = -1;
    fds.open++;
    idle_add(l);
    evict();
    pthread_mutex_unlock(&fds.mu);
out:
    if (fd >= 0)
        close(fd);
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
