/* A stand-in for cuBLAS (the calls cuda/backend_cuda.c makes) over host
 * memory: a plain column-major reference GEMM, so the row-major to
 * column-major operand swap of the backend is exercised for real. */
#ifndef RLPI_CUDA_EMU_CUBLAS_H
#define RLPI_CUDA_EMU_CUBLAS_H

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct emu_cublas *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
/* the values of CUDA's library_types.h and cublas_api.h */
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long strideA,
                                         const float *B, int ldb, long long strideB, const float *beta, float *C,
                                         int ldc, long long strideC, int batch);
/* The combinations cuda/backend_cuda.c uses, others NOT_SUPPORTED: A and B
 * CUDA_R_16BF with CUBLAS_COMPUTE_32F (bf16 operands, products summed in
 * double here, like the Sgemm stand-in), or CUDA_R_32F with
 * CUBLAS_COMPUTE_32F_FAST_TF32 (operands rounded to TF32, nearest even);
 * C is CUDA_R_32F, alpha and beta floats. */
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda,
                                          long long strideA, const void *B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                                          long long strideC, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo);

#ifdef __cplusplus
}
#endif

#endif
