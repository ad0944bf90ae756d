/* rlp_policy_train_rl end to end on a tiny random Llama: rollouts from the
 * engine, rewards, the RL step. Checks that the first mini-batch sees
 * ratio 1 (π_θ = π_prox), that micro-batching does not change the update,
 * that epochs × mini-batches optimizer steps are applied, DAPO filtering,
 * invalid and unscored trajectories, that the version counts RL steps (one
 * per call, whatever it applied) while the optimizer counts its updates, a
 * KL against an identical reference being 0, and that GRPO raises a simple
 * reward within a few steps. Multi-turn batches: observation tokens (loss
 * mask 0) get no gradient and count nowhere, whatever their logprobs and
 * rewards. With one epoch of one mini-batch the step takes π_prox from the
 * training forward: the same loss, gradient, update and statistics as the
 * step that recomputes it in a forward of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/rl_step.h"
#include "core/batch.h"
#include "model/policy.h"
#include "tiny_model.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static rlp_context *ctx;

static rlp_policy *tiny(uint64_t seed)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", true);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, seed), RLP_OK);
    rlp_policy *p;
    assert_int_equal(rlpi_policy_create(&p, ctx, &cfg, &w, NULL), RLP_OK);
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 3e-3f;
    oo.weight_decay = 0;
    assert_int_equal(rlp_policy_set_optimizer(p, &oo), RLP_OK);
    return p;
}

static const int32_t PA[] = {5, 9, 17}, PB[] = {1, 2, 3, 4}, PC[] = {33, 34};

/* 3 prompts × 4 samples of 12 tokens; reward = share of even token ids */
static rlp_batch *rollout(rlp_policy *p, uint64_t seed, double *mean_reward)
{
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = 12;
    ro.max_seq_len = 64;
    ro.share_weights = 1;
    rlp_rollout_engine *e;
    assert_int_equal(rlp_rollout_engine_create(&e, p, &ro), RLP_OK);
    rlp_prompt pr[3] = {{.tokens = PA, .n_tokens = 3}, {.tokens = PB, .n_tokens = 4}, {.tokens = PC, .n_tokens = 2}};
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.n = 4;
    s.max_new_tokens = 12;
    s.ignore_eos = 1;
    s.seed = seed;
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 3, &s, NULL, NULL), RLP_OK);
    rlp_rollout_engine_free(e);
    double sum = 0;
    for (size_t i = 0; i < 12; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
        int even = 0;
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            even += t.completion_tokens[k] % 2 == 0;
        float r = (float)even / (float)t.n_completion_tokens;
        assert_int_equal(rlp_batch_set_reward(b, i, r), RLP_OK);
        sum += r;
    }
    if (mean_reward)
        *mean_reward = sum / 12;
    return b;
}

static void test_first_step_ratio_and_stats(void **state)
{
    (void)state;
    rlp_policy *p = tiny(1);
    rlp_batch *b = rollout(p, 1, NULL);
    rlp_rl_stats st;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, NULL, &st), RLP_OK);
    assert_int_equal(st.optimizer_steps, 1);
    assert_int_equal(st.policy_version, 1);
    assert_int_equal(st.n_seqs, 12);
    assert_int_equal(st.n_tokens, 144);
    assert_int_equal(st.n_groups, 3);
    assert_true(fabs(st.ratio_mean - 1.0) < 1e-5 && st.ratio_max < 1.0 + 1e-5);
    assert_true(st.clip_frac_low == 0 && st.clip_frac_high == 0);
    /* behaviour = engine logprobs with the same weights: w ≈ 1 */
    assert_true(fabs(st.behav_weight_mean - 1.0) < 1e-4);
    assert_true(isfinite(st.grad_norm) && st.grad_norm > 0);
    assert_true(fabs(st.adv_mean) < 1e-6); /* GRPO advantages are centred per group (equal lengths) */
    assert_true(st.staleness_max == 0);
    rlp_batch_free(b);
    rlp_policy_free(p);
}

