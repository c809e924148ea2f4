/*
 * The real servers of tests/remote (servers.js: an S3-compatible server that
 * checks SigV4, a static HTTP server with Range support, fault proxies in
 * front of both) as a child process of the test, and the one-line commands
 * that steer the proxies. Used by the test's main thread only.
 */
#ifndef FEED_TESTS_REMOTE_SERVERS_H
#define FEED_TESTS_REMOTE_SERVERS_H

#include <stdio.h>
#include <sys/types.h>

#define REMOTE_TEST_BUCKET "feed-test"
#define REMOTE_TEST_KEY "FEEDTESTKEY"
#define REMOTE_TEST_SECRET "feed-test-secret-5ecr3t"

typedef struct remote_servers {
    pid_t pid;
    FILE *to;                                  /* commands */
    FILE *from;                                /* answers */
    int s3, s3proxy, http, httpproxy, latency; /* ports on 127.0.0.1 */
} remote_servers;

/*
 * Starts `node script --data dir --bucket REMOTE_TEST_BUCKET` (latency_ms > 0:
 * also a latency proxy) with the test key pair, and waits for its "ready"
 * line. 0, or -1 with the reason on stderr.
 */
int remote_servers_start(remote_servers *s, const char *node, const char *script, const char *dir,
                         int latency_ms);
/* Sends one command; 0 when answered "ok". *requests / *connections (may be NULL) get the proxies'
 * totals. */
int remote_servers_cmd(remote_servers *s, const char *cmd, long *requests, long *connections);
/* Closes its stdin and waits for it to exit. */
void remote_servers_stop(remote_servers *s);
/* The first count a command answers ("stats": the proxies' requests; "dripping": responses
 * being drip-fed now); -1 when it failed. */
long remote_servers_count(remote_servers *s, const char *cmd);
/* Polls remote_servers_count(s, cmd) every 20 ms until it is above `above`, for at most
 * timeout_ms (a hang guard, not a timing bound). 0, or -1 when it never was. */
int remote_servers_wait_above(remote_servers *s, const char *cmd, long above, int timeout_ms);

/* system(cmd), naming the command on stderr when it fails; its status. */
int remote_test_run(const char *cmd);
/* The remote tests' dataset: feed-gen-dataset (classes x per_class images, seed) into tmp/tree,
 * then feed-pack into data/shard-NNNNNN.tar of shard_samples samples each (data is created).
 * build: the build folder with server/tools. 0, or the failed command's status. */
int remote_test_make_shards(const char *build, const char *tmp, const char *data, unsigned classes,
                            unsigned per_class, unsigned seed, unsigned shard_samples);

#endif
