/* libFuzzer target: the TCP store server's request parser on arbitrary
 * bytes (anyone who reaches the port can send anything). Requests are
 * consumed one after another, as the server does from a connection's
 * buffer, until one is incomplete or malformed. Each accepted request must
 * lie inside the bytes given, with a known op, a key of 1..255 bytes, a
 * value within the limit and of the size its op requires; each refusal
 * must stay a refusal when more bytes follow (the server closes the
 * connection on it). Built by tests/fuzz/run-fuzzers.sh. */
#include "dist/store.h"

#include "rlpost.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* an exact-size copy, so that reading one byte past it is caught */
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    size_t off = 0;
    for (;;) {
        rlpi_store_request r;
        size_t used = 0;
        int rc = rlpi_store_parse_request(buf + off, size - off, &r, &used);
        if (rc == RLP_E_AGAIN || rc == RLP_E_FORMAT) {
            /* one byte fewer cannot make a whole request of them, nor
             * refuse what more bytes would still complete */
            if (size - off > 0) {
                int shorter = rlpi_store_parse_request(buf + off, size - off - 1, &r, &used);
                if (shorter == RLP_OK || (rc == RLP_E_AGAIN && shorter != RLP_E_AGAIN))
                    abort();
            }
            break;
        }
        if (rc != RLP_OK)
            abort();
        const unsigned char *k = (const unsigned char *)r.key;
        if (used == 0 || used > size - off)
            abort();
        if (r.op < 1 || r.op > 4 || r.key_len < 1 || r.key_len > RLPI_STORE_MAX_KEY ||
            r.value_len > RLPI_STORE_MAX_VALUE)
            abort();
        if (k != buf + off + 2 || r.value != k + r.key_len + 4 || used != 6 + r.key_len + r.value_len)
            abort();
        if (r.key_len != buf[off + 1] || (size_t)buf[off] != (size_t)r.op)
            abort();
        if ((r.op == 2 || r.op == 4) && r.value_len != 0)
            abort();
        if (r.op == 3 && r.value_len != 8)
            abort();
        /* touch every byte of key and value (ASan checks the range) */
        volatile unsigned sum = 0;
        for (size_t i = 0; i < r.key_len; i++)
            sum += k[i];
        for (size_t i = 0; i < r.value_len; i++)
            sum += r.value[i];
        (void)sum;
        off += used;
    }
    free(buf);
    return 0;
}
