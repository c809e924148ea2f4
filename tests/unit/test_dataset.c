/*
 * Unit tests for the ImageFolder side of feed/dataset.h: ordering and labels,
 * what is ignored, symlinks, caps, read errors and limits, concurrent reads,
 * the dataset fingerprint (its inputs, and the same samples as a tree, a pack
 * and tar shards), and (when FEED_SAMPLE_DIR is present) the real ImageNet sample. Each test
 * builds its own tree in a fresh temp dir and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/fingerprint.h"
#include "feed/pack.h"
#include "feed/tar.h"
#include "feedtest.h"
#include "feed/log.h"
#include "feedtest_skip.h"

static char g_root[512];

static int setup_tmp(void **state)
{
    (void)state;
    return feed_test_tmpdir("feed-test-dataset", g_root, sizeof g_root) == 0 ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    return feed_test_rmtree(g_root);
}

static void mkdir_in(const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

/* Writes `content` (its strlen) to root/rel. */
static void write_in(const char *rel, const char *content)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, strlen(content), f), strlen(content));
    assert_int_equal(fclose(f), 0);
}

static void symlink_in(const char *target, const char *rel)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", g_root, rel);
    assert_int_equal(symlink(target, p), 0);
}

static feed_dataset *open_ok(const feed_dataset_limits *lim)
{
    feed_dataset *ds = NULL;
    char err[512];
    int rc = feed_dataset_open(g_root, lim, &ds, err, sizeof(err));
    if (rc)
        fail_msg("open %s: %s (%s)", g_root, err, feed_err_name(rc));
    return ds;
}

/* The tree of the ordering test; content of each image is its own relative path. */
static void make_mixed_tree(void)
{
    mkdir_in("zeta");
    write_in("zeta/b.jpg", "zeta/b.jpg");
    write_in("zeta/a.JPEG", "zeta/a.JPEG");
    write_in("zeta/c.jpeg", "zeta/c.jpeg");
    write_in("zeta/d.JPG", "zeta/d.JPG");
    write_in("zeta/.hidden.jpg", "hidden");
    write_in("zeta/notes.txt", "not an image");
    write_in("zeta/jpg", "no extension");
    mkdir_in("zeta/sub.jpg");
    write_in("zeta/sub.jpg/x.jpg", "nested, ignored");
    symlink_in("nowhere.jpg", "zeta/dangling.jpg");
    mkdir_in("alpha");
    write_in("alpha/2.jpg", "alpha/2.jpg");
    write_in("alpha/10.jpg", "alpha/10.jpg");
    write_in("alpha/1.jpg", "alpha/1.jpg");
    mkdir_in("Beta");
    write_in("Beta/x.jpg", "Beta/x.jpg");
    mkdir_in(".git");
    write_in(".git/y.jpg", "hidden class");
    mkdir_in("empty");
    write_in("README.jpg", "top-level file, not a class");
    symlink_in("alpha", "link_alpha");
}

/* A fingerprint of the given classes and samples (labels[i], lengths[i]). */
static void fingerprint_of(const char *const *classes, uint32_t nc, const uint32_t *labels,
                           const uint64_t *lengths, uint64_t n, char *hex)
{
    feed_fingerprint_writer w;
    assert_int_equal(feed_fingerprint_begin(&w, n, nc), 0);
    for (uint32_t c = 0; c < nc; c++)
        feed_fingerprint_add_class(&w, classes[c]);
    for (uint64_t i = 0; i < n; i++)
        feed_fingerprint_add_sample(&w, labels[i], lengths[i]);
    assert_int_equal(feed_fingerprint_finish(&w, hex), 0);
    assert_int_equal(strlen(hex), 64);
}

/* Each input of the digest changes it: order, a label, a length, a class name (and where one
 * name ends), the count; the same inputs give the same digest. */
