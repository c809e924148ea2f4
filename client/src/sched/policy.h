/*
 * The loader's policy decisions, apart from the wire code that feeds them and
 * with no I/O, so unit tests call them directly: whether a server's Describe
 * makes it usable for this loader (dataset served, same size, batch within
 * its limits, its window), and the bad-sample policy over a landed batch.
 * Pure functions; any thread.
 */
#ifndef FEED_CLIENT_POLICY_H
#define FEED_CLIENT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "feed/client.h"

/* Hex digits in a dataset fingerprint (SHA-256). */
#define POLICY_FINGERPRINT_LEN 64u

/* What one server's Describe said about the loader's dataset. */
typedef struct policy_server_info {
    bool served; /* the dataset is among those it serves */
    uint64_t num_samples;
    uint32_t max_batch_size;  /* 0: not stated */
    uint64_t max_batch_bytes; /* 0: not stated */
    uint32_t max_window;      /* 0: not stated */
} policy_server_info;

typedef enum policy_verdict {
    POLICY_USE,             /* *window says how many batches it may owe */
    POLICY_NOT_SERVED,      /* the dataset is not there */
    POLICY_SIZE_DIFFERS,    /* another sample count than the servers already seen */
    POLICY_BATCH_TOO_LARGE, /* the configured batch is beyond its limits */
} policy_verdict;

/* known_samples: the dataset size learnt from earlier servers, 0 if none yet. why gets a
 * message for the log (always NUL-terminated when cap > 0). */
policy_verdict policy_check_server(const feed_loader_config *cfg, uint64_t known_samples,
                                   const policy_server_info *info, uint32_t *window, char *why,
                                   size_t why_cap);

/*
 * Whether a server's dataset fingerprint (DatasetInfo.fingerprint: 64
 * lowercase hex digits, or "" from a feedd older than the field) lets the loader
 * use it. known: the fingerprint the loader took from known_from, the first
 * server it used that stated one ("" if none yet). A server that states none
 * is accepted unchecked; a malformed one, or one other than known, is
 * refused, with why naming both fingerprints and both servers.
 */
bool policy_check_fingerprint(const char *dataset, const char *known, const char *known_from,
                              const char *target, const char *got, char *why, size_t why_cap);

/*
 * The bad-sample policy over a batch of n samples with the server's statuses.
 * SUBSTITUTE: each failed sample gets the pixels (sample_bytes of raw) and
 * label of the next good sample after it, cyclically, so the result is a
 * function of the batch alone; *substituted counts them. Returns 0, or
 * FEED_EBADSAMPLE when a sample failed under FAIL or no sample of the batch
 * is good.
 */
int policy_bad_samples(feed_bad_sample_policy policy, uint32_t n, const uint8_t *status,
                       int64_t *labels, uint8_t *raw, size_t sample_bytes, uint32_t *substituted);

#endif
