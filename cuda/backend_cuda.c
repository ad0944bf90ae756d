/* The CUDA backend module (librlpost-cuda.so), loaded by the core with
 * dlopen. Buffers are device memory on one stream per backend; GEMMs go to
 * cuBLAS. It reports errors through the host API it is given, since it
 * cannot link the core's hidden symbols, and must never abort the process
 * (no GPU, no driver and out-of-memory are ordinary errors here). */
#include "../lib/backend/backend.h"
#include "cuda_module.h"
#include "kernels.h"

#include "rlpost.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

/* Ids found out of range by a kernel, read back at the next
 * synchronisation (see kernels.h). */
enum { FLAG_EMBEDDING, FLAG_EMBEDDING_BWD, FLAG_LOGPROB, FLAG_LOGPROB_BWD, N_FLAGS };
static const char *const flag_what[N_FLAGS] = {
    "embedding: token id outside [0, vocab)",
    "embedding backward: token id outside [0, vocab) (that row was skipped)",
    "logprob: target id outside [0, vocab) (that row was left unwritten)",
    "logprob backward: target id outside [0, vocab) (that row was left unchanged)",
};

/* Every op takes `mu`: the ops enqueue on one stream and share a cuBLAS
 * handle, a workspace and pinned staging, and rollout and trainer threads
 * may drive the same backend (the CPU backend serialises them too). The
 * lock is held only while enqueueing, except in the ops that return host
 * values (download, synchronize, sum_squares). */
typedef struct cuda_state {
    const rlpi_host_api *host;
    cudaStream_t stream;
    cublasHandle_t blas;
    pthread_mutex_t mu;
    void *ws;             /* workspace of the op being enqueued; grows, never shrinks */
    size_t ws_bytes;
    double *red;          /* sum_squares partials (RLPI_CUDA_SUM_SQUARES_PARTIALS) and result */
    int *flags;           /* (N_FLAGS) device */
    void *pinned;         /* host: the sum_squares result, then the flags */
    void *sample_pinned;  /* host staging of sample_rows' records; grows, never shrinks */
    size_t sample_pinned_bytes;
} cuda_state;

#define PINNED_SUM(st) ((double *)(st)->pinned)
#define PINNED_FLAGS(st) ((int *)((char *)(st)->pinned + sizeof(double)))

