/*
 * The pack: a whole dataset in one file, written by feed-pack
 * (feed_pack_writer_*, one thread) and memory-mapped by feed_dataset_open()
 * (read-only afterwards, any number of threads), so the page cache is the
 * cache and reading a sample is a pointer.
 *
 * Layout, version 1. Every integer is little-endian and fixed width.
 *
 *   offset  size  field
 *   0       8     magic "FEEDPACK"
 *   8       4     version (1)
 *   12      4     header_bytes (80)
 *   16      8     sample_count N
 *   24      4     class_count C (1..1,000,000)
 *   28      4     CRC32C of bytes [0, data_offset) with this field read as 0
 *   32      8     index_offset  = 80
 *   40      8     names_offset  = index_offset + 16 * N
 *   48      8     names_bytes
 *   56      8     data_offset   = names_offset + names_bytes
 *   64      8     data_bytes;   file size = data_offset + data_bytes
 *   72      8     flags (0)
 *   80            index: N entries of 16 bytes
 *                   u64 offset  absolute file offset of the sample's JPEG bytes
 *                   u32 length  bytes
 *                   u32 label   < C
 *   names_offset  C class names, each 1..255 bytes of UTF-8 and a NUL, in label order
 *   data_offset   the JPEG bytes back to back, in index order
 *
 * The sections are contiguous and the file ends where the header says, so a
 * truncation anywhere is refused at open. The CRC covers header, index and
 * names (what the reader trusts); the JPEG bytes are not covered: checking
 * them would read the whole file at open, and a damaged image is reported
 * per sample by the decoder. At open every index entry is checked with
 * overflow-checked arithmetic to lie inside the data section and to carry a
 * label < C; after that no access can leave the mapping. The file must not be
 * truncated while it is mapped (that would raise SIGBUS), which is why the
 * writer replaces packs by rename rather than rewriting them in place.
 */
#include "feed/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_impl.h"
#include "feed/crc32c.h"
#include "feed/errors.h"
#include "feed/strutil.h"

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

/* CRC32C of [0, end) of a pack image with the CRC field counted as zero. */
static uint32_t pack_crc(const uint8_t *base, uint64_t end)
{
    static const uint8_t zero[4];
    uint32_t crc = feed_crc32c(0, base, FEED_PACK_OFF_CRC);
    crc = feed_crc32c(crc, zero, sizeof(zero));
    return feed_crc32c(crc, base + FEED_PACK_OFF_CRC + 4, end - FEED_PACK_OFF_CRC - 4);
}

/* The pack's own state (ds->impl). */
typedef struct pack_map {
    const uint8_t *map;
    size_t map_len;
    const uint8_t *index; /* count entries of FEED_PACK_ENTRY_BYTES, inside map */
} pack_map;

/* Entry i of an open pack. */
static void pack_entry(const pack_map *m, uint64_t i, uint64_t *offset, uint32_t *length,
                       uint32_t *label)
{
    const uint8_t *e = m->index + i * FEED_PACK_ENTRY_BYTES;
    *offset = get_u64(e + FEED_PACK_ENTRY_OFF_OFFSET);
    *length = get_u32(e + FEED_PACK_ENTRY_OFF_LENGTH);
    *label = get_u32(e + FEED_PACK_ENTRY_OFF_LABEL);
}

static void pack_close(struct feed_dataset *ds)
{
    pack_map *m = ds->impl;
    if (m) {
        if (m->map)
            munmap((void *)m->map, m->map_len);
        free(m);
    }
    ds->impl = NULL;
}

