/*
 * What a blob's options default to and which locations are remote (see
 * feed/blob.h): what the door (blob.c) and each kind of blob (the local one
 * there, remote/remote_blob.c) read without opening anything. No state; any
 * thread.
 */
#include "feed/blob.h"

#include <string.h>

#define DEFAULT_MAX_READ_BYTES (64u << 20)

void feed_blob_options_default(feed_blob_options *o)
{
    memset(o, 0, sizeof(*o));
    o->max_read_bytes = DEFAULT_MAX_READ_BYTES;
    o->remote.endpoint = NULL;
    o->remote.region = NULL;
    o->remote.path_style = -1;
    o->remote.connections = 8;
    o->remote.readahead_bytes = 64u << 20;
    o->remote.timeout_ms = 30000;
    o->remote.retries = 4;
}

int feed_blob_is_remote(const char *location)
{
    return strncmp(location, "http://", 7) == 0 || strncmp(location, "https://", 8) == 0 ||
           strncmp(location, "s3://", 5) == 0;
}
