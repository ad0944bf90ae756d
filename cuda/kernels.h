/* Launch wrappers of the CUDA backend's kernels, callable from C.
 * Each returns a cudaError_t value as int (0 = success) and runs on `stream`. */
#ifndef RLPI_CUDA_KERNELS_H
#define RLPI_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

int rlpi_cuda_fill_f32(float *dst, size_t n, float value, void *stream);

#ifdef __cplusplus
}
#endif

#endif
