/* The backend interface: the one seam between the model/algorithm code and
 * the hardware. Model and algorithm code call only the rlpi_* wrappers
 * below (which validate bounds once, for every backend) and never look at a
 * backend's own types, so the CPU and CUDA backends are interchangeable and
 * tested against each other. A backend fills an rlpi_backend_ops table;
 * slots a backend does not implement are NULL and the wrappers then report
 * RLP_E_UNSUPPORTED.
 *
 * This header is also compiled into the CUDA backend module (a separate
 * shared object loaded at run time), so it must stay free of anything that
 * only the core library defines, except through rlpi_host_api. */
#ifndef RLPI_BACKEND_BACKEND_H
#define RLPI_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_backend rlpi_backend;
typedef struct rlpi_backend_ops rlpi_backend_ops;

/* A block of backend memory. `data` is a host pointer on the CPU backend and
 * a device pointer on CUDA; code outside the backend must not dereference it
 * (use upload/download), except through rlpi_buffer_host() which is NULL
 * where the memory is not host-visible. */
typedef struct rlpi_buffer {
    rlpi_backend *owner;
    void *data;
    size_t nbytes;
} rlpi_buffer;

/* Operand of a (batched) GEMM: a row-major matrix view into a buffer.
 * Offsets, leading dimensions and batch strides are in float elements. */
typedef struct rlpi_matrix {
    const rlpi_buffer *buf;
    size_t offset;      /* first element of batch 0 */
    int64_t ld;         /* leading dimension (row stride), >= columns as stored */
    int64_t stride;     /* elements between consecutive batch items (0 = broadcast) */
} rlpi_matrix;

/* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), all
 * row-major fp32; op(X) = X or Xᵀ. The backend's `matmul` precision says how
 * the products are formed (fp32, TF32, or operands rounded to bf16 with fp32
 * sums); operands and C are fp32 in memory in every mode. op(A) is (m, k), op(B) is (k, n), C is
 * (m, n). With trans_a, A is stored (k, m); with trans_b, B is stored (n, k).
 * beta == 0 means C is not read (NaNs in C do not propagate). */
typedef struct rlpi_gemm {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    rlpi_matrix a, b;
    rlpi_matrix c;      /* c.buf is written: must not alias a or b */
    int64_t batch;      /* >= 1 */
} rlpi_gemm;

/* One AdamW update (Loshchilov & Hutter, "Decoupled Weight Decay
 * Regularization", ICLR 2019, Algorithm 2), with Adam's bias correction:
 *   m = β1 m + (1-β1) g ;  v = β2 v + (1-β2) g²
 *   p -= lr · ( (m / bc1) / (sqrt(v / bc2) + eps) + wd · p )
 * where bc1 = 1 - β1^t, bc2 = 1 - β2^t, and g is pre-scaled by grad_scale
 * (global-norm clipping folds in here). */
typedef struct rlpi_adamw_step {
    float lr, beta1, beta2, eps, weight_decay;
    float bias_correction1, bias_correction2;
    float grad_scale;
} rlpi_adamw_step;

/* How one row of logits is sampled (rlpi_op_sample_rows; the host
 * sampler, lib/backend/sampler.h, takes the same struct). Defined here, not
 * in the sampler's header, because the CUDA module compiles this header
 * alone. */
enum {
    RLPI_LOGPROBS_SAMPLING = 0, /* the truncated, renormalised, tempered distribution the token was drawn from */
    RLPI_LOGPROBS_TEMPERED = 1, /* log_softmax(logits / T) over the whole vocabulary (what a trainer recomputes) */
    RLPI_LOGPROBS_RAW = 2       /* log_softmax(logits), T = 1, no truncation (vLLM's default; for comparison) */
};

typedef struct rlpi_sampler_params {
    float temperature;   /* 0 = greedy (argmax, lowest id on ties); > 0 otherwise */
    int32_t top_k;       /* 0 = off; keep the k largest */
    float top_p;         /* 1 = off; keep the smallest prefix (by prob, descending) with mass >= top_p */
    float min_p;         /* 0 = off; keep tokens with p >= min_p * p_max */
    int32_t logprobs_mode; /* RLPI_LOGPROBS_* */
} rlpi_sampler_params;

