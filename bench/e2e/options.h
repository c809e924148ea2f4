/*
 * feed-bench's command line: the options, their defaults, and the model
 * presets (GPU time per image of a real training step). Main thread only.
 */
#ifndef FEED_BENCH_OPTIONS_H
#define FEED_BENCH_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#include "feed/token_file.h"

#define BENCH_MAX_SERVERS 64
#define BENCH_MAX_BATCH 4096u

extern const char bench_preset_source[]; /* where the presets' times come from */

typedef struct bench_options {
    char sources[64];
    const char *data;
    const char *out;
    const char *device; /* auto, cpu, cuda, none */
    const char *model;
    double us_per_image; /* < 0: the preset's */
    uint32_t batch, steps, warmup, hidden, local_threads;
    double seconds, lr;
    uint64_t seed;
    const char *servers;
    uint32_t spawn, server_threads;
    const char *server_cpus;
    const char *feedd, *gen_tool;
    const char *dataset_name; /* asked of every server, and what spawned ones serve */
    uint32_t window, prefetch, gen_classes, gen_per_class;
    uint32_t size;
    uint32_t rank, world; /* remote: this client's share of the epoch */
    bool unordered;
    /* remote: spawned feedd cache the dataset at this shorter side (cache=SIDE) in cache_bytes
     * each (0: no cache); the loader's owner routing (auto, off, on; NULL: auto). */
    uint32_t server_cache_side;
    uint64_t server_cache_bytes;
    const char *owner_routing;
    /* remote: the loader's decode lane (off, cpu, gpu, auto; NULL: off), its share, the
     * adapting share's maximum (0: fixed) and its threads (0: the loader's default). */
    const char *decode_lane;
    double decode_share, decode_share_max;
    uint32_t decode_lane_threads;
    /* remote: trust, as feed-client-probe's and feedd's options. The token is read from
     * token_file by bench_resolve_options (NULL: libfeedclient takes $FEED_TOKEN). */
    const char *token_file, *tls_ca, *tls_cert, *tls_key;
    const char *token; /* NULL, or token_buf */
    char token_buf[FEED_TOKEN_FILE_MAX + 1];
} bench_options;

void bench_usage(FILE *f);
/* Defaults, then argv; FEED_EINVAL (usage printed) on a bad option. --help exits. */
int bench_parse_options(int argc, char **argv, bench_options *o);
/*
 * The defaults that depend on the step (GPU, CPU or simulated) and checks of
 * the whole set. FEED_EINVAL with the reason printed.
 */
int bench_resolve_options(bench_options *o, bool gpu, bool sim);
/* CPUs this process may run on. */
int bench_affinity_cpus(void);
/* The i-th ':'-separated CPU list of spec (the only one when spec has no ':'); NULL if none. */
const char *bench_nth_cpu_list(const char *spec, uint32_t i, char *buf, size_t cap);

#endif
