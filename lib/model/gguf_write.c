/* GGUF out (see gguf_write.h). Layout written, as the GGUF v3 spec and
 * ggml's gguf.cpp read it: "GGUF", version 3, tensor count, KV count; the
 * KVs; the tensor infos (name, n_dims, ne[] innermost first, type, offset
 * in the data section); zero padding to 32 bytes; then each tensor's bytes,
 * each padded to 32. Metadata goes through one growable buffer; tensor data
 * is converted and written one tensor at a time, so the peak extra memory
 * is one tensor. */
#include "model/gguf_write.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "model/arch.h"
#include "model/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 32u

/* ---- a growable byte buffer for the header ------------------------------ */

void rlpi_gguf_put(rlpi_gguf_wbuf *b, const void *src, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* GGUF is little-endian; the reader (gguf.c) already refuses other hosts */
void rlpi_gguf_put_u32(rlpi_gguf_wbuf *b, uint32_t v) { rlpi_gguf_put(b, &v, 4); }
void rlpi_gguf_put_u64(rlpi_gguf_wbuf *b, uint64_t v) { rlpi_gguf_put(b, &v, 8); }
static void put_str(rlpi_gguf_wbuf *b, const char *s)
{
    rlpi_gguf_put_u64(b, strlen(s));
    rlpi_gguf_put(b, s, strlen(s));
}

void rlpi_gguf_kv_key(rlpi_gguf_kvw *k, const char *key, uint32_t type)
{
    put_str(&k->b, key);
    rlpi_gguf_put_u32(&k->b, type);
    k->n++;
}
static void kv_u32(rlpi_gguf_kvw *k, const char *key, uint32_t v)
{
    rlpi_gguf_kv_key(k, key, RLPI_GGUF_UINT32);
    rlpi_gguf_put_u32(&k->b, v);
}
static void kv_f32(rlpi_gguf_kvw *k, const char *key, float v)
{
    rlpi_gguf_kv_key(k, key, RLPI_GGUF_FLOAT32);
    rlpi_gguf_put(&k->b, &v, 4);
}
static void kv_str(rlpi_gguf_kvw *k, const char *key, const char *v)
{
    rlpi_gguf_kv_key(k, key, RLPI_GGUF_STRING);
    put_str(&k->b, v);
}
/* "<arch>.<suffix>" keys */
static const char *akey(char *buf, size_t cap, const char *arch, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", arch, suffix);
    return buf;
}

/* ---- metadata ------------------------------------------------------------ */

uint32_t rlpi_gguf_file_type(uint32_t type)
{
    switch (type) { /* llama_ftype values (llama.h) */
    case RLPI_GGML_F16: return 1;   /* MOSTLY_F16 */
    case RLPI_GGML_Q4_0: return 2;  /* MOSTLY_Q4_0 */
    case RLPI_GGML_Q8_0: return 7;  /* MOSTLY_Q8_0 */
    case RLPI_GGML_Q4_K: return 14; /* MOSTLY_Q4_K_S: Q4_K throughout */
    case RLPI_GGML_BF16: return 32; /* MOSTLY_BF16 */
    default: return 0;              /* ALL_F32 */
    }
}

static void arch_metadata(rlpi_gguf_kvw *k, const rlpi_model_config *c, const rlpi_gguf_write_opts *o)
{
    char key[128];
    const char *a = c->arch;
    kv_str(k, "general.architecture", a);
    kv_str(k, "general.name", o->name && o->name[0] ? o->name : a);
    kv_u32(k, "general.file_type", rlpi_gguf_file_type(o->type));
    const rlpi_ggml_type_info *ti = rlpi_ggml_type(o->type);
    if (ti->blck > 1 || (o->embed_type >= 0 && rlpi_ggml_type((uint32_t)o->embed_type)->blck > 1))
        kv_u32(k, "general.quantization_version", 2); /* ggml's GGML_QNT_VERSION */
    kv_u32(k, akey(key, sizeof key, a, "context_length"), (uint32_t)c->max_seq_len);
    kv_u32(k, akey(key, sizeof key, a, "embedding_length"), (uint32_t)c->dim);
    kv_u32(k, akey(key, sizeof key, a, "block_count"), (uint32_t)c->n_layers);
    kv_u32(k, akey(key, sizeof key, a, "feed_forward_length"), (uint32_t)c->ffn_dim);
    kv_u32(k, akey(key, sizeof key, a, "attention.head_count"), (uint32_t)c->n_heads);
    kv_u32(k, akey(key, sizeof key, a, "attention.head_count_kv"), (uint32_t)c->n_kv_heads);
    kv_u32(k, akey(key, sizeof key, a, "attention.key_length"), (uint32_t)c->head_dim);
    kv_u32(k, akey(key, sizeof key, a, "attention.value_length"), (uint32_t)c->head_dim);
    kv_u32(k, akey(key, sizeof key, a, "rope.dimension_count"), (uint32_t)c->head_dim);
    kv_u32(k, akey(key, sizeof key, a, "vocab_size"), (uint32_t)c->vocab_size);
    kv_f32(k, akey(key, sizeof key, a, "rope.freq_base"), c->rope_theta);
    kv_f32(k, akey(key, sizeof key, a, "attention.layer_norm_rms_epsilon"), c->rms_eps);
    if (c->rope_scaling == RLPI_ROPE_SCALING_LINEAR) {
        kv_str(k, akey(key, sizeof key, a, "rope.scaling.type"), "linear");
        kv_f32(k, akey(key, sizeof key, a, "rope.scaling.factor"), c->rope_factor);
    } else if (c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3) {
        /* the scaling itself travels as rope_freqs.weight (llama.cpp's way) */
        kv_u32(k, akey(key, sizeof key, a, "rope.scaling.original_context_length"),
               (uint32_t)c->rope_original_max_pos);
    }
    if (c->sliding_window > 0 && rlpi_arch_find(a)->sliding_window) {
        kv_u32(k, akey(key, sizeof key, a, "attention.sliding_window"), (uint32_t)c->sliding_window);
        if (c->rope_theta_local > 0.0f)
            kv_f32(k, akey(key, sizeof key, a, "rope.freq_base_swa"), c->rope_theta_local);
    }
    if (c->final_softcap > 0.0f)
        kv_f32(k, akey(key, sizeof key, a, "final_logit_softcapping"), c->final_softcap);
}

/* Every `tokenizer.*` key of the source file, bytes as stored (the reader
 * validated them; string and array payloads are copied whole). */
static void tokenizer_metadata(rlpi_gguf_kvw *k, const rlpi_gguf *g, const char *chat_template)
{
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const rlpi_gguf_kv *kv = &g->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10) != 0 ||
            (chat_template && !strcmp(kv->key, "tokenizer.chat_template")))
            continue;
        rlpi_gguf_kv_key(k, kv->key, kv->type);
        if (kv->type == RLPI_GGUF_ARRAY) {
            rlpi_gguf_put_u32(&k->b, kv->arr_type);
            rlpi_gguf_put_u64(&k->b, kv->arr_n);
        }
        rlpi_gguf_put(&k->b, kv->val, (size_t)kv->val_bytes);
    }
    if (chat_template)
        kv_str(k, "tokenizer.chat_template", chat_template);
}

