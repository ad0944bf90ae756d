/* The model families this library runs, one table row each: how the
 * family is named in each file format and what its architecture is, as
 * data for rlpi_model_config. Adding a family is a row here plus kernels
 * for any operation the transformer lacks, not edits across the loaders
 * and the transformer. */
#ifndef RLPI_MODEL_ARCH_H
#define RLPI_MODEL_ARCH_H

#include "model/config.h"

#include <stdbool.h>

typedef struct rlpi_arch_desc {
    const char *name;         /* cfg->arch, HF model_type, GGUF general.architecture */
    const char *hf_class;     /* HF architectures[0] */
    const char *hf_alt_type;  /* another HF model_type for the same row (e.g. "gemma3_text"), or NULL */
    bool gguf_permute_qk;     /* llama.cpp's converter permutes q/k rows for its RoPE (llama, mistral) */
    bool qkv_bias;            /* q/k/v projections always have biases (Qwen2) */
    int32_t activation;       /* rlpi_activation */
    bool qk_norm;
    bool post_norms;
    float norm_offset;        /* 0 or 1 (see rlpi_model_config.norm_offset) */
    bool embed_scale_sqrt_dim;/* embeddings scaled by sqrt(hidden size) */
    bool sliding_window;      /* the family has interleaved local/global layers */
    int32_t local_period;     /* default pattern: layer i is global when (i + 1) % period == 0 */
    float rope_theta_local;   /* default local RoPE base (0 = rope_theta) */
    int32_t default_context;  /* max_position_embeddings when the file has none */
    bool hf_tie_default;      /* tie_word_embeddings when config.json omits it (transformers'
                               * config class default: true for Gemma 3) */
    const char *gguf_ffn_norm;/* HF name (after "model.layers.N.") of GGUF's blk.N.ffn_norm: the
                               * MLP's input norm, post_attention_layernorm unless the family
                               * has post-norms (then pre_feedforward_layernorm) */
} rlpi_arch_desc;

/* The row whose name (or HF alternative type) is `name`; NULL if none. */
const rlpi_arch_desc *rlpi_arch_find(const char *name);
/* The row whose HF class is `hf_class`; NULL if none. */
const rlpi_arch_desc *rlpi_arch_find_hf_class(const char *hf_class);
/* "llama, qwen2, ..." for error messages. */
const char *rlpi_arch_names(void);
/* Writes the row's name and architecture fields into *cfg (arch,
 * activation, qk_norm, post_norms, norm_offset, attention_bias,
 * rope_theta_local, and embed_scale from cfg->dim, so call it after dim is
 * known); sizes and the per-file values are the loader's. */
void rlpi_arch_apply(const rlpi_arch_desc *a, rlpi_model_config *cfg);
/* Marks layers local by the row's period (every layer not (i+1) % period == 0),
 * given cfg->sliding_window > 0 and cfg->n_layers. */
void rlpi_arch_default_local_layers(const rlpi_arch_desc *a, rlpi_model_config *cfg);

#endif
