/*
 * Test support shared by every engineer's tests: real feedd processes on
 * 127.0.0.1 port 0 (also the one spawner feed-bench and feed-wire-bench
 * use), small ImageFolder datasets of real JPEGs, temp dirs, and a minimal
 * HTTP GET for the metrics endpoint. Functions return 0 or a
 * negative FEED_E code; nothing here calls exit() or cmocka. Not thread-safe
 * unless said otherwise (tests call it from their main thread).
 */
#ifndef FEED_TESTS_SUPPORT_FEEDTEST_H
#define FEED_TESTS_SUPPORT_FEEDTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct feed_test_server {
    pid_t pid;
    int port;          /* gRPC port feedd bound */
    int metrics_port;  /* Prometheus endpoint, always enabled by the helper */
    char target[64];   /* "127.0.0.1:PORT" */
    char workdir[256]; /* holds the port files; removed by stop/kill */
    int exit_status;   /* after stop: exit code, or 128+signal */
} feed_test_server;

/*
 * Spawn ${FEED_FEEDD} if set, else ${FEED_BUILD_DIR}/server/feedd --listen 127.0.0.1:0 --port-file
 * F
 * --metrics-listen 127.0.0.1:0 --metrics-port-file G [extra_args...]
 * (extra_args NULL-terminated, may be NULL) and wait up to 60 s for both
 * port files. FEED_EIO if feedd exits first or never writes them. feedd gets
 * SIGKILL when the calling thread exits (PR_SET_PDEATHSIG), so a crashed or
 * timed-out test leaves no server behind: start servers from a thread that
 * outlives them (the test's main thread).
 */
int feed_test_server_start(const char *const *extra_args, feed_test_server *out);

/* How feed_test_server_start_with starts feedd; all zeros: as feed_test_server_start. */
typedef struct feed_test_server_opts {
    const char *feedd;    /* the binary; NULL: as above */
    const char *cpus;     /* pin it to this CPU list ("0-3,8", as taskset); NULL: no pinning */
    const char *log_path; /* its stdout and stderr go to this file; NULL: this process's */
    bool no_metrics;      /* no --metrics-listen; metrics_port stays 0 */
    unsigned nofile;      /* soft and hard RLIMIT_NOFILE of feedd; 0: this process's */
} feed_test_server_opts;

/*
 * feed_test_server_start with opts (NULL: all zeros). FEED_EINVAL for a bad
 * CPU list, FEED_ENOTFOUND when the binary is not there.
 */
int feed_test_server_start_with(const feed_test_server_opts *opts, const char *const *extra_args,
                                feed_test_server *out);
/*
 * Whether the feedd these tests start accepts on its own listener, with the
 * transport guard (server/net/grpc151): built with it (feedd.cmake), the gRPC
 * core loaded is the one it was built for, and FEED_TEST_FEEDD_ARGS does
 * not ask for gRPC's listener. Tests of those two skip otherwise.
 */
bool feed_test_feedd_own_listener(void);
/* SIGTERM, wait up to timeout_ms, then SIGKILL. Sets exit_status. 0 if it exited by itself. */
int feed_test_server_stop_timeout(feed_test_server *s, int timeout_ms);
/* feed_test_server_stop_timeout(s, 30000). */
int feed_test_server_stop(feed_test_server *s);
/* A group teardown's: stop s and remove root (feed_test_rmtree); 0 when feedd exited with
 * status 0, else -1. */
int feed_test_server_teardown(feed_test_server *s, const char *root);
/* SIGKILL and reap. */
void feed_test_server_kill(feed_test_server *s);
/* Send a signal without waiting (for drain tests); 0 or FEED_EIO. */
int feed_test_server_signal(feed_test_server *s, int sig);
/* Wait up to timeout_ms for the process to exit; sets exit_status. FEED_ETIMEDOUT if it did not. */
int feed_test_server_wait(feed_test_server *s, int timeout_ms);
/*
 * SIGSTOP, then wait until every thread of the process has stopped (waitpid WUNTRACED): kill()
 * returns before that, and on a loaded machine the server's threads can go on sending for a
 * while after it. 0, or FEED_EIO if the process is not running (exited: exit_status is set).
 */
