/* feed-bench's options; see options.h. */
#include "options.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/opts.h"
#include "feed/token_file.h"
#include "feed/transform.h"

#define DEFAULT_DATASET_NAME "bench"

/*
 * Presets: GPU time per image of a real training step, measured by
 * bench/e2e/calibrate_presets.py on one H200 (torch 2.11.0+cu130,
 * torchvision 0.26, bf16 autocast, channels_last, SGD with momentum, batch
 * 256, synthetic input on the GPU, eager mode), 2026-11-29; the raw output is
 * in bench/results/e2e-presets.md. The benchmark reproduces only the time.
 */
typedef struct model_preset {
    const char *name;
    double us_per_image;
} model_preset;

static const model_preset presets[] = {
    {"resnet18", 75.5},
    {"resnet50", 211.7},
    {"vit-b16", 435.3},
    {"mlp", 0.0}, /* the bare MLP, no ballast */
};
const char bench_preset_source[] =
    "GPU us/image of torchvision's model training step (bf16 autocast, batch 256) measured on "
    "an H200 by bench/e2e/calibrate_presets.py; reproduced by calibrated ballast GEMMs";

void bench_usage(FILE *f)
{
    feed_loader_config lc;
    feed_loader_config_default(&lc);
    fputs("usage: feed-bench [options]\n"
          "  --source LIST        sync,local,remote (default: all three, in that order)\n"
          "  --data PATH          ImageFolder dir or pack (default: data/default, generated\n"
          "                       with feed-gen-dataset when missing)\n"
          "  --dataset NAME       remote: the dataset name asked of the servers (and served\n"
          "                       by spawned ones; default " DEFAULT_DATASET_NAME ")\n"
          "  --out DIR            results: summary.csv/json, batches.csv, nvml.csv (default "
          "out/bench)\n"
          "  --device D           auto (default: CUDA if a device is found), cuda, cpu, or\n"
          "                       none: a simulated step that only takes the model's time\n"
          "                       per image (no GPU, almost no CPU: many clients per host)\n"
          "  --model P            resnet18, resnet50, vit-b16, mlp (GPU time per image of the\n"
          "                       step; default resnet50 on a GPU, mlp on the CPU)\n"
          "  --us-per-image X     override the preset's GPU time per image\n"
          "  --step-us-per-image X   the same (the simulated step's time per image)\n"
          "  --rank R --world W   remote: this client is rank R of W (DistributedSampler\n"
          "                       split of each epoch; default 0 of 1)\n"
          "  --batch N            batch size (default 256 on a GPU, 32 on the CPU)\n"
          "  --steps N            measured batches per source (0: until --seconds)\n"
          "  --seconds S          measured seconds per source (default 30 GPU, 10 CPU; 0: "
          "--steps)\n"
          "  --warmup N           batches before measuring (default 5 GPU, 2 CPU)\n"
          "  --local-threads N    loader threads of the local source (default: CPUs available)\n"
          "  --servers LIST       remote: host:port,... of running feedd servers\n"
          "  --spawn-servers M    remote: start M feedd here (default 1 unless --servers)\n"
          "  --server-threads K   threads per spawned feedd (default: CPUs available)\n"
          "  --server-cpus L      pin spawned feedd: one CPU list for all, or one per server\n"
          "                       separated by ':' (e.g. 4-9:10-15)\n"
          "  --feedd PATH         feedd binary (default: next to this build)\n"
          "  --gen-tool PATH      feed-gen-dataset binary (default: next to this build)\n",
          f);
    fprintf(f,
            "  --window N           remote: outstanding batches per server (default %u)\n"
            "  --prefetch N         remote: delivery slots ready ahead of next() (default %u)\n",
            lc.window_per_server, lc.prefetch);
    fputs("  --server-cache-side S --server-cache-bytes B   remote: spawned feedd keep a\n"
          "                       decoded-sample cache (cache=S, --cache-bytes B); the report\n"
          "                       gives each one's hit rate and bytes over the measured window\n"
          "  --owner-routing M    remote: auto (default), off or on (feed_owner_routing)\n"
          "  --decode-lane M      remote: the loader's decode lane: off (default), cpu, gpu\n"
          "                       or auto; --decode-share S (0..1) of the samples, adapted\n"
          "                       between epochs up to --decode-share-max S (0: fixed), on\n"
          "                       --decode-lane-threads N (0: the loader's default, 2)\n"
          "  --unordered          remote: batches as they arrive, not in plan order\n"
          "  --auth-token-file FILE   remote: bearer token sent to the servers, read as feedd\n"
          "                       reads its --auth-token-file; spawned feedd get the same\n"
          "                       file (default: $FEED_TOKEN if set, else none)\n"
          "  --tls-ca FILE        remote: PEM CA the servers' certificates must chain to (TLS;\n"
          "                       for --servers: spawned feedd speak plaintext)\n"
          "  --tls-cert FILE --tls-key FILE   remote: client certificate and key (mutual TLS)\n"
          "  --hidden N --lr X --seed N --size N   model width, SGD rate, seed, image side\n",
          f);
}

