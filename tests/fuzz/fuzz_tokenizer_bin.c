/* libFuzzer target: llama2.c tokenizer.bin loading, then encoding the
 * input's own bytes (any bytes, ill-formed UTF-8 included) and decoding
 * them back. A crash, sanitizer report or leak here is a bug. */
#include "model/tokenizer.h"

#include "rlpost.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    rlpi_tokenizer *tok = NULL;
    if (rlpi_tokenizer_from_llama2c(&tok, data, size) != RLP_OK)
        return 0;
    size_t tlen = size > 256 ? 256 : size;
    for (int special = 0; special < 2; special++) {
        rlpi_text_seg seg = {(const char *)data + size - tlen, tlen, special != 0};
        rlpi_ids ids = {NULL, 0, 0};
        if (rlpi_tokenizer_encode_segs(tok, &seg, 1, true, &ids) == RLP_OK) {
            char *out;
            size_t ol;
            if (rlpi_tokenizer_decode(tok, ids.v, ids.n, false, &out, &ol) == RLP_OK)
                free(out);
        }
        rlpi_ids_free(&ids);
    }
    rlpi_tokenizer_destroy(tok);
    return 0;
}
