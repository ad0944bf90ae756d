/* The critic (value model) of PPO at the model layer: a policy whose head
 * is a one-output *ForTokenClassification score head, created from a
 * language-model policy with the head zeroed, its values V(s_t) at the
 * completion tokens, and the clipped value loss's optimizer step. It reuses
 * policy.c's packing, micro-batch cuts and optimizer step; what the values
 * are for (GAE, advantages) lives in lib/algo, not here. */
#include "model/policy.h"

#include "core/error.h"
#include "core/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int rlpi_policy_create_critic(rlp_policy **out, const rlp_policy *policy, const rlp_optimizer_options *opt)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    rlpi_model_config cfg = *rlpi_transformer_config(policy->tf);
    /* the merged model (LoRA folded in): the critic trains every weight */
    rlpi_weights w;
    int rc = rlpi_transformer_export(policy->tf, &w);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    /* the head the transformer builds for score_labels > 0; lm_head.weight
     * (or a previous score head) in `w` is simply not read. Zero-filled by
     * rlpi_weights_add, so V ≡ 0 at the start: with a random head the
     * first advantages would be noise the policy trains on. A source that
     * is already a score model has these names: drop its head first. */
    rlpi_weights hw;
    rlpi_weights_init(&hw);
    for (size_t i = 0; i < w.n && rc == RLP_OK; i++) {
        const rlpi_tensor *t = &w.tensors[i];
        if (!strcmp(t->name, "score.weight") || !strcmp(t->name, "score.bias") || !strcmp(t->name, "lm_head.weight"))
            continue;
        rlpi_tensor *c;
        if (t->alias_of >= 0)
            rc = rlpi_weights_add_alias(&hw, t->name, w.tensors[t->alias_of].name);
        else if ((rc = rlpi_weights_add(&hw, t->name, t->n_dims, t->shape, &c)) == RLP_OK) {
            /* move the data, not copy it: the zeroed block handed back is
             * freed untouched (a model's size in pages never faulted) */
            float *d = c->data;
            c->data = t->data;
            w.tensors[i].data = d;
        }
    }
    rlpi_weights_free(&w);
    int64_t wshape[2] = {1, cfg.dim}, bshape[1] = {1};
    rlpi_tensor *t;
    if (rc == RLP_OK && (rc = rlpi_weights_add(&hw, "score.weight", 2, wshape, &t)) == RLP_OK)
        rc = rlpi_weights_add(&hw, "score.bias", 1, bshape, &t);
    if (rc != RLP_OK) {
        rlpi_weights_free(&hw);
        return rlpi_error_wrap("%s", __func__);
    }
    cfg.score_labels = 1;
    cfg.score_bias = true;
    cfg.score_per_token = true;
    cfg.tie_embeddings = false;
    rlp_policy_options o = policy->opts;
    o.trainable = 1;
    rlp_policy *c;
    rc = rlpi_policy_create(&c, policy->ctx, &cfg, &hw, &o);
    rlpi_weights_free(&hw);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    if (opt)
        rc = rlp_policy_set_optimizer(c, opt);
    else
        c->opt.cfg = policy->opt.cfg;
    if (rc) {
        rlp_policy_free(c);
        return rlpi_error_wrap("%s", __func__);
    }
    *out = c;
    return RLP_OK;
}

/* A critic has exactly one output per token: a multi-label head (a PRM's
 * classes) or an LM head has no single V to regress. */
static int check_critic(const rlp_policy *critic, const char *fn)
{
    int32_t L = rlpi_transformer_config(critic->tf)->score_labels;
    if (L != 1)
        return rlpi_error_set(RLP_E_STATE,
                              "%s: the critic needs a score head with one output (an HF *ForTokenClassification "
                              "with num_labels 1, or rlpi_policy_create_critic); this model has %s",
                              fn, L < 1 ? "a language-model head" : "a multi-label score head");
    return RLP_OK;
}

static size_t completion_tokens(const rlp_sequence *s)
{
    return s->n_tokens - s->n_prompt; /* n_prompt <= n_tokens: checked */
}

/* The sequences are valid and each has a prompt (V(s_0) is read at the
 * last prompt token: without one there is no state before the first
 * completion token). *total = Σ completion tokens. */
static int check_value_seqs(const rlp_policy *critic, const rlp_sequence *seqs, size_t n, size_t *total, const char *fn)
{
    int rc = check_critic(critic, fn);
    if (rc == RLP_OK)
        rc = rlpi_policy_check_seqs(critic, seqs, n, fn);
    if (rc)
        return rc;
    *total = 0;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i].n_prompt < 1)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "%s: sequence %zu has n_prompt 0; a value is read at the token before each "
                                  "completion token, so at least one prompt token is needed",
                                  fn, i);
        *total += completion_tokens(&seqs[i]);
    }
    return RLP_OK;
}

