/* Name rules both sides share; see feed/names.h. */
#include "feed/names.h"

#include <string.h>

#include "feed/errors.h"

bool feed_name_char(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c && strchr(FEED_NAME_CHARS, c));
}

int feed_name_check(const char *name, size_t *bad)
{
    size_t i = 0;
    for (; name[i] && i < FEED_NAME_MAX; i++)
        if (!feed_name_char(name[i]))
            break;
    if (!name[i])
        return 0;
    if (bad)
        *bad = i;
    return FEED_EINVAL;
}
