/*
 * What one feed-bench run measured, and how it is written out: summary.csv
 * and summary.json (one entry per source, with the run's settings),
 * batches.csv (the per-batch series: wait, step time, loss) and nvml.csv
 * (GPU utilisation, GPM SM activity and DRAM bandwidth, memory used and PCIe
 * RX over time), plus the table on stdout. gpu_busy is the share of wall
 * time the step's stream was busy by CUDA events; stream_idle_pct is the
 * rest.
 * Main thread only.
 */
#ifndef FEED_BENCH_REPORT_H
#define FEED_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nvml.h"
#include "step.h"

typedef struct batch_record {
    double t_s;     /* when next() returned, from the start of the measured window (< 0: warmup) */
    double wait_ms; /* time blocked in next() */
    double step_ms; /* GPU (or CPU) time of the step */
    double loss;
    uint32_t n;
    uint32_t bad_samples;
} batch_record;

/* One spawned feedd's decoded-sample cache over the measured window (its metrics). */
#define REPORT_MAX_SERVERS 64
typedef struct server_cache {
    char target[64];
    double hits, misses;   /* lookups in the window */
    double not_owned;      /* misses it decoded for another server's samples, not admitted */
    double entries, bytes; /* held at the window's end */
} server_cache;

typedef struct run_result {
    char source[16];
    int status; /* 0 or the FEED_E code that ended the run */
    char error[512];
    uint64_t warmup_batches, batches, images; /* measured window: batches, images */
    uint64_t total_images;                    /* warmup included */
    double wall_s, images_per_s;
    double step_ms_mean, gpu_busy; /* busy = summed step time / wall */
    double wait_mean_ms, wait_p50_ms, wait_p99_ms, wait_max_ms;
    bool nvml_ok;
    double nvml_util_mean, nvml_util_min, pcie_rx_mbps_mean;
    bool gpm_ok; /* GPM readings in the window: their means */
    double sm_active_mean, tensor_active_mean, dram_bw_mean;
    double gpu_mem_used_max_mib;       /* < 0 unknown */
    double loader_cpu_s, loader_cores; /* process CPU minus the step's, on the GPU host */
    bool server_cpu_known;
    double server_cpu_s, server_cores; /* spawned feedd processes */
    double loss_first, loss_last;      /* mean over the first / last 10 batches of the run */
    uint64_t bad_samples, bad_labels;
    batch_record *records; /* warmup + measured batches, in order */
    size_t nrecords;
    uint64_t records_dropped;
    nvml_sample *nvml;
    size_t nnvml;
    server_cache cache[REPORT_MAX_SERVERS]; /* remote with cached spawned servers */
    uint32_t ncache;
} run_result;

typedef struct bench_meta {
    const char *command_line;
    char started_utc[32];
    char host[64];
    long host_cpus;          /* online CPUs */
    int affinity_cpus;       /* CPUs this process may run on (loaders, client, step) */
    const char *device_kind; /* "cuda", "cpu" or "sim" (simulated step, --device none) */
    uint32_t rank, world;    /* remote: this client's share of the epoch */
    step_info step;
    const char *model;
    double target_us_per_image;
    const char *model_source;
    uint32_t batch, img_h, img_w, hidden;
    const char *data_path, *data_format;
    const char *dataset_name; /* the name asked of the servers */
    uint64_t data_count;
    uint32_t data_classes;
    uint64_t seed;
    uint32_t warmup, steps;
    double seconds;
    uint32_t local_threads;
    const char *servers; /* comma list of targets */
    uint32_t spawned, server_threads;
    const char *server_cpus;   /* NULL: not pinned */
    uint32_t window, prefetch; /* libfeedclient settings in effect */
    bool ordered;
    const char *decode_lane; /* off, cpu, gpu, auto; NULL: off */
    double decode_share, decode_share_max;
    bool nvml_ok;
    char nvml_why[256];
    bool gpm_ok;
    char gpm_why[256];
} bench_meta;

/* q-quantile (0..1) of v (n > 0), sorting a copy in tmp (n doubles). */
double quantile(const double *v, size_t n, double q, double *tmp);

/* Fill the derived fields of r from its records and the window numbers. */
void report_summarise(run_result *r);

/* Writes the four files into dir (created if missing). 0 or FEED_EIO with a message in err. */
int report_write(const char *dir, const bench_meta *m, const run_result *runs, size_t nruns,
                 char *err, size_t err_cap);
void report_table(FILE *f, const bench_meta *m, const run_result *runs, size_t nruns);

#endif
