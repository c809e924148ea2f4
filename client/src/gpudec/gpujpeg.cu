/*
 * GPU JPEG decode (see gpujpeg.h). nvJPEG is loaded with dlopen and only the
 * calls below are looked up, so neither its header nor its library is needed
 * to build; the declarations mirror nvjpeg.h's C ABI (CUDA 11 to 13).
 *
 * decode_batch: parse each header on the host (size, hardware support,
 * limits), decode the good ones with one nvjpegDecodeBatched call into the
 * module's device arena as interleaved RGB, then one kernel writes every
 * sample of the batch. Should the batch call fail, each image is decoded
 * alone so only the bad ones fail. The arena grows to the largest batch seen
 * up to GJ_ARENA_CAP; a batch that needs more is decoded in chunks, a kernel
 * each.
 *
 * The kernel resizes as the server's engine does (server/engine/resize.h:
 * Pillow's triangle filter, its support widened by the downscale factor, the
 * window clipped to the box in train mode and to the image in eval mode),
 * but from the full-size image where the server decoded at N/8 scale, and in
 * float with one rounding where the server rounds after each pass; above
 * GJ_MAX_TAPS taps an axis samples its window at an even stride.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

extern "C" {
#include "feed/eval_box.h"
}
#include "gpujpeg.h"

/* ---- the part of nvjpeg.h this module calls ---------------------------------------------- */

typedef int nvjpegStatus_t;
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
typedef struct {
    unsigned char *channel[4];
    size_t pitch[4];
} nvjpegImage_t;
enum { NVJPEG_STATUS_SUCCESS = 0, NVJPEG_BACKEND_HARDWARE = 3, NVJPEG_OUTPUT_RGBI = 5 };
enum { NVJPEG_MAX_COMPONENT = 4 };

struct nvjpeg_api {
    void *lib;
    nvjpegStatus_t (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags,
                                nvjpegHandle_t *h);
    nvjpegStatus_t (*destroy)(nvjpegHandle_t h);
    nvjpegStatus_t (*state_create)(nvjpegHandle_t h, nvjpegJpegState_t *s);
    nvjpegStatus_t (*state_destroy)(nvjpegJpegState_t s);
    nvjpegStatus_t (*stream_create)(nvjpegHandle_t h, nvjpegJpegStream_t *s);
    nvjpegStatus_t (*stream_destroy)(nvjpegJpegStream_t s);
    nvjpegStatus_t (*parse_header)(nvjpegHandle_t h, const unsigned char *data, size_t len,
                                   nvjpegJpegStream_t s);
    nvjpegStatus_t (*batched_supported)(nvjpegHandle_t h, nvjpegJpegStream_t s, int *no);
    nvjpegStatus_t (*image_info)(nvjpegHandle_t h, const unsigned char *data, size_t len,
                                 int *ncomp, int *subsampling, int *widths, int *heights);
    nvjpegStatus_t (*batched_init)(nvjpegHandle_t h, nvjpegJpegState_t s, int batch,
                                   int max_cpu_threads, int format);
    nvjpegStatus_t (*batched_decode)(nvjpegHandle_t h, nvjpegJpegState_t s,
                                     const unsigned char *const *data, const size_t *lens,
                                     nvjpegImage_t *dst, cudaStream_t st);
};

/* ---- the kernel --------------------------------------------------------------------------- */

#define GJ_MAX_TAPS 32                 /* samples per axis and output pixel */
#define GJ_ARENA_CAP ((size_t)1 << 30) /* decoded RGB bytes held at once */

/* One sample: where its decoded image is, the box, the window the filter may read. */
struct gj_job {
    unsigned long long off;  /* byte offset of the RGB image in the arena */
    uint32_t w;              /* decoded width (row pitch 3 * w) */
    uint32_t out_index;      /* sample index in the output */
    uint32_t c0, c1, r0, r1; /* window in source pixels */
    float bx0, by0;          /* box origin, relative to (c0, r0) */
    float sx, sy;            /* source pixels per output pixel */
    uint32_t flip, ok;
};

struct gj_axis {
    int x0, step, count;
    float center, fscale, norm;
};

__device__ __forceinline__ float triangle(float x)
{
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}

__device__ __forceinline__ float axis_weight(const gj_axis &a, int k, int *pos)
{
    int p = a.x0 + k * a.step + (a.step - 1) / 2;
    *pos = p;
    return triangle(((float)p - a.center + 0.5f) / a.fscale);
}

