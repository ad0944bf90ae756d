/* libFuzzer target: the tokenizer a GGUF file's metadata describes
 * (tokenizer.ggml.*: model, pre-tokenizer, tokens, merges, scores, token
 * types, special ids; tokenizer.chat_template), as `rlp_tokenizer_load` and
 * the GGUF model loader build it from a downloaded file. Any input must be
 * refused or give a tokenizer that encodes, decodes and renders its chat
 * template within its vocabulary; a byte-level one must also convert to
 * tokenizer.json (what `rlpost` writes next to converted weights) that
 * loads back and encodes the same text to the same ids. Seeds:
 * tests/fuzz/make_gguf_tokenizer_seeds.py. */
#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "model/tokenizer.h"

#include "rlpost.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char text[] = "Hello world 123 the in\n\t \xc3\xa9\xe9\xbe\x98 <|im_end|> <s>\xf0\x9f\xa6\x99\xff";

static void check_ids(const rlpi_tokenizer *tok, const rlpi_ids *ids)
{
    size_t nv = rlpi_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < ids->n; i++)
        if (ids->v[i] < 0 || (size_t)ids->v[i] >= nv)
            abort();
}

static int encode(const rlpi_tokenizer *tok, bool special, rlpi_ids *ids)
{
    rlpi_text_seg seg = {text, sizeof text - 1, special};
    return rlpi_tokenizer_encode_segs(tok, &seg, 1, special, ids);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    *len = buf ? (size_t)n : 0;
    return buf;
}

/* tokenizer.json + tokenizer_config.json written from the metadata must
 * load back (as a Hugging Face folder would) and encode the same */
static void json_round_trip(const rlpi_gguf *g, const rlpi_tokenizer *tok)
{
    char dir[64], path[96], cpath[96];
    snprintf(dir, sizeof dir, "/tmp/fuzz_gguf_tok_%d", (int)getpid());
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
    mkdir(dir, 0700);
    if (rlpi_tokenizer_json_from_gguf(g, dir) == RLP_OK) {
        size_t n, cn;
        char *buf = slurp(path, &n), *cfg = slurp(cpath, &cn);
        if (!buf || !cfg)
            abort(); /* written, so readable */
        rlpi_tokenizer *back = NULL;
        if (rlpi_tokenizer_from_json(&back, buf, n, cfg, cn) != RLP_OK)
            abort(); /* we wrote it: it must load */
        rlpi_ids a = {NULL, 0, 0}, b = {NULL, 0, 0};
        int ra = encode(tok, false, &a), rb = encode(back, false, &b);
        if (ra != rb || (ra == RLP_OK && (a.n != b.n || memcmp(a.v, b.v, a.n * sizeof *a.v))))
            abort();
        rlpi_ids_free(&a);
        rlpi_ids_free(&b);
        rlpi_tokenizer_destroy(back);
        free(buf);
        free(cfg);
    }
    unlink(path);
    unlink(cpath);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size for ASan */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    rlpi_gguf *g = NULL;
    if (rlpi_gguf_open_memory(&g, buf, size, "fuzz") != RLP_OK) {
        free(buf);
        return 0;
    }
    rlpi_tokenizer *tok = NULL;
    if (rlpi_tokenizer_from_gguf(&tok, g) == RLP_OK) {
        for (int special = 0; special < 2; special++) {
            rlpi_ids ids = {NULL, 0, 0};
            if (encode(tok, special, &ids) == RLP_OK) {
                check_ids(tok, &ids);
                char *out;
                size_t ol;
                if (rlpi_tokenizer_decode(tok, ids.v, ids.n, special != 0, &out, &ol) == RLP_OK)
                    free(out);
            }
            rlpi_ids_free(&ids);
        }
        int kind = rlpi_chat_template_default(tok);
        rlpi_chat_msg m[3] = {{"system", "s"}, {"user", "<|im_end|>x"}, {"assistant", "<think>a</think>b"}};
        rlpi_ids ids = {NULL, 0, 0};
        if (kind != RLPI_CHAT_NONE && rlpi_chat_template_apply(tok, kind, m, 3, true, &ids) == RLP_OK)
            check_ids(tok, &ids);
        rlpi_ids_free(&ids);
        if (rlpi_tokenizer_model(tok) == RLPI_TOK_BYTE_BPE && size < 65536)
            json_round_trip(g, tok);
        rlpi_tokenizer_destroy(tok);
    }
    rlpi_gguf_close(g);
    free(buf);
    return 0;
}
