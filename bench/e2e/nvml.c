/*
 * NVML through dlopen; see nvml.h. The few NVML declarations needed are
 * written out here (the C ABI is stable and documented), so no NVML header
 * or library is needed to build.
 */
#include "nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feed/errors.h"
#include "feed/timeutil.h"

#define MAX_SAMPLES 100000 /* ~2.8 hours at 100 ms */
#define NVML_SUCCESS 0
#define NVML_PCIE_UTIL_RX_BYTES 1
/* GPM (Hopper and newer): metric ids of nvmlGpmMetricId_t, struct versions. */
#define GPM_METRIC_SM_UTIL 2
#define GPM_METRIC_ANY_TENSOR_UTIL 5
#define GPM_METRIC_DRAM_BW_UTIL 10
#define GPM_METRICS_GET_VERSION 1
#define GPM_SUPPORT_VERSION 1
#define GPM_PERIOD_NS 1000000000ull
/* The driver reads numMetrics entries; the array is as large as any NVML_GPM_METRIC_MAX. */
#define GPM_METRIC_MAX 333

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;
typedef struct nvml_utilization {
    unsigned int gpu, memory;
} nvml_utilization;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory;
typedef struct nvml_gpm_sample_st *nvml_gpm_sample;
typedef struct nvml_gpm_support {
    unsigned int version, is_supported_device;
} nvml_gpm_support;
typedef struct nvml_gpm_metric {
    unsigned int metric_id;
    nvml_return nvml_return;
    double value;
    struct {
        char *short_name, *long_name, *unit;
    } info;
} nvml_gpm_metric;
typedef struct nvml_gpm_metrics_get {
    unsigned int version, num_metrics;
    nvml_gpm_sample sample1, sample2;
    nvml_gpm_metric metrics[GPM_METRIC_MAX];
} nvml_gpm_metrics_get;

struct nvml_monitor {
    void *lib;
    nvml_device dev;
    nvml_return (*shutdown)(void);
    nvml_return (*get_util)(nvml_device, nvml_utilization *);
    nvml_return (*get_pcie)(nvml_device, int, unsigned int *);
    nvml_return (*get_mem)(nvml_device, nvml_memory *);
    /* GPM: all set, or gpm_ok false with the reason in gpm_why. */
    nvml_return (*gpm_sample_free)(nvml_gpm_sample);
    nvml_return (*gpm_sample_get)(nvml_device, nvml_gpm_sample);
    nvml_return (*gpm_metrics_get)(nvml_gpm_metrics_get *);
    nvml_gpm_sample gpm[2]; /* sampler thread: the previous and the next reading */
    bool gpm_ok;
    char gpm_why[128];
    uint32_t period_ms;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool stop;           /* lock */
    bool recording;      /* lock */
    uint64_t window_t0;  /* lock */
    nvml_sample *series; /* lock */
    size_t count;        /* lock */
    uint64_t dropped;    /* lock */
};

/* *fn = the function name in lib, or NULL. POSIX allows converting dlsym's void * to a
 * function pointer through memcpy. */
static void load(void *lib, const char *name, void *fn)
{
    void *sym = dlsym(lib, name);
    memcpy(fn, &sym, sizeof sym);
}

/*
 * GPM metrics between the previous reading and a new one taken now (sampler
 * thread); the new reading becomes the previous. false when no reading could
 * be taken; a metric the driver did not give is < 0.
 */
static bool gpm_read(nvml_monitor *m, double *sm, double *tensor, double *dram)
{
    static const unsigned int ids[] = {GPM_METRIC_SM_UTIL, GPM_METRIC_ANY_TENSOR_UTIL,
                                       GPM_METRIC_DRAM_BW_UTIL};
    if (m->gpm_sample_get(m->dev, m->gpm[1]) != NVML_SUCCESS)
        return false;
    nvml_gpm_metrics_get *mg = calloc(1, sizeof *mg);
    bool ok = mg != NULL;
    if (ok) {
        mg->version = GPM_METRICS_GET_VERSION;
        mg->num_metrics = sizeof ids / sizeof ids[0];
        mg->sample1 = m->gpm[0];
        mg->sample2 = m->gpm[1];
        for (unsigned int i = 0; i < mg->num_metrics; i++)
            mg->metrics[i].metric_id = ids[i];
        ok = m->gpm_metrics_get(mg) == NVML_SUCCESS;
    }
    double *out[] = {sm, tensor, dram};
    for (unsigned int i = 0; i < sizeof ids / sizeof ids[0]; i++)
        *out[i] = ok && mg->metrics[i].nvml_return == NVML_SUCCESS ? mg->metrics[i].value : -1.0;
    free(mg);
    nvml_gpm_sample t = m->gpm[0];
    m->gpm[0] = m->gpm[1];
    m->gpm[1] = t;
    return true;
}

