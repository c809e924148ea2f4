/*
 * ImageFolder trees as a dataset format (feed_dataset_folder_ops; the public
 * accessors are in dataset.c). See feed/dataset.h.
 *
 * ImageFolder rules (recorded here because labels depend on them):
 *  - root/<class>/<file>; one level only: subdirectories inside a class
 *    directory are ignored (torchvision would descend into them);
 *  - names starting with '.' are ignored at both levels, and so are
 *    non-directories at the top level and non-regular files inside a class;
 *    inside a class, a directory (any name) or a FIFO, device or socket with
 *    an image's name is logged as skipped (at most MAX_SKIP_WARNINGS lines
 *    per open, then one count), since the user probably meant it to count;
 *  - a file is an image when its name ends in ".jpg" or ".jpeg" in any letter
 *    case (".JPEG" is ImageNet's; ".JPG" is common from cameras);
 *  - symbolic links are followed, for class directories and files alike (a
 *    tree of links into another tree is a common way to make a subset); a
 *    dangling link is skipped with a warning;
 *  - classes sorted by name in byte order (strcmp) get labels 0..C-1; a class
 *    directory without images keeps its label (so labels do not shift when a
 *    class is empty) and is logged;
 *  - a class directory whose name is not valid UTF-8 fails the open (see
 *    feed/dataset.h);
 *  - caps: limits->max_samples samples, FEED_DATASET_MAX_CLASSES classes,
 *    FEED_DATASET_MAX_PATH bytes per sample path; beyond any of them the open
 *    fails with FEED_ETOOBIG and says which cap.
 *
 * One thread opens; afterwards the dataset is immutable and every accessor
 * may be called from any number of threads. feed_dataset_read() on a tree
 * uses only the caller's scratch buffer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_impl.h"
#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"

/* The tree's own state (ds->impl). */
typedef struct folder {
    char *names;           /* class names then sample paths, NUL-terminated, back to back */
    uint64_t *path_offset; /* count entries: offset of sample i's path in names */
    uint32_t *labels;      /* count entries */
    /* count entries: sample i's bytes as its stat gave them at open (the fingerprint's), for
     * feed_dataset_sample_length without I/O; UINT32_MAX: not a regular file then, or 4 GiB or
     * more. */
    uint32_t *lengths;
} folder;

