// Elementwise kernels: SwiGLU and GeGLU forward/backward, logit
// soft-capping forward/backward, y += x, bias broadcast and scaling. The expressions are the CPU backend's (cpu_kernels.c,
// cpu_vecmath.c) in the same order; add, add_bias and scale give the same
// bits as the CPU (no contraction is possible in them); SwiGLU differs by
// the exp (CUDA's expf against the CPU's Cephes polynomial, each within
// 2 ulp). GeGLU and soft-capping use CUDA's tanhf (within 2 ulp).
#include "common.cuh"

#define EW_THREADS 256
#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// y = silu(g)·u = g/(1 + e^−g)·u
__global__ static void swiglu_fwd_kernel(float *y, const float *g, const float *u, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const float gi = g[i];
        y[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
}

// dg = d·u·σ(g)·(1 + g·(1 − σ(g))), du = d·g·σ(g)
__global__ static void swiglu_bwd_kernel(float *dg, float *du, const float *d, const float *g, const float *u,
                                         int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const float gi = g[i], di = d[i], ui = u[i];
        const float sg = 1.0f / (1.0f + expf(-gi));
        dg[i] = di * ui * sg * (1.0f + gi * (1.0f - sg));
        du[i] = di * gi * sg;
    }
}

// gelu_tanh(g) = 0.5·g·(1 + t), t = tanh(c·(g + 0.044715·g³)), c = √(2/π)
// (Hendrycks & Gimpel 2016, eq. for the tanh approximation; Gemma's
// gelu_pytorch_tanh). Written as g·(c + c·0.044715·g²) so g³ never
// overflows before tanh saturates.
#define GELU_C 0.7978845608028654f
#define GELU_A 0.044715f

// y = gelu_tanh(g)·u
__global__ static void geglu_fwd_kernel(float *y, const float *g, const float *u, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const float gi = g[i];
        const float t = tanhf(gi * (GELU_C + GELU_C * GELU_A * gi * gi));
        y[i] = 0.5f * gi * (1.0f + t) * u[i];
    }
}

// gelu_tanh'(g) = 0.5·(1 + t) + 0.5·g·(1 − t²)·c·(1 + 3·0.044715·g²);
// dg = d·u·gelu_tanh'(g), du = d·gelu_tanh(g)
__global__ static void geglu_bwd_kernel(float *dg, float *du, const float *d, const float *g, const float *u,
                                        int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const float gi = g[i], di = d[i], ui = u[i], g2 = gi * gi;
        const float t = tanhf(gi * (GELU_C + GELU_C * GELU_A * g2));
        const float dgelu = 0.5f * (1.0f + t) + 0.5f * gi * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * g2);
        dg[i] = di * ui * dgelu;
        du[i] = di * 0.5f * gi * (1.0f + t);
    }
}

// x = cap·tanh(x/cap) (Gemma's final_logit_softcapping)
__global__ static void softcap_fwd_kernel(float *x, float cap, int64_t n)
{
    GRID_STRIDE(i, n)
    x[i] = cap * tanhf(x[i] / cap);
}

// dx *= d/dx cap·tanh(x/cap) = 1 − tanh² = 1 − (y/cap)², from the capped y
__global__ static void softcap_bwd_kernel(float *dx, const float *y, float cap, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        const float r = y[i] / cap;
        dx[i] *= 1.0f - r * r;
    }
}

__global__ static void add_kernel(float *y, const float *x, int64_t n)
{
    GRID_STRIDE(i, n)
    y[i] = __fadd_rn(y[i], x[i]);
}

__global__ static void add_bias_kernel(float *y, const float *bias, int64_t rows, int64_t cols)
{
    GRID_STRIDE(i, rows * cols)
    y[i] = __fadd_rn(y[i], bias[i % cols]);
}

__global__ static void scale_kernel(float *x, float alpha, int64_t n)
{
    GRID_STRIDE(i, n)
    x[i] = __fmul_rn(x[i], alpha);
}

#define LAUNCH(kernel, n, ...)                                                                               \
    do {                                                                                                     \
        kernel<<<rlpi_blocks((n), EW_THREADS), EW_THREADS, 0, (cudaStream_t)stream>>>(__VA_ARGS__);         \
        return rlpi_launch_status();                                                                         \
    } while (0)

extern "C" int rlpi_cuda_swiglu_fwd(float *out, const float *gate, const float *up, int64_t n, void *stream)
{
    LAUNCH(swiglu_fwd_kernel, n, out, gate, up, n);
}

extern "C" int rlpi_cuda_swiglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                    int64_t n, void *stream)
{
    LAUNCH(swiglu_bwd_kernel, n, dgate, dup, dout, gate, up, n);
}

extern "C" int rlpi_cuda_geglu_fwd(float *out, const float *gate, const float *up, int64_t n, void *stream)
{
    LAUNCH(geglu_fwd_kernel, n, out, gate, up, n);
}

extern "C" int rlpi_cuda_geglu_bwd(float *dgate, float *dup, const float *dout, const float *gate, const float *up,
                                   int64_t n, void *stream)
{
    LAUNCH(geglu_bwd_kernel, n, dgate, dup, dout, gate, up, n);
}

extern "C" int rlpi_cuda_softcap_fwd(float *x, float cap, int64_t n, void *stream)
{
    LAUNCH(softcap_fwd_kernel, n, x, cap, n);
}

extern "C" int rlpi_cuda_softcap_bwd(float *dx, const float *y, float cap, int64_t n, void *stream)
{
    LAUNCH(softcap_bwd_kernel, n, dx, y, cap, n);
}

extern "C" int rlpi_cuda_add(float *y, const float *x, int64_t n, void *stream)
{
    LAUNCH(add_kernel, n, y, x, n);
}

extern "C" int rlpi_cuda_add_bias(float *y, const float *bias, int64_t rows, int64_t cols, void *stream)
{
    LAUNCH(add_bias_kernel, rows * cols, y, bias, rows, cols);
}

extern "C" int rlpi_cuda_scale(float *x, float alpha, int64_t n, void *stream)
{
    LAUNCH(scale_kernel, n, x, alpha, n);
}
