/*
 * Tar shards as a dataset format (feed_dataset_tar_ops; the shard index is in
 * tar_scan.c, the layout rules in tar_format.h). Opened by one thread; after
 * that read and prefetch run on any number of worker threads at once, each
 * reading through the shards' blobs (which are thread-safe) into its own
 * scratch.
 *
 * A location is one shard (`dir/a.tar`, or a URL) or a brace pattern
 * (`dir/shard-{000000..000146}.tar`: each `{A..B}` a decimal range, zero
 * padded to A's width when A has a leading zero or A and B are as wide; more
 * than one group multiplies out; at most TAR_MAX_SHARDS shards). Shards are
 * read through feed_blob_open, so local paths and remote objects look the
 * same. The global sample index is shards in pattern order, samples in
 * member order within a shard; everything the client plans by index works
 * unchanged.
 *
 * Each shard is indexed once at open: from SHARD.idx beside it when there is
 * one made for this shard (one small read; any other index is ignored with
 * a warning), else by scanning its headers. Made for this shard: the same
 * size, the same modification time for a local shard whose index kept it
 * (feed-pack's do), and the first and last image members' headers where the
 * index says, with its sizes (two 512-byte reads). A sample read is one
 * ranged read of its image member.
 *
 * A shard that cannot be opened (missing, unreadable, refused) is a bad
 * shard: when an index file beside it gives its samples (read without the
 * shard, so only its own checks apply), they keep their places in the
 * global index and each read of one fails (FEED_ENOTFOUND for a missing
 * shard, else FEED_EIO) while every other shard is served, unless the
 * caller asked to refuse such a dataset (feed_dataset_limits.
 * refuse_bad_shards). A bad shard stays bad until the dataset is opened
 * again: the index read without it cannot be checked against it. A shard
 * whose samples cannot be listed (opened, but its index unusable and its
 * headers damaged; or not opened and no index) fails the open: the place of
 * every sample after it is unknown.
 *
 * Stamps (feed_dataset_sample_stamp): a local shard's stat (feed_file_stamp);
 * remote shards cannot tell without a request, so such a dataset is
 * unstamped.
 *
 * Class names: the first `__classes__.txt` member in shard order, one name a
 * line in label order (feed-pack writes one into every shard); without one,
 * the names are the decimal labels "0".."C-1" with C = the largest label + 1.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dataset_impl.h"
#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"
#include "feed/tar.h"
#include "tar_format.h"

#define TAR_MAX_SHARDS 100000u
#define TAR_MAX_READ_ERRORS_LOGGED 20u
#define TAR_IDX_MAX_BYTES (256u << 20)
#define PREFETCH_BATCH 64u

typedef struct tar_ds {
    feed_blob **shards; /* NULL for a bad shard */
    int *bad;           /* per shard: 0, or why it could not be opened (a FEED_E code) */
    char **where;       /* per shard: its last path component, for messages */
    size_t n_shards;
    tar_entry *v; /* count entries */
    char *names;  /* class names, NUL-terminated, back to back */
    atomic_uint errors_logged;
} tar_ds;

/* ---- brace patterns ---- */

typedef struct shard_list {
    char **v;
    size_t n, cap;
} shard_list;

static void shard_list_free(shard_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof(*l));
}

/*
 * Expand the first `{A..B}` group of pat (prefix already expanded into
 * `done`) and recurse on the rest. FEED_EINVAL for a brace that is not a
 * range, FEED_ETOOBIG past TAR_MAX_SHARDS.
 */
