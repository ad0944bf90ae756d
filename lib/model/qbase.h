/* A frozen base's linear weights kept in GGUF block formats and
 * dequantized one layer at a time while the passes run: QLoRA's idea
 * (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs",
 * arXiv:2305.14314: a 4-bit frozen base, adapters in full precision,
 * weights dequantized just before each product) with GGUF's block types
 * (Q8_0, Q4_0, Q4_K; model/quant.h) instead of NF4.
 *
 * Layout. Per layer the seven projections (wq, wk, wv, wo, wg, wu, wd) are
 * quantized row by row exactly as a GGUF file stores them (blocks along the
 * input dimension, rows back to back), so a Q8_0 GGUF's tensors come back
 * byte for byte. The transformer's parameter buffer keeps everything else
 * in fp32 (embedding, tied or untied head, norms, biases) after a WINDOW of
 * one layer's seven matrices at offset 0, laid out as the fused passes read
 * them (wq|wk|wv and wg|wu back to back). Every layer's layer_params point
 * its matrices into that window, and rlpi_qbase_load_layer() dequantizes
 * layer l into it before the layer's forward, recompute or backward reads
 * it; the products themselves are the fp32 ones, so a quantized-base model
 * computes exactly what an fp32 model holding the dequantized weights
 * computes (test_qbase checks this bit for bit).
 *
 * Memory: base bytes (the blocks) + fp32 non-matrix tensors + one layer's
 * fp32 matrices, instead of 4 bytes for every parameter. Time: one
 * dequantization per layer per pass (forward, backward; the last layer of a
 * forward is still in the window when its backward starts).
 *
 * Only a frozen base can be quantized (adapters attached: nothing writes
 * the matrices but rlpi_transformer_set_weights, which re-quantizes). The
 * blocks live in host memory; on a device backend the window is filled
 * through one host staging copy per layer. Nothing outside lib/model
 * includes this. Not thread-safe: one transformer, one thread at a time. */
#ifndef RLPI_MODEL_QBASE_H
#define RLPI_MODEL_QBASE_H

#include "model/quant.h"
#include "model/transformer.h"

#include <stdbool.h>
#include <stdint.h>

/* The seven matrices of a layer, in window order. */
enum { RLPI_QB_WQ, RLPI_QB_WK, RLPI_QB_WV, RLPI_QB_WO, RLPI_QB_WG, RLPI_QB_WU, RLPI_QB_WD, RLPI_QB_N };

typedef struct rlpi_qbase {
    uint32_t type;                 /* the ggml type asked for (RLPI_GGML_Q8_0, Q4_0, Q4_K) */
    uint32_t mat_type[RLPI_QB_N];  /* the type each matrix is held in: `type`, or Q4_0 for a
                                    * K-quant whose rows are not a multiple of 256 (as
                                    * llama.cpp falls back for such tensors) */
    int64_t rows[RLPI_QB_N], cols[RLPI_QB_N];
    size_t win_off[RLPI_QB_N];     /* floats: each matrix's place in the window */
    size_t window_floats;          /* the window: [0, window_floats) of the parameter buffer */
    size_t mat_off[RLPI_QB_N], mat_bytes[RLPI_QB_N]; /* bytes, within a layer's blocks */
    size_t layer_bytes;
    int n_layers;
    uint8_t *blocks;               /* (n_layers × layer_bytes), host memory */
    float *staging;                /* (window_floats) when the parameters are device memory, else NULL */
    int resident;                  /* the layer the window holds, -1 for none */
    uint64_t loads;                /* layer dequantizations so far */
    double load_s;                 /* seconds spent in them */
} rlpi_qbase;

/* Parses "f32" (or NULL), "q8_0", "q4_0", "q4_k" (lowercase, as written
 * in configs and adapter metadata) into a ggml type id (RLPI_GGML_F32 for
 * none). RLP_E_INVALID_ARG naming the value otherwise ("" and "Q8_0"
 * included). */
