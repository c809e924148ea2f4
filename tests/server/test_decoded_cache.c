/*
 * The decoded-sample cache through real feedd processes on 127.0.0.1 port 0
 * and plain gRPC: a hit gives the bytes a miss gave (and the bytes this
 * process makes from the same reduced image), for every epoch; corrupt
 * images are never cached and keep their error; the cache's bytes stay
 * under its budget with a cache smaller than the dataset; the hit rate over
 * several permuted epochs is near cache/dataset; many streams at once get
 * the right pixels; Describe reports cache_side; a transform larger than
 * the cached side is decoded from the JPEG; BatchRequest.ownership: a
 * sample another server owns is served from the cache or decoded, never
 * admitted. With the ImageNet sample
 * (--imagenet-sample): PSNR of a cached server against an uncached one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"
#include "engine.h"
#include "feed/buf.h"
#include "feed/dataset.h"
#include "feed/errors.h"
#include "feed/transform.h"
#include "feedtest.h"
#include "feedtest_grpc.h"
#include "feedtest_skip.h"

#define SIDE 64 /* the cache's shorter side in most tests */
#define OUT 48  /* train output side (<= SIDE: served from the cache) */
#define CLASSES 4
#define PER_CLASS 12

static char tmp_root[256], data_dir[512];
static uint64_t n_samples;
/* What the server must send for each sample, made here from the reduced image. */
static uint8_t *want_px;            /* [n_samples * OUT * OUT * 3], for (SEED, EPOCH) */
static feed_sample_status *want_st; /* [n_samples] */
static size_t *charge;              /* [n_samples] bytes the cache charges for its image */
#define SEED 11
#define EPOCH 3
#define SAMPLE_BYTES ((size_t)OUT * OUT * 3)

static Feed__V1__TransformSpec train_spec(uint32_t side)
{
    Feed__V1__TransformSpec t = FEED__V1__TRANSFORM_SPEC__INIT;
    t.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_TRAIN;
    t.out_height = side;
    t.out_width = side;
    t.flip_prob = 0.5;
    return t;
}

static void train_transform(uint32_t side, feed_transform *t)
{
    feed_transform_default_train(t);
    t->out_h = t->out_w = side;
    t->flip_prob = 0.5;
    t->resize_size = side * 256 / 224;
}

static double scrape(const feed_test_server *s, const char *series)
{
    double v = -1;
    int rc = feed_test_scrape(s->metrics_port, series, &v);
    if (rc != 0)
        fail_msg("metric %s: %s", series, feed_strerror(rc));
    return v;
}

/*
 * One batch over a fresh stream; the Batch (free it), or NULL on failure.
 * No cmocka assertion: threads call it.
 */
static Feed__V1__Batch *fetch_as(const char *target, const char *dataset, uint32_t out,
                                 uint64_t seed, uint32_t epoch, const uint64_t *idx, size_t n,
                                 Feed__V1__CacheOwnership ownership)
{
    grpc_channel *ch = feedtest_channel(target);
    Feed__V1__TransformSpec spec = train_spec(out);
    Feed__V1__SessionOpen open = FEED__V1__SESSION_OPEN__INIT;
    open.dataset = (char *)dataset;
    open.transform = &spec;
    open.seed = seed;
    open.window = 1;
    open.protocol_version = 1;
    Feed__V1__BatchRequest r = FEED__V1__BATCH_REQUEST__INIT;
    r.open = &open;
    r.batch_id = 1;
    r.epoch = epoch;
    r.n_indices = n;
    r.indices = (uint64_t *)idx;
    r.ownership = ownership;
    feedtest_stream s;
    Feed__V1__Batch *b = NULL;
    if (feedtest_stream_open(ch, 120, &s) == 0) {
        if (feedtest_stream_send(&s, &r) == 0)
            b = feedtest_stream_recv(&s);
        feedtest_stream_writes_done(&s);
        if (b && feedtest_stream_recv(&s)) {
            feed__v1__batch__free_unpacked(b, NULL);
            b = NULL;
        }
        if (feedtest_stream_finish(&s, NULL, 0) != GRPC_STATUS_OK && b) {
            feed__v1__batch__free_unpacked(b, NULL);
            b = NULL;
        }
    }
    grpc_channel_destroy(ch);
    return b;
}

