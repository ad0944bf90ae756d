/* The rlp_policy handle: a transformer plus its optimizer and version,
 * turning public sequences into packed batches, running the train step
 * (micro-batches → pluggable loss → backward → AdamW) and per-token
 * logprobs. Loading from files lives in model_load.c. */
#include "model/policy.h"

#include "model/lora.h"
#include "model/qbase.h"

#include "dist/comm.h"

#include "core/clock.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const rlp_policy_options default_policy_options = RLP_POLICY_OPTIONS_INIT;
static const rlp_optimizer_options default_optimizer_options = RLP_OPTIMIZER_OPTIONS_INIT;
static const rlp_train_options default_train_options = RLP_TRAIN_OPTIONS_INIT;

/* forward-only packs: RLPI_LOGPROB_PACK_TOKENS (policy.h) */
#define LOGPROB_PACK_TOKENS RLPI_LOGPROB_PACK_TOKENS

int rlp_policy_options_init(rlp_policy_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_POLICY_OPTIONS_VERSION, "unknown rlp_policy_options version");
    *opts = default_policy_options;
    opts->version = version;
    return RLP_OK;
}

int rlp_optimizer_options_init(rlp_optimizer_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_OPTIMIZER_OPTIONS_VERSION, "unknown rlp_optimizer_options version");
    *opts = default_optimizer_options;
    opts->version = version;
    return RLP_OK;
}

int rlp_train_options_init(rlp_train_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version >= 1 && version <= RLP_TRAIN_OPTIONS_VERSION, "unknown rlp_train_options version");
    *opts = default_train_options;
    opts->version = version;
    return RLP_OK;
}

static int to_optim_config(const rlp_optimizer_options *o, rlpi_optim_config *c)
{
    if (o->version < 1 || o->version > RLP_OPTIMIZER_OPTIONS_VERSION)
        return rlpi_error_set(RLP_E_INVALID_ARG, "optimizer options: unknown version %u", o->version);
    *c = (rlpi_optim_config){.lr = o->lr, .beta1 = o->beta1, .beta2 = o->beta2, .eps = o->eps,
                             .weight_decay = o->weight_decay, .max_grad_norm = o->max_grad_norm,
                             .schedule = o->schedule, .warmup_steps = o->warmup_steps,
                             .total_steps = o->total_steps, .min_lr_ratio = o->min_lr_ratio};
    return rlpi_optimizer_validate(c);
}

int rlpi_policy_create(rlp_policy **out, rlp_context *ctx, const rlpi_model_config *cfg, const rlpi_weights *w,
                       const rlp_policy_options *opts)
{
    if (!opts)
        opts = &default_policy_options;
    if (opts->version < 1 || opts->version > RLP_POLICY_OPTIONS_VERSION)
        return rlpi_error_set(RLP_E_INVALID_ARG, "policy options: unknown version %u", opts->version);
    rlp_policy *p = calloc(1, sizeof *p);
    if (!p)
        return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
    p->ctx = ctx;
    p->opts = *opts;
    p->trainable = opts->trainable != 0;
    rlpi_transformer_options to = {.head_chunk_tokens = opts->head_chunk_tokens,
                                   .activation_checkpointing = opts->activation_checkpointing != 0,
                                   .frozen = !p->trainable};
    int rc = rlpi_transformer_create(&p->tf, ctx->backend, cfg, w, &to);
    if (rc == RLP_OK)
        rc = to_optim_config(&default_optimizer_options, &p->opt.cfg);
    if (rc != RLP_OK) {
        rlp_policy_free(p);
        return rc;
    }
    *out = p;
    return RLP_OK;
}

void rlp_policy_free(rlp_policy *policy)
{
    if (!policy)
        return;
    rlpi_optimizer_release(&policy->opt);
    rlpi_transformer_free(policy->tf);
    rlp_tokenizer_free(policy->tokenizer);
    free(policy->tokenizer_path);
    free(policy);
}

int rlp_policy_clone(rlp_policy **out, const rlp_policy *policy, int trainable)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    return rlp_policy_clone_to(out, policy, policy->ctx, trainable);
}

