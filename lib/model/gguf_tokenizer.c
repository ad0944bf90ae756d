/* Builds a tokenizer from GGUF `tokenizer.ggml.*` metadata (the mapping is
 * documented on rlpi_tokenizer_spec). Only reads metadata: the tables stay
 * views into the mapped file while the builder copies them. */
#include "model/gguf_tokenizer.h"

#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* A special token id from the metadata: -1 when the key is absent; a key
 * that is present must hold a u32 (the type llama.cpp writes) that names a
 * token of the vocabulary (n_vocab), for BOS as for EOS, UNK and padding —
 * a file whose id is out of range is refused with the key and value rather
 * than losing that token silently. */
static int opt_id(const rlpi_gguf *g, const char *key, uint64_t n_vocab, int32_t *id)
{
    uint32_t v;
    *id = -1;
    if (!rlpi_gguf_find(g, key))
        return RLP_OK;
    if (rlpi_gguf_get_u32(g, key, &v) != RLP_OK)
        return rlpi_error_wrap("'%s'", key);
    if ((uint64_t)v >= n_vocab)
        return rlpi_error_set(RLP_E_FORMAT, "'%s' = %lu is not a token of the %llu-token vocabulary", key,
                              (unsigned long)v, (unsigned long long)n_vocab);
    *id = (int32_t)v;
    return RLP_OK;
}

static bool opt_bool(const rlpi_gguf *g, const char *key, bool dflt)
{
    bool v;
    return rlpi_gguf_find(g, key) && rlpi_gguf_get_bool(g, key, &v) == RLP_OK ? v : dflt;
}

/* NUL-terminated copy of a GGUF string (model/pre names are short) */
static int small_str(const rlpi_gguf *g, const char *key, char *buf, size_t cap, bool required)
{
    buf[0] = '\0';
    if (!rlpi_gguf_find(g, key))
        return required ? rlpi_error_set(RLP_E_NOT_FOUND, "%s: missing '%s'", g->source, key) : RLP_OK;
    rlpi_gguf_str s;
    int rc = rlpi_gguf_get_str(g, key, &s);
    if (rc)
        return rc;
    if (s.len >= cap || memchr(s.ptr, '\0', s.len))
        return rlpi_error_set(RLP_E_FORMAT, "%s: '%s' is not a short name", g->source, key);
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return RLP_OK;
}

