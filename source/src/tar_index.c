/*
 * A tar shard's index (see tar_format.h): the list of its samples that the
 * scan (tar_scan.c) builds, and its index file, read back (tar_idx_parse,
 * every field checked against the shard and the caps) and written
 * (tar_idx_build). Runs on the thread that opens the dataset (or
 * feed-pack's main thread); nothing here is shared.
 */
#include <stdlib.h>
#include <string.h>

#include "dataset_impl.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/strutil.h"
#include "tar_format.h"

void tar_index_free(tar_index *ix)
{
    free(ix->v);
    free(ix->classes);
    memset(ix, 0, sizeof(*ix));
}

int tar_index_push(tar_index *ix, uint64_t offset, uint64_t length, uint32_t label)
{
    if (ix->n == ix->cap) {
        size_t cap = ix->cap ? ix->cap * 2 : 256;
        tar_entry *v = realloc(ix->v, cap * sizeof(*v));
        if (!v)
            return FEED_ENOMEM;
        ix->v = v;
        ix->cap = cap;
    }
    ix->v[ix->n++] = (tar_entry){.offset = offset, .length = length, .label = label, .shard = 0};
    return 0;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t idx_crc(const uint8_t *buf, size_t len)
{
    static const uint8_t zero[4];
    uint32_t crc = feed_crc32c(0, buf, 12);
    crc = feed_crc32c(crc, zero, 4);
    return feed_crc32c(crc, buf + 16, len - 16);
}

int tar_idx_parse(const uint8_t *buf, size_t len, uint64_t shard_bytes, uint64_t max_samples,
                  const char *name, tar_index *out, char *err, size_t err_cap)
{
    int rc = FEED_ECORRUPT;
    memset(out, 0, sizeof(*out));
    if (len < TAR_IDX_HEADER_BYTES || memcmp(buf, TAR_IDX_MAGIC, 8) != 0 ||
        get_u32(buf + 8) != TAR_IDX_VERSION) {
        feed_set_err(err, err_cap, "%s: not a version-%u shard index", name, TAR_IDX_VERSION);
        goto out;
    }
    if (get_u32(buf + 12) != idx_crc(buf, len)) {
        feed_set_err(err, err_cap, "%s: checksum mismatch", name);
        goto out;
    }
    uint64_t made_for = get_u64(buf + 16), count = get_u64(buf + 24), k = get_u64(buf + 32);
    uint64_t mtime_ns = get_u64(buf + 40);
    if (shard_bytes == TAR_IDX_ANY_SIZE)
        shard_bytes = made_for;
    if (made_for != shard_bytes) {
        rc = FEED_ESTATE;
        feed_set_err(err, err_cap, "%s: made for a shard of %llu bytes, the shard has %llu", name,
                     (unsigned long long)made_for, (unsigned long long)shard_bytes);
        goto out;
    }
    if (count > max_samples) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: %llu samples, over the max_samples limit", name,
                     (unsigned long long)count);
        goto out;
    }
    if (count > (len - TAR_IDX_HEADER_BYTES) / TAR_IDX_ENTRY_BYTES || k > TAR_MAX_CLASSES_BYTES ||
        TAR_IDX_HEADER_BYTES + count * TAR_IDX_ENTRY_BYTES + k != len) {
        feed_set_err(err, err_cap, "%s: its size does not match its header", name);
        goto out;
    }
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *e = buf + TAR_IDX_HEADER_BYTES + i * TAR_IDX_ENTRY_BYTES;
        uint64_t off = get_u64(e), n = get_u32(e + 8);
        uint32_t label = get_u32(e + 12);
        if (off < TAR_BLOCK || off % TAR_BLOCK || off > shard_bytes || n > shard_bytes - off ||
            label >= FEED_DATASET_MAX_CLASSES) {
            feed_set_err(err, err_cap,
                         "%s: entry %llu (offset %llu, %llu bytes, label %u) does "
                         "not fit the shard",
                         name, (unsigned long long)i, (unsigned long long)off,
                         (unsigned long long)n, label);
            goto out;
        }
        if (tar_index_push(out, off, n, label)) {
            rc = FEED_ENOMEM;
            feed_set_err(err, err_cap, "%s: out of memory", name);
            goto out;
        }
    }
    if (k) {
        out->classes = malloc((size_t)k + 1);
        if (!out->classes) {
            rc = FEED_ENOMEM;
            feed_set_err(err, err_cap, "%s: out of memory", name);
            goto out;
        }
        memcpy(out->classes, buf + len - k, (size_t)k);
        out->classes[k] = '\0';
        out->classes_len = (size_t)k;
    }
    out->shard_mtime_ns = mtime_ns;
    rc = 0;
out:
    if (rc)
        tar_index_free(out);
    return rc;
}

int tar_idx_build(const tar_index *ix, uint64_t shard_bytes, uint64_t shard_mtime_ns,
                  uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (ix->n > (SIZE_MAX - TAR_IDX_HEADER_BYTES - ix->classes_len) / TAR_IDX_ENTRY_BYTES)
        return FEED_ETOOBIG;
    size_t n = TAR_IDX_HEADER_BYTES + ix->n * TAR_IDX_ENTRY_BYTES + ix->classes_len;
    uint8_t *buf = calloc(1, n);
    if (!buf)
        return FEED_ENOMEM;
    memcpy(buf, TAR_IDX_MAGIC, 8);
    put_u32(buf + 8, TAR_IDX_VERSION);
    put_u64(buf + 16, shard_bytes);
    put_u64(buf + 24, ix->n);
    put_u64(buf + 32, ix->classes_len);
    put_u64(buf + 40, shard_mtime_ns);
    for (size_t i = 0; i < ix->n; i++) {
        uint8_t *e = buf + TAR_IDX_HEADER_BYTES + i * TAR_IDX_ENTRY_BYTES;
        if (ix->v[i].length > UINT32_MAX) {
            free(buf);
            return FEED_ETOOBIG;
        }
        put_u64(e, ix->v[i].offset);
        put_u32(e + 8, (uint32_t)ix->v[i].length);
        put_u32(e + 12, ix->v[i].label);
    }
    if (ix->classes_len)
        memcpy(buf + n - ix->classes_len, ix->classes, ix->classes_len);
    put_u32(buf + 12, idx_crc(buf, n));
    *out = buf;
    *len = n;
    return 0;
}
