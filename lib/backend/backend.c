/* Backend-independent wrappers: argument and bounds validation happens here,
 * once, so no backend can be driven out of its buffers by a caller's bad
 * shape. Nothing here knows about a particular backend. */
#include "backend/backend.h"

#include "core/checked.h"
#include "core/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int rlpi_buffer_alloc(rlpi_backend *be, size_t nbytes, rlpi_buffer **out)
{
    if (!be || !out)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer alloc: NULL backend or out");
    rlpi_buffer *buf = calloc(1, sizeof *buf);
    if (!buf)
        return rlpi_error_set(RLP_E_NOMEM, "buffer alloc: out of memory");
    buf->owner = be;
    buf->nbytes = nbytes;
    int rc = be->ops->buffer_alloc(be, nbytes, buf);
    if (rc != RLP_OK) {
        free(buf);
        return rc;
    }
    *out = buf;
    return RLP_OK;
}

void rlpi_buffer_free(rlpi_buffer *buf)
{
    if (!buf)
        return;
    buf->owner->ops->buffer_free(buf->owner, buf);
    free(buf);
}

void *rlpi_buffer_host(const rlpi_buffer *buf)
{
    return buf && buf->owner->ops->host_visible ? buf->data : NULL;
}

void rlpi_buffer_discard(rlpi_buffer *buf)
{
    unsigned char *p = rlpi_buffer_host(buf);
    long page = sysconf(_SC_PAGESIZE);
    if (!p || page <= 0 || buf->nbytes < (size_t)page)
        return;
    /* only whole pages inside the buffer: its neighbours keep theirs */
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + buf->nbytes) & ~(uintptr_t)(page - 1);
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED); /* advisory: a failure only keeps the pages */
}

int rlpi_buffer_zero(rlpi_buffer *buf)
{
    if (!buf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer zero: NULL buffer");
    unsigned char *p = rlpi_buffer_host(buf);
    long page = sysconf(_SC_PAGESIZE);
    if (!p || page <= 0 || buf->nbytes < 2 * (size_t)page) {
        if (p) {
            memset(p, 0, buf->nbytes);
            return RLP_OK;
        }
        return buf->nbytes % 4 ? rlpi_error_set(RLP_E_INVALID_ARG, "buffer zero: %zu bytes", buf->nbytes)
                               : rlpi_buffer_fill_f32(buf, 0, buf->nbytes / 4, 0.0f);
    }
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + buf->nbytes) & ~(uintptr_t)(page - 1);
    memset(p, 0, lo - (uintptr_t)p);
    memset((void *)hi, 0, (uintptr_t)p + buf->nbytes - hi);
    /* private anonymous memory reads as zeros after MADV_DONTNEED; should
     * the call fail, the pages are written instead */
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0)
        memset((void *)lo, 0, hi - lo);
    return RLP_OK;
}

static int check_range(const rlpi_buffer *buf, size_t off, size_t n, const char *what)
{
    size_t end;
    if (!buf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL buffer", what);
    if (!rlpi_add_size(&end, off, n) || end > buf->nbytes)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: range [%zu, %zu+%zu) exceeds buffer of %zu bytes", what, off,
                              off, n, buf->nbytes);
    return RLP_OK;
}

int rlpi_buffer_upload(rlpi_buffer *dst, size_t off, const void *src, size_t n)
{
    int rc = check_range(dst, off, n, "buffer upload");
    if (rc || n == 0)
        return rc;
    if (!src)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer upload: NULL source");
    return dst->owner->ops->buffer_upload(dst->owner, dst, off, src, n);
}

int rlpi_buffer_download(const rlpi_buffer *src, size_t off, void *dst, size_t n)
{
    int rc = check_range(src, off, n, "buffer download");
    if (rc || n == 0)
        return rc;
    if (!dst)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer download: NULL destination");
    return src->owner->ops->buffer_download(src->owner, src, off, dst, n);
}

int rlpi_buffer_copy(rlpi_buffer *dst, size_t dst_off, const rlpi_buffer *src, size_t src_off,
                     size_t n)
{
    int rc = check_range(dst, dst_off, n, "buffer copy (destination)");
    if (!rc)
        rc = check_range(src, src_off, n, "buffer copy (source)");
    if (rc || n == 0)
        return rc;
    if (dst->owner != src->owner)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer copy: buffers of different backends");
    return dst->owner->ops->buffer_copy(dst->owner, dst, dst_off, src, src_off, n);
}

/* The end of the byte span that `rows` rows of `width` bytes, `pitch`
 * apart from `off`, occupy (it starts at off); false on overflow. */
static bool span_2d(size_t off, size_t pitch, size_t width, size_t rows, size_t *end)
{
    size_t last;
    return rlpi_mul_size(&last, pitch, rows - 1) && rlpi_add_size(&last, last, off) &&
           rlpi_add_size(end, last, width);
}

