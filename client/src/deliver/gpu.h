/*
 * The loader's CUDA delivery path, behind a C interface so the rest of the
 * client compiles without nvcc. Implemented in gpu.cu when FEED_HAVE_CUDA,
 * else by gpu_none.c (every call fails with FEED_ECUDA, device count 0).
 *
 * A client_gpu owns the loader's non-blocking copy stream on one device. A
 * client_gpu_slot owns the device buffers of one delivery slot and two events:
 * `ready` (recorded on the copy stream after copy + normalise) and `released`
 * (recorded on the caller's stream by feed_loader_release). The receiver
 * thread calls submit; the training thread calls release; never both on one
 * slot at once (the loader's slot states guarantee it).
 */
#ifndef FEED_CLIENT_GPU_H
#define FEED_CLIENT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct client_gpu client_gpu;
typedef struct client_gpu_slot client_gpu_slot;

/* Devices visible to the CUDA runtime; 0 without CUDA or without a device. */
int client_gpu_device_count(void);

int client_gpu_open(int device, client_gpu **out, char *err, size_t err_cap);
void client_gpu_close(client_gpu *g); /* accepts NULL */
/* Make g's device current in the calling thread. */
int client_gpu_bind_thread(client_gpu *g);
/* The calling thread's current device (-1 if none can be had), and setting it back. */
int client_gpu_current_device(void);
void client_gpu_set_device(int device); /* ignores -1 */
/* The loader's copy stream (a cudaStream_t), for tests that time it. */
void *client_gpu_copy_stream(client_gpu *g);

/* Page-locked host memory (cudaHostAlloc). FEED_ENOMEM if it cannot be had. */
int client_gpu_host_alloc(client_gpu *g, size_t bytes, void **out);
void client_gpu_host_free(void *p); /* accepts NULL */

/* Device buffers for up to max_n samples of h x w x 3, output in dtype. FEED_ENOMEM when the
 * device is out of memory; *out is set even on failure (destroy it). */
int client_gpu_slot_create(client_gpu *g, uint32_t max_n, uint32_t h, uint32_t w, feed_dtype dtype,
                           client_gpu_slot **out);
void client_gpu_slot_destroy(client_gpu_slot *s); /* accepts NULL */
/* Blocks until the slot's last copy has read its pinned host buffers. */
int client_gpu_slot_host_wait(client_gpu_slot *s);
/*
 * On the copy stream: wait for the slot's release event, copy n samples of
 * pinned uint8 HWC pixels and n int64 labels to the device, normalise into
 * the output buffer, record the ready event. Does not block the host.
 */
int client_gpu_slot_submit(client_gpu *g, client_gpu_slot *s, const uint8_t *raw_pinned,
                           const int64_t *labels_pinned, uint32_t n, feed_layout layout,
                           const float mean[3], const float std[3]);
void *client_gpu_slot_data(client_gpu_slot *s);
const int64_t *client_gpu_slot_labels(client_gpu_slot *s);
void *client_gpu_slot_ready_event(client_gpu_slot *s);
/* Record the release point on `stream` (cudaStream_t; NULL: the legacy default stream). */
int client_gpu_slot_release(client_gpu_slot *s, void *stream);
/* Make `stream` (NULL: the legacy default stream) wait for the slot's ready event, and record
 * there the point the step starts from (client_gpu_slot_step_ns), unless the last use's step
 * time has not been read yet (its end not reached when the caller runs ahead of the GPU): that
 * pair is kept and this use is not timed. */
int client_gpu_slot_stream_wait(client_gpu_slot *s, void *stream);
/*
 * The step's end on `stream`, recorded by the loader when the training
 * thread asks for its next batch (the step that used this slot has been
 * enqueued by then; its release may come later, when the caller frees the
 * batch, after the wait for the next one). No-op without a start recorded
 * since the last end. 0 or FEED_ECUDA.
 */
int client_gpu_slot_mark_end(client_gpu_slot *s, void *stream);
/*
 * The step's own time on the GPU, for the decode lane's share (share_policy.h):
 * from where the caller's stream passed the slot's ready event (its last
 * stream_wait) to the step's end (mark_end). 1 with *ns set when both points
 * were recorded and the end has been reached (each pair is read once); 0 when
 * there is no such pair or the stream has not reached the end yet (never
 * blocks); FEED_ECUDA on a CUDA error.
 */
int client_gpu_slot_step_ns(client_gpu_slot *s, uint64_t *ns);

#ifdef __cplusplus
}
#endif
#endif
