/*
 * feed-pack's JPEG work (recode.h). Re-encoding decodes at the smallest DCT
 * scale that still covers the target size (as PIL's draft() does), shrinks
 * so the longer side is at most max_side with a triangle filter widened by
 * the shrink factor, and encodes at the quality and chroma subsampling asked
 * for; an image is re-encoded only when the options ask for a change it does
 * not already have.
 */
#include "recode.h"

#include <math.h>
#include <string.h>

#include <jerror.h>

static void on_error(j_common_ptr cinfo)
{
    struct jerr *e = (struct jerr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(*e->jmp, 1);
}

/* Warnings (corrupt data that libjpeg papers over) are counted, never printed. */
static void on_message(j_common_ptr cinfo, int level)
{
    struct jerr *e = (struct jerr *)cinfo->err;
    if (level < 0) {
        if (cinfo->err->num_warnings == 0)
            (*cinfo->err->format_message)(cinfo, e->msg);
        cinfo->err->num_warnings++;
    }
}

#define DEST_STEP 65536u

static void dest_init(j_compress_ptr c)
{
    buf_dest *d = (buf_dest *)c->dest;
    d->buf->len = 0;
    if (feed_buf_reserve(d->buf, DEST_STEP))
        ERREXIT(c, JERR_OUT_OF_MEMORY);
    d->pub.next_output_byte = d->buf->data;
    d->pub.free_in_buffer = d->buf->cap;
}

static boolean dest_empty(j_compress_ptr c)
{
    buf_dest *d = (buf_dest *)c->dest;
    size_t used = d->buf->cap;
    if (d->buf->cap > d->buf->limit - DEST_STEP || feed_buf_reserve(d->buf, d->buf->cap * 2))
        ERREXIT(c, JERR_OUT_OF_MEMORY);
    d->pub.next_output_byte = d->buf->data + used;
    d->pub.free_in_buffer = d->buf->cap - used;
    return TRUE;
}

static void dest_term(j_compress_ptr c)
{
    buf_dest *d = (buf_dest *)c->dest;
    d->buf->len = d->buf->cap - d->pub.free_in_buffer;
}

typedef struct taps {
    int *start;
    int *count;
    float *w;
    int kmax;
} taps;

static int taps_kmax(int in, int out)
{
    double scale = (double)in / out;
    return (int)ceil(scale > 1.0 ? scale : 1.0) * 2 + 1;
}

static size_t taps_bytes(int in, int out)
{
    size_t n = (size_t)out * (2 * sizeof(int) + (size_t)taps_kmax(in, out) * sizeof(float));
    return (n + 15) & ~(size_t)15;
}

/*
 * Triangle-filter taps in mem (taps_bytes(in, out) of them), widened by the
 * shrink factor so every input pixel counts.
 */
static void make_taps(int in, int out, uint8_t *mem, taps *t)
{
    double scale = (double)in / out;
    double support = scale > 1.0 ? scale : 1.0;
    t->kmax = taps_kmax(in, out);
    t->start = (int *)(void *)mem;
    t->count = t->start + out;
    t->w = (float *)(void *)(t->count + out);
    for (int o = 0; o < out; o++) {
        double center = (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5);
        int hi = (int)(center + support + 0.5);
        if (lo < 0)
            lo = 0;
        if (hi > in)
            hi = in;
        if (hi - lo > t->kmax)
            hi = lo + t->kmax;
        float *w = t->w + (size_t)o * t->kmax;
        double sum = 0;
        for (int k = 0; k < hi - lo; k++) {
            double x = fabs((lo + k + 0.5 - center) / support);
            w[k] = x < 1.0 ? (float)(1.0 - x) : 0.0f;
            sum += w[k];
        }
        for (int k = 0; k < hi - lo; k++)
            w[k] = sum > 0 ? (float)(w[k] / sum) : 1.0f / (float)(hi - lo);
        t->start[o] = lo;
        t->count[o] = hi - lo;
    }
}

static int resize(recoder *rec, const uint8_t *src, int sw, int sh, int ch, int dw, int dh)
{
    taps th, tv;
    size_t h_bytes = taps_bytes(sw, dw);
    if (feed_buf_reserve(&rec->taps, h_bytes + taps_bytes(sh, dh)))
        return -1;
    make_taps(sw, dw, rec->taps.data, &th);
    make_taps(sh, dh, rec->taps.data + h_bytes, &tv);
    size_t row = (size_t)dw * ch;
    if (feed_buf_reserve(&rec->tmp, (size_t)sh * row * sizeof(float)) ||
        feed_buf_reserve(&rec->resized, (size_t)dh * row))
        return -1;
    float *tmp = (float *)(void *)rec->tmp.data;
    for (int y = 0; y < sh; y++) {
        const uint8_t *s = src + (size_t)y * sw * ch;
        float *d = tmp + (size_t)y * row;
        for (int x = 0; x < dw; x++) {
            const float *w = th.w + (size_t)x * th.kmax;
            const uint8_t *p = s + (size_t)th.start[x] * ch;
            for (int c = 0; c < ch; c++) {
                float acc = 0;
                for (int k = 0; k < th.count[x]; k++)
                    acc += w[k] * p[k * ch + c];
                d[x * ch + c] = acc;
            }
        }
    }
    for (int y = 0; y < dh; y++) {
        const float *w = tv.w + (size_t)y * tv.kmax;
        uint8_t *d = rec->resized.data + (size_t)y * row;
        for (size_t i = 0; i < row; i++) {
            float acc = 0;
            for (int k = 0; k < tv.count[y]; k++)
                acc += w[k] * tmp[(size_t)(tv.start[y] + k) * row + i];
            d[i] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc + 0.5f);
        }
    }
    return 0;
}

