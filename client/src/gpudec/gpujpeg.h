/*
 * GPU JPEG decode (docs/design/client.md, "GPU JPEG decode"): encoded JPEG
 * bytes in, finished samples out, on the GPU. The JPEG engines decode through
 * nvJPEG's hardware backend, loaded at run time (dlopen "libnvjpeg.so.13",
 * then "libnvjpeg.so"; never linked), into device RGB buffers the module owns;
 * one kernel then crops each sample's box with the server's antialiasing
 * triangle filter, flips, rounds to uint8 and normalises into the caller's
 * device slot in the slot's dtype and layout, exactly as deliver/gpu.cu does
 * for the network path. Implemented in gpujpeg.cu when FEED_HAVE_CUDA, else
 * by gpujpeg_none.c (open fails, saying why).
 *
 * A client_gpujpeg is used by one thread at a time (the decode lane opens one
 * per lane thread, so that several batches decode at once). Its work runs on
 * its own non-blocking stream of the lowest priority the device has, so the
 * training step's kernels go first.
 */
#ifndef FEED_CLIENT_GPUJPEG_H
#define FEED_CLIENT_GPUJPEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Declared pixels above this per image: FEED_SAMPLE_TOO_LARGE (the server's default limit). */
#define CLIENT_GPUJPEG_MAX_PIXELS (64ull << 20)
/* Images per decode_batch call. */
#define CLIENT_GPUJPEG_MAX_BATCH 1024u

typedef struct client_gpujpeg client_gpujpeg;

/*
 * Open the hardware decoder on `device`. FEED_ECUDA with the reason in why
 * (no CUDA, no such device, nvJPEG missing, no hardware backend on this GPU)
 * when it cannot be had; the caller logs "GPU JPEG decode off: <why>".
 */
int client_gpujpeg_open(int device, client_gpujpeg **out, char *why, size_t why_cap);
void client_gpujpeg_close(client_gpujpeg *h); /* accepts NULL */
/* The module's stream (a cudaStream_t). */
void *client_gpujpeg_stream(client_gpujpeg *h);

/*
 * Whether the hardware backend decodes this image (nvjpegDecodeBatchedSupported:
 * baseline, 3 components, a subsampling the engine has), with its size in
 * *w, *h when it does. Progressive, CMYK and unreadable headers are not.
 */
bool client_gpujpeg_supported(client_gpujpeg *h, const uint8_t *jpeg, size_t len, uint32_t *w,
                              uint32_t *hgt);

typedef struct client_gpujpeg_batch {
    uint32_t n;                   /* 1 .. CLIENT_GPUJPEG_MAX_BATCH */
    const uint8_t *const *jpeg;   /* [n] encoded bytes (host memory) */
    const size_t *len;            /* [n] */
    const feed_sample_plan *plan; /* [n] feed_plan_sample on each image's size */
    /* [n] the place in dst each image's sample goes to (the decode lane: its position in the
     * batch), distinct; NULL: image i to place i. */
    const uint32_t *pos;
    const feed_transform *t;      /* output size; eval mode takes its exact box */
    const float *mean, *std;      /* [3] each; unused for FEED_DTYPE_UINT8 */
    feed_dtype dtype;
    feed_layout layout;
    void *dst; /* device memory: samples of 3 x out_h x out_w in dtype and layout, room for
                * every place pos names (n without pos) */
    /* A cudaEvent_t the writes into dst wait for (the decode lane: the slot's copy and
     * normalisation, which write every place of the batch, the lane's with zeros); NULL: none.
     * The JPEG decode itself does not wait for it. */
    void *dst_after;
} client_gpujpeg_batch;

/*
 * Decode and transform b's samples into b->dst; returns once the stream has
 * finished them (the JPEG bytes are no longer read then). status[i] is
 * FEED_SAMPLE_OK, or the reason sample i failed, its output then being what
 * zero pixels normalise to (the network path's failed sample). Returns 0, or
 * FEED_EINVAL (a malformed batch) / FEED_ENOMEM (host memory) / FEED_ECUDA
 * when the batch as a whole could not run: every status is then
 * FEED_SAMPLE_UNSUPPORTED (the caller asks the servers for those samples)
 * and b->dst holds nothing to use.
 */
int client_gpujpeg_decode_batch(client_gpujpeg *h, const client_gpujpeg_batch *b,
                                feed_sample_status *status);

#ifdef __cplusplus
}
#endif
#endif
