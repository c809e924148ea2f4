/*
 * The loader's CUDA delivery path (see gpu.h): pinned host memory, the
 * loader's own non-blocking copy stream, the normalize kernel (uint8 HWC →
 * dtype in NCHW or NHWC, (p / 255 - mean) / std in fp32 with IEEE division,
 * then round-to-nearest-even to fp16/bf16 — bit-identical to normalize.c),
 * and the per-slot ready/released events. The receiver thread submits, the
 * training thread releases; slot states in sched.c keep them apart.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdio.h>

#include "feed/errors.h"
#include "gpu.h"

struct client_gpu {
    int device;
    cudaStream_t copy;
};

struct client_gpu_slot {
    client_gpu *g;
    uint8_t *d_raw;
    void *d_out;
    int64_t *d_labels;
    cudaEvent_t ready, released;
    cudaEvent_t started; /* where the caller's stream passed ready: the step's start */
    cudaEvent_t ended;   /* the step's end on that stream (client_gpu_slot_mark_end) */
    bool release_pending, submitted;
    bool started_recorded; /* started recorded, no end after it yet */
    bool timed;            /* started, then ended: a step time to read */
    uint32_t max_n, h, w;
    feed_dtype dtype;
};

/* Makes a device current for a scope and restores the caller's device after it. */
class device_scope
{
  public:
    explicit device_scope(int device)
    {
        if (cudaGetDevice(&saved_) != cudaSuccess)
            saved_ = -1;
        if (saved_ != device)
            cudaSetDevice(device);
    }
    ~device_scope()
    {
        if (saved_ >= 0)
            cudaSetDevice(saved_);
    }

  private:
    int saved_;
};

template <int DT> __device__ __forceinline__ void store(void *out, size_t o, uint8_t p, float v)
{
    if (DT == FEED_DTYPE_UINT8)
        static_cast<uint8_t *>(out)[o] = p;
    else if (DT == FEED_DTYPE_FP16)
        static_cast<uint16_t *>(out)[o] = __half_as_ushort(__float2half_rn(v));
    else if (DT == FEED_DTYPE_BF16)
        static_cast<uint16_t *>(out)[o] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    else
        static_cast<float *>(out)[o] = v;
}

/* One thread per output element, so writes are coalesced in either layout. */
template <int DT, int LAYOUT>
__global__ void normalize_kernel(const uint8_t *__restrict__ raw, void *__restrict__ out,
                                 size_t total, uint32_t plane, float3 mean, float3 stdv)
{
    for (size_t o = blockIdx.x * (size_t)blockDim.x + threadIdx.x; o < total;
         o += (size_t)gridDim.x * blockDim.x) {
        uint32_t c;
        size_t in;
        if (LAYOUT == FEED_LAYOUT_NCHW) {
            size_t s = o / (3ull * plane);
            size_t r = o - s * 3ull * plane;
            c = (uint32_t)(r / plane);
            size_t pix = r - (size_t)c * plane;
            in = (s * plane + pix) * 3 + c;
        } else {
            c = (uint32_t)(o % 3);
            in = o;
        }
        uint8_t p = raw[in];
        float m = c == 0 ? mean.x : (c == 1 ? mean.y : mean.z);
        float sd = c == 0 ? stdv.x : (c == 1 ? stdv.y : stdv.z);
        float v = ((float)p / 255.0f - m) / sd;
        store<DT>(out, o, p, v);
    }
}

template <int DT>
static void launch_dt(feed_layout layout, const uint8_t *raw, void *out, size_t total,
                      uint32_t plane, float3 mean, float3 stdv, cudaStream_t st)
{
    unsigned threads = 256;
    size_t want = (total + threads - 1) / threads;
    unsigned blocks = want > 65535u * 8u ? 65535u * 8u : (unsigned)(want ? want : 1);
    if (layout == FEED_LAYOUT_NCHW)
        normalize_kernel<DT, FEED_LAYOUT_NCHW>
            <<<blocks, threads, 0, st>>>(raw, out, total, plane, mean, stdv);
    else
        normalize_kernel<DT, FEED_LAYOUT_NHWC>
            <<<blocks, threads, 0, st>>>(raw, out, total, plane, mean, stdv);
}

static size_t dtype_size(feed_dtype d)
{
    return d == FEED_DTYPE_FP32 ? 4 : (d == FEED_DTYPE_UINT8 ? 1 : 2);
}

