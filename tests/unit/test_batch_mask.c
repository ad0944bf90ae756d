/* The loss mask and episode record of multi-turn trajectories (rlp_trajectory
 * version 3) through the batch: append and get keep them (copied, not
 * borrowed), a version-2 caller's shorter struct is neither read nor written
 * past its end, a mask value other than 0 and 1 and a malformed episode are
 * refused with the batch unchanged, and every copy (get + append,
 * rlp_batch_extend, rlpi_traj_copy) keeps them; rlpi_traj_push_observation
 * appends masked tokens with logprob 0 between model tokens. (Storage:
 * test_replay_buffer.c; the RL step: test_rl_step.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int32_t PROMPT[2] = {5, 6};
static const int32_t COMP[5] = {7, 8, 9, 10, 11};
static const float LP[5] = {-0.5f, -2.0f, 0.0f, 0.0f, -1.0f};
static const uint8_t MASK[5] = {1, 1, 0, 0, 1};

static rlp_episode_stats episode_of(uint32_t k)
{
    return (rlp_episode_stats){.version = RLP_EPISODE_STATS_VERSION,
                               .turns = 2 + k,
                               .tool_calls = 1 + k,
                               .tool_errors = k,
                               .tool_timeouts = 1,
                               .observation_tokens = 2,
                               .observations_cut = 4 + k,
                               .end = RLP_EPISODE_BUDGET,
                               .tool_seconds = 1.5 + k};
}

static rlp_trajectory traj(uint64_t gid, const uint8_t *mask, int episode)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    t.group_id = gid;
    t.prompt_tokens = PROMPT;
    t.n_prompt_tokens = 2;
    t.completion_tokens = COMP;
    t.logprobs = LP;
    t.n_completion_tokens = 5;
    t.completion_text = "turns and a tool's answer";
    t.finish_reason = RLP_FINISH_STOP;
    t.stop_index = -1;
    t.temperature = 1;
    t.reward = NAN;
    t.valid = 1;
    t.loss_mask = mask;
    t.has_episode = episode;
    if (episode)
        t.episode = episode_of((uint32_t)gid);
    return t;
}

static size_t size_of(const rlp_batch *b)
{
    size_t n = 0;
    assert_int_equal(rlp_batch_size(&n, b), RLP_OK);
    return n;
}

static void assert_multiturn(const rlp_batch *b, size_t i, uint64_t gid)
{
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    assert_int_equal(t.version, RLP_TRAJECTORY_VERSION);
    assert_int_equal(t.group_id, gid);
    assert_non_null(t.loss_mask);
    assert_memory_equal(t.loss_mask, MASK, 5);
    assert_true(t.has_episode);
    rlp_episode_stats e = episode_of((uint32_t)gid);
    assert_int_equal(t.episode.version, RLP_EPISODE_STATS_VERSION);
    assert_int_equal(t.episode.turns, e.turns);
    assert_int_equal(t.episode.tool_calls, e.tool_calls);
    assert_int_equal(t.episode.tool_errors, e.tool_errors);
    assert_int_equal(t.episode.tool_timeouts, e.tool_timeouts);
    assert_int_equal(t.episode.observation_tokens, e.observation_tokens);
    assert_int_equal(t.episode.observations_cut, e.observations_cut);
    assert_int_equal(t.episode.end, e.end);
    assert_true(t.episode.tool_seconds == e.tool_seconds);
}

static void test_append_get(void **state)
{
    (void)state;
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    uint8_t mask[5];
    memcpy(mask, MASK, 5);
    rlp_trajectory t = traj(3, mask, 1);
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    memset(mask, 1, 5); /* the batch holds a copy */
    assert_multiturn(b, 0, 3);
    /* without a mask or an episode: NULL and all zero on get */
    rlp_trajectory plain = traj(4, NULL, 0);
    plain.episode.turns = 9; /* ignored without has_episode */
    assert_int_equal(rlp_batch_append(b, &plain), RLP_OK);
    rlp_trajectory g = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&g, b, 1), RLP_OK);
    assert_null(g.loss_mask);
    assert_false(g.has_episode);
    rlp_episode_stats zero;
    memset(&zero, 0, sizeof zero);
    assert_memory_equal(&g.episode, &zero, sizeof zero);
    /* an all-observation completion is a valid trajectory too */
    static const uint8_t none[5] = {0};
    rlp_trajectory obs = traj(5, none, 1);
    assert_int_equal(rlp_batch_append(b, &obs), RLP_OK);
    assert_int_equal(rlp_batch_get(&g, b, 2), RLP_OK);
    assert_memory_equal(g.loss_mask, none, 5);
    rlp_batch_free(b);
}

