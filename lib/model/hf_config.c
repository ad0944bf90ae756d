/* config.json parsing and rendering for Llama / Qwen2 / Mistral. Strict on
 * types (an integer field holding a string or 1.5 is a broken file, not a
 * default), lenient on keys we do not need. */
#include "model/hf_config.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_guard.h"
#include "core/mapfile.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct arch_info {
    const char *hf_class;   /* architectures[0] */
    const char *model_type; /* model_type, also our cfg->arch */
} arch_info;

static const arch_info ARCHS[] = {
    {"LlamaForCausalLM", "llama"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"MistralForCausalLM", "mistral"},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

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
    *out = (float)d;
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

static int find_arch(json_t *root, const char *src, const arch_info **out)
{
    json_t *archs = json_object_get(root, "architectures");
    json_t *mt = json_object_get(root, "model_type");
    if (archs && !json_is_null(archs)) {
        if (!json_is_array(archs) || json_array_size(archs) == 0 ||
            !json_is_string(json_array_get(archs, 0)))
            BAD("%s: 'architectures' must be a non-empty array of strings", src);
        const char *a = json_string_value(json_array_get(archs, 0));
        for (size_t i = 0; i < N_ARCHS; i++)
            if (!strcmp(a, ARCHS[i].hf_class)) {
                *out = &ARCHS[i];
                return RLP_OK;
            }
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: architecture '%.64s' is not supported (LlamaForCausalLM, "
                              "Qwen2ForCausalLM, MistralForCausalLM are)",
                              src, a);
    }
    if (mt && !json_is_null(mt)) {
        if (!json_is_string(mt))
            BAD("%s: 'model_type' must be a string", src);
        const char *m = json_string_value(mt);
        for (size_t i = 0; i < N_ARCHS; i++)
            if (!strcmp(m, ARCHS[i].model_type)) {
                *out = &ARCHS[i];
                return RLP_OK;
            }
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: model_type '%.64s' is not supported (llama, qwen2, mistral are)",
                              src, m);
    }
    BAD("%s: neither 'architectures' nor 'model_type' says what model this is", src);
}

/* RoPE settings. transformers < 5 writes top-level `rope_theta` and a
 * `rope_scaling` object (type key "type" or "rope_type"); transformers 5
 * writes one `rope_parameters` object holding rope_theta and rope_type.
 * Both are read; rope_parameters wins when present. */
static int parse_rope(json_t *root, const char *src, rlpi_model_config *c)
{
    c->rope_scaling = RLPI_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    int rc = get_num(root, "rope_theta", 0, 10000.0, src, &c->rope_theta);
    if (rc)
        return rc;
    json_t *rs = json_object_get(root, "rope_parameters");
    int v5 = rs && !json_is_null(rs);
    if (v5) {
        if (!json_is_object(rs))
            BAD("%s: 'rope_parameters' must be an object or null", src);
        if ((rc = get_num(rs, "rope_theta", 0, (double)c->rope_theta, src, &c->rope_theta)))
            return rc;
    } else {
        rs = json_object_get(root, "rope_scaling");
        if (!rs || json_is_null(rs))
            return RLP_OK;
        if (!json_is_object(rs))
            BAD("%s: 'rope_scaling' must be an object or null", src);
    }
    /* transformers renamed "type" to "rope_type"; files carry either */
    json_t *t = json_object_get(rs, "rope_type");
    if (!t)
        t = json_object_get(rs, "type");
    if (!t && v5)
        return RLP_OK; /* rope_parameters with only rope_theta */
    if (!json_is_string(t))
        BAD("%s: %s needs a string 'rope_type' (or 'type')", src,
            v5 ? "rope_parameters" : "rope_scaling");
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
            BAD("%s: rope_scaling needs 0 < low_freq_factor < high_freq_factor", src);
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_UNSUPPORTED,
                          "%s: rope_scaling type '%.32s' is not supported (llama3, linear are)", src,
                          type);
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