int rlp_policy_clone_to(rlp_policy **out, const rlp_policy *policy, rlp_context *ctx, int trainable)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    rlpi_weights w;
    int rc = rlpi_transformer_export(policy->tf, &w);
    if (rc)
        return rc;
    rlp_policy_options o = policy->opts;
    o.trainable = trainable != 0;
    rlp_policy *c;
    rc = rlpi_policy_create(&c, ctx, rlpi_transformer_config(policy->tf), &w, &o);
    rlpi_weights_free(&w);
    if (rc)
        return rc;
    c->version = policy->version;
    c->opt.cfg = policy->opt.cfg;
    if (policy->tokenizer_path && (rc = rlpi_policy_attach_tokenizer(c, policy->tokenizer_path)) != RLP_OK) {
        rlp_policy_free(c);
        return rc;
    }
    *out = c;
    return RLP_OK;
}

int rlpi_policy_attach_tokenizer(rlp_policy *p, const char *path)
{
    rlp_tokenizer *t;
    int rc = rlp_tokenizer_load(&t, path);
    if (rc)
        return rc;
    char *copy = strdup(path);
    if (!copy) {
        rlp_tokenizer_free(t);
        return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
    }
    rlp_tokenizer_free(p->tokenizer);
    free(p->tokenizer_path);
    p->tokenizer = t;
    p->tokenizer_path = copy;
    return RLP_OK;
}

const rlp_tokenizer *rlp_policy_tokenizer(const rlp_policy *policy)
{
    RLPI_CHECK_ARG_NULL(policy, "policy is NULL");
    if (!policy->tokenizer)
        rlpi_error_set(RLP_E_NOT_FOUND, "%s: this model file has no tokenizer (load one with rlp_tokenizer_load)",
                       __func__);
    return policy->tokenizer;
}

int rlp_policy_version(uint64_t *out_version, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out_version, "out_version is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    *out_version = policy->version;
    return RLP_OK;
}

int rlp_policy_n_params(uint64_t *out_count, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out_count, "out_count is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    *out_count = rlpi_transformer_n_params(policy->tf);
    return RLP_OK;
}

int rlp_policy_memory(rlp_memory_stats *out, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    /* a quantized base: its blocks and the fp32 rest (window included) */
    uint64_t w = (uint64_t)rlpi_transformer_n_stored(policy->tf) * 4 + rlpi_transformer_base_block_bytes(policy->tf),
             t = (uint64_t)rlpi_transformer_n_trainable(policy->tf) * 4;
    bool lora = rlpi_transformer_lora_config(policy->tf) != NULL; /* weights: the base + the adapters */
    *out = (rlp_memory_stats){.version = 1,
                              .weights = w + (lora ? t : 0),
                              .gradients = policy->trainable ? t : 0,
                              .optimizer = policy->opt.m ? 2 * t : 0,
                              .activations = rlpi_transformer_activation_bytes(policy->tf)};
    return RLP_OK;
}

int rlp_policy_set_optimizer(rlp_policy *policy, const rlp_optimizer_options *opts)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(opts, "opts is NULL");
    rlpi_optim_config c;
    int rc = to_optim_config(opts, &c);
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    policy->opt.cfg = c;
    return RLP_OK;
}

/* ------------------------------------------------------------- packing */

static size_t scored_tokens(const rlp_sequence *s)
{
    uint32_t first = s->n_prompt > 1 ? s->n_prompt : 1;
    return s->n_tokens > first ? s->n_tokens - first : 0;
}

int rlpi_policy_check_seqs(const rlp_policy *p, const rlp_sequence *seqs, size_t n, const char *fn)
{
    if (!seqs || n == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: no sequences", fn);
    const rlpi_model_config *c = rlpi_transformer_config(p->tf);
    for (size_t i = 0; i < n; i++) {
        const rlp_sequence *s = &seqs[i];
        if (!s->tokens || s->n_tokens == 0)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %zu is empty", fn, i);
        if (s->n_tokens > (uint32_t)c->max_seq_len)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %zu has %u tokens, longer than the context of %d",
                                  fn, i, s->n_tokens, c->max_seq_len);
        if (s->n_prompt > s->n_tokens)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %zu has n_prompt %u > n_tokens %u", fn, i,
                                  s->n_prompt, s->n_tokens);
        for (uint32_t t = 0; t < s->n_tokens; t++)
            if (s->tokens[t] < 0 || s->tokens[t] >= c->vocab_size)
                return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %zu token %u has id %d outside the vocabulary of %d",
                                      fn, i, t, s->tokens[t], c->vocab_size);
    }
    return RLP_OK;
}

