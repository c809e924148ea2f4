/*
 * feed-pack SRC OUT.pack [--max-side N] [--quality Q] [--subsample 420|444|keep] [--threads N]
 * feed-pack SRC OUT --format tar [--shard-samples N] [re-encoding options]
 * feed-pack SRC OUT --format folder [re-encoding options]
 * feed-pack --verify DATASET [--expect-max-side N]
 * feed-pack --index SHARD_OR_PATTERN
 * feed-pack --help
 *
 * Writes a pack (layout in source/src/pack.c), tar shards (OUT-000000.tar,
 * ..., each with its index OUT-000000.tar.idx; see source/src/tar.c) or an
 * ImageFolder tree (OUT/<class>/<index>.jpg) from any dataset feedd reads (a
 * tree, a pack, tar shards), optionally re-encoding each image: decode with libjpeg
 * (using its DCT scaling to get close to the target cheaply), shrink so the
 * longer side is at most --max-side with an antialiasing triangle filter,
 * encode at --quality (default 90) with 4:2:0 chroma unless --subsample says
 * otherwise. An image is re-encoded only when an option asks for a change it
 * does not already have; otherwise its original bytes go in untouched.
 * Images libjpeg cannot decode cleanly (a fatal error, or a warning such as
 * premature end of data, or a colour space other than gray/YCbCr/RGB) are
 * stored as they are, so feedd still reports them per sample, and are
 * counted in the summary.
 *
 * Threads: the main thread reads nothing itself; it hands fixed-size chunks
 * of sample indices to --threads workers (each with its own libjpeg objects
 * and buffers, taking indices from an atomic counter), joins them, and writes
 * the chunk's results in index order. Memory is bounded by the chunk size
 * times the largest sample. The pack goes to OUT.pack.tmp.<pid> and is renamed
 * when complete; a failure removes the temporary file, and so does SIGINT or
 * SIGTERM (the handler unlinks it and dies of the signal), so an interrupted
 * run leaves nothing behind and an older OUT.pack untouched. Shards are
 * written one at a time the same way, so an interrupted run leaves the
 * shards finished so far and no partial one. On a terminal,
 * stderr shows progress after each chunk (files, bytes in and out, rate, time
 * left); otherwise the tool prints only its summary and per-sample problems.
 *
 * --verify opens a dataset as feedd would, decodes every sample with libjpeg
 * and prints counts (undecodable ones included); with --expect-max-side it
 * fails if any image is larger. --index scans existing shards (made by any
 * WebDataset writer) and writes SHARD.idx beside each, so feedd opens them
 * with one small read each.
 *
 * This file is the tool: options, the workers and the writing; the JPEG work
 * on one image (re-encode, verify) is in recode.c.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "feed/blob.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/opts.h"
#include "feed/pack.h"
#include "out_sink.h"
#include "recode.h"

#define MAX_THREADS 64u
#define CHUNK_PER_THREAD 16u
#define MAX_REPORTED 20      /* per-sample messages before we only count */
#define PROGRESS_EVERY_S 0.5 /* terminal progress refresh */

typedef struct pack_opts {
    recode_opts recode;
    unsigned threads;
    enum sink_format format;
    uint32_t shard_samples;
} pack_opts;

enum outcome { OUT_UNCHANGED, OUT_REENCODED, OUT_KEPT_BAD };

typedef struct result {
    uint8_t *data; /* malloc'd bytes to write */
    size_t len;
    size_t in_len;
    enum outcome outcome;
    int read_rc; /* nonzero: the sample could not be read at all */
    char msg[JMSG_LENGTH_MAX + 64];
} result;

typedef struct worker {
    const feed_dataset *ds;
    const pack_opts *opts;
    result *results;
    uint64_t first;
    unsigned n;
    atomic_uint *next;
    recoder rec;
    feed_buf scratch; /* input bytes (trees) */
} worker;

