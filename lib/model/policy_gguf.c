/* rlp_policy_save_gguf: a policy's weights, config and tokenizer metadata
 * handed to the GGUF writer (gguf_write.c). Here: the public options, type
 * names, and where the tokenizer keys come from; not the file layout. */
#include "model/gguf_write.h"
#include "model/policy.h"
#include "model/quant.h"
#include "model/tokenizer.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const rlp_gguf_save_options default_gguf_save_options = RLP_GGUF_SAVE_OPTIONS_INIT;

int rlp_gguf_save_options_init(rlp_gguf_save_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_GGUF_SAVE_OPTIONS_VERSION,
                   "unknown rlp_gguf_save_options version");
    *opts = default_gguf_save_options;
    opts->version = version;
    return RLP_OK;
}

static const struct {
    const char *name;
    int32_t type;
} TYPE_NAMES[] = {{"f32", RLP_GGUF_F32}, {"f16", RLP_GGUF_F16}, {"bf16", RLP_GGUF_BF16},
                  {"q8_0", RLP_GGUF_Q8_0}, {"q4_0", RLP_GGUF_Q4_0},
                  {"q4_k", RLP_GGUF_Q4_K}};

int rlp_gguf_type_from_name(int32_t *out_type, const char *name)
{
    RLPI_CHECK_ARG(out_type, "out_type is NULL");
    RLPI_CHECK_ARG(name, "name is NULL");
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (!strcasecmp(name, TYPE_NAMES[i].name)) {
            *out_type = TYPE_NAMES[i].type;
            return RLP_OK;
        }
    return rlpi_error_set(RLP_E_INVALID_ARG, "%s: unknown GGUF tensor type '%.32s' (f32, f16, bf16, q8_0, q4_0, q4_k)",
                          __func__, name);
}

static bool type_ok(int32_t t)
{
    for (size_t i = 0; i < sizeof TYPE_NAMES / sizeof TYPE_NAMES[0]; i++)
        if (t == TYPE_NAMES[i].type)
            return true;
    return false;
}

/* The chat template the policy renders with, as Jinja, when it is not the
 * source's own: a built-in kind chosen with rlp_tokenizer_set_chat_template,
 * or guessed for a tokenizer that shipped none (llama.cpp and Ollama would
 * otherwise render another prompt than the one trained on). NULL: keep the
 * source's. */
static const char *chat_template_override(const rlp_tokenizer *t)
{
    if (!t)
        return NULL;
    int kind = rlpi_tokenizer_chat_kind_of(t), src_kind;
    const char *src = rlpi_tokenizer_chat_template_src(rlpi_tokenizer_core_of(t));
    if (kind == RLPI_CHAT_NONE)
        return NULL;
    if (src && rlpi_chat_template_detect(&src_kind, src) == RLP_OK && src_kind == kind)
        return NULL;
    return rlpi_chat_template_jinja(kind);
}

/* The file the tokenizer was read from, when it is a GGUF (by its magic). */
static bool is_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char magic[4] = {0};
    bool yes = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    fclose(f);
    return yes;
}

int rlp_policy_save_gguf(const rlp_policy *policy, const char *path, const rlp_gguf_save_options *opts)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(path && path[0], "path is NULL or empty");
    rlp_gguf_save_options o = default_gguf_save_options;
    if (opts) {
        RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_GGUF_SAVE_OPTIONS_VERSION,
                       "unknown rlp_gguf_save_options version");
        o = *opts;
    }
    if (!type_ok(o.type))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s: type %d is not an rlp_gguf_type (f32, f16, bf16, q8_0, q4_0, q4_k)",
                              __func__, path, (int)o.type);
    if (o.embed_type != -1 && !type_ok(o.embed_type))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: %s: embed_type %d is not an rlp_gguf_type (f32, f16, bf16, q8_0, q4_0, q4_k) or -1",
                              __func__, path, (int)o.embed_type);

    /* tokenizer keys: copied from the GGUF named, else from the one the
     * policy's tokenizer came from */
    rlpi_gguf *g = NULL;
    const char *tp = o.tokenizer_gguf ? o.tokenizer_gguf : policy->tokenizer_path;
    int rc = RLP_OK;
    if (tp && is_gguf(tp))
        rc = rlpi_gguf_open(&g, tp);
    else if (o.tokenizer_gguf)
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: tokenizer_gguf '%s' is not a GGUF file", __func__, tp);
    if (!rc && !g && !policy->tokenizer)
        rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                            "%s: %s: the policy has no tokenizer (a llama2.c model), and neither llama.cpp nor "
                            "rlp_policy_load reads a GGUF without one; pass a GGUF with its vocabulary as "
                            "tokenizer_gguf",
                            __func__, path);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    /* a vocabulary of another size would load as a different model */
    uint64_t n_tok = 0;
    const rlpi_model_config *cfg = rlpi_transformer_config(policy->tf);
    if (g && rlpi_gguf_get_arr_len(g, "tokenizer.ggml.tokens", &n_tok) == RLP_OK &&
        n_tok != (uint64_t)cfg->vocab_size) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %s has %llu tokens, the model's vocabulary %d", __func__, tp,
                            (unsigned long long)n_tok, (int)cfg->vocab_size);
        rlpi_gguf_close(g);
        return rc;
    }

    rlpi_weights w;
    if ((rc = rlpi_transformer_export(policy->tf, &w)) == RLP_OK) {
        rlpi_gguf_write_opts wo = {(uint32_t)o.type, o.embed_type, o.name};
        /* else the keys are built from the tokenizer itself (read from a
         * tokenizer.json) */
        rlpi_gguf_tok_src tok = {g, g || !policy->tokenizer ? NULL : rlpi_tokenizer_core_of(policy->tokenizer), tp,
                                 chat_template_override(policy->tokenizer)};
        if ((rc = rlpi_weights_check_finite(&w, "policy")) == RLP_OK)
            rc = rlpi_gguf_write_model(path, cfg, &w, &tok, &wo);
        rlpi_weights_free(&w);
    }
    if (g)
        rlpi_gguf_close(g);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}
