/*
 * feed-preproc-bench: images/s of the preprocessing engine on a real data set
 * (an ImageFolder tree or a pack, opened with feed_dataset_open), per core
 * and on all cores, and in the same run the full-decode reference for the
 * ratio. Not a test: it prints a table, one JSON line starting with
 * {"bench": "feed-preproc", ...} (compare with torchvision_bench.py's line),
 * and optionally CSV.
 *
 * Each worker thread has its own feed_engine and read scratch and handles
 * samples tid, tid + N, ... of the data set, cycling, with a new epoch each
 * cycle so the crops change. The clock covers what a server worker does per
 * sample: read the bytes (page cache for a tree, the mapping for a pack),
 * decode, crop, resize, flip, write the output. Files are read once before
 * timing so the page cache is warm, as it is for the torchvision run.
 *
 * --decoded-cache BYTES adds the cached mode in the same run: the server's
 * decoded-sample cache (server/work/cache.c) at --cache-side, filled by one
 * untimed pass over the data set, then timed on 1 and N threads doing what
 * a server worker does for a cached dataset: look up; on a hit crop, resize
 * and flip from the cached pixels; on a miss read, decode the whole image
 * at the cache's size (kept when it fits) and make the sample from that.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "config.h"
#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/opts.h"
#include "feed/timeutil.h"
#include "feed/transform.h"
#include "resize.h"

typedef struct options {
    const char *data;
    unsigned threads;
    double seconds, warmup;
    uint64_t images; /* per run; 0: run for `seconds` */
    bool eval, no_reference, reference_all;
    uint32_t size;
    uint64_t cache_bytes; /* --decoded-cache; 0 = no cached mode */
    uint32_t cache_side;
    uint64_t seed;
    const char *json, *csv;
} options;

typedef enum run_path { PATH_FAST, PATH_REFERENCE, PATH_CACHED } run_path;

static const char *const path_names[] = {"fast", "reference", "cached"};

typedef struct run_result {
    const char *path; /* "fast", "reference" or "cached" */
    unsigned threads;
    uint64_t images, errors, hits;
    double seconds;
    double read_ms, decode_ms, resize_ms, cpu_ms; /* per image, summed over threads */
} run_result;

typedef struct shared {
    const options *opt;
    const feed_dataset *ds;
    const feed_transform *t;
    run_path path;
    feedd_cache *cache; /* PATH_CACHED */
    unsigned threads;
    pthread_barrier_t start;
    atomic_bool stop;
} shared;

typedef struct worker {
    shared *sh;
    unsigned tid;
    uint64_t images, errors, hits, read_ns, decode_ns, resize_ns, cpu_ns;
    int fail;
} worker;

