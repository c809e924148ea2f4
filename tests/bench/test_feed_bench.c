/*
 * Smoke test of feed-bench for CI: a tiny generated dataset, the CPU step, a
 * few batches from each source (sync, local, and remote through a real feedd
 * the benchmark spawns on 127.0.0.1 port 0). Checks that the outputs exist
 * with the expected fields and that every source delivered exactly the
 * images asked for, with labels in range and no failed samples; and that
 * --dataset names the dataset asked of a feedd started outside the benchmark,
 * with the client's window and prefetch in effect printed; and that the
 * simulated step (--device none) runs two clients as ranks of one job; and that
 * --decode-lane cpu decodes a share in the client with every image delivered. No
 * timings.
 *
 * argv: feed-bench, feedd, feed-gen-dataset (paths from CMake).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_FILE (4u << 20)
#define BATCH 4
#define STEPS 3
#define WARMUP 1

static const char *bench_bin, *feedd_bin, *gen_bin;
static char work[256], data[300], out[300];

static int run_argv(const char *const *argv, const char *log_path)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (log_path) {
            FILE *f = freopen(log_path, "w", stdout);
            if (!f || dup2(fileno(stdout), STDERR_FILENO) < 0)
                _exit(126);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* Whole file dir/name (dir itself when name is "") as a NUL-terminated string
 * (caller frees), capped at MAX_FILE. */