/* A growable array of names (each malloc'd), bounded by max entries. */
typedef struct name_list {
    char **v;
    size_t n;
    size_t cap;
} name_list;

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int name_list_push(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return FEED_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return FEED_ENOMEM;
    l->v[l->n++] = copy;
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_jpeg_name(const char *name)
{
    size_t n = strlen(name);
    return (n > 4 && strcasecmp(name + n - 4, ".jpg") == 0) ||
           (n > 5 && strcasecmp(name + n - 5, ".jpeg") == 0);
}

/* Warnings about skipped entries one open logs before it only counts them. */
#define MAX_SKIP_WARNINGS 20

/*
 * What a directory entry is, following links: its S_IFMT bits, or 0 for a
 * dangling link (logged) or a path too long to look at. d_type saves a stat
 * per file when the file system fills it in.
 */
static mode_t entry_kind(const char *dir_path, const struct dirent *de)
{
    mode_t kind = 0;
    char path[FEED_DATASET_MAX_PATH + 1];
    struct stat st;
    switch (de->d_type) {
    case DT_DIR:
        kind = S_IFDIR;
        break;
    case DT_REG:
        kind = S_IFREG;
        break;
    case DT_FIFO:
        kind = S_IFIFO;
        break;
    case DT_CHR:
        kind = S_IFCHR;
        break;
    case DT_BLK:
        kind = S_IFBLK;
        break;
    case DT_SOCK:
        kind = S_IFSOCK;
        break;
    default: {
        int w = snprintf(path, sizeof(path), "%s/%s", dir_path, de->d_name);
        if (w < 0 || (size_t)w >= sizeof(path))
            break;
        if (stat(path, &st) != 0)
            FEED_LOGW("dataset: skipping %s: %s", path, strerror(errno));
        else
            kind = st.st_mode & S_IFMT;
        break;
    }
    }
    return kind;
}

static const char *kind_name(mode_t kind)
{
    switch (kind) {
    case S_IFDIR:
        return "a directory (class directories are not searched below their first level)";
    case S_IFIFO:
        return "a FIFO";
    case S_IFCHR:
        return "a character device";
    case S_IFBLK:
        return "a block device";
    case S_IFSOCK:
        return "a socket";
    default:
        return "not a regular file";
    }
}

/* Log (bounded by *skipped, the open's count so far) that an entry of a class is not a sample. */
static void warn_skipped(const char *dir_path, const char *name, mode_t kind, size_t *skipped)
{
    if (*skipped < MAX_SKIP_WARNINGS)
        FEED_LOGW("dataset: skipping %s/%s: %s, not an image file", dir_path, name,
                  kind_name(kind));
    ++*skipped;
}

/*
 * The visible entries of dir_path of the given kind (images only when
 * kind == S_IFREG), sorted. At most max entries, else FEED_ETOOBIG. When
 * listing images, the entries that look meant as samples but are not regular
 * files are logged and counted in *skipped.
 */
static int list_dir(const char *dir_path, mode_t kind, size_t max, name_list *out, size_t *skipped,
                    char *err, size_t err_cap)
{
    int rc = 0;
    DIR *d = opendir(dir_path);
    if (!d) {
        rc = errno == ENOENT ? FEED_ENOTFOUND : FEED_EIO;
        feed_set_err(err, err_cap, "%s: cannot open directory: %s", dir_path, strerror(errno));
        goto out;
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno) {
                rc = FEED_EIO;
                feed_set_err(err, err_cap, "%s: cannot read directory: %s", dir_path,
                             strerror(errno));
            }
            break;
        }
        if (de->d_name[0] == '.')
            continue;
        if (kind == S_IFREG && !is_jpeg_name(de->d_name)) {
            if (de->d_type == DT_DIR)
                warn_skipped(dir_path, de->d_name, S_IFDIR, skipped);
            continue;
        }
        mode_t got = entry_kind(dir_path, de);
        if (got != kind) {
            if (kind == S_IFREG && got != 0)
                warn_skipped(dir_path, de->d_name, got, skipped);
            continue;
        }
        if (out->n >= max) {
            rc = FEED_ETOOBIG;
            feed_set_err(err, err_cap, "%s: more than %zu %s", dir_path, max,
                         kind == S_IFDIR ? "class directories" : "samples in all");
            break;
        }
        rc = name_list_push(out, de->d_name);
        if (rc) {
            feed_set_err(err, err_cap, "%s: out of memory listing the directory", dir_path);
            break;
        }
    }
    if (!rc && out->n > 1)
        qsort(out->v, out->n, sizeof(out->v[0]), cmp_names);
out:
    if (d)
        closedir(d);
    return rc;
}

/* Appends s and its NUL to the arena; returns its offset through *off. */
static int arena_add(feed_buf *arena, const char *a, const char *b, const char *c, uint64_t *off)
{
    *off = arena->len;
    int rc = feed_buf_append(arena, a, strlen(a));
    if (!rc && b)
        rc = feed_buf_append(arena, "/", 1);
    if (!rc && b)
        rc = feed_buf_append(arena, b, strlen(b));
    if (!rc && c)
        rc = feed_buf_append(arena, "/", 1);
    if (!rc && c)
        rc = feed_buf_append(arena, c, strlen(c));
    if (!rc)
        rc = feed_buf_append(arena, "", 1);
    return rc;
}

/* Grows the per-sample arrays to hold at least `need` entries. */
static int grow_samples(folder *t, uint64_t need, uint64_t *cap)
{
    if (need <= *cap)
        return 0;
    uint64_t n = *cap ? *cap * 2 : 1024;
    if (n < need)
        n = need;
    if (n > SIZE_MAX / sizeof(uint64_t))
        return FEED_ENOMEM;
    uint64_t *po = realloc(t->path_offset, (size_t)n * sizeof(*po));
    if (!po)
        return FEED_ENOMEM;
    t->path_offset = po;
    uint32_t *lb = realloc(t->labels, (size_t)n * sizeof(*lb));
    if (!lb)
        return FEED_ENOMEM;
    t->labels = lb;
    uint32_t *ln = realloc(t->lengths, (size_t)n * sizeof(*ln));
    if (!ln)
        return FEED_ENOMEM;
    t->lengths = ln;
    *cap = n;
    return 0;
}

