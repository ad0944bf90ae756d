/* The RL formulas against a PyTorch reference written from the papers
 * (tests/reference/make_rl_fixtures.py, float64 autograd): advantages, the
 * aggregated loss and its gradients with respect to the current logprobs
 * and the entropies, for every estimator × policy loss × aggregation with
 * KL k1/k2/k3 (in the loss and in the reward), dual clip, truncated IS,
 * behaviour-weight cap and mask, batch normalisation, process rewards.
 * Tolerance: |got − want| ≤ 1e-6 + 1e-6·|want| (float32 outputs of double
 * sums). Also: 1, 2 and 4 micro-batches give the same loss and gradient;
 * public-bugs cases #8 (all-equal non-dyadic rewards → exactly 0) and #9
 * (token-mean under gradient accumulation) as whole kinds. Multi-turn
 * sequences with a loss mask against the same reference
 * (fixtures/rl/masked_cases.json, same tolerance): observation tokens get
 * advantage 0 and gradient exactly 0 and count in no mean. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "algo/rl_math.h"
#include "test_support.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL_ABS 1e-6
#define TOL_REL 1e-6

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i]))
            return i;
    fail_msg("unknown name %s", s);
    return -1;
}

static float *floats(json_t *a, size_t *n)
{
    *n = json_array_size(a);
    float *v = malloc((*n ? *n : 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++)
        v[i] = (float)json_number_value(json_array_get(a, i));
    return v;
}

/* the largest error seen in the current file, for the record */
static double worst_abs, worst_rel;

static void close_enough(double got, double want, const char *what, size_t ci, size_t k)
{
    double d = fabs(got - want);
    worst_abs = d > worst_abs ? d : worst_abs;
    if (fabs(want) > 1e-3 && d / fabs(want) > worst_rel)
        worst_rel = d / fabs(want);
    if (!(fabs(got - want) <= TOL_ABS + TOL_REL * fabs(want)))
        fail_msg("case %zu %s[%zu]: got %.9g want %.9g", ci, what, k, got, want);
}

typedef struct loaded {
    rlp_rl_options o;
    rlpi_rl_seqs s;
    size_t n_tok, n_seq;
    size_t *tok_start;
    uint64_t *group;
    float *reward, *logp, *old, *behav, *ref, *ent, *tokr;
    uint8_t *mask; /* NULL when the case has none */
    uint8_t *keep; /* the rejection (rlpi_rl_reject), checked against the case's; NULL when off */
    uint8_t *pick; /* CLIP_COV / KL_COV's selection (rlpi_rl_cov_select), checked likewise */
    double is_div;
} loaded;

static double opt_num(json_t *op, const char *key, double dflt)
{
    json_t *v = json_object_get(op, key);
    return v ? json_number_value(v) : dflt;
}

static int opt_level(json_t *op, const char *key)
{
    static const char *const levels[] = {"off", "token", "sequence", "geometric"};
    json_t *v = json_object_get(op, key);
    return v ? lookup(json_string_value(v), levels, 4) : 0;
}

