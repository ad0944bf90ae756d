// Reductions: column sums (RMSNorm's dw, the bias gradient) and the sum of
// squares behind the global gradient norm. Both sum in double and combine
// partial sums in a fixed order through a workspace, never with atomics,
// so their results are the same bits on every run.
#include "common.cuh"

// ---------------------------------------------------------------- columns

#define COL_TILE 32
#define COL_ROWS 8 // threads along rows in a block

static int64_t colsum_splits(int64_t rows)
{
    int64_t s = rows / 64;
    return s < 1 ? 1 : s > 64 ? 64 : s;
}

extern "C" size_t rlpi_cuda_colsum_workspace(int64_t rows, int64_t cols)
{
    return (size_t)(colsum_splits(rows) * cols);
}

// partial[y, c] = Σ over rows [y·chunk, (y+1)·chunk) of the product
__global__ static void colsum_partial_kernel(double *partial, const float *a, const float *b, const float *rs,
                                             int64_t rows, int64_t cols, int64_t chunk)
{
    __shared__ double part[COL_ROWS][COL_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t c = (int64_t)blockIdx.x * COL_TILE + tx;
    const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double s = 0;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += COL_ROWS) {
            double v = (double)a[r * cols + c];
            if (b)
                v *= b[r * cols + c];
            if (rs)
                v *= rs[r];
            s += v;
        }
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < cols) {
        double t = 0;
        for (int k = 0; k < COL_ROWS; k++)
            t += part[k][tx];
        partial[blockIdx.y * cols + c] = t;
    }
}

__global__ static void colsum_finish_kernel(float *dst, const double *partial, int64_t splits, int64_t cols)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        double t = 0;
        for (int64_t y = 0; y < splits; y++)
            t += partial[y * cols + c];
        dst[c] += (float)t;
    }
}

extern "C" int rlpi_cuda_colsum(float *dst_accum, const float *a, const float *b, const float *row_scale, int64_t rows,
                                int64_t cols, double *workspace, void *stream)
{
    const int64_t splits = colsum_splits(rows), chunk = (rows + splits - 1) / splits;
    const int64_t col_blocks = (cols + COL_TILE - 1) / COL_TILE;
    if (col_blocks > 0x7fffffff)
        return RLPI_CUDA_E_UNSUPPORTED;
    cudaStream_t s = (cudaStream_t)stream;
    colsum_partial_kernel<<<dim3((unsigned)col_blocks, (unsigned)splits), dim3(COL_TILE, COL_ROWS), 0, s>>>(
        workspace, a, b, row_scale, rows, cols, chunk);
    int err = rlpi_launch_status();
    if (err)
        return err;
    colsum_finish_kernel<<<rlpi_blocks(cols, 256), 256, 0, s>>>(dst_accum, workspace, splits, cols);
    return rlpi_launch_status();
}

// ---------------------------------------------------------- sum of squares

#define SS_THREADS 256

// a fixed grid of RLPI_CUDA_SUM_SQUARES_PARTIALS blocks, so the partition
// of x depends on n only
__global__ static void sum_squares_partial_kernel(double *partial, const float *x, int64_t n)
{
    __shared__ double scratch[32];
    double s = 0;
    for (int64_t i = blockIdx.x * (int64_t)SS_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * SS_THREADS)
        s += (double)x[i] * x[i];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = s;
}

__global__ static void sum_squares_finish_kernel(double *out, const double *partial, int n_partial)
{
    __shared__ double scratch[32];
    double s = 0;
    for (int i = threadIdx.x; i < n_partial; i += blockDim.x)
        s += partial[i];
    s = block_sum(s, scratch);
    if (threadIdx.x == 0)
        *out = s;
}

extern "C" int rlpi_cuda_sum_squares(double *out_dev, const float *x, int64_t n, double *partials, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    sum_squares_partial_kernel<<<RLPI_CUDA_SUM_SQUARES_PARTIALS, SS_THREADS, 0, s>>>(partials, x, n);
    int err = rlpi_launch_status();
    if (err)
        return err;
    sum_squares_finish_kernel<<<1, 1024, 0, s>>>(out_dev, partials, RLPI_CUDA_SUM_SQUARES_PARTIALS);
    return rlpi_launch_status();
}
