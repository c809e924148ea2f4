/*
 * feed-pack SRC OUT.pack [--max-side N] [--quality Q] [--subsample 420|444|keep] [--threads N]
 * feed-pack --verify PACK_OR_DIR [--expect-max-side N]
 * feed-pack --help
 *
 * Writes a pack (layout in common/src/pack.c) from an ImageFolder tree (or
 * another pack), optionally re-encoding each image: decode with libjpeg
 * (using its DCT scaling to get close to the target cheaply), shrink so the
 * longer side is at most --max-side with an antialiasing triangle filter,
 * encode at --quality (default 90) with 4:2:0 chroma unless --subsample says
 * otherwise. An image is re-encoded only when an option asks for a change it
 * does not already have; otherwise its original bytes go in untouched.
 * Images libjpeg cannot decode cleanly (a fatal error, or a warning such as
 * premature end of data, or a colour space other than gray/YCbCr/RGB) are
 * stored as they are, so feedd still reports them per sample, and are
 * counted in the summary.
 *
 * Threads: the main thread reads nothing itself; it hands fixed-size chunks
 * of sample indices to --threads workers (each with its own libjpeg objects
 * and buffers, taking indices from an atomic counter), joins them, and writes
 * the chunk's results in index order. Memory is bounded by the chunk size
 * times the largest sample. The pack goes to OUT.pack.tmp.<pid> and is renamed
 * when complete; a failure removes the temporary file, and so does SIGINT or
 * SIGTERM (the handler unlinks it and dies of the signal), so an interrupted
 * run leaves nothing behind and an older OUT.pack untouched. On a terminal,
 * stderr shows progress after each chunk (files, bytes in and out, rate, time
 * left); otherwise the tool prints only its summary and per-sample problems.
 *
 * --verify opens a dataset as feedd would, decodes every sample with libjpeg
 * and prints counts (undecodable ones included); with --expect-max-side it
 * fails if any image is larger.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>

#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/pack.h"
#include "feed/strutil.h"

#define MAX_THREADS 64u
#define CHUNK_PER_THREAD 16u
#define MAX_SAMPLE_BYTES (1ull << 30)     /* one input or output image */
#define MAX_PIXELS (100ull * 1000 * 1000) /* declared pixels we agree to decode */
#define MAX_REPORTED 20                   /* per-sample messages before we only count */
#define PROGRESS_EVERY_S 0.5              /* terminal progress refresh */
#define DEFAULT_QUALITY 90

enum subsample { SUB_UNSET, SUB_420, SUB_444, SUB_KEEP };

typedef struct pack_opts {
    uint32_t max_side; /* 0: no resize */
    int quality;       /* 0: not given */
    enum subsample sub;
    unsigned threads;
} pack_opts;

enum outcome { OUT_UNCHANGED, OUT_REENCODED, OUT_KEPT_BAD };

typedef struct result {
    uint8_t *data; /* malloc'd bytes to write */
    size_t len;
    size_t in_len;
    enum outcome outcome;
    int read_rc; /* nonzero: the sample could not be read at all */
    char msg[JMSG_LENGTH_MAX + 64];
} result;

/*
 * libjpeg reports fatal errors by calling error_exit, which must not return:
 * we longjmp to *jmp, set by a small guard function around the code that
 * calls libjpeg (so no local of the working function lives across setjmp).
 */
struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf *jmp;
    char msg[JMSG_LENGTH_MAX];
};

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

/* A libjpeg destination that appends to a bounded feed_buf. */
typedef struct buf_dest {
    struct jpeg_destination_mgr pub;
    feed_buf *buf;
} buf_dest;

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

typedef struct worker {
    const feed_dataset *ds;
    const pack_opts *opts;
    result *results;
    uint64_t first;
    unsigned n;
    atomic_uint *next;
    struct jpeg_decompress_struct dec;
    struct jpeg_compress_struct enc;
    struct jerr dec_err, enc_err;
    buf_dest dest;
    feed_buf scratch; /* input bytes (trees) */
    feed_buf out;     /* encoded output */
    feed_buf pixels;  /* decoded image */
    feed_buf resized; /* resized image */
    feed_buf tmp;     /* horizontal pass, floats */
    feed_buf taps;    /* filter taps */
} worker;

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

