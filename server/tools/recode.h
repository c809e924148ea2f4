/*
 * feed-pack's JPEG work, one image at a time: re-encoding (decode with
 * libjpeg's DCT scaling close to the target, shrink with an antialiasing
 * triangle filter, encode into a bounded buffer) and the verifying decode of
 * --verify. A recoder or checker holds its own libjpeg objects and buffers
 * and is used by one thread; libjpeg's fatal errors never leave these calls.
 */
#ifndef FEED_SERVER_TOOLS_RECODE_H
#define FEED_SERVER_TOOLS_RECODE_H

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

#include "feed/buf.h"

#define RECODE_MAX_BYTES (1ull << 30)            /* one input or output image */
#define RECODE_MAX_PIXELS (100ull * 1000 * 1000) /* declared pixels we agree to decode */
#define RECODE_DEFAULT_QUALITY 90

enum recode_sub { RECODE_SUB_UNSET, RECODE_SUB_420, RECODE_SUB_444, RECODE_SUB_KEEP };

typedef struct recode_opts {
    uint32_t max_side; /* 0: no resize */
    int quality;       /* 0: not given */
    enum recode_sub sub;
} recode_opts;

/* Whether the options can change any image (else every image goes in as it is). */
int recode_wanted(const recode_opts *o);

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

/* A libjpeg destination that appends to a bounded feed_buf. */
typedef struct buf_dest {
    struct jpeg_destination_mgr pub;
    feed_buf *buf;
} buf_dest;

typedef struct recoder {
    const recode_opts *opts;
    struct jpeg_decompress_struct dec;
    struct jpeg_compress_struct enc;
    struct jerr dec_err, enc_err;
    buf_dest dest;
    feed_buf out;     /* encoded output */
    feed_buf pixels;  /* decoded image */
    feed_buf resized; /* resized image */
    feed_buf tmp;     /* horizontal pass, floats */
    feed_buf taps;    /* filter taps */
} recoder;

/* Outcome of trying to re-encode one image. */
enum recode { RECODE_DONE, RECODE_UNCHANGED, RECODE_FAILED };

void recoder_init(recoder *rec, const recode_opts *o);
void recoder_free(recoder *rec);
/*
 * Decodes in, and if the options ask for a change it does not already have,
 * encodes it into rec->out (RECODE_DONE). RECODE_FAILED (undecodable, a
 * warning, an unsupported colour space, too many pixels, out of memory):
 * msg says why.
 */
enum recode recoder_run(recoder *rec, const uint8_t *in, size_t len, char *msg, size_t msg_cap);

/* --verify's decoder. */
typedef struct jpeg_checker {
    struct jpeg_decompress_struct dec;
    struct jerr jerr;
    feed_buf row;
} jpeg_checker;

void jpeg_checker_init(jpeg_checker *k);
void jpeg_checker_free(jpeg_checker *k);
/* Decodes a whole image and gives its longer side; -1 if libjpeg fails or warns (corrupt data
 * it would paper over) or the image has too many pixels. */
int jpeg_check(jpeg_checker *k, const uint8_t *data, size_t len, uint32_t *longer);

#endif
