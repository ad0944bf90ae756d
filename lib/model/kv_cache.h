/* KV cache and the cached inference pass that generation runs: a fixed
 * number of slots, each holding the keys and values of one sequence, and
 * rlpi_transformer_extend(), which appends new tokens to any mix of slots
 * (a prompt prefill, one decode token, or both in one call) and returns
 * the logits of each sequence's last new token. Training never uses it. */
#ifndef RLPI_MODEL_KV_CACHE_H
#define RLPI_MODEL_KV_CACHE_H

#include "model/transformer.h"

typedef struct rlpi_kv_cache rlpi_kv_cache;

/* Slots for n_slots sequences of up to `capacity` tokens each, shaped for
 * tf's config (any transformer with the same config can use it). Memory:
 * n_layers · 2 · n_slots · capacity · n_kv_heads · head_dim floats. */
int rlpi_kv_cache_create(rlpi_kv_cache **out, rlpi_transformer *tf, int64_t n_slots, int64_t capacity);
void rlpi_kv_cache_free(rlpi_kv_cache *kv);
int64_t rlpi_kv_cache_slots(const rlpi_kv_cache *kv);
int64_t rlpi_kv_cache_capacity(const rlpi_kv_cache *kv);
size_t rlpi_kv_cache_bytes(const rlpi_kv_cache *kv);
/* Declares every slot's rows and the workspaces dead and returns their
 * host pages to the system (rlpi_buffer_discard): between generate calls
 * (the engine starts each with all slots free) the cache then holds no
 * resident memory, e.g. while the trainer's backward and optimizer run.
 * Touching the pages again costs a page fault each (~1 µs per 4 KiB). */
void rlpi_kv_cache_release(rlpi_kv_cache *kv);

/* Copies rows [0, n_rows) of slot src into slot dst (a prompt prefilled
 * once, shared by the samples of its group). */
int rlpi_kv_cache_copy_prefix(rlpi_kv_cache *kv, int64_t dst, int64_t src, int64_t n_rows);

/* Runs tokens through tf against the cache. Sequence s has the new tokens
 * tokens[q_start[s] .. q_start[s+1]) (host, ≥ 1 each) at positions past[s],
 * past[s]+1, … of cache slot slot[s] (rows [0, past[s]) must hold its
 * earlier tokens); their keys and values are written into the slot.
 * logits: host (n_seq, vocab), the raw logits after each sequence's last
 * new token; NULL leaves them in backend memory only (see
 * rlpi_kv_cache_logits). Slots must be distinct within a call. */
int rlpi_transformer_extend(rlpi_transformer *tf, rlpi_kv_cache *kv, int64_t n_seq, const int64_t *q_start,
                            const int64_t *slot, const int64_t *past, const int32_t *tokens, float *logits);

/* Decode with a quantized copy of the linear weights (rlpi_qweights, made
 * for the transformer passed to extend; borrowed, must outlive its use)
 * instead of the fp32 parameters; NULL goes back to fp32. Norms,
 * embeddings and attention read the fp32 parameters either way. */
struct rlpi_qweights;
void rlpi_kv_cache_set_qweights(rlpi_kv_cache *kv, const struct rlpi_qweights *qw);

/* The backend buffer that holds the last extend's logits, (n_seq, vocab)
 * from element 0, valid until the next extend on kv (borrowed): what the
 * rollout engine samples from without downloading them. */
rlpi_buffer *rlpi_kv_cache_logits(rlpi_kv_cache *kv);

#endif