static void load_case(json_t *c, loaded *L)
{
    static const char *const adv[] = {"grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce"};
    static const char *const loss[] = {"ppo_clip", "decoupled_ppo", "gspo", "cispo", "gmpo",
                                       "gpg", "sapo", "clip_cov", "kl_cov"};
    static const char *const agg[] = {"token_mean", "seq_mean_token_sum", "seq_mean_token_mean",
                                      "seq_mean_token_sum_norm"};
    json_t *op = json_object_get(c, "options");
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.advantage = lookup(json_string_value(json_object_get(op, "advantage")), adv, 5);
    o.adv_eps = (float)json_number_value(json_object_get(op, "adv_eps"));
    o.adv_batch_norm = (int32_t)json_integer_value(json_object_get(op, "adv_batch_norm"));
    o.gamma = (float)json_number_value(json_object_get(op, "gamma"));
    o.policy_loss = lookup(json_string_value(json_object_get(op, "policy_loss")), loss, 9);
    o.clip_low = (float)json_number_value(json_object_get(op, "clip_low"));
    o.clip_high = (float)json_number_value(json_object_get(op, "clip_high"));
    o.dual_clip = (float)json_number_value(json_object_get(op, "dual_clip"));
    o.tis_cap = (float)json_number_value(json_object_get(op, "tis_cap"));
    o.behav_cap = (float)json_number_value(json_object_get(op, "behav_cap"));
    o.behav_mask = (int32_t)json_integer_value(json_object_get(op, "behav_mask"));
    o.kl_estimator = (int32_t)json_integer_value(json_object_get(op, "kl_estimator"));
    o.kl_coef = (float)json_number_value(json_object_get(op, "kl_coef"));
    o.kl_in_reward = (int32_t)json_integer_value(json_object_get(op, "kl_in_reward"));
    o.entropy_coef = (float)json_number_value(json_object_get(op, "entropy_coef"));
    o.loss_agg = lookup(json_string_value(json_object_get(op, "loss_agg")), agg, 4);
    o.agg_norm_constant = (float)json_number_value(json_object_get(op, "agg_norm_constant"));
    /* version 2: absent keys keep the defaults */
    o.sapo_tau_pos = (float)opt_num(op, "sapo_tau_pos", o.sapo_tau_pos);
    o.sapo_tau_neg = (float)opt_num(op, "sapo_tau_neg", o.sapo_tau_neg);
    o.whiten = (int32_t)opt_num(op, "whiten", o.whiten);
    o.rollout_is = opt_level(op, "rollout_is");
    o.rollout_is_threshold = (float)opt_num(op, "rollout_is_threshold", o.rollout_is_threshold);
    o.rollout_is_batch_normalize = (int32_t)opt_num(op, "rollout_is_batch_normalize", 0);
    o.rollout_rs = opt_level(op, "rollout_rs");
    o.rollout_rs_threshold = (float)opt_num(op, "rollout_rs_threshold", o.rollout_rs_threshold);
    o.rollout_rs_threshold_lower = (float)opt_num(op, "rollout_rs_threshold_lower", 0);
    o.rollout_token_veto = (float)opt_num(op, "rollout_token_veto", 0);
    o.clip_cov_ratio = (float)opt_num(op, "clip_cov_ratio", o.clip_cov_ratio);
    o.clip_cov_lb = (float)opt_num(op, "clip_cov_lb", o.clip_cov_lb);
    o.clip_cov_ub = (float)opt_num(op, "clip_cov_ub", o.clip_cov_ub);
    o.kl_cov_ratio = (float)opt_num(op, "kl_cov_ratio", o.kl_cov_ratio);
    o.ppo_kl_coef = (float)opt_num(op, "ppo_kl_coef", o.ppo_kl_coef);
    assert_int_equal(rlpi_rl_options_check(&o), RLP_OK);
    L->o = o;
    json_t *lens = json_object_get(c, "lens"), *groups = json_object_get(c, "groups");
    L->n_seq = json_array_size(lens);
    L->tok_start = malloc((L->n_seq + 1) * sizeof *L->tok_start);
    L->group = malloc(L->n_seq * sizeof *L->group);
    size_t nr;
    L->reward = floats(json_object_get(c, "rewards"), &nr);
    L->tok_start[0] = 0;
    for (size_t i = 0; i < L->n_seq; i++) {
        L->tok_start[i + 1] = L->tok_start[i] + (size_t)json_integer_value(json_array_get(lens, i));
        L->group[i] = (uint64_t)json_integer_value(json_array_get(groups, i));
    }
    size_t n;
    L->logp = floats(json_object_get(c, "logp"), &L->n_tok);
    L->old = floats(json_object_get(c, "old"), &n);
    L->behav = floats(json_object_get(c, "behav"), &n);
    L->ref = floats(json_object_get(c, "ref"), &n);
    L->ent = floats(json_object_get(c, "entropy"), &n);
    L->tokr = floats(json_object_get(c, "token_rewards"), &n);
    json_t *mask = json_object_get(c, "mask");
    L->mask = NULL;
    if (mask) {
        assert_int_equal(json_array_size(mask), L->n_tok);
        L->mask = malloc(L->n_tok);
        for (size_t k = 0; k < L->n_tok; k++)
            L->mask[k] = (uint8_t)json_integer_value(json_array_get(mask, k));
    }
    L->s = (rlpi_rl_seqs){.n_seqs = L->n_seq, .tok_start = L->tok_start, .group = L->group, .reward = L->reward,
                          .token_reward = L->tokr, .logp_old = L->old, .logp_behav = L->behav,
                          .logp_ref = L->ref, .mask = L->mask};
    /* the rejection, exactly as the reference's */
    L->keep = NULL;
    json_t *wk = json_object_get(c, "keep");
    if (o.rollout_rs || o.rollout_token_veto > 0) {
        assert_non_null(wk);
        L->keep = malloc(L->n_tok ? L->n_tok : 1);
        rlpi_reject_info ri;
        rlpi_rl_reject(&o, &L->s, L->keep, &ri);
        for (size_t k = 0; k < L->n_tok; k++)
            if (L->keep[k] != (uint8_t)json_integer_value(json_array_get(wk, k)))
                fail_msg("token %zu: keep %d, the reference %d", k, L->keep[k],
                         (int)json_integer_value(json_array_get(wk, k)));
        assert_true(ri.rejected_tokens <= ri.model_tokens && ri.vetoed_seqs <= ri.rejected_seqs);
        L->s.keep = L->keep;
    } else {
        assert_null(wk);
    }
    double sum, cnt;
    rlpi_rl_is_batch_sum(&o, &L->s, &sum, &cnt);
    L->is_div = rlpi_rl_is_divisor(&o, sum, cnt);
    L->pick = NULL;
}

