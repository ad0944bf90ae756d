/* config.json parsing and rendering for the families of lib/model/arch.c
 * (Llama, Mistral, Qwen2, Qwen3, Gemma 3). Strict on types (an integer
 * field holding a string or 1.5 is a broken file, not a default), lenient
 * on keys we do not need. What differs by family comes from the table, not
 * from the family's name. */
#include "model/hf_config.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/mapfile.h"
#include "model/arch.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(...) return rlpi_error_set(RLP_E_FORMAT, __VA_ARGS__)

/* Integer field in [lo, hi]. Absent or null: `def` unless `required`. */
static int get_int(json_t *root, const char *key, int required, int64_t def, int64_t lo,
                   int64_t hi, const char *src, int32_t *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required)
            BAD("%s: required key '%s' is missing", src, key);
        *out = (int32_t)def;
        return RLP_OK;
    }
    if (!json_is_integer(v))
        BAD("%s: '%s' must be an integer", src, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        BAD("%s: '%s' = %lld is out of range [%lld, %lld]", src, key, (long long)x, (long long)lo,
            (long long)hi);
    *out = (int32_t)x;
    return RLP_OK;
}

/* Number field (integer or real); must be finite and fit a float. */
static int get_num(json_t *obj, const char *key, int required, double def, const char *src,
                   float *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        if (required)
            BAD("%s: required key '%s' is missing", src, key);
        *out = (float)def;
        return RLP_OK;
    }
    if (!json_is_number(v))
        BAD("%s: '%s' must be a number", src, key);
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > 3.0e38)
        BAD("%s: '%s' = %g does not fit a float", src, key, d);
    /* -0.0 (or a tiny negative that rounds to it) means 0: store +0.0 so
     * the value passes every `< 0` check the same way and a config and
     * its re-dump hold the same bits (a fuzz find: final_logit_softcapping
     * = -0.0 was kept as -0.0 and dumped as 0). */
    float f = (float)d;
    *out = f == 0.0f ? 0.0f : f;
    return RLP_OK;
}

/* A RoPE base given in the file: a positive float. 0 means "the global
 * base" inside rlpi_model_config, and a value that rounds to 0 in float
 * (21e-50) would silently take that meaning and not survive a re-dump. */
static int get_theta(json_t *obj, const char *key, double def, const char *src, float *out)
{
    int rc = get_num(obj, key, 0, def, src, out);
    if (rc)
        return rc;
    json_t *v = json_object_get(obj, key);
    if (v && !json_is_null(v) && !(*out > 0.0f))
        BAD("%s: '%s' = %g must be a positive float", src, key, json_number_value(v));
    return RLP_OK;
}

static int get_bool(json_t *root, const char *key, int def, const char *src, int *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return RLP_OK;
    }
    if (!json_is_boolean(v))
        BAD("%s: '%s' must be true or false", src, key);
    *out = json_is_true(v);
    return RLP_OK;
}

/* The HF classes of a family's model with a score head instead of the
 * LM head: the family's *ForCausalLM with this suffix instead. */
static const char *const SCORE_CLASS_SUFFIX[2] = {"ForSequenceClassification", "ForTokenClassification"};

/* *ForCausalLM → *ForSequenceClassification / *ForTokenClassification
 * (per_token); false when the result does not fit. */
static bool score_class_name(const char *lm_class, bool per_token, char *out, size_t cap)
{
    const char *lm = "ForCausalLM";
    size_t n = strlen(lm_class), k = strlen(lm);
    if (n < k || strcmp(lm_class + n - k, lm))
        return false;
    int w = snprintf(out, cap, "%.*s%s", (int)(n - k), lm_class, SCORE_CLASS_SUFFIX[per_token]);
    return w > 0 && (size_t)w < cap;
}

/* The family of architectures[0] (or model_type), and whether the class
 * is a score-head model (*score: 0 none, 1 sequence, 2 token
 * classification). */
