/* The confidence intervals of `rlpost train` evaluations
 * (examples/rlpost/eval_stats.c): Wilson intervals against published
 * values (0/10 → [0, 0.2775], 5/10 → [0.2366, 0.7634], as tabulated by
 * Newcombe 1998, Stat. Med. 17:857) and the closed form evaluated in
 * Python (53/200), to 1e-4; and the percentile bootstrap's behaviour: degenerate inputs,
 * coverage of the sample mean, the paired difference of a shifted copy. */
#include "eval_stats.h"

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
        eval_wilson(cases[i].hits, cases[i].n, EVAL_Z95, &lo, &hi);
        assert_true(fabs(lo - cases[i].lo) < 1e-4);
        assert_true(fabs(hi - cases[i].hi) < 1e-4);
    }
    double lo, hi;
    eval_wilson(0, 0, EVAL_Z95, &lo, &hi);
    assert_true(isnan(lo) && isnan(hi));
}

static void test_bootstrap(void **state)
{
    (void)state;
    double lo, hi, x[200], y[200];
    for (int i = 0; i < 200; i++)
        x[i] = 0.25;
    assert_int_equal(eval_bootstrap_mean(x, 200, EVAL_BOOTSTRAP, 1, &lo, &hi), 0);
    assert_true(lo == 0.25 && hi == 0.25);
    assert_int_equal(eval_bootstrap_mean(x, 0, EVAL_BOOTSTRAP, 1, &lo, &hi), 0);
    assert_true(isnan(lo) && isnan(hi));
    /* half zeros, half ones: mean 0.5, standard error 0.5/√200 ≈ 0.0354, so
     * the interval is about ±0.069 around 0.5 */
    for (int i = 0; i < 200; i++)
        x[i] = i % 2;
    assert_int_equal(eval_bootstrap_mean(x, 200, EVAL_BOOTSTRAP, 7, &lo, &hi), 0);
    assert_true(lo < 0.5 && hi > 0.5);
    assert_true(fabs((hi - lo) / 2 - 1.96 * 0.5 / sqrt(200.0)) < 0.015);
    /* seeded: the same interval again */
    double lo2, hi2;
    eval_bootstrap_mean(x, 200, EVAL_BOOTSTRAP, 7, &lo2, &hi2);
    assert_true(lo == lo2 && hi == hi2);
    /* paired: y = x + 0.1 everywhere → the difference is exactly 0.1 */
    for (int i = 0; i < 200; i++)
        y[i] = x[i] + 0.1;
    assert_int_equal(eval_bootstrap_paired(x, y, 200, EVAL_BOOTSTRAP, 3, &lo, &hi), 0);
    assert_true(fabs(lo - 0.1) < 1e-12 && fabs(hi - 0.1) < 1e-12);
    /* paired: b flips a quarter of a's zeros to one → difference 0.125 ± a
     * bit, and the interval excludes 0 */
    for (int i = 0; i < 200; i++)
        y[i] = x[i] == 0 && i % 4 == 0 ? 1 : x[i];
    assert_int_equal(eval_bootstrap_paired(x, y, 200, EVAL_BOOTSTRAP, 3, &lo, &hi), 0);
    assert_true(lo > 0 && lo < 0.25 && hi > 0.25 && hi < 0.4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wilson),
        cmocka_unit_test(test_bootstrap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
