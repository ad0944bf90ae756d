/* Deterministic tiny Llama-family models for loader tests and the HF
 * round-trip check: a config and a full weight set with pseudo-random
 * values, tied heads as aliases. Test support only, never linked into the
 * library. */
#ifndef RLPOST_TESTS_TINY_MODEL_H
#define RLPOST_TESTS_TINY_MODEL_H

#include "model/arch.h"
#include "model/config.h"
#include "model/weights.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* arch "llama" / "qwen2" / "mistral" / "qwen3" / "gemma3"; GQA with 4 heads
 * of 8 over 2 kv heads. The family's row (arch.c) sets what the family
 * computes; Gemma 3 gets a window of 4 on layer 0 only (layer 1 global) and
 * its query_pre_attn_scalar = head_dim spelled out as a scale. */
static inline void tiny_config(rlpi_model_config *c, const char *arch, bool tied)
{
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    c->n_layers = 2;
    c->dim = 32;
    c->n_heads = 4;
    c->n_kv_heads = 2;
    c->head_dim = 8;
    c->ffn_dim = 48;
    c->vocab_size = 64;
    c->max_seq_len = 128;
    c->rope_theta = 10000.0f;
    c->rms_eps = 1e-5f;
    c->rope_factor = 1.0f;
    c->tie_embeddings = tied;
    c->attention_bias = !strcmp(arch, "qwen2");
    c->bos_id = 1;
    c->eos_id = 2;
    const rlpi_arch_desc *a = rlpi_arch_find(arch);
    if (a && (a->qk_norm || a->post_norms)) { /* the rows before Qwen3 stay as they were */
        rlpi_arch_apply(a, c);
        if (a->sliding_window) {
            c->sliding_window = 4;
            c->local_layers[0] = 1;
            c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
        }
    }
}

static inline float tiny_rand(uint64_t *s)
{
    /* xorshift64*: uniform in [-1, 1) with 24 random bits, so values are
     * exact in fp32 and distinct enough to catch any misplacement */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 2685821657736338717ull;
    return (float)(int32_t)(r >> 40) / (float)(1 << 23) - 1.0f;
}

static inline int tiny_add(rlpi_weights *w, const char *name, int64_t d0, int64_t d1, uint64_t *s)
{
    int64_t shape[2] = {d0, d1};
    rlpi_tensor *t;
    int rc = rlpi_weights_add(w, name, d1 ? 2 : 1, shape, &t);
    if (rc)
        return rc;
    for (size_t i = 0; i < t->n_elems; i++)
        t->data[i] = tiny_rand(s);
    return 0;
}

static inline int tiny_weights(const rlpi_model_config *c, rlpi_weights *w, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    char n[96];
    int rc;
    rlpi_weights_init(w);
    if ((rc = tiny_add(w, "model.embed_tokens.weight", c->vocab_size, c->dim, &s)))
        return rc;
    for (int i = 0; i < c->n_layers; i++) {
#define T(suffix, d0, d1)                                              \
    snprintf(n, sizeof n, "model.layers.%d." suffix, i);               \
    if ((rc = tiny_add(w, n, d0, d1, &s)))                             \
        return rc;
        T("input_layernorm.weight", c->dim, 0)
        T("self_attn.q_proj.weight", q, c->dim)
        T("self_attn.k_proj.weight", kv, c->dim)
        T("self_attn.v_proj.weight", kv, c->dim)
        if (c->attention_bias) {
            T("self_attn.q_proj.bias", q, 0)
            T("self_attn.k_proj.bias", kv, 0)
            T("self_attn.v_proj.bias", kv, 0)
        }
        T("self_attn.o_proj.weight", c->dim, q)
        T("post_attention_layernorm.weight", c->dim, 0)
        T("mlp.gate_proj.weight", c->ffn_dim, c->dim)
        T("mlp.up_proj.weight", c->ffn_dim, c->dim)
        T("mlp.down_proj.weight", c->dim, c->ffn_dim)
        if (c->qk_norm) {
            T("self_attn.q_norm.weight", c->head_dim, 0)
            T("self_attn.k_norm.weight", c->head_dim, 0)
        }
        if (c->post_norms) {
            T("pre_feedforward_layernorm.weight", c->dim, 0)
            T("post_feedforward_layernorm.weight", c->dim, 0)
        }
#undef T
    }
    if ((rc = tiny_add(w, "model.norm.weight", c->dim, 0, &s)))
        return rc;
    if (c->tie_embeddings)
        return rlpi_weights_add_alias(w, "lm_head.weight", "model.embed_tokens.weight");
    return tiny_add(w, "lm_head.weight", c->vocab_size, c->dim, &s);
}

#endif
