/* GEMM of the CPU backend against a naive double-precision reference over
 * random shapes (odd sizes, every transpose combination, padded leading
 * dimensions, offsets, batch strides, broadcast operands, alpha/beta), and
 * the bounds checks that keep bad shapes out of the buffers.
 *
 * Tolerance: |C - ref| <= 2·k·u·Σ|α·a·b| + 2·u·|β·c| + 1e-30 with u = 2^-24,
 * the standard forward error bound of a length-k fp32 dot product
 * (Higham, Accuracy and Stability of Numerical Algorithms, §3.1); a wrong
 * index or transpose misses it by orders of magnitude.
 *
 * The same cases in RLP_MATMUL_BF16 (the CPU's reference emulation): the
 * reference then multiplies the operands rounded to bf16 (core/half.h), and
 * since bf16 products are exact in fp32 the same fp32 bound holds. Against
 * the unrounded product each term moves by at most (2^-7 + 2^-16)·|α·a·b|
 * (two roundings of relative error ≤ 2^-8: bf16 has 8 significant bits),
 * which is asserted too, as is
 * that the largest such move seen exceeds 1e-3 of Σ|α·a·b| (the rounding
 * is real: fp32 stays below 1e-5 there). The rounding itself is checked
 * bit for bit on halfway cases, ±Inf, NaN, overflow and subnormals.
 *
 * RLP_MATMUL_BF16 has two paths (cpu_bf16.h): oneDNN's bf16 matmul where the
 * CPU has AMX/AVX512-BF16 and the library was built in, and the emulation.
 * Both run here (the fallback forced by rlpi_cpu_bf16_force_fallback), and
 * the real one is compared with the emulated one on model-sized shapes:
 * they multiply the same rounded operands, each within k·u·Σ|a·b| of the
 * exact sum of those products, so they differ by at most 2·k·u·Σ|a·b|. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu_bf16.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static rlpi_backend *be;

static int setup(void **state)
{
    (void)state;
    return rlpi_backend_cpu_create(&be, 2) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlpi_backend_destroy(be);
    return 0;
}

static rlpi_buffer *random_buffer(rlpi_rng *rng, size_t n, float **host)
{
    rlpi_buffer *buf;
    assert_int_equal(rlpi_buffer_alloc(be, n * sizeof(float), &buf), RLP_OK);
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        h[i] = (float)(rlpi_rng_f64(rng) * 2.0 - 1.0);
    assert_int_equal(rlpi_buffer_upload(buf, 0, h, n * sizeof(float)), RLP_OK);
    *host = h;
    return buf;
}

/* RLP_MATMUL_BF16 cases: the backend's precision and the reference's
 * operand rounding; worst move against the unrounded product seen so far,
 * as a fraction of Σ|α·a·b| */
static int bf16_mode;
static double bf16_worst_move;

static float at(const float *x, const rlpi_matrix *m, int64_t bi, int64_t r, int64_t c)
{
    float v = x[m->offset + (size_t)(bi * m->stride + r * m->ld + c)];
    return bf16_mode ? rlpi_f32_round_bf16(v) : v;
}

static float at_exact(const float *x, const rlpi_matrix *m, int64_t bi, int64_t r, int64_t c)
{
    return x[m->offset + (size_t)(bi * m->stride + r * m->ld + c)];
}

