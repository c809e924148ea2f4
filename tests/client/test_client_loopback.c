/*
 * libfeedclient against real feedd processes over real gRPC on 127.0.0.1:
 * a whole epoch over one and over three servers (every sample exactly once,
 * in plan order, right labels, identical bytes), rank partitions, kill -9 of
 * a server mid-epoch, a stopped (SIGSTOP) server caught by the batch
 * deadline, a lone server paused for less than the deadline not failed, a server that comes up after open, a "dns:///localhost:PORT"
 * target, every server dead (FEED_EUNAVAILABLE, no hang), a batch beyond
 * the server's advertised limit (refused at open), resume from a
 * cursor, ordered = false, host normalisation end to end, both
 * bad-sample policies on a dataset with corrupt files, and prefetch across the
 * epoch boundary (kept by set_epoch(e + 1, 0), dropped by any other cursor,
 * re-issued when its server stalls), a busy server with the whole epoch in
 * its window, a server that refuses streams (never up, no
 * failovers), and max_slots. Skips (exit FEED_TEST_SKIP, saying why) when
 * feedd has not been built.
 *
 * One executable on purpose (~1,100 lines): the cases after the first compare
 * their bytes with the reference epoch the first one records, and the
 * datasets are made once for all of them; split up, each part would make its
 * own. The fixture (fx_*) owns what a case starts.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feed/timeutil.h"
#include "feedtest.h"
#include "feedtest_client.h"
#include "feedtest_skip.h"
#include "norm_ref.h"
#include "plan.h"

#define CLASSES 4u
#define PER_CLASS 24u
#define NSAMPLES (CLASSES * PER_CLASS)
#define SIDE 32u
#define MAXB 16u
#define MAXBATCHES 256u
#define SEED 1234u
#define EPOCH 3u
/* Polls for something that must happen (a reply, a failover) run up to this many 20 ms sleeps:
 * 120 s, far beyond any delay a loaded machine adds; only a broken loader waits that long. */
#define SETTLE_POLLS 6000

typedef struct rec {
    uint64_t batch_number;
    uint32_t epoch;
    uint32_t n;
    int rc;
    uint32_t substituted;
    uint64_t idx[MAXB];
    int64_t lab[MAXB];
    uint8_t st[MAXB];
    uint8_t *data;
    size_t bytes;
} rec;

typedef struct run {
    rec r[MAXBATCHES];
    size_t count;
} run;

static char g_root[256];
static char g_good[300], g_bad[300];
static char g_good_arg[340], g_bad_arg[340];

static void run_free(run *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->r[i].data);
    r->count = 0;
}

static void base_cfg(feed_loader_config *c, const char *const *targets, size_t n, uint32_t batch)
{
    feed_test_host_config(c, targets, n, "small", SIDE, batch, NULL);
    c->seed = SEED;
    c->epoch = EPOCH;
    /* No healthy server falls silent this long, however loaded the machine: a test that wants a
     * failover kills or stops a server, or sets a shorter deadline itself. */
    c->batch_deadline_ms = SETTLE_POLLS * 20;
    c->unavailable_timeout_ms = SETTLE_POLLS * 20;
}

/* Takes one batch into r (copying everything) and releases it. Returns next()'s code. */
static int take(feed_loader *l, run *r)
{
    feed_batch *b = NULL;
    int rc = feed_loader_next(l, &b);
    if (rc != 0 && rc != FEED_EBADSAMPLE)
        return rc;
    assert_non_null(b);
    assert_true(r->count < MAXBATCHES);
    assert_true(b->n <= MAXB);
    rec *x = &r->r[r->count++];
    x->batch_number = b->batch_number;
    x->epoch = b->epoch;
    x->n = b->n;
    x->rc = rc;
    x->substituted = b->substituted;
    memcpy(x->idx, b->indices, b->n * sizeof(uint64_t));
    memcpy(x->lab, b->labels, b->n * sizeof(int64_t));
    memcpy(x->st, b->status, b->n);
    x->bytes = b->bytes;
    x->data = malloc(b->bytes);
    assert_non_null(x->data);
    memcpy(x->data, b->data, b->bytes);
    assert_int_equal(b->c, 3);
    assert_int_equal(b->h, SIDE);
    assert_int_equal(b->w, SIDE);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    return rc;
}

static void collect_all(feed_loader *l, run *r)
{
    int rc;
    while ((rc = take(l, r)) == 0 || rc == FEED_EBADSAMPLE)
        ;
    assert_int_equal(rc, FEED_EEOF);
}

/* Batches of `epoch` in plan order, from `first`, every sample exactly as the plan says,
 * labels right. */
static void check_epoch_order(const run *r, uint32_t epoch, uint32_t rank, uint32_t world,
                              uint32_t batch, uint64_t first)
{
    client_plan p;
    assert_int_equal(client_plan_build(&p, NSAMPLES, SEED, epoch, rank, world, batch, false), 0);
    assert_int_equal(r->count, p.batches - first);
    for (size_t i = 0; i < r->count; i++) {
        const uint32_t *s;
        uint32_t n;
        client_plan_batch(&p, first + i, &s, &n);
        assert_int_equal(r->r[i].batch_number, first + i);
        assert_int_equal(r->r[i].epoch, epoch);
        assert_int_equal(r->r[i].n, n);
        for (uint32_t k = 0; k < n; k++) {
            assert_int_equal(r->r[i].idx[k], s[k]);
            assert_int_equal(r->r[i].lab[k], s[k] / PER_CLASS);
        }
    }
    client_plan_free(&p);
}

static void check_plan_order(const run *r, uint32_t rank, uint32_t world, uint32_t batch,
                             uint64_t first)
{
    check_epoch_order(r, EPOCH, rank, world, batch, first);
}

