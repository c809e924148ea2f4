/*
 * libfeedclient's public API (feed/client.h): configuration, open/close, and
 * the training thread's side of delivery (next/release/set_epoch/stats). The
 * receiver threads and the dispatch thread (net/io.c) and the scheduler
 * (sched.c) do the rest. Locks (client_impl.h): mu, then the log queue's mu
 * (client_log, a leaf); dns_mu never with mu. The training thread's calls
 * start no gRPC operation: they wake the dispatch thread (conn_dispatch_soon).
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc.h>

#include "feed/augment.h"
#include "feed/client.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/thread.h"
#include "feed/timeutil.h"
#include "normalize.h"

#include "client_impl.h"

/* The first layouts that carry their size (0.3): every later one only adds fields at the end. */
#define CONFIG_MIN_SIZE (offsetof(feed_loader_config, log_user) + sizeof(void *))
/* The layout of 0.4 and 0.5, the last headers whose callers passed no size (config_default). */
#define CONFIG_0_5_SIZE (offsetof(feed_loader_config, tls_key_file) + sizeof(const char *))
#define STATS_MIN_SIZE (offsetof(feed_loader_stats, servers_up) + sizeof(uint32_t))
#define SERVER_STATS_MIN_SIZE (offsetof(feed_server_stats, outstanding) + sizeof(uint32_t))

static void config_defaults(feed_loader_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    feed_transform_default_train(&cfg->transform);
    cfg->batch_size = 256;
    cfg->world = 1;
    cfg->ordered = true;
    cfg->window_per_server = 4;
    cfg->prefetch = 4;
    cfg->dtype = FEED_DTYPE_FP32;
    cfg->layout = FEED_LAYOUT_NCHW;
    cfg->mean[0] = 0.485f;
    cfg->mean[1] = 0.456f;
    cfg->mean[2] = 0.406f;
    cfg->std[0] = 0.229f;
    cfg->std[1] = 0.224f;
    cfg->std[2] = 0.225f;
    cfg->device = 0;
    cfg->bad_sample_policy = FEED_BAD_SAMPLE_SUBSTITUTE;
    cfg->batch_deadline_ms = 60000;
    cfg->unavailable_timeout_ms = 30000;
    cfg->resolve_interval_ms = 5000;
    cfg->decode_lane = FEED_DECODE_LANE_OFF;
}

int feed_loader_config_init(feed_loader_config *cfg, size_t size)
{
    feed_loader_config full;
    if (!cfg || size < CONFIG_MIN_SIZE || size > sizeof(full))
        return FEED_EINVAL;
    config_defaults(&full);
    full.struct_size = size;
    memcpy(cfg, &full, size);
    return 0;
}

void(feed_loader_config_default)(feed_loader_config *cfg)
{
    feed_loader_config_init(cfg, CONFIG_0_5_SIZE);
}

