/* Text for error codes and sample statuses; see feed/errors.h. */
#include "feed/errors.h"

const char *feed_strerror(int err)
{
    switch (err) {
    case FEED_OK:
        return "success";
#define XX(name, val, msg)                                                                         \
    case FEED_##name:                                                                              \
        return msg;
        FEED_ERRNO_MAP(XX)
#undef XX
    default:
        return "unknown error";
    }
}

const char *feed_err_name(int err)
{
    switch (err) {
    case FEED_OK:
        return "FEED_OK";
#define XX(name, val, msg)                                                                         \
    case FEED_##name:                                                                              \
        return "FEED_" #name;
        FEED_ERRNO_MAP(XX)
#undef XX
    default:
        return "FEED_EUNKNOWN";
    }
}

const char *feed_sample_status_name(feed_sample_status s)
{
    static const char *const names[FEED_SAMPLE_STATUS_COUNT] = {
        "ok", "corrupt", "truncated", "not_jpeg", "empty", "too_large", "unsupported", "io_error",
    };
    if ((unsigned)s >= FEED_SAMPLE_STATUS_COUNT)
        return "unknown";
    return names[s];
}