/* Every sample index of the dataset exactly once (world = 1, no padding). */
static void check_exactly_once(const run *r)
{
    uint32_t seen[NSAMPLES] = {0};
    for (size_t i = 0; i < r->count; i++) {
        for (uint32_t k = 0; k < r->r[i].n; k++) {
            assert_true(r->r[i].idx[k] < NSAMPLES);
            seen[r->r[i].idx[k]]++;
        }
    }
    for (uint32_t i = 0; i < NSAMPLES; i++)
        assert_int_equal(seen[i], 1);
}

static void check_same_bytes(const run *a, size_t a_from, const run *b)
{
    assert_true(a->count >= a_from + b->count);
    for (size_t i = 0; i < b->count; i++) {
        const rec *x = &a->r[a_from + i], *y = &b->r[i];
        assert_int_equal(x->batch_number, y->batch_number);
        assert_int_equal(x->epoch, y->epoch);
        assert_int_equal(x->n, y->n);
        assert_int_equal(x->bytes, y->bytes);
        assert_memory_equal(x->idx, y->idx, x->n * sizeof(uint64_t));
        assert_memory_equal(x->lab, y->lab, x->n * sizeof(int64_t));
        assert_memory_equal(x->data, y->data, x->bytes);
    }
}

/*
 * What one test runs against: up to FX_SERVERS feedd processes, the loaders it opened, two
 * runs to record into, a port reserved for a server that starts late, and a config for its
 * servers (base_cfg over every server, batch 10) to adjust before fx_open. The teardown
 * (fx_teardown) closes what is open and kills what runs, also when a failed assertion cut the
 * test short: an orphaned feedd would hold ctest's pipe.
 */
#define FX_SERVERS 3
#define FX_LOADERS 2

typedef struct fixture {
    feed_test_server s[FX_SERVERS];
    int n;
    const char *targets[FX_SERVERS];
    feed_loader_config c;
    feed_loader *open[FX_LOADERS];
    run *r, *fresh;
    int reserved_fd;
    char late[64];        /* "127.0.0.1:PORT" of the reserved port */
    char late_listen[64]; /* the same, for --listen */
} fixture;

static fixture g_fx;

/* Starts one more feedd: `args`, or the default ones over dataset_arg. */
static void fx_spawn(fixture *f, const char *dataset_arg, const char *const *args)
{
    const char *plain[] = {"--dataset", dataset_arg, "--threads", "1", "--log-level", "warn", NULL};
    assert_true(f->n < FX_SERVERS);
    assert_int_equal(feed_test_server_start(args ? args : plain, &f->s[f->n]), 0);
    f->targets[f->n] = f->s[f->n].target;
    f->n++;
}

/* n servers over dataset_arg, the config over all of them. */
static fixture *fx_start(int n, const char *dataset_arg)
{
    fixture *f = &g_fx;
    for (int i = 0; i < n; i++)
        fx_spawn(f, dataset_arg, NULL);
    base_cfg(&f->c, f->targets, (size_t)n, 10);
    return f;
}

/* A target for a server that starts later on a reserved port (fx_spawn_late). */
static const char *fx_reserve_late(fixture *f)
{
    int port;
    assert_int_equal(feed_test_port_reserve(&f->reserved_fd, &port), 0);
    snprintf(f->late, sizeof f->late, "127.0.0.1:%d", port);
    snprintf(f->late_listen, sizeof f->late_listen, "127.0.0.1:%d", port);
    return f->late;
}

static void fx_spawn_late(fixture *f, const char *dataset_arg)
{
    const char *args[] = {"--dataset",    dataset_arg,   "--threads", "1", "--listen",
                          f->late_listen, "--log-level", "warn",      NULL};
    fx_spawn(f, dataset_arg, args);
}

/* Opens f->c; asserts it opens. */
static feed_loader *fx_open(fixture *f)
{
    for (int i = 0; i < FX_LOADERS; i++) {
        if (!f->open[i]) {
            assert_int_equal(feed_loader_open(&f->c, &f->open[i]), 0);
            return f->open[i];
        }
    }
    fail_msg("more than %d loaders open", FX_LOADERS);
    return NULL;
}

static void fx_close(fixture *f, feed_loader *l)
{
    for (int i = 0; i < FX_LOADERS; i++) {
        if (f->open[i] == l)
            f->open[i] = NULL;
    }
    feed_loader_close(l);
}

static int fx_setup(void **state)
{
    (void)state;
    memset(&g_fx, 0, sizeof g_fx);
    g_fx.reserved_fd = -1;
    g_fx.r = calloc(1, sizeof(*g_fx.r));
    g_fx.fresh = calloc(1, sizeof(*g_fx.fresh));
    return g_fx.r && g_fx.fresh ? 0 : -1;
}

static int fx_teardown(void **state)
{
    (void)state;
    fixture *f = &g_fx;
    for (int i = 0; i < FX_LOADERS; i++)
        feed_loader_close(f->open[i]);
    for (int i = 0; i < f->n; i++)
        feed_test_server_kill(&f->s[i]);
    feed_test_port_release(&f->reserved_fd);
    run_free(f->r);
    run_free(f->fresh);
    free(f->r);
    free(f->fresh);
    memset(f, 0, sizeof(*f));
    return 0;
}

static run g_ref; /* epoch EPOCH, batch 10, one server: the reference bytes */