/* What a backend can do. Every slot receives validated arguments (the
 * wrappers below check NULLs, ranges and buffer bounds first). */
struct rlpi_backend_ops {
    const char *name;
    void (*destroy)(rlpi_backend *be);

    /* buffers */
    int (*buffer_alloc)(rlpi_backend *be, size_t nbytes, rlpi_buffer *buf); /* sets data */
    void (*buffer_free)(rlpi_backend *be, rlpi_buffer *buf);
    int (*buffer_upload)(rlpi_backend *be, rlpi_buffer *dst, size_t off, const void *src, size_t n);
    int (*buffer_download)(rlpi_backend *be, const rlpi_buffer *src, size_t off, void *dst, size_t n);
    int (*buffer_copy)(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src,
                       size_t src_off, size_t n);
    /* `rows` rows of `width` bytes, rows `dst_pitch` / `src_pitch` bytes
     * apart (cudaMemcpy2D's arguments); the ranges do not overlap. NULL:
     * the wrapper copies row by row through buffer_copy. */
    int (*buffer_copy_2d)(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, size_t dst_pitch,
                          const rlpi_buffer *src, size_t src_off, size_t src_pitch, size_t width, size_t rows);
    int (*buffer_fill_f32)(rlpi_backend *be, rlpi_buffer *dst, size_t off_elems, size_t n_elems,
                           float value);
    int (*synchronize)(rlpi_backend *be);
    int host_visible;   /* buffers' data pointers are host memory */

    /* dense linear algebra */
    int (*gemm_f32)(rlpi_backend *be, const rlpi_gemm *g);