typedef rlpi_pack pack; /* policy.h */

void rlpi_pack_free(pack *k)
{
    free(k->seq_start);
    free(k->tokens);
    free(k->positions);
    free(k->targets);
    memset(k, 0, sizeof *k);
}

int rlpi_pack_build(pack *k, const rlp_sequence *seqs, size_t begin, size_t end)
{
    memset(k, 0, sizeof *k);
    size_t n = 0;
    for (size_t i = begin; i < end; i++)
        n += seqs[i].n_tokens;
    k->seq_start = malloc((end - begin + 1) * sizeof *k->seq_start);
    k->tokens = malloc(n * sizeof(int32_t));
    k->positions = malloc(n * sizeof(int32_t));
    k->targets = malloc(n * sizeof(int32_t));
    if (!k->seq_start || !k->tokens || !k->positions || !k->targets) {
        rlpi_pack_free(k);
        return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory packing %zu tokens", n);
    }
    size_t o = 0;
    for (size_t i = begin; i < end; i++) {
        const rlp_sequence *s = &seqs[i];
        uint32_t first = s->n_prompt > 1 ? s->n_prompt : 1;
        k->seq_start[i - begin] = (int64_t)o;
        for (uint32_t t = 0; t < s->n_tokens; t++) {
            k->tokens[o + t] = s->tokens[t];
            k->positions[o + t] = (int32_t)t;
            /* position t predicts token t+1 */
            k->targets[o + t] = t + 1 < s->n_tokens && t + 1 >= first ? s->tokens[t + 1] : -1;
        }
        k->n_scored += scored_tokens(s);
        o += s->n_tokens;
    }
    k->seq_start[end - begin] = (int64_t)o;
    k->b = (rlpi_packed_batch){.n_seq = (int64_t)(end - begin), .seq_start = k->seq_start, .n_tokens = (int64_t)o,
                               .tokens = k->tokens, .positions = k->positions, .targets = k->targets};
    return RLP_OK;
}

/* End of a greedy micro-batch starting at `begin`: whole sequences up to
 * `budget` tokens (at least one; budget 0 = all). */
static size_t greedy_cut(const rlp_sequence *seqs, size_t n, size_t begin, size_t budget)
{
    size_t end = begin, tokens = 0;
    while (end < n && (end == begin || budget == 0 || tokens + seqs[end].n_tokens <= budget))
        tokens += seqs[end++].n_tokens;
    return end;
}

/* End of the micro-batch starting at `begin`: whole sequences, packed
 * back to back (no padding), at most `budget` tokens (at least one
 * sequence), closed once it holds its share of what is left (the tokens
 * left over as many micro-batches as the greedy cut would make). The
 * greedy cut alone leaves a small last micro-batch (e.g. 1024 + 1024 +
 * 200): less work per pass over the weights, and the transformer's
 * buffers shrink for it and grow again (page faults) at the next step's
 * first micro-batch. */
size_t rlpi_pack_next_cut(const rlp_sequence *seqs, size_t n, size_t begin, size_t budget)
{
    size_t k = 0, left = 0;
    for (size_t b = begin; b < n; k++) {
        size_t e = greedy_cut(seqs, n, b, budget);
        for (size_t i = b; i < e; i++)
            left += seqs[i].n_tokens;
        b = e;
    }
    if (k <= 1)
        return n;
    size_t target = (left + k - 1) / k, end = begin, tokens = 0;
    while (end < n) {
        size_t len = seqs[end].n_tokens;
        /* take sequences until the share is reached, within the budget */
        if (end > begin && (tokens >= target || tokens + len > budget))
            break;
        tokens += len;
        end++;
    }
    return end;
}

/* Compacts per-token values of the targets of a pack (in packed order) to
 * the scored-token order of the public API, or expands back. */
