/* CPU implementations of the backend's transformer and optimizer kernels
 * (the slots after gemm_f32 in rlpi_backend_ops). Arguments arrive
 * validated by backend_ops.c. */
#ifndef RLPI_BACKEND_CPU_KERNELS_H
#define RLPI_BACKEND_CPU_KERNELS_H

#include "backend/backend.h"

/* Longest sequence whose attention runs through BLAS with an L×L score
 * block (default 2048); longer ones use the streaming kernels. Tests set it
 * to 0 to exercise the streaming path. Not thread-safe to change. */
extern int64_t rlpi_cpu_attention_blas_max_len;

int rlpi_cpu_embedding_fwd(rlpi_backend *be, float *out, const float *table, const int32_t *ids,
                           int64_t n, int64_t dim, int64_t vocab);
int rlpi_cpu_embedding_bwd(rlpi_backend *be, float *dtable, const float *dout, const int32_t *ids,
                           int64_t n, int64_t dim, int64_t vocab);
int rlpi_cpu_rmsnorm_fwd(rlpi_backend *be, float *out, float *rstd, const float *x, const float *w,
                         int64_t n, int64_t dim, float eps);
int rlpi_cpu_rmsnorm_bwd(rlpi_backend *be, float *dx, float *dw, const float *dout, const float *x,
                         const float *w, const float *rstd, int64_t n, int64_t dim);
int rlpi_cpu_rope(rlpi_backend *be, float *x, const int32_t *pos, const float *inv_freq, int64_t n,
                  int64_t n_heads, int64_t head_dim, int inverse);
int rlpi_cpu_attention_fwd(rlpi_backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window);
int rlpi_cpu_attention_bwd(rlpi_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *lse, const int64_t *seq_start,
                           int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                           int64_t window);
int rlpi_cpu_attention_cached(rlpi_backend *be, float *out, const float *q, const float *kc, const float *vc,
                              const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                              int64_t n, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                              float scale, int64_t window);
int rlpi_cpu_swiglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n);
int rlpi_cpu_swiglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout,
                        const float *gate, const float *up, int64_t n);
int rlpi_cpu_geglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n);
int rlpi_cpu_geglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, int64_t n);
int rlpi_cpu_softcap_fwd(rlpi_backend *be, float *x, int64_t n, float cap);
int rlpi_cpu_softcap_bwd(rlpi_backend *be, float *dx, const float *y, int64_t n, float cap);
int rlpi_cpu_add(rlpi_backend *be, float *y, const float *x, int64_t n);
int rlpi_cpu_add_bias(rlpi_backend *be, float *y, const float *bias, int64_t rows, int64_t cols);
int rlpi_cpu_bias_bwd(rlpi_backend *be, float *dbias, const float *dy, int64_t rows, int64_t cols);
int rlpi_cpu_scale(rlpi_backend *be, float *x, float alpha, int64_t n);
int rlpi_cpu_logprob_rows(rlpi_backend *be, float *logp, float *entropy, const float *logits,
                          const int32_t *targets, int64_t n, int64_t vocab, float inv_temp);
int rlpi_cpu_logprob_rows_bwd(rlpi_backend *be, float *logits, const int32_t *targets,
                              const float *dlogp, const float *dentropy, int64_t n, int64_t vocab,
                              float inv_temp);
int rlpi_cpu_sum_squares(rlpi_backend *be, double *out, const float *x, int64_t n);
int rlpi_cpu_adamw(rlpi_backend *be, float *param, const float *grad, float *m, float *v, int64_t n,
                   const rlpi_adamw_step *step);

/* sampling (rollout engine), cpu_sample.c: per-thread sampler scratch of
 * a CPU backend, and its sample_rows slot (rlpi_sample per row) */
typedef struct rlpi_cpu_sampler rlpi_cpu_sampler;
struct rlpi_threadpool;
int rlpi_cpu_sampler_create(rlpi_cpu_sampler **out, int n_threads);
void rlpi_cpu_sampler_free(rlpi_cpu_sampler *s);
int rlpi_cpu_sample_rows(struct rlpi_threadpool *pool, rlpi_cpu_sampler *s, int32_t *tokens, float *logprobs,
                         const float *logits, const int32_t *rows, int64_t n, int64_t vocab,
                         const rlpi_sampler_params *params, const double *u);

#endif
