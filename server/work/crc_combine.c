/*
 * CRC32C combination (see crc_combine.h), after zlib's crc32_combine: the
 * effect of n zero bytes on the CRC register is a linear map over GF(2),
 * built by repeated squaring of the one-zero-bit map.
 */
#include "crc_combine.h"

#include <string.h>

#define POLY 0x82F63B78u /* CRC32C, reflected */

static uint32_t mat_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

/* out = a * b (apply b, then a). out must not alias a or b. */
static void mat_mul(uint32_t *out, const uint32_t *a, const uint32_t *b)
{
    for (int i = 0; i < 32; i++)
        out[i] = mat_times(a, b[i]);
}

void feedd_crc_shift_init(feedd_crc_shift *op, size_t len)
{
    uint32_t power[32], tmp[32];
    /* One zero bit. */
    power[0] = POLY;
    for (int i = 1; i < 32; i++)
        power[i] = 1u << (i - 1);
    /* Eight zero bits: one zero byte. */
    for (int k = 0; k < 3; k++) {
        mat_mul(tmp, power, power);
        memcpy(power, tmp, sizeof tmp);
    }
    /* Identity, then multiply in power^(2^k) for each set bit of len. */
    for (int i = 0; i < 32; i++)
        op->mat[i] = 1u << i;
    while (len) {
        if (len & 1) {
            mat_mul(tmp, power, op->mat);
            memcpy(op->mat, tmp, sizeof tmp);
        }
        len >>= 1;
        if (len) {
            mat_mul(tmp, power, power);
            memcpy(power, tmp, sizeof tmp);
        }
    }
}

uint32_t feedd_crc_append(const feedd_crc_shift *op, uint32_t crc_a, uint32_t crc_b)
{
    return mat_times(op->mat, crc_a) ^ crc_b;
}
