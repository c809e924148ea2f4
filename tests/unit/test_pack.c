/*
 * Unit tests for the pack: the writer (feed/pack.h) and the reader behind
 * feed_dataset_open(): byte-for-byte round trips from ImageFolder trees,
 * damaged packs refused with the expected error (every field, and a sweep of
 * random mutations read in bounds), read limits, the writer misused. The
 * feed-pack tool: test_pack_tool.c; shared helpers: pack_testlib.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "feed/buf.h"
#include "feed/crc32c.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/pack.h"
#include "feedtest_skip.h"
#include "pack_testlib.h"

extern char **environ;

static void test_writer_round_trip(void **state)
{
    (void)state;
    make_byte_tree();
    feed_dataset *tree = open_path("tree", NULL);
    char pack_path[1024];
    path_in(pack_path, sizeof(pack_path), "lib.pack");
    write_pack(tree, pack_path);
    feed_dataset *pack = open_path("lib.pack", NULL);
    assert_string_equal(feed_dataset_format(pack), "pack");
    assert_int_equal(feed_dataset_count(pack), 7 + 8 + 9);
    assert_string_equal(feed_dataset_class_name(pack, 2), "zebra");
    assert_null(feed_dataset_class_name(pack, 3));
    assert_null(feed_dataset_sample_path(pack, 0));
    assert_same_dataset(tree, pack);

    /* A pack read points into the mapping and leaves the scratch alone. */
    feed_buf scratch;
    feed_buf_init(&scratch, 16);
    const uint8_t *data;
    size_t len;
    assert_int_equal(feed_dataset_read(pack, 5, &scratch, &data, &len), 0);
    assert_null(scratch.data);
    assert_int_equal(feed_dataset_read(pack, 24, &scratch, &data, &len), FEED_EINVAL);
    assert_null(data);
    feed_buf_free(&scratch);

    /* The temporary file is gone after the rename. */
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", pack_path, (long)getpid());
    assert_int_equal(access(tmp, F_OK), -1);
    feed_dataset_close(pack);
    feed_dataset_close(tree);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/*
 * Recomputes the CRC over [0, data_offset) as the header of img (len bytes)
 * states it, so a test reaches the checks behind the CRC. A data offset
 * beyond the image is left alone: the reader refuses it before the CRC.
 */
static void reseal(uint8_t *img, size_t len)
{
    uint64_t data_off = get64(img + FEED_PACK_OFF_DATA);
    if (data_off > len || data_off < FEED_PACK_HEADER_BYTES)
        return;
    put32(img + FEED_PACK_OFF_CRC, 0);
    put32(img + FEED_PACK_OFF_CRC, feed_crc32c(0, img, (size_t)data_off));
}

