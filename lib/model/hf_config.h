/* Hugging Face config.json <-> rlpi_model_config for the Llama family
 * (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM). Reads only what
 * changes the computation and refuses what our transformer cannot do
 * (other architectures, o_proj/MLP biases, unknown RoPE scaling), instead
 * of loading a model that would silently compute something else. */
#ifndef RLPI_MODEL_HF_CONFIG_H
#define RLPI_MODEL_HF_CONFIG_H

#include "model/config.h"

#include <stddef.h>

/* Parses config.json text. Defaults follow transformers' config classes
 * where a key is absent (num_key_value_heads = heads, head_dim = hidden /
 * heads, rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings false,
 * attention_bias false; Qwen2 always has q/k/v biases). eos_token_id given
 * as a list takes its first element. A sliding window (Mistral
 * `sliding_window`, Qwen2 `use_sliding_window`) smaller than the context
 * caps max_seq_len at the window, where full attention is exact.
 * RLP_E_FORMAT (wrong type, missing field, out-of-range value; the message
 * names the key), RLP_E_UNSUPPORTED (architecture, activation, scaling,
 * biases; the message names it), RLP_E_NOMEM. The result is validated with
 * rlpi_model_config_validate. */
int rlpi_hf_config_parse(const char *text, size_t len, const char *source, rlpi_model_config *cfg);

/* Reads and parses a config.json file; also RLP_E_IO / RLP_E_NOT_FOUND. */
int rlpi_hf_config_read(const char *path, rlpi_model_config *cfg);

/* Renders config.json text that transformers loads into the same model
 * (architectures, model_type, sizes, RoPE, biases, tie, bos/eos).
 * Returns a malloc'd NUL-terminated string in *out. RLP_E_NOMEM,
 * RLP_E_UNSUPPORTED (arch other than llama/qwen2/mistral). */
int rlpi_hf_config_dump(const rlpi_model_config *cfg, char **out);

/* Writes config.json atomically. */
int rlpi_hf_config_write(const char *path, const rlpi_model_config *cfg);

/* Writes generation_config.json (bos/eos ids) atomically. */
int rlpi_hf_generation_config_write(const char *path, const rlpi_model_config *cfg);

#endif
