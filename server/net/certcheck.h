/*
 * The validity window of feedd's TLS certificate, read at start so that an
 * expired or not-yet-valid one is a clear warning (and a metric) rather
 * than a server that starts and fails every handshake. Main thread.
 */
#ifndef FEED_SERVER_CERTCHECK_H
#define FEED_SERVER_CERTCHECK_H

#include <stddef.h>
#include <stdint.h>

/*
 * notBefore and notAfter of the first certificate in PEM file path, as
 * Unix seconds. 0 or FEED_EINVAL (err says which file and why).
 */
int feedd_cert_validity(const char *path, int64_t *not_before, int64_t *not_after, char *err,
                        size_t cap);
/* Days before notAfter from which a valid certificate is warned about. */
#define FEEDD_CERT_WARN_DAYS 7
/*
 * Read path's window, set feedd_tls_cert_valid and
 * feedd_tls_cert_not_after_seconds, and warn if the certificate is expired,
 * not valid yet, within FEEDD_CERT_WARN_DAYS of its end, or unreadable.
 */
void feedd_cert_check(const char *path);

#endif
