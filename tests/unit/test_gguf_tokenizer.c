/* The tokenizer built from SmolLM2's GGUF metadata (tokenizer.ggml.*) gives
 * exactly the ids of Hugging Face `tokenizers` on the 2,014 committed
 * strings (tests/reference/fixtures/smollm2.jsonl: GSM8K, unicode,
 * whitespace runs, code, special-token text), round-trips them through
 * decode (with and without special-token matching), and renders the 20 chat fixtures with the template it detects.
 * Skipped (77) when the model file is absent. */
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "rlpost.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_file(const rlp_tokenizer *t, const char *path, int chat)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "%s missing\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0, n_lines = 0, bad = 0;
    int32_t *ids = malloc(65536 * sizeof *ids);
    char *text = malloc(1 << 20);
    while (getline(&line, &cap, f) > 0) {
        json_error_t err;
        json_t *j = json_loads(line, 0, &err);
        if (!j)
            continue;
        json_t *want = json_object_get(j, "ids");
        size_t n = 0, tl = 0;
        int rc;
        if (chat) {
            json_t *m = json_object_get(j, "messages");
            rlp_chat_message msgs[16];
            size_t nm = json_array_size(m) < 16 ? json_array_size(m) : 16;
            for (size_t i = 0; i < nm; i++)
                msgs[i] = (rlp_chat_message){json_string_value(json_object_get(json_array_get(m, i), "role")),
                                             json_string_value(json_object_get(json_array_get(m, i), "content"))};
            rc = rlp_tokenizer_apply_chat_template(t, msgs, nm,
                                                   json_is_true(json_object_get(j, "add_generation_prompt")), ids,
                                                   65536, &n);
        } else {
            /* "ids": HF's encode (special-token text matched); "ids_plain",
             * where given: the same text with special matching off */
            const char *s = json_string_value(json_object_get(j, "text"));
            rc = rlp_tokenizer_encode(t, s, strlen(s), RLP_ENCODE_PARSE_SPECIAL, ids, 65536, &n);
            json_t *plain = json_object_get(j, "ids_plain");
            if (plain && rc == RLP_OK) {
                int32_t *p2 = malloc(65536 * sizeof *p2);
                size_t n2 = 0;
                int ok = rlp_tokenizer_encode(t, s, strlen(s), 0, p2, 65536, &n2) == RLP_OK &&
                         n2 == json_array_size(plain);
                for (size_t i = 0; ok && i < n2; i++)
                    ok = p2[i] == json_integer_value(json_array_get(plain, i));
                free(p2);
                if (!ok)
                    rc = -101;
            }
            if (rc == RLP_OK && (rlp_tokenizer_decode(t, ids, n, 0, text, 1 << 20, &tl) != RLP_OK ||
                                 tl != strlen(s) || memcmp(text, s, tl)))
                rc = -100;
        }
        int same = rc == RLP_OK && n == json_array_size(want);
        for (size_t i = 0; same && i < n; i++)
            same = ids[i] == json_integer_value(json_array_get(want, i));
        if (!same && bad++ < 5)
            fprintf(stderr, "mismatch (rc %d) on line %zu of %s\n", rc, n_lines + 1, path);
        n_lines++;
        json_decref(j);
    }
    printf("%s: %zu of %zu match\n", path, n_lines - bad, n_lines);
    free(line);
    free(ids);
    free(text);
    fclose(f);
    return bad != 0 || n_lines == 0;
}

int main(void)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT"), *dir = getenv("RLPOST_MODEL_DIR");
    char model[2048], fx[2048];
    if (dir && *dir)
        snprintf(model, sizeof model, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(model, sizeof model, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
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
    int fails = 0;
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/smollm2.jsonl", root ? root : ".");
    fails += check_file(t, fx, 0);
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/chat_smollm2.jsonl", root ? root : ".");
    fails += check_file(t, fx, 1);
    rlp_tokenizer_free(t);

    /* the tokenizer.json written from the GGUF metadata (what a policy
     * loaded from GGUF saves) gives the same ids and chat renderings */
    char tmpdir[] = "/tmp/rlpost-tokjson-XXXXXX", path[256];
    rlpi_gguf *g;
    if (!mkdtemp(tmpdir) || rlpi_gguf_open(&g, model) != RLP_OK) {
        fprintf(stderr, "setup: %s\n", rlp_error_last());
        return 1;
    }
    int wrc = rlpi_tokenizer_json_from_gguf(g, tmpdir);
    rlpi_gguf_close(g);
    snprintf(path, sizeof path, "%s/tokenizer.json", tmpdir);
    if (wrc != RLP_OK || rlp_tokenizer_load(&t, path) != RLP_OK) {
        fprintf(stderr, "tokenizer.json from GGUF: %s\n", rlp_error_last());
        return 1;
    }
    printf("written tokenizer.json (template %s):\n", rlp_tokenizer_chat_template(t));
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/smollm2.jsonl", root ? root : ".");
    fails += check_file(t, fx, 0);
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/chat_smollm2.jsonl", root ? root : ".");
    fails += check_file(t, fx, 1);
    rlp_tokenizer_free(t);
    remove(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", tmpdir);
    remove(path);
    rmdir(tmpdir);
    return fails ? 1 : 0;
}