static int expand(const char *done, const char *pat, shard_list *out, const char *whole, char *err,
                  size_t err_cap)
{
    int rc = 0;
    char *buf = NULL;
    const char *open = strchr(pat, '{');
    if (!open) {
        if (out->n >= TAR_MAX_SHARDS) {
            feed_set_err(err, err_cap, "%s: more than %u shards", whole, TAR_MAX_SHARDS);
            return FEED_ETOOBIG;
        }
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 16;
            char **v = realloc(out->v, cap * sizeof(*v));
            if (!v)
                return FEED_ENOMEM;
            out->v = v;
            out->cap = cap;
        }
        if (asprintf(&out->v[out->n], "%s%s", done, pat) < 0)
            return FEED_ENOMEM;
        out->n++;
        return 0;
    }
    const char *close = strchr(open, '}');
    const char *dots = close ? strstr(open, "..") : NULL;
    char a[24], b[24];
    size_t alen = dots ? (size_t)(dots - open - 1) : 0;
    size_t blen = dots && dots < close ? (size_t)(close - dots - 2) : 0;
    uint64_t lo, hi;
    if (!close || !dots || dots > close || alen == 0 || alen >= sizeof(a) || blen == 0 ||
        blen >= sizeof(b)) {
        feed_set_err(err, err_cap, "%s: a brace must be a range {A..B} of decimal numbers", whole);
        return FEED_EINVAL;
    }
    memcpy(a, open + 1, alen);
    a[alen] = '\0';
    memcpy(b, dots + 2, blen);
    b[blen] = '\0';
    if (feed_parse_u64(a, 0, UINT32_MAX, &lo) < 0 || feed_parse_u64(b, 0, UINT32_MAX, &hi) < 0 ||
        hi < lo) {
        feed_set_err(err, err_cap, "%s: range {%s..%s} is not A..B with 0 <= A <= B", whole, a, b);
        return FEED_EINVAL;
    }
    if (hi - lo >= TAR_MAX_SHARDS) {
        feed_set_err(err, err_cap, "%s: more than %u shards", whole, TAR_MAX_SHARDS);
        return FEED_ETOOBIG;
    }
    int width = (a[0] == '0' && alen > 1) || alen == blen ? (int)alen : 0;
    for (uint64_t k = lo; k <= hi && !rc; k++) {
        if (asprintf(&buf, "%s%.*s%0*llu", done, (int)(open - pat), pat, width,
                     (unsigned long long)k) < 0) {
            buf = NULL;
            rc = FEED_ENOMEM;
            break;
        }
        rc = expand(buf, close + 1, out, whole, err, err_cap);
        free(buf);
        buf = NULL;
    }
    return rc;
}

int feed_tar_shard_names(const char *location, char ***out, size_t *n, char *err, size_t err_cap)
{
    shard_list l = {0};
    char where[4096];
    feed_location_redact(location, where, sizeof where);
    int rc = expand("", location, &l, where, err, err_cap);
    if (rc) {
        if (rc == FEED_ENOMEM)
            feed_set_err(err, err_cap, "%s: out of memory", where);
        shard_list_free(&l);
    }
    *out = rc ? NULL : l.v;
    *n = rc ? 0 : l.n;
    return rc;
}

void feed_tar_shard_names_free(char **names, size_t n)
{
    shard_list l = {.v = names, .n = n, .cap = n};
    shard_list_free(&l);
}

/* ---- open ---- */

/* Add text to the message in err (cut to fit). */
static void append_err(char *err, size_t err_cap, const char *text)
{
    size_t used = err ? strnlen(err, err_cap) : 0;
    if (err && used + 1 < err_cap)
        snprintf(err + used, err_cap - used, "%s", text);
}

static int tar_claims(const char *location, const struct stat *st)
{
    size_t n = strlen(location);
    if (st) /* it exists as written: a regular file named .tar (a directory named {..} is a tree) */
        return S_ISREG(st->st_mode) && n > 4 && strcasecmp(location + n - 4, ".tar") == 0;
    return feed_blob_is_remote(location) || strchr(location, '{') != NULL;
}

/*
 * Whether ix still describes the shard in b: the local shard's modification time, when the
 * index kept it, and the size fields of the headers of the first and last image members it
 * lists (timestamps are coarse; the headers also cover a URL and an index that kept no time).
 * 0, or FEED_ESTATE / the read's error with err.
 */
static int idx_still_fits(const char *shard, feed_blob *b, const tar_index *ix, const char *path,
                          char *err, size_t err_cap)
{
    uint64_t mtime = tar_local_mtime_ns(shard);
    if (ix->shard_mtime_ns && mtime && ix->shard_mtime_ns != mtime) {
        feed_set_err(err, err_cap, "%s: the shard was modified after it was indexed", path);
        return FEED_ESTATE;
    }
    for (size_t k = 0; k < 2 && ix->n; k++) {
        const tar_entry *e = &ix->v[k ? ix->n - 1 : 0];
        uint8_t h[TAR_BLOCK];
        int rc = feed_blob_read(b, e->offset - TAR_BLOCK, TAR_BLOCK, h, err, err_cap);
        if (rc)
            return rc;
        if (!tar_header_fits(h, e->length)) {
            feed_set_err(err, err_cap,
                         "%s: the member it lists at byte %llu is not in the shard (changed "
                         "after it was indexed)",
                         path, (unsigned long long)e->offset);
            return FEED_ESTATE;
        }
    }
    return 0;
}

