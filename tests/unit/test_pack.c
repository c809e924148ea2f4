/*
 * Unit tests for the pack: the writer (feed/pack.h) and the reader behind
 * feed_dataset_open(), byte-for-byte round trips from ImageFolder trees (by
 * the library writer and by the feed-pack tool), re-encoded packs decoded
 * with libjpeg, damaged packs refused with the expected error, and a tool
 * killed by SIGINT or SIGTERM mid-pack leaving nothing behind. The tool runs
 * as a child process from ${FEED_BUILD_DIR}/server/tools.
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

extern char **environ;

static char g_root[512]; /* temp dir: tree in g_root/tree, packs next to it */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup_tmp(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof(g_root), "%s/feed-test-pack-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_root))
        return -1;
    char p[600];
    snprintf(p, sizeof(p), "%s/tree", g_root);
    return mkdir(p, 0755);
}

static int teardown_tmp(void **state)
{
    (void)state;
    return nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void path_in(char *out, size_t cap, const char *rel)
{
    snprintf(out, cap, "%s/%s", g_root, rel);
}

static void mkdir_in(const char *rel)
{
    char p[1024];
    path_in(p, sizeof(p), rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static void write_bytes(const char *rel, const void *data, size_t len)
{
    char p[1024];
    path_in(p, sizeof(p), rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    uint8_t *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* A solid-colour JPEG (with a faint gradient, so it is not trivially flat). */
typedef struct jpeg_spec {
    int w, h;
    int gray;
    int h_samp, v_samp;
    int progressive;
    uint8_t rgb[3];
} jpeg_spec;

static void write_jpeg(const char *rel, const jpeg_spec *s)
{
    char p[1024];
    path_in(p, sizeof(p), rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)s->w;
    c.image_height = (JDIMENSION)s->h;
    c.input_components = s->gray ? 1 : 3;
    c.in_color_space = s->gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 95, TRUE);
    if (!s->gray) {
        c.comp_info[0].h_samp_factor = s->h_samp;
        c.comp_info[0].v_samp_factor = s->v_samp;
    }
    if (s->progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    int ch = c.input_components;
    uint8_t *row = malloc((size_t)s->w * ch);
    assert_non_null(row);
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < s->w; x++)
            for (int k = 0; k < ch; k++)
                row[x * ch + k] = (uint8_t)(s->rgb[k] + (x * 8) / s->w);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    assert_int_equal(fclose(f), 0);
}

typedef struct decoded {
    int w, h, components;
    int h_samp, v_samp; /* luma factor relative to chroma; 1x1 for gray */
    double mean[3];
} decoded;

/* Decodes fully with libjpeg; fails the test on any error or warning. */
static void decode(const uint8_t *data, size_t len, decoded *d)
{
    struct jpeg_decompress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&c);
    jpeg_mem_src(&c, data, (unsigned long)len);
    assert_int_equal(jpeg_read_header(&c, TRUE), JPEG_HEADER_OK);
    d->h_samp = d->v_samp = 1;
    if (c.num_components == 3) {
        d->h_samp = c.comp_info[0].h_samp_factor / c.comp_info[1].h_samp_factor;
        d->v_samp = c.comp_info[0].v_samp_factor / c.comp_info[1].v_samp_factor;
    }
    jpeg_start_decompress(&c);
    d->w = (int)c.output_width;
    d->h = (int)c.output_height;
    d->components = c.output_components;
    size_t stride = (size_t)d->w * d->components;
    uint8_t *row = malloc(stride);
    assert_non_null(row);
    double sum[3] = {0, 0, 0};
    while (c.output_scanline < c.output_height) {
        jpeg_read_scanlines(&c, &row, 1);
        for (int x = 0; x < d->w; x++)
            for (int k = 0; k < d->components; k++)
                sum[k] += row[x * d->components + k];
    }
    jpeg_finish_decompress(&c);
    assert_int_equal(jerr.num_warnings, 0);
    jpeg_destroy_decompress(&c);
    free(row);
    for (int k = 0; k < d->components; k++)
        d->mean[k] = sum[k] / ((double)d->w * d->h);
}

/* Starts ${FEED_BUILD_DIR}/server/tools/feed-pack with args (stderr on fd
 * stderr_fd when >= 0); its pid. */
static pid_t spawn_feed_pack(const char *const *args, int stderr_fd)
{
    const char *build = getenv("FEED_BUILD_DIR");
    if (!build)
        fail_msg("FEED_BUILD_DIR is not set (run under ctest)");
    char tool[1024];
    snprintf(tool, sizeof(tool), "%s/server/tools/feed-pack", build);
    char *argv[16];
    int n = 0;
    argv[n++] = tool;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    if (stderr_fd >= 0)
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, stderr_fd, STDERR_FILENO), 0);
    pid_t pid;
    int rc = posix_spawn(&pid, tool, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc)
        fail_msg("spawn %s: %s", tool, strerror(rc));
    return pid;
}

/* Runs feed-pack with args; returns its exit status. */
static int run_feed_pack(const char *const *args)
{
    pid_t pid = spawn_feed_pack(args, -1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static feed_dataset *open_path(const char *rel, const feed_dataset_limits *lim)
{
    char p[1024], err[512];
    path_in(p, sizeof(p), rel);
    feed_dataset *ds = NULL;
    int rc = feed_dataset_open(p, lim, &ds, err, sizeof(err));
    if (rc)
        fail_msg("open %s: %s (%s)", p, err, feed_err_name(rc));
    return ds;
}

/* Three classes of pseudo-random bytes, sizes 0..5000; not JPEGs (the pack does not care). */
static void make_byte_tree(void)
{
    static const char *const classes[] = {"cat", "dog", "zebra"};
    uint32_t x = 12345;
    for (int c = 0; c < 3; c++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "tree/%s", classes[c]);
        mkdir_in(rel);
        for (int i = 0; i < 7 + c; i++) {
            size_t len = c == 0 && i == 0 ? 0 : (size_t)(x % 5000);
            uint8_t buf[5000];
            for (size_t k = 0; k < len; k++) {
                x = x * 1103515245u + 12345u;
                buf[k] = (uint8_t)(x >> 16);
            }
            x = x * 1103515245u + 12345u;
            snprintf(rel, sizeof(rel), "tree/%s/%02d.jpg", classes[c], i);
            write_bytes(rel, buf, len);
        }
    }
}

/* Every sample of b equals the same sample of a (bytes, label), and so do the classes. */
static void assert_same_dataset(const feed_dataset *a, const feed_dataset *b)
{
    assert_int_equal(feed_dataset_count(a), feed_dataset_count(b));
    assert_int_equal(feed_dataset_num_classes(a), feed_dataset_num_classes(b));
    for (uint32_t c = 0; c < feed_dataset_num_classes(a); c++)
        assert_string_equal(feed_dataset_class_name(a, c), feed_dataset_class_name(b, c));
    feed_buf sa, sb;
    feed_buf_init(&sa, 64u << 20);
    feed_buf_init(&sb, 64u << 20);
    for (uint64_t i = 0; i < feed_dataset_count(a); i++) {
        const uint8_t *da, *db;
        size_t la, lb;
        assert_int_equal(feed_dataset_read(a, i, &sa, &da, &la), 0);
        assert_int_equal(feed_dataset_read(b, i, &sb, &db, &lb), 0);
        assert_int_equal(la, lb);
        if (la)
            assert_memory_equal(da, db, la);
        assert_int_equal(feed_dataset_label(a, i), feed_dataset_label(b, i));
    }
    feed_buf_free(&sa);
    feed_buf_free(&sb);
}

/* Packs ds into path with the library writer. */
static void write_pack(const feed_dataset *ds, const char *path)
{
    uint32_t nc = feed_dataset_num_classes(ds);
    const char **names = calloc(nc, sizeof(*names));
    assert_non_null(names);
    for (uint32_t c = 0; c < nc; c++)
        names[c] = feed_dataset_class_name(ds, c);
    feed_pack_writer *w = NULL;
    char err[512];
    assert_int_equal(
        feed_pack_writer_open(path, feed_dataset_count(ds), nc, names, &w, err, sizeof(err)), 0);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    for (uint64_t i = 0; i < feed_dataset_count(ds); i++) {
        const uint8_t *data;
        size_t len;
        assert_int_equal(feed_dataset_read(ds, i, &scratch, &data, &len), 0);
        assert_int_equal(feed_pack_writer_add(w, feed_dataset_label(ds, i), data, len), 0);
    }
    assert_int_equal(feed_pack_writer_finish(w, err, sizeof(err)), 0);
    feed_buf_free(&scratch);
    free(names);
}

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

static void test_tool_round_trip(void **state)
{
    (void)state;
    make_byte_tree();
    char src[1024], dst[1024];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "tool.pack");
    const char *args[] = {src, dst, "--threads", "3", NULL};
    assert_int_equal(run_feed_pack(args), 0);
    feed_dataset *tree = open_path("tree", NULL);
    feed_dataset *pack = open_path("tool.pack", NULL);
    assert_same_dataset(tree, pack);
    /* A pack is a valid source too, and repacking it changes nothing. */
    char again[1024];
    path_in(again, sizeof(again), "again.pack");
    const char *args2[] = {dst, again, NULL};
    assert_int_equal(run_feed_pack(args2), 0);
    size_t la, lb;
    uint8_t *a = read_all(dst, &la);
    uint8_t *b = read_all(again, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    feed_dataset_close(pack);
    feed_dataset_close(tree);
}

/* The tree of the re-encode tests, in sample order (classes a, b; names sorted). */
static const jpeg_spec k_wide = {640, 480, 0, 1, 1, 0, {200, 40, 40}};  /* a/1: 4:4:4 */
static const jpeg_spec k_small = {200, 100, 0, 2, 2, 0, {30, 160, 60}}; /* a/2: 4:2:0 */
static const jpeg_spec k_gray = {1000, 250, 1, 1, 1, 1, {90, 90, 90}};  /* b/1: progressive */
static const jpeg_spec k_tall = {90, 700, 0, 2, 1, 0, {40, 60, 220}};   /* b/2: 4:2:2 */

static void make_jpeg_tree(void)
{
    mkdir_in("tree/a");
    mkdir_in("tree/b");
    write_jpeg("tree/a/1.jpg", &k_wide);
    write_jpeg("tree/a/2.jpg", &k_small);
    write_jpeg("tree/b/1.jpg", &k_gray);
    write_jpeg("tree/b/2.jpg", &k_tall);
    write_bytes("tree/b/3.jpg", "not a jpeg at all", 17);
    /* A JPEG cut in half: libjpeg only warns; the tool must keep it as it is. */
    char p[1024];
    path_in(p, sizeof(p), "tree/a/1.jpg");
    size_t len;
    uint8_t *whole = read_all(p, &len);
    write_bytes("tree/b/4.jpg", whole, len / 2);
    free(whole);
}

static void assert_colour(const decoded *d, const jpeg_spec *s)
{
    for (int k = 0; k < d->components; k++) {
        double want = s->rgb[k] + 4.0; /* the gradient adds 0..7 */
        if (d->mean[k] < want - 10 || d->mean[k] > want + 10)
            fail_msg("channel %d mean %.1f, want about %.1f", k, d->mean[k], want);
    }
}

/* Sample i of the pack (pointing into the mapping) and of the tree (a malloc'd copy). */
static void sample_pair(const feed_dataset *pack, const feed_dataset *tree, uint64_t i,
                        feed_buf *scratch, const uint8_t **pd, size_t *pl, const uint8_t **td,
                        size_t *tl)
{
    assert_int_equal(feed_dataset_read(pack, i, scratch, pd, pl), 0);
    feed_buf tree_scratch;
    feed_buf_init(&tree_scratch, 1 << 24);
    const uint8_t *data;
    assert_int_equal(feed_dataset_read(tree, i, &tree_scratch, &data, tl), 0);
    uint8_t *copy = malloc(*tl + 1);
    assert_non_null(copy);
    memcpy(copy, data, *tl);
    feed_buf_free(&tree_scratch);
    *td = copy;
}

static void test_tool_reencode(void **state)
{
    (void)state;
    make_jpeg_tree();
    char src[1024], dst[1024];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "small.pack");
    const char *args[] = {src, dst, "--max-side", "320", "--quality", "80", "--threads", "2", NULL};
    assert_int_equal(run_feed_pack(args), 0);
    feed_dataset *tree = open_path("tree", NULL);
    feed_dataset *pack = open_path("small.pack", NULL);
    assert_int_equal(feed_dataset_count(pack), 6);
    feed_buf scratch;
    feed_buf_init(&scratch, 1 << 24);
    const uint8_t *pd, *td;
    size_t pl, tl;
    decoded d;

    static const struct {
        const jpeg_spec *spec;
        int w, h;
    } want[] = {{&k_wide, 320, 240}, {&k_small, 200, 100}, {&k_gray, 320, 80}, {&k_tall, 41, 320}};
    for (uint64_t i = 0; i < 4; i++) {
        sample_pair(pack, tree, i, &scratch, &pd, &pl, &td, &tl);
        decode(pd, pl, &d);
        assert_int_equal(d.w, want[i].w);
        assert_int_equal(d.h, want[i].h);
        assert_int_equal(d.components, want[i].spec->gray ? 1 : 3);
        if (!want[i].spec->gray) {
            assert_int_equal(d.h_samp, 2); /* re-encoded as 4:2:0 */
            assert_int_equal(d.v_samp, 2);
        }
        assert_colour(&d, want[i].spec);
        /* --quality asks for a change, so even the small one was re-encoded. */
        assert_true(pl != tl || memcmp(pd, td, pl) != 0);
        free((void *)td);
    }
    /* Undecodable and truncated images are stored exactly as they were. */
    for (uint64_t i = 4; i < 6; i++) {
        sample_pair(pack, tree, i, &scratch, &pd, &pl, &td, &tl);
        assert_int_equal(pl, tl);
        assert_memory_equal(pd, td, pl);
        free((void *)td);
    }
    feed_dataset_close(pack);

    /* --max-side alone: images already small enough keep their bytes. */
    path_in(dst, sizeof(dst), "side.pack");
    const char *args2[] = {src, dst, "--max-side", "320", "--subsample", "keep", NULL};
    assert_int_equal(run_feed_pack(args2), 0);
    pack = open_path("side.pack", NULL);
    sample_pair(pack, tree, 1, &scratch, &pd, &pl, &td, &tl);
    assert_int_equal(pl, tl);
    assert_memory_equal(pd, td, pl);
    free((void *)td);
    sample_pair(pack, tree, 0, &scratch, &pd, &pl, &td, &tl);
    decode(pd, pl, &d);
    assert_int_equal(d.w, 320);
    assert_int_equal(d.h_samp, 1); /* "keep": the source's 4:4:4 */
    assert_int_equal(d.v_samp, 1);
    free((void *)td);
    feed_dataset_close(pack);

    /* --subsample 444 alone re-encodes the 4:2:0 image at full size. */
    path_in(dst, sizeof(dst), "444.pack");
    const char *args3[] = {src, dst, "--subsample", "444", NULL};
    assert_int_equal(run_feed_pack(args3), 0);
    pack = open_path("444.pack", NULL);
    sample_pair(pack, tree, 1, &scratch, &pd, &pl, &td, &tl);
    decode(pd, pl, &d);
    assert_int_equal(d.w, 200);
    assert_int_equal(d.h_samp, 1);
    assert_colour(&d, &k_small);
    free((void *)td);
    /* ... and leaves the 4:4:4 one alone. */
    sample_pair(pack, tree, 0, &scratch, &pd, &pl, &td, &tl);
    assert_int_equal(pl, tl);
    assert_memory_equal(pd, td, pl);
    free((void *)td);
    feed_dataset_close(pack);

    /* Bad arguments: usage, exit 2, no pack written. */
    path_in(dst, sizeof(dst), "never.pack");
    const char *bad[] = {src, dst, "--quality", "0", NULL};
    assert_int_equal(run_feed_pack(bad), 2);
    const char *bad2[] = {src, dst, "--subsample", "411", NULL};
    assert_int_equal(run_feed_pack(bad2), 2);
    assert_int_equal(access(dst, F_OK), -1);

    feed_buf_free(&scratch);
    feed_dataset_close(tree);
}

/* ---- damaged packs ---- */

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
static void make_full_pipe(int fds[2])
{
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    char junk[4096];
    memset(junk, 'x', sizeof(junk));
    while (write(fds[1], junk, sizeof(junk)) > 0)
        ;
    while (write(fds[1], junk, 1) > 0) /* writes up to PIPE_BUF are all or nothing */
        ;
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(fcntl(fds[1], F_SETFL, 0), 0);
}

/*
 * feed-pack interrupted mid-pack by SIGINT and by SIGTERM. Its stderr is a
 * full pipe, so the first undecodable sample's message blocks it after the
 * temporary file exists and before the pack is complete, whatever the
 * machine's speed. It dies of the signal and leaves no temporary file; the
 * older pack at the path is untouched.
 */
static void test_tool_interrupted(void **state)
{
    (void)state;
    make_jpeg_tree();
    char src[1024], dst[1024], tmp[1100];
    path_in(src, sizeof(src), "tree");
    path_in(dst, sizeof(dst), "out.pack");
    static const char older[] = "an older pack";
    write_bytes("out.pack", older, sizeof(older));
    const char *args[] = {src, dst, "--max-side", "64", "--threads", "1", NULL};
    const int sigs[] = {SIGINT, SIGTERM};
    for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++) {
        int fds[2];
        make_full_pipe(fds);
        pid_t pid = spawn_feed_pack(args, fds[1]);
        snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dst, (long)pid);
        /* It cannot finish: wait (bounded, 60 s) for it to get that far. */
        for (int i = 0; i < 6000 && access(tmp, F_OK) != 0; i++)
            usleep(10000);
        assert_int_equal(access(tmp, F_OK), 0);
        assert_int_equal(kill(pid, sigs[k]), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(fds[0]);
        close(fds[1]);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), sigs[k]);
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(errno, ENOENT);
        size_t len;
        uint8_t *kept = read_all(dst, &len);
        assert_int_equal(len, sizeof(older));
        assert_memory_equal(kept, older, len);
        free(kept);
    }
}

static void test_imagenet_sample_repack(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    feed_dataset *tree = NULL;
    char err[512];
    assert_int_equal(feed_dataset_open(dir, NULL, &tree, err, sizeof(err)), 0);
    char p[1024];
    path_in(p, sizeof(p), "imagenet.pack");
    write_pack(tree, p);
    feed_dataset *pack = open_path("imagenet.pack", NULL);
    assert_same_dataset(tree, pack);
    feed_dataset_close(pack);
    feed_dataset_close(tree);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest sample_tests[] = {
        cmocka_unit_test_setup_teardown(test_imagenet_sample_repack, setup_tmp, teardown_tmp),
    };
    if (feed_test_sample_mode(argc, argv))
        return feed_test_have_sample() ? cmocka_run_group_tests(sample_tests, NULL, NULL)
                                       : FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_writer_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_round_trip, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_reencode, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_corrupt_packs, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_mutation_sweep, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_pack_read_limits, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_writer_misuse, setup_tmp, teardown_tmp),
        cmocka_unit_test_setup_teardown(test_tool_interrupted, setup_tmp, teardown_tmp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
