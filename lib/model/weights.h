/* A set of named fp32 tensors: what every loader returns and every writer
 * takes. Names and layouts are Hugging Face's (`model.layers.3.self_attn.
 * q_proj.weight`, shape (out, in) row-major), whatever the file format, so
 * the transformer sees one convention. GGUF's reversed dimension order and
 * llama.cpp's Q/K row permutation for RoPE are undone by the GGUF loader. */
#ifndef RLPI_MODEL_WEIGHTS_H
#define RLPI_MODEL_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#define RLPI_MAX_DIMS 4

typedef struct rlpi_tensor {
    char *name;                   /* owned */
    int32_t n_dims;               /* 1..RLPI_MAX_DIMS */
    int64_t shape[RLPI_MAX_DIMS]; /* outermost first (PyTorch order) */
    size_t n_elems;
    float *data;                  /* owned, n_elems floats; NULL for an alias */
    int32_t alias_of;             /* index of the tensor whose data this shares, or -1 */
    char src_dtype[8];            /* dtype in the file ("F32", "Q4_1", ...) */
} rlpi_tensor;

typedef struct rlpi_weights {
    rlpi_tensor *tensors;
    size_t n, cap;
} rlpi_weights;

void rlpi_weights_init(rlpi_weights *w);
void rlpi_weights_free(rlpi_weights *w);
/* Appends a tensor and allocates its zeroed data; returns it through *out
 * (valid until the next add). RLP_E_NOMEM / RLP_E_OVERFLOW / RLP_E_INVALID_ARG
 * (duplicate name, bad shape). */
int rlpi_weights_add(rlpi_weights *w, const char *name, int32_t n_dims, const int64_t *shape,
                     rlpi_tensor **out);
/* Adds `name` as an alias of the existing tensor `target` (tied embeddings:
 * no copy). */
int rlpi_weights_add_alias(rlpi_weights *w, const char *name, const char *target);
/* Looks a tensor up by name; NULL if absent. */
const rlpi_tensor *rlpi_weights_find(const rlpi_weights *w, const char *name);
/* Data of a tensor, following an alias. */
const float *rlpi_tensor_data(const rlpi_weights *w, const rlpi_tensor *t);
/* Scans every value for NaN and ±Inf (aliases are skipped: their target is
 * scanned). RLP_OK when all are finite; otherwise RLP_E_FORMAT with a
 * message naming `source` (a file or folder, or NULL), the first tensor at
 * fault, the index of its first bad value and how many of its values are
 * bad. Weights loaded from outside must pass it before they replace
 * weights in use: one NaN makes every logprob NaN. */
int rlpi_weights_check_finite(const rlpi_weights *w, const char *source);

#endif
