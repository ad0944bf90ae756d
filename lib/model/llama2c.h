/* llama2.c checkpoints (github.com/karpathy/llama2.c): legacy v0 (7 int32
 * header, negative vocab = separate classifier, freq_cis tables) and v1
 * "ak42" (256-byte header, shared-classifier byte), fp32 only. Produces HF
 * names and layouts, with q/k rows permuted from llama2.c's interleaved
 * RoPE pairs (i, i+1) to HF's rotate_half halves (j, j + head_dim/2), so
 * the HF-convention transformer computes what run.c computes. The Q8_0 v2
 * format and tokenizer.bin are not handled here. */
#ifndef RLPI_MODEL_LLAMA2C_H
#define RLPI_MODEL_LLAMA2C_H

#include "model/config.h"
#include "model/weights.h"

#include <stddef.h>
#include <stdint.h>

#define RLPI_LLAMA2C_MAGIC 0x616b3432u /* "ak42" */

/* Parses a checkpoint image. The size must match the header exactly
 * (a negative-vocab header without its classifier is a size error, never
 * a read past the end). Config: arch "llama", rope_theta 10000,
 * rms_eps 1e-5, bos 1, eos 2 (run.c's constants). A shared classifier
 * becomes lm_head.weight aliasing model.embed_tokens.weight.
 * RLP_E_FORMAT (message names the field or sizes), RLP_E_UNSUPPORTED
 * (v1 header with another version), RLP_E_NOMEM. `w` must be initialized;
 * on failure it is freed. */
int rlpi_llama2c_parse(const uint8_t *buf, size_t len, const char *source, rlpi_model_config *cfg,
                       rlpi_weights *w);

/* Maps `path` and parses it; also RLP_E_IO / RLP_E_NOT_FOUND. */
int rlpi_llama2c_load(const char *path, rlpi_model_config *cfg, rlpi_weights *w);

/* The row permutation applied to q_proj / k_proj: HF row h*hd + j takes
 * llama2.c row h*hd + 2j, HF row h*hd + hd/2 + j takes row h*hd + 2j + 1
 * (the same permutation as transformers' convert_llama_weights_to_hf).
 * `dst` and `src` are (n_heads*hd, cols), must not overlap. */
void rlpi_llama2c_permute_rope_rows(float *dst, const float *src, int n_heads, int head_dim,
                                    size_t cols);

#endif
