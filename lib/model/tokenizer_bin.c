/* Loader of llama2.c's tokenizer.bin: int32 max_token_length, then per
 * token float32 score, int32 byte length, bytes (no count: tokens run to
 * the end of the file). The file is hostile: every length is checked
 * against what remains. Pieces spell ▁ as ' ', and <s>/</s> as "\n<s>\n";
 * both are put back into SentencePiece form before the engine sees them. */
#include "model/tokenizer.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS (1u << 22)

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

static float rd_f32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

int rlpi_tokenizer_from_llama2c(rlpi_tokenizer **out, const unsigned char *data, size_t len)
{
    if (len < 4)
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer.bin: %zu bytes is too short for a header", len);
    int32_t max_len = rd_i32(data);
    if (max_len <= 0 || max_len > (1 << 20))
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer.bin: max_token_length %d is out of range",
                              (int)max_len);
    /* First pass: count and validate. */
    size_t n = 0, off = 4, bytes = 0;
    while (off < len) {
        if (len - off < 8)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "tokenizer.bin: token %zu: header truncated at offset %zu", n, off);
        int32_t l = rd_i32(data + off + 4);
        if (l < 0 || l > max_len)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "tokenizer.bin: token %zu: length %d outside 0..%d", n, (int)l,
                                  (int)max_len);
        if ((size_t)l > len - off - 8)
            return rlpi_error_set(RLP_E_FORMAT,
                                  "tokenizer.bin: token %zu: length %d runs past the end of the file",
                                  n, (int)l);
        off += 8 + (size_t)l;
        bytes += 3 * (size_t)l + 1; /* ' ' → ▁ triples the size at most */
        if (++n > MAX_TOKENS)
            return rlpi_error_set(RLP_E_FORMAT, "tokenizer.bin: more than %u tokens", MAX_TOKENS);
    }
    if (n == 0)
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer.bin: no tokens");

    char **tokens = calloc(n, sizeof *tokens);
    size_t *lens = calloc(n, sizeof *lens);
    float *scores = calloc(n, sizeof *scores);
    int32_t *types = calloc(n, sizeof *types);
    char *arena = malloc(bytes ? bytes : 1);
    if (!tokens || !lens || !scores || !types || !arena) {
        free(tokens);
        free(lens);
        free(scores);
        free(types);
        free(arena);
        return rlpi_error_set(RLP_E_NOMEM, "tokenizer.bin: out of memory for %zu tokens", n);
    }
    off = 4;
    size_t a = 0;
    for (size_t i = 0; i < n; i++) {
        scores[i] = rd_f32(data + off);
        size_t l = (size_t)rd_i32(data + off + 4);
        const unsigned char *p = data + off + 8;
        off += 8 + l;
        tokens[i] = arena + a;
        /* "\n<s>\n" → "<s>": llama2.c's export wraps control pieces */
        if (i < 3 && l >= 2 && p[0] == '\n' && p[l - 1] == '\n') {
            p++;
            l -= 2;
        }
        size_t k = 0;
        for (size_t j = 0; j < l; j++) {
            if (p[j] == ' ') {
                memcpy(arena + a + k, "\xe2\x96\x81", 3);
                k += 3;
            } else {
                arena[a + k++] = (char)p[j];
            }
        }
        arena[a + k] = '\0';
        lens[i] = k;
        a += k + 1;
        types[i] = RLPI_TT_NORMAL;
        if (l == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>')
            types[i] = RLPI_TT_BYTE;
    }
    /* llama2.c (and Llama 2's SentencePiece model): 0 <unk>, 1 <s>, 2 </s>. */
    rlpi_tokenizer_spec spec;
    rlpi_tokenizer_spec_init(&spec);
    spec.model = RLPI_TOK_SPM;
    spec.merge_src = RLPI_MERGES_FROM_SCORES;
    spec.normalizer = RLPI_NORM_SPM_ESCAPE;
    spec.byte_fallback = true;
    spec.add_bos = true;
    if (n > 0 && strcmp(tokens[0], "<unk>") == 0) {
        types[0] = RLPI_TT_UNKNOWN;
        spec.unk_id = 0;
    }
    if (n > 1 && strcmp(tokens[1], "<s>") == 0) {
        types[1] = RLPI_TT_CONTROL;
        spec.bos_id = 1;
    }
    if (n > 2 && strcmp(tokens[2], "</s>") == 0) {
        types[2] = RLPI_TT_CONTROL;
        spec.eos_id = 2;
    }
    spec.n_vocab = n;
    spec.tokens = (const char *const *)tokens;
    spec.token_lens = lens;
    spec.scores = scores;
    spec.token_types = types;
    int rc = rlpi_tokenizer_build(out, &spec);
    free(tokens);
    free(lens);
    free(scores);
    free(types);
    free(arena);
    return rc;
}
