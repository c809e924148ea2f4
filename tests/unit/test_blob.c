/*
 * Unit tests for feed/blob.h's local-file blob (source/src/blob.c): size and
 * version at open, exact reads, ranges outside the object, the read cap, a
 * file cut, replaced, rewritten or removed after open (refused, whatever
 * descriptor is cached), the stamp, the bounded descriptor cache under
 * concurrent readers, what is not a regular file, and remote schemes (not in
 * this build: refused with a message naming the scheme, never a crash).
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

#include "feed/blob.h"
#include "feed/errors.h"
#include "feedtest.h"

static char g_dir[512];

static int setup(void **state)
{
    (void)state;
    return feed_test_tmpdir("feed-test-blob", g_dir, sizeof g_dir) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_rmtree(g_dir);
}

static void test_local_reads(void **state)
{
    (void)state;
    char p[600], err[512];
    snprintf(p, sizeof p, "%s/obj", g_dir);
    assert_int_equal(feed_test_write_file(p, "0123456789", 10), 0);
    feed_blob_options o;
    feed_blob_options_default(&o);
    o.max_read_bytes = 6;
    feed_blob *b = NULL;
    assert_int_equal(feed_blob_open(p, &o, &b, err, sizeof err), 0);
    assert_int_equal(b->size, 10);
    assert_string_equal(b->name, p);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(b->version,
                     ((uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec) ^
                         (uint64_t)st.st_ino);
    uint8_t buf[16];
    assert_int_equal(feed_blob_read(b, 4, 6, buf, err, sizeof err), 0);
    assert_memory_equal(buf, "456789", 6);
    assert_int_equal(feed_blob_read(b, 10, 0, buf, err, sizeof err), 0);
    assert_int_equal(feed_blob_read(b, 5, 6, buf, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "outside its 10 bytes"));
    assert_int_equal(feed_blob_read(b, UINT64_MAX, 2, buf, err, sizeof err), FEED_EINVAL);
    assert_int_equal(feed_blob_read(b, 0, 7, buf, err, sizeof err), FEED_ETOOBIG);
    feed_blob_prefetch(b, (const feed_blob_range[]){{0, 4}, {6, 4}}, 2);

    assert_int_equal(truncate(p, 5), 0);
    assert_int_equal(feed_blob_read(b, 2, 3, buf, err, sizeof err), FEED_ESTATE);
    assert_non_null(strstr(err, "changed since it was opened (its size changed)"));
    feed_blob_close(b);
    feed_blob_close(NULL);
}

/* Write text to path through a temporary file and a rename: a new inode. */
static void replace_file(const char *path, const char *text)
{
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    assert_int_equal(feed_test_write_file(tmp, text, strlen(text)), 0);
    assert_int_equal(rename(tmp, path), 0);
}

/*
 * Issue 28 findings 4 and 7: a read answers for the file at the path now, whatever descriptor
 * is cached: replaced by a rename (its descriptor of the old file still cached), rewritten in
 * place with the same size, or removed. The stamp changes with each.
 */
static void test_changed_file_is_refused(void **state)
{
    (void)state;
    char p[600], err[512];
    uint8_t buf[16];
    snprintf(p, sizeof p, "%s/obj", g_dir);
    assert_int_equal(feed_test_write_file(p, "0123456789", 10), 0);
    feed_blob *b = NULL;
    assert_int_equal(feed_blob_open(p, NULL, &b, err, sizeof err), 0);
    uint64_t s0 = feed_blob_stamp(b);
    assert_true(s0 >= 2);
    assert_int_equal(feed_blob_stamp(b), s0);
    assert_int_equal(feed_blob_read(b, 0, 4, buf, err, sizeof err), 0);

    replace_file(p, "abcdefghij");
    assert_int_not_equal(feed_blob_stamp(b), s0);
    assert_int_equal(feed_blob_read(b, 0, 4, buf, err, sizeof err), FEED_ESTATE);
    assert_non_null(strstr(err, "another file is there now"));
    feed_blob_close(b);

    assert_int_equal(feed_blob_open(p, NULL, &b, err, sizeof err), 0);
    uint64_t s1 = feed_blob_stamp(b);
    struct timespec later[2] = {{0, UTIME_OMIT}, {1, 0}}; /* mtime 1 s after the epoch */
    assert_int_equal(feed_test_write_file(p, "ABCDEFGHIJ", 10), 0);
    assert_int_equal(utimensat(AT_FDCWD, p, later, 0), 0);
    assert_int_not_equal(feed_blob_stamp(b), s1);
    assert_int_equal(feed_blob_read(b, 0, 4, buf, err, sizeof err), FEED_ESTATE);
    assert_non_null(strstr(err, "it was modified"));

    assert_int_equal(unlink(p), 0);
    assert_int_equal(feed_blob_stamp(b), 1);
    assert_int_equal(feed_blob_read(b, 0, 4, buf, err, sizeof err), FEED_ENOTFOUND);
    feed_blob_close(b);
}

