/* Launch wrappers of the CUDA backend's kernels, callable from C
 * (backend_cuda.c). Each enqueues its kernels on `stream` and returns at
 * once with a cudaError_t value as int (0 = launched), or
 * RLPI_CUDA_E_UNSUPPORTED for a shape the kernels do not handle (the
 * caller turns that into RLP_E_UNSUPPORTED). None of them synchronises.
 *
 * Pointers are device pointers, already bounds-checked by
 * lib/backend/backend_ops.c; shapes follow lib/backend/backend.h. `bad`
 * points to a device int that a kernel sets to 1 when it meets an id
 * outside its range (the CPU backend returns RLP_E_INVALID_ARG for those at
 * once; here the flag is read back at the next synchronisation). */
#ifndef RLPI_CUDA_KERNELS_H
#define RLPI_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLPI_CUDA_E_UNSUPPORTED (-1)

/* Largest head_dim the attention kernels take (tiles are compiled for
 * 32, 64, 128 and 256; smaller head dims are zero-padded to the next). */
#define RLPI_CUDA_MAX_HEAD_DIM 256

/* fill.cu */
int rlpi_cuda_fill_f32(float *dst, size_t n, float value, void *stream);
/* C[b·stride + r·ld + c] = beta·C (0 when beta == 0, C not read), for the
 * k = 0 GEMMs that cuBLAS need not handle */
int rlpi_cuda_scale_matrix(float *c, int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch,
                           float beta, void *stream);

/* convert.cu: dst (batch, rows, cols) packed bf16 (2-byte elements,
 * round to nearest even) = src[b·stride + r·ld + c] */
int rlpi_cuda_f32_to_bf16(void *dst, const float *src, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                          int64_t batch, void *stream);

/* embedding.cu */
int rlpi_cuda_embedding_fwd(float *out, const float *table, const int32_t *ids, int64_t n, int64_t dim,
                            int64_t vocab, int *bad, void *stream);
int rlpi_cuda_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int64_t n, int64_t dim,
                            int64_t vocab, int *bad, void *stream);

/* norm.cu: forward, and the dx half of the backward (dw is a column sum,
 * reduce.cu) */
int rlpi_cuda_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                          float eps, void *stream);
int rlpi_cuda_rmsnorm_bwd_dx(float *dx_accum, const float *dout, const float *x, const float *w,
                             const float *rstd, int64_t n, int64_t dim, void *stream);

/* reduce.cu */
/* Doubles of workspace rlpi_cuda_colsum needs for (rows, cols). */
size_t rlpi_cuda_colsum_workspace(int64_t rows, int64_t cols);
/* dst[c] += Σ_r a[r,c]·(b ? b[r,c] : 1)·(row_scale ? row_scale[r] : 1),
 * summed in double in a fixed order */
int rlpi_cuda_colsum(float *dst_accum, const float *a, const float *b, const float *row_scale, int64_t rows,
                     int64_t cols, double *workspace, void *stream);
/* Doubles of workspace rlpi_cuda_sum_squares needs (fixed). */
#define RLPI_CUDA_SUM_SQUARES_PARTIALS 1024
/* *out_dev = Σ x², double; partials holds RLPI_CUDA_SUM_SQUARES_PARTIALS */
int rlpi_cuda_sum_squares(double *out_dev, const float *x, int64_t n, double *partials, void *stream);

/* rope.cu */
int rlpi_cuda_rope(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int64_t n_heads,
                   int64_t head_dim, int inverse, void *stream);

/* elementwise.cu */
int rlpi_cuda_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n, void *stream);
int rlpi_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                         int64_t n, void *stream);
/* GeGLU: out = gelu_tanh(gate)·up, backward as SwiGLU's */
int rlpi_cuda_geglu_fwd(float *out, const float *gate, const float *up, int64_t n, void *stream);
int rlpi_cuda_geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                        int64_t n, void *stream);
/* soft-capping in place: x = cap·tanh(x/cap); dx *= 1 − (y/cap)² */
int rlpi_cuda_softcap_fwd(float *x, float cap, int64_t n, void *stream);
int rlpi_cuda_softcap_bwd(float *dx, const float *y, float cap, int64_t n, void *stream);
int rlpi_cuda_add(float *y, const float *x, int64_t n, void *stream);
int rlpi_cuda_add_bias(float *y, const float *bias, int64_t rows, int64_t cols, void *stream);
int rlpi_cuda_scale(float *x, float alpha, int64_t n, void *stream);

/* adamw.cu (the fields of rlpi_adamw_step) */
int rlpi_cuda_adamw(float *param, const float *grad, float *m, float *v, int64_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float bias_correction1, float bias_correction2,
                    float grad_scale, void *stream);

/* logprob.cu */
int rlpi_cuda_logprob_rows(float *logp, float *entropy, const float *logits, const int32_t *targets, int64_t n,
                           int64_t vocab, float inv_temp, int *bad, void *stream);
int rlpi_cuda_logprob_rows_bwd(float *logits, const int32_t *targets, const float *dlogp, const float *dentropy,
                               int64_t n, int64_t vocab, float inv_temp, int *bad, void *stream);

/* attention.cu: training attention over packed sequences (host seq_start),
 * softmax(q·k·scale), window 0 = causal, W > 0 = sliding window of W keys */
int rlpi_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                            const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                            int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window, void *stream);
/* Floats of workspace rlpi_cuda_attention_bwd needs. */
size_t rlpi_cuda_attention_bwd_workspace(int64_t n, int64_t n_heads);
int rlpi_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *out, const float *lse, const int64_t *seq_start,
                            int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                            float scale, int64_t window, float *workspace, void *stream);

/* attention_cached.cu: decode/prefill against KV-cache slots (host tables) */
int rlpi_cuda_attention_cached(float *out, const float *q, const float *kc, const float *vc,
                               const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                               int64_t n, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads,
                               int64_t head_dim, float scale, int64_t window, void *stream);

/* sample.cu: one draw per block (rlpi_op_sample_rows). A draw's inputs and
 * results travel as these records (host staging ↔ device). status: 0 ok,
 * RLPI_CUDA_SAMPLE_NAN / _POS_INF (logits[index] of the row) or
 * _ALL_MASKED (every logit -Inf); token and logprob are then unset. */
typedef struct rlpi_cuda_sample_in {
    double u;
    float temperature, top_p, min_p;
    int32_t top_k, logprobs_mode, row;
} rlpi_cuda_sample_in;
typedef struct rlpi_cuda_sample_out {
    int32_t token;
    float logprob;
    int32_t status, index;
} rlpi_cuda_sample_out;
enum { RLPI_CUDA_SAMPLE_NAN = 1, RLPI_CUDA_SAMPLE_POS_INF = 2, RLPI_CUDA_SAMPLE_ALL_MASKED = 3 };
/* Bytes of workspace rlpi_cuda_sample_rows needs for n draws over vocab. */
size_t rlpi_cuda_sample_workspace(int64_t n, int64_t vocab);
int rlpi_cuda_sample_rows(rlpi_cuda_sample_out *out, const rlpi_cuda_sample_in *in, const float *logits, int64_t n,
                          int64_t vocab, void *workspace, void *stream);

#ifdef __cplusplus
}
#endif

#endif