/* ---- tensors ------------------------------------------------------------- */

typedef enum perm_kind { PERM_NONE, PERM_Q, PERM_K } perm_kind;

typedef struct planned {
    char name[96];            /* GGUF name */
    const float *data;        /* HF layout (rows, cols) */
    float *owned;             /* data computed here (rope_freqs), freed after */
    uint32_t n_dims;
    uint64_t ne[2];           /* ne[0] = cols (innermost), ne[1] = rows */
    uint32_t type;
    perm_kind perm;
    uint64_t nbytes, offset;
} planned;

/* HF per-layer suffix → GGUF suffix, for families without (plain) and with
 * (post) Gemma's sandwich norms; the shape as (rows, cols) in config terms:
 * 'd' dim, 'q' heads*head_dim, 'k' kv_heads*head_dim, 'f' ffn, 'h' head_dim,
 * 0 for a 1-D tensor's cols. */
static const struct {
    const char *hf, *plain, *post;
    char rows, cols, perm;
} LAYER_MAP[] = {
    {"input_layernorm.weight", "attn_norm.weight", "attn_norm.weight", 'd', 0, 0},
    {"self_attn.q_proj.weight", "attn_q.weight", "attn_q.weight", 'q', 'd', 'q'},
    {"self_attn.k_proj.weight", "attn_k.weight", "attn_k.weight", 'k', 'd', 'k'},
    {"self_attn.v_proj.weight", "attn_v.weight", "attn_v.weight", 'k', 'd', 0},
    {"self_attn.o_proj.weight", "attn_output.weight", "attn_output.weight", 'd', 'q', 0},
    {"self_attn.q_proj.bias", "attn_q.bias", "attn_q.bias", 'q', 0, 'q'},
    {"self_attn.k_proj.bias", "attn_k.bias", "attn_k.bias", 'k', 0, 'k'},
    {"self_attn.v_proj.bias", "attn_v.bias", "attn_v.bias", 'k', 0, 0},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", "attn_q_norm.weight", 'h', 0, 0},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", "attn_k_norm.weight", 'h', 0, 0},
    /* Llama's MLP input norm is HF's post_attention_layernorm; Gemma's is
     * pre_feedforward_layernorm, its post_attention_layernorm the norm of
     * the attention output (llama.cpp: post_attention_norm) */
    {"post_attention_layernorm.weight", "ffn_norm.weight", "post_attention_norm.weight", 'd', 0, 0},
    {"pre_feedforward_layernorm.weight", NULL, "ffn_norm.weight", 'd', 0, 0},
    {"post_feedforward_layernorm.weight", NULL, "post_ffw_norm.weight", 'd', 0, 0},
    {"mlp.gate_proj.weight", "ffn_gate.weight", "ffn_gate.weight", 'f', 'd', 0},
    {"mlp.up_proj.weight", "ffn_up.weight", "ffn_up.weight", 'f', 'd', 0},
    {"mlp.down_proj.weight", "ffn_down.weight", "ffn_down.weight", 'd', 'f', 0},
};

