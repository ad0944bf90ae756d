/* Hugging Face config.json <-> rlpi_model_config for the families of
 * lib/model/arch.c (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
 * Qwen3ForCausalLM, Gemma3ForCausalLM / model_type gemma3_text). Reads only
 * what changes the computation and refuses what our transformer cannot do
 * (other architectures, o_proj/MLP biases, unknown RoPE scaling, attention
 * soft-capping, bidirectional attention), instead of loading a model that
 * would silently compute something else. */
#ifndef RLPI_MODEL_HF_CONFIG_H
#define RLPI_MODEL_HF_CONFIG_H

#include "model/config.h"

#include <stddef.h>

/* Parses config.json text. Defaults follow transformers' config classes
 * where a key is absent (num_key_value_heads = heads, head_dim = hidden /
 * heads, rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings false
 * (Gemma 3: true), attention_bias false; Qwen2 always has q/k/v biases).
 * eos_token_id given as a list takes its first element. Families without
 * local layers: a sliding window (Mistral `sliding_window`, Qwen2/3
 * `use_sliding_window`) smaller than the context caps max_seq_len at the
 * window, where full attention is exact. Gemma 3: `sliding_window` (1..2^24,
 * required), the local layers from `layer_types` or
 * `sliding_window_pattern` / `_sliding_window_pattern` (must agree when both
 * are given), RoPE from `rope_parameters` {full_attention, sliding_attention}
 * (transformers 5) or rope_theta / rope_local_base_freq / rope_scaling
 * (scaling on global layers only), attn_scale = query_pre_attn_scalar^-1/2,
 * final_logit_softcapping, activation `hidden_activation` (or hidden_act).
 * RLP_E_FORMAT (wrong type, missing field, out-of-range value; the message
 * names the key), RLP_E_UNSUPPORTED (architecture, activation, scaling,
 * biases; the message names it), RLP_E_NOMEM. The result is validated with
 * rlpi_model_config_validate. */
int rlpi_hf_config_parse(const char *text, size_t len, const char *source, rlpi_model_config *cfg);

/* Reads and parses a config.json file; also RLP_E_IO / RLP_E_NOT_FOUND. */
int rlpi_hf_config_read(const char *path, rlpi_model_config *cfg);

/* Renders config.json text that transformers (4.x and 5.x) loads into the
 * same model (architectures, model_type, sizes, activation, RoPE, biases,
 * tie, bos/eos; Gemma 3: layer_types, window, per-kind RoPE, query scalar,
 * soft-cap). Returns a malloc'd NUL-terminated string in *out. RLP_E_NOMEM,
 * RLP_E_UNSUPPORTED (arch with no row in arch.c). */
int rlpi_hf_config_dump(const rlpi_model_config *cfg, char **out);

/* Writes config.json atomically. */
int rlpi_hf_config_write(const char *path, const rlpi_model_config *cfg);

/* Writes generation_config.json (bos/eos ids) atomically. */
int rlpi_hf_generation_config_write(const char *path, const rlpi_model_config *cfg);

#endif