static int resize(worker *wk, const uint8_t *src, int sw, int sh, int ch, int dw, int dh)
{
    taps th, tv;
    size_t h_bytes = taps_bytes(sw, dw);
    if (feed_buf_reserve(&wk->taps, h_bytes + taps_bytes(sh, dh)))
        return -1;
    make_taps(sw, dw, wk->taps.data, &th);
    make_taps(sh, dh, wk->taps.data + h_bytes, &tv);
    size_t row = (size_t)dw * ch;
    if (feed_buf_reserve(&wk->tmp, (size_t)sh * row * sizeof(float)) ||
        feed_buf_reserve(&wk->resized, (size_t)dh * row))
        return -1;
    float *tmp = (float *)(void *)wk->tmp.data;
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
        uint8_t *d = wk->resized.data + (size_t)y * row;
        for (size_t i = 0; i < row; i++) {
            float acc = 0;
            for (int k = 0; k < tv.count[y]; k++)
                acc += w[k] * tmp[(size_t)(tv.start[y] + k) * row + i];
            d[i] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc + 0.5f);
        }
    }
    return 0;
}

/* Outcome of trying to re-encode one image. */
enum recode { RECODE_DONE, RECODE_UNCHANGED, RECODE_FAILED };

/*
 * Decodes in, and if the options ask for a change, encodes into wk->out.
 * On RECODE_FAILED, msg says why. libjpeg's fatal errors leave through
 * reencode()'s setjmp.
 */