static int find_arch(json_t *root, const char *src, const rlpi_arch_desc **out, int *score)
{
    json_t *archs = json_object_get(root, "architectures");
    json_t *mt = json_object_get(root, "model_type");
    *score = 0;
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) || json_array_size(archs) == 0 ||
            !json_is_string(json_array_get(archs, 0)))
            BAD("%s: 'architectures' must be a non-empty array of strings", src);
        const char *a = json_string_value(json_array_get(archs, 0));
        if ((*out = rlpi_arch_find_hf_class(a)))
            return RLP_OK;
        size_t n = strlen(a);
        for (int kind = 0; kind < 2; kind++) {
            size_t k = strlen(SCORE_CLASS_SUFFIX[kind]);
            char lm[96];
            if (n > k && n - k + 12 < sizeof lm && !strcmp(a + n - k, SCORE_CLASS_SUFFIX[kind])) {
                snprintf(lm, sizeof lm, "%.*sForCausalLM", (int)(n - k), a);
                if ((*out = rlpi_arch_find_hf_class(lm))) {
                    *score = 1 + kind;
                    return RLP_OK;
                }
            }
        }
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: architecture '%.64s' is not supported (the *ForCausalLM, "
                              "*ForSequenceClassification and *ForTokenClassification of %s are)",
                              src, a, rlpi_arch_names());
    }
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt))
            BAD("%s: 'model_type' must be a string", src);
        const char *m = json_string_value(mt);
        if ((*out = rlpi_arch_find(m)))
            return RLP_OK;
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: model_type '%.64s' is not supported (%s are)",
                              src, m, rlpi_arch_names());
    }
    BAD("%s: neither 'architectures' nor 'model_type' says what model this is", src);
}

/* The number of outputs of a score head as transformers counts it:
 * len(id2label) when given, else "num_labels", else PretrainedConfig's
 * default of 2. */
static int parse_num_labels(json_t *root, const char *src, int32_t *out)
{
    json_t *id2 = json_object_get(root, "id2label");
    if (id2 && !json_is_null(id2)) {
        if (!json_is_object(id2) || json_object_size(id2) == 0)
            BAD("%s: 'id2label' must be a non-empty object", src);
        if (json_object_size(id2) > (1u << 16))
            BAD("%s: 'id2label' has %zu labels (at most %d)", src, json_object_size(id2), 1 << 16);
        *out = (int32_t)json_object_size(id2);
        return RLP_OK;
    }
    return get_int(root, "num_labels", 0, 2, 1, 1 << 16, src, out);
}

/* rope_type and its parameters from one rope_scaling / rope_parameters
 * object (`what` names it in messages); absent type = default when v5. */
static int parse_rope_type(json_t *rs, int v5, const char *what, const char *src, rlpi_model_config *c)
{
    int rc;
    /* transformers renamed "type" to "rope_type"; files carry either */
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");
    if (!t && v5)
        return RLP_OK; /* rope_parameters with only rope_theta */
    if (!json_is_string(t))
        BAD("%s: %s needs a string 'rope_type' (or 'type')", src, what);
    const char *type = json_string_value(t);
    if (!strcmp(type, "default"))
        return RLP_OK;
    if (!strcmp(type, "linear")) {
        c->rope_scaling = RLPI_ROPE_SCALING_LINEAR;
        return get_num(rs, "factor", 1, 1.0, src, &c->rope_factor);
    }
    if (!strcmp(type, "llama3")) {
        c->rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
        if ((rc = get_num(rs, "factor", 1, 1.0, src, &c->rope_factor)) ||
            (rc = get_num(rs, "low_freq_factor", 1, 1.0, src, &c->rope_low_freq_factor)) ||
            (rc = get_num(rs, "high_freq_factor", 1, 1.0, src, &c->rope_high_freq_factor)) ||
            (rc = get_int(rs, "original_max_position_embeddings", 1, 0, 1, INT32_MAX, src,
                          &c->rope_original_max_pos)))
            return rc;
        if (!(c->rope_low_freq_factor > 0) || !(c->rope_high_freq_factor > c->rope_low_freq_factor))
            BAD("%s: %s needs 0 < low_freq_factor < high_freq_factor", src, what);
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED,
                          "%s: %s type '%.32s' is not supported (llama3, linear are)", src, what, type);
}

