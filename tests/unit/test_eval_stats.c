/* The confidence intervals of evaluations (rlp_stats_*, trainer.h;
 * lib/train/eval_stats.c): Wilson intervals against published
 * values (0/10 → [0, 0.2775], 5/10 → [0.2366, 0.7634], as tabulated by
 * Newcombe 1998, Stat. Med. 17:857) and the closed form evaluated in
 * Python (53/200), to 1e-4; and the percentile bootstrap's behaviour: degenerate inputs,
 * coverage of the sample mean, the paired difference of a shifted copy. */
#include "rlpost.h"

#define EVAL_Z95 1.959963984540054
#define EVAL_BOOTSTRAP 2000

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

static void test_wilson(void **state)
{
    (void)state;
    static const struct {
        size_t hits, n;
        double lo, hi;
    } cases[] = {
        {0, 10, 0.0, 0.2775},    {5, 10, 0.2366, 0.7634}, {10, 10, 0.7225, 1.0},
        {53, 200, 0.2087, 0.3302}, {1, 1, 0.2065, 1.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double lo, hi;
        rlp_stats_wilson(&lo, &hi, cases[i].hits, cases[i].n, EVAL_Z95);
        assert_true(fabs(lo - cases[i].lo) < 1e-4);
        assert_true(fabs(hi - cases[i].hi) < 1e-4);
    }
    double lo, hi;
    rlp_stats_wilson(&lo, &hi, 0, 0, EVAL_Z95);
    assert_true(isnan(lo) && isnan(hi));
}

static void test_bootstrap(void **state)
{
    (void)state;
    double lo, hi, x[200], y[200];
    for (int i = 0; i < 200; i++)
        x[i] = 0.25;
    assert_int_equal(rlp_stats_bootstrap_mean(&lo, &hi, x, 200, EVAL_BOOTSTRAP, 1), 0);
    assert_true(lo == 0.25 && hi == 0.25);
    assert_int_equal(rlp_stats_bootstrap_mean(&lo, &hi, x, 0, EVAL_BOOTSTRAP, 1), 0);
    assert_true(isnan(lo) && isnan(hi));
    /* half zeros, half ones: mean 0.5, standard error 0.5/√200 ≈ 0.0354, so
     * the interval is about ±0.069 around 0.5 */
    for (int i = 0; i < 200; i++)
        x[i] = i % 2;
    assert_int_equal(rlp_stats_bootstrap_mean(&lo, &hi, x, 200, EVAL_BOOTSTRAP, 7), 0);
    assert_true(lo < 0.5 && hi > 0.5);
    assert_true(fabs((hi - lo) / 2 - 1.96 * 0.5 / sqrt(200.0)) < 0.015);
    /* seeded: the same interval again */
    double lo2, hi2;
    rlp_stats_bootstrap_mean(&lo2, &hi2, x, 200, EVAL_BOOTSTRAP, 7);
    assert_true(lo == lo2 && hi == hi2);
    /* paired: y = x + 0.1 everywhere → the difference is exactly 0.1 */
    for (int i = 0; i < 200; i++)
        y[i] = x[i] + 0.1;
    assert_int_equal(rlp_stats_bootstrap_paired(&lo, &hi, x, y, 200, EVAL_BOOTSTRAP, 3), 0);
    assert_true(fabs(lo - 0.1) < 1e-12 && fabs(hi - 0.1) < 1e-12);
    /* paired: b flips a quarter of a's zeros to one → difference 0.125 ± a
     * bit, and the interval excludes 0 */
    for (int i = 0; i < 200; i++)
        y[i] = x[i] == 0 && i % 4 == 0 ? 1 : x[i];
    assert_int_equal(rlp_stats_bootstrap_paired(&lo, &hi, x, y, 200, EVAL_BOOTSTRAP, 3), 0);
    assert_true(lo > 0 && lo < 0.25 && hi > 0.25 && hi < 0.4);
}

/* Misuse: a clear error, nothing written. */
static void test_misuse(void **state)
{
    (void)state;
    double lo = 7, hi = 7, x[2] = {0, 1};
    assert_int_equal(rlp_stats_wilson(&lo, &hi, 3, 2, EVAL_Z95), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_stats_wilson(NULL, &hi, 1, 2, EVAL_Z95), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_stats_wilson(&lo, &hi, 1, 2, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_stats_bootstrap_mean(&lo, &hi, NULL, 2, EVAL_BOOTSTRAP, 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_stats_bootstrap_paired(&lo, &hi, x, NULL, 2, EVAL_BOOTSTRAP, 1), RLP_E_INVALID_ARG);
    assert_true(lo == 7 && hi == 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wilson),
        cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