/* One sample the way feedd's worker makes it for a cached dataset (server/work/pool.c). */
static feed_sample_status run_cached(worker *w, feed_engine *e, feed_buf *scratch, uint64_t i,
                                     uint32_t epoch, uint8_t *out)
{
    shared *sh = w->sh;
    feed_decoded img;
    feed_sample_status st = FEED_SAMPLE_OK;
    uint64_t t0 = feed_now_ns();
    feedd_cache_entry *entry = feedd_cache_get(sh->cache, 0, i, &img);
    if (entry) {
        w->hits++;
    } else {
        const uint8_t *data;
        size_t len;
        if (feed_dataset_read(sh->ds, i, scratch, &data, &len) != 0)
            return FEED_SAMPLE_IO_ERROR;
        uint64_t t1 = feed_now_ns();
        w->read_ns += t1 - t0;
        st = feedd_cache_decode(sh->cache, e, 0, i, data, len, sh->opt->cache_side, &img, &entry);
        w->decode_ns += feed_now_ns() - t1;
    }
    if (st == FEED_SAMPLE_OK) {
        feed_stage_times times;
        st = feed_engine_run_decoded(e, &img, sh->t, sh->opt->seed, epoch, i, out, &times);
        w->resize_ns += times.resize_ns;
    }
    if (entry)
        feedd_cache_release(sh->cache, entry);
    return st;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    shared *sh = w->sh;
    feed_engine *e = NULL;
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    size_t out_bytes = (size_t)sh->t->out_h * sh->t->out_w * 3;
    uint8_t *out = malloc(out_bytes);
    w->fail = !out || feed_engine_new(NULL, &e) != 0;
    uint64_t n = feed_dataset_count(sh->ds);
    uint64_t limit =
        sh->opt->images ? (sh->opt->images + sh->threads - 1 - w->tid) / sh->threads : UINT64_MAX;
    pthread_barrier_wait(&sh->start);
    uint64_t cpu0 = feed_thread_cpu_ns();
    uint64_t k = w->tid;
    while (!w->fail && w->images < limit &&
           !atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        uint64_t i = k % n;
        uint32_t epoch = (uint32_t)(k / n);
        k += sh->threads;
        if (sh->path == PATH_CACHED) {
            w->errors += run_cached(w, e, &scratch, i, epoch, out) != FEED_SAMPLE_OK;
            w->images++;
            continue;
        }
        const uint8_t *data;
        size_t len;
        uint64_t t0 = feed_now_ns();
        int rc = feed_dataset_read(sh->ds, i, &scratch, &data, &len);
        uint64_t t1 = feed_now_ns();
        w->read_ns += t1 - t0;
        if (rc) {
            w->errors++;
            w->images++;
            continue;
        }
        feed_sample_status st;
        if (sh->path == PATH_REFERENCE) {
            st = feed_engine_run_reference(e, data, len, sh->t, sh->opt->seed, epoch, i, out);
            w->decode_ns += feed_now_ns() - t1;
        } else {
            feed_stage_times times;
            st = feed_engine_run(e, data, len, sh->t, sh->opt->seed, epoch, i, out, &times);
            w->decode_ns += times.decode_ns;
            w->resize_ns += times.resize_ns;
        }
        w->errors += st != FEED_SAMPLE_OK;
        w->images++;
    }
    w->cpu_ns = feed_thread_cpu_ns() - cpu0;
    feed_engine_free(e);
    feed_buf_free(&scratch);
    free(out);
    return NULL;
}

