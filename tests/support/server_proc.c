/*
 * Spawning and stopping real feedd processes for tests (fork/exec), and the
 * temp-dir helpers they need. feedd writes its port files atomically
 * (temp + rename), so a file that exists holds a whole number.
 */
#include "feedtest.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

int feed_test_server_start(const char *const *extra_args, feed_test_server *out)
{
    char exe[512], port_file[300], mport_file[300];
    const char *argv[MAX_ARGS];
    int rc = FEED_EIO;
    memset(out, 0, sizeof *out);
    out->pid = -1;
    out->exit_status = -1;

    const char *bdir = getenv("FEED_BUILD_DIR");
    const char *feedd = getenv("FEED_FEEDD");
    if (feedd && feedd[0])
        snprintf(exe, sizeof exe, "%s", feedd);
    else if (bdir)
        snprintf(exe, sizeof exe, "%s/server/feedd", bdir);
    else
        return FEED_EINVAL;
    if (access(exe, X_OK) != 0)
        return FEED_ENOTFOUND;
    rc = feed_test_tmpdir("feedd-test", out->workdir, sizeof out->workdir);
    if (rc < 0)
        return rc;
    snprintf(port_file, sizeof port_file, "%s/port", out->workdir);
    snprintf(mport_file, sizeof mport_file, "%s/metrics-port", out->workdir);

    int argc = 0;
    argv[argc++] = exe;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--port-file";
    argv[argc++] = port_file;
    argv[argc++] = "--metrics-listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--metrics-port-file";
    argv[argc++] = mport_file;
    for (size_t i = 0; extra_args && extra_args[i]; i++) {
        if (argc >= MAX_ARGS - 1) {
            rc = FEED_EINVAL;
            goto fail;
        }
        argv[argc++] = extra_args[i];
    }
    argv[argc] = NULL;

    pid_t pid = fork();
    if (pid < 0) {
        rc = FEED_EIO;
        goto fail;
    }
    if (pid == 0) {
        /* A test that dies (timeout, crash) must not leave its servers behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    out->pid = pid;

    /* 60 s: an ASan build on two busy cores can take a while to come up. */
    for (int waited = 0; waited < 60000; waited += 20) {
        int ws;
        if (waitpid(pid, &ws, WNOHANG) == pid) {
            set_exit_status(out, ws);
            out->pid = -1;
            fprintf(stderr, "feed_test_server_start: feedd exited early (status %d)\n",
                    out->exit_status);
            rc = FEED_EIO;
            goto fail;
        }
        int p = read_port(port_file);
        int mp = read_port(mport_file);
        if (p > 0 && mp > 0) {
            out->port = p;
            out->metrics_port = mp;
            snprintf(out->target, sizeof out->target, "127.0.0.1:%d", p);
            return 0;
        }
        sleep_ms(20);
    }
    fprintf(stderr, "feed_test_server_start: no port file after 60 s\n");
    rc = FEED_ETIMEDOUT;
fail:
    feed_test_server_kill(out);
    return rc;
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
