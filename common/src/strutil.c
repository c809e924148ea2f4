/* String helpers; see feed/strutil.h. */
#include "feed/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"

void feed_set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

int feed_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end = NULL;
    /* strtoull alone would skip white space and negate a leading '-'. */
    if (!s || !isdigit((unsigned char)s[0]))
        return FEED_EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return FEED_EINVAL;
    *out = v;
    return 0;
}

int feed_parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v;
    int rc = feed_parse_u64(s, lo, hi, &v);
    if (rc == 0)
        *out = (uint32_t)v;
    return rc;
}

int feed_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end = NULL;
    int rc = FEED_EINVAL;
    /* strtod alone would take white space, a sign, hex, "inf" and "nan". */
    if (s && (isdigit((unsigned char)s[0]) || s[0] == '.') && !strpbrk(s, "xX")) {
        errno = 0;
        double v = strtod(s, &end);
        if (errno == 0 && *end == '\0' && isfinite(v) && v >= lo && v <= hi) {
            *out = v;
            rc = 0;
        }
    }
    return rc;
}

int feed_utf8_valid(const char *s, size_t len, size_t *bad)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        size_t n = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4
                                        : 0;
        /* The second byte's range rules out overlong forms, surrogates and > U+10FFFF. */
        unsigned lo = 0x80, hi = 0xbf;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
        else if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
        bool ok = n != 0 && (n == 1 || c >= 0xc2) && c <= 0xf4 && n <= len - i;
        for (size_t k = 1; ok && k < n; k++) {
            unsigned b = p[i + k];
            ok = k == 1 ? b >= lo && b <= hi : (b & 0xc0) == 0x80;
        }
        if (!ok)
            break;
        i += n;
    }
    if (i < len && bad)
        *bad = i;
    return i == len;
}