/* fetch_as without BatchRequest.ownership: a client that does not route by owner. */
static Feed__V1__Batch *fetch(const char *target, const char *dataset, uint32_t out, uint64_t seed,
                              uint32_t epoch, const uint64_t *idx, size_t n)
{
    return fetch_as(target, dataset, out, seed, epoch, idx, n,
                    FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_UNSPECIFIED);
}

static void all_indices(uint64_t *idx)
{
    for (uint64_t i = 0; i < n_samples; i++)
        idx[i] = i;
}

/* The batch holds exactly what this process made for its indices. */
static void expect_batch(const Feed__V1__Batch *b, const uint64_t *idx, size_t n)
{
    assert_non_null(b);
    assert_int_equal(b->n_status, n);
    assert_int_equal(b->data.len, n * SAMPLE_BYTES);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(b->status[i], (int)want_st[idx[i]]);
        if (memcmp(b->data.data + i * SAMPLE_BYTES, want_px + idx[i] * SAMPLE_BYTES,
                   SAMPLE_BYTES) != 0)
            fail_msg("sample %llu: pixels differ from the decoded path's",
                     (unsigned long long)idx[i]);
    }
}

static uint8_t *copy_file(const char *from, const char *to)
{
    FILE *f = fopen(from, "rb");
    static uint8_t buf[1 << 20];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    return n > 0 && feed_test_write_file(to, buf, n) == 0 ? buf : NULL;
}

static int group_setup(void **state)
{
    (void)state;
    char from[1024], to[1024];
    if (feed_test_tmpdir("feedd-dcache", tmp_root, sizeof tmp_root) < 0)
        return -1;
    snprintf(data_dir, sizeof data_dir, "%s/data", tmp_root);
    if (feed_test_make_imagefolder(data_dir, CLASSES, PER_CLASS, 23) < 0)
        return -1;
    /* Two broken images in a class of their own, sorted last. */
    snprintf(to, sizeof to, "%s/zz_broken", data_dir);
    if (mkdir(to, 0755) != 0)
        return -1;
    const char *td = getenv("FEED_TEST_DATA");
    static const char *const broken[] = {"corrupt-middle.jpg", "truncated.jpg"};
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", td ? td : "tests/data", broken[i]);
        snprintf(to, sizeof to, "%s/zz_broken/%s", data_dir, broken[i]);
        if (!copy_file(from, to))
            return -1;
    }
    feed_dataset *ds = NULL;
    char err[256];
    if (feed_dataset_open(data_dir, NULL, &ds, err, sizeof err) < 0)
        return -1;
    n_samples = feed_dataset_count(ds);
    want_px = calloc(n_samples, SAMPLE_BYTES);
    want_st = calloc(n_samples, sizeof *want_st);
    charge = calloc(n_samples, sizeof *charge);
    feed_engine *e = NULL;
    if (!want_px || !want_st || !charge || feed_engine_new(NULL, &e) < 0)
        return -1;
    feed_transform t;
    train_transform(OUT, &t);
    feed_buf scratch;
    feed_buf_init(&scratch, 64u << 20);
    for (uint64_t i = 0; i < n_samples; i++) {
        const uint8_t *jpeg;
        size_t len;
        feed_decoded img;
        if (feed_dataset_read(ds, i, &scratch, &jpeg, &len) < 0)
            return -1;
        want_st[i] = feed_engine_decode(e, jpeg, len, SIDE, NULL, NULL, &img);
        if (want_st[i] == FEED_SAMPLE_OK) {
            charge[i] = feedd_cache_charge((size_t)img.width * img.height * 3);
            want_st[i] = feed_engine_run_decoded(e, &img, &t, SEED, EPOCH, i,
                                                 want_px + i * SAMPLE_BYTES, NULL);
        }
    }
    feed_buf_free(&scratch);
    feed_engine_free(e);
    feed_dataset_close(ds);
    grpc_init();
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    grpc_shutdown();
    feed_test_rmtree(tmp_root);
    free(want_px);
    free(want_st);
    free(charge);
    return 0;
}