/* Output position i of an axis whose box starts at in0 (window coordinates, window in_size). */
__device__ gj_axis axis_plan(float in0, float scale, int in_size, int i)
{
    gj_axis a;
    a.fscale = fmaxf(scale, 1.0f);
    a.center = in0 + ((float)i + 0.5f) * scale;
    int lo = (int)(a.center - a.fscale + 0.5f), hi = (int)(a.center + a.fscale + 0.5f);
    lo = lo < 0 ? 0 : lo;
    hi = hi > in_size ? in_size : hi;
    if (hi <= lo) {
        lo = (int)floorf(a.center);
        lo = lo > in_size - 1 ? in_size - 1 : (lo < 0 ? 0 : lo);
        hi = lo + 1;
    }
    int n = hi - lo;
    a.x0 = lo;
    a.step = (n + GJ_MAX_TAPS - 1) / GJ_MAX_TAPS;
    a.count = (n + a.step - 1) / a.step;
    float sum = 0.0f;
    int pos;
    for (int k = 0; k < a.count; k++)
        sum += axis_weight(a, k, &pos);
    a.norm = sum > 0.0f ? 1.0f / sum : 0.0f;
    return a;
}

template <int DT> __device__ __forceinline__ void put(void *out, size_t o, uint8_t p, float v)
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

/* One thread per output pixel; blockIdx.z is the job. */
template <int DT, int LAYOUT>
__global__ void crop_kernel(const uint8_t *__restrict__ arena, const gj_job *__restrict__ jobs,
                            void *__restrict__ out, uint32_t oh, uint32_t ow, float3 mean,
                            float3 stdv)
{
    const gj_job j = jobs[blockIdx.z];
    uint32_t x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= ow || y >= oh)
        return;
    uint8_t px[3] = {0, 0, 0};
    if (j.ok) {
        uint32_t sx_i = j.flip ? ow - 1 - x : x;
        gj_axis ax = axis_plan(j.bx0, j.sx, (int)(j.c1 - j.c0), (int)sx_i);
        gj_axis ay = axis_plan(j.by0, j.sy, (int)(j.r1 - j.r0), (int)y);
        float wx[GJ_MAX_TAPS];
        int cx[GJ_MAX_TAPS];
        for (int k = 0; k < ax.count; k++)
            wx[k] = axis_weight(ax, k, &cx[k]) * ax.norm;
        float acc[3] = {0.0f, 0.0f, 0.0f};
        const uint8_t *img = arena + j.off;
        size_t pitch = (size_t)j.w * 3;
        for (int ky = 0; ky < ay.count; ky++) {
            int ry;
            float wy = axis_weight(ay, ky, &ry) * ay.norm;
            if (wy == 0.0f)
                continue;
            const uint8_t *row = img + (size_t)(j.r0 + ry) * pitch + (size_t)j.c0 * 3;
            float r[3] = {0.0f, 0.0f, 0.0f};
            for (int k = 0; k < ax.count; k++) {
                const uint8_t *p = row + (size_t)cx[k] * 3;
                r[0] += wx[k] * p[0];
                r[1] += wx[k] * p[1];
                r[2] += wx[k] * p[2];
            }
            acc[0] += wy * r[0];
            acc[1] += wy * r[1];
            acc[2] += wy * r[2];
        }
        for (int c = 0; c < 3; c++) {
            int v = __float2int_rn(acc[c]);
            px[c] = (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
        }
    }
    size_t plane = (size_t)oh * ow;
    for (int c = 0; c < 3; c++) {
        float m = c == 0 ? mean.x : (c == 1 ? mean.y : mean.z);
        float sd = c == 0 ? stdv.x : (c == 1 ? stdv.y : stdv.z);
        float v = ((float)px[c] / 255.0f - m) / sd;
        size_t o = LAYOUT == FEED_LAYOUT_NCHW
                       ? ((size_t)j.out_index * 3 + c) * plane + (size_t)y * ow + x
                       : (((size_t)j.out_index * oh + y) * ow + x) * 3 + c;
        put<DT>(out, o, px[c], v);
    }
}

template <int DT>
static void launch_dt(feed_layout layout, dim3 grid, dim3 block, cudaStream_t st,
                      const uint8_t *arena, const gj_job *jobs, void *out, uint32_t oh, uint32_t ow,
                      float3 m, float3 sd)
{
    if (layout == FEED_LAYOUT_NCHW)
        crop_kernel<DT, FEED_LAYOUT_NCHW><<<grid, block, 0, st>>>(arena, jobs, out, oh, ow, m, sd);
    else
        crop_kernel<DT, FEED_LAYOUT_NHWC><<<grid, block, 0, st>>>(arena, jobs, out, oh, ow, m, sd);
}