static int check_config(const feed_loader_config *c, const char **why, char *tmsg, size_t cap)
{
    feed_augment aug;
    *why = NULL;
    if (!c->targets || c->num_targets == 0 || c->num_targets > CLIENT_MAX_SERVERS)
        *why = "targets";
    else if (!c->dataset || !c->dataset[0] || strlen(c->dataset) > 1024)
        *why = "dataset";
    else if (c->batch_size == 0 || c->batch_size > CLIENT_MAX_BATCH)
        *why = "batch_size";
    else if (c->world == 0 || c->rank >= c->world)
        *why = "rank/world";
    else if (c->window_per_server == 0 || c->window_per_server > CLIENT_MAX_WINDOW)
        *why = "window_per_server";
    else if (c->prefetch == 0 || c->prefetch > CLIENT_MAX_PREFETCH)
        *why = "prefetch";
    else if (c->max_slots && (c->max_slots <= c->prefetch || c->max_slots > CLIENT_MAX_SLOTS))
        *why = "max_slots"; /* the caller may hold prefetch: one more must be fetching */
    else if ((unsigned)c->dtype > FEED_DTYPE_FP32)
        *why = "dtype";
    else if ((unsigned)c->layout > FEED_LAYOUT_NHWC)
        *why = "layout";
    else if ((unsigned)c->bad_sample_policy > FEED_BAD_SAMPLE_FAIL)
        *why = "bad_sample_policy";
    else if ((unsigned)c->owner_routing > FEED_OWNER_ROUTING_ON)
        *why = "owner_routing";
    else if (feed_transform_validate(&c->transform, tmsg, cap))
        *why = tmsg;
    else if (c->augment && feed_augment_parse(c->augment, &aug, tmsg, cap))
        *why = tmsg;
    else if (c->batch_deadline_ms == 0 || c->unavailable_timeout_ms == 0 ||
             c->resolve_interval_ms == 0)
        *why = "timeouts";
    else if (c->device < FEED_DEVICE_HOST)
        *why = "device";
    else if (c->demand_window_ms && (c->demand_window_ms < CLIENT_DEMAND_WINDOW_MIN_MS ||
                                     c->demand_window_ms > CLIENT_DEMAND_WINDOW_MAX_MS))
        *why = "demand_window_ms";
    else if (c->job && c->job[0] && !client_job_valid(c->job))
        *why = "job (1..128 bytes of letters, digits and " FEED_NAME_CHARS ")";
    else if (c->job_weight > CLIENT_JOB_WEIGHT_MAX)
        *why = "job_weight (0..100)";
    else if (c->share && c->share[0] && !client_job_valid(c->share))
        *why = "share (1..128 bytes of letters, digits and " FEED_NAME_CHARS ")";
    else if ((unsigned)c->decode_lane > FEED_DECODE_LANE_AUTO)
        *why = "decode_lane";
    else if (!(c->decode_share >= 0.0 && c->decode_share <= 1.0))
        *why = "decode_share ([0, 1])";
    else if (!(c->decode_share_max >= 0.0 && c->decode_share_max <= 1.0))
        *why = "decode_share_max ([0, 1])";
    else if (c->decode_lane_threads > CLIENT_LANE_MAX_THREADS)
        *why = "decode_lane_threads (0..16)";
    else if (c->decode_lane_max_bytes && (c->decode_lane_max_bytes < CLIENT_LANE_MIN_BYTES ||
                                          c->decode_lane_max_bytes > CLIENT_LANE_MAX_BYTES))
        *why = "decode_lane_max_bytes (4096 .. 1 GiB)";
    for (int k = 0; !*why && k < 3; k++) {
        if (!(c->std[k] != 0.0f))
            *why = "std";
    }
    for (size_t i = 0; !*why && i < c->num_targets; i++) {
        if (!c->targets[i] || !c->targets[i][0] || strlen(c->targets[i]) > CLIENT_TARGET_MAX)
            *why = "targets";
    }
    return *why ? FEED_EINVAL : 0;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Waits for the first Describe that knows the dataset. mu held. */
static int wait_dataset(loader *l)
{
    uint64_t deadline = feed_now_ns() + (uint64_t)l->cfg.unavailable_timeout_ms * 1000000u;
    for (;;) {
        if (l->fatal)
            return l->fatal;
        if (l->num_samples)
            return 0;
        uint32_t tried = 0, live = 0;
        for (uint32_t i = 0; i < l->num_servers; i++) {
            live += !l->servers[i].removed;
            tried += !l->servers[i].removed && l->servers[i].ever_tried &&
                     l->servers[i].state == SRV_DOWN;
        }
        if (l->notfound_seen && tried == live)
            return FEED_ENOTFOUND;
        if (sched_all_refused(l))
            return FEED_EAUTH;
        uint64_t now = feed_now_ns();
        if (now >= deadline)
            return l->notfound_seen ? FEED_ENOTFOUND : FEED_EUNAVAILABLE;
        uint64_t step = deadline - now;
        feed_cond_timedwait(&l->cond, &l->mu, step < 50000000u ? step : 50000000u);
    }
}

static int open_servers(loader *l)
{
    int rc = resolve_init(l);
    if (rc)
        return rc;
    for (size_t i = 0; i < l->cfg.num_targets; i++) {
        if (strncmp(l->targets[i], "dns:///", 7) == 0)
            continue;
        rc = servers_add(l, l->targets[i], -1);
        if (rc < 0)
            return rc;
    }
    servers_apply_dns(l);
    return 0;
}

int feed_loader_open(const feed_loader_config *caller_cfg, feed_loader **out)
{
    const char *why;
    char tmsg[200];
    loader *l = NULL;
    int rc = FEED_EINVAL;
    feed_loader_config full;
    const feed_loader_config *cfg = &full;
    if (!caller_cfg || !out)
        goto out;
    *out = NULL;
    /* Fields the caller's header did not have keep their defaults. */
    config_defaults(&full);
    if (caller_cfg->struct_size < CONFIG_MIN_SIZE || caller_cfg->struct_size > sizeof(full)) {
        if (caller_cfg->log_fn && caller_cfg->struct_size >= CONFIG_MIN_SIZE)
            caller_cfg->log_fn(caller_cfg->log_user, FEED_LOG_ERROR,
                               "feed_loader_open: invalid struct_size (a header newer than "
                               "this library?)");
        goto out;
    }
    memcpy(&full, caller_cfg, caller_cfg->struct_size);
    full.struct_size = sizeof(full);
    rc = check_config(cfg, &why, tmsg, sizeof(tmsg));
    if (rc) {
        if (cfg->log_fn) {
            char msg[256];
            snprintf(msg, sizeof(msg), "feed_loader_open: invalid %s", why);
            cfg->log_fn(cfg->log_user, FEED_LOG_ERROR, msg);
        }
        goto out;
    }
    rc = FEED_ENOMEM;
    l = calloc(1, sizeof(*l));
    if (!l)
        goto out;
    l->cfg = *cfg;
    l->transport = &conn_transport;
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->dns_mu, NULL);
    feed_cond_init(&l->cond);
    feed_cond_init(&l->lane_cond);
    feed_cond_init(&l->dns_cond);
    feed_cond_init(&l->dispatch_cond);
    grpc_init();
    rc = logq_start(l);
    if (rc)
        goto out;
    rc = FEED_ENOMEM;
    l->dataset = dup_str(cfg->dataset);
    l->targets = calloc(cfg->num_targets, sizeof(*l->targets));
    if (!l->dataset || !l->targets)
        goto out;
    for (size_t i = 0; i < cfg->num_targets; i++) {
        l->targets[i] = dup_str(cfg->targets[i]);
        if (!l->targets[i])
            goto out;
    }
    l->cfg.dataset = l->dataset;
    if (cfg->augment && cfg->augment[0]) {
        l->augment = dup_str(cfg->augment);
        if (!l->augment)
            goto out;
    }
    l->cfg.augment = l->augment;
    if (cfg->job && cfg->job[0])
        snprintf(l->job, sizeof l->job, "%s", cfg->job);
    else
        client_job_default(cfg->dataset, cfg->seed, l->job, sizeof l->job);
    l->cfg.job = l->job;
    snprintf(l->share, sizeof l->share, "%s", cfg->share ? cfg->share : "");
    l->cfg.share = l->share;
    l->aug_seed = cfg->aug_seed_set ? cfg->aug_seed : cfg->seed;
    l->cfg.targets = (const char *const *)l->targets;
    if (!l->cfg.decode_lane_threads)
        l->cfg.decode_lane_threads = CLIENT_LANE_DEFAULT_THREADS;
    if (!l->cfg.decode_lane_max_bytes)
        l->cfg.decode_lane_max_bytes = CLIENT_LANE_DEFAULT_BYTES;

    uint32_t bs = cfg->batch_size;
    size_t sample = (size_t)cfg->transform.out_h * cfg->transform.out_w * 3;
    l->out_bytes = sample * bs * client_dtype_size(cfg->dtype);
    /* Pixels (or the decode lane's encoded bytes, if more) plus per-sample fields and error
     * strings, with room for framing. */
    size_t payload = sample * bs;
    if (cfg->decode_lane != FEED_DECODE_LANE_OFF && l->cfg.decode_lane_max_bytes > payload)
        payload = (size_t)l->cfg.decode_lane_max_bytes;
    l->max_message = payload + (size_t)bs * 512 + 65536;

    if (cfg->device != FEED_DEVICE_HOST) {
        char err[160] = "";
        rc = client_gpu_open(cfg->device, &l->gpu, err, sizeof(err));
        if (rc) {
            client_log(l, FEED_LOG_ERROR, "GPU path unavailable: %s", err);
            goto out;
        }
    }
    rc = client_lane_open(l);
    if (rc)
        goto out;
    l->lane_share_epoch = l->lane_share;
    l->last_up_ns = feed_now_ns();
    l->progress_ns = l->last_up_ns;
    client_demand_init(&l->demand, cfg->demand_window_ms, 0, l->last_up_ns);
    rc = open_servers(l);
    if (rc)
        goto out;
    rc = client_lane_start(l);
    if (rc)
        goto out;
    rc = conn_start(l);
    if (rc)
        goto out;
    rc = resolve_start(l);
    if (rc)
        goto out;

    pthread_mutex_lock(&l->mu);
    rc = wait_dataset(l);
    client_plan plan, ahead;
    if (!rc)
        rc = sched_build_plans(l, cfg->epoch, cfg->start_batch, false, &plan, &ahead);
    if (!rc) {
        sched_reset_epoch(l, cfg->epoch, cfg->start_batch, false, &plan, &ahead);
        conn_dispatch_soon(l);
    }
    pthread_mutex_unlock(&l->mu);
    if (rc)
        goto out;
    *out = l;
    l = NULL;
out:
    feed_loader_close(l);
    return rc;
}

