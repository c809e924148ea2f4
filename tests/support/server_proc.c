/*
 * Spawning and stopping real feedd processes (fork/exec) for the tests,
 * feed-bench and feed-wire-bench, with optional CPU pinning and log file,
 * a process's CPU time, ports reserved for a feedd that starts later, and the temp-dir
 * helpers they need. feedd writes its port files atomically
 * (temp + rename), so a file that exists holds a whole number.
 */
#include "feedtest.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/grpc.h>

#include "feed/errors.h"

#define MAX_ARGS 64

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *tmp_root(void)
{
    const char *t = getenv("TMPDIR");
    return (t && t[0]) ? t : "/tmp";
}

int feed_test_tmpdir(const char *prefix, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s.XXXXXX", tmp_root(), prefix);
    if (n < 0 || (size_t)n >= cap)
        return FEED_EINVAL;
    return mkdtemp(out) ? 0 : FEED_EIO;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

int feed_test_rmtree(const char *path)
{
    size_t rl = strlen(tmp_root());
    if (!path || strncmp(path, tmp_root(), rl) != 0 || path[rl] != '/' || strstr(path, ".."))
        return FEED_EINVAL;
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : FEED_EIO;
}

int feed_test_write_file(const char *path, const void *data, size_t len)
{
    int rc = FEED_EIO;
    FILE *f = fopen(path, "wb");
    if (!f)
        return FEED_EIO;
    if (len == 0 || fwrite(data, 1, len, f) == len)
        rc = 0;
    if (fclose(f) != 0)
        rc = FEED_EIO;
    return rc;
}

static int read_port(const char *path)
{
    char buf[32] = {0};
    int port = -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    if (fgets(buf, sizeof buf, f)) {
        char *end = NULL;
        long v = strtol(buf, &end, 10);
        if (end != buf && v > 0 && v < 65536)
            port = (int)v;
    }
    fclose(f);
    return port;
}

static void set_exit_status(feed_test_server *s, int wstatus)
{
    if (WIFEXITED(wstatus))
        s->exit_status = WEXITSTATUS(wstatus);
    else if (WIFSIGNALED(wstatus))
        s->exit_status = 128 + WTERMSIG(wstatus);
}

#define MAX_CPUS 1024

int feed_test_parse_cpu_list(const char *list, uint64_t mask[16])
{
    int rc = list && *list ? 0 : FEED_EINVAL;
    memset(mask, 0, 16 * sizeof mask[0]);
    for (const char *p = list; rc == 0 && *p;) {
        char *end = NULL;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || lo < 0 || lo >= MAX_CPUS)
            rc = FEED_EINVAL;
        p = end;
        if (rc == 0 && *p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo || hi >= MAX_CPUS)
                rc = FEED_EINVAL;
            p = end;
        }
        for (long c = lo; rc == 0 && c <= hi; c++)
            mask[c / 64] |= 1ull << (c % 64);
        if (rc == 0 && *p == ',')
            p++;
        else if (rc == 0 && *p)
            rc = FEED_EINVAL;
    }
    return rc;
}

uint64_t feed_test_proc_cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    uint64_t ns = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* Fields after the command name (which may hold spaces) start past the last ')'. */
        char *p = strrchr(buf, ')');
        unsigned long utime = 0, stime = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                        &stime) == 2) {
            long tick = sysconf(_SC_CLK_TCK);
            ns = (uint64_t)(utime + stime) * (1000000000ull / (uint64_t)(tick > 0 ? tick : 100));
        }
    }
    return ns;
}