static int folder_open(struct feed_dataset *ds, const char *path, const feed_dataset_limits *lim,
                       char *err, size_t err_cap)
{
    int rc = 0;
    name_list classes = {0}, files = {0};
    feed_buf arena;
    feed_buf_init(&arena, SIZE_MAX);
    uint64_t *class_off = NULL;
    uint64_t cap = 0;
    char root[FEED_DATASET_MAX_PATH + 1];
    char class_dir[FEED_DATASET_MAX_PATH + 1];
    size_t skipped = 0; /* entries of class directories logged as not samples */
    folder *t = calloc(1, sizeof(*t));
    if (!t) {
        rc = FEED_ENOMEM;
        goto out;
    }
    ds->impl = t;

    size_t root_len = strlen(path);
    while (root_len > 1 && path[root_len - 1] == '/')
        root_len--;
    if (root_len > FEED_DATASET_MAX_PATH) {
        rc = FEED_ETOOBIG;
        feed_set_err(err, err_cap, "%s: path longer than %u bytes", path, FEED_DATASET_MAX_PATH);
        goto out;
    }
    memcpy(root, path, root_len);
    root[root_len] = '\0';
    /* "/" as the root would give "//class" paths: harmless, but keep them tidy. */
    const char *prefix = strcmp(root, "/") == 0 ? "" : root;

    rc = list_dir(root, S_IFDIR, FEED_DATASET_MAX_CLASSES, &classes, &skipped, err, err_cap);
    if (rc)
        goto out;
    if (classes.n == 0) {
        rc = FEED_ENOTFOUND;
        feed_set_err(err, err_cap, "%s: no class directories (expected root/<class>/<image>.jpg)",
                     root);
        goto out;
    }
    for (size_t c = 0; c < classes.n; c++) {
        rc = feed_dataset_check_class_name(root, (uint32_t)c, classes.v[c], err, err_cap);
        if (rc)
            goto out;
    }
    class_off = calloc(classes.n, sizeof(*class_off));
    if (!class_off) {
        rc = FEED_ENOMEM;
        goto out;
    }
    for (size_t c = 0; c < classes.n; c++) {
        rc = arena_add(&arena, classes.v[c], NULL, NULL, &class_off[c]);
        if (rc)
            goto out;
    }

    for (size_t c = 0; c < classes.n; c++) {
        int w = snprintf(class_dir, sizeof(class_dir), "%s/%s", prefix, classes.v[c]);
        if (w < 0 || (size_t)w >= sizeof(class_dir)) {
            rc = FEED_ETOOBIG;
            feed_set_err(err, err_cap, "%s/%s: path longer than %u bytes", root, classes.v[c],
                         FEED_DATASET_MAX_PATH);
            goto out;
        }
        uint64_t room = lim->max_samples - ds->count;
        rc = list_dir(class_dir, S_IFREG, room > SIZE_MAX ? SIZE_MAX : (size_t)room, &files,
                      &skipped, err, err_cap);
        if (rc == FEED_ETOOBIG)
            feed_set_err(err, err_cap, "%s: more than %llu samples (the max_samples limit)", root,
                         (unsigned long long)lim->max_samples);
        if (rc)
            goto out;
        if (files.n == 0)
            FEED_LOGW("dataset: class %s (label %zu) has no images", class_dir, c);
        rc = grow_samples(t, ds->count + files.n, &cap);
        if (rc)
            goto out;
        for (size_t f = 0; f < files.n; f++) {
            if ((size_t)w + 1 + strlen(files.v[f]) > FEED_DATASET_MAX_PATH) {
                rc = FEED_ETOOBIG;
                feed_set_err(err, err_cap, "%s/%s: path longer than %u bytes", class_dir,
                             files.v[f], FEED_DATASET_MAX_PATH);
                goto out;
            }
            rc = arena_add(&arena, class_dir, files.v[f], NULL, &t->path_offset[ds->count]);
            if (rc)
                goto out;
            t->labels[ds->count] = (uint32_t)c;
            ds->count++;
        }
        name_list_free(&files);
    }
    if (skipped > MAX_SKIP_WARNINGS)
        FEED_LOGW("dataset: %s: %zu more entries skipped as not image files", root,
                  skipped - MAX_SKIP_WARNINGS);
    if (ds->count == 0) {
        rc = FEED_ENOTFOUND;
        feed_set_err(err, err_cap, "%s: no .jpg/.jpeg files in any of %zu class directories", root,
                     classes.n);
        goto out;
    }

    ds->class_names = calloc(classes.n, sizeof(*ds->class_names));
    if (!ds->class_names) {
        rc = FEED_ENOMEM;
        goto out;
    }
    t->names = (char *)arena.data;
    arena.data = NULL;
    for (size_t c = 0; c < classes.n; c++)
        ds->class_names[c] = t->names + class_off[c];
    ds->num_classes = (uint32_t)classes.n;
out:
    if (rc == FEED_ENOMEM)
        feed_set_err(err, err_cap, "%s: out of memory indexing the tree", path);
    free(class_off);
    feed_buf_free(&arena);
    name_list_free(&classes);
    name_list_free(&files);
    return rc;
}