/*
 * Where SHARD.idx is: beside a local shard; for a URL, ".idx" goes on the
 * path, before the query (so a store that takes a token in the query gets
 * it for the index too). NULL when out of memory.
 */
static char *idx_location(const char *shard)
{
    size_t at = feed_blob_is_remote(shard) ? strcspn(shard, "?#") : strlen(shard);
    char *path = NULL;
    if (asprintf(&path, "%.*s.idx%s", (int)at, shard, shard + at) < 0)
        path = NULL;
    return path;
}

/*
 * The shard's index from SHARD.idx when it has a usable one; 1 when it has none. b NULL: the
 * shard could not be opened, and the index is taken as it is (no size or header to check).
 */
static int load_idx(const char *shard, feed_blob *b, const feed_blob_options *bo,
                    uint64_t max_samples, tar_index *ix)
{
    int rc = 1;
    char *path = NULL, err[512] = "";
    feed_blob *ib = NULL;
    uint8_t *buf = NULL;
    path = idx_location(shard);
    if (!path)
        goto out;
    feed_blob_options idx_opts = *bo;
    idx_opts.max_read_bytes = TAR_IDX_MAX_BYTES;
    int e = feed_blob_open(path, &idx_opts, &ib, err, sizeof(err));
    if (e == FEED_ENOTFOUND)
        goto out;
    if (!e && ib->size > TAR_IDX_MAX_BYTES) {
        e = FEED_ETOOBIG;
        feed_set_err(err, sizeof(err), "%s: %llu bytes, over %u", ib->name,
                     (unsigned long long)ib->size, TAR_IDX_MAX_BYTES);
    }
    if (!e && !(buf = malloc(ib->size ? (size_t)ib->size : 1)))
        e = FEED_ENOMEM;
    if (!e)
        e = feed_blob_read(ib, 0, (size_t)ib->size, buf, err, sizeof(err));
    if (!e)
        e = tar_idx_parse(buf, (size_t)ib->size, b ? b->size : TAR_IDX_ANY_SIZE, max_samples,
                          ib->name, ix, err, sizeof(err));
    if (!e && b && (e = idx_still_fits(shard, b, ix, ib->name, err, sizeof(err))) != 0)
        tar_index_free(ix);
    if (e && b) {
        FEED_LOGW("dataset: ignoring the shard index: %s (%s); scanning %s instead", err,
                  feed_err_name(e), b->name);
    } else if (e) {
        char shown[4096];
        feed_location_redact(path, shown, sizeof shown);
        FEED_LOGW("dataset: the shard index %s is unusable too: %s (%s)", shown, err,
                  feed_err_name(e));
    }
    rc = e ? 1 : 0;
out:
    free(buf);
    feed_blob_close(ib);
    free(path);
    return rc;
}

