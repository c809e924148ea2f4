/*
 * FEED_EXPORT marks the functions of the installed headers (feed/client.h,
 * feed/errors.h, feed/transform.h): libfeedclient is built with hidden
 * visibility, so these, and only these, are exported from the shared library.
 */
#ifndef FEED_EXPORT_H
#define FEED_EXPORT_H

#if defined(__GNUC__)
#define FEED_EXPORT __attribute__((visibility("default")))
#else
#define FEED_EXPORT
#endif

#endif