static void start(feed_test_server *s, const char *cache_bytes, uint32_t side, const char *threads)
{
    char ds[700], bytes[32];
    snprintf(ds, sizeof ds, "d=%s,cache=%u", data_dir, side);
    snprintf(bytes, sizeof bytes, "%s", cache_bytes);
    const char *args[] = {
        "--dataset", ds, "--cache-bytes", bytes, "--threads", threads, "--log-level", "warn", NULL};
    assert_int_equal(feed_test_server_start(args, s), 0);
}

/*
 * Epoch 3 twice, then epoch 4: the first is all misses, the others hits for
 * every good image, the pixels those of the decoded path each time; the
 * broken images miss every time (never cached) and keep their status.
 */
static void test_hit_equals_miss(void **state)
{
    (void)state;
    feed_test_server s;
    start(&s, "64M", SIDE, "2");
    uint64_t *idx = malloc(n_samples * sizeof *idx);
    all_indices(idx);
    size_t good = 0;
    for (uint64_t i = 0; i < n_samples; i++)
        good += want_st[i] == FEED_SAMPLE_OK;
    assert_int_equal(good, n_samples - 2);

    Feed__V1__Batch *miss = fetch(s.target, "d", OUT, SEED, EPOCH, idx, n_samples);
    expect_batch(miss, idx, n_samples);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total"), 0);
    assert_int_equal(scrape(&s, "feedd_cache_misses_total"), (double)n_samples);
    for (size_t i = 0; i < miss->n_errors; i++)
        assert_true(strlen(miss->errors[i]->message) > 0);
    assert_int_equal(miss->n_errors, 2);

    Feed__V1__Batch *hit = fetch(s.target, "d", OUT, SEED, EPOCH, idx, n_samples);
    expect_batch(hit, idx, n_samples);
    assert_memory_equal(hit->data.data, miss->data.data, miss->data.len);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total"), (double)good);
    assert_int_equal(scrape(&s, "feedd_cache_misses_total"), (double)n_samples + 2);
    assert_int_equal(hit->n_errors, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(hit->errors[i]->status, miss->errors[i]->status);
        assert_string_equal(hit->errors[i]->message, miss->errors[i]->message);
    }

    /* Another epoch: new crops, still from the cache (the key has no epoch). */
    Feed__V1__Batch *other = fetch(s.target, "d", OUT, SEED, EPOCH + 1, idx, n_samples);
    assert_non_null(other);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total"), 2.0 * good);
    assert_memory_not_equal(other->data.data, hit->data.data, hit->data.len);
    double bytes = scrape(&s, "feedd_cache_bytes");
    double expect = (double)n_samples * 8;
    for (uint64_t i = 0; i < n_samples; i++)
        expect += (double)charge[i];
    assert_true(bytes == expect); /* slot table and every good image, nothing else */
    assert_int_equal(scrape(&s, "feedd_cache_evictions_total"), 0);

    feed__v1__batch__free_unpacked(miss, NULL);
    feed__v1__batch__free_unpacked(hit, NULL);
    feed__v1__batch__free_unpacked(other, NULL);
    free(idx);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

/* Fisher-Yates with a fixed generator: the client's per-epoch permutation. */
static void permute(uint64_t *v, uint64_t n, uint64_t *seed)
{
    for (uint64_t i = 0; i < n; i++)
        v[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t j = (*seed >> 33) % (i + 1);
        uint64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/*
 * A cache for about half the images' bytes: over six permuted epochs in
 * batches of 8 the bytes never pass the budget, and from the second epoch on
 * the hit rate is about the share of good images that fit. The bound on the
 * rate is generous; the exact policy is test_cache.c's.
 */
static void test_small_cache_bound_and_hit_rate(void **state)
{
    (void)state;
    uint64_t total = 0, good = 0;
    for (uint64_t i = 0; i < n_samples; i++) {
        total += charge[i];
        good += want_st[i] == FEED_SAMPLE_OK;
    }
    uint64_t budget = n_samples * 8 + total / 2;
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)budget);
    feed_test_server s;
    start(&s, bytes, SIDE, "2");
    assert_int_equal(scrape(&s, "feedd_cache_budget_bytes"), (double)budget);
    uint64_t *order = malloc(n_samples * sizeof *order), seed = 5;
    double hits0 = 0, miss0 = 0;
    for (uint32_t epoch = 0; epoch < 6; epoch++) {
        permute(order, n_samples, &seed);
        for (uint64_t at = 0; at < n_samples; at += 8) {
            size_t n = n_samples - at < 8 ? (size_t)(n_samples - at) : 8;
            Feed__V1__Batch *b = fetch(s.target, "d", OUT, SEED, epoch, order + at, n);
            assert_non_null(b);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(b->status[i], (int)want_st[order[at + i]]);
            feed__v1__batch__free_unpacked(b, NULL);
            assert_true(scrape(&s, "feedd_cache_bytes") <= (double)budget);
        }
        double hits = scrape(&s, "feedd_cache_hits_total");
        double misses = scrape(&s, "feedd_cache_misses_total");
        double rate = (hits - hits0) / ((hits - hits0) + (misses - miss0));
        print_message("epoch %u: hit rate %.2f, cache bytes %.0f of %llu\n", epoch, rate,
                      scrape(&s, "feedd_cache_bytes"), (unsigned long long)budget);
        if (epoch >= 1) {
            assert_true(rate >= 0.25);
            assert_true(rate <= 0.75);
        }
        hits0 = hits;
        miss0 = misses;
    }
    free(order);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

typedef struct stream_job {
    const char *target;
    uint64_t *idx;
    size_t n;
    bool ok;
} stream_job;

static void *stream_main(void *arg)
{
    stream_job *j = arg;
    j->ok = true;
    for (int round = 0; round < 3 && j->ok; round++) {
        Feed__V1__Batch *b = fetch(j->target, "d", OUT, SEED, EPOCH, j->idx, j->n);
        j->ok = b && b->data.len == j->n * SAMPLE_BYTES;
        for (size_t i = 0; j->ok && i < j->n; i++)
            j->ok = b->status[i] == (Feed__V1__SampleStatus)want_st[j->idx[i]] &&
                    memcmp(b->data.data + i * SAMPLE_BYTES, want_px + j->idx[i] * SAMPLE_BYTES,
                           SAMPLE_BYTES) == 0;
        if (b)
            feed__v1__batch__free_unpacked(b, NULL);
    }
    return NULL;
}

/*
 * Eight streams at once on four workers, the cache a third of the data,
 * overlapping samples: every sample comes back right (run it in the ASan
 * build for the server's side of it).
 */
static void test_streams_at_once(void **state)
{
    (void)state;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n_samples; i++)
        total += charge[i];
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)(n_samples * 8 + total / 3));
    feed_test_server s;
    start(&s, bytes, SIDE, "4");
    stream_job jobs[8];
    pthread_t th[8];
    uint64_t idx[8][16];
    for (int k = 0; k < 8; k++) {
        for (int i = 0; i < 16; i++)
            idx[k][i] = (uint64_t)(k * 5 + i * 3) % n_samples;
        jobs[k] = (stream_job){s.target, idx[k], 16, false};
        assert_int_equal(pthread_create(&th[k], NULL, stream_main, &jobs[k]), 0);
    }
    for (int k = 0; k < 8; k++) {
        pthread_join(th[k], NULL);
        assert_true(jobs[k].ok);
    }
    assert_true(scrape(&s, "feedd_cache_hits_total") > 0);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

