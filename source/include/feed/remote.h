/*
 * The parts of the remote blob (source/src/remote/remote*.c) that decide without a
 * socket, so tests can check them directly: where an s3:// or http(s)://
 * location is sent and how it is named, which credentials apply, AWS
 * Signature V4, and the process-wide transfer counters. feed/blob.h is the
 * interface the rest of feedd uses; this header is for tests, the server's
 * metrics and the tools.
 *
 * Nothing here logs. The names made here never hold credentials, signatures
 * or query strings.
 */
#ifndef FEED_REMOTE_H
#define FEED_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "feed/blob.h"

/* Caps on text that comes from locations, the environment and files. */
#define FEED_REMOTE_MAX_URL 4096u
#define FEED_REMOTE_MAX_SECRET 1024u /* one key id, secret or session token */

typedef struct feed_remote_creds {
    char access_key[FEED_REMOTE_MAX_SECRET]; /* "" when none: requests go unsigned */
    char secret_key[FEED_REMOTE_MAX_SECRET];
    char session_token[FEED_REMOTE_MAX_SECRET]; /* "" when none */
} feed_remote_creds;

/*
 * Where one location is fetched from. For s3:// the request is signed with
 * SigV4 for host and canonical_uri; an http(s):// URL is fetched as given
 * (userinfo and query included: a presigned URL's signature lives there) and
 * named without them.
 */
typedef struct feed_remote_target {
    char url[FEED_REMOTE_MAX_URL];           /* what curl is asked for */
    char name[FEED_REMOTE_MAX_URL];          /* for messages: no userinfo, no query */
    char host[512];                          /* s3: the Host header (with :port if any) */
    char canonical_uri[FEED_REMOTE_MAX_URL]; /* s3: the URI-encoded path that is signed */
    char region[64];                         /* s3 */
    int s3;
} feed_remote_target;

/*
 * Resolves location with the options (NULL fields: the environment, see
 * feed/blob.h). Returns 0, or FEED_EINVAL with a message naming the location
 * (without its credentials) in err.
 */
int feed_remote_target_resolve(const char *location, const feed_blob_remote_options *o,
                               feed_remote_target *t, char *err, size_t err_cap);

/*
 * 1 when a redirect from URL from to URL to stays on the same scheme and
 * host[:port] (letter case aside, userinfo ignored; an absent port differs
 * from a written one), else 0. FEED_REMOTE_REDIRECTS_SAME_HOST follows only
 * these.
 */
int feed_remote_redirect_allowed(const char *from, const char *to);

/*
 * Credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
 * AWS_SESSION_TOKEN, else the [AWS_PROFILE or default] section of
 * AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. None found: empty
 * strings (anonymous). Returns 0, or FEED_EINVAL/FEED_ETOOBIG when a variable
 * or the file is malformed or over the caps (the message names the variable
 * or the file, never a value).
 */
int feed_remote_creds_load(feed_remote_creds *c, char *err, size_t err_cap);
/* Zeroes c (the secrets do not outlive their use in memory that is freed). */
void feed_remote_creds_wipe(feed_remote_creds *c);

/* One header that is signed: name in lower case, value trimmed. */
typedef struct feed_sigv4_header {
    const char *name;
    const char *value;
} feed_sigv4_header;

typedef struct feed_sigv4_request {
    const char *method;
    const char *canonical_uri;        /* already URI-encoded */
    const char *canonical_query;      /* sorted, encoded; "" for none */
    const feed_sigv4_header *headers; /* sorted by name, host among them */
    size_t n_headers;
    const char *payload_hash; /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
    const char *amz_date;     /* YYYYMMDDTHHMMSSZ */
    const char *region;
    const char *service; /* "s3" */
} feed_sigv4_request;

/*
 * Writes the Authorization header's value ("AWS4-HMAC-SHA256 Credential=...,
 * SignedHeaders=..., Signature=...") into out. Returns 0, FEED_ETOOBIG when
 * out or the canonical request would be over its cap, FEED_EIO when libcrypto
 * fails.
 */
int feed_sigv4_authorization(const feed_sigv4_request *r, const char *access_key,
                             const char *secret_key, char *out, size_t out_cap);

/* Appends s URI-encoded (RFC 3986 unreserved kept; '/' kept when keep_slash). */
int feed_remote_uri_encode(const char *s, int keep_slash, char *out, size_t out_cap);

/* Process-wide counters, all remote blobs together (monotonic). */
typedef struct feed_remote_stats {
    uint64_t requests;          /* HTTP requests sent, retries included */
    uint64_t retries;           /* requests sent again after a 5xx, timeout or cut */
    uint64_t bytes;             /* body bytes received */
    uint64_t readahead_done;    /* hinted ranges fetched in the background */
    uint64_t readahead_hits;    /* reads served by a hinted range */
    uint64_t readahead_dropped; /* hints dropped: no room under readahead_bytes */
} feed_remote_stats;

void feed_remote_stats_get(feed_remote_stats *s);

#endif
