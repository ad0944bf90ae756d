/* Loader of Hugging Face tokenizer.json (model BPE) and its sibling
 * tokenizer_config.json into an rlpi_tokenizer_spec. Supports exactly the
 * normalizers, pre-tokenizers and decoders that the byte-level and
 * Llama-2-style BPE families use; anything else is RLP_E_UNSUPPORTED
 * naming the component. Every id and count from the file is checked. */
#include "model/tokenizer.h"

#include "core/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_REGEX                                                                              \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

typedef struct jload {
    rlpi_tokenizer_spec spec;
    bool byte_level;   /* a ByteLevel pre-tokenizer or decoder was seen */
    bool spm_style;    /* Llama-2 style normalizer / Metaspace */
} jload;

static const char *jtype(json_t *o)
{
    const char *t = json_string_value(json_object_get(o, "type"));
    return t ? t : "(no type)";
}

static int add_regex(jload *L, const char *re, const char *what)
{
    if (L->spec.n_pre >= RLPI_TOK_MAX_PRE)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: %s: more than %d splits", what,
                              RLPI_TOK_MAX_PRE);
    L->spec.pre_regex[L->spec.n_pre++] = re;
    return RLP_OK;
}

static int parse_pre(jload *L, json_t *p)
{
    if (!p || json_is_null(p))
        return RLP_OK;
    if (!json_is_object(p))
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: pre_tokenizer is not an object");
    const char *t = jtype(p);
    if (strcmp(t, "Sequence") == 0) {
        json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr))
            return rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: pre_tokenizer Sequence has no list");
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
        {
            int rc = parse_pre(L, v);
            if (rc)
                return rc;
        }
        return RLP_OK;
    }
    if (strcmp(t, "ByteLevel") == 0) {
        L->byte_level = true;
        L->spec.byte_level_prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
        L->spec.byte_level_stage = L->spec.n_pre;
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur))
            return add_regex(L, GPT2_REGEX, "ByteLevel");
        return RLP_OK;
    }
    if (strcmp(t, "Digits") == 0) {
        bool ind = json_is_true(json_object_get(p, "individual_digits"));
        return add_regex(L, ind ? "\\p{N}" : "\\p{N}+", "Digits");
    }
    if (strcmp(t, "Split") == 0) {
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!beh || strcmp(beh, "Isolated") != 0)
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "tokenizer.json: pre_tokenizer Split behavior \"%s\" (only Isolated)",
                                  beh ? beh : "(none)");
        if (json_is_true(json_object_get(p, "invert")))
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: pre_tokenizer Split with invert");
        json_t *pat = json_object_get(p, "pattern");
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        if (!re)
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "tokenizer.json: pre_tokenizer Split pattern must be a Regex");
        return add_regex(L, re, "Split");
    }
    if (strcmp(t, "Metaspace") == 0) {
        /* Llama-2 files written by newer `tokenizers`: ' ' → ▁ and a ▁
         * prefix as a pre-tokenizer instead of a normalizer */
        const char *rep = json_string_value(json_object_get(p, "replacement"));
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        json_t *split = json_object_get(p, "split");
        if (!rep || strcmp(rep, "\xe2\x96\x81") != 0)
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: Metaspace replacement other than U+2581");
        if (!split || json_is_true(split))
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: Metaspace with split");
        if (!scheme) /* older files: add_prefix_space */
            scheme = json_is_false(json_object_get(p, "add_prefix_space")) ? "never" : "always";
        if (strcmp(scheme, "always") != 0 && strcmp(scheme, "first") != 0 &&
            strcmp(scheme, "never") != 0)
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: Metaspace prepend_scheme \"%s\"",
                                  scheme);
        L->spm_style = true;
        L->spec.normalizer = RLPI_NORM_SPM_ESCAPE;
        L->spec.spm_no_dummy_prefix = strcmp(scheme, "never") == 0;
        L->spec.spm_prefix_first = strcmp(scheme, "first") == 0;
        L->spec.spm_prefix_unless_space = true;
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: pre_tokenizer type \"%s\"", t);
}

static bool is_llama_replace(json_t *r, bool to_space)
{
    const char *c = json_string_value(json_object_get(r, "content"));
    const char *s = json_string_value(json_object_get(json_object_get(r, "pattern"), "String"));
    if (!c || !s)
        return false;
    return to_space ? (strcmp(s, "\xe2\x96\x81") == 0 && strcmp(c, " ") == 0)
                    : (strcmp(s, " ") == 0 && strcmp(c, "\xe2\x96\x81") == 0);
}

