/* libFuzzer target: tokenizer.json loading, then encode/decode/stream with
 * whatever tokenizer the input describes. The input's first line, when it
 * starts with '#', is text to encode; the rest is the tokenizer.json. A
 * crash, sanitizer report or leak here is a bug. */
#include "model/tokenizer.h"

#include "rlpost.h"

#include <stdlib.h>
#include <string.h>

static void exercise(const rlpi_tokenizer *tok, const char *text, size_t len)
{
    for (int special = 0; special < 2; special++) {
        rlpi_text_seg seg = {text, len, special != 0};
        rlpi_ids ids = {NULL, 0, 0};
        if (rlpi_tokenizer_encode_segs(tok, &seg, 1, special != 0, &ids) == RLP_OK) {
            char *out;
            size_t ol;
            if (rlpi_tokenizer_decode(tok, ids.v, ids.n, special != 0, &out, &ol) == RLP_OK)
                free(out);
        }
        rlpi_ids_free(&ids);
    }
    rlpi_chat_msg m[2] = {{"system", "s<|im_end|>"}, {"user", "x"}};
    for (int k = RLPI_CHAT_CHATML; k <= RLPI_CHAT_LLAMA2; k++) {
        rlpi_ids ids = {NULL, 0, 0};
        (void)rlpi_chat_template_apply(tok, k, m, 2, true, &ids);
        rlpi_ids_free(&ids);
    }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *text = "Hello world 123 \xe9\xbe\x98 <|im_end|> \xf0\x9f\xa6\x99\xff";
    size_t tlen = strlen(text);
    const char *json = (const char *)data;
    size_t jlen = size;
    if (size > 0 && data[0] == '#') {
        const unsigned char *nl = memchr(data, '\n', size);
        if (nl) {
            text = (const char *)data + 1;
            tlen = (size_t)(nl - data) - 1;
            json = (const char *)nl + 1;
            jlen = size - (size_t)(nl - data) - 1;
        }
    }
    rlpi_tokenizer *tok = NULL;
    if (rlpi_tokenizer_from_json(&tok, json, jlen, NULL, 0) == RLP_OK) {
        exercise(tok, text, tlen);
        rlpi_tokenizer_destroy(tok);
    }
    return 0;
}