static void free_case(loaded *L)
{
    free(L->tok_start), free(L->group), free(L->reward), free(L->logp), free(L->old), free(L->behav);
    free(L->ref), free(L->ent), free(L->tokr), free(L->mask), free(L->keep), free(L->pick);
}

/* loss and gradients with the sequences cut into `parts` micro-batches */
static double run_loss(loaded *L, const float *adv, size_t parts, float *dlogp, float *dent)
{
    size_t longest = 0, model = 0, seqs = 0; /* in tokens that train, as the RL step counts them */
    for (size_t i = 0; i < L->n_seq; i++) {
        size_t m = rlpi_rl_model_tokens(&L->s, i);
        longest = m > longest ? m : longest;
        model += m;
        seqs += m > 0;
    }
    rlpi_rl_norm nm = {(double)seqs, (double)model,
                       L->o.agg_norm_constant > 0 ? L->o.agg_norm_constant : (double)longest, L->is_div, L->pick};
    rlpi_rl_acc acc = {0};
    for (size_t p = 0; p < parts; p++) {
        size_t b = L->n_seq * p / parts, e = L->n_seq * (p + 1) / parts;
        if (e <= b)
            continue;
        size_t *idx = malloc((e - b) * sizeof *idx), *mb = malloc((e - b + 1) * sizeof *mb);
        for (size_t i = b; i < e; i++) {
            idx[i - b] = i;
            mb[i - b] = L->tok_start[i] - L->tok_start[b];
        }
        mb[e - b] = L->tok_start[e] - L->tok_start[b];
        size_t off = L->tok_start[b];
        assert_int_equal(rlpi_rl_loss(&L->o, &L->s, adv, idx, e - b, mb, L->logp + off, L->ent + off, &nm,
                                      dlogp + off, dent + off, &acc),
                         RLP_OK);
        free(idx);
        free(mb);
    }
    return acc.loss;
}