    /* Transformer and optimizer kernels. Pointers are the backend's own
     * (device pointers on CUDA), already bounds-checked by the wrappers in
     * backend_ops.c; int32 arrays (ids, positions) live in backend memory
     * too. Sequence boundaries (`seq_start`, n_seq + 1 host int64 values)
     * stay on the host. A NULL slot means "not implemented here". */
    int (*embedding_fwd)(rlpi_backend *be, float *out, const float *table, const int32_t *ids,
                         int64_t n, int64_t dim, int64_t vocab);
    int (*embedding_bwd)(rlpi_backend *be, float *dtable, const float *dout, const int32_t *ids,
                         int64_t n, int64_t dim, int64_t vocab);
    int (*rmsnorm_fwd)(rlpi_backend *be, float *out, float *rstd, const float *x, const float *w,
                       int64_t n, int64_t dim, float eps);
    int (*rmsnorm_bwd)(rlpi_backend *be, float *dx_accum, float *dw_accum, const float *dout,
                       const float *x, const float *w, const float *rstd, int64_t n, int64_t dim);
    int (*rope)(rlpi_backend *be, float *x, const int32_t *pos, const float *inv_freq, int64_t n,
                int64_t n_heads, int64_t head_dim, int inverse);
    int (*attention_fwd)(rlpi_backend *be, float *out, float *lse, const float *q, const float *k,
                         const float *v, const int64_t *seq_start, int64_t n_seq, int64_t n,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
    int (*attention_bwd)(rlpi_backend *be, float *dq, float *dk, float *dv, const float *dout,
                         const float *q, const float *k, const float *v, const float *out,
                         const float *lse, const int64_t *seq_start, int64_t n_seq, int64_t n,
                         int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
    int (*swiglu_fwd)(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n);
    int (*swiglu_bwd)(rlpi_backend *be, float *dgate, float *dup, const float *dout,
                      const float *gate, const float *up, int64_t n);
    int (*geglu_fwd)(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n);
    int (*geglu_bwd)(rlpi_backend *be, float *dgate, float *dup, const float *dout,
                     const float *gate, const float *up, int64_t n);
    int (*add)(rlpi_backend *be, float *y, const float *x, int64_t n);
    int (*add_bias)(rlpi_backend *be, float *y, const float *bias, int64_t rows, int64_t cols);
    int (*bias_bwd)(rlpi_backend *be, float *dbias_accum, const float *dy, int64_t rows, int64_t cols);
    int (*scale)(rlpi_backend *be, float *x, float alpha, int64_t n);
    int (*softcap_fwd)(rlpi_backend *be, float *x, int64_t n, float cap);
    int (*softcap_bwd)(rlpi_backend *be, float *dx, const float *y, int64_t n, float cap);
    int (*logprob_rows)(rlpi_backend *be, float *logp, float *entropy, const float *logits,
                        const int32_t *targets, int64_t n, int64_t vocab, float inv_temp);
    int (*logprob_rows_bwd)(rlpi_backend *be, float *logits_to_dlogits, const int32_t *targets,
                            const float *dlogp, const float *dentropy, int64_t n, int64_t vocab,
                            float inv_temp);
    int (*sum_squares)(rlpi_backend *be, double *out_host, const float *x, int64_t n);
    int (*adamw)(rlpi_backend *be, float *param, const float *grad, float *m, float *v, int64_t n,
                 const rlpi_adamw_step *step);
    /* inference against a KV cache (see rlpi_op_attention_cached) */
    int (*attention_cached)(rlpi_backend *be, float *out, const float *q, const float *kc, const float *vc,
                            const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                            int64_t n, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                            float scale, int64_t window);

    /* sampling (rollout engine) */
    /* see rlpi_op_sample_rows; rows_host NULL = rows 0..n-1; all but
     * `logits` are host arrays of n entries */
    int (*sample_rows)(rlpi_backend *be, int32_t *tokens_host, float *logprobs_host, const float *logits,
                       const int32_t *rows_host, int64_t n, int64_t vocab, const rlpi_sampler_params *params_host,
                       const double *u_host);

    /* quantized inference weights (see rlpi_op_qmatmul); NULL where the
     * backend has none, and decoding then uses the fp32 weights */
    int (*qmatmul)(rlpi_backend *be, float *c, const float *a, const void *w, int type, int64_t m, int64_t n,
                   int64_t k, float beta);
};



/* Services of the core library that a dynamically loaded backend module
 * may use (it cannot link the core's hidden symbols). */
typedef struct rlpi_host_api {
    uint32_t version;   /* RLPI_HOST_API_VERSION */
    int (*error_set)(int code, const char *fmt, ...);
    void (*log)(const void *logger, int level, const char *fmt, ...);
} rlpi_host_api;
#define RLPI_HOST_API_VERSION 1

/* backend/module_open.c: the host interface handed to every run-time
 * module, and dlopen of a module: $env_var (a path), next to librlpost,
 * install_dir/file, then `file` by name. NULL when none opened; `why`
 * then holds every attempt's reason. */
const rlpi_host_api *rlpi_module_host_api(void);
void *rlpi_module_open(const char *env_var, const char *file, const char *install_dir, char *why, size_t why_len);

struct rlpi_backend {
    const rlpi_backend_ops *ops;
    int kind;            /* rlp_backend_kind */
    int device;
    int n_threads;       /* CPU threads available to the backend */
    char description[160];
    const void *logger;  /* borrowed rlpi_logger of the owning context */
    void *impl;          /* the backend's own state */
    int matmul;          /* rlp_matmul_precision of gemm_f32 (0 = fp32); set by the
                          * context after creation, constant afterwards. RLP_MATMUL_TF32
                          * only ever reaches a backend that has TF32 (CUDA). */
};

/* ---- wrappers: the only way other code touches a backend ---- */

int rlpi_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer **out);
void rlpi_buffer_free(rlpi_buffer *buf);
/* Host pointer to the data, or NULL when the memory is device-only. */
void *rlpi_buffer_host(const rlpi_buffer *buf);
/* Declares the contents dead: host memory's whole pages go back to the
 * system (madvise MADV_DONTNEED; they read as zeros when touched again),
 * so a scratch buffer that is large only at times (a KV cache after a
 * generate call) stops counting in the resident set. The buffer stays
 * valid and allocated. A no-op for device memory and NULL. */
void rlpi_buffer_discard(rlpi_buffer *buf);
/* Sets every byte to zero without making host memory resident: the whole
 * pages are discarded (they read as zeros, RSS untouched), the partial
 * pages at the two ends written. A fresh gradient buffer costs nothing
 * until a backward writes it (4 bytes a parameter that LoRA, which frees
 * it, never touches). Device memory is filled. */
int rlpi_buffer_zero(rlpi_buffer *buf);
int rlpi_buffer_upload(rlpi_buffer *dst, size_t off, const void *src, size_t n);
int rlpi_buffer_download(const rlpi_buffer *src, size_t off, void *dst, size_t n);
int rlpi_buffer_copy(rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src, size_t src_off,
                     size_t n);
/* Copies a block of `rows` rows of `width` bytes between two strided
 * layouts, e.g. the Q, K and V columns out of one (n, qdim + 2·kvdim)
 * product. Offsets and pitches (bytes between consecutive rows' starts)
 * are in bytes; every row of both sides must lie in its buffer, each
 * side's rows must not overlap each other (pitch >= width when rows > 1),
 * and within one buffer the spans of source and destination (first byte
 * of the first row to last byte of the last row) must not overlap.
 * RLP_E_INVALID_ARG otherwise (RLP_E_OVERFLOW when the span overflows). */
int rlpi_buffer_copy_2d(rlpi_buffer *dst, size_t dst_off, size_t dst_pitch, const rlpi_buffer *src, size_t src_off,
                        size_t src_pitch, size_t width, size_t rows);
int rlpi_buffer_fill_f32(rlpi_buffer *dst, size_t off_elems, size_t n_elems, float value);
int rlpi_backend_synchronize(rlpi_backend *be);

/* Validates shapes, strides and that every element each operand touches
 * lies inside its buffer, then dispatches. */
int rlpi_gemm_f32(rlpi_backend *be, const rlpi_gemm *g);

/* Generation scope of the calling thread: while set (begin returns the
 * previous state for end), the CPU backend runs a bf16 context's few-row
 * products (decode steps, where rounding the whole weight operand every
 * token would cost more than the product) in fp32. Products of many rows
 * (prefill, the evaluation's batches) stay bf16, rounded as the trainer's
 * are: a bf16 run's behaviour logprobs stay close to the trainer's
 * (mismatch KL measured on the default job: docs/PERFORMANCE.md). Every
 * engine of a run generates on a context of the run's precision (sync:
 * the trainer's; async: one made with the same precision; workers: the
 * same configuration), so the modes produce the same rollouts. Set by the
 * local rollout engine around a generate call; the trainer's GEMMs never
 * run inside it. The CUDA module does not read it. */
int rlpi_gemm_generation_begin(void);
void rlpi_gemm_generation_end(int previous);
int rlpi_gemm_in_generation(void);

void rlpi_backend_destroy(rlpi_backend *be);

/* ---- kernel wrappers (backend_ops.c) ----
 * A reference to 4-byte elements (float or int32) inside a buffer. Every
 * wrapper checks that each range it will touch lies in its buffer and that
 * all buffers belong to `be`, then calls the slot. Shapes are row-major;
 * n = tokens. */
typedef struct rlpi_ref {
    rlpi_buffer *buf;
    size_t off;  /* in elements */
} rlpi_ref;
#define RLPI_REF(b, o) ((rlpi_ref){(b), (o)})

int rlpi_op_embedding_fwd(rlpi_backend *be, rlpi_ref out /* (n, dim) */, rlpi_ref table /* (vocab, dim) */,
                          rlpi_ref ids /* int32 (n) */, int64_t n, int64_t dim, int64_t vocab);
/* dtable[ids[i]] += dout[i] */
int rlpi_op_embedding_bwd(rlpi_backend *be, rlpi_ref dtable, rlpi_ref dout, rlpi_ref ids, int64_t n,
                          int64_t dim, int64_t vocab);
/* out = x / sqrt(mean(x²) + eps) * w ; rstd (n) saved for backward */
int rlpi_op_rmsnorm_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref rstd, rlpi_ref x, rlpi_ref w, int64_t n,
                        int64_t dim, float eps);
