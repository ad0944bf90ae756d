/* The vectorised exp kernels of the CPU backend (lib/backend/cpu_vecmath.c)
 * against double-precision references: exp (as exp_affine_sum with a = 1,
 * b = 0, where a·x − b is exact) within 2 ulp over its range and the
 * documented edge values; the softmax row statistics, the logprob
 * gradient and SwiGLU forward/backward against straightforward double
 * loops, at lengths that are and are not multiples of the 16-lane block. */
#include "backend/cpu_vecmath.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* y = exp(x) through the kernel's exp: 1·x − 0 is x exactly */
static void vexp(float *y, const float *x, int64_t n)
{
    memmove(y, x, (size_t)n * sizeof *y);
    rlpi_vec_exp_affine_sum(y, n, 1.0f, 0.0f);
}

static const int64_t lengths[] = {1, 7, 15, 16, 17, 33, 257, 1000, 49152};

static float urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0));
}

static void exp_within_2ulp(void **state)
{
    (void)state;
    const int64_t n = 400001;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        x[i] = -87.0f + 175.0f * (float)i / (float)(n - 1); /* [-87, 88] */
    vexp(y, x, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = exp((double)x[i]);
        double ulp = ldexp(1.0, ilogb(ref) - 23);
        double err = fabs((double)y[i] - ref) / ulp;
        worst = err > worst ? err : worst;
    }
    print_message("exp: worst %.2f ulp over [-87, 88]\n", worst);
    assert_true(worst <= 2.0);
    free(x);
    free(y);
}

static void exp_edges(void **state)
{
    (void)state;
    float x[] = {0.0f, -INFINITY, -88.0f, -1000.0f, 88.0f, 1000.0f, INFINITY, NAN, 1.0f, -1.0f};
    float y[10];
    vexp(y, x, 10);
    assert_true(y[0] == 1.0f);
    assert_true(y[1] == 0.0f && y[2] == 0.0f && y[3] == 0.0f); /* below FLT_MIN: 0 */
    assert_true(isfinite(y[4]) && fabsf(y[4] - 1.6516363e38f) < 1e32f);
    assert_true(isfinite(y[5]) && y[5] == y[4] && y[6] == y[4]); /* saturates at exp(88) */
    assert_true(isnan(y[7]));
    assert_true(fabsf(y[8] - 2.7182817f) < 3e-7f && fabsf(y[9] - 0.36787945f) < 5e-8f);
    /* in place, and a ragged tail is computed like a full block */
    float z[19];
    for (int i = 0; i < 19; i++)
        z[i] = x[i % 10] == x[i % 10] ? -0.5f * (float)i : 0.0f;
    float ref[19];
    vexp(ref, z, 19);
    vexp(z, z, 19);
    assert_memory_equal(ref, z, sizeof z);
    float one;
    vexp(&one, (float[]){-6.0f}, 1);
    assert_true(one == ref[12]);
}

static void row_stats_match_double(void **state)
{
    (void)state;
    uint64_t seed = 7;
    for (size_t c = 0; c < sizeof lengths / sizeof *lengths; c++) {
        int64_t n = lengths[c];
        float *row = malloc((size_t)n * sizeof *row);
        for (int64_t j = 0; j < n; j++)
            row[j] = 20.0f * (urand(&seed) - 0.5f);
        const float temps[] = {1.0f, 1.0f / 0.7f};
        for (int t = 0; t < 2; t++) {
            double lse, pz, m = -INFINITY, s = 0, spz = 0;
            rlpi_vec_row_stats(row, n, temps[t], &lse, &pz);
            for (int64_t j = 0; j < n; j++)
                m = fmax(m, (double)(row[j] * temps[t]));
            for (int64_t j = 0; j < n; j++) {
                double z = (double)(row[j] * temps[t]);
                s += exp(z - m);
                spz += exp(z - m) * z;
            }
            assert_true(fabs(lse - (m + log(s))) < 1e-6 * (1 + fabs(lse)));
            assert_true(fabs(pz - spz / s) < 1e-6 * (1 + fabs(pz)));
        }
        free(row);
    }
}

static void logprob_grad_matches_double(void **state)
{
    (void)state;
    uint64_t seed = 11;
    for (size_t c = 0; c < sizeof lengths / sizeof *lengths; c++) {
        int64_t n = lengths[c];
        float *row = malloc((size_t)n * sizeof *row), *orig = malloc((size_t)n * sizeof *orig);
        for (int64_t j = 0; j < n; j++)
            orig[j] = row[j] = 10.0f * (urand(&seed) - 0.5f);
        const float it = 1.25f, dl = -0.75f, dh = 0.3f;
        double lse, pz;
        rlpi_vec_row_stats(row, n, it, &lse, &pz);
        float zh = (float)((lse - pz) - lse);
        rlpi_vec_logprob_grad(row, n, it, (float)lse, zh, dl, dh);
        for (int64_t j = 0; j < n; j++) {
            double z = (double)orig[j] * it, p = exp(z - lse);
            double ref = it * (-dl * p - dh * p * (z + zh));
            assert_true(fabs(row[j] - ref) < 1e-6 * (fabs(ref) + 1e-3));
        }
        free(row);
        free(orig);
    }
}