static void test_epoch_one_and_three_servers(void **state)
{
    (void)state;
    fixture *f = fx_start(3, g_good_arg);
    f->c.num_targets = 1;
    feed_loader *l = fx_open(f);
    assert_int_equal(feed_loader_dataset_size(l), NSAMPLES);
    assert_int_equal(feed_loader_batches_per_epoch(l), 10); /* 9 x 10 + 6 */
    collect_all(l, &g_ref);
    fx_close(f, l);
    check_plan_order(&g_ref, 0, 1, 10, 0);
    check_exactly_once(&g_ref);
    assert_int_equal(g_ref.r[9].n, 6);

    f->c.num_targets = 3;
    l = fx_open(f);
    collect_all(l, f->r);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_int_equal(st.batches, 10);
    assert_int_equal(st.samples, NSAMPLES);
    assert_int_equal(st.servers_known, 3);
    uint64_t by_servers = 0;
    for (uint32_t i = 0; i < st.servers_known; i++) {
        feed_server_stats ss;
        assert_int_equal(feed_loader_server_stats(l, i, &ss, sizeof ss), 0);
        by_servers += ss.batches;
    }
    feed_server_stats none;
    assert_int_equal(feed_loader_server_stats(l, 3, &none, sizeof none), FEED_EINVAL);
    /* Plus whatever of the next epoch was prefetched: at most one slot each (2 + 2 x 3). */
    assert_true(by_servers >= 10 && by_servers <= 18);
    assert_int_equal(feed_loader_next(l, &(feed_batch *){NULL}), FEED_EEOF);
    fx_close(f, l);
    check_plan_order(f->r, 0, 1, 10, 0);
    check_same_bytes(&g_ref, 0, f->r);
}

static void test_rank_partitions(void **state)
{
    (void)state;
    fixture *f = fx_start(1, g_good_arg);
    uint32_t seen[NSAMPLES] = {0};
    for (uint32_t rank = 0; rank < 3; rank++) {
        base_cfg(&f->c, f->targets, 1, 8);
        f->c.rank = rank;
        f->c.world = 3;
        feed_loader *l = fx_open(f);
        assert_int_equal(feed_loader_batches_per_epoch(l), 4); /* 32 samples per rank */
        collect_all(l, f->r);
        fx_close(f, l);
        check_plan_order(f->r, rank, 3, 8, 0);
        for (size_t i = 0; i < f->r->count; i++) {
            for (uint32_t k = 0; k < f->r->r[i].n; k++)
                seen[f->r->r[i].idx[k]]++;
        }
        run_free(f->r);
    }
    for (uint32_t i = 0; i < NSAMPLES; i++)
        assert_int_equal(seen[i], 1);
}

static void test_kill_one_of_three(void **state)
{
    (void)state;
    fixture *f = fx_start(3, g_good_arg);
    f->c.window_per_server = 1;
    feed_loader *l = fx_open(f);
    run *r = f->r;
    /* Usually all three are up within a moment; a loaded machine may connect one late, and
     * a server that has not answered yet is no failover when it dies. */
    feed_loader_stats st;
    for (int i = 0; i < 1500; i++) {
        feed_loader_get_stats(l, &st, sizeof st);
        if (st.servers_up == 3)
            break;
        usleep(20000);
    }
    assert_int_equal(take(l, r), 0);
    assert_int_equal(take(l, r), 0);
    /* Kill one that is up (a batch came, so one is): s[1] when it is. */
    int victim = -1;
    for (int i = 0; i < 3; i++) {
        feed_server_stats ss;
        assert_int_equal(feed_loader_server_stats(l, (uint32_t)i, &ss, sizeof ss), 0);
        if (ss.up && (victim < 0 || i == 1))
            victim = i;
    }
    assert_true(victim >= 0);
    feed_test_server_kill(&f->s[victim]);
    collect_all(l, r);
    /* The epoch may end before the dead stream is noticed: give it time (bounded). */
    for (int i = 0; i < SETTLE_POLLS; i++) {
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        if (st.failovers)
            break;
        usleep(20000);
    }
    print_message("kill -9: failovers %llu, reissued %llu, retries %llu\n",
                  (unsigned long long)st.failovers, (unsigned long long)st.reissued,
                  (unsigned long long)st.retries);
    assert_true(st.failovers >= 1);
    fx_close(f, l);
    check_plan_order(r, 0, 1, 10, 0);
    check_exactly_once(r);
    check_same_bytes(&g_ref, 0, r);
}

static void test_server_started_mid_epoch(void **state)
{
    (void)state;
    fixture *f = fx_start(1, g_good_arg);
    const char *targets[2] = {f->targets[0], fx_reserve_late(f)};
    base_cfg(&f->c, targets, 2, 4);
    feed_loader *l = fx_open(f);
    run *r = f->r;
    assert_int_equal(take(l, r), 0);
    feed_server_stats ss;
    assert_int_equal(feed_loader_server_stats(l, 1, &ss, sizeof ss), 0);
    assert_false(ss.up);

    fx_spawn_late(f, g_good_arg);
    /* Keep training until the late server has made batches (bounded by epochs). */
    uint64_t late_batches = 0;
    for (int epoch = 0; epoch < 100 && late_batches == 0; epoch++) {
        int rc;
        while ((rc = take(l, r)) == 0)
            ;
        assert_int_equal(rc, FEED_EEOF);
        run_free(r);
        assert_int_equal(feed_loader_set_epoch(l, EPOCH + 1 + (uint32_t)epoch, 0), 0);
        assert_int_equal(feed_loader_server_stats(l, 1, &ss, sizeof ss), 0);
        late_batches = ss.batches;
    }
    print_message("late server %s: %llu batches\n", ss.target, (unsigned long long)late_batches);
    assert_true(late_batches > 0);
}

