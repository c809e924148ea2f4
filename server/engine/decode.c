/*
 * The engine's decoder side (see engine.h): libjpeg set up per engine, its
 * errors and warnings mapped to sample statuses, the limits checked from the
 * header, per-image tables, and feed_engine_decode (the cache's whole-image
 * decode). A feed_engine belongs to one worker thread at a time; it keeps one
 * libjpeg decompressor and grow-only scratch, so a warm engine allocates
 * nothing of its own per image.
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
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

/* ---- errors ---------------------------------------------------------------------------- */

/* client_data belongs to the arena (jmem.h); the engine is found from the
 * error manager it embeds. */
static feed_engine *engine_of(j_common_ptr c)
{
    return (feed_engine *)(void *)((char *)c->err - offsetof(feed_engine, err));
}

void engine_set_msg(feed_engine *e, feed_sample_status st, const char *fmt, ...)
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
    engine_set_msg(e, st, "%s", text);
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
        engine_set_msg(e, e->status, "Huffman table %d is not defined in this image", tbl);
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
        engine_set_msg(e, e->status, "more than %d scans", MAX_SCANS);
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
feed_sample_status engine_check_quant_tables(feed_engine *e)
{
    const struct jpeg_decompress_struct *d = &e->dec;
    static const JQUANT_TBL none;
    feed_sample_status st = FEED_SAMPLE_OK;
    for (int ci = 0; ci < d->num_components && st == FEED_SAMPLE_OK; ci++) {
        const JQUANT_TBL *q = d->comp_info[ci].quant_table;
        if (q && memcmp(q->quantval, none.quantval, sizeof none.quantval) == 0) {
            st = FEED_SAMPLE_CORRUPT;
            engine_set_msg(e, st,
                           "quantisation table %d is not defined in this image (or all zeros)",
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
    free(e->aug_tmp);
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
int engine_grow(uint8_t **p, size_t *cap, size_t need)
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
void engine_cmyk_to_rgbx(uint8_t *row, uint32_t n, bool inverted)
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

feed_sample_status engine_precheck_transform(feed_engine *e, const feed_transform *t,
                                             const uint8_t *out)
{
    char why[160];
    if (!t || !out) {
        engine_set_msg(e, FEED_SAMPLE_UNSUPPORTED, "no transform or no output buffer");
        return FEED_SAMPLE_UNSUPPORTED;
    }
    if (feed_transform_validate(t, why, sizeof why) != 0) {
        engine_set_msg(e, FEED_SAMPLE_UNSUPPORTED, "invalid transform: %s", why);
        return FEED_SAMPLE_UNSUPPORTED;
    }
    return FEED_SAMPLE_OK;
}

feed_sample_status engine_precheck_bytes(feed_engine *e, const uint8_t *jpeg, size_t len)
{
    if (len == 0 || !jpeg) {
        engine_set_msg(e, FEED_SAMPLE_EMPTY, "zero bytes");
        return FEED_SAMPLE_EMPTY;
    }
    if (len > e->lim.max_jpeg_bytes) {
        engine_set_msg(e, FEED_SAMPLE_TOO_LARGE, "%zu bytes exceeds max_jpeg_bytes %llu", len,
                       (unsigned long long)e->lim.max_jpeg_bytes);
        return FEED_SAMPLE_TOO_LARGE;
    }
    if (len < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8) {
        engine_set_msg(e, FEED_SAMPLE_NOT_JPEG, "no SOI marker: starts with 0x%02x 0x%02x", jpeg[0],
                       len > 1 ? jpeg[1] : 0);
        return FEED_SAMPLE_NOT_JPEG;
    }
    return FEED_SAMPLE_OK;
}

feed_sample_status engine_precheck(feed_engine *e, const uint8_t *jpeg, size_t len,
                                   const feed_transform *t, const uint8_t *out)
{
    feed_sample_status st = engine_precheck_transform(e, t, out);
    return st != FEED_SAMPLE_OK ? st : engine_precheck_bytes(e, jpeg, len);
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
        engine_set_msg(e, FEED_SAMPLE_TOO_LARGE, "declared %ux%u exceeds max_side %u", w, h,
                       e->lim.max_side);
        return FEED_SAMPLE_TOO_LARGE;
    }
    if ((uint64_t)w * h > e->lim.max_pixels) {
        engine_set_msg(e, FEED_SAMPLE_TOO_LARGE, "declared %ux%u exceeds max_pixels %llu", w, h,
                       (unsigned long long)e->lim.max_pixels);
        return FEED_SAMPLE_TOO_LARGE;
    }
    uint64_t coef_cap = e->lim.max_pixels * COEF_BYTES_PER_MAX_PIXEL;
    if (jpeg_has_multiple_scans(d)) {
        uint64_t need = coef_bytes(d);
        if (need > coef_cap) {
            engine_set_msg(
                e, FEED_SAMPLE_TOO_LARGE,
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
        engine_set_msg(e, FEED_SAMPLE_UNSUPPORTED, "colour space %d with %d components",
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
feed_sample_status engine_read_header(feed_engine *e, const uint8_t *jpeg, size_t len, bool *cmyk)
{
    reset_tables(e);
    jpeg_mem_src(&e->dec, jpeg, (unsigned long)len);
    jpeg_read_header(&e->dec, TRUE);
    e->status = check_header(e, cmyk);
    return e->status;
}

/*
 * A single-scan decode that stopped early has not seen the end of the data:
 * report TRUNCATED unless an EOI marker (FF D9, which cannot occur inside
 * entropy-coded data) follows where the decoder stopped.
 */
bool engine_eoi_follows(struct jpeg_decompress_struct *d)
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

feed_sample_status engine_fail_now(feed_engine *e, uint8_t *out, size_t out_bytes,
                                   feed_stage_times *times)
{
    jpeg_abort_decompress(&e->dec);
    if (out)
        memset(out, 0, out_bytes);
    if (times)
        times->decode_ns = times->resize_ns = 0;
    return e->status;
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

/* The body of feed_engine_decode, under its setjmp. */
static feed_sample_status run_decode(feed_engine *e, const uint8_t *jpeg, size_t len,
                                     uint32_t min_side, feed_decoded_alloc alloc, void *ctx,
                                     feed_decoded *img)
{
    struct jpeg_decompress_struct *d = &e->dec;
    bool cmyk;
    if (engine_read_header(e, jpeg, len, &cmyk) != FEED_SAMPLE_OK)
        return engine_fail_now(e, NULL, 0, NULL);
    unsigned num = feed_decoded_scale(d->image_width, d->image_height, min_side);
    d->scale_num = num;
    d->scale_denom = 8;
    jpeg_start_decompress(d);
    e->status = engine_check_quant_tables(e);
    if (e->status != FEED_SAMPLE_OK)
        return engine_fail_now(e, NULL, 0, NULL);
    uint32_t w = d->output_width, h = d->output_height;
    *img = (feed_decoded){.width = w,
                          .height = h,
                          .src_width = d->image_width,
                          .src_height = d->image_height,
                          .scale_num = num};
    size_t rgb_stride = (size_t)w * 3, bytes = rgb_stride * h;
    uint8_t *dst = alloc ? alloc(ctx, img, bytes) : NULL;
    if (!dst) {
        if (engine_grow(&e->decoded, &e->decoded_cap, bytes))
            goto nomem;
        dst = e->decoded;
    }
    size_t row_stride = ((size_t)w * 4 + 63) & ~(size_t)63;
    if (engine_grow(&e->rows, &e->rows_cap, row_stride * BATCH_ROWS + 64 + ROW_SKEW))
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
            engine_set_msg(e, e->status, "decoder stopped at row %u", y);
            return engine_fail_now(e, NULL, 0, NULL);
        }
        for (JDIMENSION i = 0; i < got; i++) {
            if (cmyk)
                engine_cmyk_to_rgbx(e->rowptr[i], w, d->saw_Adobe_marker);
            rgbx_to_rgb(e->rowptr[i], w, dst + (size_t)(y + i) * rgb_stride);
        }
    }
    jpeg_finish_decompress(d);
    img->pixels = dst;
    return FEED_SAMPLE_OK;

nomem:
    e->status = FEED_SAMPLE_TOO_LARGE;
    engine_set_msg(e, e->status, "out of memory for the decoded image");
    return engine_fail_now(e, NULL, 0, NULL);
}

feed_sample_status feed_engine_decode(feed_engine *e, const uint8_t *jpeg, size_t len,
                                      uint32_t min_side, feed_decoded_alloc alloc, void *ctx,
                                      feed_decoded *img)
{
    e->msg[0] = '\0';
    e->status = engine_precheck_bytes(e, jpeg, len);
    if (e->status != FEED_SAMPLE_OK)
        return e->status;
    if (setjmp(e->err.jump))
        return engine_fail_now(e, NULL, 0, NULL);
    return run_decode(e, jpeg, len, min_side, alloc, ctx, img);
}