/* dx += ∂L/∂x ; dw += ∂L/∂w */
int rlpi_op_rmsnorm_bwd(rlpi_backend *be, rlpi_ref dx_accum, rlpi_ref dw_accum, rlpi_ref dout, rlpi_ref x,
                        rlpi_ref w, rlpi_ref rstd, int64_t n, int64_t dim);
/* In-place RoPE of x (n, n_heads, head_dim) in the HF rotate_half layout
 * (pairs (i, i + head_dim/2)), angle pos·inv_freq[i]; inverse rotates by
 * the negative angle (the backward of a rotation is its transpose). */
int rlpi_op_rope(rlpi_backend *be, rlpi_ref x, rlpi_ref pos, rlpi_ref inv_freq, int64_t n, int64_t n_heads,
                 int64_t head_dim, int inverse);
/* Causal grouped-query attention over packed sequences [seq_start[s],
 * seq_start[s+1]): q (n, H, hd), k/v (n, KV, hd) → out (n, H, hd), with the
 * softmax log-sum-exp per (head, token) saved in lse (H, n).
 * softmax(q·k·scale) (scale > 0; 1/sqrt(hd) for most models). window 0 =
 * full causal attention; window W > 0 = sliding window: a query at
 * in-sequence position p sees keys p−W+1..p only. */
