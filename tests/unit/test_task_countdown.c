/* Countdown tasks: every problem solvable, checked by a brute-force solver
 * written here (every way of combining two values of the pool, both
 * orders, exact rationals), and the reference expression evaluated by a
 * parser written here uses each number once and equals the target. */
#include "rlpost.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Rationals in long double would round; numerator/denominator in
 * __int128 cannot overflow for ≤ 4 numbers below 100. */
__extension__ typedef __int128 i128;
typedef struct q {
    i128 n, d;
} q;

static i128 gcd128(i128 a, i128 b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b) {
        i128 t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

static q norm(i128 n, i128 d)
{
    if (d < 0)
        n = -n, d = -d;
    i128 g = gcd128(n, d);
    return (q){n / g, d / g};
}

/* Can the pool make target? integer_only: every step a positive integer. */
static int solvable(q *pool, int n, long long target, int integer_only)
{
    if (n == 1)
        return pool[0].d == 1 && pool[0].n == target;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j)
                continue;
            q a = pool[i], b = pool[j];
            q rest[6];
            int k = 0;
            for (int m = 0; m < n; m++)
                if (m != i && m != j)
                    rest[k++] = pool[m];
            q r[4];
            int nr = 0;
            r[nr++] = norm(a.n * b.d + b.n * a.d, a.d * b.d);
            r[nr++] = norm(a.n * b.d - b.n * a.d, a.d * b.d);
            r[nr++] = norm(a.n * b.n, a.d * b.d);
            if (b.n != 0)
                r[nr++] = norm(a.n * b.d, a.d * b.n);
            for (int o = 0; o < nr; o++) {
                if (integer_only && (r[o].d != 1 || r[o].n <= 0))
                    continue;
                rest[k] = r[o];
                if (solvable(rest, k + 1, target, integer_only))
                    return 1;
            }
        }
    return 0;
}

/* A recursive-descent evaluator of "+ - * /" and parentheses over
 * integers, recording the numbers it reads. */
typedef struct expr {
    const char *s;
    long long used[8];
    int n_used;
    int bad;
} expr;

static q parse_sum(expr *e);

static void skip_spaces(expr *e)
{
    while (*e->s == ' ')
        e->s++;
}

static q parse_atom(expr *e)
{
    skip_spaces(e);
    if (*e->s == '(') {
        e->s++;
        q v = parse_sum(e);
        skip_spaces(e);
        if (*e->s != ')')
            e->bad = 1;
        else
            e->s++;
        return v;
    }
    if (*e->s < '0' || *e->s > '9') {
        e->bad = 1;
        return (q){0, 1};
    }
    long long v = 0;
    while (*e->s >= '0' && *e->s <= '9')
        v = v * 10 + (*e->s++ - '0');
    if (e->n_used < 8)
        e->used[e->n_used++] = v;
    return (q){v, 1};
}

static q parse_product(expr *e)
{
    q v = parse_atom(e);
    for (;;) {
        skip_spaces(e);
        char op = *e->s;
        if (op != '*' && op != '/')
            return v;
        e->s++;
        q w = parse_atom(e);
        if (op == '*')
            v = norm(v.n * w.n, v.d * w.d);
        else if (w.n == 0)
            e->bad = 1;
        else
            v = norm(v.n * w.d, v.d * w.n);
    }
}

static q parse_sum(expr *e)
{
    q v = parse_product(e);
    for (;;) {
        skip_spaces(e);
        char op = *e->s;
        if (op != '+' && op != '-')
            return v;
        e->s++;
        q w = parse_product(e);
        v = norm(op == '+' ? v.n * w.d + w.n * v.d : v.n * w.d - w.n * v.d, v.d * w.d);
    }
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void check_problems(const char *options, size_t n, int min_count, int max_count,
                           long long lo_num, long long hi_num, long long lo_t, long long hi_t,
                           int integer_only)
{
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "countdown", options), RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, n, NULL), RLP_OK);
    int counts[8] = {0};
    for (size_t i = 0; i < n; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        json_t *m = json_loads(it.metadata_json, 0, NULL);
        assert_non_null(m);
        json_t *nums = json_object_get(m, "numbers");
        long long target = json_integer_value(json_object_get(m, "target"));
        int k = (int)json_array_size(nums);
        assert_true(k >= min_count && k <= max_count);
        counts[k]++;
        assert_true(target >= lo_t && target <= hi_t);
        q pool[6];
        long long sorted[6];
        char list[128] = "[";
        for (int j = 0; j < k; j++) {
            long long v = json_integer_value(json_array_get(nums, j));
            assert_true(v >= lo_num && v <= hi_num);
            pool[j] = (q){v, 1};
            sorted[j] = v;
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld", j ? ", " : "", v);
        }
        if (!solvable(pool, k, target, integer_only))
            fail_msg("unsolvable: %s target %lld", list, target);
        /* TinyZero's wording with the numbers and target of the metadata */
        char want[256];
        snprintf(want, sizeof want, "Using the numbers %s], create an equation that equals %lld.", list,
                 target);
        assert_true(!strncmp(it.question, want, strlen(want)));
        /* the reference is a witness */
        expr e = {.s = it.reference};
        q v = parse_sum(&e);
        skip_spaces(&e);
        assert_false(e.bad);
        assert_int_equal(*e.s, '\0');
        assert_true(v.d == 1 && v.n == target);
        assert_int_equal(e.n_used, k);
        qsort(e.used, (size_t)k, sizeof e.used[0], cmp_ll);
        qsort(sorted, (size_t)k, sizeof sorted[0], cmp_ll);
        assert_memory_equal(e.used, sorted, (size_t)k * sizeof sorted[0]);
        assert_string_equal(json_string_value(json_object_get(m, "reference")), it.reference);
        assert_string_equal(json_string_value(json_object_get(m, "task")), "countdown");
        json_decref(m);
    }
    for (int k = min_count; k <= max_count; k++)
        assert_true(counts[k] > 0);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
}

