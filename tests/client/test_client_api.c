/*
 * The parts of libfeedclient's public API that a Python (or any other
 * foreign) caller leans on, against a real feedd on 127.0.0.1: log_fn is
 * never called with the loader's lock held (a callback that takes the GIL
 * would deadlock otherwise), release() and stream_wait() from a thread other
 * than the training thread, stream_wait() refusing a batch not held, the
 * version macros against the library's version, and the size fields that
 * let the config and stats structs grow (a caller's smaller struct keeps
 * working; a larger one than the library knows is refused), and
 * feed_loader_next_timed() returning FEED_ETIMEDOUT on a stopped server and
 * going on with the same epoch once it runs again (the server is resumed by
 * the test's teardown, so a failure leaves no stopped server behind); and that the training
 * thread's calls (next, release, set_epoch) start no gRPC operation: the
 * requests they make room for go out from the loader's own threads; and
 * that feed_loader_close() may be called from the loader's own log callback.
 */
#include <grpc/grpc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/client.h"
#include "feed/errors.h"
#include "feedtest.h"
#include "client_impl.h"

#define SIDE 32u

static char g_root[256];
static char g_data_arg[340];
static feed_test_server g_srv;
static char g_target[64];

static void base_cfg(feed_loader_config *c, const char *const *targets, size_t n)
{
    feed_loader_config_default(c);
    c->targets = targets;
    c->num_targets = n;
    c->dataset = "small";
    c->transform.out_h = c->transform.out_w = SIDE;
    c->batch_size = 8;
    c->seed = 5;
    c->dtype = FEED_DTYPE_UINT8;
    c->layout = FEED_LAYOUT_NHWC;
    c->device = FEED_DEVICE_HOST;
}

/* What the log callback saw: messages, and how many of them came with the loader's mu held
 * by the calling thread. */
typedef struct log_probe {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* [mu] checked grew */
    loader *l;           /* [mu] set once open has returned */
    unsigned messages, checked, under_lock;
} log_probe;

/* Whether the calling thread holds the loader's mu: glibc records the owner's thread id in a
 * normal mutex, so this is a fact, not a guess from timing. */
static bool holds_mu(loader *l)
{
    return l->mu.__data.__owner == (int)syscall(SYS_gettid);
}

static void probing_log(void *user, int level, const char *message)
{
    (void)level;
    (void)message;
    log_probe *p = user;
    pthread_mutex_lock(&p->mu);
    p->messages++;
    if (p->l) {
        p->under_lock += holds_mu(p->l);
        p->checked++;
        pthread_cond_broadcast(&p->cond);
    }
    pthread_mutex_unlock(&p->mu);
}

static void test_log_without_lock(void **state)
{
    (void)state;
    /* A dead second target: every retry of it is logged from a receiver thread. */
    const char *targets[] = {g_target, "127.0.0.1:1"};
    log_probe p = {.l = NULL};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cond, NULL);
    feed_loader_config c;
    base_cfg(&c, targets, 2);
    c.log_fn = probing_log;
    c.log_user = &p;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    /* Three messages logged after open, whatever the machine's speed (the retries go on). */
    pthread_mutex_lock(&p.mu);
    p.l = l;
    while (p.checked < 3)
        pthread_cond_wait(&p.cond, &p.mu);
    pthread_mutex_unlock(&p.mu);
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    pthread_mutex_lock(&p.mu);
    p.l = NULL;
    unsigned under_lock = p.under_lock;
    pthread_mutex_unlock(&p.mu);
    feed_loader_close(l);
    assert_int_equal(under_lock, 0);
    pthread_cond_destroy(&p.cond);
    pthread_mutex_destroy(&p.mu);
}

/* A log callback that closes its loader (set in .l) on the first message it sees after open. */
typedef struct closing_probe {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* [mu] closed set */
    feed_loader *l;      /* [mu] set once open has returned; NULL once closed */
    bool closed;         /* [mu] feed_loader_close returned inside the callback */
    unsigned after;      /* [mu] callbacks after that */
} closing_probe;

static void closing_log(void *user, int level, const char *message)
{
    (void)level;
    (void)message;
    closing_probe *p = user;
    pthread_mutex_lock(&p->mu);
    feed_loader *l = p->l;
    p->after += p->closed;
    p->l = NULL;
    pthread_mutex_unlock(&p->mu);
    if (!l)
        return;
    feed_loader_close(l);
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
}

/* feed_loader_close() from the loader's own log callback returns, frees the loader once the
 * callback is done (ASan sees no use after free, LSan no leak) and no message follows it. */