/* Writes img[0, len) as bad.pack and opens it; returns the code, message in err. */
static int open_image(const uint8_t *img, size_t len, const feed_dataset_limits *lim, char *err,
                      size_t cap)
{
    char p[1024];
    path_in(p, sizeof(p), "bad.pack");
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(img, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    feed_dataset *ds = (feed_dataset *)err;
    int rc = feed_dataset_open(p, lim, &ds, err, cap);
    if (rc == 0)
        feed_dataset_close(ds);
    else
        assert_null(ds);
    return rc;
}

static void expect_refused(const uint8_t *img, size_t len, int want_rc, const char *want_text)
{
    char err[512];
    int rc = open_image(img, len, NULL, err, sizeof(err));
    if (rc != want_rc || !strstr(err, want_text))
        fail_msg("got %s \"%s\", want %s with \"%s\"", feed_err_name(rc), err,
                 feed_err_name(want_rc), want_text);
}

/* A valid pack of 3 samples and 2 classes, as bytes; *len gets its size. */
static uint8_t *good_pack(size_t *len)
{
    static const char *const names[] = {"first", "second"};
    char p[1024], err[256];
    path_in(p, sizeof(p), "good.pack");
    feed_pack_writer *w = NULL;
    assert_int_equal(feed_pack_writer_open(p, 3, 2, names, &w, err, sizeof(err)), 0);
    assert_int_equal(feed_pack_writer_add(w, 0, "aaaa", 4), 0);
    assert_int_equal(feed_pack_writer_add(w, 1, "bbbbbbbb", 8), 0);
    assert_int_equal(feed_pack_writer_add(w, 1, "cc", 2), 0);
    assert_int_equal(feed_pack_writer_finish(w, err, sizeof(err)), 0);
    return read_all(p, len);
}

static void test_corrupt_packs(void **state)
{
    (void)state;
    size_t len;
    uint8_t *good = good_pack(&len);
    uint8_t *img = malloc(len + 16);
    assert_non_null(img);
    const size_t index_off = FEED_PACK_HEADER_BYTES;
    const size_t entry1 = index_off + FEED_PACK_ENTRY_BYTES;
    const uint64_t data_off = get64(good + FEED_PACK_OFF_DATA);
    const uint64_t names_off = get64(good + FEED_PACK_OFF_NAMES);
    assert_int_equal(names_off, index_off + 3 * FEED_PACK_ENTRY_BYTES);
    assert_int_equal(data_off, names_off + strlen("first") + 1 + strlen("second") + 1);
    assert_int_equal(len, data_off + 14);

    char err[512];
    assert_int_equal(open_image(good, len, NULL, err, sizeof(err)), 0);

    /* Truncated: empty, inside the header, the index, the names, the data. */
    const size_t cuts[] = {0, 7, FEED_PACK_HEADER_BYTES - 1};
    for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
        expect_refused(good, cuts[i], FEED_ECORRUPT, "shorter than the 80-byte pack header");
    const size_t cuts2[] = {FEED_PACK_HEADER_BYTES, entry1 + 3, (size_t)names_off + 2,
                            (size_t)data_off, len - 1};
    for (size_t i = 0; i < sizeof(cuts2) / sizeof(cuts2[0]); i++)
        expect_refused(good, cuts2[i], FEED_ECORRUPT, "truncated");
    /* Trailing bytes are refused too: the header says where the file ends. */
    memcpy(img, good, len);
    memset(img + len, 0, 16);
    expect_refused(img, len + 16, FEED_ECORRUPT, "trailing bytes");

    memcpy(img, good, len);
    img[0] ^= 0x20;
    expect_refused(img, len, FEED_ECORRUPT, "bad magic");

    memcpy(img, good, len);
    put32(img + FEED_PACK_OFF_VERSION, 2);
    reseal(img, len);
    expect_refused(img, len, FEED_EUNSUPPORTED, "pack version 2");

    /* One bit flipped in the index, the names or the stored CRC: the CRC catches it. */
    const size_t flips[] = {entry1 + FEED_PACK_ENTRY_OFF_LENGTH, (size_t)names_off + 1,
                            FEED_PACK_OFF_CRC + 2};
    for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
        memcpy(img, good, len);
        img[flips[i]] ^= 0x01;
        expect_refused(img, len, FEED_ECORRUPT, "checksum mismatch");
    }

    /* With a correct CRC: an entry past EOF, one whose offset+length overflows, one before the
     * data. */
    memcpy(img, good, len);
    put64(img + entry1 + FEED_PACK_ENTRY_OFF_OFFSET, len - 4);
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "index entry 1 (offset");
    memcpy(img, good, len);
    put64(img + entry1 + FEED_PACK_ENTRY_OFF_OFFSET, UINT64_MAX - 3);
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "lies outside the data section");
    memcpy(img, good, len);
    put64(img + entry1 + FEED_PACK_ENTRY_OFF_OFFSET, 0);
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "lies outside the data section");
    /* A label beyond the class count. */
    memcpy(img, good, len);
    put32(img + entry1 + FEED_PACK_ENTRY_OFF_LABEL, 2);
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "has label 2");
    /* A sample count whose index size overflows 64 bits (under a limit that lets it through). */
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_samples = UINT64_MAX;
    memcpy(img, good, len);
    put64(img + FEED_PACK_OFF_COUNT, UINT64_MAX / 8);
    reseal(img, len);
    assert_int_equal(open_image(img, len, &lim, err, sizeof(err)), FEED_ECORRUPT);
    assert_non_null(strstr(err, "overflow"));
    /* A count that disagrees with the section offsets. */
    memcpy(img, good, len);
    put64(img + FEED_PACK_OFF_COUNT, 2);
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "not contiguous");
    /* A class-name table whose NULs do not match the class count. */
    memcpy(img, good, len);
    img[names_off + strlen("first")] = 'x';
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "class-name table");
    /* A class name that is not UTF-8 (the writer would have refused it). */
    memcpy(img, good, len);
    img[names_off + 4] = (uint8_t)0xe9;
    reseal(img, len);
    expect_refused(img, len, FEED_ECORRUPT, "class 0 name 'firs\\xe9' is not valid UTF-8");
    /* More samples than the caller allows. */
    lim.max_samples = 2;
    assert_int_equal(open_image(good, len, &lim, err, sizeof(err)), FEED_ETOOBIG);
    assert_non_null(strstr(err, "max_samples"));

    free(img);
    free(good);
}

/*
 * Random damage to header, index and names, resealed so it passes the CRC:
 * every pack either opens or is refused, and one that opens reads only
 * inside the file (AddressSanitizer and the bound checks below watch that).
 */