static int run_once(const options *opt, const feed_dataset *ds, const feed_transform *t,
                    run_path path, feedd_cache *cache, unsigned threads, run_result *res)
{
    shared sh = {.opt = opt, .ds = ds, .t = t, .path = path, .cache = cache, .threads = threads};
    atomic_init(&sh.stop, false);
    pthread_barrier_init(&sh.start, NULL, threads + 1);
    worker *ws = calloc(threads, sizeof *ws);
    pthread_t *th = calloc(threads, sizeof *th);
    if (!ws || !th) {
        free(ws);
        free(th);
        return FEED_ENOMEM;
    }
    for (unsigned i = 0; i < threads; i++) {
        ws[i].sh = &sh;
        ws[i].tid = i;
        pthread_create(&th[i], NULL, worker_main, &ws[i]);
    }
    pthread_barrier_wait(&sh.start);
    uint64_t t0 = feed_now_ns();
    if (!opt->images) {
        uint64_t until = t0 + (uint64_t)(opt->seconds * 1e9);
        while (feed_now_ns() < until)
            usleep(2000);
        atomic_store(&sh.stop, true);
    }
    for (unsigned i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double secs = (feed_now_ns() - t0) / 1e9;
    pthread_barrier_destroy(&sh.start);

    memset(res, 0, sizeof *res);
    res->path = path_names[path];
    res->threads = threads;
    res->seconds = secs;
    uint64_t read = 0, dec = 0, rs = 0, cpu = 0;
    int fail = 0;
    for (unsigned i = 0; i < threads; i++) {
        res->images += ws[i].images;
        res->errors += ws[i].errors;
        res->hits += ws[i].hits;
        read += ws[i].read_ns;
        dec += ws[i].decode_ns;
        rs += ws[i].resize_ns;
        cpu += ws[i].cpu_ns;
        fail |= ws[i].fail;
    }
    double n = res->images ? (double)res->images : 1.0;
    res->read_ms = read / 1e6 / n;
    res->decode_ms = dec / 1e6 / n;
    res->resize_ms = rs / 1e6 / n;
    res->cpu_ms = cpu / 1e6 / n;
    free(ws);
    free(th);
    return fail ? FEED_ENOMEM : 0;
}

static void usage(void)
{
    fprintf(
        stderr,
        "usage: feed-preproc-bench DATA [--threads N] [--seconds S] [--warmup S] [--images K]\n"
        "                          [--eval] [--size PX] [--seed N] [--no-reference]\n"
        "                          [--reference-all] [--decoded-cache BYTES] [--cache-side PX]\n"
        "                          [--json FILE] [--csv FILE]\n"
        "  DATA: an ImageFolder root or a pack file\n"
        "  --threads N     the multi-thread run's threads (default: all cores)\n"
        "  --seconds S     length of each run (default 5)\n"
        "  --warmup S      untimed single-thread run first (default 1)\n"
        "  --images K      or a fixed number of images per run\n"
        "  --eval          eval transform (resize 8/7 x size, centre crop) instead of train\n"
        "  --no-reference  skip the full-decode reference run\n"
        "  --reference-all also run the reference on N threads\n"
        "  --decoded-cache BYTES  also the cached mode: feedd's decoded-sample cache of\n"
        "                  BYTES (K/M/G), filled by an untimed pass, on 1 and N threads\n"
        "  --cache-side PX the cache's shorter side (default 256)\n");
}

/* --decoded-cache BYTES (K/M/G suffixes, as feedd's --cache-bytes); 0 is refused. */
static int parse_cache_bytes(void *ctx, const char *arg)
{
    uint64_t *out = ctx;
    return feedd_parse_bytes(arg, out) != 0 || *out == 0;
}

/* The command line: 0, 1 for --help, -1 when it is wrong. */
static int parse(int argc, char **argv, options *o)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (options){.threads = ncpu > 0 ? (unsigned)ncpu : 1,
                   .seconds = 5.0,
                   .warmup = 1.0,
                   .size = 224,
                   .seed = 1,
                   .cache_side = 256};
    const feed_opt opts[] = {
        {.name = "threads", .u32 = &o->threads, .lo = 1, .hi = 1024},
        {.name = "seconds", .dbl = &o->seconds, .dlo = 1e-3, .dhi = 3600},
        {.name = "warmup", .dbl = &o->warmup, .dlo = 0, .dhi = 3600},
        {.name = "images", .u64 = &o->images, .lo = 0, .hi = UINT64_MAX},
        {.name = "eval", .flag = &o->eval},
        {.name = "size",
         .u32 = &o->size,
         .lo = FEED_TRANSFORM_MIN_SIDE,
         .hi = FEED_TRANSFORM_MAX_SIDE},
        {.name = "seed", .u64 = &o->seed, .lo = 0, .hi = UINT64_MAX},
        {.name = "no-reference", .flag = &o->no_reference},
        {.name = "reference-all", .flag = &o->reference_all},
        {.name = "json", .str = &o->json},
        {.name = "csv", .str = &o->csv},
        {.name = "decoded-cache", .call = parse_cache_bytes, .ctx = &o->cache_bytes},
        {.name = "cache-side", .u32 = &o->cache_side, .lo = 16, .hi = 4096},
        {.name = NULL},
    };
    int first;
    int pr = feed_opts_parse("feed-preproc-bench", opts, argc, argv, &first);
    o->data = pr == 0 && first + 1 == argc ? argv[first] : NULL;
    return pr == 0 && !o->data ? -1 : pr;
}