static void test_fingerprint_inputs(void **state)
{
    (void)state;
    const char *ab[] = {"a", "b"}, *ab2[] = {"a", "c"}, *split1[] = {"ab", "c"},
               *split2[] = {"a", "bc"};
    const uint32_t lab[] = {0, 1, 1}, lab_swapped[] = {1, 0, 1}, lab_changed[] = {0, 0, 1};
    const uint64_t len[] = {10, 20, 30}, len_swapped[] = {20, 10, 30}, len_changed[] = {10, 21, 30};
    char base[FEED_FINGERPRINT_HEX_SIZE], again[FEED_FINGERPRINT_HEX_SIZE],
        other[FEED_FINGERPRINT_HEX_SIZE];
    fingerprint_of(ab, 2, lab, len, 3, base);
    fingerprint_of(ab, 2, lab, len, 3, again);
    assert_string_equal(base, again);
    fingerprint_of(ab, 2, lab_swapped, len_swapped, 3, other); /* samples 0 and 1 swapped */
    assert_string_not_equal(base, other);
    fingerprint_of(ab, 2, lab_changed, len, 3, other);
    assert_string_not_equal(base, other);
    fingerprint_of(ab, 2, lab, len_changed, 3, other);
    assert_string_not_equal(base, other);
    fingerprint_of(ab2, 2, lab, len, 3, other);
    assert_string_not_equal(base, other);
    fingerprint_of(ab, 2, lab, len, 2, other);
    assert_string_not_equal(base, other);
    fingerprint_of(split1, 2, lab, len, 3, again);
    fingerprint_of(split2, 2, lab, len, 3, other);
    assert_string_not_equal(again, other);
}

/* The fingerprint of the dataset at loc (a tree, a pack or tar shards) into hex. */
static void fingerprint_at(const char *loc, char *hex)
{
    feed_dataset *ds = NULL;
    char err[512];
    int rc = feed_dataset_open(loc, NULL, &ds, err, sizeof(err));
    if (rc)
        fail_msg("open %s: %s (%s)", loc, err, feed_err_name(rc));
    snprintf(hex, FEED_FINGERPRINT_HEX_SIZE, "%s", feed_dataset_fingerprint(ds));
    feed_dataset_close(ds);
}

/* The tree's samples written again as a pack and as two tar shards (cut after sample `cut`). */
static void write_pack_and_shards(const char *tree, const char *pack, const char *shard0,
                                  const char *shard1, uint64_t cut)
{
    feed_dataset *ds = NULL;
    char err[512];
    assert_int_equal(feed_dataset_open(tree, NULL, &ds, err, sizeof(err)), 0);
    uint32_t nc = feed_dataset_num_classes(ds);
    const char *names[8];
    assert_true(nc <= 8);
    for (uint32_t c = 0; c < nc; c++)
        names[c] = feed_dataset_class_name(ds, c);
    feed_pack_writer *pw = NULL;
    feed_tar_writer *tw = NULL;
    feed_buf scratch;
    feed_buf_init(&scratch, 1u << 20);
    assert_int_equal(
        feed_pack_writer_open(pack, feed_dataset_count(ds), nc, names, &pw, err, sizeof(err)), 0);
    for (uint64_t i = 0; i < feed_dataset_count(ds); i++) {
        if (i == 0 || i == cut) {
            if (tw)
                assert_int_equal(feed_tar_writer_finish(tw, err, sizeof(err)), 0);
            assert_int_equal(
                feed_tar_writer_open(i ? shard1 : shard0, nc, names, &tw, err, sizeof(err)), 0);
        }
        const uint8_t *data;
        size_t n;
        char key[32];
        assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &n), 0);
        assert_int_equal(feed_pack_writer_add(pw, feed_dataset_label(ds, i), data, n), 0);
        snprintf(key, sizeof(key), "s%06llu", (unsigned long long)i);
        assert_int_equal(feed_tar_writer_add(tw, key, feed_dataset_label(ds, i), data, n), 0);
    }
    assert_int_equal(feed_tar_writer_finish(tw, err, sizeof(err)), 0);
    assert_int_equal(feed_pack_writer_finish(pw, err, sizeof(err)), 0);
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
}

/* A tree's fingerprint is that of its classes, labels and file sizes: the same samples as a
 * pack or as tar shards (other names, other layout) give the same one; a touched file (mtime
 * only) changes nothing; one image of another length changes it. */
