/* GGUF `tokenizer.*` metadata from a byte-level BPE tokenizer read from a
 * tokenizer.json (an HF folder, a training checkpoint): what llama.cpp's
 * converter writes for such a vocabulary (convert_hf_to_gguf.py
 * get_vocab_base / SpecialVocab). The tokenizer.json is read again only to
 * name its pre-tokenizer (tokenizer.ggml.pre), which the built tokenizer
 * keeps as compiled regexes. Not the file layout (gguf_write.c). */
#include "model/gguf_write.h"

#include "core/error.h"
#include "rlpost.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_str_n(rlpi_gguf_wbuf *b, const char *s, size_t n)
{
    rlpi_gguf_put_u64(b, n);
    rlpi_gguf_put(b, s, n);
}

typedef struct pre_info {
    const char *split[4];
    size_t n_split;
    bool digits;      /* Digits(individual_digits = true) */
    bool other;       /* anything else (Metaspace, Digits of runs, ...) */
} pre_info;

static void scan_pre(json_t *p, pre_info *pi)
{
    const char *t = json_string_value(json_object_get(p, "type"));
    if (!t)
        return;
    if (!strcmp(t, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, v) scan_pre(v, pi);
    } else if (!strcmp(t, "Split")) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (re && pi->n_split < 4)
            pi->split[pi->n_split++] = re;
        else
            pi->other = true;
    } else if (!strcmp(t, "Digits")) {
        if (json_is_true(json_object_get(p, "individual_digits")))
            pi->digits = true;
        else
            pi->other = true;
    } else if (strcmp(t, "ByteLevel") != 0) {
        pi->other = true;
    }
}

/* The GGUF name of the tokenizer.json's pre-tokenizer: the one of our
 * named pre-tokenizers (rlpi_tokenizer_pre_split) that splits the same
 * way. */
static int pre_name(const char *json_path, char *name, size_t cap)
{
    json_error_t je;
    json_t *root = json_load_file(json_path, 0, &je);
    if (!root)
        return rlpi_error_set(RLP_E_FORMAT, "%s: line %d: %s", json_path, je.line, je.text);
    pre_info pi = {{0}, 0, false, false};
    json_t *p = json_object_get(root, "pre_tokenizer");
    if (p && !json_is_null(p))
        scan_pre(p, &pi);
    static const char *const names[] = {"gpt2", "smollm", "qwen2", "llama-bpe"};
    int rc = RLP_E_UNSUPPORTED;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && rc && !pi.other; i++) {
        const char *regex;
        bool digits, nfc, ign;
        if (rlpi_tokenizer_pre_split(names[i], &regex, &digits, &nfc, &ign))
            continue;
        bool same = digits == pi.digits &&
                    (regex ? pi.n_split == 1 && !strcmp(regex, pi.split[0]) : pi.n_split == 0);
        if (same) {
            snprintf(name, cap, "%s", names[i]);
            rc = RLP_OK;
        }
    }
    if (rc)
        rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                            "%s: its pre-tokenizer (%s%.60s) has no GGUF tokenizer.ggml.pre name (gpt2, smollm, "
                            "qwen2, llama-bpe)",
                            json_path, pi.n_split ? "split " : "", pi.n_split ? pi.split[0] : "");
    json_decref(root);
    return rc;
}

