/* GGUF → (rlpi_model_config, rlpi_weights) for the families of
 * lib/model/arch.c (llama, mistral, qwen2, qwen3, gemma3). The file is
 * already validated by gguf.c; here every tensor's shape is checked against
 * the config (a hostile file could still lie about shapes), names are mapped
 * to Hugging Face's, and q/k rows are returned to HF order where the
 * family's row says llama.cpp's converter permuted them. Gemma's norms are
 * stored as 1 + w already (the effective scale we hold): no conversion.
 * Must not touch the tokenizer keys beyond the vocabulary size. */
#include "model/gguf_model.h"

#include "core/clock.h"
#include "core/checked.h"
#include "core/error.h"
#include "model/arch.h"
#include "model/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- config ------------------------------------------------------------- */

static int arch_u32(const rlpi_gguf *g, const char *arch, const char *suffix, int32_t *out, bool required,
                    int32_t dflt)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    int rc = rlpi_gguf_get_u32(g, key, &v);
    if (rc == RLP_E_NOT_FOUND && !required) {
        *out = dflt;
        return RLP_OK;
    }
    if (rc)
        return rc;
    if (v > INT32_MAX)
        return rlpi_error_set(RLP_E_FORMAT, "%s: key '%s' = %u is out of range", g->source, key, v);
    *out = (int32_t)v;
    return RLP_OK;
}

static int arch_f32(const rlpi_gguf *g, const char *arch, const char *suffix, float *out, bool required,
                    float dflt)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = rlpi_gguf_get_f32(g, key, out);
    if (rc == RLP_E_NOT_FOUND && !required) {
        *out = dflt;
        return RLP_OK;
    }
    return rc;
}

/* llama.cpp stores Llama-3 RoPE scaling not as parameters but as the per
 * frequency divisors it produces (`rope_freqs.weight`, head_dim/2 floats).
 * We recover (factor, low, high, original context) by assuming Meta's
 * published low=1, high=4 and checking that they reproduce every stored
 * value; anything else is refused rather than approximated. */
static int llama3_from_rope_freqs(const rlpi_gguf *g, const rlpi_gguf_tensor *t, rlpi_model_config *c)
{
    int half = c->head_dim / 2;
    if (t->type != RLPI_GGML_F32 || t->n_dims != 1 || t->ne[0] != (uint64_t)half)
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor 'rope_freqs.weight' must be F32 [%d]", g->source, half);
    float *rf = malloc((size_t)half * sizeof *rf);
    if (!rf)
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", g->source);
    memcpy(rf, t->data, (size_t)half * sizeof *rf);
    float factor = 1.0f;
    for (int i = 0; i < half; i++) {
        if (!isfinite(rf[i]) || rf[i] < 1.0f) {
            double bad = rf[i];
            free(rf);
            return rlpi_error_set(RLP_E_FORMAT, "%s: rope_freqs.weight[%d] = %g is not a divisor >= 1", g->source,
                                  i, bad);
        }
        if (rf[i] > factor)
            factor = rf[i];
    }
    if (factor == 1.0f) {
        free(rf);
        return RLP_OK; /* all ones: no scaling */
    }
    const double low = 1.0, high = 4.0, pi = 3.14159265358979323846;
    double orig = (double)c->rope_original_max_pos;
    int rc = RLP_OK;
    for (int i = 0; i < half && !rc; i++) {
        double freq = 1.0 / pow((double)c->rope_theta, 2.0 * i / c->head_dim);
        double wavelen = 2 * pi / freq, want;
        if (wavelen < orig / high)
            want = 1.0;
        else if (wavelen > orig / low)
            want = factor;
        else {
            double smooth = (orig / wavelen - low) / (high - low);
            want = 1.0 / ((1 - smooth) / factor + smooth);
        }
        /* the converter rounds a double to fp32: allow a few fp32 ulps */
        if (fabs(want - rf[i]) > 1e-5 * want)
            rc = rlpi_error_set(RLP_E_UNSUPPORTED,
                                "%s: rope_freqs.weight[%d] = %g is not Llama-3 scaling (factor %g, low 1, high 4, "
                                "original context %d gives %g)",
                                g->source, i, (double)rf[i], (double)factor, c->rope_original_max_pos, want);
    }
    free(rf);
    if (rc)
        return rc;
    c->rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
    c->rope_factor = factor;
    c->rope_low_freq_factor = (float)low;
    c->rope_high_freq_factor = (float)high;
    return RLP_OK;
}

