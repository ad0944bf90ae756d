/* The arithmetic task (task "arith"): the training and held-out splits are
 * disjoint by construction (no question, and no commuted operand pair, on
 * both sides) for any seeds, together make up the whole problem set, and
 * every reference is the exact result recomputed here from the question
 * text; the order depends on the seed, the set does not; bad options are
 * refused by name. Through the public API, like a host. */
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

typedef struct item {
    char q[64];
    long long a, b, answer;
    char op; /* '+', '-', '*' */
} item;

/* Every problem of a task (one epoch), in serving order. */
static item *all_items(const char *options, size_t *n_out)
{
    rlp_task *t = NULL;
    assert_int_equal(rlp_task_create(&t, "arith", options), RLP_OK);
    uint64_t size = 0;
    assert_int_equal(rlp_task_size(&size, t), RLP_OK);
    assert_true(size > 0);
    rlp_prompt_set *set = NULL;
    assert_int_equal(rlp_task_next_batch(&set, t, (size_t)size, NULL), RLP_OK);
    item *v = calloc((size_t)size, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < size; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        snprintf(v[i].q, sizeof v[i].q, "%s", it.question);
        char word[16] = "";
        int got = sscanf(it.question, "What is %lld %15s %lld?", &v[i].a, word, &v[i].b);
        assert_int_equal(got, 3);
        v[i].op = !strcmp(word, "+") ? '+' : !strcmp(word, "-") ? '-' : !strcmp(word, "times") ? '*' : '?';
        assert_true(v[i].op != '?');
        long long want = v[i].op == '+' ? v[i].a + v[i].b : v[i].op == '-' ? v[i].a - v[i].b : v[i].a * v[i].b;
        v[i].answer = atoll(it.reference);
        assert_int_equal(v[i].answer, want);
        json_t *meta = json_loads(it.metadata_json, 0, NULL);
        assert_non_null(meta);
        assert_string_equal(json_string_value(json_object_get(meta, "answer_type")), "number");
        assert_string_equal(json_string_value(json_object_get(meta, "reference")), it.reference);
        json_decref(meta);
    }
    rlp_prompt_set_free(set);
    rlp_task_free(t);
    *n_out = (size_t)size;
    return v;
}

static int same_pair(const item *x, const item *y)
{
    return x->op == y->op && ((x->a == y->a && x->b == y->b) || (x->a == y->b && x->b == y->a));
}

static void test_splits_are_disjoint_and_complete(void **state)
{
    (void)state;
    const char *shapes[] = {"", "\"ops\": [\"+\", \"-\", \"*\"], \"max_add\": 40, \"max_mul\": 15, \"holdout\": 3, "};
    for (size_t s = 0; s < 2; s++) {
        char o_tr[256], o_ev[256], o_all[256];
        snprintf(o_tr, sizeof o_tr, "{%s\"split\": \"train\", \"seed\": 3}", shapes[s]);
        snprintf(o_ev, sizeof o_ev, "{%s\"split\": \"eval\", \"seed\": 99}", shapes[s]);
        snprintf(o_all, sizeof o_all, "{%s\"split\": \"all\"}", shapes[s]);
        size_t ntr, nev, nall;
        item *tr = all_items(o_tr, &ntr), *ev = all_items(o_ev, &nev), *all = all_items(o_all, &nall);
        assert_int_equal(ntr + nev, nall);
        for (size_t i = 0; i < nev; i++)
            for (size_t j = 0; j < ntr; j++) {
                assert_true(strcmp(ev[i].q, tr[j].q) != 0);
                assert_false(same_pair(&ev[i], &tr[j])); /* "a + b" held out means "b + a" too */
            }
        /* no repeats within a split: an epoch serves each problem once */
        for (size_t i = 0; i < nev; i++)
            for (size_t j = i + 1; j < nev; j++)
                assert_true(strcmp(ev[i].q, ev[j].q) != 0);
        if (s == 0) {
            /* the defaults: + over 1..30, × over 2..12; a quarter held out, enough for eval.n = 200 */
            assert_int_equal(nall, 30 * 30 + 11 * 11);
            assert_true(nev >= 200);
            assert_true(nev > nall / 4 - nall / 10 && nev < nall / 4 + nall / 10);
        }
        free(tr);
        free(ev);
        free(all);
    }
}