static void test_fingerprint_of_samples(void **state)
{
    (void)state;
    char tree[600], pack[600], shard0[600], shard1[600], shards[700];
    snprintf(tree, sizeof tree, "%s/tree", g_root);
    snprintf(pack, sizeof pack, "%s/data.pack", g_root);
    snprintf(shard0, sizeof shard0, "%s/shard-000000.tar", g_root);
    snprintf(shard1, sizeof shard1, "%s/shard-000001.tar", g_root);
    snprintf(shards, sizeof shards, "%s/shard-{000000..000001}.tar", g_root);
    mkdir_in("tree");
    mkdir_in("tree/cat");
    mkdir_in("tree/dog");
    write_in("tree/cat/1.jpg", "one");
    write_in("tree/cat/2.jpg", "two two");
    write_in("tree/dog/3.jpg", "three three three");
    const char *classes[] = {"cat", "dog"};
    const uint32_t labels[] = {0, 0, 1};
    const uint64_t lengths[] = {3, 7, 17};
    char want[FEED_FINGERPRINT_HEX_SIZE], got[FEED_FINGERPRINT_HEX_SIZE];
    fingerprint_of(classes, 2, labels, lengths, 3, want);
    fingerprint_at(tree, got);
    assert_string_equal(got, want);

    write_pack_and_shards(tree, pack, shard0, shard1, 2);
    fingerprint_at(pack, got);
    assert_string_equal(got, want);
    fingerprint_at(shards, got);
    assert_string_equal(got, want);

    char p[700];
    snprintf(p, sizeof p, "%s/cat/2.jpg", tree);
    assert_int_equal(utimensat(AT_FDCWD, p, (const struct timespec[2]){{1, 0}, {1, 0}}, 0), 0);
    fingerprint_at(tree, got);
    assert_string_equal(got, want);
    write_in("tree/cat/2.jpg", "two two two");
    fingerprint_at(tree, got);
    assert_string_not_equal(got, want);
}

/* feed_dataset_sample_length: the length at open for a tree, a pack and tar shards, kept by a
 * tree whose file changes after the open; UINT64_MAX past the end. */
static void test_sample_length(void **state)
{
    (void)state;
    char tree[600], pack[600], shard0[600], shard1[600], shards[700];
    const char *locs[] = {tree, pack, shards};
    snprintf(tree, sizeof tree, "%s/lentree", g_root);
    snprintf(pack, sizeof pack, "%s/len.pack", g_root);
    snprintf(shard0, sizeof shard0, "%s/len-000000.tar", g_root);
    snprintf(shard1, sizeof shard1, "%s/len-000001.tar", g_root);
    snprintf(shards, sizeof shards, "%s/len-{000000..000001}.tar", g_root);
    mkdir_in("lentree");
    mkdir_in("lentree/a");
    write_in("lentree/a/1.jpg", "one");
    write_in("lentree/a/2.jpg", "two two");
    write_pack_and_shards(tree, pack, shard0, shard1, 1);
    for (size_t k = 0; k < 3; k++) {
        feed_dataset *ds = NULL;
        char err[512];
        assert_int_equal(feed_dataset_open(locs[k], NULL, &ds, err, sizeof(err)), 0);
        if (k == 0)
            write_in("lentree/a/2.jpg", "two two two");
        assert_int_equal(feed_dataset_sample_length(ds, 0), 3);
        assert_int_equal(feed_dataset_sample_length(ds, 1), 7);
        assert_true(feed_dataset_sample_length(ds, 2) == UINT64_MAX);
        feed_dataset_close(ds);
    }
}

