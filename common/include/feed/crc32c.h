/* CRC32C (Castagnoli), as carried in feed.v1.Batch.crc32c. Thread-safe. */
#ifndef FEED_CRC32C_H
#define FEED_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC: start with crc = 0. crc32c("123456789") == 0xE3069283. */
uint32_t feed_crc32c(uint32_t crc, const void *data, size_t len);

#endif