static void run_case(rlpi_rng *rng, int64_t m, int64_t n, int64_t k, int ta, int tb, int64_t batch,
                     float alpha, float beta, int broadcast_b)
{
    int64_t ar = ta ? k : m, ac = ta ? m : k;
    int64_t br = tb ? n : k, bc = tb ? k : n;
    rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                   .alpha = alpha, .beta = beta, .batch = batch};
    g.a = (rlpi_matrix){.offset = rlpi_rng_below(rng, 5), .ld = ac + (int64_t)rlpi_rng_below(rng, 4)};
    g.a.stride = ar * g.a.ld + (int64_t)rlpi_rng_below(rng, 3);
    g.b = (rlpi_matrix){.offset = rlpi_rng_below(rng, 5), .ld = bc + (int64_t)rlpi_rng_below(rng, 4)};
    g.b.stride = broadcast_b ? 0 : br * g.b.ld + (int64_t)rlpi_rng_below(rng, 3);
    g.c = (rlpi_matrix){.offset = rlpi_rng_below(rng, 5), .ld = n + (int64_t)rlpi_rng_below(rng, 4)};
    g.c.stride = m * g.c.ld + (int64_t)rlpi_rng_below(rng, 3);
    size_t na = g.a.offset + (size_t)((batch - 1) * g.a.stride + ar * g.a.ld);
    size_t nb = g.b.offset + (size_t)((batch - 1) * g.b.stride + br * g.b.ld);
    size_t nc = g.c.offset + (size_t)((batch - 1) * g.c.stride + m * g.c.ld);
    float *ha, *hb, *hc;
    rlpi_buffer *A = random_buffer(rng, na, &ha), *B = random_buffer(rng, nb, &hb);
    rlpi_buffer *C = random_buffer(rng, nc, &hc);
    if (beta == 0.0f) /* beta = 0 must not read C: poison it */
        for (size_t i = 0; i < nc; i++)
            hc[i] = NAN;
    assert_int_equal(rlpi_buffer_upload(C, 0, hc, nc * sizeof(float)), RLP_OK);
    g.a.buf = A;
    g.b.buf = B;
    g.c.buf = C;
    be->matmul = bf16_mode ? RLP_MATMUL_BF16 : RLP_MATMUL_FP32;
    int rc = rlpi_gemm_f32(be, &g);
    be->matmul = RLP_MATMUL_FP32;
    assert_int_equal(rc, RLP_OK);
    float *out = malloc(nc * sizeof(float));
    assert_int_equal(rlpi_buffer_download(C, 0, out, nc * sizeof(float)), RLP_OK);

    const double u = 0x1.0p-24;
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, mag = 0, exact = 0, exact_mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double av = ta ? at(ha, &g.a, bi, p, i) : at(ha, &g.a, bi, i, p);
                    double bv = tb ? at(hb, &g.b, bi, j, p) : at(hb, &g.b, bi, p, j);
                    acc += av * bv;
                    mag += fabs(av * bv);
                    if (bf16_mode) {
                        double ae = ta ? at_exact(ha, &g.a, bi, p, i) : at_exact(ha, &g.a, bi, i, p);
                        double be_ = tb ? at_exact(hb, &g.b, bi, j, p) : at_exact(hb, &g.b, bi, p, j);
                        exact += ae * be_;
                        exact_mag += fabs(ae * be_);
                    }
                }
                double cv = beta == 0.0f ? 0.0 : at_exact(hc, &g.c, bi, i, j);
                double ref = alpha * acc + beta * cv;
                double tol = 2.0 * (double)(k + 2) * u * fabs(alpha) * mag + 4.0 * u * fabs(beta * cv) + 1e-30;
                double got = out[g.c.offset + (size_t)(bi * g.c.stride + i * g.c.ld + j)];
                if (bf16_mode && exact_mag > 0) {
                    double exact_ref = alpha * exact + beta * cv;
                    double move = fabs(got - exact_ref), scale = fabs(alpha) * exact_mag;
                    double bound = (0x1.0p-7 + 0x1.0p-16) * scale + tol * 1.01;
                    if (!(move <= bound))
                        fail_msg("bf16: moved %g from the fp32 product, more than the bound %g", move, bound);
                    bf16_worst_move = fmax(bf16_worst_move, move / scale);
                }
                if (!(fabs(got - ref) <= tol)) {
                    fprintf(stderr, "m=%lld n=%lld k=%lld ta=%d tb=%d batch=%lld (%lld,%lld,%lld): got %g want %g tol %g\n",
                            (long long)m, (long long)n, (long long)k, ta, tb, (long long)batch,
                            (long long)bi, (long long)i, (long long)j, got, ref, tol);
                    fail();
                }
            }
    /* padding between rows and batches is untouched */
    for (size_t idx = 0; idx < nc; idx++) {
        size_t rel = idx - g.c.offset;
        int inside = 0;
        if (idx >= g.c.offset) {
            int64_t bi = (int64_t)rel / g.c.stride, rem = (int64_t)rel % g.c.stride;
            inside = bi < batch && rem / g.c.ld < m && rem % g.c.ld < n;
        }
        if (!inside && !(isnan(hc[idx]) && isnan(out[idx])))
            assert_true(out[idx] == hc[idx]);
    }
    free(out);
    free(ha);
    free(hb);
    free(hc);
    rlpi_buffer_free(A);
    rlpi_buffer_free(B);
    rlpi_buffer_free(C);
}

