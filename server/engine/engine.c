/*
 * The preprocessing engine (see engine.h): JPEG bytes → one uint8 HWC RGB
 * sample in the caller's buffer. A feed_engine belongs to one worker thread at
 * a time; it keeps one libjpeg decompressor and grow-only scratch, so a warm
 * engine allocates nothing of its own per image.
 *
 * One file on purpose (~1,130 lines): the fast path, the decoded path (the
 * cache's whole-image decode and the sample from it), the full-decode
 * reference and the libjpeg error and warning mapping share the
 * decompressor's setup, its error manager, the table reset and the header
 * limit checks (read_header); apart, each would need the others' internals
 * in a header.
 *
 * Fast path, in order:
 *   1. cheap checks on the bytes (empty, size limit, SOI);
 *   2. jpeg_read_header; declared size checked against the limits, and a
 *      multi-scan (progressive) image's coefficient buffer estimated and
 *      capped — all before libjpeg allocates anything sized by the image;
 *   3. the plan (crop box, flip) from the header's size;
 *   4. the smallest DCT scale 1/8, 1/4, 1/2 or 1 at which the scaled crop
 *      still covers the output in both dimensions;
 *   5. jpeg_crop_scanline to the crop's columns (libjpeg widens the window
 *      left to an iMCU boundary; the extra columns are skipped in our rows),
 *      jpeg_skip_scanlines to the crop's first row, jpeg_read_scanlines for
 *      the crop's rows only, then jpeg_abort_decompress: rows below the crop
 *      are never decoded;
 *   6. each decoded RGBX row goes through the horizontal pass (flip folded
 *      in) into a small ring of RGB rows; each output row is made by the
 *      vertical pass as soon as its rows are in the ring, straight into the
 *      caller's buffer.
 *
 * libjpeg warnings, decided on purpose (emit_message below):
 *   - JWRN_JPEG_EOF (data ended early)                → TRUNCATED, stop now;
 *   - JWRN_HUFF_BAD_CODE, JWRN_ARITH_BAD_CODE, JWRN_HIT_MARKER,
 *     JWRN_MUST_RESYNC, JWRN_NOT_SEQUENTIAL (the entropy-coded data is
 *     damaged, so the pixels after it would be garbage) → CORRUPT, stop now;
 *   - everything else is ignored: JWRN_EXTRANEOUS_DATA (junk between the end
 *     of a scan and the next marker; the scan itself decoded fully, and many
 *     real files carry it), JWRN_BOGUS_PROGRESSION (odd but decodable
 *     progressive scripts), unknown JFIF/Adobe versions, bad ICC markers.
 * Because rows below the crop are not decoded, a single-scan image whose data
 * ends without an EOI marker after the part we read is reported TRUNCATED too
 * (a scan of the unread bytes for FF D9), so truncation does not depend on
 * where the random crop fell. Corruption in unread rows is not detected.
 * Fatal libjpeg errors map by code (classify_error): no SOI → NOT_JPEG, input
 * ended → TRUNCATED, out of memory or backing store → TOO_LARGE, 12-bit,
 * lossless and other unsupported processes → UNSUPPORTED, the rest CORRUPT.
 *
 * Tables: libjpeg keeps quantisation and Huffman tables from one image to
 * the next (for abbreviated datastreams); reset_tables gives every image the
 * tables a fresh decompressor would have, and check_quant_tables refuses one
 * that uses a quantisation table it does not define.
 *
 * Limits, all checked from the header before anything sized by the image is
 * allocated: declared width/height against max_side and max_pixels; a
 * multi-scan image's whole-image coefficient buffer against 2 bytes per
 * max_pixels (COEF_BYTES_PER_MAX_PIXEL; libjpeg's max_memory_to_use backs
 * that up); more than MAX_SCANS scans is refused as it is read (progress
 * monitor); libjpeg's other per-image buffers come from an arena capped at
 * JMEM_LIMIT (jmem.c).
 *
 * Memory: the decompressor, its arena and our scratch (a batch of decoded
 * rows, the resize ring, the weights) live as long as the engine and only
 * grow, so in steady state a run makes no allocation at all. The reference
 * path allocates the whole image per run, on purpose.
 *
 * Cost: on ImageNet-sized JPEGs about 70% of a fast-path run is libjpeg's
 * Huffman decoding (decode_mcu), which no crop avoids: every row above the
 * crop's last one must be entropy-decoded, all columns of it. Only rows
 * below the crop, and the IDCT, colour conversion and resize of everything
 * outside the crop, are saved. See bench/results/preproc.md.
 */
#include "engine.h"

#include <limits.h>
#include <stddef.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jpeglib.h first: jerror.h depends on its configuration. */
#include <jpeglib.h>
#include <jerror.h>

#include "feed/eval_box.h"
#include "feed/timeutil.h"
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
static uint8_t *skewed(uint8_t *p)
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

    /* The decompressor's table slots point here, refilled before every image
     * (reset_tables): libjpeg keeps tables across images otherwise. */
    JQUANT_TBL quant[NUM_QUANT_TBLS];
    JHUFF_TBL dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS];
    JHUFF_TBL std_dc[2], std_ac[2]; /* libjpeg's standard tables (JPEG Annex K.3) */
};

/* ---- errors ---------------------------------------------------------------------------- */

/* client_data belongs to the arena (jmem.h); the engine is found from the
 * error manager it embeds. */
static feed_engine *engine_of(j_common_ptr c)
{
    return (feed_engine *)(void *)((char *)c->err - offsetof(feed_engine, err));
}