static void process(worker *wk, uint64_t i, result *res)
{
    const uint8_t *data;
    size_t len;
    memset(res, 0, sizeof(*res));
    res->read_rc = feed_dataset_read(wk->ds, i, &wk->scratch, &data, &len);
    if (res->read_rc)
        return;
    res->in_len = len;
    res->outcome = OUT_UNCHANGED;
    if (recode_wanted(&wk->opts->recode)) {
        enum recode r = recoder_run(&wk->rec, data, len, res->msg, sizeof(res->msg));
        if (r == RECODE_DONE) {
            data = wk->rec.out.data;
            len = wk->rec.out.len;
            res->outcome = OUT_REENCODED;
        } else if (r == RECODE_FAILED) {
            res->outcome = OUT_KEPT_BAD;
        }
    }
    res->data = malloc(len ? len : 1);
    if (!res->data) {
        res->read_rc = FEED_ENOMEM;
        return;
    }
    memcpy(res->data, data, len);
    res->len = len;
}

static void *worker_main(void *arg)
{
    worker *wk = arg;
    for (;;) {
        unsigned k = atomic_fetch_add(wk->next, 1u);
        if (k >= wk->n)
            break;
        process(wk, wk->first + k, &wk->results[k]);
    }
    return NULL;
}

static void worker_init(worker *wk, const feed_dataset *ds, const pack_opts *o)
{
    memset(wk, 0, sizeof(*wk));
    wk->ds = ds;
    wk->opts = o;
    feed_buf_init(&wk->scratch, RECODE_MAX_BYTES);
    recoder_init(&wk->rec, &o->recode);
}