int rlpi_buffer_copy_2d(rlpi_buffer *dst, size_t dst_off, size_t dst_pitch, const rlpi_buffer *src, size_t src_off,
                        size_t src_pitch, size_t width, size_t rows)
{
    if (!dst || !src)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer copy 2d: NULL buffer");
    if (rows == 0 || width == 0)
        return RLP_OK;
    if (rows > 1 && (dst_pitch < width || src_pitch < width))
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer copy 2d: rows of %zu bytes overlap (pitches %zu, %zu)",
                              width, dst_pitch, src_pitch);
    size_t dst_end, src_end;
    if (!span_2d(dst_off, dst_pitch, width, rows, &dst_end) || !span_2d(src_off, src_pitch, width, rows, &src_end))
        return rlpi_error_set(RLP_E_OVERFLOW, "buffer copy 2d: size overflow");
    int rc = check_range(dst, dst_off, dst_end - dst_off, "buffer copy 2d (destination)");
    if (!rc)
        rc = check_range(src, src_off, src_end - src_off, "buffer copy 2d (source)");
    if (rc)
        return rc;
    if (dst->owner != src->owner)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer copy 2d: buffers of different backends");
    if (dst == src && dst_off < src_end && src_off < dst_end)
        return rlpi_error_set(RLP_E_INVALID_ARG, "buffer copy 2d: source and destination overlap");
    const rlpi_backend_ops *ops = dst->owner->ops;
    if (ops->buffer_copy_2d)
        return ops->buffer_copy_2d(dst->owner, dst, dst_off, dst_pitch, src, src_off, src_pitch, width, rows);
    for (size_t r = 0; r < rows && !rc; r++)
        rc = ops->buffer_copy(dst->owner, dst, dst_off + r * dst_pitch, src, src_off + r * src_pitch, width);
    return rc;
}

int rlpi_buffer_fill_f32(rlpi_buffer *dst, size_t off_elems, size_t n_elems, float value)
{
    size_t off, n;
    if (!rlpi_mul_size(&off, off_elems, sizeof(float)) || !rlpi_mul_size(&n, n_elems, sizeof(float)))
        return rlpi_error_set(RLP_E_OVERFLOW, "buffer fill: size overflow");
    int rc = check_range(dst, off, n, "buffer fill");
    if (rc || n_elems == 0)
        return rc;
    return dst->owner->ops->buffer_fill_f32(dst->owner, dst, off_elems, n_elems, value);
}

int rlpi_backend_synchronize(rlpi_backend *be)
{
    if (!be)
        return rlpi_error_set(RLP_E_INVALID_ARG, "synchronize: NULL backend");
    return be->ops->synchronize ? be->ops->synchronize(be) : RLP_OK;
}

/* Checks that a (rows, cols) row-major operand repeated `batch` times with
 * its ld/stride lies inside its buffer; stores the element span it touches
 * in [*first, *last] for the aliasing check. */
static int check_matrix(const rlpi_backend *be, const rlpi_matrix *x, int64_t rows, int64_t cols,
                        int64_t batch, char name, uint64_t *first, uint64_t *last_out)
{
    *first = 1;
    *last_out = 0; /* empty span */
    if (!x->buf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: operand %c has no buffer", name);
    if (x->buf->owner != be)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: operand %c belongs to another backend", name);
    if (x->ld < (cols > 0 ? cols : 1) || x->stride < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: operand %c has ld %lld < %lld columns",
                              name, (long long)x->ld, (long long)cols);
    if (rows == 0 || cols == 0)
        return RLP_OK;
    /* index of the last element touched: offset + (batch-1)*stride + (rows-1)*ld + cols-1 */
    uint64_t last = x->offset, t;
    if (!rlpi_mul_u64(&t, (uint64_t)(batch - 1), (uint64_t)x->stride) || !rlpi_add_u64(&last, last, t) ||
        !rlpi_mul_u64(&t, (uint64_t)(rows - 1), (uint64_t)x->ld) || !rlpi_add_u64(&last, last, t) ||
        !rlpi_add_u64(&last, last, (uint64_t)(cols - 1)))
        return rlpi_error_set(RLP_E_OVERFLOW, "gemm: operand %c index overflows", name);
    if (last >= x->buf->nbytes / sizeof(float))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "gemm: operand %c needs element %llu but its buffer holds %zu floats",
                              name, (unsigned long long)last, x->buf->nbytes / sizeof(float));
    *first = x->offset;
    *last_out = last;
    return RLP_OK;
}

static _Thread_local int in_generation;

int rlpi_gemm_generation_begin(void)
{
    int previous = in_generation;
    in_generation = 1;
    return previous;
}

void rlpi_gemm_generation_end(int previous)
{
    in_generation = previous;
}

int rlpi_gemm_in_generation(void)
{
    return in_generation;
}

int rlpi_gemm_f32(rlpi_backend *be, const rlpi_gemm *g)
{
    if (!be || !g)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: NULL backend or arguments");
    if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: bad shape m=%lld n=%lld k=%lld batch=%lld",
                              (long long)g->m, (long long)g->n, (long long)g->k,
                              (long long)g->batch);
    if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "gemm: dimension above 2^31-1");
    int rc;
    uint64_t a0, a1, b0, b1, c0, c1;
    if ((rc = check_matrix(be, &g->a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->batch,
                           'A', &a0, &a1)) ||
        (rc = check_matrix(be, &g->b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->batch,
                           'B', &b0, &b1)) ||
        (rc = check_matrix(be, &g->c, g->m, g->n, g->batch, 'C', &c0, &c1)))
        return rc;
    /* C may share a buffer (an arena) with A or B, but not overlap them */
    if ((g->c.buf == g->a.buf && c0 <= a1 && a0 <= c1) || (g->c.buf == g->b.buf && c0 <= b1 && b0 <= c1))
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: C overlaps an input operand");
    if (g->c.stride == 0 && g->batch > 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "gemm: C cannot be broadcast across a batch");
    if (g->m == 0 || g->n == 0)
        return RLP_OK;
    if (!be->ops->gemm_f32)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "gemm: not implemented by the %s backend", be->ops->name);
    return be->ops->gemm_f32(be, g);
}

void rlpi_backend_destroy(rlpi_backend *be)
{
    if (be && be->ops && be->ops->destroy)
        be->ops->destroy(be);
}
