/*
 * A blob: one object's bytes, read by ranges. A local file or a remote object
 * (http://, https://, s3://). Dataset readers that read by ranges (tar shards;
 * packs where they are not memory-mapped) read through a blob, so the engine
 * and the service never know where bytes came from.
 *
 * Who implements what:
 *  - source/src/blob.c: feed_blob_open (chooses by the location's scheme), the
 *    local-file blob (pread through a bounded cache of descriptors, opened on
 *    demand: see feed_blob_set_open_files), and the thin wrappers below;
 *  - source/src/remote/remote*.c: the remote blob (libcurl; ranged GET, AWS SigV4,
 *    connection reuse, bounded parallel reads, read-ahead, retries), reached
 *    through feed_remote_blob_open.
 *
 * A blob is immutable after open apart from its implementation's own caches:
 * any number of threads may call read and prefetch at once. Messages written
 * into err name the object (b->name: the location without any credentials)
 * and the problem; they never hold credentials, signatures or tokens.
 */
#ifndef FEED_BLOB_H
#define FEED_BLOB_H

#include <stddef.h>
#include <stdint.h>

typedef struct feed_blob feed_blob;

typedef struct feed_blob_range {
    uint64_t offset;
    uint64_t length;
} feed_blob_range;

typedef struct feed_blob_ops {
    /*
     * Read exactly len bytes at offset into dst (caller's memory, len bytes).
     * Returns 0 or a negative FEED_E code: FEED_EINVAL (range outside the
     * object), FEED_ENOTFOUND (the object is gone), FEED_EAUTH (access
     * refused: 401/403, bad credentials), FEED_ESTATE (the object is not the
     * one opened: its size or version changed), FEED_ETOOBIG (len over
     * max_read_bytes), FEED_EIO (anything else, after the implementation's
     * retries). err (may be NULL) gets a message naming the object.
     */
    int (*read)(feed_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err, size_t err_cap);
    /*
     * Optional (NULL: no read-ahead). A hint that these ranges will be read
     * soon, in this order. Must not block on I/O; may drop hints it has no
     * room for. A later read of exactly such a range may be served from what
     * the hint fetched.
     */
    void (*prefetch)(feed_blob *b, const feed_blob_range *ranges, size_t n);
    void (*close)(feed_blob *b);
    /*
     * Optional (NULL: cannot tell without a request). A stamp of the object
     * as it is now, from one cheap local check: nonzero, and different
     * whenever its bytes may have changed since another stamp was taken.
     * Decoded-sample caches keep it beside what they made from the bytes.
     */
    uint64_t (*stamp)(feed_blob *b);
} feed_blob_ops;

struct feed_blob {
    const feed_blob_ops *ops;
    uint64_t size;    /* bytes, known at open */
    uint64_t version; /* the object when opened: mtime_ns ^ inode, or an ETag hash */
    char *name;       /* the location without credentials, for messages (owned) */
};

/*
 * Options for every blob a process opens. feed_blob_options_default() fills
 * the defaults; the remote fields may also come from the environment (see
 * source/src/remote/remote*.c).
 */
typedef struct feed_blob_remote_options {
    const char *endpoint;     /* S3 endpoint URL override (NULL: AWS_ENDPOINT_URL or AWS) */
    const char *region;       /* NULL: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1 */
    int path_style;           /* 1 path-style, 0 virtual-host, -1 decide from the endpoint */
    uint32_t connections;     /* parallel ranged reads per process */
    uint64_t readahead_bytes; /* cap on bytes fetched ahead and not yet read */
    uint32_t timeout_ms;      /* one request's limit */
    uint32_t retries;         /* on 5xx, timeouts and cut connections, with backoff */
    int redirects;            /* FEED_REMOTE_REDIRECTS_*: which 30x a plain URL follows */
} feed_blob_remote_options;

/*
 * Redirects of http(s):// objects: none (a 30x fails the request, naming the
 * object and the status), or only to the same scheme and host:port (a
 * mirror path on the same server), at most 3 hops. Never another host, never
 * https to http. s3:// requests never follow one.
 */
#define FEED_REMOTE_REDIRECTS_NONE 0
#define FEED_REMOTE_REDIRECTS_SAME_HOST 1

typedef struct feed_blob_options {
    uint64_t max_read_bytes; /* cap on one read (a sample or an index chunk) */
    feed_blob_remote_options remote;
} feed_blob_options;

void feed_blob_options_default(feed_blob_options *o);

/*
 * location as every message, log line and metric names it: a URL (anything
 * with "://") without its userinfo, query and fragment, where a password, a
 * presigned URL's signature or a token lives; any other location as it is.
 * Writes at most cap bytes, NUL-terminated when cap > 0, and returns the
 * length the whole text needs (>= cap: it was cut).
 */
size_t feed_location_redact(const char *location, char *out, size_t cap);

/* 1 when location names a remote object (http://, https://, s3://), else 0. */
int feed_blob_is_remote(const char *location);

/*
 * Open location (a local path or a URL). NULL options: the defaults. Returns
 * 0 or a negative FEED_E code with a message naming the object in err.
 */
int feed_blob_open(const char *location, const feed_blob_options *o, feed_blob **out, char *err,
                   size_t err_cap);
void feed_blob_close(feed_blob *b); /* accepts NULL */

static inline int feed_blob_read(feed_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                                 size_t err_cap)
{
    return b->ops->read(b, offset, len, dst, err, err_cap);
}

static inline void feed_blob_prefetch(feed_blob *b, const feed_blob_range *ranges, size_t n)
{
    if (b->ops->prefetch)
        b->ops->prefetch(b, ranges, n);
}

/* The object's stamp now (feed_blob_ops.stamp), or 0 when the blob cannot tell. */
static inline uint64_t feed_blob_stamp(feed_blob *b)
{
    return b->ops->stamp ? b->ops->stamp(b) : 0;
}

/*
 * A local file's stamp (a local blob's feed_blob_stamp): its inode, device,
 * size and modification and change times mixed into 64 bits, >= 2 (the
 * change time moves even when a rewrite forges the rest); 1 when stat()
 * fails, and the read then says why.
 */
uint64_t feed_file_stamp(const char *path);

/*
 * Local blobs hold no descriptor of their own: a read takes its file's from
 * a process-wide cache, opening it when it is not there. At most n (>= 1)
 * descriptors stay open while unused, the least recently used closed first;
 * one in use is never closed, so readers at once on more files than n hold
 * one more each until they finish. Default 256. Call before opening blobs
 * (any thread; it applies to later releases).
 */
void feed_blob_set_open_files(uint32_t n);
/* Local blob descriptors open now (in use or cached). */
uint32_t feed_blob_open_files(void);

/* Remote blobs (remote*.c): same contract as feed_blob_open. */
int feed_remote_blob_open(const char *location, const feed_blob_options *o, feed_blob **out,
                          char *err, size_t err_cap);

#endif