/* RoPE settings. transformers < 5 writes top-level `rope_theta` and a
 * `rope_scaling` object (type key "type" or "rope_type"); transformers 5
 * writes one `rope_parameters` object holding rope_theta and rope_type, or,
 * for families with local layers (Gemma 3), one such object per layer kind
 * ({"full_attention": {...}, "sliding_attention": {...}}). All are read;
 * rope_parameters wins when present. Scaling applies to global layers;
 * local layers take only their base (rope_theta_local, which the caller
 * has set to the family's default or rope_local_base_freq). */
static int parse_rope(json_t *root, const char *src, rlpi_model_config *c)
{
    c->rope_scaling = RLPI_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    int rc = get_theta(root, "rope_theta", 10000.0, src, &c->rope_theta);
    if (rc)
        return rc;
    json_t *rs = json_object_get(root, "rope_parameters");
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs))
            BAD("%s: 'rope_parameters' must be an object or null", src);
        json_t *full = json_object_get(rs, "full_attention");
        const char *what = "rope_parameters";
        if (full) {
            if (!json_is_object(full))
                BAD("%s: 'rope_parameters.full_attention' must be an object", src);
            json_t *loc = json_object_get(rs, "sliding_attention");
            if (loc && !json_is_null(loc)) {
                if (!json_is_object(loc))
                    BAD("%s: 'rope_parameters.sliding_attention' must be an object", src);
                rlpi_model_config lc = *c;
                if ((rc = get_theta(loc, "rope_theta",
                                  (double)(c->rope_theta_local > 0 ? c->rope_theta_local : c->rope_theta), src,
                                  &c->rope_theta_local)) ||
                    (rc = parse_rope_type(loc, 1, "rope_parameters.sliding_attention", src, &lc)))
                    return rc;
                if (lc.rope_scaling != RLPI_ROPE_SCALING_NONE)
                    return rlpi_error_set(RLP_E_UNSUPPORTED,
                                          "%s: rope_parameters.sliding_attention: RoPE scaling on local "
                                          "(sliding-window) layers is not supported",
                                          src);
            }
            rs = full;
            what = "rope_parameters.full_attention";
        }
        if ((rc = get_theta(rs, "rope_theta", (double)c->rope_theta, src, &c->rope_theta)))
            return rc;
        return parse_rope_type(rs, 1, what, src, c);
    }
    rs = json_object_get(root, "rope_scaling");
    if (!rs || json_is_null(rs))
        return RLP_OK;
    if (!json_is_object(rs))
        BAD("%s: 'rope_scaling' must be an object or null", src);
    return parse_rope_type(rs, 0, "rope_scaling", src, c);
}

/* bos/eos: an id, null, or (eos in Llama 3.x) a list whose first is used. */
static int get_token_id(json_t *root, const char *key, const char *src, int32_t *out)
{
    json_t *v = json_object_get(root, key);
    *out = -1;
    if (json_is_array(v)) {
        if (json_array_size(v) == 0)
            return RLP_OK;
        v = json_array_get(v, 0);
    }
    if (!v || json_is_null(v))
        return RLP_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
        BAD("%s: '%s' must be a non-negative integer id", src, key);
    *out = (int32_t)json_integer_value(v);
    return RLP_OK;
}

/* The gated MLP's activation: Gemma's `hidden_activation` (wins) or
 * `hidden_act`; it must be the one the family's row runs. */
