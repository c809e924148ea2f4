/*
 * AWS Signature Version 4 for the remote blob's S3 requests: the canonical
 * request, the string to sign, the derived signing key and the Authorization
 * header, with libcrypto's SHA-256 and HMAC. Pure functions (no I/O, no
 * state); any thread. Checked against AWS's published examples in
 * tests/unit/test_remote.c and against a real S3-compatible server that
 * verifies signatures in tests/remote.
 *
 * Every intermediate that depends on the secret (the signing key chain) lives
 * on the stack and is wiped before return.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#include "feed/errors.h"
#include "feed/remote.h"

/* The canonical request holds the URI (capped), a few short headers and hashes. */
#define CANON_CAP (3u * FEED_REMOTE_MAX_URL + 2u * FEED_REMOTE_MAX_SECRET + 1024u)

typedef struct strbuf {
    char *p;
    size_t len, cap;
    int over;
} strbuf;

static void sb_add(strbuf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->over || n >= b->cap - b->len) {
        b->over = 1;
        return;
    }
    memcpy(b->p + b->len, s, n + 1);
    b->len += n;
}

static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int sha256_hex(const char *s, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int md_len = 0;
    int rc = FEED_EIO;
    if (EVP_Digest(s, n, md, &md_len, EVP_sha256(), NULL) == 1 && md_len == 32) {
        hex(md, 32, out);
        rc = 0;
    }
    return rc;
}

static int hmac(const unsigned char *key, size_t key_len, const char *msg, unsigned char out[32])
{
    unsigned int len = 0;
    int rc = FEED_EIO;
    if (HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg, strlen(msg), out, &len) !=
            NULL &&
        len == 32)
        rc = 0;
    return rc;
}

int feed_remote_uri_encode(const char *s, int keep_slash, char *out, size_t out_cap)
{
    static const char digits[] = "0123456789ABCDEF";
    size_t o = 0;
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int plain = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                    (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' || *p == '~' ||
                    (keep_slash && *p == '/');
        if (o + (plain ? 1u : 3u) >= out_cap) {
            rc = FEED_ETOOBIG;
            break;
        }
        if (plain) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = digits[*p >> 4];
            out[o++] = digits[*p & 15];
        }
    }
    if (out_cap > 0)
        out[o < out_cap ? o : out_cap - 1] = '\0';
    return rc;
}

/* The date part (YYYYMMDD) of amz_date, or "" when amz_date is malformed. */
static void date_of(const char *amz_date, char out[9])
{
    out[0] = '\0';
    if (strlen(amz_date) == 16 && amz_date[8] == 'T' && amz_date[15] == 'Z') {
        memcpy(out, amz_date, 8);
        out[8] = '\0';
    }
}

int feed_sigv4_authorization(const feed_sigv4_request *r, const char *access_key,
                             const char *secret_key, char *out, size_t out_cap)
{
    char canon[CANON_CAP];
    char signed_headers[512];
    char scope[128];
    char to_sign[512];
    char canon_hash[65], sig_hex[65];
    char date[9];
    char k_secret[FEED_REMOTE_MAX_SECRET + 8];
    unsigned char k_date[32], k_region[32], k_service[32], k_signing[32], sig[32];
    strbuf c = {canon, 0, sizeof canon, 0};
    strbuf sh = {signed_headers, 0, sizeof signed_headers, 0};
    int rc = FEED_ETOOBIG;

    canon[0] = signed_headers[0] = '\0';
    date_of(r->amz_date, date);
    if (!date[0]) {
        rc = FEED_EINVAL;
        goto out;
    }
    sb_add(&c, r->method);
    sb_add(&c, "\n");
    sb_add(&c, r->canonical_uri);
    sb_add(&c, "\n");
    sb_add(&c, r->canonical_query);
    sb_add(&c, "\n");
    for (size_t i = 0; i < r->n_headers; i++) {
        sb_add(&c, r->headers[i].name);
        sb_add(&c, ":");
        sb_add(&c, r->headers[i].value);
        sb_add(&c, "\n");
        if (i > 0)
            sb_add(&sh, ";");
        sb_add(&sh, r->headers[i].name);
    }
    sb_add(&c, "\n");
    sb_add(&c, signed_headers);
    sb_add(&c, "\n");
    sb_add(&c, r->payload_hash);
    if (c.over || sh.over)
        goto out;
    if (snprintf(scope, sizeof scope, "%s/%s/%s/aws4_request", date, r->region, r->service) >=
        (int)sizeof scope)
        goto out;
    rc = sha256_hex(canon, c.len, canon_hash);
    if (rc < 0)
        goto out;
    rc = FEED_ETOOBIG;
    if (snprintf(to_sign, sizeof to_sign, "AWS4-HMAC-SHA256\n%s\n%s\n%s", r->amz_date, scope,
                 canon_hash) >= (int)sizeof to_sign)
        goto out;
    if (snprintf(k_secret, sizeof k_secret, "AWS4%s", secret_key) >= (int)sizeof k_secret)
        goto out;
    rc = hmac((const unsigned char *)k_secret, strlen(k_secret), date, k_date);
    if (rc == 0)
        rc = hmac(k_date, 32, r->region, k_region);
    if (rc == 0)
        rc = hmac(k_region, 32, r->service, k_service);
    if (rc == 0)
        rc = hmac(k_service, 32, "aws4_request", k_signing);
    if (rc == 0)
        rc = hmac(k_signing, 32, to_sign, sig);
    if (rc < 0)
        goto out;
    hex(sig, 32, sig_hex);
    if (snprintf(out, out_cap, "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
                 access_key, scope, signed_headers, sig_hex) >= (int)out_cap)
        rc = FEED_ETOOBIG;
out:
    OPENSSL_cleanse(k_secret, sizeof k_secret);
    OPENSSL_cleanse(k_date, sizeof k_date);
    OPENSSL_cleanse(k_region, sizeof k_region);
    OPENSSL_cleanse(k_service, sizeof k_service);
    OPENSSL_cleanse(k_signing, sizeof k_signing);
    return rc;
}
