/* Tokenizer throughput on GSM8K text: encode (first pass with a cold word
 * cache, then warm passes) and decode, in MB/s of UTF-8 input, for each
 * tokenizer given. Usage: bench_tokenizer GSM8K_JSONL TOKENIZER...
 * (meson passes ../shared/data/gsm8k/train.jsonl and the SmolLM2/Qwen3
 * tokenizer files; missing files are skipped). */
#include "rlpost.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s GSM8K_JSONL TOKENIZER...\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        printf("skip: %s not present\n", argv[1]);
        return 77;
    }
    /* texts: every question and answer, one string each */
    size_t n = 0, cap = 0, bytes = 0;
    char **texts = NULL;
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        const char *keys[2] = {"question", "answer"};
        for (int k = 0; k < 2 && row; k++) {
            const char *s = json_string_value(json_object_get(row, keys[k]));
            if (!s)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                texts = realloc(texts, cap * sizeof *texts);
            }
            texts[n++] = strdup(s);
            bytes += strlen(s);
        }
        json_decref(row);
    }
    free(line);
    fclose(f);
    printf("GSM8K: %zu strings, %.2f MB\n", n, bytes / 1e6);
    int32_t *ids = malloc(65536 * sizeof *ids);
    char *out = malloc(1 << 20);
    for (int a = 2; a < argc; a++) {
        if (access(argv[a], R_OK) != 0) {
            printf("%s: not present, skipped\n", argv[a]);
            continue;
        }
        rlp_tokenizer *tok;
        if (rlp_tokenizer_load(&tok, argv[a]) != RLP_OK) {
            printf("%s: %s\n", argv[a], rlp_error_last());
            return 1;
        }
        size_t total_ids = 0, m;
        for (int pass = 0; pass < 3; pass++) {
            double t0 = now();
            total_ids = 0;
            for (size_t i = 0; i < n; i++) {
                if (rlp_tokenizer_encode(tok, texts[i], strlen(texts[i]), 0, ids, 65536, &m)) {
                    printf("encode failed: %s\n", rlp_error_last());
                    return 1;
                }
                total_ids += m;
            }
            double dt = now() - t0;
            printf("%s: encode pass %d (%s cache): %.1f MB/s, %.2f M tokens/s, %zu tokens\n",
                   argv[a], pass, pass ? "warm" : "cold", bytes / 1e6 / dt, total_ids / 1e6 / dt,
                   total_ids);
        }
        double t0 = now();
        size_t out_bytes = 0;
        for (size_t i = 0; i < n; i++) {
            rlp_tokenizer_encode(tok, texts[i], strlen(texts[i]), 0, ids, 65536, &m);
            size_t l;
            rlp_tokenizer_decode(tok, ids, m, 0, out, 1 << 20, &l);
            out_bytes += l;
        }
        double dt = now() - t0;
        printf("%s: encode+decode: %.1f MB/s\n", argv[a], out_bytes / 1e6 / dt);
        rlp_tokenizer_free(tok);
    }
    for (size_t i = 0; i < n; i++)
        free(texts[i]);
    free(texts);
    free(ids);
    free(out);
    return 0;
}