static const model_preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}

/* --source LIST: copied, since sources are split in place later. */
static int set_sources(void *ctx, const char *arg)
{
    bench_options *o = ctx;
    if (strlen(arg) >= sizeof o->sources)
        return -1;
    snprintf(o->sources, sizeof o->sources, "%s", arg);
    return 0;
}

int bench_parse_options(int argc, char **argv, bench_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->sources, sizeof o->sources, "sync,local,remote");
    o->out = "out/bench";
    o->dataset_name = DEFAULT_DATASET_NAME;
    o->device = "auto";
    o->us_per_image = -1.0; /* unset: the preset's */
    o->seconds = -1.0;      /* unset: the step's default */
    o->warmup = UINT32_MAX; /* unset: the step's default */
    o->lr = 0.1;
    o->seed = 1;
    o->size = 224;
    o->gen_classes = 10;
    o->gen_per_class = 64;
    o->world = 1;
    const feed_opt opts[] = {
        {.name = "source", .call = set_sources, .ctx = o},
        {.name = "data", .str = &o->data},
        {.name = "dataset", .str = &o->dataset_name},
        {.name = "out", .str = &o->out},
        {.name = "device", .str = &o->device},
        {.name = "model", .str = &o->model},
        {.name = "us-per-image", .dbl = &o->us_per_image, .dlo = 0, .dhi = 1e6},
        {.name = "step-us-per-image", .dbl = &o->us_per_image, .dlo = 0, .dhi = 1e6},
        {.name = "rank", .u32 = &o->rank, .lo = 0, .hi = UINT32_MAX},
        {.name = "world", .u32 = &o->world, .lo = 1, .hi = UINT32_MAX},
        {.name = "batch", .u32 = &o->batch, .lo = 0, .hi = UINT32_MAX},
        {.name = "steps", .u32 = &o->steps, .lo = 0, .hi = UINT32_MAX},
        {.name = "seconds", .dbl = &o->seconds, .dlo = 0, .dhi = 1e7},
        {.name = "warmup", .u32 = &o->warmup, .lo = 0, .hi = UINT32_MAX - 1},
        {.name = "local-threads", .u32 = &o->local_threads, .lo = 0, .hi = UINT32_MAX},
        {.name = "servers", .str = &o->servers},
        {.name = "spawn-servers", .u32 = &o->spawn, .lo = 0, .hi = UINT32_MAX},
        {.name = "server-threads", .u32 = &o->server_threads, .lo = 0, .hi = UINT32_MAX},
        {.name = "server-cpus", .str = &o->server_cpus},
        {.name = "feedd", .str = &o->feedd},
        {.name = "gen-tool", .str = &o->gen_tool},
        {.name = "window", .u32 = &o->window, .lo = 0, .hi = UINT32_MAX},
        {.name = "prefetch", .u32 = &o->prefetch, .lo = 0, .hi = UINT32_MAX},
        {.name = "hidden", .u32 = &o->hidden, .lo = 0, .hi = UINT32_MAX},
        {.name = "lr", .dbl = &o->lr, .dlo = 0, .dhi = 1e6},
        {.name = "seed", .u64 = &o->seed, .lo = 0, .hi = UINT32_MAX},
        {.name = "size", .u32 = &o->size, .lo = 0, .hi = UINT32_MAX},
        {.name = "unordered", .flag = &o->unordered},
        {.name = "server-cache-side", .u32 = &o->server_cache_side, .lo = 0, .hi = 65536},
        {.name = "server-cache-bytes", .u64 = &o->server_cache_bytes, .lo = 0, .hi = 1ull << 40},
        {.name = "owner-routing", .str = &o->owner_routing},
        {.name = "decode-lane", .str = &o->decode_lane},
        {.name = "decode-share", .dbl = &o->decode_share, .dlo = 0, .dhi = 1},
        {.name = "decode-share-max", .dbl = &o->decode_share_max, .dlo = 0, .dhi = 1},
        {.name = "decode-lane-threads", .u32 = &o->decode_lane_threads, .lo = 0, .hi = 16},
        {.name = "auth-token-file", .str = &o->token_file},
        {.name = "tls-ca", .str = &o->tls_ca},
        {.name = "tls-cert", .str = &o->tls_cert},
        {.name = "tls-key", .str = &o->tls_key},
        {.name = NULL},
    };
    int operands = 0;
    int pr = feed_opts_parse("feed-bench", opts, argc, argv, &operands);
    if (pr == 1) {
        bench_usage(stdout);
        exit(0);
    }
    if (pr != 0 || operands != argc) {
        bench_usage(stderr);
        return FEED_EINVAL;
    }
    return 0;
}

