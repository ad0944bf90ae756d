// A CPU emulator for the CUDA backend's kernels, so that machines without
// a GPU (this project's CI) still run cuda/*.cu and cuda/backend_cuda.c
// against the CPU backend. It checks the kernels' logic: indexing, masks,
// tiling, reductions, barriers and warp shuffles. It cannot check what only
// hardware shows: speed, memory-model races between blocks, the real
// cuBLAS, real launch limits beyond the ones checked below.
//
// How: translate.py turns each launch into emu_launch(); a launch runs its
// blocks one after another, and the threads of a block as fibers
// (ucontext) on one OS thread. A fiber runs until it reaches
// __syncthreads() or a warp shuffle and then hands over to the next; a block barrier opens
// when every live thread of the block waits at one, a shuffle round when
// all 32 lanes of the warp wait at one. A barrier that can never open (a
// __syncthreads some threads skip, a shuffle with lanes missing) is
// reported and aborts: on a GPU it would hang or be undefined. Launch
// configurations are checked against the limits of sm_80 (the smaller of
// the two targets): at most 1024 threads, grid y/z below 65536, dynamic
// shared memory above 48 KiB only after cudaFuncSetAttribute, and never
// above 163 KiB (plus the static shared memory, which is not counted).
// Device memory is host memory; streams and copies are synchronous.
#include "cublas_v2.h"
#include "cuda_runtime.h"

#include <map>
#include <vector>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;