/* ---- the module --------------------------------------------------------------------------- */

struct client_gpujpeg {
    int device;
    cudaStream_t stream;
    nvjpeg_api api;
    nvjpegHandle_t handle;
    nvjpegJpegState_t state;
    nvjpegJpegStream_t parse;
    int batch_inited; /* the batch size nvjpegDecodeBatchedInitialize was last given; 0: none */
    uint8_t *arena;
    size_t arena_cap;
    gj_job *d_jobs; /* CLIENT_GPUJPEG_MAX_BATCH entries */
};

/* Makes a device current for a scope and restores the caller's device after it. */
class gj_device_scope
{
  public:
    explicit gj_device_scope(int device)
    {
        if (cudaGetDevice(&saved_) != cudaSuccess)
            saved_ = -1;
        if (saved_ != device)
            cudaSetDevice(device);
    }
    ~gj_device_scope()
    {
        if (saved_ >= 0)
            cudaSetDevice(saved_);
    }

  private:
    int saved_;
};

static bool load_api(nvjpeg_api *a, char *why, size_t why_cap)
{
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libnvjpeg.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib)
        a->lib = dlopen("libnvjpeg.so", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) {
        const char *e = dlerror();
        snprintf(why, why_cap, "nvJPEG not found (libnvjpeg.so.13, libnvjpeg.so: %s)",
                 e ? e : "not found");
        return false;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&a->create_ex, "nvjpegCreateEx"},
        {(void **)&a->destroy, "nvjpegDestroy"},
        {(void **)&a->state_create, "nvjpegJpegStateCreate"},
        {(void **)&a->state_destroy, "nvjpegJpegStateDestroy"},
        {(void **)&a->stream_create, "nvjpegJpegStreamCreate"},
        {(void **)&a->stream_destroy, "nvjpegJpegStreamDestroy"},
        {(void **)&a->parse_header, "nvjpegJpegStreamParseHeader"},
        {(void **)&a->batched_supported, "nvjpegDecodeBatchedSupported"},
        {(void **)&a->image_info, "nvjpegGetImageInfo"},
        {(void **)&a->batched_init, "nvjpegDecodeBatchedInitialize"},
        {(void **)&a->batched_decode, "nvjpegDecodeBatched"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(a->lib, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, why_cap, "nvJPEG lacks %s", syms[i].name);
            dlclose(a->lib);
            a->lib = NULL;
            return false;
        }
    }
    return true;
}

extern "C" void client_gpujpeg_close(client_gpujpeg *h)
{
    if (!h)
        return;
    gj_device_scope ds(h->device);
    if (h->stream)
        cudaStreamSynchronize(h->stream);
    if (h->parse)
        h->api.stream_destroy(h->parse);
    if (h->state)
        h->api.state_destroy(h->state);
    if (h->handle)
        h->api.destroy(h->handle);
    cudaFree(h->arena);
    cudaFree(h->d_jobs);
    if (h->stream)
        cudaStreamDestroy(h->stream);
    if (h->api.lib)
        dlclose(h->api.lib);
    free(h);
}

extern "C" int client_gpujpeg_open(int device, client_gpujpeg **out, char *why, size_t why_cap)
{
    *out = NULL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (device < 0 || device >= n) {
        snprintf(why, why_cap, "CUDA device %d not present (%d found)", device, n);
        return FEED_ECUDA;
    }
    client_gpujpeg *h = (client_gpujpeg *)calloc(1, sizeof *h);
    if (!h) {
        snprintf(why, why_cap, "out of memory");
        return FEED_ENOMEM;
    }
    h->device = device;
    if (!load_api(&h->api, why, why_cap)) {
        free(h);
        return FEED_ECUDA;
    }
    gj_device_scope ds(device);
    int least = 0, greatest = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithPriority(&h->stream, cudaStreamNonBlocking, least);
    if (e == cudaSuccess)
        e = cudaMalloc(&h->d_jobs, CLIENT_GPUJPEG_MAX_BATCH * sizeof(gj_job));
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(why, why_cap, "CUDA: %s", cudaGetErrorString(e));
        client_gpujpeg_close(h);
        return FEED_ECUDA;
    }
    nvjpegStatus_t s = h->api.create_ex(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &h->handle);
    if (s != NVJPEG_STATUS_SUCCESS) {
        h->handle = NULL;
        snprintf(why, why_cap,
                 "nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE) gave status %d: no JPEG engine on "
                 "CUDA device %d",
                 s, device);
        client_gpujpeg_close(h);
        return FEED_ECUDA;
    }
    if ((s = h->api.state_create(h->handle, &h->state)) != NVJPEG_STATUS_SUCCESS ||
        (s = h->api.stream_create(h->handle, &h->parse)) != NVJPEG_STATUS_SUCCESS) {
        snprintf(why, why_cap, "nvJPEG state or stream creation gave status %d", s);
        client_gpujpeg_close(h);
        return FEED_ECUDA;
    }
    *out = h;
    return 0;
}

