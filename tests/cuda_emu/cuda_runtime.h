/* A stand-in for the CUDA runtime that runs the CUDA backend's own kernel
 * sources on the CPU, for machines without a GPU (tests/cuda_emu/emu.cpp
 * explains how). Only what cuda/ uses is here. Device memory is host
 * memory, streams are synchronous, and each thread of a block is a fiber
 * with real __syncthreads and warp-shuffle semantics. This header is seen
 * by backend_cuda.c (C) and by the translated kernels (C++). */
#ifndef RLPI_CUDA_EMU_RUNTIME_H
#define RLPI_CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorLaunchFailure = 719,
};
typedef void *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
#define cudaStreamNonBlocking 1u
#define cudaHostAllocDefault 0u
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    size_t totalGlobalMem;
};

const char *cudaGetErrorString(cudaError_t err);
const char *cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaMalloc(void **p, size_t n);
cudaError_t cudaFree(void *p);
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t n);
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);

#ifdef __cplusplus
}

/* ------------------------------------------------ device side (C++ only) */

#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static /* one copy for the block; blocks run one at a time */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* the running fiber's coordinates */
extern dim3 emu_threadIdx, emu_blockIdx, emu_blockDim, emu_gridDim;
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define blockDim emu_blockDim
#define gridDim emu_gridDim

void __syncthreads(void);
void emu_warp_exchange(uint64_t value, int lane_from, uint64_t *out); /* one shuffle round of the warp */
void *emu_dynamic_smem(void);
cudaError_t emu_set_max_dynamic_smem(const void *kernel, int bytes);
void emu_launch(dim3 grid, dim3 block, size_t smem, const void *kernel, void (*run)(void *), void *closure);

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    (void)mask;
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
    uint64_t in = 0, out;
    __builtin_memcpy(&in, &v, sizeof v);
    unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    emu_warp_exchange(in, (int)((lin & 31u) ^ (unsigned)lane_mask), &out);
    T r;
    __builtin_memcpy(&r, &out, sizeof r);
    return r;
}

template <typename K>
cudaError_t cudaFuncSetAttribute(K *kernel, cudaFuncAttribute attr, int value)
{
    return attr == cudaFuncAttributeMaxDynamicSharedMemorySize ? emu_set_max_dynamic_smem((const void *)kernel, value)
                                                                : cudaErrorInvalidValue;
}

/* kernel<<<g, b, smem, s>>>(args) is rewritten by translate.py into
 * emu_launch_closure(dim3(g), dim3(b), smem, &kernel, [&] { kernel(args); }) */
template <typename F>
void emu_launch_closure(dim3 grid, dim3 block, size_t smem, const void *kernel, F &&f)
{
    emu_launch(grid, block, smem, kernel, [](void *c) { (*(typename std::remove_reference<F>::type *)c)(); },
               (void *)&f);
}

/* arithmetic: explicitly rounded operations are the plain ones on the host
 * (volatile stops contraction into FMA) */
static inline float emu_round(float x)
{
    volatile float v = x;
    return v;
}
static inline float __fadd_rn(float a, float b) { return emu_round(a + b); }
static inline float __fsub_rn(float a, float b) { return emu_round(a - b); }
static inline float __fmul_rn(float a, float b) { return emu_round(a * b); }
static inline float __fdiv_rn(float a, float b) { return emu_round(a / b); }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline float atomicAdd(float *p, float v)
{
    float old = *p; /* fibers switch only at barriers: this is atomic */
    *p = old + v;
    return old;
}
static inline int atomicAdd(int *p, int v)
{
    int old = *p;
    *p = old + v;
    return old;
}
#endif

#endif
