/* The architecture description every loader produces and the transformer
 * consumes. What differs between families (Llama 2/3, SmolLM/SmolLM2,
 * Qwen2/2.5, Qwen3, Mistral, Gemma 3, llama2.c) is data here — norm
 * placement and offset, activation, biases, q/k norms, sliding windows,
 * embedding scale, attention scale, RoPE bases, soft-capping — filled from
 * the family's row in lib/model/arch.c and then from the file (GGUF
 * `<arch>.*` metadata, HF config.json, a llama2.c header). The transformer
 * reads only these fields, never the family's name. It carries no
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

typedef enum rlpi_activation {
    RLPI_ACT_SILU = 0,       /* SwiGLU: silu(gate) * up (Llama, Qwen) */
    RLPI_ACT_GELU_TANH = 1   /* GeGLU: gelu_tanh(gate) * up (Gemma) */
} rlpi_activation;

/* Layers the config can describe one by one (local_layers). */
#define RLPI_MAX_LAYERS 1024

typedef struct rlpi_model_config {
    char arch[32];           /* family: "llama", "qwen2", "qwen3", "mistral", "gemma3" (HF model_type) */
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

    /* ---- what families differ in (defaults = Llama: all zero/false) ---- */
    int32_t activation;      /* rlpi_activation of the gated MLP */
    bool qk_norm;            /* per-head RMSNorm of q and k (weights of head_dim) before RoPE:
                              * self_attn.q_norm / k_norm (Qwen3, Gemma 3) */
    bool post_norms;         /* RMSNorm of each sublayer's output before the residual add:
                              * post_attention_layernorm after attention and
                              * post_feedforward_layernorm after the MLP (Gemma 2/3); the MLP's
                              * input norm is then pre_feedforward_layernorm */
    float norm_offset;       /* the file's (HF) norm weights w scale by (norm_offset + w): 1 for
                              * Gemma, 0 otherwise. Loaders of HF weights add it and HF writers
                              * subtract it, so every norm weight the transformer holds is the
                              * effective scale (what GGUF stores, as llama.cpp's converter
                              * adds the 1 too) and no kernel needs the offset. */
    float embed_scale;       /* token embeddings are multiplied by this (Gemma: sqrt(dim));
                              * 0 or 1 = none. The head (tied or not) is not scaled. */
    float attn_scale;        /* softmax(q·k · attn_scale); 0 = 1/sqrt(head_dim) (Gemma 3:
                              * query_pre_attn_scalar^-1/2) */
    float final_softcap;     /* logits = c · tanh(logits / c) before the softmax; 0 = off */
    int32_t sliding_window;  /* keys within this many positions (the query's own included: a
                              * query at p sees p - W + 1 .. p) on local layers; 0 = none */
    float rope_theta_local;  /* RoPE base on local (sliding-window) layers; 0 = rope_theta.
                              * RoPE scaling (rope_scaling) applies to global layers only
                              * when local layers exist (Gemma 3) */
    /* ---- the head: a language model's lm_head, or a score head ---- */
    int32_t score_labels;    /* 0: a causal LM (lm_head, vocab_size outputs). > 0: a value/reward
                              * model whose head is HF's `score` Linear with this many outputs per
                              * position (*ForSequenceClassification / *ForTokenClassification,
                              * num_labels) and no lm_head; the logprob paths refuse it */
    bool score_bias;         /* score.bias exists (*ForTokenClassification; the sequence classifier's
                              * Linear has none) */
    bool score_per_token;    /* the HF class scores every token (*ForTokenClassification: PRMs,
                              * critics) rather than pooling the last one (*ForSequenceClassification:
                              * ORMs); the transformer computes any rows either way */
    uint8_t local_layers[RLPI_MAX_LAYERS]; /* 1 = layer i uses sliding_window and
                                            * rope_theta_local; all 0 without a window */
} rlpi_model_config;

/* Checks internal consistency (positive sizes, head divisibility, sane
 * ranges); returns RLP_OK or RLP_E_FORMAT with a message naming the field. */
int rlpi_model_config_validate(const rlpi_model_config *cfg, const char *source);

/* Layers that use the sliding window (0 when sliding_window is 0). */
int32_t rlpi_model_config_n_local_layers(const rlpi_model_config *cfg);
/* The attention scale in effect (attn_scale, or 1/sqrt(head_dim)). */
float rlpi_model_config_attn_scale(const rlpi_model_config *cfg);

#endif
