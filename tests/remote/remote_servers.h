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

#endif