static void test_micro_batching_same_update(void **state)
{
    (void)state;
    rlp_policy *a = tiny(2), *c = tiny(2);
    rlp_batch *b = rollout(a, 2, NULL);
    const int aggs[] = {RLP_AGG_TOKEN_MEAN, RLP_AGG_SEQ_MEAN_TOKEN_SUM, RLP_AGG_SEQ_MEAN_TOKEN_MEAN,
                        RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM};
    for (int k = 0; k < 4; k++) {
        rlp_rl_options o = RLP_RL_OPTIONS_INIT;
        o.loss_agg = aggs[k];
        rlp_rl_stats s1, s2;
        assert_int_equal(rlp_policy_train_rl(a, b, NULL, &o, &s1), RLP_OK);
        o.micro_batch_tokens = 20; /* one or two sequences per forward */
        assert_int_equal(rlp_policy_train_rl(c, b, NULL, &o, &s2), RLP_OK);
        print_message("agg %d: grad norm %.9g vs %.9g, loss %.9g vs %.9g\n", aggs[k], s1.grad_norm, s2.grad_norm,
                      s1.loss, s2.loss);
        /* both policies have taken k optimizer steps by now, and Adam
         * amplifies the rounding of GEMMs over 20 rows against the whole
         * batch: measured 6e-7 relative (separate Q/K/V and gate/up GEMMs)
         * and 1.4e-6 (fused) at agg 1; a missing or doubled micro-batch is
         * off by > 1e-2 */
        assert_true(fabs(s1.grad_norm - s2.grad_norm) <= 3e-6 * s1.grad_norm + 1e-9);
        /* the loss at ratio 1 is −mean(Â) ≈ 0: compare absolutely, at the
         * rounding of a sum of a sequence's 12 token terms (seq-mean-token-sum:
         * measured 2.1e-6 with OpenBLAS's SkylakeX kernels, 6.8e-7 with
         * Haswell's). A wrong normaliser shows in the grad norm above. */
        assert_true(fabs(s1.loss - s2.loss) <= 1e-5);
    }
    /* the two policies are still the same, to rounding: after 4 AdamW
     * updates, Adam's per-parameter normalisation turns last-bit
     * differences of near-zero gradient entries (micro-batches sum in
     * another order) into steps of up to lr, so the logprobs drift apart by
     * ~1e-5 (measured 3.8e-6 with glibc's expf, 1.4e-5 with the vector exp
     * of cpu_vecmath.c); the grad-norm and loss checks above are the tight
     * ones */
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&t, b, 5), RLP_OK);
    int32_t ids[32];
    memcpy(ids, t.prompt_tokens, t.n_prompt_tokens * 4);
    memcpy(ids + t.n_prompt_tokens, t.completion_tokens, t.n_completion_tokens * 4);
    rlp_sequence sq = {ids, (uint32_t)(t.n_prompt_tokens + t.n_completion_tokens), (uint32_t)t.n_prompt_tokens};
    float la[32], lc[32];
    assert_int_equal(rlp_policy_logprobs(a, &sq, 1, 1.0f, la, NULL, 32, NULL), RLP_OK);
    assert_int_equal(rlp_policy_logprobs(c, &sq, 1, 1.0f, lc, NULL, 32, NULL), RLP_OK);
    for (size_t k = 0; k < t.n_completion_tokens; k++)
        assert_true(fabsf(la[k] - lc[k]) < 5e-5f);
    rlp_batch_free(b);
    rlp_policy_free(a);
    rlp_policy_free(c);
}

static void test_epochs_minibatches_filter_invalid(void **state)
{
    (void)state;
    rlp_policy *p = tiny(3);
    rlp_batch *b = rollout(p, 3, NULL);
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.ppo_epochs = 2;
    o.mini_batches = 3;
    rlp_rl_stats st;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.optimizer_steps, 6);
    assert_int_equal(st.policy_version, 1);                                              /* one RL step, one version */
    assert_true(st.ratio_max > 1.0 + 1e-4 || st.clip_frac_low + st.clip_frac_high >= 0); /* later steps move */
    /* all groups equal → everything filtered, nothing applied */
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(rlp_batch_set_reward(b, i, 0.2f), RLP_OK);
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.filter_equal_groups = 1;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.filtered_groups, 3);
    assert_int_equal(st.optimizer_steps, 0);
    assert_int_equal(st.policy_version, 2); /* nothing applied, still a step */
    /* without filtering they still give zero advantage (case #8) */
    o.filter_equal_groups = 0;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.zero_std_groups, 3);
    assert_true(st.adv_mean == 0 && st.adv_std == 0);
    /* invalid ones are skipped and counted; an unscored one is an error */
    assert_int_equal(rlp_batch_set_invalid(b, 0, "reward timed out"), RLP_OK);
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.invalid_seqs, 1);
    assert_int_equal(st.n_seqs, 11);
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&t, b, 3), RLP_OK);
    rlp_batch *u;
    assert_int_equal(rlp_batch_create(&u), RLP_OK);
    t.reward = NAN;
    assert_int_equal(rlp_batch_append(u, &t), RLP_OK);
    uint64_t v0;
    rlp_policy_version(&v0, p);
    assert_int_equal(rlp_policy_train_rl(p, u, NULL, &o, &st), RLP_E_INVALID_ARG);
    uint64_t v1;
    rlp_policy_version(&v1, p);
    assert_int_equal(v0, v1);
    o.kl_estimator = RLP_KL_K3;
    o.kl_coef = 0.1f;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_E_INVALID_ARG); /* KL needs a reference */
    rlp_batch_free(u);
    rlp_batch_free(b);
    rlp_policy_free(p);
}

