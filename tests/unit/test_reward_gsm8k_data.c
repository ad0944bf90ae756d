/* The gsm8k built-in on all 1,319 problems of GSM8K's test split
 * ($RLPOST_SHARED_DATA/gsm8k/test.jsonl; skipped, exit 77, when absent):
 * with the dataset's own answer (ending "#### N") as the reference, the
 * worked solution ending in \boxed{N} and the dataset answer itself score
 * 1, and the same solution ending in #### N+1 or \boxed{N-1} scores 0.
 * The reference is given both as the whole answer and as the bare N. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_PROBLEMS 1319
/* completions per problem: \boxed{N}, the dataset answer, #### N+1, \boxed{N-1} */
#define PER_PROBLEM 4

static const char *data_path(char *buf, size_t n)
{
    const char *root = getenv("RLPOST_SHARED_DATA");
    if (!root)
        return NULL;
    snprintf(buf, n, "%s/gsm8k/test.jsonl", root);
    FILE *f = fopen(buf, "rb");
    if (!f)
        return NULL;
    fclose(f);
    return buf;
}

static void add(rlp_batch *b, const char *question, const char *completion, const char *meta, uint64_t group)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    t.group_id = group;
    t.prompt_text = question;
    t.completion_text = completion;
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.temperature = 1.0f;
    t.reward = NAN;
    t.valid = 1;
    t.metadata_json = meta;
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
}

/* Builds the batch; reference_whole: the metadata's reference is the
 * whole dataset answer, else the bare number. Returns the problem count. */
static size_t build(rlp_batch *b, const char *path, int reference_whole)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0, n = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)len, 0, &err);
        assert_non_null(o);
        const char *q = json_string_value(json_object_get(o, "question"));
        const char *a = json_string_value(json_object_get(o, "answer"));
        assert_non_null(q);
        assert_non_null(a);
        const char *h = strstr(a, "#### ");
        assert_non_null(h);
        const char *num = h + 5;
        /* every test answer is an integer, some with thousands commas */
        char digits[32];
        size_t d = 0;
        for (const char *p = num; *p && *p != '\n'; p++) {
            if (*p == ',')
                continue;
            assert_true((*p >= '0' && *p <= '9') || (*p == '-' && d == 0));
            assert_true(d + 1 < sizeof digits);
            digits[d++] = *p;
        }
        digits[d] = '\0';
        long long v = strtoll(digits, NULL, 10);
        size_t work = (size_t)(h - a); /* the worked solution without its #### line */
        char *boxed = NULL, *plus = NULL, *minus = NULL, *meta = NULL;
        assert_true(asprintf(&boxed, "%.*sSo the answer is \\boxed{%s}.", (int)work, a, num) > 0);
        assert_true(asprintf(&plus, "%.*s#### %lld", (int)work, a, v + 1) > 0);
        assert_true(asprintf(&minus, "%.*sThe answer is $\\boxed{%lld}$", (int)work, a, v - 1) > 0);
        json_t *m = json_pack("{s:s}", "reference", reference_whole ? a : digits);
        meta = json_dumps(m, JSON_COMPACT);
        add(b, q, boxed, meta, n + 1);
        add(b, q, a, meta, n + 1);
        add(b, q, plus, meta, n + 1);
        add(b, q, minus, meta, n + 1);
        free(boxed);
        free(plus);
        free(minus);
        free(meta);
        json_decref(m);
        json_decref(o);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static void run(int reference_whole)
{
    char buf[4096];
    const char *path = data_path(buf, sizeof buf);
    if (!path)
        skip();
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    size_t n = build(b, path, reference_whole);
    assert_int_equal(n, N_PROBLEMS);
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{\"threads\": 2}"), RLP_OK);
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    assert_int_equal(st.scored, N_PROBLEMS * PER_PROBLEM);
    assert_int_equal(st.valid, N_PROBLEMS * PER_PROBLEM);
    int bad = 0;
    for (size_t i = 0; i < n * PER_PROBLEM; i++) {
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
        float want = i % PER_PROBLEM < 2 ? 1.0f : 0.0f;
        if (t.reward != want && bad++ < 10)
            print_error("problem %zu form %zu: reward %g, want %g\n%s\n", i / PER_PROBLEM, i % PER_PROBLEM,
                        (double)t.reward, (double)want, t.completion_text);
    }
    assert_int_equal(bad, 0);
    assert_true(fabs(st.mean_score - 0.5) < 1e-12);
    rlp_reward_fn_free(fn);
    rlp_batch_free(b);
}

static void test_reference_is_the_dataset_answer(void **state)
{
    (void)state;
    run(1);
}

static void test_reference_is_the_number(void **state)
{
    (void)state;
    run(0);
}

int main(void)
{
    char buf[4096];
    if (!data_path(buf, sizeof buf)) {
        fprintf(stderr, "GSM8K test split not found under $RLPOST_SHARED_DATA: skipped\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_is_the_dataset_answer),
        cmocka_unit_test(test_reference_is_the_number),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