int rlpi_tokenizer_from_gguf(rlpi_tokenizer **out, const rlpi_gguf *g)
{
    char model[32], pre[64];
    int rc = small_str(g, "tokenizer.ggml.model", model, sizeof model, true);
    if (!rc)
        rc = small_str(g, "tokenizer.ggml.pre", pre, sizeof pre, false);
    if (rc)
        return rc;
    rlpi_tokenizer_spec spec;
    rlpi_tokenizer_spec_init(&spec);
    if (!strcmp(model, "gpt2"))
        spec.model = RLPI_TOK_BYTE_BPE;
    else if (!strcmp(model, "llama"))
        spec.model = RLPI_TOK_SPM;
    else
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: tokenizer model '%s' (supported: gpt2, llama)", g->source, model);
    spec.pre_name = pre[0] ? pre : NULL;

    rlpi_gguf_str *tokens = NULL, *merges = NULL;
    uint64_t n_tokens = 0, n_merges = 0, n_scores = 0, n_types = 0;
    float *scores = NULL;
    int32_t *types = NULL;
    const char **tok_ptrs = NULL, **merge_ptrs = NULL;
    size_t *tok_lens = NULL, *merge_lens = NULL;
    char *tmpl = NULL;
    rc = rlpi_gguf_get_str_array(g, "tokenizer.ggml.tokens", &tokens, &n_tokens);
    if (!rc && rlpi_gguf_find(g, "tokenizer.ggml.merges"))
        rc = rlpi_gguf_get_str_array(g, "tokenizer.ggml.merges", &merges, &n_merges);
    if (!rc && rlpi_gguf_find(g, "tokenizer.ggml.scores"))
        rc = rlpi_gguf_get_f32_array(g, "tokenizer.ggml.scores", &scores, &n_scores);
    if (!rc && rlpi_gguf_find(g, "tokenizer.ggml.token_type"))
        rc = rlpi_gguf_get_i32_array(g, "tokenizer.ggml.token_type", &types, &n_types);
    if (!rc && ((scores && n_scores != n_tokens) || (types && n_types != n_tokens)))
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %llu tokens but %llu scores and %llu token types", g->source,
                            (unsigned long long)n_tokens, (unsigned long long)n_scores, (unsigned long long)n_types);
    if (!rc) {
        tok_ptrs = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof *tok_ptrs);
        tok_lens = malloc((size_t)(n_tokens ? n_tokens : 1) * sizeof *tok_lens);
        merge_ptrs = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *merge_ptrs);
        merge_lens = malloc((size_t)(n_merges ? n_merges : 1) * sizeof *merge_lens);
        if (!tok_ptrs || !tok_lens || !merge_ptrs || !merge_lens)
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", g->source);
    }
    if (!rc) {
        for (uint64_t i = 0; i < n_tokens; i++) {
            tok_ptrs[i] = tokens[i].ptr;
            tok_lens[i] = (size_t)tokens[i].len;
        }
        for (uint64_t i = 0; i < n_merges; i++) {
            merge_ptrs[i] = merges[i].ptr;
            merge_lens[i] = (size_t)merges[i].len;
        }
        if (rlpi_gguf_find(g, "tokenizer.chat_template")) {
            rlpi_gguf_str t;
            if ((rc = rlpi_gguf_get_str(g, "tokenizer.chat_template", &t)) == RLP_OK) {
                tmpl = malloc((size_t)t.len + 1);
                if (!tmpl)
                    rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", g->source);
                else {
                    memcpy(tmpl, t.ptr, (size_t)t.len);
                    tmpl[t.len] = '\0';
                }
            }
        }
    }
    if (!rc) {
        spec.n_vocab = (size_t)n_tokens;
        spec.tokens = tok_ptrs;
        spec.token_lens = tok_lens;
        spec.scores = scores;
        spec.token_types = types;
        spec.n_merges = (size_t)n_merges;
        spec.merges = merge_ptrs;
        spec.merge_lens = merge_lens;
        spec.merge_src = spec.model == RLPI_TOK_SPM && n_merges == 0 ? RLPI_MERGES_FROM_SCORES : RLPI_MERGES_FROM_LIST;
        if ((rc = opt_id(g, "tokenizer.ggml.bos_token_id", n_tokens, &spec.bos_id)) ||
            (rc = opt_id(g, "tokenizer.ggml.eos_token_id", n_tokens, &spec.eos_id)) ||
            (rc = opt_id(g, "tokenizer.ggml.unknown_token_id", n_tokens, &spec.unk_id)) ||
            (rc = opt_id(g, "tokenizer.ggml.padding_token_id", n_tokens, &spec.pad_id)))
            goto done;
        spec.add_bos = opt_bool(g, "tokenizer.ggml.add_bos_token", spec.model == RLPI_TOK_SPM);
        spec.byte_fallback = spec.model == RLPI_TOK_SPM;
        spec.spm_no_dummy_prefix = !opt_bool(g, "tokenizer.ggml.add_space_prefix", true);
        if (spec.model == RLPI_TOK_SPM)
            spec.normalizer = RLPI_NORM_SPM_ESCAPE;
        spec.chat_template = tmpl;
        rc = rlpi_tokenizer_build(out, &spec);
    }
done:
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    free(tok_ptrs);
    free(tok_lens);
    free(merge_ptrs);
    free(merge_lens);
    free(tmpl);
    return rc ? rlpi_error_wrap("%s: tokenizer", g->source) : RLP_OK;
}