namespace {

enum state { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct fiber {
    ucontext_t ctx;
    state st;
    dim3 idx;
    uint64_t slot_in;   // this lane's value in the current shuffle round
    int from;           // the lane it reads
    uint64_t *slot_out;
};

const size_t STACK_BYTES = 32 * 1024; // kernels keep little on the stack; ASan clears a whole stack per switch
const size_t GUARD_PAGE = 4096;
const size_t MAX_THREADS = 1024;
const int SMEM_DEFAULT = 48 * 1024, SMEM_MAX = 163 * 1024; // sm_80

ucontext_t scheduler;
std::vector<fiber> fibers;
std::vector<char *> stacks;
int current = -1;
void (*run_fn)(void *);
void *run_closure;
std::vector<char> dyn_smem;
std::map<const void *, int> smem_attr;
cudaError_t last_error = cudaSuccess;

void fail(const char *why)
{
    fprintf(stderr, "cuda emulator: %s (block %u,%u,%u)\n", why, emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z);
    abort();
}

// The next fiber after `from` (cyclically) that can run, or -1.
int next_running(int from)
{
    int n = (int)fibers.size();
    for (int k = 1; k <= n; k++) {
        int t = (from + k) % n;
        if (fibers[t].st == RUNNING)
            return t;
    }
    return -1;
}

// Leaves fiber `current` (already marked with its new state) for the next
// runnable fiber directly, or for the scheduler when none is left: one
// switch per yield instead of two.
void switch_away(bool finished)
{
    int prev = current, next = next_running(prev);
    if (next >= 0) {
        current = next;
        emu_threadIdx = fibers[next].idx;
        if (finished)
            setcontext(&fibers[next].ctx);
        else
            swapcontext(&fibers[prev].ctx, &fibers[next].ctx);
    } else {
        current = -1;
        if (finished)
            setcontext(&scheduler);
        else
            swapcontext(&fibers[prev].ctx, &scheduler);
    }
}

void entry()
{
    run_fn(run_closure);
    fibers[current].st = DONE;
    switch_away(true); // never returns
}

void yield(state s)
{
    fibers[current].st = s;
    switch_away(false);
}

// Runs the threads of one block to completion.
void run_block(unsigned n_threads)
{
    while (stacks.size() < n_threads) {
        // a stack with an inaccessible page below it: an overflow faults
        void *p = mmap(NULL, STACK_BYTES + GUARD_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED || mprotect(p, GUARD_PAGE, PROT_NONE) != 0)
            fail("cannot map a fiber stack");
        stacks.push_back((char *)p + GUARD_PAGE);
    }
    fibers.assign(n_threads, fiber());
    for (unsigned t = 0; t < n_threads; t++) {
        fiber &f = fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks[t];
        f.ctx.uc_stack.ss_size = STACK_BYTES;
        f.ctx.uc_link = NULL; // entry() never returns
        makecontext(&f.ctx, entry, 0);
        f.st = RUNNING;
        f.idx = dim3(t % emu_blockDim.x, t / emu_blockDim.x % emu_blockDim.y, t / (emu_blockDim.x * emu_blockDim.y));
    }
    for (;;) {
        // run fibers until none can: they hand over to each other and come
        // back here only when all of them wait or are done
        current = -1;
        int first = next_running((int)n_threads - 1);
        if (first >= 0) {
            current = first;
            emu_threadIdx = fibers[first].idx;
            swapcontext(&scheduler, &fibers[first].ctx);
        }
        current = -1;
        bool released = false, all_done = true, all_block = true;
        for (unsigned w = 0; w * 32 < n_threads; w++) { // a shuffle round opens when all lanes wait at it
            unsigned lo = w * 32, hi = lo + 32 < n_threads ? lo + 32 : n_threads;
            bool all = true;
            for (unsigned t = lo; t < hi; t++)
                all &= fibers[t].st == AT_WARP_BARRIER;
            if (!all)
                continue;
            if (hi - lo != 32)
                fail("warp shuffle in a partial warp");
            for (unsigned t = lo; t < hi; t++) { // exchange, then let them read
                *fibers[t].slot_out = fibers[lo + (unsigned)fibers[t].from].slot_in;
                fibers[t].st = RUNNING;
            }
            released = true;
        }
        if (released)
            continue;
        for (unsigned t = 0; t < n_threads; t++) {
            all_done &= fibers[t].st == DONE;
            all_block &= fibers[t].st == DONE || fibers[t].st == AT_BLOCK_BARRIER;
        }
        if (all_done)
            return;
        if (all_block) {
            for (unsigned t = 0; t < n_threads; t++)
                if (fibers[t].st == AT_BLOCK_BARRIER)
                    fibers[t].st = RUNNING;
            continue;
        }
        fail("deadlock: threads wait at barriers that cannot open (divergent __syncthreads or shuffle)");
    }
}

} // namespace

void __syncthreads(void)
{
    if (current < 0)
        fail("__syncthreads outside a kernel");
    yield(AT_BLOCK_BARRIER);
}

void emu_warp_exchange(uint64_t value, int lane_from, uint64_t *out)
{
    if (current < 0)
        fail("shuffle outside a kernel");
    if (lane_from < 0 || lane_from > 31)
        fail("shuffle source lane outside the warp");
    fiber &f = fibers[current];
    f.slot_in = value;
    f.from = lane_from;
    f.slot_out = out;
    yield(AT_WARP_BARRIER);
}

void *emu_dynamic_smem(void)
{
    return dyn_smem.data();
}

cudaError_t emu_set_max_dynamic_smem(const void *kernel, int bytes)
{
    if (bytes < 0 || bytes > SMEM_MAX)
        return last_error = cudaErrorInvalidValue;
    smem_attr[kernel] = bytes;
    return cudaSuccess;
}

void emu_launch(dim3 grid, dim3 block, size_t smem, const void *kernel, void (*run)(void *), void *closure)
{
    size_t threads = (size_t)block.x * block.y * block.z;
    auto it = smem_attr.find(kernel);
    int limit = it == smem_attr.end() ? SMEM_DEFAULT : it->second;
    if (threads == 0 || threads > MAX_THREADS || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535 || grid.x > 0x7fffffffu) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    if (smem > (size_t)limit) {
        last_error = cudaErrorInvalidValue;
        return;
    }
    dyn_smem.assign(smem + 16, (char)0xff); // NaN bytes: a read before the write shows in the results
    run_fn = run;
    run_closure = closure;
    emu_gridDim = grid;
    emu_blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                emu_blockIdx = dim3(x, y, z);
                run_block((unsigned)threads);
            }
}

/* ------------------------------------------------------------- runtime */