static int64_t size_of(const rlpi_model_config *c, char what)
{
    switch (what) {
    case 'd': return c->dim;
    case 'q': return (int64_t)c->n_heads * c->head_dim;
    case 'k': return (int64_t)c->n_kv_heads * c->head_dim;
    case 'f': return c->ffn_dim;
    case 'h': return c->head_dim;
    case 'v': return c->vocab_size;
    default: return 0;
    }
}

/* Maps one HF tensor to its GGUF name, expected shape and permutation;
 * false when the name is not part of a model of this family. */
static bool map_tensor(const rlpi_model_config *c, const rlpi_arch_desc *a, const char *hf, planned *p, int64_t *rows,
                       int64_t *cols)
{
    static const struct {
        const char *hf, *gguf;
        char rows, cols;
    } top[] = {{"model.embed_tokens.weight", "token_embd.weight", 'v', 'd'},
               {"lm_head.weight", "output.weight", 'v', 'd'},
               {"model.norm.weight", "output_norm.weight", 'd', 0}};
    p->perm = PERM_NONE;
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(hf, top[i].hf)) {
            snprintf(p->name, sizeof p->name, "%s", top[i].gguf);
            *rows = size_of(c, top[i].rows), *cols = size_of(c, top[i].cols);
            return true;
        }
    int layer, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0 || layer >= c->n_layers)
        return false;
    const char *suffix = hf + used;
    for (size_t i = 0; i < sizeof LAYER_MAP / sizeof LAYER_MAP[0]; i++) {
        const char *g = c->post_norms ? LAYER_MAP[i].post : LAYER_MAP[i].plain;
        if (strcmp(suffix, LAYER_MAP[i].hf) || !g)
            continue;
        snprintf(p->name, sizeof p->name, "blk.%d.%s", layer, g);
        *rows = size_of(c, LAYER_MAP[i].rows), *cols = size_of(c, LAYER_MAP[i].cols);
        if (a->gguf_permute_qk)
            p->perm = LAYER_MAP[i].perm == 'q' ? PERM_Q : LAYER_MAP[i].perm == 'k' ? PERM_K : PERM_NONE;
        return true;
    }
    return false;
}