static void test_mutation_sweep(void **state)
{
    (void)state;
    size_t len;
    uint8_t *good = good_pack(&len);
    uint8_t *img = malloc(len);
    assert_non_null(img);
    const size_t meta = (size_t)get64(good + FEED_PACK_OFF_DATA);
    uint32_t x = 2463534242u;
    int opened = 0;
    char p[1024], err[512];
    path_in(p, sizeof(p), "bad.pack");
    for (int iter = 0; iter < 600; iter++) {
        memcpy(img, good, len);
        int flips = 1 + iter % 4;
        for (int f = 0; f < flips; f++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t at = FEED_PACK_OFF_COUNT + x % (meta - FEED_PACK_OFF_COUNT);
            img[at] = (uint8_t)(x >> 24);
        }
        reseal(img, len);
        feed_dataset *ds = NULL;
        if (open_image(img, len, NULL, err, sizeof(err)) != 0)
            continue;
        assert_int_equal(feed_dataset_open(p, NULL, &ds, err, sizeof(err)), 0);
        opened++;
        feed_buf scratch;
        feed_buf_init(&scratch, 16);
        for (uint64_t i = 0; i < feed_dataset_count(ds); i++) {
            const uint8_t *data;
            size_t n;
            assert_true(feed_dataset_label(ds, i) < feed_dataset_num_classes(ds));
            if (feed_dataset_read(ds, i, &scratch, &data, &n) != 0)
                continue;
            unsigned sum = 0;
            for (size_t k = 0; k < n; k++)
                sum += data[k];
            (void)sum;
        }
        for (uint32_t c = 0; c < feed_dataset_num_classes(ds); c++)
            assert_true(strlen(feed_dataset_class_name(ds, c)) >= 1);
        feed_buf_free(&scratch);
        feed_dataset_close(ds);
    }
    /* Some damage is harmless (an offset moved inside the data, a label swapped). */
    assert_true(opened > 0);
    free(img);
    free(good);
}

static void test_pack_read_limits(void **state)
{
    (void)state;
    size_t len;
    uint8_t *good = good_pack(&len);
    free(good);
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_sample_bytes = 4;
    feed_dataset *ds = open_path("good.pack", &lim);
    feed_buf scratch;
    feed_buf_init(&scratch, 1024);
    const uint8_t *data;
    size_t n;
    assert_int_equal(feed_dataset_read(ds, 0, &scratch, &data, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(data, "aaaa", 4);
    assert_int_equal(feed_dataset_read(ds, 1, &scratch, &data, &n), FEED_ETOOBIG);
    assert_int_equal(feed_dataset_read(ds, 2, &scratch, &data, &n), 0);
    assert_memory_equal(data, "cc", 2);
    assert_int_equal(feed_dataset_read(ds, 3, &scratch, &data, &n), FEED_EINVAL);
    assert_int_equal(feed_dataset_label(ds, 1), 1);
    assert_string_equal(feed_dataset_class_name(ds, 1), "second");
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
}

static void test_writer_misuse(void **state)
{
    (void)state;
    static const char *const names[] = {"x", ""};
    char p[1024], err[256];
    path_in(p, sizeof(p), "misuse.pack");
    feed_pack_writer *w = NULL;
    assert_int_equal(feed_pack_writer_open(p, 2, 2, names, &w, err, sizeof(err)), FEED_EINVAL);
    assert_null(w);
    assert_int_equal(feed_pack_writer_open(p, 0, 1, names, &w, err, sizeof(err)), FEED_EINVAL);
    static const char *const latin1[] = {"caf\xe9"};
    assert_int_equal(feed_pack_writer_open(p, 1, 1, latin1, &w, err, sizeof(err)), FEED_EINVAL);
    assert_non_null(strstr(err, "not valid UTF-8"));

    assert_int_equal(feed_pack_writer_open(p, 2, 1, names, &w, err, sizeof(err)), 0);
    assert_int_equal(feed_pack_writer_add(w, 1, "z", 1), FEED_EINVAL); /* label >= classes */
    assert_int_equal(feed_pack_writer_add(w, 0, "z", 1), 0);
    assert_int_equal(feed_pack_writer_finish(w, err, sizeof(err)), FEED_EINVAL);
    assert_non_null(strstr(err, "1 of 2 samples"));
    assert_int_equal(access(p, F_OK), -1);

    assert_int_equal(feed_pack_writer_open(p, 1, 1, names, &w, err, sizeof(err)), 0);
    assert_int_equal(feed_pack_writer_add(w, 0, "z", 1), 0);
    assert_int_equal(feed_pack_writer_add(w, 0, "z", 1), FEED_EINVAL); /* more than count */
    feed_pack_writer_abort(w);
    feed_pack_writer_abort(NULL);
    assert_int_equal(access(p, F_OK), -1);

    /* No temporary file is left behind either. */
    struct stat st;
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", p, (long)getpid());
    assert_int_equal(stat(tmp, &st), -1);
    assert_int_equal(errno, ENOENT);
}

/* A pipe with no room left: a write to it blocks until someone reads. */
int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writer_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_corrupt_packs, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_mutation_sweep, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_pack_read_limits, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_writer_misuse, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