/* Local (sliding-window) layers: `<arch>.attention.sliding_window_pattern`
 * as llama.cpp reads it (get_key_or_arr): a period n (layer i local when
 * i % n < n - 1, i.e. (i + 1) % n != 0; 0 = every layer local) or one bool
 * per layer (true = local); absent = the family's period (Gemma 3: 6,
 * which llama.cpp hard-codes and its converter does not write). */
static int local_pattern(const rlpi_gguf *g, const rlpi_arch_desc *ad, rlpi_model_config *c)
{
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ad->name);
    const rlpi_gguf_kv *kv = rlpi_gguf_find(g, key);
    if (!kv) {
        rlpi_arch_default_local_layers(ad, c);
        return RLP_OK;
    }
    memset(c->local_layers, 0, sizeof c->local_layers);
    if (kv->type == RLPI_GGUF_ARRAY) {
        if (kv->arr_type != RLPI_GGUF_BOOL || kv->arr_n != (uint64_t)c->n_layers)
            return rlpi_error_set(RLP_E_FORMAT, "%s: '%s' must be %d bools (one per layer), not %llu of type %s",
                                  g->source, key, c->n_layers, (unsigned long long)kv->arr_n,
                                  rlpi_gguf_vtype_name(kv->arr_type));
        for (int32_t i = 0; i < c->n_layers; i++) {
            if (kv->val[i] > 1)
                return rlpi_error_set(RLP_E_FORMAT, "%s: '%s'[%d] = %u is not a bool", g->source, key, i,
                                      (unsigned)kv->val[i]);
            c->local_layers[i] = kv->val[i];
        }
        return RLP_OK;
    }
    uint32_t n;
    int rc = rlpi_gguf_get_u32(g, key, &n);
    if (rc)
        return rc;
    if (n > (uint32_t)c->n_layers)
        return rlpi_error_set(RLP_E_FORMAT, "%s: '%s' = %u exceeds the %d layers", g->source, key, n, c->n_layers);
    for (int32_t i = 0; i < c->n_layers; i++)
        c->local_layers[i] = n == 0 || (uint32_t)i % n < n - 1;
    return RLP_OK;
}

/* What the family's row leaves to the file: the sliding window and its
 * layers, the local RoPE base (`rope.freq_base_swa`, else the row's 10000
 * that llama.cpp hard-codes for Gemma 3), `attention.scale` (else
 * 1/sqrt(head_dim), as llama.cpp uses for Gemma 3 below 27B) and
 * `final_logit_softcapping`. */
static int family_keys(const rlpi_gguf *g, const rlpi_arch_desc *ad, rlpi_model_config *c)
{
    const char *a = ad->name;
    int rc;
    if ((rc = arch_f32(g, a, "attention.scale", &c->attn_scale, false, 0.0f)) ||
        (rc = arch_f32(g, a, "final_logit_softcapping", &c->final_softcap, false, 0.0f)))
        return rc;
    if (!(c->attn_scale >= 0) || !(c->final_softcap >= 0))
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s.attention.scale %g / %s.final_logit_softcapping %g must be >= 0",
                              g->source, a, (double)c->attn_scale, a, (double)c->final_softcap);
    if (!ad->sliding_window)
        return RLP_OK; /* Mistral's window key, if any, is not ours to use (as before) */
    uint32_t sw;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window", a);
    if ((rc = rlpi_gguf_get_u32(g, key, &sw)))
        return rc;
    if (sw < 1 || sw > 1u << 24)
        return rlpi_error_set(RLP_E_FORMAT, "%s: '%s' = %u is out of range [1, %d]", g->source, key, sw, 1 << 24);
    c->sliding_window = (int32_t)sw;
    if (c->n_layers < 1 || c->n_layers > RLPI_MAX_LAYERS)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s.block_count %d out of range [1, %d]", g->source, a, c->n_layers,
                              RLPI_MAX_LAYERS);
    if ((rc = arch_f32(g, a, "rope.freq_base_swa", &c->rope_theta_local, false, c->rope_theta_local)))
        return rc;
    return local_pattern(g, ad, c);
}