static void test_all_servers_dead(void **state)
{
    (void)state;
    fixture *f = fx_start(2, g_good_arg);
    base_cfg(&f->c, f->targets, 2, 2);
    f->c.unavailable_timeout_ms = 1500;
    feed_loader *l = fx_open(f);
    run *r = f->r;
    assert_int_equal(take(l, r), 0);
    for (int i = 0; i < f->n; i++)
        feed_test_server_kill(&f->s[i]);
    uint64_t t0 = feed_now_ns();
    int rc;
    while ((rc = take(l, r)) == 0)
        ;
    double secs = (double)(feed_now_ns() - t0) / 1e9;
    print_message("all servers dead: %s after %.2f s (%zu batches still delivered)\n",
                  feed_err_name(rc), secs, r->count - 1);
    /* next() returns (a hang is the test's timeout), and says why. */
    assert_int_equal(rc, FEED_EUNAVAILABLE);
    /* And it keeps answering, without blocking for another timeout. */
    assert_int_equal(feed_loader_next(l, &(feed_batch *){NULL}), FEED_EUNAVAILABLE);
}

/* A batch beyond what the server advertises (max_batch_bytes) is refused at open. */
static void test_batch_beyond_server_limit(void **state)
{
    (void)state;
    fixture *f = &g_fx;
    const char *args[] = {"--dataset", g_good_arg,    "--threads", "1", "--max-batch-bytes",
                          "1M",        "--log-level", "error",     NULL};
    fx_spawn(f, g_good_arg, args);
    base_cfg(&f->c, f->targets, 1, 8);
    f->c.transform.out_h = f->c.transform.out_w = 224; /* 1.2 MB a batch */
    f->c.log_fn = NULL;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&f->c, &l), FEED_EINVAL);
    assert_null(l);
}

static void test_resume(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10); /* made by the first test */
    fixture *f = fx_start(1, g_good_arg);
    f->c.start_batch = 4;
    feed_loader *l = fx_open(f);
    run *r = f->r;
    collect_all(l, r);
    check_plan_order(r, 0, 1, 10, 4);
    check_same_bytes(&g_ref, 4, r);
    run_free(r);
    /* set_epoch on a live loader: a different epoch, then back to the cursor. */
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 1, 0), 0);
    assert_int_equal(take(l, r), 0);
    assert_memory_not_equal(r->r[0].idx, g_ref.r[0].idx, 10 * sizeof(uint64_t));
    run_free(r);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH, 7), 0);
    collect_all(l, r);
    check_same_bytes(&g_ref, 7, r);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH, 11), FEED_EINVAL);
}

static void test_unordered_and_normalised(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(3, g_good_arg);
    run *r = f->r;
    f->c.ordered = false;
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    fx_close(f, l);
    check_exactly_once(r);
    for (size_t i = 0; i < r->count; i++) {
        const rec *x = &r->r[i], *y = &g_ref.r[x->batch_number];
        assert_memory_equal(x->data, y->data, x->bytes);
    }
    run_free(r);

    /* Every dtype/layout through the real path matches the reference on the raw bytes. */
    for (int dt = FEED_DTYPE_UINT8; dt <= FEED_DTYPE_FP32; dt++) {
        for (int lay = FEED_LAYOUT_NCHW; lay <= FEED_LAYOUT_NHWC; lay++) {
            base_cfg(&f->c, f->targets, 1, 10);
            f->c.dtype = (feed_dtype)dt;
            f->c.layout = (feed_layout)lay;
            l = fx_open(f);
            assert_int_equal(take(l, r), 0);
            fx_close(f, l);
            size_t first;
            assert_int_equal(r->r[0].bytes, g_ref.r[0].bytes * (dt == 3 ? 4 : (dt == 0 ? 1 : 2)));
            assert_int_equal(ref_normalize_compare(g_ref.r[0].data, 10, SIDE, SIDE, (feed_dtype)dt,
                                                   (feed_layout)lay, f->c.mean, f->c.std,
                                                   r->r[0].data, &first),
                             0);
            run_free(r);
        }
    }
}

static void test_bad_samples(void **state)
{
    (void)state;
    fixture *f = fx_start(1, g_bad_arg);
    run *r = f->r;
    base_cfg(&f->c, f->targets, 1, 5); /* 19 samples: 5, 5, 5, 4, so no batch is all bad */
    f->c.dataset = "bad";
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    fx_close(f, l);
    size_t sb = (size_t)SIDE * SIDE * 3;
    uint32_t bad = 0, subst = 0;
    for (size_t i = 0; i < r->count; i++) {
        rec *x = &r->r[i];
        assert_int_equal(x->rc, 0);
        subst += x->substituted;
        for (uint32_t k = 0; k < x->n; k++) {
            if (x->st[k] == FEED_SAMPLE_OK)
                continue;
            bad++;
            uint32_t j = (k + 1) % x->n;
            while (x->st[j] != FEED_SAMPLE_OK)
                j = (j + 1) % x->n;
            assert_memory_equal(x->data + k * sb, x->data + j * sb, sb);
            assert_int_equal(x->lab[k], x->lab[j]);
        }
    }
    uint64_t counted = 0;
    for (int k = 1; k < FEED_SAMPLE_STATUS_COUNT; k++)
        counted += st.sample_errors[k];
    print_message("bad samples: %u substituted, not_jpeg %llu, truncated %llu, corrupt %llu\n",
                  subst, (unsigned long long)st.sample_errors[FEED_SAMPLE_NOT_JPEG],
                  (unsigned long long)st.sample_errors[FEED_SAMPLE_TRUNCATED],
                  (unsigned long long)st.sample_errors[FEED_SAMPLE_CORRUPT]);
    assert_int_equal(bad, 3);
    assert_int_equal(subst, 3);
    assert_int_equal(counted, 3);
    assert_int_equal(st.sample_errors[FEED_SAMPLE_EMPTY], 1);
    run_free(r);

    f->c.bad_sample_policy = FEED_BAD_SAMPLE_FAIL;
    l = fx_open(f);
    collect_all(l, r);
    fx_close(f, l);
    uint32_t failed_batches = 0;
    bad = 0;
    for (size_t i = 0; i < r->count; i++) {
        uint32_t in_batch = 0;
        for (uint32_t k = 0; k < r->r[i].n; k++)
            in_batch += r->r[i].st[k] != FEED_SAMPLE_OK;
        bad += in_batch;
        assert_int_equal(r->r[i].rc, in_batch ? FEED_EBADSAMPLE : 0);
        assert_int_equal(r->r[i].substituted, 0);
        failed_batches += in_batch > 0;
    }
    assert_int_equal(bad, 3);
    assert_true(failed_batches >= 1);
}