static int parse_activation(json_t *root, const rlpi_arch_desc *a, const char *src)
{
    static const char *const keys[2] = {"hidden_activation", "hidden_act"};
    for (int i = 0; i < 2; i++) {
        json_t *act = json_object_get(root, keys[i]);
        if (!act || json_is_null(act))
            continue;
        if (!json_is_string(act))
            BAD("%s: '%s' must be a string", src, keys[i]);
        const char *v = json_string_value(act);
        int kind = !strcmp(v, "silu") || !strcmp(v, "swish")                   ? RLPI_ACT_SILU
                   : !strcmp(v, "gelu_pytorch_tanh") || !strcmp(v, "gelu_tanh") ? RLPI_ACT_GELU_TANH
                                                                                : -1;
        if (kind != a->activation)
            return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: %s '%.32s' is not supported for %s (%s is)", src,
                                  keys[i], v, a->hf_class,
                                  a->activation == RLPI_ACT_SILU ? "silu" : "gelu_pytorch_tanh");
        return RLP_OK;
    }
    return RLP_OK;
}

/* Which layers are local, for families with interleaved sliding-window
 * layers (Gemma 3): transformers 5 (and late 4.x) list them in
 * `layer_types`; older files give a period, `sliding_window_pattern`
 * (transformers 5 writes `_sliding_window_pattern`): layer i is global when
 * (i + 1) % period == 0. When both are given they must agree. */
static int parse_local_layers(json_t *root, const rlpi_arch_desc *a, const char *src, rlpi_model_config *c)
{
    int rc = get_int(root, "sliding_window", 1, 0, 1, 1 << 24, src, &c->sliding_window);
    if (rc)
        return rc;
    int32_t period = 0;
    static const char *const pkeys[2] = {"sliding_window_pattern", "_sliding_window_pattern"};
    const char *pkey = NULL;
    for (int i = 0; i < 2 && !period; i++) {
        if ((rc = get_int(root, pkeys[i], 0, 0, 1, RLPI_MAX_LAYERS, src, &period)))
            return rc;
        pkey = pkeys[i];
    }
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            BAD("%s: 'layer_types' must be an array of strings", src);
        if (json_array_size(lt) != (size_t)c->n_layers)
            BAD("%s: 'layer_types' has %zu entries, num_hidden_layers is %d", src, json_array_size(lt),
                c->n_layers);
        for (int32_t i = 0; i < c->n_layers; i++) {
            const char *k = json_string_value(json_array_get(lt, (size_t)i));
            if (!k)
                BAD("%s: 'layer_types' must be an array of strings", src);
            if (!strcmp(k, "sliding_attention"))
                c->local_layers[i] = 1;
            else if (strcmp(k, "full_attention"))
                return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: layer type '%.32s' is not supported", src, k);
            if (period && c->local_layers[i] != ((i + 1) % period != 0))
                BAD("%s: 'layer_types'[%d] is %s but '%s' = %d makes it %s", src, i, k, pkey, period,
                    (i + 1) % period ? "sliding_attention" : "full_attention");
        }
        return RLP_OK;
    }
    if (period) {
        for (int32_t i = 0; i < c->n_layers; i++)
            c->local_layers[i] = (i + 1) % period != 0;
        return RLP_OK;
    }
    rlpi_arch_default_local_layers(a, c);
    return RLP_OK;
}

/* Families without local layers (Mistral, Qwen2/3 with use_sliding_window):
 * sliding-window attention equals full attention within the window, so
 * capping the context keeps every result exact. Mistral has no switch (a
 * non-null sliding_window is used); Qwen has `use_sliding_window`. */
static int cap_by_window(json_t *root, const char *src, rlpi_model_config *c)
{
    int use_sw = 0, rc;
    json_t *sw_key = json_object_get(root, "sliding_window");
    int has_switch = json_object_get(root, "use_sliding_window") != NULL;
    if ((rc = get_bool(root, "use_sliding_window", !has_switch && sw_key && !json_is_null(sw_key), src,
                       &use_sw)))
        return rc;
    /* transformers 5 lists each layer's attention kind */
    json_t *lt = json_object_get(root, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt))
            BAD("%s: 'layer_types' must be an array of strings", src);
        for (size_t i = 0; i < json_array_size(lt); i++) {
            const char *k = json_string_value(json_array_get(lt, i));
            if (!k)
                BAD("%s: 'layer_types' must be an array of strings", src);
            if (!strcmp(k, "sliding_attention"))
                use_sw = 1;
            else if (strcmp(k, "full_attention"))
                return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: layer type '%.32s' is not supported", src, k);
        }
    }
    if (use_sw) {
        int32_t sw;
        if ((rc = get_int(root, "sliding_window", 0, 0, 0, INT32_MAX, src, &sw)))
            return rc;
        if (sw > 0 && sw < c->max_seq_len)
            c->max_seq_len = sw;
    }
    return RLP_OK;
}