static char *slurp(const char *dir, const char *name)
{
    char path[512];
    int len = snprintf(path, sizeof path, "%s%s%s", dir, name[0] ? "/" : "", name);
    if (len < 0 || (size_t)len >= sizeof path)
        return NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = malloc(MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, MAX_FILE, f) : 0;
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

static void dump(const char *path)
{
    char *s = slurp(path, "");
    if (s)
        fprintf(stderr, "---- %s ----\n%s\n", path, s);
    free(s);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(work, sizeof work, "%s/feed-bench-test.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(work))
        return -1;
    snprintf(data, sizeof data, "%s/data", work);
    snprintf(out, sizeof out, "%s/out", work);
    const char *argv[] = {gen_bin, data, "--classes", "3", "--per-class", "8", NULL};
    return run_argv(argv, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (work[0] && strncmp(work, "/", 1) == 0 && strstr(work, "feed-bench-test."))
        nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* Index of column `name` in a CSV header line, or -1. */
static int column(const char *header, const char *name)
{
    int idx = 0;
    size_t len = strlen(name);
    for (const char *p = header; *p && *p != '\n'; idx++) {
        size_t w = strcspn(p, ",\n");
        if (w == len && strncmp(p, name, len) == 0)
            return idx;
        p += w;
        if (*p == ',')
            p++;
    }
    return -1;
}

/* Field `col` of the line at p, copied into buf. */
static void field(const char *p, int col, char *buf, size_t cap)
{
    for (int i = 0; i < col; i++) {
        p += strcspn(p, ",\n");
        if (*p == ',')
            p++;
    }
    size_t w = strcspn(p, ",\n");
    if (w >= cap)
        w = cap - 1;
    memcpy(buf, p, w);
    buf[w] = '\0';
}

static void test_three_sources_deliver_everything(void **state)
{
    (void)state;
    char log[512], steps[16], batch[16], warmup[16];
    snprintf(log, sizeof log, "%s/bench.log", work);
    snprintf(steps, sizeof steps, "%d", STEPS);
    snprintf(batch, sizeof batch, "%d", BATCH);
    snprintf(warmup, sizeof warmup, "%d", WARMUP);
    const char *argv[] = {
        bench_bin, "--device",         "cpu",  "--data",          data,      "--out",
        out,       "--batch",          batch,  "--steps",         steps,     "--seconds",
        "0",       "--warmup",         warmup, "--local-threads", "2",       "--spawn-servers",
        "1",       "--server-threads", "1",    "--feedd",         feedd_bin, NULL};
    int rc = run_argv(argv, log);
    if (rc != 0)
        dump(log);
    assert_int_equal(rc, 0);

    char *csv = slurp(out, "summary.csv");
    assert_non_null(csv);
    static const char *const fields[] = {"source",
                                         "device",
                                         "status",
                                         "batches",
                                         "images",
                                         "total_images",
                                         "images_per_s",
                                         "gpu_busy",
                                         "nvml_util_mean",
                                         "pcie_rx_mbps_mean",
                                         "wait_p50_ms",
                                         "wait_p99_ms",
                                         "wait_max_ms",
                                         "loader_cores",
                                         "server_cores",
                                         "loss_first",
                                         "loss_last",
                                         "bad_samples",
                                         "bad_labels",
                                         "stream_idle_pct",
                                         "sm_active_pct",
                                         "dram_bw_util_pct",
                                         "tensor_active_pct",
                                         "gpu_mem_used_max_mib"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (column(csv, fields[i]) < 0)
            fail_msg("summary.csv lacks column %s", fields[i]);
    }
    int c_src = column(csv, "source"), c_dev = column(csv, "device"), c_st = column(csv, "status"),
        c_img = column(csv, "images"), c_tot = column(csv, "total_images"),
        c_bs = column(csv, "bad_samples"), c_bl = column(csv, "bad_labels"),
        c_nv = column(csv, "nvml_util_mean"), c_loss = column(csv, "loss_first"),
        c_sm = column(csv, "sm_active_pct"), c_mem = column(csv, "gpu_mem_used_max_mib");
    const char *want[] = {"sync", "local", "remote"};
    const char *line = strchr(csv, '\n') + 1;
    for (int i = 0; i < 3; i++) {
        char buf[64];
        assert_true(*line != '\0');
        field(line, c_src, buf, sizeof buf);
        assert_string_equal(buf, want[i]);
        field(line, c_dev, buf, sizeof buf);
        assert_string_equal(buf, "cpu");
        field(line, c_st, buf, sizeof buf);
        assert_string_equal(buf, "ok");
        field(line, c_img, buf, sizeof buf);
        assert_int_equal(atoi(buf), STEPS * BATCH);
        field(line, c_tot, buf, sizeof buf);
        assert_int_equal(atoi(buf), (STEPS + WARMUP) * BATCH);
        field(line, c_bs, buf, sizeof buf);
        assert_int_equal(atoi(buf), 0);
        field(line, c_bl, buf, sizeof buf);
        assert_int_equal(atoi(buf), 0);
        field(line, c_nv, buf, sizeof buf);
        assert_string_equal(buf, ""); /* no GPU: no NVML number, nothing made up */
        field(line, c_sm, buf, sizeof buf);
        assert_string_equal(buf, "");
        field(line, c_mem, buf, sizeof buf);
        assert_string_equal(buf, "");
        field(line, c_loss, buf, sizeof buf);
        assert_true(atof(buf) > 0.0); /* a real cross-entropy over 3 classes */
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    free(csv);

    char *json = slurp(out, "summary.json");
    assert_non_null(json);
    assert_non_null(strstr(json, "\"device\": \"cpu\""));
    assert_non_null(strstr(json, "\"nvml_absent_reason\": \"no GPU (CPU step)\""));
    assert_non_null(strstr(json, "\"gpm_absent_reason\": \"no GPU (CPU step)\""));
    assert_non_null(strstr(json, "\"sm_active_pct\": null"));
    assert_non_null(strstr(json, "\"source\": \"remote\""));
    assert_non_null(strstr(json, "\"wait_p99_ms\""));
    assert_non_null(strstr(json, "\"images\": 12,"));
    free(json);

    /* Same plan, same augmentation, same starting weights: every source must
     * train on identical batches, so the per-batch losses agree. */
    char *batches = slurp(out, "batches.csv");
    assert_non_null(batches);
    int c_loss_b = column(batches, "loss"), c_src_b = column(batches, "source");
    double losses[3][STEPS + WARMUP];
    int rows = 0;
    for (const char *p = strchr(batches, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        char buf[64];
        int s = rows / (STEPS + WARMUP), k = rows % (STEPS + WARMUP);
        assert_true(s < 3);
        field(p + 1, c_src_b, buf, sizeof buf);
        assert_string_equal(buf, want[s]);
        field(p + 1, c_loss_b, buf, sizeof buf);
        losses[s][k] = atof(buf);
        rows++;
    }
    assert_int_equal(rows, 3 * (STEPS + WARMUP));
    for (int k = 0; k < STEPS + WARMUP; k++) {
        assert_true(losses[0][k] > 0.0);
        for (int s = 1; s < 3; s++)
            if (fabs(losses[s][k] - losses[0][k]) > 1e-4 * losses[0][k])
                fail_msg("batch %d: %s loss %g differs from sync's %g", k, want[s], losses[s][k],
                         losses[0][k]);
    }
    free(batches);

    char *nvml = slurp(out, "nvml.csv");
    assert_non_null(nvml);
    assert_non_null(
        strstr(nvml, "source,t_s,gpu_util,mem_util,pcie_rx_mbps,mem_used_mib,sm_active_pct"));
    free(nvml);
}

/* feedd serving data as "imagenet" on 127.0.0.1 port 0; its port, or -1. */
static int start_feedd(const char *port_file, const char *log_path, pid_t *pid)
{
    char arg[400];
    snprintf(arg, sizeof arg, "imagenet=%s", data);
    const char *argv[] = {feedd_bin,     "--dataset", arg,         "--listen", "127.0.0.1:0",
                          "--port-file", port_file,   "--threads", "1",        NULL};
    *pid = fork();
    if (*pid < 0)
        return -1;
    if (*pid == 0) {
        FILE *f = freopen(log_path, "w", stdout);
        if (!f || dup2(fileno(stdout), STDERR_FILENO) < 0)
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) { /* up to 60 s for the port file */
        FILE *f = fopen(port_file, "r");
        int port = -1;
        if (f) {
            int ok = fscanf(f, "%d", &port) == 1;
            fclose(f);
            if (ok && port > 0)
                return port;
        }
        if (waitpid(*pid, NULL, WNOHANG) == *pid) {
            *pid = 0;
            return -1;
        }
        usleep(100000);
    }
    return -1;
}

/* start_feedd, failing the test (with feedd's log) when it does not come up; target gets
 * "127.0.0.1:PORT". */
static pid_t start_feedd_target(const char *port_file, const char *log, char *target, size_t cap)
{
    pid_t pid = 0;
    int port = start_feedd(port_file, log, &pid);
    if (port < 0) {
        if (pid > 0)
            kill(pid, SIGKILL);
        dump(log);
        fail_msg("feedd did not start");
    }
    snprintf(target, cap, "127.0.0.1:%d", port);
    return pid;
}

static void test_dataset_name_and_client_settings(void **state)
{
    (void)state;
    char port_file[512], flog[512], log[512], out2[512], target[64];
    snprintf(port_file, sizeof port_file, "%s/feedd.port", work);
    snprintf(flog, sizeof flog, "%s/feedd.log", work);
    snprintf(log, sizeof log, "%s/named.log", work);
    snprintf(out2, sizeof out2, "%s/named", work);
    pid_t pid = start_feedd_target(port_file, flog, target, sizeof target);
    const char *argv[] = {bench_bin, "--device",  "cpu",      "--source", "remote", "--servers",
                          target,    "--dataset", "imagenet", "--data",   data,     "--out",
                          out2,      "--batch",   "4",        "--steps",  "2",      "--seconds",
                          "0",       "--warmup",  "1",        NULL};
    int rc = run_argv(argv, log);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (rc != 0)
        dump(log);
    assert_int_equal(rc, 0);
    char *text = slurp(log, "");
    assert_non_null(text);
    if (!strstr(text, "client: dataset imagenet, window 4, prefetch 4, ordered"))
        fail_msg("feed-bench does not print the dataset and the client settings in effect");
    free(text);
    char *json = slurp(out2, "summary.json");
    assert_non_null(json);
    assert_non_null(strstr(json, "\"dataset_name\": \"imagenet\""));
    assert_non_null(strstr(json, "\"client_window\": 4,"));
    free(json);
}

/* --decode-lane cpu: the loader decodes a share of the samples itself from the JPEG bytes the
 * server sends; every image still arrives (the summary's count), the setting is in the outputs,
 * and the lane's count is printed and above zero. */
static void test_decode_lane(void **state)
{
    (void)state;
    char port_file[512], flog[512], log[512], out2[512], target[64];
    snprintf(port_file, sizeof port_file, "%s/lane.port", work);
    snprintf(flog, sizeof flog, "%s/lane-feedd.log", work);
    snprintf(log, sizeof log, "%s/lane.log", work);
    snprintf(out2, sizeof out2, "%s/lane", work);
    pid_t pid = start_feedd_target(port_file, flog, target, sizeof target);
    const char *argv[] = {bench_bin,  "--device",
                          "cpu",      "--source",
                          "remote",   "--servers",
                          target,     "--dataset",
                          "imagenet", "--data",
                          data,       "--out",
                          out2,       "--batch",
                          "8",        "--steps",
                          "4",        "--seconds",
                          "0",        "--warmup",
                          "1",        "--decode-lane",
                          "cpu",      "--decode-share",
                          "0.5",      "--decode-lane-threads",
                          "2",        NULL};
    int rc = run_argv(argv, log);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (rc != 0)
        dump(log);
    assert_int_equal(rc, 0);
    char *text = slurp(log, "");
    assert_non_null(text);
    const char *at = strstr(text, "decode lane: ");
    unsigned long long decoded = 0, back = 0;
    if (!strstr(text, "decode lane cpu share 0.50") || !at ||
        sscanf(at, "decode lane: %llu samples decoded by the client, %llu", &decoded, &back) != 2 ||
        decoded == 0) {
        dump(log);
        fail_msg("feed-bench does not print the decode lane in effect and what it decoded");
    }
    free(text);
    char *json = slurp(out2, "summary.json");
    assert_non_null(json);
    assert_non_null(strstr(json, "\"decode_lane\": \"cpu\""));
    assert_non_null(strstr(json, "\"decode_share\": 0.5000"));
    assert_non_null(strstr(json, "\"images\": 32,"));
    free(json);
    const char *bad[] = {bench_bin, "--device", "cpu", "--decode-lane", "fpga",   "--data",
                         data,      "--out",    out2,  "--source",      "remote", "--steps",
                         "1",       NULL};
    assert_int_equal(run_argv(bad, log), 2);
}

/* --device none: the simulated step, two clients as ranks 0 and 1 of 2 sharing one feedd. */
static void test_simulated_ranks_share_a_server(void **state)
{
    (void)state;
    char port_file[512], flog[512], target[64], logs[2][512], outs[2][512], ranks[2][4];
    snprintf(port_file, sizeof port_file, "%s/sim.port", work);
    snprintf(flog, sizeof flog, "%s/sim-feedd.log", work);
    pid_t pid = start_feedd_target(port_file, flog, target, sizeof target);
    int rc[2];
    for (int r = 0; r < 2; r++) {
        snprintf(logs[r], sizeof logs[r], "%s/sim%d.log", work, r);
        snprintf(outs[r], sizeof outs[r], "%s/sim%d", work, r);
        snprintf(ranks[r], sizeof ranks[r], "%d", r);
        const char *argv[] = {bench_bin, "--device",  "none",  "--model",   "resnet18", "--source",
                              "remote",  "--servers", target,  "--dataset", "imagenet", "--data",
                              data,      "--out",     outs[r], "--batch",   "4",        "--steps",
                              "3",       "--seconds", "0",     "--warmup",  "1",        "--rank",
                              ranks[r],  "--world",   "2",     NULL};
        rc[r] = run_argv(argv, logs[r]);
        if (rc[r] != 0)
            dump(logs[r]);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(rc[r], 0);
        char *json = slurp(outs[r], "summary.json");
        assert_non_null(json);
        assert_non_null(strstr(json, "\"device\": \"sim\""));
        char want[32];
        snprintf(want, sizeof want, "\"rank\": %d,", r);
        assert_non_null(strstr(json, want));
        assert_non_null(strstr(json, "\"world\": 2,"));
        assert_non_null(strstr(json, "\"images\": 12,"));
        free(json);
    }
    const char *argv[] = {bench_bin, "--device", "none",   "--source", "sync,remote",
                          "--world", "2",        "--rank", "0",        NULL};
    assert_int_equal(run_argv(argv, logs[0]), 2); /* only the remote source splits epochs */
}

static void test_bad_option_is_refused(void **state)
{
    (void)state;
    char log[512];
    snprintf(log, sizeof log, "%s/bad.log", work);
    const char *argv[] = {bench_bin, "--device", "cpu", "--batch", "many", NULL};
    assert_int_equal(run_argv(argv, log), 2);
    const char *argv2[] = {bench_bin, "--device", "cpu",     "--data",  data, "--out",
                           out,       "--source", "nowhere", "--steps", "1",  NULL};
    assert_int_equal(run_argv(argv2, log), 1);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_feed_bench FEED_BENCH FEEDD FEED_GEN_DATASET\n");
        return 2;
    }
    bench_bin = argv[1];
    feedd_bin = argv[2];
    gen_bin = argv[3];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_sources_deliver_everything),
        cmocka_unit_test(test_dataset_name_and_client_settings),
        cmocka_unit_test(test_simulated_ranks_share_a_server),
        cmocka_unit_test(test_decode_lane),
        cmocka_unit_test(test_bad_option_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