static void worker_free(worker *wk)
{
    recoder_free(&wk->rec);
    feed_buf_free(&wk->scratch);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static const char *sample_name(const feed_dataset *ds, uint64_t i, char *buf, size_t cap)
{
    const char *p = feed_dataset_sample_path(ds, i);
    if (p)
        return p;
    snprintf(buf, cap, "sample %llu", (unsigned long long)i);
    return buf;
}

/* Progress on a terminal: one line rewritten in place. */
typedef struct progress {
    bool on;    /* stderr is a terminal */
    bool shown; /* a progress line is on screen */
    double t0, last;
} progress;

static void progress_clear(progress *p)
{
    if (p->shown)
        fputs("\r\033[K", stderr);
    p->shown = false;
}

static void progress_update(progress *p, uint64_t done, uint64_t count, uint64_t in_bytes,
                            uint64_t out_bytes)
{
    double now = now_s();
    if (!p->on || (now - p->last < PROGRESS_EVERY_S && done < count))
        return;
    p->last = now;
    double secs = now - p->t0, rate = secs > 0 ? done / secs : 0.0;
    double left = rate > 0 ? (count - done) / rate : 0.0;
    fprintf(stderr,
            "\r\033[Kfeed-pack: %llu/%llu files (%.1f%%), in %.1f MB, out %.1f MB, %.0f files/s, "
            "%.0f:%02.0f left",
            (unsigned long long)done, (unsigned long long)count, 100.0 * done / count,
            in_bytes / 1e6, out_bytes / 1e6, rate, floor(left / 60), fmod(floor(left), 60));
    p->shown = true;
}

static int run_pack(const char *src, const char *dst, const pack_opts *o)
{
    int rc = 1;
    feed_dataset *ds = NULL;
    out_sink sink = {0};
    worker *workers = NULL;
    pthread_t *tids = NULL;
    result *results = NULL;
    const char **names = NULL;
    char err[1024], nbuf[64];
    double t0 = now_s();
    progress prog = {.on = isatty(STDERR_FILENO) == 1, .t0 = t0};
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_sample_bytes = RECODE_MAX_BYTES;
    unsigned nworkers = 0;

    int e = feed_dataset_open(src, &lim, &ds, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    uint64_t count = feed_dataset_count(ds);
    uint32_t classes = feed_dataset_num_classes(ds);
    names = calloc(classes, sizeof(*names));
    unsigned chunk = o->threads * CHUNK_PER_THREAD;
    workers = calloc(o->threads, sizeof(*workers));
    tids = calloc(o->threads, sizeof(*tids));
    results = calloc(chunk, sizeof(*results));
    if (!names || !workers || !tids || !results) {
        fprintf(stderr, "feed-pack: out of memory\n");
        goto out;
    }
    for (uint32_t c = 0; c < classes; c++)
        names[c] = feed_dataset_class_name(ds, c);
    e = sink_open(&sink, o->format, dst, count, classes, names, o->shard_samples, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    for (; nworkers < o->threads; nworkers++)
        worker_init(&workers[nworkers], ds, o);

    uint64_t n_recoded = 0, n_unchanged = 0, n_bad = 0, in_bytes = 0, out_bytes = 0;
    int read_failed = 0;
    err[0] = '\0';
    for (uint64_t first = 0; first < count; first += chunk) {
        unsigned n = count - first < chunk ? (unsigned)(count - first) : chunk;
        atomic_uint next = 0;
        unsigned started = 0;
        for (unsigned t = 0; t < o->threads; t++) {
            workers[t].results = results;
            workers[t].first = first;
            workers[t].n = n;
            workers[t].next = &next;
            if (pthread_create(&tids[t], NULL, worker_main, &workers[t]) != 0)
                break;
            started++;
        }
        if (started == 0)
            worker_main(&workers[0]);
        for (unsigned t = 0; t < started; t++)
            pthread_join(tids[t], NULL);
        for (unsigned k = 0; k < n; k++) {
            result *r = &results[k];
            uint64_t i = first + k;
            if (r->read_rc && !e) {
                progress_clear(&prog);
                fprintf(stderr, "feed-pack: %s: cannot read: %s\n",
                        sample_name(ds, i, nbuf, sizeof(nbuf)), feed_strerror(r->read_rc));
                e = r->read_rc;
                read_failed = 1;
            }
            if (!e)
                e = sink_add(&sink, i, feed_dataset_label(ds, i), r->data, r->len, err,
                             sizeof(err));
            in_bytes += r->in_len;
            out_bytes += r->len;
            n_recoded += r->outcome == OUT_REENCODED;
            n_unchanged += r->outcome == OUT_UNCHANGED && !r->read_rc;
            if (r->outcome == OUT_KEPT_BAD && n_bad++ < MAX_REPORTED) {
                progress_clear(&prog);
                fprintf(stderr, "feed-pack: %s: kept as-is: %s\n",
                        sample_name(ds, i, nbuf, sizeof(nbuf)), r->msg);
            }
            free(r->data);
            r->data = NULL;
        }
        if (e)
            break;
        progress_update(&prog, first + n, count, in_bytes, out_bytes);
    }
    progress_clear(&prog);
    if (e) {
        if (!read_failed)
            fprintf(stderr, "feed-pack: writing %s failed: %s (%s)\n", dst,
                    err[0] ? err : feed_strerror(e), feed_err_name(e));
        goto out;
    }
    e = sink_finish(&sink, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    double secs = now_s() - t0;
    char shown[4096]; /* a URL source without its credentials or query */
    feed_location_redact(src, shown, sizeof shown);
    printf("feed-pack: %s -> %s: %llu samples, %u classes, %u threads, %.2f s\n", shown,
           sink.written, (unsigned long long)count, classes, o->threads, secs);
    printf("  re-encoded %llu, unchanged %llu, kept as-is (undecodable) %llu\n",
           (unsigned long long)n_recoded, (unsigned long long)n_unchanged,
           (unsigned long long)n_bad);
    printf("  image bytes in %llu (mean %.0f), out %llu (mean %.0f), %.1f%%\n",
           (unsigned long long)in_bytes, (double)in_bytes / count, (unsigned long long)out_bytes,
           (double)out_bytes / count, in_bytes ? 100.0 * out_bytes / in_bytes : 0.0);
    rc = 0;
out:
    sink_abort(&sink);
    for (unsigned t = 0; t < nworkers; t++)
        worker_free(&workers[t]);
    free(workers);
    free(tids);
    free(results);
    free(names);
    feed_dataset_close(ds);
    return rc;
}

static int run_verify(const char *path, uint32_t expect_max_side)
{
    int rc = 1;
    feed_dataset *ds = NULL;
    feed_buf scratch;
    feed_buf_init(&scratch, RECODE_MAX_BYTES);
    jpeg_checker chk;
    jpeg_checker_init(&chk);
    char err[1024];
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);

    int e = feed_dataset_open(path, &lim, &ds, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        goto out;
    }
    uint64_t count = feed_dataset_count(ds), bad = 0, bytes = 0, too_big = 0;
    uint32_t max_long = 0;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *data;
        size_t len;
        e = feed_dataset_read(ds, i, &scratch, &data, &len);
        if (e) {
            bad++;
            continue;
        }
        bytes += len;
        uint32_t longer;
        if (jpeg_check(&chk, data, len, &longer)) {
            bad++;
            continue;
        }
        if (longer > max_long)
            max_long = longer;
        too_big += expect_max_side && longer > expect_max_side;
    }
    printf("%s: %s, %llu samples, %u classes, %llu image bytes, largest side %u, "
           "%llu undecodable\n",
           path, feed_dataset_format(ds), (unsigned long long)count, feed_dataset_num_classes(ds),
           (unsigned long long)bytes, max_long, (unsigned long long)bad);
    if (too_big) {
        fprintf(stderr, "feed-pack: %llu images have a side longer than %u\n",
                (unsigned long long)too_big, expect_max_side);
        goto out;
    }
    rc = 0;
out:
    jpeg_checker_free(&chk);
    feed_buf_free(&scratch);
    feed_dataset_close(ds);
    return rc;
}

/* Write SHARD.idx beside each shard of a path or brace pattern. */
static int run_index(const char *location)
{
    char err[1024];
    size_t n = 0;
    int e = sink_index_shards(location, &n, err, sizeof(err));
    if (e) {
        fprintf(stderr, "feed-pack: %s (%s)\n", err, feed_err_name(e));
        return 1;
    }
    printf("feed-pack: indexed %zu shard(s) of %s\n", n, location);
    return 0;
}

static void usage(FILE *f, unsigned default_threads)
{
    fprintf(f,
            "usage: feed-pack SRC OUT.pack [options]   pack a dataset (tree, pack or tar shards)\n"
            "       feed-pack SRC OUT --format tar [--shard-samples N] [options]\n"
            "       feed-pack SRC OUT --format folder [options]\n"
            "       feed-pack --verify DATASET [--expect-max-side N]\n"
            "       feed-pack --index SHARD_OR_PATTERN\n"
            "\n"
            "Writes OUT.pack.tmp.<pid> and renames it onto OUT.pack when complete; a failure,\n"
            "SIGINT or SIGTERM removes it (an older OUT.pack stays as it was). Progress\n"
            "(files, bytes in/out, rate, time left) goes to stderr when it is a terminal.\n"
            "By default every image goes in byte for byte; an image is re-encoded only when\n"
            "an option asks for something it does not already have.\n"
            "\n"
            "  --max-side N       shrink images whose longer side exceeds N (1..65535) to N,\n"
            "                     antialiased, and re-encode them (default: no resizing)\n"
            "  --quality Q        re-encode every image at JPEG quality Q (1..100); images\n"
            "                     re-encoded for another reason use %d (default: not given)\n"
            "  --subsample S      chroma subsampling of re-encoded images: 420, 444, or keep\n"
            "                     the source's (default: 420 with --max-side or --quality;\n"
            "                     420 or 444 alone re-encodes images that differ)\n"
            "  --threads N        decoding/encoding threads, 1..%u (default: CPUs online, %u)\n"
            "  --format F         pack (default); tar: WebDataset shards OUT-000000.tar, ...\n"
            "                     (KEY.jpg, KEY.cls, __classes__.txt) with OUT-000000.tar.idx\n"
            "                     beside each; folder: an ImageFolder tree OUT/<class>/*.jpg\n"
            "  --shard-samples N  samples per tar shard, 1..10000000 (default %u)\n"
            "  --index            write SHARD.idx beside each shard of SHARD_OR_PATTERN\n"
            "                     (shards from any WebDataset writer)\n"
            "  --verify           open PACK_OR_DIR as feedd would, decode every sample, print\n"
            "                     counts (undecodable ones included)\n"
            "  --expect-max-side N  with --verify: fail if an image has a longer side than N\n"
            "                     (default: no check)\n"
            "  -h, --help         print this and exit\n",
            RECODE_DEFAULT_QUALITY, MAX_THREADS, default_threads, SINK_DEFAULT_SHARD_SAMPLES);
}

static int parse_format(void *ctx, const char *arg)
{
    enum sink_format *f = ctx;
    if (strcmp(arg, "pack") == 0)
        *f = SINK_PACK;
    else if (strcmp(arg, "tar") == 0)
        *f = SINK_TAR;
    else if (strcmp(arg, "folder") == 0)
        *f = SINK_FOLDER;
    else
        return 1;
    return 0;
}

static int parse_subsample(void *ctx, const char *arg)
{
    enum recode_sub *sub = ctx;
    *sub = strcmp(arg, "420") == 0    ? RECODE_SUB_420
           : strcmp(arg, "444") == 0  ? RECODE_SUB_444
           : strcmp(arg, "keep") == 0 ? RECODE_SUB_KEEP
                                      : RECODE_SUB_UNSET;
    return *sub == RECODE_SUB_UNSET;
}

int main(int argc, char **argv)
{
    pack_opts o = {0};
    bool verify = false, index = false;
    uint32_t quality = 0, expect_max_side = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.threads = ncpu < 1 ? 1 : ncpu > (long)MAX_THREADS ? MAX_THREADS : (unsigned)ncpu;
    unsigned default_threads = o.threads;
    o.format = SINK_PACK;
    o.shard_samples = SINK_DEFAULT_SHARD_SAMPLES;
    const feed_opt opts[] = {
        {.name = "max-side", .u32 = &o.recode.max_side, .lo = 1, .hi = 65535},
        {.name = "quality", .u32 = &quality, .lo = 1, .hi = 100},
        {.name = "subsample", .call = parse_subsample, .ctx = &o.recode.sub},
        {.name = "threads", .u32 = &o.threads, .lo = 1, .hi = MAX_THREADS},
        {.name = "verify", .flag = &verify},
        {.name = "index", .flag = &index},
        {.name = "format", .call = parse_format, .ctx = &o.format},
        {.name = "shard-samples", .u32 = &o.shard_samples, .lo = 1, .hi = 10000000},
        {.name = "expect-max-side", .u32 = &expect_max_side, .lo = 1, .hi = 65535},
        {.name = NULL},
    };
    int first;
    int pr = feed_opts_parse("feed-pack", opts, argc, argv, &first);
    if (pr == 1) {
        usage(stdout, default_threads);
        return 0;
    }
    o.recode.quality = (int)quality;
    int npos = argc - first;
    if (pr == 0 && verify && npos == 1)
        return run_verify(argv[first], expect_max_side);
    if (pr == 0 && index && !verify && npos == 1)
        return run_index(argv[first]);
    if (pr || verify || index || npos != 2) {
        usage(stderr, default_threads);
        return 2;
    }
    return run_pack(argv[first], argv[first + 1], &o);
}
