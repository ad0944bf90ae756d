/* The reward built-ins on prompts served by the task generators, through
 * the public API, as a training loop would use them: the metadata a task
 * attaches (reference, assistant prefix, numbers, target) is what the
 * rewards read. For 1,000 generated Knights-and-Knaves puzzles of each
 * size 2-8 (template "logic-rl", whose prompt opens the assistant turn
 * with <think>), the reference solution in <answer> tags scores Logic-RL's
 * full 3 and the solution with every role flipped scores -0.5; for 1,000
 * Countdown problems the task's own solution scores 1 and the numbers
 * merely summed 0.1 (unless the sum happens to be the target). For each
 * task with an answer format (K&K, Countdown, a dataset with numeric
 * references) a placeholder in <answer> (what a model copies from a
 * prompt's example) gets the format's wrong score and a real answer in
 * the same shape the right one; "answer": "any" keeps kk.py's tags-only
 * rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_PROBLEMS 1000

static void append(rlp_batch *b, const rlp_prompt *p, const char *completion)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    t.prompt_text = p->text;
    t.completion_text = completion;
    t.metadata_json = p->metadata_json;
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.temperature = 1.0f;
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
}

static rlp_prompt_set *serve(const char *task_name, const char *options)
{
    rlp_task *task = NULL;
    if (rlp_task_create(&task, task_name, options) != RLP_OK)
        fail_msg("task %s: %s", task_name, rlp_error_last());
    rlp_prompt_set *set = NULL;
    assert_int_equal(rlp_task_next_batch(&set, task, N_PROBLEMS, NULL), RLP_OK);
    rlp_task_free(task);
    size_t n = 0;
    assert_int_equal(rlp_prompt_set_size(&n, set), RLP_OK);
    assert_int_equal(n, N_PROBLEMS);
    return set;
}

static rlp_reward_stats score_opts(const char *name, const char *options, rlp_batch *b)
{
    rlp_reward_fn *fn = NULL;
    if (rlp_reward_fn_create_builtin(&fn, name, options) != RLP_OK)
        fail_msg("%s %s: %s", name, options, rlp_error_last());
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    rlp_reward_fn_free(fn);
    return st;
}

static float reward_of(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    if (!t.valid)
        fail_msg("trajectory %zu invalid: %s", i, t.error);
    return t.reward;
}

static rlp_reward_stats score(const char *name, rlp_batch *b)
{
    return score_opts(name, "{\"threads\": 2}", b);
}

/* "knight" <-> "knave" in a reference's lines. */
static char *flip_roles(const char *s)
{
    size_t n = strlen(s);
    char *out = malloc(n * 2 + 1), *o = out;
    assert_non_null(out);
    while (*s) {
        if (!strncmp(s, "knight", 6)) {
            memcpy(o, "knave", 5), o += 5, s += 6;
        } else if (!strncmp(s, "knave", 5)) {
            memcpy(o, "knight", 6), o += 6, s += 5;
        } else {
            *o++ = *s++;
        }
    }
    *o = '\0';
    return out;
}

static void test_knights_and_knaves(void **state)
{
    (void)state;
    for (int people = 2; people <= 8; people++) {
        char opts[64];
        snprintf(opts, sizeof opts, "{\"seed\": %d, \"people\": %d}", 7 + people, people);
        rlp_prompt_set *set = serve("kk", opts);
        const rlp_prompt *p = rlp_prompt_set_prompts(set);
        rlp_batch *b = NULL;
        assert_int_equal(rlp_batch_create(&b), RLP_OK);
        for (size_t i = 0; i < N_PROBLEMS; i++) {
            rlp_task_item it;
            memset(&it, 0, sizeof it);
            it.version = RLP_TASK_ITEM_VERSION;
            assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
            assert_non_null(it.reference);
            /* the prompt opened <think>: the completion goes on from there */
            char *flipped = flip_roles(it.reference), *right = NULL, *wrong = NULL;
            assert_true(asprintf(&right, "Let me check each statement.\n</think>\n<answer>\n%s\n</answer>",
                                 it.reference) > 0);
            assert_true(asprintf(&wrong, "Hmm.</think><answer>%s</answer>", flipped) > 0);
            append(b, &p[i], right);
            append(b, &p[i], wrong);
            free(right);
            free(wrong);
            free(flipped);
        }
        rlp_reward_stats st = score("logic_rl", b);
        assert_int_equal(st.valid, 2 * N_PROBLEMS);
        for (size_t i = 0; i < N_PROBLEMS; i++) {
            assert_float_equal(reward_of(b, 2 * i), 3.0f, 0.0f);
            assert_float_equal(reward_of(b, 2 * i + 1), -0.5f, 0.0f);
        }
        rlp_batch_free(b);
        rlp_prompt_set_free(set);
    }
}

