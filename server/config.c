/*
 * Table-driven configuration for feedd (see config.h). Every key exists both
 * as --key VALUE (or --key=VALUE) and as "key = value" in a --config file;
 * the table below is the single source of names, bounds, defaults and help,
 * and server/feedd.conf.example documents the same keys. Main thread only.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feed/blob.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"

typedef enum key_type {
    KEY_STR,
    KEY_U32,
    KEY_U64,
    KEY_BYTES,
    KEY_LEVEL,
    KEY_DATASET,
    KEY_CONFIG,
} key_type;

typedef struct key_def {
    const char *name;
    key_type type;
    size_t offset;
    size_t size; /* KEY_STR: capacity */
    uint64_t min, max;
    const char *def; /* parsed like a user value; NULL = none */
    const char *help;
} key_def;

#define OFF(f) offsetof(feedd_config, f)
#define SZ(f) sizeof(((feedd_config *)0)->f)
#define GiB (1024ull * 1024 * 1024)

static const key_def keys[] = {
    {"config", KEY_CONFIG, 0, 0, 0, 0, NULL, "read 'key = value' lines from FILE first"},
    {"listen", KEY_STR, OFF(listen), SZ(listen), 0, 0, "0.0.0.0:7878",
     "gRPC address; port 0 = ephemeral"},
    {"port-file", KEY_STR, OFF(port_file), SZ(port_file), 0, 0, "",
     "write the bound gRPC port here once listening"},
    {"dataset", KEY_DATASET, 0, 0, 0, 0, NULL,
     "NAME=PATH[,cache=SIDE][,share=SIDE][,bad_shards=serve|refuse], repeatable: a directory is an "
     "ImageFolder, a file a pack, a .tar or a brace pattern (dir/shard-{000000..000146}.tar) "
     "tar shards; cache=SIDE (16..4096, off by default) serves it from the decoded-sample "
     "cache, images decoded once at a shorter side of at least SIDE; share=SIDE (16..4096, off "
     "by default; equal to cache= where both are set) lets jobs that send the same "
     "SessionOpen.share decode each image once between them, at that side; bad_shards: a shard "
     "that "
     "cannot be read at start but has an index file fails its samples (serve, the default) or "
     "refuses the dataset (refuse); a dataset that cannot be opened is not served, the others "
     "are"},
    {"threads", KEY_U32, OFF(threads), 0, 0, 1024, "0", "preprocessing workers; 0 = all cores"},
    {"cq-threads", KEY_U32, OFF(cq_threads), 0, 0, 64, "0",
     "gRPC completion-queue threads; 0 = threads/4, 1..4"},
    {"metrics-listen", KEY_STR, OFF(metrics_listen), SZ(metrics_listen), 0, 0, "",
     "Prometheus endpoint [HOST:]PORT (0 = ephemeral); off when empty"},
    {"metrics-port-file", KEY_STR, OFF(metrics_port_file), SZ(metrics_port_file), 0, 0, "",
     "write the bound metrics port here"},
    {"metrics-token-file", KEY_STR, OFF(metrics_token_file), SZ(metrics_token_file), 0, 0, "",
     "GET /metrics needs 'Authorization: Bearer TOKEN', TOKEN the first line of FILE (else 401)"},
    {"tls-cert", KEY_STR, OFF(tls_cert), SZ(tls_cert), 0, 0, "",
     "PEM certificate chain: the gRPC port speaks TLS only (needs tls-key)"},
    {"tls-key", KEY_STR, OFF(tls_key), SZ(tls_key), 0, 0, "", "PEM private key of tls-cert"},
    {"tls-client-ca", KEY_STR, OFF(tls_client_ca), SZ(tls_client_ca), 0, 0, "",
     "mutual TLS: require a client certificate signed by this PEM CA (needs tls-cert)"},
    {"health-listen", KEY_STR, OFF(health_listen), SZ(health_listen), 0, 0, "",
     "with TLS: a plaintext port [HOST:]PORT that serves grpc.health.v1.Health only, for "
     "probes that speak no TLS (Kubernetes gRPC probes); off when empty"},
    {"health-port-file", KEY_STR, OFF(health_port_file), SZ(health_port_file), 0, 0, "",
     "write the bound health port here"},
    {"auth-token-file", KEY_STR, OFF(auth_token_file), SZ(auth_token_file), 0, 0, "",
     "every feed.v1.Feed call needs 'authorization: Bearer TOKEN' metadata, TOKEN the first "
     "line of FILE (else UNAUTHENTICATED); grpc.health.v1.Health stays open for probes"},
    {"max-memory", KEY_BYTES, OFF(max_memory), 0, 1 << 20, 1024 * GiB, "1G",
     "all batch buffers together; a request beyond it waits for memory to free"},
    {"max-stream-memory", KEY_BYTES, OFF(max_stream_memory), 0, 1 << 20, 1024 * GiB, "128M",
     "batch buffers of one stream; a request beyond it waits for the stream's sends"},
    {"send-stall-ms", KEY_U32, OFF(send_stall_ms), 0, 0, 3600000, "30000",
     "end a stream (RESOURCE_EXHAUSTED) whose pending send makes no progress this long, the "
     "client having stopped reading; 0 = never"},
    /* 1G: a Batch is one gRPC message, and gRPC and libfeedclient cap messages at INT_MAX. */
    {"max-batch-bytes", KEY_BYTES, OFF(max_batch_bytes), 0, 1 << 16, 1 * GiB, "256M",
     "largest Batch.data; at most 1G, as one gRPC message must stay under 2 GiB; a larger "
     "request is INVALID_ARGUMENT"},
    {"max-request-bytes", KEY_BYTES, OFF(max_request_bytes), 0, 1 << 10, 64 << 20, "1M",
     "largest incoming message (GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH)"},
    {"max-batch", KEY_U32, OFF(max_batch), 0, 1, 65536, "1024", "most samples in one batch"},
    {"max-window", KEY_U32, OFF(max_window), 0, 1, 1024, "16",
     "most batches outstanding per stream"},
    {"max-streams", KEY_U32, OFF(max_streams), 0, 1, 65536, "256", "most concurrent streams"},
    {"max-pixels", KEY_U64, OFF(max_pixels), 0, 1, 1ull << 34, "67108864",
     "largest declared source image (width*height) the decoder accepts"},
    {"max-jpeg-bytes", KEY_BYTES, OFF(max_jpeg_bytes), 0, 1 << 10, 1 * GiB, "64M",
     "largest source file"},
    {"task-samples", KEY_U32, OFF(task_samples), 0, 0, 4096, "0",
     "samples a worker takes from a batch at a time; 0 = auto"},
    {"fleet-window-ms", KEY_U32, OFF(fleet_window_ms), 0, 1000, 3600000, "10000",
     "fleet sizing window: capacity, demand and feedd_fleet_desired_servers move on once a "
     "window (README \"Fleet sizing\")"},
    {"drain-timeout-ms", KEY_U32, OFF(drain_timeout_ms), 0, 0, 3600000, "10000",
     "on SIGTERM/SIGINT, stop within this long"},
    {"cache-bytes", KEY_BYTES, OFF(cache_bytes), 0, 0, 1024 * GiB, "0",
     "decoded-sample cache for the datasets with cache=SIDE, beside max-memory; 0 = none"},
    {"share-window-bytes", KEY_BYTES, OFF(share_window_bytes), 0, 0, 1024 * GiB, "0",
     "the share window: decoded images kept for the jobs that share them (datasets with "
     "share=SIDE), beside max-memory as cache-bytes is; 0 = 64M when a dataset has share="},
    {"transport-memory", KEY_BYTES, OFF(transport_memory), 0, 0, 1024 * GiB, "256M",
     "anonymous resident memory allowed beyond what feedd holds at start, max-memory and "
     "cache-bytes; above it, a connection whose bytes in, less what reached feedd as calls and "
     "messages, pass max-request-bytes + 64K (+ 1K/s up to 256K, + 1/256 of its bytes out) is "
     "cut: gRPC buffers an HTTP/2 header block of any size; on gRPC's own listener (listener) "
     "it is gRPC's resource quota instead; 0 = off"},
    {"listener", KEY_STR, OFF(listener), SZ(listener), 0, 0, "feedd",
     "who accepts on the gRPC ports: feedd (its own listener, with the transport guard and "
     "descriptor-exhaustion recovery; needs gRPC core 29, gRPC 1.51, at build and at run "
     "time, else feedd falls back to grpc and logs why) or grpc (gRPC's own listener and the "
     "limits gRPC provides: see the README's security section)"},
    {"idle-timeout-ms", KEY_U32, OFF(idle_timeout_ms), 0, 0, 86400000, "60000",
     "close a connection that has had no call for this long (GRPC_ARG_MAX_CONNECTION_IDLE_MS), "
     "and one whose TLS handshake and HTTP/2 SETTINGS have not come in this long (at most "
     "120000, gRPC's own); its client reconnects at its next call; 0 = never (handshakes "
     "then get gRPC's 120 s)"},
    {"s3-endpoint", KEY_STR, OFF(s3_endpoint), SZ(s3_endpoint), 0, 0, "",
     "S3 endpoint URL for s3:// datasets (MinIO, Ceph, GCS); \"\" = AWS_ENDPOINT_URL or AWS"},
    {"s3-region", KEY_STR, OFF(s3_region), SZ(s3_region), 0, 0, "",
     "region s3:// requests are signed for; \"\" = AWS_REGION, AWS_DEFAULT_REGION or us-east-1"},
    {"s3-addressing", KEY_STR, OFF(s3_addressing), SZ(s3_addressing), 0, 0, "auto",
     "path (endpoint/bucket/key), virtual (bucket.endpoint/key) or auto (path with an "
     "endpoint or a dotted bucket)"},
    {"remote-connections", KEY_U32, OFF(remote_connections), 0, 1, 256, "8",
     "parallel ranged reads of remote datasets (the process's HTTP connections)"},
    {"remote-store-fetches", KEY_U32, OFF(remote_store_fetches), 0, 1, 256, "4",
     "remote samples fetched at once from one store (scheme://host:port, or an s3 bucket); "
     "one object gets half of it, rounded up"},
    {"remote-batch-deadline-ms", KEY_U32, OFF(remote_batch_deadline_ms), 0, 100, 3600000, "20000",
     "a batch's remote samples not fetched this long after it was accepted fail "
     "(SAMPLE_IO_ERROR naming the store) and the rest of the batch is served"},
    {"remote-readahead", KEY_BYTES, OFF(remote_readahead), 0, 0, 64 * GiB, "64M",
     "bytes of queued batches' samples fetched ahead and not yet read; 0 = no read-ahead"},
    {"remote-timeout-ms", KEY_U32, OFF(remote_timeout_ms), 0, 100, 3600000, "30000",
     "one remote request's limit"},
    {"remote-retries", KEY_U32, OFF(remote_retries), 0, 0, 100, "4",
     "retries of a remote request after a 5xx, a timeout or a cut connection (backoff 50 ms "
     "doubling to 2 s)"},
    {"remote-redirects", KEY_STR, OFF(remote_redirects), SZ(remote_redirects), 0, 0, "none",
     "which HTTP redirects an http(s):// dataset follows: none (a 30x fails the read) or "
     "same-host (the same scheme and host:port, at most 3 hops; never https to http)"},
    {"shard-files", KEY_U32, OFF(shard_files), 0, 0, 1000000, "0",
     "descriptors of local tar shards kept open while unused (least recently used closed "
     "first); 0 = a quarter of the open-file limit less its connection reserve, at most 4096; "
     "feedd does not start when the limit leaves no room for them and for connections"},
    {"log-level", KEY_LEVEL, OFF(log_level), 0, 0, 0, "info", "error, warn, info or debug"},
};
#define N_KEYS (sizeof keys / sizeof keys[0])

