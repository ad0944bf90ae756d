/* rlpi_op_sample_rows on the CPU backend: the wrapper's argument checks
 * (NULLs, row indices, u, params, buffer bounds, the owning backend), and
 * that the CPU slot is rlpi_sample() row by row, bit for bit, through the
 * row indirection and on a multi-threaded pool, with a failing row
 * reported by its draw and row. (The CUDA kernel is compared against this
 * slot in test_cuda_ops.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "rlpost.h"
#include "backend/sampler.h"

#include <math.h>
#include <string.h>

enum { ROWS = 6, V = 1000, N = 24 };

typedef struct fx {
    rlpi_backend *be;
    rlpi_buffer *buf;
    float l[ROWS * V];
} fx;

static int setup(void **state)
{
    static fx f;
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    for (int i = 0; i < ROWS * V; i++)
        f.l[i] = (float)(4.0 * rlpi_rng_normal(&rng));
    f.l[2 * V + 5] = -INFINITY;
    assert_int_equal(rlpi_backend_cpu_create(&f.be, 3), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(f.be, sizeof f.l, &f.buf), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(f.buf, 0, f.l, sizeof f.l), RLP_OK);
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    rlpi_buffer_free(f->buf);
    rlpi_backend_destroy(f->be);
    return 0;
}

static void same_as_host_sampler(void **state)
{
    fx *f = *state;
    int32_t rows[N], tok[N];
    float lp[N];
    double u[N];
    rlpi_sampler_params p[N];
    for (int i = 0; i < N; i++) {
        rows[i] = (i * 5) % ROWS;
        u[i] = rlpi_sample_uniform(3, (uint64_t)i, 9);
        p[i] = (rlpi_sampler_params){i % 4 == 0 ? 0.0f : 0.6f + 0.1f * (float)(i % 7), (i % 3) * 20, i % 2 ? 0.9f : 1.0f,
                                     i % 5 == 0 ? 0.05f : 0.0f, i % 3};
    }
    assert_int_equal(rlpi_op_sample_rows(f->be, tok, lp, RLPI_REF(f->buf, 0), ROWS, rows, N, V, p, u), RLP_OK);
    rlpi_sampler_scratch scr = {0};
    for (int i = 0; i < N; i++) {
        int32_t t;
        float l;
        assert_int_equal(rlpi_sample(f->l + rows[i] * V, V, &p[i], u[i], &scr, &t, &l), RLP_OK);
        assert_int_equal(tok[i], t);
        assert_memory_equal(&lp[i], &l, sizeof l); /* bit for bit */
    }
    /* rows NULL: draw i from row i, here from the buffer's second row on */
    assert_int_equal(rlpi_op_sample_rows(f->be, tok, lp, RLPI_REF(f->buf, V), ROWS - 1, NULL, 3, V, p, u), RLP_OK);
    for (int i = 0; i < 3; i++) {
        int32_t t;
        float l;
        assert_int_equal(rlpi_sample(f->l + (i + 1) * V, V, &p[i], u[i], &scr, &t, &l), RLP_OK);
        assert_int_equal(tok[i], t);
        assert_memory_equal(&lp[i], &l, sizeof l);
    }
    rlpi_sampler_scratch_free(&scr);
}

static void validation(void **state)
{
    fx *f = *state;
    int32_t rows[2] = {0, 1}, tok[2];
    float lp[2];
    double u[2] = {0.5, 0.25};
    rlpi_sampler_params p[2] = {{1.0f, 0, 1.0f, 0.0f, 0}, {1.0f, 0, 1.0f, 0.0f, 0}};
    rlpi_ref L = RLPI_REF(f->buf, 0);
#define BAD(call, what)                                                 \
    do {                                                                \
        assert_int_equal((call), RLP_E_INVALID_ARG);                    \
        assert_non_null(strstr(rlp_error_last(), what));                \
    } while (0)
    assert_int_equal(rlpi_op_sample_rows(f->be, NULL, NULL, L, ROWS, NULL, 0, V, NULL, NULL), RLP_OK); /* n = 0 */
    BAD(rlpi_op_sample_rows(NULL, tok, lp, L, ROWS, rows, 2, V, p, u), "NULL backend");
    BAD(rlpi_op_sample_rows(f->be, NULL, lp, L, ROWS, rows, 2, V, p, u), "NULL tokens");
    BAD(rlpi_op_sample_rows(f->be, tok, NULL, L, ROWS, rows, 2, V, p, u), "NULL tokens");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, NULL, u), "NULL tokens");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, NULL), "NULL tokens");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, -1, V, p, u), "bad dimensions");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, 0, p, u), "bad dimensions");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, (int64_t)INT32_MAX + 1, p, u), "bad dimensions");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, 1, NULL, 2, V, p, u), "2 draws from 1 rows");
    rows[1] = ROWS;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "rows[1] is 6");
    rows[1] = -1;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "rows[1] is -1");
    rows[1] = 1;
    u[1] = 1.0;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "u[1] is 1");
    u[1] = NAN;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "u[1] is nan");
    u[1] = 0.25;
    p[1].top_p = 0.0f;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "params[1]: sampler: top_p");
    p[1].top_p = 1.0f;
    p[0].logprobs_mode = 7;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), "params[0]: sampler: logprobs_mode 7");
    p[0].logprobs_mode = 0;
    /* the buffer holds ROWS rows, not ROWS + 1, nor ROWS from element 1 */
    BAD(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS + 1, rows, 2, V, p, u), "needs elements");
    BAD(rlpi_op_sample_rows(f->be, tok, lp, RLPI_REF(f->buf, 1), ROWS, rows, 2, V, p, u), "needs elements");
    /* a buffer of another backend */
    rlpi_backend *other;
    assert_int_equal(rlpi_backend_cpu_create(&other, 1), RLP_OK);
    BAD(rlpi_op_sample_rows(other, tok, lp, L, ROWS, rows, 2, V, p, u), "belongs to another backend");
    rlpi_backend_destroy(other);
    assert_int_equal(rlpi_op_sample_rows(f->be, tok, lp, L, ROWS, rows, 2, V, p, u), RLP_OK);
}

/* A NaN in the row of the 20th draw (of 24, spread over 3 threads): the
 * error names that draw and row, from whichever thread met it. */
static void bad_row_is_reported(void **state)
{
    fx *f = *state;
    float nan = NAN;
    assert_int_equal(rlpi_buffer_upload(f->buf, (size_t)(4 * V + 17) * 4, &nan, 4), RLP_OK);
    int32_t rows[N], tok[N];
    float lp[N];
    double u[N];
    rlpi_sampler_params p[N];
    for (int i = 0; i < N; i++) {
        rows[i] = i == 19 ? 4 : i % 4;
        u[i] = 0.5;
        p[i] = (rlpi_sampler_params){1.0f, 0, 1.0f, 0.0f, 0};
    }
    BAD(rlpi_op_sample_rows(f->be, tok, lp, RLPI_REF(f->buf, 0), ROWS, rows, N, V, p, u),
        "sample rows: draw 19 (logits row 4): sampler: logits[17] is NaN");
    p[0].temperature = 0.0f; /* greedy reads the row too */
    rows[0] = 4;
    BAD(rlpi_op_sample_rows(f->be, tok, lp, RLPI_REF(f->buf, 0), ROWS, rows, N, V, p, u), "draw 0 (logits row 4)");
    assert_int_equal(rlpi_buffer_upload(f->buf, (size_t)(4 * V + 17) * 4, &f->l[4 * V + 17], 4), RLP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_as_host_sampler),
        cmocka_unit_test(validation),
        cmocka_unit_test(bad_row_is_reported),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