/* Checks the header against the file size; fills the section bounds. */
static int check_header(const uint8_t *h, uint64_t size, const char *path,
                        const feed_dataset_limits *lim, char *err, size_t err_cap)
{
    if (memcmp(h + FEED_PACK_OFF_MAGIC, FEED_PACK_MAGIC, 8) != 0) {
        feed_set_err(err, err_cap, "%s: not a feed pack (bad magic)", path);
        return FEED_ECORRUPT;
    }
    uint32_t version = get_u32(h + FEED_PACK_OFF_VERSION);
    if (version != FEED_PACK_VERSION) {
        feed_set_err(err, err_cap, "%s: pack version %u, this build reads version %u", path,
                     version, FEED_PACK_VERSION);
        return FEED_EUNSUPPORTED;
    }
    uint32_t header_bytes = get_u32(h + FEED_PACK_OFF_HEADER_BYTES);
    uint64_t count = get_u64(h + FEED_PACK_OFF_COUNT);
    uint32_t classes = get_u32(h + FEED_PACK_OFF_CLASSES);
    uint64_t index_off = get_u64(h + FEED_PACK_OFF_INDEX);
    uint64_t names_off = get_u64(h + FEED_PACK_OFF_NAMES);
    uint64_t names_bytes = get_u64(h + FEED_PACK_OFF_NAMES_BYTES);
    uint64_t data_off = get_u64(h + FEED_PACK_OFF_DATA);
    uint64_t data_bytes = get_u64(h + FEED_PACK_OFF_DATA_BYTES);
    uint64_t flags = get_u64(h + FEED_PACK_OFF_FLAGS);
    uint64_t index_bytes, index_end, names_end, data_end;

    if (header_bytes != FEED_PACK_HEADER_BYTES || index_off != FEED_PACK_HEADER_BYTES ||
        flags != 0) {
        feed_set_err(err, err_cap,
                     "%s: corrupt pack header (header size %u, index offset %llu, "
                     "flags %llu)",
                     path, header_bytes, (unsigned long long)index_off, (unsigned long long)flags);
        return FEED_ECORRUPT;
    }
    if (count > lim->max_samples) {
        feed_set_err(err, err_cap, "%s: %llu samples, more than the max_samples limit %llu", path,
                     (unsigned long long)count, (unsigned long long)lim->max_samples);
        return FEED_ETOOBIG;
    }
    if (count == 0 || classes == 0 || classes > FEED_DATASET_MAX_CLASSES) {
        feed_set_err(err, err_cap, "%s: corrupt pack header (%llu samples, %u classes)", path,
                     (unsigned long long)count, classes);
        return FEED_ECORRUPT;
    }
    if (__builtin_mul_overflow(count, (uint64_t)FEED_PACK_ENTRY_BYTES, &index_bytes) ||
        __builtin_add_overflow(index_off, index_bytes, &index_end) || names_off != index_end ||
        __builtin_add_overflow(names_off, names_bytes, &names_end) || data_off != names_end ||
        __builtin_add_overflow(data_off, data_bytes, &data_end)) {
        feed_set_err(err, err_cap,
                     "%s: corrupt pack header (sections overflow or are not "
                     "contiguous)",
                     path);
        return FEED_ECORRUPT;
    }
    if (data_end != size) {
        feed_set_err(err, err_cap, "%s: file is %llu bytes but its header says %llu (%s)", path,
                     (unsigned long long)size, (unsigned long long)data_end,
                     size < data_end ? "truncated" : "trailing bytes");
        return FEED_ECORRUPT;
    }
    return 0;
}