/* The packed rows of the value positions of seqs[begin, end) (pack k):
 * completion token t of a sequence is valued at its position
 * n_prompt - 1 + t. Returns the count. */
static int64_t value_rows(const rlpi_pack *k, const rlp_sequence *seqs, size_t begin, size_t end, int32_t *rows)
{
    int64_t m = 0;
    for (size_t i = begin; i < end; i++) {
        const rlp_sequence *s = &seqs[i];
        int64_t base = k->seq_start[i - begin] + s->n_prompt - 1;
        for (size_t t = 0; t < completion_tokens(s); t++)
            rows[m++] = (int32_t)(base + (int64_t)t);
    }
    return m;
}

int rlpi_policy_score_packed(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, bool value_rows_only,
                             float *out)
{
    size_t L = (size_t)rlpi_transformer_config(policy->tf)->score_labels, written = 0;
    int rc = RLP_OK;
    for (size_t b = 0; b < n_seqs;) {
        size_t e = rlpi_pack_next_cut(seqs, n_seqs, b, RLPI_LOGPROB_PACK_TOKENS);
        rlpi_pack k;
        if ((rc = rlpi_pack_build(&k, seqs, b, e)) != RLP_OK)
            return rc;
        int32_t *rows = malloc((size_t)k.b.n_tokens * sizeof *rows);
        if (!rows) {
            rlpi_pack_free(&k);
            return rlpi_error_set(RLP_E_NOMEM, "policy score: out of memory");
        }
        int64_t m = k.b.n_tokens;
        if (value_rows_only)
            m = value_rows(&k, seqs, b, e, rows);
        else
            for (int64_t r = 0; r < m; r++)
                rows[r] = (int32_t)r;
        /* a pack of prompts alone has no value to compute */
        if (m > 0 && (rc = rlpi_transformer_score(policy->tf, &k.b, rows, m, out + written, false)) == RLP_OK)
            written += (size_t)m * L;
        free(rows);
        rlpi_pack_free(&k);
        if (rc)
            return rc;
        b = e;
    }
    return RLP_OK;
}

int rlpi_policy_values(rlp_policy *critic, const rlp_sequence *seqs, size_t n_seqs, float *values)
{
    RLPI_CHECK_ARG(critic, "critic is NULL");
    RLPI_CHECK_ARG(values, "values is NULL");
    size_t total;
    int rc = check_value_seqs(critic, seqs, n_seqs, &total, "critic values");
    if (rc)
        return rc; /* the message names the call already */
    rc = rlpi_policy_score_packed(critic, seqs, n_seqs, true, values);
    return rc ? rlpi_error_wrap("critic values") : RLP_OK;
}

/* One token's term of the loss and ∂(½·max(...))/∂V: the branch whose term
 * is larger (ties: the unclipped one, as torch.max's subgradient would be
 * taken by hand); the clipped branch passes a gradient only inside the
 * window (torch.clamp: bounds included). */
static double value_term(double v, double r, double vold, double c, double *dv, bool *clipped)
{
    double u = (v - r) * (v - r);
    *dv = v - r;
    *clipped = false;
    if (c > 0) {
        double lo = vold - c, hi = vold + c, vc = v < lo ? lo : v > hi ? hi : v;
        double q = (vc - r) * (vc - r);
        if (q > u) {
            *clipped = true;
            *dv = v >= lo && v <= hi ? vc - r : 0.0;
            return 0.5 * q;
        }
    }
    return 0.5 * u;
}