static void gemm_matches_reference(void **state)
{
    (void)state;
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 1234, 0);
    int cases = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int rep = 0; rep < 12; rep++) {
                int64_t m = 1 + (int64_t)rlpi_rng_below(&rng, 70);
                int64_t n = 1 + (int64_t)rlpi_rng_below(&rng, 70);
                int64_t k = 1 + (int64_t)rlpi_rng_below(&rng, 130);
                int64_t batch = 1 + (int64_t)rlpi_rng_below(&rng, 3);
                static const float alphas[] = {1.0f, -0.5f, 2.0f};
                static const float betas[] = {0.0f, 1.0f, 0.25f};
                run_case(&rng, m, n, k, ta, tb, batch, alphas[rep % 3], betas[(rep / 3) % 3], rep % 4 == 3);
                cases++;
            }
    /* shapes of the model: a row vector, a column vector, k = 1, a big-ish one */
    run_case(&rng, 1, 577, 576, 0, 1, 1, 1.0f, 0.0f, 0);
    run_case(&rng, 64, 1, 96, 1, 0, 2, 1.0f, 1.0f, 0);
    run_case(&rng, 33, 31, 1, 0, 0, 1, 1.0f, 0.0f, 0);
    run_case(&rng, 129, 192, 200, 0, 1, 1, 1.0f, 0.0f, 0);
    /* products above 2^18 multiply-adds are cut into tiles over the pool
     * (cpu.c): along M when op(B) is smaller, along N otherwise, tiles of
     * 32 rows/columns with a ragged last one; a batch spreads item by item */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            run_case(&rng, 301, 70, 40, ta, tb, 1, 1.0f, 0.0f, 0);   /* split M */
            run_case(&rng, 70, 303, 41, ta, tb, 1, -0.5f, 0.25f, 0); /* split N */
            run_case(&rng, 1, 2001, 150, ta, tb, 1, 1.0f, 1.0f, 0);  /* GEMV split N */
            run_case(&rng, 97, 89, 65, ta, tb, 3, 2.0f, 0.0f, ta);   /* batch spread */
            cases += 4;
        }
    /* m = 1 goes through sgemv on the CPU: every transpose, padded strides,
     * batched, beta 0 over a NaN-poisoned C and beta ≠ 0 */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            run_case(&rng, 1, 37 + 5 * ta, 53 + 3 * tb, ta, tb, 2, -0.5f, 0.0f, 1);
            run_case(&rng, 1, 29, 41, ta, tb, 3, 2.0f, 0.25f, 1);
            run_case(&rng, 1, 64, 70, ta, tb, 1, 1.0f, 1.0f, 0);
        }
    /* 2..7 rows: RLP_MATMUL_BF16 rounds op(B) in chunks of 64 columns,
     * tasks of 512 (cpu.c), ragged ends of both */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            run_case(&rng, 2 + 5 * ta, 600 + 7 * tb, 45, ta, tb, 2, 1.0f, tb ? 0.0f : 0.5f, tb);
    print_message("%d random GEMM cases + 20 fixed shapes\n", cases);
}

/* Every case above again with the backend in RLP_MATMUL_BF16, on the real
 * path (where there is one) and on the forced emulation. */
static void gemm_bf16_matches_rounded_reference(void **state)
{
    for (int forced = rlpi_cpu_bf16_available() ? 0 : 1; forced < 2; forced++) {
        rlpi_cpu_bf16_force_fallback(forced);
        bf16_mode = 1;
        bf16_worst_move = 0;
        gemm_matches_reference(state);
        bf16_mode = 0;
        print_message("bf16 (%s): worst move from the fp32 product %.2e of sum|a*b| (bound 7.8e-3, must exceed "
                      "1e-3)\n",
                      rlpi_cpu_bf16_path(), bf16_worst_move);
        rlpi_cpu_bf16_force_fallback(0);
        assert_true(bf16_worst_move > 1e-3);
    }
}

/* The path RLP_MATMUL_BF16 takes here, said in the log; forcing the fallback
 * switches to the emulation and back. Skips (saying why) where there is no
 * real path: a build without oneDNN, or a CPU without AMX/AVX512-BF16. */
static void gemm_bf16_path_and_fallback(void **state)
{
    (void)state;
    int avail = rlpi_cpu_bf16_available();
    print_message("bf16 GEMMs on this machine: %s\n", rlpi_cpu_bf16_path());
    rlpi_cpu_bf16_force_fallback(1);
    assert_false(rlpi_cpu_bf16_available());
    assert_string_equal(rlpi_cpu_bf16_path(), "emulated");
    rlpi_gemm g = {.m = 2, .n = 2, .k = 2, .batch = 1, .alpha = 1};
    assert_int_equal(rlpi_cpu_bf16_gemm(NULL, &g), RLP_E_UNSUPPORTED);
    rlpi_cpu_bf16_force_fallback(0);
    assert_int_equal(rlpi_cpu_bf16_available(), avail);
    if (!avail) {
        print_message("no real bf16 GEMM path (built without oneDNN, RLPOST_CPU_BF16=0, or a CPU without "
                      "AMX/AVX512-BF16): RLP_MATMUL_BF16 is emulated\n");
        skip();
    }
    assert_string_equal(rlpi_cpu_bf16_path(), "oneDNN");
}

