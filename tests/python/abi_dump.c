/*
 * Prints, one per line, "STRUCT SIZE" and "STRUCT.FIELD OFFSET" for every
 * struct of feed/client.h and feed/transform.h that the Python package
 * mirrors with ctypes; test_abi.py compares them with its own layout.
 */
#include <stddef.h>
#include <stdio.h>

#include "feed/client.h"

#define SIZE(T) printf(#T " %zu\n", sizeof(T))
#define FIELD(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))

int main(void)
{
    SIZE(feed_transform);
    FIELD(feed_transform, mode);
    FIELD(feed_transform, out_h);
    FIELD(feed_transform, out_w);
    FIELD(feed_transform, scale_min);
    FIELD(feed_transform, scale_max);
    FIELD(feed_transform, ratio_min);
    FIELD(feed_transform, ratio_max);
    FIELD(feed_transform, flip_prob);
    FIELD(feed_transform, resize_size);

    SIZE(feed_sample_plan);
    FIELD(feed_sample_plan, crop);
    FIELD(feed_sample_plan, flip);

    SIZE(feed_loader_config);
    FIELD(feed_loader_config, struct_size);
    FIELD(feed_loader_config, targets);
    FIELD(feed_loader_config, num_targets);
    FIELD(feed_loader_config, dataset);
    FIELD(feed_loader_config, transform);
    FIELD(feed_loader_config, batch_size);
    FIELD(feed_loader_config, seed);
    FIELD(feed_loader_config, epoch);
    FIELD(feed_loader_config, start_batch);
    FIELD(feed_loader_config, rank);
    FIELD(feed_loader_config, world);
    FIELD(feed_loader_config, drop_last);
    FIELD(feed_loader_config, ordered);
    FIELD(feed_loader_config, window_per_server);
    FIELD(feed_loader_config, prefetch);
    FIELD(feed_loader_config, max_slots);
    FIELD(feed_loader_config, dtype);
    FIELD(feed_loader_config, layout);
    FIELD(feed_loader_config, mean);
    FIELD(feed_loader_config, std);
    FIELD(feed_loader_config, device);
    FIELD(feed_loader_config, bad_sample_policy);
    FIELD(feed_loader_config, batch_deadline_ms);
    FIELD(feed_loader_config, unavailable_timeout_ms);
    FIELD(feed_loader_config, resolve_interval_ms);
    FIELD(feed_loader_config, log_fn);
    FIELD(feed_loader_config, log_user);
    FIELD(feed_loader_config, token);
    FIELD(feed_loader_config, tls_ca_file);
    FIELD(feed_loader_config, tls_cert_file);
    FIELD(feed_loader_config, tls_key_file);
    FIELD(feed_loader_config, owner_routing);
    FIELD(feed_loader_config, augment);
    FIELD(feed_loader_config, demand_window_ms);
    FIELD(feed_loader_config, job);
    FIELD(feed_loader_config, job_weight);
    FIELD(feed_loader_config, aug_seed);
    FIELD(feed_loader_config, aug_seed_set);
    FIELD(feed_loader_config, share);
    FIELD(feed_loader_config, decode_lane);
    FIELD(feed_loader_config, decode_share);
    FIELD(feed_loader_config, decode_lane_threads);
    FIELD(feed_loader_config, decode_lane_max_bytes);
    FIELD(feed_loader_config, decode_share_max);

    SIZE(feed_batch);
    FIELD(feed_batch, data);
    FIELD(feed_batch, bytes);
    FIELD(feed_batch, labels_device);
    FIELD(feed_batch, labels);
    FIELD(feed_batch, indices);
    FIELD(feed_batch, status);
    FIELD(feed_batch, n);
    FIELD(feed_batch, c);
    FIELD(feed_batch, h);
    FIELD(feed_batch, w);
    FIELD(feed_batch, dtype);
    FIELD(feed_batch, layout);
    FIELD(feed_batch, epoch);
    FIELD(feed_batch, batch_number);
    FIELD(feed_batch, substituted);
    FIELD(feed_batch, wait_ns);
    FIELD(feed_batch, ready_event);

    SIZE(feed_loader_stats);
    FIELD(feed_loader_stats, batches);
    FIELD(feed_loader_stats, samples);
    FIELD(feed_loader_stats, bytes_received);
    FIELD(feed_loader_stats, wait_ns_total);
    FIELD(feed_loader_stats, wait_ns_max);
    FIELD(feed_loader_stats, failovers);
    FIELD(feed_loader_stats, reissued);
    FIELD(feed_loader_stats, retries);
    FIELD(feed_loader_stats, crc_errors);
    FIELD(feed_loader_stats, sample_errors);
    FIELD(feed_loader_stats, servers_known);
    FIELD(feed_loader_stats, servers_up);
    FIELD(feed_loader_stats, hedged);
    FIELD(feed_loader_stats, dataset_fingerprint);
    FIELD(feed_loader_stats, fingerprint_refused);
    FIELD(feed_loader_stats, lane_decoded);
    FIELD(feed_loader_stats, lane_rerequested);
    FIELD(feed_loader_stats, steps_timed);

    SIZE(feed_server_stats);
    FIELD(feed_server_stats, target);
    FIELD(feed_server_stats, up);
    FIELD(feed_server_stats, batches);
    FIELD(feed_server_stats, outstanding);
    FIELD(feed_server_stats, last_status);
    FIELD(feed_server_stats, last_error);
    FIELD(feed_server_stats, refused);
    FIELD(feed_server_stats, fingerprint);
    FIELD(feed_server_stats, fingerprint_differs);

    printf("FEED_SAMPLE_STATUS_COUNT %d\n", (int)FEED_SAMPLE_STATUS_COUNT);
    printf("FEED_DEVICE_HOST %d\n", FEED_DEVICE_HOST);
    printf("FEED_DTYPE_BF16 %d\n", (int)FEED_DTYPE_BF16);
    printf("FEED_LAYOUT_NHWC %d\n", (int)FEED_LAYOUT_NHWC);
    printf("FEED_BAD_SAMPLE_FAIL %d\n", (int)FEED_BAD_SAMPLE_FAIL);
    printf("FEED_TRANSFORM_EVAL %d\n", (int)FEED_TRANSFORM_EVAL);
    return 0;
}
