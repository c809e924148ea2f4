/*
 * The job name a loader sends in SessionOpen.job (README "Jobs share a
 * server"): the caller's, checked, or one derived from the launcher's
 * environment so that every rank of one run derives the same name without
 * talking to the others. Pure but for getenv/gethostname; called by
 * feed_loader_open on the caller's thread.
 */
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/errors.h"

bool client_job_valid(const char *job)
{
    return job[0] && feed_name_check(job, NULL) == 0;
}

/* FNV-1a, 64 bits: a short stable digest; it names a job, it guards nothing. */
static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t digest(const char *a, const char *b, const char *c, const char *d)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const char *parts[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++) {
        h = fnv1a(h, parts[i]);
        h = fnv1a(h, "\x1f"); /* a separator no part holds */
    }
    return h;
}

void client_job_default(const char *dataset, uint64_t seed, char *out, size_t cap)
{
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    const char *addr = getenv("MASTER_ADDR");
    const char *port = getenv("MASTER_PORT");
    char seed_text[24];
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)seed);
    /* torchrun sets "none" when no --rdzv-id was given: every such run would share it. */
    if (run && run[0] && strcmp(run, "none") != 0) {
        size_t n = (size_t)snprintf(out, cap, "run-");
        for (const char *p = run; *p && n + 1 < cap && n < FEED_NAME_MAX; p++)
            out[n++] = feed_name_char(*p) ? *p : '_';
        out[n] = '\0';
    } else if (addr && addr[0] && port && port[0]) {
        snprintf(out, cap, "dist-%016llx",
                 (unsigned long long)digest(addr, port, dataset, seed_text));
    } else {
        /* One process, no launcher: the job is this process. */
        char host[256] = "";
        char pid[24];
        gethostname(host, sizeof host - 1);
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        snprintf(out, cap, "proc-%016llx", (unsigned long long)digest(host, pid, dataset, seed_text));
    }
}
