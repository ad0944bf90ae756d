/* What the module's other C files (nccl.c) may use of a CUDA backend
 * created by backend_cuda.c, without seeing its state. */
#ifndef RLPI_CUDA_MODULE_H
#define RLPI_CUDA_MODULE_H

#include "../lib/backend/backend.h"

#include <cuda_runtime.h>

/* Takes the backend's enqueue lock, makes its device current on this
 * thread and returns its stream; release with rlpi_cuda_unlock(). */
cudaStream_t rlpi_cuda_lock_stream(rlpi_backend *be);
void rlpi_cuda_unlock(rlpi_backend *be);

#endif
