/*
 * Jobs share a server's workers, not streams (README "Jobs share a server"):
 * real feedd processes over real gRPC on 127.0.0.1.
 *
 * The order is read off the server at fixed points of its own work, never by
 * timing. feedd runs one worker. Two samples of the dataset are named pipes
 * (made after feedd opened the dataset): a worker reading one blocks in
 * open() until the test opens the pipe for writing, then fails that sample
 * (not a regular file) and goes on. Gate 1, a batch of its own job, holds the
 * worker while every stream queues all its batches; gate 2 sits at a known
 * position in the one-stream job's batches. When the worker has claimed the
 * samples up to gate 2 it stops there, so one scrape of the per-job counters
 * (written and rendered under one lock) shows how many samples each job got
 * while both had deep queues.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/errors.h"
#include "feed/names.h"
#include "feedtest.h"
#include "feedtest_grpc.h"
#include "feedd_it.h"
#include "share.h"

enum {
    IMAGES = 16,      /* real JPEGs: indices 0..15 */
    GATE1 = IMAGES,   /* zz_gate/g1.jpg */
    GATE2 = IMAGES + 1,
    BATCH = 16,
    TASK = 4,         /* --task-samples: every claim is 4 samples */
    QUANTUM = 8,      /* the pool's quantum: max(task, 8) */
    BIG_STREAMS = 8,
    BIG_BATCHES = 8,  /* per stream */
    SMALL_BATCHES = 16,
    GATE2_BATCH = 4,  /* the small job's batch that starts with gate 2 */
};

static char fair_dir[400];

static void gate_path(int g, char *out, size_t cap)
{
    snprintf(out, cap, "%s/zz_gate/g%d.jpg", fair_dir, g);
}

/* Real JPEGs while feedd scans the dataset (it skips pipes); pipes once it serves it. */
static int gates_as_images(void)
{
    char path[512];
    for (int g = 1; g <= 2; g++) {
        gate_path(g, path, sizeof path);
        if ((unlink(path) != 0 && errno != ENOENT) ||
            feed_test_write_jpeg(path, 64, 64, (unsigned)g, 90) < 0)
            return -1;
    }
    return 0;
}