extern "C" void *client_gpujpeg_stream(client_gpujpeg *h)
{
    return h->stream;
}

/* The header check: FEED_SAMPLE_OK with the size, or why the engine cannot take it. */
static feed_sample_status check_image(client_gpujpeg *h, const uint8_t *jpeg, size_t len,
                                      uint32_t *w, uint32_t *hgt)
{
    if (!jpeg || len == 0)
        return FEED_SAMPLE_EMPTY;
    if (len < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8)
        return FEED_SAMPLE_NOT_JPEG;
    if (h->api.parse_header(h->handle, jpeg, len, h->parse) != NVJPEG_STATUS_SUCCESS)
        return FEED_SAMPLE_CORRUPT;
    int ncomp = 0, sub = 0, ws[NVJPEG_MAX_COMPONENT] = {0}, hs[NVJPEG_MAX_COMPONENT] = {0};
    if (h->api.image_info(h->handle, jpeg, len, &ncomp, &sub, ws, hs) != NVJPEG_STATUS_SUCCESS)
        return FEED_SAMPLE_CORRUPT;
    if (ws[0] <= 0 || hs[0] <= 0)
        return FEED_SAMPLE_CORRUPT;
    if ((uint64_t)ws[0] * (uint64_t)hs[0] > CLIENT_GPUJPEG_MAX_PIXELS)
        return FEED_SAMPLE_TOO_LARGE;
    int no = 1;
    if ((ncomp != 1 && ncomp != 3) ||
        h->api.batched_supported(h->handle, h->parse, &no) != NVJPEG_STATUS_SUCCESS || no != 0)
        return FEED_SAMPLE_UNSUPPORTED;
    *w = (uint32_t)ws[0];
    *hgt = (uint32_t)hs[0];
    return FEED_SAMPLE_OK;
}

extern "C" bool client_gpujpeg_supported(client_gpujpeg *h, const uint8_t *jpeg, size_t len,
                                         uint32_t *w, uint32_t *hgt)
{
    gj_device_scope ds(h->device);
    return check_image(h, jpeg, len, w, hgt) == FEED_SAMPLE_OK;
}

/* The box and window of sample i, as the server's engine_map_window puts them at scale 1. */
static void plan_job(const feed_transform *t, const feed_sample_plan *p, uint32_t w, uint32_t hgt,
                     gj_job *j)
{
    double box[4];
    bool eval = t->mode == FEED_TRANSFORM_EVAL;
    if (eval) {
        feed_plan_eval_box(t, w, hgt, box);
    } else {
        box[0] = p->crop.x;
        box[1] = p->crop.y;
        box[2] = (double)p->crop.x + p->crop.w;
        box[3] = (double)p->crop.y + p->crop.h;
    }
    box[2] = fmin(box[2], (double)w);
    box[3] = fmin(box[3], (double)hgt);
    double mx = eval ? fmax(1.0, (box[2] - box[0]) / t->out_w) + 1.0 : 0.0;
    double my = eval ? fmax(1.0, (box[3] - box[1]) / t->out_h) + 1.0 : 0.0;
    j->c0 = (uint32_t)fmax(floor(box[0] - mx), 0.0);
    j->c1 = (uint32_t)fmin(ceil(box[2] + mx), (double)w);
    j->r0 = (uint32_t)fmax(floor(box[1] - my), 0.0);
    j->r1 = (uint32_t)fmin(ceil(box[3] + my), (double)hgt);
    j->bx0 = (float)(box[0] - j->c0);
    j->by0 = (float)(box[1] - j->r0);
    j->sx = (float)((box[2] - box[0]) / t->out_w);
    j->sy = (float)((box[3] - box[1]) / t->out_h);
    j->flip = p->flip ? 1u : 0u;
}