extern "C" int client_gpu_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" int client_gpu_open(int device, client_gpu **out, char *err, size_t err_cap)
{
    *out = NULL;
    int n = client_gpu_device_count();
    if (device < 0 || device >= n) {
        snprintf(err, err_cap, "CUDA device %d not present (%d found)", device, n);
        return FEED_ECUDA;
    }
    client_gpu *g = (client_gpu *)calloc(1, sizeof(*g));
    if (!g)
        return FEED_ENOMEM;
    g->device = device;
    device_scope ds(device);
    cudaError_t e = cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, err_cap, "cudaStreamCreate: %s", cudaGetErrorString(e));
        free(g);
        return FEED_ECUDA;
    }
    *out = g;
    return 0;
}

extern "C" void client_gpu_close(client_gpu *g)
{
    if (!g)
        return;
    device_scope ds(g->device);
    cudaStreamSynchronize(g->copy);
    cudaStreamDestroy(g->copy);
    free(g);
}

extern "C" int client_gpu_bind_thread(client_gpu *g)
{
    return cudaSetDevice(g->device) == cudaSuccess ? 0 : FEED_ECUDA;
}

extern "C" int client_gpu_current_device(void)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess) {
        cudaGetLastError();
        d = -1;
    }
    return d;
}

extern "C" void client_gpu_set_device(int device)
{
    if (device >= 0)
        cudaSetDevice(device);
}

extern "C" void *client_gpu_copy_stream(client_gpu *g)
{
    return g->copy;
}

extern "C" int client_gpu_host_alloc(client_gpu *g, size_t bytes, void **out)
{
    device_scope ds(g->device);
    *out = NULL;
    cudaError_t e = cudaHostAlloc(out, bytes, cudaHostAllocPortable);
    /* A failed allocation stays the thread's last error; submit checks that after its launch,
     * so leave it set and a later batch on this thread would fail as a CUDA error. */
    if (e != cudaSuccess)
        cudaGetLastError();
    return e == cudaSuccess ? 0 : FEED_ENOMEM;
}

extern "C" void client_gpu_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int client_gpu_slot_create(client_gpu *g, uint32_t max_n, uint32_t h, uint32_t w,
                                      feed_dtype dtype, client_gpu_slot **out)
{
    device_scope ds(g->device);
    client_gpu_slot *s = (client_gpu_slot *)calloc(1, sizeof(*s));
    *out = NULL;
    if (!s)
        return FEED_ENOMEM;
    s->g = g;
    s->max_n = max_n;
    s->h = h;
    s->w = w;
    s->dtype = dtype;
    size_t elems = (size_t)max_n * h * w * 3;
    cudaError_t e = cudaMalloc(&s->d_raw, elems);
    if (e == cudaSuccess)
        e = cudaMalloc(&s->d_out, elems * dtype_size(dtype));
    if (e == cudaSuccess)
        e = cudaMalloc(&s->d_labels, max_n * sizeof(int64_t));
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&s->released, cudaEventDisableTiming);
    /* started and ended time the step (client_gpu_slot_step_ns). */
    if (e == cudaSuccess)
        e = cudaEventCreate(&s->started);
    if (e == cudaSuccess)
        e = cudaEventCreate(&s->ended);
    /* As in client_gpu_host_alloc: out of memory must not linger as the thread's last error. */
    if (e != cudaSuccess)
        cudaGetLastError();
    *out = s;
    return e == cudaSuccess ? 0 : (e == cudaErrorMemoryAllocation ? FEED_ENOMEM : FEED_ECUDA);
}

extern "C" void client_gpu_slot_destroy(client_gpu_slot *s)
{
    if (!s)
        return;
    device_scope ds(s->g->device);
    if (s->submitted)
        cudaEventSynchronize(s->ready);
    cudaFree(s->d_raw);
    cudaFree(s->d_out);
    cudaFree(s->d_labels);
    if (s->ready)
        cudaEventDestroy(s->ready);
    if (s->released)
        cudaEventDestroy(s->released);
    if (s->started)
        cudaEventDestroy(s->started);
    if (s->ended)
        cudaEventDestroy(s->ended);
    free(s);
}

extern "C" int client_gpu_slot_host_wait(client_gpu_slot *s)
{
    if (!s->submitted)
        return 0;
    return cudaEventSynchronize(s->ready) == cudaSuccess ? 0 : FEED_ECUDA;
}

