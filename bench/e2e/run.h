/*
 * One source's measured run: warm-up, then the training loop for --steps or
 * --seconds with at most two steps in flight (batch k+1 is fetched while
 * step k runs, as a loop that reads its loss one step late does), then the
 * summary. Main thread only; the sources, the NVML sampler and the client
 * run their own threads.
 */
#ifndef FEED_BENCH_RUN_H
#define FEED_BENCH_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feedtest.h"
#include "nvml.h"
#include "options.h"
#include "report.h"
#include "source.h"
#include "step.h"

/* Set by SIGINT/SIGTERM: the run in progress ends and reports what it has. */
extern volatile sig_atomic_t bench_interrupted;

typedef struct bench_ctx {
    bench_options opt;
    bench_step *step;
    nvml_monitor *nvml; /* NULL without NVML */
    feed_test_server servers[BENCH_MAX_SERVERS];
    uint32_t nspawned;
    bool progress_tty;
} bench_ctx;

/* sync, local or remote; FEED_EINVAL with the reason in err for another name. */
int bench_open_source(const char *name, const source_config *sc, bench_source **out, char *err,
                      size_t cap);
/* Runs src through c's step into r (r->source named by the caller); r->status says how it ended. */
void bench_run_source(bench_ctx *c, bench_source *src, run_result *r);

#endif
