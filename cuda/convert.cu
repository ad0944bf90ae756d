// fp32 -> bf16 operand conversion for the bf16 GEMMs (RLP_MATMUL_BF16): a
// strided (batch, rows, cols) fp32 matrix view into a packed bf16 copy that
// cublasGemmStridedBatchedEx reads. Rounding is to nearest even with NaN
// and ±Inf kept (__float2bfloat16_rn), the same as lib/core/half.h's
// rlpi_f32_to_bf16, which the CPU backend's emulation uses. Only the
// conversion lives here, no GEMM and no allocation.
#include "common.cuh"

#include <cuda_bf16.h>

// one item per element of every (batch, row, col) of the destination
__global__ static void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t rows, int64_t cols,
                                          int64_t ld, int64_t stride, int64_t batch)
{
    const int64_t per = rows * cols, total = per * batch;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / per, r = (i % per) / cols, c = i % cols;
        dst[i] = __float2bfloat16_rn(src[b * stride + r * ld + c]);
    }
}

extern "C" int rlpi_cuda_f32_to_bf16(void *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                                     int64_t stride, int64_t batch, void *stream)
{
    if (rows <= 0 || cols <= 0 || batch <= 0)
        return 0;
    const int threads = 256;
    f32_to_bf16_kernel<<<rlpi_blocks(rows * cols * batch, threads), threads, 0, (cudaStream_t)stream>>>(
        (__nv_bfloat16 *)dst, src, rows, cols, ld, stride, batch);
    return rlpi_launch_status();
}