static int grow_arena(client_gpujpeg *h, size_t need)
{
    if (need <= h->arena_cap)
        return 0;
    size_t cap = (need + (((size_t)64 << 20) - 1)) & ~(((size_t)64 << 20) - 1);
    cap = cap > GJ_ARENA_CAP ? GJ_ARENA_CAP : cap;
    if (cudaStreamSynchronize(h->stream) != cudaSuccess)
        return FEED_ECUDA;
    cudaFree(h->arena);
    h->arena = NULL;
    h->arena_cap = 0;
    if (cudaMalloc(&h->arena, cap) != cudaSuccess) {
        cudaGetLastError();
        h->arena = NULL;
        return FEED_ENOMEM;
    }
    h->arena_cap = cap;
    return 0;
}

/* nvjpegDecodeBatched over idx[0..k), re-initialising the batch size when it changed. */
static bool decode_some(client_gpujpeg *h, const client_gpujpeg_batch *b, const uint32_t *idx,
                        uint32_t k, std::vector<gj_job> &jobs)
{
    if (h->batch_inited != (int)k) {
        if (h->api.batched_init(h->handle, h->state, (int)k, 1, NVJPEG_OUTPUT_RGBI) !=
            NVJPEG_STATUS_SUCCESS) {
            h->batch_inited = 0;
            return false;
        }
        h->batch_inited = (int)k;
    }
    std::vector<const unsigned char *> data(k);
    std::vector<size_t> lens(k);
    std::vector<nvjpegImage_t> dst(k);
    for (uint32_t i = 0; i < k; i++) {
        const gj_job &j = jobs[idx[i]];
        data[i] = b->jpeg[idx[i]];
        lens[i] = b->len[idx[i]];
        memset(&dst[i], 0, sizeof dst[i]);
        dst[i].channel[0] = h->arena + j.off;
        dst[i].pitch[0] = (size_t)j.w * 3;
    }
    return h->api.batched_decode(h->handle, h->state, data.data(), lens.data(), dst.data(),
                                 h->stream) == NVJPEG_STATUS_SUCCESS;
}

/* Write the samples jl[0..k) into b->dst (one kernel) and wait for the stream. */
static int write_samples(client_gpujpeg *h, const client_gpujpeg_batch *b, const gj_job *jl,
                         uint32_t k)
{
    if (k == 0)
        return 0;
    if (cudaMemcpyAsync(h->d_jobs, jl, k * sizeof(gj_job), cudaMemcpyHostToDevice, h->stream) !=
        cudaSuccess)
        return FEED_ECUDA;
    if (b->dst_after &&
        cudaStreamWaitEvent(h->stream, (cudaEvent_t)b->dst_after, 0) != cudaSuccess)
        return FEED_ECUDA;
    uint32_t oh = b->t->out_h, ow = b->t->out_w;
    dim3 block(32, 8, 1), grid((ow + 31) / 32, (oh + 7) / 8, k);
    float3 m = make_float3(0.0f, 0.0f, 0.0f), sd = make_float3(1.0f, 1.0f, 1.0f);
    if (b->dtype != FEED_DTYPE_UINT8) {
        m = make_float3(b->mean[0], b->mean[1], b->mean[2]);
        sd = make_float3(b->std[0], b->std[1], b->std[2]);
    }
    const uint8_t *a = h->arena;
    switch (b->dtype) {
    case FEED_DTYPE_UINT8:
        launch_dt<FEED_DTYPE_UINT8>(b->layout, grid, block, h->stream, a, h->d_jobs, b->dst, oh, ow,
                                    m, sd);
        break;
    case FEED_DTYPE_FP16:
        launch_dt<FEED_DTYPE_FP16>(b->layout, grid, block, h->stream, a, h->d_jobs, b->dst, oh, ow,
                                   m, sd);
        break;
    case FEED_DTYPE_BF16:
        launch_dt<FEED_DTYPE_BF16>(b->layout, grid, block, h->stream, a, h->d_jobs, b->dst, oh, ow,
                                   m, sd);
        break;
    case FEED_DTYPE_FP32:
    default:
        launch_dt<FEED_DTYPE_FP32>(b->layout, grid, block, h->stream, a, h->d_jobs, b->dst, oh, ow,
                                   m, sd);
        break;
    }
    if (cudaGetLastError() != cudaSuccess || cudaStreamSynchronize(h->stream) != cudaSuccess)
        return FEED_ECUDA;
    return 0;
}

