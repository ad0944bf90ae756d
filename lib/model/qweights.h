/* The rollout copy of a transformer's linear weights, quantized for
 * decoding (lib/backend/qmat.h): per layer one QKV matrix (wq, wk, wv
 * stacked along the output rows, so decode runs one product for the
 * three), wo, one gate-up matrix (wg over wu) and wd, and the LM head (the
 * tied embedding where the model ties it). Norms, embedding lookups,
 * biases and attention stay fp32 and keep reading the transformer's own
 * parameters. Built from, and rebuilt from, the transformer's fp32
 * parameters: the owner calls rlpi_qweights_update() whenever those
 * change (the rollout engine does when the weights' version or epoch
 * moves). CPU backend only (the products need rlpi_op_qmatmul and the
 * quantizer reads the parameters in host memory). */
#ifndef RLPI_MODEL_QWEIGHTS_H
#define RLPI_MODEL_QWEIGHTS_H

#include "model/transformer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_qlayer {
    size_t qkv, wo, gu, wd; /* byte offsets into rlpi_qweights.buf */
} rlpi_qlayer;

typedef struct rlpi_qweights {
    const rlpi_transformer *tf; /* the transformer it was made for (borrowed) */
    int type;                   /* RLPI_QMAT_* of the layers' matrices */
    int head_type;              /* RLPI_QMAT_* of the head: Q8_0 (also under Q4_0 layers) */
    rlpi_buffer *buf;
    rlpi_qlayer *layers;        /* (n_layers) */
    size_t head;                /* byte offset of the (vocab, dim) head */
    double last_update_s;       /* seconds the last (re)quantization took */
    uint64_t updates;           /* (re)quantizations so far */
} rlpi_qweights;

/* Allocates the copy for tf and quantizes tf's current weights into it.
 * type: RLPI_QMAT_Q8_0 or RLPI_QMAT_Q4_0 (the layers' matrices; the
 * head is Q8_0 either way). RLP_E_UNSUPPORTED when tf's backend has no
 * quantized products or its parameters are not in host memory;
 * RLP_E_NOMEM; RLP_E_INVALID_ARG (type). */
int rlpi_qweights_create(rlpi_qweights **out, rlpi_transformer *tf, int type);

/* Re-quantizes from tf's current fp32 parameters (threaded on the CPU
 * backend's pool); tf must be the transformer the copy was made for, or
 * one of the same shape. */
int rlpi_qweights_update(rlpi_qweights *qw, rlpi_transformer *tf);

/* Bytes of the copy. */
size_t rlpi_qweights_bytes(const rlpi_qweights *qw);

void rlpi_qweights_free(rlpi_qweights *qw);

#endif
