// Causal grouped-query attention over packed sequences, for training:
// forward with the softmax log-sum-exp saved, and backward, both tiled
// flash-style (Dao et al., FlashAttention-2, 2023): no score matrix of a
// whole sequence is ever formed, only BQ×BK tiles in shared memory.
//
// Layout (backend.h): q/out (n, H, hd), k/v (n, KV, hd), lse (H, n); query
// head h reads kv head h / (H/KV); token i of sequence s attends to keys
// [seq_start[s], i], or with a sliding window W > 0 to [max(seq_start[s],
// i − W + 1), i]; softmax(q·k·scale), scale given (1/sqrt(hd) for most
// models, Gemma 3's query_pre_attn_scalar^−½). Key and query tiles wholly
// outside the window are never visited, so a local layer costs O(n·W),
// not O(n²).
//
// Forward: a block per (BQ query rows of one sequence, head); it walks the
// key tiles of the causal range (from the window's start for the tile's
// first row) with an online softmax (running max m and sum l per row) and
// writes out = Σ p v / l and lse = m + log l.
//
// Backward: P is recomputed from the saved lse, never stored. Two kernels,
// each owning what it writes, so there are no atomics and the result is
// the same bits on every run (deterministic):
//   dK/dV: a block per (BK keys of one sequence, kv head) loops over the
//          query heads of its group and the query tiles at or after its
//          keys: dV += Pᵀ dO, dK += scale · dSᵀ Q;
//   dQ:    a block per (BQ query rows, head) loops over the key tiles:
//          dQ = scale · dS K;
// with dS = P ∘ (dO Vᵀ − D), D_i = dO_i · O_i (a small kernel first). S and
// dO Vᵀ are computed in both kernels: 7 tile products against 5 for
// FlashAttention-2's atomic dQ, the price of determinism.
//
// Head dims are compiled as 32, 64, 128 and 256 (smaller ones zero-padded
// to the next); sequence tables travel as kernel parameters, at most
// SEQ_CHUNK sequences per launch, so no op uploads anything or waits.
#include "common.cuh"

#include <limits.h>

#define ATT_THREADS 256 // 16 × 16: thread (ty, tx) = (tid / 16, tid % 16)
#define SEQ_CHUNK 256

// The sequences of one launch and the tiles each one contributes.
struct seq_table {
    int n_seq;
    int tile_start[SEQ_CHUNK + 1]; // block b belongs to the s with tile_start[s] <= b < tile_start[s+1]
    int seq_start[SEQ_CHUNK + 1];  // first token of each sequence (absolute), and the end
};

__device__ __forceinline__ int find_seq(const seq_table &tab, int b)
{
    // the largest s with tile_start[s] <= b: sequences without tiles (empty)
    // share their tile_start with the next one and are never picked
    int lo = 0, hi = tab.n_seq - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tab.tile_start[mid] <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

// Rows r0..r0+R-1 of a (·, row_stride) matrix into shared memory with row
// stride LDS; rows after `rlast` and columns from hd on are zero (masked
// keys then meet zero values, never stale NaNs).
template <int D, int R, int LDS>
__device__ __forceinline__ void load_rows(float *dst, const float *src, int64_t row_stride, int r0, int rlast, int hd)
{
    for (int e = threadIdx.x; e < R * D; e += ATT_THREADS) {
        const int r = e / D, d = e % D, row = r0 + r;
        dst[r * LDS + d] = (row <= rlast && d < hd) ? src[(int64_t)row * row_stride + d] : 0.0f;
    }
}

// acc[a][b] += Σ_d X[ty + 16a][d] · Y[tx + 16b][d]  (X, Y row-major, stride LDS)
template <int NA, int NB, int LDS>
__device__ __forceinline__ void tile_dot(float (&acc)[NA][NB], const float *X, const float *Y, int hd, int tx, int ty)
{
#pragma unroll 4
    for (int d = 0; d < hd; d++) {
        float xa[NA], yb[NB];
#pragma unroll
        for (int a = 0; a < NA; a++)
            xa[a] = X[(ty + 16 * a) * LDS + d];
#pragma unroll
        for (int b = 0; b < NB; b++)
            yb[b] = Y[(tx + 16 * b) * LDS + d];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int b = 0; b < NB; b++)
                acc[a][b] += xa[a] * yb[b];
    }
}