static void test_seed_orders_but_does_not_choose(void **state)
{
    (void)state;
    size_t n1, n2;
    item *a = all_items("{\"split\": \"eval\", \"seed\": 1}", &n1), *b = all_items("{\"split\": \"eval\", \"seed\": 2}", &n2);
    assert_int_equal(n1, n2);
    size_t moved = 0;
    for (size_t i = 0; i < n1; i++) {
        moved += strcmp(a[i].q, b[i].q) != 0;
        int found = 0;
        for (size_t j = 0; j < n2 && !found; j++)
            found = !strcmp(a[i].q, b[j].q);
        assert_true(found);
    }
    assert_true(moved > n1 / 2);
    free(a);
    free(b);
}

static void test_bad_options(void **state)
{
    (void)state;
    static const char *bad[] = {
        "{\"ops\": []}",           "{\"ops\": [\"/\"]}",   "{\"ops\": \"+\"}",   "{\"max_add\": 0}",
        "{\"max_mul\": 1}",        "{\"max_add\": 1001}",  "{\"holdout\": 1}",   "{\"split\": \"test\"}",
        "{\"size\": 5}",           "{\"people\": 3}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rlp_task *t = NULL;
        assert_int_equal(rlp_task_create(&t, "arith", bad[i]), RLP_E_INVALID_ARG);
        assert_null(t);
        assert_true(strlen(rlp_error_last()) > 0);
    }
    /* a split that happens to be empty is an error, not an endless wait */
    rlp_task *t = NULL;
    int rc = rlp_task_create(&t, "arith", "{\"ops\": [\"*\"], \"max_mul\": 2, \"split\": \"eval\"}");
    if (rc == RLP_OK) {
        uint64_t size = 0;
        rlp_task_size(&size, t);
        assert_true(size > 0);
        rlp_task_free(t);
    } else {
        assert_int_equal(rc, RLP_E_INVALID_ARG);
    }
}

static void test_cursor_resumes(void **state)
{
    (void)state;
    rlp_task *a = NULL, *b = NULL;
    const char *o = "{\"split\": \"train\", \"seed\": 5}";
    assert_int_equal(rlp_task_create(&a, "arith", o), RLP_OK);
    assert_int_equal(rlp_task_create(&b, "arith", o), RLP_OK);
    rlp_prompt_set *s = NULL;
    assert_int_equal(rlp_task_next_batch(&s, a, 7, NULL), RLP_OK);
    rlp_prompt_set_free(s);
    char cur[512];
    size_t len;
    assert_int_equal(rlp_task_cursor_save(a, cur, sizeof cur, &len), RLP_OK);
    assert_int_equal(rlp_task_cursor_restore(b, cur, len), RLP_OK);
    rlp_prompt_set *x = NULL, *y = NULL;
    assert_int_equal(rlp_task_next_batch(&x, a, 3, NULL), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&y, b, 3, NULL), RLP_OK);
    for (size_t i = 0; i < 3; i++) {
        rlp_task_item p = {.version = RLP_TASK_ITEM_VERSION}, q = {.version = RLP_TASK_ITEM_VERSION};
        rlp_prompt_set_item(&p, x, i);
        rlp_prompt_set_item(&q, y, i);
        assert_string_equal(p.question, q.question);
    }
    rlp_prompt_set_free(x);
    rlp_prompt_set_free(y);
    rlp_task_free(a);
    rlp_task_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splits_are_disjoint_and_complete),
        cmocka_unit_test(test_seed_orders_but_does_not_choose),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_cursor_resumes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
