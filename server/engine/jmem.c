/*
 * The JPOOL_IMAGE arena (see jmem.h). libjpeg-turbo's allocator contract,
 * kept here: objects aligned to 32 bytes (we use 64), and every row of a
 * sample array padded to a multiple of 64 samples, since its SIMD upsampling
 * and colour conversion read and write whole vectors past a row's width.
 * Block arrays (JBLOCK rows) need only the object alignment.
 *
 * The method table in c->mem is patched in place, so libjpeg's own methods,
 * called for the permanent pool and for virtual arrays, still find their
 * private state at c->mem as they expect.
 */
#include "jmem.h"

#include <stdlib.h>
#include <string.h>

#include <jerror.h>

#define JMEM_ALIGN 64u
#define ROW_ALIGN 64u            /* samples; libjpeg-turbo rounds rows to 2 * ALIGN_SIZE */
#define FIRST_BLOCK (256u << 10) /* a baseline 4:2:0 decode of a few Mpx fits */

typedef struct spill {
    struct spill *next;
} spill;

static feed_jmem *arena_of(j_common_ptr c)
{
    return (feed_jmem *)c->client_data;
}

static void __attribute__((noreturn)) out_of_memory(j_common_ptr c, int which)
{
    c->err->msg_code = JERR_OUT_OF_MEMORY;
    c->err->msg_parm.i[0] = which;
    (*c->err->error_exit)(c);
    abort(); /* error_exit does not return */
}

static size_t round_up(size_t n, size_t a)
{
    return (n + a - 1) / a * a;
}

static void *arena_get(j_common_ptr c, size_t n)
{
    feed_jmem *m = arena_of(c);
    if (n > m->limit)
        out_of_memory(c, 100);
    n = round_up(n ? n : 1, JMEM_ALIGN);
    if (m->used + m->spilled + n > m->limit)
        out_of_memory(c, 101);
    if (m->used + n <= m->cap) {
        void *p = m->block + m->used;
        m->used += n;
        return p;
    }
    /* Spill: a block of its own until the next reset makes the arena big
     * enough. 64 spare bytes past the end, like the arena's neighbours. */
    spill *s = aligned_alloc(JMEM_ALIGN, JMEM_ALIGN + n + JMEM_ALIGN);
    if (!s)
        out_of_memory(c, 102);
    m->mallocs++;
    s->next = m->spills;
    m->spills = s;
    m->spilled += n;
    return (uint8_t *)s + JMEM_ALIGN;
}

static void *jm_alloc_small(j_common_ptr c, int pool, size_t n)
{
    if (pool != JPOOL_IMAGE)
        return arena_of(c)->orig.alloc_small(c, pool, n);
    return arena_get(c, n);
}

static void *jm_alloc_large(j_common_ptr c, int pool, size_t n)
{
    if (pool != JPOOL_IMAGE)
        return arena_of(c)->orig.alloc_large(c, pool, n);
    return arena_get(c, n);
}

static JSAMPARRAY jm_alloc_sarray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows)
{
    if (pool != JPOOL_IMAGE)
        return arena_of(c)->orig.alloc_sarray(c, pool, per_row, rows);
    size_t stride = round_up((size_t)per_row, ROW_ALIGN) * sizeof(JSAMPLE);
    JSAMPARRAY r = arena_get(c, (size_t)rows * sizeof(JSAMPROW));
    uint8_t *space = arena_get(c, (size_t)rows * stride);
    for (JDIMENSION i = 0; i < rows; i++)
        r[i] = (JSAMPROW)(space + (size_t)i * stride);
    return r;
}

static JBLOCKARRAY jm_alloc_barray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows)
{
    if (pool != JPOOL_IMAGE)
        return arena_of(c)->orig.alloc_barray(c, pool, per_row, rows);
    size_t stride = (size_t)per_row * sizeof(JBLOCK);
    JBLOCKARRAY r = arena_get(c, (size_t)rows * sizeof(JBLOCKROW));
    uint8_t *space = arena_get(c, (size_t)rows * stride);
    for (JDIMENSION i = 0; i < rows; i++)
        r[i] = (JBLOCKROW)(void *)(space + (size_t)i * stride);
    return r;
}

/* Forget this image's allocations; grow the arena to what it needed. */
static void reset(feed_jmem *m)
{
    size_t need = m->used + m->spilled;
    while (m->spills) {
        spill *s = m->spills;
        m->spills = s->next;
        free(s);
    }
    if (m->spilled) {
        size_t cap = m->cap ? m->cap : FIRST_BLOCK;
        while (cap < need)
            cap *= 2;
        free(m->block);
        m->block = aligned_alloc(JMEM_ALIGN, cap);
        m->cap = m->block ? cap : 0;
        if (m->block)
            m->mallocs++;
    }
    m->spilled = 0;
    m->used = 0;
    m->resets++;
}

static void jm_free_pool(j_common_ptr c, int pool)
{
    feed_jmem *m = arena_of(c);
    m->orig.free_pool(c, pool);
    if (pool == JPOOL_IMAGE)
        reset(m);
}

static void jm_self_destruct(j_common_ptr c)
{
    feed_jmem *m = arena_of(c);
    while (m->spills) {
        spill *s = m->spills;
        m->spills = s->next;
        free(s);
    }
    free(m->block);
    m->block = NULL;
    m->cap = 0;
    m->orig.self_destruct(c);
}

void feed_jmem_install(j_common_ptr c, feed_jmem *m, size_t limit)
{
    memset(m, 0, sizeof *m);
    m->limit = limit;
    m->orig = *c->mem;
    c->client_data = m;
    c->mem->alloc_small = jm_alloc_small;
    c->mem->alloc_large = jm_alloc_large;
    c->mem->alloc_sarray = jm_alloc_sarray;
    c->mem->alloc_barray = jm_alloc_barray;
    c->mem->free_pool = jm_free_pool;
    c->mem->self_destruct = jm_self_destruct;
}