// acc[a][j] += Σ_c P[ty + 16a][c] · Y[c][tx + 16j]  (c < NC; P stride LDP, Y stride LDS)
template <int NA, int ND, int NC, int LDP, int LDS>
__device__ __forceinline__ void tile_pv(float (&acc)[NA][ND], const float *P, const float *Y, int tx, int ty)
{
#pragma unroll 4
    for (int c = 0; c < NC; c++) {
        float pa[NA], y[ND];
#pragma unroll
        for (int a = 0; a < NA; a++)
            pa[a] = P[(ty + 16 * a) * LDP + c];
#pragma unroll
        for (int j = 0; j < ND; j++)
            y[j] = Y[c * LDS + tx + 16 * j];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int j = 0; j < ND; j++)
                acc[a][j] += pa[a] * y[j];
    }
}

// acc[a][j] += Σ_r P[r][ty + 16a] · Y[r][tx + 16j]  (r < NR: Pᵀ Y)
template <int NA, int ND, int NR, int LDP, int LDS>
__device__ __forceinline__ void tile_ptv(float (&acc)[NA][ND], const float *P, const float *Y, int tx, int ty)
{
#pragma unroll 4
    for (int r = 0; r < NR; r++) {
        float pa[NA], y[ND];
#pragma unroll
        for (int a = 0; a < NA; a++)
            pa[a] = P[r * LDP + ty + 16 * a];
#pragma unroll
        for (int j = 0; j < ND; j++)
            y[j] = Y[r * LDS + tx + 16 * j];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int j = 0; j < ND; j++)
                acc[a][j] += pa[a] * y[j];
    }
}

// Key j visible from query i (both absolute rows of one sequence): causal,
// and inside the sliding window when W > 0.
__device__ __forceinline__ bool visible(int i, int j, int W)
{
    return j <= i && (W == 0 || i - j < W);
}

// First key any of the query rows from q0 on can see.
__device__ __forceinline__ int first_key(int k_begin, int q0, int W)
{
    return W == 0 ? k_begin : max(k_begin, q0 - W + 1);
}

// ------------------------------------------------------------------ forward

#define FWD_BQ 64

template <int D, int BK>
constexpr size_t fwd_smem_floats()
{
    return (size_t)FWD_BQ * (D + 1) + 2 * (size_t)BK * (D + 1) + (size_t)FWD_BQ * (BK + 1);
}

