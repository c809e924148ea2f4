/*
 * The gRPC side of feedd: feed.v1.Feed (Describe, Stream), grpc.health.v1
 * Health/Check, UNIMPLEMENTED for anything else. Completion-queue threads
 * run every gRPC event and never decode; batches are made by the pool
 * (pool.h) and sent by whichever thread completes them. Lifecycle, driven by
 * the main thread: start → drain (on SIGTERM) → stop → free. The service
 * owns its batch-memory accounting (--max-memory, memory.h); the metrics it
 * updates (metrics.h) are process-wide. The files behind this API:
 * service_int.h.
 */
#ifndef FEED_SERVER_SERVICE_H
#define FEED_SERVER_SERVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "feed/dataset.h"
#include "pool.h"
#include "request.h"

typedef struct feedd_service feedd_service;

/*
 * Bind cfg->listen, start the completion-queue threads. datasets (n of them)
 * and pool must outlive the service. *port gets the bound port.
 * 0, FEED_EIO (bind failed) or FEED_ENOMEM; on failure every thread, queue
 * and byte it had taken is given back.
 */
int feedd_service_start(const feedd_config *cfg, const feedd_served_dataset *datasets, size_t n,
                        feedd_pool *pool, feedd_service **out, int *port);
/*
 * Stop taking batches: Health says NOT_SERVING, new streams and new batch
 * requests get UNAVAILABLE, streams end (UNAVAILABLE) once their accepted
 * batches are sent. Returns at once.
 */
void feedd_service_drain(feedd_service *svc);
/* The bound --health-listen port, or 0 when there is none. */
int feedd_service_health_port(const feedd_service *svc);
/* Stream calls still open. */
size_t feedd_service_open_streams(feedd_service *svc);
/*
 * feedd_metrics_extra_fn over a feedd_service: feedd_stream_memory_bytes
 * per open stream, labelled by stream number (one connection may carry
 * several streams of one client), peer and client name.
 */
size_t feedd_service_render_streams(void *svc, char *buf, size_t cap);
/*
 * Shut gRPC down, cancelling what is left, and join the threads. 0, or
 * FEED_ETIMEDOUT when gRPC still held calls after grace_ms (a peer that
 * stopped reading): then nothing is torn down and the caller should exit the
 * process rather than free the service.
 */
int feedd_service_stop(feedd_service *svc, uint32_t grace_ms);
void feedd_service_free(feedd_service *svc); /* accepts NULL; after a stop that returned 0 */

#endif
