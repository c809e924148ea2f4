/*
 * Fuzz target: indexing a tar shard (source/src/tar_scan.c, tar_index.c). Byte 0 even: the
 * rest is a shard, scanned through an in-memory blob (tar_scan), and what it
 * accepts must lie inside the shard and survive a round trip through the
 * index file. Byte 0 odd: the rest is a shard index file (tar_idx_parse) for a
 * shard of the size its header names. Before that every block that looks
 * like a ustar header gets its checksum recomputed, and an index file its
 * CRC, so mutations reach the checks behind them (bad checksums themselves
 * are covered by tests/unit/test_tar.c).
 */
#include <stdlib.h>
#include <string.h>

#include "feed/crc32c.h"
#include "feed/errors.h"
#include "fuzz.h"
#include "tar_format.h"

/* ---- an in-memory blob ---- */

typedef struct mem_blob {
    feed_blob b;
    const uint8_t *p;
} mem_blob;

static int mem_read(feed_blob *b, uint64_t offset, size_t len, uint8_t *dst, char *err,
                    size_t err_cap)
{
    (void)err;
    (void)err_cap;
    if (offset > b->size || len > b->size - offset)
        abort(); /* the scanner must check every range against the size first */
    memcpy(dst, ((mem_blob *)b)->p + offset, len);
    return 0;
}

static void mem_close(feed_blob *b)
{
    (void)b;
}

static const feed_blob_ops mem_ops = {.read = mem_read, .prefetch = NULL, .close = mem_close};

static void fix_tar_checksums(uint8_t *p, size_t size)
{
    for (size_t at = 0; at + TAR_BLOCK <= size; at += TAR_BLOCK) {
        uint8_t *h = p + at;
        if (memcmp(h + 257, "ustar", 5) != 0)
            continue;
        unsigned sum = 0;
        for (size_t i = 0; i < TAR_BLOCK; i++)
            sum += i >= 148 && i < 156 ? ' ' : h[i];
        for (int i = 5; i >= 0; i--, sum >>= 3)
            h[148 + i] = (uint8_t)('0' + (sum & 7));
        h[154] = '\0';
        h[155] = ' ';
    }
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void fix_idx_crc(uint8_t *p, size_t size)
{
    static const uint8_t zero[4];
    if (size < TAR_IDX_HEADER_BYTES)
        return;
    uint32_t crc = feed_crc32c(0, p, 12);
    crc = feed_crc32c(crc, zero, 4);
    crc = feed_crc32c(crc, p + 16, size - 16);
    for (int i = 0; i < 4; i++)
        p[12 + i] = (uint8_t)(crc >> (8 * i));
}

static void check_index(const tar_index *ix, uint64_t size)
{
    for (size_t i = 0; i < ix->n; i++)
        if (ix->v[i].offset % TAR_BLOCK || ix->v[i].offset > size ||
            ix->v[i].length > size - ix->v[i].offset)
            abort();
}

static void scan_shard(const uint8_t *p, size_t size)
{
    char err[512];
    mem_blob m = {.b = {.ops = &mem_ops, .size = size, .version = 0, .name = "fuzz.tar"}, .p = p};
    tar_index ix;
    int rc = tar_scan(&m.b, 1u << 16, &ix, err, sizeof(err));
    if (rc) {
        if (err[0] == '\0' || ix.v)
            abort(); /* a refusal says why and leaves nothing behind */
        return;
    }
    check_index(&ix, size);
    uint8_t *buf = NULL;
    size_t len = 0;
    tar_index back;
    if (tar_idx_build(&ix, size, 0, &buf, &len) == 0) {
        if (tar_idx_parse(buf, len, size, 1u << 16, "fuzz.tar.idx", &back, err, sizeof(err)) != 0 ||
            back.n != ix.n || back.classes_len != ix.classes_len)
            abort();
        for (size_t i = 0; i < ix.n; i++)
            if (back.v[i].offset != ix.v[i].offset || back.v[i].length != ix.v[i].length ||
                back.v[i].label != ix.v[i].label)
                abort();
        tar_index_free(&back);
    }
    free(buf);
    tar_index_free(&ix);
}

static void parse_idx(const uint8_t *p, size_t size)
{
    char err[512];
    tar_index ix;
    uint64_t shard = size >= TAR_IDX_HEADER_BYTES ? get_u64(p + 16) : 0;
    if (tar_idx_parse(p, size, shard, 1u << 16, "fuzz.idx", &ix, err, sizeof(err)) == 0) {
        check_index(&ix, shard);
        tar_index_free(&ix);
    } else if (err[0] == '\0' || ix.v) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t *copy = malloc(size);
    if (!copy)
        abort();
    memcpy(copy, data + 1, size - 1);
    if (data[0] & 1) {
        fix_idx_crc(copy, size - 1);
        parse_idx(copy, size - 1);
    } else {
        fix_tar_checksums(copy, size - 1);
        scan_shard(copy, size - 1);
    }
    free(copy);
    return 0;
}