template <int D, int BK>
__global__ static void __launch_bounds__(ATT_THREADS)
    attn_fwd_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                    const __grid_constant__ seq_table tab, int n, int H, int KV, int hd, float scale, int W)
{
    constexpr int BQ = FWD_BQ, NA = BQ / 16, NB = BK / 16, ND = D / 16, LDS = D + 1, LDP = BK + 1;
    extern __shared__ float smem[];
    float *Qs = smem;           // (BQ, LDS)
    float *Ks = Qs + BQ * LDS;  // (BK, LDS)
    float *Vs = Ks + BK * LDS;  // (BK, LDS)
    float *Ps = Vs + BK * LDS;  // (BQ, LDP)
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int h = blockIdx.y, kvh = h / (H / KV);
    const int s = find_seq(tab, blockIdx.x);
    const int k_begin = tab.seq_start[s];
    const int q0 = k_begin + (blockIdx.x - tab.tile_start[s]) * BQ;
    const int qlast = min(q0 + BQ, tab.seq_start[s + 1]) - 1;
    const int64_t qstride = (int64_t)H * hd, kstride = (int64_t)KV * hd;
    const float *qh = q + (int64_t)h * hd, *kh = k + (int64_t)kvh * hd, *vh = v + (int64_t)kvh * hd;

    load_rows<D, BQ, LDS>(Qs, qh, qstride, q0, qlast, hd);
    float o[NA][ND], m[NA], l[NA];
#pragma unroll
    for (int a = 0; a < NA; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
#pragma unroll
        for (int j = 0; j < ND; j++)
            o[a][j] = 0.0f;
    }
    // Without a window every row of the tile has key k_begin in the first
    // tile, so m is finite from then on; with one, a late row may see no key
    // of the first tiles: m stays −∞ there and the exponents below are
    // taken against 0 instead (alpha = e^−∞ = 0 over an empty o and l).
    for (int k0 = first_key(k_begin, q0, W); k0 <= qlast; k0 += BK) {
        __syncthreads(); // the previous tile's Ks/Vs/Ps are consumed
        load_rows<D, BK, LDS>(Ks, kh, kstride, k0, qlast, hd);
        load_rows<D, BK, LDS>(Vs, vh, kstride, k0, qlast, hd);
        __syncthreads();
        float sc[NA][NB];
#pragma unroll
        for (int a = 0; a < NA; a++)
#pragma unroll
            for (int b = 0; b < NB; b++)
                sc[a][b] = 0.0f;
        tile_dot<NA, NB, LDS>(sc, Qs, Ks, hd, tx, ty);
#pragma unroll
        for (int a = 0; a < NA; a++) {
            // row ty + 16a is spread over the 16 lanes of this half warp
            const int qi = q0 + ty + 16 * a;
            float mx = -INFINITY;
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const int kj = k0 + tx + 16 * b;
                const float x = visible(qi, kj, W) ? sc[a][b] * scale : -INFINITY;
                sc[a][b] = x;
                mx = fmaxf(mx, x);
            }
            mx = half_warp_max(mx);
            const float mnew = fmaxf(m[a], mx), mref = mnew == -INFINITY ? 0.0f : mnew;
            const float alpha = expf(m[a] - mref);
            float ps = 0.0f;
#pragma unroll
            for (int b = 0; b < NB; b++) {
                const float p = expf(sc[a][b] - mref);
                sc[a][b] = p;
                ps += p;
            }
            ps = half_warp_sum(ps);
            l[a] = l[a] * alpha + ps;
            m[a] = mnew;
#pragma unroll
            for (int j = 0; j < ND; j++)
                o[a][j] *= alpha;
#pragma unroll
            for (int b = 0; b < NB; b++)
                Ps[(ty + 16 * a) * LDP + tx + 16 * b] = sc[a][b];
        }
        __syncthreads();
        tile_pv<NA, ND, BK, LDP, LDS>(o, Ps, Vs, tx, ty);
    }
#pragma unroll
    for (int a = 0; a < NA; a++) {
        const int qi = q0 + ty + 16 * a;
        if (qi > qlast)
            continue;
        const float inv = 1.0f / l[a];
        float *orow = out + (int64_t)qi * qstride + (int64_t)h * hd;
#pragma unroll
        for (int j = 0; j < ND; j++) {
            const int d = tx + 16 * j;
            if (d < hd)
                orow[d] = o[a][j] * inv;
        }
        if (tx == 0)
            lse[(int64_t)h * n + qi] = m[a] + logf(l[a]);
    }
}

// ----------------------------------------------------------------- backward

// D[h, i] = dO[i, h] · O[i, h]: one warp per (token, head)
__global__ static void attn_bwd_dot_kernel(float *Dv, const float *dout, const float *out, int64_t n, int H, int hd)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t item = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; item < n * H; item += warps) {
        const float *a = dout + item * hd, *b = out + item * hd;
        float s = 0.0f;
        for (int d = lane; d < hd; d += 32)
            s += a[d] * b[d];
        s = warp_sum(s);
        if (lane == 0)
            Dv[(item % H) * n + item / H] = s;
    }
}

template <int D, int BK, int BQ>
constexpr size_t dkdv_smem_floats()
{
    return 2 * (size_t)BK * (D + 1) + 2 * (size_t)BQ * (D + 1) + 2 * (size_t)BQ * (BK + 1) + 2 * (size_t)BQ;
}