/* Versions count RL steps: +1 per rlp_policy_train_rl() call whether it
 * applied ppo_epochs × mini_batches updates or none; the optimizer's own
 * count (schedule, bias correction) counts updates, and both survive a
 * save/load of the optimizer state. */
static void test_versions_count_rl_steps(void **state)
{
    (void)state;
    rlp_policy *p = tiny(6);
    rlp_batch *b = rollout(p, 6, NULL), *c = rollout(p, 7, NULL); /* both made at version 0 */
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.ppo_epochs = 2;
    o.mini_batches = 2;
    o.filter_equal_groups = 1;
    rlp_rl_stats st;
    uint64_t v;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.optimizer_steps, 4);
    assert_int_equal(st.skipped_steps, 0);
    assert_int_equal(st.policy_version, 1);
    assert_int_equal(rlp_policy_version(&v, p), RLP_OK);
    assert_int_equal(v, 1);
    assert_int_equal(p->opt.step, 4); /* the learning-rate schedule and AdamW count updates */
    assert_true(st.staleness_max == 0);

    /* every group filtered: no update, one version */
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(rlp_batch_set_reward(b, i, 0.5f), RLP_OK);
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.filtered_groups, 3);
    assert_int_equal(st.optimizer_steps, 0);
    assert_int_equal(st.policy_version, 2);
    assert_int_equal(p->opt.step, 4);
    assert_true(st.staleness_mean == 0); /* no trajectory used */

    /* every sample invalid: no update, one version */
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(rlp_batch_set_invalid(b, i, "refused"), RLP_OK);
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_OK);
    assert_int_equal(st.invalid_seqs, 12);
    assert_int_equal(st.policy_version, 3);
    assert_int_equal(p->opt.step, 4);

    /* a failed call before any update leaves the version */
    o.kl_estimator = RLP_KL_K3;
    o.kl_coef = 0.1f;
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_policy_version(&v, p), RLP_OK);
    assert_int_equal(v, 3);

    /* staleness is in RL steps: a batch of version 0 trained at version 3 */
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.ppo_epochs = 2;
    o.mini_batches = 2;
    assert_int_equal(rlp_policy_train_rl(p, c, NULL, &o, &st), RLP_OK);
    assert_true(st.staleness_max == 3 && st.staleness_mean == 3);
    assert_int_equal(st.policy_version, 4);
    assert_int_equal(p->opt.step, 8);

    /* the SFT step API still advances the version by one per update */
    int32_t ids[] = {1, 2, 3, 4, 5};
    rlp_sequence sq = {ids, 5, 2};
    rlp_train_stats ts;
    assert_int_equal(rlp_policy_train_step(p, &sq, 1, rlp_loss_nll, NULL, NULL, &ts), RLP_OK);
    assert_int_equal(ts.policy_version, 5);
    assert_int_equal(p->opt.step, 9);

    /* the checkpoint keeps both counts */
    char dir[] = "/tmp/rlpost-rlstep-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    assert_int_equal(rlp_policy_save_optimizer(p, path), RLP_OK);
    rlp_policy *q = tiny(6);
    assert_int_equal(rlp_policy_load_optimizer(q, path), RLP_OK);
    assert_int_equal(rlp_policy_version(&v, q), RLP_OK);
    assert_int_equal(v, 5);
    assert_int_equal(q->opt.step, 9);
    remove(path);
    rmdir(dir);
    rlp_policy_free(q);
    rlp_batch_free(c);
    rlp_batch_free(b);
    rlp_policy_free(p);
}

static void test_kl_to_identical_reference_is_zero(void **state)
{
    (void)state;
    rlp_policy *p = tiny(4), *ref;
    assert_int_equal(rlp_policy_clone(&ref, p, 0), RLP_OK);
    rlp_batch *b = rollout(p, 4, NULL);
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.kl_estimator = RLP_KL_K3;
    o.kl_coef = 0.05f;
    rlp_rl_stats st;
    assert_int_equal(rlp_policy_train_rl(p, b, ref, &o, &st), RLP_OK);
    assert_true(fabs(st.kl) < 1e-7);
    /* after the update the policy has moved away from the reference */
    assert_int_equal(rlp_policy_train_rl(p, b, ref, &o, &st), RLP_OK);
    assert_true(st.kl > 1e-9);
    rlp_batch_free(b);
    rlp_policy_free(ref);
    rlp_policy_free(p);
}