/*
 * recoder_run's work; libjpeg's fatal errors leave through recoder_run's
 * setjmp.
 */
__attribute__((noinline)) static enum recode recode_body(recoder *rec, const uint8_t *in,
                                                         size_t len, char *msg, size_t msg_cap)
{
    const recode_opts *o = rec->opts;
    struct jpeg_decompress_struct *dec = &rec->dec;
    struct jpeg_compress_struct *enc = &rec->enc;

    jpeg_mem_src(dec, in, (unsigned long)len);
    jpeg_read_header(dec, TRUE);
    int gray = dec->jpeg_color_space == JCS_GRAYSCALE;
    if (!gray && dec->jpeg_color_space != JCS_YCbCr && dec->jpeg_color_space != JCS_RGB) {
        snprintf(msg, msg_cap, "colour space %d is not gray, YCbCr or RGB",
                 (int)dec->jpeg_color_space);
        goto abort_dec;
    }
    uint32_t w = dec->image_width, h = dec->image_height;
    if ((uint64_t)w * h > RECODE_MAX_PIXELS) {
        snprintf(msg, msg_cap, "%ux%u is more than %llu pixels", w, h,
                 (unsigned long long)RECODE_MAX_PIXELS);
        goto abort_dec;
    }
    uint32_t longer = w > h ? w : h;
    int need_resize = o->max_side && longer > o->max_side;
    int src_h = 1, src_v = 1;
    if (!gray && dec->num_components == 3) {
        src_h = dec->comp_info[0].h_samp_factor / dec->comp_info[1].h_samp_factor;
        src_v = dec->comp_info[0].v_samp_factor / dec->comp_info[1].v_samp_factor;
    }
    int want_h = src_h, want_v = src_v;
    if (o->sub == RECODE_SUB_420 || (o->sub == RECODE_SUB_UNSET && (need_resize || o->quality)))
        want_h = want_v = 2;
    else if (o->sub == RECODE_SUB_444)
        want_h = want_v = 1;
    if (want_h < 1 || want_h > 2 || want_v < 1 || want_v > 2)
        want_h = want_v = 2;
    if (!need_resize && !o->quality && (gray || (want_h == src_h && want_v == src_v))) {
        jpeg_abort_decompress(dec);
        return RECODE_UNCHANGED;
    }

    uint32_t tw = w, th = h;
    if (need_resize) {
        double s = (double)o->max_side / longer;
        tw = (uint32_t)fmax(1.0, floor(w * s + 0.5));
        th = (uint32_t)fmax(1.0, floor(h * s + 0.5));
        if (tw > o->max_side)
            tw = o->max_side;
        if (th > o->max_side)
            th = o->max_side;
    }
    /* The smallest DCT scale that still covers the target, as PIL's draft() does. */
    dec->scale_denom = 8;
    for (unsigned num = 1; num <= 8; num++) {
        dec->scale_num = num;
        jpeg_calc_output_dimensions(dec);
        if (dec->output_width >= tw && dec->output_height >= th)
            break;
    }
    dec->out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(dec);
    int ch = dec->output_components;
    int sw = (int)dec->output_width, sh = (int)dec->output_height;
    size_t stride = (size_t)sw * ch;
    if (feed_buf_reserve(&rec->pixels, stride * sh)) {
        snprintf(msg, msg_cap, "out of memory for %dx%d pixels", sw, sh);
        goto abort_dec;
    }
    while (dec->output_scanline < dec->output_height) {
        JSAMPROW r = rec->pixels.data + (size_t)dec->output_scanline * stride;
        jpeg_read_scanlines(dec, &r, 1);
    }
    jpeg_finish_decompress(dec);
    if (dec->err->num_warnings) {
        snprintf(msg, msg_cap, "%s", rec->dec_err.msg);
        return RECODE_FAILED;
    }
    const uint8_t *px = rec->pixels.data;
    if ((uint32_t)sw != tw || (uint32_t)sh != th) {
        if (resize(rec, px, sw, sh, ch, (int)tw, (int)th)) {
            snprintf(msg, msg_cap, "out of memory resizing to %ux%u", tw, th);
            return RECODE_FAILED;
        }
        px = rec->resized.data;
    }

    enc->image_width = tw;
    enc->image_height = th;
    enc->input_components = ch;
    enc->in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(enc);
    jpeg_set_quality(enc, o->quality ? o->quality : RECODE_DEFAULT_QUALITY, TRUE);
    if (!gray) {
        enc->comp_info[0].h_samp_factor = want_h;
        enc->comp_info[0].v_samp_factor = want_v;
    }
    enc->optimize_coding = TRUE;
    jpeg_start_compress(enc, TRUE);
    size_t out_stride = (size_t)tw * ch;
    while (enc->next_scanline < enc->image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)enc->next_scanline * out_stride);
        jpeg_write_scanlines(enc, &r, 1);
    }
    jpeg_finish_compress(enc);
    return RECODE_DONE;
