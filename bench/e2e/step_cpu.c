/*
 * The CPU training step (no GPU, or --device cpu): the same model as the CUDA
 * step — pooled features, MLP, softmax cross-entropy, SGD — in plain C, run
 * synchronously on the training thread. Sized so that a 2-core machine runs
 * the whole comparison in a minute or two; it exists to prove the pipeline
 * end to end (the loss falls), not to stand in for a GPU's speed.
 *
 * Owns its weights and scratch; used by the training thread only.
 */
#include "step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/errors.h"
#include "feed/rng.h"
#include "feed/timeutil.h"

#define CPU_MAX_BATCH 4096u
#define CPU_RESULTS 4u /* finished steps not yet retired, like the GPU's records */

typedef struct cpu_step {
    bench_step base;
    step_config cfg;
    uint32_t feat;                /* 3 * STEP_POOL_SIDE^2 */
    float *w1, *b1, *w2, *b2;     /* feat x hidden, hidden, hidden x classes, classes */
    float *x, *z1, *a1, *logits;  /* activations, batch rows */
    float *dz1, *dlogits;         /* gradients of activations */
    float *gw1, *gb1, *gw2, *gb2; /* gradients of parameters */
    step_result results[CPU_RESULTS];
    uint32_t res_head, res_count;
} cpu_step;

static void pool_features(const cpu_step *s, const uint8_t *img, float *x)
{
    const uint32_t side = STEP_POOL_SIDE, h = s->cfg.img_h, w = s->cfg.img_w;
    for (uint32_t py = 0; py < side; py++) {
        uint32_t y0 = py * h / side, y1 = (py + 1) * h / side;
        for (uint32_t px = 0; px < side; px++) {
            uint32_t x0 = px * w / side, x1 = (px + 1) * w / side;
            uint64_t sum[3] = {0, 0, 0};
            for (uint32_t y = y0; y < y1; y++) {
                const uint8_t *row = img + ((size_t)y * w + x0) * 3;
                for (uint32_t xx = 0; xx < x1 - x0; xx++) {
                    sum[0] += row[3 * xx];
                    sum[1] += row[3 * xx + 1];
                    sum[2] += row[3 * xx + 2];
                }
            }
            double area = (double)(y1 - y0) * (double)(x1 - x0);
            for (int c = 0; c < 3; c++) {
                double v = (double)sum[c] / area / 255.0;
                x[(size_t)c * side * side + py * side + px] =
                    (float)((v - s->cfg.mean[c]) / s->cfg.std[c]);
            }
        }
    }
}

/* c[m x n] = a[m x k] * b[k x n] (+ c when accumulate), row-major. */
static void matmul(const float *a, const float *b, float *c, uint32_t m, uint32_t k, uint32_t n,
                   bool accumulate)
{
    if (!accumulate)
        memset(c, 0, sizeof(float) * m * n);
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t p = 0; p < k; p++) {
            float av = a[(size_t)i * k + p];
            if (av == 0.0f)
                continue;
            const float *brow = b + (size_t)p * n;
            float *crow = c + (size_t)i * n;
            for (uint32_t j = 0; j < n; j++)
                crow[j] += av * brow[j];
        }
}

/* g[k x n] = a[m x k]^T * d[m x n]. */
static void matmul_at(const float *a, const float *d, float *g, uint32_t m, uint32_t k, uint32_t n)
{
    memset(g, 0, sizeof(float) * k * n);
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t p = 0; p < k; p++) {
            float av = a[(size_t)i * k + p];
            if (av == 0.0f)
                continue;
            const float *drow = d + (size_t)i * n;
            float *grow = g + (size_t)p * n;
            for (uint32_t j = 0; j < n; j++)
                grow[j] += av * drow[j];
        }
}

/* r[m x k] = d[m x n] * b[k x n]^T. */
static void matmul_bt(const float *d, const float *b, float *r, uint32_t m, uint32_t n, uint32_t k)
{
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t p = 0; p < k; p++) {
            const float *drow = d + (size_t)i * n, *brow = b + (size_t)p * n;
            float acc = 0.0f;
            for (uint32_t j = 0; j < n; j++)
                acc += drow[j] * brow[j];
            r[(size_t)i * k + p] = acc;
        }
}

static void sgd(float *w, const float *g, size_t count, float lr)
{
    for (size_t i = 0; i < count; i++)
        w[i] -= lr * g[i];
}

