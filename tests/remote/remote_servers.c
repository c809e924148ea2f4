/*
 * Starts and steers servers.js for the remote tests and the benchmark (see
 * remote_servers.h). Main thread only.
 */
#include "remote_servers.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int remote_servers_start(remote_servers *s, const char *node, const char *script, const char *dir,
                         int latency_ms)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    char latency[16];
    char line[512];
    posix_spawn_file_actions_t fa;
    char *argv[] = {(char *)node, "--no-deprecation", (char *)script, "--data", (char *)dir,
                    "--bucket",   REMOTE_TEST_BUCKET, "--latency-ms", latency,  NULL};
    int rc = -1;

    memset(s, 0, sizeof *s);
    s->pid = -1;
    snprintf(latency, sizeof latency, "%d", latency_ms);
    setenv("FEED_TEST_S3_KEY", REMOTE_TEST_KEY, 1);
    setenv("FEED_TEST_S3_SECRET", REMOTE_TEST_SECRET, 1);
    if (pipe(in) != 0 || pipe(out) != 0)
        goto out;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    rc = posix_spawnp(&s->pid, node, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    unsetenv("FEED_TEST_S3_SECRET");
    if (rc != 0) {
        fprintf(stderr, "cannot start %s %s\n", node, script);
        s->pid = -1;
        rc = -1;
        goto out;
    }
    close(in[0]);
    close(out[1]);
    in[0] = out[1] = -1;
    s->to = fdopen(in[1], "w");
    s->from = fdopen(out[0], "r");
    in[1] = out[0] = -1;
    rc = -1;
    if (!s->to || !s->from || !fgets(line, sizeof line, s->from) ||
        sscanf(line, "ready s3=%d s3proxy=%d http=%d httpproxy=%d latency=%d", &s->s3, &s->s3proxy,
               &s->http, &s->httpproxy, &s->latency) != 5) {
        fprintf(stderr, "servers.js did not start (is node_modules installed? "
                        "scripts/test.sh runs npm ci in tests/remote)\n");
        goto out;
    }
    setvbuf(s->to, NULL, _IOLBF, 0);
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
    }
    if (rc != 0)
        remote_servers_stop(s);
    return rc;
}

int remote_servers_cmd(remote_servers *s, const char *cmd, long *requests, long *connections)
{
    char line[512];
    long r = 0, c = 0;
    int rc = -1;
    if (!s->to || !s->from) /* not started (a failed setup's teardown) */
        goto out;
    if (fprintf(s->to, "%s\n", cmd) < 0 || fflush(s->to) != 0 || !fgets(line, sizeof line, s->from))
        goto out;
    if (sscanf(line, "ok requests=%ld connections=%ld", &r, &c) == 2) {
        rc = 0;
        if (requests)
            *requests = r;
        if (connections)
            *connections = c;
    } else {
        fprintf(stderr, "servers.js: %s -> %s", cmd, line);
    }
out:
    return rc;
}

void remote_servers_stop(remote_servers *s)
{
    int status;
    if (s->to)
        fclose(s->to);
    if (s->from)
        fclose(s->from);
    s->to = s->from = NULL;
    if (s->pid > 0)
        waitpid(s->pid, &status, 0);
    s->pid = -1;
}

long remote_servers_count(remote_servers *s, const char *cmd)
{
    long n = -1;
    return remote_servers_cmd(s, cmd, &n, NULL) == 0 ? n : -1;
}

int remote_servers_wait_above(remote_servers *s, const char *cmd, long above, int timeout_ms)
{
    const struct timespec poll = {0, 20 * 1000000L};
    for (int waited = 0; waited <= timeout_ms; waited += 20) {
        if (remote_servers_count(s, cmd) > above)
            return 0;
        nanosleep(&poll, NULL);
    }
    return -1;
}

int remote_test_run(const char *cmd)
{
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "failed (%d): %s\n", rc, cmd);
    return rc;
}

int remote_test_make_shards(const char *build, const char *tmp, const char *data, unsigned classes,
                            unsigned per_class, unsigned seed, unsigned shard_samples)
{
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd,
                     "'%s/server/tools/feed-gen-dataset' '%s/tree' --classes %u --per-class %u "
                     "--seed %u >/dev/null && mkdir '%s' && '%s/server/tools/feed-pack' "
                     "'%s/tree' '%s/shard' --format tar --shard-samples %u >/dev/null",
                     build, tmp, classes, per_class, seed, data, build, tmp, data, shard_samples);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1;
    return remote_test_run(cmd);
}