/* The last of close(), once no thread of l runs but perhaps the log thread, which runs it
 * when close() was called inside log_fn. */
static void loader_free(loader *l)
{
    logq_stop(l);
    pthread_cond_destroy(&l->cond);
    pthread_cond_destroy(&l->lane_cond);
    pthread_cond_destroy(&l->dns_cond);
    pthread_cond_destroy(&l->dispatch_cond);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->dns_mu);
    grpc_shutdown();
    free(l);
}

void feed_loader_close(feed_loader *l)
{
    if (!l)
        return;
    resolve_stop(l);
    client_lane_stop(l);
    conn_stop(l);
    resolve_free(l);
    /* The slots' memory belongs to the loader's device; the caller's device is put back. */
    int caller_device = l->gpu ? client_gpu_current_device() : -1;
    if (l->gpu)
        client_gpu_bind_thread(l->gpu);
    sched_free_slots(l);
    client_lane_free(l->lane);
    client_gpu_close(l->gpu);
    client_gpu_set_device(caller_device);
    client_plan_free(&l->plan);
    client_plan_free(&l->ahead);
    resume_chain_free(l->chain);
    if (l->targets) {
        for (size_t i = 0; i < l->cfg.num_targets; i++)
            free(l->targets[i]);
    }
    free(l->targets);
    free(l->dataset);
    free(l->augment);
    /* Inside log_fn the log thread cannot join itself: it frees l once log_fn returns. */
    if (logq_on_log_thread(l)) {
        logq_close_from_log_thread(l, loader_free);
        return;
    }
    loader_free(l);
}

