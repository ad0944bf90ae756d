/* Random-weight models of real shapes (speed and numerics do not need the
 * trained values): SmolLM2-135M, Llama-3.2-1B, and a tiny one. Shared by
 * bench_train and the GPU tests. Test support only. */
#ifndef RLPOST_TESTS_SHAPE_MODELS_H
#define RLPOST_TESTS_SHAPE_MODELS_H

#include "core/rng.h"
#include "model/config.h"
#include "model/weights.h"

#include <stdio.h>
#include <string.h>

/* smollm2: 30 layers, d 576, 9/3 heads, ffn 1536, vocabulary 49,152, tied;
 * 1b: 16 layers, d 2048, 32/8 heads, ffn 8192, vocabulary 128,256, tied;
 * tiny: 2 layers, d 64, 4/2 heads, vocabulary 300. 0, or -1 for another name. */
static inline int shape_config(const char *shape, rlpi_model_config *cfg)
{
    if (!strcmp(shape, "smollm2"))
        *cfg = (rlpi_model_config){.arch = "llama", .n_layers = 30, .dim = 576, .n_heads = 9, .n_kv_heads = 3,
                                   .head_dim = 64, .ffn_dim = 1536, .vocab_size = 49152, .max_seq_len = 8192,
                                   .rope_theta = 100000.0f, .rms_eps = 1e-5f, .tie_embeddings = true, .bos_id = -1,
                                   .eos_id = -1};
    else if (!strcmp(shape, "1b"))
        *cfg = (rlpi_model_config){.arch = "llama", .n_layers = 16, .dim = 2048, .n_heads = 32, .n_kv_heads = 8,
                                   .head_dim = 64, .ffn_dim = 8192, .vocab_size = 128256, .max_seq_len = 8192,
                                   .rope_theta = 500000.0f, .rms_eps = 1e-5f, .tie_embeddings = true, .bos_id = -1,
                                   .eos_id = -1};
    else if (!strcmp(shape, "tiny"))
        *cfg = (rlpi_model_config){.arch = "llama", .n_layers = 2, .dim = 64, .n_heads = 4, .n_kv_heads = 2,
                                   .head_dim = 16, .ffn_dim = 160, .vocab_size = 300, .max_seq_len = 1024,
                                   .rope_theta = 10000.0f, .rms_eps = 1e-5f, .tie_embeddings = true, .bos_id = -1,
                                   .eos_id = -1};
    else
        return -1;
    return 0;
}

/* HF-named weights: uniform in ±0.02 from `rng`, norms 1. 0 or a status. */
static inline int shape_random_weights(const rlpi_model_config *cfg, rlpi_rng *rng, rlpi_weights *w)
{
    rlpi_weights_init(w);
    int64_t d = cfg->dim, F = cfg->ffn_dim, qd = (int64_t)cfg->n_heads * cfg->head_dim,
            kd = (int64_t)cfg->n_kv_heads * cfg->head_dim;
    char name[128];
    int rc = 0;
#define ADD(nm, nd, a, b, norm)                                                          \
    do {                                                                                 \
        int64_t sh[2] = {a, b};                                                          \
        rlpi_tensor *t;                                                                  \
        if (!rc && !(rc = rlpi_weights_add(w, nm, nd, sh, &t)))                          \
            for (size_t i = 0; i < t->n_elems; i++)                                      \
                t->data[i] = norm ? 1.0f : (float)(rlpi_rng_f64(rng) - 0.5) * 0.04f;     \
    } while (0)
    ADD("model.embed_tokens.weight", 2, cfg->vocab_size, d, 0);
    for (int l = 0; l < cfg->n_layers; l++) {
#define N(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        ADD(N("input_layernorm.weight"), 1, d, 0, 1);
        ADD(N("self_attn.q_proj.weight"), 2, qd, d, 0);
        ADD(N("self_attn.k_proj.weight"), 2, kd, d, 0);
        ADD(N("self_attn.v_proj.weight"), 2, kd, d, 0);
        ADD(N("self_attn.o_proj.weight"), 2, d, qd, 0);
        ADD(N("post_attention_layernorm.weight"), 1, d, 0, 1);
        ADD(N("mlp.gate_proj.weight"), 2, F, d, 0);
        ADD(N("mlp.up_proj.weight"), 2, F, d, 0);
        ADD(N("mlp.down_proj.weight"), 2, d, F, 0);
#undef N
    }
    ADD("model.norm.weight", 1, d, 0, 1);
#undef ADD
    return rc;
}

#endif
