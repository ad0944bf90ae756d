/* Advantage estimators and policy losses, each a direct transcription of
 * its paper's formula (cited at the enum values in rlpost.h and below).
 * Sums run in double; all-equal groups are detected exactly so that
 * rounding in a mean never turns "no signal" into a push (verl PR #4597). */
#include "algo/rl_math.h"

#include "algo/gae.h"

#include "core/error.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int rlpi_rl_options_check(const rlp_rl_options *o)
{
#define BAD(cond, what)                                                                  \
    do {                                                                                 \
        if (cond)                                                                        \
            return rlpi_error_set(RLP_E_INVALID_ARG, "RL options: %s", what);            \
    } while (0)
    BAD(o->version != RLP_RL_OPTIONS_VERSION, "unknown version (convert older callers' options first)");
    BAD(o->advantage < RLP_ADV_GRPO || o->advantage > RLP_ADV_GAE, "advantage is not an rlp_advantage");
    BAD(!(o->adv_eps >= 0) || !isfinite(o->adv_eps), "adv_eps must be finite and >= 0");
    BAD(!(o->gamma >= 0 && o->gamma <= 1), "gamma must be in [0, 1]");
    BAD(o->policy_loss < RLP_LOSS_PPO_CLIP || o->policy_loss > RLP_LOSS_KL_COV, "policy_loss is not an rlp_policy_loss");
    BAD(!(o->clip_low >= 0 && o->clip_low < 1), "clip_low must be in [0, 1)");
    BAD(!(o->clip_high >= 0) || !isfinite(o->clip_high), "clip_high must be finite and >= 0");
    BAD(!(o->dual_clip == 0 || o->dual_clip > 1) || !isfinite(o->dual_clip), "dual_clip must be 0 or > 1");
    BAD(!(o->tis_cap >= 0) || !isfinite(o->tis_cap), "tis_cap must be finite and >= 0");
    BAD(!(o->behav_cap >= 0) || !isfinite(o->behav_cap), "behav_cap must be finite and >= 0");
    BAD(o->kl_estimator < 0 || o->kl_estimator > RLP_KL_ABS, "kl_estimator must be 0 or an rlp_kl_estimator");
    BAD(!(o->kl_coef >= 0) || !isfinite(o->kl_coef), "kl_coef must be finite and >= 0");
    BAD(!isfinite(o->entropy_coef), "entropy_coef must be finite");
    BAD(o->loss_agg < RLP_AGG_TOKEN_MEAN || o->loss_agg > RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM,
        "loss_agg is not an rlp_loss_agg");
    BAD(!(o->agg_norm_constant >= 0) || !isfinite(o->agg_norm_constant), "agg_norm_constant must be >= 0");
    BAD(o->overlong_max && (o->overlong_cache == 0 || o->overlong_cache > o->overlong_max),
        "overlong_cache must be in [1, overlong_max]");
    BAD(o->ppo_epochs < 1 || o->mini_batches < 1, "ppo_epochs and mini_batches must be >= 1");
    BAD(!(o->temperature >= 0) || !isfinite(o->temperature), "temperature must be finite and >= 0");
    BAD(!(o->sapo_tau_pos > 0) || !isfinite(o->sapo_tau_pos) || !(o->sapo_tau_neg > 0) || !isfinite(o->sapo_tau_neg),
        "sapo_tau_pos and sapo_tau_neg must be finite and > 0");
    BAD(o->whiten != RLP_WHITEN_POPULATION && o->whiten != RLP_WHITEN_UNBIASED, "whiten is not an rlp_whiten");
    BAD(o->rollout_is != RLP_IS_OFF && o->rollout_is != RLP_IS_TOKEN && o->rollout_is != RLP_IS_SEQUENCE,
        "rollout_is must be off, token or sequence");
    BAD(!(o->rollout_is_threshold > 0) || !isfinite(o->rollout_is_threshold), "rollout_is_threshold must be finite and > 0");
    BAD(o->rollout_is && o->tis_cap > 0, "rollout_is and tis_cap both weigh by pi_old/pi_behav: choose one");
    BAD(o->rollout_is && o->policy_loss == RLP_LOSS_DECOUPLED_PPO,
        "rollout_is with decoupled_ppo would weigh by pi_prox/pi_behav twice (decoupled PPO's w is that weight)");
    BAD(o->rollout_rs < RLP_IS_OFF || o->rollout_rs > RLP_IS_GEOMETRIC, "rollout_rs is not an rlp_is_level");
    BAD(!(o->rollout_rs_threshold > 0) || !isfinite(o->rollout_rs_threshold), "rollout_rs_threshold must be finite and > 0");
    BAD(!(o->rollout_rs_threshold_lower >= 0) || !(o->rollout_rs_threshold_lower <= o->rollout_rs_threshold),
        "rollout_rs_threshold_lower must be in [0, rollout_rs_threshold] (0: 1/rollout_rs_threshold)");
    BAD(o->rollout_rs && o->rollout_rs_threshold_lower == 0 && 1.0 / o->rollout_rs_threshold > o->rollout_rs_threshold,
        "rollout_rs_threshold below 1 needs an explicit rollout_rs_threshold_lower (1/threshold would exceed it)");
    BAD(!(o->rollout_token_veto >= 0) || !isfinite(o->rollout_token_veto), "rollout_token_veto must be finite and >= 0");
    BAD(o->overlong_filter != 0 && o->overlong_filter != 1, "overlong_filter must be 0 or 1");
    BAD(!(o->clip_cov_ratio > 0 && o->clip_cov_ratio <= 1), "clip_cov_ratio must be in (0, 1]");
    BAD(!(o->clip_cov_lb < o->clip_cov_ub) || !isfinite(o->clip_cov_lb) || !isfinite(o->clip_cov_ub),
        "clip_cov_lb must be below clip_cov_ub (both finite)");
    BAD(!(o->kl_cov_ratio > 0 && o->kl_cov_ratio <= 1), "kl_cov_ratio must be in (0, 1]");
    BAD(!(o->ppo_kl_coef >= 0) || !isfinite(o->ppo_kl_coef), "ppo_kl_coef must be finite and >= 0");
#undef BAD
    return RLP_OK;
}

