// AdamW (Loshchilov & Hutter 2019, Algorithm 2) with bias correction,
// elementwise. Written with explicitly rounded operations (no fused
// multiply-add) in the CPU backend's order, so that a step gives the same
// bits as rlpi_cpu_adamw: optimizer states of the two backends then differ
// only through their gradients.
#include "common.cuh"

__global__ static void adamw_kernel(float *p, const float *grad, float *m, float *v, int64_t n, float lr, float b1,
                                    float b2, float eps, float wd, float bc1, float bc2, float gs)
{
    const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = __fmul_rn(grad[i], gs);
        const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, g));
        const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
        m[i] = mi;
        v[i] = vi;
        const float mhat = __fdiv_rn(mi, bc1), vhat = __fdiv_rn(vi, bc2);
        const float pi = p[i];
        const float upd = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)), __fmul_rn(wd, pi));
        p[i] = __fsub_rn(pi, __fmul_rn(lr, upd));
    }
}

extern "C" int rlpi_cuda_adamw(float *param, const float *grad, float *m, float *v, int64_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, float bias_correction1,
                               float bias_correction2, float grad_scale, void *stream)
{
    const int threads = 256;
    adamw_kernel<<<rlpi_blocks(n, threads), threads, 0, (cudaStream_t)stream>>>(
        param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale);
    return rlpi_launch_status();
}
