/*
 * SIGTERM ends a real feedd in every phase: while it opens a dataset against
 * an S3 store that never answers (servers.js's fault proxy stalls every
 * request), while it serves, and while it drains a batch whose reads hang on
 * that store. Each time it exits with status 0 and says why in its log; the
 * wait for it is a hang guard only (far below what the stalled reads would
 * take: --remote-timeout-ms 60000 x 5 tries). The time from the signal to
 * the exit is printed per phase, for the README's figure.
 *
 * usage: test_feedd_signals NODE SERVERS_JS (FEED_BUILD_DIR names the build; FEED_FEEDD, if
 * set, the feedd binary)
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "feed/errors.h"
#include "feedtest.h"
#include "feedtest_grpc.h"
#include "remote_servers.h"

#define N_SAMPLES 16u /* 2 classes x 8, 8 a shard */
#define SHARDS "shard-{000000..000001}.tar"
#define HANG_GUARD_MS 60000 /* a stalled open would take 5 x 60 s a read */
#define DRAIN_MS 2000

static const char *g_node, *g_script, *g_build;
static remote_servers g_srv;
static char g_tmp[256], g_data[300];

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int setup(void **state)
{
    (void)state;
    if (!g_build || feed_test_tmpdir("feed-signals-", g_tmp, sizeof g_tmp) != 0)
        return -1;
    snprintf(g_data, sizeof g_data, "%s/data", g_tmp);
    if (remote_test_make_shards(g_build, g_tmp, g_data, 2, 8, 3, 8) != 0 ||
        remote_servers_start(&g_srv, g_node, g_script, g_data, 0) != 0)
        return -1;
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_ACCESS_KEY_ID", REMOTE_TEST_KEY, 1);
    setenv("AWS_SECRET_ACCESS_KEY", REMOTE_TEST_SECRET, 1); /* feedd inherits them */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    remote_servers_stop(&g_srv);
    feed_test_rmtree(g_tmp);
    return 0;
}

/*
 * Starts feedd serving the shards from the S3 store, logging to log; it
 * writes its port to port_file once it serves. Killed if this thread ends.
 */