static int cpu_submit_host(bench_step *base, const uint8_t *pixels, const int64_t *labels,
                           uint32_t n, void *copy_done)
{
    cpu_step *s = (cpu_step *)base;
    const uint32_t f = s->feat, hd = s->cfg.hidden, nc = s->cfg.num_classes;
    const size_t img_bytes = (size_t)s->cfg.img_h * s->cfg.img_w * 3;
    (void)copy_done;
    if (n == 0 || n > s->cfg.batch)
        return FEED_EINVAL;
    if (s->res_count == CPU_RESULTS)
        return FEED_ESTATE;
    uint64_t t0 = feed_now_ns();

    for (uint32_t i = 0; i < n; i++)
        pool_features(s, pixels + i * img_bytes, s->x + (size_t)i * f);
    matmul(s->x, s->w1, s->z1, n, f, hd, false);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < hd; j++) {
            float z = s->z1[(size_t)i * hd + j] + s->b1[j];
            s->z1[(size_t)i * hd + j] = z;
            s->a1[(size_t)i * hd + j] = z > 0.0f ? z : 0.0f;
        }
    matmul(s->a1, s->w2, s->logits, n, hd, nc, false);

    double loss = 0.0;
    uint32_t counted = 0, bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        float *lg = s->logits + (size_t)i * nc, *dl = s->dlogits + (size_t)i * nc;
        float mx = -INFINITY;
        for (uint32_t c = 0; c < nc; c++) {
            lg[c] += s->b2[c];
            mx = lg[c] > mx ? lg[c] : mx;
        }
        double z = 0.0;
        for (uint32_t c = 0; c < nc; c++)
            z += exp((double)(lg[c] - mx));
        bool ok = labels[i] >= 0 && (uint64_t)labels[i] < nc;
        for (uint32_t c = 0; c < nc; c++) {
            double p = exp((double)(lg[c] - mx)) / z;
            dl[c] = ok ? (float)((p - (c == (uint32_t)labels[i] ? 1.0 : 0.0)) / n) : 0.0f;
        }
        if (ok) {
            loss += -((double)(lg[labels[i]] - mx) - log(z));
            counted++;
        } else {
            bad++;
        }
    }

    matmul_at(s->a1, s->dlogits, s->gw2, n, hd, nc);
    memset(s->gb2, 0, sizeof(float) * nc);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t c = 0; c < nc; c++)
            s->gb2[c] += s->dlogits[(size_t)i * nc + c];
    matmul_bt(s->dlogits, s->w2, s->dz1, n, nc, hd);
    memset(s->gb1, 0, sizeof(float) * hd);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < hd; j++) {
            size_t k = (size_t)i * hd + j;
            if (s->z1[k] <= 0.0f)
                s->dz1[k] = 0.0f;
            s->gb1[j] += s->dz1[k];
        }
    matmul_at(s->x, s->dz1, s->gw1, n, f, hd);

    float lr = (float)s->cfg.lr;
    sgd(s->w1, s->gw1, (size_t)f * hd, lr);
    sgd(s->b1, s->gb1, hd, lr);
    sgd(s->w2, s->gw2, (size_t)hd * nc, lr);
    sgd(s->b2, s->gb2, nc, lr);

    step_result *res = &s->results[(s->res_head + s->res_count++) % CPU_RESULTS];
    res->step_ms = (double)(feed_now_ns() - t0) / 1e6;
    res->loss = counted ? loss / counted : 0.0;
    res->n = n;
    res->bad_labels = bad;
    return 0;
}

static int cpu_submit_device(bench_step *s, const void *data, const int64_t *labels, uint32_t n,
                             void *ready)
{
    (void)s, (void)data, (void)labels, (void)n, (void)ready;
    return FEED_EUNSUPPORTED;
}

static int cpu_retire(bench_step *base, step_result *out)
{
    cpu_step *s = (cpu_step *)base;
    if (s->res_count == 0)
        return FEED_EEOF;
    *out = s->results[s->res_head];
    s->res_head = (s->res_head + 1) % CPU_RESULTS;
    s->res_count--;
    return 0;
}

static uint32_t cpu_inflight(const bench_step *base)
{
    return ((const cpu_step *)base)->res_count;
}

static void *cpu_stream(bench_step *s)
{
    (void)s;
    return NULL;
}

static void *cpu_host_alloc(bench_step *s, size_t bytes)
{
    (void)s;
    return malloc(bytes);
}

