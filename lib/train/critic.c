/* PPO with a critic in the trainer (rlp_trainer_options::critic_path,
 * rl.advantage = RLP_ADV_GAE): the critic's values of a step's tokens, the
 * RL step on GAE advantages (rl_step.c returns the returns), then the
 * critic's clipped value-loss updates, rl.ppo_epochs × rl.mini_batches of
 * them over the same contiguous mini-batches as the policy's (verl's
 * critic worker, update_critic after update_actor's inputs are fixed; the
 * critic's values are taken before either update, as verl's
 * compute_values). Checkpoints keep the critic in <dir>/critic. */
#include "trainer_impl.h"

#include "algo/rl_step.h"
#include "core/batch.h"
#include "core/clock.h"
#include "core/error.h"
#include "model/hf_dir.h"
#include "model/policy.h"
#include "model/transformer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool trainable_item(const rlpi_traj *it)
{
    return it->valid && it->n_prompt > 0 && it->n_tokens > 0;
}

int rlpi_train_critic_create(rlp_trainer *t)
{
    const char *path = t->o.critic_path;
    if (!path)
        return RLP_OK;
    if (t->world > 1)
        return rlpi_error_set(RLP_E_UNSUPPORTED, "rlp_trainer_create: PPO with a critic runs on one rank here");
    int rc;
    if (!strcmp(path, "policy")) {
        rc = rlpi_policy_create_critic(&t->critic, t->policy, NULL);
    } else {
        rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
        rc = rlp_policy_load(&t->critic, t->policy->ctx, path, &po);
        uint32_t labels = 0;
        if (!rc && (rlp_policy_score_labels(&labels, t->critic) || labels != 1 ||
                    !rlpi_transformer_config(t->critic->tf)->score_per_token))
            rc = rlpi_error_set(RLP_E_INVALID_ARG,
                                "critic_path '%s' is not a value model: an HF *ForTokenClassification folder "
                                "with one output (or \"policy\")",
                                path);
    }
    int32_t cv = rc ? 0 : rlpi_transformer_config(t->critic->tf)->vocab_size;
    int32_t pv = rlpi_transformer_config(t->policy->tf)->vocab_size;
    if (!rc && cv != pv) /* it reads the policy's token ids */
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "critic_path '%s' has a vocabulary of %d tokens, the policy %d: a critic reads the "
                            "policy's token ids, so it must share its vocabulary",
                            path, cv, pv);
    if (!rc) { /* the policy's optimizer settings, at the critic's own learning rate */
        t->critic->opt.cfg = t->policy->opt.cfg;
        if (t->o.critic_lr > 0)
            t->critic->opt.cfg.lr = t->o.critic_lr;
    }
    if (rc)
        return rlpi_error_wrap("rlp_trainer_create: critic");
    return RLP_OK;
}

/* Per-item completion-token layout over the whole batch. */
static int item_layout(const rlp_batch *b, size_t **start)
{
    size_t *s = malloc((b->n + 1) * sizeof *s);
    if (!s)
        return rlpi_error_set(RLP_E_NOMEM, "critic: out of memory");
    s[0] = 0;
    for (size_t i = 0; i < b->n; i++)
        s[i + 1] = s[i] + b->items[i].n_tokens;
    *start = s;
    return RLP_OK;
}

