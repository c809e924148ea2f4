/* Helpers of the pack's unit tests; see pack_testlib.h. */
#include "pack_testlib.h"

#include <errno.h>
#include <fcntl.h>
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
#include "feedtest.h"
#include "feed/pack.h"

char g_root[512]; /* temp dir: tree in g_root/tree, packs next to it */

int setup_tmp(void **state)
{
    (void)state;
    if (feed_test_tmpdir("feed-test-pack", g_root, sizeof g_root) != 0)
        return -1;
    char p[600];
    snprintf(p, sizeof(p), "%s/tree", g_root);
    return mkdir(p, 0755);
}

int teardown_tmp(void **state)
{
    (void)state;
    return feed_test_rmtree(g_root);
}

void path_in(char *out, size_t cap, const char *rel)
{
    snprintf(out, cap, "%s/%s", g_root, rel);
}

void mkdir_in(const char *rel)
{
    char p[1024];
    path_in(p, sizeof(p), rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

void write_bytes(const char *rel, const void *data, size_t len)
{
    char p[1024];
    path_in(p, sizeof(p), rel);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

uint8_t *read_all(const char *path, size_t *len)
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

void write_jpeg(const char *rel, const jpeg_spec *s)
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

/* Decodes fully with libjpeg; fails the test on any error or warning. */
void decode(const uint8_t *data, size_t len, decoded *d)
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
feed_dataset *open_path(const char *rel, const feed_dataset_limits *lim)
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
void make_byte_tree(void)
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
void assert_same_dataset(const feed_dataset *a, const feed_dataset *b)
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
void write_pack(const feed_dataset *ds, const char *path)
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