static void cpu_host_free(bench_step *s, void *p)
{
    (void)s;
    free(p);
}

static void *cpu_event_new(bench_step *s)
{
    (void)s;
    return NULL;
}

static void cpu_event_nop(bench_step *s, void *ev)
{
    (void)s, (void)ev;
}

static void cpu_close(bench_step *base)
{
    cpu_step *s = (cpu_step *)base;
    float *bufs[] = {s->w1,     s->b1,  s->w2,      s->b2,  s->x,   s->z1,  s->a1,
                     s->logits, s->dz1, s->dlogits, s->gw1, s->gb1, s->gw2, s->gb2};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(s);
}

static void init_uniform(float *w, size_t count, uint32_t fan_in, feed_rng *r)
{
    float bound = 1.0f / sqrtf((float)fan_in);
    for (size_t i = 0; i < count; i++)
        w[i] = (float)((feed_rng_uniform(r) * 2.0 - 1.0) * bound);
}

static int cpu_reset(bench_step *base)
{
    cpu_step *s = (cpu_step *)base;
    const size_t f = s->feat, hd = s->cfg.hidden, nc = s->cfg.num_classes;
    feed_rng r;
    feed_rng_init(&r, s->cfg.seed, 0, 0);
    init_uniform(s->w1, f * hd, (uint32_t)f, &r);
    init_uniform(s->w2, hd * nc, (uint32_t)hd, &r);
    memset(s->b1, 0, hd * sizeof(float));
    memset(s->b2, 0, nc * sizeof(float));
    s->res_count = 0;
    return 0;
}

static const step_ops cpu_ops = {
    .submit_host = cpu_submit_host,
    .submit_device = cpu_submit_device,
    .retire = cpu_retire,
    .inflight = cpu_inflight,
    .stream = cpu_stream,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .event_new = cpu_event_new,
    .event_sync = cpu_event_nop,
    .event_free = cpu_event_nop,
    .reset = cpu_reset,
    .close = cpu_close,
};

int step_cpu_open(const step_config *cfg, bench_step **out, char *err, size_t err_cap)
{
    int rc = FEED_ENOMEM;
    cpu_step *s = NULL;
    if (cfg->batch == 0 || cfg->batch > CPU_MAX_BATCH || cfg->num_classes == 0 ||
        cfg->hidden == 0 || cfg->img_h < STEP_POOL_SIDE || cfg->img_w < STEP_POOL_SIDE) {
        snprintf(err, err_cap, "cpu step: batch 1..%u, classes, hidden >= 1, image >= %u px",
                 CPU_MAX_BATCH, STEP_POOL_SIDE);
        rc = FEED_EINVAL;
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto out;
    s->base.ops = &cpu_ops;
    s->cfg = *cfg;
    s->feat = 3 * STEP_POOL_SIDE * STEP_POOL_SIDE;
    const size_t b = cfg->batch, f = s->feat, hd = cfg->hidden, nc = cfg->num_classes;
    s->w1 = calloc(f * hd, sizeof(float));
    s->b1 = calloc(hd, sizeof(float));
    s->w2 = calloc(hd * nc, sizeof(float));
    s->b2 = calloc(nc, sizeof(float));
    s->x = calloc(b * f, sizeof(float));
    s->z1 = calloc(b * hd, sizeof(float));
    s->a1 = calloc(b * hd, sizeof(float));
    s->logits = calloc(b * nc, sizeof(float));
    s->dz1 = calloc(b * hd, sizeof(float));
    s->dlogits = calloc(b * nc, sizeof(float));
    s->gw1 = calloc(f * hd, sizeof(float));
    s->gb1 = calloc(hd, sizeof(float));
    s->gw2 = calloc(hd * nc, sizeof(float));
    s->gb2 = calloc(nc, sizeof(float));
    if (!s->w1 || !s->b1 || !s->w2 || !s->b2 || !s->x || !s->z1 || !s->a1 || !s->logits ||
        !s->dz1 || !s->dlogits || !s->gw1 || !s->gb1 || !s->gw2 || !s->gb2) {
        snprintf(err, err_cap, "cpu step: out of memory");
        goto out;
    }
    cpu_reset(&s->base);

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(s->base.info.device_name, sizeof s->base.info.device_name, "CPU (%ld cores)", cores);
    s->base.info.on_gpu = false;
    *out = &s->base;
    s = NULL;
    rc = 0;
out:
    if (s)
        cpu_close(&s->base);
    return rc;
}