static int parse_root(json_t *root, const char *src, rlpi_model_config *c)
{
    if (!json_is_object(root))
        BAD("%s: config is not a JSON object", src);
    memset(c, 0, sizeof *c);
    const rlpi_arch_desc *a = NULL;
    int score = 0;
    int rc = find_arch(root, src, &a, &score);
    if (rc || (rc = parse_activation(root, a, src)))
        return rc;
    if ((rc = get_int(root, "hidden_size", 1, 0, 1, INT32_MAX, src, &c->dim)) ||
        (rc = get_int(root, "intermediate_size", 1, 0, 1, INT32_MAX, src, &c->ffn_dim)) ||
        (rc = get_int(root, "num_hidden_layers", 1, 0, 1, INT32_MAX, src, &c->n_layers)) ||
        (rc = get_int(root, "num_attention_heads", 1, 0, 1, INT32_MAX, src, &c->n_heads)) ||
        (rc = get_int(root, "num_key_value_heads", 0, c->n_heads, 1, INT32_MAX, src,
                      &c->n_kv_heads)) ||
        (rc = get_int(root, "vocab_size", 1, 0, 1, INT32_MAX, src, &c->vocab_size)) ||
        (rc = get_int(root, "max_position_embeddings", 0, a->default_context, 1, INT32_MAX,
                      src, &c->max_seq_len)))
        return rc;
    if (c->n_layers > RLPI_MAX_LAYERS)
        BAD("%s: 'num_hidden_layers' = %d is out of range [1, %d]", src, c->n_layers, RLPI_MAX_LAYERS);
    rlpi_arch_apply(a, c); /* needs dim (embedding scale) */
    json_t *hd = json_object_get(root, "head_dim");
    if (hd && !json_is_null(hd)) {
        if ((rc = get_int(root, "head_dim", 1, 0, 1, INT32_MAX, src, &c->head_dim)))
            return rc;
    } else {
        if (c->dim % c->n_heads != 0)
            BAD("%s: hidden_size %d is not a multiple of num_attention_heads %d and no head_dim "
                "is given",
                src, c->dim, c->n_heads);
        c->head_dim = c->dim / c->n_heads;
    }
    if (a->sliding_window &&
        (rc = get_theta(root, "rope_local_base_freq", (double)c->rope_theta_local, src, &c->rope_theta_local)))
        return rc;
    if ((rc = get_num(root, "rms_norm_eps", 0, 1e-6, src, &c->rms_eps)) ||
        (rc = parse_rope(root, src, c)))
        return rc;
    int tie, bias, mlp_bias, bidir;
    if ((rc = get_bool(root, "tie_word_embeddings", a->hf_tie_default, src, &tie)) ||
        (rc = get_bool(root, "attention_bias", 0, src, &bias)) ||
        (rc = get_bool(root, "mlp_bias", 0, src, &mlp_bias)) ||
        (rc = get_bool(root, "use_bidirectional_attention", 0, src, &bidir)))
        return rc;
    c->tie_embeddings = tie;
    if (score) {
        /* a score head replaces the LM head: nothing to tie (transformers
         * builds no lm_head for these classes whatever the flag says) */
        if ((rc = parse_num_labels(root, src, &c->score_labels)))
            return rc;
        c->tie_embeddings = false;
        c->score_per_token = score == 2;
        c->score_bias = score == 2; /* *ForTokenClassification's Linear has a bias */
    }
    if (bias && !a->qkv_bias) {
        /* LlamaAttention's attention_bias (as Qwen3's and Gemma 3's) also
         * biases o_proj, which our transformer has no place for; Qwen2
         * hard-codes q/k/v biases (set from the row) and ignores the key */
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: attention_bias=true (o_proj bias) is not supported for %s", src,
                              a->hf_class);
    }
    if (mlp_bias)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: mlp_bias=true is not supported", src);
    if (bidir)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: use_bidirectional_attention=true (an encoder) is not supported", src);
    json_t *asc = json_object_get(root, "attn_logit_softcapping");
    if (asc && !json_is_null(asc))
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: attn_logit_softcapping (Gemma 2 attention soft-capping) is not supported", src);
    if ((rc = get_num(root, "final_logit_softcapping", 0, 0.0, src, &c->final_softcap)))
        return rc;
    if (c->final_softcap < 0)
        BAD("%s: 'final_logit_softcapping' = %g must be positive or null", src, (double)c->final_softcap);
    /* query_pre_attn_scalar is a Gemma key: transformers' Llama/Qwen/Mistral
     * configs ignore it (their scale is 1/sqrt(head_dim)), and so do we */
    json_t *qs = a->sliding_window ? json_object_get(root, "query_pre_attn_scalar") : NULL;
    if (qs && !json_is_null(qs)) {
        float q;
        if ((rc = get_num(root, "query_pre_attn_scalar", 1, 0.0, src, &q)))
            return rc;
        if (!(q > 0))
            BAD("%s: 'query_pre_attn_scalar' = %g must be positive", src, (double)q);
        c->attn_scale = 1.0f / sqrtf(q);
    } else if (a->sliding_window) {
        /* absent: Gemma3TextConfig's default query_pre_attn_scalar, 256
         * (not head_dim), so a config and its re-dump mean the same */
        c->attn_scale = 1.0f / 16.0f;
    }
    if (a->sliding_window)
        rc = parse_local_layers(root, a, src, c);
    else
        rc = cap_by_window(root, src, c);
    if (rc || (rc = get_token_id(root, "bos_token_id", src, &c->bos_id)) ||
        (rc = get_token_id(root, "eos_token_id", src, &c->eos_id)))
        return rc;
    /* A local RoPE base (rope_parameters.sliding_attention) means nothing
     * without local layers; keeping it would make two configs that load
     * the same model compare unequal (and not survive a re-dump). */
    if (rlpi_model_config_n_local_layers(c) == 0)
        c->rope_theta_local = 0.0f;
    return rlpi_model_config_validate(c, src);
}

