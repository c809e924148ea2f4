/*
 * What the pack's unit tests share (test_pack.c: the library's writer and
 * reader, damaged packs; test_pack_tool.c: the feed-pack tool): a temp dir
 * per test with trees of real JPEGs and packs in it, file helpers, JPEGs made
 * with libjpeg and decoded back, and dataset comparisons.
 */
#ifndef FEED_TESTS_PACK_TESTLIB_H
#define FEED_TESTS_PACK_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

#include "feed/dataset.h"

extern char g_root[512]; /* temp dir: tree in g_root/tree, packs next to it */

/* A solid-colour JPEG (with a faint gradient, so it is not trivially flat). */
typedef struct jpeg_spec {
    int w, h;
    int gray;
    int h_samp, v_samp;
    int progressive;
    uint8_t rgb[3];
} jpeg_spec;

typedef struct decoded {
    int w, h, components;
    int h_samp, v_samp; /* luma factor relative to chroma; 1x1 for gray */
    double mean[3];
} decoded;

int setup_tmp(void **state);
int teardown_tmp(void **state);
void path_in(char *out, size_t cap, const char *rel);
void mkdir_in(const char *rel);
void write_bytes(const char *rel, const void *data, size_t len);
uint8_t *read_all(const char *path, size_t *len);
void write_jpeg(const char *rel, const jpeg_spec *s);
void decode(const uint8_t *data, size_t len, decoded *d);
feed_dataset *open_path(const char *rel, const feed_dataset_limits *lim);
void make_byte_tree(void);
void assert_same_dataset(const feed_dataset *a, const feed_dataset *b);
void write_pack(const feed_dataset *ds, const char *path);

#endif