static void against_pytorch(const char *file, size_t min_cases)
{
    char path[4096];
    json_error_t err;
    json_t *root = json_load_file(source_path(path, sizeof path, file), 0, &err);
    assert_non_null(root);
    json_t *cases = json_object_get(root, "cases");
    size_t nc = json_array_size(cases);
    assert_true(nc >= min_cases);
    worst_abs = worst_rel = 0;
    for (size_t ci = 0; ci < nc; ci++) {
        json_t *c = json_array_get(cases, ci);
        loaded L;
        load_case(c, &L);
        float *adv = malloc(L.n_tok * sizeof *adv);
        rlpi_adv_info info;
        assert_int_equal(rlpi_rl_advantages(&L.o, &L.s, adv, &info), RLP_OK);
        json_t *wp = json_object_get(c, "pick");
        if (L.o.policy_loss == RLP_LOSS_CLIP_COV || L.o.policy_loss == RLP_LOSS_KL_COV) {
            /* the covariance selection over the whole step, as the reference's */
            assert_non_null(wp);
            L.pick = malloc(L.n_tok ? L.n_tok : 1);
            rlpi_rl_cov_select(&L.o, &L.s, adv, 0, L.n_seq, 7, L.pick);
            for (size_t k = 0; k < L.n_tok; k++)
                if (L.pick[k] != (uint8_t)json_integer_value(json_array_get(wp, k)))
                    fail_msg("case %zu token %zu: picked %d, the reference %d", ci, k, L.pick[k],
                             (int)json_integer_value(json_array_get(wp, k)));
        }
        json_t *wa = json_object_get(c, "advantages"), *wg = json_object_get(c, "dlogp"),
               *we = json_object_get(c, "dentropy");
        for (size_t k = 0; k < L.n_tok; k++)
            close_enough(adv[k], json_number_value(json_array_get(wa, k)), "advantage", ci, k);
        float *g1 = calloc(L.n_tok, sizeof *g1), *e1 = calloc(L.n_tok, sizeof *e1);
        double loss = run_loss(&L, adv, 1, g1, e1);
        close_enough(loss, json_number_value(json_object_get(c, "loss")), "loss", ci, 0);
        for (size_t k = 0; k < L.n_tok; k++) {
            close_enough(g1[k], json_number_value(json_array_get(wg, k)), "dlogp", ci, k);
            close_enough(e1[k], json_number_value(json_array_get(we, k)), "dentropy", ci, k);
            if ((L.mask && !L.mask[k]) || (L.keep && !L.keep[k])) /* an observation or rejected token: nothing */
                assert_true(adv[k] == 0.0f && g1[k] == 0.0f && e1[k] == 0.0f);
        }
        /* micro-batching changes nothing */
        for (size_t parts = 2; parts <= 4; parts *= 2) {
            float *g = calloc(L.n_tok, sizeof *g), *e = calloc(L.n_tok, sizeof *e);
            double l2 = run_loss(&L, adv, parts, g, e);
            assert_true(fabs(l2 - loss) <= 1e-6 * fmax(1.0, fabs(loss)));
            for (size_t k = 0; k < L.n_tok; k++)
                assert_true(g[k] == g1[k] && e[k] == e1[k]); /* per-token terms: bit-identical */
            free(g);
            free(e);
        }
        free(g1), free(e1), free(adv);
        free_case(&L);
    }
    print_message("%zu PyTorch reference cases (%s): largest |diff| %.3g, largest relative (|want| > 1e-3) %.3g\n",
                  nc, file, worst_abs, worst_rel);
    json_decref(root);
}

static void test_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/cases.json", 180);
}

/* multi-turn: every estimator × loss × aggregation with a loss mask */
static void test_masked_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/masked_cases.json", 60);
}

/* CISPO (the clipped IS weight under a stop-gradient), GMPO (the geometric
 * mean of per-token clipped log-ratios) and GPG (−Â·log π) as verl computes them, with every
 * advantage estimator and aggregation, truncated IS and a KL term */
static void test_cispo_gmpo_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/loss2_cases.json", 60);
}