/* Decode the chunk good[0..k) into the arena; a failed batch call is retried image by image. */
static void decode_chunk(client_gpujpeg *h, const client_gpujpeg_batch *b, const uint32_t *good,
                         uint32_t k, std::vector<gj_job> &jobs, feed_sample_status *status)
{
    if (decode_some(h, b, good, k, jobs))
        return;
    cudaGetLastError();
    for (uint32_t i = 0; i < k; i++) {
        if (decode_some(h, b, &good[i], 1, jobs))
            continue;
        cudaGetLastError();
        jobs[good[i]].ok = 0;
        status[good[i]] = FEED_SAMPLE_CORRUPT;
    }
}

static bool batch_valid(const client_gpujpeg_batch *b)
{
    if (!b || b->n == 0 || b->n > CLIENT_GPUJPEG_MAX_BATCH || !b->jpeg || !b->len || !b->plan ||
        !b->t || !b->dst)
        return false;
    if (b->dtype != FEED_DTYPE_UINT8 && (!b->mean || !b->std))
        return false;
    return b->t->out_h >= FEED_TRANSFORM_MIN_SIDE && b->t->out_h <= FEED_TRANSFORM_MAX_SIDE &&
           b->t->out_w >= FEED_TRANSFORM_MIN_SIDE && b->t->out_w <= FEED_TRANSFORM_MAX_SIDE &&
           (unsigned)b->dtype <= FEED_DTYPE_FP32 && (unsigned)b->layout <= FEED_LAYOUT_NHWC;
}

static int fail_all(const client_gpujpeg_batch *b, feed_sample_status *status, int rc)
{
    for (uint32_t i = 0; b && i < b->n && i < CLIENT_GPUJPEG_MAX_BATCH; i++)
        status[i] = FEED_SAMPLE_UNSUPPORTED;
    return rc;
}

static int decode_batch(client_gpujpeg *h, const client_gpujpeg_batch *b,
                        feed_sample_status *status)
{
    uint32_t n = b->n;
    std::vector<gj_job> jobs(n);
    std::vector<uint32_t> good, failed;
    std::vector<size_t> bytes(n, 0);
    for (uint32_t i = 0; i < n; i++) {
        gj_job &j = jobs[i];
        memset(&j, 0, sizeof j);
        j.out_index = b->pos ? b->pos[i] : i;
        uint32_t w = 0, hgt = 0;
        status[i] = check_image(h, b->jpeg[i], b->len[i], &w, &hgt);
        if (status[i] != FEED_SAMPLE_OK) {
            failed.push_back(i);
            continue;
        }
        plan_job(b->t, &b->plan[i], w, hgt, &j);
        j.w = w;
        j.ok = 1;
        bytes[i] = ((size_t)w * hgt * 3 + 255) & ~(size_t)255;
        good.push_back(i);
    }
    std::vector<gj_job> launch;
    for (uint32_t i : failed)
        launch.push_back(jobs[i]);
    size_t pos = 0;
    do {
        uint32_t k = 0;
        size_t off = 0;
        while (pos + k < good.size() && (k == 0 || off + bytes[good[pos + k]] <= GJ_ARENA_CAP)) {
            jobs[good[pos + k]].off = off;
            off += bytes[good[pos + k]];
            k++;
        }
        int rc = k ? grow_arena(h, off) : 0;
        if (rc == FEED_ECUDA)
            return fail_all(b, status, rc);
        if (rc == FEED_ENOMEM) {
            for (uint32_t i = 0; i < k; i++) {
                jobs[good[pos + i]].ok = 0;
                status[good[pos + i]] = FEED_SAMPLE_TOO_LARGE;
            }
        } else if (k) {
            decode_chunk(h, b, &good[pos], k, jobs, status);
        }
        for (uint32_t i = 0; i < k; i++)
            launch.push_back(jobs[good[pos + i]]);
        if (write_samples(h, b, launch.data(), (uint32_t)launch.size()) != 0) {
            cudaGetLastError();
            return fail_all(b, status, FEED_ECUDA);
        }
        launch.clear();
        pos += k;
    } while (pos < good.size());
    return 0;
}

extern "C" int client_gpujpeg_decode_batch(client_gpujpeg *h, const client_gpujpeg_batch *b,
                                           feed_sample_status *status)
{
    if (!batch_valid(b))
        return fail_all(b, status, FEED_EINVAL);
    gj_device_scope ds(h->device);
    try {
        return decode_batch(h, b, status);
    } catch (...) { /* std::bad_alloc from the host-side vectors */
        return fail_all(b, status, FEED_ENOMEM);
    }
}