int rlpi_op_attention_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref lse, rlpi_ref q, rlpi_ref k, rlpi_ref v,
                          const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window);
/* Causal GQA of new query rows against a KV cache, for generation.
 * Sequence s owns query rows [q_start[s], q_start[s+1]) of q (n, H, hd);
 * its keys and values are in cache slot slot[s] of kc/vc, laid out
 * (slots, slot_stride) with row p of a slot at p·KV·hd, and already hold
 * the new rows. Query row i of s sits at position past[s] + (i − q_start[s])
 * and attends to cache rows [0, that position]; with window W > 0 only to
 * rows j with position − j < W. Host arrays q_start (n_seq + 1), slot and
 * past (n_seq). out (n, H, hd). softmax(q·k·scale), as attention_fwd. */
int rlpi_op_attention_cached(rlpi_backend *be, rlpi_ref out, rlpi_ref q, rlpi_ref kc, rlpi_ref vc,
                             const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                             int64_t n, int64_t n_slots, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, float scale, int64_t window);
/* Writes dq, dk, dv (not accumulated); scale and window as the forward's. */
int rlpi_op_attention_bwd(rlpi_backend *be, rlpi_ref dq, rlpi_ref dk, rlpi_ref dv, rlpi_ref dout, rlpi_ref q,
                          rlpi_ref k, rlpi_ref v, rlpi_ref out, rlpi_ref lse, const int64_t *seq_start,
                          int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                          float scale, int64_t window);
/* out = silu(gate) · up, elementwise over n values */
int rlpi_op_swiglu_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref gate, rlpi_ref up, int64_t n);
int rlpi_op_swiglu_bwd(rlpi_backend *be, rlpi_ref dgate, rlpi_ref dup, rlpi_ref dout, rlpi_ref gate,
                       rlpi_ref up, int64_t n);
/* out = gelu_tanh(gate) · up, gelu_tanh(x) = 0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))
 * (Gemma's GeGLU MLP); backward as swiglu's */
int rlpi_op_geglu_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref gate, rlpi_ref up, int64_t n);
int rlpi_op_geglu_bwd(rlpi_backend *be, rlpi_ref dgate, rlpi_ref dup, rlpi_ref dout, rlpi_ref gate,
                      rlpi_ref up, int64_t n);
