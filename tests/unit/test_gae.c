/* GAE (lib/algo/gae.c) against a float64 PyTorch reference written from the
 * paper (tests/reference/make_gae_fixtures.py, padded [B, T] loop with a
 * response mask, itself checked there against eq. 16's closed form and Monte
 * Carlo): single tokens, mixed lengths, γ/λ from (1, 1) to (0.99, 0) and
 * γ = 0, dense and outcome rewards, multi-turn masks with observations in the
 * middle and at the end, all-masked and empty sequences, truncated episodes
 * with bootstrap values, 812-token sequences. Tolerance |got − want| ≤
 * 1e-5·(1 + |want|): float32 outputs of double sums over ≤ 512 steps of
 * float32 inputs, so the float32 rounding (6e-8 relative) is the only error
 * expected. Also a hand-computed case (exact, dyadic values) and the
 * argument errors, which leave the outputs untouched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/gae.h"
#include "test_support.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

static float *floats(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    float *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (float)json_number_value(json_array_get(a, i));
    return v;
}

static void test_against_pytorch(void **state)
{
    (void)state;
    char path[4096];
    json_error_t err;
    json_t *root =
        json_load_file(source_path(path, sizeof path, "tests/reference/fixtures/rl/gae_cases.json"), 0, &err);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    size_t nc = json_array_size(cases);
    assert_true(nc >= 70);
    double worst = 0, worst_rel = 0;
    size_t n_masked = 0, n_boot = 0, n_values = 0;
    for (size_t ci = 0; ci < nc; ci++) {
        json_t *c = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *lens = json_object_get(c, "lens");
        size_t n_seq = json_array_size(lens);
        size_t *tok_start = malloc((n_seq + 1) * sizeof *tok_start);
        tok_start[0] = 0;
        for (size_t i = 0; i < n_seq; i++)
            tok_start[i + 1] = tok_start[i] + (size_t)json_integer_value(json_array_get(lens, i));
        size_t n_tok = tok_start[n_seq], n;
        float *r = floats(json_object_get(c, "token_reward"), &n);
        assert_int_equal(n, n_tok);
        float *v = floats(json_object_get(c, "values"), &n);
        assert_int_equal(n, n_tok);
        json_t *wa = json_object_get(c, "advantages"), *wr = json_object_get(c, "returns");
        assert_int_equal(json_array_size(wa), n_tok);
        assert_int_equal(json_array_size(wr), n_tok);
        uint8_t *mask = NULL;
        json_t *jm = json_object_get(c, "mask");
        if (json_is_array(jm)) {
            assert_int_equal(json_array_size(jm), n_tok);
            mask = malloc(n_tok ? n_tok : 1);
            for (size_t k = 0; k < n_tok; k++)
                mask[k] = (uint8_t)json_integer_value(json_array_get(jm, k));
            n_masked++;
        }
        float *boot = NULL;
        json_t *jb = json_object_get(c, "bootstrap");
        if (json_is_array(jb)) {
            boot = floats(jb, &n);
            assert_int_equal(n, n_seq);
            n_boot++;
        }
        float gamma = (float)json_number_value(json_object_get(c, "gamma"));
        float lambda = (float)json_number_value(json_object_get(c, "lambda"));
        rlpi_gae_seqs s = {
            .n_seqs = n_seq, .tok_start = tok_start, .token_reward = r, .values = v, .mask = mask, .bootstrap = boot};
        float *adv = malloc((n_tok ? n_tok : 1) * sizeof *adv), *ret = malloc((n_tok ? n_tok : 1) * sizeof *ret);
        for (size_t k = 0; k < n_tok; k++)
            adv[k] = ret[k] = NAN; /* every token must be written */
        assert_int_equal(rlpi_gae(&s, gamma, lambda, adv, ret), RLP_OK);
        for (size_t k = 0; k < n_tok; k++) {
            double ea = json_number_value(json_array_get(wa, k)), er = json_number_value(json_array_get(wr, k));
            double da = fabs(adv[k] - ea), dr = fabs(ret[k] - er);
            if (!(da <= TOL * (1 + fabs(ea))) || !(dr <= TOL * (1 + fabs(er))))
                fail_msg("case %zu (%s, γ %g λ %g) token %zu: advantage %.9g want %.9g, return %.9g want %.9g", ci,
                         name, gamma, lambda, k, adv[k], ea, ret[k], er);
            worst = fmax(worst, fmax(da, dr));
            worst_rel = fmax(worst_rel, fmax(da / (1 + fabs(ea)), dr / (1 + fabs(er))));
            if (mask && !mask[k]) /* exactly 0, not a rounding residue */
                assert_true(adv[k] == 0.0f && ret[k] == 0.0f && !signbit(adv[k]) && !signbit(ret[k]));
            n_values++;
        }
        free(adv), free(ret), free(r), free(v), free(mask), free(boot), free(tok_start);
    }
    assert_true(n_masked >= 20 && n_boot >= 20);
    print_message("%zu PyTorch GAE cases (%zu with a mask, %zu truncated), %zu tokens: largest |diff| %.3g, "
                  "largest |diff|/(1+|want|) %.3g\n",
                  nc, n_masked, n_boot, n_values, worst, worst_rel);
    json_decref(root);
}