/* In the child: die with the parent thread, pin, redirect output, exec. Never returns. */
static void child_exec(const char *exe, const char *const *argv, const uint64_t *mask,
                       const char *log_path, unsigned nofile)
{
    /* A test that dies (timeout, crash) must not leave its servers behind. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (mask) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < MAX_CPUS && c < CPU_SETSIZE; c++)
            if (mask[c / 64] & (1ull << (c % 64)))
                CPU_SET(c, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            _exit(126);
    }
    if (log_path) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
    }
    if (nofile) {
        struct rlimit rl = {nofile, nofile};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            _exit(126);
    }
    execv(exe, (char *const *)argv);
    _exit(127);
}

/* The binary to run, into exe. 0, FEED_EINVAL or FEED_ENOTFOUND. */
static int find_feedd(const feed_test_server_opts *o, char *exe, size_t cap)
{
    const char *bdir = getenv("FEED_BUILD_DIR");
    const char *feedd = o->feedd ? o->feedd : getenv("FEED_FEEDD");
    int rc = 0;
    if (feedd && feedd[0])
        snprintf(exe, cap, "%s", feedd);
    else if (bdir)
        snprintf(exe, cap, "%s/server/feedd", bdir);
    else
        rc = FEED_EINVAL;
    if (rc == 0 && access(exe, X_OK) != 0) {
        fprintf(stderr, "feed_test_server_start: no feedd at %s\n", exe);
        rc = FEED_ENOTFOUND;
    }
    return rc;
}

/* Wait up to 60 s for feedd's port files (an ASan build on two busy cores can be slow). */
static int wait_ports(feed_test_server *out, const char *port_file, const char *mport_file)
{
    int rc = FEED_ETIMEDOUT;
    for (int waited = 0; rc == FEED_ETIMEDOUT && waited < 60000; waited += 20) {
        int ws;
        int p = read_port(port_file);
        int mp = mport_file ? read_port(mport_file) : 0;
        if (waitpid(out->pid, &ws, WNOHANG) == out->pid) {
            set_exit_status(out, ws);
            out->pid = -1;
            fprintf(stderr, "feed_test_server_start: feedd exited early (status %d)\n",
                    out->exit_status);
            rc = FEED_EIO;
        } else if (p > 0 && (!mport_file || mp > 0)) {
            out->port = p;
            out->metrics_port = mp;
            snprintf(out->target, sizeof out->target, "127.0.0.1:%d", p);
            rc = 0;
        } else {
            sleep_ms(20);
        }
    }
    if (rc == FEED_ETIMEDOUT)
        fprintf(stderr, "feed_test_server_start: no port file after 60 s\n");
    return rc;
}

int feed_test_server_start_with(const feed_test_server_opts *opts, const char *const *extra_args,
                                feed_test_server *out)
{
    static const feed_test_server_opts defaults;
    const feed_test_server_opts *o = opts ? opts : &defaults;
    char exe[512], port_file[300], mport_file[300];
    const char *argv[MAX_ARGS];
    uint64_t mask[16];
    int argc = 0;
    memset(out, 0, sizeof *out);
    out->pid = -1;
    out->exit_status = -1;

    int rc = find_feedd(o, exe, sizeof exe);
    if (rc == 0 && o->cpus)
        rc = feed_test_parse_cpu_list(o->cpus, mask);
    if (rc == 0)
        rc = feed_test_tmpdir("feedd-test", out->workdir, sizeof out->workdir);
    if (rc != 0)
        goto out;
    snprintf(port_file, sizeof port_file, "%s/port", out->workdir);
    snprintf(mport_file, sizeof mport_file, "%s/metrics-port", out->workdir);
    argv[argc++] = exe;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    if (!o->no_metrics) {
        argv[argc++] = "--metrics-listen";
        argv[argc++] = "127.0.0.1:0";
        argv[argc++] = "--metrics-port-file";
        argv[argc++] = mport_file;
    }
    for (size_t i = 0; extra_args && extra_args[i] && rc == 0; i++) {
        if (argc < MAX_ARGS - 1)
            argv[argc++] = extra_args[i];
        else
            rc = FEED_EINVAL;
    }
    /* FEED_TEST_FEEDD_ARGS: words added to every feedd (ctest runs suites with --listener grpc). */
    char more[256];
    const char *env = getenv("FEED_TEST_FEEDD_ARGS");
    snprintf(more, sizeof more, "%s", env ? env : "");
    for (char *save = NULL, *w = strtok_r(more, " ", &save); w && rc == 0;
         w = strtok_r(NULL, " ", &save)) {
        if (argc < MAX_ARGS - 1)
            argv[argc++] = w;
        else
            rc = FEED_EINVAL;
    }
    argv[argc] = NULL;
    if (rc != 0)
        goto out;
    out->pid = fork();
    if (out->pid == 0)
        child_exec(exe, argv, o->cpus ? mask : NULL, o->log_path, o->nofile);
    rc = out->pid < 0 ? FEED_EIO : wait_ports(out, port_file, o->no_metrics ? NULL : mport_file);
out:
    if (rc != 0)
        feed_test_server_kill(out);
    return rc;
}

bool feed_test_feedd_own_listener(void)
{
#ifdef FEEDD_GRPC151_CORE
    const char *args = getenv("FEED_TEST_FEEDD_ARGS");
    return strcmp(grpc_version_string(), FEEDD_GRPC151_CORE) == 0 &&
           !(args && strstr(args, "--listener grpc"));
#else
    return false;
#endif
}

int feed_test_server_start(const char *const *extra_args, feed_test_server *out)
{
    return feed_test_server_start_with(NULL, extra_args, out);
}

int feed_test_server_signal(feed_test_server *s, int sig)
{
    if (s->pid <= 0)
        return FEED_EIO;
    return kill(s->pid, sig) == 0 ? 0 : FEED_EIO;
}

int feed_test_server_wait(feed_test_server *s, int timeout_ms)
{
    if (s->pid <= 0)
        return 0;
    for (int waited = 0;; waited += 10) {
        int ws;
        pid_t r = waitpid(s->pid, &ws, WNOHANG);
        if (r == s->pid) {
            set_exit_status(s, ws);
            s->pid = -1;
            return 0;
        }
        if (r < 0 && errno != EINTR) {
            s->pid = -1;
            return FEED_EIO;
        }
        if (waited >= timeout_ms)
            return FEED_ETIMEDOUT;
        sleep_ms(10);
    }
}

int feed_test_server_pause(feed_test_server *s)
{
    if (s->pid <= 0 || kill(s->pid, SIGSTOP) != 0)
        return FEED_EIO;
    for (;;) {
        int ws = 0;
        pid_t r = waitpid(s->pid, &ws, WUNTRACED);
        if (r == s->pid && WIFSTOPPED(ws))
            return 0;
        if (r == s->pid) {
            set_exit_status(s, ws);
            s->pid = -1;
            return FEED_EIO;
        }
        if (r < 0 && errno != EINTR)
            return FEED_EIO;
    }
}

int feed_test_server_resume(feed_test_server *s)
{
    return feed_test_server_signal(s, SIGCONT);
}

static void cleanup_workdir(feed_test_server *s)
{
    if (s->workdir[0]) {
        feed_test_rmtree(s->workdir);
        s->workdir[0] = '\0';
    }
}

int feed_test_server_stop_timeout(feed_test_server *s, int timeout_ms)
{
    int rc = 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        rc = feed_test_server_wait(s, timeout_ms);
        if (rc == FEED_ETIMEDOUT)
            feed_test_server_kill(s);
    }
    cleanup_workdir(s);
    return rc;
}

int feed_test_server_stop(feed_test_server *s)
{
    return feed_test_server_stop_timeout(s, 30000);
}

int feed_test_server_teardown(feed_test_server *s, const char *root)
{
    int rc = feed_test_server_stop(s);
    feed_test_rmtree(root);
    return rc == 0 && s->exit_status == 0 ? 0 : -1;
}

void feed_test_server_kill(feed_test_server *s)
{
    if (s->pid > 0) {
        int ws = 0;
        kill(s->pid, SIGKILL);
        while (waitpid(s->pid, &ws, 0) < 0 && errno == EINTR)
            ;
        set_exit_status(s, ws);
        s->pid = -1;
    }
    cleanup_workdir(s);
}

int feed_test_port_reserve(int *fd, int *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int one = 1;
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0)
        return FEED_EIO;
    if (setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(*fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(*fd, (struct sockaddr *)&a, &len) != 0) {
        feed_test_port_release(fd);
        return FEED_EIO;
    }
    *port = ntohs(a.sin_port);
    return 0;
}

void feed_test_port_release(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}