/* y += x */
int rlpi_op_add(rlpi_backend *be, rlpi_ref y, rlpi_ref x, int64_t n);
/* y (rows, cols) += bias (cols) broadcast over rows */
int rlpi_op_add_bias(rlpi_backend *be, rlpi_ref y, rlpi_ref bias, int64_t rows, int64_t cols);
/* dbias (cols) += column sums of dy (rows, cols) */
int rlpi_op_bias_bwd(rlpi_backend *be, rlpi_ref dbias, rlpi_ref dy, int64_t rows, int64_t cols);
int rlpi_op_scale(rlpi_backend *be, rlpi_ref x, float alpha, int64_t n);
/* Logit soft-capping in place: x = cap·tanh(x/cap) (cap > 0); the backward
 * scales dx in place by 1 − (y/cap)², y the capped values. */
int rlpi_op_softcap_fwd(rlpi_backend *be, rlpi_ref x, int64_t n, float cap);
int rlpi_op_softcap_bwd(rlpi_backend *be, rlpi_ref dx, rlpi_ref y, int64_t n, float cap);
/* For each row of logits (n, vocab): z = logits·inv_temp, logp[i] =
 * z[target] - logsumexp(z), entropy[i] = -Σ softmax(z) log softmax(z)
 * (entropy may be a NULL buffer). The temperature-scaled distribution is
 * the one the rollout engine samples from, so behaviour and trainer
 * logprobs agree (public-bugs case #5). */
int rlpi_op_logprob_rows(rlpi_backend *be, rlpi_ref logp, rlpi_ref entropy, rlpi_ref logits, rlpi_ref targets,
                         int64_t n, int64_t vocab, float inv_temp);
/* Replaces logits (n, vocab) in place with ∂L/∂logits given ∂L/∂logp and
 * ∂L/∂entropy per row (dentropy may be a NULL buffer). */
int rlpi_op_logprob_rows_bwd(rlpi_backend *be, rlpi_ref logits, rlpi_ref targets, rlpi_ref dlogp,
                             rlpi_ref dentropy, int64_t n, int64_t vocab, float inv_temp);
/* *out = Σ x², accumulated in double */
int rlpi_op_sum_squares(rlpi_backend *be, double *out, rlpi_ref x, int64_t n);
int rlpi_op_adamw(rlpi_backend *be, rlpi_ref param, rlpi_ref grad, rlpi_ref m, rlpi_ref v, int64_t n,
                  const rlpi_adamw_step *step);

/**
 * Draws one token from each of n rows of logits, as rlpi_sample()
 * (lib/backend/sampler.h) does on the host: temperature, then top-k,
 * top-p and min-p in Hugging Face's warper order, the kept set
 * renormalised, the token found by the inverse CDF at u[i], and its
 * behaviour logprob in params[i].logprobs_mode.
 *
 * @param be          the backend that owns `logits`
 * @param tokens      host int32 (n): the drawn ids
 * @param logprobs    host float (n): their logprobs
 * @param logits      backend floats (n_logit_rows, vocab), read-only
 * @param n_logit_rows rows in `logits`
 * @param rows        host int32 (n): the logits row of draw i, each in
 *                    [0, n_logit_rows); NULL means row i (then n <= n_logit_rows)
 * @param n           draws (0 does nothing)
 * @param vocab       1 .. 2^31-1
 * @param params      host (n): each checked by rlpi_sampler_params_check()
 * @param u           host (n): uniforms in [0, 1), e.g. rlpi_sample_uniform()
 *                    of (seed, stream, step), so a draw is a pure function of
 *                    those and the logits on every backend
 * @return RLP_OK; RLP_E_INVALID_ARG for bad arguments, a NaN or +Inf logit
 *         or an all -Inf row (the message names the row and the index);
 *         RLP_E_NOMEM; RLP_E_UNSUPPORTED where the backend lacks the slot.
 *         Outputs are unspecified after an error.
 *
 * The CPU backend runs rlpi_sample() per row (rows on its thread pool), so
 * its draws are exactly the host sampler's. The CUDA backend returns only
 * ids and logprobs to the host (no logits download); it waits for the GPU
 * (its result is host memory), like rlpi_op_sum_squares. Its draws agree
 * with the CPU's except where u lies within float rounding of a boundary
 * of the inverse CDF (docs/cuda.md).
 * Thread-safety: as the other ops (serialised per backend).
 */
