// Token sampling on the GPU (rlpi_op_sample_rows): one block per draw runs
// lib/backend/sampler.c's algorithm on one row of logits, so that a draw
// picks the token the CPU sampler picks for the same u. The linear passes
// over the vocabulary (scan, weights and their sums, the top-k histogram,
// the gathers of candidates, the inverse CDF in id order) are spread over
// the block; the selection itself (quickselect partitions for top-k and
// top-p, then min-p) replays the CPU code step for step on thread 0 over
// the gathered candidates, because the order in which the CPU's inverse CDF
// walks the kept tokens is the order those partitions leave behind. The
// candidates are few (the histogram and the top-p floor cut them), except
// for near-flat rows at high temperature, where the serial part grows to
// O(vocab) on one thread. Weights are (float)exp((double)x) (within an ulp
// of the CPU's expf), sums in double (order differs from the CPU's
// sequential sums only in rounding). Must not sort the vocabulary.
#include "common.cuh"

#define SAMPLE_THREADS 256
#define TOPK_BUCKETS 1024 // as sampler.c

// ------------------------------------------------- sampler.c, on the device

__device__ static inline float weight(double x)
{
    return x < -104.0 ? 0.0f : (float)exp((double)(float)x);
}

__device__ static inline bool before(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

__device__ static inline void swap_i32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

__device__ static size_t partition(int32_t *a, size_t lo, size_t hi, const float *l)
{
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(l, a[mid], a[lo]))
        swap_i32(&a[mid], &a[lo]);
    if (before(l, a[last], a[lo]))
        swap_i32(&a[last], &a[lo]);
    if (before(l, a[last], a[mid]))
        swap_i32(&a[last], &a[mid]);
    swap_i32(&a[mid], &a[last]);
    int32_t pv = a[last];
    size_t s = lo;
    for (size_t i = lo; i < last; i++) {
        if (before(l, a[i], pv))
            swap_i32(&a[i], &a[s++]);
    }
    swap_i32(&a[s], &a[last]);
    return s;
}

// The CPU sorts with qsort past its round limit; the candidate order is a
// total order, so any correct sort gives the same array: heapsort here.
__device__ static void sift(int32_t *a, size_t root, size_t n, const float *l)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && before(l, a[c], a[c + 1]))
            c++;
        if (!before(l, a[root], a[c]))
            return;
        swap_i32(&a[root], &a[c]);
        root = c;
    }
}

__device__ static void sort_range(int32_t *a, size_t lo, size_t hi, const float *l)
{
    int32_t *b = a + lo;
    size_t n = hi - lo;
    for (size_t i = n / 2; i-- > 0;)
        sift(b, i, n, l);
    for (size_t e = n; e > 1; e--) {
        swap_i32(&b[0], &b[e - 1]);
        sift(b, 0, e - 1, l);
    }
}

__device__ static size_t max_rounds(size_t n)
{
    size_t r = 8;
    while (n > 1) {
        n >>= 1;
        r += 2;
    }
    return r;
}

__device__ static void select_first_k(int32_t *a, size_t n, size_t k, const float *l)
{
    size_t lo = 0, hi = n, t = k - 1, rounds = 0, lim = max_rounds(n);
    while (hi - lo > 1) {
        if (++rounds > lim) {
            sort_range(a, lo, hi, l);
            return;
        }
        size_t r = partition(a, lo, hi, l);
        if (r == t)
            return;
        if (r < t)
            lo = r + 1;
        else
            hi = r;
    }
}

__device__ static size_t apply_top_k(int32_t *a, size_t n, size_t k, const float *l)
{
    if (n <= k)
        return n;
    select_first_k(a, n, k, l);
    float thr = l[a[0]];
    for (size_t i = 1; i < k; i++)
        if (l[a[i]] < thr)
            thr = l[a[i]];
    size_t m = k;
    for (size_t i = k; i < n; i++)
        if (l[a[i]] == thr)
            swap_i32(&a[i], &a[m++]);
    return m;
}

__device__ static double mass(const int32_t *a, size_t lo, size_t hi, const float *w)
{
    double s = 0.0;
    for (size_t i = lo; i < hi; i++)
        s += w[a[i]];
    return s;
}