int rlpi_gguf_model_config(const rlpi_gguf *g, rlpi_model_config *cfg)
{
    RLPI_CHECK_ARG(g && cfg, "NULL argument");
    rlpi_model_config c;
    memset(&c, 0, sizeof c);
    rlpi_gguf_str s;
    int rc = rlpi_gguf_get_str(g, "general.architecture", &s);
    if (rc)
        return rc;
    if (s.len == 0 || s.len >= sizeof c.arch)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: general.architecture of length %llu is not supported",
                              g->source, (unsigned long long)s.len);
    char name[sizeof c.arch];
    memcpy(name, s.ptr, (size_t)s.len);
    name[s.len] = '\0';
    const rlpi_arch_desc *ad = strlen(name) == s.len ? rlpi_arch_find(name) : NULL;
    if (!ad || strcmp(ad->name, name))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: architecture '%.*s' is not supported (%s)", g->source,
                              (int)s.len, s.ptr, rlpi_arch_names());
    const char *a = ad->name;
    if ((rc = arch_u32(g, a, "block_count", &c.n_layers, true, 0)) ||
        (rc = arch_u32(g, a, "embedding_length", &c.dim, true, 0)) ||
        (rc = arch_u32(g, a, "attention.head_count", &c.n_heads, true, 0)) ||
        (rc = arch_u32(g, a, "attention.head_count_kv", &c.n_kv_heads, false, c.n_heads)) ||
        (rc = arch_u32(g, a, "feed_forward_length", &c.ffn_dim, true, 0)) ||
        (rc = arch_u32(g, a, "context_length", &c.max_seq_len, true, 0)) ||
        (rc = arch_f32(g, a, "rope.freq_base", &c.rope_theta, false, 10000.0f)) ||
        (rc = arch_f32(g, a, "attention.layer_norm_rms_epsilon", &c.rms_eps, true, 0)))
        return rc;
    rlpi_arch_apply(ad, &c); /* after dim: the embedding scale is sqrt(dim) */
    if (c.n_heads < 1)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %s.attention.head_count is 0", g->source, a);
    int32_t key_len, val_len, rot;
    if ((rc = arch_u32(g, a, "attention.key_length", &key_len, false, c.dim / c.n_heads)) ||
        (rc = arch_u32(g, a, "attention.value_length", &val_len, false, key_len)) ||
        (rc = arch_u32(g, a, "rope.dimension_count", &rot, false, key_len)))
        return rc;
    if (val_len != key_len || rot != key_len)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: key_length %d, value_length %d, rope.dimension_count %d must be equal", g->source,
                              key_len, val_len, rot);
    c.head_dim = key_len;

    /* vocabulary: explicit size, else the tokenizer's, else the embedding's */
    uint64_t nv = 0;
    rc = arch_u32(g, a, "vocab_size", &c.vocab_size, false, -1);
    if (rc)
        return rc;
    if (c.vocab_size < 0) {
        const rlpi_gguf_tensor *emb = rlpi_gguf_find_tensor(g, "token_embd.weight");
        rc = rlpi_gguf_get_arr_len(g, "tokenizer.ggml.tokens", &nv);
        if (rc == RLP_E_NOT_FOUND && emb && emb->n_dims == 2) {
            nv = emb->ne[1];
            rc = RLP_OK;
        }
        if (rc)
            return rc;
        if (nv > INT32_MAX)
            return rlpi_error_set(RLP_E_FORMAT, "%s: vocabulary of %llu tokens is out of range", g->source,
                                  (unsigned long long)nv);
        c.vocab_size = (int32_t)nv;
    }

    char key[96], *type = key;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    c.rope_scaling = RLPI_ROPE_SCALING_NONE;
    c.rope_factor = 1.0f;
    if ((rc = arch_u32(g, a, "rope.scaling.original_context_length", &c.rope_original_max_pos, false, 8192)))
        return rc;
    rc = rlpi_gguf_get_str(g, key, &s);
    if (rc && rc != RLP_E_NOT_FOUND)
        return rc;
    if (!rc && !(s.len == 4 && !memcmp(s.ptr, "none", 4))) {
        if (s.len == 6 && !memcmp(s.ptr, "linear", 6)) {
            c.rope_scaling = RLPI_ROPE_SCALING_LINEAR;
            if ((rc = arch_f32(g, a, "rope.scaling.factor", &c.rope_factor, true, 1.0f)))
                return rc;
        } else {
            return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: %s '%.*s' is not supported (none, linear, llama3)",
                                  g->source, type, (int)(s.len > 32 ? 32 : s.len), s.ptr);
        }
    }
    const rlpi_gguf_tensor *rf = rlpi_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf && c.rope_scaling == RLPI_ROPE_SCALING_NONE && c.head_dim >= 2 &&
        (rc = llama3_from_rope_freqs(g, rf, &c)))
        return rc;

    /* BOS and EOS as the tokenizer reads them (gguf_tokenizer.c): absent is
     * none; present and outside the vocabulary is a broken file */
    uint32_t id;
    c.bos_id = c.eos_id = -1;
    static const char *const id_keys[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int i = 0; i < 2; i++) {
        if (!rlpi_gguf_find(g, id_keys[i]))
            continue;
        if ((rc = rlpi_gguf_get_u32(g, id_keys[i], &id)))
            return rc;
        if (c.vocab_size > 0 && (uint64_t)id >= (uint64_t)c.vocab_size)
            return rlpi_error_set(RLP_E_FORMAT, "%s: '%s' = %lu is not a token of the %lld-token vocabulary",
                                  g->source, id_keys[i], (unsigned long)id, (long long)c.vocab_size);
        *(i ? &c.eos_id : &c.bos_id) = (int32_t)id;
    }
    c.tie_embeddings = rlpi_gguf_find_tensor(g, "output.weight") == NULL;
    c.attention_bias = c.attention_bias || rlpi_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    if ((rc = family_keys(g, ad, &c)))
        return rc;
    if ((rc = rlpi_model_config_validate(&c, g->source)))
        return rc;
    *cfg = c;
    return RLP_OK;
}