static void *sampler_main(void *arg)
{
    nvml_monitor *m = arg;
    uint64_t last_gpm = feed_now_ns();
    if (m->gpm_ok && m->gpm_sample_get(m->dev, m->gpm[0]) != NVML_SUCCESS)
        last_gpm = 0;
    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        pthread_mutex_unlock(&m->lock);
        nvml_utilization u = {0, 0};
        nvml_memory mem = {0, 0, 0};
        unsigned int rx_kbs = 0;
        double sm = -1.0, tensor = -1.0, dram = -1.0;
        bool ok = m->get_util(m->dev, &u) == NVML_SUCCESS;
        bool pcie_ok =
            m->get_pcie && m->get_pcie(m->dev, NVML_PCIE_UTIL_RX_BYTES, &rx_kbs) == NVML_SUCCESS;
        bool mem_ok = m->get_mem && m->get_mem(m->dev, &mem) == NVML_SUCCESS;
        uint64_t now = feed_now_ns();
        if (m->gpm_ok && now - last_gpm >= GPM_PERIOD_NS) {
            /* A failed reading leaves the previous one to measure the next second from. */
            if (last_gpm == 0)
                last_gpm = m->gpm_sample_get(m->dev, m->gpm[0]) == NVML_SUCCESS ? now : 0;
            else if (gpm_read(m, &sm, &tensor, &dram))
                last_gpm = now;
        }
        pthread_mutex_lock(&m->lock);
        if (ok && m->recording) {
            if (m->count < MAX_SAMPLES) {
                nvml_sample *s = &m->series[m->count++];
                s->t_s = (double)(now - m->window_t0) / 1e9;
                s->gpu_util = (int)u.gpu;
                s->mem_util = (int)u.memory;
                s->pcie_rx_mbps = pcie_ok ? rx_kbs * 1024.0 / 1e6 : -1.0;
                s->mem_used_mib = mem_ok ? (double)mem.used / (1024.0 * 1024.0) : -1.0;
                s->sm_active_pct = sm;
                s->tensor_active_pct = tensor;
                s->dram_bw_pct = dram;
            } else {
                m->dropped++;
            }
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)m->period_ms * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        if (!m->stop)
            pthread_cond_timedwait(&m->cond, &m->lock, &until);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* GPM's functions, support and two sample buffers; gpm_ok, or the reason in gpm_why. */
static void gpm_init(nvml_monitor *m)
{
    nvml_return (*query)(nvml_device, nvml_gpm_support *) = NULL;
    nvml_return (*alloc)(nvml_gpm_sample *) = NULL;
    load(m->lib, "nvmlGpmQueryDeviceSupport", &query);
    load(m->lib, "nvmlGpmSampleAlloc", &alloc);
    load(m->lib, "nvmlGpmSampleFree", &m->gpm_sample_free);
    load(m->lib, "nvmlGpmSampleGet", &m->gpm_sample_get);
    load(m->lib, "nvmlGpmMetricsGet", &m->gpm_metrics_get);
    if (!query || !alloc || !m->gpm_sample_free || !m->gpm_sample_get || !m->gpm_metrics_get) {
        snprintf(m->gpm_why, sizeof m->gpm_why, "the driver's NVML has no GPM API");
        return;
    }
    nvml_gpm_support sup = {GPM_SUPPORT_VERSION, 0};
    nvml_return r = query(m->dev, &sup);
    if (r != NVML_SUCCESS) {
        snprintf(m->gpm_why, sizeof m->gpm_why, "nvmlGpmQueryDeviceSupport failed (error %d)", r);
        return;
    }
    if (!sup.is_supported_device) {
        snprintf(m->gpm_why, sizeof m->gpm_why,
                 "GPM not supported on this GPU (Hopper or newer needed)");
        return;
    }
    if (alloc(&m->gpm[0]) != NVML_SUCCESS || alloc(&m->gpm[1]) != NVML_SUCCESS) {
        snprintf(m->gpm_why, sizeof m->gpm_why, "nvmlGpmSampleAlloc failed");
        return;
    }
    m->gpm_ok = true;
}

static void gpm_free(nvml_monitor *m)
{
    for (int i = 0; i < 2; i++)
        if (m->gpm[i])
            m->gpm_sample_free(m->gpm[i]);
}

int nvml_open(const char *pci_bus_id, uint32_t period_ms, nvml_monitor **out, char *why,
              size_t why_cap)
{
    int rc = FEED_EUNSUPPORTED;
    nvml_return (*init)(void) = NULL;
    nvml_return (*by_bus)(const char *, nvml_device *) = NULL;
    nvml_return (*by_index)(unsigned int, nvml_device *) = NULL;
    bool inited = false;
    nvml_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return FEED_ENOMEM;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    m->period_ms = period_ms ? period_ms : 100;
    m->series = calloc(MAX_SAMPLES, sizeof *m->series);
    if (!m->series) {
        rc = FEED_ENOMEM;
        snprintf(why, why_cap, "out of memory");
        goto out;
    }
    m->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!m->lib) {
        snprintf(why, why_cap, "libnvidia-ml.so.1 not loadable: %s", dlerror());
        goto out;
    }
    load(m->lib, "nvmlInit_v2", &init);
    load(m->lib, "nvmlShutdown", &m->shutdown);
    load(m->lib, "nvmlDeviceGetHandleByPciBusId_v2", &by_bus);
    load(m->lib, "nvmlDeviceGetHandleByIndex_v2", &by_index);
    load(m->lib, "nvmlDeviceGetUtilizationRates", &m->get_util);
    load(m->lib, "nvmlDeviceGetPcieThroughput", &m->get_pcie);
    if (!init || !m->shutdown || !by_index || !m->get_util) {
        snprintf(why, why_cap, "libnvidia-ml.so.1 lacks the functions needed");
        goto out;
    }
    nvml_return r = init();
    if (r != NVML_SUCCESS) {
        snprintf(why, why_cap, "nvmlInit_v2 failed (NVML error %d)", r);
        goto out;
    }
    inited = true;
    r = -1;
    if (pci_bus_id && pci_bus_id[0] && by_bus)
        r = by_bus(pci_bus_id, &m->dev);
    if (r != NVML_SUCCESS)
        r = by_index(0, &m->dev);
    if (r != NVML_SUCCESS) {
        snprintf(why, why_cap, "NVML has no handle for the GPU (error %d)", r);
        goto out;
    }
    load(m->lib, "nvmlDeviceGetMemoryInfo", &m->get_mem);
    gpm_init(m);
    if (pthread_create(&m->thread, NULL, sampler_main, m) != 0) {
        snprintf(why, why_cap, "cannot start the NVML sampler thread");
        goto out;
    }
    m->started = true;
    *out = m;
    m = NULL;
    rc = 0;
out:
    if (m) {
        gpm_free(m);
        if (inited)
            m->shutdown();
        if (m->lib)
            dlclose(m->lib);
        pthread_cond_destroy(&m->cond);
        pthread_mutex_destroy(&m->lock);
        free(m->series);
        free(m);
    }
    return rc;
}