/* GRPO on "share of even token ids": the reward rises */
static void test_grpo_learns(void **state)
{
    (void)state;
    rlp_policy *p = tiny(5);
    double first = 0, last = 0;
    for (int step = 0; step < 12; step++) {
        double r;
        rlp_batch *b = rollout(p, 100 + (uint64_t)step, &r);
        if (step < 3)
            first += r / 3;
        if (step >= 9)
            last += r / 3;
        rlp_rl_stats st;
        assert_int_equal(rlp_policy_train_rl(p, b, NULL, NULL, &st), RLP_OK);
        rlp_batch_free(b);
    }
    print_message("mean reward: first 3 steps %.3f, last 3 steps %.3f\n", first, last);
    assert_true(last > first + 0.05);
    rlp_policy_free(p);
}

/* A multi-turn-like batch: 2 groups × 2 samples, 14 completion tokens each
 * alternating model turns and observations (mask 0). variant 0: the
 * observations as a rollout stores them (logprob 0, token reward 0);
 * variant 1: arbitrary logprobs and token rewards there, which must not
 * matter. with_mask 0: the same tokens without a mask (all trained). The
 * model tokens' behaviour logprobs are π's own, nudged, so that importance
 * weights differ from 1. */
static const uint8_t MT_MASK[14] = {1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1};
#define MT_MODEL 8

static rlp_batch *multiturn_batch(rlp_policy *p, int variant, int with_mask)
{
    rlp_batch *b;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    const float rewards[4] = {1.0f, 0.0f, 0.5f, -0.25f};
    for (int k = 0; k < 4; k++) {
        const int32_t *prompt = k < 2 ? PA : PB;
        size_t np = k < 2 ? 3 : 4;
        int32_t ids[32];
        memcpy(ids, prompt, np * sizeof *ids);
        for (int j = 0; j < 14; j++)
            ids[np + (size_t)j] = (7 * j + 11 * k + 3) % 64;
        rlp_sequence sq = {ids, (uint32_t)(np + 14), (uint32_t)np};
        float lp[14], tokr[14];
        assert_int_equal(rlp_policy_logprobs(p, &sq, 1, 1.0f, lp, NULL, 14, NULL), RLP_OK);
        for (int j = 0; j < 14; j++) {
            if (MT_MASK[j]) {
                lp[j] += 0.05f * (float)((j + k) % 5 - 2);
                tokr[j] = 0.1f * (float)((j * 3 + k) % 4) - 0.1f;
            } else {
                lp[j] = variant ? -3.0f - (float)j : 0.0f;
                tokr[j] = variant ? 5.0f + (float)j : 0.0f;
            }
        }
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION,
                            .group_id = (uint64_t)(k / 2),
                            .prompt_tokens = prompt,
                            .n_prompt_tokens = np,
                            .completion_tokens = ids + np,
                            .n_completion_tokens = 14,
                            .logprobs = lp,
                            .finish_reason = RLP_FINISH_LENGTH,
                            .stop_index = -1,
                            .temperature = 1.0f,
                            .reward = rewards[k],
                            .valid = 1,
                            .sample_index = (uint32_t)(k % 2),
                            .token_rewards = tokr,
                            .loss_mask = with_mask ? MT_MASK : NULL,
                            .has_episode = with_mask,
                            .episode = {.version = RLP_EPISODE_STATS_VERSION, .turns = 3, .tool_calls = 2,
                                        .observation_tokens = 14 - MT_MODEL, .end = RLP_EPISODE_DONE}};
        assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
        assert_int_equal(rlp_batch_set_reward(b, (size_t)k, rewards[k]), RLP_OK);
    }
    return b;
}

static void same(double a, double b, const char *what, int cfg)
{
    /* the same arithmetic on the same model tokens: equal to rounding of
     * nothing (1e-12 only guards against a compiler's contraction) */
    if (!(fabs(a - b) <= 1e-12 * fmax(1.0, fabs(a))))
        fail_msg("config %d: %s %.17g vs %.17g", cfg, what, a, b);
}

/* No token of an observation gets gradient: the behaviour logprobs and
 * (process) rewards of the observation tokens can be anything, every loss,
 * estimator and aggregation gives the same update and statistics, whose
 * token counts are the model tokens; without the mask the update differs. */
