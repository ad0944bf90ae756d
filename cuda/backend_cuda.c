/* The CUDA backend module (librlpost-cuda.so), loaded by the core with
 * dlopen. Buffers are device memory on one stream per backend; GEMMs go to
 * cuBLAS. It reports errors through the host API it is given, since it
 * cannot link the core's hidden symbols, and must never abort the process
 * (no GPU, no driver and out-of-memory are ordinary errors here). */
#include "../lib/backend/backend.h"
#include "kernels.h"

#include "rlpost.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef struct cuda_state {
    const rlpi_host_api *host;
    cudaStream_t stream;
    cublasHandle_t blas;
} cuda_state;

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

static int c_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer *buf)
{
    cudaSetDevice(be->device);
    cudaError_t err = cudaMalloc(&buf->data, nbytes ? nbytes : 256);
    return err == cudaSuccess ? RLP_OK : cuda_fail(STATE(be)->host, err, "cudaMalloc");
}

static void c_buffer_free(rlpi_backend *be, rlpi_buffer *buf)
{
    (void)be;
    cudaFree(buf->data);
}

static int c_upload(rlpi_backend *be, rlpi_buffer *dst, size_t off, const void *src, size_t n)
{
    cuda_state *st = STATE(be);
    cudaError_t err = cudaMemcpyAsync((char *)dst->data + off, src, n, cudaMemcpyHostToDevice, st->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(st->stream); /* the caller may reuse src at once */
    return err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "upload");
}

static int c_download(rlpi_backend *be, const rlpi_buffer *src, size_t off, void *dst, size_t n)
{
    cuda_state *st = STATE(be);
    cudaError_t err =
        cudaMemcpyAsync(dst, (const char *)src->data + off, n, cudaMemcpyDeviceToHost, st->stream);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(st->stream);
    return err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "download");
}

static int c_copy(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src,
                  size_t src_off, size_t n)
{
    cuda_state *st = STATE(be);
    cudaError_t err = cudaMemcpyAsync((char *)dst->data + dst_off, (const char *)src->data + src_off,
                                      n, cudaMemcpyDeviceToDevice, st->stream);
    return err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "copy");
}

static int c_fill(rlpi_backend *be, rlpi_buffer *dst, size_t off, size_t n, float value)
{
    cuda_state *st = STATE(be);
    int err = rlpi_cuda_fill_f32((float *)dst->data + off, n, value, st->stream);
    return err == 0 ? RLP_OK : cuda_fail(st->host, (cudaError_t)err, "fill");
}

static int c_sync(rlpi_backend *be)
{
    cuda_state *st = STATE(be);
    cudaError_t err = cudaStreamSynchronize(st->stream);
    return err == cudaSuccess ? RLP_OK : cuda_fail(st->host, err, "synchronize");
}

/* Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: hand cuBLAS
 * the operands swapped, with the same transpose flags. */
static int c_gemm(rlpi_backend *be, const rlpi_gemm *g)
{
    cuda_state *st = STATE(be);
    const float *a = (const float *)g->a.buf->data + g->a.offset;
    const float *b = (const float *)g->b.buf->data + g->b.offset;
    float *c = (float *)g->c.buf->data + g->c.offset;
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
    return s == CUBLAS_STATUS_SUCCESS ? RLP_OK : blas_fail(st->host, s, "sgemm");
}

static void c_destroy(rlpi_backend *be)
{
    cuda_state *st = STATE(be);
    cudaSetDevice(be->device);
    cublasDestroy(st->blas);
    cudaStreamDestroy(st->stream);
    free(st);
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
    .buffer_fill_f32 = c_fill,
    .synchronize = c_sync,
    .host_visible = 0,
    .gemm_f32 = c_gemm,
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
    if ((err = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        free(be);
        free(st);
        return cuda_fail(host, err, "cudaStreamCreate");
    }
    cublasStatus_t s = cublasCreate(&st->blas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(st->blas, st->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(st->stream);
        free(be);
        free(st);
        return blas_fail(host, s, "cublasCreate");
    }
    /* keep fp32 GEMMs exact fp32 unless a caller opts into TF32 */
    cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH);
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
