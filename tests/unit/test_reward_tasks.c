/* The reward built-ins on prompts served by the task generators, through
 * the public API, as a training loop would use them: the metadata a task
 * attaches (reference, assistant prefix, numbers, target) is what the
 * rewards read. For 1,000 generated Knights-and-Knaves puzzles of each
 * size 2-8 (template "logic-rl", whose prompt opens the assistant turn
 * with <think>), the reference solution in <answer> tags scores Logic-RL's
 * full 3 and the solution with every role flipped scores -0.5; for 1,000
 * Countdown problems the task's own solution scores 1 and the numbers
 * merely summed 0.1 (unless the sum happens to be the target). */
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

static rlp_reward_stats score(const char *name, rlp_batch *b)
{
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, name, "{\"threads\": 2}"), RLP_OK);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_knights_and_knaves),
        cmocka_unit_test(test_countdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