static int check_value_batch(const rlp_policy *critic, const rlpi_value_batch *b, float clip, size_t *total,
                             uint64_t *n_on, const char *fn)
{
    RLPI_CHECK_ARG(critic, "critic is NULL");
    RLPI_CHECK_ARG(b, "batch is NULL");
    if (isnan(clip))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: clip is NaN (<= 0 turns clipping off)", fn);
    int rc = check_critic(critic, fn);
    if (rc)
        return rc;
    if (!critic->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the critic is frozen (no gradients)", fn);
    if ((rc = check_value_seqs(critic, b->seqs, b->n_seqs, total, fn)) != RLP_OK)
        return rc;
    if (*total > 0 && !b->returns)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: returns is NULL", fn);
    if (*total > 0 && clip > 0 && !b->old_values)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: old_values is NULL with clip %g", fn, (double)clip);
    *n_on = 0;
    for (size_t j = 0; j < *total; j++) {
        if (b->on && b->on[j] > 1)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: on[%zu] is %u, not 0 or 1", fn, j, b->on[j]);
        if (b->on && !b->on[j])
            continue;
        if (!isfinite(b->returns[j]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: returns[%zu] is %g", fn, j, (double)b->returns[j]);
        if (clip > 0 && !isfinite(b->old_values[j]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: old_values[%zu] is %g", fn, j, (double)b->old_values[j]);
        (*n_on)++;
    }
    if (*n_on == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: no trained token (every completion token is off, or none exists)",
                              fn);
    return RLP_OK;
}

/* The forward/backward passes of one micro-batch seqs[begin, end) whose
 * first completion token is `first` in the batch's arrays; adds to
 * sums[] (loss, clipped tokens, Σ V) and to the gradients. */
static int value_micro_batch(rlp_policy *critic, const rlpi_value_batch *b, size_t begin, size_t end, size_t first,
                             double c, double inv_n, double sums[3])
{
    rlpi_pack k;
    int rc = rlpi_pack_build(&k, b->seqs, begin, end);
    if (rc)
        return rc;
    size_t nt = (size_t)k.b.n_tokens;
    int32_t *rows = malloc(nt * sizeof *rows);
    size_t *idx = malloc(nt * sizeof *idx); /* row r → index into returns/old_values */
    float *v = malloc(nt * sizeof *v), *dv = malloc(nt * sizeof *dv);
    if (!rows || !idx || !v || !dv) {
        rc = rlpi_error_set(RLP_E_NOMEM, "value step: out of memory");
        goto done;
    }
    int64_t m = 0;
    size_t j = first;
    for (size_t i = begin; i < end; i++) {
        const rlp_sequence *s = &b->seqs[i];
        int64_t base = k.seq_start[i - begin] + s->n_prompt - 1;
        for (size_t t = 0; t < completion_tokens(s); t++, j++)
            if (!b->on || b->on[j]) {
                idx[m] = j;
                rows[m++] = (int32_t)(base + (int64_t)t);
            }
    }
    if (m == 0) /* nothing trains here: no pass at all */
        goto done;
    if ((rc = rlpi_transformer_score(critic->tf, &k.b, rows, m, v, true)) != RLP_OK)
        goto done;
    for (int64_t r = 0; r < m; r++) {
        size_t q = idx[r];
        double d;
        bool clipped;
        double vold = c > 0 ? b->old_values[q] : 0.0;
        sums[0] += value_term(v[r], b->returns[q], vold, c, &d, &clipped) * inv_n;
        sums[1] += clipped;
        sums[2] += v[r];
        dv[r] = (float)(d * inv_n);
    }
    rc = rlpi_transformer_score_backward(critic->tf, dv);
done:
    free(rows);
    free(idx);
    free(v);
    free(dv);
    rlpi_pack_free(&k);
    return rc;
}

int rlpi_policy_value_grads(rlp_policy *critic, const rlpi_value_batch *b, float clip, uint32_t micro_batch_tokens,
                            rlpi_value_stats *st)
{
    size_t total = 0;
    uint64_t n_on = 0;
    int rc = check_value_batch(critic, b, clip, &total, &n_on, __func__);
    if (rc)
        return rc;
    if ((rc = rlpi_transformer_zero_grad(critic->tf)) != RLP_OK)
        return rc;
    double sums[3] = {0, 0, 0}, c = clip > 0 ? (double)clip : 0.0, inv_n = 1.0 / (double)n_on;
    size_t first = 0;
    for (size_t i = 0; i < b->n_seqs && rc == RLP_OK;) {
        size_t e = rlpi_pack_next_cut(b->seqs, b->n_seqs, i, micro_batch_tokens);
        rc = value_micro_batch(critic, b, i, e, first, c, inv_n, sums);
        for (; i < e; i++)
            first += completion_tokens(&b->seqs[i]);
    }
    if (rc != RLP_OK) {
        rlpi_transformer_zero_grad(critic->tf); /* nothing half-accumulated stays */
        return rlpi_error_wrap("%s", __func__);
    }
    if (st)
        *st = (rlpi_value_stats){.loss = sums[0],
                                 .clipfrac = sums[1] / (double)n_on,
                                 .vpred_mean = sums[2] / (double)n_on,
                                 .n_tokens = n_on};
    return RLP_OK;
}

int rlpi_policy_value_step(rlp_policy *critic, const rlpi_value_batch *b, float clip, uint32_t micro_batch_tokens,
                           rlpi_value_stats *st)
{
    rlpi_value_stats s;
    int rc = rlpi_policy_value_grads(critic, b, clip, micro_batch_tokens, &s);
    if (rc)
        return rc;
    bool skipped = false;
    float lr;
    rc = rlpi_policy_optimizer_step(critic, &s.grad_norm, &lr, &skipped);
    /* applied or not, the gradients are dead until the next zero_grad */
    rlpi_transformer_release_grads(critic->tf);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    if (skipped)
        rlpi_log(&critic->ctx->log, RLP_LOG_WARN, "value step skipped: gradient norm is %g", s.grad_norm);
    else {
        critic->weights_gen++;
        critic->version++;
    }
    s.skipped = skipped;
    if (st)
        *st = s;
    return RLP_OK;
}