int rlpi_train_critic_step(rlp_trainer *t, const rlp_batch *b, rlp_step_record *rec, rlpi_rl_mismatch *mm)
{
    double c0 = rlpi_now_s();
    size_t n = b->n, *start = NULL, m = 0;
    int rc = item_layout(b, &start);
    if (rc)
        return rc;
    size_t n_tok = start[n];
    float *vals = calloc(n_tok ? n_tok : 1, sizeof *vals), *rets = calloc(n_tok ? n_tok : 1, sizeof *rets);
    float *vflat = NULL;
    uint8_t *used = calloc(n ? n : 1, 1), *on = NULL;
    rlp_sequence *seqs = calloc(n ? n : 1, sizeof *seqs);
    int32_t **owned = calloc(n ? n : 1, sizeof *owned);
    size_t *which = calloc(n ? n : 1, sizeof *which);
    if (!vals || !rets || !used || !seqs || !owned || !which)
        rc = rlpi_error_set(RLP_E_NOMEM, "critic: out of memory");
    /* 1. V(s_t) of every completion token of the items a step can use */
    size_t vt = 0;
    for (size_t i = 0; !rc && i < n; i++)
        if (trainable_item(&b->items[i]) && !(rc = rlpi_traj_sequence(&b->items[i], &seqs[m], &owned[m]))) {
            which[m++] = i;
            vt += b->items[i].n_tokens;
        }
    if (!rc && m && !(vflat = malloc(vt * sizeof *vflat)))
        rc = rlpi_error_set(RLP_E_NOMEM, "critic: out of memory");
    if (!rc && m)
        rc = rlpi_policy_values(t->critic, seqs, m, vflat);
    for (size_t k = 0, at = 0; !rc && k < m; k++) {
        const rlpi_traj *it = &b->items[which[k]];
        memcpy(vals + start[which[k]], vflat + at, it->n_tokens * sizeof *vals);
        at += it->n_tokens;
    }
    double c1 = rlpi_now_s();
    /* 2. the policy's step on GAE advantages; the returns come back */
    rlpi_rl_critic_io io = {.item_start = start, .values = vals, .lambda = t->o.gae_lambda, .returns = rets,
                            .item_used = used, .advantages_only = t->steps_done < t->o.critic_warmup};
    if (!rc && (rc = rlpi_policy_train_rl_critic(t->policy, b, t->o.ref, &t->o.rl, &rec->rl, mm, &io)))
        rlpi_error_wrap("RL step");
    double c2 = rlpi_now_s();
    /* 3. the critic on the returns, over the items the step used, in the
     * same contiguous mini-batches; tokens that trained the policy (model
     * tokens) train the critic */
    size_t u = 0, ut = 0;
    for (size_t k = 0; !rc && k < m; k++)
        if (used[which[k]]) {
            seqs[u] = seqs[k];
            int32_t *o = owned[u];
            owned[u] = owned[k];
            owned[k] = o;
            which[u++] = which[k];
            ut += b->items[which[k]].n_tokens;
        }
    float *ret_u = NULL, *val_u = NULL;
    size_t *ustart = NULL;
    if (!rc && u) {
        ret_u = malloc(ut * sizeof *ret_u);
        val_u = malloc(ut * sizeof *val_u);
        on = malloc(ut);
        ustart = malloc((u + 1) * sizeof *ustart);
        if (!ret_u || !val_u || !on || !ustart)
            rc = rlpi_error_set(RLP_E_NOMEM, "critic: out of memory");
    }
    double vsum = 0, rsum = 0, rsq = 0, dsum = 0, dsq = 0, cnt = 0;
    for (size_t k = 0, at = 0; !rc && k < u; k++) {
        const rlpi_traj *it = &b->items[which[k]];
        ustart[k] = at;
        memcpy(ret_u + at, rets + start[which[k]], it->n_tokens * sizeof *ret_u);
        memcpy(val_u + at, vals + start[which[k]], it->n_tokens * sizeof *val_u);
        for (size_t j = 0; j < it->n_tokens; j++) {
            on[at + j] = !it->loss_mask || it->loss_mask[j];
            if (on[at + j]) {
                double v = val_u[at + j], r = ret_u[at + j];
                vsum += v, rsum += r, rsq += r * r, dsum += r - v, dsq += (r - v) * (r - v), cnt++;
            }
        }
        at += it->n_tokens;
    }
    if (ustart)
        ustart[u] = ut;
    if (!rc && cnt > 0) {
        rec->values_mean = vsum / cnt;
        rec->returns_mean = rsum / cnt;
        double var_r = rsq / cnt - (rsum / cnt) * (rsum / cnt), var_d = dsq / cnt - (dsum / cnt) * (dsum / cnt);
        rec->value_explained_var = var_r > 1e-12 ? 1.0 - var_d / var_r : NAN;
    }
    const rlp_rl_options *o = &t->o.rl;
    uint32_t mbs = o->mini_batches < u ? o->mini_batches : (uint32_t)(u ? u : 1), steps = 0;
    for (uint32_t ep = 0; !rc && u && ep < o->ppo_epochs; ep++)
        for (uint32_t mb = 0; !rc && mb < mbs; mb++) {
            size_t lo = u * mb / mbs, hi = u * (mb + 1) / mbs;
            if (hi == lo)
                continue;
            size_t off = ustart[lo];
            rlpi_value_batch vb = {.seqs = seqs + lo, .n_seqs = hi - lo, .returns = ret_u + off,
                                   .old_values = val_u + off, .on = on + off};
            rlpi_value_stats vs = {0};
            if ((rc = rlpi_policy_value_step(t->critic, &vb, t->o.value_clip, o->micro_batch_tokens, &vs))) {
                rlpi_error_wrap("critic update");
                break;
            }
            if (vs.n_tokens == 0)
                continue;
            rec->value_loss += vs.loss;
            rec->value_clipfrac += vs.clipfrac;
            rec->critic_grad_norm = vs.grad_norm;
            steps++;
        }
    if (steps) {
        rec->value_loss /= steps;
        rec->value_clipfrac /= steps;
    }
    rec->critic_seconds = (c1 - c0) + (rlpi_now_s() - c2);
    for (size_t k = 0; owned && k < n; k++)
        free(owned[k]);
    free(owned);
    free(seqs);
    free(which);
    free(start);
    free(vals);
    free(rets);
    free(vflat);
    free(used);
    free(on);
    free(ret_u);
    free(val_u);
    free(ustart);
    return rc;
}

int rlpi_train_critic_save(rlp_trainer *t, const char *dir, int dtype)
{
    if (!t->critic)
        return RLP_OK;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/critic", dir);
    int rc = rlpi_policy_save_hf(t->critic, path, dtype, true);
    snprintf(path, sizeof path, "%s/critic/optimizer.safetensors", dir);
    if (!rc)
        rc = rlp_policy_save_optimizer(t->critic, path);
    return rc ? rlpi_error_wrap("critic") : RLP_OK;
}

int rlpi_train_critic_load(rlp_trainer *t, const char *dir)
{
    if (!t->critic)
        return RLP_OK;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/critic", dir);
    rlpi_model_config cfg;
    rlpi_weights w;
    int rc = rlpi_model_load_weights(path, &cfg, &w, NULL);
    if (rc)
        return rlpi_error_wrap("%s: the checkpoint's critic (a run without one cannot resume with one)", dir);
    rc = rlpi_transformer_set_weights(t->critic->tf, &w);
    rlpi_weights_free(&w);
    snprintf(path, sizeof path, "%s/critic/optimizer.safetensors", dir);
    if (!rc)
        rc = rlp_policy_load_optimizer(t->critic, path);
    return rc ? rlpi_error_wrap("%s: critic", dir) : RLP_OK;
}
