/*
 * Indexing one tar shard (see tar_format.h): scanning its headers through a
 * blob (its index file is tar_index.c's). Runs on the thread that
 * opens the dataset (or feed-pack's main thread); nothing here is shared.
 *
 * What the scanner accepts: POSIX ustar (the prefix field joined to the
 * name), GNU tar (long names in 'L' members, base-256 sizes), pax ('x'
 * headers: path and size apply to the next member; 'g' global headers are
 * skipped), v7 headers. Directories, links, devices and GNU long link names
 * are skipped; sparse ('S') and multi-volume ('M') members are refused as
 * unsupported, and so are PNG images (the engine decodes JPEG only). A
 * header's checksum is checked (unsigned and, as old tars wrote it, signed
 * sums); the archive ends at the first zero block or at the end of the
 * object. Every size read from a header is checked against the object's size
 * before anything is read or skipped, so a damaged shard is refused with the
 * member's name, never read past.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <strings.h>

#include "dataset_impl.h"
#include "feed/errors.h"
#include "feed/strutil.h"
#include "tar_format.h"

/* ---- headers ---- */

/* An octal field (leading spaces, then digits, ended by NUL or space) or GNU base-256. */
static int parse_number(const uint8_t *f, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (f[0] & 0x80) {
        if (f[0] != 0x80)
            return -1; /* negative, or more than 56 bits we would not trust anyway */
        for (i = 1; i < n; i++) {
            if (v >> 55)
                return -1;
            v = v << 8 | f[i];
        }
        *out = v;
        return 0;
    }
    while (i < n && f[i] == ' ')
        i++;
    for (; i < n && f[i] != '\0' && f[i] != ' '; i++) {
        if (f[i] < '0' || f[i] > '7' || v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    *out = v;
    return 0;
}

static int checksum_ok(const uint8_t *h)
{
    uint64_t want;
    if (parse_number(h + 148, 8, &want) != 0)
        return 0;
    uint64_t u = 0;
    int64_t s = 0;
    for (size_t i = 0; i < TAR_BLOCK; i++) {
        uint8_t c = i >= 148 && i < 156 ? ' ' : h[i];
        u += c;
        s += (int8_t)c;
    }
    return u == want || (uint64_t)s == want;
}

uint64_t tar_local_mtime_ns(const char *shard)
{
    struct stat st;
    if (feed_blob_is_remote(shard) || stat(shard, &st) != 0)
        return 0;
    return (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
}

int tar_header_name(const uint8_t *h, uint64_t length, char *out, size_t cap)
{
    size_t name_len = strnlen((const char *)h, 100), prefix_len = 0;
    if (!checksum_ok(h) || !tar_header_fits(h, length) || name_len == 0 ||
        cap <= TAR_MEMBER_NAME_MAX)
        return -1;
    if (memcmp(h + 257, "ustar", 5) == 0)
        prefix_len = strnlen((const char *)h + 345, 155);
    /* A full name field with no prefix: a long name cut to fit, its whole in an earlier member. */
    if (name_len == 100 && prefix_len == 0)
        return -1;
    snprintf(out, cap, "%.*s%s%.*s", (int)prefix_len, (const char *)h + 345, prefix_len ? "/" : "",
             (int)name_len, (const char *)h);
    for (const char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f || *c == '\'')
            return -1;
    return 0;
}

int tar_header_fits(const uint8_t *h, uint64_t length)
{
    uint64_t size;
    return parse_number(h + 124, 12, &size) == 0 && size == length;
}

static int all_zero(const uint8_t *h)
{
    for (size_t i = 0; i < TAR_BLOCK; i++)
        if (h[i])
            return 0;
    return 1;
}

/* ---- the scan ---- */

typedef struct scan {
    feed_blob *b;
    uint8_t *chunk;
    uint64_t chunk_off;
    size_t chunk_len;
    size_t want; /* the next read's size, TAR_SCAN_MIN..TAR_SCAN_CHUNK: see scan_get */
    char *err;
    size_t err_cap;
    /* The member being looked at, for messages. */
    char name[FEED_DATASET_MAX_PATH + 1];
    /* The pending sample: consecutive members with one key. */
    char key[FEED_DATASET_MAX_PATH + 1];
    int have_key;
    int have_image, have_label;
    uint64_t image_off, image_len;
    uint32_t label;
    char other_image[16]; /* an image extension the engine does not decode, for the message */
    /* Keys of finished samples, to refuse a key that comes back. */
    feed_buf keys;
    uint64_t *key_off;
    size_t n_keys, keys_cap;
} scan;

/*
 * Bytes [off, off+len) of the object, len <= TAR_SCAN_CHUNK, through the
 * chunk. The read size adapts to the members: a miss right after the chunk
 * (small members, several headers a chunk) doubles it, a miss far past it
 * (a large member skipped) halves it, so shards of big images cost one small
 * read a member and shards of small ones few large reads.
 */
static int scan_get(scan *s, uint64_t off, size_t len, const uint8_t **p)
{
    uint64_t end = s->chunk_off + s->chunk_len;
    if (off >= s->chunk_off && off + len <= end) {
        *p = s->chunk + (off - s->chunk_off);
        return 0;
    }
    if (off >= end && off - end < TAR_BLOCK && s->want < TAR_SCAN_CHUNK)
        s->want *= 2;
    else if (off >= end && off - end > s->want && s->want > TAR_SCAN_MIN)
        s->want /= 2;
    uint64_t left = s->b->size - off;
    size_t n = s->want > len ? s->want : len;
    if (n > left)
        n = (size_t)left;
    s->chunk_len = 0;
    int rc = feed_blob_read(s->b, off, n, s->chunk, s->err, s->err_cap);
    if (rc)
        return rc;
    s->chunk_off = off;
    s->chunk_len = n;
    *p = s->chunk;
    return 0;
}

/* Bytes [off, off+len) into dst (any len the caller capped). */
static int scan_copy(scan *s, uint64_t off, size_t len, uint8_t *dst)
{
    const uint8_t *p;
    if (len <= TAR_SCAN_CHUNK) {
        int rc = scan_get(s, off, len, &p);
        if (!rc)
            memcpy(dst, p, len);
        return rc;
    }
    return feed_blob_read(s->b, off, len, dst, s->err, s->err_cap);
}

static int cmp_key(const void *a, const void *b, void *arg)
{
    const char *base = arg;
    return strcmp(base + *(const uint64_t *)a, base + *(const uint64_t *)b);
}

static int remember_key(scan *s)
{
    if (s->n_keys == s->keys_cap) {
        size_t cap = s->keys_cap ? s->keys_cap * 2 : 256;
        uint64_t *v = realloc(s->key_off, cap * sizeof(*v));
        if (!v)
            return FEED_ENOMEM;
        s->key_off = v;
        s->keys_cap = cap;
    }
    s->key_off[s->n_keys++] = s->keys.len;
    return feed_buf_append(&s->keys, s->key, strlen(s->key) + 1);
}

/* The pending sample is complete: add it, or say what it lacks. */
static int finish_sample(scan *s, tar_index *out, uint64_t max_samples)
{
    int rc = 0;
    if (!s->have_key)
        goto out;
    if (s->have_image && !s->have_label) {
        rc = FEED_ECORRUPT;
        feed_set_err(s->err, s->err_cap, "%s: sample '%s' has an image but no '%s.cls' label",
                     s->b->name, s->key, s->key);
    } else if (!s->have_image && s->have_label && s->other_image[0]) {
        rc = FEED_EUNSUPPORTED;
        feed_set_err(s->err, s->err_cap,
                     "%s: sample '%s' has a .%s image; feedd decodes JPEG only (.jpg/.jpeg): "
                     "convert the images to JPEG",
                     s->b->name, s->key, s->other_image);
    } else if (!s->have_image && s->have_label) {
        rc = FEED_ECORRUPT;
        feed_set_err(s->err, s->err_cap, "%s: sample '%s' has a label but no '%s.jpg' image",
                     s->b->name, s->key, s->key);
    } else if (s->have_image) {
        if (out->n >= max_samples) {
            rc = FEED_ETOOBIG;
            feed_set_err(s->err, s->err_cap, "%s: more than %llu samples (the max_samples limit)",
                         s->b->name, (unsigned long long)max_samples);
        } else {
            rc = tar_index_push(out, s->image_off, s->image_len, s->label);
        }
    }
    if (!rc)
        rc = remember_key(s);
out:
    s->have_key = s->have_image = s->have_label = 0;
    s->other_image[0] = '\0';
    return rc;
}

static int parse_label(scan *s, uint64_t off, uint64_t len)
{
    char text[TAR_MAX_LABEL_BYTES + 1];
    if (len > TAR_MAX_LABEL_BYTES) {
        feed_set_err(s->err, s->err_cap, "%s: member '%s': %llu bytes, not a label (at most %u)",
                     s->b->name, s->name, (unsigned long long)len, TAR_MAX_LABEL_BYTES);
        return FEED_ECORRUPT;
    }
    int rc = scan_copy(s, off, (size_t)len, (uint8_t *)text);
    if (rc)
        return rc;
    text[len] = '\0';
    size_t a = 0, e = (size_t)len;
    while (a < e && (text[a] == ' ' || text[a] == '\t' || text[a] == '\n' || text[a] == '\r'))
        a++;
    while (e > a && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n' ||
                     text[e - 1] == '\r'))
        e--;
    text[e] = '\0';
    uint64_t v = 0;
    /* The label is the whole member: a NUL inside would end the parse early ("1\0 2" as 1). */
    if (a == e || memchr(text + a, '\0', e - a) ||
        feed_parse_u64(text + a, 0, FEED_DATASET_MAX_CLASSES - 1, &v) < 0) {
        feed_set_err(s->err, s->err_cap,
                     "%s: member '%s': label is not a decimal integer 0..%u (%u classes at most)",
                     s->b->name, s->name, FEED_DATASET_MAX_CLASSES - 1, FEED_DATASET_MAX_CLASSES);
        return FEED_ECORRUPT;
    }
    s->label = (uint32_t)v;
    s->have_label = 1;
    return 0;
}

static int read_classes(scan *s, tar_index *out, uint64_t off, uint64_t len)
{
    if (out->classes)
        return 0; /* the first one counts */
    if (len > TAR_MAX_CLASSES_BYTES) {
        feed_set_err(s->err, s->err_cap, "%s: member '%s': %llu bytes of class names, over %u",
                     s->b->name, s->name, (unsigned long long)len, TAR_MAX_CLASSES_BYTES);
        return FEED_ETOOBIG;
    }
    out->classes = malloc((size_t)len + 1);
    if (!out->classes)
        return FEED_ENOMEM;
    int rc = scan_copy(s, off, (size_t)len, (uint8_t *)out->classes);
    out->classes[len] = '\0';
    out->classes_len = (size_t)len;
    return rc;
}

/* A regular member named s->name with len bytes at off. */
static int add_member(scan *s, tar_index *out, uint64_t max_samples, uint64_t off, uint64_t len)
{
    const char *base = strrchr(s->name, '/');
    base = base ? base + 1 : s->name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base)
        return 0; /* no extension, or a hidden file: not part of a sample */
    size_t klen = (size_t)(dot - s->name);
    const char *ext = dot + 1;
    int rc = 0;
    if (s->have_key && (strncmp(s->key, s->name, klen) != 0 || s->key[klen] != '\0'))
        rc = finish_sample(s, out, max_samples);
    if (rc)
        return rc;
    if (!s->have_key) {
        memcpy(s->key, s->name, klen);
        s->key[klen] = '\0';
        s->have_key = 1;
    }
    if (strcmp(s->key, TAR_CLASSES_KEY) == 0 && strcasecmp(ext, "txt") == 0)
        return read_classes(s, out, off, len);
    if (strcasecmp(ext, "jpg") == 0 || strcasecmp(ext, "jpeg") == 0) {
        if (s->have_image) {
            feed_set_err(s->err, s->err_cap, "%s: sample '%s' has a second image '%s'", s->b->name,
                         s->key, s->name);
            return FEED_ECORRUPT;
        }
        s->have_image = 1;
        s->image_off = off;
        s->image_len = len;
        return 0;
    }
    if (strcasecmp(ext, "cls") == 0) {
        if (s->have_label) {
            feed_set_err(s->err, s->err_cap, "%s: sample '%s' has a second label '%s'", s->b->name,
                         s->key, s->name);
            return FEED_ECORRUPT;
        }
        return parse_label(s, off, len);
    }
    if (strcasecmp(ext, "png") == 0 || strcasecmp(ext, "webp") == 0 || strcasecmp(ext, "ppm") == 0)
        snprintf(s->other_image, sizeof(s->other_image), "%s", ext);
    return 0;
}

/* Pax records "LEN key=value\n": path and size for the next member. */
static int parse_pax(scan *s, const char *p, size_t n, char *path, uint64_t *size, int *has_size)
{
    size_t pos = 0;
    while (pos < n) {
        size_t i = pos;
        uint64_t rlen = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9' && rlen < n)
            rlen = rlen * 10 + (uint64_t)(p[i++] - '0');
        if (i == pos || i >= n || p[i] != ' ' || rlen < 5 || rlen > n - pos ||
            p[pos + rlen - 1] != '\n') {
            feed_set_err(s->err, s->err_cap, "%s: malformed pax header before offset %zu",
                         s->b->name, pos);
            return FEED_ECORRUPT;
        }
        const char *kv = p + i + 1, *end = p + pos + rlen - 1;
        const char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (eq) {
            size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
            if (klen == 4 && memcmp(kv, "path", 4) == 0) {
                if (vlen == 0 || vlen > FEED_DATASET_MAX_PATH) {
                    feed_set_err(s->err, s->err_cap, "%s: pax path of %zu bytes (1..%u)",
                                 s->b->name, vlen, FEED_DATASET_MAX_PATH);
                    return FEED_ECORRUPT;
                }
                memcpy(path, eq + 1, vlen);
                path[vlen] = '\0';
            } else if (klen == 4 && memcmp(kv, "size", 4) == 0) {
                char num[24];
                if (vlen == 0 || vlen >= sizeof(num)) {
                    feed_set_err(s->err, s->err_cap, "%s: malformed pax size", s->b->name);
                    return FEED_ECORRUPT;
                }
                memcpy(num, eq + 1, vlen);
                num[vlen] = '\0';
                if (feed_parse_u64(num, 0, UINT64_MAX >> 1, size) < 0) {
                    feed_set_err(s->err, s->err_cap, "%s: malformed pax size '%s'", s->b->name,
                                 num);
                    return FEED_ECORRUPT;
                }
                *has_size = 1;
            }
        }
        pos += (size_t)rlen;
    }
    return 0;
}

static int scan_members(scan *s, tar_index *out, uint64_t max_samples)
{
    int rc = 0;
    uint64_t pos = 0, size = s->b->size;
    char next_path[FEED_DATASET_MAX_PATH + 1] = ""; /* from 'L' or pax, for the next member */
    uint64_t pax_size = 0;
    int has_pax_size = 0;
    char *meta = malloc(TAR_MAX_META_BYTES + 1);
    if (!meta)
        return FEED_ENOMEM;
    snprintf(s->name, sizeof(s->name), "%s", "(start)");
    while (pos < size) {
        const uint8_t *h;
        if (size - pos < TAR_BLOCK) {
            rc = FEED_ECORRUPT;
            feed_set_err(s->err, s->err_cap,
                         "%s: %llu trailing bytes after member '%s', not a whole 512-byte block "
                         "(truncated?)",
                         s->b->name, (unsigned long long)(size - pos), s->name);
            break;
        }
        rc = scan_get(s, pos, TAR_BLOCK, &h);
        if (rc || all_zero(h))
            break;
        if (!checksum_ok(h)) {
            rc = FEED_ECORRUPT;
            feed_set_err(s->err, s->err_cap,
                         "%s: bad header checksum at offset %llu (after member '%s')", s->b->name,
                         (unsigned long long)pos, s->name);
            break;
        }
        uint64_t len, data = pos + TAR_BLOCK, padded;
        if (parse_number(h + 124, 12, &len) != 0) {
            rc = FEED_ECORRUPT;
            feed_set_err(s->err, s->err_cap, "%s: bad size field at offset %llu", s->b->name,
                         (unsigned long long)pos);
            break;
        }
        char type = (char)h[156];
        int is_meta = type == 'L' || type == 'x' || type == 'K' || type == 'g';
        if (has_pax_size && !is_meta)
            len = pax_size; /* a pax size is the next file's, not another header's */
        if (next_path[0]) {
            snprintf(s->name, sizeof(s->name), "%s", next_path);
        } else if (memcmp(h + 257, "ustar\0", 6) == 0 && h[345]) {
            snprintf(s->name, sizeof(s->name), "%.*s/%.*s",
                     (int)strnlen((const char *)h + 345, 155), (const char *)h + 345,
                     (int)strnlen((const char *)h, 100), (const char *)h);
        } else {
            snprintf(s->name, sizeof(s->name), "%.*s", (int)strnlen((const char *)h, 100),
                     (const char *)h);
        }
        if (!is_meta) {
            next_path[0] = '\0';
            has_pax_size = 0;
        }
        if (len > size - data) {
            rc = FEED_ECORRUPT;
            feed_set_err(s->err, s->err_cap,
                         "%s: member '%s' at offset %llu: %llu bytes, but only %llu follow "
                         "(truncated)",
                         s->b->name, s->name, (unsigned long long)pos, (unsigned long long)len,
                         (unsigned long long)(size - data));
            break;
        }
        if (type == 'L' || type == 'x') {
            if (len > TAR_MAX_META_BYTES) {
                rc = FEED_ETOOBIG;
                feed_set_err(s->err, s->err_cap,
                             "%s: %s header of %llu bytes at offset %llu (at "
                             "most %u)",
                             s->b->name, type == 'L' ? "GNU long-name" : "pax",
                             (unsigned long long)len, (unsigned long long)pos, TAR_MAX_META_BYTES);
                break;
            }
            rc = scan_copy(s, data, (size_t)len, (uint8_t *)meta);
            if (rc)
                break;
            meta[len] = '\0';
            if (type == 'x') {
                rc = parse_pax(s, meta, (size_t)len, next_path, &pax_size, &has_pax_size);
            } else if (strnlen(meta, (size_t)len) == 0 ||
                       strnlen(meta, (size_t)len) > FEED_DATASET_MAX_PATH) {
                rc = FEED_ECORRUPT;
                feed_set_err(s->err, s->err_cap,
                             "%s: GNU long name at offset %llu is empty or "
                             "longer than %u bytes",
                             s->b->name, (unsigned long long)pos, FEED_DATASET_MAX_PATH);
            } else {
                snprintf(next_path, sizeof(next_path), "%s", meta);
            }
        } else if (type == 'S' || type == 'M') {
            rc = FEED_EUNSUPPORTED;
            feed_set_err(s->err, s->err_cap, "%s: member '%s' is a GNU %s member (unsupported)",
                         s->b->name, s->name, type == 'S' ? "sparse" : "multi-volume");
        } else if (type == '0' || type == '\0' || type == '7') {
            rc = add_member(s, out, max_samples, data, len);
        }
        if (rc)
            break;
        /* len <= size - data: the padded end may pass the end of a shard cut in its padding. */
        padded = len + (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK;
        pos = data + padded;
    }
    if (!rc && (next_path[0] || has_pax_size)) {
        rc = FEED_ECORRUPT;
        feed_set_err(s->err, s->err_cap, "%s: the archive ends after a long-name or pax header",
                     s->b->name);
    }
    if (!rc)
        rc = finish_sample(s, out, max_samples);
    free(meta);
    return rc;
}

int tar_scan(feed_blob *b, uint64_t max_samples, tar_index *out, char *err, size_t err_cap)
{
    int rc = 0;
    scan *s = calloc(1, sizeof(*s));
    memset(out, 0, sizeof(*out));
    if (!s || !(s->chunk = malloc(TAR_SCAN_CHUNK))) {
        rc = FEED_ENOMEM;
        goto out;
    }
    s->b = b;
    s->want = TAR_SCAN_MIN;
    s->err = err;
    s->err_cap = err_cap;
    feed_buf_init(&s->keys, SIZE_MAX);
    rc = scan_members(s, out, max_samples);
    if (!rc && s->n_keys > 1) {
        qsort_r(s->key_off, s->n_keys, sizeof(*s->key_off), cmp_key, s->keys.data);
        for (size_t i = 1; i < s->n_keys && !rc; i++) {
            const char *a = (const char *)s->keys.data + s->key_off[i - 1];
            if (strcmp(a, (const char *)s->keys.data + s->key_off[i]) == 0) {
                rc = FEED_ECORRUPT;
                feed_set_err(err, err_cap,
                             "%s: key '%s' appears in two places (members of a sample must be "
                             "consecutive, and keys unique)",
                             b->name, a);
            }
        }
    }
out:
    if (rc == FEED_ENOMEM)
        feed_set_err(err, err_cap, "%s: out of memory indexing the shard", b->name);
    if (s) {
        feed_buf_free(&s->keys);
        free(s->key_off);
        free(s->chunk);
        free(s);
    }
    if (rc)
        tar_index_free(out);
    return rc;
}
