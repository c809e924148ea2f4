/*
 * Levelled logging to stderr or a user callback; see feed/log.h. Messages
 * are formatted into a stack buffer and escaped (feed_log_escape) before
 * either sink sees them, so no caller needs to escape what it quotes.
 */
#include "feed/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static feed_log_fn sink_fn;
static void *sink_user;
static feed_log_level current_level = FEED_LOG_INFO;

void feed_log_set_sink(feed_log_fn fn, void *user)
{
    sink_fn = fn;
    sink_user = user;
}

void feed_log_set_level(feed_log_level level)
{
    current_level = level;
}

feed_log_level feed_log_get_level(void)
{
    return current_level;
}

int feed_log_parse_level(const char *name)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* Length of the valid UTF-8 character at s (2..4 bytes, no overlong form or surrogate), or 0. */
static size_t utf8_char(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F) || (c == 0xF0 && s[1] < 0x90) ||
        (c == 0xF4 && s[1] > 0x8F))
        return 0;
    return n;
}

size_t feed_log_escape(char *dst, size_t cap, const char *src)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    while (*s) {
        size_t n = *s >= 0x80 ? utf8_char(s) : 1;
        /* C1 controls, U+0080..U+009F, are C2 80..C2 9F: some terminals act on them. */
        bool plain = n > 1 ? !(s[0] == 0xC2 && s[1] < 0xA0) : n == 1 && *s >= 0x20 && *s != 0x7f;
        size_t m = plain ? n : n > 1 ? 4 * n : 4;
        if (o + m >= cap)
            break;
        if (plain) {
            memcpy(dst + o, s, n);
            o += n;
        } else {
            for (size_t i = 0; i < (n ? n : 1); i++) {
                dst[o++] = '\\';
                dst[o++] = 'x';
                dst[o++] = hex[s[i] >> 4];
                dst[o++] = hex[s[i] & 15];
            }
        }
        s += n ? n : 1;
    }
    dst[o] = '\0';
    return o;
}

void feed_log(feed_log_level level, const char *fmt, ...)
{
    if (level > current_level)
        return;
    char raw[1024], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    feed_log_escape(msg, sizeof msg, raw);
    if (sink_fn) {
        sink_fn(sink_user, (int)level, msg);
        return;
    }
    static const char *const tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s\n", tm.tm_year + 1900,
            tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            tags[level], msg);
}
