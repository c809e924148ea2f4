/*
 * The decode lane in GPU mode (docs/design/client.md "Decode lane"; ctest label gpu, run by the
 * GPU machine's suite) against a real feedd, on real JPEGs (FEED_SAMPLE_DIR's ImageFolder when
 * set, as the GPU bundle's ImageNet JPEGs are, else generated ones): with half the samples
 * decoded by the GPU's JPEG engines, every sample comes once, in the order and with the labels
 * the lane off gives; the samples the servers decoded have the lane off's pixels bit for bit,
 * and those the engines decoded are within the stated tolerance (PSNR >= 25 dB each, >= 30 dB
 * on average, against the lane off's uint8 pixels); the lane's count is the assignment's less
 * what the engines do not take. With the share adapting (decode_share_max), the decision for
 * the next epoch rests on step times measured from CUDA events (the log line names how many).
 * Skips, saying why, without CUDA or a device, or when the JPEG engines cannot be opened
 * (unless FEED_GPUJPEG_REQUIRED=1, as on the GPU machine, which makes that a failure).
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"
#include "gpu.h"
#include "gpujpeg.h"
#include "plan.h"

#ifdef FEED_HAVE_CUDA
#include <cuda_runtime_api.h>

#define SIDE 64u
#define BATCH 8u
#define MAX_SAMPLES 400u
#define SEED 0x9a7eull
#define SAMPLE_BYTES ((size_t)SIDE * SIDE * 3)

static char g_root[256], g_ds[300];
static feed_test_server g_srv;
static const char *g_targets[1];

typedef struct run {
    uint64_t order[2 * MAX_SAMPLES];
    size_t n;
    uint8_t (*pixels)[SAMPLE_BYTES]; /* [MAX_SAMPLES] */
    int64_t labels[MAX_SAMPLES];
    uint8_t status[MAX_SAMPLES];
    uint32_t seen[MAX_SAMPLES];
    feed_loader_stats stats;
} run;

static run *run_new(void)
{
    run *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->pixels = calloc(MAX_SAMPLES, SAMPLE_BYTES);
    assert_non_null(r->pixels);
    return r;
}

static void run_free(run *r)
{
    free(r->pixels);
    free(r);
}

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[16384];

static void log_keep(void *user, int level, const char *msg)
{
    feed_test_log_stderr(user, level, msg);
    pthread_mutex_lock(&g_log_mu);
    size_t at = strlen(g_log);
    snprintf(g_log + at, sizeof g_log - at, "%s\n", msg);
    pthread_mutex_unlock(&g_log_mu);
}

static void config(feed_loader_config *c, feed_decode_lane lane, double share)
{
    feed_test_host_config(c, g_targets, 1, "lane", SIDE, BATCH, log_keep);
    c->device = 0;
    c->seed = SEED;
    c->epoch = 1;
    c->bad_sample_policy = FEED_BAD_SAMPLE_FAIL;
    c->decode_lane = lane;
    c->decode_share = share;
}

/* Every batch of the loader's epochs `first`..`last` into r (the last one's only kept: r is
 * reset at each epoch), each waited for on the legacy stream and released there, as a
 * training step would. */
static void take(feed_loader *l, run *r, uint32_t first, uint32_t last)
{
    for (uint32_t e = first; e <= last; e++) {
        if (e != first)
            assert_int_equal(feed_loader_set_epoch(l, e, 0), 0);
        r->n = 0;
        memset(r->seen, 0, sizeof r->seen);
        feed_batch *b = NULL;
        int rc;
        while ((rc = feed_loader_next(l, &b)) != FEED_EEOF) {
            assert_int_equal(rc, 0);
            assert_int_equal(feed_loader_stream_wait(l, b, NULL), 0);
            assert_int_equal(cudaStreamSynchronize(0), cudaSuccess);
            for (uint32_t i = 0; i < b->n; i++) {
                uint64_t idx = b->indices[i];
                assert_true(idx < MAX_SAMPLES && r->n < 2 * MAX_SAMPLES);
                r->order[r->n++] = idx;
                r->seen[idx]++;
                assert_int_equal(cudaMemcpy(r->pixels[idx], (const uint8_t *)b->data +
                                                                i * SAMPLE_BYTES,
                                            SAMPLE_BYTES, cudaMemcpyDeviceToHost),
                                 cudaSuccess);
                r->labels[idx] = b->labels[i];
                r->status[idx] = b->status[i];
            }
            assert_int_equal(feed_loader_release(l, b, NULL), 0);
        }
    }
    assert_int_equal(feed_loader_get_stats(l, &r->stats, sizeof r->stats), 0);
}

static double psnr(const uint8_t *a, const uint8_t *b)
{
    double se = 0;
    for (size_t i = 0; i < SAMPLE_BYTES; i++) {
        double d = (double)a[i] - (double)b[i];
        se += d * d;
    }
    return se == 0 ? 99.0 : 10.0 * log10(255.0 * 255.0 * SAMPLE_BYTES / se);
}

