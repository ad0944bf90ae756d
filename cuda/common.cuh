// Device helpers shared by the CUDA backend's kernels: warp and block
// reductions with a fixed combination order (so every reduction gives the
// same bits run to run), and grid sizing. Included by the .cu files only.
#ifndef RLPI_CUDA_COMMON_CUH
#define RLPI_CUDA_COMMON_CUH

#include "kernels.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never
// above `cap` (the loops cover the rest).
static inline unsigned rlpi_blocks(int64_t n, int threads, int64_t cap = 1 << 16)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1)
        b = 1;
    if (b > cap)
        b = cap;
    return (unsigned)b;
}

// Butterfly (xor) reductions: every lane ends with the same value, and
// since a + b == b + a exactly, the same bits in every lane.
template <typename T>
__device__ __forceinline__ T warp_sum(T v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reductions over the 16 lanes that share bits 4.. of the lane id (a half
// warp): the row reductions of the attention tiles.
__device__ __forceinline__ float half_warp_sum(float v)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float half_warp_max(float v)
{
#pragma unroll
    for (int o = 8; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `scratch` is a __shared__ array of 32 T. Every
// thread of the block must call it (it synchronises).
template <typename T>
__device__ T block_sum(T v, T *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // scratch may still be read by a previous call
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    T r = lane < n_warps ? scratch[lane] : T(0);
    return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v, float *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? scratch[lane] : -INFINITY;
    return warp_max(r);
}

// The launch wrappers' result: the launch error, as an int (0 = success).
static inline int rlpi_launch_status(void)
{
    return (int)cudaGetLastError();
}

#endif