/* A stopped (SIGSTOP) server keeps its socket open: only its silence can tell, and its batches
 * go to the other server by a hedge (silent for far longer than the other takes) or the batch
 * deadline, whichever comes first. It must
 * owe a batch of the epoch once stopped, whatever the timing: it is the only server until it has
 * answered and is stopped; the second one starts only then, and the first still wins every tie
 * for work (the first of equally free servers gets it), so the next batch dispatched goes to it
 * if it owed none, and there is always a next one (the loader holds 3 of the 10 batches). */
static void test_stalled_server_deadline(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(1, g_good_arg);
    const char *targets[2] = {f->targets[0], fx_reserve_late(f)};
    base_cfg(&f->c, targets, 2, 10);
    f->c.window_per_server = 1;
    f->c.batch_deadline_ms = 1000;
    f->c.unavailable_timeout_ms = SETTLE_POLLS * 20; /* the second server starts late */
    feed_loader *l = fx_open(f);
    feed_server_stats ss = {0};
    for (int i = 0; i < SETTLE_POLLS && !ss.up; i++) {
        assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
        if (!ss.up)
            usleep(20000);
    }
    assert_true(ss.up);
    assert_int_equal(feed_test_server_signal(&f->s[0], SIGSTOP), 0);
    fx_spawn_late(f, g_good_arg);
    run *r = f->r;
    collect_all(l, r);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    print_message("SIGSTOP: failovers %llu, reissued %llu, hedged %llu\n",
                  (unsigned long long)st.failovers, (unsigned long long)st.reissued,
                  (unsigned long long)st.hedged);
    assert_true(st.reissued + st.hedged >= 1);
    fx_close(f, l);
    check_plan_order(r, 0, 1, 10, 0);
    check_same_bytes(&g_ref, 0, r);
}

static void test_dns_target(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(1, g_good_arg);
    char target[64];
    snprintf(target, sizeof target, "dns:///localhost:%d", f->s[0].port);
    const char *targets[1] = {target};
    base_cfg(&f->c, targets, 1, 10);
    f->c.resolve_interval_ms = 50; /* several re-resolutions during the epoch */
    feed_loader *l = fx_open(f);
    collect_all(l, f->r);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    /* localhost gives 127.0.0.1 and perhaps ::1 (where nothing listens). */
    assert_true(st.servers_known >= 1 && st.servers_known <= 2);
    bool found_v4 = false;
    for (uint32_t i = 0; i < st.servers_known; i++) {
        feed_server_stats ss;
        assert_int_equal(feed_loader_server_stats(l, i, &ss, sizeof ss), 0);
        if (strncmp(ss.target, "ipv4:127.0.0.1:", 15) == 0)
            found_v4 = ss.batches >= 10; /* the next epoch's prefetch may have begun */
    }
    assert_true(found_v4);
    fx_close(f, l);
    check_same_bytes(&g_ref, 0, f->r);
}

/* What a fresh loader opened over f's first n servers at (epoch, start_batch) delivers, into
 * f->fresh (emptied first): the reference for a cursor. */
static const run *fresh_run(fixture *f, size_t first_server, size_t n, uint32_t epoch,
                            uint64_t start_batch)
{
    feed_loader_config keep = f->c;
    base_cfg(&f->c, &f->targets[first_server], n, 10);
    f->c.epoch = epoch;
    f->c.start_batch = start_batch;
    run_free(f->fresh);
    feed_loader *l = fx_open(f);
    collect_all(l, f->fresh);
    fx_close(f, l);
    f->c = keep;
    check_epoch_order(f->fresh, epoch, 0, 1, 10, start_batch);
    return f->fresh;
}

/* r is exactly what a fresh loader at (epoch, start_batch) over f's first n servers gives. */
static void check_as_fresh(fixture *f, const run *r, size_t n, uint32_t epoch, uint64_t start_batch)
{
    const run *fresh = fresh_run(f, 0, n, epoch, start_batch);
    check_same_bytes(r, 0, fresh);
    assert_int_equal(r->count, fresh->count);
}

/* Waits (bounded) until batches of the next epoch have landed: bytes beyond a whole epoch. */
static void wait_prefetched(feed_loader *l, uint64_t epochs_taken)
{
    uint64_t epoch_bytes = (uint64_t)NSAMPLES * SIDE * SIDE * 3;
    feed_loader_stats st;
    for (int i = 0; i < SETTLE_POLLS; i++) {
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        if (st.bytes_received > epochs_taken * epoch_bytes)
            break;
        usleep(20000);
    }
    assert_true(st.bytes_received > epochs_taken * epoch_bytes);
}

/* next() → FEED_EEOF → set_epoch(e + 1, 0), three epochs in a row over two servers: each epoch
 * is what a fresh loader opened there gives, though part of it was fetched before set_epoch. */