static int setup(void **state)
{
    (void)state;
    char arg[400];
    const char *sample = getenv("FEED_SAMPLE_DIR");
    if (feed_test_tmpdir("feed-lane-gpu", g_root, sizeof g_root) < 0)
        return -1;
    if (sample && sample[0]) {
        snprintf(g_ds, sizeof g_ds, "%s", sample);
    } else {
        snprintf(g_ds, sizeof g_ds, "%s/ds", g_root);
        if (feed_test_make_imagefolder(g_ds, 2, 24, 7) < 0)
            return -1;
    }
    snprintf(arg, sizeof arg, "lane=%s", g_ds);
    const char *args[] = {"--dataset", arg, "--threads", "2", "--log-level", "warn", NULL};
    if (feed_test_server_start(args, &g_srv) != 0)
        return -1;
    g_targets[0] = g_srv.target;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return feed_test_server_teardown(&g_srv, g_root);
}

/* Half the samples on the JPEG engines: once each, in the lane off's order with its labels; the
 * servers' samples bit for bit, the engines' within the tolerance. */
static void test_gpu_lane_half(void **state)
{
    (void)state;
    run *off = run_new(), *on = run_new();
    feed_loader_config c;
    feed_loader *l = NULL;
    config(&c, FEED_DECODE_LANE_OFF, 0.0);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    uint64_t samples = feed_loader_dataset_size(l);
    if (samples > MAX_SAMPLES)
        fail_msg("the dataset has %llu samples, the test holds %u", (unsigned long long)samples,
                 MAX_SAMPLES);
    take(l, off, 1, 1);
    feed_loader_close(l);
    config(&c, FEED_DECODE_LANE_GPU, 0.5);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    take(l, on, 1, 1);
    feed_loader_close(l);

    assert_int_equal(on->n, off->n);
    assert_memory_equal(on->order, off->order, off->n * sizeof(uint64_t));
    uint32_t lane = 0, exact = 0;
    double sum = 0, worst = 99;
    for (uint64_t i = 0; i < samples; i++) {
        assert_int_equal(on->seen[i], off->seen[i]);
        if (!off->seen[i])
            continue;
        assert_int_equal(on->labels[i], off->labels[i]);
        assert_int_equal(on->status[i], FEED_SAMPLE_OK);
        if (client_lane_assigned(SEED, 1, i, client_lane_share16(0.5))) {
            double p = psnr(on->pixels[i], off->pixels[i]);
            sum += p;
            worst = p < worst ? p : worst;
            lane++;
        } else {
            if (memcmp(on->pixels[i], off->pixels[i], SAMPLE_BYTES) != 0)
                fail_msg("sample %llu: decoded by the servers, yet its pixels differ",
                         (unsigned long long)i);
            exact++;
        }
    }
    print_message("GPU lane: %u samples on the engines (PSNR mean %.1f dB, worst %.1f dB), %u "
                  "from the servers bit for bit; lane_decoded %llu, rerequested %llu\n",
                  lane, lane ? sum / lane : 0.0, worst, exact,
                  (unsigned long long)on->stats.lane_decoded,
                  (unsigned long long)on->stats.lane_rerequested);
    assert_true(lane > 0 && exact > 0);
    assert_true(worst >= 25.0);
    assert_true(sum / lane >= 30.0);
    assert_int_equal(on->stats.lane_decoded + on->stats.lane_rerequested, lane);
    run_free(off);
    run_free(on);
}

/* The adapting share measures the steps' GPU time: the decision for the next epoch names how
 * many steps it rests on, and they are not none. */
static void test_gpu_lane_adapt_measures_steps(void **state)
{
    (void)state;
    run *r = run_new();
    feed_loader_config c;
    feed_loader *l = NULL;
    config(&c, FEED_DECODE_LANE_GPU, 0.25);
    c.decode_share_max = 1.0;
    g_log[0] = '\0';
    assert_int_equal(feed_loader_open(&c, &l), 0);
    take(l, r, 1, 3);
    feed_loader_close(l);
    pthread_mutex_lock(&g_log_mu);
    const char *line = strstr(g_log, "decode lane, epoch 3: ");
    if (!line || strstr(line, " 0 steps measured"))
        fail_msg("no decision on measured steps for epoch 3:\n%s", g_log);
    pthread_mutex_unlock(&g_log_mu);
    run_free(r);
}

int main(void)
{
    if (client_gpu_device_count() == 0) {
        printf("SKIP: no CUDA device (cudaGetDeviceCount found none)\n");
        return FEED_TEST_SKIP;
    }
    client_gpujpeg *h = NULL;
    char why[200] = "";
    if (client_gpujpeg_open(0, &h, why, sizeof why) != 0) {
        const char *req = getenv("FEED_GPUJPEG_REQUIRED");
        if (req && strcmp(req, "1") == 0) {
            fprintf(stderr, "the GPU's JPEG engines are required and could not be opened: %s\n",
                    why);
            return 1;
        }
        printf("SKIP: GPU JPEG decode off: %s\n", why);
        return FEED_TEST_SKIP;
    }
    client_gpujpeg_close(h);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_lane_half),
        cmocka_unit_test(test_gpu_lane_adapt_measures_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
#else
int main(void)
{
    printf("SKIP: built without CUDA\n");
    return FEED_TEST_SKIP;
}
#endif
