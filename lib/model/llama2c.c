/* llama2.c .bin loader. The header is checked and the exact file size
 * computed in 64-bit arithmetic before any weight is touched. */
#include "model/llama2c.h"

#include "core/checked.h"
#include "core/error.h"
#include "core/mapfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V1_HEADER 256u
#define V0_HEADER 28u

void rlpi_llama2c_permute_rope_rows(float *dst, const float *src, int n_heads, int head_dim,
                                    size_t cols)
{
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < half; j++) {
            size_t base = (size_t)h * (size_t)head_dim;
            memcpy(dst + (base + (size_t)j) * cols, src + (base + 2 * (size_t)j) * cols,
                   cols * sizeof(float));
            memcpy(dst + (base + (size_t)half + (size_t)j) * cols,
                   src + (base + 2 * (size_t)j + 1) * cols, cols * sizeof(float));
        }
}

static int32_t rd_i32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A reader over the weight area; bounds were proven by the size check. */
typedef struct cursor {
    const uint8_t *p;
} cursor;

/* Adds tensor `name` of shape (d0[, d1]) filled from `n` consecutive
 * fp32 values; `permute_heads` > 0 applies the RoPE row permutation. */
static int take(rlpi_weights *w, cursor *c, const char *name, int64_t d0, int64_t d1,
                int permute_heads, int head_dim)
{
    int64_t shape[2] = {d0, d1};
    rlpi_tensor *t;
    int rc = rlpi_weights_add(w, name, d1 > 0 ? 2 : 1, shape, &t);
    if (rc)
        return rc;
    size_t bytes = t->n_elems * sizeof(float);
    snprintf(t->src_dtype, sizeof t->src_dtype, "F32");
    if (permute_heads > 0) {
        /* the mapped source need not be float-aligned: copy it into an
         * aligned buffer before treating it as float rows */
        float *tmp = malloc(bytes ? bytes : 1);
        if (!tmp)
            return rlpi_error_set(RLP_E_NOMEM, "llama2.c: out of memory");
        memcpy(tmp, c->p, bytes);
        rlpi_llama2c_permute_rope_rows(t->data, tmp, permute_heads, head_dim, (size_t)d1);
        free(tmp);
    } else {
        memcpy(t->data, c->p, bytes);
    }
    c->p += bytes;
    return RLP_OK;
}

typedef struct hdr {
    int32_t dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len;
} hdr;

/* Size of the weights after the header, in floats (excluding the
 * classifier), or an error for impossible headers. */
static int check_header(const hdr *h, int legacy, const char *src, uint64_t *n_floats)
{
#define BAD(...) return rlpi_error_set(RLP_E_FORMAT, __VA_ARGS__)
    if (h->dim < 1 || h->dim > 65536)
        BAD("%s: dim %d out of range [1, 65536]", src, h->dim);
    if (h->hidden < 1 || h->hidden > (1 << 20))
        BAD("%s: hidden_dim %d out of range", src, h->hidden);
    if (h->n_layers < 1 || h->n_layers > 1024)
        BAD("%s: n_layers %d out of range", src, h->n_layers);
    if (h->n_heads < 1 || h->n_heads > 1024 || h->dim % h->n_heads != 0)
        BAD("%s: n_heads %d does not divide dim %d", src, h->n_heads, h->dim);
    if (h->n_kv_heads < 1 || h->n_kv_heads > h->n_heads || h->n_heads % h->n_kv_heads != 0)
        BAD("%s: n_kv_heads %d does not divide n_heads %d", src, h->n_kv_heads, h->n_heads);
    if ((h->dim / h->n_heads) % 2 != 0)
        BAD("%s: head size %d is odd; RoPE needs pairs", src, h->dim / h->n_heads);
    if (h->vocab == 0 || h->vocab < -(1 << 24) || h->vocab > (1 << 24))
        BAD("%s: vocab_size %d out of range", src, h->vocab);
    if (h->seq_len < 1 || h->seq_len > (1 << 24))
        BAD("%s: seq_len %d out of range", src, h->seq_len);
#undef BAD
    /* every factor is bounded above, so 64-bit products cannot overflow:
     * the largest term is 2^10 layers * 2^20 * 2^16 = 2^46 */
    uint64_t L = (uint64_t)h->n_layers, D = (uint64_t)h->dim, F = (uint64_t)h->hidden;
    uint64_t hd = D / (uint64_t)h->n_heads, kv = hd * (uint64_t)h->n_kv_heads;
    uint64_t V = (uint64_t)(h->vocab < 0 ? -(int64_t)h->vocab : h->vocab);
    uint64_t n = V * D                 /* token embedding */
                 + 2 * L * D            /* attention and ffn norms */
                 + L * D * D * 2        /* wq, wo */
                 + L * D * kv * 2       /* wk, wv */
                 + L * F * D * 3        /* w1, w2, w3 */
                 + D;                   /* final norm */
    if (legacy)
        n += (uint64_t)h->seq_len * hd; /* freq_cis real + imag, seq_len * hd/2 each */
    *n_floats = n;
    return RLP_OK;
}

