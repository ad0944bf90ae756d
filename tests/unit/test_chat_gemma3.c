/* Gemma 3's chat template on the real Gemma 3 270M GGUF's tokenizer: the
 * GGUF carries no template, so the default comes from its <start_of_turn>
 * token; every conversation of fixtures/chat_gemma3.jsonl (transformers'
 * rendering of Google's template, ids from llama.cpp's tokenizer on the same
 * file: tests/reference/make_chat_template_fixtures.py) gives the reference
 * ids, with exactly one BOS although the GGUF asks for add_bos. Skipped
 * (77) when the model file is absent. */
#include "rlpost.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT"), *dir = getenv("RLPOST_MODEL_DIR");
    char model[2048], fx[2048];
    if (dir && *dir)
        snprintf(model, sizeof model, "%s/gemma-3-270m-q4_k_m.gguf", dir);
    else
        snprintf(model, sizeof model, "%s/models/gemma-3-270m-q4_k_m.gguf", root ? root : ".");
    FILE *probe = fopen(model, "rb");
    if (!probe) {
        printf("skipped: %s is absent (run scripts/fetch-model.sh)\n", model);
        return 77;
    }
    fclose(probe);
    rlp_tokenizer *t;
    if (rlp_tokenizer_load(&t, model) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    const char *name = rlp_tokenizer_chat_template(t);
    if (!name || strcmp(name, "gemma3") != 0) {
        fprintf(stderr, "default template is %s, not gemma3\n", name ? name : "(none)");
        return 1;
    }
    int32_t bos = -1;
    if (rlp_tokenizer_special_id(&bos, t, RLP_TOKEN_BOS) != RLP_OK) {
        fprintf(stderr, "no BOS: %s\n", rlp_error_last());
        return 1;
    }
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/chat_gemma3.jsonl", root ? root : ".");
    FILE *f = fopen(fx, "r");
    if (!f) {
        fprintf(stderr, "%s missing\n", fx);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0, rows = 0, bad = 0;
    int32_t ids[4096];
    while (getline(&line, &cap, f) > 0) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!j) {
            bad++;
            continue;
        }
        json_t *m = json_object_get(j, "messages"), *want = json_object_get(j, "ids");
        rlp_chat_message msgs[16];
        size_t nm = json_array_size(m) < 16 ? json_array_size(m) : 16, n = 0, n_bos = 0;
        for (size_t i = 0; i < nm; i++)
            msgs[i] = (rlp_chat_message){json_string_value(json_object_get(json_array_get(m, i), "role")),
                                         json_string_value(json_object_get(json_array_get(m, i), "content"))};
        int rc = rlp_tokenizer_apply_chat_template(
            t, msgs, nm, json_is_true(json_object_get(j, "add_generation_prompt")), ids, 4096, &n);
        int same = rc == RLP_OK && n == json_array_size(want);
        for (size_t i = 0; same && i < n; i++)
            same = ids[i] == json_integer_value(json_array_get(want, i));
        for (size_t i = 0; rc == RLP_OK && i < n; i++)
            n_bos += ids[i] == bos;
        if (!same || n_bos != 1) {
            if (bad < 5)
                fprintf(stderr, "row %zu: rc %d, %zu ids (want %zu), %zu BOS: %s\n", rows + 1, rc, n,
                        json_array_size(want), n_bos, json_string_value(json_object_get(j, "text")));
            bad++;
        }
        rows++;
        json_decref(j);
    }
    printf("%s: %zu of %zu conversations match (one BOS each)\n", fx, rows - bad, rows);
    free(line);
    fclose(f);
    rlp_tokenizer_free(t);
    return bad || rows < 20 ? 1 : 0;
}
