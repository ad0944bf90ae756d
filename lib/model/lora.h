/* LoRA adapters on a transformer's linear projections (Hu et al. 2021,
 * "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685;
 * rank-stabilised scaling from Kalajdzievski 2023, "A Rank Stabilization
 * Scaling Factor for Fine-Tuning with LoRA", arXiv:2312.03732).
 *
 * A target projection y = x·Wᵀ becomes y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with
 * A (r, in), B (out, r) and s = alpha / r (alpha / √r with rsLoRA), which
 * is Hugging Face PEFT's LoraLayer with dropout 0. A starts as PEFT's
 * kaiming_uniform_(a = √5), i.e. U(−1/√in, 1/√in), and B at zero, so an
 * attached adapter leaves the model's outputs unchanged (bit for bit: the
 * forward skips nothing, but adds s·h·0 = +0 to every output).
 *
 * The adapters' parameters and gradients are each one buffer (like the
 * base's), with tensors named as PEFT saves them
 * ("base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight"), so a
 * saver writes adapter_model.safetensors from these views directly. The
 * transformer holds the adapter set and calls lora_forward/lora_backward
 * at each targeted projection (transformer.c); nothing outside lib/model
 * includes this. Not thread-safe: one transformer, one thread at a time. */
#ifndef RLPI_MODEL_LORA_H
#define RLPI_MODEL_LORA_H

#include "model/transformer.h"

#include <stdbool.h>
#include <stdint.h>

/* The projections an adapter can sit on, as PEFT's target_modules names
 * them; a bit each in rlpi_lora_config.targets. */
typedef enum rlpi_lora_target {
    RLPI_LORA_Q = 0,
    RLPI_LORA_K = 1,
    RLPI_LORA_V = 2,
    RLPI_LORA_O = 3,
    RLPI_LORA_GATE = 4,
    RLPI_LORA_UP = 5,
    RLPI_LORA_DOWN = 6,
    RLPI_LORA_N_TARGETS = 7
} rlpi_lora_target;

#define RLPI_LORA_ALL_TARGETS 0x7Fu
#define RLPI_LORA_MAX_RANK 1024

typedef struct rlpi_lora_config {
    int32_t rank; /* r, 1 … RLPI_LORA_MAX_RANK and at most every target's in and out */
    float alpha;  /* > 0; scale = alpha / r, or alpha / √r with rslora */
    bool rslora;
    uint32_t targets; /* bit (1 << rlpi_lora_target) per adapted projection; non-zero */
} rlpi_lora_config;

/* "q_proj", "k_proj", …, "down_proj"; NULL outside the enum. */
const char *rlpi_lora_target_name(int target);
/* Parses a comma-separated list of target names (PEFT's spelling; "all"
 * or "all-linear" for all seven) into a bit mask. RLP_E_INVALID_ARG
 * naming an unknown entry. */
int rlpi_lora_parse_targets(const char *list, uint32_t *mask);
/* The scale s the config gives (alpha / r or alpha / √r). */
float rlpi_lora_scale(const rlpi_lora_config *cfg);

/* Attaches adapters to every layer's targeted projections, A drawn from
 * `seed`, B = 0, and freezes the base: from then on the transformer has no
 * base gradients (its gradient buffer is freed: 4 bytes a base parameter),
 * backward computes only what flows to the adapters (no ∂W products, about
 * a third of the backward's GEMMs), and rlpi_transformer_trainable_*
 * describe the adapters. On a frozen (forward-only) transformer the
 * adapters are inference-only: no gradient buffer (a rollout engine
 * applying published adapters to its base). RLP_E_INVALID_ARG for a bad
 * config (named field), RLP_E_STATE when adapters are already attached,
 * RLP_E_NOMEM. On error nothing changes. */
int rlpi_transformer_attach_lora(rlpi_transformer *tf, const rlpi_lora_config *cfg, uint64_t seed);
/* Removes the adapters and makes the base trainable again (a zeroed
 * gradient buffer). RLP_E_NOMEM leaves the adapters attached. No-op
 * without adapters. */
int rlpi_transformer_detach_lora(rlpi_transformer *tf);
/* The attached config, or NULL. */
const rlpi_lora_config *rlpi_transformer_lora_config(const rlpi_transformer *tf);
/* With false the forward skips the adapters (the base model: the
 * reference policy of a KL term needs no second copy); true again by
 * default. No-op without adapters. */
void rlpi_transformer_set_lora_enabled(rlpi_transformer *tf, bool enabled);

/* What the optimizer updates: the adapters when attached, else every base
 * parameter (the same views as rlpi_transformer_tensor/params/grads). */