/* Class names from the __classes__.txt text, or "0".."C-1"; checks every label. */
static int make_names(struct feed_dataset *ds, tar_ds *t, const char *text, const char *where,
                      char *err, size_t err_cap)
{
    uint32_t max_label = 0;
    for (uint64_t i = 0; i < ds->count; i++)
        if (t->v[i].label > max_label)
            max_label = t->v[i].label;
    feed_buf arena;
    feed_buf_init(&arena, SIZE_MAX);
    int rc = 0;
    uint32_t n = 0;
    if (text) {
        for (const char *p = text; *p && !rc;) {
            size_t len = strcspn(p, "\n");
            size_t name_len = len && p[len - 1] == '\r' ? len - 1 : len;
            if (name_len == 0 || name_len > FEED_DATASET_MAX_NAME ||
                n >= FEED_DATASET_MAX_CLASSES) {
                rc = FEED_ECORRUPT;
                feed_set_err(err, err_cap,
                             "%s: __classes__.txt line %u: a class name must be 1..%u bytes "
                             "(at most %u names)",
                             where, n + 1, FEED_DATASET_MAX_NAME, FEED_DATASET_MAX_CLASSES);
                break;
            }
            if (feed_buf_append(&arena, p, name_len) || feed_buf_append(&arena, "", 1))
                rc = FEED_ENOMEM;
            n++;
            p += len + (p[len] == '\n');
        }
        if (!rc && max_label >= n) {
            rc = FEED_ECORRUPT;
            feed_set_err(err, err_cap,
                         "%s: a sample has label %u, but __classes__.txt names %u "
                         "classes",
                         where, max_label, n);
        }
    } else {
        n = max_label + 1;
        char num[16];
        for (uint32_t c = 0; c < n && !rc; c++) {
            int w = snprintf(num, sizeof(num), "%u", c);
            if (feed_buf_append(&arena, num, (size_t)w + 1))
                rc = FEED_ENOMEM;
        }
    }
    if (!rc && !(ds->class_names = calloc(n, sizeof(*ds->class_names))))
        rc = FEED_ENOMEM;
    if (!rc) {
        t->names = (char *)arena.data;
        arena.data = NULL;
        const char *p = t->names;
        for (uint32_t c = 0; c < n && !rc; c++) {
            ds->class_names[c] = p;
            rc = feed_dataset_check_class_name(where, c, p, err, err_cap);
            p += strlen(p) + 1;
        }
        ds->num_classes = n;
    }
    if (rc == FEED_ENOMEM)
        feed_set_err(err, err_cap, "%s: out of memory for class names", where);
    feed_buf_free(&arena);
    return rc;
}

static int tar_open(struct feed_dataset *ds, const char *location, const feed_dataset_limits *lim,
                    char *err, size_t err_cap)
{
    int rc = 0;
    shard_list shards = {0};
    tar_index ix = {0};
    char *classes = NULL;
    size_t cap = 0;
    char where[4096]; /* location for messages: no credentials, no query */
    char shown[4096]; /* the shard being opened, so */
    tar_ds *t = calloc(1, sizeof(*t));
    feed_location_redact(location, where, sizeof where);
    if (!t) {
        rc = FEED_ENOMEM;
        goto out;
    }
    ds->impl = t;
    atomic_init(&t->errors_logged, 0);
    rc = expand("", location, &shards, where, err, err_cap);
    if (rc)
        goto out;
    if (!(t->shards = calloc(shards.n, sizeof(*t->shards)))) {
        rc = FEED_ENOMEM;
        goto out;
    }
    feed_blob_options bo;
    feed_blob_options_default(&bo);
    if (lim->max_sample_bytes > bo.max_read_bytes)
        bo.max_read_bytes = lim->max_sample_bytes;
    if (lim->remote)
        bo.remote = *lim->remote;
    if (!(t->bad = calloc(shards.n, sizeof(*t->bad))) ||
        !(t->where = calloc(shards.n, sizeof(*t->where)))) {
        rc = FEED_ENOMEM;
        goto out;
    }
    ds->unstamped = feed_blob_is_remote(shards.v[0]);
    for (size_t s = 0; s < shards.n; s++) {
        /* Messages name the shard redacted: a query's signature stays out of them. */
        feed_location_redact(shards.v[s], shown, sizeof shown);
        const char *slash = strrchr(shown, '/');
        if (!(t->where[s] = strdup(slash ? slash + 1 : shown))) {
            rc = FEED_ENOMEM;
            goto out;
        }
        t->n_shards++;
        uint64_t room = lim->max_samples - ds->count;
        rc = feed_blob_open(shards.v[s], &bo, &t->shards[s], err, err_cap);
        if (rc == FEED_ENOMEM)
            goto out;
        if (rc) {
            /* err names the shard and why; it is the dataset's message if this ends the open. */
            t->bad[s] = rc;
            if (lim->refuse_bad_shards) {
                append_err(err, err_cap, " (bad_shards=refuse: the dataset is refused)");
                goto out;
            }
            if (load_idx(shards.v[s], NULL, &bo, room, &ix) != 0) {
                append_err(err, err_cap,
                           "; without it or an index file (SHARD.idx) the places of the "
                           "samples after it are unknown, so the dataset is refused");
                goto out;
            }
            FEED_LOGW("dataset: bad shard: %s (%s); its %zu samples (from its index file) fail "
                      "each read, the other shards are served",
                      err, feed_err_name(rc), ix.n);
            ds->bad_shards++;
            rc = 0;
        } else if (load_idx(shards.v[s], t->shards[s], &bo, room, &ix) != 0) {
            rc = tar_scan(t->shards[s], room, &ix, err, err_cap);
            if (rc)
                goto out;
        }
        if (ix.n == 0)
            FEED_LOGW("dataset: shard %s has no samples", shown);
        if (ds->count + ix.n > cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            if (ncap < ds->count + ix.n)
                ncap = ds->count + ix.n;
            tar_entry *v = realloc(t->v, ncap * sizeof(*v));
            if (!v) {
                rc = FEED_ENOMEM;
                goto out;
            }
            t->v = v;
            cap = ncap;
        }
        for (size_t i = 0; i < ix.n; i++) {
            t->v[ds->count + i] = ix.v[i];
            t->v[ds->count + i].shard = (uint32_t)s;
        }
        ds->count += ix.n;
        if (!classes && ix.classes) {
            classes = ix.classes;
            ix.classes = NULL;
        }
        tar_index_free(&ix);
    }
    if (ds->count == 0) {
        rc = FEED_ENOTFOUND;
        feed_set_err(err, err_cap,
                     "%s: no samples in %zu shard(s) (expected KEY.jpg and "
                     "KEY.cls members)",
                     where, shards.n);
        goto out;
    }
    rc = make_names(ds, t, classes, where, err, err_cap);
out:
    if (rc == FEED_ENOMEM)
        feed_set_err(err, err_cap, "%s: out of memory indexing the shards", where);
    tar_index_free(&ix);
    free(classes);
    shard_list_free(&shards);
    return rc;
}