/* ---- tensor names and shapes -------------------------------------------- */

typedef enum permute_kind { PERM_NONE, PERM_Q, PERM_K } permute_kind;

typedef struct mapping {
    char hf[160];
    int n_dims;
    int64_t rows, cols;  /* PyTorch shape (rows, cols); cols unused when 1-D */
    permute_kind perm;
} mapping;

/* Parses a canonical "blk.<n>." prefix; returns the suffix or NULL. */
static const char *layer_suffix(const char *name, int n_layers, int *layer)
{
    if (strncmp(name, "blk.", 4) != 0)
        return NULL;
    const char *p = name + 4;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) {
        v = v * 10 + (*p++ - '0');
        digits++;
    }
    if (!digits || *p != '.' || (digits > 1 && name[4] == '0') || v >= n_layers)
        return NULL;
    *layer = (int)v;
    return p + 1;
}

/* Maps a GGUF tensor name to its HF name and expected shape; false if the
 * name is not part of a Llama-family model. */
static bool map_name(const rlpi_model_config *c, const char *name, mapping *m)
{
    int64_t d = c->dim, q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim,
            f = c->ffn_dim, v = c->vocab_size;
    const rlpi_arch_desc *ad = rlpi_arch_find(c->arch);
    if (!ad)
        return false;
    bool permuted = ad->gguf_permute_qk;
    m->perm = PERM_NONE;
    m->n_dims = 2;
    m->cols = d;
    if (!strcmp(name, "token_embd.weight")) {
        snprintf(m->hf, sizeof m->hf, "model.embed_tokens.weight");
        m->rows = v;
        return true;
    }
    if (!strcmp(name, "output.weight")) {
        snprintf(m->hf, sizeof m->hf, "lm_head.weight");
        m->rows = v;
        return true;
    }
    if (!strcmp(name, "output_norm.weight")) {
        snprintf(m->hf, sizeof m->hf, "model.norm.weight");
        m->n_dims = 1, m->rows = d;
        return true;
    }
    int l;
    const char *s = layer_suffix(name, c->n_layers, &l);
    if (!s)
        return false;
    static const struct {
        const char *gguf, *hf;
        int n_dims;
        char rows, cols; /* 'd' dim, 'q' heads*hd, 'k' kv heads*hd, 'f' ffn, 'h' head_dim */
        char perm;       /* 'q', 'k' or 0 */
        char needs;      /* 'n' only with q/k norms, 'p' only with post-norms, 0 always */
    } table[] = {
        {"attn_norm.weight", "input_layernorm.weight", 1, 'd', 0, 0, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", 2, 'q', 'd', 'q', 0},
        {"attn_k.weight", "self_attn.k_proj.weight", 2, 'k', 'd', 'k', 0},
        {"attn_v.weight", "self_attn.v_proj.weight", 2, 'k', 'd', 0, 0},
        {"attn_output.weight", "self_attn.o_proj.weight", 2, 'd', 'q', 0, 0},
        {"attn_q.bias", "self_attn.q_proj.bias", 1, 'q', 0, 'q', 0},
        {"attn_k.bias", "self_attn.k_proj.bias", 1, 'k', 0, 'k', 0},
        {"attn_v.bias", "self_attn.v_proj.bias", 1, 'k', 0, 0, 0},
        {"ffn_gate.weight", "mlp.gate_proj.weight", 2, 'f', 'd', 0, 0},
        {"ffn_up.weight", "mlp.up_proj.weight", 2, 'f', 'd', 0, 0},
        {"ffn_down.weight", "mlp.down_proj.weight", 2, 'd', 'f', 0, 0},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", 1, 'h', 0, 0, 'n'},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", 1, 'h', 0, 0, 'n'},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", 1, 'd', 0, 0, 'p'},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", 1, 'd', 0, 0, 'p'},
    };
    if (!strcmp(s, "ffn_norm.weight")) {
        /* the MLP's input norm: HF's name depends on the family (arch.c) */
        snprintf(m->hf, sizeof m->hf, "model.layers.%d.%s", l, ad->gguf_ffn_norm);
        m->n_dims = 1, m->rows = d;
        return true;
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(s, table[i].gguf))
            continue;
        if ((table[i].needs == 'n' && !c->qk_norm) || (table[i].needs == 'p' && !c->post_norms))
            return false;
        int64_t sz[128] = {0};
        sz['d'] = d, sz['q'] = q, sz['k'] = kv, sz['f'] = f, sz['h'] = c->head_dim;
        snprintf(m->hf, sizeof m->hf, "model.layers.%d.%s", l, table[i].hf);
        m->n_dims = table[i].n_dims;
        m->rows = sz[(int)table[i].rows];
        m->cols = sz[(int)table[i].cols];
        if (permuted)
            m->perm = table[i].perm == 'q' ? PERM_Q : table[i].perm == 'k' ? PERM_K : PERM_NONE;
        return true;
    }
    return false;
}

