/* The architecture description every loader produces and the transformer
 * consumes: one struct for the Llama family (Llama 2/3, SmolLM/SmolLM2,
 * Qwen2/2.5, Mistral, llama2.c). Loaders fill it from GGUF `llama.*` /
 * `qwen2.*` metadata, HF config.json or a llama2.c header; it carries no
 * weights. */
#ifndef RLPI_MODEL_CONFIG_H
#define RLPI_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum rlpi_rope_scaling {
    RLPI_ROPE_SCALING_NONE = 0,
    RLPI_ROPE_SCALING_LLAMA3 = 1, /* Llama 3.1 frequency-dependent scaling */
    RLPI_ROPE_SCALING_LINEAR = 2  /* positions divided by factor */
} rlpi_rope_scaling;

typedef struct rlpi_model_config {
    char arch[32];           /* "llama", "qwen2", "mistral" (HF model_type) */
    int32_t n_layers;
    int32_t dim;             /* hidden size */
    int32_t n_heads;
    int32_t n_kv_heads;      /* grouped-query attention: n_heads % n_kv_heads == 0 */
    int32_t head_dim;        /* usually dim / n_heads */
    int32_t ffn_dim;         /* SwiGLU intermediate size */
    int32_t vocab_size;
    int32_t max_seq_len;     /* context length */
    float rope_theta;        /* RoPE base */
    float rms_eps;           /* RMSNorm epsilon */
    int32_t rope_scaling;    /* rlpi_rope_scaling */
    float rope_factor;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int32_t rope_original_max_pos;
    bool tie_embeddings;     /* output head aliases the token embedding */
    bool attention_bias;     /* q/k/v projections have biases (Qwen2) */
    int32_t bos_id, eos_id;  /* -1 when unknown */
} rlpi_model_config;

/* Checks internal consistency (positive sizes, head divisibility, sane
 * ranges); returns RLP_OK or RLP_E_FORMAT with a message naming the field. */
int rlpi_model_config_validate(const rlpi_model_config *cfg, const char *source);

#endif