static void test_epoch_prefetch_kept(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(2, g_good_arg);
    run *r = f->r;
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    check_same_bytes(&g_ref, 0, r);
    /* Once with the prefetched batches landed, once with them probably still in flight. */
    wait_prefetched(l, 1);
    for (uint32_t e = EPOCH + 1; e <= EPOCH + 2; e++) {
        assert_int_equal(feed_loader_next(l, &(feed_batch *){NULL}), FEED_EEOF);
        assert_int_equal(feed_loader_set_epoch(l, e, 0), 0);
        run_free(r);
        collect_all(l, r);
        check_as_fresh(f, r, 2, e, 0);
        check_exactly_once(r);
    }
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_int_equal(st.batches, 30);
}

/* After prefetch has started, any cursor but (e + 1, 0) gives what a fresh loader there gives:
 * another epoch, a start_batch != 0, an earlier epoch; and set_epoch(e + 1, 0) before the end
 * of epoch e skips the rest of e and keeps what was prefetched. */
static void test_epoch_prefetch_dropped(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(1, g_good_arg);
    run *r = f->r;
    feed_loader *l = fx_open(f);
    uint64_t epochs = 0;

    collect_all(l, r);
    wait_prefetched(l, ++epochs);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 2, 0), 0);
    run_free(r);
    collect_all(l, r);
    check_as_fresh(f, r, 1, EPOCH + 2, 0);

    wait_prefetched(l, ++epochs); /* epoch EPOCH + 3 prefetched */
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 3, 4), 0);
    run_free(r);
    collect_all(l, r);
    check_as_fresh(f, r, 1, EPOCH + 3, 4);

    /* Out of range: refused, and the loader still ends the epoch it was in. */
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 4, 11), FEED_EINVAL);
    assert_int_equal(feed_loader_next(l, &(feed_batch *){NULL}), FEED_EEOF);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH, 0), 0);
    run_free(r);
    collect_all(l, r);
    check_same_bytes(r, 0, &g_ref);
    assert_int_equal(r->count, g_ref.count);

    /* Mid-epoch: with 4 slots, once 7 of 10 batches are taken all of EPOCH has a slot, so
     * EPOCH + 1 is being fetched; set_epoch(EPOCH + 1, 0) drops batches 7..9 of EPOCH. */
    assert_int_equal(feed_loader_set_epoch(l, EPOCH, 0), 0);
    run_free(r);
    for (int i = 0; i < 7; i++)
        assert_int_equal(take(l, r), 0);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 1, 0), 0);
    run_free(r);
    collect_all(l, r);
    check_as_fresh(f, r, 1, EPOCH + 1, 0);
}

/* ordered = false across the boundary: every sample of e + 1 exactly once, right bytes. */
static void test_epoch_prefetch_unordered(void **state)
{
    (void)state;
    fixture *f = fx_start(3, g_good_arg);
    run *r = f->r;
    const run *fresh = fresh_run(f, 0, 3, EPOCH + 1, 0);
    f->c.ordered = false;
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    check_exactly_once(r);
    run_free(r);
    assert_int_equal(feed_loader_set_epoch(l, EPOCH + 1, 0), 0);
    collect_all(l, r);
    fx_close(f, l);
    check_exactly_once(r);
    assert_int_equal(r->count, fresh->count);
    for (size_t i = 0; i < r->count; i++) {
        const rec *x = &r->r[i];
        assert_true(x->batch_number < fresh->count);
        const rec *y = &fresh->r[x->batch_number];
        assert_int_equal(x->epoch, EPOCH + 1);
        assert_int_equal(x->n, y->n);
        assert_memory_equal(x->idx, y->idx, x->n * sizeof(uint64_t));
        assert_memory_equal(x->lab, y->lab, x->n * sizeof(int64_t));
        assert_memory_equal(x->data, y->data, x->bytes);
    }
}

/* A prefetched batch stuck on a stopped server is asked of the other one (hedged, or re-issued
 * by the batch deadline) before set_epoch adopts it; the next epoch is still exact. */
static void test_epoch_prefetch_failover(void **state)
{
    (void)state;
    fixture *f = fx_start(2, g_good_arg);
    run *r = f->r;
    f->c.batch_deadline_ms = 1000;
    feed_loader *l = fx_open(f);
    feed_loader_stats st;
    feed_server_stats ss = {0};
    uint32_t e = EPOCH;
    uint64_t reissued = 0;
    bool stuck = false;
    /* At the end of an epoch whatever a server still owes belongs to the next one; stop s[0]
     * at EEOF until it owes some (bounded: it is a race each epoch). Replies it sent before
     * stopping still come in, so wait until it either owes nothing or the deadline has
     * re-issued what it owes, however long a loaded machine takes for either. */
    for (int tries = 0; tries < 30 && !stuck; tries++) {
        collect_all(l, r);
        run_free(r);
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        reissued = st.reissued + st.hedged;
        assert_int_equal(feed_test_server_signal(&f->s[0], SIGSTOP), 0);
        bool settled = false;
        for (int i = 0; i < SETTLE_POLLS && !settled; i++) {
            assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
            assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
            stuck = st.reissued + st.hedged > reissued;
            settled = stuck || ss.outstanding == 0;
            if (!settled)
                usleep(20000);
        }
        assert_true(settled);
        if (!stuck) {
            assert_int_equal(feed_test_server_signal(&f->s[0], SIGCONT), 0);
            assert_int_equal(feed_loader_set_epoch(l, ++e, 0), 0);
        }
    }
    assert_true(stuck);
    print_message("prefetch failover: reissued + hedged %llu -> %llu\n",
                  (unsigned long long)reissued, (unsigned long long)(st.reissued + st.hedged));
    assert_int_equal(feed_loader_set_epoch(l, e + 1, 0), 0);
    collect_all(l, r);
    fx_close(f, l);
    assert_int_equal(feed_test_server_signal(&f->s[0], SIGCONT), 0);
    const run *fresh = fresh_run(f, 1, 1, e + 1, 0);
    check_same_bytes(r, 0, fresh);
    assert_int_equal(r->count, fresh->count);
}

