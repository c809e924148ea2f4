/*
 * Bearer tokens and TLS credentials for feedd (see trust.h). Files are read
 * with a cap before anything parses them; the token is kept as the whole
 * header value it must match, so a check is one constant-time comparison.
 */
#include "trust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "feed/errors.h"
#include "feed/strutil.h"
#include "feed/token_file.h"

#define BEARER "Bearer "
#define BEARER_LEN (sizeof BEARER - 1)

/*
 * The whole of path in a malloc'd, NUL-terminated buffer of *len bytes.
 * FEED_EINVAL when it cannot be read, is larger than max or holds a NUL byte.
 */
static int read_capped(const char *path, const char *what, size_t max, char **out, size_t *len,
                       char *err, size_t cap)
{
    int rc = FEED_EINVAL;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    *out = NULL;
    if (!f) {
        feed_set_err(err, cap, "%s: cannot open '%s': %s", what, path, strerror(errno));
        goto out;
    }
    rc = FEED_ENOMEM;
    buf = malloc(max + 2);
    if (!buf)
        goto out;
    n = fread(buf, 1, max + 1, f);
    rc = FEED_EINVAL;
    if (ferror(f)) {
        feed_set_err(err, cap, "%s: cannot read '%s': %s", what, path, strerror(errno));
    } else if (n > max) {
        feed_set_err(err, cap, "%s: '%s' is larger than %zu bytes", what, path, max);
    } else if (memchr(buf, '\0', n)) {
        feed_set_err(err, cap, "%s: '%s' holds a NUL byte", what, path);
    } else {
        buf[n] = '\0';
        *out = buf;
        *len = n;
        buf = NULL;
        rc = 0;
    }
out:
    /* A refused file's bytes may be a key. */
    if (buf)
        explicit_bzero(buf, n);
    free(buf);
    if (f)
        fclose(f);
    return rc;
}

int feedd_token_load(const char *path, const char *what, feedd_token *t, char *err, size_t cap)
{
    char text[FEED_TOKEN_FILE_MAX + 1];
    memset(t, 0, sizeof *t);
    if (!path[0])
        return 0;
    int rc = feed_token_file_read(path, what, text, sizeof text, err, cap);
    if (rc != 0)
        goto out;
    size_t n = strlen(text);
    rc = FEED_EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c <= ' ' || c > '~') {
            feed_set_err(err, cap,
                         "%s: '%s': the token must be one line of visible ASCII without spaces "
                         "(byte %zu is 0x%02x)",
                         what, path, i, c);
            goto out;
        }
    }
    rc = FEED_ENOMEM;
    t->expect = malloc(BEARER_LEN + n + 1);
    if (!t->expect)
        goto out;
    memcpy(t->expect, BEARER, BEARER_LEN);
    memcpy(t->expect + BEARER_LEN, text, n);
    t->expect[BEARER_LEN + n] = '\0';
    t->expect_len = BEARER_LEN + n;
    rc = 0;
out:
    /* The file's bytes are a secret too: leave no copy on the stack. */
    explicit_bzero(text, sizeof text);
    return rc;
}

void feedd_token_free(feedd_token *t)
{
    if (t->expect) {
        explicit_bzero(t->expect, t->expect_len);
        free(t->expect);
    }
    memset(t, 0, sizeof *t);
}

bool feedd_token_required(const feedd_token *t)
{
    return t->expect != NULL;
}

bool feedd_token_matches(const feedd_token *t, const char *value, size_t len)
{
    if (!t->expect)
        return true;
    /* The scheme is not secret, and HTTP says it is case-insensitive. */
    if (len < BEARER_LEN || strncasecmp(value, BEARER, BEARER_LEN) != 0)
        return false;
    /* Every byte of the expected value is looked at, whatever value holds. */
    unsigned diff = len != t->expect_len;
    for (size_t i = BEARER_LEN; i < t->expect_len; i++)
        diff |= (unsigned char)t->expect[i] ^ (unsigned char)(i < len ? value[i] : 0);
    return diff == 0;
}

bool feedd_token_allows(const feedd_token *t, const grpc_metadata_array *md)
{
    const grpc_metadata *auth = NULL;
    size_t n = 0;
    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        if (grpc_slice_str_cmp(m->key, "authorization") == 0) {
            auth = m;
            n++;
        }
    }
    return !t->expect || (n == 1 && feedd_token_matches(t,
                                                        (const char *)GRPC_SLICE_START_PTR(auth->value),
                                                        GRPC_SLICE_LENGTH(auth->value)));
}

int feedd_tls_server_credentials(const char *cert, const char *key, const char *client_ca,
                                 grpc_server_credentials **out, char *err, size_t cap)
{
    char *cert_pem = NULL, *key_pem = NULL, *ca_pem = NULL;
    size_t n = 0;
    int rc = 0;
    *out = NULL;
    if (!cert[0])
        goto out;
    rc = read_capped(cert, "tls-cert", FEEDD_PEM_FILE_MAX, &cert_pem, &n, err, cap);
    if (rc == 0)
        rc = read_capped(key, "tls-key", FEEDD_PEM_FILE_MAX, &key_pem, &n, err, cap);
    if (rc == 0 && client_ca[0])
        rc = read_capped(client_ca, "tls-client-ca", FEEDD_PEM_FILE_MAX, &ca_pem, &n, err, cap);
    if (rc != 0)
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {key_pem, cert_pem};
    *out = grpc_ssl_server_credentials_create_ex(
        ca_pem, &pair, 1,
        ca_pem ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    rc = *out ? 0 : FEED_ENOMEM;
out:
    if (key_pem)
        explicit_bzero(key_pem, strlen(key_pem));
    free(cert_pem);
    free(key_pem);
    free(ca_pem);
    return rc;
}
