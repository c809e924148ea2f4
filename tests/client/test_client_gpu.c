/*
 * GPU tests for libfeedclient (ctest label gpu), one executable so the GPU
 * machine runs them in one go:
 *  - normalize kernel vs the host reference, every dtype and layout;
 *  - timeline with CUDA events: the copy of batch k+1 runs while a spin
 *    kernel (batch k's "step") runs, and a slot released on a busy stream is
 *    not overwritten before that stream passes the release; the step's own
 *    time from the slot's events, also when the caller uses the slot again
 *    before the last step's time was read (a caller ahead of the GPU);
 *  - the real loader on the GPU against real feedd: the same bytes as the
 *    host path, labels on the device, and next()'s CPU cost per batch when
 *    data is ready (thread CPU time; asserted <= 50 us); feed_loader_stream_wait
 *    orders the step's stream after the batch; next() and release() never
 *    allocate CUDA memory on the training thread (cudaMalloc and cudaHostAlloc
 *    are wrapped at link time and counted per thread).
 * Skips every test, saying why, when built without CUDA or when
 * cudaGetDeviceCount finds no device. Prints a summary table at the end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/timeutil.h"
#include "feedtest.h"
#include "feedtest_skip.h"
#include "gpu.h"
#include "norm_ref.h"

#ifdef FEED_HAVE_CUDA
#include <pthread.h>
#include <stdatomic.h>

#include <cuda_runtime_api.h>

int feedtest_gpu_spin(void *stream, long long cycles);

/* Allocation counters behind -Wl,--wrap=cudaMalloc,--wrap=cudaHostAlloc. */
cudaError_t __real_cudaMalloc(void **p, size_t n);
cudaError_t __real_cudaHostAlloc(void **p, size_t n, unsigned int flags);
cudaError_t __wrap_cudaMalloc(void **p, size_t n);
cudaError_t __wrap_cudaHostAlloc(void **p, size_t n, unsigned int flags);
static pthread_t g_training_thread;
static atomic_bool g_watching;
static atomic_uint g_allocs_training, g_allocs_elsewhere;

static void count_alloc(void)
{
    if (!atomic_load(&g_watching))
        return;
    if (pthread_equal(pthread_self(), g_training_thread))
        atomic_fetch_add(&g_allocs_training, 1);
    else
        atomic_fetch_add(&g_allocs_elsewhere, 1);
}

cudaError_t __wrap_cudaMalloc(void **p, size_t n)
{
    count_alloc();
    return __real_cudaMalloc(p, n);
}

cudaError_t __wrap_cudaHostAlloc(void **p, size_t n, unsigned int flags)
{
    count_alloc();
    return __real_cudaHostAlloc(p, n, flags);
}

#define SUMMARY_MAX 32
static char g_summary[SUMMARY_MAX][160];
static int g_nsummary;
static pid_t g_feedd_pid; /* killed at teardown if a failed assertion left it running */