/* Copies file src to dst. */
static int copy_file(const char *src, const char *dst)
{
    FILE *f = fopen(src, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = len > 0 ? malloc((size_t)len) : NULL;
    size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    int rc = buf && got == (size_t)len ? feed_test_write_file(dst, buf, got) : -1;
    free(buf);
    return rc;
}

/* Waits until s[0] has completed `batches` batches and owes at least `owed`. */
static void wait_server0(feed_loader *l, uint64_t batches, uint32_t owed)
{
    feed_server_stats ss = {0};
    bool there = false;
    for (int i = 0; i < SETTLE_POLLS && !there; i++) {
        assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
        there = ss.batches >= batches && ss.outstanding >= owed;
        if (!there)
            usleep(20000);
    }
    assert_true(there);
}

/* Waits until the loader has failed a server at least `want` times in all. */
static void wait_failovers(feed_loader *l, uint64_t want)
{
    feed_loader_stats st = {0};
    for (int i = 0; i < SETTLE_POLLS && st.failovers < want; i++) {
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        if (st.failovers < want)
            usleep(20000);
    }
    assert_true(st.failovers >= want);
}

/* Longer than libfeedclient's keepalive once allowed a silent server (a ping every second,
 * failed when unanswered for a second): the pause a loaded machine gives a healthy server. */
#define PAUSE_MS 5000

/*
 * A slow server is not a dead one. The lone server is stopped (SIGSTOP, waited for) while it
 * owes a batch, for PAUSE_MS, far less than the batch deadline, then continued: its stream is
 * not ended, it is not failed, nothing is re-issued and the epoch comes in plan order with
 * the reference bytes. Then, with a batch deadline shorter than the pause, a server stopped
 * past it is failed all the same (and the epoch still comes whole once it runs again).
 */
static void test_paused_server_not_failed(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(1, g_good_arg);
    f->c.window_per_server = 1;
    f->c.prefetch = 1;
    for (int past_deadline = 0; past_deadline < 2; past_deadline++) {
        if (past_deadline)
            f->c.batch_deadline_ms = PAUSE_MS / 5;
        feed_loader *l = fx_open(f);
        run *r = f->r;
        run_free(r);
        assert_int_equal(take(l, r), 0);
        /* Every slot filled: nothing more is asked until one is released. */
        uint64_t filled = 1 + f->c.prefetch + f->c.window_per_server;
        wait_server0(l, filled, 0);
        assert_int_equal(feed_test_server_pause(&f->s[0]), 0);
        /* Releasing what the loader held asks the stopped server for more. */
        for (uint32_t i = 0; i < f->c.prefetch + f->c.window_per_server; i++)
            assert_int_equal(take(l, r), 0);
        wait_server0(l, filled, 1);
        if (past_deadline)
            wait_failovers(l, 1);
        else
            usleep(PAUSE_MS * 1000);
        assert_int_equal(feed_test_server_resume(&f->s[0]), 0);
        collect_all(l, r);
        feed_loader_stats st;
        assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
        print_message("paused %s the deadline: failovers %llu, retries %llu, reissued %llu\n",
                      past_deadline ? "past" : "within", (unsigned long long)st.failovers,
                      (unsigned long long)st.retries, (unsigned long long)st.reissued);
        if (!past_deadline) {
            assert_int_equal(st.failovers, 0);
            assert_int_equal(st.retries, 0);
            assert_int_equal(st.reissued, 0);
        }
        fx_close(f, l);
        check_plan_order(r, 0, 1, 10, 0);
        check_same_bytes(&g_ref, 0, r);
    }
}

#define BIG_CLASSES 2u
#define BIG_PER_CLASS 64u
#define BIG_BATCH 2u
#define BIG_WINDOW 64u

/* A busy but healthy server: one feedd thread on large JPEGs, the whole epoch (64 batches)
 * requested at once. Every sample once, in order, nothing re-issued, under base_cfg's 120 s
 * deadline, which no reply of a healthy server comes near however loaded the machine: that the
 * deadline counts silence and not how long a request queues (a window deeper than the deadline) is
 * shown with exact times in test_client_sched (test_deep_window_is_not_a_stall), where a measured
 * batch time cannot make it flaky. */
static void test_busy_server_no_false_failover(void **state)
{
    (void)state;
    char dir[300], arg[340], src[400], path[400];
    snprintf(dir, sizeof dir, "%s/big", g_root);
    snprintf(arg, sizeof arg, "big=%s", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    for (unsigned c = 0; c < BIG_CLASSES; c++) {
        snprintf(path, sizeof path, "%s/class_%03u", dir, c);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(src, sizeof src, "%s/big_src_%u.jpg", g_root, c);
        assert_int_equal(feed_test_write_jpeg(src, 2400, 1800, 11 + c, 95), 0);
        for (unsigned i = 0; i < BIG_PER_CLASS; i++) {
            snprintf(path, sizeof path, "%s/class_%03u/img_%03u.jpg", dir, c, i);
            assert_int_equal(copy_file(src, path), 0);
        }
    }
    fixture *f = fx_start(1, arg);
    run *r = f->r;
    const uint32_t n = BIG_CLASSES * BIG_PER_CLASS, batches = n / BIG_BATCH;

    base_cfg(&f->c, f->targets, 1, BIG_BATCH);
    f->c.dataset = "big";
    f->c.window_per_server = BIG_WINDOW;
    f->c.prefetch = 2;
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    fx_close(f, l);
    print_message("busy server: failovers %llu, reissued %llu\n", (unsigned long long)st.failovers,
                  (unsigned long long)st.reissued);
    assert_int_equal(st.failovers, 0);
    assert_int_equal(st.reissued, 0);
    client_plan p;
    assert_int_equal(client_plan_build(&p, n, SEED, EPOCH, 0, 1, BIG_BATCH, false), 0);
    assert_int_equal(r->count, batches);
    uint32_t seen[BIG_CLASSES * BIG_PER_CLASS] = {0};
    for (size_t i = 0; i < r->count; i++) {
        const uint32_t *want;
        uint32_t wn;
        client_plan_batch(&p, i, &want, &wn);
        assert_int_equal(r->r[i].batch_number, i);
        assert_int_equal(r->r[i].n, wn);
        for (uint32_t k = 0; k < wn; k++) {
            assert_int_equal(r->r[i].idx[k], want[k]);
            assert_int_equal(r->r[i].lab[k], want[k] / BIG_PER_CLASS);
            seen[want[k]]++;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(seen[i], 1);
    client_plan_free(&p);
}

/* A server that answers Describe but refuses every stream (here: at --max-streams because
 * another loader holds its only stream; a draining feedd does the same) is never up, gets no
 * batch, and its refusals are retries, not failovers. */
static void test_refusing_server_not_up(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = &g_fx;
    const char *one[] = {"--dataset", g_good_arg,    "--threads", "1", "--max-streams",
                         "1",         "--log-level", "error",     NULL};
    fx_spawn(f, g_good_arg, one);
    fx_spawn(f, g_good_arg, NULL);
    run *r = f->r;
    base_cfg(&f->c, f->targets, 1, 10);
    feed_loader *holder = fx_open(f);
    assert_int_equal(take(holder, r), 0); /* its stream is open: the server's only one */
    run_free(r);

    base_cfg(&f->c, f->targets, 2, 10);
    f->c.log_fn = NULL; /* the refusals are expected */
    feed_loader *l = fx_open(f);
    collect_all(l, r);
    feed_loader_stats st;
    feed_server_stats ss;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
    print_message("refusing server: failovers %llu, reissued %llu, retries %llu\n",
                  (unsigned long long)st.failovers, (unsigned long long)st.reissued,
                  (unsigned long long)st.retries);
    assert_string_equal(ss.target, f->s[0].target);
    assert_false(ss.up);
    assert_int_equal(ss.batches, 0);
    assert_int_equal(st.failovers, 0);
    fx_close(f, l);
    fx_close(f, holder);
    check_plan_order(r, 0, 1, 10, 0);
    check_same_bytes(&g_ref, 0, r);
}

/* max_slots = prefetch + 1 over three servers (which would want 2 + 2 x 3): the epoch is
 * still exact, in order. */
static void test_max_slots(void **state)
{
    (void)state;
    assert_int_equal(g_ref.count, 10);
    fixture *f = fx_start(3, g_good_arg);
    f->c.max_slots = f->c.prefetch + 1;
    feed_loader *l = fx_open(f);
    collect_all(l, f->r);
    fx_close(f, l);
    check_plan_order(f->r, 0, 1, 10, 0);
    check_same_bytes(&g_ref, 0, f->r);
}

static int group_setup(void **state)
{
    (void)state;
    if (feed_test_tmpdir("client-test", g_root, sizeof g_root))
        return -1;
    snprintf(g_good, sizeof g_good, "%s/good", g_root);
    snprintf(g_bad, sizeof g_bad, "%s/bad", g_root);
    snprintf(g_good_arg, sizeof g_good_arg, "small=%s", g_good);
    snprintf(g_bad_arg, sizeof g_bad_arg, "bad=%s", g_bad);
    if (feed_test_make_imagefolder(g_good, CLASSES, PER_CLASS, 7))
        return -1;
    if (feed_test_make_imagefolder(g_bad, 2, 8, 9))
        return -1;
    /* Three bad files among 19: not a JPEG, a truncated JPEG, an empty file. */
    char path[400], src[400];
    snprintf(path, sizeof path, "%s/class_000/zz_not_jpeg.jpg", g_bad);
    if (feed_test_write_file(path, "this is not a jpeg", 18))
        return -1;
    snprintf(src, sizeof src, "%s/trunc_src.jpg", g_root);
    if (feed_test_write_jpeg(src, 200, 150, 3, 90))
        return -1;
    FILE *f = fopen(src, "rb");
    uint8_t head[400];
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/class_001/zz_truncated.jpg", g_bad);
    if (got != sizeof head || feed_test_write_file(path, head, sizeof head))
        return -1;
    snprintf(path, sizeof path, "%s/class_001/zz_empty.jpg", g_bad);
    return feed_test_write_file(path, "", 0) ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    run_free(&g_ref);
    if (g_root[0])
        feed_test_rmtree(g_root);
    return 0;
}

int main(void)
{
    if (!feed_test_have_feedd())
        return FEED_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_epoch_one_and_three_servers, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_rank_partitions, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_kill_one_of_three, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_server_started_mid_epoch, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_all_servers_dead, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_batch_beyond_server_limit, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_resume, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unordered_and_normalised, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_bad_samples, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stalled_server_deadline, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_paused_server_not_failed, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_dns_target, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_epoch_prefetch_kept, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_epoch_prefetch_dropped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_epoch_prefetch_unordered, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_epoch_prefetch_failover, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_busy_server_no_false_failover, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_refusing_server_not_up, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_max_slots, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
