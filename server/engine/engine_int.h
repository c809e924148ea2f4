/*
 * The engine library's insides, shared by its units and by no one else
 * (tests of a unit may include it), the way curl's lib/vtls/vtls_int.h sits
 * at its folder's door: the engine struct, and what decode.c (libjpeg,
 * errors, limits, the whole-image decode, the engine's scratch), crop.c (crop
 * and resize planning, the resize pipeline) and engine.c (a sample's run into
 * the caller's buffer) call across; none of them owns it. One thread uses an
 * engine at a time, as engine.h says.
 */
#ifndef FEED_SERVER_ENGINE_ENGINE_INT_H
#define FEED_SERVER_ENGINE_ENGINE_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* jpeglib.h first: jerror.h depends on its configuration. */
#include <jpeglib.h>
#include <jerror.h>

#include "engine.h"
#include "jmem.h"
#include "resize.h"

/* Rows decoded per batch before they go through the horizontal pass. */
#define BATCH_ROWS 16
/*
 * Decoded rows start 16 bytes past a 32-byte boundary. libjpeg-turbo's AVX2
 * and SSE2 colour converters write rows that start on a 32-byte boundary
 * with non-temporal stores, which bypass the cache: the horizontal pass would
 * then read every row back from memory (measured: half of its time).
 */
#define ROW_SKEW 16

/* The first row of a buffer with 64 + ROW_SKEW spare bytes; strides are multiples of 64. */
static inline uint8_t *skewed(uint8_t *p)
{
    return (uint8_t *)(((uintptr_t)p + 63) & ~(uintptr_t)63) + ROW_SKEW;
}
/* More scans than this in one file is hostile (real progressive files have ~10). */
#define MAX_SCANS 256
/* A multi-scan image's coefficient buffer may take this many bytes per
 * allowed pixel (max_pixels): 128 MiB at the defaults, which holds a 4:2:0
 * progressive image of 44 Mpx or a 4:4:4 one of 22 Mpx. */
#define COEF_BYTES_PER_MAX_PIXEL 2u
/* libjpeg's own buffers besides the coefficients (row buffers, tables):
 * a few MiB for the widest image max_side allows. */
#define JPEG_MEM_SLACK (32u << 20)
#define JMEM_LIMIT JPEG_MEM_SLACK

typedef struct engine_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} engine_err;

struct feed_engine {
    feed_engine_limits lim;
    struct jpeg_decompress_struct dec;
    engine_err err;
    struct jpeg_progress_mgr progress;
    feed_jmem jmem;            /* libjpeg's per-image allocations */
    feed_sample_status status; /* of the run in progress; set before a longjmp */
    char msg[256];

    /* Scratch, grow-only. rows: BATCH_ROWS decoded rows (RGBX or CMYK). */
    uint8_t *rows;
    size_t rows_cap;
    JSAMPROW rowptr[BATCH_ROWS];
    uint8_t *ring; /* horizontally resized RGB rows waiting for the vertical pass */
    size_t ring_cap;
    const uint8_t **vrows;
    size_t vrows_cap;
    feed_resize_axis hx, vy;
    uint8_t *ref_full; /* the reference path's whole image; freed at the end of the run */
    uint8_t *decoded;  /* feed_engine_decode's output when its caller gives no buffer */
    size_t decoded_cap;
    uint8_t *aug_tmp; /* feed_engine_augment's scratch: one sample */
    size_t aug_tmp_cap;

    /* The decompressor's table slots point here, refilled before every image
     * (reset_tables): libjpeg keeps tables across images otherwise. */
    JQUANT_TBL quant[NUM_QUANT_TBLS];
    JHUFF_TBL dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS];
    JHUFF_TBL std_dc[2], std_ac[2]; /* libjpeg's standard tables (JPEG Annex K.3) */
};

/* ---- decode.c ---- */

/* e->msg = "<status name>: <text>". */
void engine_set_msg(feed_engine *e, feed_sample_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Grow a zero-initialised scratch buffer. 0 or FEED_ENOMEM. */
int engine_grow(uint8_t **p, size_t *cap, size_t need);
/* CMYK (or YCCK) rows as decoded to RGBX in place, as Pillow converts. */
void engine_cmyk_to_rgbx(uint8_t *row, uint32_t n, bool inverted);
feed_sample_status engine_precheck_transform(feed_engine *e, const feed_transform *t,
                                             const uint8_t *out);
feed_sample_status engine_precheck_bytes(feed_engine *e, const uint8_t *jpeg, size_t len);
feed_sample_status engine_precheck(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, const uint8_t *out);
/* This image's own tables, the header read and checked; not OK: e->status and message set. */
feed_sample_status engine_read_header(feed_engine *e, const uint8_t *jpeg, size_t len, bool *cmyk);
/* After jpeg_start_decompress: CORRUPT for a quantisation table the image did not define. */
feed_sample_status engine_check_quant_tables(feed_engine *e);
/* Whether an EOI marker follows where a single-scan decode stopped. */
bool engine_eoi_follows(struct jpeg_decompress_struct *d);
/* Abort the decompressor, zero out (when given) and the times; returns e->status. */
feed_sample_status engine_fail_now(feed_engine *e, uint8_t *out, size_t out_bytes,
                                   feed_stage_times *times);

/* ---- crop.c ---- */

/*
 * The source box mapped onto an image scaled by `scale` from the plan's
 * coordinates, of avail_w x avail_h pixels: the box in scaled pixels, and the
 * whole scaled pixels [c0, c1) x [r0, r1) that cover it (with the filter's
 * reach around it for eval).
 */
typedef struct engine_window {
    double bx0, bx1, by0, by1;
    uint32_t c0, c1, r0, r1;
} engine_window;

/* Source rows in, output rows out as soon as their vertical window is complete. */
typedef struct engine_pipeline {
    feed_engine *e;
    uint8_t *out;
    size_t out_stride; /* out_w * 3 */
    size_t ring_stride;
    uint32_t ring_rows;
    uint32_t pushed; /* source rows through the horizontal pass */
    uint32_t next_y; /* next output row to make */
} engine_pipeline;

bool engine_source_box(const feed_transform *t, uint32_t w, uint32_t h,
                       const feed_sample_plan *plan, double box[4]);
double engine_filter_reach(double len, uint32_t out);
unsigned engine_pick_denom(const feed_crop_box *c, const feed_transform *t);
void engine_map_window(const feed_transform *t, uint32_t src_w, uint32_t src_h,
                       const feed_sample_plan *plan, double scale, uint32_t avail_w,
                       uint32_t avail_h, engine_window *w);
int engine_plan_axes(feed_engine *e, const feed_transform *t, const engine_window *w, bool flip);
int engine_pipeline_init(engine_pipeline *p, feed_engine *e, uint8_t *out);
void engine_pipeline_push(engine_pipeline *p, const uint8_t *src);

#endif
