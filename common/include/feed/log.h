/*
 * Levelled logging. Programs (feedd, the tools) log to stderr; a library user
 * (libfeedclient) installs a callback instead, and the library never prints.
 * The sink and level are process-wide and set before threads start.
 */
#ifndef FEED_LOG_H
#define FEED_LOG_H

#include <stddef.h>

typedef enum feed_log_level {
    FEED_LOG_ERROR = 0,
    FEED_LOG_WARN = 1,
    FEED_LOG_INFO = 2,
    FEED_LOG_DEBUG = 3,
} feed_log_level;

typedef void (*feed_log_fn)(void *user, int level, const char *message);

/* fn == NULL restores the default sink (stderr with a timestamp). */
void feed_log_set_sink(feed_log_fn fn, void *user);
void feed_log_set_level(feed_log_level level);
feed_log_level feed_log_get_level(void);
/* Parses "error", "warn", "info", "debug"; returns -1 if unknown. */
int feed_log_parse_level(const char *name);

/*
 * Every message, to stderr or a callback, is escaped (feed_log_escape): it
 * quotes untrusted text (member names, paths, what a server or client sent)
 * that must neither forge a line nor reach a terminal as a control sequence.
 */
void feed_log(feed_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Copies src into dst (cap > 0 bytes, always NUL-terminated) with each C0
 * control byte (line breaks included), DEL, C1 control (U+0080..U+009F) and
 * byte that is not part of valid UTF-8 written as \xNN; other UTF-8 passes
 * unchanged. Stops before a character or escape that would not fit whole.
 * Returns the length written. Thread-safe. Also used by libfeedclient's log
 * queue, which formats its own messages.
 */
size_t feed_log_escape(char *dst, size_t cap, const char *src);

#define FEED_LOGE(...) feed_log(FEED_LOG_ERROR, __VA_ARGS__)
#define FEED_LOGW(...) feed_log(FEED_LOG_WARN, __VA_ARGS__)
#define FEED_LOGI(...) feed_log(FEED_LOG_INFO, __VA_ARGS__)
#define FEED_LOGD(...)                                                                             \
    do {                                                                                           \
        if (feed_log_get_level() >= FEED_LOG_DEBUG)                                                \
            feed_log(FEED_LOG_DEBUG, __VA_ARGS__);                                                 \
    } while (0)

#endif