/* Worked by hand with dyadic numbers, so every step is exact in float:
 * one sequence, r = (0.5, 9, 1), V = (0.25, 7, 0.375), mask (1, 0, 1),
 * γ = λ = 0.5. The observation's 9 and 7 must not be read. */
static void test_hand_computed(void **state)
{
    (void)state;
    const size_t tok_start[] = {0, 3, 3, 4};
    const float r[] = {0.5f, 9.0f, 1.0f, 2.0f}, v[] = {0.25f, 7.0f, 0.375f, 0.5f};
    const uint8_t mask[] = {1, 0, 1, 1};
    const float boot[] = {0.75f, 100.0f, 0.5f};
    float a[4], ret[4];
    rlpi_gae_seqs s = {
        .n_seqs = 3, .tok_start = tok_start, .token_reward = r, .values = v, .mask = mask, .bootstrap = boot};
    /* truncated, bootstrap 0.75:
     * t=2: δ = 1 + 0.5·0.75 − 0.375 = 1, A = 1, R = 1.375
     * t=0: δ = 0.5 + 0.5·0.375 − 0.25 = 0.4375, A = 0.4375 + 0.25·1 = 0.6875, R = 0.9375
     * the empty sequence 1 (bootstrap 100) writes nothing; sequence 2, one token:
     * δ = 2 + 0.5·0.5 − 0.5 = 1.75 */
    assert_int_equal(rlpi_gae(&s, 0.5f, 0.5f, a, ret), RLP_OK);
    assert_true(a[0] == 0.6875f && ret[0] == 0.9375f);
    assert_true(a[1] == 0.0f && ret[1] == 0.0f);
    assert_true(a[2] == 1.0f && ret[2] == 1.375f);
    assert_true(a[3] == 1.75f && ret[3] == 2.25f);
    /* terminal: t=2: δ = 1 − 0.375 = 0.625 = A, R = 1; t=0: A = 0.4375 + 0.25·0.625 = 0.59375, R = 0.84375;
     * t=3: δ = 2 − 0.5 = 1.5, R = 2 */
    s.bootstrap = NULL;
    assert_int_equal(rlpi_gae(&s, 0.5f, 0.5f, a, ret), RLP_OK);
    assert_true(a[0] == 0.59375f && ret[0] == 0.84375f);
    assert_true(a[1] == 0.0f && ret[1] == 0.0f);
    assert_true(a[2] == 0.625f && ret[2] == 1.0f);
    assert_true(a[3] == 1.5f && ret[3] == 2.0f);
    /* no mask: the 9 and 7 now count. t=2: A = 0.625; t=1: δ = 9 + 0.5·0.375 − 7 = 2.1875,
     * A = 2.1875 + 0.25·0.625 = 2.34375; t=0: δ = 0.5 + 3.5 − 0.25 = 3.75, A = 3.75 + 0.25·2.34375 = 4.3359375 */
    s.mask = NULL;
    assert_int_equal(rlpi_gae(&s, 0.5f, 0.5f, a, ret), RLP_OK);
    assert_true(a[2] == 0.625f && a[1] == 2.34375f && ret[1] == 9.34375f && a[0] == 4.3359375f);
    /* γ = λ = 1: Monte Carlo, A_t = Σ r − V_t: 10.5 − 0.25, 10 − 7, 1 − 0.375 */
    assert_int_equal(rlpi_gae(&s, 1.0f, 1.0f, a, ret), RLP_OK);
    assert_true(a[0] == 10.25f && a[1] == 3.0f && a[2] == 0.625f && ret[0] == 10.5f && ret[1] == 10.0f);
    /* λ = 0: the one-step TD errors */
    assert_int_equal(rlpi_gae(&s, 0.5f, 0.0f, a, ret), RLP_OK);
    assert_true(a[0] == 3.75f && a[1] == 2.1875f && a[2] == 0.625f);
}