/* the k3 and abs KL estimators at log-ratios out to ±30, as a loss term and
 * in the reward: k3 with verl's clamps (log-ratio to [−20, 20], value to
 * [−10, 10]), so a far-off token adds at most 10 instead of 7e10 */
static void test_kl_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/kl_cases.json", 60);
}

/* SAPO (the soft gate, seq-mean-token-mean policy term, log-ratios out to
 * ±30 past its clamp), Clip-Cov and KL-Cov (the covariance selection and
 * the loss on it) with every estimator and aggregation */
static void test_sapo_cov_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/loss3_cases.json", 60);
}

/* verl's rollout correction: token and sequence IS weights (truncated,
 * batch-normalised), rejection by token, sequence and geometric mean, the
 * token veto, and verl's unbiased whitening; rollout log-ratios out to ±30,
 * single-sample groups, multi-turn masks, sequences rejected whole */
static void test_rollout_correction_against_pytorch(void **state)
{
    (void)state;
    against_pytorch("tests/reference/fixtures/rl/correction_cases.json", 60);
}

/* case #8: equal non-dyadic rewards give exactly 0 for every estimator with
 * a baseline, with and without batch normalisation */
static void test_equal_rewards_zero_advantage(void **state)
{
    (void)state;
    const float values[] = {0.2f, 0.7f, 0.9f, 0.35f, 0.1f, 0.1f, 1.0f / 3.0f, 1e-7f};
    const size_t sizes[] = {8, 8, 16, 7, 8, 10, 5, 9};
    const int kinds[] = {RLP_ADV_GRPO, RLP_ADV_DR_GRPO, RLP_ADV_RLOO};
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++)
        for (size_t kind = 0; kind < 3; kind++) {
            size_t G = sizes[v];
            size_t ts[17];
            uint64_t grp[16];
            float rew[16], adv[16], lp[16] = {0};
            for (size_t i = 0; i <= G; i++)
                ts[i] = i;
            for (size_t i = 0; i < G; i++)
                grp[i] = 77, rew[i] = values[v];
            rlpi_rl_seqs s = {.n_seqs = G, .tok_start = ts, .group = grp, .reward = rew, .logp_old = lp,
                              .logp_behav = lp};
            rlp_rl_options o = RLP_RL_OPTIONS_INIT;
            o.advantage = kinds[kind];
            rlpi_adv_info info;
            assert_int_equal(rlpi_rl_advantages(&o, &s, adv, &info), RLP_OK);
            assert_int_equal(info.zero_std_groups, 1);
            for (size_t i = 0; i < G; i++)
                assert_true(adv[i] == 0.0f && !signbit(adv[i]) == !signbit(0.0f));
        }
    /* the naive fp32 loop the case describes does not give 0 (so the test can tell) */
    float sum = 0;
    for (int i = 0; i < 8; i++)
        sum += 0.2f;
    float mean = sum / 8, var = 0;
    for (int i = 0; i < 8; i++)
        var += (0.2f - mean) * (0.2f - mean);
    float naive = (0.2f - mean) / (sqrtf(var / 7) + 1e-6f);
    assert_true(fabsf(naive) > 1e-3f);
}

/* case #9: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm under 1
 * or 2 micro-batches; ρ = 1 so each token's loss is −Â */