int feedd_parse_bytes(const char *s, uint64_t *out)
{
    char *end = NULL;
    if (!s || !isdigit((unsigned char)s[0]))
        return FEED_EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return FEED_EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        return FEED_EINVAL;
    }
    if (shift) {
        end++;
        if (*end == 'i' || *end == 'B')
            end++;
        if (*end == 'B')
            end++;
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return FEED_EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

/* v as the user would write it: sizes with the largest exact K/M/G suffix. */
static void fmt_value(const key_def *k, uint64_t v, char *out, size_t cap)
{
    static const char suffix[] = " KMG";
    int unit = 0;
    if (k->type == KEY_BYTES && v != 0)
        for (unit = 3; unit > 0 && (v & ((1ull << (10 * unit)) - 1)) != 0; unit--)
            ;
    if (unit > 0)
        snprintf(out, cap, "%llu%c", (unsigned long long)(v >> (10 * unit)), suffix[unit]);
    else
        snprintf(out, cap, "%llu", (unsigned long long)v);
}

/*
 * The options after a dataset's path, each ",cache=SIDE", ",share=SIDE" (or "off") or
 * ",bad_shards=serve|refuse", taken from the end of value while the text
 * after its last comma is one: fills d and returns where the path ends.
 * FEED_EINVAL in *rc for a bad option value.
 */
static const char *dataset_options(const char *path, const char *end, feedd_dataset_arg *d, int *rc,
                                   char *err, size_t cap)
{
    static const char cache_key[] = "cache=", share_key[] = "share=", bad_key[] = "bad_shards=";
    *rc = 0;
    for (;;) {
        const char *comma = NULL;
        for (const char *p = path; p < end; p++)
            if (*p == ',')
                comma = p;
        if (!comma)
            return end;
        const char *opt = comma + 1;
        size_t n = (size_t)(end - opt);
        char v[32];
        const char *side_key =
            n > strlen(cache_key) && strncmp(opt, cache_key, strlen(cache_key)) == 0   ? cache_key
            : n > strlen(share_key) && strncmp(opt, share_key, strlen(share_key)) == 0 ? share_key
                                                                                       : NULL;
        if (side_key && n - strlen(side_key) < sizeof v) {
            memcpy(v, opt + strlen(side_key), n - strlen(side_key));
            v[n - strlen(side_key)] = '\0';
            uint64_t side = 0;
            if (strcmp(v, "off") != 0 &&
                feed_parse_u64(v, FEEDD_CACHE_SIDE_MIN, FEEDD_CACHE_SIDE_MAX, &side) < 0) {
                feed_set_err(err, cap, "dataset: %s%s is not off or a shorter side %d..%d",
                             side_key, v, FEEDD_CACHE_SIDE_MIN, FEEDD_CACHE_SIDE_MAX);
                *rc = FEED_EINVAL;
                return end;
            }
            *(side_key == cache_key ? &d->cache_side : &d->share_side) = (uint32_t)side;
        } else if (n >= strlen(bad_key) && strncmp(opt, bad_key, strlen(bad_key)) == 0) {
            const char *b = opt + strlen(bad_key);
            size_t bl = (size_t)(end - b);
            if (bl == 5 && memcmp(b, "serve", 5) == 0) {
                d->refuse_bad_shards = 0;
            } else if (bl == 6 && memcmp(b, "refuse", 6) == 0) {
                d->refuse_bad_shards = 1;
            } else {
                feed_set_err(err, cap, "dataset: bad_shards=%.*s is not serve or refuse",
                             (int)(bl < 32 ? bl : 32), b);
                *rc = FEED_EINVAL;
                return end;
            }
        } else {
            return end;
        }
        end = comma;
    }
}

/*
 * A value as an error message shows it: a URL without its userinfo and
 * query (feed_location_redact), so a --dataset with a password or a
 * presigned signature never reaches stderr.
 */
static const char *shown(const char *value, char *buf, size_t cap)
{
    feed_location_redact(value, buf, cap);
    return buf;
}

static int add_dataset(feedd_config *cfg, const char *value, char *err, size_t cap)
{
    const char *eq = strchr(value, '=');
    int rc = 0;
    char buf[FEEDD_PATH_MAX];
    if (cfg->n_datasets >= FEEDD_MAX_DATASETS) {
        feed_set_err(err, cap, "dataset: more than %d datasets", FEEDD_MAX_DATASETS);
        return FEED_EINVAL;
    }
    feedd_dataset_arg *d = &cfg->datasets[cfg->n_datasets];
    memset(d, 0, sizeof *d);
    const char *end =
        eq ? dataset_options(eq + 1, eq + strlen(eq), d, &rc, err, cap) : value + strlen(value);
    if (rc < 0)
        return rc;
    if (!eq || eq == value || end == eq + 1) {
        feed_set_err(
            err, cap,
            "dataset: expected NAME=PATH[,cache=SIDE][,share=SIDE][,bad_shards=serve|refuse], got "
            "'%s'",
            shown(value, buf, sizeof buf));
        return FEED_EINVAL;
    }
    size_t nlen = (size_t)(eq - value), plen = (size_t)(end - (eq + 1));
    if (memchr(value, ':', nlen) || memchr(value, '/', nlen)) {
        /* A location without NAME= whose query holds '=': the name would be the URL. */
        feed_set_err(err, cap, "dataset: a name holds no ':' or '/' (NAME=PATH), got '%s'",
                     shown(value, buf, sizeof buf));
        return FEED_EINVAL;
    }
    if (nlen >= FEEDD_NAME_MAX || plen >= FEEDD_PATH_MAX) {
        feed_set_err(err, cap, "dataset: name or path too long in '%s'",
                     shown(value, buf, sizeof buf));
        return FEED_EINVAL;
    }
    memcpy(d->name, value, nlen);
    d->name[nlen] = '\0';
    for (size_t i = 0; i < cfg->n_datasets; i++) {
        if (strcmp(cfg->datasets[i].name, d->name) == 0) {
            feed_set_err(err, cap, "dataset: name '%s' given twice", d->name);
            return FEED_EINVAL;
        }
    }
    memcpy(d->path, eq + 1, plen);
    d->path[plen] = '\0';
    cfg->n_datasets++;
    return 0;
}

static int apply(feedd_config *cfg, const key_def *k, const char *value, char *err, size_t cap)
{
    char *base = (char *)cfg;
    uint64_t v = 0;
    switch (k->type) {
    case KEY_CONFIG:
        return 0;
    case KEY_DATASET:
        return add_dataset(cfg, value, err, cap);
    case KEY_STR:
        if (strlen(value) >= k->size) {
            feed_set_err(err, cap, "%s: value longer than %zu bytes", k->name, k->size - 1);
            return FEED_EINVAL;
        }
        memcpy(base + k->offset, value, strlen(value) + 1);
        return 0;
    case KEY_LEVEL: {
        int lvl = feed_log_parse_level(value);
        if (lvl < 0) {
            feed_set_err(err, cap, "%s: '%s' is not error, warn, info or debug", k->name, value);
            return FEED_EINVAL;
        }
        *(int *)(void *)(base + k->offset) = lvl;
        return 0;
    }
    case KEY_U32:
    case KEY_U64:
    case KEY_BYTES:
        if ((k->type == KEY_BYTES ? feedd_parse_bytes(value, &v)
                                  : feed_parse_u64(value, 0, UINT64_MAX, &v)) < 0) {
            feed_set_err(err, cap, "%s: '%s' is not a %s", k->name, value,
                         k->type == KEY_BYTES ? "size (e.g. 512M)" : "number");
            return FEED_EINVAL;
        }
        if (v < k->min || v > k->max) {
            char sv[32], lo[32], hi[32];
            fmt_value(k, v, sv, sizeof sv);
            fmt_value(k, k->min, lo, sizeof lo);
            fmt_value(k, k->max, hi, sizeof hi);
            /* The help says what the key is for, and so why the bound is where it is. */
            feed_set_err(err, cap, "%s: %s is outside %s..%s (%s)", k->name, sv, lo, hi, k->help);
            return FEED_EINVAL;
        }
        if (k->type == KEY_U32)
            *(uint32_t *)(void *)(base + k->offset) = (uint32_t)v;
        else
            *(uint64_t *)(void *)(base + k->offset) = v;
        return 0;
    }
    return FEED_EINVAL;
}

static const key_def *find_key(const char *name, size_t len)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(keys[i].name) == len && strncmp(keys[i].name, name, len) == 0)
            return &keys[i];
    return NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int load_file(feedd_config *cfg, const char *path, char *err, size_t cap)
{
    char line[2048];
    int rc = 0, lineno = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        feed_set_err(err, cap, "config: cannot open '%s': %s", path, strerror(errno));
        return FEED_EINVAL;
    }
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            feed_set_err(err, cap, "%s:%d: line longer than %zu bytes", path, lineno,
                         sizeof line - 2);
            rc = FEED_EINVAL;
            goto out;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            feed_set_err(err, cap, "%s:%d: expected 'key = value'", path, lineno);
            rc = FEED_EINVAL;
            goto out;
        }
        *eq = '\0';
        char *name = trim(s), *value = trim(eq + 1);
        const key_def *k = find_key(name, strlen(name));
        if (!k || k->type == KEY_CONFIG) {
            feed_set_err(err, cap, "%s:%d: unknown key '%s'", path, lineno, name);
            rc = FEED_EINVAL;
            goto out;
        }
        char sub[1024];
        rc = apply(cfg, k, value, sub, sizeof sub);
        if (rc < 0) {
            feed_set_err(err, cap, "%s:%d: %s", path, lineno, sub);
            goto out;
        }
    }
