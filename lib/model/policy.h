/* Internal layout of rlp_policy and its constructor from an in-memory
 * config and weights (what every file loader ends with). */
#ifndef RLPI_MODEL_POLICY_H
#define RLPI_MODEL_POLICY_H

#include "backend/context.h"
#include "model/transformer.h"
#include "optim/optimizer.h"
#include "rlpost.h"

#include <stdbool.h>

struct rlp_policy {
    rlp_context *ctx;          /* borrowed; outlives the policy */
    rlp_policy_options opts;
    bool trainable;
    rlpi_transformer *tf;      /* owned */
    rlpi_optimizer opt;
    uint64_t version;          /* SFT steps and RL steps taken (not optimizer steps: opt.step counts those) */
    uint64_t weights_gen;      /* bumped whenever the weights change in place without a new version
                                * (an optimizer step inside a multi-step RL step, a broadcast): what a
                                * quantized rollout copy checks besides the version */
    uint64_t bytes_broadcast;  /* what the last rlp_policy_broadcast moved: the base when a rank needed
                                * it, and the adapters (a LoRA root over the same base sends only those) */
    rlp_tokenizer *tokenizer;  /* owned; NULL when the file has none (llama2.c) */
    char *tokenizer_path;      /* where it came from (a GGUF or tokenizer.json), for clones and saves */
    rlp_comm *comm;            /* borrowed; non-NULL: train steps are data-parallel collectives */
};

/* Builds a policy on ctx's backend from a config and HF-named weights
 * (copied). */
int rlpi_policy_create(rlp_policy **out, rlp_context *ctx, const rlpi_model_config *cfg, const rlpi_weights *w,
                       const rlp_policy_options *opts);

/* rlp_policy_train_step(), with the version advanced only when
 * `advance_version`: an RL step (lib/algo/rl_step.c) takes several optimizer
 * steps and advances the version once itself. */
int rlpi_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, rlp_loss_fn loss, void *payload,
                           const rlp_train_options *opts, rlp_train_stats *stats, bool advance_version);

/* rlp_policy_save(); with adapters attached and !merged it writes the
 * frozen base instead of the merged model (a checkpoint keeps base and
 * adapters apart, so that a resumed run trains the same parameters). */
int rlpi_policy_save_hf(const rlp_policy *policy, const char *dir, int dtype, bool merged);

/* Whether LoRA adapters are attached (the synchronizer then ships them only). */
bool rlpi_policy_has_lora(const rlp_policy *policy);

/* Loads the tokenizer at `path` (GGUF or tokenizer.json) into the policy. */
int rlpi_policy_attach_tokenizer(rlp_policy *p, const char *path);

/* Reads a model file or folder (GGUF, HF folder, llama2.c) into a config
 * and HF-named fp32 weights; `pool` (may be NULL) parallelises
 * dequantization. */
int rlpi_model_load_weights(const char *path, rlpi_model_config *cfg, rlpi_weights *w,
                            struct rlpi_threadpool *pool);

#endif