/* ---- dequantization ------------------------------------------------------ */

typedef struct deq_job {
    const rlpi_gguf_tensor *t;
    const rlpi_ggml_type_info *ti;
    float *dst;
    uint64_t row_len, row_bytes;
} deq_job;

static void deq_rows(void *arg, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const deq_job *j = arg;
    /* cannot fail: type and sizes were checked before the loop */
    (void)rlpi_dequantize(j->t->type, j->t->data + (uint64_t)begin * j->row_bytes,
                          (size_t)((uint64_t)(end - begin) * j->row_bytes), j->dst + (uint64_t)begin * j->row_len,
                          (size_t)((uint64_t)(end - begin) * j->row_len));
}

/* llama.cpp's converter reorders the rows of each head of q/k from HF's
 * half-split layout (rotate_half pairs i and i + hd/2) to interleaved pairs
 * (2i, 2i+1): gguf row h*hd + 2i + s holds HF row h*hd + s*hd/2 + i. This
 * puts them back. `src` and `dst` are (n_heads*hd, cols). */
static void unpermute_rows(const float *src, float *dst, int64_t n_heads, int64_t hd, int64_t cols)
{
    int64_t half = hd / 2;
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t s = 0; s < 2; s++)
                memcpy(dst + (h * hd + s * half + i) * cols, src + (h * hd + 2 * i + s) * cols,
                       (size_t)cols * sizeof *dst);
}