float rlpi_overlong_penalty(uint32_t len, uint32_t l_max, uint32_t l_cache)
{
    if (l_max == 0 || len <= l_max - l_cache)
        return 0.0f;
    if (len > l_max)
        return -1.0f;
    return (float)(((double)(l_max - l_cache) - (double)len) / (double)l_cache);
}

/* k3 as verl's low_var_kl computes it (core_algos.kl_penalty_forward): the
 * log-ratio clamped to [−20, 20] before the exponential and the value to
 * [−10, 10] after it, so a token far off the reference (x = −25 would give
 * 7e10) adds at most 10 and no gradient instead of blowing up the loss. */
#define KL_K3_LOG_RATIO_CLAMP 20.0
#define KL_K3_VALUE_CLAMP 10.0

static double kl_value(int est, double x)
{
    switch (est) {
    case RLP_KL_K1:
        return x;
    case RLP_KL_K2:
        return 0.5 * x * x;
    case RLP_KL_K3: {
        double y = fmin(fmax(-x, -KL_K3_LOG_RATIO_CLAMP), KL_K3_LOG_RATIO_CLAMP); /* log(π_ref/π_θ) */
        return fmin(fmax(exp(y) - y - 1.0, -KL_K3_VALUE_CLAMP), KL_K3_VALUE_CLAMP);
    }
    case RLP_KL_ABS:
        return fabs(x);
    default:
        return 0.0;
    }
}

/* d kl_value / dx; 0 where a clamp holds the value (as autograd through
 * torch.clamp: the bounds themselves still pass the gradient) and, for abs,
 * at x = 0 (torch's sign(0)). */
static double kl_grad(int est, double x)
{
    switch (est) {
    case RLP_KL_K1:
        return 1.0;
    case RLP_KL_K2:
        return x;
    case RLP_KL_K3: {
        if (x < -KL_K3_LOG_RATIO_CLAMP || x > KL_K3_LOG_RATIO_CLAMP)
            return 0.0;
        double y = -x, k = exp(y) - y - 1.0;
        return k > KL_K3_VALUE_CLAMP || k < -KL_K3_VALUE_CLAMP ? 0.0 : 1.0 - exp(y);
    }
    case RLP_KL_ABS:
        return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0;
    default:
        return 0.0;
    }
}


typedef struct sort_item {
    uint64_t group;
    size_t seq;
} sort_item;

static int cmp_items(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    if (x->group != y->group)
        return x->group < y->group ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void set_seq(const rlpi_rl_seqs *s, float *adv, size_t i, double value)
{
    for (size_t t = s->tok_start[i]; t < s->tok_start[i + 1]; t++)
        adv[t] = rlpi_rl_on(s, t) ? (float)value : 0.0f;
}

/* The divisor of the whole-batch normalisation from the sum of squared
 * deviations over m tokens: σ + ε with the population σ, or (verl's
 * masked_whiten) √(s² + 1e-8) with the unbiased s² (0 for one token). */
double rlpi_whiten_divisor(int whiten, double sq_dev, double m, double eps)
{
    if (whiten == RLP_WHITEN_UNBIASED)
        return sqrt((m > 1 ? sq_dev / (m - 1) : 0.0) + 1e-8);
    return sqrt(m > 0 ? sq_dev / m : 0.0) + eps;
}

/* whole-batch normalisation over model tokens: (x − μ)/divisor; masked
 * tokens neither count nor change (they stay 0) */
static void batch_normalise(const rlpi_rl_seqs *s, float *adv, double eps, int whiten)
{
    size_t n = s->tok_start[s->n_seqs], m = 0;
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i)) {
            mean += adv[i];
            m++;
        }
    if (m == 0)
        return;
    mean /= (double)m;
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i))
            var += ((double)adv[i] - mean) * ((double)adv[i] - mean);
    double div = rlpi_whiten_divisor(whiten, var, (double)m, eps);
    for (size_t i = 0; i < n; i++)
        if (rlpi_rl_on(s, i))
            adv[i] = (float)(((double)adv[i] - mean) / div);
}