enum { FILES = 8, READERS = 4, ROUNDS = 400 };
static feed_blob *g_blobs[FILES];

/* Reads every blob in turn, ROUNDS times, checking each one's bytes. */
static void *reader_main(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    char err[256], want[16];
    uint8_t buf[16];
    for (int r = 0; r < ROUNDS; r++) {
        int f = (int)((r + (int)id) % FILES);
        snprintf(want, sizeof want, "file-%02d", f);
        if (feed_blob_read(g_blobs[f], 0, 7, buf, err, sizeof err) != 0 ||
            memcmp(buf, want, 7) != 0)
            return (void *)1;
    }
    return NULL;
}

/*
 * Issue 28 finding 7: local blobs share a bounded cache of descriptors. With room for 2 and 8
 * files read by 4 threads at once, every read gets its file's bytes (a descriptor in use is
 * never closed under a reader) and, once the readers are done, at most 2 stay open.
 */
static void test_descriptor_cache_is_bounded(void **state)
{
    (void)state;
    char p[600], err[512], text[16];
    feed_blob_set_open_files(2);
    for (int f = 0; f < FILES; f++) {
        snprintf(p, sizeof p, "%s/f%d", g_dir, f);
        snprintf(text, sizeof text, "file-%02d", f);
        assert_int_equal(feed_test_write_file(p, text, strlen(text)), 0);
        assert_int_equal(feed_blob_open(p, NULL, &g_blobs[f], err, sizeof err), 0);
    }
    assert_true(feed_blob_open_files() <= 2);
    pthread_t t[READERS];
    for (uintptr_t i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reader_main, (void *)i), 0);
    for (int i = 0; i < READERS; i++) {
        void *res = NULL;
        assert_int_equal(pthread_join(t[i], &res), 0);
        assert_null(res);
    }
    assert_true(feed_blob_open_files() <= 2);
    for (int f = 0; f < FILES; f++)
        feed_blob_close(g_blobs[f]);
    assert_int_equal(feed_blob_open_files(), 0);
    feed_blob_set_open_files(256);
}

static void test_open_errors(void **state)
{
    (void)state;
    char p[600], err[512];
    feed_blob *b = (feed_blob *)&err; /* must come back NULL */
    snprintf(p, sizeof p, "%s/none", g_dir);
    assert_int_equal(feed_blob_open(p, NULL, &b, err, sizeof err), FEED_ENOTFOUND);
    assert_null(b);
    assert_non_null(strstr(err, "none"));
    assert_int_equal(feed_blob_open(g_dir, NULL, &b, err, sizeof err), FEED_EINVAL);
    assert_non_null(strstr(err, "not a regular file"));
    assert_null(b);

    assert_true(feed_blob_is_remote("s3://bucket/key"));
    assert_true(feed_blob_is_remote("https://host/x.tar"));
    assert_true(feed_blob_is_remote("http://host/x.tar"));
    assert_false(feed_blob_is_remote("/data/s3://x"));
    assert_false(feed_blob_is_remote("file.tar"));
    /* Nothing listens on port 1: the open fails at once, naming the object without the
     * credentials of its URL (remote objects are test_remote_blob's). */
    assert_int_equal(feed_blob_open("https://user:secret@127.0.0.1:1/x.tar", NULL, &b, err,
                                    sizeof err),
                     FEED_EIO);
    assert_null(b);
    assert_non_null(strstr(err, "https://127.0.0.1:1/x.tar"));
    assert_null(strstr(err, "secret")); /* credentials never appear in messages */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_local_reads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_changed_file_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_descriptor_cache_is_bounded, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