size_t rlpi_transformer_n_trainable(const rlpi_transformer *tf);
size_t rlpi_transformer_n_trainable_tensors(const rlpi_transformer *tf);
const rlpi_param_info *rlpi_transformer_trainable_tensor(const rlpi_transformer *tf, size_t i);
rlpi_buffer *rlpi_transformer_trainable_params(rlpi_transformer *tf);
rlpi_buffer *rlpi_transformer_trainable_grads(rlpi_transformer *tf);

/* PEFT's folder layout (lora_peft.c): adapter_model.safetensors (fp32,
 * PEFT's tensor names) and adapter_config.json (a LoraConfig: r,
 * lora_alpha, use_rslora, target_modules, base_model_name_or_path =
 * `base_model` or null), each written atomically; `dir` is created.
 * RLP_E_STATE without adapters, RLP_E_IO. */
int rlpi_lora_save_peft(rlpi_transformer *tf, const char *dir, const char *base_model);
/* Reads such a folder (PEFT's own or ours) into the adapters: attaches
 * them from adapter_config.json when none are, else the config must match
 * the attached one (rank, targets, scale: RLP_E_INVALID_ARG). A folder of
 * ours names the CRC-32 of the base it was trained on in its file's
 * metadata ("rlpost.base_crc32"): another base is RLP_E_INVALID_ARG
 * (PEFT's folders carry none and are not checked). Every tensor
 * must be there with this model's shapes and nothing else (RLP_E_FORMAT
 * naming it), every value finite; DoRA, trained biases, rank/alpha
 * patterns, modules_to_save, fan_in_fan_out and layer subsets are
 * RLP_E_UNSUPPORTED by name. Validated before anything is changed. */
int rlpi_lora_load_peft(rlpi_transformer *tf, const char *dir);

/* ---- used by transformer.c only ---- */

typedef struct rlpi_lora rlpi_lora;
void rlpi_lora_free(rlpi_lora *lo);
/* Whether the adapters have gradients (attached to a trainable transformer). */
bool rlpi_lora_trainable(const rlpi_lora *lo);
bool rlpi_lora_active(const rlpi_lora *lo, int target);
/* Sizes the saved-h buffer for a forward over n tokens (keep: one slot per
 * layer, else one reused slot). */
int rlpi_lora_begin_forward(rlpi_transformer *tf, int64_t n, bool keep);
/* y (n, out) += s·(x·Aᵀ)·Bᵀ for layer l's `target`; xT/yT: the operand is
 * stored transposed, (in, n) / (out, n). Saves s·x·Aᵀ for the backward. */
int rlpi_lora_forward(rlpi_transformer *tf, int l, int target, rlpi_buffer *x, size_t xoff, int xT, rlpi_buffer *y,
                      size_t yoff, int yT);
/* Given dy = ∂L/∂y: dB += dyᵀ·(s·x·Aᵀ), dA += s·(dy·B)ᵀ·x and
 * dx += s·(dy·B)·A (dx already holds the base's part). */
int rlpi_lora_backward(rlpi_transformer *tf, int l, int target, rlpi_buffer *dy, size_t dyoff, int dyT, rlpi_buffer *x,
                       size_t xoff, int xT, rlpi_buffer *dx, size_t dxoff, int dxT);
/* Adds s·B·A to each adapted weight of `w` (HF-named host weights of this
 * transformer's shapes): the merged model, for export. No-op while the
 * adapters are disabled. */
int rlpi_lora_merge_into(rlpi_transformer *tf, rlpi_weights *w);
/* dst's parameters (which must hold src's base, same config, same
 * backend) += s·B·A of src's adapters, one GEMM per adapted projection in
 * place: a rollout engine's copy becomes the merged model without a host
 * copy of the weights. RLP_E_INVALID_ARG for another shape or backend. */
int rlpi_lora_merge_params(rlpi_transformer *src, rlpi_transformer *dst);
/* CRC-32 of the base's fp32 parameter bytes: what an adapter folder was
 * trained on (lora_peft.c writes it into the adapter file's metadata and
 * checks it on load). Computed once while adapters are attached (the base
 * is frozen then): one pass over its bytes. */
int rlpi_lora_base_fingerprint(rlpi_transformer *tf, uint32_t *out);
/* The base's parameters were overwritten (set_weights, a broadcast): the
 * fingerprint is computed again when next asked for. */
void rlpi_lora_base_changed(rlpi_transformer *tf);
int rlpi_lora_zero_grad(rlpi_lora *lo);
void rlpi_lora_release_grads(rlpi_lora *lo);
size_t rlpi_lora_activation_bytes(const rlpi_lora *lo);

#endif