int rlpi_qbase_parse_dtype(const char *name, uint32_t *type);
/* "q8_0", "q4_0", "q4_k" or "f32". */
const char *rlpi_qbase_dtype_name(uint32_t type);

/* Converts tf's frozen base to `type` (RLPI_GGML_Q8_0, Q4_0 or Q4_K): the
 * matrices are quantized into blocks, the parameter buffer is rebuilt as
 * window + fp32 tensors, and the fp32 matrices are freed. Needs adapters
 * attached (the base frozen) or a frozen transformer. RLP_E_INVALID_ARG
 * (type), RLP_E_STATE (a trainable base; already quantized),
 * RLP_E_UNSUPPORTED naming a matrix whose rows are not a multiple of 32,
 * RLP_E_NOMEM. On error nothing changes. RLPI_GGML_F32 is a no-op. */
int rlpi_transformer_quantize_base(rlpi_transformer *tf, uint32_t type);

/* The base's ggml type: RLPI_GGML_F32 when not quantized. */
uint32_t rlpi_transformer_base_type(const rlpi_transformer *tf);
/* Bytes of the quantized blocks (0 when not quantized). */
size_t rlpi_transformer_base_block_bytes(const rlpi_transformer *tf);
/* The blocks (host memory, rlpi_transformer_base_block_bytes of them) for
 * a caller that overwrites them with another rank's (a broadcast): the
 * window is reloaded from them at the next load. NULL when not quantized. */
void *rlpi_transformer_base_blocks(rlpi_transformer *tf);
/* Floats the parameter buffer holds (the window and the fp32 tensors with a
 * quantized base; rlpi_transformer_n_params otherwise). */
size_t rlpi_transformer_n_stored(const rlpi_transformer *tf);

/* Makes the window hold layer l's matrices (a no-op when it already does or
 * the base is not quantized). Threaded on the CPU backend's pool. */
int rlpi_qbase_load_layer(rlpi_transformer *tf, int l);

/* Whether tensor `in` (one of tf's infos) is a quantized matrix; *layer and
 * *mat say which. */
bool rlpi_qbase_find(const rlpi_transformer *tf, const rlpi_param_info *in, int *layer, int *mat);
/* A host scratch for one tensor's fp32 values, grown as needed (free p). */
typedef struct rlpi_f32_scratch {
    float *p;
    size_t cap; /* floats */
} rlpi_f32_scratch;

/* *data = tensor `in` (one of tf's infos) as fp32 values: in place in host
 * parameters, else dequantized from a quantized base's blocks or
 * downloaded from device memory into s. Valid until s is used again.
 * RLP_E_NOMEM, or the backend's error. */
int rlpi_tf_tensor_values(rlpi_transformer *tf, const rlpi_param_info *in, rlpi_f32_scratch *s, const float **data);

/* dst[in->n_elems] = the dequantized tensor (one that rlpi_qbase_find names). */
int rlpi_qbase_read(rlpi_transformer *tf, int layer, int mat, float *dst);
/* Quantizes src[n_elems of the matrix] into its blocks; the window is
 * reloaded at the next load_layer. */
int rlpi_qbase_write(rlpi_transformer *tf, int layer, int mat, const float *src);

/* The CRC-32 (as rlpi_lora_base_fingerprint computes it: every tensor's
 * fp32 values in layout order) that tf's base would have once quantized as
 * `type` and dequantized: how a reader holding the fp32 base checks adapters
 * trained over that base kept in blocks (the rows quantize to the same
 * blocks, so the values and the CRC are the trainer's). For an
 * already-quantized tf of the same type it is its own fingerprint;
 * RLP_E_INVALID_ARG for a tf quantized as another type. Cached until the
 * base changes (rlpi_lora_base_changed). */
int rlpi_qbase_fingerprint_as(rlpi_transformer *tf, uint32_t type, uint32_t *out);

void rlpi_qbase_free(rlpi_qbase *qb);

#endif