abort_dec:
    jpeg_abort_decompress(dec);
    return RECODE_FAILED;
}

enum recode recoder_run(recoder *rec, const uint8_t *in, size_t len, char *msg, size_t msg_cap)
{
    jmp_buf jb;
    rec->dec_err.jmp = rec->enc_err.jmp = &jb;
    rec->dec_err.msg[0] = rec->enc_err.msg[0] = '\0';
    rec->dec_err.mgr.num_warnings = 0;
    if (setjmp(jb)) {
        if (rec->enc_err.msg[0])
            snprintf(msg, msg_cap, "encoding: %s", rec->enc_err.msg);
        else
            snprintf(msg, msg_cap, "%s", rec->dec_err.msg);
        jpeg_abort_decompress(&rec->dec);
        jpeg_abort_compress(&rec->enc);
        return RECODE_FAILED;
    }
    return recode_body(rec, in, len, msg, msg_cap);
}

int recode_wanted(const recode_opts *o)
{
    return o->max_side || o->quality || o->sub == RECODE_SUB_420 || o->sub == RECODE_SUB_444;
}

void recoder_init(recoder *rec, const recode_opts *o)
{
    memset(rec, 0, sizeof(*rec));
    rec->opts = o;
    feed_buf_init(&rec->out, RECODE_MAX_BYTES);
    feed_buf_init(&rec->pixels, RECODE_MAX_PIXELS * 3);
    feed_buf_init(&rec->resized, RECODE_MAX_PIXELS * 3);
    feed_buf_init(&rec->tmp, RECODE_MAX_PIXELS * 3 * sizeof(float));
    feed_buf_init(&rec->taps, 64u << 20);
    rec->dec.err = jpeg_std_error(&rec->dec_err.mgr);
    rec->dec_err.mgr.error_exit = on_error;
    rec->dec_err.mgr.emit_message = on_message;
    jpeg_create_decompress(&rec->dec);
    rec->enc.err = jpeg_std_error(&rec->enc_err.mgr);
    rec->enc_err.mgr.error_exit = on_error;
    rec->enc_err.mgr.emit_message = on_message;
    jpeg_create_compress(&rec->enc);
    rec->dest.pub.init_destination = dest_init;
    rec->dest.pub.empty_output_buffer = dest_empty;
    rec->dest.pub.term_destination = dest_term;
    rec->dest.buf = &rec->out;
    rec->enc.dest = &rec->dest.pub;
}