extern "C" int client_gpu_slot_submit(client_gpu *g, client_gpu_slot *s, const uint8_t *raw_pinned,
                                      const int64_t *labels_pinned, uint32_t n, feed_layout layout,
                                      const float mean[3], const float std[3])
{
    if (n > s->max_n)
        return FEED_EINVAL;
    cudaStream_t st = g->copy;
    if (s->release_pending && cudaStreamWaitEvent(st, s->released, 0) != cudaSuccess)
        return FEED_ECUDA;
    s->release_pending = false;
    size_t plane = (size_t)s->h * s->w;
    size_t elems = (size_t)n * plane * 3;
    if (cudaMemcpyAsync(s->d_raw, raw_pinned, elems, cudaMemcpyHostToDevice, st) != cudaSuccess ||
        cudaMemcpyAsync(s->d_labels, labels_pinned, n * sizeof(int64_t), cudaMemcpyHostToDevice,
                        st) != cudaSuccess)
        return FEED_ECUDA;
    float3 m = make_float3(mean[0], mean[1], mean[2]);
    float3 sd = make_float3(std[0], std[1], std[2]);
    switch (s->dtype) {
    case FEED_DTYPE_UINT8:
        launch_dt<FEED_DTYPE_UINT8>(layout, s->d_raw, s->d_out, elems, (uint32_t)plane, m, sd, st);
        break;
    case FEED_DTYPE_FP16:
        launch_dt<FEED_DTYPE_FP16>(layout, s->d_raw, s->d_out, elems, (uint32_t)plane, m, sd, st);
        break;
    case FEED_DTYPE_BF16:
        launch_dt<FEED_DTYPE_BF16>(layout, s->d_raw, s->d_out, elems, (uint32_t)plane, m, sd, st);
        break;
    case FEED_DTYPE_FP32:
    default:
        launch_dt<FEED_DTYPE_FP32>(layout, s->d_raw, s->d_out, elems, (uint32_t)plane, m, sd, st);
        break;
    }
    if (cudaGetLastError() != cudaSuccess || cudaEventRecord(s->ready, st) != cudaSuccess)
        return FEED_ECUDA;
    s->submitted = true;
    return 0;
}

extern "C" void *client_gpu_slot_data(client_gpu_slot *s)
{
    return s->d_out;
}

extern "C" const int64_t *client_gpu_slot_labels(client_gpu_slot *s)
{
    return s->d_labels;
}

extern "C" void *client_gpu_slot_ready_event(client_gpu_slot *s)
{
    return s->ready;
}

extern "C" int client_gpu_slot_release(client_gpu_slot *s, void *stream)
{
    /* NULL is the legacy default stream (handle 0), where PyTorch's default stream runs: the
     * step may still read the slot, so the copy stream (non-blocking, so not implicitly ordered
     * after it) must wait for this point too. Named explicitly so that a build with per-thread
     * default streams still means the legacy one, on the slot's device. */
    device_scope ds(s->g->device);
    cudaStream_t st = stream ? (cudaStream_t)stream : cudaStreamLegacy;
    if (cudaEventRecord(s->released, st) != cudaSuccess)
        return FEED_ECUDA;
    s->release_pending = true;
    return 0;
}

extern "C" int client_gpu_slot_stream_wait(client_gpu_slot *s, void *stream)
{
    device_scope ds(s->g->device);
    cudaStream_t st = stream ? (cudaStream_t)stream : cudaStreamLegacy;
    if (cudaStreamWaitEvent(st, s->ready, 0) != cudaSuccess)
        return FEED_ECUDA;
    /* A caller that runs ahead of the GPU (a PyTorch loop) uses the slot again while the step
     * of its last use still runs: that pair is kept until read, and this use goes untimed
     * (re-recording started would pair it with the old end). */
    if (s->timed)
        return 0;
    if (cudaEventRecord(s->started, st) != cudaSuccess)
        return FEED_ECUDA;
    s->started_recorded = true;
    return 0;
}

extern "C" int client_gpu_slot_mark_end(client_gpu_slot *s, void *stream)
{
    if (!s->started_recorded)
        return 0;
    device_scope ds(s->g->device);
    cudaStream_t st = stream ? (cudaStream_t)stream : cudaStreamLegacy;
    if (cudaEventRecord(s->ended, st) != cudaSuccess)
        return FEED_ECUDA;
    s->started_recorded = false;
    s->timed = true;
    return 0;
}

extern "C" int client_gpu_slot_step_ns(client_gpu_slot *s, uint64_t *ns)
{
    if (!s->timed)
        return 0;
    device_scope ds(s->g->device);
    cudaError_t e = cudaEventQuery(s->ended);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: the step is still running */
        return 0;
    }
    float ms = 0;
    if (e != cudaSuccess || cudaEventElapsedTime(&ms, s->started, s->ended) != cudaSuccess)
        return FEED_ECUDA;
    s->timed = false;
    *ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 0;
    return 1;
}