static void test_close_from_log_callback(void **state)
{
    (void)state;
    const char *targets[] = {g_target, "127.0.0.1:1"}; /* the dead one logs every retry */
    closing_probe p = {.l = NULL};
    pthread_mutex_init(&p.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p.cond, &ca);
    pthread_condattr_destroy(&ca);
    feed_loader_config c;
    base_cfg(&c, targets, 2);
    c.log_fn = closing_log;
    c.log_user = &p;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += 120; /* hang guard */
    pthread_mutex_lock(&p.mu);
    p.l = l;
    while (!p.closed && pthread_cond_timedwait(&p.cond, &p.mu, &until) == 0)
        ;
    bool closed = p.closed;
    pthread_mutex_unlock(&p.mu);
    assert_true(closed);
    /* Another loader opens and closes as usual meanwhile. */
    const char *one[] = {g_target};
    base_cfg(&c, one, 1);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    feed_loader_close(l);
    pthread_mutex_lock(&p.mu);
    assert_int_equal(p.after, 0);
    pthread_mutex_unlock(&p.mu);
}

/* grpc_call_start_batch as libfeedclient calls it (linked with --wrap): counts every call, and
 * those made on a thread that is inside one of the training thread's API calls. */
static _Thread_local bool t_in_api;
static atomic_uint g_batches, g_batches_in_api;

grpc_call_error __real_grpc_call_start_batch(grpc_call *call, const grpc_op *ops, size_t nops,
                                             void *tag, void *reserved);
grpc_call_error __wrap_grpc_call_start_batch(grpc_call *call, const grpc_op *ops, size_t nops,
                                             void *tag, void *reserved);
grpc_call_error __wrap_grpc_call_start_batch(grpc_call *call, const grpc_op *ops, size_t nops,
                                             void *tag, void *reserved)
{
    atomic_fetch_add(&g_batches, 1);
    if (t_in_api)
        atomic_fetch_add(&g_batches_in_api, 1);
    return __real_grpc_call_start_batch(call, ops, nops, tag, reserved);
}

/* Slots are prefetch + window: with the window wider than what waits in slots, each release()
 * frees the slot that the next request needs while the server has room for it, so before the
 * sends moved to the loader's threads release() itself sent it. */
static void test_training_thread_sends_nothing(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    feed_loader_config c;
    base_cfg(&c, targets, 1);
    c.batch_size = 2;
    c.window_per_server = 2;
    c.prefetch = 1;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    unsigned before = atomic_load(&g_batches);
    uint64_t batches = feed_loader_batches_per_epoch(l), seen = 0;
    for (uint32_t epoch = 0; epoch < 2; epoch++) {
        t_in_api = true;
        assert_int_equal(feed_loader_set_epoch(l, epoch, 0), 0);
        for (;;) {
            feed_batch *b = NULL;
            int rc = feed_loader_next(l, &b);
            if (rc == FEED_EEOF)
                break;
            assert_int_equal(rc, 0);
            seen += b->n;
            assert_int_equal(feed_loader_release(l, b, NULL), 0);
        }
        t_in_api = false;
    }
    uint64_t size = feed_loader_dataset_size(l);
    feed_loader_close(l);
    assert_int_equal(seen, 2 * size);
    /* The wrapper saw the requests, so a count of 0 below means something. */
    assert_true(atomic_load(&g_batches) - before >= 2 * batches);
    assert_int_equal(atomic_load(&g_batches_in_api), 0);
}

typedef struct release_job {
    feed_loader *l;
    feed_batch *b;
    int wait_rc, release_rc;
} release_job;

static void *release_elsewhere(void *arg)
{
    release_job *j = arg;
    j->wait_rc = feed_loader_stream_wait(j->l, j->b, NULL);
    j->release_rc = feed_loader_release(j->l, j->b, NULL);
    return NULL;
}

static void test_release_from_another_thread(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    feed_loader_config c;
    base_cfg(&c, targets, 1);
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&c, &l), 0);
    uint64_t batches = feed_loader_batches_per_epoch(l);
    for (uint64_t i = 0; i < batches; i++) {
        feed_batch *b = NULL;
        assert_int_equal(feed_loader_next(l, &b), 0);
        assert_null(b->ready_event);
        release_job j = {l, b, -100, -100};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, release_elsewhere, &j), 0);
        pthread_join(t, NULL);
        assert_int_equal(j.wait_rc, 0);
        assert_int_equal(j.release_rc, 0);
        /* Released: neither call accepts it any more. */
        assert_int_equal(feed_loader_stream_wait(l, b, NULL), FEED_EINVAL);
        assert_int_equal(feed_loader_release(l, b, NULL), FEED_EINVAL);
    }
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), FEED_EEOF);
    feed_batch stranger;
    memset(&stranger, 0, sizeof(stranger));
    assert_int_equal(feed_loader_stream_wait(l, &stranger, NULL), FEED_EINVAL);
    assert_int_equal(feed_loader_stream_wait(NULL, &stranger, NULL), FEED_EINVAL);
    feed_loader_close(l);
}