int rlpi_gguf_model_weights(const rlpi_gguf *g, rlpi_model_config *cfg, rlpi_weights *w, rlpi_threadpool *pool)
{
    RLPI_CHECK_ARG(g && cfg && w, "NULL argument");
    float *tmp = NULL;
    size_t tmp_n = 0;
    int rc = RLP_OK;
    for (uint64_t i = 0; i < g->n_tensors && !rc; i++) {
        const rlpi_gguf_tensor *t = &g->tensors[i];
        if (!strcmp(t->name, "rope_freqs.weight"))
            continue; /* consumed by the config (Llama-3 scaling) */
        mapping m;
        if (!map_name(cfg, t->name, &m)) {
            rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: tensor '%s' is not part of a %s model", g->source,
                                t->name, cfg->arch);
            break;
        }
        bool shape_ok = t->n_dims == (uint32_t)m.n_dims && t->ne[2] == 1 && t->ne[3] == 1 &&
                        (m.n_dims == 1 ? t->ne[0] == (uint64_t)m.rows && t->ne[1] == 1
                                       : t->ne[0] == (uint64_t)m.cols && t->ne[1] == (uint64_t)m.rows);
        if (!shape_ok) {
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "%s: tensor '%s' has shape [%llu, %llu, %llu, %llu] (ne order), expected [%lld, %lld]",
                                g->source, t->name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                                (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                                (long long)(m.n_dims == 1 ? m.rows : m.cols), (long long)(m.n_dims == 1 ? 1 : m.rows));
            break;
        }
        const rlpi_ggml_type_info *ti = rlpi_ggml_type(t->type);
        if (!ti->dequant) {
            rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: tensor '%s' has type %s, which cannot be dequantized",
                                g->source, t->name, ti->name);
            break;
        }
        int64_t shape[2] = {m.rows, m.cols};
        rlpi_tensor *out;
        if ((rc = rlpi_weights_add(w, m.hf, m.n_dims, shape, &out)))
            break;
        snprintf(out->src_dtype, sizeof out->src_dtype, "%s", ti->name);
        float *dst = out->data;
        if (m.perm != PERM_NONE) {
            if (tmp_n < out->n_elems) {
                free(tmp);
                tmp = malloc(out->n_elems * sizeof *tmp);
                tmp_n = tmp ? out->n_elems : 0;
                if (!tmp) {
                    rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for tensor '%s'", g->source, t->name);
                    break;
                }
            }
            dst = tmp;
        }
        uint64_t n_rows = t->ne[1];
        deq_job job = {t, ti, dst, t->ne[0], t->ne[0] / ti->blck * ti->type_size};
        rlpi_threadpool_parallel_for(pool, (int64_t)n_rows, 16, deq_rows, &job);
        if (m.perm != PERM_NONE) {
            int64_t heads = m.perm == PERM_Q ? cfg->n_heads : cfg->n_kv_heads;
            unpermute_rows(tmp, out->data, heads, cfg->head_dim, m.n_dims == 1 ? 1 : m.cols);
        }
    }
    free(tmp);
    if (rc)
        return rc;

    /* Every tensor the transformer needs must be there (named as the
     * file would name it, and as we do). */
    const rlpi_arch_desc *ad = rlpi_arch_find(cfg->arch);
    cfg->attention_bias = (ad && ad->qkv_bias) || rlpi_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    char name[160];
    const char *ffn_norm = ad ? ad->gguf_ffn_norm : "post_attention_layernorm.weight";
    const struct {
        const char *gguf, *hf;
        bool needed;
    } per_layer[] = {
        {"attn_norm.weight", "input_layernorm.weight", true},
        {"attn_q.weight", "self_attn.q_proj.weight", true},
        {"attn_k.weight", "self_attn.k_proj.weight", true},
        {"attn_v.weight", "self_attn.v_proj.weight", true},
        {"attn_output.weight", "self_attn.o_proj.weight", true},
        {"ffn_norm.weight", ffn_norm, true},
        {"ffn_gate.weight", "mlp.gate_proj.weight", true},
        {"ffn_up.weight", "mlp.up_proj.weight", true},
        {"ffn_down.weight", "mlp.down_proj.weight", true},
        {"attn_q.bias", "self_attn.q_proj.bias", cfg->attention_bias},
        {"attn_k.bias", "self_attn.k_proj.bias", cfg->attention_bias},
        {"attn_v.bias", "self_attn.v_proj.bias", cfg->attention_bias},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", cfg->qk_norm},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", cfg->qk_norm},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", cfg->post_norms},
        {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", cfg->post_norms},
    };
    for (int l = 0; l < cfg->n_layers; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k].hf);
            if (per_layer[k].needed && !rlpi_weights_find(w, name))
                return rlpi_error_set(RLP_E_FORMAT, "%s: missing tensor for '%s' (%s needs 'blk.%d.%s')",
                                      g->source, name, cfg->arch, l, per_layer[k].gguf);
        }
    if (!rlpi_weights_find(w, "model.embed_tokens.weight"))
        return rlpi_error_set(RLP_E_FORMAT, "%s: missing tensor 'token_embd.weight'", g->source);
    if (!rlpi_weights_find(w, "model.norm.weight"))
        return rlpi_error_set(RLP_E_FORMAT, "%s: missing tensor 'output_norm.weight'", g->source);
    cfg->tie_embeddings = rlpi_weights_find(w, "lm_head.weight") == NULL;
    if (cfg->tie_embeddings && (rc = rlpi_weights_add_alias(w, "lm_head.weight", "model.embed_tokens.weight")))
        return rc;
    return RLP_OK;
}