/*
 * Describe: cache_side per dataset. A transform larger than the cached side
 * is decoded from the JPEG as without a cache, and touches no counter.
 */
static void test_describe_and_bypass(void **state)
{
    (void)state;
    char a[700], b[700];
    snprintf(a, sizeof a, "cached=%s,cache=%u", data_dir, SIDE);
    snprintf(b, sizeof b, "plain=%s", data_dir);
    const char *args[] = {"--dataset",     a,      "--dataset", b,
                          "--cache-bytes", "16M",  "--threads", "2",
                          "--log-level",   "warn", NULL};
    feed_test_server s;
    assert_int_equal(feed_test_server_start(args, &s), 0);
    grpc_channel *ch = feedtest_channel(s.target);
    grpc_status_code code;
    Feed__V1__DescribeResponse *r = feedtest_describe(ch, "", &code);
    assert_non_null(r);
    assert_int_equal(r->n_datasets, 2);
    assert_string_equal(r->datasets[0]->name, "cached");
    assert_int_equal(r->datasets[0]->cache_side, SIDE);
    assert_string_equal(r->datasets[1]->name, "plain");
    assert_int_equal(r->datasets[1]->cache_side, 0);
    feed__v1__describe_response__free_unpacked(r, NULL);
    grpc_channel_destroy(ch);

    uint64_t idx[4] = {0, 5, 9, 20};
    const uint32_t big = SIDE * 2;
    Feed__V1__Batch *x = fetch(s.target, "cached", big, SEED, EPOCH, idx, 4);
    Feed__V1__Batch *y = fetch(s.target, "plain", big, SEED, EPOCH, idx, 4);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(x->data.len, y->data.len);
    assert_memory_equal(x->data.data, y->data.data, x->data.len);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total") + scrape(&s, "feedd_cache_misses_total"),
                     0);
    feed__v1__batch__free_unpacked(x, NULL);
    feed__v1__batch__free_unpacked(y, NULL);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

