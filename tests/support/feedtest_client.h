/*
 * What the client tests against real feedd processes set up alike: the
 * loader's log on stderr and a host-side config. Header only, so that the
 * support library does not depend on libfeedclient; any thread.
 */
#ifndef FEED_TESTS_SUPPORT_FEEDTEST_CLIENT_H
#define FEED_TESTS_SUPPORT_FEEDTEST_CLIENT_H

#include <stdio.h>
#include <stdlib.h>

#include "feed/client.h"

/* A log_fn: warnings and errors on stderr, everything with FEED_TEST_VERBOSE set. */
static inline void feed_test_log_stderr(void *user, int level, const char *msg)
{
    (void)user;
    if (level <= 1 || getenv("FEED_TEST_VERBOSE"))
        fprintf(stderr, "  [client %d] %s\n", level, msg);
}

/*
 * Defaults, then: targets[0, n), dataset, side x side uint8 NHWC on the host, batch samples a
 * batch, two batches outstanding a server and two prefetched, 120 s deadlines (hang guards on a
 * loaded machine, not timing), log_fn (NULL: feed_test_log_stderr).
 */
static inline void feed_test_host_config(feed_loader_config *c, const char *const *targets,
                                         size_t n, const char *dataset, uint32_t side,
                                         uint32_t batch, feed_client_log_fn log_fn)
{
    feed_loader_config_default(c);
    c->targets = targets;
    c->num_targets = n;
    c->dataset = dataset;
    c->transform.out_h = c->transform.out_w = side;
    c->batch_size = batch;
    c->window_per_server = 2;
    c->prefetch = 2;
    c->dtype = FEED_DTYPE_UINT8;
    c->layout = FEED_LAYOUT_NHWC;
    c->device = FEED_DEVICE_HOST;
    c->batch_deadline_ms = 120000;
    c->unavailable_timeout_ms = 120000;
    c->log_fn = log_fn ? log_fn : feed_test_log_stderr;
}

#endif