static void set_msg(feed_engine *e, feed_sample_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_msg(feed_engine *e, feed_sample_status st, const char *fmt, ...)
{
    int n = snprintf(e->msg, sizeof e->msg, "%s: ", feed_sample_status_name(st));
    if (n < 0 || (size_t)n >= sizeof e->msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
    va_end(ap);
}

static feed_sample_status classify_error(int code)
{
    switch (code) {
    case JERR_NO_SOI:
        return FEED_SAMPLE_NOT_JPEG;
    case JERR_INPUT_EMPTY:
        return FEED_SAMPLE_EMPTY;
    case JERR_INPUT_EOF:
        return FEED_SAMPLE_TRUNCATED;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
        return FEED_SAMPLE_TOO_LARGE;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED:
    case JERR_ARITH_NOTIMPL:
    case JERR_NOTIMPL:
        return FEED_SAMPLE_UNSUPPORTED;
    default:
        return FEED_SAMPLE_CORRUPT;
    }
}

static feed_sample_status classify_warning(int code)
{
    switch (code) {
    case JWRN_JPEG_EOF:
        return FEED_SAMPLE_TRUNCATED;
    case JWRN_HUFF_BAD_CODE:
#if defined(C_ARITH_CODING_SUPPORTED) || defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_HIT_MARKER:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
        return FEED_SAMPLE_CORRUPT;
    default:
        return FEED_SAMPLE_OK;
    }
}

static void __attribute__((noreturn)) bail(j_common_ptr c, feed_sample_status st)
{
    feed_engine *e = engine_of(c);
    char text[JMSG_LENGTH_MAX];
    (*c->err->format_message)(c, text);
    e->status = st;
    set_msg(e, st, "%s", text);
    longjmp(e->err.jump, 1);
}

/*
 * A Huffman table slot this image did not define holds UNDEFINED_HUFF:
 * bits[0], which a DHT marker always sets to 0, says so, and two codes of
 * length 1 make libjpeg refuse the table (JERR_BAD_HUFF_TABLE) when a scan
 * uses it.
 */
static const JHUFF_TBL UNDEFINED_HUFF = {.bits = {1, 2}};

/* A Huffman table the current scan may use and this image did not define, or -1. */
static int undefined_huff_table(const struct jpeg_decompress_struct *d)
{
    int found = -1;
    bool dc = d->Ss == 0 && (!d->progressive_mode || d->Ah == 0), ac = d->Se > 0;
    for (int i = 0; i < d->comps_in_scan && found < 0; i++) {
        const jpeg_component_info *c = d->cur_comp_info[i];
        if (dc && c->dc_tbl_no >= 0 && c->dc_tbl_no < NUM_HUFF_TBLS &&
            d->dc_huff_tbl_ptrs[c->dc_tbl_no]->bits[0])
            found = c->dc_tbl_no;
        else if (ac && c->ac_tbl_no >= 0 && c->ac_tbl_no < NUM_HUFF_TBLS &&
                 d->ac_huff_tbl_ptrs[c->ac_tbl_no]->bits[0])
            found = c->ac_tbl_no;
    }
    return found;
}

static void on_error_exit(j_common_ptr c)
{
    int tbl = c->err->msg_code == JERR_BAD_HUFF_TABLE && c->is_decompressor
                  ? undefined_huff_table((j_decompress_ptr)c)
                  : -1;
    if (tbl >= 0) {
        feed_engine *e = engine_of(c);
        e->status = FEED_SAMPLE_CORRUPT;
        set_msg(e, e->status, "Huffman table %d is not defined in this image", tbl);
        longjmp(e->err.jump, 1);
    }
    bail(c, classify_error(c->err->msg_code));
}

static void on_emit_message(j_common_ptr c, int level)
{
    if (level >= 0)
        return; /* trace messages */
    c->err->num_warnings++;
    feed_sample_status st = classify_warning(c->err->msg_code);
    if (st != FEED_SAMPLE_OK)
        bail(c, st);
}

static void on_output_message(j_common_ptr c)
{
    (void)c; /* never print */
}

static void on_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > MAX_SCANS) {
        feed_engine *e = engine_of(c);
        e->status = FEED_SAMPLE_TOO_LARGE;
        set_msg(e, e->status, "more than %d scans", MAX_SCANS);
        longjmp(e->err.jump, 1);
    }
}

/* ---- lifetime -------------------------------------------------------------------------- */

void feed_engine_limits_default(feed_engine_limits *lim)
{
    lim->max_pixels = 64ull << 20;
    lim->max_side = 16384;
    lim->max_jpeg_bytes = 64ull << 20;
}

/*
 * Copy libjpeg's standard Huffman tables into e->std_dc and e->std_ac: the
 * ones its decoder installs when an image has no DHT (jstdhuff.c), taken from
 * a compressor, whose jpeg_set_defaults installs the same ones.
 */
static int load_std_tables(feed_engine *e)
{
    struct jpeg_compress_struct c;
    volatile int rc = 0; /* set after the longjmp */
    memset(&c, 0, sizeof c);
    c.err = &e->err.pub;
    if (setjmp(e->err.jump)) {
        rc = FEED_ENOMEM; /* only allocation can fail here */
        goto out;
    }
    jpeg_create_compress(&c);
    c.in_color_space = JCS_RGB;
    c.input_components = 3;
    jpeg_set_defaults(&c);
    for (int i = 0; i < 2; i++) {
        e->std_dc[i] = *c.dc_huff_tbl_ptrs[i];
        e->std_ac[i] = *c.ac_huff_tbl_ptrs[i];
    }
out:
    jpeg_destroy_compress(&c);
    return rc;
}