/*
 * BatchRequest.ownership: NOT_OWNER misses are decoded the same way and not admitted (counted
 * in feedd_cache_not_owned_total), OWNER admits, NOT_OWNER then hits what is cached; the
 * pixels are the decoded path's every time. A value beyond the enum is refused.
 */
static void test_ownership_admission(void **state)
{
    (void)state;
    feed_test_server s;
    start(&s, "64M", SIDE, "2");
    uint64_t *idx = malloc(n_samples * sizeof *idx);
    all_indices(idx);
    size_t good = 0;
    for (uint64_t i = 0; i < n_samples; i++)
        good += want_st[i] == FEED_SAMPLE_OK;
    Feed__V1__Batch *b = fetch_as(s.target, "d", OUT, SEED, EPOCH, idx, n_samples,
                                  FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_NOT_OWNER);
    expect_batch(b, idx, n_samples);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(scrape(&s, "feedd_cache_entries"), 0);
    assert_int_equal(scrape(&s, "feedd_cache_not_owned_total"), (double)n_samples);
    assert_int_equal(scrape(&s, "feedd_cache_bytes"), (double)n_samples * 8); /* the table */

    b = fetch_as(s.target, "d", OUT, SEED, EPOCH, idx, n_samples,
                 FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_OWNER);
    expect_batch(b, idx, n_samples);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(scrape(&s, "feedd_cache_entries"), (double)good);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total"), 0);

    b = fetch_as(s.target, "d", OUT, SEED, EPOCH, idx, n_samples,
                 FEED__V1__CACHE_OWNERSHIP__CACHE_OWNERSHIP_NOT_OWNER);
    expect_batch(b, idx, n_samples);
    feed__v1__batch__free_unpacked(b, NULL);
    assert_int_equal(scrape(&s, "feedd_cache_hits_total"), (double)good);
    assert_int_equal(scrape(&s, "feedd_cache_entries"), (double)good);

    b = fetch_as(s.target, "d", OUT, SEED, EPOCH, idx, 1, (Feed__V1__CacheOwnership)7);
    assert_null(b);
    free(idx);
    assert_int_equal(feed_test_server_stop(&s), 0);
}

#define STALE_N 4

/* Sample i of the stale test's folder (one class, files a.jpg.. in order). */
static void stale_path(const char *dir, int i, char *out, size_t cap)
{
    snprintf(out, cap, "%s/c0/%c.jpg", dir, 'a' + i);
}