static void test_accumulation_normaliser(void **state)
{
    (void)state;
    size_t ts[3] = {0, 1, 4};
    uint64_t grp[2] = {1, 2};
    float rew[2] = {0, 0}, lp[4] = {-1, -1, -1, -1}, ent[4] = {0}, adv[4] = {-4, 0, 0, 0};
    rlpi_rl_seqs s = {.n_seqs = 2, .tok_start = ts, .group = grp, .reward = rew, .logp_old = lp, .logp_behav = lp};
    const int aggs[] = {RLP_AGG_TOKEN_MEAN, RLP_AGG_SEQ_MEAN_TOKEN_MEAN, RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM};
    const double want[] = {1.0, 2.0, 0.5};
    for (int a = 0; a < 3; a++) {
        rlp_rl_options o = RLP_RL_OPTIONS_INIT;
        o.loss_agg = aggs[a];
        o.agg_norm_constant = 4;
        rlpi_rl_norm nm = {2, 4, 4, 1, NULL};
        float g_one[4], g_two[4], d[4];
        rlpi_rl_acc acc = {0};
        size_t idx[2] = {0, 1}, mb[3] = {0, 1, 4};
        assert_int_equal(rlpi_rl_loss(&o, &s, adv, idx, 2, mb, lp, ent, &nm, g_one, d, &acc), RLP_OK);
        assert_true(fabs(acc.loss - want[a]) < 1e-12);
        rlpi_rl_acc acc2 = {0};
        size_t i0[1] = {0}, i1[1] = {1}, m0[2] = {0, 1}, m1[2] = {0, 3};
        assert_int_equal(rlpi_rl_loss(&o, &s, adv, i0, 1, m0, lp, ent, &nm, g_two, d, &acc2), RLP_OK);
        assert_int_equal(rlpi_rl_loss(&o, &s, adv, i1, 1, m1, lp + 1, ent + 1, &nm, g_two + 1, d + 1, &acc2), RLP_OK);
        assert_true(fabs(acc2.loss - want[a]) < 1e-12);
        assert_memory_equal(g_one, g_two, sizeof g_one);
    }
}

static void test_overlong_and_options(void **state)
{
    (void)state;
    /* DAPO eq. 13 with L_max 20, L_cache 4: 0 up to 16, −0.25 per token after, −1 at 20 and beyond */
    assert_true(rlpi_overlong_penalty(16, 20, 4) == 0.0f);
    assert_true(fabsf(rlpi_overlong_penalty(17, 20, 4) + 0.25f) < 1e-7f);
    assert_true(fabsf(rlpi_overlong_penalty(20, 20, 4) + 1.0f) < 1e-7f);
    assert_true(rlpi_overlong_penalty(25, 20, 4) == -1.0f);
    assert_true(rlpi_overlong_penalty(1000, 0, 0) == 0.0f);
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    assert_int_equal(rlpi_rl_options_check(&o), RLP_OK);
    o.clip_low = 1.5f;
    assert_int_equal(rlpi_rl_options_check(&o), RLP_E_INVALID_ARG);
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.dual_clip = 0.5f;
    assert_int_equal(rlpi_rl_options_check(&o), RLP_E_INVALID_ARG);
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.loss_agg = 7;
    assert_int_equal(rlpi_rl_options_check(&o), RLP_E_INVALID_ARG);
    o = (rlp_rl_options)RLP_RL_OPTIONS_INIT;
    o.gamma = NAN;
    assert_int_equal(rlpi_rl_options_check(&o), RLP_E_INVALID_ARG);
}