/* ---- reads ---- */

static uint32_t tar_label(const struct feed_dataset *ds, uint64_t i)
{
    const tar_ds *t = ds->impl;
    return t->v[i].label;
}

/* The image member's length from the index: shard names and offsets stay out of the
 * fingerprint, so the same samples cut into other shards, or fetched from elsewhere, match. */
static uint64_t tar_sample_length(const struct feed_dataset *ds, uint64_t i)
{
    const tar_ds *t = ds->impl;
    return t->v[i].length;
}

/* The blob's message without its leading "NAME: " (the caller names the sample's shard). */
static void cause_of(const char *err, const char *name, char *why, size_t why_cap)
{
    size_t n = strlen(name);
    if (strncmp(err, name, n) == 0 && strncmp(err + n, ": ", 2) == 0)
        err += n + 2;
    snprintf(why, why_cap, "%s", err);
}

static int tar_read_why(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch,
                        const uint8_t **data, size_t *len, char *why, size_t why_cap)
{
    tar_ds *t = ds->impl;
    const tar_entry *e = &t->v[i];
    feed_blob *b = t->shards[e->shard];
    char err[512] = "";
    if (e->length > ds->max_sample_bytes || e->length > scratch->limit)
        return FEED_ETOOBIG;
    int rc = b ? 0 : t->bad[e->shard];
    if (!b)
        snprintf(err, sizeof(err), "the shard could not be read at open (%s)", feed_err_name(rc));
    if (!rc)
        rc = feed_buf_reserve(scratch, e->length ? (size_t)e->length : 1);
    if (!rc)
        rc = feed_blob_read(b, e->offset, (size_t)e->length, scratch->data, err, sizeof(err));
    if (rc) {
        if (rc != FEED_ENOMEM &&
            atomic_fetch_add(&t->errors_logged, 1u) < TAR_MAX_READ_ERRORS_LOGGED)
            FEED_LOGW("dataset: sample %llu (%llu bytes at offset %llu of shard %s): %s",
                      (unsigned long long)i, (unsigned long long)e->length,
                      (unsigned long long)e->offset, t->where[e->shard], err);
        cause_of(err, b ? b->name : "", why, why_cap);
        /* A remote shard's refusal (FEED_EAUTH: 401/403) keeps its code. */
        return rc == FEED_ENOTFOUND || rc == FEED_ETOOBIG || rc == FEED_ENOMEM || rc == FEED_EAUTH
                   ? rc
                   : FEED_EIO;
    }
    scratch->len = (size_t)e->length;
    *data = scratch->data;
    *len = scratch->len;
    return 0;
}