static void test_countdown(void **state)
{
    (void)state;
    rlp_prompt_set *set = serve("countdown", "{\"seed\": 11}");
    const rlp_prompt *p = rlp_prompt_set_prompts(set);
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    int sum_is_target[N_PROBLEMS];
    for (size_t i = 0; i < N_PROBLEMS; i++) {
        rlp_task_item it;
        memset(&it, 0, sizeof it);
        it.version = RLP_TASK_ITEM_VERSION;
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        assert_non_null(it.reference);
        char *right = NULL;
        assert_true(asprintf(&right, "<think>found it</think>\n<answer>%s</answer>", it.reference) > 0);
        append(b, &p[i], right);
        free(right);
        /* the numbers, summed: well-formed, uses each once */
        const char *nums = strstr(p[i].metadata_json, "\"numbers\"");
        assert_non_null(nums);
        nums = strchr(nums, '[');
        assert_non_null(nums);
        char sum[256] = "<answer>";
        long total = 0;
        int first = 1;
        for (const char *q = nums + 1; *q && *q != ']';) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) {
                q++;
                continue;
            }
            snprintf(sum + strlen(sum), sizeof sum - strlen(sum), "%s%ld", first ? "" : " + ", v);
            total += v;
            first = 0;
            q = end;
        }
        strcat(sum, "</answer>");
        const char *tgt = strstr(p[i].metadata_json, "\"target\"");
        assert_non_null(tgt);
        sum_is_target[i] = total == strtol(strchr(tgt, ':') + 1, NULL, 10);
        append(b, &p[i], sum);
    }
    rlp_reward_stats st = score("countdown", b);
    assert_int_equal(st.valid, 2 * N_PROBLEMS);
    for (size_t i = 0; i < N_PROBLEMS; i++) {
        assert_float_equal(reward_of(b, 2 * i), 1.0f, 0.0f);
        assert_float_equal(reward_of(b, 2 * i + 1), sum_is_target[i] ? 1.0f : 0.1f, 0.0f);
    }
    rlp_batch_free(b);
    rlp_prompt_set_free(set);
}

/* Contents of <answer> that stand for an answer without being one. */
static const char *const placeholders[] = {
    "answer", " answer ", "Answer", "your answer", "answer here", "final answer", "...", "", "[answer]",
    "(1) Zoey is a knight\n(2) ... ", /* Logic-RL's own example, cut short */
};
#define N_PLACEHOLDERS (sizeof placeholders / sizeof placeholders[0])
#define N_FORMAT_PROBLEMS 100

/* For N_FORMAT_PROBLEMS prompts of `set`: each placeholder, then the
 * real answer (real(i)), in the shape "... </think> <answer> X </answer>"
 * that follows a prompt that opened <think> (think_open) or with its own
 * <think>. Checks logic_rl_format's scores with the default options (the
 * placeholders -1, the answer +1) and with "answer": "any" (all +1). */
static void check_placeholders(rlp_prompt_set *set, const char *(*real)(rlp_prompt_set *, size_t, char *, size_t),
                               int think_open)
{
    const rlp_prompt *p = rlp_prompt_set_prompts(set);
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    for (size_t i = 0; i < N_FORMAT_PROBLEMS; i++) {
        char ans[1024], c[1200];
        for (size_t k = 0; k <= N_PLACEHOLDERS; k++) {
            const char *x = k < N_PLACEHOLDERS ? placeholders[k] : real(set, i, ans, sizeof ans);
            snprintf(c, sizeof c, "%s Let me think. </think> <answer> %s </answer>", think_open ? "" : "<think>", x);
            append(b, &p[i], c);
        }
    }
    size_t per = N_PLACEHOLDERS + 1, n = N_FORMAT_PROBLEMS * per;
    rlp_reward_stats st = score_opts("logic_rl_format", "{\"threads\": 2}", b);
    assert_int_equal(st.valid, n);
    for (size_t j = 0; j < n; j++) {
        float want = j % per == N_PLACEHOLDERS ? 1.0f : -1.0f;
        if (reward_of(b, j) != want)
            fail_msg("sample %zu (%s): %g, want %g", j,
                     j % per < N_PLACEHOLDERS ? placeholders[j % per] : "the real answer", reward_of(b, j), want);
    }
    st = score_opts("logic_rl_format", "{\"threads\": 2, \"answer\": \"any\"}", b);
    assert_int_equal(st.valid, n);
    for (size_t j = 0; j < n; j++)
        assert_float_equal(reward_of(b, j), 1.0f, 0.0f);
    rlp_batch_free(b);
}