int feed_test_server_pause(feed_test_server *s);
/* SIGCONT: what a test that paused a server runs in its teardown, so that a failed assertion
 * cannot leave the server stopped for the next test. Harmless on a running server; 0 or
 * FEED_EIO. */
int feed_test_server_resume(feed_test_server *s);

/*
 * A port on 127.0.0.1 for a feedd that starts later (--listen 127.0.0.1:PORT), reserved until
 * feed_test_port_release: a socket bound to it with SO_REUSEADDR and not listening. Nothing
 * else gets the port meanwhile (bind(0) and connect()'s ephemeral ports skip a bound one),
 * connections to it are refused until feedd listens, and feedd, which binds with
 * SO_REUSEADDR too, can listen on it while the reservation is held. *fd gets the socket.
 */
int feed_test_port_reserve(int *fd, int *port);
/* Closes a reservation's socket (fd < 0: nothing) and sets *fd to -1. */
void feed_test_port_release(int *fd);

/* user + system CPU of a process in nanoseconds, from /proc/PID/stat; 0 when unreadable. */
uint64_t feed_test_proc_cpu_ns(pid_t pid);
/* Parse a CPU list ("0-3,8,10-11") into a bitmask of up to 1024 CPUs; 0 or FEED_EINVAL. */
int feed_test_parse_cpu_list(const char *list, uint64_t mask[16]);

/* mkdtemp under $TMPDIR (or /tmp) with the given prefix; out gets the path. */
int feed_test_tmpdir(const char *prefix, char *out, size_t cap);
/* rm -rf path (only paths under the temp dir are accepted). */
int feed_test_rmtree(const char *path);
int feed_test_write_file(const char *path, const void *data, size_t len);

/*
 * Make an ImageFolder at dir (created if missing): `classes` class
 * directories of per_class JPEGs each, sizes between 48 and 320 pixels a side, content a
 * function of seed. Uses ${FEED_BUILD_DIR}/server/tools/feed-gen-dataset
 * --seed seed when it exists (its own layout and sizes, 64..1200 px), else
 * encodes with libjpeg here.
 */
int feed_test_make_imagefolder(const char *dir, unsigned classes, unsigned per_class,
                               unsigned seed);
/*
 * A temp dir (feed_test_tmpdir(prefix) into root) holding an ImageFolder at root/data (into dir):
 * feed_test_make_imagefolder(dir, classes, per_class, seed). 0, or the first error (root is set
 * once the dir exists, so a group teardown can remove it).
 */
int feed_test_tmp_imagefolder(const char *prefix, char *root, size_t root_cap, char *dir,
                              size_t dir_cap, unsigned classes, unsigned per_class, unsigned seed);
/* A cmocka group teardown (int (*)(void **)): removes the temp dir whose path the group setup
 * left in *state (a char array it owns), if any. Returns 0. */
int feed_test_group_rmtree(void **state);

/*
 * The permutation of [0, n) the client's plan must draw for (seed, epoch): an independent
 * Fisher-Yates straight from the RNG contract (feed/rng.h). malloc'd (the caller frees), NULL
 * when out of memory or n is 0.
 */
uint64_t *feed_test_ref_perm(uint64_t n, uint64_t seed, uint32_t epoch);

/* Encode one w x h RGB JPEG of a seed-dependent pattern at quality q into path. */
int feed_test_write_jpeg(const char *path, unsigned w, unsigned h, unsigned seed, int quality);

/*
 * GET http://127.0.0.1:port/path; body (NUL-terminated, malloc'd) in *body.
 * *status gets the HTTP status code. Bounded: 16 MiB, 10 s.
 */
int feed_test_http_get(int port, const char *path, int *status, char **body);
/*
 * Value of the first Prometheus sample whose line starts with `series`
 * (e.g. "feedd_batches_total" or "feedd_decode_errors_total{kind=\"corrupt\"}").
 * FEED_ENOTFOUND if absent.
 */
int feed_test_metric(const char *text, const char *series, double *value);
/*
 * feed_test_metric over a fresh GET /metrics on port: 0, the HTTP call's
 * error, FEED_EPROTO for a status other than 200, or FEED_ENOTFOUND.
 */
int feed_test_scrape(int port, const char *series, double *value);

#endif