static int parse_norm(jload *L, json_t *p)
{
    if (!p || json_is_null(p))
        return RLP_OK;
    const char *t = jtype(p);
    if (strcmp(t, "NFC") == 0) {
        L->spec.normalizer = RLPI_NORM_NFC;
        return RLP_OK;
    }
    if (strcmp(t, "Sequence") == 0) {
        /* Llama-2: [Prepend("▁"), Replace(" " → "▁")] */
        json_t *arr = json_object_get(p, "normalizers");
        json_t *a = json_array_get(arr, 0), *b = json_array_get(arr, 1);
        if (json_array_size(arr) == 2 && strcmp(jtype(a), "Prepend") == 0 &&
            json_string_value(json_object_get(a, "prepend")) &&
            strcmp(json_string_value(json_object_get(a, "prepend")), "\xe2\x96\x81") == 0 &&
            strcmp(jtype(b), "Replace") == 0 && is_llama_replace(b, false)) {
            L->spec.normalizer = RLPI_NORM_SPM_ESCAPE;
            L->spm_style = true;
            return RLP_OK;
        }
        if (json_array_size(arr) == 1)
            return parse_norm(L, a);
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "tokenizer.json: normalizer Sequence other than Llama's Prepend+Replace");
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: normalizer type \"%s\"", t);
}

static int parse_decoder(jload *L, json_t *p)
{
    if (!p || json_is_null(p))
        return RLP_OK;
    const char *t = jtype(p);
    if (strcmp(t, "ByteLevel") == 0) {
        L->byte_level = true;
        return RLP_OK;
    }
    if (strcmp(t, "Sequence") == 0) {
        json_t *arr = json_object_get(p, "decoders");
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
        {
            const char *d = jtype(v);
            if (strcmp(d, "Replace") == 0 && is_llama_replace(v, true))
                continue;
            if (strcmp(d, "ByteFallback") == 0 || strcmp(d, "Fuse") == 0 ||
                strcmp(d, "Strip") == 0) {
                L->spm_style = L->spm_style || strcmp(d, "ByteFallback") == 0;
                continue;
            }
            if (strcmp(d, "ByteLevel") == 0) {
                L->byte_level = true;
                continue;
            }
            return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: decoder type \"%s\"", d);
        }
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: decoder type \"%s\"", t);
}

static const char *config_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_object(v))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

static int32_t find_any(char **tokens, size_t n, const char *const *names)
{
    for (; *names; names++) {
        for (size_t i = 0; i < n; i++) {
            if (tokens[i] && strcmp(tokens[i], *names) == 0)
                return (int32_t)i;
        }
    }
    return -1;
}

/* A TemplateProcessing post-processor whose single-sequence template starts
 * with a special token (Llama-3: "<|begin_of_text|> $A") means "add BOS";
 * returns that token's id, or -1. */