int main(int argc, char **argv)
{
    options opt;
    int pr = parse(argc, argv, &opt);
    if (pr) {
        usage();
        return pr < 0 ? 2 : 0;
    }
    feed_dataset *ds;
    char err[512];
    int rc = feed_dataset_open(opt.data, NULL, &ds, err, sizeof err);
    if (rc) {
        fprintf(stderr, "feed-preproc-bench: %s\n", err);
        return 1;
    }
    uint64_t count = feed_dataset_count(ds);
    if (count == 0) {
        fprintf(stderr, "feed-preproc-bench: %s has no samples\n", opt.data);
        feed_dataset_close(ds);
        return 1;
    }
    feed_transform t;
    if (opt.eval) {
        feed_transform_default_eval(&t);
        t.resize_size = opt.size * 8 / 7;
    } else {
        feed_transform_default_train(&t);
    }
    t.out_h = t.out_w = opt.size;

    /* Warm the page cache (a pack's mapping too) and total the bytes. */
    uint64_t bytes = 0;
    {
        feed_buf scratch;
        feed_buf_init(&scratch, 64u << 20);
        for (uint64_t i = 0; i < count; i++) {
            const uint8_t *d;
            size_t len;
            if (feed_dataset_read(ds, i, &scratch, &d, &len) == 0) {
                volatile uint8_t sink = 0;
                for (size_t p = 0; p < len; p += 4096)
                    sink ^= d[p];
                (void)sink;
                bytes += len;
            }
        }
        feed_buf_free(&scratch);
    }

    /* An untimed second on one thread: code, tables and scratch warm, CPU
     * frequency settled, before the first timed run. */
    run_result runs[6];
    int nruns = 0;
    if (opt.warmup > 0) {
        options w = opt;
        w.seconds = opt.warmup;
        w.images = 0;
        run_once(&w, ds, &t, PATH_FAST, NULL, 1, &runs[0]);
    }
    unsigned thread_counts[2] = {1, opt.threads};
    int nthreads = opt.threads > 1 ? 2 : 1;
    for (int k = 0; k < nthreads; k++) {
        if (run_once(&opt, ds, &t, PATH_FAST, NULL, thread_counts[k], &runs[nruns++])) {
            fprintf(stderr, "feed-preproc-bench: out of memory\n");
            return 1;
        }
    }
    if (!opt.no_reference) {
        for (int k = 0; k < (opt.reference_all ? nthreads : 1); k++)
            if (run_once(&opt, ds, &t, PATH_REFERENCE, NULL, thread_counts[k], &runs[nruns++])) {
                fprintf(stderr, "feed-preproc-bench: out of memory\n");
                return 1;
            }
    }
    feedd_cache *cache = NULL;
    int cached_at = nruns;
    uint64_t cache_used = 0;
    if (opt.cache_bytes) {
        if (feedd_cache_new(opt.cache_bytes, &cache) != 0 ||
            feedd_cache_add_dataset(cache, 0, count, opt.cache_side) != 0) {
            fprintf(stderr,
                    "feed-preproc-bench: --decoded-cache %" PRIu64
                    " does not hold the slot table (8 bytes a sample)\n",
                    opt.cache_bytes);
            return 1;
        }
        /* The fill: one untimed pass, every sample once, on all threads. */
        options fill = opt;
        fill.images = count;
        run_result filled;
        if (run_once(&fill, ds, &t, PATH_CACHED, cache, opt.threads, &filled)) {
            fprintf(stderr, "feed-preproc-bench: out of memory\n");
            return 1;
        }
        cache_used = feedd_cache_used(cache);
        for (int k = 0; k < nthreads; k++)
            if (run_once(&opt, ds, &t, PATH_CACHED, cache, thread_counts[k], &runs[nruns++])) {
                fprintf(stderr, "feed-preproc-bench: out of memory\n");
                return 1;
            }
    }

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("feed-preproc-bench: %s (%s, %" PRIu64 " samples, %.1f KiB mean), %s %ux%u, "
           "%ld cores, resize kernels %s\n",
           opt.data, feed_dataset_format(ds), count, bytes / 1024.0 / count,
           opt.eval ? "eval" : "train", t.out_h, t.out_w, ncpu, feed_resize_kernel_name());
    printf("%-10s %7s %8s %7s %10s %12s %8s %9s %9s %9s %8s\n", "path", "threads", "images",
           "errors", "seconds", "img/s", "img/s/th", "read ms", "decode ms", "resize ms", "cpu ms");
    for (int r = 0; r < nruns; r++) {
        run_result *x = &runs[r];
        printf("%-10s %7u %8" PRIu64 " %7" PRIu64 " %10.2f %12.1f %8.1f %9.3f %9.3f %9.3f %8.3f\n",
               x->path, x->threads, x->images, x->errors, x->seconds, x->images / x->seconds,
               x->images / x->seconds / x->threads, x->read_ms, x->decode_ms, x->resize_ms,
               x->cpu_ms);
    }
    double fast1 = runs[0].images / runs[0].seconds;
    double fastn = runs[nthreads - 1].images / runs[nthreads - 1].seconds;
    double ref1 = !opt.no_reference ? runs[nthreads].images / runs[nthreads].seconds : 0;
    if (!opt.no_reference)
        printf("fast / reference, 1 thread: %.2fx\n", fast1 / ref1);
    double cached1 = 0, cachedn = 0, hit_rate = 0;
    if (cache) {
        const run_result *c1 = &runs[cached_at], *cn = &runs[cached_at + nthreads - 1];
        cached1 = c1->images / c1->seconds;
        cachedn = cn->images / cn->seconds;
        hit_rate = cn->images ? (double)cn->hits / cn->images : 0;
        printf("cached (side %u, %" PRIu64 " of %" PRIu64 " bytes held, hit rate %.3f) / fast: "
               "%.2fx on 1 thread, %.2fx on %u\n",
               opt.cache_side, cache_used, opt.cache_bytes, hit_rate, cached1 / fast1,
               cachedn / fastn, thread_counts[nthreads - 1]);
    }

    char line[4096];
    int n = snprintf(line, sizeof line,
                     "{\"bench\": \"feed-preproc\", \"data\": \"%s\", \"format\": \"%s\", "
                     "\"samples\": %" PRIu64 ", \"mean_bytes\": %.0f, \"mode\": \"%s\", "
                     "\"size\": %u, \"cores\": %ld, \"kernels\": \"%s\", "
                     "\"fast_img_per_s_1t\": %.1f, \"fast_img_per_s_nt\": %.1f, \"nt\": %u, "
                     "\"reference_img_per_s_1t\": %.1f, \"cached_img_per_s_1t\": %.1f, "
                     "\"cached_img_per_s_nt\": %.1f, \"cache_bytes\": %" PRIu64
                     ", \"cache_side\": %u, \"cache_used_bytes\": %" PRIu64
                     ", \"cached_hit_rate\": %.4f, \"runs\": [",
                     opt.data, feed_dataset_format(ds), count, (double)bytes / count,
                     opt.eval ? "eval" : "train", opt.size, ncpu, feed_resize_kernel_name(), fast1,
                     fastn, thread_counts[nthreads - 1], ref1, cached1, cachedn, opt.cache_bytes,
                     cache ? opt.cache_side : 0, cache_used, hit_rate);
    for (int r = 0; r < nruns && n > 0 && (size_t)n < sizeof line; r++) {
        run_result *x = &runs[r];
        n += snprintf(line + n, sizeof line - (size_t)n,
                      "%s{\"path\": \"%s\", \"threads\": %u, \"images\": %" PRIu64
                      ", \"errors\": %" PRIu64 ", \"hits\": %" PRIu64
                      ", \"seconds\": %.3f, \"img_per_s\": %.1f, "
                      "\"read_ms\": %.4f, \"decode_ms\": %.4f, \"resize_ms\": %.4f, "
                      "\"cpu_ms\": %.4f}",
                      r ? ", " : "", x->path, x->threads, x->images, x->errors, x->hits, x->seconds,
                      x->images / x->seconds, x->read_ms, x->decode_ms, x->resize_ms, x->cpu_ms);
    }
    if (n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, "]}");
    printf("%s\n", line);
    if (opt.json) {
        FILE *f = fopen(opt.json, "a");
        if (f) {
            fprintf(f, "%s\n", line);
            fclose(f);
        }
    }
    if (opt.csv) {
        FILE *f = fopen(opt.csv, "a");
        if (f) {
            fseek(f, 0, SEEK_END);
            if (ftell(f) == 0)
                fprintf(f, "data,format,mode,size,path,threads,images,errors,seconds,img_per_s,"
                           "read_ms,decode_ms,resize_ms,cpu_ms\n");
            for (int r = 0; r < nruns; r++) {
                run_result *x = &runs[r];
                fprintf(f,
                        "%s,%s,%s,%u,%s,%u,%" PRIu64 ",%" PRIu64 ",%.3f,%.1f,%.4f,%.4f,%.4f,%.4f\n",
                        opt.data, feed_dataset_format(ds), opt.eval ? "eval" : "train", opt.size,
                        x->path, x->threads, x->images, x->errors, x->seconds,
                        x->images / x->seconds, x->read_ms, x->decode_ms, x->resize_ms, x->cpu_ms);
            }
            fclose(f);
        }
    }
    feedd_cache_free(cache);
    feed_dataset_close(ds);
    return 0;
}