/* Class names: exactly C NUL-terminated names of 1..255 bytes filling the table. */
static int check_names(struct feed_dataset *ds, const uint8_t *names, uint64_t names_bytes,
                       const char *path, char *err, size_t err_cap)
{
    ds->class_names = calloc(ds->num_classes, sizeof(*ds->class_names));
    if (!ds->class_names) {
        feed_set_err(err, err_cap, "%s: out of memory", path);
        return FEED_ENOMEM;
    }
    uint64_t pos = 0;
    for (uint32_t c = 0; c < ds->num_classes; c++) {
        uint64_t left = names_bytes - pos;
        const uint8_t *nul = memchr(names + pos, 0, left > 256 ? 256 : (size_t)left);
        uint64_t n = nul ? (uint64_t)(nul - (names + pos)) : 0;
        if (!nul || n == 0 || n > FEED_DATASET_MAX_NAME) {
            feed_set_err(err, err_cap, "%s: corrupt class-name table at class %u", path, c);
            return FEED_ECORRUPT;
        }
        ds->class_names[c] = (const char *)(names + pos);
        if (feed_dataset_check_class_name(path, c, ds->class_names[c], err, err_cap) < 0)
            return FEED_ECORRUPT; /* the writer refuses such names: the table is damaged */
        pos += n + 1;
    }
    if (pos != names_bytes) {
        feed_set_err(err, err_cap, "%s: corrupt class-name table (%llu bytes left over)", path,
                     (unsigned long long)(names_bytes - pos));
        return FEED_ECORRUPT;
    }
    return 0;
}

static int pack_open(struct feed_dataset *ds, const char *path, const feed_dataset_limits *lim,
                     char *err, size_t err_cap)
{
    int rc = 0;
    int fd = -1;
    pack_map *m = calloc(1, sizeof(*m));
    if (!m) {
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory", path);
        goto out;
    }
    ds->impl = m;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? FEED_ENOTFOUND : FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < FEED_PACK_HEADER_BYTES) {
        rc = FEED_ECORRUPT;
        feed_set_err(err, err_cap,
                     "%s: %llu bytes, shorter than the %u-byte pack header (truncated?)", path,
                     (unsigned long long)size, FEED_PACK_HEADER_BYTES);
        goto out;
    }
    if (size > SIZE_MAX) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: too large to map", path);
        goto out;
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: mmap: %s", path, strerror(errno));
        goto out;
    }
    m->map = map;
    m->map_len = (size_t)size;
    const uint8_t *h = m->map;
    rc = check_header(h, size, path, lim, err, err_cap);
    if (rc)
        goto out;
    ds->count = get_u64(h + FEED_PACK_OFF_COUNT);
    ds->num_classes = get_u32(h + FEED_PACK_OFF_CLASSES);
    uint64_t names_off = get_u64(h + FEED_PACK_OFF_NAMES);
    uint64_t data_off = get_u64(h + FEED_PACK_OFF_DATA);
    uint64_t data_end = size;

    uint32_t want = get_u32(h + FEED_PACK_OFF_CRC);
    uint32_t got = pack_crc(h, data_off);
    if (want != got) {
        rc = FEED_ECORRUPT;
        feed_set_err(err, err_cap,
                     "%s: header/index checksum mismatch (stored %08x, computed %08x)", path, want,
                     got);
        goto out;
    }
    rc = check_names(ds, h + names_off, data_off - names_off, path, err, err_cap);
    if (rc)
        goto out;
    m->index = h + FEED_PACK_HEADER_BYTES;
    for (uint64_t i = 0; i < ds->count; i++) {
        uint64_t off, end;
        uint32_t len, label;
        pack_entry(m, i, &off, &len, &label);
        if (off < data_off || __builtin_add_overflow(off, (uint64_t)len, &end) || end > data_end) {
            rc = FEED_ECORRUPT;
            feed_set_err(err, err_cap,
                         "%s: index entry %llu (offset %llu, length %u) lies outside "
                         "the data section [%llu, %llu)",
                         path, (unsigned long long)i, (unsigned long long)off, len,
                         (unsigned long long)data_off, (unsigned long long)data_end);
            goto out;
        }
        if (label >= ds->num_classes) {
            rc = FEED_ECORRUPT;
            feed_set_err(err, err_cap,
                         "%s: index entry %llu has label %u, but there are %u classes", path,
                         (unsigned long long)i, label, ds->num_classes);
            goto out;
        }
    }
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int pack_claims(const char *location, const struct stat *st)
{
    (void)location;
    return st && S_ISREG(st->st_mode);
}