/* llama.cpp's converter orders each head's q/k rows for its RoPE, which
 * rotates adjacent pairs (2i, 2i+1) where HF's rotate_half pairs i with
 * i + hd/2: GGUF row h*hd + 2i + s is HF row h*hd + s*hd/2 + i
 * (convert_hf_to_gguf.py LlamaModel.permute; gguf_model.c undoes it). */
static void permute_rows(const float *src, float *dst, int64_t n_heads, int64_t hd, int64_t cols)
{
    int64_t half = hd / 2;
    for (int64_t h = 0; h < n_heads; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t s = 0; s < 2; s++)
                memcpy(dst + (h * hd + 2 * i + s) * cols, src + (h * hd + s * half + i) * cols,
                       (size_t)cols * sizeof *dst);
}

/* Llama 3.1 RoPE scaling as llama.cpp stores it: the divisor of each of the
 * head_dim/2 frequencies (convert_hf_to_gguf.py LlamaModel.generate_extra_
 * tensors; gguf_model.c recovers the parameters from it). */
static float *llama3_rope_freqs(const rlpi_model_config *c)
{
    int half = c->head_dim / 2;
    float *f = malloc((size_t)(half > 0 ? half : 1) * sizeof *f);
    if (!f)
        return NULL;
    const double pi = 3.14159265358979323846, orig = c->rope_original_max_pos;
    double lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor, factor = c->rope_factor;
    for (int i = 0; i < half; i++) {
        double freq = 1.0 / pow((double)c->rope_theta, 2.0 * i / c->head_dim), wavelen = 2 * pi / freq;
        if (wavelen < orig / hi)
            f[i] = 1.0f;
        else if (wavelen > orig / lo)
            f[i] = (float)factor;
        else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            f[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    return f;
}

/* What GGUF cannot say is refused rather than written into a file that
 * llama.cpp would run as another model: it derives the attention scale
 * (1/sqrt(key_length)), the embedding scale (sqrt(dim) for Gemma, none
 * otherwise) and Gemma 3's local/global layer pattern (every
 * local_period-th layer global) from the architecture. */
static int expressible(const rlpi_model_config *c, const rlpi_arch_desc *a, const char *path)
{
    float dflt = 1.0f / sqrtf((float)c->head_dim);
    if (c->attn_scale != 0.0f && fabsf(c->attn_scale - dflt) > 1e-6f * dflt)
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: attention scale %g is not 1/sqrt(head_dim) = %g, which GGUF cannot express", path,
                              (double)c->attn_scale, (double)dflt);
    float emb = a->embed_scale_sqrt_dim ? sqrtf((float)c->dim) : 1.0f;
    float have = c->embed_scale == 0.0f ? 1.0f : c->embed_scale;
    if (fabsf(have - emb) > 1e-6f * emb)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: embedding scale %g is not the %s family's %g", path,
                              (double)have, a->name, (double)emb);
    /* (a window on a family without local layers, as Mistral v0.1's, is
     * left out as llama.cpp's converter leaves it out) */
    if (c->sliding_window > 0 && a->sliding_window) {
        rlpi_model_config d = *c;
        rlpi_arch_default_local_layers(a, &d);
        for (int32_t i = 0; i < c->n_layers && i < RLPI_MAX_LAYERS; i++)
            if (d.local_layers[i] != c->local_layers[i])
                return rlpi_error_set(RLP_E_UNSUPPORTED,
                                      "%s: layer %d is %s, but in GGUF every %d-th %s layer is global and the others "
                                      "local",
                                      path, (int)i, c->local_layers[i] ? "local" : "global", (int)a->local_period,
                                      a->name);
    }
    return RLP_OK;
}

static uint64_t pad_to(uint64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Chooses each tensor's type: 1-D in F32 (llama.cpp keeps norms and biases
 * in F32), the embedding and head in embed_type, other matrices in type;
 * a row that is not whole blocks of the type falls back (below). */