static int setup(void **state)
{
    (void)state;
    char path[512];
    if (group_setup(state) < 0)
        return -1;
    snprintf(fair_dir, sizeof fair_dir, "%s/fair", tmp_root);
    if (feed_test_make_imagefolder(fair_dir, 1, IMAGES, 21) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/zz_gate", fair_dir);
    if (mkdir(path, 0755) != 0)
        return -1;
    return gates_as_images();
}

static void gates_close(void)
{
    char path[512];
    for (int g = 1; g <= 2; g++) {
        gate_path(g, path, sizeof path);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(mkfifo(path, 0600), 0);
    }
}

/* Let the worker blocked in open() of gate g go on (it waits for a writer; this waits for it). */
static void gate_open(int g)
{
    char path[512];
    gate_path(g, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    close(fd);
}

/* The feedd_job_* series for job in one scrape's text. */
static double job_series(const char *text, const char *series, const char *job)
{
    char key[256];
    double v = 0;
    snprintf(key, sizeof key, "%s{job=\"%s\"}", series, job);
    if (feed_test_metric(text, key, &v) != 0)
        return 0;
    return v;
}

static char *scrape_all(const feed_test_server *s)
{
    int status = 0;
    char *body = NULL;
    assert_int_equal(feed_test_http_get(s->metrics_port, "/metrics", &status, &body), 0);
    assert_int_equal(status, 200);
    return body;
}

/* Poll until job's series is at least want (no deadline: ctest's timeout ends a hang). */
static void wait_job(const feed_test_server *s, const char *series, const char *job, double want)
{
    for (;;) {
        char *text = scrape_all(s);
        double v = job_series(text, series, job);
        free(text);
        if (v >= want)
            return;
        usleep(2000);
    }
}

typedef struct scenario {
    const char *big;   /* job name of the 8 streams; "": unnamed (old clients) */
    const char *small; /* job name of the one stream */
    uint32_t big_weight, small_weight;
} scenario;

typedef struct counts {
    double big, small;
} counts;

/*
 * Run the two jobs behind the gates and return the per-job samples claimed
 * when the worker reached gate 2: by then the small job had its first
 * GATE2_BATCH batches and one claim of the next.
 */
static counts run_scenario(const scenario *sc)
{
    feed_test_server s;
    static const char *const extra[] = {"--threads",       "1",    "--task-samples", "4",
                                        "--send-stall-ms", "0",    "--max-window",   "16",
                                        "--dataset",       NULL,   NULL};
    char ds_arg[450];
    snprintf(ds_arg, sizeof ds_arg, "fair=%s", fair_dir);
    const char *args[sizeof extra / sizeof extra[0]];
    memcpy(args, extra, sizeof extra);
    args[9] = ds_arg;
    assert_int_equal(gates_as_images(), 0);
    assert_int_equal(start_server(&s, args), 0);
    gates_close();
    grpc_channel *ch = feedtest_channel(s.target);
    Feed__V1__TransformSpec spec = train_spec(32);

    /* Gate 1: the only worker blocks on it. */
    Feed__V1__SessionOpen open_gate;
    make_open(&open_gate, &spec, "fair", 1, 1);
    open_gate.job = (char *)"gate";
    feedtest_stream gate;
    uint64_t g1 = GATE1;
    assert_int_equal(feedtest_stream_open(ch, 300, &gate), 0);
    assert_int_equal(send_batch(&gate, &open_gate, 0, 0, &g1, 1), 0);
    wait_job(&s, "feedd_job_samples_total", "gate", 1);

    /* Every batch of both jobs queued behind it. */
    uint64_t idx[BATCH];
    for (int i = 0; i < BATCH; i++)
        idx[i] = (uint64_t)i % IMAGES;
    Feed__V1__SessionOpen open_big, open_small;
    make_open(&open_big, &spec, "fair", 2, BIG_BATCHES);
    open_big.job = (char *)sc->big;
    open_big.job_weight = sc->big_weight;
    make_open(&open_small, &spec, "fair", 3, SMALL_BATCHES);
    open_small.job = (char *)sc->small;
    open_small.job_weight = sc->small_weight;
    feedtest_stream big[BIG_STREAMS], small;
    for (int k = 0; k < BIG_STREAMS; k++) {
        assert_int_equal(feedtest_stream_open(ch, 300, &big[k]), 0);
        for (int b = 0; b < BIG_BATCHES; b++)
            assert_int_equal(send_batch(&big[k], b ? NULL : &open_big, (uint64_t)b, 0, idx, BATCH),
                             0);
    }
    assert_int_equal(feedtest_stream_open(ch, 300, &small), 0);
    for (int b = 0; b < SMALL_BATCHES; b++) {
        uint64_t sidx[BATCH];
        memcpy(sidx, idx, sizeof sidx);
        if (b == GATE2_BATCH)
            sidx[0] = GATE2;
        assert_int_equal(send_batch(&small, b ? NULL : &open_small, (uint64_t)b, 0, sidx, BATCH),
                         0);
    }
    const char *big_label = sc->big[0] ? sc->big : "(unnamed)";
    wait_job(&s, "feedd_job_queued_samples", big_label, BIG_STREAMS * BIG_BATCHES * BATCH);
    wait_job(&s, "feedd_job_queued_samples", sc->small, SMALL_BATCHES * BATCH);

    /*
     * Both jobs have deep queues from here. The claim that takes the small job to at_gate2
     * samples is the one that starts with gate 2, and the worker blocks on it before it claims
     * again: the counters hold still from then on.
     */
    gate_open(1);
    double at_gate2 = GATE2_BATCH * BATCH + TASK;
    wait_job(&s, "feedd_job_samples_total", sc->small, at_gate2);
    char *text = scrape_all(&s);
    counts c = {job_series(text, "feedd_job_samples_total", big_label),
                job_series(text, "feedd_job_samples_total", sc->small)};
    free(text);
    assert_int_equal((int)c.small, (int)at_gate2);
    gate_open(2);

    feedtest_stream_cancel(&gate);
    feedtest_stream_finish(&gate, NULL, 0);
    for (int k = 0; k < BIG_STREAMS; k++) {
        feedtest_stream_cancel(&big[k]);
        feedtest_stream_finish(&big[k], NULL, 0);
    }
    feedtest_stream_cancel(&small);
    feedtest_stream_finish(&small, NULL, 0);
    grpc_channel_destroy(ch);
    assert_int_equal(feed_test_server_stop(&s), 0);
    assert_int_equal(s.exit_status, 0);
    return c;
}

/*
 * |big/wb - small/ws| within one turn of the larger weight plus one claim, in
 * samples (share.h's bound; both sides times wb*ws). Before jobs, each of the
 * 8 streams had the one stream's share: big = 8 x small.
 */
static void expect_shares(counts c, double wb, double ws)
{
    double d = c.big * ws - c.small * wb;
    double w = wb > ws ? wb : ws;
    double bound = (w * QUANTUM + TASK) * (wb > ws ? ws : wb);
    if (d < -bound || d > bound)
        fail_msg("while both were backlogged: big job %.0f samples, small job %.0f (weights "
                 "%.0f:%.0f, allowed off by %.0f)",
                 c.big, c.small, wb, ws, bound / (wb > ws ? ws : wb));
}

/* An 8-stream job and a 1-stream job get the same number of samples. */
static void test_jobs_equal(void **state)
{
    (void)state;
    scenario sc = {"big", "small", 0, 0};
    counts c = run_scenario(&sc);
    expect_shares(c, 1, 1);
}

/* Weights 2:1 give the 8-stream job twice the 1-stream job's samples. */
static void test_jobs_weighted(void **state)
{
    (void)state;
    scenario sc = {"big", "small", 2, 1};
    counts c = run_scenario(&sc);
    expect_shares(c, 2, 1);
    scenario sc2 = {"big", "small", 1, 2};
    c = run_scenario(&sc2);
    expect_shares(c, 1, 2);
}

/*
 * Streams without a job name (old clients) are a job each, as streams were
 * before: 8 of them get 8 times the share of a 1-stream job.
 */
static void test_unnamed_streams_as_before(void **state)
{
    (void)state;
    scenario sc = {"", "small", 0, 0};
    counts c = run_scenario(&sc);
    expect_shares(c, 8, 1);
}

/* Malformed job fields end the stream with INVALID_ARGUMENT naming the field. */
static void test_job_fields_checked(void **state)
{
    (void)state;
    Feed__V1__TransformSpec spec = train_spec(32);
    Feed__V1__SessionOpen open;
    uint64_t idx[1] = {0};
    char long_name[FEED_NAME_MAX + 2];
    memset(long_name, 'a', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    make_open(&open, &spec, "good", 1, 1);
    open.job = long_name;
    expect_stream_error(chan, &open, idx, 1, GRPC_STATUS_INVALID_ARGUMENT, "open.job: 129 bytes");
    open.job = (char *)"has space";
    expect_stream_error(chan, &open, idx, 1, GRPC_STATUS_INVALID_ARGUMENT, "open.job: byte 3");
    open.job = (char *)"ok";
    open.job_weight = FEEDD_JOB_WEIGHT_MAX + 1;
    expect_stream_error(chan, &open, idx, 1, GRPC_STATUS_INVALID_ARGUMENT, "open.job_weight");
    /* The longest name and the largest weight are served. */
    long_name[FEED_NAME_MAX] = '\0';
    open.job = long_name;
    open.job_weight = FEEDD_JOB_WEIGHT_MAX;
    feedtest_stream st;
    assert_int_equal(feedtest_stream_open(chan, 60, &st), 0);
    assert_int_equal(send_batch(&st, &open, 1, 0, idx, 1), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&st);
    assert_non_null(b);
    feed__v1__batch__free_unpacked(b, NULL);
    feedtest_stream_writes_done(&st);
    assert_null(feedtest_stream_recv(&st));
    assert_int_equal(feedtest_stream_finish(&st, NULL, 0), GRPC_STATUS_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_equal),
        cmocka_unit_test(test_jobs_weighted),
        cmocka_unit_test(test_unnamed_streams_as_before),
        cmocka_unit_test(test_job_fields_checked),
    };
    if (getenv("CMOCKA_FILTER"))
        cmocka_set_test_filter(getenv("CMOCKA_FILTER"));
    return cmocka_run_group_tests(tests, setup, group_teardown);
}