void recoder_free(recoder *rec)
{
    jpeg_destroy_decompress(&rec->dec);
    rec->enc.dest = NULL;
    jpeg_destroy_compress(&rec->enc);
    feed_buf_free(&rec->out);
    feed_buf_free(&rec->pixels);
    feed_buf_free(&rec->resized);
    feed_buf_free(&rec->tmp);
    feed_buf_free(&rec->taps);
}

/*
 * jpeg_check's work: decodes a whole image into one reused row.
 */
__attribute__((noinline)) static int decode_body(struct jpeg_decompress_struct *dec,
                                                 const uint8_t *data, size_t len, feed_buf *row,
                                                 uint32_t *longer)
{
    jpeg_mem_src(dec, data, (unsigned long)len);
    jpeg_read_header(dec, TRUE);
    if ((uint64_t)dec->image_width * dec->image_height > RECODE_MAX_PIXELS) {
        jpeg_abort_decompress(dec);
        return -1;
    }
    jpeg_start_decompress(dec);
    if (feed_buf_reserve(row, (size_t)dec->output_width * dec->output_components)) {
        jpeg_abort_decompress(dec);
        return -1;
    }
    while (dec->output_scanline < dec->output_height) {
        JSAMPROW r = row->data;
        jpeg_read_scanlines(dec, &r, 1);
    }
    jpeg_finish_decompress(dec);
    *longer = dec->image_width > dec->image_height ? dec->image_width : dec->image_height;
    return dec->err->num_warnings ? -1 : 0;
}

int jpeg_check(jpeg_checker *k, const uint8_t *data, size_t len, uint32_t *longer)
{
    jmp_buf jb;
    k->jerr.jmp = &jb;
    k->jerr.mgr.num_warnings = 0;
    if (setjmp(jb)) {
        jpeg_abort_decompress(&k->dec);
        return -1;
    }
    return decode_body(&k->dec, data, len, &k->row, longer);
}

void jpeg_checker_init(jpeg_checker *k)
{
    memset(k, 0, sizeof(*k));
    feed_buf_init(&k->row, 16u << 20);
    k->dec.err = jpeg_std_error(&k->jerr.mgr);
    k->jerr.mgr.error_exit = on_error;
    k->jerr.mgr.emit_message = on_message;
    jpeg_create_decompress(&k->dec);
}

void jpeg_checker_free(jpeg_checker *k)
{
    jpeg_destroy_decompress(&k->dec);
    feed_buf_free(&k->row);
}
