/*
 * Small string helpers shared by the libraries and the tools: an error-text
 * writer for functions that report into a caller's buffer, and strict
 * number parsers for command lines and config files. Thread-safe.
 */
#ifndef FEED_STRUTIL_H
#define FEED_STRUTIL_H

#include <stddef.h>
#include <stdint.h>

/* printf into err[0..cap); does nothing when err is NULL or cap is 0. */
void feed_set_err(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Parse a whole string as a decimal number in lo..hi. It must start with a
 * digit (no sign, no white space) and hold nothing after the digits. 0, or
 * FEED_EINVAL with *out untouched.
 */
int feed_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
int feed_parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out);
/* The same for a finite decimal number in lo..hi ("2", "0.5", "1e3"; no sign, no white space). */
int feed_parse_double(const char *s, double lo, double hi, double *out);

/*
 * Whether s[0..len) is well-formed UTF-8 as protobuf's `string` fields require
 * it (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
 * When it is not, *bad (if not NULL) gets the offset of the first byte of
 * the first ill-formed sequence.
 */
int feed_utf8_valid(const char *s, size_t len, size_t *bad);

#endif