/* The defaults (3–4 numbers in 1–99, target 10–100, integer steps). */
static void default_problems_always_solvable(void **state)
{
    (void)state;
    check_problems("{\"seed\": 1}", 2000, 3, 4, 1, 99, 10, 100, 1);
}

static void other_ranges_always_solvable(void **state)
{
    (void)state;
    check_problems("{\"seed\": 2, \"count\": 4, \"min_number\": 1, \"max_number\": 25, "
                   "\"min_target\": 100, \"max_target\": 999}",
                   300, 4, 4, 1, 25, 100, 999, 1);
    check_problems("{\"seed\": 3, \"min_count\": 2, \"max_count\": 5, \"integer_steps\": false}", 300,
                   2, 5, 1, 99, 10, 100, 0);
}

static void deterministic_and_checked(void **state)
{
    (void)state;
    rlp_task *a, *b, *c;
    assert_int_equal(rlp_task_create(&a, "countdown", "{\"seed\": 11}"), RLP_OK);
    assert_int_equal(rlp_task_create(&b, "countdown", "{\"seed\": 11}"), RLP_OK);
    assert_int_equal(rlp_task_create(&c, "countdown", "{\"seed\": 12}"), RLP_OK);
    rlp_prompt_set *sa, *sb, *sc;
    assert_int_equal(rlp_task_next_batch(&sa, a, 100, NULL), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&sb, b, 100, NULL), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&sc, c, 100, NULL), RLP_OK);
    int differ = 0;
    for (size_t i = 0; i < 100; i++) {
        const rlp_prompt *pa = &rlp_prompt_set_prompts(sa)[i], *pb = &rlp_prompt_set_prompts(sb)[i],
                         *pc = &rlp_prompt_set_prompts(sc)[i];
        assert_string_equal(pa->text, pb->text);
        assert_string_equal(pa->metadata_json, pb->metadata_json);
        differ += strcmp(pa->metadata_json, pc->metadata_json) != 0;
        /* the TinyZero plain rendering: system, " " + question, the opener */
        assert_null(pa->tokens);
        assert_true(!strncmp(pa->text, "You are a helpful assistant. You first thinks", 45));
        assert_non_null(strstr(pa->text, "provides the user with the answer. Using the numbers ["));
        const char *end = "Let me solve this step by step.\n<think>";
        assert_string_equal(pa->text + strlen(pa->text) - strlen(end), end);
    }
    assert_true(differ > 90);
    rlp_prompt_set_free(sa), rlp_prompt_set_free(sb), rlp_prompt_set_free(sc);
    rlp_task_free(a), rlp_task_free(b), rlp_task_free(c);

    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "countdown", "{\"count\": 7}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "countdown", "{\"min_number\": 0}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "countdown", "{\"min_target\": 50, \"max_target\": 40}"),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "countdown", "{\"integer_steps\": 1}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "countdown", "{\"people\": 3}"), RLP_E_INVALID_ARG);
    /* a target range nothing can reach fails cleanly, not forever */
    assert_int_equal(rlp_task_create(&t, "countdown",
                                     "{\"count\": 2, \"max_number\": 3, \"min_target\": 1000000, \"max_target\": 2000000}"),
                     RLP_OK);
    rlp_prompt_set *s;
    assert_int_equal(rlp_task_next_batch(&s, t, 1, NULL), RLP_E_UNSUPPORTED);
    uint64_t pos = 99;
    assert_int_equal(rlp_task_position(&pos, t), RLP_OK);
    assert_int_equal(pos, 0);
    rlp_task_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_problems_always_solvable),
        cmocka_unit_test(other_ranges_always_solvable),
        cmocka_unit_test(deterministic_and_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
