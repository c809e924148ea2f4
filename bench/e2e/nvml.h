/*
 * GPU utilisation, memory used and PCIe receive throughput as NVML reports
 * them (what nvidia-smi shows) every period, and Hopper's GPM metrics (SM
 * activity, tensor activity, DRAM bandwidth utilisation, what a GPU team
 * reads in Nsight/DCGM) between samples one second apart, by a thread of its
 * own. NVML is the driver's
 * libnvidia-ml.so.1, loaded with dlopen at run time: builds and machines
 * without a driver still work, and the report then says NVML was absent —
 * nothing is made up in its place.
 *
 * Threads: the sampler thread writes the series under monitor.lock; the
 * training thread opens and closes windows and reads them.
 */
#ifndef FEED_BENCH_NVML_H
#define FEED_BENCH_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct nvml_sample {
    double t_s;          /* since the window opened */
    int gpu_util;        /* % of the last sample period with a kernel running */
    int mem_util;        /* % of it with device memory being read or written */
    double pcie_rx_mbps; /* host-to-device, MB/s (NVML reports KB/s over ~20 ms) */
    double mem_used_mib; /* device memory in use, all processes; < 0 unknown */
    /* GPM over the second before this sample; < 0 on the other samples or without GPM. */
    double sm_active_pct, tensor_active_pct, dram_bw_pct;
} nvml_sample;

typedef struct nvml_monitor nvml_monitor;

/*
 * Start sampling the GPU at pci_bus_id (or index 0 when it is "") every
 * period_ms. FEED_EUNSUPPORTED with the reason in why when NVML is absent or
 * fails; the caller reports the reason.
 */
int nvml_open(const char *pci_bus_id, uint32_t period_ms, nvml_monitor **out, char *why,
              size_t why_cap);
void nvml_close(nvml_monitor *m); /* accepts NULL */

/* Whether GPM metrics are sampled; when not, the reason in why. */
bool nvml_gpm_available(nvml_monitor *m, char *why, size_t why_cap);

/* Clear the series and start recording at now; stop recording. */
void nvml_window_start(nvml_monitor *m);
void nvml_window_stop(nvml_monitor *m);
/* Copies up to cap samples of the last window into out; returns how many. */
size_t nvml_window_samples(nvml_monitor *m, nvml_sample *out, size_t cap);
/* Samples dropped because the window outgrew its bounded series. */
uint64_t nvml_window_dropped(nvml_monitor *m);

#endif