static void test_observation_tokens_get_no_gradient(void **state)
{
    (void)state;
    struct {
        int adv, loss, agg, kl, kl_in_reward, mbs, epochs;
        float tis, ent, gamma, overlong;
    } cfg[] = {
        {RLP_ADV_GRPO, RLP_LOSS_PPO_CLIP, RLP_AGG_TOKEN_MEAN, RLP_KL_K3, 0, 1, 1, 0, 0.01f, 1, 0},
        {RLP_ADV_REINFORCE_PP, RLP_LOSS_DECOUPLED_PPO, RLP_AGG_SEQ_MEAN_TOKEN_SUM, RLP_KL_K1, 1, 1, 1, 0, 0, 0.9f, 0},
        {RLP_ADV_DR_GRPO, RLP_LOSS_GSPO, RLP_AGG_SEQ_MEAN_TOKEN_MEAN, RLP_KL_K2, 0, 2, 2, 0, 0.02f, 1, 0},
        {RLP_ADV_RLOO, RLP_LOSS_PPO_CLIP, RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM, 0, 0, 2, 1, 1.02f, 0, 1, 10},
        {RLP_ADV_REINFORCE_PP, RLP_LOSS_GSPO, RLP_AGG_TOKEN_MEAN, 0, 0, 1, 1, 0, 0, 0.95f, 0},
    };
    rlp_policy *ref = tiny(77);
    for (int c = 0; c < (int)(sizeof cfg / sizeof *cfg); c++) {
        rlp_rl_options o = RLP_RL_OPTIONS_INIT;
        o.advantage = cfg[c].adv;
        o.policy_loss = cfg[c].loss;
        o.loss_agg = cfg[c].agg;
        o.kl_estimator = cfg[c].kl;
        o.kl_coef = cfg[c].kl ? 0.05f : 0.0f;
        o.kl_in_reward = cfg[c].kl_in_reward;
        o.mini_batches = (uint32_t)cfg[c].mbs;
        o.ppo_epochs = (uint32_t)cfg[c].epochs;
        o.tis_cap = cfg[c].tis;
        o.entropy_coef = cfg[c].ent;
        o.gamma = cfg[c].gamma;
        if (cfg[c].overlong > 0) {
            /* 14 tokens, 8 of them the model's: no penalty with the mask */
            o.overlong_max = (uint32_t)cfg[c].overlong;
            o.overlong_cache = 2;
        }
        rlp_policy *pa = tiny(7), *pb = tiny(7), *pc = tiny(7);
        rlp_batch *ba = multiturn_batch(pa, 0, 1), *bb = multiturn_batch(pa, 1, 1), *bc = multiturn_batch(pa, 0, 0);
        rlp_rl_stats sa, sb, sc;
        assert_int_equal(rlp_policy_train_rl(pa, ba, ref, &o, &sa), RLP_OK);
        assert_int_equal(rlp_policy_train_rl(pb, bb, ref, &o, &sb), RLP_OK);
        assert_int_equal(rlp_policy_train_rl(pc, bc, ref, &o, &sc), RLP_OK);
        print_message("config %d: loss %.9g grad norm %.9g (without mask %.9g), kl %.6g, entropy %.6g\n", c, sa.loss,
                      sa.grad_norm, sc.grad_norm, sa.kl, sa.entropy);
        assert_int_equal(sa.n_tokens, 4 * MT_MODEL);
        assert_int_equal(sb.n_tokens, 4 * MT_MODEL);
        assert_int_equal(sc.n_tokens, 4 * 14);
        assert_int_equal(sa.n_seqs, 4);
        assert_int_equal(sa.optimizer_steps, (uint32_t)(cfg[c].mbs * cfg[c].epochs));
        assert_true(isfinite(sa.grad_norm) && sa.grad_norm > 0);
        same(sa.loss, sb.loss, "loss", c);
        same(sa.pg_loss, sb.pg_loss, "pg_loss", c);
        same(sa.kl, sb.kl, "kl", c);
        same(sa.entropy, sb.entropy, "entropy", c);
        same(sa.grad_norm, sb.grad_norm, "grad_norm", c);
        same(sa.clip_frac_low, sb.clip_frac_low, "clip_frac_low", c);
        same(sa.clip_frac_high, sb.clip_frac_high, "clip_frac_high", c);
        same(sa.ratio_mean, sb.ratio_mean, "ratio_mean", c);
        same(sa.ratio_max, sb.ratio_max, "ratio_max", c);
        same(sa.behav_weight_mean, sb.behav_weight_mean, "behav_weight_mean", c);
        same(sa.behav_weight_max, sb.behav_weight_max, "behav_weight_max", c);
        same(sa.adv_mean, sb.adv_mean, "adv_mean", c);
        same(sa.adv_std, sb.adv_std, "adv_std", c);
        same(sa.reward_mean, sb.reward_mean, "reward_mean", c);
        if (cfg[c].overlong > 0) {
            same(sa.reward_mean, 0.3125, "reward_mean (no overlong penalty on 8 model tokens)", c);
            same(sc.reward_mean, 0.3125 - 1.0, "reward_mean (14 unmasked tokens: penalty −1)", c);
        }
        /* the mask matters: trained on every token, the update is another */
        assert_true(fabs(sa.grad_norm - sc.grad_norm) > 1e-6 * sa.grad_norm);
        /* and the two masked runs left the same weights */
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        assert_int_equal(rlp_batch_get(&t, ba, 2), RLP_OK);
        int32_t ids[32];
        memcpy(ids, t.prompt_tokens, t.n_prompt_tokens * 4);
        memcpy(ids + t.n_prompt_tokens, t.completion_tokens, t.n_completion_tokens * 4);
        rlp_sequence sq = {ids, (uint32_t)(t.n_prompt_tokens + 14), (uint32_t)t.n_prompt_tokens};
        float la[14], lb[14];
        assert_int_equal(rlp_policy_logprobs(pa, &sq, 1, 1.0f, la, NULL, 14, NULL), RLP_OK);
        assert_int_equal(rlp_policy_logprobs(pb, &sq, 1, 1.0f, lb, NULL, 14, NULL), RLP_OK);
        for (int k = 0; k < 14; k++)
            assert_true(la[k] == lb[k]);
        rlp_batch_free(ba), rlp_batch_free(bb), rlp_batch_free(bc);
        rlp_policy_free(pa), rlp_policy_free(pb), rlp_policy_free(pc);
    }
    rlp_policy_free(ref);
}