static int tar_read(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch,
                    const uint8_t **data, size_t *len)
{
    char why[512];
    return tar_read_why(ds, i, scratch, data, len, why, sizeof why);
}

/* The shard's stamp; 1 for a bad shard (its reads fail, and nothing is made from them). */
static uint64_t tar_stamp(const struct feed_dataset *ds, uint64_t i)
{
    const tar_ds *t = ds->impl;
    feed_blob *b = t->shards[t->v[i].shard];
    return b ? feed_blob_stamp(b) : 1;
}

/*
 * "SHARD, member 'NAME' at byte N" (SHARD: the shard object's last path component; N: the
 * offset of the member's bytes), or "SHARD, member at byte N" when the name cannot be had:
 * not to be read (may_read 0), unreadable, not whole in the header (a long name), or longer
 * than cap leaves room for. The index keeps no names (they would cost memory for every sample
 * to serve the rare failed one), so the header is read back here.
 */
static void tar_where(const struct feed_dataset *ds, uint64_t i, int may_read, char *buf,
                      size_t cap)
{
    const tar_ds *t = ds->impl;
    const tar_entry *e = &t->v[i];
    feed_blob *b = t->shards[e->shard];
    const char *shard = t->where[e->shard];
    uint8_t h[TAR_BLOCK];
    char member[TAR_MEMBER_NAME_MAX + 1], err[256];
    unsigned long long at = (unsigned long long)e->offset;
    if (may_read && b && e->offset >= TAR_BLOCK &&
        feed_blob_read(b, e->offset - TAR_BLOCK, TAR_BLOCK, h, err, sizeof err) == 0 &&
        tar_header_name(h, e->length, member, sizeof member) == 0) {
        int n = snprintf(buf, cap, "%s, member '%s' at byte %llu", shard, member, at);
        if (n >= 0 && (size_t)n < cap)
            return;
    }
    snprintf(buf, cap, "%s, member at byte %llu", shard, at);
}

/* A bad shard's samples are no object's: their reads fail at once, without I/O. */
static const char *tar_object(const struct feed_dataset *ds, uint64_t i)
{
    const tar_ds *t = ds->impl;
    const feed_blob *b = t->shards[t->v[i].shard];
    return b && feed_blob_is_remote(b->name) ? b->name : NULL;
}

static void tar_prefetch(const struct feed_dataset *ds, const uint64_t *indices, size_t n)
{
    const tar_ds *t = ds->impl;
    feed_blob_range r[PREFETCH_BATCH];
    size_t k = 0;
    uint32_t shard = 0;
    for (size_t j = 0; j < n; j++) {
        if (indices[j] >= ds->count)
            continue;
        const tar_entry *e = &t->v[indices[j]];
        if (!t->shards[e->shard])
            continue;
        if (k && (e->shard != shard || k == PREFETCH_BATCH)) {
            feed_blob_prefetch(t->shards[shard], r, k);
            k = 0;
        }
        shard = e->shard;
        r[k++] = (feed_blob_range){.offset = e->offset, .length = e->length};
    }
    if (k)
        feed_blob_prefetch(t->shards[shard], r, k);
}

static void tar_close(struct feed_dataset *ds)
{
    tar_ds *t = ds->impl;
    if (t) {
        for (size_t s = 0; s < t->n_shards; s++) {
            feed_blob_close(t->shards[s]);
            free(t->where[s]);
        }
        free(t->shards);
        free(t->bad);
        free(t->where);
        free(t->v);
        free(t->names);
        free(t);
    }
    ds->impl = NULL;
}

const feed_dataset_ops feed_dataset_tar_ops = {
    .format = "tar",
    .claims = tar_claims,
    .open = tar_open,
    .label = tar_label,
    .sample_path = NULL,
    .where = tar_where,
    .object = tar_object,
    .read = tar_read,
    .read_why = tar_read_why,
    .stamp = tar_stamp,
    .sample_length = tar_sample_length,
    .prefetch = tar_prefetch,
    .close = tar_close,
};
