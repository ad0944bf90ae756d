/* Builds a model of a family in lib/model/arch.c (config + fp32 weights in
 * Hugging Face names and layout) from a validated GGUF file. It maps
 * metadata and tensor names, checks every shape against the config,
 * dequantizes, and undoes llama.cpp's Q/K row permutation where the family's
 * row says so; it must not parse the file itself (gguf.c does). */
#ifndef RLPI_MODEL_GGUF_MODEL_H
#define RLPI_MODEL_GGUF_MODEL_H

#include "core/threadpool.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/weights.h"

typedef struct rlpi_gguf_load_stats {
    double open_s;          /* map + parse + validate */
    double dequant_s;       /* config + dequantize + permute into weights */
    uint64_t n_tensors;     /* tensors in the file */
    uint64_t file_bytes;
    uint64_t fp32_bytes;    /* bytes of the weights produced (aliases not counted) */
} rlpi_gguf_load_stats;

/* Fills *cfg from `general.architecture` (a row of arch.c: "llama",
 * "mistral", "qwen2", "qwen3", "gemma3"), the row's architecture fields and
 * that architecture's `{arch}.*` keys (Gemma 3: sliding window, pattern,
 * local RoPE base; any: attention.scale, final_logit_softcapping);
 * validates it. RLP_E_UNSUPPORTED for
 * another architecture or a feature the transformer lacks (yarn, partial
 * rotary, value_length != key_length); RLP_E_FORMAT / RLP_E_NOT_FOUND for
 * bad or missing keys (the message names the key). */
int rlpi_gguf_model_config(const rlpi_gguf *g, rlpi_model_config *cfg);

/* Appends every tensor of the model to *w (which should be empty) under its
 * HF name with PyTorch shape; an absent `output.weight` becomes
 * `lm_head.weight` aliasing `model.embed_tokens.weight` (tied embeddings).
 * Sets cfg->tie_embeddings and cfg->attention_bias. `pool` may be NULL.
 * On failure *w may hold a partial set; the caller frees it. */
int rlpi_gguf_model_weights(const rlpi_gguf *g, rlpi_model_config *cfg, rlpi_weights *w,
                            rlpi_threadpool *pool);

/* Opens `path` and does both; on failure *w is left empty. `stats` may be NULL. */
int rlpi_gguf_model_load(const char *path, rlpi_model_config *cfg, rlpi_weights *w, rlpi_threadpool *pool,
                         rlpi_gguf_load_stats *stats);

#endif