/*
 * Before every image: no quantisation table (all zeros, refused by
 * check_quant_tables unless the image defines it), the standard Huffman
 * tables in slots 0 and 1 and none in 2 and 3, exactly what a fresh libjpeg
 * decompressor would use. libjpeg itself keeps the last image's tables
 * (abbreviated datastreams), which would make one image's pixels depend on
 * the image decoded before it.
 */
static void reset_tables(feed_engine *e)
{
    struct jpeg_decompress_struct *d = &e->dec;
    /* No scan yet: cur_comp_info would point into the last image's components. */
    d->comps_in_scan = 0;
    for (int i = 0; i < NUM_QUANT_TBLS; i++) {
        memset(&e->quant[i], 0, sizeof e->quant[i]);
        d->quant_tbl_ptrs[i] = &e->quant[i];
    }
    for (int i = 0; i < NUM_HUFF_TBLS; i++) {
        e->dc[i] = i < 2 ? e->std_dc[i] : UNDEFINED_HUFF;
        e->ac[i] = i < 2 ? e->std_ac[i] : UNDEFINED_HUFF;
        d->dc_huff_tbl_ptrs[i] = &e->dc[i];
        d->ac_huff_tbl_ptrs[i] = &e->ac[i];
    }
}

/*
 * After jpeg_start_decompress, which has latched every component's table:
 * refuse an image that uses a quantisation table it did not define.
 */
static feed_sample_status check_quant_tables(feed_engine *e)
{
    const struct jpeg_decompress_struct *d = &e->dec;
    static const JQUANT_TBL none;
    feed_sample_status st = FEED_SAMPLE_OK;
    for (int ci = 0; ci < d->num_components && st == FEED_SAMPLE_OK; ci++) {
        const JQUANT_TBL *q = d->comp_info[ci].quant_table;
        if (q && memcmp(q->quantval, none.quantval, sizeof none.quantval) == 0) {
            st = FEED_SAMPLE_CORRUPT;
            set_msg(e, st, "quantisation table %d is not defined in this image (or all zeros)",
                    d->comp_info[ci].quant_tbl_no);
        }
    }
    return st;
}

int feed_engine_new(const feed_engine_limits *lim, feed_engine **out)
{
    *out = NULL;
    feed_engine *e = calloc(1, sizeof *e);
    if (!e)
        return FEED_ENOMEM;
    if (lim) {
        if (lim->max_pixels == 0 || lim->max_side == 0 || lim->max_jpeg_bytes == 0) {
            free(e);
            return FEED_EINVAL;
        }
        e->lim = *lim;
    } else {
        feed_engine_limits_default(&e->lim);
    }
    feed_resize_axis_init(&e->hx);
    feed_resize_axis_init(&e->vy);
    e->dec.err = jpeg_std_error(&e->err.pub);
    e->err.pub.error_exit = on_error_exit;
    e->err.pub.emit_message = on_emit_message;
    e->err.pub.output_message = on_output_message;
    if (load_std_tables(e) != 0) {
        free(e);
        return FEED_ENOMEM;
    }
    if (setjmp(e->err.jump)) {
        /* jpeg_create_decompress fails only when out of memory. */
        jpeg_destroy_decompress(&e->dec);
        free(e);
        return FEED_ENOMEM;
    }
    jpeg_create_decompress(&e->dec);
    feed_jmem_install((j_common_ptr)&e->dec, &e->jmem, JMEM_LIMIT);
    e->progress.progress_monitor = on_progress;
    e->dec.progress = &e->progress;
    *out = e;
    return 0;
}

void feed_engine_free(feed_engine *e)
{
    if (!e)
        return;
    jpeg_destroy_decompress(&e->dec);
    free(e->rows);
    free(e->ring);
    free(e->vrows);
    free(e->ref_full);
    free(e->decoded);
    feed_resize_axis_free(&e->hx);
    feed_resize_axis_free(&e->vy);
    free(e);
}

const char *feed_engine_last_error(const feed_engine *e)
{
    return e ? e->msg : "";
}

/* Grow a zero-initialised scratch buffer (the slack past what the decoder
 * writes is read with zero weights, so it must hold defined bytes). */
static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 4096;
    while (n < need)
        n *= 2;
    uint8_t *q = realloc(*p, n);
    if (!q)
        return FEED_ENOMEM;
    memset(q + *cap, 0, n - *cap);
    *p = q;
    *cap = n;
    return 0;
}

/* ---- the resize pipeline --------------------------------------------------------------- */

typedef struct pipeline {
    feed_engine *e;
    uint8_t *out;
    size_t out_stride; /* out_w * 3 */
    size_t ring_stride;
    uint32_t ring_rows;
    uint32_t pushed; /* source rows through the horizontal pass */
    uint32_t next_y; /* next output row to make */
} pipeline;

/* Needs e->hx and e->vy planned. */
static int pipeline_init(pipeline *p, feed_engine *e, uint8_t *out)
{
    p->e = e;
    p->out = out;
    p->out_stride = (size_t)e->hx.out * 3;
    p->ring_stride = (p->out_stride + 4 + 63) & ~(size_t)63;
    /* A window of taps rows plus the row being written never collide: see
     * pipeline_push. */
    p->ring_rows = e->vy.taps + 1;
    p->pushed = 0;
    p->next_y = 0;
    if (grow(&e->ring, &e->ring_cap, p->ring_stride * p->ring_rows))
        return FEED_ENOMEM;
    if (e->vy.taps > e->vrows_cap) {
        const uint8_t **v = realloc(e->vrows, e->vy.taps * sizeof *v);
        if (!v)
            return FEED_ENOMEM;
        e->vrows = v;
        e->vrows_cap = e->vy.taps;
    }
    return 0;
}