/* One product in RLP_MATMUL_BF16 on the chosen path: C (fresh copy of c0). */
static void bf16_product(const rlpi_gemm *g0, const float *c0, size_t nc, int forced, float *out)
{
    rlpi_gemm g = *g0;
    assert_int_equal(rlpi_buffer_upload((rlpi_buffer *)g.c.buf, 0, c0, nc * sizeof(float)), RLP_OK);
    rlpi_cpu_bf16_force_fallback(forced);
    be->matmul = RLP_MATMUL_BF16;
    int rc = rlpi_gemm_f32(be, &g);
    be->matmul = RLP_MATMUL_FP32;
    rlpi_cpu_bf16_force_fallback(0);
    assert_int_equal(rc, RLP_OK);
    assert_int_equal(rlpi_buffer_download(g.c.buf, 0, out, nc * sizeof(float)), RLP_OK);
}

/* The oneDNN path against the emulated one on shapes of the SmolLM2 train
 * step (hidden 576, kv 192, mlp 1536; forward x·Wᵀ, backward dY·W and
 * dYᵀ·X accumulated with beta 1), cut to fit a fast test, and operands
 * large enough to be converted block by block: within
 * 2·k·u·Σ|a_r·b_r| (see the top). The largest difference seen is printed. */
static void gemm_bf16_real_matches_emulated(void **state)
{
    (void)state;
    if (!rlpi_cpu_bf16_available()) {
        print_message("no real bf16 path here: nothing to compare\n");
        skip();
    }
    static const struct { int64_t m, n, k; int ta, tb; float beta; } cases[] = {
        {256, 576, 576, 0, 1, 0.0f},  /* q/o projection forward */
        {256, 192, 576, 0, 1, 0.0f},  /* k/v projection */
        {256, 576, 1536, 0, 1, 0.0f}, /* down projection */
        {256, 1536, 576, 0, 0, 1.0f}, /* dX = dY·W, accumulated */
        {576, 192, 256, 1, 0, 1.0f},  /* dW = dYᵀ·X, accumulated */
        {77, 333, 129, 1, 1, 0.5f},   /* ragged, both transposed */
        /* op(B) over 1 MiB of bf16 (cpu_bf16.c converts it block by block):
         * cut along N; along N and K (later K blocks accumulate into C) */
        {40, 1100, 2000, 0, 1, 0.0f},  /* tiles of 576 columns in blocks of 256 */
        {20, 300, 12000, 0, 0, 1.0f},  /* tiles of 160 columns, K in blocks of 3264 */
        {20, 300, 12000, 1, 1, 0.5f},
    };
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 99, 0);
    double worst = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
        int ta = cases[ci].ta, tb = cases[ci].tb;
        int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        float *ha, *hb, *hc;
        rlpi_buffer *A = random_buffer(&rng, (size_t)(ar * ac), &ha), *B = random_buffer(&rng, (size_t)(br * bc), &hb);
        rlpi_buffer *C = random_buffer(&rng, (size_t)(m * n), &hc);
        rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f,
                       .beta = cases[ci].beta, .batch = 1, .a = {A, 0, ac, 0}, .b = {B, 0, bc, 0},
                       .c = {C, 0, n, 0}};
        size_t nc = (size_t)(m * n);
        float *real = malloc(nc * sizeof *real), *emu = malloc(nc * sizeof *emu);
        bf16_product(&g, hc, nc, 0, real);
        bf16_product(&g, hc, nc, 1, emu);
        const double u = 0x1.0p-24;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double av = rlpi_f32_round_bf16(ta ? ha[p * ac + i] : ha[i * ac + p]);
                    double bv = rlpi_f32_round_bf16(tb ? hb[j * bc + p] : hb[p * bc + j]);
                    mag += fabs(av * bv);
                }
                double bc_ = fabs((double)cases[ci].beta * hc[i * n + j]);
                double tol = 2.0 * (double)(k + 2) * u * mag + 4.0 * u * bc_ + 1e-30;
                double d = fabs((double)real[i * n + j] - (double)emu[i * n + j]);
                if (!(d <= tol))
                    fail_msg("case %zu (%lld,%lld): oneDNN %g, emulated %g, |diff| %g > %g", ci, (long long)i,
                             (long long)j, real[i * n + j], emu[i * n + j], d, tol);
                worst = fmax(worst, d / (mag + bc_));
            }
        free(real);
        free(emu);
        free(ha);
        free(hb);
        free(hc);
        rlpi_buffer_free(A);
        rlpi_buffer_free(B);
        rlpi_buffer_free(C);
    }
    print_message("bf16 oneDNN vs emulated: worst |diff| %.2e of sum|a*b| (bound 2(k+2)u, e.g. 1.8e-4 at k=1536)\n",
                  worst);
}