/* rlp_trajectory as RLP_TRAJECTORY_VERSION 2 declared it ends where
 * loss_mask begins: such a caller's struct is followed by other memory */
static void test_version2_caller(void **state)
{
    (void)state;
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    rlp_trajectory t = traj(6, MASK, 1);
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    const size_t v2_size = offsetof(rlp_trajectory, loss_mask);
    union {
        rlp_trajectory t;
        uint8_t bytes[sizeof(rlp_trajectory) + 32];
    } u;
    memset(&u, 0xA5, sizeof u);
    u.t.version = 2;
    assert_int_equal(rlp_batch_get(&u.t, b, 0), RLP_OK);
    assert_int_equal(u.t.version, 2);
    assert_int_equal(u.t.group_id, 6);
    assert_int_equal(u.t.n_completion_tokens, 5);
    for (size_t k = v2_size; k < sizeof u.bytes; k++)
        assert_int_equal(u.bytes[k], 0xA5);
    /* appended by a version-2 caller: whatever follows its struct (here
     * bytes that would be a mask pointer and an episode flag) is not read */
    rlp_trajectory v2 = traj(7, NULL, 0);
    memcpy(&u.t, &v2, v2_size);
    u.t.version = 2;
    memset(u.bytes + v2_size, 0xA5, sizeof u.bytes - v2_size);
    assert_int_equal(rlp_batch_append(b, &u.t), RLP_OK);
    rlp_trajectory g = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&g, b, 1), RLP_OK);
    assert_int_equal(g.group_id, 7);
    assert_null(g.loss_mask);
    assert_false(g.has_episode);
    rlp_batch_free(b);
}

static void test_refusals(void **state)
{
    (void)state;
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    uint8_t bad[5] = {1, 0, 2, 0, 1};
    rlp_trajectory t = traj(1, bad, 0);
    assert_int_equal(rlp_batch_append(b, &t), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "loss_mask[2]"));
    bad[2] = 255;
    assert_int_equal(rlp_batch_append(b, &t), RLP_E_INVALID_ARG);
    /* malformed episode records */
    rlp_trajectory e = traj(1, MASK, 1);
    e.episode.version = 0;
    assert_int_equal(rlp_batch_append(b, &e), RLP_E_INVALID_ARG);
    e = traj(1, MASK, 1);
    e.episode.end = 6;
    assert_int_equal(rlp_batch_append(b, &e), RLP_E_INVALID_ARG);
    e.episode.end = -1;
    assert_int_equal(rlp_batch_append(b, &e), RLP_E_INVALID_ARG);
    e = traj(1, MASK, 1);
    e.episode.tool_seconds = NAN;
    assert_int_equal(rlp_batch_append(b, &e), RLP_E_INVALID_ARG);
    e.episode.tool_seconds = -1;
    assert_int_equal(rlp_batch_append(b, &e), RLP_E_INVALID_ARG);
    assert_int_equal(size_of(b), 0);
    /* an episode of a later stats version is taken as this one */
    e = traj(1, MASK, 1);
    e.episode.version = RLP_EPISODE_STATS_VERSION + 1;
    assert_int_equal(rlp_batch_append(b, &e), RLP_OK);
    rlp_trajectory g = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&g, b, 0), RLP_OK);
    assert_int_equal(g.episode.version, RLP_EPISODE_STATS_VERSION);
    rlp_batch_free(b);
}