__device__ static size_t apply_top_p(int32_t *a, size_t m, double target, const float *l, const float *w)
{
    size_t lo = 0, hi = m, rounds = 0, lim = max_rounds(m);
    double acc = 0.0;
    while (hi - lo > 1) {
        if (++rounds > lim) {
            sort_range(a, lo, hi, l);
            for (size_t i = lo; i < hi; i++) {
                acc += w[a[i]];
                if (acc >= target)
                    return i + 1;
            }
            return hi;
        }
        size_t r = partition(a, lo, hi, l);
        double up = mass(a, lo, r, w);
        if (acc + up >= target) {
            hi = r;
            continue;
        }
        acc += up + w[a[r]];
        if (acc >= target)
            return r + 1;
        lo = r + 1;
    }
    return hi > lo ? lo + 1 : (lo > 0 ? lo : 1);
}

__device__ static float top_p_floor(double mass_all, size_t n, float top_p)
{
    if (n == 0)
        return 0.0f;
    double f = (1.0 - (double)top_p) * mass_all / (double)n;
    return nextafterf((float)f, 0.0f);
}

// ------------------------------------------------------ block-wide helpers

struct sample_shared {
    double d[SAMPLE_THREADS];
    int32_t i0[SAMPLE_THREADS], i1[SAMPLE_THREADS], i2[SAMPLE_THREADS];
    float f0[SAMPLE_THREADS], f1[SAMPLE_THREADS];
    int32_t count[TOPK_BUCKETS];
    double sd[4];
    int32_t si[4];
};

// Σ over the block, combined by thread 0 in thread order; every thread
// gets the result.
__device__ static double block_total(double v, sample_shared &sh)
{
    __syncthreads();
    sh.d[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int t = 0; t < SAMPLE_THREADS; t++)
            s += sh.d[t];
        sh.sd[0] = s;
    }
    __syncthreads();
    return sh.sd[0];
}