/* bits -> float and back */
static float fb(uint32_t u)
{
    return rlpi_bits_to_f32(u);
}

/* C (n, 1) = A (n, 1) · [1] in bf16 gives A rounded to bf16: the rounding
 * bit for bit on the cases where truncation, round-half-up or a flush to
 * zero would differ from round to nearest even. */
static void gemm_bf16_rounds_to_nearest_even(void **state)
{
    (void)state;
    static const uint32_t in[][2] = {
        {0x3f808000u, 0x3f800000u}, /* 1 + 2^-8: a tie, down to the even 1 */
        {0x3f818000u, 0x3f820000u}, /* 1 + 3·2^-8: a tie, up to the even neighbour */
        {0x3f808001u, 0x3f810000u}, /* just above the tie: up */
        {0x3f807fffu, 0x3f800000u}, /* just below: down */
        {0xbf818000u, 0xbf820000u}, /* negative tie: magnitude to even */
        {0x40490fdbu, 0x40490000u}, /* pi */
        {0x7f7fffffu, 0x7f800000u}, /* FLT_MAX overflows to +Inf */
        {0x7f7f7fffu, 0x7f7f0000u}, /* just below: the largest bf16 */
        {0x7f800000u, 0x7f800000u}, /* +Inf */
        {0xff800000u, 0xff800000u}, /* -Inf */
        {0x00018000u, 0x00020000u}, /* subnormal tie, up to even */
        {0x00008000u, 0x00000000u}, /* subnormal tie, down to zero (even) */
        {0x0000ffffu, 0x00010000u}, /* subnormal above the tie */
        {0x807fffffu, 0x80800000u}, /* largest subnormal rounds into the normals */
        {0x00000001u, 0x00000000u}, /* smallest subnormal */
        {0x7fc00001u, 0x7fc00000u}, /* NaN (only NaN-ness is checked) */
    };
    enum { N = sizeof in / sizeof in[0] };
    float a[N], one = 1.0f, c[N];
    for (int i = 0; i < N; i++)
        a[i] = fb(in[i][0]);
    rlpi_buffer *A, *B, *C;
    assert_int_equal(rlpi_buffer_alloc(be, sizeof a, &A), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, sizeof one, &B), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, sizeof c, &C), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(A, 0, a, sizeof a), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(B, 0, &one, sizeof one), RLP_OK);
    rlpi_gemm g = {.m = N, .n = 1, .k = 1, .alpha = 1, .beta = 0, .batch = 1,
                   .a = {A, 0, 1, 0}, .b = {B, 0, 1, 0}, .c = {C, 0, 1, 0}};
    /* the emulation bit for bit; the oneDNN path too, except that AMX and
     * AVX512-BF16 dot products treat subnormal bf16 inputs as zero (DAZ,
     * in the instructions' definition): those may come out ±0 */
    for (int forced = 1; forced >= (rlpi_cpu_bf16_available() ? 0 : 1); forced--) {
        rlpi_cpu_bf16_force_fallback(forced);
        be->matmul = RLP_MATMUL_BF16;
        int rc = rlpi_gemm_f32(be, &g);
        be->matmul = RLP_MATMUL_FP32;
        rlpi_cpu_bf16_force_fallback(0);
        assert_int_equal(rc, RLP_OK);
        assert_int_equal(rlpi_buffer_download(C, 0, c, sizeof c), RLP_OK);
        for (int i = 0; i < N; i++) {
            float want = fb(in[i][1]);
            int ok = isnan(want) ? isnan(c[i]) && isnan(rlpi_f32_round_bf16(a[i]))
                                 : c[i] == want && rlpi_f32_round_bf16(a[i]) == want;
            if (!forced && !ok && fpclassify(want) == FP_SUBNORMAL && c[i] == 0.0f)
                ok = 1;
            if (!ok)
                fail_msg("bf16 (%s) rounding of 0x%08x: got 0x%08x (half.h 0x%08x), want 0x%08x",
                         forced ? "emulated" : "oneDNN", in[i][0], rlpi_f32_to_bits(c[i]),
                         rlpi_f32_to_bits(rlpi_f32_round_bf16(a[i])), in[i][1]);
        }
    }
    /* few rows (cpu.c rounds op(B) chunk by chunk, 16 lanes at a time):
     * C (1, n) = [1] · A as a (1, n) B, bit for bit */
    rlpi_gemm r = {.m = 1, .n = N, .k = 1, .alpha = 1, .beta = 0, .batch = 1,
                   .a = {B, 0, 1, 0}, .b = {A, 0, N, 0}, .c = {C, 0, N, 0}};
    be->matmul = RLP_MATMUL_BF16;
    int rc = rlpi_gemm_f32(be, &r);
    be->matmul = RLP_MATMUL_FP32;
    assert_int_equal(rc, RLP_OK);
    assert_int_equal(rlpi_buffer_download(C, 0, c, sizeof c), RLP_OK);
    for (int i = 0; i < N; i++) {
        float want = fb(in[i][1]);
        if (!(isnan(want) ? isnan(c[i]) : c[i] == want))
            fail_msg("bf16 (few rows) rounding of 0x%08x: got 0x%08x, want 0x%08x", in[i][0], rlpi_f32_to_bits(c[i]),
                     in[i][1]);
    }
    /* in a generation scope (the rollout engine's decode) a bf16 context
     * runs its few-row products in fp32 (C = A exactly, nothing rounded)
     * and its many-row ones in bf16 as the trainer does; the scope nests
     * and ends where it began, and the few-row product is rounded again
     * after it. A bf16 result may be ±0 for a subnormal (DAZ, above). */
    int outer = rlpi_gemm_generation_begin();
    assert_int_equal(outer, 0);
    int inner = rlpi_gemm_generation_begin();
    assert_int_equal(inner, 1);
    rlpi_gemm_generation_end(inner);
    assert_true(rlpi_gemm_in_generation());
    be->matmul = RLP_MATMUL_BF16;
    struct {
        const rlpi_gemm *g;
        int in_scope, rounded;
        const char *what;
    } cases[] = {{&r, 1, 0, "few rows in a generation scope"},
                 {&g, 1, 1, "many rows in a generation scope"},
                 {&r, 0, 1, "few rows after the generation scope"}};
    for (int s = 0; s < 3; s++) {
        if (!cases[s].in_scope && rlpi_gemm_in_generation()) {
            rlpi_gemm_generation_end(outer);
            assert_false(rlpi_gemm_in_generation());
        }
        rc = rlpi_gemm_f32(be, cases[s].g);
        assert_int_equal(rc, RLP_OK);
        assert_int_equal(rlpi_buffer_download(C, 0, c, sizeof c), RLP_OK);
        for (int i = 0; i < N; i++) {
            float want = cases[s].rounded ? fb(in[i][1]) : a[i];
            int ok = isnan(want) ? isnan(c[i])
                                 : rlpi_f32_to_bits(c[i]) == rlpi_f32_to_bits(want) ||
                                       (cases[s].rounded && fpclassify(want) == FP_SUBNORMAL && c[i] == 0.0f);
            if (!ok)
                fail_msg("%s: 0x%08x came out 0x%08x, want 0x%08x (%s)", cases[s].what, in[i][0],
                         rlpi_f32_to_bits(c[i]), rlpi_f32_to_bits(want), cases[s].rounded ? "bf16" : "unrounded");
        }
    }
    be->matmul = RLP_MATMUL_FP32;
    rlpi_buffer_free(A);
    rlpi_buffer_free(B);
    rlpi_buffer_free(C);
}

