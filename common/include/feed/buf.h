/*
 * A growable byte buffer with a hard limit, for anything sized by input
 * (file contents, messages). Growing past `limit` fails with FEED_ETOOBIG
 * instead of allocating. Owned by one thread.
 */
#ifndef FEED_BUF_H
#define FEED_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct feed_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t limit;
} feed_buf;

void feed_buf_init(feed_buf *b, size_t limit);
void feed_buf_free(feed_buf *b);
/* Make room for at least `need` bytes in total; keeps the contents. 0 or FEED_ETOOBIG/FEED_ENOMEM. */
int feed_buf_reserve(feed_buf *b, size_t need);
int feed_buf_append(feed_buf *b, const void *p, size_t n);

#endif