int rlpi_rl_advantages(const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv, rlpi_adv_info *info)
{
    double eps;
    int rc = rlpi_rl_advantages_unnormalised(o, s, adv, info, &eps);
    if (rc == RLP_OK && eps >= 0)
        batch_normalise(s, adv, eps, o->whiten);
    return rc;
}

/* The last training token of sequence i (tok_start[i + 1] when none). */
static size_t last_on(const rlpi_rl_seqs *s, size_t i)
{
    size_t b = s->tok_start[i], e = s->tok_start[i + 1];
    for (size_t t = e; t-- > b;)
        if (rlpi_rl_on(s, t))
            return t;
    return e;
}

/* The per-token reward of training token t of sequence i, whose last
 * training token is `last` (REINFORCE++ and GAE): the outcome reward at the
 * last one, the process reward, and −β·KLₜ with kl_in_reward. */
static double step_reward(const rlp_rl_options *o, const rlpi_rl_seqs *s, size_t i, size_t t, size_t last)
{
    double r = t == last ? (double)s->reward[i] : 0.0;
    if (s->token_reward)
        r += s->token_reward[t];
    if (o->kl_in_reward && o->kl_estimator && s->logp_ref)
        r -= (double)o->kl_coef * kl_value(o->kl_estimator, (double)s->logp_old[t] - (double)s->logp_ref[t]);
    return r;
}

/* GAE with the critic's values (RLP_ADV_GAE): the per-token rewards of
 * REINFORCE++ (outcome at the last training token, process rewards, KL
 * shaping with kl_in_reward), then rlpi_gae over the training tokens
 * (observations and rejected tokens are skipped by the recursion), the
 * returns A + V to s->returns; the whole-batch normalisation is the
 * caller's (*norm_eps), as verl whitens GAE advantages. Episodes are
 * terminal after their last token (verl, OpenRLHF): a completion cut by
 * the length limit is not bootstrapped. */
static int gae_advantages(const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv, rlpi_adv_info *info,
                          double *norm_eps)
{
    if (!s->values || !s->returns)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "advantages: GAE needs a critic's values (the trainer runs one: "
                              "rlp_trainer_options.critic_path)");
    size_t n = s->n_seqs ? s->tok_start[s->n_seqs] : 0;
    float *r = malloc((n ? n : 1) * sizeof *r);
    uint8_t *on = malloc(n ? n : 1);
    if (!r || !on) {
        free(r);
        free(on);
        return rlpi_error_set(RLP_E_NOMEM, "advantages: out of memory");
    }
    for (size_t i = 0; i < s->n_seqs; i++) {
        size_t last = last_on(s, i);
        for (size_t t = s->tok_start[i]; t < s->tok_start[i + 1]; t++) {
            on[t] = (uint8_t)rlpi_rl_on(s, t);
            r[t] = on[t] ? (float)step_reward(o, s, i, t, last) : 0.0f;
        }
    }
    rlpi_gae_seqs g = {.n_seqs = s->n_seqs, .tok_start = s->tok_start, .token_reward = r, .values = s->values,
                       .mask = on, .bootstrap = NULL};
    int rc = rlpi_gae(&g, o->gamma, s->gae_lambda, adv, s->returns);
    free(r);
    free(on);
    if (rc)
        return rc;
    *norm_eps = 1e-8;
    if (info)
        *info = (rlpi_adv_info){.n_groups = s->n_seqs};
    return RLP_OK;
}