template <int D, int BK, int BQ>
__global__ static void __launch_bounds__(ATT_THREADS)
    attn_bwd_dkdv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *k, const float *v,
                         const float *lse, const float *Dv, const __grid_constant__ seq_table tab, int n, int H, int KV,
                         int hd, float scale, int W)
{
    constexpr int NK = BK / 16, NQ = BQ / 16, ND = D / 16, LDS = D + 1, LDP = BK + 1;
    extern __shared__ float smem[];
    float *Ks = smem;            // (BK, LDS)
    float *Vs = Ks + BK * LDS;   // (BK, LDS)
    float *Qs = Vs + BK * LDS;   // (BQ, LDS)
    float *dOs = Qs + BQ * LDS;  // (BQ, LDS)
    float *Ps = dOs + BQ * LDS;  // (BQ, LDP)
    float *dSs = Ps + BQ * LDP;  // (BQ, LDP)
    float *ls = dSs + BQ * LDP;  // (BQ) lse of the query rows
    float *Ds = ls + BQ;         // (BQ) D of the query rows
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int kvh = blockIdx.y, group = H / KV;
    const int s = find_seq(tab, blockIdx.x);
    const int s_end = tab.seq_start[s + 1];
    const int k0 = tab.seq_start[s] + (blockIdx.x - tab.tile_start[s]) * BK;
    const int klast = min(k0 + BK, s_end) - 1;
    // queries after klast + W − 1 see none of these keys
    const int q_end = W == 0 ? s_end : min(s_end, klast + W);
    const int64_t qstride = (int64_t)H * hd, kstride = (int64_t)KV * hd;

    load_rows<D, BK, LDS>(Ks, k + (int64_t)kvh * hd, kstride, k0, klast, hd);
    load_rows<D, BK, LDS>(Vs, v + (int64_t)kvh * hd, kstride, k0, klast, hd);
    float dka[NK][ND], dva[NK][ND];
#pragma unroll
    for (int a = 0; a < NK; a++)
#pragma unroll
        for (int j = 0; j < ND; j++)
            dka[a][j] = dva[a][j] = 0.0f;

    for (int g = 0; g < group; g++) {
        const int h = kvh * group + g;
        // queries before k0 see none of these keys
        for (int i0 = k0; i0 < q_end; i0 += BQ) {
            const int ilast = min(i0 + BQ, q_end) - 1;
            __syncthreads(); // the previous query tile is consumed
            load_rows<D, BQ, LDS>(Qs, q + (int64_t)h * hd, qstride, i0, ilast, hd);
            load_rows<D, BQ, LDS>(dOs, dout + (int64_t)h * hd, qstride, i0, ilast, hd);
            for (int r = threadIdx.x; r < BQ; r += ATT_THREADS) {
                const int i = i0 + r;
                ls[r] = i <= ilast ? lse[(int64_t)h * n + i] : 0.0f;
                Ds[r] = i <= ilast ? Dv[(int64_t)h * n + i] : 0.0f;
            }
            __syncthreads();
            float sc[NQ][NK], dp[NQ][NK];
#pragma unroll
            for (int a = 0; a < NQ; a++)
#pragma unroll
                for (int b = 0; b < NK; b++)
                    sc[a][b] = dp[a][b] = 0.0f;
            tile_dot<NQ, NK, LDS>(sc, Qs, Ks, hd, tx, ty);  // S = Q Kᵀ
            tile_dot<NQ, NK, LDS>(dp, dOs, Vs, hd, tx, ty); // dP = dO Vᵀ
#pragma unroll
            for (int a = 0; a < NQ; a++)
#pragma unroll
                for (int b = 0; b < NK; b++) {
                    const int r = ty + 16 * a, c = tx + 16 * b, i = i0 + r, j = k0 + c;
                    const bool ok = i <= ilast && j <= klast && visible(i, j, W);
                    const float p = ok ? expf(sc[a][b] * scale - ls[r]) : 0.0f;
                    Ps[r * LDP + c] = p;
                    dSs[r * LDP + c] = ok ? p * (dp[a][b] - Ds[r]) : 0.0f;
                }
            __syncthreads();
            tile_ptv<NK, ND, BQ, LDP, LDS>(dva, Ps, dOs, tx, ty); // dV += Pᵀ dO
            tile_ptv<NK, ND, BQ, LDP, LDS>(dka, dSs, Qs, tx, ty); // dK += dSᵀ Q
        }
    }
#pragma unroll
    for (int a = 0; a < NK; a++) {
        const int j = k0 + ty + 16 * a;
        if (j > klast)
            continue;
        float *dkr = dk + (int64_t)j * kstride + (int64_t)kvh * hd, *dvr = dv + (int64_t)j * kstride + (int64_t)kvh * hd;
#pragma unroll
        for (int jj = 0; jj < ND; jj++) {
            const int d = tx + 16 * jj;
            if (d < hd) {
                dkr[d] = dka[a][jj] * scale;
                dvr[d] = dva[a][jj];
            }
        }
    }
}