static void compact(const pack *k, const float *packed, float *scored)
{
    size_t o = 0;
    for (int64_t i = 0; i < k->b.n_tokens; i++)
        if (k->targets[i] >= 0)
            scored[o++] = packed[i];
}

static void expand(const pack *k, const float *scored, float *packed)
{
    size_t o = 0;
    for (int64_t i = 0; i < k->b.n_tokens; i++)
        packed[i] = k->targets[i] >= 0 ? scored[o++] : 0.0f;
}

int rlp_policy_logprobs(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, float temperature,
                        float *logprobs, float *entropy, size_t cap, size_t *n_out)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(logprobs, "logprobs is NULL");
    if (!(temperature > 0) || !isfinite(temperature))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: temperature %g must be > 0", __func__, (double)temperature);
    int rc = rlpi_policy_check_seqs(policy, seqs, n_seqs, __func__);
    if (rc)
        return rc;
    size_t total = 0;
    for (size_t i = 0; i < n_seqs; i++)
        total += scored_tokens(&seqs[i]);
    if (total > cap) {
        if (n_out)
            *n_out = total;
        return rlpi_error_set(RLP_E_OVERFLOW, "%s: %zu scored tokens do not fit in %zu", __func__, total, cap);
    }
    size_t written = 0;
    for (size_t b = 0; b < n_seqs;) {
        size_t e = rlpi_pack_next_cut(seqs, n_seqs, b, LOGPROB_PACK_TOKENS);
        pack k;
        if ((rc = rlpi_pack_build(&k, seqs, b, e)) != RLP_OK)
            return rc;
        float *lp = malloc((size_t)k.b.n_tokens * 2 * sizeof(float));
        if (!lp) {
            rlpi_pack_free(&k);
            return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
        }
        rc = rlpi_transformer_forward(policy->tf, &k.b, 1.0f / temperature, lp, lp + k.b.n_tokens, false);
        if (rc == RLP_OK) {
            compact(&k, lp, logprobs + written);
            if (entropy)
                compact(&k, lp + k.b.n_tokens, entropy + written);
            written += k.n_scored;
        }
        free(lp);
        rlpi_pack_free(&k);
        if (rc)
            return rlpi_error_wrap("%s", __func__);
        b = e;
    }
    if (n_out)
        *n_out = written;
    return RLP_OK;
}

int rlp_policy_score_labels(uint32_t *out_labels, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out_labels, "out_labels is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    *out_labels = (uint32_t)rlpi_transformer_config(policy->tf)->score_labels;
    return RLP_OK;
}

int rlp_policy_score(const rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, float *out, size_t cap,
                     size_t *n_out)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(out, "out is NULL");
    const rlpi_model_config *c = rlpi_transformer_config(policy->tf);
    if (c->score_labels < 1)
        return rlpi_error_set(RLP_E_STATE,
                              "%s: the policy is a language model; a value or reward model (an HF "
                              "*ForSequenceClassification or *ForTokenClassification folder) has a score head",
                              __func__);
    int rc = rlpi_policy_check_seqs(policy, seqs, n_seqs, __func__);
    if (rc)
        return rc;
    size_t L = (size_t)c->score_labels, total = 0;
    for (size_t i = 0; i < n_seqs; i++)
        total += seqs[i].n_tokens;
    if (n_out)
        *n_out = total * L;
    if (total * L > cap)
        return rlpi_error_set(RLP_E_OVERFLOW, "%s: %zu outputs do not fit in %zu", __func__, total * L, cap);
    rc = rlpi_policy_score_packed(policy, seqs, n_seqs, false, out);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

