/* CRC-32 (IEEE 802.3 / zlib polynomial 0xEDB88320, reflected, initial and
 * final XOR 0xFFFFFFFF): crc32("123456789") = 0xCBF43926, the value zlib's
 * crc32() gives. Our own table implementation, because zlib is not a
 * dependency. Detects accidental damage (torn writes, bit rot), not
 * tampering: it is no substitute for a cryptographic hash. */
#ifndef RLPI_CORE_CRC32_H
#define RLPI_CORE_CRC32_H

#include <stddef.h>
#include <stdint.h>

/* Continues a running CRC: start with crc = 0, feed the pieces in order.
 * Thread-safe (the tables are built once, behind pthread_once). */
uint32_t rlpi_crc32(uint32_t crc, const void *data, size_t len);

/* The CRC of A followed by B from crc1 = CRC(A), crc2 = CRC(B) and B's
 * length (zlib's crc32_combine): a file's CRC from its chunks' without a
 * second pass over the bytes. Thread-safe. */
uint32_t rlpi_crc32_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

#endif
