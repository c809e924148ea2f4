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

typedef int nvml_return;
typedef struct nvml_device_st *nvml_device;
typedef struct nvml_utilization {
    unsigned int gpu, memory;
} nvml_utilization;

struct nvml_monitor {
    void *lib;
    nvml_device dev;
    nvml_return (*shutdown)(void);
    nvml_return (*get_util)(nvml_device, nvml_utilization *);
    nvml_return (*get_pcie)(nvml_device, int, unsigned int *);
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

static void *sampler_main(void *arg)
{
    nvml_monitor *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        pthread_mutex_unlock(&m->lock);
        nvml_utilization u = {0, 0};
        unsigned int rx_kbs = 0;
        bool ok = m->get_util(m->dev, &u) == NVML_SUCCESS;
        bool pcie_ok =
            m->get_pcie && m->get_pcie(m->dev, NVML_PCIE_UTIL_RX_BYTES, &rx_kbs) == NVML_SUCCESS;
        uint64_t now = feed_now_ns();
        pthread_mutex_lock(&m->lock);
        if (ok && m->recording) {
            if (m->count < MAX_SAMPLES) {
                nvml_sample *s = &m->series[m->count++];
                s->t_s = (double)(now - m->window_t0) / 1e9;
                s->gpu_util = (int)u.gpu;
                s->mem_util = (int)u.memory;
                s->pcie_rx_mbps = pcie_ok ? rx_kbs * 1024.0 / 1e6 : -1.0;
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
    /* POSIX allows converting dlsym's void * to a function pointer through memcpy. */
    void *sym;
    sym = dlsym(m->lib, "nvmlInit_v2");
    memcpy(&init, &sym, sizeof sym);
    sym = dlsym(m->lib, "nvmlShutdown");
    memcpy(&m->shutdown, &sym, sizeof sym);
    sym = dlsym(m->lib, "nvmlDeviceGetHandleByPciBusId_v2");
    memcpy(&by_bus, &sym, sizeof sym);
    sym = dlsym(m->lib, "nvmlDeviceGetHandleByIndex_v2");
    memcpy(&by_index, &sym, sizeof sym);
    sym = dlsym(m->lib, "nvmlDeviceGetUtilizationRates");
    memcpy(&m->get_util, &sym, sizeof sym);
    sym = dlsym(m->lib, "nvmlDeviceGetPcieThroughput");
    memcpy(&m->get_pcie, &sym, sizeof sym);
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
    m->shutdown();
    dlclose(m->lib);
    pthread_cond_destroy(&m->cond);
    pthread_mutex_destroy(&m->lock);
    free(m->series);
    free(m);
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
