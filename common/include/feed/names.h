/*
 * Names a loader sends feedd and feedd keys its shares, metrics and reports
 * by (SessionOpen.job and any later name with the same rules): at most
 * FEED_NAME_MAX bytes, each an ASCII letter, a digit or one of
 * FEED_NAME_CHARS. Defined once for both sides, so that a name the client
 * accepts is one feedd accepts. Pure; any thread.
 */
#ifndef FEED_NAMES_H
#define FEED_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define FEED_NAME_MAX 128
#define FEED_NAME_CHARS "_.-:/@+="

/*
 * 0 when name holds at most FEED_NAME_MAX bytes, each a letter, a digit or
 * one of FEED_NAME_CHARS; "" passes (a caller that needs a name refuses ""
 * itself). FEED_EINVAL otherwise, with *bad (may be NULL) set to the offset
 * of the first byte that breaks the rules: FEED_NAME_MAX when the name is too
 * long, else a byte outside the set.
 */
int feed_name_check(const char *name, size_t *bad);
/* Whether c may stand in a name (for a caller that makes a name of other text: the bytes that
 * may not are replaced). */
bool feed_name_char(char c);

#endif