static void test_order_and_labels(void **state)
{
    (void)state;
    make_mixed_tree();
    feed_dataset *ds = open_ok(NULL);
    assert_string_equal(feed_dataset_format(ds), "imagefolder");

    static const char *const classes[] = {"Beta", "alpha", "empty", "link_alpha", "zeta"};
    assert_int_equal(feed_dataset_num_classes(ds), 5);
    for (uint32_t c = 0; c < 5; c++)
        assert_string_equal(feed_dataset_class_name(ds, c), classes[c]);
    assert_null(feed_dataset_class_name(ds, 5));

    static const struct {
        const char *rel;
        const char *content;
        uint32_t label;
    } want[] = {
        {"Beta/x.jpg", "Beta/x.jpg", 0},        {"alpha/1.jpg", "alpha/1.jpg", 1},
        {"alpha/10.jpg", "alpha/10.jpg", 1},    {"alpha/2.jpg", "alpha/2.jpg", 1},
        {"link_alpha/1.jpg", "alpha/1.jpg", 3}, {"link_alpha/10.jpg", "alpha/10.jpg", 3},
        {"link_alpha/2.jpg", "alpha/2.jpg", 3}, {"zeta/a.JPEG", "zeta/a.JPEG", 4},
        {"zeta/b.jpg", "zeta/b.jpg", 4},        {"zeta/c.jpeg", "zeta/c.jpeg", 4},
        {"zeta/d.JPG", "zeta/d.JPG", 4},
    };
    size_t n = sizeof(want) / sizeof(want[0]);
    assert_int_equal(feed_dataset_count(ds), n);
    feed_buf scratch;
    feed_buf_init(&scratch, 1 << 20);
    for (size_t i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s", g_root, want[i].rel);
        assert_string_equal(feed_dataset_sample_path(ds, i), path);
        assert_int_equal(feed_dataset_label(ds, i), want[i].label);
        const uint8_t *data;
        size_t len;
        assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
        assert_int_equal(len, strlen(want[i].content));
        assert_memory_equal(data, want[i].content, len);
    }
    assert_null(feed_dataset_sample_path(ds, n));
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
}

static void test_trailing_slash_and_root_forms(void **state)
{
    (void)state;
    mkdir_in("a");
    write_in("a/1.jpg", "x");
    char path[600];
    snprintf(path, sizeof(path), "%s///", g_root);
    feed_dataset *ds = NULL;
    char err[256];
    assert_int_equal(feed_dataset_open(path, NULL, &ds, err, sizeof(err)), 0);
    char want[600];
    snprintf(want, sizeof(want), "%s/a/1.jpg", g_root);
    assert_string_equal(feed_dataset_sample_path(ds, 0), want);
    feed_dataset_close(ds);
}

static void test_not_found_and_empty(void **state)
{
    (void)state;
    feed_dataset *ds = (feed_dataset *)&ds;
    char err[512];
    char path[600];
    snprintf(path, sizeof(path), "%s/missing", g_root);
    assert_int_equal(feed_dataset_open(path, NULL, &ds, err, sizeof(err)), FEED_ENOTFOUND);
    assert_null(ds);
    assert_non_null(strstr(err, "missing"));

    /* No class directories at all. */
    write_in("loose.jpg", "x");
    assert_int_equal(feed_dataset_open(g_root, NULL, &ds, err, sizeof(err)), FEED_ENOTFOUND);
    assert_non_null(strstr(err, "no class directories"));

    /* Classes, but no images in any. */
    mkdir_in("a");
    write_in("a/readme.txt", "x");
    assert_int_equal(feed_dataset_open(g_root, NULL, &ds, err, sizeof(err)), FEED_ENOTFOUND);
    assert_non_null(strstr(err, "no .jpg/.jpeg files"));

    assert_int_equal(feed_dataset_open("", NULL, &ds, err, sizeof(err)), FEED_EINVAL);
    feed_dataset_close(NULL);
}

static void test_max_samples_cap(void **state)
{
    (void)state;
    mkdir_in("a");
    mkdir_in("b");
    write_in("a/1.jpg", "1");
    write_in("a/2.jpg", "2");
    write_in("b/1.jpg", "3");
    write_in("b/2.jpg", "4");
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    assert_int_equal(lim.max_samples, 100000000u);
    assert_int_equal(lim.max_sample_bytes, 64u << 20);

    lim.max_samples = 4;
    feed_dataset *ds = open_ok(&lim);
    assert_int_equal(feed_dataset_count(ds), 4);
    feed_dataset_close(ds);

    lim.max_samples = 3;
    char err[512];
    assert_int_equal(feed_dataset_open(g_root, &lim, &ds, err, sizeof(err)), FEED_ETOOBIG);
    assert_null(ds);
    assert_non_null(strstr(err, "max_samples"));
}