/* decoupled PPO with π_behav = π_prox is PPO-clip exactly */
static void test_decoupled_reduces_to_ppo(void **state)
{
    (void)state;
    size_t ts[4] = {0, 3, 5, 9};
    uint64_t grp[3] = {1, 1, 1};
    float rew[3] = {1, 0, 0.5f};
    float lp[9] = {-0.5f, -1.2f, -0.1f, -2.0f, -0.7f, -0.3f, -0.9f, -1.5f, -0.05f};
    float old[9] = {-0.6f, -1.0f, -0.4f, -1.5f, -0.75f, -0.2f, -1.4f, -1.4f, -0.1f};
    float ent[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, adv[9];
    rlpi_rl_seqs s = {.n_seqs = 3, .tok_start = ts, .group = grp, .reward = rew, .logp_old = old, .logp_behav = old};
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    assert_int_equal(rlpi_rl_advantages(&o, &s, adv, NULL), RLP_OK);
    rlpi_rl_norm nm = {3, 9, 4, 1, NULL};
    size_t idx[3] = {0, 1, 2};
    float g1[9], g2[9], d[9];
    rlpi_rl_acc a1 = {0}, a2 = {0};
    assert_int_equal(rlpi_rl_loss(&o, &s, adv, idx, 3, ts, lp, ent, &nm, g1, d, &a1), RLP_OK);
    o.policy_loss = RLP_LOSS_DECOUPLED_PPO;
    o.behav_cap = 2.0f;
    assert_int_equal(rlpi_rl_loss(&o, &s, adv, idx, 3, ts, lp, ent, &nm, g2, d, &a2), RLP_OK);
    assert_true(a1.loss == a2.loss);
    assert_memory_equal(g1, g2, sizeof g1);
    assert_true(a1.clip_lo + a1.clip_hi > 0); /* the case does clip somewhere */
}

/* hand-computed: one sequence, Â = 1; token 1 has ρ = 1.5 (clipped at
 * 1.2), token 2 ρ = 0.5 (not clipped: Â > 0). Token-mean loss
 * (−1.2 − 0.5)/2 = −0.85; ∂/∂logp = (0, −ρÂ/2 = −0.25) */
static void test_hand_computed_stats(void **state)
{
    (void)state;
    size_t ts[2] = {0, 2};
    uint64_t grp[1] = {1};
    float rew[1] = {1}, old[2] = {-1.0f, -1.0f};
    float lp[2] = {(float)(-1.0 + log(1.5)), (float)(-1.0 + log(0.5))}, adv[2] = {1, 1}, ent[2] = {2, 4};
    rlpi_rl_seqs s = {.n_seqs = 1, .tok_start = ts, .group = grp, .reward = rew, .logp_old = old, .logp_behav = old};
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    rlpi_rl_norm nm = {1, 2, 2, 1, NULL};
    size_t idx[1] = {0};
    float g[2], d[2];
    rlpi_rl_acc acc = {0};
    assert_int_equal(rlpi_rl_loss(&o, &s, adv, idx, 1, ts, lp, ent, &nm, g, d, &acc), RLP_OK);
    assert_true(fabs(acc.loss + 0.85) < 1e-6);
    assert_true(acc.clip_hi == 1 && acc.clip_lo == 0 && acc.n_tokens == 2);
    assert_true(fabs(acc.ratio_sum - 2.0) < 1e-6 && fabs(acc.ratio_max - 1.5) < 1e-6);
    assert_true(acc.w_sum == 2 && acc.w_max == 1);
    assert_true(acc.ent == 6);
    assert_true(g[0] == 0.0f && fabsf(g[1] + 0.25f) < 1e-6f);
    /* Â = −1: token 2 (ρ = 0.5 < 0.8) is clipped low; dual clip c = 1.1 caps token 1 at 1.1 */
    adv[0] = adv[1] = -1;
    o.dual_clip = 1.1f;
    memset(&acc, 0, sizeof acc);
    assert_int_equal(rlpi_rl_loss(&o, &s, adv, idx, 1, ts, lp, ent, &nm, g, d, &acc), RLP_OK);
    /* token 1: max(1.5, 1.2) = 1.5 → min(1.5, 1.1) = 1.1; token 2: max(0.5, 0.8) = 0.8 */
    assert_true(fabs(acc.loss - (1.1 + 0.8) / 2) < 1e-6);
    assert_true(acc.clip_lo == 1 && acc.clip_hi == 0);
    assert_true(g[0] == 0.0f && g[1] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_pytorch), cmocka_unit_test(test_masked_against_pytorch),
        cmocka_unit_test(test_kl_against_pytorch),
        cmocka_unit_test(test_cispo_gmpo_against_pytorch),
        cmocka_unit_test(test_sapo_cov_against_pytorch),
        cmocka_unit_test(test_rollout_correction_against_pytorch),
        cmocka_unit_test(test_equal_rewards_zero_advantage),
        cmocka_unit_test(test_accumulation_normaliser),
        cmocka_unit_test(test_overlong_and_options),
        cmocka_unit_test(test_decoupled_reduces_to_ppo),
        cmocka_unit_test(test_hand_computed_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