int rlpi_op_sample_rows(rlpi_backend *be, int32_t *tokens, float *logprobs, rlpi_ref logits, int64_t n_logit_rows,
                        const int32_t *rows, int64_t n, int64_t vocab, const rlpi_sampler_params *params,
                        const double *u);

/* C (m, n) = A (m, k) · Wᵀ, or C += A · Wᵀ with beta = 1 (beta 0: C not
 * read), where W (n, k) is a quantized matrix of rlpi_qmat_bytes(type, n,
 * k) bytes starting at byte w_off of w, in the layout of
 * lib/backend/qmat.h (int8 products with activations quantized per block;
 * error bound there). RLP_E_UNSUPPORTED where the backend has no quantized
 * kernels (see rlpi_op_qmatmul_available). */
int rlpi_op_qmatmul(rlpi_backend *be, rlpi_ref c, rlpi_ref a, const rlpi_buffer *w, size_t w_off, int type, int64_t m,
                    int64_t n, int64_t k, float beta);
/* Whether be implements rlpi_op_qmatmul. */
int rlpi_op_qmatmul_available(const rlpi_backend *be);

/* ---- constructors ---- */

/* CPU backend on `n_threads` threads (OpenBLAS + the core thread pool). */
int rlpi_backend_cpu_create(rlpi_backend **out, int n_threads);

/* A performance warning about the BLAS this process loaded, or NULL. */
const char *rlpi_backend_cpu_advice(void);

/* The CPU backend's thread pool (NULL for other backends): the CPU kernels
 * of later issues run their loops on it. */
struct rlpi_threadpool *rlpi_backend_cpu_pool(rlpi_backend *be);

/* CUDA backend on `device`, loaded from the CUDA module on first use.
 * RLP_E_BACKEND (with the reason) where the module, its libraries or a GPU
 * are missing; never crashes. */
int rlpi_backend_cuda_create(rlpi_backend **out, int device);

/* GPUs visible to the CUDA module (0 where CUDA is not usable); on 0 the
 * reason is left in rlp_error_last(). */
int rlpi_backend_cuda_device_count(void);

/* NCCL, as the CUDA module offers it (it loads libnccl.so.2 itself, so a
 * machine without NCCL still runs the CUDA backend). Buffers are the
 * module's device buffers; dtype RLPI_DT_* of dist/comm.h, op
 * rlp_reduce_op. Every call waits for its collective to finish on the
 * backend's stream, polling NCCL's asynchronous error so that a dead peer
 * becomes RLP_E_TIMEOUT after timeout_s (and the communicator is aborted)
 * instead of a hang. */
typedef struct rlpi_cuda_nccl_api {
    uint32_t version;   /* RLPI_CUDA_NCCL_API_VERSION */
    int (*get_unique_id)(unsigned char id[128]);
    int (*init)(rlpi_backend *be, const unsigned char id[128], int rank, int world, double timeout_s, void **out);
    int (*all_reduce)(void *comm, rlpi_buffer *buf, size_t off_bytes, size_t n, int dtype, int op);
    int (*broadcast)(void *comm, rlpi_buffer *buf, size_t off_bytes, size_t nbytes, int root);
    void (*abort)(void *comm);
    void (*destroy)(void *comm);
} rlpi_cuda_nccl_api;
#define RLPI_CUDA_NCCL_API_VERSION 1

/* The module's NCCL table, or NULL (reason in rlp_error_last()) where the
 * module or libnccl cannot be loaded. */
const rlpi_cuda_nccl_api *rlpi_backend_cuda_nccl(void);

#endif
