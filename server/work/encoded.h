/*
 * Encoded batches (BatchRequest.encoded; docs/design/server.md "Encoded
 * batches"): each sample's JPEG bytes copied into the batch as the dataset
 * holds them, not decoded, for a client that decodes on its own hardware.
 * The stream's owner lays the batch out at acceptance by the samples'
 * lengths as the dataset knew them at open (no I/O), so the memory caps
 * reserve exactly what the batch can hold; pool workers copy each sample's
 * bytes into its room (pool.c); the worker that finishes the batch closes
 * the gaps that failed or shorter samples left and checksums the result.
 * Pure functions over the caller's arguments; any thread.
 */
#ifndef FEED_SERVER_ENCODED_H
#define FEED_SERVER_ENCODED_H

#include <stdint.h>

#include "feed/dataset.h"
#include "feed/errors.h"
#include "pool.h"

/*
 * Lay out n samples (indices into ds) in order: off (n + 1 entries) gets
 * each sample's room, sample i's being [off[i], off[i + 1]) of the batch,
 * its length at open (feed_dataset_sample_length; 0 when unknown). A sample
 * longer than max_sample_bytes, or one that would take the batch past
 * max_batch_bytes, gets no room: its status is FEED_SAMPLE_TOO_LARGE with
 * errors[i] naming the cap; every other status is FEED_SAMPLE_OK and its
 * error "". Returns the batch's bytes, off[n] (at most max_batch_bytes).
 */
uint64_t feedd_encoded_plan(const feed_dataset *ds, const uint64_t *indices, uint32_t n,
                            uint64_t max_sample_bytes, uint64_t max_batch_bytes, uint64_t *off,
                            feed_sample_status *status, char (*errors)[FEEDD_SAMPLE_MSG_MAX + 1]);

/*
 * After every sample of job (job->enc_off set) is made: its samples'
 * bytes (job->enc_len[i] of each, at the start of its room) moved to lie
 * back to back from job->data, their total in job->data_len; returns the
 * CRC32C of those bytes. Samples have no fixed length, so this is one pass
 * over the bytes rather than a combination of per-sample CRCs (a pass costs
 * about what the workers' copies did, against a decode per sample saved).
 */
uint32_t feedd_encoded_finish(feedd_job *job);

#endif
