/*
 * feed-pack's outputs (see out_sink.h): a pack, tar shards or an ImageFolder
 * tree. Runs on feed-pack's main thread; the signal handler only unlinks the
 * temporary file it is told about (a tree's temporary directory is removed by
 * sink_abort, not by the handler: removing a tree is not async-signal-safe).
 */
#include "out_sink.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/strutil.h"

/*
 * The writer's temporary file (PATH.tmp.<pid>), for the signal handler: set
 * before the writer opens it, read only by the handler.
 */
static char g_tmp_path[PATH_MAX + 32];

static void on_fatal_signal(int sig)
{
    unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int remove_tmp_on_signals(const char *dst, char *err, size_t err_cap)
{
    int n = snprintf(g_tmp_path, sizeof(g_tmp_path), "%s.tmp.%ld", dst, (long)getpid());
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    if (n < 0 || (size_t)n >= sizeof(g_tmp_path) || sigaction(SIGINT, &sa, NULL) ||
        sigaction(SIGTERM, &sa, NULL)) {
        feed_set_err(err, err_cap, "%s: path too long", dst);
        return FEED_EINVAL;
    }
    return 0;
}

static int open_shard(out_sink *s, char *err, size_t err_cap)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s-%06zu.tar", s->dst, s->shards);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        feed_set_err(err, err_cap, "%s: path too long", s->dst);
        return FEED_EINVAL;
    }
    int rc = remove_tmp_on_signals(path, err, err_cap);
    if (!rc)
        rc = feed_tar_writer_open(path, s->num_classes, s->names, &s->tar, err, err_cap);
    if (!rc) {
        s->shards++;
        s->in_shard = 0;
    }
    return rc;
}

/* A class name that is also a safe directory name. */
static int dir_name_ok(const char *name)
{
    return !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

static int open_tree(out_sink *s, char *err, size_t err_cap)
{
    int rc = 0;
    char dir[PATH_MAX + 300];
    int n = snprintf(s->tmp_dir, sizeof(s->tmp_dir), "%s.tmp.%ld", s->dst, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(s->tmp_dir) - 300) {
        feed_set_err(err, err_cap, "%s: path too long", s->dst);
        return FEED_EINVAL;
    }
    if (access(s->dst, F_OK) == 0) {
        feed_set_err(err, err_cap, "%s: already exists (a tree is written only to a new path)",
                     s->dst);
        return FEED_EINVAL;
    }
    if (mkdir(s->tmp_dir, 0755) != 0) {
        feed_set_err(err, err_cap, "%s: cannot create: %s", s->tmp_dir, strerror(errno));
        return FEED_EIO;
    }
    s->tree_open = 1;
    for (uint32_t c = 0; c < s->num_classes && !rc; c++) {
        if (!dir_name_ok(s->names[c])) {
            feed_set_err(err, err_cap, "class %u name '%s' cannot be a directory name", c,
                         s->names[c]);
            rc = FEED_EINVAL;
            break;
        }
        snprintf(dir, sizeof(dir), "%s/%s", s->tmp_dir, s->names[c]);
        if (mkdir(dir, 0755) != 0) {
            feed_set_err(err, err_cap, "%s: cannot create: %s", dir, strerror(errno));
            rc = FEED_EIO;
        }
    }
    return rc;
}

int sink_open(out_sink *s, enum sink_format format, const char *dst, uint64_t count,
              uint32_t num_classes, const char *const *names, uint32_t shard_samples, char *err,
              size_t err_cap)
{
    memset(s, 0, sizeof(*s));
    s->format = format;
    s->dst = dst;
    s->count = count;
    s->num_classes = num_classes;
    s->names = names;
    s->shard_samples = shard_samples ? shard_samples : SINK_DEFAULT_SHARD_SAMPLES;
    snprintf(s->written, sizeof(s->written), "%s", dst);
    if (format == SINK_TAR)
        return open_shard(s, err, err_cap);
    if (format == SINK_FOLDER)
        return open_tree(s, err, err_cap);
    int rc = remove_tmp_on_signals(dst, err, err_cap);
    if (!rc)
        rc = feed_pack_writer_open(dst, count, num_classes, names, &s->pack, err, err_cap);
    return rc;
}

static int add_file(out_sink *s, uint64_t i, uint32_t label, const void *data, size_t len,
                    char *err, size_t err_cap)
{
    char path[PATH_MAX + 300];
    snprintf(path, sizeof(path), "%s/%s/%09llu.jpg", s->tmp_dir, s->names[label],
             (unsigned long long)i);
    FILE *f = fopen(path, "wbe");
    int ok = f && (len == 0 || fwrite(data, 1, len, f) == len);
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok) {
        feed_set_err(err, err_cap, "%s: cannot write: %s", path, strerror(errno));
        return FEED_EIO;
    }
    return 0;
}

