/*
 * feedd's configuration: one table (config.c) drives command-line and
 * config-file parsing, bounds, defaults and the --help text. Filled once by
 * the main thread before any other thread starts; read-only afterwards.
 */
#ifndef FEED_SERVER_CONFIG_H
#define FEED_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#define FEEDD_MAX_DATASETS 64
#define FEEDD_NAME_MAX 64
#define FEEDD_PATH_MAX 1024

/* Bounds of a dataset's cache=SIDE (the decoded-sample cache's shorter side). */
#define FEEDD_CACHE_SIDE_MIN 16
#define FEEDD_CACHE_SIDE_MAX 4096
/* --share-window-bytes 0 with a dataset with share=SIDE (the same bounds as cache=SIDE). */
#define FEEDD_SHARE_WINDOW_DEFAULT (64ull << 20)

typedef struct feedd_dataset_arg {
    char name[FEEDD_NAME_MAX];
    char path[FEEDD_PATH_MAX];
    uint32_t cache_side;   /* cache=SIDE: decoded-sample cache at this shorter side; 0 = off */
    uint32_t share_side;   /* share=SIDE: decode shared between jobs at this side; 0 = off */
    int refuse_bad_shards; /* bad_shards=refuse (feed_dataset_limits.refuse_bad_shards) */
} feedd_dataset_arg;

typedef struct feedd_config {
    char listen[256];
    char port_file[FEEDD_PATH_MAX];
    char metrics_listen[256]; /* "" = no metrics endpoint */
    char metrics_port_file[FEEDD_PATH_MAX];
    /* Trust (trust.h): "" = off. */
    char tls_cert[FEEDD_PATH_MAX];
    char tls_key[FEEDD_PATH_MAX];
    char tls_client_ca[FEEDD_PATH_MAX];
    char auth_token_file[FEEDD_PATH_MAX];
    char metrics_token_file[FEEDD_PATH_MAX];
    char health_listen[256]; /* plaintext Health-only port beside the TLS one; "" = none */
    char health_port_file[FEEDD_PATH_MAX];
    uint32_t threads;    /* preprocessing workers; 0 on the command line = all cores */
    uint32_t cq_threads; /* gRPC completion-queue threads; 0 = auto */
    uint64_t max_memory; /* all batch buffers together */
    uint64_t max_stream_memory;
    uint64_t max_batch_bytes;
    uint64_t max_request_bytes; /* GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH */
    uint32_t max_batch;
    uint32_t max_window;
    uint32_t max_streams;
    uint64_t max_pixels;     /* engine: declared source width*height */
    uint64_t max_jpeg_bytes; /* engine and dataset reader: bytes of one file */
    uint32_t task_samples;   /* samples a worker takes from a batch at a time; 0 = auto */
    uint32_t drain_timeout_ms;
    uint32_t fleet_window_ms;  /* fleet.h's window */
    uint32_t send_stall_ms;    /* a send pending this long ends its stream; 0 = never */
    uint64_t cache_bytes;      /* decoded-sample cache, shared by the datasets with cache=SIDE */
    uint64_t share_window_bytes; /* share window (window.h); 0 when no dataset has share= */
    uint64_t transport_memory; /* guard.h: beyond start, max_memory and cache_bytes; 0 = off */
    char listener[16];         /* "feedd" (grpc151/, where usable) or "grpc" (gRPC's own) */
    uint32_t idle_timeout_ms;  /* close a connection without calls this long; 0 = never */
    /* Remote datasets (s3://, http(s)://): feed_blob_remote_options, see feed/blob.h. */
    char s3_endpoint[1024]; /* "" = AWS_ENDPOINT_URL or AWS */
    char s3_region[64];     /* "" = AWS_REGION / AWS_DEFAULT_REGION / us-east-1 */
    char s3_addressing[16]; /* auto, path or virtual */
    uint32_t remote_connections;
    uint32_t remote_store_fetches; /* fetch.h */
    uint32_t remote_batch_deadline_ms;
    uint64_t remote_readahead;
    uint32_t remote_timeout_ms;
    uint32_t remote_retries;
    uint32_t shard_files;      /* feed_blob_set_open_files; 0 = auto from the open-file limit */
    char remote_redirects[16]; /* none or same-host */
    int log_level;
    feedd_dataset_arg datasets[FEEDD_MAX_DATASETS];
    size_t n_datasets;
} feedd_config;

/*
 * Defaults, then --config FILE (if given), then the other arguments. Returns
 * 0, 1 when --help/--version was printed (exit 0), or FEED_EINVAL with a
 * message naming the key in err.
 */
int feedd_config_parse(int argc, char **argv, feedd_config *cfg, char *err, size_t err_cap);
/* Prints the keys, their bounds and defaults. */
void feedd_config_usage(const char *prog);
/* Parses "123", "64K", "512M", "2G" (powers of 1024). 0 or FEED_EINVAL. */
int feedd_parse_bytes(const char *s, uint64_t *out);

#endif