static void test_errors(void **state)
{
    (void)state;
    const size_t tok_start[] = {0, 2, 3}, bad_start[] = {0, 2, 1};
    float r[] = {0.5f, 1.0f, 0.25f}, v[] = {0.1f, 0.2f, 0.3f}, boot[] = {0.5f, 0.5f};
    float a[3], ret[3];
    rlpi_gae_seqs ok = {.n_seqs = 2, .tok_start = tok_start, .token_reward = r, .values = v};
    assert_int_equal(rlpi_gae(&ok, 0.99f, 0.95f, a, ret), RLP_OK);
    for (int k = 0; k < 3; k++)
        a[k] = ret[k] = -42.0f;
#define BAD(expr)                                                                                                      \
    do {                                                                                                               \
        assert_int_equal((expr), RLP_E_INVALID_ARG);                                                                   \
        assert_non_null(strstr(rlp_error_last(), "gae"));                                                              \
        for (int k = 0; k < 3; k++) /* nothing written on failure */                                                   \
            assert_true(a[k] == -42.0f && ret[k] == -42.0f);                                                           \
    } while (0)
    BAD(rlpi_gae(NULL, 0.99f, 0.95f, a, ret));
    BAD(rlpi_gae(&ok, 0.99f, 0.95f, NULL, ret));
    BAD(rlpi_gae(&ok, 0.99f, 0.95f, a, NULL));
    rlpi_gae_seqs s = ok;
    s.tok_start = NULL;
    BAD(rlpi_gae(&s, 0.99f, 0.95f, a, ret));
    s = ok;
    s.values = NULL;
    BAD(rlpi_gae(&s, 0.99f, 0.95f, a, ret));
    s = ok;
    s.token_reward = NULL;
    BAD(rlpi_gae(&s, 0.99f, 0.95f, a, ret));
    s = ok;
    s.tok_start = bad_start;
    BAD(rlpi_gae(&s, 0.99f, 0.95f, a, ret));
    BAD(rlpi_gae(&ok, 1.5f, 0.95f, a, ret));
    BAD(rlpi_gae(&ok, -0.1f, 0.95f, a, ret));
    BAD(rlpi_gae(&ok, 0.99f, 1.01f, a, ret));
    BAD(rlpi_gae(&ok, 0.99f, -1e-8f, a, ret));
    BAD(rlpi_gae(&ok, NAN, 0.95f, a, ret));
    BAD(rlpi_gae(&ok, 0.99f, NAN, a, ret));
    v[2] = NAN; /* in the last sequence: checked before the first is written */
    BAD(rlpi_gae(&ok, 0.99f, 0.95f, a, ret));
    v[2] = 0.3f;
    r[1] = INFINITY;
    BAD(rlpi_gae(&ok, 0.99f, 0.95f, a, ret));
    r[1] = 1.0f;
    s = ok;
    s.bootstrap = boot;
    boot[1] = -INFINITY;
    BAD(rlpi_gae(&s, 0.99f, 0.95f, a, ret));
    boot[1] = 0.5f;
    assert_int_equal(rlpi_gae(&s, 0.99f, 0.95f, a, ret), RLP_OK);
    /* the bounds themselves are valid; no sequences is nothing to do */
    assert_int_equal(rlpi_gae(&ok, 0.0f, 1.0f, a, ret), RLP_OK);
    assert_int_equal(rlpi_gae(&ok, 1.0f, 0.0f, a, ret), RLP_OK);
    s = ok;
    s.n_seqs = 0;
    assert_int_equal(rlpi_gae(&s, 0.5f, 0.5f, a, ret), RLP_OK);
#undef BAD
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_pytorch),
        cmocka_unit_test(test_hand_computed),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