/* Everything a step reports and leaves, with π_prox taken from the
 * training forward against the forced separate π_prox forward. */
static double rel_diff(double a, double b)
{
    return fabs(a - b) / fmax(1.0, fmax(fabs(a), fabs(b))); /* absolute below 1: losses near 0 */
}

static float *params(rlp_policy *p, size_t *n)
{
    *n = rlpi_transformer_n_params(p->tf);
    float *w = malloc(*n * sizeof *w);
    assert_non_null(w);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_params(p->tf), 0, w, *n * sizeof *w), RLP_OK);
    return w;
}

static void test_prox_reuse_matches_two_forwards(void **state)
{
    (void)state;
    struct {
        int loss, adv, kl, kl_in_reward, mbs, epochs;
        float tis, behav_cap, ent, clip_high;
        int reuse; /* the expected choice */
        int v2;    /* version-2 options: see below */
    } cfg[] = {
        {RLP_LOSS_PPO_CLIP, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 1, 0},
        {RLP_LOSS_PPO_CLIP, RLP_ADV_GRPO, 0, 0, 1, 1, 1.5f, 0, 0, 0.28f, 1, 0}, /* truncated IS, clip-higher */
        {RLP_LOSS_DECOUPLED_PPO, RLP_ADV_RLOO, 0, 0, 1, 1, 0, 1.3f, 0, 0.2f, 1, 0},
        {RLP_LOSS_DECOUPLED_PPO, RLP_ADV_GRPO, RLP_KL_K3, 0, 1, 1, 0, 0, 0.01f, 0.2f, 1, 0},
        {RLP_LOSS_GSPO, RLP_ADV_DR_GRPO, RLP_KL_K2, 0, 1, 1, 0, 0, 0, 0.2f, 1, 0},
        {RLP_LOSS_PPO_CLIP, RLP_ADV_REINFORCE_PP, RLP_KL_K1, 0, 1, 1, 0, 0, 0, 0.2f, 1, 0},
        /* π_prox is read before training (KL in REINFORCE++'s reward), or
         * the step takes several optimizer steps: the pass stays */
        {RLP_LOSS_PPO_CLIP, RLP_ADV_REINFORCE_PP, RLP_KL_K1, 1, 1, 1, 0, 0, 0, 0.2f, 0, 0},
        {RLP_LOSS_PPO_CLIP, RLP_ADV_GRPO, 0, 0, 2, 1, 0, 0, 0, 0.2f, 0, 0},
        {RLP_LOSS_GSPO, RLP_ADV_GRPO, 0, 0, 1, 2, 0, 0, 0, 0.2f, 0, 0},
        /* version 2: SAPO and token / sequence IS weights read π_prox in the
         * loss only (reused); rejection, batch-normalised weights and the
         * covariance selection read it before training (the pass stays) */
        {RLP_LOSS_SAPO, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 1, 0},
        {RLP_LOSS_PPO_CLIP, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 1, 1},
        {RLP_LOSS_GSPO, RLP_ADV_RLOO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 1, 2},
        {RLP_LOSS_PPO_CLIP, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 0, 3},
        {RLP_LOSS_CISPO, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 0, 4},
        {RLP_LOSS_KL_COV, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 0, 5},
        {RLP_LOSS_CLIP_COV, RLP_ADV_GRPO, 0, 0, 1, 1, 0, 0, 0, 0.2f, 0, 6},
    };
    rlp_policy *ref = tiny(78);
    for (int c = 0; c < (int)(sizeof cfg / sizeof *cfg); c++) {
        rlp_rl_options o = RLP_RL_OPTIONS_INIT;
        o.policy_loss = cfg[c].loss;
        o.advantage = cfg[c].adv;
        o.kl_estimator = cfg[c].kl;
        o.kl_coef = cfg[c].kl ? 0.05f : 0.0f;
        o.kl_in_reward = cfg[c].kl_in_reward;
        o.mini_batches = (uint32_t)cfg[c].mbs;
        o.ppo_epochs = (uint32_t)cfg[c].epochs;
        o.tis_cap = cfg[c].tis;
        o.behav_cap = cfg[c].behav_cap;
        o.entropy_coef = cfg[c].ent;
        o.clip_high = cfg[c].clip_high;
        o.micro_batch_tokens = c % 2 ? 40 : 0; /* micro-batches: each fills its own sequences' π_prox */
        switch (cfg[c].v2) {
        case 1: o.rollout_is = RLP_IS_TOKEN, o.rollout_is_threshold = 1.2f; break;
        case 2: o.rollout_is = RLP_IS_SEQUENCE, o.rollout_is_threshold = 3.0f; break;
        case 3: o.rollout_is = RLP_IS_TOKEN, o.rollout_is_batch_normalize = 1; break;
        case 4: o.rollout_rs = RLP_IS_GEOMETRIC, o.rollout_rs_threshold = 1.3f; break;
        case 5: o.kl_cov_ratio = 0.1f; break;
        case 6: o.clip_cov_ratio = 0.2f, o.clip_cov_lb = -1.0f, o.clip_cov_ub = 1.0f; break;
        default: break;
        }
        rlp_policy *pa = tiny(11), *pb = tiny(11);
        rlp_batch *b = rollout(pa, 11 + (uint64_t)c, NULL);
        /* behaviour logprobs off π_prox, so that the IS weights π_prox/π_behav
         * (decoupled PPO, truncated IS) vary and the caps bite */
        for (size_t i = 0; i < b->n; i++)
            for (size_t j = 0; j < b->items[i].n_tokens; j++)
                b->items[i].logprobs[j] += 0.4f * (float)((int)((i * 7 + j * 3) % 5) - 2) / 2.0f;
        rlp_rl_stats sa, sb;
        rlpi_rl_force_prox_forward(1);
        uint64_t n0 = rlpi_rl_prox_forwards();
        assert_int_equal(rlp_policy_train_rl(pa, b, ref, &o, &sa), RLP_OK);
        uint64_t n1 = rlpi_rl_prox_forwards();
        rlpi_rl_force_prox_forward(0);
        assert_int_equal(rlp_policy_train_rl(pb, b, ref, &o, &sb), RLP_OK);
        uint64_t n2 = rlpi_rl_prox_forwards();
        assert_int_equal(n1 - n0, 1);
        assert_int_equal(n2 - n1, cfg[c].reuse ? 0 : 1);
        print_message("config %d (reuse %d): loss %.9g vs %.9g, grad norm %.9g vs %.9g, ratio %.9g vs %.9g, "
                      "w %.6g vs %.6g (max %.6g vs %.6g)\n",
                      c, cfg[c].reuse, sa.loss, sb.loss, sa.grad_norm, sb.grad_norm, sa.ratio_mean, sb.ratio_mean,
                      sa.behav_weight_mean, sb.behav_weight_mean, sa.behav_weight_max, sb.behav_weight_max);
        if (cfg[c].reuse) /* exactly π_θ/π_prox = 1: no rounding between two passes */
            assert_true(sb.ratio_mean == 1.0 && sb.ratio_max == 1.0);
        /* The two π_prox agree to the rounding of two forward passes over
         * differently packed batches: ~1e-7 in a typical logprob, up to
         * 1.4e-5 measured in a rare token's (|log p| ≈ 10, summed in fp32),
         * which is then the worst ratio's distance from 1 and moves a
         * token's loss and gradient by that relative amount. 5e-5 is that
         * with a margin; a wrong π_prox (another token's, a stale one, the
         * behaviour's) is off by 1e-2 or more. Counts are exact. */
        const double tol = 5e-5;
        double pairs[][2] = {{sa.loss, sb.loss},
                             {sa.pg_loss, sb.pg_loss},
                             {sa.kl, sb.kl},
                             {sa.entropy, sb.entropy},
                             {sa.grad_norm, sb.grad_norm},
                             {sa.ratio_mean, sb.ratio_mean},
                             {sa.ratio_max, sb.ratio_max},
                             {sa.behav_weight_mean, sb.behav_weight_mean},
                             {sa.behav_weight_max, sb.behav_weight_max},
                             {sa.adv_mean, sb.adv_mean},
                             {sa.adv_std, sb.adv_std},
                             {sa.reward_mean, sb.reward_mean}};
        const char *names[] = {"loss", "pg_loss", "kl", "entropy", "grad_norm", "ratio_mean", "ratio_max",
                               "behav_weight_mean", "behav_weight_max", "adv_mean", "adv_std", "reward_mean"};
        for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++)
            if (!(rel_diff(pairs[k][0], pairs[k][1]) <= tol))
                fail_msg("config %d: %s %.9g (two passes) vs %.9g (reused)", c, names[k], pairs[k][0], pairs[k][1]);
        /* the clip fractions count tokens whose ratio left the band: a ratio
         * of 1 ± 1e-7 never does with ε ≥ 0.2 */
        assert_true(sa.clip_frac_low == sb.clip_frac_low && sa.clip_frac_high == sb.clip_frac_high);
        assert_true(sa.n_seqs == sb.n_seqs && sa.n_tokens == sb.n_tokens && sa.n_groups == sb.n_groups &&
                    sa.zero_std_groups == sb.zero_std_groups && sa.optimizer_steps == sb.optimizer_steps &&
                    sa.skipped_steps == sb.skipped_steps && sa.policy_version == sb.policy_version);
        /* the weights it left (the gradient is in grad_norm above; the
         * optimizer step consumes the buffer) */
        size_t n;
        rlp_policy *p0 = tiny(11);
        float *wa = params(pa, &n), *wb = params(pb, &n), *w0 = params(p0, &n);
        double dw = 0, step = 0;
        for (size_t i = 0; i < n; i++) {
            dw += ((double)wa[i] - wb[i]) * ((double)wa[i] - wb[i]);
            step += ((double)wb[i] - w0[i]) * ((double)wb[i] - w0[i]);
        }
        print_message("  |Δw|/|update| %.3g\n", sqrt(dw / step));
        assert_true(step > 0);
        /* AdamW's first steps divide by |g|: an entry whose gradient is at
         * the rounding level can flip its step; in norm the update stays
         * the same to well within a percent */
        assert_true(sqrt(dw / step) <= 1e-3);
        free(wa), free(wb), free(w0);
        rlp_policy_free(p0);
        rlp_batch_free(b);
        rlp_policy_free(pa), rlp_policy_free(pb);
    }
    rlp_policy_free(ref);
}

