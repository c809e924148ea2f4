/*
 * feed-engine-split: where the engine's time goes on original JPEGs, measured
 * through libjpeg-turbo's own API (Debian ships it without symbols, so a
 * profiler cannot name its internal functions). Over every image of DATA,
 * one thread, each pass timed on its own:
 *   huff      jpeg_read_coefficients: entropy (Huffman) decoding of the
 *             whole image, nothing else;
 *   rgb       full decode to RGBX with the engine's settings (ISLOW, fancy
 *             upsampling): + dequantise/IDCT, chroma upsampling, colour
 *             conversion and row copies (not split further: asking for
 *             YCbCr output takes libjpeg-turbo's plain-C copy instead of its
 *             SIMD conversion, which is slower, so it is no baseline);
 *   engine    feed_engine_run, train 224 (crop planned from the header, DCT
 *             scaling, only the crop's columns and rows decoded, resize,
 *             flip), with its own decode / resize split;
 *   bound     the Huffman time of the rows the engine must entropy-decode
 *             (every MCU row down to the crop's bottom edge: huff x bottom /
 *             height per image), the limit of this path without restart
 *             markers.
 * Usage: feed-engine-split DATA [PASSES] (built with the project).
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/timeutil.h"
#include "feed/transform.h"

typedef struct err_mgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
} err_mgr;

static void on_error(j_common_ptr c)
{
    longjmp(((err_mgr *)c->err)->jb, 1);
}

static void quiet(j_common_ptr c, int level)
{
    (void)c;
    (void)level;
}

enum { HUFF, RGB };

/* One libjpeg pass over jpeg; ns taken, or 0 when the file fails. */
static uint64_t pass(struct jpeg_decompress_struct *d, err_mgr *em, const uint8_t *jpeg,
                     size_t len, int mode, uint8_t *row)
{
    uint64_t t0 = feed_now_ns();
    if (setjmp(em->jb)) {
        jpeg_abort_decompress(d);
        return 0;
    }
    jpeg_mem_src(d, jpeg, (unsigned long)len);
    jpeg_read_header(d, TRUE);
    if (mode == HUFF) {
        jpeg_read_coefficients(d);
    } else {
        d->dct_method = JDCT_ISLOW;
        d->do_fancy_upsampling = TRUE;
        if (d->jpeg_color_space == JCS_YCbCr)
            d->out_color_space = JCS_EXT_RGBX;
        jpeg_start_decompress(d);
        JSAMPROW rp = row;
        while (d->output_scanline < d->output_height)
            jpeg_read_scanlines(d, &rp, 1);
    }
    jpeg_finish_decompress(d);
    return feed_now_ns() - t0;
}

int main(int argc, char **argv)
{
    feed_dataset *ds;
    char err[256];
    if (argc < 2 || feed_dataset_open(argv[1], NULL, &ds, err, sizeof err)) {
        fprintf(stderr, "usage: feed-engine-split DATA [PASSES] (%s)\n", argc < 2 ? "" : err);
        return 2;
    }
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    struct jpeg_decompress_struct d;
    err_mgr em;
    d.err = jpeg_std_error(&em.pub);
    em.pub.error_exit = on_error;
    em.pub.emit_message = quiet;
    jpeg_create_decompress(&d);
    feed_engine *e;
    feed_engine_new(NULL, &e);
    feed_transform t;
    feed_transform_default_train(&t);
    t.out_h = t.out_w = 224;
    uint8_t *row = malloc(65536 * 4), *out = malloc(224 * 224 * 3);
    uint64_t n = feed_dataset_count(ds);
    feed_buf *bufs = calloc(n, sizeof *bufs);
    const uint8_t **jp = calloc(n, sizeof *jp);
    size_t *len = calloc(n, sizeof *len);
    for (uint64_t i = 0; i < n; i++) {
        feed_buf_init(&bufs[i], 64u << 20);
        feed_dataset_read(ds, i, &bufs[i], &jp[i], &len[i]);
    }
    double ns[2] = {0, 0}, eng = 0, eng_dec = 0, eng_rs = 0, bound = 0;
    uint64_t images = 0;
    for (int p = 0; p < passes; p++) {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t h = pass(&d, &em, jp[i], len[i], HUFF, row);
            uint64_t r = pass(&d, &em, jp[i], len[i], RGB, row);
            if (!h || !r)
                continue;
            feed_stage_times st = {0, 0};
            uint64_t t0 = feed_now_ns();
            if (feed_engine_run(e, jp[i], len[i], &t, 1, (uint32_t)p, i, out, &st) !=
                FEED_SAMPLE_OK)
                continue;
            eng += (double)(feed_now_ns() - t0);
            eng_dec += (double)st.decode_ns;
            eng_rs += (double)st.resize_ns;
            ns[HUFF] += (double)h;
            ns[RGB] += (double)r;
            feed_sample_plan plan;
            feed_plan_sample(&t, d.image_width, d.image_height, 1, (uint32_t)p, i, &plan);
            bound += (double)h * (plan.crop.y + plan.crop.h) / d.image_height;
            images++;
        }
    }
    double k = images ? 1e6 * (double)images : 1;
    printf("images %llu (passes %d)\n", (unsigned long long)images, passes);
    printf("full decode, ms/image: huffman %.3f (%.0f%%) + idct/upsample/colour %.3f = %.3f\n",
           ns[HUFF] / k, 100 * ns[HUFF] / ns[RGB], (ns[RGB] - ns[HUFF]) / k, ns[RGB] / k);
    printf("engine train 224, ms/image: %.3f (decode %.3f, resize+flip+write %.3f)\n", eng / k,
           eng_dec / k, eng_rs / k);
    printf("huffman of the rows the engine must decode, ms/image: %.3f = %.0f%% of the "
           "engine's time; the engine is %.2fx that limit\n",
           bound / k, 100 * bound / eng, eng / bound);
    printf("engine vs full decode: %.2fx faster\n", ns[RGB] / eng);
    return 0;
}