/* A sample path longer than FEED_DATASET_MAX_PATH (4095) is refused, not truncated. */
static void test_path_length_cap(void **state)
{
    (void)state;
    char name[201];
    memset(name, 'd', 200);
    name[200] = '\0';
    /* Descend with *at() calls: the full path is too long for plain open(). */
    int dfd = open(g_root, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    size_t depth = 0;
    size_t root_len = strlen(g_root);
    /* Deep enough that root/.../cls/<254-byte name> passes 4095 bytes. */
    while (root_len + depth * 201 <= 3836) {
        assert_int_equal(mkdirat(dfd, name, 0755), 0);
        int next = openat(dfd, name, O_RDONLY | O_DIRECTORY);
        assert_true(next >= 0);
        close(dfd);
        dfd = next;
        depth++;
    }
    assert_int_equal(mkdirat(dfd, "cls", 0755), 0);
    int cfd = openat(dfd, "cls", O_RDONLY | O_DIRECTORY);
    assert_true(cfd >= 0);
    char file[256];
    memset(file, 'f', 250);
    memcpy(file + 250, ".jpg", 5);
    int f = openat(cfd, file, O_WRONLY | O_CREAT, 0644);
    assert_true(f >= 0);
    close(f);
    close(dfd);

    char deep[4096];
    size_t pos = (size_t)snprintf(deep, sizeof(deep), "%s", g_root);
    for (size_t i = 0; i < depth; i++)
        pos += (size_t)snprintf(deep + pos, sizeof(deep) - pos, "/%s", name);
    feed_dataset *ds = NULL;
    char err[8192];
    assert_int_equal(feed_dataset_open(deep, NULL, &ds, err, sizeof(err)), FEED_ETOOBIG);
    assert_non_null(strstr(err, "path longer than 4095"));
    assert_null(ds);
    /* The teardown's tree walk cannot name a path this long: remove the file here. */
    assert_int_equal(unlinkat(cfd, file, 0), 0);
    close(cfd);
}

static void test_read_limits_and_errors(void **state)
{
    (void)state;
    mkdir_in("a");
    write_in("a/0.jpg", "");
    write_in("a/1.jpg", "0123456789");
    write_in("a/2.jpg", "0123456789A");
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_sample_bytes = 10;
    feed_dataset *ds = open_ok(&lim);
    feed_buf scratch;
    feed_buf_init(&scratch, 1 << 20);
    const uint8_t *data = (const uint8_t *)"x";
    size_t len = 99;

    assert_int_equal(feed_dataset_read(ds, 0, &scratch, &data, &len), 0);
    assert_int_equal(len, 0);
    assert_non_null(data);
    assert_int_equal(feed_dataset_read(ds, 1, &scratch, &data, &len), 0);
    assert_int_equal(len, 10);
    assert_int_equal(feed_dataset_read(ds, 2, &scratch, &data, &len), FEED_ETOOBIG);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_int_equal(feed_dataset_read(ds, 3, &scratch, &data, &len), FEED_EINVAL);
    assert_int_equal(feed_dataset_read(ds, UINT64_MAX, &scratch, &data, &len), FEED_EINVAL);
    feed_buf_free(&scratch);

    /* The scratch buffer's own limit binds too. */
    feed_buf small;
    feed_buf_init(&small, 5);
    assert_int_equal(feed_dataset_read(ds, 1, &small, &data, &len), FEED_ETOOBIG);
    feed_buf_free(&small);

    /* A file that went away after open says so (FEED_ENOTFOUND), and is not a crash. */
    char p[1024];
    snprintf(p, sizeof(p), "%s/a/1.jpg", g_root);
    assert_int_equal(unlink(p), 0);
    feed_buf_init(&scratch, 1 << 20);
    assert_int_equal(feed_dataset_read(ds, 1, &scratch, &data, &len), FEED_ENOTFOUND);
    /* ... and so is one replaced by a directory. */
    assert_int_equal(mkdir(p, 0755), 0);
    assert_int_equal(feed_dataset_read(ds, 1, &scratch, &data, &len), FEED_EIO);
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
}

/*
 * Class names go into DescribeResponse's protobuf strings: a class directory
 * whose name is not UTF-8 (here Latin-1 "caf\xe9") fails the open, naming the
 * class; well-formed UTF-8 names, and file names of any bytes, are fine.
 */
static void test_class_name_not_utf8(void **state)
{
    (void)state;
    mkdir_in("caf\xc3\xa9"); /* "café" in UTF-8 */
    write_in("caf\xc3\xa9/1.jpg", "x");
    write_in("caf\xc3\xa9/na\xefve.jpg", "y"); /* a Latin-1 file name is never sent */
    feed_dataset *ds = open_ok(NULL);
    assert_string_equal(feed_dataset_class_name(ds, 0), "caf\xc3\xa9");
    assert_int_equal(feed_dataset_count(ds), 2);
    feed_dataset_close(ds);

    mkdir_in("caf\xe9");
    write_in("caf\xe9/1.jpg", "z");
    char err[512];
    ds = (feed_dataset *)err;
    assert_int_equal(feed_dataset_open(g_root, NULL, &ds, err, sizeof(err)), FEED_EINVAL);
    assert_null(ds);
    /* Sorted by bytes, "caf\xc3..." < "caf\xe9": the bad one is label 1, shown escaped. */
    if (!strstr(err, "class 1 name 'caf\\xe9' is not valid UTF-8 (byte 3)"))
        fail_msg("message does not name the class: %s", err);

    /* Overlong, surrogate and truncated sequences are refused the same way. */
    static const char *const bad[] = {"a\xc0\xaf", "b\xed\xa0\x80", "c\xf4\x90\x80\x80",
                                      "d\xe2\x82"};
    char rel[64], p[1024];
    snprintf(p, sizeof(p), "%s/caf\xe9/1.jpg", g_root);
    assert_int_equal(unlink(p), 0);
    snprintf(p, sizeof(p), "%s/caf\xe9", g_root);
    assert_int_equal(rmdir(p), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mkdir_in(bad[i]);
        snprintf(rel, sizeof(rel), "%s/1.jpg", bad[i]);
        write_in(rel, "w");
        assert_int_equal(feed_dataset_open(g_root, NULL, &ds, err, sizeof(err)), FEED_EINVAL);
        assert_non_null(strstr(err, "not valid UTF-8"));
        snprintf(p, sizeof(p), "%s/%s", g_root, rel);
        assert_int_equal(unlink(p), 0);
        snprintf(p, sizeof(p), "%s/%s", g_root, bad[i]);
        assert_int_equal(rmdir(p), 0);
    }
}

typedef struct reader_arg {
    const feed_dataset *ds;
    int failures;
} reader_arg;

static void *reader_main(void *p)
{
    reader_arg *a = p;
    feed_buf scratch;
    feed_buf_init(&scratch, 1 << 16);
    for (int round = 0; round < 20; round++) {
        for (uint64_t i = 0; i < feed_dataset_count(a->ds); i++) {
            const uint8_t *data;
            size_t len;
            char want[32];
            snprintf(want, sizeof(want), "sample-%llu", (unsigned long long)i);
            if (feed_dataset_read(a->ds, i, &scratch, &data, &len) != 0 || len != strlen(want) ||
                memcmp(data, want, len) != 0)
                a->failures++;
        }
    }
    feed_buf_free(&scratch);
    return NULL;
}

static void test_concurrent_reads(void **state)
{
    (void)state;
    mkdir_in("c");
    for (int i = 0; i < 50; i++) {
        char rel[64], content[32];
        snprintf(rel, sizeof(rel), "c/%03d.jpg", i);
        snprintf(content, sizeof(content), "sample-%d", i);
        write_in(rel, content);
    }
    feed_dataset *ds = open_ok(NULL);
    pthread_t t[4];
    reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].ds = ds;
        args[i].failures = 0;
        assert_int_equal(pthread_create(&t[i], NULL, reader_main, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    feed_dataset_close(ds);
}

static void test_imagenet_sample(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    feed_dataset *ds = NULL;
    char err[512];
    assert_int_equal(feed_dataset_open(dir, NULL, &ds, err, sizeof(err)), 0);
    /* One image per class; classes.tsv at the top level is not a class. */
    assert_int_equal(feed_dataset_count(ds), 1000);
    assert_int_equal(feed_dataset_num_classes(ds), 1000);
    assert_string_equal(feed_dataset_class_name(ds, 0), "n01440764");
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    for (uint64_t i = 0; i < feed_dataset_count(ds); i++) {
        assert_int_equal(feed_dataset_label(ds, i), i);
        const uint8_t *data;
        size_t len;
        assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
        assert_true(len > 2);
    }
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
}

/* ---- skipped entries are logged ---- */

static char g_log[64][512];
static size_t g_log_n;

static void capture_log(void *user, int level, const char *message)
{
    (void)user;
    (void)level;
    if (g_log_n < 64)
        snprintf(g_log[g_log_n], sizeof g_log[0], "%s", message);
    g_log_n++;
}

/* How many captured lines contain needle. */
static size_t log_count(const char *needle)
{
    size_t n = 0;
    for (size_t i = 0; i < g_log_n && i < 64; i++)
        n += strstr(g_log[i], needle) != NULL;
    return n;
}

/*
 * FIFOs, sockets and directories inside a class are not samples: each is
 * logged once, up to a bound, then counted; plain non-image files and
 * dot-names stay silent.
 */
static void test_skipped_entries_logged(void **state)
{
    (void)state;
    char p[1024];
    mkdir_in("a");
    write_in("a/ok.jpg", "x");
    write_in("a/notes.txt", "x");
    write_in("a/.hidden.jpg", "x");
    snprintf(p, sizeof p, "%s/a/pipe.jpg", g_root);
    assert_int_equal(mkfifo(p, 0644), 0);
    mkdir_in("a/nested");
    mkdir_in("a/dir.jpg");
    feed_log_set_sink(capture_log, NULL);
    g_log_n = 0;
    feed_dataset *ds = open_ok(NULL);
    assert_int_equal(feed_dataset_count(ds), 1);
    feed_dataset_close(ds);
    assert_int_equal(log_count("pipe.jpg: a FIFO"), 1);
    assert_int_equal(log_count("/a/nested: a directory"), 1);
    assert_int_equal(log_count("dir.jpg: a directory"), 1);
    assert_int_equal(log_count("notes.txt"), 0);
    assert_int_equal(log_count("hidden"), 0);

    /* Many: MAX_SKIP_WARNINGS (20) lines, then one count. */
    for (int i = 0; i < 40; i++) {
        snprintf(p, sizeof p, "%s/a/fifo%02d.jpg", g_root, i);
        assert_int_equal(mkfifo(p, 0644), 0);
    }
    g_log_n = 0;
    ds = open_ok(NULL);
    feed_dataset_close(ds);
    feed_log_set_sink(NULL, NULL);
    assert_int_equal(log_count("skipping"), 20);
    assert_int_equal(log_count("23 more entries skipped"), 1);
    assert_int_equal(g_log_n, 21);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test(test_imagenet_sample),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample() ? cmocka_run_group_tests(sample_tests, NULL, NULL)
                                       : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_and_labels, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_trailing_slash_and_root_forms, setup_tmp,
                                        teardown_tmp),
        cmocka_unit_test_setup_teardown(test_not_found_and_empty, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_max_samples_cap, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_path_length_cap, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_read_limits_and_errors, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_class_name_not_utf8, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_concurrent_reads, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_skipped_entries_logged, setup_tmp, teardown_tmp),
        cmocka_unit_test(test_fingerprint_inputs),
        cmocka_unit_test_setup_teardown(test_fingerprint_of_samples, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_sample_length, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
