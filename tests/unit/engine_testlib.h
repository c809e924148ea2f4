/*
 * What the engine's unit tests share (test_engine.c: the fast path against
 * the reference, kernels, determinism; test_engine_input.c: malformed input,
 * limits, per-image tables, the decoded path; test_engine_crop.c: crop.c;
 * test_engine_augment.c: the augmentations): files from tests/data, PSNR,
 * JPEGs made here with libjpeg in any layout, and a fixture with an engine
 * and two output buffers.
 */
#ifndef FEED_TESTS_ENGINE_TESTLIB_H
#define FEED_TESTS_ENGINE_TESTLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* Fast path vs reference: see test_engine.c. */
#define PSNR_BOUND 30.0

enum { K_YCC, K_GRAY, K_RGB, K_CMYK, K_YCCK };

typedef struct jpg_spec {
    uint32_t w, h;
    int kind;
    int hs, vs; /* luma sampling factors (YCC) */
    bool progressive, arith;
    int restart_rows;
    int quality;
    bool optimize;   /* Huffman tables made for the image, not the standard ones */
    bool flat, busy; /* one colour; or fine texture everywhere */
    uint8_t colour[4];
} jpg_spec;

typedef struct fixture {
    feed_engine *e;
    uint8_t *a, *b;
} fixture;

uint8_t *read_file(const char *path, size_t *len);
uint8_t *read_data(const char *name, size_t *len);
double psnr(const uint8_t *a, const uint8_t *b, size_t n);
bool all_zero(const uint8_t *p, size_t n);
uint8_t pattern(const jpg_spec *s, uint32_t x, uint32_t y, int ch);
uint8_t *make_jpeg(const jpg_spec *s, size_t *len);
int setup(void **state);
int teardown(void **state);
/* Fast path and reference for one image over a few keys and sizes: the lowest PSNR (fails under
 * PSNR_BOUND or on any status but OK). */
double compare_paths(fixture *f, const uint8_t *jpg, size_t len, const char *what, int keys);

#endif
