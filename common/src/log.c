/* Levelled logging to stderr or a user callback; see feed/log.h. */
#include "feed/log.h"

#include <stdarg.h>
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

void feed_log(feed_log_level level, const char *fmt, ...)
{
    if (level > current_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
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
