/* libFuzzer target: rlpi_llama2c_parse on arbitrary bytes must return a
 * status without reading outside the buffer. Built by
 * tests/fuzz/run-fuzzers.sh. */
#include "model/llama2c.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    if (rlpi_llama2c_parse(buf, size, "fuzz", &c, &w) == 0) {
        const rlpi_tensor *h = rlpi_weights_find(&w, "lm_head.weight");
        if (!h || (h->alias_of >= 0) != c.tie_embeddings)
            abort();
    }
    rlpi_weights_free(&w);
    free(buf);
    return 0;
}