static int cuda_fail(const rlpi_host_api *host, cudaError_t err, const char *what)
{
    return host->error_set(err == cudaErrorMemoryAllocation ? RLP_E_NOMEM : RLP_E_BACKEND,
                           "cuda: %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

static int blas_fail(const rlpi_host_api *host, cublasStatus_t st, const char *what)
{
    return host->error_set(st == CUBLAS_STATUS_ALLOC_FAILED ? RLP_E_NOMEM : RLP_E_BACKEND,
                           "cublas: %s: status %d", what, (int)st);
}

#define STATE(be) ((cuda_state *)(be)->impl)

static cuda_state *enter(rlpi_backend *be)
{
    cuda_state *st = STATE(be);
    pthread_mutex_lock(&st->mu);
    cudaSetDevice(be->device); /* the current device is per host thread */
    return st;
}

static int leave(cuda_state *st, int rc)
{
    pthread_mutex_unlock(&st->mu);
    return rc;
}

/* A launch wrapper's result as a status. */
static int launched(cuda_state *st, int err, const char *op)
{
    if (err == 0)
        return RLP_OK;
    if (err == RLPI_CUDA_E_UNSUPPORTED)
        return st->host->error_set(RLP_E_UNSUPPORTED,
                                   "cuda: %s: shape outside what the kernels handle (head_dim above %d, "
                                   "2^30 or more tokens, or 65,536 or more heads)",
                                   op, RLPI_CUDA_MAX_HEAD_DIM);
    return cuda_fail(st->host, (cudaError_t)err, op);
}

/* Waits for the stream, then reports (and clears) an id a kernel found out
 * of range since the last check. */
static int sync_checked(cuda_state *st, const char *what)
{
    cudaError_t err = cudaMemcpyAsync(PINNED_FLAGS(st), st->flags, N_FLAGS * sizeof(int), cudaMemcpyDeviceToHost,
                                      st->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(st->stream);
    if (err != cudaSuccess)
        return cuda_fail(st->host, err, what);
    int *f = PINNED_FLAGS(st);
    for (int k = 0; k < N_FLAGS; k++)
        if (f[k]) {
            memset(f, 0, N_FLAGS * sizeof(int));
            err = cudaMemsetAsync(st->flags, 0, N_FLAGS * sizeof(int), st->stream);
            if (err != cudaSuccess)
                return cuda_fail(st->host, err, what);
            return st->host->error_set(RLP_E_INVALID_ARG, "%s (found on the GPU by an earlier op, reported at this %s)",
                                       flag_what[k], what);
        }
    return RLP_OK;
}

/* The workspace, grown to at least `bytes`. Growing waits for the stream
 * (ops before may still read the old one): the only waits inside an op,
 * and only until the largest shape has been seen. */
static int ws_reserve(cuda_state *st, size_t bytes, void **out)
{
    if (bytes > st->ws_bytes) {
        cudaError_t err = cudaStreamSynchronize(st->stream);
        if (err == cudaSuccess) {
            cudaFree(st->ws);
            st->ws = NULL;
            st->ws_bytes = 0;
            size_t want = bytes + bytes / 2;
            err = cudaMalloc(&st->ws, want);
            if (err == cudaSuccess)
                st->ws_bytes = want;
        }
        if (err != cudaSuccess)
            return cuda_fail(st->host, err, "workspace");
    }
    *out = st->ws;
    return RLP_OK;
}

/* ------------------------------------------------------------- buffers */

static int c_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer *buf)
{
    cudaSetDevice(be->device);
    cudaError_t err = cudaMalloc(&buf->data, nbytes ? nbytes : 256);
    return err == cudaSuccess ? RLP_OK : cuda_fail(STATE(be)->host, err, "cudaMalloc");
}

static void c_buffer_free(rlpi_backend *be, rlpi_buffer *buf)
{
    /* work enqueued before may still use the buffer: wait for it (cudaFree
     * would too, but that is its behaviour, not its contract) */
    cuda_state *st = enter(be);
    cudaStreamSynchronize(st->stream);
    cudaFree(buf->data);
    leave(st, RLP_OK);
}

static int c_upload(rlpi_backend *be, rlpi_buffer *dst, size_t off, const void *src, size_t n)
{
    cuda_state *st = enter(be);
    cudaError_t err = cudaMemcpyAsync((char *)dst->data + off, src, n, cudaMemcpyHostToDevice, st->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(st->stream); /* the caller may reuse src at once */
    return leave(st, err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "upload"));
}

static int c_download(rlpi_backend *be, const rlpi_buffer *src, size_t off, void *dst, size_t n)
{
    cuda_state *st = enter(be);
    cudaError_t err =
        cudaMemcpyAsync(dst, (const char *)src->data + off, n, cudaMemcpyDeviceToHost, st->stream);
    int rc = err == cudaSuccess ? sync_checked(st, "download") : cuda_fail(st->host, err, "download");
    return leave(st, rc);
}

static int c_copy(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src,
                  size_t src_off, size_t n)
{
    cuda_state *st = enter(be);
    cudaError_t err = cudaMemcpyAsync((char *)dst->data + dst_off, (const char *)src->data + src_off,
                                      n, cudaMemcpyDeviceToDevice, st->stream);
    return leave(st, err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "copy"));
}

static int c_copy_2d(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, size_t dst_pitch, const rlpi_buffer *src,
                     size_t src_off, size_t src_pitch, size_t width, size_t rows)
{
    cuda_state *st = enter(be);
    cudaError_t err = cudaMemcpy2DAsync((char *)dst->data + dst_off, dst_pitch, (const char *)src->data + src_off,
                                        src_pitch, width, rows, cudaMemcpyDeviceToDevice, st->stream);
    return leave(st, err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "copy 2d"));
}

