/* The backend interface: the one seam between the model/algorithm code and
 * the hardware. Model and algorithm code call only the rlpi_* wrappers
 * below (which validate bounds once, for every backend) and never look at a
 * backend's own types, so the CPU and CUDA backends are interchangeable and
 * tested against each other. A backend fills an rlpi_backend_ops table;
 * slots a backend does not implement are NULL and the wrappers then report
 * RLP_E_UNSUPPORTED.
 *
 * This header is also compiled into the CUDA backend module (a separate
 * shared object loaded at run time), so it must stay free of anything that
 * only the core library defines, except through rlpi_host_api. */
#ifndef RLPI_BACKEND_BACKEND_H
#define RLPI_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_backend rlpi_backend;
typedef struct rlpi_backend_ops rlpi_backend_ops;

/* A block of backend memory. `data` is a host pointer on the CPU backend and
 * a device pointer on CUDA; code outside the backend must not dereference it
 * (use upload/download), except through rlpi_buffer_host() which is NULL
 * where the memory is not host-visible. */
typedef struct rlpi_buffer {
    rlpi_backend *owner;
    void *data;
    size_t nbytes;
} rlpi_buffer;

/* Operand of a (batched) GEMM: a row-major matrix view into a buffer.
 * Offsets, leading dimensions and batch strides are in float elements. */
typedef struct rlpi_matrix {
    const rlpi_buffer *buf;
    size_t offset;      /* first element of batch 0 */
    int64_t ld;         /* leading dimension (row stride), >= columns as stored */
    int64_t stride;     /* elements between consecutive batch items (0 = broadcast) */
} rlpi_matrix;

/* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch), all
 * row-major fp32; op(X) = X or Xᵀ. op(A) is (m, k), op(B) is (k, n), C is
 * (m, n). With trans_a, A is stored (k, m); with trans_b, B is stored (n, k).
 * beta == 0 means C is not read (NaNs in C do not propagate). */
typedef struct rlpi_gemm {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    rlpi_matrix a, b;
    rlpi_matrix c;      /* c.buf is written: must not alias a or b */
    int64_t batch;      /* >= 1 */
} rlpi_gemm;

/* What a backend can do. Every slot receives validated arguments (the
 * wrappers below check NULLs, ranges and buffer bounds first). */
struct rlpi_backend_ops {
    const char *name;
    void (*destroy)(rlpi_backend *be);

    /* buffers */
    int (*buffer_alloc)(rlpi_backend *be, size_t nbytes, rlpi_buffer *buf); /* sets data */
    void (*buffer_free)(rlpi_backend *be, rlpi_buffer *buf);
    int (*buffer_upload)(rlpi_backend *be, rlpi_buffer *dst, size_t off, const void *src, size_t n);
    int (*buffer_download)(rlpi_backend *be, const rlpi_buffer *src, size_t off, void *dst, size_t n);
    int (*buffer_copy)(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src,
                       size_t src_off, size_t n);
    int (*buffer_fill_f32)(rlpi_backend *be, rlpi_buffer *dst, size_t off_elems, size_t n_elems,
                           float value);
    int (*synchronize)(rlpi_backend *be);
    int host_visible;   /* buffers' data pointers are host memory */

    /* dense linear algebra */
    int (*gemm_f32)(rlpi_backend *be, const rlpi_gemm *g);

    /* Later issues append slots here (embedding, RMSNorm, RoPE, attention,
     * SwiGLU, fused logprob head, reductions, AdamW). Append only. */
};

/* Services of the core library that a dynamically loaded backend module
 * may use (it cannot link the core's hidden symbols). */
typedef struct rlpi_host_api {
    uint32_t version;   /* RLPI_HOST_API_VERSION */
    int (*error_set)(int code, const char *fmt, ...);
    void (*log)(const void *logger, int level, const char *fmt, ...);
} rlpi_host_api;
#define RLPI_HOST_API_VERSION 1

struct rlpi_backend {
    const rlpi_backend_ops *ops;
    int kind;            /* rlp_backend_kind */
    int device;
    int n_threads;       /* CPU threads available to the backend */
    char description[160];
    const void *logger;  /* borrowed rlpi_logger of the owning context */
    void *impl;          /* the backend's own state */
};

/* ---- wrappers: the only way other code touches a backend ---- */

int rlpi_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer **out);
void rlpi_buffer_free(rlpi_buffer *buf);
/* Host pointer to the data, or NULL when the memory is device-only. */
void *rlpi_buffer_host(const rlpi_buffer *buf);
int rlpi_buffer_upload(rlpi_buffer *dst, size_t off, const void *src, size_t n);
int rlpi_buffer_download(const rlpi_buffer *src, size_t off, void *dst, size_t n);
int rlpi_buffer_copy(rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src, size_t src_off,
                     size_t n);
int rlpi_buffer_fill_f32(rlpi_buffer *dst, size_t off_elems, size_t n_elems, float value);
int rlpi_backend_synchronize(rlpi_backend *be);

/* Validates shapes, strides and that every element each operand touches
 * lies inside its buffer, then dispatches. */
int rlpi_gemm_f32(rlpi_backend *be, const rlpi_gemm *g);

void rlpi_backend_destroy(rlpi_backend *be);

/* ---- constructors ---- */

/* CPU backend on `n_threads` threads (OpenBLAS + the core thread pool). */
int rlpi_backend_cpu_create(rlpi_backend **out, int n_threads);

/* The CPU backend's thread pool (NULL for other backends): the CPU kernels
 * of later issues run their loops on it. */
struct rlpi_threadpool *rlpi_backend_cpu_pool(rlpi_backend *be);

/* CUDA backend on `device`, loaded from the CUDA module on first use.
 * RLP_E_BACKEND (with the reason) where the module, its libraries or a GPU
 * are missing; never crashes. */
int rlpi_backend_cuda_create(rlpi_backend **out, int device);

/* GPUs visible to the CUDA module (0 where CUDA is not usable); on 0 the
 * reason is left in rlp_error_last(). */
int rlpi_backend_cuda_device_count(void);

#endif
