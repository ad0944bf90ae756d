// Rotary position embedding in place, HF rotate_half layout (pairs
// (f, f + head_dim/2)). As on the CPU, the angle pos·inv_freq is formed and
// its sine and cosine taken in double (positions up to 10^5 times
// frequencies near 1 lose too much in fp32), then rounded to float; one
// thread per (token, frequency) rotates that pair in every head.
#include "common.cuh"

__global__ static void rope_kernel(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int64_t n_heads,
                                   int64_t head_dim, int inverse)
{
    const int64_t half = head_dim / 2, total = n * half;
    for (int64_t it = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; it < total;
         it += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = it / half, f = it % half;
        const double ang = (double)pos[i] * (double)inv_freq[f];
        double sd, cd;
        sincos(ang, &sd, &cd);
        const float c = (float)cd, s = inverse ? -(float)sd : (float)sd;
        for (int64_t h = 0; h < n_heads; h++) {
            float *xp = x + (i * n_heads + h) * head_dim;
            const float x0 = xp[f], x1 = xp[f + half];
            xp[f] = x0 * c - x1 * s;
            xp[f + half] = x1 * c + x0 * s;
        }
    }
}

extern "C" int rlpi_cuda_rope(float *x, const int32_t *pos, const float *inv_freq, int64_t n, int64_t n_heads,
                              int64_t head_dim, int inverse, void *stream)
{
    const int threads = 256;
    rope_kernel<<<rlpi_blocks(n * (head_dim / 2), threads), threads, 0, (cudaStream_t)stream>>>(
        x, pos, inv_freq, n, n_heads, head_dim, inverse);
    return rlpi_launch_status();
}
