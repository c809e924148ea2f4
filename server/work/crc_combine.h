/*
 * Combining CRC32Cs of consecutive blocks of equal length, so each worker
 * can checksum the samples it makes and the batch CRC (Batch.crc32c) costs
 * one 32x32 GF(2) matrix-vector product per sample instead of a second pass
 * over the pixels. Pure functions; thread-safe.
 */
#ifndef FEED_SERVER_CRC_COMBINE_H
#define FEED_SERVER_CRC_COMBINE_H

#include <stddef.h>
#include <stdint.h>

/* The operator "append `len` zero bytes" on a CRC32C register. */
typedef struct feedd_crc_shift {
    uint32_t mat[32];
} feedd_crc_shift;

void feedd_crc_shift_init(feedd_crc_shift *op, size_t len);
/*
 * CRC32C of A||B, from crc_a = feed_crc32c(0, A, ..) and crc_b =
 * feed_crc32c(0, B, len) where op was made for B's length len.
 */
uint32_t feedd_crc_append(const feedd_crc_shift *op, uint32_t crc_a, uint32_t crc_b);

#endif