static void gemm_k_zero_scales_c(void **state)
{
    (void)state;
    rlpi_buffer *A, *B, *C;
    assert_int_equal(rlpi_buffer_alloc(be, 16, &A), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, 16, &B), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, 4 * sizeof(float), &C), RLP_OK);
    float c[4] = {1, 2, 3, 4}, out[4];
    rlpi_buffer_upload(C, 0, c, sizeof c);
    rlpi_gemm g = {.m = 2, .n = 2, .k = 0, .alpha = 1, .beta = 0.5f, .batch = 1,
                   .a = {A, 0, 1, 0}, .b = {B, 0, 2, 0}, .c = {C, 0, 2, 0}};
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_OK);
    rlpi_buffer_download(C, 0, out, sizeof out);
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == 0.5f * c[i]);
    rlpi_buffer_free(A);
    rlpi_buffer_free(B);
    rlpi_buffer_free(C);
}

static void gemm_rejects_out_of_bounds(void **state)
{
    (void)state;
    rlpi_buffer *A, *B, *C;
    assert_int_equal(rlpi_buffer_alloc(be, 6 * sizeof(float), &A), RLP_OK);  /* 2x3 */
    assert_int_equal(rlpi_buffer_alloc(be, 12 * sizeof(float), &B), RLP_OK); /* 3x4 */
    assert_int_equal(rlpi_buffer_alloc(be, 8 * sizeof(float), &C), RLP_OK);  /* 2x4 */
    rlpi_gemm ok = {.m = 2, .n = 4, .k = 3, .alpha = 1, .beta = 0, .batch = 1,
                    .a = {A, 0, 3, 0}, .b = {B, 0, 4, 0}, .c = {C, 0, 4, 0}};
    assert_int_equal(rlpi_gemm_f32(be, &ok), RLP_OK);

    rlpi_gemm g = ok;
    g.a.offset = 1; /* last element of A would be index 6 */
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "operand A"));
    g = ok;
    g.b.ld = 3; /* ld < columns */
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    g = ok;
    g.batch = 2; /* second batch item of A is outside */
    g.a.stride = 6;
    g.c.stride = 8;
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    g = ok;
    g.m = -1;
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    g = ok;
    g.c.buf = A; /* C overlapping A */
    g.c.ld = 3;
    g.n = 3;
    g.b.ld = 3;
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    g = ok;
    g.batch = 3;
    g.c.stride = 0; /* C broadcast across a batch would race */
    g.a.stride = 0;
    g.b.stride = 0;
    assert_int_equal(rlpi_gemm_f32(be, &g), RLP_E_INVALID_ARG);
    g = ok;
    g.a.stride = (int64_t)1 << 62; /* index arithmetic overflow */
    g.batch = 5;
    g.c.stride = 0;
    assert_true(rlpi_gemm_f32(be, &g) < 0);
    assert_int_equal(rlpi_gemm_f32(be, NULL), RLP_E_INVALID_ARG);

    /* buffer transfers are bounds-checked too */
    float tmp[16];
    assert_int_equal(rlpi_buffer_upload(A, 8, tmp, 20), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_buffer_download(A, SIZE_MAX, tmp, 2), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_buffer_copy(C, 0, B, 40, 16), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_buffer_fill_f32(C, 4, 5, 0.0f), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_buffer_fill_f32(C, 4, 4, 7.0f), RLP_OK);
    rlpi_buffer_download(C, 16, tmp, 16);
    assert_true(tmp[0] == 7.0f && tmp[3] == 7.0f);
    assert_int_equal(rlpi_buffer_copy(B, 0, C, 16, 16), RLP_OK);
    rlpi_buffer_download(B, 0, tmp, 16);
    assert_true(tmp[0] == 7.0f && tmp[3] == 7.0f);
    rlpi_buffer_free(A);
    rlpi_buffer_free(B);
    rlpi_buffer_free(C);
}