static const char *item_reference(rlp_prompt_set *set, size_t i, char *buf, size_t cap)
{
    rlp_task_item it;
    memset(&it, 0, sizeof it);
    it.version = RLP_TASK_ITEM_VERSION;
    assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
    assert_non_null(it.reference);
    snprintf(buf, cap, "%s", it.reference);
    return buf;
}

/* A real but (mostly) wrong K&K answer: every role flipped. */
static const char *kk_flipped(rlp_prompt_set *set, size_t i, char *buf, size_t cap)
{
    char ref[1024];
    char *f = flip_roles(item_reference(set, i, ref, sizeof ref));
    snprintf(buf, cap, "%s", f);
    free(f);
    return buf;
}

/* The dataset's answer to "What is i + 7?", in \boxed{} for every third. */
static const char *number_answer(rlp_prompt_set *set, size_t i, char *buf, size_t cap)
{
    (void)set;
    snprintf(buf, cap, i % 3 ? "%zu" : "\\boxed{%zu}", i + 7);
    return buf;
}

static void test_placeholders_lose_the_format(void **state)
{
    (void)state;
    /* K&K: the task marks its answers as "kk" and names the people */
    rlp_prompt_set *set = serve("kk", "{\"seed\": 5}");
    assert_non_null(strstr(rlp_prompt_set_prompts(set)[0].metadata_json, "\"answer_type\":\"kk\""));
    check_placeholders(set, item_reference, 1);
    check_placeholders(set, kk_flipped, 1); /* a wrong answer still has the format */
    /* logic_rl: the real answer keeps kk.py's 3, a placeholder gets -1 - 2 */
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    char ref[1024], c[1200];
    for (size_t i = 0; i < N_FORMAT_PROBLEMS; i++) {
        snprintf(c, sizeof c, " x </think> <answer> %s </answer>", item_reference(set, i, ref, sizeof ref));
        append(b, &rlp_prompt_set_prompts(set)[i], c);
        append(b, &rlp_prompt_set_prompts(set)[i], " x </think> <answer> answer </answer>");
    }
    score("logic_rl", b);
    for (size_t i = 0; i < N_FORMAT_PROBLEMS; i++) {
        assert_float_equal(reward_of(b, 2 * i), 3.0f, 0.0f);
        assert_float_equal(reward_of(b, 2 * i + 1), -3.0f, 0.0f);
    }
    rlp_batch_free(b);
    rlp_prompt_set_free(set);

    /* Countdown: "equation" */
    set = serve("countdown", "{\"seed\": 5}");
    assert_non_null(strstr(rlp_prompt_set_prompts(set)[0].metadata_json, "\"answer_type\":\"equation\""));
    check_placeholders(set, item_reference, 1);
    rlp_prompt_set_free(set);

    /* a dataset with numeric references (plain and GSM8K-style): "number" */
    char path[] = "/tmp/rlpost_test_numeric_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    for (int i = 0; i < N_PROBLEMS; i++) {
        if (i % 2)
            fprintf(f, "{\"question\": \"What is %d + 7?\", \"answer\": \"%d + 7 = %d\\n#### %d\"}\n", i, i,
                    i + 7, i + 7);
        else
            fprintf(f, "{\"question\": \"What is %d + 7?\", \"answer\": \"%d\"}\n", i, i + 7);
    }
    fclose(f);
    rlp_task *task = NULL;
    assert_int_equal(rlp_task_open_jsonl(&task, path, "{\"shuffle\": false}"), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&set, task, N_FORMAT_PROBLEMS, NULL), RLP_OK);
    rlp_task_free(task);
    unlink(path);
    check_placeholders(set, number_answer, 0);
    rlp_prompt_set_free(set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_knights_and_knaves),
        cmocka_unit_test(test_countdown),
        cmocka_unit_test(test_placeholders_lose_the_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
