/*
 * The training step feed-bench drives: a real classifier that consumes every
 * batch (pixels and labels) and whose loss falls on real data.
 *
 * Model: average-pool the normalised image to 3 x P x P features, then an MLP
 * (features -> hidden, ReLU -> classes), softmax cross-entropy, plain SGD.
 * Optional "ballast": extra bf16 GEMMs per step, calibrated at open so that a
 * step costs target_us_per_image * batch of GPU time (how presets mimic real
 * models' GPU time per image; see presets.c).
 *
 * Three implementations behind one table of functions: step_sim.c (--device
 * none: no model, only a simulated accelerator's time), step_cpu.c (no GPU; the
 * input is uint8 NHWC in host memory) and step_cuda.cu (cuBLAS on the
 * training stream; input either host uint8 NHWC, copied and normalised on a
 * copy stream, or an already-normalised fp32 NCHW device tensor from
 * libfeedclient with a ready event).
 *
 * Threads: a bench_step is used by the training thread only, except
 * step_event_sync(), which loader threads call on events they own.
 */
#ifndef FEED_BENCH_STEP_H
#define FEED_BENCH_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STEP_POOL_SIDE 16u /* features are 3 x 16 x 16 pooled means */

typedef struct step_config {
    int device; /* CUDA device, or -1 for the CPU step */
    uint32_t batch;
    uint32_t img_h, img_w;
    uint32_t num_classes;
    uint32_t hidden;
    double lr;
    double target_us_per_image; /* 0: no ballast */
    uint64_t seed;
    float mean[3], std[3];
} step_config;

/* One finished step, in submission order. */
typedef struct step_result {
    double step_ms; /* GPU time between the step's events, or CPU time of the step */
    double loss;    /* mean cross-entropy over the batch */
    uint32_t n;
    uint32_t bad_labels; /* labels >= num_classes, ignored by the loss */
} step_result;

/* What open measured and chose; printed and written into the report. */
typedef struct step_info {
    char device_name[128];
    char pci_bus_id[32]; /* "" on the CPU */
    bool on_gpu;
    double base_ms;         /* the MLP step alone */
    double ballast_gemm_ms; /* one ballast GEMM */
    uint32_t ballast_gemms; /* per step */
    double calibrated_ms;   /* the full step, measured at open */
} step_info;

typedef struct bench_step bench_step;

typedef struct step_ops {
    /* Host uint8 NHWC batch; labels n int64. On the GPU the copy is async:
     * `copy_done` (from step_event_new) is recorded when pixels and labels
     * may be overwritten. */
    int (*submit_host)(bench_step *s, const uint8_t *pixels, const int64_t *labels, uint32_t n,
                       void *copy_done);
    /* Device fp32 NCHW normalised batch (GPU only); the step waits on ready_event. */
    int (*submit_device)(bench_step *s, const void *data, const int64_t *labels_device, uint32_t n,
                         void *ready_event);
    /* Waits for the oldest step in flight; FEED_EEOF when none is. */
    int (*retire)(bench_step *s, step_result *out);
    uint32_t (*inflight)(const bench_step *s);
    void *(*stream)(bench_step *s); /* cudaStream_t of the training stream, NULL on the CPU */
    void *(*host_alloc)(bench_step *s, size_t bytes); /* pinned on the GPU path */
    void (*host_free)(bench_step *s, void *p);
    void *(*event_new)(bench_step *s);
    void (*event_sync)(bench_step *s, void *ev); /* accepts NULL; any thread */
    void (*event_free)(bench_step *s, void *ev);
    /* Fresh weights (the same as at open), so every source trains from the same start. */
    int (*reset)(bench_step *s);
    void (*close)(bench_step *s);
} step_ops;

struct bench_step {
    const step_ops *ops;
    step_info info;
};

/* Both return 0 or a negative FEED_E code with a message in err. */
int step_cpu_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap);
/* FEED_EUNSUPPORTED when built without CUDA or no device is present. */
int step_cuda_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap);
/* The simulated step (step_sim.c): only the time, cfg->target_us_per_image per image. */
int step_sim_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap);
/* Devices CUDA sees; 0 without CUDA or without a driver. */
int step_cuda_device_count(void);

static inline void step_close(bench_step *s)
{
    if (s)
        s->ops->close(s);
}

#ifdef __cplusplus
}
#endif
#endif
