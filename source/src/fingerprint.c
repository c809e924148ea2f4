/*
 * The dataset fingerprint (feed/fingerprint.h): SHA-256 through libcrypto,
 * fed by dataset.c once at open. The writer belongs to its caller; no state
 * is shared between writers.
 */
#include "feed/fingerprint.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "feed/errors.h"

static const char TAG[] = "feedd-dataset-fingerprint-v1";

static void put(feed_fingerprint_writer *w, const void *p, size_t n)
{
    if (!w->failed && EVP_DigestUpdate(w->md, p, n) != 1)
        w->failed = 1;
}

static void put_u32(feed_fingerprint_writer *w, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, sizeof b);
}

static void put_u64(feed_fingerprint_writer *w, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, sizeof b);
}

int feed_fingerprint_begin(feed_fingerprint_writer *w, uint64_t count, uint32_t num_classes)
{
    w->failed = 0;
    w->md = EVP_MD_CTX_new();
    if (!w->md || EVP_DigestInit_ex(w->md, EVP_sha256(), NULL) != 1) {
        w->failed = 1;
        return FEED_ENOMEM;
    }
    put(w, TAG, sizeof TAG); /* with its NUL */
    put_u64(w, count);
    put_u32(w, num_classes);
    return 0;
}

void feed_fingerprint_add_class(feed_fingerprint_writer *w, const char *name)
{
    size_t n = strlen(name);
    put_u32(w, (uint32_t)n);
    put(w, name, n);
}

void feed_fingerprint_add_sample(feed_fingerprint_writer *w, uint32_t label, uint64_t length)
{
    put_u32(w, label);
    put_u64(w, length);
}

int feed_fingerprint_finish(feed_fingerprint_writer *w, char *hex)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    int rc = 0;
    hex[0] = '\0';
    if (w->failed || EVP_DigestFinal_ex(w->md, md, &md_len) != 1 || md_len != 32)
        rc = FEED_EIO;
    for (unsigned int i = 0; !rc && i < md_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(w->md);
    w->md = NULL;
    return rc;
}