template <int D, int BQ, int BK>
constexpr size_t dq_smem_floats()
{
    return 2 * (size_t)BQ * (D + 1) + 2 * (size_t)BK * (D + 1) + (size_t)BQ * (BK + 1);
}

template <int D, int BQ, int BK>
__global__ static void __launch_bounds__(ATT_THREADS)
    attn_bwd_dq_kernel(float *dq, const float *dout, const float *q, const float *k, const float *v, const float *lse,
                       const float *Dv, const __grid_constant__ seq_table tab, int n, int H, int KV, int hd,
                       float scale, int W)
{
    constexpr int NQ = BQ / 16, NK = BK / 16, ND = D / 16, LDS = D + 1, LDP = BK + 1;
    extern __shared__ float smem[];
    float *Qs = smem;            // (BQ, LDS)
    float *dOs = Qs + BQ * LDS;  // (BQ, LDS)
    float *Ks = dOs + BQ * LDS;  // (BK, LDS)
    float *Vs = Ks + BK * LDS;   // (BK, LDS)
    float *dSs = Vs + BK * LDS;  // (BQ, LDP)
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int h = blockIdx.y, kvh = h / (H / KV);
    const int s = find_seq(tab, blockIdx.x);
    const int k_begin = tab.seq_start[s];
    const int q0 = k_begin + (blockIdx.x - tab.tile_start[s]) * BQ;
    const int qlast = min(q0 + BQ, tab.seq_start[s + 1]) - 1;
    const int64_t qstride = (int64_t)H * hd, kstride = (int64_t)KV * hd;

    load_rows<D, BQ, LDS>(Qs, q + (int64_t)h * hd, qstride, q0, qlast, hd);
    load_rows<D, BQ, LDS>(dOs, dout + (int64_t)h * hd, qstride, q0, qlast, hd);
    float lr[NQ], Dr[NQ], dqa[NQ][ND];
#pragma unroll
    for (int a = 0; a < NQ; a++) {
        const int i = q0 + ty + 16 * a;
        lr[a] = i <= qlast ? lse[(int64_t)h * n + i] : 0.0f;
        Dr[a] = i <= qlast ? Dv[(int64_t)h * n + i] : 0.0f;
#pragma unroll
        for (int j = 0; j < ND; j++)
            dqa[a][j] = 0.0f;
    }
    for (int k0 = first_key(k_begin, q0, W); k0 <= qlast; k0 += BK) {
        __syncthreads();
        load_rows<D, BK, LDS>(Ks, k + (int64_t)kvh * hd, kstride, k0, qlast, hd);
        load_rows<D, BK, LDS>(Vs, v + (int64_t)kvh * hd, kstride, k0, qlast, hd);
        __syncthreads();
        float sc[NQ][NK], dp[NQ][NK];
#pragma unroll
        for (int a = 0; a < NQ; a++)
#pragma unroll
            for (int b = 0; b < NK; b++)
                sc[a][b] = dp[a][b] = 0.0f;
        tile_dot<NQ, NK, LDS>(sc, Qs, Ks, hd, tx, ty);
        tile_dot<NQ, NK, LDS>(dp, dOs, Vs, hd, tx, ty);
#pragma unroll
        for (int a = 0; a < NQ; a++)
#pragma unroll
            for (int b = 0; b < NK; b++) {
                const int i = q0 + ty + 16 * a, j = k0 + tx + 16 * b;
                const bool ok = i <= qlast && visible(i, j, W);
                const float p = ok ? expf(sc[a][b] * scale - lr[a]) : 0.0f;
                dSs[(ty + 16 * a) * LDP + tx + 16 * b] = ok ? p * (dp[a][b] - Dr[a]) : 0.0f;
            }
        __syncthreads();
        tile_pv<NQ, ND, BK, LDP, LDS>(dqa, dSs, Ks, tx, ty); // dQ += dS K
    }
#pragma unroll
    for (int a = 0; a < NQ; a++) {
        const int i = q0 + ty + 16 * a;
        if (i > qlast)
            continue;
        float *dqr = dq + (int64_t)i * qstride + (int64_t)h * hd;
#pragma unroll
        for (int j = 0; j < ND; j++) {
            const int d = tx + 16 * j;
            if (d < hd)
                dqr[d] = dqa[a][j] * scale;
        }
    }
}