/*
 * One source row (RGBX, readable for hx.in_size + FEED_RESIZE_HSLACK pixels) in; every
 * output row whose window is now complete out. Row r goes to ring slot
 * r % ring_rows; the oldest row a pending output still needs is at least
 * r + 1 - taps, so with ring_rows > taps nothing needed is overwritten.
 */
static void pipeline_push(pipeline *p, const uint8_t *src)
{
    feed_engine *e = p->e;
    uint8_t *slot = e->ring + (size_t)(p->pushed % p->ring_rows) * p->ring_stride;
    feed_resize_hrow(&e->hx, src, slot);
    p->pushed++;
    const feed_resize_axis *vy = &e->vy;
    while (p->next_y < vy->out &&
           (uint32_t)(vy->start[p->next_y] + vy->count[p->next_y]) <= p->pushed) {
        uint32_t y = p->next_y;
        int n = vy->count[y];
        for (int k = 0; k < n; k++)
            e->vrows[k] =
                e->ring +
                (size_t)(((uint32_t)vy->start[y] + (uint32_t)k) % p->ring_rows) * p->ring_stride;
        feed_resize_vrow(e->vrows, vy->w + (size_t)y * vy->taps, n, p->out + y * p->out_stride,
                         p->out_stride);
        p->next_y++;
    }
}

/* ---- colour ---------------------------------------------------------------------------- */

static inline uint8_t muldiv255(unsigned a, unsigned b)
{
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/*
 * CMYK (or YCCK, which libjpeg turns into CMYK) to RGB in place, as Pillow
 * does it: Adobe-written files store inverted CMYK; R = (255-K) - C(255-K)/255.
 */
static void cmyk_to_rgbx(uint8_t *row, uint32_t n, bool inverted)
{
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *p = row + 4 * (size_t)i;
        unsigned c = p[0], m = p[1], y = p[2], k = p[3];
        if (inverted) {
            c = 255 - c;
            m = 255 - m;
            y = 255 - y;
            k = 255 - k;
        }
        unsigned nk = 255 - k;
        p[0] = (uint8_t)(nk - muldiv255(c, nk));
        p[1] = (uint8_t)(nk - muldiv255(m, nk));
        p[2] = (uint8_t)(nk - muldiv255(y, nk));
        p[3] = 0;
    }
}

/* ---- the run --------------------------------------------------------------------------- */

static feed_sample_status precheck_transform(feed_engine *e, const feed_transform *t,
                                             const uint8_t *out)
{
    char why[160];
    if (!t || !out) {
        set_msg(e, FEED_SAMPLE_UNSUPPORTED, "no transform or no output buffer");
        return FEED_SAMPLE_UNSUPPORTED;
    }
    if (feed_transform_validate(t, why, sizeof why) != 0) {
        set_msg(e, FEED_SAMPLE_UNSUPPORTED, "invalid transform: %s", why);
        return FEED_SAMPLE_UNSUPPORTED;
    }
    return FEED_SAMPLE_OK;
}

static feed_sample_status precheck_bytes(feed_engine *e, const uint8_t *jpeg, size_t len)
{
    if (len == 0 || !jpeg) {
        set_msg(e, FEED_SAMPLE_EMPTY, "zero bytes");
        return FEED_SAMPLE_EMPTY;
    }
    if (len > e->lim.max_jpeg_bytes) {
        set_msg(e, FEED_SAMPLE_TOO_LARGE, "%zu bytes exceeds max_jpeg_bytes %llu", len,
                (unsigned long long)e->lim.max_jpeg_bytes);
        return FEED_SAMPLE_TOO_LARGE;
    }
    if (len < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) {
        set_msg(e, FEED_SAMPLE_NOT_JPEG, "no SOI marker: starts with 0x%02x 0x%02x", jpeg[0],
                len > 1 ? jpeg[1] : 0);
        return FEED_SAMPLE_NOT_JPEG;
    }
    return FEED_SAMPLE_OK;
}

static feed_sample_status precheck(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, const uint8_t *out)
{
    feed_sample_status st = precheck_transform(e, t, out);
    return st != FEED_SAMPLE_OK ? st : precheck_bytes(e, jpeg, len);
}

/* Coefficient buffer a multi-scan image needs: every block of every component. */
static uint64_t coef_bytes(const struct jpeg_decompress_struct *d)
{
    uint64_t total = 0;
    int hmax = 1, vmax = 1;
    for (int ci = 0; ci < d->num_components; ci++) {
        if (d->comp_info[ci].h_samp_factor > hmax)
            hmax = d->comp_info[ci].h_samp_factor;
        if (d->comp_info[ci].v_samp_factor > vmax)
            vmax = d->comp_info[ci].v_samp_factor;
    }
    for (int ci = 0; ci < d->num_components; ci++) {
        uint64_t h = (uint64_t)d->comp_info[ci].h_samp_factor;
        uint64_t v = (uint64_t)d->comp_info[ci].v_samp_factor;
        uint64_t bw =
            ((uint64_t)d->image_width * h + (uint64_t)hmax * 8 - 1) / ((uint64_t)hmax * 8);
        uint64_t bh =
            ((uint64_t)d->image_height * v + (uint64_t)vmax * 8 - 1) / ((uint64_t)vmax * 8);
        bw = (bw + h - 1) / h * h;
        bh = (bh + v - 1) / v * v;
        total += bw * bh * (uint64_t)sizeof(JBLOCK);
    }
    return total;
}

/*
 * After jpeg_read_header: limits from the declared size, output colour space.
 * Returns OK or the status to fail with (message set).
 */
