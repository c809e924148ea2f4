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

static bool job_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c && strchr(CLIENT_JOB_CHARS, c));
}

bool client_job_valid(const char *job)
{
    size_t n = strlen(job);
    if (n == 0 || n > CLIENT_JOB_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!job_char(job[i]))
            return false;
    return true;
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
        for (const char *p = run; *p && n + 1 < cap && n < CLIENT_JOB_MAX; p++)
            out[n++] = job_char(*p) ? *p : '_';
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