static int load_layers(rlpi_weights *w, cursor *c, const hdr *h, const char *what, int64_t d0,
                       int64_t d1, int perm_heads)
{
    char name[96];
    int hd = h->dim / h->n_heads;
    for (int i = 0; i < h->n_layers; i++) {
        snprintf(name, sizeof name, "model.layers.%d.%s", i, what);
        int rc = take(w, c, name, d0, d1, perm_heads, hd);
        if (rc)
            return rc;
    }
    return RLP_OK;
}

int rlpi_llama2c_parse(const uint8_t *buf, size_t len, const char *src, rlpi_model_config *out,
                       rlpi_weights *w)
{
    rlpi_model_config lc, *cfg = &lc; /* *out is written only on success */
    if (len < V0_HEADER)
        return rlpi_error_set(RLP_E_FORMAT, "%s: %zu bytes, shorter than a llama2.c header", src,
                              len);
    int legacy = (uint32_t)rd_i32(buf) != RLPI_LLAMA2C_MAGIC;
    size_t off = legacy ? 0 : 8;
    int shared;
    if (!legacy) {
        if (len < V1_HEADER)
            return rlpi_error_set(RLP_E_FORMAT, "%s: %zu bytes, shorter than the 256-byte v1 header",
                                  src, len);
        int32_t version = rd_i32(buf + 4);
        if (version != 1)
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "%s: llama2.c version %d is not supported (0 and 1 are)", src,
                                  version);
    }
    hdr h = {rd_i32(buf + off), rd_i32(buf + off + 4), rd_i32(buf + off + 8),
             rd_i32(buf + off + 12), rd_i32(buf + off + 16), rd_i32(buf + off + 20),
             rd_i32(buf + off + 24)};
    uint64_t n_floats = 0;
    int rc = check_header(&h, legacy, src, &n_floats);
    if (rc)
        return rc;
    if (legacy) {
        shared = h.vocab > 0; /* run.c: shared_weights = vocab_size > 0 */
    } else {
        if (h.vocab < 0)
            return rlpi_error_set(RLP_E_FORMAT, "%s: v1 vocab_size %d is negative", src, h.vocab);
        uint8_t flag = buf[off + 28];
        if (flag > 1)
            return rlpi_error_set(RLP_E_FORMAT, "%s: shared_classifier byte is %u, not 0 or 1", src,
                                  flag);
        shared = flag;
    }
    int32_t V = h.vocab < 0 ? -h.vocab : h.vocab;
    if (!shared)
        n_floats += (uint64_t)V * (uint64_t)h.dim;
    uint64_t want = (legacy ? V0_HEADER : V1_HEADER) + n_floats * 4;
    if ((uint64_t)len != want)
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s: file has %zu bytes but its header (%s classifier) implies %" PRIu64,
                              src, len, shared ? "shared" : "separate", want);

    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->arch, sizeof cfg->arch, "llama");
    cfg->n_layers = h.n_layers;
    cfg->dim = h.dim;
    cfg->n_heads = h.n_heads;
    cfg->n_kv_heads = h.n_kv_heads;
    cfg->head_dim = h.dim / h.n_heads;
    cfg->ffn_dim = h.hidden;
    cfg->vocab_size = V;
    cfg->max_seq_len = h.seq_len;
    cfg->rope_theta = 10000.0f;
    cfg->rms_eps = 1e-5f;
    cfg->rope_scaling = RLPI_ROPE_SCALING_NONE;
    cfg->rope_factor = 1.0f;
    cfg->tie_embeddings = shared;
    cfg->bos_id = 1;
    cfg->eos_id = 2;
    if ((rc = rlpi_model_config_validate(cfg, src)))
        return rc;

    int64_t D = h.dim, F = h.hidden, hd = cfg->head_dim, KV = (int64_t)h.n_kv_heads * hd;
    cursor c = {buf + (legacy ? V0_HEADER : V1_HEADER)};
    if (legacy) {
        /* export.py legacy_export order */
        if ((rc = take(w, &c, "model.embed_tokens.weight", V, D, 0, 0)) ||
            (rc = load_layers(w, &c, &h, "input_layernorm.weight", D, 0, 0)) ||
            (rc = load_layers(w, &c, &h, "self_attn.q_proj.weight", D, D, h.n_heads)) ||
            (rc = load_layers(w, &c, &h, "self_attn.k_proj.weight", KV, D, h.n_kv_heads)) ||
            (rc = load_layers(w, &c, &h, "self_attn.v_proj.weight", KV, D, 0)) ||
            (rc = load_layers(w, &c, &h, "self_attn.o_proj.weight", D, D, 0)) ||
            (rc = load_layers(w, &c, &h, "post_attention_layernorm.weight", D, 0, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.gate_proj.weight", F, D, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.down_proj.weight", D, F, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.up_proj.weight", F, D, 0)) ||
            (rc = take(w, &c, "model.norm.weight", D, 0, 0, 0)))
            goto fail;
        /* freq_cis tables: RoPE is recomputed from theta, as run.c does */
        c.p += (size_t)h.seq_len * (size_t)hd * sizeof(float);
    } else {
        /* export.py version1_export order */
        if ((rc = load_layers(w, &c, &h, "input_layernorm.weight", D, 0, 0)) ||
            (rc = load_layers(w, &c, &h, "post_attention_layernorm.weight", D, 0, 0)) ||
            (rc = take(w, &c, "model.norm.weight", D, 0, 0, 0)) ||
            (rc = take(w, &c, "model.embed_tokens.weight", V, D, 0, 0)) ||
            (rc = load_layers(w, &c, &h, "self_attn.q_proj.weight", D, D, h.n_heads)) ||
            (rc = load_layers(w, &c, &h, "self_attn.k_proj.weight", KV, D, h.n_kv_heads)) ||
            (rc = load_layers(w, &c, &h, "self_attn.v_proj.weight", KV, D, 0)) ||
            (rc = load_layers(w, &c, &h, "self_attn.o_proj.weight", D, D, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.gate_proj.weight", F, D, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.down_proj.weight", D, F, 0)) ||
            (rc = load_layers(w, &c, &h, "mlp.up_proj.weight", F, D, 0)))
            goto fail;
    }
    if (shared)
        rc = rlpi_weights_add_alias(w, "lm_head.weight", "model.embed_tokens.weight");
    else
        rc = take(w, &c, "lm_head.weight", V, D, 0, 0);
    if (rc)
        goto fail;
    if (c.p != buf + len) { /* the size formula and the reads must agree */
        rc = rlpi_error_set(RLP_E_INTERNAL, "%s: llama2.c reader consumed %zu of %zu bytes", src,
                            (size_t)(c.p - buf), len);
        goto fail;
    }
    *out = lc;
    return RLP_OK;
fail:
    rlpi_weights_free(w);
    return rc;
}

int rlpi_llama2c_load(const char *path, rlpi_model_config *cfg, rlpi_weights *w)
{
    rlpi_mapped_file m;
    int rc = rlpi_map_file(path, &m);
    if (rc)
        return rc;
    static const uint8_t empty[1];
    rc = rlpi_llama2c_parse(m.data ? m.data : empty, m.size, path, cfg, w);
    rlpi_unmap_file(&m);
    return rc;
}