static feed_sample_status check_header(feed_engine *e, bool *cmyk)
{
    struct jpeg_decompress_struct *d = &e->dec;
    uint32_t w = d->image_width, h = d->image_height;
    if (w > e->lim.max_side || h > e->lim.max_side) {
        set_msg(e, FEED_SAMPLE_TOO_LARGE, "declared %ux%u exceeds max_side %u", w, h,
                e->lim.max_side);
        return FEED_SAMPLE_TOO_LARGE;
    }
    if ((uint64_t)w * h > e->lim.max_pixels) {
        set_msg(e, FEED_SAMPLE_TOO_LARGE, "declared %ux%u exceeds max_pixels %llu", w, h,
                (unsigned long long)e->lim.max_pixels);
        return FEED_SAMPLE_TOO_LARGE;
    }
    uint64_t coef_cap = e->lim.max_pixels * COEF_BYTES_PER_MAX_PIXEL;
    if (jpeg_has_multiple_scans(d)) {
        uint64_t need = coef_bytes(d);
        if (need > coef_cap) {
            set_msg(e, FEED_SAMPLE_TOO_LARGE,
                    "progressive %ux%u needs %llu MiB of coefficients, over the %llu MiB cap", w, h,
                    (unsigned long long)(need >> 20), (unsigned long long)(coef_cap >> 20));
            return FEED_SAMPLE_TOO_LARGE;
        }
    }
    /* Backstop: libjpeg refuses (JERR_NO_BACKING_STORE) any coefficient buffer past this. */
    uint64_t mem = coef_cap + JPEG_MEM_SLACK;
    d->mem->max_memory_to_use = mem > (uint64_t)LONG_MAX ? LONG_MAX : (long)mem;

    *cmyk = false;
    switch (d->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        d->out_color_space = JCS_EXT_RGBX;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        d->out_color_space = JCS_CMYK;
        *cmyk = true;
        break;
    default:
        set_msg(e, FEED_SAMPLE_UNSUPPORTED, "colour space %d with %d components",
                (int)d->jpeg_color_space, d->num_components);
        return FEED_SAMPLE_UNSUPPORTED;
    }
    d->dct_method = JDCT_ISLOW;
    d->do_fancy_upsampling = TRUE;
    return FEED_SAMPLE_OK;
}

/*
 * Every path's start: this image's own tables only, the header read and
 * checked (limits, colour space: *cmyk). Not FEED_SAMPLE_OK: e->status set,
 * the caller fails now.
 */
static feed_sample_status read_header(feed_engine *e, const uint8_t *jpeg, size_t len, bool *cmyk)
{
    reset_tables(e);
    jpeg_mem_src(&e->dec, jpeg, (unsigned long)len);
    jpeg_read_header(&e->dec, TRUE);
    e->status = check_header(e, cmyk);
    return e->status;
}

/*
 * The source box the output is resized from: train's crop (torchvision crops,
 * then resizes, so nothing outside the crop counts) or eval's exact
 * fractional box (torchvision resizes the whole image, then crops, so the
 * pixels just outside the box count too). Returns whether they do.
 */
static bool source_box(const feed_transform *t, uint32_t w, uint32_t h,
                       const feed_sample_plan *plan, double box[4])
{
    bool eval = t->mode == FEED_TRANSFORM_EVAL;
    if (eval) {
        feed_plan_eval_box(t, w, h, box);
    } else {
        box[0] = plan->crop.x;
        box[1] = plan->crop.y;
        box[2] = (double)plan->crop.x + plan->crop.w;
        box[3] = (double)plan->crop.y + plan->crop.h;
    }
    return eval;
}

/* How far past a box of `len` input pixels resized to `out` the filter reaches (plus one). */
static double filter_reach(double len, uint32_t out)
{
    return fmax(1.0, len / out) + 1.0;
}

/* DCT scale denominator: 8, 4, 2 or 1, the largest whose scaled crop still covers the output. */
static unsigned pick_denom(const feed_crop_box *c, const feed_transform *t)
{
    for (unsigned denom = 8; denom > 1; denom /= 2)
        if (c->w >= (uint64_t)t->out_w * denom && c->h >= (uint64_t)t->out_h * denom)
            return denom;
    return 1;
}

/*
 * The source box mapped onto an image scaled by `scale` from the plan's
 * coordinates, of avail_w x avail_h pixels: the box in scaled pixels, and the
 * whole scaled pixels [c0, c1) x [r0, r1) that cover it (with the filter's
 * reach around it for eval).
 */
typedef struct window {
    double bx0, bx1, by0, by1;
    uint32_t c0, c1, r0, r1;
} window;

static void map_window(const feed_transform *t, uint32_t src_w, uint32_t src_h,
                       const feed_sample_plan *plan, double scale, uint32_t avail_w,
                       uint32_t avail_h, window *w)
{
    double box[4];
    bool reach = source_box(t, src_w, src_h, plan, box);
    w->bx0 = box[0] * scale;
    w->bx1 = fmin(box[2] * scale, (double)avail_w);
    w->by0 = box[1] * scale;
    w->by1 = fmin(box[3] * scale, (double)avail_h);
    double mx = reach ? filter_reach(w->bx1 - w->bx0, t->out_w) : 0.0;
    double my = reach ? filter_reach(w->by1 - w->by0, t->out_h) : 0.0;
    w->c0 = (uint32_t)fmax(floor(w->bx0 - mx), 0.0);
    w->c1 = (uint32_t)fmin(ceil(w->bx1 + mx), (double)avail_w);
    w->r0 = (uint32_t)fmax(floor(w->by0 - my), 0.0);
    w->r1 = (uint32_t)fmin(ceil(w->by1 + my), (double)avail_h);
}

