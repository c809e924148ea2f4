/*
 * Fuzz target: opening a pack (feed_dataset_open on a file; the reader is
 * source/src/pack.c), then reading every class name, label and sample byte.
 * The input is the pack file. It goes into a memfd that is opened through
 * /proc/self/fd, so the reader maps it exactly as it maps a file on disk.
 * Before that the header CRC is recomputed over [0, data_offset) whenever the
 * header allows it: otherwise almost every mutation would stop at the
 * checksum and the checks behind it would never run (the mismatch itself is
 * covered by tests/unit/test_pack.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "feed/crc32c.h"
#include "feed/dataset.h"
#include "feed/pack.h"
#include "fuzz.h"

static int memfd = -1;
/* Where every byte read ends up, so no read is optimised away. */
static volatile uint32_t sink;

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The file as the fuzzer meant it: data with the CRC made to match, if it can be. */
static void fix_crc(uint8_t *p, size_t size)
{
    static const uint8_t zero[4];
    if (size < FEED_PACK_HEADER_BYTES)
        return;
    uint64_t end = get_u64(p + FEED_PACK_OFF_DATA);
    if (end < FEED_PACK_OFF_CRC + 4 || end > size)
        return;
    uint32_t crc = feed_crc32c(0, p, FEED_PACK_OFF_CRC);
    crc = feed_crc32c(crc, zero, sizeof zero);
    crc = feed_crc32c(crc, p + FEED_PACK_OFF_CRC + 4, (size_t)end - FEED_PACK_OFF_CRC - 4);
    for (int i = 0; i < 4; i++)
        p[FEED_PACK_OFF_CRC + i] = (uint8_t)(crc >> (8 * i));
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, p + done, n - done, (off_t)done);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

/* Everything a server would touch in an open pack. */
static void read_everything(const feed_dataset *ds)
{
    feed_buf scratch;
    feed_buf_init(&scratch, 1u << 20);
    uint64_t n = feed_dataset_count(ds);
    uint32_t classes = feed_dataset_num_classes(ds);
    uint32_t acc = 0;
    for (uint32_t c = 0; c < classes; c++) {
        const char *name = feed_dataset_class_name(ds, c);
        if (!name)
            abort();
        acc = feed_crc32c(acc, name, strlen(name));
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *data;
        size_t len;
        if (feed_dataset_label(ds, i) >= classes)
            abort();
        if (feed_dataset_read(ds, i, &scratch, &data, &len) == 0)
            acc = feed_crc32c(acc, data, len);
    }
    sink = acc;
    feed_buf_free(&scratch);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    feed_dataset *ds = NULL;
    uint8_t *copy = malloc(size ? size : 1);
    if (memfd < 0)
        memfd = memfd_create("fuzz-pack", MFD_CLOEXEC);
    if (!copy || memfd < 0)
        abort();
    memcpy(copy, data, size);
    fix_crc(copy, size);
    if (ftruncate(memfd, 0) != 0 || write_all(memfd, copy, size) != 0)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    feed_dataset_limits lim;
    feed_dataset_limits_default(&lim);
    lim.max_samples = 1u << 20;
    lim.max_sample_bytes = 1u << 20;
    if (feed_dataset_open(path, &lim, &ds, err, sizeof err) == 0)
        read_everything(ds);
    else if (ds != NULL || err[0] == '\0')
        abort(); /* a failed open returns no dataset and says why */
    feed_dataset_close(ds);
    free(copy);
    return 0;
}