int rlpi_rl_advantages_unnormalised(const rlp_rl_options *o, const rlpi_rl_seqs *s, float *adv,
                                    rlpi_adv_info *info, double *norm_eps)
{
    *norm_eps = -1;
    rlpi_adv_info inf = {0};
    if (o->advantage == RLP_ADV_GAE)
        return gae_advantages(o, s, adv, info, norm_eps);
    if (o->advantage == RLP_ADV_REINFORCE_PP) {
        /* per-token reward, return-to-go, whole-batch normalisation. The
         * steps are the model's tokens: an observation (mask 0) is the
         * environment's answer, not an action, so it has no advantage, its
         * token reward and KL are ignored and the discount skips it; the
         * outcome reward sits at the last model token. */
        for (size_t i = 0; i < s->n_seqs; i++) {
            size_t b = s->tok_start[i], last = last_on(s, i);
            double g = 0;
            for (size_t t = s->tok_start[i + 1]; t-- > b;) {
                if (!rlpi_rl_on(s, t)) {
                    adv[t] = 0.0f;
                    continue;
                }
                g = step_reward(o, s, i, t, last) + (double)o->gamma * g;
                adv[t] = (float)g;
            }
        }
        *norm_eps = 1e-8;
        if (info)
            *info = inf;
        return RLP_OK;
    }
    sort_item *items = malloc((s->n_seqs ? s->n_seqs : 1) * sizeof *items);
    if (!items)
        return rlpi_error_set(RLP_E_NOMEM, "advantages: out of memory");
    for (size_t i = 0; i < s->n_seqs; i++)
        items[i] = (sort_item){s->group[i], i};
    qsort(items, s->n_seqs, sizeof *items, cmp_items);
    for (size_t b = 0; b < s->n_seqs;) {
        size_t e = b + 1;
        while (e < s->n_seqs && items[e].group == items[b].group)
            e++;
        size_t G = e - b;
        inf.n_groups++;
        bool equal = true;
        double sum = 0;
        for (size_t k = b; k < e; k++) {
            float r = s->reward[items[k].seq];
            equal &= r == s->reward[items[b].seq];
            sum += r;
        }
        if (equal)
            inf.zero_std_groups++;
        double mean = sum / (double)G, var = 0;
        for (size_t k = b; k < e; k++) {
            double d = (double)s->reward[items[k].seq] - mean;
            var += d * d;
        }
        double sd = G > 1 ? sqrt(var / (double)(G - 1)) : 0.0; /* unbiased, as torch.std */
        for (size_t k = b; k < e; k++) {
            size_t i = items[k].seq;
            double r = s->reward[i], a;
            if (equal && o->advantage != RLP_ADV_REINFORCE) {
                a = 0.0; /* no signal: exactly zero, not a rounding residue */
            } else {
                switch (o->advantage) {
                case RLP_ADV_GRPO:
                    a = (r - mean) / (sd + (double)o->adv_eps);
                    break;
                case RLP_ADV_DR_GRPO:
                    a = r - mean;
                    break;
                case RLP_ADV_RLOO:
                    a = G > 1 ? r - (sum - r) / (double)(G - 1) : 0.0;
                    break;
                default: /* REINFORCE */
                    a = r;
                    break;
                }
            }
            set_seq(s, adv, i, a);
        }
        b = e;
    }
    free(items);
    if (o->adv_batch_norm && o->advantage != RLP_ADV_REINFORCE)
        *norm_eps = (double)o->adv_eps;
    if (info)
        *info = inf;
    return RLP_OK;
}

/* PPO-clip of one token with optional dual clip: value and ∂/∂ρ. */
static double ppo_clip(const rlp_rl_options *o, double rho, double A, double *dvalue_drho, int *clip_lo, int *clip_hi)
{
    double lo = 1.0 - (double)o->clip_low, hi = 1.0 + (double)o->clip_high;
    double crho = rho < lo ? lo : rho > hi ? hi : rho;
    double unclipped = -rho * A, clipped = -crho * A;
    double value;
    /* −min(ρA, clip(ρ)A) = max(−ρA, −clip(ρ)A) */
    if (unclipped >= clipped) {
        value = unclipped;
        *dvalue_drho = -A;
    } else {
        value = clipped;
        *dvalue_drho = 0.0; /* clip(ρ) is constant outside [lo, hi] and this branch only wins there */
    }
    *clip_lo = A < 0 && rho < lo;
    *clip_hi = A > 0 && rho > hi;
    if (o->dual_clip > 0 && A < 0) {
        double cap = -(double)o->dual_clip * A;
        if (value > cap) {
            value = cap;
            *dvalue_drho = 0.0;
        }
    }
    return value;
}

/* GMPO's per-token clipped log-ratio mₜ (verl's compute_policy_loss_geo_mean):
 * sgn·min(sgn·x, sgn·clamp(x, −ε_low, ε_high)) with sgn = sign(Â), and its
 * derivative in x (autograd's: 1 where x itself is the minimum, ties
 * included, 0 where the clamp holds it or Â = 0). */
static double gmpo_term(const rlp_rl_options *o, double x, double A, double *grad)
{
    double lo = -(double)o->clip_low, hi = (double)o->clip_high;
    double c = x < lo ? lo : x > hi ? hi : x;
    double m, g;
    if (A > 0) {
        m = x < c ? x : c;
        g = x <= hi;
    } else if (A < 0) {
        m = x > c ? x : c;
        g = x >= lo;
    } else {
        m = 0.0;
        g = 0.0;
    }
    if (grad)
        *grad = g;
    return m;
}

/* Truncated importance sampling against the rollout's logprobs (PPO-clip,
 * CISPO, GPG, SAPO, the covariance losses): min(π_old/π_behav, tis_cap)
 * for token g, 1 when off. */
static double tis_weight(const rlp_rl_options *o, const rlpi_rl_seqs *s, size_t g, double old)
{
    if (!(o->tis_cap > 0))
        return 1.0;
    double w = exp(old - (double)s->logp_behav[g]);
    return w < o->tis_cap ? w : (double)o->tis_cap;
}

/* verl's SAFETY_BOUND of the rollout correction: log-ratios are clamped
 * here before exp, so a sequence far off the rollout gives e^20, not inf. */
