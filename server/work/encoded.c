/*
 * Encoded batches: the layout at acceptance and the finish; see encoded.h.
 */
#include "encoded.h"

#include <stdio.h>
#include <string.h>

#include "feed/crc32c.h"

uint64_t feedd_encoded_plan(const feed_dataset *ds, const uint64_t *indices, uint32_t n,
                            uint64_t max_sample_bytes, uint64_t max_batch_bytes, uint64_t *off,
                            feed_sample_status *status, char (*errors)[FEEDD_SAMPLE_MSG_MAX + 1])
{
    uint64_t total = 0;
    off[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t len = feed_dataset_sample_length(ds, indices[i]);
        if (len == UINT64_MAX)
            len = 0; /* not known at open: a read that finds bytes reports the change */
        status[i] = FEED_SAMPLE_OK;
        errors[i][0] = '\0';
        if (len > max_sample_bytes) {
            status[i] = FEED_SAMPLE_TOO_LARGE;
            snprintf(errors[i], sizeof errors[i], "encoded: %llu bytes > max-jpeg-bytes %llu",
                     (unsigned long long)len, (unsigned long long)max_sample_bytes);
        } else if (len > max_batch_bytes - total) {
            status[i] = FEED_SAMPLE_TOO_LARGE;
            snprintf(errors[i], sizeof errors[i],
                     "encoded: %llu bytes would take the batch past max_batch_bytes %llu "
                     "(%llu bytes before it)",
                     (unsigned long long)len, (unsigned long long)max_batch_bytes,
                     (unsigned long long)total);
        } else {
            total += len;
        }
        off[i + 1] = total;
    }
    return total;
}

uint32_t feedd_encoded_finish(feedd_job *job)
{
    size_t at = 0;
    for (uint32_t i = 0; i < job->n; i++) {
        size_t from = (size_t)job->enc_off[i];
        if (job->enc_len[i] && from != at)
            memmove(job->data + at, job->data + from, job->enc_len[i]);
        at += job->enc_len[i];
    }
    job->data_len = at;
    return at ? feed_crc32c(0, job->data, at) : 0;
}