/* rlp_rl_advantages and the logprob mismatch see model tokens only */
static void test_mask_in_advantages_and_mismatch(void **state)
{
    (void)state;
    rlp_policy *p = tiny(8);
    rlp_batch *b = multiturn_batch(p, 1, 1), *c = multiturn_batch(p, 1, 0);
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.advantage = RLP_ADV_REINFORCE;
    o.overlong_max = 10; /* 8 model tokens: no penalty; 14 tokens: −1 */
    o.overlong_cache = 2;
    float ab[4], ac[4];
    assert_int_equal(rlp_rl_advantages(ab, 4, b, &o), RLP_OK);
    assert_int_equal(rlp_rl_advantages(ac, 4, c, &o), RLP_OK);
    const float rewards[4] = {1.0f, 0.0f, 0.5f, -0.25f};
    for (int k = 0; k < 4; k++) {
        assert_true(ab[k] == rewards[k]);
        assert_true(ac[k] == rewards[k] - 1.0f);
    }
    /* REINFORCE++ with γ < 1: the discount counts model tokens, the
     * observations' token rewards (5 + j in variant 1) are ignored: the
     * advantage at the first token is the same in both variants */
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.advantage = RLP_ADV_REINFORCE_PP;
    o.gamma = 0.9f;
    rlp_batch *b0 = multiturn_batch(p, 0, 1);
    float a0[4], a1[4];
    assert_int_equal(rlp_rl_advantages(a0, 4, b0, &o), RLP_OK);
    assert_int_equal(rlp_rl_advantages(a1, 4, b, &o), RLP_OK);
    for (int k = 0; k < 4; k++)
        assert_true(a0[k] == a1[k]);
    /* the model tokens' behaviour logprobs are π's own, nudged by at most
     * 0.1; the observations' are −3 − j: skipped */
    rlp_mismatch_stats ms;
    assert_int_equal(rlp_batch_logprob_mismatch(&ms, b, p), RLP_OK);
    assert_int_equal(ms.n_tokens, 4 * MT_MODEL);
    assert_true(ms.max_abs <= 0.1 + 1e-5);
    assert_int_equal(rlp_batch_logprob_mismatch(&ms, c, p), RLP_OK);
    assert_int_equal(ms.n_tokens, 4 * 14);
    assert_true(ms.max_abs > 1.0);
    rlp_batch_free(b), rlp_batch_free(b0), rlp_batch_free(c);
    rlp_policy_free(p);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 2;
    return rlp_context_create(&ctx, &o) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlp_context_free(ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_step_ratio_and_stats),        cmocka_unit_test(test_micro_batching_same_update),
        cmocka_unit_test(test_epochs_minibatches_filter_invalid), cmocka_unit_test(test_versions_count_rl_steps),
        cmocka_unit_test(test_kl_to_identical_reference_is_zero), cmocka_unit_test(test_grpo_learns),
        cmocka_unit_test(test_observation_tokens_get_no_gradient), cmocka_unit_test(test_mask_in_advantages_and_mismatch),
        cmocka_unit_test(test_prox_reuse_matches_two_forwards),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
