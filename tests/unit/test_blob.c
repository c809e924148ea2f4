/*
 * Unit tests for feed/blob.h's local-file blob (common/src/blob.c): size and
 * version at open, exact reads, ranges outside the object, the read cap, a
 * file cut after open, what is not a regular file, and remote schemes (not in
 * this build: refused with a message naming the scheme, never a crash).
 */
#include <errno.h>
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
    assert_int_equal(feed_blob_read(b, 2, 5, buf, err, sizeof err), FEED_ESTATE);
    assert_non_null(strstr(err, "changed since open"));
    feed_blob_close(b);
    feed_blob_close(NULL);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