#define IS_LOG_BOUND 20.0

double rlpi_rl_is_raw(int level, const rlpi_rl_seqs *s, size_t seq, size_t t)
{
    double x;
    if (level == RLP_IS_TOKEN) {
        x = (double)s->logp_old[t] - (double)s->logp_behav[t];
    } else {
        /* over the sequence's model tokens (the loss mask, not the rejection) */
        double sum = 0;
        size_t n = 0;
        for (size_t k = s->tok_start[seq]; k < s->tok_start[seq + 1]; k++)
            if (rlpi_rl_model(s, k)) {
                sum += (double)s->logp_old[k] - (double)s->logp_behav[k];
                n++;
            }
        x = level == RLP_IS_GEOMETRIC ? (n ? sum / (double)n : 0.0) : sum;
    }
    return exp(fmin(fmax(x, -IS_LOG_BOUND), IS_LOG_BOUND));
}

/* A rollout IS weight as it multiplies the policy loss: truncated, divided
 * by the batch mean when asked. */
static double truncate_is(const rlp_rl_options *o, const rlpi_rl_norm *nm, double raw)
{
    double w = fmin(raw, (double)o->rollout_is_threshold);
    return nm->is_div > 0 ? w / nm->is_div : w;
}

/* Sequence seq's rollout IS weight (SEQUENCE; computed once per sequence),
 * or 1 (TOKEN, off). */
static double seq_is_weight(const rlp_rl_options *o, const rlpi_rl_seqs *s, const rlpi_rl_norm *nm, size_t seq)
{
    return o->rollout_is == RLP_IS_SEQUENCE ? truncate_is(o, nm, rlpi_rl_is_raw(RLP_IS_SEQUENCE, s, seq, 0)) : 1.0;
}

/* Token g's rollout IS weight given its sequence's (seq_is_weight). */
static double token_is_weight(const rlp_rl_options *o, const rlpi_rl_seqs *s, const rlpi_rl_norm *nm, size_t seq,
                              size_t g, double seq_w)
{
    return o->rollout_is == RLP_IS_TOKEN ? truncate_is(o, nm, rlpi_rl_is_raw(RLP_IS_TOKEN, s, seq, g)) : seq_w;
}

void rlpi_rl_is_batch_sum(const rlp_rl_options *o, const rlpi_rl_seqs *s, double *sum_out, double *n_out)
{
    double sum = 0, n = 0;
    *sum_out = *n_out = 0;
    if (!o->rollout_is)
        return;
    for (size_t i = 0; i < s->n_seqs; i++) {
        size_t b = s->tok_start[i], e = s->tok_start[i + 1], first = e;
        for (size_t t = b; t < e; t++)
            if (rlpi_rl_model(s, t)) {
                if (first == e)
                    first = t;
                if (o->rollout_is == RLP_IS_TOKEN) {
                    sum += fmin(rlpi_rl_is_raw(RLP_IS_TOKEN, s, i, t), (double)o->rollout_is_threshold);
                    n += 1;
                }
            }
        if (o->rollout_is == RLP_IS_SEQUENCE && first < e) {
            sum += fmin(rlpi_rl_is_raw(RLP_IS_SEQUENCE, s, i, first), (double)o->rollout_is_threshold);
            n += 1;
        }
    }
    *sum_out = sum;
    *n_out = n;
}

double rlpi_rl_is_divisor(const rlp_rl_options *o, double sum, double n)
{
    if (!o->rollout_is || !o->rollout_is_batch_normalize || !(n > 0))
        return 1.0;
    double mean = sum / n;
    return mean > 1e-8 ? mean : 1.0;
}