/* next() and next_timed(): waits at most timeout_ns (UINT64_MAX: until sched_next decides). A
 * wait cut short by FEED_ETIMEDOUT goes on in the next call: the batch's wait_ns and the wait
 * stats count from the first of them. */
static int next_batch(loader *l, feed_batch **out, uint64_t timeout_ns)
{
    if (!l || !out)
        return FEED_EINVAL;
    *out = NULL;
    uint64_t now, wait, end;
    slot *sl = NULL;
    int rc;
    pthread_mutex_lock(&l->mu);
    /* Read under mu: a receiver stamps last_up_ns/progress_ns under mu, and sched_next's
     * "now - stamp" must not see a stamp later than now. */
    now = feed_now_ns();
    end = timeout_ns > UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
    if (!l->next_since_ns)
        l->next_since_ns = now;
    uint64_t since = l->next_since_ns;
    if (l->step_slot) {
        /* The step that used the last batch is enqueued by now: its end, before any wait. */
        client_gpu_slot_mark_end(l->step_slot->gpu, l->step_stream);
        l->step_slot = NULL;
    }
    while ((rc = sched_next(l, l->next_since_ns, now, &sl, &wait)) == SCHED_WAIT) {
        if (now >= end) {
            rc = FEED_ETIMEDOUT;
            break;
        }
        if (wait > 100000000u)
            wait = 100000000u;
        feed_cond_timedwait(&l->cond, &l->mu, wait < end - now ? wait : end - now);
        now = feed_now_ns();
    }
    if (rc != FEED_ETIMEDOUT)
        l->next_since_ns = 0;
    if (rc == 0) {
        client_lane_note_wait(l, sl, since, now);
        conn_dispatch_soon(l);
        *out = &sl->batch;
        rc = sl->result;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int feed_loader_next(feed_loader *l, feed_batch **out)
{
    return next_batch(l, out, UINT64_MAX);
}

int feed_loader_next_timed(feed_loader *l, feed_batch **out, uint32_t timeout_ms)
{
    return next_batch(l, out, (uint64_t)timeout_ms * 1000000u);
}

/* The slot whose batch the caller holds, or NULL. mu held. */
static slot *handed_slot(loader *l, const feed_batch *b)
{
    for (uint32_t i = 0; i < l->num_slots; i++) {
        if (&l->slots[i].batch == b)
            return l->slots[i].state == SLOT_HANDED ? &l->slots[i] : NULL;
    }
    return NULL;
}

int feed_loader_release(feed_loader *l, feed_batch *b, void *stream)
{
    if (!l || !b)
        return FEED_EINVAL;
    int rc = FEED_EINVAL;
    pthread_mutex_lock(&l->mu);
    slot *sl = handed_slot(l, b);
    if (!sl)
        goto out;
    rc = 0;
    if (sl->gpu)
        rc = client_gpu_slot_release(sl->gpu, stream);
    sched_release(l, sl);
    conn_dispatch_soon(l);
out:
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int feed_loader_stream_wait(feed_loader *l, const feed_batch *b, void *stream)
{
    if (!l || !b)
        return FEED_EINVAL;
    pthread_mutex_lock(&l->mu);
    slot *sl = handed_slot(l, b);
    uint64_t step_ns;
    /* The slot's last step, read before this use records its own start: the demand window's
     * GPU time and the lane's step time. */
    if (sl && sl->gpu && client_gpu_slot_step_ns(sl->gpu, &step_ns) == 1) {
        client_demand_step(&l->demand, step_ns);
        client_lane_note_step(l, step_ns);
        l->stats.steps_timed++;
    }
    int rc = !sl ? FEED_EINVAL : (sl->gpu ? client_gpu_slot_stream_wait(sl->gpu, stream) : 0);
    if (rc == 0 && sl->gpu) {
        l->step_slot = sl;
        l->step_stream = stream;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int feed_loader_set_epoch(feed_loader *l, uint32_t epoch, uint64_t start_batch)
{
    if (!l)
        return FEED_EINVAL;
    /* Only this thread changes the epoch and the plans (client_impl.h), so the
     * permutations are drawn without mu: receivers keep landing meanwhile. */
    bool keep = sched_keeps_ahead(l, epoch, start_batch);
    client_plan plan, ahead;
    int rc = sched_build_plans(l, epoch, start_batch, keep, &plan, &ahead);
    if (rc)
        goto out;
    /* The new epoch's share: decided at its first prefetch, else now. */
    pthread_mutex_lock(&l->mu);
    if (epoch != l->epoch)
        client_lane_decide(l, epoch);
    uint32_t share = l->lane_share;
    pthread_mutex_unlock(&l->mu);
    loader_install_epoch(l, epoch, start_batch, keep, &plan, &ahead, NULL, share);
out:
    return rc;
}

uint64_t feed_loader_batches_per_epoch(const feed_loader *l)
{
    return l ? l->plan.batches : 0;
}

uint64_t feed_loader_dataset_size(const feed_loader *l)
{
    return l ? l->num_samples : 0;
}

const char *feed_loader_job(const feed_loader *l)
{
    return l ? l->job : "";
}

int feed_loader_get_stats(feed_loader *l, feed_loader_stats *out, size_t out_size)
{
    if (!l || !out || out_size < STATS_MIN_SIZE || out_size > sizeof(*out))
        return FEED_EINVAL;
    pthread_mutex_lock(&l->mu);
    memcpy(out, &l->stats, out_size);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int feed_loader_server_stats(feed_loader *l, uint32_t i, feed_server_stats *out, size_t out_size)
{
    if (!l || !out || out_size < SERVER_STATS_MIN_SIZE || out_size > sizeof(feed_server_stats))
        return FEED_EINVAL;
    int rc = FEED_EINVAL;
    uint32_t k = 0;
    pthread_mutex_lock(&l->mu);
    for (uint32_t j = 0; j < l->num_servers; j++) {
        const server *s = &l->servers[j];
        if (s->removed)
            continue;
        if (k++ != i)
            continue;
        feed_server_stats st;
        memset(&st, 0, sizeof(st));
        snprintf(st.target, sizeof(st.target), "%s", s->target);
        st.up = s->state == SRV_UP;
        st.batches = s->batches;
        st.outstanding = s->outstanding;
        st.last_status = s->last_status;
        snprintf(st.last_error, sizeof(st.last_error), "%s", s->last_error);
        st.refused = s->refused;
        snprintf(st.fingerprint, sizeof(st.fingerprint), "%s", s->fingerprint);
        st.fingerprint_differs = s->fingerprint_differs;
        memcpy(out, &st, out_size);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

const char *feed_client_version(void)
{
    return FEED_CLIENT_VERSION_STRING;
}

uint32_t feed_client_version_number(void)
{
    return FEED_CLIENT_VERSION_NUM;
}