static uint32_t pack_label(const struct feed_dataset *ds, uint64_t i)
{
    uint64_t off;
    uint32_t len, label;
    pack_entry(ds->impl, i, &off, &len, &label);
    return label;
}

static uint64_t pack_sample_length(const struct feed_dataset *ds, uint64_t i)
{
    uint64_t off;
    uint32_t len, label;
    pack_entry(ds->impl, i, &off, &len, &label);
    return len;
}

static int pack_read(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch,
                     const uint8_t **data, size_t *len)
{
    const pack_map *m = ds->impl;
    uint64_t off;
    uint32_t length, label;
    (void)scratch;
    pack_entry(m, i, &off, &length, &label);
    if (length > ds->max_sample_bytes)
        return FEED_ETOOBIG;
    *data = m->map + off;
    *len = length;
    return 0;
}

const feed_dataset_ops feed_dataset_pack_ops = {
    .format = "pack",
    .claims = pack_claims,
    .open = pack_open,
    .label = pack_label,
    .sample_path = NULL,
    .where = NULL,
    .read = pack_read,
    .stamp = NULL,
    .sample_length = pack_sample_length,
    .prefetch = NULL,
    .close = pack_close,
};

/* ---- writer ---- */

struct feed_pack_writer {
    char *path;
    char *tmp_path;
    FILE *f;
    uint64_t count;
    uint64_t added;
    uint32_t num_classes;
    uint64_t data_off;
    uint64_t data_bytes;
    uint8_t *meta; /* header, index and names: [0, data_off) */
};

void feed_pack_writer_abort(feed_pack_writer *w)
{
    if (!w)
        return;
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp_path);
    }
    free(w->meta);
    free(w->tmp_path);
    free(w->path);
    free(w);
}

int feed_pack_writer_open(const char *path, uint64_t count, uint32_t num_classes,
                          const char *const *class_names, feed_pack_writer **out, char *err,
                          size_t err_cap)
{
    int rc = 0;
    feed_pack_writer *w = NULL;
    uint64_t names_bytes = 0, index_bytes, data_off;
    *out = NULL;
    if (count == 0 || num_classes == 0 || num_classes > FEED_DATASET_MAX_CLASSES) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: a pack needs 1.. samples and 1..%u classes", path,
                     FEED_DATASET_MAX_CLASSES);
        goto out;
    }
    for (uint32_t c = 0; c < num_classes; c++) {
        size_t n = strlen(class_names[c]);
        if (n == 0 || n > FEED_DATASET_MAX_NAME) {
            rc = FEED_EINVAL;
            feed_set_err(err, err_cap, "%s: class %u name is %zu bytes (1..%u allowed)", path, c, n,
                         FEED_DATASET_MAX_NAME);
            goto out;
        }
        rc = feed_dataset_check_class_name(path, c, class_names[c], err, err_cap);
        if (rc)
            goto out;
        names_bytes += n + 1;
    }
    if (__builtin_mul_overflow(count, (uint64_t)FEED_PACK_ENTRY_BYTES, &index_bytes) ||
        __builtin_add_overflow(index_bytes, FEED_PACK_HEADER_BYTES + names_bytes, &data_off) ||
        data_off > SIZE_MAX) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: %llu samples are too many for one pack", path,
                     (unsigned long long)count);
        goto out;
    }
    w = calloc(1, sizeof(*w));
    if (!w || !(w->meta = calloc(1, (size_t)data_off)) || !(w->path = strdup(path)) ||
        asprintf(&w->tmp_path, "%s.tmp.%ld", path, (long)getpid()) < 0) {
        if (w)
            w->tmp_path = NULL;
        rc = FEED_ENOMEM;
        feed_set_err(err, err_cap, "%s: out of memory for a %llu-sample index", path,
                     (unsigned long long)count);
        goto out;
    }
    w->count = count;
    w->num_classes = num_classes;
    w->data_off = data_off;
    uint8_t *m = w->meta;
    memcpy(m + FEED_PACK_OFF_MAGIC, FEED_PACK_MAGIC, 8);
    put_u32(m + FEED_PACK_OFF_VERSION, FEED_PACK_VERSION);
    put_u32(m + FEED_PACK_OFF_HEADER_BYTES, FEED_PACK_HEADER_BYTES);
    put_u64(m + FEED_PACK_OFF_COUNT, count);
    put_u32(m + FEED_PACK_OFF_CLASSES, num_classes);
    put_u64(m + FEED_PACK_OFF_INDEX, FEED_PACK_HEADER_BYTES);
    put_u64(m + FEED_PACK_OFF_NAMES, FEED_PACK_HEADER_BYTES + index_bytes);
    put_u64(m + FEED_PACK_OFF_NAMES_BYTES, names_bytes);
    put_u64(m + FEED_PACK_OFF_DATA, data_off);
    uint8_t *np = m + FEED_PACK_HEADER_BYTES + index_bytes;
    for (uint32_t c = 0; c < num_classes; c++) {
        size_t n = strlen(class_names[c]) + 1;
        memcpy(np, class_names[c], n);
        np += n;
    }
    int fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && !(w->f = fdopen(fd, "wb")))
        close(fd);
    if (!w->f || fseeko(w->f, (off_t)data_off, SEEK_SET) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        goto out;
    }