void rlpi_rl_reject(const rlp_rl_options *o, const rlpi_rl_seqs *s, uint8_t *keep, rlpi_reject_info *info)
{
    rlpi_reject_info inf = {0};
    double hi = (double)o->rollout_rs_threshold;
    double lo = o->rollout_rs_threshold_lower > 0 ? (double)o->rollout_rs_threshold_lower : 1.0 / hi;
    double log_veto = o->rollout_token_veto > 0 ? log((double)o->rollout_token_veto) : -INFINITY;
    for (size_t i = 0; i < s->n_seqs; i++) {
        size_t b = s->tok_start[i], e = s->tok_start[i + 1];
        bool seq_out = false, vetoed = false, any_model = false;
        for (size_t t = b; t < e; t++)
            if (rlpi_rl_model(s, t)) {
                any_model = true;
                /* the veto compares the token's unclamped log-ratio, as verl */
                if ((double)s->logp_old[t] - (double)s->logp_behav[t] < log_veto)
                    vetoed = true;
            }
        if (o->rollout_rs == RLP_IS_SEQUENCE || o->rollout_rs == RLP_IS_GEOMETRIC) {
            size_t first = b;
            while (first < e && !rlpi_rl_model(s, first))
                first++;
            double w = rlpi_rl_is_raw(o->rollout_rs, s, i, first);
            seq_out = any_model && !(w >= lo && w <= hi);
        }
        bool any_rejected = false;
        for (size_t t = b; t < e; t++) {
            keep[t] = 1;
            if (!rlpi_rl_model(s, t))
                continue;
            inf.model_tokens++;
            bool out = seq_out || vetoed;
            if (o->rollout_rs == RLP_IS_TOKEN) {
                double w = rlpi_rl_is_raw(RLP_IS_TOKEN, s, i, t);
                out |= !(w >= lo && w <= hi);
            }
            if (out) {
                keep[t] = 0;
                inf.rejected_tokens++;
                any_rejected = true;
            }
        }
        inf.seqs += any_model;
        inf.rejected_seqs += any_rejected;
        inf.vetoed_seqs += vetoed && any_model;
    }
    if (info)
        *info = inf;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct cov_item {
    double cov;
    size_t t;
} cov_item;

static int cmp_cov_desc(const void *a, const void *b)
{
    const cov_item *x = a, *y = b;
    if (x->cov != y->cov)
        return x->cov > y->cov ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t; /* ties: the earlier token first */
}

void rlpi_rl_cov_select(const rlp_rl_options *o, const rlpi_rl_seqs *s, const float *adv, size_t b, size_t e,
                        uint64_t seed, uint8_t *pick)
{
    size_t t0 = s->tok_start[b], t1 = s->tok_start[e], n = 0;
    double ma = 0, ml = 0;
    for (size_t t = t0; t < t1; t++) {
        pick[t] = 0;
        if (rlpi_rl_on(s, t)) {
            ma += adv[t];
            ml += s->logp_old[t];
            n++;
        }
    }
    if (n == 0)
        return;
    ma /= (double)n;
    ml /= (double)n;
    cov_item *items = malloc(n * sizeof *items);
    if (!items)
        return; /* no token is treated apart: the plain loss (the caller checked memory before) */
    size_t m = 0;
    for (size_t t = t0; t < t1; t++)
        if (rlpi_rl_on(s, t)) {
            double c = ((double)adv[t] - ma) * ((double)s->logp_old[t] - ml);
            if (o->policy_loss == RLP_LOSS_KL_COV || (c > (double)o->clip_cov_lb && c < (double)o->clip_cov_ub))
                items[m++] = (cov_item){c, t};
        }
    double ratio = o->policy_loss == RLP_LOSS_KL_COV ? (double)o->kl_cov_ratio : (double)o->clip_cov_ratio;
    size_t k = (size_t)(ratio * (double)n);
    k = k < 1 ? 1 : k;
    if (o->policy_loss == RLP_LOSS_KL_COV) {
        qsort(items, m, sizeof *items, cmp_cov_desc); /* the k largest covariances */
    } else if (m > k) {
        /* a uniformly drawn k of the candidates (verl: torch.randperm) */
        uint64_t st = seed;
        for (size_t j = 0; j < k; j++) {
            size_t r = j + (size_t)(splitmix64(&st) % (uint64_t)(m - j));
            cov_item tmp = items[j];
            items[j] = items[r];
            items[r] = tmp;
        }
    }
    for (size_t j = 0; j < m && j < k; j++)
        pick[items[j].t] = 1;
    free(items);
}

static double agg_weight(int agg, const rlpi_rl_norm *nm, size_t seq_len)
{
    switch (agg) {
    case RLP_AGG_TOKEN_MEAN:
        return 1.0 / nm->step_tokens;
    case RLP_AGG_SEQ_MEAN_TOKEN_SUM:
        return 1.0 / nm->step_seqs;
    case RLP_AGG_SEQ_MEAN_TOKEN_MEAN:
        return 1.0 / (nm->step_seqs * (double)seq_len);
    default:
        return 1.0 / (nm->step_seqs * nm->norm_c);
    }
}

/* SAPO's soft gate (Gao et al. 2025, eq. 6): f(ρ) = σ(τ(ρ − 1))·4/τ; *df = f′(ρ) = 4σ(1 − σ). */
static double sapo_gate(double rho, double tau, double *df)
{
    double sg = 1.0 / (1.0 + exp(-tau * (rho - 1.0)));
    *df = 4.0 * sg * (1.0 - sg);
    return sg * 4.0 / tau;
}

int rlpi_rl_loss(const rlp_rl_options *o, const rlpi_rl_seqs *s, const float *adv, const size_t *seq_index,
                 size_t n, const size_t *mb_start, const float *logp, const float *entropy,
                 const rlpi_rl_norm *norm, float *dlogp, float *dentropy, rlpi_rl_acc *acc)
{
    const bool kl_loss = o->kl_estimator && !o->kl_in_reward && o->kl_coef > 0;
    if (kl_loss && !s->logp_ref)
        return rlpi_error_set(RLP_E_INVALID_ARG, "RL loss: a KL term needs reference logprobs");
    const bool cov = o->policy_loss == RLP_LOSS_CLIP_COV || o->policy_loss == RLP_LOSS_KL_COV;
    if (cov && !norm->cov_pick)
        return rlpi_error_set(RLP_E_INTERNAL, "RL loss: %s needs its covariance selection",
                              o->policy_loss == RLP_LOSS_CLIP_COV ? "clip_cov" : "kl_cov");
    /* SAPO's policy term is seq-mean-token-mean whatever loss_agg says (its paper's objective, verl's
     * compute_policy_loss_sapo); the KL and entropy terms keep loss_agg */
    const int pg_agg = o->policy_loss == RLP_LOSS_SAPO ? RLP_AGG_SEQ_MEAN_TOKEN_MEAN : o->loss_agg;
    for (size_t m = 0; m < n; m++) {
        size_t i = seq_index[m];
        size_t g0 = s->tok_start[i], len = s->tok_start[i + 1] - g0, l0 = mb_start[m];
        if (mb_start[m + 1] - l0 != len)
            return rlpi_error_set(RLP_E_INTERNAL, "RL loss: sequence %zu has %zu tokens here and %zu in the step", i,
                                  mb_start[m + 1] - l0, len);
        /* the aggregation's length and GSPO's mean are over the tokens that train */
        size_t mlen = 0;
        for (size_t t = 0; t < len; t++)
            mlen += (size_t)rlpi_rl_on(s, g0 + t);
        if (mlen < len)
            for (size_t t = 0; t < len; t++)
                if (!rlpi_rl_on(s, g0 + t)) {
                    /* an observation or rejected token: context for the forward pass, no gradient */
                    dlogp[l0 + t] = 0.0f;
                    if (dentropy)
                        dentropy[l0 + t] = 0.0f;
                }
        if (mlen == 0)
            continue;
        double a_w = agg_weight(o->loss_agg, norm, mlen), a_pg = agg_weight(pg_agg, norm, mlen);
        /* GSPO, GMPO: one value for the whole sequence, counted once per token with that token's IS weight */
        double seq_ratio = 0, seq_value = 0, seq_drho = 0, seq_abar = 0, seq_wsum = 0;
        int seq_lo = 0, seq_hi = 0;
        size_t first = g0;
        while (!rlpi_rl_on(s, first))
            first++;
        const double seq_is = seq_is_weight(o, s, norm, i); /* the rollout IS weight of a SEQUENCE level, or 1 */
        if (o->policy_loss == RLP_LOSS_GSPO || o->policy_loss == RLP_LOSS_GMPO)
            for (size_t t = 0; t < len; t++)
                if (rlpi_rl_on(s, g0 + t))
                    seq_wsum += token_is_weight(o, s, norm, i, g0 + t, seq_is);
        if (o->policy_loss == RLP_LOSS_GSPO) {
            double mlr = 0;
            for (size_t t = 0; t < len; t++)
                if (rlpi_rl_on(s, g0 + t))
                    mlr += (double)logp[l0 + t] - (double)s->logp_old[g0 + t];
            seq_ratio = exp(mlr / (double)mlen);
            seq_value = ppo_clip(o, seq_ratio, adv[first], &seq_drho, &seq_lo, &seq_hi);
        } else if (o->policy_loss == RLP_LOSS_GMPO) {
            /* rᵢ = exp(mean clipped log-ratio), Âᵢ = mean advantage; value −Âᵢ·rᵢ */
            double msum = 0, asum = 0;
            for (size_t t = 0; t < len; t++)
                if (rlpi_rl_on(s, g0 + t)) {
                    double x = (double)logp[l0 + t] - (double)s->logp_old[g0 + t], A = adv[g0 + t];
                    msum += gmpo_term(o, x, A, NULL);
                    asum += A;
                }
            seq_ratio = exp(msum / (double)mlen);
            seq_abar = asum / (double)mlen;
            seq_value = -seq_abar * seq_ratio;
        }
        for (size_t t = 0; t < len; t++) {
            size_t g = g0 + t, l = l0 + t;
            if (!rlpi_rl_on(s, g))
                continue;
            double lp = logp[l], A = adv[g], old = s->logp_old[g];
            double value, dv_dlp, rho, w = 1.0;
            int lo = 0, hi = 0;
            if (o->policy_loss == RLP_LOSS_GSPO) {
                rho = seq_ratio;
                value = seq_value;
                /* ∂sᵢ/∂logp_t = sᵢ/|yᵢ| (|yᵢ| its model tokens); every model token of i carries the same value */
                dv_dlp = seq_drho * seq_ratio / (double)mlen;
                lo = seq_lo;
                hi = seq_hi;
            } else if (o->policy_loss == RLP_LOSS_GMPO) {
                double x = lp - old, grad;
                (void)gmpo_term(o, x, A, &grad);
                rho = seq_ratio;
                value = seq_value;
                /* ∂rᵢ/∂logp_t = rᵢ·∂mₜ/∂xₜ/|yᵢ| */
                dv_dlp = -seq_abar * seq_ratio * grad / (double)mlen;
                lo = A < 0 && x < -(double)o->clip_low;
                hi = A > 0 && x > (double)o->clip_high;
            } else if (o->policy_loss == RLP_LOSS_GPG) {
                rho = exp(lp - old); /* reported only */
                value = -A * lp;
                dv_dlp = -A;
                w = tis_weight(o, s, g, old);
            } else if (o->policy_loss == RLP_LOSS_CISPO) {
                /* the weight clipped under a stop-gradient: the gradient is −clip(ρ)·Â, never zero */
                double x = lp - old;
                x = x < -20.0 ? -20.0 : x > 20.0 ? 20.0 : x;
                rho = exp(x);
                double lo_b = 1.0 - (double)o->clip_low, hi_b = 1.0 + (double)o->clip_high;
                double c = rho < lo_b ? lo_b : rho > hi_b ? hi_b : rho;
                lo = rho < lo_b;
                hi = rho > hi_b;
                value = -c * A * lp;
                dv_dlp = -c * A;
                w = tis_weight(o, s, g, old);
            } else if (o->policy_loss == RLP_LOSS_SAPO) {
                /* a soft gate in place of the clip; the clamp (verl's) passes no gradient past ±20 */
                double x = lp - old, xc = x < -20.0 ? -20.0 : x > 20.0 ? 20.0 : x, df;
                rho = exp(xc);
                double tau = A > 0 ? (double)o->sapo_tau_pos : (double)o->sapo_tau_neg;
                value = -sapo_gate(rho, tau, &df) * A;
                dv_dlp = xc == x ? -A * df * rho : 0.0;
                w = tis_weight(o, s, g, old);
            } else if (o->policy_loss == RLP_LOSS_KL_COV) {
                /* −ρÂ, no clip; the chosen tokens also pay ppo_kl_coef·|log-ratio| */
                double x = lp - old;
                rho = exp(x);
                value = -rho * A;
                dv_dlp = -A * rho;
                if (norm->cov_pick[g]) {
                    value += (double)o->ppo_kl_coef * fabs(x);
                    dv_dlp += (double)o->ppo_kl_coef * (x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0);
                    hi = 1; /* the clip statistics count the penalised tokens (KL-Cov has no clip) */
                }
                w = tis_weight(o, s, g, old);
            } else {
                rho = exp(lp - old);
                double drho;
                if (o->policy_loss == RLP_LOSS_CLIP_COV) {
                    rlp_rl_options plain = *o; /* Clip-Cov clips as PPO, without the dual clip */
                    plain.dual_clip = 0;
                    value = ppo_clip(&plain, rho, A, &drho, &lo, &hi);
                    lo = 0; /* the clip statistics count the detached tokens, as verl's pg_clipfrac does */
                    hi = norm->cov_pick[g] != 0;
                    if (norm->cov_pick[g]) { /* detached: no loss, no gradient */
                        value = 0.0;
                        drho = 0.0;
                    }
                } else {
                    value = ppo_clip(o, rho, A, &drho, &lo, &hi);
                }
                dv_dlp = drho * rho;
                if (o->policy_loss == RLP_LOSS_DECOUPLED_PPO) {
                    w = exp(old - (double)s->logp_behav[g]);
                    if (o->behav_cap > 0 && w > o->behav_cap)
                        w = o->behav_mask ? 0.0 : (double)o->behav_cap;
                } else {
                    w = tis_weight(o, s, g, old);
                }
            }
            w *= token_is_weight(o, s, norm, i, g, seq_is);
            double pg = w * value, dpg = w * dv_dlp;
            double kl = 0, dkl = 0;
            if (kl_loss) {
                double x = lp - (double)s->logp_ref[g];
                kl = kl_value(o->kl_estimator, x);
                dkl = kl_grad(o->kl_estimator, x);
            }
            double H = entropy ? entropy[l] : 0.0;
            double rest = (double)o->kl_coef * (kl_loss ? kl : 0.0) - (double)o->entropy_coef * H;
            acc->loss += a_pg * pg + a_w * rest;
            acc->pg += a_pg * pg;
            acc->kl += kl;
            acc->ent += H;
            acc->n_tokens += 1;
            acc->clip_lo += lo;
            acc->clip_hi += hi;
            acc->ratio_sum += rho;
            acc->ratio_max = rho > acc->ratio_max ? rho : acc->ratio_max;
            acc->w_sum += w;
            acc->w_max = w > acc->w_max ? w : acc->w_max;
            double dkl_term = a_w * (double)o->kl_coef * (kl_loss ? dkl : 0.0);
            if (o->policy_loss == RLP_LOSS_GSPO || o->policy_loss == RLP_LOSS_GMPO) {
                /* the sequence's value appears once per token u, weighted w_u: Σ_u a_pg·w_u·∂value/∂logp_t */
                dlogp[l] = (float)(a_pg * seq_wsum * dv_dlp + dkl_term);
            } else {
                dlogp[l] = (float)(a_pg * dpg + dkl_term);
            }
            if (dentropy)
                dentropy[l] = (float)(-a_w * (double)o->entropy_coef);
        }
    }
    return RLP_OK;
}