/* Plan both resize axes from a window. 0 or FEED_ENOMEM. */
static int plan_axes(feed_engine *e, const feed_transform *t, const window *w, bool flip)
{
    if (feed_resize_axis_plan(&e->hx, w->bx0 - w->c0, w->bx1 - w->c0, w->c1 - w->c0, t->out_w,
                              flip) ||
        feed_resize_axis_plan(&e->vy, w->by0 - w->r0, w->by1 - w->r0, w->r1 - w->r0, t->out_h,
                              false))
        return FEED_ENOMEM;
    return 0;
}

/*
 * A single-scan decode that stopped early has not seen the end of the data:
 * report TRUNCATED unless an EOI marker (FF D9, which cannot occur inside
 * entropy-coded data) follows where the decoder stopped.
 */
static bool eoi_follows(struct jpeg_decompress_struct *d)
{
    /* The entropy decoder may already have read the marker. */
    if (d->unread_marker == JPEG_EOI)
        return true;
    const uint8_t *p = d->src->next_input_byte;
    size_t n = d->src->bytes_in_buffer;
    while (n >= 2) {
        const uint8_t *ff = memchr(p, 0xFF, n - 1);
        if (!ff)
            return false;
        if (ff[1] == 0xD9)
            return true;
        n -= (size_t)(ff - p) + 1;
        p = ff + 1;
    }
    return false;
}

static feed_sample_status fail_now(feed_engine *e, uint8_t *out, size_t out_bytes,
                                   feed_stage_times *times)
{
    jpeg_abort_decompress(&e->dec);
    if (out)
        memset(out, 0, out_bytes);
    if (times)
        times->decode_ns = times->resize_ns = 0;
    return e->status;
}