static void test_copies_keep_it(void **state)
{
    (void)state;
    rlp_batch *a, *c;
    assert_int_equal(rlp_batch_create(&a), RLP_OK);
    assert_int_equal(rlp_batch_create(&c), RLP_OK);
    for (uint64_t g = 1; g <= 3; g++) {
        rlp_trajectory t = traj(g, MASK, 1);
        assert_int_equal(rlp_batch_append(a, &t), RLP_OK);
    }
    /* get + append: the copy a host makes */
    for (size_t i = 0; i < 3; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        assert_int_equal(rlp_batch_get(&t, a, i), RLP_OK);
        assert_int_equal(rlp_batch_append(c, &t), RLP_OK);
    }
    for (size_t i = 0; i < 3; i++)
        assert_multiturn(c, i, i + 1);
    /* extend moves them */
    assert_int_equal(rlp_batch_extend(c, a), RLP_OK);
    assert_int_equal(size_of(a), 0);
    assert_int_equal(size_of(c), 6);
    for (size_t i = 0; i < 6; i++)
        assert_multiturn(c, i, i % 3 + 1);
    /* rlpi_traj_copy: a deep copy of the mask */
    rlpi_traj copy;
    assert_int_equal(rlpi_traj_copy(&copy, &c->items[4]), RLP_OK);
    assert_ptr_not_equal(copy.loss_mask, c->items[4].loss_mask);
    assert_memory_equal(copy.loss_mask, MASK, 5);
    assert_true(copy.has_episode && copy.episode.tool_calls == 3);
    assert_int_equal(rlpi_traj_model_tokens(&copy), 3);
    rlpi_traj_clear(&copy);
    rlp_batch_free(a);
    rlp_batch_free(c);
}

/* what the multi-turn loop does: model tokens, then an observation, then
 * more model tokens, through several growths of the arrays */
static void test_push_observation(void **state)
{
    (void)state;
    rlpi_traj t;
    memset(&t, 0, sizeof t);
    assert_int_equal(rlpi_traj_push_token(&t, 1, -0.5f, 3), RLP_OK);
    assert_int_equal(rlpi_traj_push_token(&t, 2, -0.25f, 3), RLP_OK);
    assert_null(t.loss_mask); /* no mask until there is an observation */
    assert_int_equal(rlpi_traj_model_tokens(&t), 2);
    int32_t obs[40];
    for (int i = 0; i < 40; i++)
        obs[i] = 100 + i;
    assert_int_equal(rlpi_traj_push_observation(&t, obs, 0, 3), RLP_OK);
    assert_null(t.loss_mask); /* an empty observation adds nothing */
    assert_int_equal(rlpi_traj_push_observation(&t, obs, 40, 3), RLP_OK);
    for (int i = 0; i < 30; i++)
        assert_int_equal(rlpi_traj_push_token(&t, 3 + i, -1.0f, 4), RLP_OK);
    assert_int_equal(t.n_tokens, 72);
    assert_non_null(t.loss_mask);
    for (size_t i = 0; i < 72; i++) {
        int model = i < 2 || i >= 42;
        assert_int_equal(t.loss_mask[i], model);
        if (!model) {
            assert_int_equal(t.tokens[i], 100 + (int)(i - 2));
            assert_true(t.logprobs[i] == 0.0f);
        }
    }
    assert_int_equal(rlpi_traj_model_tokens(&t), 32);
    /* into a batch and out through the public view */
    t.prompt = malloc(sizeof *t.prompt);
    t.prompt[0] = 1;
    t.n_prompt = 1;
    t.valid = true;
    t.reward = NAN;
    t.stop_index = -1;
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    assert_int_equal(rlpi_batch_take(b, &t), RLP_OK);
    rlp_trajectory g = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&g, b, 0), RLP_OK);
    assert_int_equal(g.n_completion_tokens, 72);
    assert_int_equal(g.loss_mask[1], 1);
    assert_int_equal(g.loss_mask[2], 0);
    assert_int_equal(g.loss_mask[41], 0);
    assert_int_equal(g.loss_mask[42], 1);
    rlp_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_get),     cmocka_unit_test(test_version2_caller),
        cmocka_unit_test(test_refusals),       cmocka_unit_test(test_copies_keep_it),
        cmocka_unit_test(test_push_observation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