static int c_fill(rlpi_backend *be, rlpi_buffer *dst, size_t off, size_t n, float value)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_fill_f32((float *)dst->data + off, n, value, st->stream), "fill"));
}

static int c_sync(rlpi_backend *be)
{
    cuda_state *st = enter(be);
    return leave(st, sync_checked(st, "synchronize"));
}

/* ---------------------------------------------------------------- GEMM */

/* Bytes of a packed bf16 copy of operand x, (rows, cols) as stored: one
 * item when x is broadcast (stride 0), rounded up to 256 bytes so that the
 * next copy in the workspace starts aligned for the tensor cores. */
static size_t bf16_bytes(const rlpi_matrix *x, int64_t rows, int64_t cols, int64_t batch)
{
    size_t n = (size_t)(x->stride == 0 ? 1 : batch) * (size_t)rows * (size_t)cols * 2;
    return (n + 255) / 256 * 256;
}

/* RLP_MATMUL_BF16: both operands converted to packed bf16 in the workspace
 * (round to nearest even, convert.cu), then one cublasGemmStridedBatchedEx
 * with fp32 C and CUBLAS_COMPUTE_32F (bf16 products on the tensor cores,
 * fp32 sums). RLP_MATMUL_TF32: the fp32 operands in place with
 * CUBLAS_COMPUTE_32F_FAST_TF32. The operand swap, transposes, broadcast
 * and beta == 0 are as in the fp32 path below (the packed copies keep the
 * transposes as stored: ld = stored columns, stride = one item, or 0 for a
 * broadcast operand). Converting the weights again at every GEMM costs a
 * read of 4 and a write of 2 bytes per weight element (docs/cuda.md). */
static int gemm_ex(cuda_state *st, const rlpi_gemm *g, int bf16, float *c)
{
    const float *a = (const float *)g->a.buf->data + g->a.offset;
    const float *b = (const float *)g->b.buf->data + g->b.offset;
    int64_t ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k;
    int64_t br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
    const void *pa = a, *pb = b;
    long long lda = g->a.ld, ldb = g->b.ld, sa = g->a.stride, sb = g->b.stride;
    if (bf16) {
        size_t na = bf16_bytes(&g->a, ar, ac, g->batch), nb = bf16_bytes(&g->b, br, bc, g->batch);
        void *ws = NULL;
        int rc = ws_reserve(st, na + nb, &ws);
        if (rc == RLP_OK)
            rc = launched(st,
                          rlpi_cuda_f32_to_bf16(ws, a, ar, ac, g->a.ld, g->a.stride,
                                                g->a.stride == 0 ? 1 : g->batch, st->stream),
                          "gemm (bf16 conversion of A)");
        if (rc == RLP_OK)
            rc = launched(st,
                          rlpi_cuda_f32_to_bf16((char *)ws + na, b, br, bc, g->b.ld, g->b.stride,
                                                g->b.stride == 0 ? 1 : g->batch, st->stream),
                          "gemm (bf16 conversion of B)");
        if (rc != RLP_OK)
            return rc;
        pa = ws;
        pb = (char *)ws + na;
        lda = ac;
        ldb = bc;
        sa = g->a.stride == 0 ? 0 : ar * ac;
        sb = g->b.stride == 0 ? 0 : br * bc;
    }
    cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        st->blas, g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, (int)g->n,
        (int)g->m, (int)g->k, &g->alpha, pb, in, (int)ldb, sb, pa, in, (int)lda, sa, &g->beta, c, CUDA_R_32F,
        (int)g->c.ld, g->c.stride, (int)g->batch, bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32,
        CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? RLP_OK : blas_fail(st->host, s, bf16 ? "gemm (bf16)" : "gemm (tf32)");
}

/* Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: hand cuBLAS
 * the operands swapped, with the same transpose flags. A stride of 0
 * broadcasts an operand over the batch. cuBLAS does not read C when
 * beta == 0, as the interface requires; k == 0 (no product) is a scaling
 * of C. In the default math mode cuBLAS keeps fp32 products in fp32 (no
 * TF32) and gives the same bits on every run on one GPU model. */
static int c_gemm(rlpi_backend *be, const rlpi_gemm *g)
{
    cuda_state *st = enter(be);
    float *c = (float *)g->c.buf->data + g->c.offset;
    if (g->a.ld > INT32_MAX || g->b.ld > INT32_MAX || g->c.ld > INT32_MAX || g->batch > INT32_MAX)
        return leave(st, st->host->error_set(RLP_E_UNSUPPORTED, "cuda: gemm: leading dimension or batch above 2^31-1"));
    if (g->k == 0)
        return leave(st, launched(st, rlpi_cuda_scale_matrix(c, g->m, g->n, g->c.ld, g->c.stride, g->batch, g->beta,
                                                             st->stream),
                                  "gemm (k = 0)"));
    if (be->matmul != RLP_MATMUL_FP32)
        return leave(st, gemm_ex(st, g, be->matmul == RLP_MATMUL_BF16, c));
    const float *a = (const float *)g->a.buf->data + g->a.offset;
    const float *b = (const float *)g->b.buf->data + g->b.offset;
    cublasOperation_t ta = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (g->batch == 1)
        s = cublasSgemm(st->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, &g->alpha, b, (int)g->b.ld,
                        a, (int)g->a.ld, &g->beta, c, (int)g->c.ld);
    else
        s = cublasSgemmStridedBatched(st->blas, tb, ta, (int)g->n, (int)g->m, (int)g->k, &g->alpha, b,
                                      (int)g->b.ld, g->b.stride, a, (int)g->a.ld, g->a.stride,
                                      &g->beta, c, (int)g->c.ld, g->c.stride, (int)g->batch);
    return leave(st, s == CUBLAS_STATUS_SUCCESS ? RLP_OK : blas_fail(st->host, s, "sgemm"));
}

/* ------------------------------------------------------------- kernels */

static int c_embedding_fwd(rlpi_backend *be, float *out, const float *table, const int32_t *ids, int64_t n,
                           int64_t dim, int64_t vocab)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_embedding_fwd(out, table, ids, n, dim, vocab, st->flags + FLAG_EMBEDDING,
                                                      st->stream),
                              "embedding"));
}

static int c_embedding_bwd(rlpi_backend *be, float *dtable, const float *dout, const int32_t *ids, int64_t n,
                           int64_t dim, int64_t vocab)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_embedding_bwd(dtable, dout, ids, n, dim, vocab,
                                                      st->flags + FLAG_EMBEDDING_BWD, st->stream),
                              "embedding backward"));
}

static int c_rmsnorm_fwd(rlpi_backend *be, float *out, float *rstd, const float *x, const float *w, int64_t n,
                         int64_t dim, float eps)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_rmsnorm_fwd(out, rstd, x, w, n, dim, eps, st->stream), "rmsnorm"));
}

static int c_rmsnorm_bwd(rlpi_backend *be, float *dx, float *dw, const float *dout, const float *x, const float *w,
                         const float *rstd, int64_t n, int64_t dim)
{
    cuda_state *st = enter(be);
    int rc = launched(st, rlpi_cuda_rmsnorm_bwd_dx(dx, dout, x, w, rstd, n, dim, st->stream), "rmsnorm backward");
    void *ws = NULL;
    if (rc == RLP_OK)
        rc = ws_reserve(st, rlpi_cuda_colsum_workspace(n, dim) * sizeof(double), &ws);
    if (rc == RLP_OK) /* dw += Σ_rows dy∘x·r */
        rc = launched(st, rlpi_cuda_colsum(dw, dout, x, rstd, n, dim, ws, st->stream), "rmsnorm backward (dw)");
    return leave(st, rc);
}

