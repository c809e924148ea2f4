/* The fixture of feedd's integration tests; see feedd_it.h. */
#include "feedd_it.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "feed/errors.h"

char tmp_root[256];
char good_dir[300];
char bad_dir[300];
feed_test_server srv; /* shared server: datasets good and bad, 2 workers */
grpc_channel *chan;

/* ---- helpers ---- */

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int start_server(feed_test_server *s, const char *const *extra)
{
    char good[400], bad[400];
    snprintf(good, sizeof good, "good=%s", good_dir);
    snprintf(bad, sizeof bad, "bad=%s", bad_dir);
    const char *args[40];
    size_t n = 0;
    args[n++] = "--dataset";
    args[n++] = good;
    args[n++] = "--dataset";
    args[n++] = bad;
    const char *level = getenv("FEEDD_IT_LOG_LEVEL");
    args[n++] = "--log-level";
    args[n++] = level && level[0] ? level : "warn";
    for (size_t i = 0; extra && extra[i] && n < 38; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return feed_test_server_start(args, s);
}

Feed__V1__TransformSpec train_spec(uint32_t side)
{
    Feed__V1__TransformSpec t = FEED__V1__TRANSFORM_SPEC__INIT;
    t.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
    t.out_height = side;
    t.out_width = side;
    t.flip_prob = 0.5;
    return t;
}

/* The transform the server derives from train_spec(side). */
void train_transform(uint32_t side, feed_transform *t)
{
    feed_transform_default_train(t);
    t->out_h = t->out_w = side;
    t->flip_prob = 0.5;
    t->resize_size = side * 256 / 224;
}

int send_batch(feedtest_stream *s, Feed__V1__SessionOpen *open, uint64_t batch_id, uint32_t epoch,
               const uint64_t *idx, size_t n)
{
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    r.open = open;
    r.batch_id = batch_id;
    r.epoch = epoch;
    r.n_indices = n;
    r.indices = (uint64_t *)idx;
    return feedtest_stream_send(s, &r);
}

void make_open(Feed__V1__SessionOpen *o, Feed__V1__TransformSpec *t, const char *ds, uint64_t seed,
               uint32_t window)
{
    feed__v1__session_open__init(o);
    o->dataset = (char *)ds;
    o->transform = t;
    o->seed = seed;
    o->window = window;
    o->protocol_version = 1;
    o->client_name = (char *)"test_feedd";
}

/* Open a stream, send one first request; expect the stream to end with `code`, message containing
 * `needle`. */
void expect_stream_error(grpc_channel *ch, Feed__V1__SessionOpen *open, const uint64_t *idx,
                         size_t n, grpc_status_code code, const char *needle)
{
    feedtest_stream s;
    char details[512];
    assert_int_equal(feedtest_stream_open(ch, 60, &s), 0);
    /* The server may end the call before the send completes: the status is what counts. */
    (void)send_batch(&s, open, 1, 0, idx, n);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    assert_null(b);
    grpc_status_code got = feedtest_stream_finish(&s, details, sizeof details);
    if (got != code || !strstr(details, needle))
        fail_msg("want status %d with '%s', got %d '%s'", code, needle, got, details);
}

double scrape(const feed_test_server *s, const char *series)
{
    double v = -1;
    int rc = feed_test_scrape(s->metrics_port, series, &v);
    if (rc != 0)
        fail_msg("metric %s: %s", series, feed_strerror(rc));
    return v;
}

/* Every feedd_ series to stderr: what the server holds during a long wait. */
static void dump_metrics(const feed_test_server *s)
{
    int status = 0;
    char *body = NULL;
    if (feed_test_http_get(s->metrics_port, "/metrics", &status, &body) == 0) {
        char *save = NULL;
        for (char *l = strtok_r(body, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
            if (strncmp(l, "feedd_", 6) == 0)
                fprintf(stderr, "  %s\n", l);
    }
    free(body);
}

/*
 * Poll the metrics until series is at least / at most want. No deadline of
 * its own: how long an event takes on a loaded machine is no test's business
 * (the ctest timeout ends a hang, and scrape fails if the server is gone); a
 * long wait says every 30 s of polls what it waits for and what the server
 * holds.
 */
static void wait_series(const feed_test_server *s, const char *series, double want, bool at_least)
{
    for (unsigned i = 1;; i++) {
        double v = scrape(s, series);
        if (at_least ? v >= want : v <= want)
            return;
        if (i % 3000 == 0) {
            fprintf(stderr, "still waiting for %s %s %g (now %g)\n", series,
                    at_least ? ">=" : "<=", want, v);
            dump_metrics(s);
        }
        sleep_ms(10);
    }
}

void wait_metric(const feed_test_server *s, const char *series, double want)
{
    wait_series(s, series, want, true);
}

void wait_metric_zero(const feed_test_server *s, const char *series)
{
    wait_series(s, series, 0, false);
}

/* Batch memory of ended streams is released when gRPC drops the slices. */
void wait_memory_free(const feed_test_server *s)
{
    wait_metric_zero(s, "feedd_memory_bytes");
}

/* ---- group setup ---- */

int group_setup(void **state)
{
    (void)state;
    char path[512];
    if (feed_test_tmpdir("feedd-it", tmp_root, sizeof tmp_root) < 0)
        return -1;
    snprintf(good_dir, sizeof good_dir, "%s/good", tmp_root);
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", tmp_root);
    if (feed_test_make_imagefolder(good_dir, CLASSES, PER_CLASS, 11) < 0)
        return -1;
    /* bad/: class a has two good images, class b the broken ones (sorted: empty, garbage, trunc).
     */
    snprintf(path, sizeof path, "%s", bad_dir);
    if (feed_test_make_imagefolder(path, 1, 2, 5) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/zz_broken", bad_dir);
    if (mkdir(path, 0755) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/zz_broken/a_empty.jpg", bad_dir);
    if (feed_test_write_file(path, "", 0) < 0)
        return -1;
    snprintf(path, sizeof path, "%s/zz_broken/b_garbage.jpg", bad_dir);
    if (feed_test_write_file(path, "this is not a jpeg at all, just text", 36) < 0)
        return -1;
    /* A real JPEG cut in half. */
    char full[512];
    snprintf(full, sizeof full, "%s/full.jpg", tmp_root);
    if (feed_test_write_jpeg(full, 200, 150, 3, 90) < 0)
        return -1;
    FILE *f = fopen(full, "rb");
    uint8_t buf[65536];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/zz_broken/c_trunc.jpg", bad_dir);
    if (n < 100 || feed_test_write_file(path, buf, n / 2) < 0)
        return -1;
    grpc_init();
    static const char *const extra[] = {"--threads",    "2", "--max-batch", "64",
                                        "--cq-threads", "2", NULL};
    if (start_server(&srv, extra) < 0)
        return -1;
    chan = feedtest_channel(srv.target);
    return 0;
}

int group_teardown(void **state)
{
    (void)state;
    if (chan)
        grpc_channel_destroy(chan);
    int rc = feed_test_server_stop(&srv);
    grpc_shutdown();
    feed_test_rmtree(tmp_root);
    return rc == 0 && srv.exit_status == 0 ? 0 : -1;
}

/* One batch (train 48x48, dataset good, seed 99) of idx from ch. */
Feed__V1__Batch *fetch(grpc_channel *ch, const uint64_t *idx, size_t n, uint32_t epoch)
{
    Feed__V1__TransformSpec spec = train_spec(48);
    Feed__V1__SessionOpen open;
    make_open(&open, &spec, "good", 99, 1);
    feedtest_stream s;
    assert_int_equal(feedtest_stream_open(ch, 60, &s), 0);
    assert_int_equal(send_batch(&s, &open, 7, epoch, idx, n), 0);
    Feed__V1__Batch *b = feedtest_stream_recv(&s);
    feedtest_stream_writes_done(&s);
    assert_null(feedtest_stream_recv(&s));
    assert_int_equal(feedtest_stream_finish(&s, NULL, 0), GRPC_STATUS_OK);
    return b;
}