static void summary(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void summary(const char *fmt, ...)
{
    if (g_nsummary == SUMMARY_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_summary[g_nsummary++], sizeof(g_summary[0]), fmt, ap);
    va_end(ap);
}

#define CK(x) assert_int_equal((int)(x), (int)cudaSuccess)

static void test_normalize_kernel(void **state)
{
    (void)state;
    const uint32_t n = 5, h = 37, w = 29; /* odd sizes: no layout luck */
    size_t count = (size_t)n * h * w * 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    client_gpu *g = NULL;
    char err[160];
    assert_int_equal(client_gpu_open(0, &g, err, sizeof err), 0);
    void *raw = NULL, *labels = NULL;
    assert_int_equal(client_gpu_host_alloc(g, count, &raw), 0);
    assert_int_equal(client_gpu_host_alloc(g, n * sizeof(int64_t), &labels), 0);
    for (size_t i = 0; i < count; i++)
        ((uint8_t *)raw)[i] = (uint8_t)(i * 131 + 7);
    ((uint8_t *)raw)[0] = 0;
    ((uint8_t *)raw)[1] = 255;
    for (uint32_t i = 0; i < n; i++)
        ((int64_t *)labels)[i] = 1000 + i;
    void *host = malloc(count * 4);
    int checked = 0;
    for (int dt = FEED_DTYPE_UINT8; dt <= FEED_DTYPE_FP32; dt++) {
        for (int lay = FEED_LAYOUT_NCHW; lay <= FEED_LAYOUT_NHWC; lay++) {
            client_gpu_slot *s = NULL;
            assert_int_equal(client_gpu_slot_create(g, n, h, w, (feed_dtype)dt, &s), 0);
            assert_int_equal(
                client_gpu_slot_submit(g, s, raw, labels, n, (feed_layout)lay, mean, std), 0);
            CK(cudaEventSynchronize((cudaEvent_t)client_gpu_slot_ready_event(s)));
            size_t esize = dt == FEED_DTYPE_FP32 ? 4 : (dt == FEED_DTYPE_UINT8 ? 1 : 2);
            CK(cudaMemcpy(host, client_gpu_slot_data(s), count * esize, cudaMemcpyDeviceToHost));
            size_t first;
            size_t bad = ref_normalize_compare(raw, n, h, w, (feed_dtype)dt, (feed_layout)lay, mean,
                                               std, host, &first);
            if (bad)
                print_error("dtype %d layout %d: %zu mismatches, first at %zu\n", dt, lay, bad,
                            first);
            assert_int_equal(bad, 0);
            int64_t lab[5];
            CK(cudaMemcpy(lab, client_gpu_slot_labels(s), sizeof lab, cudaMemcpyDeviceToHost));
            assert_memory_equal(lab, labels, sizeof lab);
            client_gpu_slot_destroy(s);
            checked++;
        }
    }
    summary("normalize kernel == host reference (bit exact): %d dtype/layout pairs", checked);
    free(host);
    client_gpu_host_free(raw);
    client_gpu_host_free(labels);
    client_gpu_close(g);
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static void test_copy_overlaps_step(void **state)
{
    (void)state;
    /* A 256 x 224 x 224 batch: 38.5 MB of uint8, the real size of an ImageNet step. */
    const uint32_t n = 256, h = 224, w = 224;
    size_t count = (size_t)n * h * w * 3;
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
    client_gpu *g = NULL;
    char err[160];
    assert_int_equal(client_gpu_open(0, &g, err, sizeof err), 0);
    assert_int_equal(client_gpu_bind_thread(g), 0);
    void *raw = NULL, *labels = NULL;
    assert_int_equal(client_gpu_host_alloc(g, count, &raw), 0);
    assert_int_equal(client_gpu_host_alloc(g, n * sizeof(int64_t), &labels), 0);
    memset(raw, 7, count);
    memset(labels, 0, n * sizeof(int64_t));
    client_gpu_slot *a = NULL, *b = NULL;
    assert_int_equal(client_gpu_slot_create(g, n, h, w, FEED_DTYPE_FP16, &a), 0);
    assert_int_equal(client_gpu_slot_create(g, n, h, w, FEED_DTYPE_FP16, &b), 0);
    cudaStream_t step, copy = (cudaStream_t)client_gpu_copy_stream(g);
    CK(cudaStreamCreateWithFlags(&step, cudaStreamNonBlocking));
    cudaEvent_t spin0, spin1, copy0, copy1, rel0, rel1;
    CK(cudaEventCreate(&spin0));
    CK(cudaEventCreate(&spin1));
    CK(cudaEventCreate(&copy0));
    CK(cudaEventCreate(&copy1));
    CK(cudaEventCreate(&rel0));
    CK(cudaEventCreate(&rel1));
    int clock_khz = 0;
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    long long cycles = (long long)clock_khz * 50; /* ~50 ms */

    /* Batch k in slot a; its step waits for it and spins; batch k+1 goes into b meanwhile. */
    assert_int_equal(client_gpu_slot_submit(g, a, raw, labels, n, FEED_LAYOUT_NCHW, mean, std), 0);
    CK(cudaStreamWaitEvent(step, (cudaEvent_t)client_gpu_slot_ready_event(a), 0));
    CK(cudaEventRecord(spin0, step));
    assert_int_equal(feedtest_gpu_spin(step, cycles), 0);
    CK(cudaEventRecord(spin1, step));
    CK(cudaEventRecord(copy0, copy));
    assert_int_equal(client_gpu_slot_submit(g, b, raw, labels, n, FEED_LAYOUT_NCHW, mean, std), 0);
    CK(cudaEventRecord(copy1, copy));
    CK(cudaDeviceSynchronize());
    float step_ms = elapsed_ms(spin0, spin1);
    float copy_start = elapsed_ms(spin0, copy0), copy_end = elapsed_ms(spin0, copy1);
    print_message("step %.2f ms; copy+normalise of k+1 from %.2f to %.2f ms into it\n", step_ms,
                  copy_start, copy_end);
    assert_true(copy_end > copy_start);
    assert_true(copy_end < step_ms); /* k+1 was ready before step k ended */
    summary("overlap: step %.1f ms, copy+normalise of next batch (38.5 MB) done at %.2f ms",
            step_ms, copy_end);

    /* Release of a on a busy step stream: the next submit into a waits for it. The step's own
     * time (stream_wait to its end, on the step stream) spans the spin between them. */
    uint64_t step_ns = 0;
    assert_int_equal(client_gpu_slot_step_ns(a, &step_ns), 0); /* no release point yet */
    assert_int_equal(client_gpu_slot_stream_wait(a, step), 0);
    CK(cudaEventRecord(rel0, step));
    assert_int_equal(feedtest_gpu_spin(step, cycles), 0);
    CK(cudaEventRecord(rel1, step));
    assert_int_equal(client_gpu_slot_mark_end(a, step), 0);
    assert_int_equal(client_gpu_slot_release(a, step), 0);
    CK(cudaEventRecord(copy0, copy));
    assert_int_equal(client_gpu_slot_submit(g, a, raw, labels, n, FEED_LAYOUT_NCHW, mean, std), 0);
    CK(cudaEventRecord(copy1, copy));
    CK(cudaDeviceSynchronize());
    float spin_end = elapsed_ms(rel0, rel1), reuse_end = elapsed_ms(rel0, copy1);
    print_message("released slot rewritten at %.2f ms, after the step ended at %.2f ms\n",
                  reuse_end, spin_end);
    assert_true(reuse_end >= spin_end);
    summary("release: slot reused only after the caller's stream passed it (%.1f >= %.1f ms)",
            reuse_end, spin_end);
    assert_int_equal(client_gpu_slot_step_ns(a, &step_ns), 1);
    print_message("step time %.3f ms around a spin of %.3f ms\n", step_ns / 1e6, spin_end);
    /* The spin's events lie between the step's start and end on one stream: an order, not a
     * speed (1 us for the events' resolution of about 0.5 us). */
    assert_true((double)step_ns >= spin_end * 1e6 - 1000);
    assert_int_equal(client_gpu_slot_step_ns(a, &step_ns), 0); /* read once */

    /* A caller that runs ahead of the GPU, as a PyTorch loop does: the slot's next use comes
     * while the step of its last use still spins. That step's pair is kept (this use goes
     * untimed) and read once the stream has passed it. */
    assert_int_equal(client_gpu_slot_stream_wait(a, step), 0);
    CK(cudaEventRecord(rel0, step));
    assert_int_equal(feedtest_gpu_spin(step, cycles), 0);
    CK(cudaEventRecord(rel1, step));
    assert_int_equal(client_gpu_slot_mark_end(a, step), 0);
    assert_int_equal(client_gpu_slot_stream_wait(a, step), 0); /* its pair not read yet */
    assert_int_equal(client_gpu_slot_mark_end(a, step), 0);
    CK(cudaDeviceSynchronize());
    spin_end = elapsed_ms(rel0, rel1);
    assert_int_equal(client_gpu_slot_step_ns(a, &step_ns), 1);
    print_message("ahead of the GPU: step time %.3f ms around a spin of %.3f ms\n", step_ns / 1e6,
                  spin_end);
    assert_true((double)step_ns >= spin_end * 1e6 - 1000);

    client_gpu_slot_destroy(a);
    client_gpu_slot_destroy(b);
    cudaEventDestroy(spin0);
    cudaEventDestroy(spin1);
    cudaEventDestroy(copy0);
    cudaEventDestroy(copy1);
    cudaEventDestroy(rel0);
    cudaEventDestroy(rel1);
    cudaStreamDestroy(step);
    client_gpu_host_free(raw);
    client_gpu_host_free(labels);
    client_gpu_close(g);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_loader_on_gpu(void **state)
{
    (void)state;
    char root[256], dir[300], arg[340];
    feed_test_server srv;
    const char *args[] = {"--dataset", arg, "--log-level", "warn", NULL};
    assert_int_equal(feed_test_tmpdir("client-gpu", root, sizeof root), 0);
    snprintf(dir, sizeof dir, "%s/ds", root);
    snprintf(arg, sizeof arg, "small=%s", dir);
    assert_int_equal(feed_test_make_imagefolder(dir, 4, 32, 5), 0);
    assert_int_equal(feed_test_server_start(args, &srv), 0);
    g_feedd_pid = srv.pid;
    const char *targets[1] = {srv.target};
    feed_loader_config c;
    feed_loader_config_default(&c);
    c.targets = targets;
    c.num_targets = 1;
    c.dataset = "small";
    c.transform.out_h = c.transform.out_w = 64;
    c.batch_size = 16;
    c.dtype = FEED_DTYPE_BF16;
    c.layout = FEED_LAYOUT_NCHW;

    /* The same epoch through the host path and the GPU path: identical bytes. */
    feed_loader *lh = NULL, *lg = NULL;
    c.device = FEED_DEVICE_HOST;
    assert_int_equal(feed_loader_open(&c, &lh), 0);
    c.device = 0;
    g_training_thread = pthread_self();
    atomic_store(&g_watching, true);
    assert_int_equal(feed_loader_open(&c, &lg), 0);
    cudaStream_t step;
    CK(cudaStreamCreateWithFlags(&step, cudaStreamNonBlocking));
    uint64_t nb = feed_loader_batches_per_epoch(lg);
    void *host = NULL;
    for (uint64_t k = 0; k < nb; k++) {
        feed_batch *bh = NULL, *bg = NULL;
        assert_int_equal(feed_loader_next(lh, &bh), 0);
        assert_int_equal(feed_loader_next(lg, &bg), 0);
        assert_non_null(bg->ready_event);
        assert_non_null(bg->labels_device);
        assert_int_equal(bg->bytes, bh->bytes);
        host = realloc(host, bg->bytes);
        assert_int_equal(feed_loader_stream_wait(lg, bg, step), 0);
        CK(cudaMemcpyAsync(host, bg->data, bg->bytes, cudaMemcpyDeviceToHost, step));
        int64_t lab[16];
        CK(cudaMemcpyAsync(lab, bg->labels_device, bg->n * sizeof(int64_t), cudaMemcpyDeviceToHost,
                           step));
        CK(cudaStreamSynchronize(step));
        assert_memory_equal(host, bh->data, bh->bytes);
        assert_memory_equal(lab, bh->labels, bh->n * sizeof(int64_t));
        assert_int_equal(feed_loader_release(lh, bh, NULL), 0);
        assert_int_equal(feed_loader_release(lg, bg, step), 0);
    }
    free(host);
    feed_loader_close(lh);
    atomic_store(&g_watching, false);
    unsigned on_training = atomic_load(&g_allocs_training);
    unsigned elsewhere = atomic_load(&g_allocs_elsewhere);
    print_message("CUDA allocations: %u on the training thread, %u on the loader's threads\n",
                  on_training, elsewhere);
    assert_int_equal(on_training, 0);
    assert_true(elsewhere > 0); /* the wrappers saw the slots being made */
    summary("next()/release()/open(): 0 CUDA allocations on the training thread (%u elsewhere)",
            elsewhere);
    summary("loader GPU path == host path: %llu batches, bf16 NCHW, bytes and device labels",
            (unsigned long long)nb);

    /* next() CPU cost when data is ready: a 20 ms "step" between calls lets prefetch fill. */
    uint64_t cost[64];
    int m = 0;
    uint32_t epoch = 1;
    assert_int_equal(feed_loader_set_epoch(lg, epoch, 0), 0);
    while (m < 40) {
        usleep(20000);
        feed_batch *b = NULL;
        uint64_t t0 = feed_thread_cpu_ns();
        int rc = feed_loader_next(lg, &b);
        uint64_t t1 = feed_thread_cpu_ns();
        if (rc == FEED_EEOF) {
            assert_int_equal(feed_loader_set_epoch(lg, ++epoch, 0), 0);
            continue;
        }
        assert_int_equal(rc, 0);
        if (b->wait_ns < 200000u)
            cost[m++] = t1 - t0; /* only calls that found the batch ready */
        CK(cudaStreamWaitEvent(step, (cudaEvent_t)b->ready_event, 0));
        assert_int_equal(feed_loader_release(lg, b, step), 0);
    }
    qsort(cost, (size_t)m, sizeof(cost[0]), cmp_u64);
    double med = (double)cost[m / 2] / 1000.0, p90 = (double)cost[m * 9 / 10] / 1000.0;
    print_message("next() CPU per batch with data ready: median %.1f us, p90 %.1f us, max %.1f "
                  "us (%d calls)\n",
                  med, p90, (double)cost[m - 1] / 1000.0, m);
    summary("next() CPU cost, data ready: median %.1f us, p90 %.1f us (limit 50 us)", med, p90);
    assert_true(med <= 50.0);
    int device_before = -1, device_after = -1;
    CK(cudaGetDevice(&device_before));
    feed_loader_close(lg);
    CK(cudaGetDevice(&device_after));
    assert_int_equal(device_after, device_before);
    cudaStreamDestroy(step);
    feed_test_server_kill(&srv);
    feed_test_rmtree(root);
}

static int group_teardown(void **state)
{
    (void)state;
    int st;
    if (g_feedd_pid > 0 && waitpid(g_feedd_pid, &st, WNOHANG) == 0) {
        kill(g_feedd_pid, SIGKILL);
        waitpid(g_feedd_pid, &st, 0);
    }
    fprintf(stderr, "\n==== test_client_gpu summary ====\n");
    for (int i = 0; i < g_nsummary; i++)
        fprintf(stderr, "  %s\n", g_summary[i]);
    fprintf(stderr, "=================================\n");
    return 0;
}

int main(void)
{
    if (client_gpu_device_count() == 0) {
        printf("SKIP: no CUDA device (cudaGetDeviceCount found none)\n");
        return FEED_TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normalize_kernel),
        cmocka_unit_test(test_copy_overlaps_step),
        cmocka_unit_test(test_loader_on_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}

#else

int main(void)
{
    printf("SKIP: libfeedclient was built without CUDA\n");
    return FEED_TEST_SKIP;
}

#endif
