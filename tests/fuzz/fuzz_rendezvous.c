/* libFuzzer target: the process group's rendezvous document on arbitrary
 * bytes (any process that can write the rendezvous path can put anything
 * there). It must return a status, never crash, leak or overrun, and what
 * it accepts must be usable as it is: a shared-memory name that fits and
 * starts with '/', a positive pid, a full 128-byte NCCL id. Parsed for both
 * transports. Built by tests/fuzz/run-fuzzers.sh. */
#include "dist/comm.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    for (int32_t transport = RLP_COMM_SHM; transport <= RLP_COMM_NCCL; transport++) {
        rlpi_rendezvous_info info;
        memset(&info, 0xAB, sizeof info);
        if (rlpi_rendezvous_parse(buf, size, "fuzz", 2, transport, &info) == 0) {
            size_t n = strnlen(info.shm_name, sizeof info.shm_name);
            if (n == sizeof info.shm_name || info.pid <= 0 || info.world != 2 || info.transport != transport)
                abort();
            if (transport == RLP_COMM_SHM && info.shm_name[0] != '/')
                abort();
        }
    }
    free(buf);
    return 0;
}
