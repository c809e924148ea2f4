/*
 * The remote source: libfeedclient streaming from feedd servers. On a GPU the
 * client delivers fp32 NCHW batches already normalised on the device, with a
 * ready event the step waits on; on the CPU it delivers uint8 NHWC in host
 * memory, and the CPU step normalises as it pools. The epoch is planned by
 * the client from the same seed; at the end of one the source starts the next.
 *
 * Owned and called by the training thread; the loader runs its own threads.
 */
#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/client.h"
#include "feed/errors.h"

typedef struct remote_source {
    bench_source base;
    feed_loader *loader;
    bench_step *step;
    uint32_t epoch;
    uint64_t bad_batches; /* handed out with FEED_EBADSAMPLE (no good sample), skipped */
} remote_source;

static void client_log(void *user, int level, const char *message)
{
    (void)user;
    if (level <= 1) /* errors and warnings */
        fprintf(stderr, "feed-bench: client: %s\n", message);
}

static int remote_next(bench_source *base, bench_batch *b)
{
    remote_source *s = (remote_source *)base;
    feed_batch *fb = NULL;
    uint32_t skipped_samples = 0;
    int rc;
    do {
        rc = feed_loader_next(s->loader, &fb);
        if (rc == FEED_EEOF) {
            rc = feed_loader_set_epoch(s->loader, ++s->epoch, 0);
            if (rc == 0)
                rc = feed_loader_next(s->loader, &fb);
        }
        /* A batch with no good sample still holds its slot: give it back, count it, go on. */
        if (rc == FEED_EBADSAMPLE && fb) {
            s->bad_batches++;
            skipped_samples += fb->n;
            int rrc = feed_loader_release(s->loader, fb, s->step->ops->stream(s->step));
            if (rrc)
                rc = rrc;
        }
    } while (rc == FEED_EBADSAMPLE && fb);
    if (rc)
        return rc;
    memset(b, 0, sizeof *b);
    if (s->step->info.on_gpu) {
        b->device_data = fb->data;
        b->device_labels = fb->labels_device;
        b->ready_event = fb->ready_event;
    } else {
        b->pixels = fb->data;
        b->labels = fb->labels;
    }
    b->n = fb->n;
    b->bad_samples = fb->substituted + skipped_samples;
    b->handle = fb;
    return 0;
}

static void remote_release(bench_source *base, bench_batch *b)
{
    remote_source *s = (remote_source *)base;
    int rc = feed_loader_release(s->loader, b->handle, s->step->ops->stream(s->step));
    if (rc)
        fprintf(stderr, "feed-bench: remote: release: %s\n", feed_strerror(rc));
}

static void remote_close(bench_source *base)
{
    remote_source *s = (remote_source *)base;
    if (s->bad_batches)
        fprintf(stderr, "feed-bench: remote: %llu batches without a good sample skipped\n",
                (unsigned long long)s->bad_batches);
    feed_loader_stats st;
    if (s->loader && feed_loader_get_stats(s->loader, &st, sizeof st) == 0 &&
        (st.lane_decoded || st.lane_rerequested))
        fprintf(stderr,
                "feed-bench: remote: decode lane: %llu samples decoded by the client, %llu sent "
                "back to the servers\n",
                (unsigned long long)st.lane_decoded, (unsigned long long)st.lane_rerequested);
    feed_loader_close(s->loader);
    free(s);
}

static const source_ops remote_ops = {remote_next, remote_release, remote_close};

int source_remote_open(const source_config *cfg, bench_source **out, char *err, size_t err_cap)
{
    int rc = FEED_ENOMEM;
    feed_loader_config lc;
    remote_source *s = calloc(1, sizeof *s);
    if (!s)
        goto out;
    s->base.ops = &remote_ops;
    s->base.name = "remote";
    s->step = cfg->step;

    feed_loader_config_default(&lc);
    lc.targets = cfg->targets;
    lc.num_targets = cfg->num_targets;
    lc.dataset = cfg->dataset_name;
    lc.transform = cfg->transform;
    lc.batch_size = cfg->batch;
    lc.seed = cfg->seed;
    lc.epoch = 0;
    lc.drop_last = true;
    lc.ordered = cfg->ordered;
    lc.owner_routing = cfg->owner_routing;
    lc.decode_lane = cfg->decode_lane;
    lc.decode_share = cfg->decode_share;
    lc.decode_share_max = cfg->decode_share_max;
    lc.decode_lane_threads = cfg->decode_lane_threads;
    lc.rank = cfg->rank;
    lc.world = cfg->world ? cfg->world : 1;
    if (cfg->window)
        lc.window_per_server = cfg->window;
    if (cfg->prefetch)
        lc.prefetch = cfg->prefetch;
    memcpy(lc.mean, cfg->mean, sizeof lc.mean);
    memcpy(lc.std, cfg->std, sizeof lc.std);
    if (cfg->step->info.on_gpu) {
        lc.device = cfg->device;
        lc.dtype = FEED_DTYPE_FP32;
        lc.layout = FEED_LAYOUT_NCHW;
    } else {
        lc.device = FEED_DEVICE_HOST;
        lc.dtype = FEED_DTYPE_UINT8;
        lc.layout = FEED_LAYOUT_NHWC;
    }
    lc.token = cfg->token;
    lc.tls_ca_file = cfg->tls_ca_file;
    lc.tls_cert_file = cfg->tls_cert_file;
    lc.tls_key_file = cfg->tls_key_file;
    lc.log_fn = client_log;
    rc = feed_loader_open(&lc, &s->loader);
    if (rc) {
        snprintf(err, err_cap, "remote: feed_loader_open: %s (%s)", feed_strerror(rc),
                 feed_err_name(rc));
        goto out;
    }
    *out = &s->base;
    s = NULL;
out:
    if (s)
        remote_close(&s->base);
    return rc;
}