static uint32_t tensor_type(const planned *p, const rlpi_gguf_write_opts *o)
{
    if (p->n_dims == 1)
        return RLPI_GGML_F32;
    bool emb = !strcmp(p->name, "token_embd.weight") || !strcmp(p->name, "output.weight");
    uint32_t t = emb && o->embed_type >= 0 ? (uint32_t)o->embed_type : o->type;
    if (p->ne[0] % rlpi_ggml_type(t)->blck == 0)
        return t;
    /* Q4_K rows that are not whole 256-blocks (SmolLM2's 576): Q8_0, the
     * nearest type we write with 32-blocks (llama.cpp's quantize uses Q5_0) */
    if (t == RLPI_GGML_Q4_K && p->ne[0] % 32 == 0)
        return RLPI_GGML_Q8_0;
    return RLPI_GGML_F16;
}

static int plan_tensors(const rlpi_model_config *c, const rlpi_arch_desc *a, const rlpi_weights *w,
                        const rlpi_gguf_write_opts *o, const char *path, planned *plan, size_t *n_plan)
{
    size_t n = 0;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const rlpi_tensor *t = &w->tensors[i];
        /* a tied head is the embedding: llama.cpp ties when output.weight is absent */
        if (t->alias_of >= 0 || (c->tie_embeddings && !strcmp(t->name, "lm_head.weight")))
            continue;
        planned *p = &plan[n];
        memset(p, 0, sizeof *p);
        int64_t rows, cols;
        if (!map_tensor(c, a, t->name, p, &rows, &cols))
            return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: tensor '%s' has no GGUF name in a %s model", path,
                                  t->name, c->arch);
        bool ok = cols ? t->n_dims == 2 && t->shape[0] == rows && t->shape[1] == cols
                       : t->n_dims == 1 && t->shape[0] == rows;
        if (!ok)
            return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' has shape (%lld, %lld), the config says (%lld, %lld)",
                                  path, t->name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0),
                                  (long long)rows, (long long)cols);
        p->data = t->data;
        p->n_dims = cols ? 2 : 1;
        p->ne[0] = (uint64_t)(cols ? cols : rows);
        p->ne[1] = cols ? (uint64_t)rows : 1;
        n++;
    }
    if (c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3 && c->head_dim >= 2) {
        planned *p = &plan[n++];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "rope_freqs.weight");
        if (!(p->owned = llama3_rope_freqs(c)))
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
        p->data = p->owned;
        p->n_dims = 1;
        p->ne[0] = (uint64_t)c->head_dim / 2;
        p->ne[1] = 1;
    }
    for (size_t i = 0; i < n; i++) {
        planned *p = &plan[i];
        p->type = tensor_type(p, o);
        const rlpi_ggml_type_info *ti = rlpi_ggml_type(p->type);
        p->nbytes = p->ne[0] * p->ne[1] / ti->blck * ti->type_size;
        p->offset = off;
        off = pad_to(off + p->nbytes);
    }
    *n_plan = n;
    return RLP_OK;
}

/* Converts one tensor (permuted when asked) into its file bytes. */
static int tensor_bytes(const rlpi_model_config *c, const planned *p, uint8_t *out, float *tmp)
{
    const float *src = p->data;
    if (p->perm != PERM_NONE) {
        int64_t heads = p->perm == PERM_Q ? c->n_heads : c->n_kv_heads;
        permute_rows(src, tmp, heads, c->head_dim, p->n_dims == 1 ? 1 : (int64_t)p->ne[0]);
        src = tmp;
    }
    return rlpi_quantize(p->type, src, (size_t)(p->ne[0] * p->ne[1]), out, (size_t)p->nbytes);
}

