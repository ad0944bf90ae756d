/* libFuzzer target: rlpi_hf_config_parse on arbitrary text; an accepted
 * config must render and re-parse to the same struct. Built by
 * tests/fuzz/run-fuzzers.sh. */
#include "model/hf_config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_model_config c, c2;
    if (rlpi_hf_config_parse(buf, size, "fuzz", &c) == 0) {
        char *s;
        if (rlpi_hf_config_dump(&c, &s) != 0)
            abort();
        if (rlpi_hf_config_parse(s, strlen(s), "redump", &c2) != 0 || memcmp(&c, &c2, sizeof c))
            abort();
        free(s);
    }
    free(buf);
    return 0;
}