static int c_rope(rlpi_backend *be, float *x, const int32_t *pos, const float *inv_freq, int64_t n, int64_t n_heads,
                  int64_t head_dim, int inverse)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_rope(x, pos, inv_freq, n, n_heads, head_dim, inverse, st->stream),
                              "rope"));
}

static int c_attention_fwd(rlpi_backend *be, float *out, float *lse, const float *q, const float *k, const float *v,
                           const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_attention_fwd(out, lse, q, k, v, seq_start, n_seq, n, n_heads, n_kv_heads,
                                                      head_dim, scale, window, st->stream),
                              "attention"));
}

static int c_attention_bwd(rlpi_backend *be, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *out, const float *lse,
                           const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads,
                           int64_t head_dim, float scale, int64_t window)
{
    cuda_state *st = enter(be);
    void *ws = NULL;
    int rc = ws_reserve(st, rlpi_cuda_attention_bwd_workspace(n, n_heads) * sizeof(float), &ws);
    if (rc == RLP_OK)
        rc = launched(st,
                      rlpi_cuda_attention_bwd(dq, dk, dv, dout, q, k, v, out, lse, seq_start, n_seq, n, n_heads,
                                              n_kv_heads, head_dim, scale, window, ws, st->stream),
                      "attention backward");
    return leave(st, rc);
}

static int c_attention_cached(rlpi_backend *be, float *out, const float *q, const float *kc, const float *vc,
                              const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                              int64_t n, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                              float scale, int64_t window)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_attention_cached(out, q, kc, vc, q_start, slot, past, n_seq, n, slot_stride,
                                                         n_heads, n_kv_heads, head_dim, scale, window, st->stream),
                              "cached attention"));
}

static int c_swiglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_swiglu_fwd(out, gate, up, n, st->stream), "swiglu"));
}

static int c_swiglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                        const float *up, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_swiglu_bwd(dgate, dup, dout, gate, up, n, st->stream),
                              "swiglu backward"));
}

static int c_geglu_fwd(rlpi_backend *be, float *out, const float *gate, const float *up, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_geglu_fwd(out, gate, up, n, st->stream), "geglu"));
}

static int c_geglu_bwd(rlpi_backend *be, float *dgate, float *dup, const float *dout, const float *gate,
                       const float *up, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_geglu_bwd(dgate, dup, dout, gate, up, n, st->stream),
                              "geglu backward"));
}

static int c_softcap_fwd(rlpi_backend *be, float *x, int64_t n, float cap)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_softcap_fwd(x, cap, n, st->stream), "softcap"));
}

static int c_softcap_bwd(rlpi_backend *be, float *dx, const float *y, int64_t n, float cap)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_softcap_bwd(dx, y, cap, n, st->stream), "softcap backward"));
}

static int c_add(rlpi_backend *be, float *y, const float *x, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_add(y, x, n, st->stream), "add"));
}

static int c_add_bias(rlpi_backend *be, float *y, const float *bias, int64_t rows, int64_t cols)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_add_bias(y, bias, rows, cols, st->stream), "add bias"));
}

static int c_bias_bwd(rlpi_backend *be, float *dbias, const float *dy, int64_t rows, int64_t cols)
{
    cuda_state *st = enter(be);
    void *ws = NULL;
    int rc = ws_reserve(st, rlpi_cuda_colsum_workspace(rows, cols) * sizeof(double), &ws);
    if (rc == RLP_OK)
        rc = launched(st, rlpi_cuda_colsum(dbias, dy, NULL, NULL, rows, cols, ws, st->stream), "bias backward");
    return leave(st, rc);
}

static int c_scale(rlpi_backend *be, float *x, float alpha, int64_t n)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st, rlpi_cuda_scale(x, alpha, n, st->stream), "scale"));
}

