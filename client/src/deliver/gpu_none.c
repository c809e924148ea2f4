/*
 * The GPU interface (gpu.h) in a build without CUDA: no devices, and every
 * call that would need one fails with FEED_ECUDA.
 */
#include <stdio.h>

#include "feed/errors.h"
#include "gpu.h"

int client_gpu_device_count(void)
{
    return 0;
}

int client_gpu_open(int device, client_gpu **out, char *err, size_t err_cap)
{
    (void)device;
    *out = NULL;
    snprintf(err, err_cap, "libfeedclient was built without CUDA; use FEED_DEVICE_HOST");
    return FEED_ECUDA;
}

void client_gpu_close(client_gpu *g)
{
    (void)g;
}

int client_gpu_bind_thread(client_gpu *g)
{
    (void)g;
    return FEED_ECUDA;
}

void *client_gpu_copy_stream(client_gpu *g)
{
    (void)g;
    return NULL;
}

int client_gpu_host_alloc(client_gpu *g, size_t bytes, void **out)
{
    (void)g;
    (void)bytes;
    *out = NULL;
    return FEED_ECUDA;
}

void client_gpu_host_free(void *p)
{
    (void)p;
}

int client_gpu_slot_create(client_gpu *g, uint32_t max_n, uint32_t h, uint32_t w, feed_dtype dtype,
                           client_gpu_slot **out)
{
    (void)g;
    (void)max_n;
    (void)h;
    (void)w;
    (void)dtype;
    *out = NULL;
    return FEED_ECUDA;
}

void client_gpu_slot_destroy(client_gpu_slot *s)
{
    (void)s;
}

int client_gpu_slot_host_wait(client_gpu_slot *s)
{
    (void)s;
    return FEED_ECUDA;
}

int client_gpu_slot_submit(client_gpu *g, client_gpu_slot *s, const uint8_t *raw_pinned,
                           const int64_t *labels_pinned, uint32_t n, feed_layout layout,
                           const float mean[3], const float std[3])
{
    (void)g;
    (void)s;
    (void)raw_pinned;
    (void)labels_pinned;
    (void)n;
    (void)layout;
    (void)mean;
    (void)std;
    return FEED_ECUDA;
}

void *client_gpu_slot_data(client_gpu_slot *s)
{
    (void)s;
    return NULL;
}

const int64_t *client_gpu_slot_labels(client_gpu_slot *s)
{
    (void)s;
    return NULL;
}

void *client_gpu_slot_ready_event(client_gpu_slot *s)
{
    (void)s;
    return NULL;
}

int client_gpu_slot_release(client_gpu_slot *s, void *stream)
{
    (void)s;
    (void)stream;
    return FEED_ECUDA;
}

int client_gpu_slot_stream_wait(client_gpu_slot *s, void *stream)
{
    (void)s;
    (void)stream;
    return FEED_ECUDA;
}

int client_gpu_slot_mark_end(client_gpu_slot *s, void *stream)
{
    (void)s;
    (void)stream;
    return FEED_ECUDA;
}

int client_gpu_slot_step_ns(client_gpu_slot *s, uint64_t *ns)
{
    (void)s;
    (void)ns;
    return FEED_ECUDA;
}

int client_gpu_current_device(void)
{
    return -1;
}

void client_gpu_set_device(int device)
{
    (void)device;
}
