/* Writes a Hugging Face tokenizer.json (+ tokenizer_config.json) for a
 * byte-level BPE tokenizer described by GGUF metadata, so that a policy
 * loaded from GGUF saves a folder transformers can use. Built with jansson;
 * the pre-tokenizer follows the GGUF `tokenizer.ggml.pre` name. */
#include "model/gguf_tokenizer.h"

#include "core/error.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *byte_level(bool use_regex)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                     "use_regex", use_regex);
}

static json_t *pre_tokenizer(const char *regex, bool digits)
{
    json_t *seq = json_array();
    if (digits)
        json_array_append_new(seq, json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", 1));
    if (regex)
        json_array_append_new(seq, json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", regex,
                                             "behavior", "Isolated", "invert", 0));
    json_array_append_new(seq, byte_level(regex == NULL));
    return json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", seq);
}

/* NUL-terminated copy of a GGUF string view (may contain any bytes but NUL) */
static char *dup_view(rlpi_gguf_str v)
{
    if (memchr(v.ptr, '\0', v.len))
        return NULL;
    char *s = malloc(v.len + 1);
    if (s) {
        memcpy(s, v.ptr, v.len);
        s[v.len] = '\0';
    }
    return s;
}

static int dump(json_t *j, const char *path)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(j, tmp, JSON_COMPACT | JSON_ENSURE_ASCII) != 0)
        return rlpi_error_set(RLP_E_IO, "%s: cannot write", tmp);
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return rlpi_error_set(RLP_E_IO, "%s: cannot rename into place", path);
    }
    return RLP_OK;
}

int rlpi_tokenizer_json_from_gguf(const rlpi_gguf *g, const char *dir)
{
    rlpi_gguf_str model = {0}, pre = {0};
    int rc = rlpi_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (rc)
        return rc;
    if (model.len != 4 || memcmp(model.ptr, "gpt2", 4))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: writing tokenizer.json for tokenizer model '%.*s' "
                              "(only byte-level BPE, gpt2)", g->source, (int)(model.len < 32 ? model.len : 32), model.ptr);
    char pre_name[64] = "";
    if (rlpi_gguf_find(g, "tokenizer.ggml.pre") && rlpi_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == RLP_OK &&
        pre.len < sizeof pre_name)
        snprintf(pre_name, sizeof pre_name, "%.*s", (int)pre.len, pre.ptr);
    const char *regex;
    bool digits, nfc, ignore_merges;
    if ((rc = rlpi_tokenizer_pre_split(pre_name[0] ? pre_name : NULL, &regex, &digits, &nfc, &ignore_merges)))
        return rc;

    rlpi_gguf_str *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    uint64_t n_tok = 0, n_merge = 0, n_types = 0;
    rc = rlpi_gguf_get_str_array(g, "tokenizer.ggml.tokens", &tokens, &n_tok);
    if (!rc)
        rc = rlpi_gguf_get_str_array(g, "tokenizer.ggml.merges", &merges, &n_merge);
    if (!rc && rlpi_gguf_find(g, "tokenizer.ggml.token_type"))
        rc = rlpi_gguf_get_i32_array(g, "tokenizer.ggml.token_type", &types, &n_types);
    if (!rc && types && n_types != n_tok)
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: token types do not match tokens", g->source);
    json_t *vocab = json_object(), *jmerges = json_array(), *added = json_array();
    for (uint64_t i = 0; !rc && i < n_tok; i++) {
        char *t = dup_view(tokens[i]);
        if (!t) {
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: token %llu is not a string", g->source, (unsigned long long)i);
            break;
        }
        /* A text listed twice keeps its first id in the vocabulary, as in
         * the tokenizer built from the same metadata (rlpi_tokenizer_build);
         * a JSON object would keep the last, and the two loads would encode
         * differently. */
        if (!json_object_get(vocab, t))
            json_object_set_new(vocab, t, json_integer((json_int_t)i));
        int type = types ? types[i] : 1;
        /* control, unknown (both matched only with special parsing) and
         * user-defined tokens are added tokens, duplicates included, as the
         * GGUF tokenizer matches them before the vocabulary */
        if ((type == 2 || type == 3 || type == 4) && t[0])
            json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i,
                                                   "content", t, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                   "normalized", 0, "special", type != 4));
        free(t);
    }
    for (uint64_t i = 0; !rc && i < n_merge; i++) {
        char *m = dup_view(merges[i]), *sp = m ? strchr(m, ' ') : NULL;
        if (!sp) {
            free(m);
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: merge %llu is not \"a b\"", g->source, (unsigned long long)i);
            break;
        }
        *sp = '\0';
        json_array_append_new(jmerges, json_pack("[s, s]", m, sp + 1));
        free(m);
    }
    json_t *root = NULL, *cfg = NULL;
    if (!rc) {
        root = json_pack("{s:s, s:n, s:n, s:o, s:o, s:o, s:n, s:o, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}}",
                         "version", "1.0", "truncation", "padding", "added_tokens", added,
                         "normalizer", nfc ? json_pack("{s:s}", "type", "NFC") : json_null(),
                         "pre_tokenizer", pre_tokenizer(regex, digits), "post_processor",
                         "decoder", byte_level(true),
                         "model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
                         "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", ignore_merges,
                         "vocab", vocab, "merges", jmerges);
        added = vocab = jmerges = NULL; /* owned by root now */
        if (!root)
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: cannot build tokenizer.json", g->source);
    }
    if (!rc) {
        cfg = json_object();
        static const char *const keys[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                              {"tokenizer.ggml.eos_token_id", "eos_token"},
                                              {"tokenizer.ggml.padding_token_id", "pad_token"},
                                              {"tokenizer.ggml.unknown_token_id", "unk_token"}};
        for (size_t k = 0; k < 4; k++) {
            uint32_t id;
            if (rlpi_gguf_find(g, keys[k][0]) && rlpi_gguf_get_u32(g, keys[k][0], &id) == RLP_OK && id < n_tok) {
                char *t = dup_view(tokens[id]);
                if (t)
                    json_object_set_new(cfg, keys[k][1], json_string(t));
                free(t);
            }
        }
        rlpi_gguf_str tmpl;
        if (rlpi_gguf_find(g, "tokenizer.chat_template") && rlpi_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == RLP_OK) {
            char *t = dup_view(tmpl);
            if (t)
                json_object_set_new(cfg, "chat_template", json_string(t));
            free(t);
        }
        json_object_set_new(cfg, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
        json_object_set_new(cfg, "add_bos_token", json_false());
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        rc = dump(root, path);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        if (!rc)
            rc = dump(cfg, path);
    }
    json_decref(root);
    json_decref(cfg);
    json_decref(vocab);
    json_decref(jmerges);
    json_decref(added);
    free(tokens);
    free(merges);
    free(types);
    return rc;
}
