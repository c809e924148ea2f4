/*
 * Error codes shared by every part of feedd: the server, libfeedclient and the
 * tools. Functions return 0 or one of these negative codes; feed_strerror()
 * and feed_err_name() turn a code into text. One X-macro generates both.
 */
#ifndef FEED_ERRORS_H
#define FEED_ERRORS_H

#include "feed/export.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FEED_ERRNO_MAP(XX)                                                                         \
    XX(EINVAL, -1, "invalid argument")                                                             \
    XX(ENOMEM, -2, "out of memory")                                                                \
    XX(EIO, -3, "input/output error")                                                              \
    XX(ENOTFOUND, -4, "not found")                                                                 \
    XX(ECORRUPT, -5, "corrupt data")                                                               \
    XX(ETOOBIG, -6, "exceeds a configured limit")                                                  \
    XX(EUNSUPPORTED, -7, "unsupported")                                                            \
    XX(EUNAVAILABLE, -8, "no server available")                                                    \
    XX(ETIMEDOUT, -9, "timed out")                                                                 \
    XX(EPROTO, -10, "protocol error")                                                              \
    XX(ECANCELED, -11, "canceled")                                                                 \
    XX(EEOF, -12, "end of epoch")                                                                  \
    XX(EBADSAMPLE, -13, "bad samples not replaced")                                                \
    XX(ECUDA, -14, "CUDA error")                                                                   \
    XX(EEXHAUSTED, -15, "resource exhausted")                                                      \
    XX(ESTATE, -16, "invalid state")                                                               \
    XX(EAUTH, -17, "credentials refused by the server")

enum {
    FEED_OK = 0,
#define FEED_ERRNO_ENUM(name, val, msg) FEED_##name = (val),
    FEED_ERRNO_MAP(FEED_ERRNO_ENUM)
#undef FEED_ERRNO_ENUM
};

/* Text for a code; never NULL. Unknown codes give "unknown error". */
FEED_EXPORT const char *feed_strerror(int err);
/* The code's name ("FEED_EINVAL"); never NULL. */
FEED_EXPORT const char *feed_err_name(int err);

/*
 * Outcome of one sample. The numeric values are the wire values of
 * feed.v1.SampleStatus; keep them in step with proto/feed.proto.
 */
typedef enum feed_sample_status {
    FEED_SAMPLE_OK = 0,
    FEED_SAMPLE_CORRUPT = 1,     /* libjpeg reported a fatal error in the data */
    FEED_SAMPLE_TRUNCATED = 2,   /* data ended before the image did */
    FEED_SAMPLE_NOT_JPEG = 3,    /* no SOI marker */
    FEED_SAMPLE_EMPTY = 4,       /* zero bytes */
    FEED_SAMPLE_TOO_LARGE = 5,   /* file bytes or declared pixels beyond the limit */
    FEED_SAMPLE_UNSUPPORTED = 6, /* valid JPEG the engine cannot turn into RGB */
    FEED_SAMPLE_IO_ERROR = 7,    /* the server could not read the file */
    FEED_SAMPLE_STATUS_COUNT
} feed_sample_status;

/* Short lower-case name of a sample status ("corrupt"); used in metrics labels. */
FEED_EXPORT const char *feed_sample_status_name(feed_sample_status s);

#ifdef __cplusplus
}
#endif
#endif
