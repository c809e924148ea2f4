/*
 * The loader's policy (policy.h): which servers it uses (their limits, the
 * dataset's size and fingerprint) and what it does with failed samples.
 * Called by conn.c (Describe replies) and sched.c (landing a batch); decides,
 * does no I/O.
 */
#include "policy.h"

#include <stdio.h>
#include <string.h>

#include "feed/errors.h"

policy_verdict policy_check_server(const feed_loader_config *cfg, uint64_t known_samples,
                                   const policy_server_info *info, uint32_t *window, char *why,
                                   size_t why_cap)
{
    policy_verdict v = POLICY_USE;
    uint64_t batch_bytes =
        (uint64_t)cfg->batch_size * cfg->transform.out_h * cfg->transform.out_w * 3;
    if (why_cap)
        why[0] = '\0';
    if (!info->served) {
        v = POLICY_NOT_SERVED;
        snprintf(why, why_cap, "dataset %s not served", cfg->dataset);
    } else if (info->num_samples == 0 || (known_samples && info->num_samples != known_samples)) {
        v = POLICY_SIZE_DIFFERS;
        snprintf(why, why_cap, "dataset %s has %llu samples, expected %llu", cfg->dataset,
                 (unsigned long long)info->num_samples, (unsigned long long)known_samples);
    } else if ((info->max_batch_size && info->max_batch_size < cfg->batch_size) ||
               (info->max_batch_bytes && info->max_batch_bytes < batch_bytes)) {
        v = POLICY_BATCH_TOO_LARGE;
        snprintf(why, why_cap,
                 "batch of %u (%llu bytes) beyond its max_batch_size %u / max_batch_bytes %llu",
                 cfg->batch_size, (unsigned long long)batch_bytes, info->max_batch_size,
                 (unsigned long long)info->max_batch_bytes);
    }
    *window = cfg->window_per_server;
    if (info->max_window && info->max_window < *window)
        *window = info->max_window;
    return v;
}

static bool fingerprint_form(const char *fp)
{
    size_t n = 0;
    for (; fp[n] && n <= POLICY_FINGERPRINT_LEN; n++)
        if (!((fp[n] >= '0' && fp[n] <= '9') || (fp[n] >= 'a' && fp[n] <= 'f')))
            return false;
    return n == POLICY_FINGERPRINT_LEN;
}

bool policy_check_fingerprint(const char *dataset, const char *known, const char *known_from,
                              const char *target, const char *got, char *why, size_t why_cap)
{
    bool use = true;
    if (why_cap)
        why[0] = '\0';
    if (got[0] && !fingerprint_form(got)) {
        use = false;
        snprintf(why, why_cap,
                 "dataset %s fingerprint '%.80s' is not 64 lowercase hex digits; not using "
                 "server %s",
                 dataset, got, target);
    } else if (got[0] && known[0] && strcmp(got, known) != 0) {
        use = false;
        snprintf(why, why_cap,
                 "dataset %s fingerprint %s differs from %s, which server %s serves; not using "
                 "server %s: its samples are other data under the same name and count",
                 dataset, got, known, known_from, target);
    }
    return use;
}

int policy_bad_samples(feed_bad_sample_policy policy, uint32_t n, const uint8_t *status,
                       int64_t *labels, uint8_t *raw, size_t sample_bytes, uint32_t *substituted)
{
    uint32_t bad = 0;
    bool unfixable = false;
    *substituted = 0;
    for (uint32_t i = 0; i < n; i++)
        bad += status[i] != FEED_SAMPLE_OK;
    if (bad && policy == FEED_BAD_SAMPLE_SUBSTITUTE) {
        for (uint32_t i = 0; i < n && !unfixable; i++) {
            if (status[i] == FEED_SAMPLE_OK)
                continue;
            uint32_t j = (i + 1) % n;
            while (j != i && status[j] != FEED_SAMPLE_OK)
                j = (j + 1) % n;
            unfixable = j == i;
            if (unfixable)
                break;
            memcpy(raw + (size_t)i * sample_bytes, raw + (size_t)j * sample_bytes, sample_bytes);
            labels[i] = labels[j];
            (*substituted)++;
        }
    }
    return bad && (unfixable || policy == FEED_BAD_SAMPLE_FAIL) ? FEED_EBADSAMPLE : 0;
}