/* A strided block copy (the fused Q/K/V split): the column blocks of a
 * (4, 7) matrix land in contiguous (4, 3) and (4, 4) arrays and back; rows
 * outside a buffer, overlapping rows, overlapping ranges and another
 * backend's buffer are refused. */
static void buffer_copy_2d_moves_column_blocks(void **state)
{
    (void)state;
    float m[28], back[28], left[12], right[16];
    for (int i = 0; i < 28; i++)
        m[i] = (float)i;
    rlpi_buffer *M, *L, *R;
    assert_int_equal(rlpi_buffer_alloc(be, sizeof m, &M), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, sizeof left, &L), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, sizeof right, &R), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(M, 0, m, sizeof m), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(L, 0, 12, M, 0, 28, 12, 4), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(R, 0, 16, M, 12, 28, 16, 4), RLP_OK);
    assert_int_equal(rlpi_buffer_download(L, 0, left, sizeof left), RLP_OK);
    assert_int_equal(rlpi_buffer_download(R, 0, right, sizeof right), RLP_OK);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 7; c++)
            assert_true((c < 3 ? left[r * 3 + c] : right[r * 4 + c - 3]) == m[r * 7 + c]);
    assert_int_equal(rlpi_buffer_fill_f32(M, 0, 28, -1.0f), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(M, 0, 28, L, 0, 12, 12, 4), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(M, 12, 28, R, 0, 16, 16, 4), RLP_OK);
    assert_int_equal(rlpi_buffer_download(M, 0, back, sizeof back), RLP_OK);
    assert_memory_equal(back, m, sizeof m);
    assert_int_equal(rlpi_buffer_copy_2d(R, 0, 16, M, 0, 28, 0, 4), RLP_OK); /* nothing to copy */

    /* a Q/K/V-sized block (2048 rows, 1 KiB of each 2 KiB row, from an offset) */
    enum { ROWS = 2048, SW = 512, DW = 256 }; /* floats per source row, copied floats per row */
    float *big = malloc((size_t)ROWS * SW * 4), *got = malloc((size_t)ROWS * DW * 4);
    for (size_t i = 0; i < (size_t)ROWS * SW; i++)
        big[i] = (float)i;
    rlpi_buffer *BS, *BD;
    assert_int_equal(rlpi_buffer_alloc(be, (size_t)ROWS * SW * 4, &BS), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(be, (size_t)ROWS * DW * 4, &BD), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(BS, 0, big, (size_t)ROWS * SW * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(BD, 0, DW * 4, BS, 100 * 4, SW * 4, DW * 4, ROWS), RLP_OK);
    assert_int_equal(rlpi_buffer_download(BD, 0, got, (size_t)ROWS * DW * 4), RLP_OK);
    for (size_t r = 0; r < ROWS; r++)
        for (size_t c = 0; c < DW; c++)
            if (got[r * DW + c] != big[r * SW + 100 + c])
                fail_msg("row %zu column %zu: %g", r, c, (double)got[r * DW + c]);
    rlpi_buffer_free(BS);
    rlpi_buffer_free(BD);
    free(big);
    free(got);

    assert_int_equal(rlpi_buffer_copy_2d(R, 0, 16, M, 16, 28, 16, 4), RLP_E_INVALID_ARG); /* last source row outside */
    assert_non_null(strstr(rlp_error_last(), "source"));
    assert_int_equal(rlpi_buffer_copy_2d(L, 4, 12, M, 0, 28, 12, 4), RLP_E_INVALID_ARG); /* last destination row outside */
    assert_non_null(strstr(rlp_error_last(), "destination"));
    assert_int_equal(rlpi_buffer_copy_2d(L, 0, 8, M, 0, 28, 12, 2), RLP_E_INVALID_ARG); /* pitch < width */
    assert_int_equal(rlpi_buffer_copy_2d(M, 0, 28, M, 12, 28, 12, 2), RLP_E_INVALID_ARG); /* same buffer, overlapping */
    assert_int_equal(rlpi_buffer_copy_2d(L, 0, SIZE_MAX / 2, M, 0, 28, 12, 4), RLP_E_OVERFLOW);
    assert_int_equal(rlpi_buffer_copy_2d(NULL, 0, 12, M, 0, 28, 12, 4), RLP_E_INVALID_ARG);
    rlpi_backend *other;
    rlpi_buffer *O;
    assert_int_equal(rlpi_backend_cpu_create(&other, 1), RLP_OK);
    assert_int_equal(rlpi_buffer_alloc(other, sizeof left, &O), RLP_OK);
    assert_int_equal(rlpi_buffer_copy_2d(O, 0, 12, M, 0, 28, 12, 4), RLP_E_INVALID_ARG);
    rlpi_buffer_free(O);
    rlpi_backend_destroy(other);
    rlpi_buffer_free(M);
    rlpi_buffer_free(L);
    rlpi_buffer_free(R);
}