static int parse_root(json_t *root, const char *src, rlpi_model_config *c)
{
    if (!json_is_object(root))
        BAD("%s: config is not a JSON object", src);
    memset(c, 0, sizeof *c);
    const arch_info *a = NULL;
    int rc = find_arch(root, src, &a);
    if (rc)
        return rc;
    snprintf(c->arch, sizeof c->arch, "%s", a->model_type);
    int is_qwen2 = !strcmp(a->model_type, "qwen2");
    int is_mistral = !strcmp(a->model_type, "mistral");

    json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act)) {
        if (!json_is_string(act))
            BAD("%s: 'hidden_act' must be a string", src);
        if (strcmp(json_string_value(act), "silu"))
            return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: hidden_act '%.32s' is not supported (silu is)",
                                  src, json_string_value(act));
    }
    if ((rc = get_int(root, "hidden_size", 1, 0, 1, INT32_MAX, src, &c->dim)) ||
        (rc = get_int(root, "intermediate_size", 1, 0, 1, INT32_MAX, src, &c->ffn_dim)) ||
        (rc = get_int(root, "num_hidden_layers", 1, 0, 1, INT32_MAX, src, &c->n_layers)) ||
        (rc = get_int(root, "num_attention_heads", 1, 0, 1, INT32_MAX, src, &c->n_heads)) ||
        (rc = get_int(root, "num_key_value_heads", 0, c->n_heads, 1, INT32_MAX, src,
                      &c->n_kv_heads)) ||
        (rc = get_int(root, "vocab_size", 1, 0, 1, INT32_MAX, src, &c->vocab_size)) ||
        (rc = get_int(root, "max_position_embeddings", 0, is_qwen2 ? 32768 : 2048, 1, INT32_MAX,
                      src, &c->max_seq_len)))
        return rc;
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
    if ((rc = get_num(root, "rms_norm_eps", 0, 1e-6, src, &c->rms_eps)) ||
        (rc = parse_rope(root, src, c)))
        return rc;
    int tie, bias, mlp_bias;
    if ((rc = get_bool(root, "tie_word_embeddings", 0, src, &tie)) ||
        (rc = get_bool(root, "attention_bias", 0, src, &bias)) ||
        (rc = get_bool(root, "mlp_bias", 0, src, &mlp_bias)))
        return rc;
    c->tie_embeddings = tie;
    if (is_qwen2) {
        c->attention_bias = true; /* Qwen2Attention hard-codes q/k/v bias, no o_proj bias */
    } else if (bias) {
        /* LlamaAttention's attention_bias also biases o_proj, which our
         * transformer has no place for */
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: attention_bias=true (o_proj bias) is not supported for %s", src,
                              a->hf_class);
    }
    if (mlp_bias)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: mlp_bias=true is not supported", src);

    /* Sliding-window attention equals full attention within the window,
     * so capping the context keeps every result exact. */
    int use_sw = is_mistral;
    if (is_qwen2 && (rc = get_bool(root, "use_sliding_window", 0, src, &use_sw)))
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
                return rlpi_error_set(RLP_E_UNSUPPORTED,
                                      "%s: layer type '%.32s' is not supported", src, k);
        }
    }
    if (use_sw) {
        int32_t sw;
        if ((rc = get_int(root, "sliding_window", 0, 0, 0, INT32_MAX, src, &sw)))
            return rc;
        if (sw > 0 && sw < c->max_seq_len)
            c->max_seq_len = sw;
    }
    if ((rc = get_token_id(root, "bos_token_id", src, &c->bos_id)) ||
        (rc = get_token_id(root, "eos_token_id", src, &c->eos_id)))
        return rc;
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

static const arch_info *arch_of(const rlpi_model_config *c)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(c->arch, ARCHS[i].model_type))
            return &ARCHS[i];
    return NULL;
}

static json_t *token_or_null(int32_t id)
{
    return id >= 0 ? json_integer(id) : json_null();
}

int rlpi_hf_config_dump(const rlpi_model_config *c, char **out)
{
    *out = NULL;
    const arch_info *a = arch_of(c);
    if (!a)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "config.json: arch '%.32s' has no transformers class here", c->arch);
    int is_qwen2 = !strcmp(a->model_type, "qwen2");
    json_t *r = json_object();
    json_t *archs = json_array();
    if (!r || !archs) {
        json_decref(r);
        json_decref(archs);
        return rlpi_error_set(RLP_E_NOMEM, "config.json: out of memory");
    }
    json_array_append_new(archs, json_string(a->hf_class));
    json_object_set_new(r, "architectures", archs);
    json_object_set_new(r, "model_type", json_string(a->model_type));
    json_object_set_new(r, "hidden_size", json_integer(c->dim));
    json_object_set_new(r, "intermediate_size", json_integer(c->ffn_dim));
    json_object_set_new(r, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(r, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(r, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(r, "head_dim", json_integer(c->head_dim));
    json_object_set_new(r, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(r, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(r, "hidden_act", json_string("silu"));
    json_object_set_new(r, "rms_norm_eps", json_float(c->rms_eps));
    json_object_set_new(r, "rope_theta", json_float(c->rope_theta));
    if (c->rope_scaling == RLPI_ROPE_SCALING_NONE) {
        json_object_set_new(r, "rope_scaling", json_null());
    } else {
        json_t *rs = json_object();
        int llama3 = c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3;
        json_object_set_new(rs, "rope_type", json_string(llama3 ? "llama3" : "linear"));
        json_object_set_new(rs, "factor", json_float(c->rope_factor));
        if (llama3) {
            json_object_set_new(rs, "low_freq_factor", json_float(c->rope_low_freq_factor));
            json_object_set_new(rs, "high_freq_factor", json_float(c->rope_high_freq_factor));
            json_object_set_new(rs, "original_max_position_embeddings",
                                json_integer(c->rope_original_max_pos));
        }
        json_object_set_new(r, "rope_scaling", rs);
    }
    /* transformers 5 reads rope_parameters; older versions keep it as an
     * unused attribute. Both spellings carry the same values. */
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_theta", json_float(c->rope_theta));
    if (c->rope_scaling == RLPI_ROPE_SCALING_NONE) {
        json_object_set_new(rp, "rope_type", json_string("default"));
    } else {
        json_t *rs = json_object_get(r, "rope_scaling");
        const char *k;
        json_t *v;
        json_object_foreach(rs, k, v)
            json_object_set(rp, k, v);
    }
    json_object_set_new(r, "rope_parameters", rp);
    json_object_set_new(r, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (is_qwen2) {
        json_object_set_new(r, "use_sliding_window", json_false());
    } else {
        json_object_set_new(r, "attention_bias", json_false());
        json_object_set_new(r, "mlp_bias", json_false());
    }
    if (!strcmp(a->model_type, "mistral"))
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
