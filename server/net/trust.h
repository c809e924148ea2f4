/*
 * Who may talk to feedd: the bearer token that every Feed call must carry
 * (--auth-token-file) and the TLS material of the gRPC port (--tls-cert,
 * --tls-key, --tls-client-ca). Loaded once by the main thread before the
 * service starts; read-only afterwards, so any thread may check a call
 * against it.
 */
#ifndef FEED_SERVER_TRUST_H
#define FEED_SERVER_TRUST_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>

#include "feed/token_file.h" /* FEED_TOKEN_FILE_MAX: the largest token file */

/* Largest PEM file (certificate chain, key or CA bundle). */
#define FEEDD_PEM_FILE_MAX (1 << 20)

/* A bearer token: the expected value of an "authorization" header. */
typedef struct feedd_token {
    char *expect; /* "Bearer " + token; NULL: no token required */
    size_t expect_len;
} feedd_token;

/*
 * Read a token from path: at most FEED_TOKEN_FILE_MAX bytes, one trailing
 * "\n" or "\r\n" stripped, then visible ASCII only (no spaces), and not
 * empty. path "" leaves *t requiring nothing. 0, FEED_EINVAL (the message in
 * err names the file and why) or FEED_ENOMEM.
 */
int feedd_token_load(const char *path, const char *what, feedd_token *t, char *err, size_t cap);
void feedd_token_free(feedd_token *t);
/* Whether a token is required. */
bool feedd_token_required(const feedd_token *t);
/*
 * Whether value (an Authorization header of len bytes, "Bearer TOKEN", the
 * scheme in any case) carries the token; always true when none is required.
 * The token is compared in constant time: how long it takes depends on the
 * token's length only, not on where the first wrong byte is.
 */
bool feedd_token_matches(const feedd_token *t, const char *value, size_t len);
/*
 * Whether md carries the token: exactly one "authorization" entry, and it
 * matches (several, even one right among them, are refused: a proxy that
 * adds its own must not let a client's pass). True when none is required.
 */
bool feedd_token_allows(const feedd_token *t, const grpc_metadata_array *md);

/*
 * TLS server credentials from PEM files: the certificate chain, its key, and
 * for mutual TLS the CA that client certificates must chain to (client_ca ""
 * = no client certificate asked for). *out NULL with cert "" (plaintext).
 * 0, FEED_EINVAL (err says which file and why) or FEED_ENOMEM.
 */
int feedd_tls_server_credentials(const char *cert, const char *key, const char *client_ca,
                                 grpc_server_credentials **out, char *err, size_t cap);

#endif