/* rlpi_buffer_zero: every byte zero afterwards, edges and whole pages
 * alike, for sizes below, at and across page boundaries; the whole pages
 * of a large buffer are not made resident (mincore). */
static void buffer_zero_clears_without_touching(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    size_t sizes[] = {4, 100, (size_t)page, 2 * (size_t)page + 12, 7 * (size_t)page + 100, 64u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k] / 4 * 4;
        rlpi_buffer *B;
        assert_int_equal(rlpi_buffer_alloc(be, n, &B), RLP_OK);
        assert_int_equal(rlpi_buffer_fill_f32(B, 0, n / 4, 3.5f), RLP_OK);
        assert_int_equal(rlpi_buffer_zero(B), RLP_OK);
        const unsigned char *p = rlpi_buffer_host(B);
        if (n == (64u << 20)) { /* the discarded pages are not resident until read */
            size_t lo = ((uintptr_t)p + (size_t)page - 1) / (size_t)page * (size_t)page - (uintptr_t)p;
            size_t pages = (n - lo) / (size_t)page;
            unsigned char *vec = malloc(pages);
            assert_int_equal(mincore((void *)(p + lo), pages * (size_t)page, vec), 0);
            size_t resident = 0;
            for (size_t i = 0; i < pages; i++)
                resident += vec[i] & 1;
            free(vec);
            assert_true(resident < pages / 100);
        }
        for (size_t i = 0; i < n; i++)
            if (p[i])
                fail_msg("byte %zu of %zu not zero", i, n);
        rlpi_buffer_free(B);
    }
    assert_int_equal(rlpi_buffer_zero(NULL), RLP_E_INVALID_ARG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(buffer_zero_clears_without_touching),
        cmocka_unit_test(gemm_matches_reference),
        cmocka_unit_test(gemm_bf16_matches_rounded_reference),
        cmocka_unit_test(gemm_bf16_rounds_to_nearest_even),
        cmocka_unit_test(gemm_bf16_path_and_fallback),
        cmocka_unit_test(gemm_bf16_real_matches_emulated),
        cmocka_unit_test(gemm_k_zero_scales_c),
        cmocka_unit_test(gemm_rejects_out_of_bounds),
        cmocka_unit_test(buffer_copy_2d_moves_column_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