int bench_resolve_options(bench_options *o, bool gpu, bool sim)
{
    if (!o->model)
        o->model = gpu || sim ? "resnet50" : "mlp";
    const model_preset *preset = find_preset(o->model);
    if (!preset) {
        fprintf(stderr, "feed-bench: unknown --model %s (resnet18, resnet50, vit-b16, mlp)\n",
                o->model);
        return FEED_EINVAL;
    }
    if (o->us_per_image < 0)
        o->us_per_image = gpu || sim ? preset->us_per_image : 0.0;
    if (!o->batch)
        o->batch = gpu || sim ? 256 : 32;
    if (o->seconds < 0)
        o->seconds = o->steps ? 0.0 : (gpu || sim ? 30.0 : 10.0);
    if (o->warmup == UINT32_MAX)
        o->warmup = gpu || sim ? 5 : 2;
    if (!o->hidden)
        o->hidden = gpu ? 1024 : 128;
    if (!o->local_threads)
        o->local_threads = (uint32_t)bench_affinity_cpus();
    if (!o->server_threads)
        o->server_threads = (uint32_t)bench_affinity_cpus();
    if (!o->servers && !o->spawn)
        o->spawn = 1;
    if (o->owner_routing && strcmp(o->owner_routing, "auto") != 0 &&
        strcmp(o->owner_routing, "off") != 0 && strcmp(o->owner_routing, "on") != 0) {
        fprintf(stderr, "feed-bench: --owner-routing auto, off or on\n");
        return FEED_EINVAL;
    }
    if (o->decode_lane && strcmp(o->decode_lane, "off") != 0 &&
        strcmp(o->decode_lane, "cpu") != 0 && strcmp(o->decode_lane, "gpu") != 0 &&
        strcmp(o->decode_lane, "auto") != 0) {
        fprintf(stderr, "feed-bench: --decode-lane off, cpu, gpu or auto\n");
        return FEED_EINVAL;
    }
    if (!o->server_cache_side != !o->server_cache_bytes) {
        fprintf(stderr, "feed-bench: --server-cache-side and --server-cache-bytes go together\n");
        return FEED_EINVAL;
    }
    /* libfeedclient's own defaults, so that every output shows what is in effect. */
    feed_loader_config lc_default;
    feed_loader_config_default(&lc_default);
    if (!o->window)
        o->window = lc_default.window_per_server;
    if (!o->prefetch)
        o->prefetch = lc_default.prefetch;
    if (o->token_file) {
        char err[512];
        if (feed_token_file_read(o->token_file, "--auth-token-file", o->token_buf,
                                 sizeof o->token_buf, err, sizeof err)) {
            fprintf(stderr, "feed-bench: %s\n", err);
            return FEED_EINVAL;
        }
        o->token = o->token_buf;
    }
    if (o->tls_ca && o->spawn) {
        fprintf(stderr, "feed-bench: --tls-ca needs --servers (spawned feedd speak plaintext)\n");
        return FEED_EINVAL;
    }
    if (o->batch > BENCH_MAX_BATCH || o->spawn > BENCH_MAX_SERVERS ||
        o->size < FEED_TRANSFORM_MIN_SIDE || o->size > FEED_TRANSFORM_MAX_SIDE ||
        (o->steps == 0 && o->seconds <= 0)) {
        fprintf(stderr,
                "feed-bench: batch 1..%u, spawn <= %u, size %u..%u, and --steps or "
                "--seconds > 0\n",
                BENCH_MAX_BATCH, BENCH_MAX_SERVERS, FEED_TRANSFORM_MIN_SIDE,
                FEED_TRANSFORM_MAX_SIDE);
        return FEED_EINVAL;
    }
    return 0;
}

int bench_affinity_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return (int)sysconf(_SC_NPROCESSORS_ONLN);
    return CPU_COUNT(&set);
}

const char *bench_nth_cpu_list(const char *spec, uint32_t i, char *buf, size_t cap)
{
    const char *p = spec;
    if (!spec)
        return NULL;
    if (!strchr(spec, ':'))
        return spec;
    for (uint32_t k = 0; k < i && p; k++) {
        p = strchr(p, ':');
        p = p ? p + 1 : NULL;
    }
    if (!p)
        return NULL;
    size_t len = strcspn(p, ":");
    if (len == 0 || len >= cap)
        return NULL;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}