/* The loader test_next_timed opened: its teardown closes it, whatever assertion failed. */
static feed_loader *g_timed;

/* Waits (a hang guard, not a timing) until the server has completed `want` batches. */
static void wait_server_batches(feed_loader *l, uint64_t want)
{
    feed_server_stats ss;
    for (int i = 0; i < 120000; i++) {
        assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
        if (ss.batches >= want)
            return;
        usleep(1000);
    }
    fail_msg("the server completed %llu batches, not %llu", (unsigned long long)ss.batches,
             (unsigned long long)want);
}

/*
 * Once the caller has released the first batch, the loader fills its slots (prefetch +
 * window = 2) and asks for nothing more until one is released. The server is stopped only
 * then, and only once it has really stopped (kill() returns before its threads do) does the
 * test count: exactly the 2 batches held come, then next_timed() says FEED_ETIMEDOUT with
 * *out NULL (the releases made room for requests the stopped server cannot answer); after
 * SIGCONT the epoch goes on and every batch comes exactly once. The deadlines are far away,
 * so nothing is failed over. Counts, not the batches that happened to arrive by some moment.
 */
static void test_next_timed(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    feed_loader_config c;
    base_cfg(&c, targets, 1);
    c.batch_size = 1;
    c.prefetch = 1;
    c.window_per_server = 1;
    c.batch_deadline_ms = c.unavailable_timeout_ms = 120000;
    assert_int_equal(feed_loader_open(&c, &g_timed), 0);
    feed_loader *l = g_timed;
    uint64_t batches = feed_loader_batches_per_epoch(l), got = 0;
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next_timed(l, &b, 60000), 0);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    got++;
    wait_server_batches(l, 1 + c.prefetch + c.window_per_server);
    assert_int_equal(feed_test_server_pause(&g_srv), 0);
    int rc;
    while ((rc = feed_loader_next_timed(l, &b, 20)) == 0) {
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
        got++;
    }
    assert_int_equal(rc, FEED_ETIMEDOUT);
    assert_null(b);
    assert_int_equal(got, 1 + c.prefetch + c.window_per_server);
    assert_int_equal(feed_loader_next_timed(l, &b, 0), FEED_ETIMEDOUT);
    assert_int_equal(feed_test_server_resume(&g_srv), 0);
    while ((rc = feed_loader_next_timed(l, &b, 60000)) == 0) {
        assert_int_equal(feed_loader_release(l, b, NULL), 0);
        got++;
    }
    assert_int_equal(rc, FEED_EEOF);
    assert_int_equal(got, batches);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof(st)), 0);
    assert_int_equal(st.failovers, 0);
}

/* Runs after test_next_timed whether it passed or not: a server left stopped would fail every
 * later test of the group with FEED_EUNAVAILABLE. */
static int resume_after_next_timed(void **state)
{
    (void)state;
    int rc = feed_test_server_resume(&g_srv);
    feed_loader_close(g_timed);
    g_timed = NULL;
    return rc;
}

static void test_version(void **state)
{
    (void)state;
    char want[32];
    snprintf(want, sizeof(want), "%d.%d.%d", FEED_CLIENT_VERSION_MAJOR, FEED_CLIENT_VERSION_MINOR,
             FEED_CLIENT_VERSION_PATCH);
    assert_string_equal(feed_client_version(), want);
    assert_string_equal(FEED_CLIENT_VERSION_STRING, want);
    assert_int_equal(feed_client_version_number(), FEED_CLIENT_VERSION_NUM);
    assert_int_equal(FEED_CLIENT_VERSION_NUM, (FEED_CLIENT_VERSION_MAJOR << 16) |
                                                  (FEED_CLIENT_VERSION_MINOR << 8) |
                                                  FEED_CLIENT_VERSION_PATCH);
}

static void test_struct_sizes(void **state)
{
    (void)state;
    const char *targets[] = {g_target};
    feed_loader_config c;
    base_cfg(&c, targets, 1);
    assert_int_equal(c.struct_size, sizeof(c));
    feed_loader *l = NULL;
    c.struct_size = sizeof(c) + 8; /* a header newer than this library */
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.struct_size = 0;
    assert_int_equal(feed_loader_open(&c, &l), FEED_EINVAL);
    c.struct_size = sizeof(c);
    assert_int_equal(feed_loader_open(&c, &l), 0);
    feed_loader_stats st;
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st), 0);
    assert_int_equal(st.servers_known, 1);
    assert_int_equal(feed_loader_get_stats(l, &st, sizeof st + 1), FEED_EINVAL);
    assert_int_equal(feed_loader_get_stats(l, &st, 8), FEED_EINVAL);
    feed_server_stats ss;
    assert_int_equal(feed_loader_server_stats(l, 0, &ss, sizeof ss), 0);
    assert_string_equal(ss.target, g_target);
    assert_int_equal(feed_loader_server_stats(l, 0, &ss, 4), FEED_EINVAL);
    feed_loader_close(l);
}