/* Reads the whole of a regular file into scratch, refusing more than cap bytes. */
static int read_file(const char *path, uint64_t cap, feed_buf *scratch)
{
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = errno == ENOENT ? FEED_ENOTFOUND : FEED_EIO;
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = FEED_EIO;
        goto out;
    }
    if ((uint64_t)st.st_size > cap) {
        rc = FEED_ETOOBIG;
        goto out;
    }
    size_t want = (size_t)st.st_size;
    /* At least one byte, so an empty file still gives a non-NULL pointer. */
    rc = feed_buf_reserve(scratch, want ? want : 1);
    if (rc)
        goto out;
    size_t got = 0;
    while (got < want) {
        ssize_t r = read(fd, scratch->data + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = FEED_EIO;
            goto out;
        }
        if (r == 0)
            break; /* shrank since fstat: take what is there */
        got += (size_t)r;
    }
    scratch->len = got;
out:
    if (fd >= 0)
        close(fd);
    return rc;
}

static int folder_claims(const char *location, const struct stat *st)
{
    (void)location;
    return st && S_ISDIR(st->st_mode);
}

static uint32_t folder_label(const struct feed_dataset *ds, uint64_t i)
{
    const folder *t = ds->impl;
    return t->labels[i];
}

static const char *folder_sample_path(const struct feed_dataset *ds, uint64_t i)
{
    const folder *t = ds->impl;
    return t->names + t->path_offset[i];
}

/* CLASS/FILE: the last two components of the sample's path (known without a read). */
static void folder_where(const struct feed_dataset *ds, uint64_t i, int may_read, char *buf,
                         size_t cap)
{
    (void)may_read;
    const char *path = folder_sample_path(ds, i), *at = path + strlen(path);
    for (int slashes = 0; at > path; at--)
        if (at[-1] == '/' && ++slashes == 2)
            break;
    snprintf(buf, cap, "%s", at);
}

/*
 * One stat per sample at open, for the fingerprint: the listing has names but
 * no sizes. The size, not the mtime, goes in: two correct copies of a tree
 * differ in mtime unless copied with -p.
 */
/* Called once per sample at open (the fingerprint), before any other thread sees ds: it keeps
 * what it found for folder_length_at_open. */
static uint64_t folder_sample_length(const struct feed_dataset *ds, uint64_t i)
{
    folder *t = ds->impl;
    struct stat st;
    uint64_t len = UINT64_MAX;
    if (stat(folder_sample_path(ds, i), &st) == 0 && S_ISREG(st.st_mode))
        len = (uint64_t)st.st_size;
    t->lengths[i] = len < UINT32_MAX ? (uint32_t)len : UINT32_MAX;
    return len;
}

static uint64_t folder_length_at_open(const struct feed_dataset *ds, uint64_t i)
{
    const folder *t = ds->impl;
    return t->lengths[i] == UINT32_MAX ? UINT64_MAX : t->lengths[i];
}

static int folder_read(const struct feed_dataset *ds, uint64_t i, feed_buf *scratch,
                       const uint8_t **data, size_t *len)
{
    uint64_t cap = ds->max_sample_bytes < scratch->limit ? ds->max_sample_bytes : scratch->limit;
    int rc = read_file(folder_sample_path(ds, i), cap, scratch);
    if (!rc) {
        *data = scratch->data;
        *len = scratch->len;
    }
    return rc;
}

static void folder_close(struct feed_dataset *ds)
{
    folder *t = ds->impl;
    if (t) {
        free(t->names);
        free(t->path_offset);
        free(t->labels);
        free(t->lengths);
        free(t);
    }
    ds->impl = NULL;
}

static uint64_t folder_stamp(const struct feed_dataset *ds, uint64_t i)
{
    return feed_file_stamp(folder_sample_path(ds, i));
}

const feed_dataset_ops feed_dataset_folder_ops = {
    .format = "imagefolder",
    .claims = folder_claims,
    .open = folder_open,
    .label = folder_label,
    .sample_path = folder_sample_path,
    .where = folder_where,
    .read = folder_read,
    .stamp = folder_stamp,
    .sample_length = folder_sample_length,
    .length_at_open = folder_length_at_open,
    .prefetch = NULL,
    .close = folder_close,
};