int rlpi_gguf_model_load(const char *path, rlpi_model_config *cfg, rlpi_weights *w, rlpi_threadpool *pool,
                         rlpi_gguf_load_stats *stats)
{
    RLPI_CHECK_ARG(path && cfg && w, "NULL argument");
    double t0 = rlpi_now_s();
    rlpi_gguf *g;
    int rc = rlpi_gguf_open(&g, path);
    if (rc)
        return rc;
    double t1 = rlpi_now_s();
    rlpi_model_config c;
    rlpi_weights tmp;
    rlpi_weights_init(&tmp);
    if (!(rc = rlpi_gguf_model_config(g, &c)))
        rc = rlpi_gguf_model_weights(g, &c, &tmp, pool);
    if (rc) {
        rlpi_weights_free(&tmp);
        rlpi_gguf_close(g);
        return rc;
    }
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->open_s = t1 - t0;
        stats->dequant_s = rlpi_now_s() - t1;
        stats->n_tensors = g->n_tensors;
        stats->file_bytes = g->size;
        for (size_t i = 0; i < tmp.n; i++)
            if (tmp.tensors[i].data)
                stats->fp32_bytes += tmp.tensors[i].n_elems * sizeof(float);
    }
    rlpi_gguf_close(g);
    rlpi_weights_free(w);
    *w = tmp;
    *cfg = c;
    return RLP_OK;
}