static int32_t post_processor_bos(json_t *pp, char **tokens, size_t n)
{
    if (!json_is_object(pp))
        return -1;
    if (strcmp(jtype(pp), "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pp, "processors"), i, v)
        {
            int32_t id = post_processor_bos(v, tokens, n);
            if (id >= 0)
                return id;
        }
        return -1;
    }
    if (strcmp(jtype(pp), "TemplateProcessing") != 0)
        return -1;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    if (!name)
        return -1;
    const char *one[2] = {name, NULL};
    return find_any(tokens, n, one);
}

int rlpi_tokenizer_from_json(rlpi_tokenizer **out, const char *text, size_t len,
                             const char *config_text, size_t config_len)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    if (!root)
        return rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: line %d: %s", jerr.line, jerr.text);
    json_t *cfg = NULL;
    if (config_text) {
        /* HF configs hold model_max_length = 1e30 as an integer literal */
        cfg = json_loadb(config_text, config_len, JSON_DECODE_INT_AS_REAL, &jerr);
        if (!cfg) {
            json_decref(root);
            return rlpi_error_set(RLP_E_FORMAT, "tokenizer_config.json: line %d: %s", jerr.line,
                                  jerr.text);
        }
    }
    jload L;
    memset(&L, 0, sizeof L);
    rlpi_tokenizer_spec_init(&L.spec);
    char **tokens = NULL;
    int32_t *types = NULL;
    const char **merges = NULL;
    char **merge_bufs = NULL;
    size_t n_vocab = 0, n_merges = 0;
    int rc = RLP_OK;

    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: no \"model\" object");
        goto done;
    }
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (!mt || strcmp(mt, "BPE") != 0) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: model type \"%s\" (only BPE)",
                            mt ? mt : "(none)");
        goto done;
    }
    const char *csp = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *eow = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((csp && *csp) || (eow && *eow)) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                            "tokenizer.json: BPE continuing_subword_prefix/end_of_word_suffix");
        goto done;
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout)) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: BPE dropout");
        goto done;
    }
    L.spec.ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    L.spec.byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    if ((rc = parse_norm(&L, json_object_get(root, "normalizer"))) != RLP_OK ||
        (rc = parse_pre(&L, json_object_get(root, "pre_tokenizer"))) != RLP_OK ||
        (rc = parse_decoder(&L, json_object_get(root, "decoder"))) != RLP_OK)
        goto done;
    if (L.byte_level == L.spm_style) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                            "tokenizer.json: neither a byte-level nor a Llama-style BPE");
        goto done;
    }
    L.spec.model = L.byte_level ? RLPI_TOK_BYTE_BPE : RLPI_TOK_SPM;
    if (L.spec.model == RLPI_TOK_SPM && L.spec.n_pre > 0) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "tokenizer.json: Llama-style BPE with a pre_tokenizer");
        goto done;
    }
    /* A byte-level file whose pre-tokenizers split nothing (ByteLevel with
     * use_regex false and nothing else, or none at all) has the whole text
     * as one word, as HF tokenizers does; not the GPT-2 default split that
     * a GGUF without tokenizer.ggml.pre gets. */
    if (L.spec.model == RLPI_TOK_BYTE_BPE && L.spec.n_pre == 0)
        L.spec.pre_name = "none";

    json_t *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: model.vocab is not an object");
        goto done;
    }
    if (added && !json_is_array(added)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: added_tokens is not a list");
        goto done;
    }
    size_t n_entries = json_object_size(vocab) + json_array_size(added);
    /* ids are dense in every real vocabulary; a sparse one is hostile */
    size_t id_limit = 2 * n_entries + 1024;
    const char *key;
    json_t *v;
    json_int_t max_id = -1;
    json_object_foreach(vocab, key, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (size_t)json_integer_value(v) >= id_limit) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: vocab \"%.40s\": id is not in 0..%zu",
                                key, id_limit - 1);
            goto done;
        }
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            (size_t)json_integer_value(id) >= id_limit ||
            !json_is_string(json_object_get(v, "content"))) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: added_tokens[%zu]: bad id or content",
                                i);
            goto done;
        }
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
        static const char *const flags[3] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++) {
            if (json_is_true(json_object_get(v, flags[k]))) {
                rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                                    "tokenizer.json: added token \"%.40s\" with %s",
                                    json_string_value(json_object_get(v, "content")), flags[k]);
                goto done;
            }
        }
    }
    if (max_id < 0) {
        rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: empty vocabulary");
        goto done;
    }
    n_vocab = (size_t)max_id + 1;
    tokens = calloc(n_vocab, sizeof *tokens);
    types = calloc(n_vocab, sizeof *types);
    size_t *lens = NULL;
    if (!tokens || !types) {
        rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer.json: out of memory for %zu tokens", n_vocab);
        goto done;
    }
    json_object_foreach(vocab, key, v)
    {
        size_t id = (size_t)json_integer_value(v);
        if (tokens[id]) {
            rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: id %zu appears twice in vocab", id);
            goto done;
        }
        tokens[id] = (char *)key;
        types[id] = RLPI_TT_NORMAL;
    }
    json_array_foreach(added, i, v)
    {
        size_t id = (size_t)json_integer_value(json_object_get(v, "id"));
        tokens[id] = (char *)json_string_value(json_object_get(v, "content"));
        types[id] = json_is_true(json_object_get(v, "special")) ? RLPI_TT_CONTROL
                                                                : RLPI_TT_USER_DEFINED;
    }
    (void)lens;
    for (size_t k = 0; k < n_vocab; k++) {
        if (tokens[k] && L.spec.model == RLPI_TOK_SPM && types[k] == RLPI_TT_NORMAL) {
            const char *t = tokens[k];
            if (strlen(t) == 6 && memcmp(t, "<0x", 3) == 0 && t[5] == '>')
                types[k] = RLPI_TT_BYTE;
        }
    }

    json_t *jm = json_object_get(model, "merges");
    if (jm && !json_is_array(jm)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "tokenizer.json: model.merges is not a list");
        goto done;
    }
    n_merges = json_array_size(jm);
    merges = calloc(n_merges ? n_merges : 1, sizeof *merges);
    merge_bufs = calloc(n_merges ? n_merges : 1, sizeof *merge_bufs);
    if (!merges || !merge_bufs) {
        rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer.json: out of memory for %zu merges", n_merges);
        goto done;
    }
    json_array_foreach(jm, i, v)
    {
        if (json_is_string(v)) {
            merges[i] = json_string_value(v);
        } else if (json_is_array(v) && json_array_size(v) == 2 &&
                   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
            const char *a = json_string_value(json_array_get(v, 0));
            const char *b = json_string_value(json_array_get(v, 1));
            if (strchr(a, ' ') || strchr(b, ' ') || !*a || !*b) {
                rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                                    "tokenizer.json: merge %zu has a token with a space or empty", i);
                goto done;
            }
            size_t la = strlen(a), lb = strlen(b);
            char *m = malloc(la + lb + 2);
            if (!m) {
                rc = rlpi_error_set(RLP_E_NOMEM, "tokenizer.json: out of memory");
                goto done;
            }
            memcpy(m, a, la);
            m[la] = ' ';
            memcpy(m + la + 1, b, lb + 1);
            merge_bufs[i] = m;
            merges[i] = m;
        } else {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "tokenizer.json: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i);
            goto done;
        }
    }

    /* Special ids: tokenizer_config.json first, then well-known names. */
    static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", NULL};
    static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", NULL};
    static const char *const unk_names[] = {"<unk>", NULL};
    const char *bos = config_token(cfg, "bos_token"), *eos = config_token(cfg, "eos_token");
    const char *pad = config_token(cfg, "pad_token"), *unk = config_token(cfg, "unk_token");
    const char *one[2] = {NULL, NULL};
    one[0] = bos;
    /* "bos_token": null is Hugging Face's "no BOS" (Qwen2/Qwen3): an
     * ordinary vocabulary entry that happens to read "<s>" is not one */
    json_t *bos_v = cfg ? json_object_get(cfg, "bos_token") : NULL;
    L.spec.bos_id = bos                       ? find_any(tokens, n_vocab, one)
                    : bos_v && json_is_null(bos_v) ? -1
                                              : find_any(tokens, n_vocab, bos_names);
    one[0] = eos;
    L.spec.eos_id = eos ? find_any(tokens, n_vocab, one) : find_any(tokens, n_vocab, eos_names);
    one[0] = pad;
    L.spec.pad_id = pad ? find_any(tokens, n_vocab, one) : -1;
    /* "unk_token": null is Hugging Face's "no unknown token": a token that
     * merely happens to be named <unk> must not take unknown text (the
     * GGUF tokenizer without tokenizer.ggml.unknown_token_id refuses it, and
     * its tokenizer.json conversion writes null); only a file without the
     * key gets the well-known name */
    json_t *munk_v = json_object_get(model, "unk_token");
    const char *munk = json_string_value(munk_v);
    one[0] = unk ? unk : munk;
    L.spec.unk_id = one[0] ? find_any(tokens, n_vocab, one) : munk_v ? -1 : find_any(tokens, n_vocab, unk_names);
    int32_t pp_bos = post_processor_bos(json_object_get(root, "post_processor"), tokens, n_vocab);
    if (pp_bos >= 0 && !bos)
        L.spec.bos_id = pp_bos;
    if (cfg && json_is_boolean(json_object_get(cfg, "add_bos_token")))
        L.spec.add_bos = json_is_true(json_object_get(cfg, "add_bos_token"));
    else
        L.spec.add_bos = L.spec.model == RLPI_TOK_SPM || pp_bos >= 0;
    json_t *tmpl = json_object_get(cfg, "chat_template");
    if (json_is_string(tmpl)) {
        L.spec.chat_template = json_string_value(tmpl);
    } else if (json_is_array(tmpl)) {
        json_array_foreach(tmpl, i, v)
        {
            const char *name = json_string_value(json_object_get(v, "name"));
            if (name && strcmp(name, "default") == 0)
                L.spec.chat_template = json_string_value(json_object_get(v, "template"));
        }
    }

    L.spec.n_vocab = n_vocab;
    L.spec.tokens = (const char *const *)tokens;
    L.spec.token_types = types;
    L.spec.n_merges = n_merges;
    L.spec.merges = merges;
    L.spec.merge_src = RLPI_MERGES_FROM_LIST;
    rc = rlpi_tokenizer_build(out, &L.spec);
    if (rc)
        rlpi_error_wrap("tokenizer.json");
done:
    if (merge_bufs) {
        for (size_t k = 0; k < n_merges; k++)
            free(merge_bufs[k]);
    }
    free(merge_bufs);
    free(merges);
    free(tokens);
    free(types);
    json_decref(cfg);
    json_decref(root);
    return rc;
}
