/*
 * A per-decompressor arena for libjpeg's per-image allocations (JPOOL_IMAGE),
 * so a warm engine makes no malloc per image: libjpeg allocates its module
 * structures and row buffers anew for every image and frees them at
 * jpeg_abort; here those requests are carved from one block that is reset
 * instead of freed. Owned by the feed_engine that owns the decompressor; one
 * thread at a time.
 *
 * Virtual arrays (the whole-image coefficient buffer of progressive and
 * other multi-scan images) stay with libjpeg's own manager, where
 * max_memory_to_use caps them; everything else libjpeg allocates per image
 * counts against this arena's limit, and going past it is JERR_OUT_OF_MEMORY.
 */
#ifndef FEED_SERVER_ENGINE_JMEM_H
#define FEED_SERVER_ENGINE_JMEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

typedef struct feed_jmem {
    uint8_t *block; /* the arena: [0, used) handed out since the last reset */
    size_t cap, used;
    void *spills;                /* blocks taken when the arena ran out, freed at reset */
    size_t spilled;              /* bytes in them; the arena grows to used + spilled */
    size_t limit;                /* most bytes one image may take */
    size_t resets;               /* images done; the tests read it */
    size_t mallocs;              /* blocks allocated since creation; the tests read it */
    struct jpeg_memory_mgr orig; /* libjpeg's own methods, for the other pools */
} feed_jmem;

/*
 * Route the JPOOL_IMAGE allocations of c (created, nothing decoded yet) to m.
 * Sets c->client_data = m; the error handlers must not use client_data.
 */
void feed_jmem_install(j_common_ptr c, feed_jmem *m, size_t limit);

#endif