__attribute__((noinline)) static enum recode reencode_body(worker *wk, const uint8_t *in,
                                                           size_t len, char *msg, size_t msg_cap)
{
    const pack_opts *o = wk->opts;
    struct jpeg_decompress_struct *dec = &wk->dec;
    struct jpeg_compress_struct *enc = &wk->enc;

    jpeg_mem_src(dec, in, (unsigned long)len);
    jpeg_read_header(dec, TRUE);
    int gray = dec->jpeg_color_space == JCS_GRAYSCALE;
    if (!gray && dec->jpeg_color_space != JCS_YCbCr && dec->jpeg_color_space != JCS_RGB) {
        snprintf(msg, msg_cap, "colour space %d is not gray, YCbCr or RGB",
                 (int)dec->jpeg_color_space);
        goto abort_dec;
    }
    uint32_t w = dec->image_width, h = dec->image_height;
    if ((uint64_t)w * h > MAX_PIXELS) {
        snprintf(msg, msg_cap, "%ux%u is more than %llu pixels", w, h,
                 (unsigned long long)MAX_PIXELS);
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
    if (o->sub == SUB_420 || (o->sub == SUB_UNSET && (need_resize || o->quality)))
        want_h = want_v = 2;
    else if (o->sub == SUB_444)
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
    if (feed_buf_reserve(&wk->pixels, stride * sh)) {
        snprintf(msg, msg_cap, "out of memory for %dx%d pixels", sw, sh);
        goto abort_dec;
    }
    while (dec->output_scanline < dec->output_height) {
        JSAMPROW r = wk->pixels.data + (size_t)dec->output_scanline * stride;
        jpeg_read_scanlines(dec, &r, 1);
    }
    jpeg_finish_decompress(dec);
    if (dec->err->num_warnings) {
        snprintf(msg, msg_cap, "%s", wk->dec_err.msg);
        return RECODE_FAILED;
    }
    const uint8_t *px = wk->pixels.data;
    if ((uint32_t)sw != tw || (uint32_t)sh != th) {
        if (resize(wk, px, sw, sh, ch, (int)tw, (int)th)) {
            snprintf(msg, msg_cap, "out of memory resizing to %ux%u", tw, th);
            return RECODE_FAILED;
        }
        px = wk->resized.data;
    }

    enc->image_width = tw;
    enc->image_height = th;
    enc->input_components = ch;
    enc->in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(enc);
    jpeg_set_quality(enc, o->quality ? o->quality : DEFAULT_QUALITY, TRUE);
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

static enum recode reencode(worker *wk, const uint8_t *in, size_t len, char *msg, size_t msg_cap)
{
    jmp_buf jb;
    wk->dec_err.jmp = wk->enc_err.jmp = &jb;
    wk->dec_err.msg[0] = wk->enc_err.msg[0] = '\0';
    wk->dec_err.mgr.num_warnings = 0;
    if (setjmp(jb)) {
        if (wk->enc_err.msg[0])
            snprintf(msg, msg_cap, "encoding: %s", wk->enc_err.msg);
        else
            snprintf(msg, msg_cap, "%s", wk->dec_err.msg);
        jpeg_abort_decompress(&wk->dec);
        jpeg_abort_compress(&wk->enc);
        return RECODE_FAILED;
    }
    return reencode_body(wk, in, len, msg, msg_cap);
}

static int wants_recode(const pack_opts *o)
{
    return o->max_side || o->quality || o->sub == SUB_420 || o->sub == SUB_444;
}

static void process(worker *wk, uint64_t i, result *res)
{
    const uint8_t *data;
    size_t len;
    memset(res, 0, sizeof(*res));
    res->read_rc = feed_dataset_read(wk->ds, i, &wk->scratch, &data, &len);
    if (res->read_rc)
        return;
    res->in_len = len;
    res->outcome = OUT_UNCHANGED;
    if (wants_recode(wk->opts)) {
        enum recode r = reencode(wk, data, len, res->msg, sizeof(res->msg));
        if (r == RECODE_DONE) {
            data = wk->out.data;
            len = wk->out.len;
            res->outcome = OUT_REENCODED;
        } else if (r == RECODE_FAILED) {
            res->outcome = OUT_KEPT_BAD;
        }
    }
    res->data = malloc(len ? len : 1);
    if (!res->data) {
        res->read_rc = FEED_ENOMEM;
        return;
    }
    memcpy(res->data, data, len);
    res->len = len;
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    for (;;) {
        unsigned k = atomic_fetch_add(wk->next, 1u);
        if (k >= wk->n)
            break;
        process(wk, wk->first + k, &wk->results[k]);
    }
    return NULL;
}

static void worker_init(worker *wk, const feed_dataset *ds, const pack_opts *o)
{
    memset(wk, 0, sizeof(*wk));
    wk->ds = ds;
    wk->opts = o;
    feed_buf_init(&wk->scratch, MAX_SAMPLE_BYTES);
    feed_buf_init(&wk->out, MAX_SAMPLE_BYTES);
    feed_buf_init(&wk->pixels, MAX_PIXELS * 3);
    feed_buf_init(&wk->resized, MAX_PIXELS * 3);
    feed_buf_init(&wk->tmp, MAX_PIXELS * 3 * sizeof(float));
    feed_buf_init(&wk->taps, 64u << 20);
    wk->dec.err = jpeg_std_error(&wk->dec_err.mgr);
    wk->dec_err.mgr.error_exit = on_error;
    wk->dec_err.mgr.emit_message = on_message;
    jpeg_create_decompress(&wk->dec);
    wk->enc.err = jpeg_std_error(&wk->enc_err.mgr);
    wk->enc_err.mgr.error_exit = on_error;
    wk->enc_err.mgr.emit_message = on_message;
    jpeg_create_compress(&wk->enc);
    wk->dest.pub.init_destination = dest_init;
    wk->dest.pub.empty_output_buffer = dest_empty;
    wk->dest.pub.term_destination = dest_term;
    wk->dest.buf = &wk->out;
    wk->enc.dest = &wk->dest.pub;
}

static void worker_free(worker *wk)
{
    jpeg_destroy_decompress(&wk->dec);
    wk->enc.dest = NULL;
    jpeg_destroy_compress(&wk->enc);
    feed_buf_free(&wk->scratch);
    feed_buf_free(&wk->out);
    feed_buf_free(&wk->pixels);
    feed_buf_free(&wk->resized);
    feed_buf_free(&wk->tmp);
    feed_buf_free(&wk->taps);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *sample_name(const feed_dataset *ds, uint64_t i, char *buf, size_t cap)
{
    const char *p = feed_dataset_sample_path(ds, i);
    if (p)
        return p;
    snprintf(buf, cap, "sample %llu", (unsigned long long)i);
    return buf;
}

/*
 * The writer's temporary file (feed/pack.h: PATH.tmp.<pid>), for the signal
 * handler: set before the writer opens it, read only by the handler.
 */
static char g_tmp_path[PATH_MAX + 32];

static void on_fatal_signal(int sig)
{
    unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static int remove_tmp_on_signals(const char *dst)
{
    int n = snprintf(g_tmp_path, sizeof(g_tmp_path), "%s.tmp.%ld", dst, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof(g_tmp_path))
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) ? -1 : 0;
}

/* Progress on a terminal: one line rewritten in place. */
typedef struct progress {
    bool on;    /* stderr is a terminal */
    bool shown; /* a progress line is on screen */
    double t0, last;
} progress;

static void progress_clear(progress *p)
{
    if (p->shown)
        fputs("\r\033[K", stderr);
    p->shown = false;
}

static void progress_update(progress *p, uint64_t done, uint64_t count, uint64_t in_bytes,
                            uint64_t out_bytes)
{
    double now = now_s();
    if (!p->on || (now - p->last < PROGRESS_EVERY_S && done < count))
        return;
    p->last = now;
    double secs = now - p->t0, rate = secs > 0 ? done / secs : 0.0;
    double left = rate > 0 ? (count - done) / rate : 0.0;
    fprintf(stderr,
            "\r\033[Kfeed-pack: %llu/%llu files (%.1f%%), in %.1f MB, out %.1f MB, %.0f files/s, "
            "%.0f:%02.0f left",
            (unsigned long long)done, (unsigned long long)count, 100.0 * done / count,
            in_bytes / 1e6, out_bytes / 1e6, rate, floor(left / 60), fmod(floor(left), 60));
    p->shown = true;
}

static int run_pack(const char *src, const char *dst, const pack_opts *o)
{
    int rc = 1;
    feed_dataset *ds = NULL;
    feed_pack_writer *pw = NULL;
    worker *workers = NULL;
    pthread_t *tids = NULL;
    result *results = NULL;
    const char **names = NULL;
    char err[1024], nbuf[64];
    double t0 = now_s();
    progress prog = {.on = isatty(STDERR_FILENO) == 1, .t0 = t0};
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_sample_bytes = MAX_SAMPLE_BYTES;
    unsigned nworkers = 0;

    int e = feed_dataset_open(src, &lim, &ds, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    uint64_t count = feed_dataset_count(ds);
    uint32_t classes = feed_dataset_num_classes(ds);
    names = calloc(classes, sizeof(*names));
    unsigned chunk = o->threads * CHUNK_PER_THREAD;
    workers = calloc(o->threads, sizeof(*workers));
    tids = calloc(o->threads, sizeof(*tids));
    results = calloc(chunk, sizeof(*results));
    if (!names || !workers || !tids || !results) {
        fprintf(stderr, "feed-pack: out of memory\n");
        goto out;
    }
    for (uint32_t c = 0; c < classes; c++)
        names[c] = feed_dataset_class_name(ds, c);
    if (remove_tmp_on_signals(dst) != 0) {
        fprintf(stderr, "feed-pack: %s: path too long\n", dst);
        goto out;
    }
    e = feed_pack_writer_open(dst, count, classes, names, &pw, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    for (; nworkers < o->threads; nworkers++)
        worker_init(&workers[nworkers], ds, o);

    uint64_t n_recoded = 0, n_unchanged = 0, n_bad = 0, in_bytes = 0, out_bytes = 0;
    int read_failed = 0;
    for (uint64_t first = 0; first < count; first += chunk) {
        unsigned n = count - first < chunk ? (unsigned)(count - first) : chunk;
        atomic_uint next = 0;
        unsigned started = 0;
        for (unsigned t = 0; t < o->threads; t++) {
            workers[t].results = results;
            workers[t].first = first;
            workers[t].n = n;
            workers[t].next = &next;
            if (pthread_create(&tids[t], NULL, worker_main, &workers[t]) != 0)
                break;
            started++;
        }
        if (started == 0)
            worker_main(&workers[0]);
        for (unsigned t = 0; t < started; t++)
            pthread_join(tids[t], NULL);
        for (unsigned k = 0; k < n; k++) {
            result *r = &results[k];
            uint64_t i = first + k;
            if (r->read_rc && !e) {
                progress_clear(&prog);
                fprintf(stderr, "feed-pack: %s: cannot read: %s\n",
                        sample_name(ds, i, nbuf, sizeof(nbuf)), feed_strerror(r->read_rc));
                e = r->read_rc;
                read_failed = 1;
            }
            if (!e)
                e = feed_pack_writer_add(pw, feed_dataset_label(ds, i), r->data, r->len);
            in_bytes += r->in_len;
            out_bytes += r->len;
            n_recoded += r->outcome == OUT_REENCODED;
            n_unchanged += r->outcome == OUT_UNCHANGED && !r->read_rc;
            if (r->outcome == OUT_KEPT_BAD && n_bad++ < MAX_REPORTED) {
                progress_clear(&prog);
                fprintf(stderr, "feed-pack: %s: kept as-is: %s\n",
                        sample_name(ds, i, nbuf, sizeof(nbuf)), r->msg);
            }
            free(r->data);
            r->data = NULL;
        }
        if (e)
            break;
        progress_update(&prog, first + n, count, in_bytes, out_bytes);
    }
    progress_clear(&prog);
    if (e) {
        if (!read_failed)
            fprintf(stderr, "feed-pack: writing %s failed (%s)\n", dst, feed_strerror(e));
        goto out;
    }
    e = feed_pack_writer_finish(pw, err, sizeof(err));
    pw = NULL;
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    double secs = now_s() - t0;
    printf("feed-pack: %s -> %s: %llu samples, %u classes, %u threads, %.2f s\n", src, dst,
           (unsigned long long)count, classes, o->threads, secs);
    printf("  re-encoded %llu, unchanged %llu, kept as-is (undecodable) %llu\n",
           (unsigned long long)n_recoded, (unsigned long long)n_unchanged,
           (unsigned long long)n_bad);
    printf("  image bytes in %llu (mean %.0f), out %llu (mean %.0f), %.1f%%\n",
           (unsigned long long)in_bytes, (double)in_bytes / count, (unsigned long long)out_bytes,
           (double)out_bytes / count, in_bytes ? 100.0 * out_bytes / in_bytes : 0.0);
    rc = 0;
out:
    feed_pack_writer_abort(pw);
    for (unsigned t = 0; t < nworkers; t++)
        worker_free(&workers[t]);
    free(workers);
    free(tids);
    free(results);
    free(names);
    feed_dataset_close(ds);
    return rc;
}

/*
 * Decodes a whole image (into one reused row) and gives its longer side;
 * -1 if libjpeg fails or warns (corrupt data it would paper over).
 */
__attribute__((noinline)) static int decode_body(struct jpeg_decompress_struct *dec,
                                                 const uint8_t *data, size_t len, feed_buf *row,
                                                 uint32_t *longer)
{
    jpeg_mem_src(dec, data, (unsigned long)len);
    jpeg_read_header(dec, TRUE);
    if ((uint64_t)dec->image_width * dec->image_height > MAX_PIXELS) {
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

static int decode_side(struct jpeg_decompress_struct *dec, struct jerr *jerr, const uint8_t *data,
                       size_t len, feed_buf *row, uint32_t *longer)
{
    jmp_buf jb;
    jerr->jmp = &jb;
    jerr->mgr.num_warnings = 0;
    if (setjmp(jb)) {
        jpeg_abort_decompress(dec);
        return -1;
    }
    return decode_body(dec, data, len, row, longer);
}

static int run_verify(const char *path, uint32_t expect_max_side)
{
    int rc = 1;
    feed_dataset *ds = NULL;
    feed_buf scratch, row;
    feed_buf_init(&scratch, MAX_SAMPLE_BYTES);
    feed_buf_init(&row, 16u << 20);
    struct jpeg_decompress_struct dec;
    struct jerr jerr;
    char err[1024];
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    dec.err = jpeg_std_error(&jerr.mgr);
    jerr.mgr.error_exit = on_error;
    jerr.mgr.emit_message = on_message;
    jpeg_create_decompress(&dec);

    int e = feed_dataset_open(path, &lim, &ds, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    uint64_t count = feed_dataset_count(ds), bad = 0, bytes = 0, too_big = 0;
    uint32_t max_long = 0;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *data;
        size_t len;
        e = feed_dataset_read(ds, i, &scratch, &data, &len);
        if (e) {
            bad++;
            continue;
        }
        bytes += len;
        uint32_t longer;
        if (decode_side(&dec, &jerr, data, len, &row, &longer)) {
            bad++;
            continue;
        }
        if (longer > max_long)
            max_long = longer;
        too_big += expect_max_side && longer > expect_max_side;
    }
    printf("%s: %s, %llu samples, %u classes, %llu image bytes, largest side %u, "
           "%llu undecodable\n",
           path, feed_dataset_format(ds), (unsigned long long)count, feed_dataset_num_classes(ds),
           (unsigned long long)bytes, max_long, (unsigned long long)bad);
    if (too_big) {
        fprintf(stderr, "feed-pack: %llu images have a side longer than %u\n",
                (unsigned long long)too_big, expect_max_side);
        goto out;
    }
    rc = 0;
out:
    jpeg_destroy_decompress(&dec);
    feed_buf_free(&scratch);
    feed_buf_free(&row);
    feed_dataset_close(ds);
    return rc;
}

static void usage(FILE *f, unsigned default_threads)
{
    fprintf(f,
            "usage: feed-pack SRC OUT.pack [options]   pack an ImageFolder tree (or a pack)\n"
            "       feed-pack --verify PACK_OR_DIR [--expect-max-side N]\n"
            "\n"
            "Writes OUT.pack.tmp.<pid> and renames it onto OUT.pack when complete; a failure,\n"
            "SIGINT or SIGTERM removes it (an older OUT.pack stays as it was). Progress\n"
            "(files, bytes in/out, rate, time left) goes to stderr when it is a terminal.\n"
            "By default every image goes in byte for byte; an image is re-encoded only when\n"
            "an option asks for something it does not already have.\n"
            "\n"
            "  --max-side N       shrink images whose longer side exceeds N (1..65535) to N,\n"
            "                     antialiased, and re-encode them (default: no resizing)\n"
            "  --quality Q        re-encode every image at JPEG quality Q (1..100); images\n"
            "                     re-encoded for another reason use %d (default: not given)\n"
            "  --subsample S      chroma subsampling of re-encoded images: 420, 444, or keep\n"
            "                     the source's (default: 420 with --max-side or --quality;\n"
            "                     420 or 444 alone re-encodes images that differ)\n"
            "  --threads N        decoding/encoding threads, 1..%u (default: CPUs online, %u)\n"
            "  --verify           open PACK_OR_DIR as feedd would, decode every sample, print\n"
            "                     counts (undecodable ones included)\n"
            "  --expect-max-side N  with --verify: fail if an image has a longer side than N\n"
            "                     (default: no check)\n"
            "  -h, --help         print this and exit\n",
            DEFAULT_QUALITY, MAX_THREADS, default_threads);
}

int main(int argc, char **argv)
{
    enum { O_MAX_SIDE = 256, O_QUALITY, O_SUBSAMPLE, O_THREADS, O_VERIFY, O_EXPECT };
    static const struct option longopts[] = {
        {"max-side", required_argument, NULL, O_MAX_SIDE},
        {"quality", required_argument, NULL, O_QUALITY},
        {"subsample", required_argument, NULL, O_SUBSAMPLE},
        {"threads", required_argument, NULL, O_THREADS},
        {"verify", no_argument, NULL, O_VERIFY},
        {"expect-max-side", required_argument, NULL, O_EXPECT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pack_opts o = {0};
    int verify = 0, bad = 0, c;
    uint32_t v32, expect_max_side = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu < 1 ? 1 : ncpu > (long)MAX_THREADS ? MAX_THREADS : (unsigned)ncpu;
    unsigned default_threads = o.threads;

    while (!bad && (c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case O_MAX_SIDE:
            bad = feed_parse_u32(optarg, 1, 65535, &o.max_side) != 0;
            break;
        case O_QUALITY:
            bad = feed_parse_u32(optarg, 1, 100, &v32) != 0;
            o.quality = (int)v32;
            break;
        case O_SUBSAMPLE:
            o.sub = strcmp(optarg, "420") == 0    ? SUB_420
                    : strcmp(optarg, "444") == 0  ? SUB_444
                    : strcmp(optarg, "keep") == 0 ? SUB_KEEP
                                                  : SUB_UNSET;
            bad = o.sub == SUB_UNSET;
            break;
        case O_THREADS:
            bad = feed_parse_u32(optarg, 1, MAX_THREADS, &v32) != 0;
            o.threads = v32;
            break;
        case O_VERIFY:
            verify = 1;
            break;
        case O_EXPECT:
            bad = feed_parse_u32(optarg, 1, 65535, &expect_max_side) != 0;
            break;
        case 'h':
            usage(stdout, default_threads);
            return 0;
        default: /* getopt_long has said what is wrong */
            bad = 1;
            continue;
        }
        if (bad)
            fprintf(stderr, "feed-pack: invalid value '%s'\n", optarg);
    }
    int npos = argc - optind;
    if (!bad && verify && npos == 1)
        return run_verify(argv[optind], expect_max_side);
    if (bad || verify || npos != 2) {
        usage(stderr, default_threads);
        return 2;
    }
    return run_pack(argv[optind], argv[optind + 1], &o);
}
