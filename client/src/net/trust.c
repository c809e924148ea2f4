/* The loader's TLS credentials and bearer token; see trust.h. */
#include "trust.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "feed/errors.h"
#include "feed/log.h"

#define TOKEN_MAX 4096u
#define PEM_MAX (1u << 20)

/* The whole of a PEM file, NUL-terminated (free it), or NULL with the reason logged. */
static char *read_pem(loader *l, const char *what, const char *path)
{
    char *buf = malloc(PEM_MAX + 1);
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f && buf)
        n = fread(buf, 1, PEM_MAX + 1, f);
    if (!f || !buf || ferror(f) || n == 0 || n > PEM_MAX || memchr(buf, 0, n)) {
        client_log(l, FEED_LOG_ERROR, "feed_loader_open: %s '%s': %s", what, path,
                   !f            ? strerror(errno)
                   : !buf        ? "out of memory"
                   : n > PEM_MAX ? "larger than 1 MiB"
                                 : "unreadable, empty or not text");
        /* What was read may be part of a key. */
        if (buf)
            explicit_bzero(buf, n);
        free(buf);
        buf = NULL;
    } else {
        buf[n] = '\0';
    }
    if (f)
        fclose(f);
    return buf;
}

/* TLS credentials from cfg's files, or insecure ones. 0, FEED_EINVAL or FEED_ENOMEM. */
static int make_credentials(loader *l)
{
    const feed_loader_config *cfg = &l->cfg;
    char *ca = NULL, *cert = NULL, *key = NULL;
    int rc = FEED_EINVAL;
    if (!cfg->tls_ca_file) {
        if (cfg->tls_cert_file || cfg->tls_key_file) {
            client_log(l, FEED_LOG_ERROR,
                       "feed_loader_open: tls_cert_file and tls_key_file need tls_ca_file");
            goto out;
        }
        l->creds = grpc_insecure_credentials_create();
        rc = l->creds ? 0 : FEED_ENOMEM;
        goto out;
    }
    if (!cfg->tls_cert_file != !cfg->tls_key_file) {
        client_log(l, FEED_LOG_ERROR,
                   "feed_loader_open: tls_cert_file and tls_key_file go together");
        goto out;
    }
    ca = read_pem(l, "tls_ca_file", cfg->tls_ca_file);
    if (!ca)
        goto out;
    if (cfg->tls_cert_file) {
        cert = read_pem(l, "tls_cert_file", cfg->tls_cert_file);
        key = cert ? read_pem(l, "tls_key_file", cfg->tls_key_file) : NULL;
        if (!key)
            goto out;
    }
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    l->creds = grpc_ssl_credentials_create(ca, cert ? &pair : NULL, NULL, NULL);
    rc = l->creds ? 0 : FEED_ENOMEM;
out:
    if (key)
        explicit_bzero(key, strlen(key));
    free(ca);
    free(cert);
    free(key);
    return rc;
}

/* The authorization metadata from cfg.token or $FEED_TOKEN. 0 or FEED_EINVAL. */
static int make_auth(loader *l)
{
    const char *token = l->cfg.token ? l->cfg.token : getenv("FEED_TOKEN");
    const char *from = l->cfg.token ? "token" : "FEED_TOKEN";
    size_t n = token ? strlen(token) : 0;
    bool bad = n > TOKEN_MAX;
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n && !bad; i++)
        bad = (unsigned char)token[i] <= ' ' || (unsigned char)token[i] > '~';
    if (bad) {
        client_log(l, FEED_LOG_ERROR,
                   "feed_loader_open: %s must be at most %u bytes of visible ASCII, no spaces",
                   from, TOKEN_MAX);
        return FEED_EINVAL;
    }
    char value[sizeof("Bearer ") + TOKEN_MAX];
    snprintf(value, sizeof(value), "Bearer %s", token);
    l->auth_md.key = grpc_slice_from_static_string("authorization");
    l->auth_md.value = grpc_slice_from_copied_string(value);
    explicit_bzero(value, sizeof(value));
    l->auth_md_count = 1;
    if (!l->cfg.tls_ca_file)
        client_log(l, FEED_LOG_WARN, "the bearer token goes to the servers without TLS");
    return 0;
}

int client_trust_open(loader *l)
{
    int rc = make_credentials(l);
    if (!rc)
        rc = make_auth(l);
    l->cfg.token = l->cfg.tls_ca_file = l->cfg.tls_cert_file = l->cfg.tls_key_file = NULL;
    return rc;
}

void client_trust_close(loader *l)
{
    if (l->creds)
        grpc_channel_credentials_release(l->creds);
    l->creds = NULL;
    if (l->auth_md_count)
        grpc_slice_unref(l->auth_md.value);
    l->auth_md_count = 0;
}
