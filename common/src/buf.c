/* Bounded growable buffer; see feed/buf.h. */
#include "feed/buf.h"

#include <stdlib.h>
#include <string.h>

#include "feed/errors.h"

void feed_buf_init(feed_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = limit;
}

void feed_buf_free(feed_buf *b)
{
    free(b->data);
    feed_buf_init(b, b->limit);
}

int feed_buf_reserve(feed_buf *b, size_t need)
{
    if (need <= b->cap)
        return 0;
    if (need > b->limit)
        return FEED_ETOOBIG;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > b->limit / 2 ? b->limit : cap * 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return FEED_ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int feed_buf_append(feed_buf *b, const void *p, size_t n)
{
    if (n > b->limit - b->len)
        return FEED_ETOOBIG;
    int rc = feed_buf_reserve(b, b->len + n);
    if (rc)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}
