/* String helpers; see feed/strutil.h. */
#include "feed/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