// --------------------------------------------------------------------- host

// Calls launch(table, tiles) for each run of at most SEQ_CHUNK sequences
// that has at least one tile of `tile` rows.
template <typename Launch>
static int for_each_chunk(const int64_t *seq_start, int64_t n_seq, int tile, Launch launch)
{
    for (int64_t s0 = 0; s0 < n_seq;) {
        seq_table tab;
        int cnt = 0, tiles = 0;
        tab.tile_start[0] = 0;
        while (s0 + cnt < n_seq && cnt < SEQ_CHUNK) {
            const int64_t len = seq_start[s0 + cnt + 1] - seq_start[s0 + cnt];
            tab.seq_start[cnt] = (int)seq_start[s0 + cnt];
            tiles += (int)((len + tile - 1) / tile);
            cnt++;
            tab.tile_start[cnt] = tiles;
        }
        tab.seq_start[cnt] = (int)seq_start[s0 + cnt];
        tab.n_seq = cnt;
        if (tiles > 0) {
            int err = launch(tab, tiles);
            if (err)
                return err;
        }
        s0 += cnt;
    }
    return 0;
}

static bool shape_ok(int64_t n, int64_t n_heads, int64_t head_dim)
{
    return n <= INT_MAX / 2 && n_heads <= 65535 && head_dim <= RLPI_CUDA_MAX_HEAD_DIM;
}

// The window as the kernels take it: 0 when it cannot matter (none, or no
// shorter than the n tokens of all sequences together).
static int kernel_window(int64_t window, int64_t n)
{
    return window > 0 && window < n ? (int)window : 0;
}

template <int D, int BK>
static int fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v, const int64_t *seq_start,
                      int64_t n_seq, int n, int H, int KV, int hd, float scale, int W, cudaStream_t stream)
{
    const size_t smem = fwd_smem_floats<D, BK>() * sizeof(float);
    cudaError_t err = cudaFuncSetAttribute(attn_fwd_kernel<D, BK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess)
        return (int)err;
    return for_each_chunk(seq_start, n_seq, FWD_BQ, [&](const seq_table &tab, int tiles) {
        attn_fwd_kernel<D, BK><<<dim3((unsigned)tiles, (unsigned)H), ATT_THREADS, smem, stream>>>(
            out, lse, q, k, v, tab, n, H, KV, hd, scale, W);
        return rlpi_launch_status();
    });
}

extern "C" int rlpi_cuda_attention_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                                       const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                                       int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window,
                                       void *stream)
{
    if (!shape_ok(n, n_heads, head_dim))
        return RLPI_CUDA_E_UNSUPPORTED;
    const int N = (int)n, H = (int)n_heads, KV = (int)n_kv_heads, hd = (int)head_dim, W = kernel_window(window, n);
    cudaStream_t s = (cudaStream_t)stream;
    if (hd <= 32)
        return fwd_launch<32, 64>(out, lse, q, k, v, seq_start, n_seq, N, H, KV, hd, scale, W, s);
    if (hd <= 64)
        return fwd_launch<64, 64>(out, lse, q, k, v, seq_start, n_seq, N, H, KV, hd, scale, W, s);
    if (hd <= 128)
        return fwd_launch<128, 64>(out, lse, q, k, v, seq_start, n_seq, N, H, KV, hd, scale, W, s);
    return fwd_launch<256, 32>(out, lse, q, k, v, seq_start, n_seq, N, H, KV, hd, scale, W, s);
}