int rlpi_hf_config_parse(const char *text, size_t len, const char *source, rlpi_model_config *cfg)
{
    json_t *root;
    int rc = rlpi_json_load_guarded(text, len, RLPI_JSON_MAX_DEPTH, source, &root);
    if (rc)
        return rc;
    rlpi_model_config c; /* *cfg is written only on success */
    rc = parse_root(root, source, &c);
    json_decref(root);
    if (rc == RLP_OK)
        *cfg = c;
    return rc;
}

int rlpi_hf_config_read(const char *path, rlpi_model_config *cfg)
{
    rlpi_mapped_file m;
    int rc = rlpi_map_file(path, &m);
    if (rc)
        return rc;
    rc = rlpi_hf_config_parse(m.data ? (const char *)m.data : "", m.size, path, cfg);
    rlpi_unmap_file(&m);
    return rc;
}

#undef BAD

/* ---- writing ----------------------------------------------------------- */

/* The double with the fewest significant digits that still reads back as
 * `f`, so 1e-5f is written 1e-05 rather than 9.99999975e-06. */
static json_t *json_float(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if ((float)strtod(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

static json_t *token_or_null(int32_t id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

/* {"rope_theta": .., "rope_type": .., scaling parameters} of the global
 * layers, as transformers 5 reads it (also the legacy rope_scaling object
 * without rope_theta when `with_theta` is false; NULL without scaling). */
static json_t *rope_object(const rlpi_model_config *c, bool with_theta)
{
    if (!with_theta && c->rope_scaling == RLPI_ROPE_SCALING_NONE)
        return json_null();
    json_t *rs = json_object();
    if (with_theta)
        json_object_set_new(rs, "rope_theta", json_float(c->rope_theta));
    int llama3 = c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3;
    if (c->rope_scaling == RLPI_ROPE_SCALING_NONE) {
        json_object_set_new(rs, "rope_type", json_string("default"));
        return rs;
    }
    json_object_set_new(rs, "rope_type", json_string(llama3 ? "llama3" : "linear"));
    json_object_set_new(rs, "factor", json_float(c->rope_factor));
    if (llama3) {
        json_object_set_new(rs, "low_freq_factor", json_float(c->rope_low_freq_factor));
        json_object_set_new(rs, "high_freq_factor", json_float(c->rope_high_freq_factor));
        json_object_set_new(rs, "original_max_position_embeddings", json_integer(c->rope_original_max_pos));
    }
    return rs;
}

/* Gemma 3's keys: local layers, per-kind RoPE, attention scale, soft-cap.
 * Written in transformers 5's spelling (layer_types, nested
 * rope_parameters) with the 4.x keys alongside for older readers. */
static void dump_local_layers(json_t *r, const rlpi_model_config *c)
{
    float theta_l = c->rope_theta_local > 0 ? c->rope_theta_local : c->rope_theta;
    json_t *rp = json_object();
    json_object_set_new(rp, "full_attention", rope_object(c, true));
    json_t *loc = json_object();
    json_object_set_new(loc, "rope_theta", json_float(theta_l));
    json_object_set_new(loc, "rope_type", json_string("default"));
    json_object_set_new(rp, "sliding_attention", loc);
    json_object_set_new(r, "rope_parameters", rp);
    json_object_set_new(r, "rope_local_base_freq", json_float(theta_l));
    json_object_set_new(r, "sliding_window", json_integer(c->sliding_window > 0 ? c->sliding_window : c->max_seq_len));
    json_t *lt = json_array();
    for (int32_t i = 0; i < c->n_layers; i++)
        json_array_append_new(lt, json_string(c->sliding_window > 0 && c->local_layers[i] ? "sliding_attention"
                                                                                          : "full_attention"));
    json_object_set_new(r, "layer_types", lt);
    /* q^-1/2 = attn_scale; written as an integer when it is one (256) */
    double q = 1.0 / ((double)rlpi_model_config_attn_scale(c) * (double)rlpi_model_config_attn_scale(c));
    double qr = floor(q + 0.5);
    json_object_set_new(r, "query_pre_attn_scalar", fabs(q - qr) < 1e-3 * qr ? json_integer((json_int_t)qr)
                                                                               : json_real(q));
    json_object_set_new(r, "attn_logit_softcapping", json_null());
    json_object_set_new(r, "use_bidirectional_attention", json_false());
}

int rlpi_hf_config_dump(const rlpi_model_config *c, char **out)
{
    *out = NULL;
    const rlpi_arch_desc *a = rlpi_arch_find(c->arch);
    if (!a)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "config.json: arch '%.32s' has no transformers class here", c->arch);
    json_t *r = json_object();
    json_t *archs = json_array();
    if (!r || !archs) {
        json_decref(r);
        json_decref(archs);
        return rlpi_error_set(RLP_E_NOMEM, "config.json: out of memory");
    }
    char cls[96];
    if (c->score_labels > 0 && !score_class_name(a->hf_class, c->score_per_token, cls, sizeof cls)) {
        json_decref(r);
        json_decref(archs);
        return rlpi_error_set(RLP_E_UNSUPPORTED, "config.json: %s has no score-head class", a->hf_class);
    }
    json_array_append_new(archs, json_string(c->score_labels > 0 ? cls : a->hf_class));
    json_object_set_new(r, "architectures", archs);
    if (c->score_labels > 0) { /* transformers' num_labels is len(id2label) */
        json_t *id2 = json_object(), *l2i = json_object();
        for (int32_t i = 0; i < c->score_labels; i++) {
            char k[16], v[24];
            snprintf(k, sizeof k, "%d", i);
            snprintf(v, sizeof v, "LABEL_%d", i);
            json_object_set_new(id2, k, json_string(v));
            json_object_set_new(l2i, v, json_integer(i));
        }
        json_object_set_new(r, "id2label", id2);
        json_object_set_new(r, "label2id", l2i);
    }
    /* Gemma 3's text model is "gemma3_text" ("gemma3" is the multimodal one) */
    json_object_set_new(r, "model_type", json_string(a->hf_alt_type ? a->hf_alt_type : a->name));
    json_object_set_new(r, "hidden_size", json_integer(c->dim));
    json_object_set_new(r, "intermediate_size", json_integer(c->ffn_dim));
    json_object_set_new(r, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(r, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(r, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(r, "head_dim", json_integer(c->head_dim));
    json_object_set_new(r, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(r, "max_position_embeddings", json_integer(c->max_seq_len));
    if (c->activation == RLPI_ACT_GELU_TANH)
        json_object_set_new(r, "hidden_activation", json_string("gelu_pytorch_tanh"));
    else
        json_object_set_new(r, "hidden_act", json_string("silu"));
    json_object_set_new(r, "rms_norm_eps", json_float(c->rms_eps));
    json_object_set_new(r, "rope_theta", json_float(c->rope_theta));
    json_object_set_new(r, "rope_scaling", rope_object(c, false));
    if (a->sliding_window) {
        dump_local_layers(r, c);
    } else {
        /* transformers 5 reads rope_parameters; older versions keep it as
         * an unused attribute. Both spellings carry the same values. */
        json_object_set_new(r, "rope_parameters", rope_object(c, true));
    }
    if (c->final_softcap > 0 || a->sliding_window)
        json_object_set_new(r, "final_logit_softcapping",
                            c->final_softcap > 0 ? json_float(c->final_softcap) : json_null());
    json_object_set_new(r, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (a->qkv_bias) {
        json_object_set_new(r, "use_sliding_window", json_false());
    } else {
        json_object_set_new(r, "attention_bias", json_false());
        json_object_set_new(r, "mlp_bias", json_false());
        if (a->qk_norm && !a->sliding_window) /* Qwen3 has the switch, off */
            json_object_set_new(r, "use_sliding_window", json_false());
    }
    if (!strcmp(a->name, "mistral"))
        json_object_set_new(r, "sliding_window", json_null());
    json_object_set_new(r, "bos_token_id", token_or_null(c->bos_id));
    json_object_set_new(r, "eos_token_id", token_or_null(c->eos_id));
    json_object_set_new(r, "attention_dropout", json_real(0.0));
    json_object_set_new(r, "initializer_range", json_real(0.02));
    json_object_set_new(r, "use_cache", json_true());
    json_object_set_new(r, "torch_dtype", json_string("float32"));
    /* the shortest round-trip digits above need at most 9 */
    char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(r);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "config.json: out of memory");
    *out = s;
    return RLP_OK;
}

/* Writes `s` plus a final newline atomically and frees it. */
static int write_text(const char *path, char *s)
{
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    int rc = rlpi_atomic_write_file(path, t, n + 1);
    free(t);
    return rc;
}

int rlpi_hf_config_write(const char *path, const rlpi_model_config *cfg)
{
    char *s;
    int rc = rlpi_hf_config_dump(cfg, &s);
    return rc ? rc : write_text(path, s);
}

int rlpi_hf_generation_config_write(const char *path, const rlpi_model_config *cfg)
{
    json_t *r = json_object();
    if (!r)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    json_object_set_new(r, "bos_token_id", token_or_null(cfg->bos_id));
    json_object_set_new(r, "eos_token_id", token_or_null(cfg->eos_id));
    char *s = json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(r);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    return write_text(path, s);
}
