// Row gather (embedding lookup; also the transformer's gather of selected
// hidden rows) and its scatter-add backward. The backward adds with
// atomicAdd: rows of repeated ids are summed in whatever order the blocks
// run, so dtable differs from run to run in the last bits where an id
// repeats (the CPU backend sums in token order). Ids outside [0, vocab) set
// *bad; the forward writes a zero row for them, the backward skips them.
#include "common.cuh"

// one block per row (grid-stride), threads across the row
__global__ static void embedding_fwd_kernel(float *out, const float *table, const int32_t *ids, int64_t n,
                                            int64_t dim, int64_t vocab, int *bad)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t id = ids[i];
        float *o = out + i * dim;
        if (id < 0 || id >= vocab) {
            if (threadIdx.x == 0)
                *bad = 1;
            for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
                o[c] = 0.0f;
            continue;
        }
        const float *t = table + (int64_t)id * dim;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            o[c] = t[c];
    }
}

__global__ static void embedding_bwd_kernel(float *dtable, const float *dout, const int32_t *ids, int64_t n,
                                            int64_t dim, int64_t vocab, int *bad)
{
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int32_t id = ids[i];
        if (id < 0 || id >= vocab) {
            if (threadIdx.x == 0)
                *bad = 1;
            continue;
        }
        float *dst = dtable + (int64_t)id * dim;
        const float *src = dout + i * dim;
        for (int64_t c = threadIdx.x; c < dim; c += blockDim.x)
            atomicAdd(dst + c, src[c]);
    }
}

static int row_threads(int64_t dim)
{
    return dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
}

extern "C" int rlpi_cuda_embedding_fwd(float *out, const float *table, const int32_t *ids, int64_t n, int64_t dim,
                                       int64_t vocab, int *bad, void *stream)
{
    int threads = row_threads(dim);
    unsigned blocks = (unsigned)(n < (1 << 20) ? n : (1 << 20));
    embedding_fwd_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(out, table, ids, n, dim, vocab, bad);
    return rlpi_launch_status();
}

extern "C" int rlpi_cuda_embedding_bwd(float *dtable, const float *dout, const int32_t *ids, int64_t n, int64_t dim,
                                       int64_t vocab, int *bad, void *stream)
{
    int threads = row_threads(dim);
    unsigned blocks = (unsigned)(n < (1 << 20) ? n : (1 << 20));
    embedding_bwd_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(dtable, dout, ids, n, dim, vocab, bad);
    return rlpi_launch_status();
}