// The ids i of [0, vocab) with keep(i), in id order, into a[]; returns
// their count. Each thread takes a contiguous chunk; keep must be a pure
// function (it is evaluated twice).
template <typename Keep>
__device__ static int32_t gather(int32_t *a, int64_t vocab, Keep keep, sample_shared &sh)
{
    const int64_t chunk = (vocab + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
    const int64_t b = threadIdx.x * chunk, e = b + chunk < vocab ? b + chunk : vocab;
    int32_t c = 0;
    for (int64_t i = b; i < e; i++)
        c += keep(i) ? 1 : 0;
    __syncthreads();
    sh.i0[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t s = 0;
        for (int t = 0; t < SAMPLE_THREADS; t++) {
            int32_t x = sh.i0[t];
            sh.i0[t] = s;
            s += x;
        }
        sh.si[0] = s;
    }
    __syncthreads();
    int32_t o = sh.i0[threadIdx.x];
    for (int64_t i = b; i < e; i++)
        if (keep(i))
            a[o++] = (int32_t)i;
    __syncthreads();
    return sh.si[0];
}

// ------------------------------------------------------------------ kernel

__global__ static void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(rlpi_cuda_sample_out *out, const rlpi_cuda_sample_in *in, const float *logits, int64_t vocab,
                  float *wbuf, int32_t *ibuf)
{
    __shared__ sample_shared sh;
    const int tid = threadIdx.x;
    const rlpi_cuda_sample_in p = in[blockIdx.x];
    const float *l = logits + (int64_t)p.row * vocab;
    float *w = wbuf + (int64_t)blockIdx.x * vocab;
    int32_t *a = ibuf + (int64_t)blockIdx.x * vocab;
    rlpi_cuda_sample_out *o = out + blockIdx.x;

    // scan: max and argmax (lowest id on ties), smallest finite, finite
    // count, first NaN / +Inf (sampler.c's scan_logits)
    float mx = -INFINITY, mn = INFINITY;
    int32_t am = -1, nf = 0, bad = INT32_MAX;
    for (int64_t i = tid; i < vocab; i += SAMPLE_THREADS) {
        const float v = l[i];
        if (isnan(v) || v == INFINITY) {
            bad = bad < (int32_t)i ? bad : (int32_t)i;
            continue;
        }
        if (v == -INFINITY)
            continue;
        nf++;
        mn = v < mn ? v : mn;
        if (am < 0 || v > mx) {
            mx = v;
            am = (int32_t)i;
        }
    }
    sh.f0[tid] = mx;
    sh.f1[tid] = mn;
    sh.i0[tid] = am;
    sh.i1[tid] = nf;
    sh.i2[tid] = bad;
    __syncthreads();
    if (tid == 0) {
        for (int t = 1; t < SAMPLE_THREADS; t++) {
            if (sh.i0[t] >= 0 && (am < 0 || sh.f0[t] > mx || (sh.f0[t] == mx && sh.i0[t] < am))) {
                mx = sh.f0[t];
                am = sh.i0[t];
            }
            mn = sh.f1[t] < mn ? sh.f1[t] : mn;
            nf += sh.i1[t];
            bad = sh.i2[t] < bad ? sh.i2[t] : bad;
        }
        sh.f0[0] = mx;
        sh.f1[0] = mn;
        sh.i0[0] = am;
        sh.i1[0] = nf;
        sh.i2[0] = bad;
    }
    __syncthreads();
    mx = sh.f0[0];
    mn = sh.f1[0];
    am = sh.i0[0];
    nf = sh.i1[0];
    bad = sh.i2[0];
    if (bad != INT32_MAX || am < 0) { // the same for the whole block
        if (tid == 0) {
            o->token = -1;
            o->logprob = NAN;
            o->status = bad != INT32_MAX ? (isnan(l[bad]) ? RLPI_CUDA_SAMPLE_NAN : RLPI_CUDA_SAMPLE_POS_INF)
                                         : RLPI_CUDA_SAMPLE_ALL_MASKED;
            o->index = bad != INT32_MAX ? bad : -1;
        }
        return;
    }
    const double lmax = (double)mx;

    // log Σ exp(l - lmax), T = 1: greedy and the RAW mode at T != 1
    double log_raw = 0.0;
    if (p.temperature == 0.0f || (p.logprobs_mode == 2 && p.temperature != 1.0f)) {
        double s = 0.0;
        for (int64_t i = tid; i < vocab; i += SAMPLE_THREADS)
            s += weight((double)l[i] - lmax);
        log_raw = log(block_total(s, sh));
    }
    if (p.temperature == 0.0f) {
        if (tid == 0) {
            o->token = am;
            o->logprob = (float)(((double)l[am] - lmax) - log_raw);
            o->status = 0;
            o->index = -1;
        }
        return;
    }

    // weights (the largest is exactly 1) and their sums
    const double t = (double)p.temperature, inv_t = 1.0 / t;
    const float min_w = p.min_p;
    const bool top_k = p.top_k > 0 && p.top_k < nf, top_p = p.top_p < 1.0f;
    double s_all = 0.0;
    for (int64_t i = tid; i < vocab; i += SAMPLE_THREADS) {
        const float wi = weight(((double)l[i] - lmax) * inv_t);
        w[i] = wi;
        s_all += wi;
    }
    s_all = block_total(s_all, sh); // also a barrier: w is complete

    double s_kept;
    int32_t tok = -1;
    const double u = p.u;
    if (!top_k && !top_p) {
        // min-p alone: the kept set is {w >= min_w}, walked in id order;
        // each thread sums its contiguous chunk, thread 0 finds the chunk
        // where the cumulative weight passes u·S and walks from there
        const int64_t chunk = (vocab + SAMPLE_THREADS - 1) / SAMPLE_THREADS;
        const int64_t b = tid * chunk, e = b + chunk < vocab ? b + chunk : vocab;
        double part = 0.0;
        for (int64_t i = b; i < e; i++)
            if (w[i] >= min_w)
                part += w[i];
        __syncthreads();
        sh.d[tid] = part;
        __syncthreads();
        if (tid == 0) {
            double s = 0.0;
            for (int k = 0; k < SAMPLE_THREADS; k++)
                s += sh.d[k];
            const double target = u * s;
            double cum = 0.0;
            int k = 0;
            for (; k < SAMPLE_THREADS - 1 && cum + sh.d[k] <= target; k++)
                cum += sh.d[k];
            int32_t last = -1;
            for (int64_t i = k * chunk; i < vocab && tok < 0; i++) {
                const float wi = w[i];
                if (wi >= min_w && wi > 0.0f) {
                    cum += wi;
                    last = (int32_t)i;
                    if (cum > target)
                        tok = (int32_t)i;
                }
            }
            if (tok < 0) // rounding: the last kept token (sampler.c's fallback)
                for (int64_t i = vocab - 1; i >= 0 && last < 0; i--)
                    if (w[i] >= min_w && w[i] > 0.0f)
                        last = (int32_t)i;
            sh.si[1] = tok >= 0 ? tok : (last >= 0 ? last : am);
            sh.sd[1] = s;
        }
        __syncthreads();
        tok = sh.si[1];
        s_kept = sh.sd[1];
    } else {
        int32_t n;
        if (!top_k) {
            // top-p alone: gather what can survive it (sampler.c's floor)
            const float floor_w = top_p_floor(s_all, (size_t)nf, p.top_p);
            n = gather(a, vocab, [&](int64_t i) { return l[i] != -INFINITY && w[i] >= floor_w; }, sh);
        } else {
            // top-k: the histogram of sampler.c's gather_top_k
            const double lo = (double)mn, span = (double)mx - lo;
            if (!(span > 0.0)) {
                n = gather(a, vocab, [&](int64_t i) { return l[i] != -INFINITY; }, sh);
            } else {
                const double scale = (TOPK_BUCKETS - 1) / span;
                for (int k = tid; k < TOPK_BUCKETS; k += SAMPLE_THREADS)
                    sh.count[k] = 0;
                __syncthreads();
                for (int64_t i = tid; i < vocab; i += SAMPLE_THREADS)
                    if (l[i] != -INFINITY)
                        atomicAdd(&sh.count[(int)(((double)l[i] - lo) * scale)], 1);
                __syncthreads();
                if (tid == 0) {
                    int64_t above = 0;
                    int bk = TOPK_BUCKETS - 1;
                    for (; bk > 0; bk--) {
                        above += sh.count[bk];
                        if (above >= p.top_k)
                            break;
                    }
                    sh.si[2] = bk;
                }
                __syncthreads();
                const int bk = sh.si[2];
                n = gather(
                    a, vocab,
                    [&](int64_t i) { return l[i] != -INFINITY && (int)(((double)l[i] - lo) * scale) >= bk; }, sh);
            }
        }
        if (tid == 0) {
            // sampler.c's prepare() from the gathered candidates on, then
            // its inverse CDF over the kept ids in the order left
            size_t m;
            if (!top_k) {
                m = apply_top_p(a, (size_t)n, (double)p.top_p * s_all, l, w);
            } else {
                m = apply_top_k(a, (size_t)n, (size_t)p.top_k, l);
                if (top_p) {
                    double kept = mass(a, 0, m, w);
                    float floor_w = top_p_floor(kept, m, p.top_p);
                    size_t j = 0;
                    for (size_t i = 0; i < m; i++) {
                        int32_t id = a[i];
                        a[j] = id;
                        j += (size_t)(w[id] >= floor_w);
                    }
                    m = apply_top_p(a, j, (double)p.top_p * kept, l, w);
                }
            }
            size_t j = 0;
            double s = 0.0;
            for (size_t i = 0; i < m; i++) {
                if (w[a[i]] >= min_w) {
                    s += w[a[i]];
                    a[j++] = a[i];
                }
            }
            const double target = u * s;
            double cum = 0.0;
            int32_t last = -1;
            for (size_t i = 0; i < j; i++) {
                const float wi = w[a[i]];
                if (wi > 0.0f) {
                    cum += wi;
                    last = a[i];
                    if (cum > target) {
                        tok = a[i];
                        break;
                    }
                }
            }
            sh.si[1] = tok >= 0 ? tok : (last >= 0 ? last : am);
            sh.sd[1] = s;
        }
        __syncthreads();
        tok = sh.si[1];
        s_kept = sh.sd[1];
    }
    if (tid == 0) {
        const double z = ((double)l[tok] - lmax) / t;
        double lp;
        if (p.logprobs_mode == 0)
            lp = z - log(s_kept);
        else if (p.logprobs_mode == 1 || p.temperature == 1.0f)
            lp = z - log(s_all);
        else
            lp = ((double)l[tok] - lmax) - log_raw;
        o->token = tok;
        o->logprob = (float)lp;
        o->status = 0;
        o->index = -1;
    }
}

size_t rlpi_cuda_sample_workspace(int64_t n, int64_t vocab)
{
    return (size_t)n * (size_t)vocab * (sizeof(float) + sizeof(int32_t));
}

int rlpi_cuda_sample_rows(rlpi_cuda_sample_out *out, const rlpi_cuda_sample_in *in, const float *logits, int64_t n,
                          int64_t vocab, void *workspace, void *stream)
{
    if (n <= 0)
        return 0;
    if (n > INT32_MAX)
        return RLPI_CUDA_E_UNSUPPORTED;
    float *w = (float *)workspace;
    int32_t *idx = (int32_t *)(w + (size_t)n * (size_t)vocab);
    sample_kernel<<<(unsigned)n, SAMPLE_THREADS, 0, (cudaStream_t)stream>>>(out, in, logits, vocab, w, idx);
    return rlpi_launch_status();
}