void nvml_close(nvml_monitor *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->lock);
    m->stop = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    if (m->started)
        pthread_join(m->thread, NULL);
    gpm_free(m);
    m->shutdown();
    dlclose(m->lib);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m->series);
    free(m);
}

bool nvml_gpm_available(nvml_monitor *m, char *why, size_t why_cap)
{
    if (!m->gpm_ok)
        snprintf(why, why_cap, "%s", m->gpm_why);
    return m->gpm_ok;
}

void nvml_window_start(nvml_monitor *m)
{
    pthread_mutex_lock(&m->lock);
    m->count = 0;
    m->dropped = 0;
    m->window_t0 = feed_now_ns();
    m->recording = true;
    pthread_mutex_unlock(&m->lock);
}

void nvml_window_stop(nvml_monitor *m)
{
    pthread_mutex_lock(&m->lock);
    m->recording = false;
    pthread_mutex_unlock(&m->lock);
}

size_t nvml_window_samples(nvml_monitor *m, nvml_sample *out, size_t cap)
{
    pthread_mutex_lock(&m->lock);
    size_t n = m->count < cap ? m->count : cap;
    memcpy(out, m->series, n * sizeof *out);
    pthread_mutex_unlock(&m->lock);
    return n;
}

uint64_t nvml_window_dropped(nvml_monitor *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t d = m->dropped;
    pthread_mutex_unlock(&m->lock);
    return d;
}