static int c_logprob_rows(rlpi_backend *be, float *logp, float *entropy, const float *logits, const int32_t *targets,
                          int64_t n, int64_t vocab, float inv_temp)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_logprob_rows(logp, entropy, logits, targets, n, vocab, inv_temp,
                                                     st->flags + FLAG_LOGPROB, st->stream),
                              "logprob"));
}

static int c_logprob_rows_bwd(rlpi_backend *be, float *logits, const int32_t *targets, const float *dlogp,
                              const float *dentropy, int64_t n, int64_t vocab, float inv_temp)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_logprob_rows_bwd(logits, targets, dlogp, dentropy, n, vocab, inv_temp,
                                                         st->flags + FLAG_LOGPROB_BWD, st->stream),
                              "logprob backward"));
}

/* The one op that waits: its result is a host value. */
static int c_sum_squares(rlpi_backend *be, double *out_host, const float *x, int64_t n)
{
    cuda_state *st = enter(be);
    double *result = st->red + RLPI_CUDA_SUM_SQUARES_PARTIALS;
    int rc = launched(st, rlpi_cuda_sum_squares(result, x, n, st->red, st->stream), "sum of squares");
    if (rc == RLP_OK) {
        cudaError_t err = cudaMemcpyAsync(PINNED_SUM(st), result, sizeof(double), cudaMemcpyDeviceToHost, st->stream);
        rc = err == cudaSuccess ? sync_checked(st, "sum of squares") : cuda_fail(st->host, err, "sum of squares");
    }
    if (rc == RLP_OK)
        *out_host = *PINNED_SUM(st);
    return leave(st, rc);
}

static int c_adamw(rlpi_backend *be, float *param, const float *grad, float *m, float *v, int64_t n,
                   const rlpi_adamw_step *s)
{
    cuda_state *st = enter(be);
    return leave(st, launched(st,
                              rlpi_cuda_adamw(param, grad, m, v, n, s->lr, s->beta1, s->beta2, s->eps,
                                              s->weight_decay, s->bias_correction1, s->bias_correction2,
                                              s->grad_scale, st->stream),
                              "adamw"));
}

/* sampling (rollout engine) */
/* The second op that waits (its results are host values): the draws' inputs
 * go up as records through pinned staging, one kernel runs a block per
 * draw, and only ids, logprobs and statuses come back. */
