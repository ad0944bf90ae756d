// Causal GQA of new query rows against KV-cache slots, for generation
// (prefill and decode). A block of 4 warps per (query row, head): the warps
// take every 4th cache row, each keeps an online softmax (running max,
// sum and output) with the dot products across its 32 lanes, and warp 0
// merges the four at the end, so no score vector is ever stored. Keys and
// values of query row i of sequence s are cache rows [0, past[s] + i −
// q_start[s]] of slot slot[s] (rows p at p·KV·hd inside the slot); with a
// sliding window W > 0 only the last W of them (row j visible from position
// p iff j <= p and p − j < W), the earlier rows never read. softmax(q·k·scale).
// Sequence tables travel as kernel parameters, CACHED_CHUNK sequences per
// launch. Deterministic: the merge order is fixed.
#include "common.cuh"

#include <limits.h>

#define CACHED_CHUNK 128
#define CACHED_WARPS 4

struct cache_table {
    int n_seq;
    int q_start[CACHED_CHUNK + 1]; // absolute query rows; the last is the end
    int slot[CACHED_CHUNK];
    int past[CACHED_CHUNK];
};

// NT = hd / 32 rounded up: the head-dim elements each lane holds
template <int NT>
__global__ static void __launch_bounds__(CACHED_WARPS * 32)
    attn_cached_kernel(float *out, const float *q, const float *kc, const float *vc,
                       const __grid_constant__ cache_table tab, int64_t slot_stride, int H, int KV, int hd, float scale,
                       int W)
{
    __shared__ float wm[CACHED_WARPS], wl[CACHED_WARPS], wacc[CACHED_WARPS][NT * 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int i = tab.q_start[0] + blockIdx.x, h = blockIdx.y, kvh = h / (H / KV);
    int lo = 0, hi = tab.n_seq - 1; // the largest s with q_start[s] <= i
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tab.q_start[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int s = lo;
    const int nk = tab.past[s] + (i - tab.q_start[s]) + 1; // keys [j0, nk)
    const int j0 = W > 0 && nk > W ? nk - W : 0;
    const int64_t row = (int64_t)KV * hd;
    const float *K = kc + (int64_t)tab.slot[s] * slot_stride + (int64_t)kvh * hd;
    const float *V = vc + (int64_t)tab.slot[s] * slot_stride + (int64_t)kvh * hd;
    const float *qp = q + ((int64_t)i * H + h) * hd;

    float qr[NT], acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int d = lane + 32 * t;
        qr[t] = d < hd ? qp[d] : 0.0f;
        acc[t] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = j0 + warp; j < nk; j += CACHED_WARPS) {
        const float *kr = K + j * row, *vr = V + j * row;
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int d = lane + 32 * t;
            if (d < hd)
                dot += qr[t] * kr[d];
        }
        const float sc = warp_sum(dot) * scale;
        const float mnew = fmaxf(m, sc), alpha = expf(m - mnew), p = expf(sc - mnew);
        l = l * alpha + p;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int d = lane + 32 * t;
            acc[t] = acc[t] * alpha + p * (d < hd ? vr[d] : 0.0f);
        }
        m = mnew;
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
        wacc[warp][lane + 32 * t] = acc[t];
    __syncthreads();
    if (warp != 0)
        return;
    float M = -INFINITY; // warp 0 always has row j0, so M is finite
    for (int w = 0; w < CACHED_WARPS; w++)
        M = fmaxf(M, wm[w]);
    float L = 0.0f, o[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        o[t] = 0.0f;
    for (int w = 0; w < CACHED_WARPS; w++) {
        const float f = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M); // a warp without rows adds nothing
        L += wl[w] * f;
#pragma unroll
        for (int t = 0; t < NT; t++)
            o[t] += wacc[w][lane + 32 * t] * f;
    }
    const float inv = 1.0f / L;
    float *op = out + ((int64_t)i * H + h) * hd;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int d = lane + 32 * t;
        if (d < hd)
            op[d] = o[t] * inv;
    }
}

template <int NT>
static int cached_launch(float *out, const float *q, const float *kc, const float *vc, const int64_t *q_start,
                         const int64_t *slot, const int64_t *past, int64_t n_seq, int64_t slot_stride, int H, int KV,
                         int hd, float scale, int W, cudaStream_t stream)
{
    for (int64_t s0 = 0; s0 < n_seq;) {
        cache_table tab;
        int cnt = 0;
        while (s0 + cnt < n_seq && cnt < CACHED_CHUNK) {
            tab.q_start[cnt] = (int)q_start[s0 + cnt];
            tab.slot[cnt] = (int)slot[s0 + cnt];
            tab.past[cnt] = (int)past[s0 + cnt];
            cnt++;
        }
        tab.q_start[cnt] = (int)q_start[s0 + cnt];
        tab.n_seq = cnt;
        const int rows = tab.q_start[cnt] - tab.q_start[0];
        if (rows > 0) {
            attn_cached_kernel<NT><<<dim3((unsigned)rows, (unsigned)H), CACHED_WARPS * 32, 0, stream>>>(
                out, q, kc, vc, tab, slot_stride, H, KV, hd, scale, W);
            int err = rlpi_launch_status();
            if (err)
                return err;
        }
        s0 += cnt;
    }
    return 0;
}

extern "C" int rlpi_cuda_attention_cached(float *out, const float *q, const float *kc, const float *vc,
                                          const int64_t *q_start, const int64_t *slot, const int64_t *past,
                                          int64_t n_seq, int64_t n, int64_t slot_stride, int64_t n_heads,
                                          int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window,
                                          void *stream)
{
    if (n > INT_MAX / 2 || n_heads > 65535 || head_dim > RLPI_CUDA_MAX_HEAD_DIM)
        return RLPI_CUDA_E_UNSUPPORTED;
    for (int64_t s = 0; s < n_seq; s++)
        if (slot[s] > INT_MAX || past[s] > INT_MAX / 2)
            return RLPI_CUDA_E_UNSUPPORTED;
    // key counts stay below past + n < INT_MAX: a longer window changes nothing
    const int H = (int)n_heads, KV = (int)n_kv_heads, hd = (int)head_dim;
    const int W = window > 0 && window < INT_MAX ? (int)window : 0;
    cudaStream_t s = (cudaStream_t)stream;
    if (hd <= 32)
        return cached_launch<1>(out, q, kc, vc, q_start, slot, past, n_seq, slot_stride, H, KV, hd, scale, W, s);
    if (hd <= 64)
        return cached_launch<2>(out, q, kc, vc, q_start, slot, past, n_seq, slot_stride, H, KV, hd, scale, W, s);
    if (hd <= 128)
        return cached_launch<4>(out, q, kc, vc, q_start, slot, past, n_seq, slot_stride, H, KV, hd, scale, W, s);
    return cached_launch<8>(out, q, kc, vc, q_start, slot, past, n_seq, slot_stride, H, KV, hd, scale, W, s);
}