int sink_add(out_sink *s, uint64_t i, uint32_t label, const void *data, size_t len, char *err,
             size_t err_cap)
{
    int rc = 0;
    char key[32];
    if (s->format == SINK_PACK)
        return feed_pack_writer_add(s->pack, label, data, len);
    if (s->format == SINK_FOLDER)
        return add_file(s, i, label, data, len, err, err_cap);
    if (!s->tar)
        rc = open_shard(s, err, err_cap);
    if (rc)
        return rc;
    snprintf(key, sizeof(key), "%09llu", (unsigned long long)i);
    rc = feed_tar_writer_add(s->tar, key, label, data, len);
    if (rc) {
        feed_set_err(err, err_cap, "%s-%06zu.tar: cannot add sample %llu (%s)", s->dst,
                     s->shards - 1, (unsigned long long)i, feed_strerror(rc));
        return rc;
    }
    if (++s->in_shard == s->shard_samples) {
        feed_tar_writer *w = s->tar;
        s->tar = NULL;
        rc = feed_tar_writer_finish(w, err, err_cap);
    }
    return rc;
}

int sink_finish(out_sink *s, char *err, size_t err_cap)
{
    int rc = 0;
    if (s->format == SINK_PACK) {
        feed_pack_writer *w = s->pack;
        s->pack = NULL;
        rc = feed_pack_writer_finish(w, err, err_cap);
    } else if (s->format == SINK_TAR) {
        feed_tar_writer *w = s->tar;
        s->tar = NULL;
        if (w)
            rc = feed_tar_writer_finish(w, err, err_cap);
        snprintf(s->written, sizeof(s->written), "%s-{000000..%06zu}.tar", s->dst,
                 s->shards ? s->shards - 1 : 0);
    } else {
        if (rename(s->tmp_dir, s->dst) != 0) {
            rc = FEED_EIO;
            feed_set_err(err, err_cap, "rename %s -> %s: %s", s->tmp_dir, s->dst, strerror(errno));
        } else {
            s->tree_open = 0;
        }
    }
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void sink_abort(out_sink *s)
{
    feed_pack_writer_abort(s->pack);
    s->pack = NULL;
    feed_tar_writer_abort(s->tar);
    s->tar = NULL;
    if (s->tree_open)
        nftw(s->tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    s->tree_open = 0;
}

int sink_index_shards(const char *location, size_t *n, char *err, size_t err_cap)
{
    char **names = NULL, idx[PATH_MAX + 8];
    size_t count = 0;
    int rc = feed_tar_shard_names(location, &names, &count, err, err_cap);
    for (size_t i = 0; i < count && !rc; i++) {
        int w = snprintf(idx, sizeof(idx), "%s.idx", names[i]);
        if (w < 0 || (size_t)w >= sizeof(idx)) {
            rc = FEED_EINVAL;
            feed_set_err(err, err_cap, "%s: path too long", names[i]);
            break;
        }
        rc = feed_tar_write_index(names[i], idx, err, err_cap);
    }
    *n = rc ? 0 : count;
    feed_tar_shard_names_free(names, count);
    return rc;
}
