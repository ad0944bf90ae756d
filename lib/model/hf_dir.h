/* A Hugging Face model folder as a whole: config.json plus model.safetensors
 * (or a sharded model.safetensors.index.json), loaded into (config, weights)
 * with every tensor the config implies checked for presence and shape, and
 * saved back so that transformers' from_pretrained loads it with no missing
 * or unexpected keys. Tokenizer files are not this file's concern. */
#ifndef RLPI_MODEL_HF_DIR_H
#define RLPI_MODEL_HF_DIR_H

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

#include <stdbool.h>

/* Loads `dir`. In a tied model lm_head.weight is an alias of
 * model.embed_tokens.weight (no copy), whether or not the file stores a
 * head (transformers ignores a stored one too). Norm weights come back as
 * the effective scale: cfg->norm_offset (1 for Gemma) is added to each
 * (rlpi_hf_is_norm_weight), and rlpi_hf_dir_save takes it off again.
 * Sharded folders (model.safetensors.index.json) load the same way. RLP_E_FORMAT for a missing or
 * mis-shaped tensor (message names it and both shapes), RLP_E_NOT_FOUND
 * when neither weights file exists, plus the errors of the readers. On
 * failure `w` is freed. */
int rlpi_hf_dir_load(const char *dir, rlpi_model_config *cfg, rlpi_weights *w);

/* True for an RMSNorm weight by its HF name (*layernorm.weight,
 * *_norm.weight, model.norm.weight): the tensors whose stored value is
 * scale - norm_offset in HF files. */
bool rlpi_hf_is_norm_weight(const char *name);

/* Checks that `w` has every tensor `cfg` needs with the right shape (the
 * same check the loader runs). */
int rlpi_hf_check_weights(const rlpi_model_config *cfg, const rlpi_weights *w, const char *source);

/* Saves into `dir` (created if missing): config.json, model.safetensors in
 * `dtype` with __metadata__ {"format": "pt"} (transformers refuses a file
 * without it), generation_config.json. Tied models do not store lm_head;
 * an untied model whose head is an alias gets a real copy. Each file is
 * replaced atomically, the folder as a whole is not: a reader during a save
 * may see new weights with the old config (publishing a consistent version
 * is the synchronizer's manifest's job). */
int rlpi_hf_dir_save(const char *dir, const rlpi_model_config *cfg, const rlpi_weights *w,
                     rlpi_st_dtype dtype);

#endif