out:
    fclose(f);
    return rc;
}

static uint32_t online_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (uint32_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (uint32_t)n : 1;
}

void feedd_config_usage(const char *prog)
{
    printf("usage: %s [--key VALUE | --key=VALUE]...\n\n", prog);
    for (size_t i = 0; i < N_KEYS; i++) {
        const key_def *k = &keys[i];
        printf("  --%-19s %s", k->name, k->help);
        if (k->def && k->def[0])
            printf(" (default %s)", k->def);
        printf("\n");
    }
    printf("  --help                print this\n  --version             print the version\n");
}

int feedd_config_parse(int argc, char **argv, feedd_config *cfg, char *err, size_t cap)
{
    int rc = 0;
    char buf[FEEDD_PATH_MAX];
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_KEYS; i++) {
        if (keys[i].def) {
            rc = apply(cfg, &keys[i], keys[i].def, err, cap);
            if (rc < 0)
                return rc;
        }
    }
    /* --config first, so the command line overrides the file. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            feedd_config_usage(argv[0]);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("feedd %s\n", FEED_VERSION);
            return 1;
        }
        const char *path = NULL;
        if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[++i];
        if (path) {
            rc = load_file(cfg, path, err, cap);
            if (rc < 0)
                return rc;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            feed_set_err(err, cap, "unexpected argument '%s'", shown(a, buf, sizeof buf));
            return FEED_EINVAL;
        }
        a += 2;
        const char *eq = strchr(a, '=');
        const key_def *k = find_key(a, eq ? (size_t)(eq - a) : strlen(a));
        if (!k) {
            feed_set_err(err, cap, "unknown option '%s' (see --help)",
                         shown(argv[i], buf, sizeof buf));
            return FEED_EINVAL;
        }
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) {
                feed_set_err(err, cap, "%s: missing value", k->name);
                return FEED_EINVAL;
            }
            value = argv[++i];
        }
        rc = apply(cfg, k, value, err, cap);
        if (rc < 0)
            return rc;
    }
    if (cfg->threads == 0)
        cfg->threads = online_cores();
    if (cfg->cq_threads == 0) {
        cfg->cq_threads = cfg->threads / 4;
        cfg->cq_threads = cfg->cq_threads < 1 ? 1 : cfg->cq_threads > 4 ? 4 : cfg->cq_threads;
    }
    if (cfg->max_stream_memory > cfg->max_memory)
        cfg->max_stream_memory = cfg->max_memory;
    if (cfg->max_batch_bytes > cfg->max_stream_memory)
        cfg->max_batch_bytes = cfg->max_stream_memory;
    if (!cfg->tls_cert[0] != !cfg->tls_key[0]) {
        feed_set_err(err, cap, "%s: tls-cert and tls-key go together",
                     cfg->tls_cert[0] ? "tls-key" : "tls-cert");
        return FEED_EINVAL;
    }
    if (cfg->health_listen[0] && !cfg->tls_cert[0]) {
        feed_set_err(err, cap,
                     "health-listen: only with tls-cert; without TLS probe the gRPC "
                     "port itself");
        return FEED_EINVAL;
    }
    if (cfg->tls_client_ca[0] && !cfg->tls_cert[0]) {
        feed_set_err(err, cap, "tls-client-ca: mutual TLS needs tls-cert and tls-key");
        return FEED_EINVAL;
    }
    if (strcmp(cfg->listener, "feedd") != 0 && strcmp(cfg->listener, "grpc") != 0) {
        feed_set_err(err, cap, "listener: '%s' is not feedd or grpc", cfg->listener);
        return FEED_EINVAL;
    }
    if (strcmp(cfg->s3_addressing, "auto") != 0 && strcmp(cfg->s3_addressing, "path") != 0 &&
        strcmp(cfg->s3_addressing, "virtual") != 0) {
        feed_set_err(err, cap, "s3-addressing: '%s' is not auto, path or virtual",
                     cfg->s3_addressing);
        return FEED_EINVAL;
    }
    if (strcmp(cfg->remote_redirects, "none") != 0 &&
        strcmp(cfg->remote_redirects, "same-host") != 0) {
        feed_set_err(err, cap, "remote-redirects: '%s' is not none or same-host",
                     cfg->remote_redirects);
        return FEED_EINVAL;
    }
    if (cfg->n_datasets == 0) {
        feed_set_err(err, cap, "dataset: at least one --dataset NAME=PATH is needed");
        return FEED_EINVAL;
    }
    for (size_t i = 0; i < cfg->n_datasets; i++) {
        if (cfg->datasets[i].cache_side && cfg->cache_bytes == 0) {
            feed_set_err(err, cap, "dataset %s: cache=%u needs --cache-bytes",
                         cfg->datasets[i].name, cfg->datasets[i].cache_side);
            return FEED_EINVAL;
        }
        if (cfg->datasets[i].share_side && cfg->datasets[i].cache_side &&
            cfg->datasets[i].share_side != cfg->datasets[i].cache_side) {
            feed_set_err(err, cap,
                         "dataset %s: share=%u and cache=%u differ: a shared image and a cached "
                         "one must be the same image",
                         cfg->datasets[i].name, cfg->datasets[i].share_side,
                         cfg->datasets[i].cache_side);
            return FEED_EINVAL;
        }
        if (cfg->datasets[i].share_side && cfg->share_window_bytes == 0)
            cfg->share_window_bytes = FEEDD_SHARE_WINDOW_DEFAULT;
    }
    return 0;
}
