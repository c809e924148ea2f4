/*
 * certcheck.h over OpenSSL (the library gRPC itself links on Debian 12).
 * Main thread, once at start.
 */
#include "certcheck.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "config.h"
#include "feed/errors.h"
#include "feed/log.h"
#include "feed/strutil.h"
#include "metrics.h"

static int unix_seconds(const ASN1_TIME *t, int64_t *out)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    if (!t || ASN1_TIME_to_tm(t, &tm) != 1)
        return FEED_EINVAL;
    *out = (int64_t)timegm(&tm);
    return 0;
}

int feedd_cert_validity(const char *path, int64_t *not_before, int64_t *not_after, char *err,
                        size_t cap)
{
    int rc = FEED_EINVAL;
    X509 *x = NULL;
    BIO *b = BIO_new_file(path, "r");
    if (b)
        x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    if (!x)
        feed_set_err(err, cap, "tls-cert: '%s' holds no PEM certificate OpenSSL can read", path);
    else if (unix_seconds(X509_get0_notBefore(x), not_before) != 0 ||
             unix_seconds(X509_get0_notAfter(x), not_after) != 0)
        feed_set_err(err, cap, "tls-cert: '%s': unreadable validity dates", path);
    else
        rc = 0;
    X509_free(x);
    BIO_free(b);
    return rc;
}

static void iso(int64_t t, char *out, size_t cap)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, cap, "%lld", (long long)t);
}

void feedd_cert_check(const char *path)
{
    char err[FEEDD_PATH_MAX + 200], from[32], until[32];
    int64_t nb = 0, na = 0, now = (int64_t)time(NULL);
    if (feedd_cert_validity(path, &nb, &na, err, sizeof err) != 0) {
        FEED_LOGW("%s: its validity is not checked", err);
        return;
    }
    bool valid = now >= nb && now <= na;
    atomic_store_explicit(&feedd_m.tls_cert_not_after, na, memory_order_relaxed);
    atomic_store_explicit(&feedd_m.tls_cert_valid, valid ? 1 : 0, memory_order_relaxed);
    iso(nb, from, sizeof from);
    iso(na, until, sizeof until);
    if (now > na)
        FEED_LOGW("tls-cert %s EXPIRED at %s (%lld hours ago): clients that verify it refuse "
                  "every connection; replace it and restart feedd",
                  path, until, (long long)((now - na) / 3600));
    else if (now < nb)
        FEED_LOGW("tls-cert %s is NOT VALID YET: valid from %s (in %lld hours; is this host's "
                  "clock right?): clients that verify it refuse every connection until then",
                  path, from, (long long)((nb - now) / 3600));
    else if (na - now < (int64_t)FEEDD_CERT_WARN_DAYS * 86400)
        FEED_LOGW("tls-cert %s expires at %s, in %lld hours: replace it and restart feedd", path,
                  until, (long long)((na - now) / 3600));
    else
        FEED_LOGI("tls-cert %s valid from %s until %s", path, from, until);
}