static void swiglu_matches_double(void **state)
{
    (void)state;
    uint64_t seed = 3;
    for (size_t c = 0; c < sizeof lengths / sizeof *lengths; c++) {
        int64_t n = lengths[c];
        float *g = malloc((size_t)n * 4), *u = malloc((size_t)n * 4), *d = malloc((size_t)n * 4);
        float *y = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4), *du = malloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++) {
            g[j] = 24.0f * (urand(&seed) - 0.5f);
            u[j] = urand(&seed) - 0.5f;
            d[j] = urand(&seed) - 0.5f;
        }
        if (n > 3) {
            g[0] = -200.0f; /* exp(200) saturates: silu → 0, not NaN */
            g[1] = 200.0f;
        }
        rlpi_vec_swiglu_fwd(y, g, u, n);
        rlpi_vec_swiglu_bwd(dg, du, d, g, u, n);
        for (int64_t j = 0; j < n; j++) {
            double sg = 1.0 / (1.0 + exp(-(double)g[j]));
            double ry = g[j] * sg * u[j];
            double rdg = d[j] * u[j] * sg * (1.0 + g[j] * (1.0 - sg)), rdu = d[j] * g[j] * sg;
            assert_true(isfinite(y[j]) && isfinite(dg[j]) && isfinite(du[j]));
            assert_true(fabs(y[j] - ry) <= 1e-6 * fabs(ry) + 1e-30);
            assert_true(fabs(dg[j] - rdg) <= 1e-5 * fabs(rdg) + 1e-7);
            assert_true(fabs(du[j] - rdu) <= 1e-6 * fabs(rdu) + 1e-30);
        }
        free(g), free(u), free(d), free(y), free(dg), free(du);
    }
}

static void exp_affine_sum_matches_double(void **state)
{
    (void)state;
    uint64_t seed = 5;
    for (size_t c = 0; c < sizeof lengths / sizeof *lengths; c++) {
        int64_t n = lengths[c];
        float *x = malloc((size_t)n * 4), *x0 = malloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++)
            x0[j] = x[j] = 8.0f * (urand(&seed) - 0.5f);
        const float a = 0.125f, b = 0.4f;
        double s = rlpi_vec_exp_affine_sum(x, n, a, b), ref = 0;
        for (int64_t j = 0; j < n; j++) {
            double e = exp((double)(a * x0[j] - b));
            ref += e;
            assert_true(fabs(x[j] - e) <= 2.5e-7 * e);
        }
        assert_true(fabs(s - ref) <= 1e-6 * ref);
        free(x);
        free(x0);
    }
}

/* Grouped attention: each head of a group of g equals that head attended
 * alone (bit for bit: callers group heads or not by how many threads
 * there are), and a double-precision softmax(scale·Kq)·V within 1e-5 of
 * the output's scale; head dims that are and are not multiples of 8 and
 * 16, key counts from 1. */
static void attend_matches_double(void **state)
{
    (void)state;
    static const int64_t hds[] = {64, 40, 13, 128};
    static const int64_t nks[] = {1, 2, 17, 300};
    uint64_t seed = 9;
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (size_t b = 0; b < sizeof nks / sizeof *nks; b++) {
            const int64_t hd = hds[a], nk = nks[b], kvd = 2 * hd, g = 3; /* rows hold 2 kv heads: stride 2·hd */
            float *K = malloc((size_t)(nk * kvd) * 4), *V = malloc((size_t)(nk * kvd) * 4);
            float *q = malloc((size_t)(g * hd) * 4), *o = malloc((size_t)(g * hd) * 4), *o1 = malloc((size_t)hd * 4);
            float *sc = malloc((size_t)(g * nk) * 4);
            double *p = malloc((size_t)nk * sizeof *p);
            for (int64_t i = 0; i < nk * kvd; i++) {
                K[i] = 4.0f * (urand(&seed) - 0.5f);
                V[i] = 2.0f * (urand(&seed) - 0.5f);
            }
            for (int64_t i = 0; i < g * hd; i++)
                q[i] = 4.0f * (urand(&seed) - 0.5f);
            const float scale = 1.0f / sqrtf((float)hd);
            const float *qs[3] = {q, q + hd, q + 2 * hd};
            float *os[3] = {o, o + hd, o + 2 * hd};
            rlpi_vec_attend(os, qs, (int)g, K + hd, V + hd, kvd, nk, hd, scale, sc); /* the second kv head */
            for (int64_t h = 0; h < g; h++) {
                float *one[1] = {o1};
                rlpi_vec_attend(one, &qs[h], 1, K + hd, V + hd, kvd, nk, hd, scale, sc);
                assert_memory_equal(o1, os[h], (size_t)hd * 4);
                double m = -INFINITY, l = 0;
                for (int64_t j = 0; j < nk; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += (double)qs[h][e] * K[j * kvd + hd + e];
                    p[j] = d * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j < nk; j++)
                    l += p[j] = exp(p[j] - m);
                for (int64_t e = 0; e < hd; e++) {
                    double r = 0;
                    for (int64_t j = 0; j < nk; j++)
                        r += p[j] * V[j * kvd + hd + e];
                    r /= l;
                    if (fabs(os[h][e] - r) > 1e-5)
                        fail_msg("attend hd=%lld nk=%lld head %lld elem %lld: %.9g vs %.9g", (long long)hd,
                                 (long long)nk, (long long)h, (long long)e, (double)os[h][e], r);
                }
            }
            free(K);
            free(V);
            free(q);
            free(o);
            free(o1);
            free(sc);
            free(p);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exp_within_2ulp),
        cmocka_unit_test(exp_edges),
        cmocka_unit_test(row_stats_match_double),
        cmocka_unit_test(logprob_grad_matches_double),
        cmocka_unit_test(swiglu_matches_double),
        cmocka_unit_test(exp_affine_sum_matches_double),
        cmocka_unit_test(attend_matches_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