static int c_sample_rows(rlpi_backend *be, int32_t *tokens, float *logprobs, const float *logits,
                         const int32_t *rows, int64_t n, int64_t vocab, const rlpi_sampler_params *params,
                         const double *u)
{
    cuda_state *st = enter(be);
    const size_t in_b = (size_t)n * sizeof(rlpi_cuda_sample_in), out_b = (size_t)n * sizeof(rlpi_cuda_sample_out);
    int rc = RLP_OK;
    if (in_b + out_b > st->sample_pinned_bytes) {
        /* every earlier use ended with a wait: nothing reads the old one */
        cudaFreeHost(st->sample_pinned);
        st->sample_pinned = NULL;
        st->sample_pinned_bytes = 0;
        size_t want = 2 * (in_b + out_b);
        cudaError_t err = cudaHostAlloc(&st->sample_pinned, want, cudaHostAllocDefault);
        if (err != cudaSuccess)
            rc = cuda_fail(st->host, err, "sample rows (staging)");
        else
            st->sample_pinned_bytes = want;
    }
    void *ws = NULL;
    if (rc == RLP_OK)
        rc = ws_reserve(st, in_b + out_b + rlpi_cuda_sample_workspace(n, vocab), &ws);
    if (rc != RLP_OK)
        return leave(st, rc);
    rlpi_cuda_sample_in *in = st->sample_pinned;
    rlpi_cuda_sample_out *out = (rlpi_cuda_sample_out *)((char *)st->sample_pinned + in_b);
    for (int64_t i = 0; i < n; i++)
        in[i] = (rlpi_cuda_sample_in){.u = u[i], .temperature = params[i].temperature, .top_p = params[i].top_p,
                                      .min_p = params[i].min_p, .top_k = params[i].top_k,
                                      .logprobs_mode = params[i].logprobs_mode, .row = rows ? rows[i] : (int32_t)i};
    rlpi_cuda_sample_in *in_dev = ws;
    rlpi_cuda_sample_out *out_dev = (rlpi_cuda_sample_out *)((char *)ws + in_b);
    cudaError_t err = cudaMemcpyAsync(in_dev, in, in_b, cudaMemcpyHostToDevice, st->stream);
    if (err != cudaSuccess)
        return leave(st, cuda_fail(st->host, err, "sample rows (upload)"));
    rc = launched(st,
                  rlpi_cuda_sample_rows(out_dev, in_dev, logits, n, vocab, (char *)ws + in_b + out_b, st->stream),
                  "sample rows");
    if (rc == RLP_OK) {
        err = cudaMemcpyAsync(out, out_dev, out_b, cudaMemcpyDeviceToHost, st->stream);
        rc = err == cudaSuccess ? sync_checked(st, "sample rows") : cuda_fail(st->host, err, "sample rows");
    }
    for (int64_t i = 0; rc == RLP_OK && i < n; i++) {
        if (out[i].status == 0) {
            tokens[i] = out[i].token;
            logprobs[i] = out[i].logprob;
            continue;
        }
        /* the CPU backend's message for the same row */
        if (out[i].status == RLPI_CUDA_SAMPLE_ALL_MASKED)
            rc = st->host->error_set(RLP_E_INVALID_ARG,
                                     "sample rows: draw %lld (logits row %d): sampler: all %lld logits are -Inf",
                                     (long long)i, (int)in[i].row, (long long)vocab);
        else
            rc = st->host->error_set(RLP_E_INVALID_ARG,
                                     "sample rows: draw %lld (logits row %d): sampler: logits[%d] is %s",
                                     (long long)i, (int)in[i].row, (int)out[i].index,
                                     out[i].status == RLPI_CUDA_SAMPLE_NAN ? "NaN" : "+Inf");
    }
    return leave(st, rc);
}

static void state_free(cuda_state *st)
{
    if (st->blas)
        cublasDestroy(st->blas);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    cudaFree(st->ws);
    cudaFree(st->red);
    cudaFree(st->flags);
    cudaFreeHost(st->pinned);
    cudaFreeHost(st->sample_pinned);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static void c_destroy(rlpi_backend *be)
{
    cuda_state *st = STATE(be);
    cudaSetDevice(be->device);
    cudaStreamSynchronize(st->stream);
    state_free(st);
    free(be);
}

static const rlpi_backend_ops cuda_ops = {
    .name = "cuda",
    .destroy = c_destroy,
    .buffer_alloc = c_buffer_alloc,
    .buffer_free = c_buffer_free,
    .buffer_upload = c_upload,
    .buffer_download = c_download,
    .buffer_copy = c_copy,
    .buffer_copy_2d = c_copy_2d,
    .buffer_fill_f32 = c_fill,
    .synchronize = c_sync,
    .host_visible = 0,
    .gemm_f32 = c_gemm,
    .embedding_fwd = c_embedding_fwd,
    .embedding_bwd = c_embedding_bwd,
    .rmsnorm_fwd = c_rmsnorm_fwd,
    .rmsnorm_bwd = c_rmsnorm_bwd,
    .rope = c_rope,
    .attention_fwd = c_attention_fwd,
    .attention_bwd = c_attention_bwd,
    .swiglu_fwd = c_swiglu_fwd,
    .swiglu_bwd = c_swiglu_bwd,
    .geglu_fwd = c_geglu_fwd,
    .geglu_bwd = c_geglu_bwd,
    .add = c_add,
    .add_bias = c_add_bias,
    .bias_bwd = c_bias_bwd,
    .scale = c_scale,
    .softcap_fwd = c_softcap_fwd,
    .softcap_bwd = c_softcap_bwd,
    .logprob_rows = c_logprob_rows,
    .logprob_rows_bwd = c_logprob_rows_bwd,
    .sum_squares = c_sum_squares,
    .adamw = c_adamw,
    .attention_cached = c_attention_cached,
    /* sampling (rollout engine) */
    .sample_rows = c_sample_rows,
};

EXPORT int rlpi_cuda_module_device_count(const rlpi_host_api *host, int *out)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        *out = 0;
        return cuda_fail(host, err, "no usable GPU");
    }
    if (n == 0)
        host->error_set(RLP_E_BACKEND, "cuda: no GPU is visible");
    *out = n;
    return RLP_OK;
}

