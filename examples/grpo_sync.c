/* The whole synchronous GRPO loop, step by step, on the public API only.
 *
 *   grpo_sync MODEL [steps] [prompts_per_step] [group_size]
 *
 * Each step: generate a group of completions per prompt with the current
 * weights (co-located engine sharing the policy's weights: staleness 0),
 * score them with a reward written here in C, and run one GRPO step. As in
 * Logic-RL the prompt ends with the assistant turn already opened by
 * "<think>", which counts towards the format. The reward is graded so that a
 * 135M model that never writes the whole format at first still gets a
 * signal: 0.25 for each of <think>, </think>, <answer>, </answer> found once
 * and after the previous one, 0 for a tag written twice (the strict Logic-RL
 * format, all four exactly once and in order, is reported as format_rate).
 * The system prompt names the tags but shows no example to copy: a model
 * taught to copy "<answer> answer </answer>" from a prompt earns the format
 * and says nothing (rlpost train's format rewards refuse such answers).
 * One JSON line per step on stdout: mean reward, format rate, loss,
 * statistics and timings. This is the shape of `rlpost train` without the
 * configuration file. */
#include "blas_kernels.h"
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != RLP_OK) {                                                           \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, rlp_error_last(),           \
                    rlp_status_str(rc_));                                              \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

/* How far along the tag sequence the text gets (0, 0.25, …, 1). */
static float format_progress(const char *text)
{
    static const char *tags[4] = {"<think>", "</think>", "<answer>", "</answer>"};
    const char *at = text;
    float score = 0;
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(at, tags[i]);
        if (!p)
            break;
        if (strstr(p + 1, tags[i]))
            return 0.0f; /* a tag twice: no credit (Logic-RL fails the format) */
        score += 0.25f;
        at = p + strlen(tags[i]);
    }
    return score;
}

/* Logic-RL's format rule: each tag exactly once, in order. */
static float format_reward(const char *text)
{
    static const char *tags[4] = {"<think>", "</think>", "<answer>", "</answer>"};
    const char *pos[4];
    for (int i = 0; i < 4; i++) {
        pos[i] = strstr(text, tags[i]);
        if (!pos[i] || strstr(pos[i] + 1, tags[i]))
            return -1.0f;
    }
    return pos[0] < pos[1] && pos[1] < pos[2] && pos[2] < pos[3] ? 1.0f : -1.0f;
}

static const char *questions[] = {
    "What is 12 + 30?", "What is 7 times 8?", "How many legs do 3 cats have?", "What is 100 minus 37?",
    "What is half of 50?", "What is 9 squared?", "How many days are in two weeks?", "What is 15 divided by 3?",
};
#define N_QUESTIONS (sizeof questions / sizeof questions[0])

static const char *system_prompt =
    "You are a helpful assistant. First reason about the question between <think> and </think>, then write "
    "the final answer, a number only, between <answer> and </answer>.";

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv);
    if (argc < 2) {
        fprintf(stderr, "usage: grpo_sync MODEL [steps] [prompts_per_step] [group_size]\n");
        return 2;
    }
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    size_t per_step = argc > 3 ? (size_t)atoi(argv[3]) : 4;
    uint32_t group = argc > 4 ? (uint32_t)atoi(argv[4]) : 8;

    /* 1. context, policy (trainable) and its optimizer */
    rlp_context *ctx;
    CHECK(rlp_context_create(&ctx, NULL));
    rlp_policy *policy;
    CHECK(rlp_policy_load(&policy, ctx, argv[1], NULL));
    rlp_optimizer_options opt = RLP_OPTIMIZER_OPTIONS_INIT;
    opt.lr = 1e-5f;
    opt.weight_decay = 0.0f;
    CHECK(rlp_policy_set_optimizer(policy, &opt));
    const rlp_tokenizer *tok = rlp_policy_tokenizer(policy);
    if (!tok) {
        fprintf(stderr, "the model has no tokenizer\n");
        return 1;
    }

    /* 2. a co-located engine on the same weights (no copy, staleness 0) */
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = (uint32_t)(per_step * group);
    ro.max_seq_len = 512;
    ro.share_weights = 1;
    rlp_rollout_engine *engine;
    CHECK(rlp_rollout_engine_create(&engine, policy, &ro));

    /* 3. prompts through the chat template (content is never parsed for special tokens) */
    int32_t ids[N_QUESTIONS][320];
    size_t n_ids[N_QUESTIONS];
    const char *prefix = "<think>"; /* the assistant turn opens with it (Logic-RL) */
    for (size_t q = 0; q < N_QUESTIONS; q++) {
        rlp_chat_message msgs[2] = {{"system", system_prompt}, {"user", questions[q]}};
        CHECK(rlp_tokenizer_apply_chat_template(tok, msgs, 2, 1, ids[q], 256, &n_ids[q]));
        size_t np = 0;
        CHECK(rlp_tokenizer_encode(tok, prefix, strlen(prefix), 0, ids[q] + n_ids[q], 64, &np));
        n_ids[q] += np;
    }

    rlp_sampling_options sampling = RLP_SAMPLING_OPTIONS_INIT;
    sampling.n = group;
    sampling.temperature = 1.0f;
    sampling.max_new_tokens = 96;
    rlp_rl_options rl = RLP_RL_OPTIONS_INIT; /* GRPO, PPO-clip, token-mean */

    for (int step = 0; step < steps; step++) {
        /* generate */
        rlp_prompt *prompts = calloc(per_step, sizeof *prompts);
        for (size_t i = 0; i < per_step; i++) {
            size_t q = ((size_t)step * per_step + i) % N_QUESTIONS;
            prompts[i].tokens = ids[q];
            prompts[i].n_tokens = n_ids[q];
        }
        sampling.seed = (uint64_t)step + 1;
        rlp_batch *batch;
        CHECK(rlp_rollout_generate(&batch, engine, prompts, per_step, &sampling, NULL, NULL));
        free(prompts);

        /* score */
        size_t n;
        CHECK(rlp_batch_size(&n, batch));
        double reward_sum = 0, formatted = 0;
        for (size_t i = 0; i < n; i++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            CHECK(rlp_batch_get(&t, batch, i));
            char *full = malloc(strlen(prefix) + strlen(t.completion_text) + 1);
            strcpy(full, prefix);
            strcat(full, t.completion_text);
            float r = format_progress(full);
            CHECK(rlp_batch_set_reward(batch, i, r));
            reward_sum += r;
            formatted += format_reward(full) > 0;
            free(full);
        }

        /* train */
        rlp_rl_stats st;
        CHECK(rlp_policy_train_rl(policy, batch, NULL, &rl, &st));
        rlp_rollout_stats rs;
        CHECK(rlp_rollout_engine_stats(&rs, engine));
        printf("{\"step\": %d, \"mean_reward\": %.4f, \"format_rate\": %.4f, \"loss\": %.6f, "
               "\"grad_norm\": %.4f, \"entropy\": %.4f, \"clip_frac\": %.4f, \"zero_std_groups\": %llu, "
               "\"tokens\": %llu, \"train_seconds\": %.2f, \"version\": %llu}\n",
               step, reward_sum / (double)n, formatted / (double)n, st.loss, st.grad_norm, st.entropy,
               st.clip_frac_low + st.clip_frac_high, (unsigned long long)st.zero_std_groups,
               (unsigned long long)st.n_tokens, st.seconds, (unsigned long long)st.policy_version);
        fflush(stdout);
        rlp_batch_free(batch);
    }
    rlp_rollout_engine_free(engine);
    rlp_policy_free(policy);
    rlp_context_free(ctx);
    return 0;
}
