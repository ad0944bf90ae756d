// The fused logprob head: per row of logits (n, vocab), z = logits/T,
// logp = z[target] − logsumexp(z), entropy = −Σ softmax(z)·log softmax(z),
// and the backward that overwrites the row with ∂L/∂logits. One block per
// row: a pass for the max, a pass for Σ e^(z−m) and Σ e^(z−m)·z (each term
// in float, the sums in double, as the CPU backend does), then the output
// or, for the backward, a pass that rewrites the row. Rows are read from
// L2 after the first pass. A target outside [0, vocab) sets *bad and
// leaves its row's outputs untouched, as on the CPU.
#include "common.cuh"

#define LP_THREADS 512

struct row_stats {
    double lse, pz; // log Σ e^z, Σ softmax(z)·z
};

// Every thread of the block calls this for the same row.
__device__ static row_stats block_row_stats(const float *row, int64_t vocab, float inv_temp, float *fscratch,
                                            double *dscratch)
{
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += LP_THREADS)
        mx = fmaxf(mx, row[j] * inv_temp);
    mx = block_max(mx, fscratch);
    double s = 0, sz = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += LP_THREADS) {
        const float z = row[j] * inv_temp;
        const float e = expf(z - mx);
        s += (double)e;
        sz += (double)e * (double)z;
    }
    s = block_sum(s, dscratch);
    sz = block_sum(sz, dscratch);
    row_stats st;
    st.lse = (double)mx + log(s);
    st.pz = sz / s;
    return st;
}

__global__ static void __launch_bounds__(LP_THREADS)
    logprob_kernel(float *logp, float *entropy, const float *logits, const int32_t *targets, int64_t n,
                   int64_t vocab, float inv_temp, int *bad)
{
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t t = targets[i];
        if (t < 0 || t >= vocab) { // the same for the whole block
            if (threadIdx.x == 0)
                *bad = 1;
            continue;
        }
        const float *row = logits + i * vocab;
        const row_stats st = block_row_stats(row, vocab, inv_temp, fscratch, dscratch);
        if (threadIdx.x == 0) {
            logp[i] = (float)((double)(row[t] * inv_temp) - st.lse);
            if (entropy)
                entropy[i] = (float)(st.lse - st.pz); // H = −Σ p (z − lse)
        }
    }
}

// With p = softmax(z), H = lse − Σ p z:
//   ∂L/∂logits_j = (1/T)·(dlogp·(δ_jt − p_j) − dH·p_j·(z_j − lse + H))
__global__ static void __launch_bounds__(LP_THREADS)
    logprob_bwd_kernel(float *logits, const int32_t *targets, const float *dlogp, const float *dentropy, int64_t n,
                       int64_t vocab, float inv_temp, int *bad)
{
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t t = targets[i];
        if (t < 0 || t >= vocab) {
            if (threadIdx.x == 0)
                *bad = 1;
            continue;
        }
        float *row = logits + i * vocab;
        // block_row_stats ends in a block-wide barrier after every thread's
        // last read of the row, so the rewrite below cannot race with it
        const row_stats st = block_row_stats(row, vocab, inv_temp, fscratch, dscratch);
        const double H = st.lse - st.pz;
        const float dl = dlogp[i], dh = dentropy ? dentropy[i] : 0.0f;
        const float lse_f = (float)st.lse, zh = (float)(H - st.lse);
        for (int64_t j = threadIdx.x; j < vocab; j += LP_THREADS) {
            const float z = row[j] * inv_temp, p = expf(z - lse_f);
            row[j] = (j == t ? -dl * p - dh * p * (z + zh) + dl : -dl * p - dh * p * (z + zh)) * inv_temp;
        }
    }
}

static unsigned row_blocks(int64_t n)
{
    return (unsigned)(n < (1 << 20) ? n : (1 << 20));
}

extern "C" int rlpi_cuda_logprob_rows(float *logp, float *entropy, const float *logits, const int32_t *targets,
                                      int64_t n, int64_t vocab, float inv_temp, int *bad, void *stream)
{
    logprob_kernel<<<row_blocks(n), LP_THREADS, 0, (cudaStream_t)stream>>>(logp, entropy, logits, targets, n, vocab,
                                                                           inv_temp, bad);
    return rlpi_launch_status();
}

extern "C" int rlpi_cuda_logprob_rows_bwd(float *logits, const int32_t *targets, const float *dlogp,
                                          const float *dentropy, int64_t n, int64_t vocab, float inv_temp, int *bad,
                                          void *stream)
{
    logprob_bwd_kernel<<<row_blocks(n), LP_THREADS, 0, (cudaStream_t)stream>>>(logits, targets, dlogp, dentropy, n,
                                                                               vocab, inv_temp, bad);
    return rlpi_launch_status();
}
