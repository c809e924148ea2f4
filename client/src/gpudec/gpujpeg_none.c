/* GPU JPEG decode in a build without CUDA (see gpujpeg.h): open fails, saying why. */
#include <stdio.h>

#include "gpujpeg.h"

int client_gpujpeg_open(int device, client_gpujpeg **out, char *why, size_t why_cap)
{
    (void)device;
    *out = NULL;
    snprintf(why, why_cap, "built without CUDA");
    return FEED_ECUDA;
}

void client_gpujpeg_close(client_gpujpeg *h)
{
    (void)h;
}

void *client_gpujpeg_stream(client_gpujpeg *h)
{
    (void)h;
    return NULL;
}

bool client_gpujpeg_supported(client_gpujpeg *h, const uint8_t *jpeg, size_t len, uint32_t *w,
                              uint32_t *hgt)
{
    (void)h;
    (void)jpeg;
    (void)len;
    (void)w;
    (void)hgt;
    return false;
}

int client_gpujpeg_decode_batch(client_gpujpeg *h, const client_gpujpeg_batch *b,
                                feed_sample_status *status)
{
    (void)h;
    for (uint32_t i = 0; b && status && i < b->n; i++)
        status[i] = FEED_SAMPLE_UNSUPPORTED;
    return FEED_ECUDA;
}