static pid_t spawn_feedd(const char *log, const char *port_file)
{
    char feedd[400], ds[300], ep[128], drain[32];
    const char *bin = getenv("FEED_FEEDD");
    if (bin && bin[0])
        snprintf(feedd, sizeof feedd, "%s", bin);
    else
        snprintf(feedd, sizeof feedd, "%s/server/feedd", g_build);
    snprintf(ds, sizeof ds, "s3=s3://" REMOTE_TEST_BUCKET "/" SHARDS);
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", g_srv.s3proxy);
    snprintf(drain, sizeof drain, "%d", DRAIN_MS);
    unlink(port_file);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(127);
        execl(feedd, feedd, "--listen", "127.0.0.1:0", "--port-file", port_file, "--dataset", ds,
              "--s3-endpoint", ep, "--threads", "1", "--remote-timeout-ms", "60000",
              "--remote-retries", "4", "--drain-timeout-ms", drain, "--log-level", "info",
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits (hang guard) for pid's exit; its wait status, or -1 (then it is killed). */
static int wait_exit(pid_t pid)
{
    int st = 0;
    uint64_t until = now_ms() + HANG_GUARD_MS;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(10);
    }
    return st;
}

/* Waits (hang guard) for the port file: feedd serves. */
static int wait_port(const char *port_file)
{
    uint64_t until = now_ms() + HANG_GUARD_MS;
    for (;;) {
        FILE *f = fopen(port_file, "r");
        int port = 0;
        if (f) {
            int got = fscanf(f, "%d", &port);
            fclose(f);
            if (got == 1 && port > 0)
                return port;
        }
        if (now_ms() > until)
            return -1;
        sleep_ms(20);
    }
}

static int log_has(const char *log, const char *text)
{
    char buf[65536];
    FILE *f = fopen(log, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* SIGTERM to pid; asserts a clean exit (status 0) and returns the ms it took. */
static uint64_t term_and_wait(pid_t pid, const char *log)
{
    uint64_t t0 = now_ms();
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st = wait_exit(pid);
    uint64_t took = now_ms() - t0;
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", log);
        (void)remote_test_run(cmd);
    }
    assert_int_not_equal(st, -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    return took;
}

/* The store stalls every request; SIGTERM while feedd waits on its first read. */
static void test_term_while_opening(void **state)
{
    char log[400], port_file[400];
    (void)state;
    snprintf(log, sizeof log, "%s/open.log", g_tmp);
    snprintf(port_file, sizeof port_file, "%s/open.port", g_tmp);
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 1000000", NULL, NULL), 0);
    long before = remote_servers_count(&g_srv, "stats");
    assert_true(before >= 0);
    pid_t pid = spawn_feedd(log, port_file);
    assert_true(pid > 0);
    assert_int_equal(remote_servers_wait_above(&g_srv, "stats", before, HANG_GUARD_MS), 0);
    uint64_t took = term_and_wait(pid, log);
    assert_true(log_has(log, "signal 15 during start-up (opening dataset s3)"));
    assert_int_equal(access(port_file, F_OK), -1);
    printf("exit after SIGTERM while opening a dataset on a stalled store: %llu ms\n",
           (unsigned long long)took);
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 0", NULL, NULL), 0);
}

/* Start-up done, nothing in flight: SIGTERM drains at once. */
static void test_term_while_serving(void **state)
{
    char log[400], port_file[400];
    (void)state;
    snprintf(log, sizeof log, "%s/serve.log", g_tmp);
    snprintf(port_file, sizeof port_file, "%s/serve.port", g_tmp);
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 0", NULL, NULL), 0);
    pid_t pid = spawn_feedd(log, port_file);
    assert_true(pid > 0);
    assert_true(wait_port(port_file) > 0);
    uint64_t took = term_and_wait(pid, log);
    assert_true(log_has(log, "signal 15: draining"));
    assert_true(log_has(log, "feedd stopped"));
    printf("exit after SIGTERM while serving (idle): %llu ms\n", (unsigned long long)took);
}

/*
 * A batch whose reads hang on the store: the drain waits --drain-timeout-ms
 * for it, then the worker still blocked in the read is left to the exit
 * watchdog.
 */
static void test_term_while_draining(void **state)
{
    char log[400], port_file[400], target[64];
    feedtest_stream s;
    Feed__V1__TransformSpec spec = FEED__V1__TRANSFORM_SPEC__INIT;
    uint64_t idx[N_SAMPLES];
    (void)state;
    snprintf(log, sizeof log, "%s/drain.log", g_tmp);
    snprintf(port_file, sizeof port_file, "%s/drain.port", g_tmp);
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 0", NULL, NULL), 0);
    pid_t pid = spawn_feedd(log, port_file);
    assert_true(pid > 0);
    int port = wait_port(port_file);
    assert_true(port > 0);
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    grpc_channel *ch = feedtest_channel(target);
    for (uint64_t i = 0; i < N_SAMPLES; i++)
        idx[i] = i;
    spec.mode = FEED__V1__TRANSFORM_MODE__TRANSFORM_MODE_EVAL;
    spec.out_height = spec.out_width = 32;
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 1000000", NULL, NULL), 0);
    long before = remote_servers_count(&g_srv, "stats");
    assert_true(before >= 0);
    assert_int_equal(
        feedtest_stream_open_batch(ch, 120, "s3", &spec, "test_feedd_signals", idx, N_SAMPLES, &s),
        0);
    assert_int_equal(remote_servers_wait_above(&g_srv, "stats", before, HANG_GUARD_MS), 0);
    uint64_t took = term_and_wait(pid, log);
    assert_true(log_has(log, "signal 15: draining"));
    printf("exit after SIGTERM while draining a batch stalled on the store "
           "(--drain-timeout-ms %d): %llu ms\n",
           DRAIN_MS, (unsigned long long)took);
    feedtest_stream_cancel(&s);
    (void)feedtest_stream_finish(&s, NULL, 0);
    grpc_channel_destroy(ch);
    assert_int_equal(remote_servers_cmd(&g_srv, "stall 0", NULL, NULL), 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s NODE SERVERS_JS\n", argv[0]);
        return 2;
    }
    g_node = argv[1];
    g_script = argv[2];
    g_build = getenv("FEED_BUILD_DIR");
    setvbuf(stdout, NULL, _IOLBF, 0);
    grpc_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_term_while_opening),
        cmocka_unit_test(test_term_while_serving),
        cmocka_unit_test(test_term_while_draining),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    grpc_shutdown();
    return rc;
}
