// RMSNorm forward and the dx half of its backward, one block per row. The
// row sums are taken in double, as the CPU backend does, and every
// expression follows cpu_kernels.c operation for operation, so the two
// backends differ only by the order of the double sums. dw (a sum over
// rows) is rlpi_cuda_colsum in reduce.cu.
#include "common.cuh"

static int row_threads(int64_t dim)
{
    return dim <= 128 ? 64 : dim <= 1024 ? 128 : 256;
}

static unsigned row_blocks(int64_t n)
{
    return (unsigned)(n < (1 << 20) ? n : (1 << 20));
}

// out = x·r·w, r = (mean(x²) + eps)^(-1/2) saved in rstd
__global__ static void rmsnorm_fwd_kernel(float *out, float *rstd, const float *x, const float *w, int64_t n,
                                          int64_t dim, float eps)
{
    __shared__ double scratch[32];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) { // uniform per block: the block_sum is safe
        const float *xr = x + i * dim;
        double ss = 0;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            ss += (double)xr[c] * xr[c];
        ss = block_sum(ss, scratch);
        const float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
        if (threadIdx.x == 0)
            rstd[i] = r;
        float *o = out + i * dim;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            o[c] = xr[c] * r * w[c];
    }
}

// dx += r·(w∘dy) − x·r³/dim·Σ_c(w∘dy∘x)
__global__ static void rmsnorm_bwd_dx_kernel(float *dx, const float *dout, const float *x, const float *w,
                                             const float *rstd, int64_t n, int64_t dim)
{
    __shared__ double scratch[32];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *xr = x + i * dim, *dy = dout + i * dim;
        double dot = 0;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            dot += (double)w[c] * dy[c] * xr[c];
        dot = block_sum(dot, scratch);
        const float r = rstd[i];
        const float coef = (float)(dot * (double)r * r * r / (double)dim);
        float *d = dx + i * dim;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            d[c] += r * w[c] * dy[c] - xr[c] * coef;
    }
}

extern "C" int rlpi_cuda_rmsnorm_fwd(float *out, float *rstd, const float *x, const float *w, int64_t n, int64_t dim,
                                     float eps, void *stream)
{
    rmsnorm_fwd_kernel<<<row_blocks(n), row_threads(dim), 0, (cudaStream_t)stream>>>(out, rstd, x, w, n, dim, eps);
    return rlpi_launch_status();
}

extern "C" int rlpi_cuda_rmsnorm_bwd_dx(float *dx_accum, const float *dout, const float *x, const float *w,
                                        const float *rstd, int64_t n, int64_t dim, void *stream)
{
    rmsnorm_bwd_dx_kernel<<<row_blocks(n), row_threads(dim), 0, (cudaStream_t)stream>>>(dx_accum, dout, x, w, rstd,
                                                                                      n, dim);
    return rlpi_launch_status();
}