extern "C" size_t rlpi_cuda_attention_bwd_workspace(int64_t n, int64_t n_heads)
{
    return (size_t)(n * n_heads);
}

template <int D, int BK_KV, int BQ_KV, int BQ_Q, int BK_Q>
static int bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *lse, const float *Dv, const int64_t *seq_start, int64_t n_seq,
                      int n, int H, int KV, int hd, float scale, int W, cudaStream_t stream)
{
    const size_t smem_kv = dkdv_smem_floats<D, BK_KV, BQ_KV>() * sizeof(float);
    const size_t smem_q = dq_smem_floats<D, BQ_Q, BK_Q>() * sizeof(float);
    cudaError_t err = cudaFuncSetAttribute(attn_bwd_dkdv_kernel<D, BK_KV, BQ_KV>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kv);
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(attn_bwd_dq_kernel<D, BQ_Q, BK_Q>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_q);
    if (err != cudaSuccess)
        return (int)err;
    int rc = for_each_chunk(seq_start, n_seq, BK_KV, [&](const seq_table &tab, int tiles) {
        attn_bwd_dkdv_kernel<D, BK_KV, BQ_KV><<<dim3((unsigned)tiles, (unsigned)KV), ATT_THREADS, smem_kv, stream>>>(
            dk, dv, dout, q, k, v, lse, Dv, tab, n, H, KV, hd, scale, W);
        return rlpi_launch_status();
    });
    if (rc)
        return rc;
    return for_each_chunk(seq_start, n_seq, BQ_Q, [&](const seq_table &tab, int tiles) {
        attn_bwd_dq_kernel<D, BQ_Q, BK_Q><<<dim3((unsigned)tiles, (unsigned)H), ATT_THREADS, smem_q, stream>>>(
            dq, dout, q, k, v, lse, Dv, tab, n, H, KV, hd, scale, W);
        return rlpi_launch_status();
    });
}

extern "C" int rlpi_cuda_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                       const float *k, const float *v, const float *out, const float *lse,
                                       const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                                       int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window,
                                       float *workspace, void *stream)
{
    if (!shape_ok(n, n_heads, head_dim))
        return RLPI_CUDA_E_UNSUPPORTED;
    const int N = (int)n, H = (int)n_heads, KV = (int)n_kv_heads, hd = (int)head_dim, W = kernel_window(window, n);
    cudaStream_t s = (cudaStream_t)stream;
    float *Dv = workspace; // (H, n)
    attn_bwd_dot_kernel<<<rlpi_blocks(n * n_heads * 32, 256), 256, 0, s>>>(Dv, dout, out, n, H, hd);
    int err = rlpi_launch_status();
    if (err)
        return err;
    if (hd <= 32)
        return bwd_launch<32, 64, 32, 64, 32>(dq, dk, dv, dout, q, k, v, lse, Dv, seq_start, n_seq, N, H, KV, hd,
                                              scale, W, s);
    if (hd <= 64)
        return bwd_launch<64, 64, 32, 64, 32>(dq, dk, dv, dout, q, k, v, lse, Dv, seq_start, n_seq, N, H, KV, hd,
                                              scale, W, s);
    if (hd <= 128)
        return bwd_launch<128, 64, 32, 64, 32>(dq, dk, dv, dout, q, k, v, lse, Dv, seq_start, n_seq, N, H, KV, hd,
                                              scale, W, s);
    return bwd_launch<256, 32, 32, 32, 32>(dq, dk, dv, dout, q, k, v, lse, Dv, seq_start, n_seq, N, H, KV, hd,
                                              scale, W, s);
}