/* The config as a caller built against the 0.5 header has it: it ends at tls_key_file. */
#define CONFIG_0_5_SIZE (offsetof(feed_loader_config, tls_key_file) + sizeof(const char *))

/* A 0.5-sized config in front of a canary, as a caller's older struct sits in its memory. */
typedef union old_config {
    feed_loader_config c;
    unsigned char bytes[sizeof(feed_loader_config) + 64];
} old_config;

static void expect_canary(const old_config *u)
{
    for (size_t i = CONFIG_0_5_SIZE; i < sizeof u->bytes; i++)
        assert_int_equal(u->bytes[i], 0xA5);
    assert_int_equal(u->c.struct_size, CONFIG_0_5_SIZE);
    assert_int_equal(u->c.batch_size, 256);
    assert_int_equal(u->c.resolve_interval_ms, 5000);
}

/* A caller built against an older, smaller struct: feed_loader_config_init with its size, and
 * the size-less feed_loader_config_default such a caller linked, write nothing past the struct;
 * open reads nothing past it (the bytes after it are not a job name) and defaults the rest. */
static void test_config_older_struct(void **state)
{
    (void)state;
    old_config u;
    memset(&u, 0xA5, sizeof u);
    assert_int_equal(feed_loader_config_init(&u.c, CONFIG_0_5_SIZE), 0);
    expect_canary(&u);
    memset(&u, 0xA5, sizeof u);
    (feed_loader_config_default)(&u.c);
    expect_canary(&u);
    assert_int_equal(feed_loader_config_init(&u.c, 8), FEED_EINVAL);
    assert_int_equal(feed_loader_config_init(&u.c, sizeof u.c + 1), FEED_EINVAL);
    assert_int_equal(feed_loader_config_init(NULL, sizeof u.c), FEED_EINVAL);
    expect_canary(&u);
    feed_loader_config c;
    assert_int_equal(feed_loader_config_init(&c, sizeof c), 0);
    assert_int_equal(c.struct_size, sizeof c);
    const char *targets[] = {g_target};
    u.c.targets = targets;
    u.c.num_targets = 1;
    u.c.dataset = "small";
    u.c.transform.out_h = u.c.transform.out_w = SIDE;
    u.c.batch_size = 8;
    u.c.dtype = FEED_DTYPE_UINT8;
    u.c.layout = FEED_LAYOUT_NHWC;
    u.c.device = FEED_DEVICE_HOST;
    feed_loader *l = NULL;
    assert_int_equal(feed_loader_open(&u.c, &l), 0);
    const char *job = feed_loader_job(l);
    assert_non_null(job);
    assert_true(strncmp(job, "proc-", 5) == 0 || strncmp(job, "run-", 4) == 0 ||
                strncmp(job, "dist-", 5) == 0);
    feed_batch *b = NULL;
    assert_int_equal(feed_loader_next(l, &b), 0);
    assert_int_equal(b->n, 8);
    assert_int_equal(feed_loader_release(l, b, NULL), 0);
    feed_loader_close(l);
}

static int group_setup(void **state)
{
    (void)state;
    char exe[512];
    const char *bdir = getenv("FEED_BUILD_DIR");
    snprintf(exe, sizeof exe, "%s/server/feedd", bdir ? bdir : ".");
    if (!bdir || access(exe, X_OK) != 0) {
        fprintf(stderr, "feedd not built at %s\n", exe);
        return -1;
    }
    if (feed_test_tmpdir("client-api", g_root, sizeof g_root))
        return -1;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/small", g_root);
    snprintf(g_data_arg, sizeof g_data_arg, "small=%s", dir);
    if (feed_test_make_imagefolder(dir, 2, 12, 3))
        return -1;
    const char *args[] = {"--dataset", g_data_arg, "--threads", "2", NULL};
    if (feed_test_server_start(args, &g_srv))
        return -1;
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", g_srv.port);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    feed_test_server_stop(&g_srv);
    return feed_test_rmtree(g_root) ? -1 : 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_log_without_lock),
        cmocka_unit_test(test_close_from_log_callback),
        cmocka_unit_test(test_release_from_another_thread),
        cmocka_unit_test(test_struct_sizes),
        cmocka_unit_test(test_config_older_struct),
        cmocka_unit_test_teardown(test_next_timed, resume_after_next_timed),
        cmocka_unit_test(test_training_thread_sends_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