extern "C" {

const char *cudaGetErrorString(cudaError_t err)
{
    return err == cudaSuccess ? "no error" : "emulated CUDA error";
}

const char *cudaGetErrorName(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    default: return "cudaErrorUnknown";
    }
}

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    (void)device;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "CPU emulator of the CUDA kernels");
    prop->major = 8;
    prop->totalGlobalMem = (size_t)1 << 30;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = malloc(n ? n : 1);
    if (!*p)
        return cudaErrorMemoryAllocation;
    memset(*p, 0xff, n); // NaN bytes, as uninitialised device memory may hold anything
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags)
{
    (void)flags;
    return cudaMalloc(p, n);
}

cudaError_t cudaFreeHost(void *p)
{
    return cudaFree(p);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)kind;
    (void)s;
    memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)kind;
    (void)s;
    if (height > 1 && (dpitch < width || spitch < width))
        return cudaErrorInvalidValue; /* what the runtime answers for a pitch below the width */
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t n)
{
    memset(p, value, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
    (void)s;
    return cudaMemset(p, value, n);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    *s = (cudaStream_t)&scheduler; // any non-NULL token
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    (void)s;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

/* --------------------------------------------------------------- cuBLAS */

struct emu_cublas {
    int unused;
};

cublasStatus_t cublasCreate(cublasHandle_t *h)
{
    *h = (cublasHandle_t)calloc(1, sizeof(emu_cublas));
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
    (void)h;
    (void)s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    (void)h;
    (void)mode;
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

namespace {

// Column-major C (m, n) = alpha·op(A)·op(B) + beta·C, C not read when
// beta == 0, with cuBLAS's argument checks; `load(p, i)` reads element i
// of an operand as the GEMM's products see it.
template <typename T, typename L>
cublasStatus_t gemm_ref(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha, const T *A,
                        int lda, long long sa, const T *B, int ldb, long long sb, float beta, float *C, int ldc,
                        long long sc, int batch, L load)
{
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int b = 0; b < batch; b++) {
        const T *a = A + b * sa, *bb = B + b * sb;
        float *c = C + b * sc;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int l = 0; l < k; l++) {
                    float x = load(a, ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda);
                    float y = load(bb, tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);
                    s += (double)x * y;
                }
                float *x = c + i + (long long)j * ldc;
                *x = (float)((double)alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *x));
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

// fp32 rounded to TF32 (10 explicit significand bits), nearest even
float round_tf32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) < 0x7f800000u)
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&f, &u, sizeof f);
    return f;
}

} // namespace

extern "C" {

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long sa,
                                         const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                                         long long sc, int batch)
{
    (void)h;
    return gemm_ref(ta, tb, m, n, k, *alpha, A, lda, sa, B, ldb, sb, *beta, C, ldc, sc, batch,
                    [](const float *p, long long i) { return p[i]; });
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda,
                                          long long sa, const void *B, cudaDataType_t Btype, int ldb, long long sb,
                                          const void *beta, void *C, cudaDataType_t Ctype, int ldc, long long sc,
                                          int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
    (void)h;
    (void)algo;
    float al = *(const float *)alpha, be = *(const float *)beta;
    if (Ctype != CUDA_R_32F || Atype != Btype)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (Atype == CUDA_R_16BF && compute == CUBLAS_COMPUTE_32F)
        return gemm_ref(ta, tb, m, n, k, al, (const uint16_t *)A, lda, sa, (const uint16_t *)B, ldb, sb, be,
                        (float *)C, ldc, sc, batch, [](const uint16_t *p, long long i) {
                            uint32_t u = (uint32_t)p[i] << 16;
                            float f;
                            memcpy(&f, &u, sizeof f);
                            return f;
                        });
    if (Atype == CUDA_R_32F && compute == CUBLAS_COMPUTE_32F_FAST_TF32)
        return gemm_ref(ta, tb, m, n, k, al, (const float *)A, lda, sa, (const float *)B, ldb, sb, be, (float *)C,
                        ldc, sc, batch, [](const float *p, long long i) { return round_tf32(p[i]); });
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    return cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

} // extern "C"