/* a and b (statuses, pixels) agree sample by sample; says which does not. */
static void expect_agree(const Feed__V1__Batch *a, const Feed__V1__Batch *b, const char *when)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->n_status, STALE_N);
    assert_int_equal(b->n_status, STALE_N);
    for (size_t i = 0; i < STALE_N; i++) {
        if (a->status[i] != b->status[i])
            fail_msg("%s: sample %zu: status %d and %d", when, i, a->status[i], b->status[i]);
        if (memcmp(a->data.data + i * SAMPLE_BYTES, b->data.data + i * SAMPLE_BYTES,
                   SAMPLE_BYTES) != 0)
            fail_msg("%s: sample %zu: the pixels differ", when, i);
    }
}

/*
 * Issue 22 finding 5: a file replaced (new inode), rewritten in place,
 * corrupted or deleted after it was cached was still served from the cache,
 * so it disagreed with a server that read the file afresh (7 of 7 cases).
 * Now each hit checks the file's stamp: both give the same, pixels or the
 * per-sample error.
 */
static void test_changed_file_is_not_served_stale(void **state)
{
    (void)state;
    char dir[600], path[700], tmp[720], ds[700];
    snprintf(dir, sizeof dir, "%s/stale", tmp_root);
    snprintf(path, sizeof path, "%s/c0", dir);
    assert_int_equal(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
    assert_int_equal(mkdir(path, 0755) == 0 || errno == EEXIST, 1);
    for (int i = 0; i < STALE_N; i++) {
        stale_path(dir, i, path, sizeof path);
        assert_int_equal(feed_test_write_jpeg(path, 96, 80, 100 + (unsigned)i, 90), 0);
    }
    /* Two servers alike; plain has seen nothing before the changes. */
    feed_test_server cached, plain;
    snprintf(ds, sizeof ds, "s=%s,cache=%u", dir, SIDE);
    const char *args[] = {"--dataset", ds, "--cache-bytes", "16M", "--threads", "1", NULL};
    assert_int_equal(feed_test_server_start(args, &cached), 0);
    assert_int_equal(feed_test_server_start(args, &plain), 0);
    uint64_t idx[STALE_N] = {0, 1, 2, 3};
    Feed__V1__Batch *c = fetch(cached.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    Feed__V1__Batch *p = fetch(cached.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    expect_agree(c, p, "hit and miss");
    assert_true(scrape(&cached, "feedd_cache_hits_total") == STALE_N);
    feed__v1__batch__free_unpacked(c, NULL);
    feed__v1__batch__free_unpacked(p, NULL);

    /* a: replaced by rename; b: rewritten in place; c: garbage; d: deleted. */
    stale_path(dir, 0, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    assert_int_equal(feed_test_write_jpeg(tmp, 96, 80, 200, 90), 0);
    assert_int_equal(rename(tmp, path), 0);
    stale_path(dir, 1, path, sizeof path);
    assert_int_equal(feed_test_write_jpeg(path, 96, 80, 201, 90), 0);
    stale_path(dir, 2, path, sizeof path);
    static const char junk[] = "not a jpeg any more";
    assert_int_equal(feed_test_write_file(path, junk, sizeof junk - 1), 0);
    stale_path(dir, 3, path, sizeof path);
    assert_int_equal(unlink(path), 0);

    c = fetch(cached.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    p = fetch(plain.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    expect_agree(c, p, "after the changes");
    assert_true((int)p->status[0] == FEED_SAMPLE_OK && (int)p->status[1] == FEED_SAMPLE_OK);
    assert_true((int)p->status[2] != FEED_SAMPLE_OK && (int)p->status[3] != FEED_SAMPLE_OK);
    assert_true(scrape(&cached, "feedd_cache_stale_total") == STALE_N);
    feed__v1__batch__free_unpacked(c, NULL);
    feed__v1__batch__free_unpacked(p, NULL);

    /* The refreshed images are cached again and agree. */
    c = fetch(cached.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    p = fetch(plain.target, "s", OUT, SEED, EPOCH, idx, STALE_N);
    expect_agree(c, p, "refreshed");
    feed__v1__batch__free_unpacked(c, NULL);
    feed__v1__batch__free_unpacked(p, NULL);
    assert_int_equal(feed_test_server_stop(&cached), 0);
    assert_int_equal(feed_test_server_stop(&plain), 0);
}

static int cmp_double(const void *p, const void *q)
{
    double x = *(const double *)p, y = *(const double *)q;
    return x < y ? -1 : x > y;
}

/*
 * The ImageNet sample through two servers, cache=256 and uncached, train
 * 224: PSNR per sample over 100 samples, against the bounds the engine's
 * test states (bench/results/cache-2core-2026-12-01 for all 1000); and the
 * cached server's second pass (hits) equals its first (misses).
 */
static void test_sample_psnr_vs_uncached(void **state)
{
    (void)state;
    const char *dir = getenv("FEED_SAMPLE_DIR");
    char a[1200], b[1200];
    snprintf(a, sizeof a, "in=%s,cache=256", dir);
    snprintf(b, sizeof b, "in=%s", dir);
    const char *ca[] = {"--dataset", a,   "--cache-bytes", "256M", "--threads", "2", "--log-level",
                        "warn",      NULL};
    const char *ua[] = {"--dataset", b, "--threads", "2", "--log-level", "warn", NULL};
    feed_test_server cs, us;
    assert_int_equal(feed_test_server_start(ca, &cs), 0);
    assert_int_equal(feed_test_server_start(ua, &us), 0);
    enum { N = 100 };
    uint64_t idx[N];
    for (int i = 0; i < N; i++)
        idx[i] = (uint64_t)i * 10;
    Feed__V1__Batch *miss = fetch(cs.target, "in", 224, 42, 2, idx, N);
    Feed__V1__Batch *hit = fetch(cs.target, "in", 224, 42, 2, idx, N);
    Feed__V1__Batch *plain = fetch(us.target, "in", 224, 42, 2, idx, N);
    assert_non_null(miss);
    assert_non_null(hit);
    assert_non_null(plain);
    assert_int_equal(scrape(&cs, "feedd_cache_hits_total"), N);
    assert_memory_equal(hit->data.data, miss->data.data, miss->data.len);
    const size_t one = (size_t)224 * 224 * 3;
    double ps[N];
    for (int i = 0; i < N; i++) {
        double se = 0;
        for (size_t p = 0; p < one; p++) {
            double d = (double)hit->data.data[i * one + p] - plain->data.data[i * one + p];
            se += d * d;
        }
        ps[i] = se == 0 ? 99.0 : 10.0 * log10(255.0 * 255.0 / (se / one));
    }
    qsort(ps, N, sizeof ps[0], cmp_double);
    print_message("cached (256) vs uncached server: min %.2f dB, median %.2f dB\n", ps[0],
                  ps[N / 2]);
    assert_true(ps[0] >= 20.0);
    assert_true(ps[N / 2] >= 36.0);
    feed__v1__batch__free_unpacked(miss, NULL);
    feed__v1__batch__free_unpacked(hit, NULL);
    feed__v1__batch__free_unpacked(plain, NULL);
    assert_int_equal(feed_test_server_stop(&cs), 0);
    assert_int_equal(feed_test_server_stop(&us), 0);
}

int main(int argc, char **argv)
{
    if (feed_test_sample_mode(argc, argv)) {
        const struct CMUnitTest sample_tests[] = {
            cmocka_unit_test(test_sample_psnr_vs_uncached),
        };
        if (!feed_test_have_sample())
            return FEED_TEST_SKIP;
        grpc_init();
        int rc = cmocka_run_group_tests(sample_tests, NULL, NULL);
        grpc_shutdown();
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_equals_miss),
        cmocka_unit_test(test_small_cache_bound_and_hit_rate),
        cmocka_unit_test(test_streams_at_once),
        cmocka_unit_test(test_describe_and_bypass),
        cmocka_unit_test(test_ownership_admission),
        cmocka_unit_test(test_changed_file_is_not_served_stale),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
