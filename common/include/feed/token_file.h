/*
 * A bearer token read from a file, by the rules of --auth-token-file
 * (feedd, feed-client-probe, feed-bench): at most FEED_TOKEN_FILE_MAX bytes,
 * one trailing "\n", "\r\n" or "\r" stripped, not empty.
 * Which characters a token may hold is checked where it is used (feedd at
 * start, libfeedclient in feed_loader_open). Thread-safe.
 */
#ifndef FEED_TOKEN_FILE_H
#define FEED_TOKEN_FILE_H

#include <stddef.h>

#define FEED_TOKEN_FILE_MAX 4096u

/*
 * The token in path into out[0..cap), NUL-terminated; cap must be at least
 * FEED_TOKEN_FILE_MAX + 1. 0, or FEED_EINVAL with err saying why, naming
 * `what` (the option) and the path: unreadable, larger than the cap, empty,
 * or holding a NUL byte.
 */
int feed_token_file_read(const char *path, const char *what, char *out, size_t cap, char *err,
                         size_t err_cap);

#endif