EXPORT int rlpi_cuda_module_create(const rlpi_host_api *host, int device, rlpi_backend **out)
{
    if (!host || host->version < RLPI_HOST_API_VERSION || !out)
        return RLP_E_INVALID_ARG;
    int n = 0;
    int rc = rlpi_cuda_module_device_count(host, &n);
    if (rc != RLP_OK)
        return rc;
    if (device < 0 || device >= n)
        return host->error_set(n ? RLP_E_INVALID_ARG : RLP_E_BACKEND,
                               "cuda: device %d requested, %d GPU(s) visible", device, n);
    cudaError_t err = cudaSetDevice(device);
    if (err != cudaSuccess)
        return cuda_fail(host, err, "cudaSetDevice");
    rlpi_backend *be = calloc(1, sizeof *be);
    cuda_state *st = calloc(1, sizeof *st);
    if (!be || !st) {
        free(be);
        free(st);
        return host->error_set(RLP_E_NOMEM, "cuda: out of host memory");
    }
    st->host = host;
    pthread_mutex_init(&st->mu, NULL);
    const char *what = "cudaStreamCreate";
    err = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) {
        what = "cudaMalloc (reduction scratch)";
        err = cudaMalloc((void **)&st->red, (RLPI_CUDA_SUM_SQUARES_PARTIALS + 1) * sizeof(double));
    }
    if (err == cudaSuccess) {
        what = "cudaMalloc (flags)";
        err = cudaMalloc((void **)&st->flags, N_FLAGS * sizeof(int));
    }
    if (err == cudaSuccess) {
        what = "cudaMemset (flags)";
        err = cudaMemset(st->flags, 0, N_FLAGS * sizeof(int));
    }
    if (err == cudaSuccess) {
        what = "cudaHostAlloc";
        err = cudaHostAlloc(&st->pinned, sizeof(double) + N_FLAGS * sizeof(int), cudaHostAllocDefault);
    }
    if (err != cudaSuccess) {
        rc = cuda_fail(host, err, what);
        state_free(st);
        free(be);
        return rc;
    }
    memset(st->pinned, 0, sizeof(double) + N_FLAGS * sizeof(int));
    cublasStatus_t s = cublasCreate(&st->blas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(st->blas, st->stream);
    /* keep fp32 GEMMs exact fp32 (no TF32) */
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        rc = blas_fail(host, s, "cublasCreate");
        state_free(st);
        free(be);
        return rc;
    }
    struct cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        snprintf(prop.name, sizeof prop.name, "unknown GPU");
    be->ops = &cuda_ops;
    be->kind = RLP_BACKEND_CUDA;
    be->device = device;
    be->n_threads = 1;
    be->impl = st;
    snprintf(be->description, sizeof be->description, "cuda:%d %.100s (sm_%d%d, %.0f GiB)", device,
             prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    *out = be;
    return RLP_OK;
}

/* ---- for the module's other files (cuda_module.h) ---- */

cudaStream_t rlpi_cuda_lock_stream(rlpi_backend *be)
{
    return enter(be)->stream;
}

void rlpi_cuda_unlock(rlpi_backend *be)
{
    leave(STATE(be), RLP_OK);
}