/* Decode, crop, resize, flip: the body of feed_engine_run, under its setjmp. */
static feed_sample_status run_fast(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, uint64_t seed, uint32_t epoch,
                                   uint64_t sample_index, uint8_t *out, size_t out_bytes,
                                   feed_stage_times *times)
{
    struct jpeg_decompress_struct *d = &e->dec;
    uint64_t t_start = feed_now_ns(), resize_ns = 0;
    bool cmyk;

    if (read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return fail_now(e, out, out_bytes, times);

    feed_sample_plan plan;
    feed_plan_sample(t, d->image_width, d->image_height, seed, epoch, sample_index, &plan);
    unsigned denom = pick_denom(&plan.crop, t);
    d->scale_num = 1;
    d->scale_denom = denom;
    jpeg_start_decompress(d);
    e->status = check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return fail_now(e, out, out_bytes, times);

    window win;
    map_window(t, d->image_width, d->image_height, &plan, 1.0 / denom, d->output_width,
               d->output_height, &win);
    uint32_t c0 = win.c0, c1 = win.c1, r0 = win.r0, r1 = win.r1;

    JDIMENSION xoff = c0, cw = c1 - c0;
    jpeg_crop_scanline(d, &xoff, &cw);
    uint32_t inner = c0 - xoff; /* crop_scanline moved the left edge to an iMCU boundary */

    if (plan_axes(e, t, &win, plan.flip))
        goto nomem;
    size_t row_stride = (((size_t)cw + FEED_RESIZE_HSLACK(&e->hx)) * 4 + 63) & ~(size_t)63;
    if (grow(&e->rows, &e->rows_cap, row_stride * BATCH_ROWS + 64 + ROW_SKEW))
        goto nomem;
    uint8_t *first = skewed(e->rows);
    for (int i = 0; i < BATCH_ROWS; i++)
        e->rowptr[i] = first + (size_t)i * row_stride;
    pipeline pipe;
    if (pipeline_init(&pipe, e, out))
        goto nomem;

    if (r0 > 0 && jpeg_skip_scanlines(d, r0) != r0) {
        e->status = FEED_SAMPLE_CORRUPT;
        set_msg(e, e->status, "could not skip to row %u", r0);
        return fail_now(e, out, out_bytes, times);
    }
    uint32_t need = r1 - r0;
    for (uint32_t done = 0; done < need;) {
        uint32_t want = need - done < BATCH_ROWS ? need - done : BATCH_ROWS;
        uint32_t got = 0;
        while (got < want) {
            JDIMENSION n = jpeg_read_scanlines(d, &e->rowptr[got], want - got);
            if (n == 0) {
                e->status = FEED_SAMPLE_CORRUPT;
                set_msg(e, e->status, "decoder stopped at row %u", r0 + done + got);
                return fail_now(e, out, out_bytes, times);
            }
            got += n;
        }
        uint64_t t0 = feed_now_ns();
        for (uint32_t i = 0; i < got; i++) {
            if (cmyk)
                cmyk_to_rgbx(e->rowptr[i], cw, d->saw_Adobe_marker);
            pipeline_push(&pipe, e->rowptr[i] + (size_t)inner * 4);
        }
        resize_ns += feed_now_ns() - t0;
        done += got;
    }
    if (d->output_scanline < d->output_height && !jpeg_has_multiple_scans(d) && !eoi_follows(d)) {
        e->status = FEED_SAMPLE_TRUNCATED;
        set_msg(e, e->status, "no EOI marker after the scan data");
        return fail_now(e, out, out_bytes, times);
    }
    jpeg_abort_decompress(d);
    if (times) {
        uint64_t total = feed_now_ns() - t_start;
        times->resize_ns = resize_ns;
        times->decode_ns = total > resize_ns ? total - resize_ns : 0;
    }
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    set_msg(e, e->status, "out of memory for scratch buffers");
    return fail_now(e, out, out_bytes, times);
}

/* Zero-fill the output of a run refused before decoding, when its size is known. */
static void zero_refused(const feed_transform *t, uint8_t *out)
{
    if (out && t && t->out_h >= FEED_TRANSFORM_MIN_SIDE && t->out_h <= FEED_TRANSFORM_MAX_SIDE &&
        t->out_w >= FEED_TRANSFORM_MIN_SIDE && t->out_w <= FEED_TRANSFORM_MAX_SIDE)
        memset(out, 0, (size_t)t->out_h * t->out_w * 3);
}

feed_sample_status feed_engine_run(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, uint64_t seed, uint32_t epoch,
                                   uint64_t sample_index, uint8_t *out, feed_stage_times *times)
{
    e->msg[0] = '\0';
    if (times)
        times->decode_ns = times->resize_ns = 0;
    e->status = precheck(e, jpeg, len, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    size_t out_bytes = (size_t)t->out_h * t->out_w * 3;
    if (setjmp(e->err.jump))
        return fail_now(e, out, out_bytes, times);
    return run_fast(e, jpeg, len, t, seed, epoch, sample_index, out, out_bytes, times);
}

/* ---- the decoded path ------------------------------------------------------------------ */

unsigned feed_decoded_scale(uint32_t w, uint32_t h, uint32_t min_side)
{
    uint64_t shorter = w < h ? w : h;
    for (unsigned n = 1; n < 8; n++)
        if ((shorter * n + 7) / 8 >= min_side)
            return n;
    return 8;
}

/* RGBX (as decoded) to RGB, n pixels. */
static void rgbx_to_rgb(const uint8_t *src, uint32_t n, uint8_t *dst)
{
    for (uint32_t i = 0; i < n; i++) {
        dst[3 * (size_t)i] = src[4 * (size_t)i];
        dst[3 * (size_t)i + 1] = src[4 * (size_t)i + 1];
        dst[3 * (size_t)i + 2] = src[4 * (size_t)i + 2];
    }
}

/* RGB to RGBX, n pixels (the horizontal pass reads 4 bytes a pixel). */
static void rgb_to_rgbx(const uint8_t *src, uint32_t n, uint8_t *dst)
{
    for (uint32_t i = 0; i < n; i++) {
        dst[4 * (size_t)i] = src[3 * (size_t)i];
        dst[4 * (size_t)i + 1] = src[3 * (size_t)i + 1];
        dst[4 * (size_t)i + 2] = src[3 * (size_t)i + 2];
        dst[4 * (size_t)i + 3] = 0;
    }
}

/* The body of feed_engine_decode, under its setjmp. */
static feed_sample_status run_decode(feed_engine *e, const uint8_t *jpeg, size_t len,
                                     uint32_t min_side, feed_decoded_alloc alloc, void *ctx,
                                     feed_decoded *img)
{
    struct jpeg_decompress_struct *d = &e->dec;
    bool cmyk;
    if (read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return fail_now(e, NULL, 0, NULL);
    unsigned num = feed_decoded_scale(d->image_width, d->image_height, min_side);
    d->scale_num = num;
    d->scale_denom = 8;
    jpeg_start_decompress(d);
    e->status = check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return fail_now(e, NULL, 0, NULL);
    uint32_t w = d->output_width, h = d->output_height;
    *img = (feed_decoded){.width = w,
                          .height = h,
                          .src_width = d->image_width,
                          .src_height = d->image_height,
                          .scale_num = num};
    size_t rgb_stride = (size_t)w * 3, bytes = rgb_stride * h;
    uint8_t *dst = alloc ? alloc(ctx, img, bytes) : NULL;
    if (!dst) {
        if (grow(&e->decoded, &e->decoded_cap, bytes))
            goto nomem;
        dst = e->decoded;
    }
    size_t row_stride = ((size_t)w * 4 + 63) & ~(size_t)63;
    if (grow(&e->rows, &e->rows_cap, row_stride * BATCH_ROWS + 64 + ROW_SKEW))
        goto nomem;
    uint8_t *first = skewed(e->rows);
    for (int i = 0; i < BATCH_ROWS; i++)
        e->rowptr[i] = first + (size_t)i * row_stride;
    while (d->output_scanline < h) {
        uint32_t y = d->output_scanline;
        uint32_t want = h - y < BATCH_ROWS ? h - y : BATCH_ROWS;
        JDIMENSION got = jpeg_read_scanlines(d, e->rowptr, want);
        if (got == 0) {
            e->status = FEED_SAMPLE_CORRUPT;
            set_msg(e, e->status, "decoder stopped at row %u", y);
            return fail_now(e, NULL, 0, NULL);
        }
        for (JDIMENSION i = 0; i < got; i++) {
            if (cmyk)
                cmyk_to_rgbx(e->rowptr[i], w, d->saw_Adobe_marker);
            rgbx_to_rgb(e->rowptr[i], w, dst + (size_t)(y + i) * rgb_stride);
        }
    }
    jpeg_finish_decompress(d);
    img->pixels = dst;
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    set_msg(e, e->status, "out of memory for the decoded image");
    return fail_now(e, NULL, 0, NULL);
}

feed_sample_status feed_engine_decode(feed_engine *e, const uint8_t *jpeg, size_t len,
                                      uint32_t min_side, feed_decoded_alloc alloc, void *ctx,
                                      feed_decoded *img)
{
    e->msg[0] = '\0';
    e->status = precheck_bytes(e, jpeg, len);
    if (e->status != FEED_SAMPLE_OK)
        return e->status;
    if (setjmp(e->err.jump))
        return fail_now(e, NULL, 0, NULL);
    return run_decode(e, jpeg, len, min_side, alloc, ctx, img);
}

feed_sample_status feed_engine_run_decoded(feed_engine *e, const feed_decoded *img,
                                           const feed_transform *t, uint64_t seed, uint32_t epoch,
                                           uint64_t sample_index, uint8_t *out,
                                           feed_stage_times *times)
{
    uint64_t t_start = feed_now_ns();
    e->msg[0] = '\0';
    if (times)
        times->decode_ns = times->resize_ns = 0;
    e->status = precheck_transform(e, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    feed_sample_plan plan;
    feed_plan_sample(t, img->src_width, img->src_height, seed, epoch, sample_index, &plan);
    window win;
    map_window(t, img->src_width, img->src_height, &plan, img->scale_num / 8.0, img->width,
               img->height, &win);
    uint32_t cw = win.c1 - win.c0;
    pipeline pipe;
    if (plan_axes(e, t, &win, plan.flip) ||
        grow(&e->rows, &e->rows_cap, ((size_t)cw + FEED_RESIZE_HSLACK(&e->hx)) * 4) ||
        pipeline_init(&pipe, e, out)) {
        e->status = FEED_SAMPLE_TOO_LARGE;
        set_msg(e, e->status, "out of memory for scratch buffers");
        memset(out, 0, (size_t)t->out_h * t->out_w * 3);
        return e->status;
    }
    size_t stride = (size_t)img->width * 3;
    const uint8_t *src = img->pixels + (size_t)win.c0 * 3;
    for (uint32_t y = win.r0; y < win.r1; y++) {
        rgb_to_rgbx(src + (size_t)y * stride, cw, e->rows);
        pipeline_push(&pipe, e->rows);
    }
    if (times)
        times->resize_ns = feed_now_ns() - t_start;
    return FEED_SAMPLE_OK;
}

/* ---- the reference --------------------------------------------------------------------- */

static feed_sample_status run_reference(feed_engine *e, const uint8_t *jpeg, size_t len,
                                        const feed_transform *t, uint64_t seed, uint32_t epoch,
                                        uint64_t sample_index, uint8_t *out, size_t out_bytes)
{
    struct jpeg_decompress_struct *d = &e->dec;
    bool cmyk;
    if (read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return fail_now(e, out, out_bytes, NULL);
    feed_sample_plan plan;
    feed_plan_sample(t, d->image_width, d->image_height, seed, epoch, sample_index, &plan);
    jpeg_start_decompress(d);
    e->status = check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return fail_now(e, out, out_bytes, NULL);
    uint32_t w = d->output_width, h = d->output_height;

    double box[4];
    bool reach = source_box(t, w, h, &plan, box);
    double mx = reach ? filter_reach(box[2] - box[0], t->out_w) : 0.0;
    double my = reach ? filter_reach(box[3] - box[1], t->out_h) : 0.0;
    uint32_t x0 = (uint32_t)fmax(floor(box[0] - mx), 0.0);
    uint32_t x1 = (uint32_t)fmin(ceil(box[2] + mx), (double)w);
    uint32_t y0 = (uint32_t)fmax(floor(box[1] - my), 0.0);
    uint32_t y1 = (uint32_t)fmin(ceil(box[3] + my), (double)h);
    if (feed_resize_axis_plan(&e->hx, box[0] - x0, box[2] - x0, x1 - x0, t->out_w, plan.flip) ||
        feed_resize_axis_plan(&e->vy, box[1] - y0, box[3] - y0, y1 - y0, t->out_h, false))
        goto nomem;
    size_t stride = ((size_t)w + FEED_RESIZE_HSLACK(&e->hx)) * 4;
    stride = (stride + 63) & ~(size_t)63;
    e->ref_full = calloc((size_t)h * stride + 64 + ROW_SKEW, 1);
    if (!e->ref_full)
        goto nomem;
    uint8_t *full = skewed(e->ref_full);
    while (d->output_scanline < h) {
        JSAMPROW row = full + (size_t)d->output_scanline * stride;
        if (jpeg_read_scanlines(d, &row, 1) != 1) {
            e->status = FEED_SAMPLE_CORRUPT;
            set_msg(e, e->status, "decoder stopped at row %u", d->output_scanline);
            return fail_now(e, out, out_bytes, NULL);
        }
        if (cmyk)
            cmyk_to_rgbx(row, w, d->saw_Adobe_marker);
    }
    jpeg_finish_decompress(d);

    pipeline pipe;
    if (pipeline_init(&pipe, e, out))
        goto nomem;
    for (uint32_t y = y0; y < y1; y++)
        pipeline_push(&pipe, full + (size_t)y * stride + (size_t)x0 * 4);
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    set_msg(e, e->status, "out of memory for the full-size image");
    return fail_now(e, out, out_bytes, NULL);
}

feed_sample_status feed_engine_run_reference(feed_engine *e, const uint8_t *jpeg, size_t len,
                                             const feed_transform *t, uint64_t seed, uint32_t epoch,
                                             uint64_t sample_index, uint8_t *out)
{
    e->msg[0] = '\0';
    e->status = precheck(e, jpeg, len, t, out);
    if (e->status != FEED_SAMPLE_OK) {
        zero_refused(t, out);
        return e->status;
    }
    size_t out_bytes = (size_t)t->out_h * t->out_w * 3;
    feed_sample_status st;
    if (setjmp(e->err.jump))
        st = fail_now(e, out, out_bytes, NULL);
    else
        st = run_reference(e, jpeg, len, t, seed, epoch, sample_index, out, out_bytes);
    free(e->ref_full);
    e->ref_full = NULL;
    return st;
}