int rlpi_gguf_tokenizer_kv(rlpi_gguf_kvw *k, const rlpi_tokenizer *tok, const char *json_path, int32_t n_vocab,
                           const char *chat_template)
{
    if (rlpi_tokenizer_model(tok) != RLPI_TOK_BYTE_BPE)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "GGUF tokenizer metadata from a SentencePiece tokenizer is not "
                                                 "written yet; pass a GGUF with the same vocabulary (tokenizer_gguf)");
    if (!json_path)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "GGUF tokenizer metadata: the tokenizer's source is unknown");
    size_t n_tok = rlpi_tokenizer_n_vocab(tok);
    if (n_vocab < 0 || n_tok > (size_t)n_vocab)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %zu tokens for a model vocabulary of %d", json_path, n_tok,
                              (int)n_vocab);
    char pre[32];
    int rc = pre_name(json_path, pre, sizeof pre);
    if (rc)
        return rc;
    int32_t *pairs = NULL;
    size_t n_merges = 0;
    if ((rc = rlpi_tokenizer_merge_pairs(tok, &pairs, &n_merges)))
        return rc;

    rlpi_gguf_kv_key(k, "tokenizer.ggml.model", RLPI_GGUF_STRING);
    put_str_n(&k->b, "gpt2", 4);
    rlpi_gguf_kv_key(k, "tokenizer.ggml.pre", RLPI_GGUF_STRING);
    put_str_n(&k->b, pre, strlen(pre));

    /* tokens, and "[PADi]" for the embedding rows past the tokenizer's
     * (Qwen pads its embedding to a multiple of 128 or more) */
    char pad[32];
    rlpi_gguf_kv_key(k, "tokenizer.ggml.tokens", RLPI_GGUF_ARRAY);
    rlpi_gguf_put_u32(&k->b, RLPI_GGUF_STRING);
    rlpi_gguf_put_u64(&k->b, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len = 0;
        const char *s = (size_t)i < n_tok ? rlpi_tokenizer_token_piece(tok, i, &len) : NULL;
        if (!s) {
            len = (size_t)snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
            s = pad;
        }
        put_str_n(&k->b, s, len);
    }
    rlpi_gguf_kv_key(k, "tokenizer.ggml.token_type", RLPI_GGUF_ARRAY);
    rlpi_gguf_put_u32(&k->b, RLPI_GGUF_INT32);
    rlpi_gguf_put_u64(&k->b, (uint64_t)n_vocab);
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len = 0;
        int32_t t = (size_t)i < n_tok && rlpi_tokenizer_token_piece(tok, i, &len) ? rlpi_tokenizer_token_type(tok, i)
                                                                                : RLPI_TT_UNUSED;
        if (t == RLPI_TT_UNDEFINED)
            t = RLPI_TT_NORMAL;
        rlpi_gguf_put(&k->b, &t, 4);
    }
    rlpi_gguf_kv_key(k, "tokenizer.ggml.merges", RLPI_GGUF_ARRAY);
    rlpi_gguf_put_u32(&k->b, RLPI_GGUF_STRING);
    rlpi_gguf_put_u64(&k->b, (uint64_t)n_merges);
    for (size_t i = 0; i < n_merges; i++) {
        size_t la = 0, lb = 0;
        const char *a = rlpi_tokenizer_token_piece(tok, pairs[2 * i], &la);
        const char *b = rlpi_tokenizer_token_piece(tok, pairs[2 * i + 1], &lb);
        rlpi_gguf_put_u64(&k->b, la + 1 + lb);
        rlpi_gguf_put(&k->b, a, la);
        rlpi_gguf_put(&k->b, " ", 1);
        rlpi_gguf_put(&k->b, b, lb);
    }
    free(pairs);

    static const struct {
        const char *key;
        int role;
    } ids[] = {{"tokenizer.ggml.bos_token_id", RLP_TOKEN_BOS},
               {"tokenizer.ggml.eos_token_id", RLP_TOKEN_EOS},
               {"tokenizer.ggml.unknown_token_id", RLP_TOKEN_UNK},
               {"tokenizer.ggml.padding_token_id", RLP_TOKEN_PAD}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int32_t id = rlpi_tokenizer_special(tok, ids[i].role);
        if (id < 0)
            continue;
        rlpi_gguf_kv_key(k, ids[i].key, RLPI_GGUF_UINT32);
        rlpi_gguf_put_u32(&k->b, (uint32_t)id);
    }
    uint8_t add_bos = rlpi_tokenizer_add_bos(tok) ? 1 : 0;
    rlpi_gguf_kv_key(k, "tokenizer.ggml.add_bos_token", RLPI_GGUF_BOOL);
    rlpi_gguf_put(&k->b, &add_bos, 1);
    const char *tmpl = chat_template ? chat_template : rlpi_tokenizer_chat_template_src(tok);
    if (tmpl) {
        rlpi_gguf_kv_key(k, "tokenizer.chat_template", RLPI_GGUF_STRING);
        put_str_n(&k->b, tmpl, strlen(tmpl));
    }
    return RLP_OK;
}