int rlpi_gguf_write_model(const char *path, const rlpi_model_config *cfg, const rlpi_weights *w,
                          const rlpi_gguf_tok_src *tok, const rlpi_gguf_write_opts *opts)
{
    RLPI_CHECK_ARG(path && cfg && w && opts, "NULL argument");
    if (!rlpi_quantize_supported(opts->type))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: tensor type %u cannot be written (F32, F16, BF16, Q8_0, Q4_0, Q4_K)",
                              path, opts->type);
    if (opts->embed_type >= 0 && !rlpi_quantize_supported((uint32_t)opts->embed_type))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: embedding type %d cannot be written (F32, F16, BF16, Q8_0, Q4_0, Q4_K)", path,
                              (int)opts->embed_type);
    const rlpi_arch_desc *a = rlpi_arch_find(cfg->arch);
    if (!a || strcmp(a->name, cfg->arch))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: architecture '%s' has no GGUF form (%s)", path, cfg->arch,
                              rlpi_arch_names());

    int rc = expressible(cfg, a, path);
    if (rc)
        return rc;
    planned *plan = calloc(w->n + 2, sizeof *plan);
    rlpi_gguf_kvw kv = {{0}, 0};

    rlpi_gguf_wbuf hdr = {0};
    uint8_t *out = NULL;
    float *tmp = NULL;
    size_t n_plan = 0;
    rlpi_atomic_file f = {.fd = -1};
    bool opened = false;
    rc = plan ? plan_tensors(cfg, a, w, opts, path, plan, &n_plan)
              : rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
    if (rc)
        goto done;

    arch_metadata(&kv, cfg, opts);
    if (tok && tok->gguf)
        tokenizer_metadata(&kv, tok->gguf, tok->chat_template);
    else if (tok && tok->core &&
             (rc = rlpi_gguf_tokenizer_kv(&kv, tok->core, tok->json_path, cfg->vocab_size, tok->chat_template)))
        goto done;
    rlpi_gguf_put(&hdr, "GGUF", 4);
    rlpi_gguf_put_u32(&hdr, 3);
    rlpi_gguf_put_u64(&hdr, n_plan);
    rlpi_gguf_put_u64(&hdr, kv.n);
    rlpi_gguf_put(&hdr, kv.b.p, kv.b.n);
    uint64_t max_bytes = 0, max_elems = 0;
    for (size_t i = 0; i < n_plan; i++) {
        const planned *p = &plan[i];
        put_str(&hdr, p->name);
        rlpi_gguf_put_u32(&hdr, p->n_dims);
        for (uint32_t d = 0; d < p->n_dims; d++)
            rlpi_gguf_put_u64(&hdr, p->ne[d]);
        rlpi_gguf_put_u32(&hdr, p->type);
        rlpi_gguf_put_u64(&hdr, p->offset);
        if (p->nbytes > max_bytes)
            max_bytes = p->nbytes;
        if (p->perm != PERM_NONE && p->ne[0] * p->ne[1] > max_elems)
            max_elems = p->ne[0] * p->ne[1]; /* only permuted tensors need the scratch copy */
    }
    static const uint8_t zeros[ALIGN];
    rlpi_gguf_put(&hdr, zeros, (size_t)(pad_to(hdr.n) - hdr.n));
    out = malloc((size_t)max_bytes + ALIGN);
    tmp = malloc((size_t)(max_elems ? max_elems : 1) * sizeof *tmp);
    if (kv.b.oom || hdr.oom || !out || !tmp) {
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if ((rc = rlpi_atomic_open(&f, path)))
        goto done;
    opened = true;
    if ((rc = rlpi_atomic_write(&f, hdr.p, hdr.n)))
        goto done;
    for (size_t i = 0; i < n_plan && !rc; i++) {
        const planned *p = &plan[i];
        if ((rc = tensor_bytes(cfg, p, out, tmp))) {
            rc = rlpi_error_wrap("%s: tensor '%s'", path, p->name);
            break;
        }
        uint64_t padded = pad_to(p->nbytes);
        memset(out + p->nbytes, 0, (size_t)(padded - p->nbytes));
        rc = rlpi_atomic_write(&f, out, (size_t)padded);
    }
    if (!rc) {
        opened = false; /* commit frees it, also on failure */
        rc = rlpi_atomic_commit(&f);
    }
done:
    if (opened)
        rlpi_atomic_abort(&f);
    for (size_t i = 0; plan && i < w->n + 2; i++)
        free(plan[i].owned);
    free(plan);
    free(kv.b.p);
    free(hdr.p);
    free(out);
    free(tmp);
    return rc;
}