out:
    if (rc) {
        feed_pack_writer_abort(w);
        w = NULL;
    }
    *out = w;
    return rc;
}

int feed_pack_writer_add(feed_pack_writer *w, uint32_t label, const void *data, size_t len)
{
    if (w->added >= w->count || label >= w->num_classes || len > UINT32_MAX)
        return FEED_EINVAL;
    uint64_t off = w->data_off + w->data_bytes;
    if (len && fwrite(data, 1, len, w->f) != len)
        return FEED_EIO;
    uint8_t *e = w->meta + FEED_PACK_HEADER_BYTES + w->added * FEED_PACK_ENTRY_BYTES;
    put_u64(e + FEED_PACK_ENTRY_OFF_OFFSET, off);
    put_u32(e + FEED_PACK_ENTRY_OFF_LENGTH, (uint32_t)len);
    put_u32(e + FEED_PACK_ENTRY_OFF_LABEL, label);
    w->data_bytes += len;
    w->added++;
    return 0;
}

/* fsync the directory holding path so the rename itself is durable. */
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

int feed_pack_writer_finish(feed_pack_writer *w, char *err, size_t err_cap)
{
    int rc = 0;
    if (w->added != w->count) {
        rc = FEED_EINVAL;
        feed_set_err(err, err_cap, "%s: %llu of %llu samples added", w->path,
                     (unsigned long long)w->added, (unsigned long long)w->count);
        goto out;
    }
    put_u64(w->meta + FEED_PACK_OFF_DATA_BYTES, w->data_bytes);
    put_u32(w->meta + FEED_PACK_OFF_CRC, pack_crc(w->meta, w->data_off));
    if (fseeko(w->f, 0, SEEK_SET) != 0 ||
        fwrite(w->meta, 1, (size_t)w->data_off, w->f) != (size_t)w->data_off || fflush(w->f) != 0 ||
        fsync(fileno(w->f)) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: write failed: %s", w->tmp_path, strerror(errno));
        goto out;
    }
    FILE *f = w->f;
    w->f = NULL;
    if (fclose(f) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "%s: write failed: %s", w->tmp_path, strerror(errno));
        unlink(w->tmp_path);
        goto out;
    }
    if (rename(w->tmp_path, w->path) != 0) {
        rc = FEED_EIO;
        feed_set_err(err, err_cap, "rename %s -> %s: %s", w->tmp_path, w->path, strerror(errno));
        unlink(w->tmp_path);
        goto out;
    }
    sync_parent(w->path);
out:
    feed_pack_writer_abort(w);
    return rc;
}
