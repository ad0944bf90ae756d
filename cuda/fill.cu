// Elementwise fill of an fp32 device range (used to zero gradients and to
// initialise buffers without a host round trip).
#include "kernels.h"

#include <cuda_runtime.h>

__global__ static void fill_kernel(float *dst, size_t n, float value)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = value;
}

extern "C" int rlpi_cuda_fill_f32(float *dst, size_t n, float value, void *stream)
{
    if (n == 0)
        return 0;
    const int threads = 256;
    size_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535)
        blocks = 65535;  // grid-stride loop covers the rest
    fill_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(dst, n, value);
    return (int)cudaGetLastError();
}
