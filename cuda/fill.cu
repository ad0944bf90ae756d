// Fills and scalings of fp32 device ranges: zeroing gradients and
// initialising buffers without a host round trip, and C = beta·C for the
// GEMMs with k = 0 (no product to hand to cuBLAS).
#include "common.cuh"

__global__ static void fill_kernel(float *dst, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

extern "C" int rlpi_cuda_fill_f32(float *dst, size_t n, float value, void *stream)
{
    if (n == 0)
        return 0;
    const int threads = 256;
    fill_kernel<<<rlpi_blocks((int64_t)n, threads), threads, 0, (cudaStream_t)stream>>>(dst, n, value);
    return rlpi_launch_status();
}

// one item per element of every (batch, row, col); beta == 0 writes 0
// without reading, as the GEMM contract says
__global__ static void scale_matrix_kernel(float *c, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                           int64_t batch, float beta)
{
    const int64_t per = rows * cols, total = per * batch;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / per, r = (i % per) / cols, col = i % cols;
        float *x = c + b * stride + r * ld + col;
        *x = beta == 0.0f ? 0.0f : beta * *x;
    }
}

extern "C" int rlpi_cuda_scale_matrix(float *c, int64_t rows, int64_t cols, int64_t ld, int64_t stride,
                                      int64_t batch, float beta, void *stream)
{
    if (rows <= 0 || cols <= 0 || batch <= 0)
        return 0;
    const int threads = 256;
    scale_matrix_kernel<<<rlpi_blocks(rows * cols * batch, threads), threads, 0, (cudaStream_t)stream>>>(
        c, rows, cols, ld, stride, batch, beta);
    return rlpi_launch_status();
}
