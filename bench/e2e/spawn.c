/*
 * Spawning and stopping the benchmark's feedd processes; see spawn.h.
 * feedd writes its port file atomically (temp + rename), so a file that
 * exists holds a whole port number.
 */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "feed/errors.h"

#define START_TIMEOUT_MS 60000
#define STOP_GRACE_MS 5000
#define MAX_CPUS 1024

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int parse_cpu_list(const char *list, uint64_t mask[16])
{
    memset(mask, 0, 16 * sizeof mask[0]);
    const char *p = list;
    if (!p || !*p)
        return FEED_EINVAL;
    while (*p) {
        char *end = NULL;
        long lo = strtol(p, &end, 10), hi;
        if (end == p || lo < 0 || lo >= MAX_CPUS)
            return FEED_EINVAL;
        hi = lo;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo || hi >= MAX_CPUS)
                return FEED_EINVAL;
            p = end;
        }
        for (long c = lo; c <= hi; c++)
            mask[c / 64] |= 1ull << (c % 64);
        if (*p == ',')
            p++;
        else if (*p)
            return FEED_EINVAL;
    }
    return 0;
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

/* In the child: pin, redirect output, exec. Never returns. */
static void child_exec(const char *feedd, const char *const *argv, const uint64_t *mask,
                       const char *log_path)
{
    if (mask) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = 0; c < MAX_CPUS && c < CPU_SETSIZE; c++)
            if (mask[c / 64] & (1ull << (c % 64)))
                CPU_SET(c, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            _exit(126);
    }
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    execv(feedd, (char *const *)argv);
    _exit(127);
}

int feedd_spawn(const char *feedd, const char *name, const char *data, uint32_t threads,
                const char *cpus, const char *work_dir, const char *log_path, feedd_proc *out,
                char *err, size_t err_cap)
{
    char port_file[512], dataset_arg[1024], threads_arg[16];
    uint64_t mask[16];
    const char *argv[12];
    int rc = FEED_EIO, argc = 0;
    memset(out, 0, sizeof *out);
    out->pid = -1;

    if (access(feedd, X_OK) != 0) {
        snprintf(err, err_cap, "feedd not found at %s (give --feedd PATH)", feedd);
        return FEED_ENOTFOUND;
    }
    if (cpus && parse_cpu_list(cpus, mask) != 0) {
        snprintf(err, err_cap, "bad CPU list '%s'", cpus);
        return FEED_EINVAL;
    }
    int n = snprintf(port_file, sizeof port_file, "%s/port", work_dir);
    int m = snprintf(dataset_arg, sizeof dataset_arg, "%s=%s", name, data);
    if (n < 0 || (size_t)n >= sizeof port_file || m < 0 || (size_t)m >= sizeof dataset_arg) {
        snprintf(err, err_cap, "path too long");
        return FEED_EINVAL;
    }
    unlink(port_file);
    snprintf(threads_arg, sizeof threads_arg, "%u", threads);
    argv[argc++] = feedd;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--dataset";
    argv[argc++] = dataset_arg;
    argv[argc++] = "--threads";
    argv[argc++] = threads_arg;
    argv[argc] = NULL;

    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, err_cap, "fork: %s", strerror(errno));
        return FEED_EIO;
    }
    if (pid == 0)
        child_exec(feedd, argv, cpus ? mask : NULL, log_path);
    out->pid = pid;

    for (int waited = 0; waited < START_TIMEOUT_MS; waited += 20) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            out->pid = -1;
            snprintf(err, err_cap, "feedd exited at start (status %d); see %s",
                     WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws), log_path);
            rc = FEED_EIO;
            goto out;
        }
        int port = read_port(port_file);
        if (port > 0) {
            out->port = port;
            snprintf(out->target, sizeof out->target, "127.0.0.1:%d", port);
            rc = 0;
            goto out;
        }
        sleep_ms(20);
    }
    snprintf(err, err_cap, "feedd wrote no port file in %d s; see %s", START_TIMEOUT_MS / 1000,
             log_path);
    rc = FEED_ETIMEDOUT;
out:
    if (rc)
        feedd_stop(out);
    return rc;
}

void feedd_stop(feedd_proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGTERM);
    for (int waited = 0;; waited += 10) {
        int ws;
        pid_t r = waitpid(p->pid, &ws, WNOHANG);
        if (r == p->pid || (r < 0 && errno != EINTR))
            break;
        if (waited == STOP_GRACE_MS)
            kill(p->pid, SIGKILL);
        sleep_ms(10);
    }
    p->pid = -1;
}

uint64_t proc_cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    uint64_t ns = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* Fields after the command name (which may hold spaces) start past the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long utime = 0, stime = 0;
    if (p &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) == 2) {
        long tick = sysconf(_SC_CLK_TCK);
        ns = (uint64_t)(utime + stime) * (1000000000ull / (uint64_t)(tick > 0 ? tick : 100));
    }
    return ns;
}