int rlp_loss_nll(rlp_loss_context *ctx, void *payload)
{
    (void)payload;
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    if (ctx->step_n_tokens == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: no scored tokens in the step", __func__);
    double inv = 1.0 / (double)ctx->step_n_tokens, loss = 0;
    for (size_t i = 0; i < ctx->n_tokens; i++) {
        loss -= ctx->logprobs[i] * inv;
        ctx->dlogprobs[i] = (float)-inv;
    }
    ctx->loss = loss;
    return RLP_OK;
}


/* The train step proper; rlp_policy_train_step() adds the data-parallel
 * failure handling around it. */
/* One optimizer step over the transformer's parameter/gradient buffers,
 * handed to the optimizer as a view (lib/optim knows nothing of models). */
int rlpi_policy_optimizer_step(rlp_policy *policy, double *grad_norm, float *lr, bool *skipped)
{
    size_t n = rlpi_transformer_n_trainable_tensors(policy->tf);
    rlpi_param_span *spans = malloc((n ? n : 1) * sizeof *spans);
    if (!spans)
        return rlpi_error_set(RLP_E_NOMEM, "train step: out of memory");
    for (size_t i = 0; i < n; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(policy->tf, i);
        spans[i] = (rlpi_param_span){in->offset, in->n_elems, in->no_decay};
    }
    rlpi_param_view view = {rlpi_transformer_trainable_params(policy->tf), rlpi_transformer_trainable_grads(policy->tf),
                            rlpi_transformer_n_trainable(policy->tf), spans, n};
    int rc = view.grads ? rlpi_optimizer_step(&policy->opt, &view, grad_norm, lr, skipped)
                        : rlpi_error_set(RLP_E_STATE, "train step: frozen model has no gradients");
    free(spans);
    return rc;
}

static int train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, rlp_loss_fn loss, void *payload,
                      const rlp_train_options *opts, rlp_train_stats *stats, bool advance_version)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(loss, "loss is NULL");
    if (!opts)
        opts = &default_train_options;
    RLPI_CHECK_ARG(opts->version >= 1 && opts->version <= RLP_TRAIN_OPTIONS_VERSION, "unknown rlp_train_options version");
    if (!(opts->temperature > 0) || !isfinite(opts->temperature))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: temperature %g must be > 0", __func__, (double)opts->temperature);
    if (!policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen", __func__);
    rlp_comm *comm = policy->comm;
    /* a data-parallel rank may have no share of this step */
    int rc = comm && n_seqs == 0 ? RLP_OK : rlpi_policy_check_seqs(policy, seqs, n_seqs, __func__);
    if (rc)
        return rc;
    size_t step_tokens = 0, step_seqs = n_seqs;
    for (size_t i = 0; i < n_seqs; i++)
        step_tokens += scored_tokens(&seqs[i]);
    if (comm) {
        /* the loss normalises by the global step: sum the counts first */
        double tot[2] = {(double)n_seqs, (double)step_tokens};
        if ((rc = rlpi_comm_all_reduce_host(comm, tot, 2, RLPI_DT_F64, RLP_REDUCE_SUM)) != RLP_OK)
            return rc;
        step_seqs = (size_t)tot[0];
        step_tokens = (size_t)tot[1];
    }
    if (step_tokens == 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: no sequence has a scored (completion) token", __func__);

    double t0 = rlpi_now_s();
    rlp_train_stats st = {.version = 1, .n_seqs = step_seqs, .n_tokens = step_tokens};
    double entropy_sum = 0;
    if ((rc = rlpi_transformer_zero_grad(policy->tf)) != RLP_OK)
        return rc;
    for (size_t b = 0; b < n_seqs && rc == RLP_OK;) {
        size_t e = rlpi_pack_next_cut(seqs, n_seqs, b, opts->micro_batch_tokens);
        pack k;
        if ((rc = rlpi_pack_build(&k, seqs, b, e)) != RLP_OK)
            break;
        size_t nt = (size_t)k.b.n_tokens, ns = e - b;
        /* packed logp, entropy, dlogp, dentropy; scored versions of the four */
        float *buf = calloc(nt * 4 + k.n_scored * 4 + 1, sizeof(float));
        size_t *idx = malloc((ns * 2 + 1) * sizeof(size_t));
        if (!buf || !idx) {
            free(buf);
            free(idx);
            rlpi_pack_free(&k);
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
            break;
        }
        float *lp = buf, *ent = buf + nt, *dlp = buf + 2 * nt, *dent = buf + 3 * nt;
        float *s_lp = buf + 4 * nt, *s_ent = s_lp + k.n_scored, *s_dlp = s_ent + k.n_scored, *s_dent = s_dlp + k.n_scored;
        rc = rlpi_transformer_forward(policy->tf, &k.b, 1.0f / opts->temperature, lp, ent, true);
        if (rc == RLP_OK) {
            compact(&k, lp, s_lp);
            compact(&k, ent, s_ent);
            size_t *seq_index = idx, *token_start = idx + ns;
            token_start[0] = 0;
            for (size_t i = 0; i < ns; i++) {
                seq_index[i] = b + i;
                token_start[i + 1] = token_start[i] + scored_tokens(&seqs[b + i]);
            }
            rlp_loss_context lc = {.version = 1, .n_seqs = ns, .seq_index = seq_index, .token_start = token_start,
                                   .n_tokens = k.n_scored, .logprobs = s_lp, .entropy = s_ent,
                                   .step_n_seqs = step_seqs, .step_n_tokens = step_tokens,
                                   .dlogprobs = s_dlp, .dentropy = s_dent};
            int lrc = loss(&lc, payload);
            if (lrc != RLP_OK) {
                char why[512]; /* the loss's own message, copied: set() rewrites that buffer */
                snprintf(why, sizeof why, "%s", rlp_error_last());
                rc = rlpi_error_set(RLP_E_CALLBACK, "%s: the loss function failed (%d: %s)", __func__, lrc, why);
            }
            else {
                st.loss += lc.loss;
                for (size_t i = 0; i < k.n_scored; i++)
                    entropy_sum += s_ent[i];
                expand(&k, s_dlp, dlp);
                expand(&k, s_dent, dent);
                rc = rlpi_transformer_backward(policy->tf, dlp, dent);
            }
        }
        free(buf);
        free(idx);
        rlpi_pack_free(&k);
        st.n_micro_batches++;
        b = e;
    }
    if (rc != RLP_OK) {
        rlpi_transformer_zero_grad(policy->tf); /* nothing applied */
        return rc;
    }
    if (comm) {
        /* DDP: sum the gradients (and the reported loss and entropy) over the
         * ranks; every rank then takes the same optimizer step */
        rlpi_buffer *G = rlpi_transformer_trainable_grads(policy->tf);
        double sums[2] = {st.loss, entropy_sum};
        if ((rc = rlpi_comm_all_reduce_buffer(comm, G, 0, rlpi_transformer_n_trainable(policy->tf), RLP_REDUCE_SUM)) ||
            (rc = rlpi_comm_all_reduce_host(comm, sums, 2, RLPI_DT_F64, RLP_REDUCE_SUM))) {
            rlpi_transformer_zero_grad(policy->tf);
            return rc;
        }
        st.loss = sums[0];
        entropy_sum = sums[1];
    }
    bool skipped = false;
    rc = rlpi_policy_optimizer_step(policy, &st.grad_norm, &st.lr, &skipped);
    /* applied or not, the gradients are dead now (the next step zeroes
     * them first): out of the resident set until then */
    rlpi_transformer_release_grads(policy->tf);
    if (rc != RLP_OK)
        return rc;
    if (!skipped)
        policy->weights_gen++;
    if (!skipped && advance_version)
        policy->version++;
    if (skipped)
        rlpi_log(&policy->ctx->log, RLP_LOG_WARN, "train step skipped: gradient norm is %g", st.grad_norm);
    st.skipped = skipped;
    st.policy_version = policy->version;
    st.mean_entropy = entropy_sum / (double)step_tokens;
    st.seconds = rlpi_now_s() - t0;
    if (stats)
        *stats = st;
    return RLP_OK;
}

int rlpi_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, rlp_loss_fn loss, void *payload,
                           const rlp_train_options *opts, rlp_train_stats *stats, bool advance_version)
{
    int rc = train_step(policy, seqs, n_seqs, loss, payload, opts, stats, advance_version);
    if (rc != RLP_OK && policy && policy->comm && rc != RLP_E_CLOSED && rc != RLP_E_TIMEOUT)
        rlpi_dp_fail(policy->comm, "train step", rc); /* the peers would wait for this rank forever */
    return rc;
}

int rlp_policy_train_step(rlp_policy *policy, const rlp_sequence *seqs, size_t n_seqs, rlp_loss_fn loss, void *payload,
                          const rlp_train_options *opts, rlp_train_stats *stats)
{
    return rlpi_policy_train_step(policy, seqs, n_seqs, loss, payload, opts, stats, true);
}
