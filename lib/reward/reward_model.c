/* The reward_model built-in: a learned reward model run in process, an
 * outcome reward model (ORM: one score per completion, the output of a
 * *ForSequenceClassification head at its last token) or a process reward
 * model (PRM: one score per reasoning step, at the step's last token of a
 * *ForTokenClassification head; Lightman et al. 2023, "Let's Verify Step
 * by Step"; Wang et al. 2024, Math-Shepherd), loaded from an HF folder and
 * run on its own context (backend threads) through the public policy API,
 * so this layer needs no model internals. Per-step scores become per-token
 * rewards on the policy's completion tokens, at the token where each step
 * ends, so the handle's Clip / Delta refinement (refine.c; Gao et al.
 * 2024) sees the steps. */
#include "reward/builtin.h"

#include "core/error.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum { RM_ORM = 0, RM_PRM = 1 };
enum { AGG_MIN = 0, AGG_LAST = 1, AGG_MEAN = 2 };

/* One loaded reward model, shared by the handles created on the same
 * folder with the same threads in this process: `rlpost train` makes a
 * combined reward and a copy of each term (for samples.jsonl) from the
 * same options, and a second copy of the weights would be memory for
 * nothing. Guarded by cache_mu; each model's forward passes by its mu. */
typedef struct rm_shared {
    char *path;
    uint32_t threads;
    rlp_context *ctx;
    rlp_policy *model;
    pthread_mutex_t mu;        /* one forward at a time on the model */
    int refs;
    struct rm_shared *next;
} rm_shared;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static rm_shared *cache;

static void shared_free(rm_shared *sh)
{
    rlp_policy_free(sh->model);
    rlp_context_free(sh->ctx);
    pthread_mutex_destroy(&sh->mu);
    free(sh->path);
    free(sh);
}

/* The model of `path` (loaded now, or the one already loaded), one more reference. */
static int shared_get(const char *path, uint32_t threads, rm_shared **out)
{
    char *real = realpath(path, NULL);
    const char *key = real ? real : path;
    pthread_mutex_lock(&cache_mu);
    rm_shared *sh = cache;
    while (sh && (sh->threads != threads || strcmp(sh->path, key)))
        sh = sh->next;
    int rc = RLP_OK;
    if (sh) {
        sh->refs++;
    } else if (!(sh = calloc(1, sizeof *sh)) || !(sh->path = strdup(key))) {
        free(sh);
        sh = NULL;
        rc = rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
    } else {
        pthread_mutex_init(&sh->mu, NULL);
        sh->threads = threads;
        sh->refs = 1;
        rlp_context_options co;
        rlp_context_options_init(&co, RLP_CONTEXT_OPTIONS_VERSION);
        co.n_threads = (int32_t)(threads > 1024 ? 1024 : threads);
        rlp_policy_options po;
        rlp_policy_options_init(&po, RLP_POLICY_OPTIONS_VERSION);
        po.trainable = 0;
        if ((rc = rlp_context_create(&sh->ctx, &co)) || (rc = rlp_policy_load(&sh->model, sh->ctx, path, &po))) {
            shared_free(sh);
            sh = NULL;
        } else {
            sh->next = cache;
            cache = sh;
        }
    }
    pthread_mutex_unlock(&cache_mu);
    free(real);
    *out = sh;
    return rc;
}

static void shared_put(rm_shared *sh)
{
    if (!sh)
        return;
    pthread_mutex_lock(&cache_mu);
    bool last = --sh->refs == 0;
    if (last)
        for (rm_shared **p = &cache; *p; p = &(*p)->next)
            if (*p == sh) {
                *p = sh->next;
                break;
            }
    pthread_mutex_unlock(&cache_mu);
    if (last)
        shared_free(sh);
}

typedef struct rm_cfg {
    rm_shared *sh;             /* the loaded model */
    rlp_policy *model;         /* sh->model */
    const rlp_tokenizer *tok;  /* the model's (its folder's tokenizer.json) */
    uint32_t labels, label;    /* outputs of the head; which one is the score */
    int32_t context;           /* the model's context length */
    int kind, aggregate, with_prompt;
    char *sep;                 /* PRM step separator (bytes), never empty */
    int32_t *step_ids;         /* PRM: ids appended after each step instead of the separator, or NULL */
    size_t n_step_ids;
} rm_cfg;

static void destroy(void *impl)
{
    rm_cfg *c = impl;
    if (!c)
        return;
    shared_put(c->sh);
    free(c->sep);
    free(c->step_ids);
    free(c);
}

/* A growable id array. */
typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

/* Room for `more` ids after the n held. */
static int ids_reserve(ids *a, size_t more)
{
    if (a->n + more <= a->cap)
        return RLP_OK;
    size_t cap = (a->n + more) * 2 + 16;
    int32_t *v = realloc(a->v, cap * sizeof *v);
    if (!v)
        return rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
    a->v = v;
    a->cap = cap;
    return RLP_OK;
}

static int ids_encode(ids *a, const rlp_tokenizer *tok, const char *text, size_t len, uint32_t flags)
{
    for (;;) {
        size_t got = 0;
        int rc = rlp_tokenizer_encode(tok, text, len, flags, a->v ? a->v + a->n : NULL, a->cap - a->n, &got);
        if (rc == RLP_OK) {
            a->n += got;
            return RLP_OK;
        }
        if (rc != RLP_E_OVERFLOW || (rc = ids_reserve(a, got)))
            return rc;
    }
}

static int ids_append(ids *a, const int32_t *src, size_t n)
{
    int rc = ids_reserve(a, n);
    if (rc)
        return rc;
    memcpy(a->v + a->n, src, n * sizeof *src);
    a->n += n;
    return RLP_OK;
}

/* What one sample becomes: the model's input, the rows to read and, for a
 * PRM, the byte in the completion where each step ends. */
typedef struct sample {
    ids in;
    size_t *rows, *step_end; /* (n_steps) */
    size_t n_steps;
    bool ok;
} sample;

/* The steps of a PRM completion: pieces ending just after each separator,
 * and the rest when it is not empty. */
static int build_steps(const rm_cfg *c, const char *t, size_t len, sample *s)
{
    size_t sl = strlen(c->sep), n = 1;
    for (size_t i = 0; i + sl <= len; i++)
        if (!memcmp(t + i, c->sep, sl)) {
            n++;
            i += sl - 1;
        }
    s->rows = malloc(n * sizeof *s->rows);
    s->step_end = malloc(n * sizeof *s->step_end);
    if (!s->rows || !s->step_end)
        return rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
    size_t b = 0;
    for (size_t i = 0; i <= len;) {
        bool at_sep = i + sl <= len && !memcmp(t + i, c->sep, sl);
        if (!at_sep && i < len) {
            i++;
            continue;
        }
        size_t e = at_sep ? i + sl : len; /* the step's bytes [b, e), separator included */
        if (e > b) {
            /* with step tokens the separator is replaced by them (Qwen2.5-Math-PRM's
             * "<extra_0>".join(steps), Math-Shepherd's tag) */
            size_t body = c->step_ids && at_sep ? i : e;
            /* the completion is content: text spelling a control token stays text (public-bugs case #1:
             * a policy writing "<extra_0>" or "<|im_end|>" must not forge steps or turns for the scorer) */
            int rc = body > b ? ids_encode(&s->in, c->tok, t + b, body - b, 0) : RLP_OK;
            if (!rc && c->step_ids)
                rc = ids_append(&s->in, c->step_ids, c->n_step_ids);
            if (rc)
                return rc;
            if (s->in.n > 0) {
                s->rows[s->n_steps] = s->in.n - 1;
                s->step_end[s->n_steps++] = e;
            }
        }
        if (i >= len)
            break;
        i = b = e;
    }
    return RLP_OK;
}

/* The score of a row: the output itself with one label, else the
 * probability of `label` under the softmax of the outputs. */
static double row_score(const rm_cfg *c, const float *out)
{
    if (c->labels == 1)
        return out[0];
    double mx = out[0], z = 0;
    for (uint32_t j = 1; j < c->labels; j++)
        mx = fmax(mx, out[j]);
    for (uint32_t j = 0; j < c->labels; j++)
        z += exp((double)out[j] - mx);
    return exp((double)out[c->label] - mx) / z;
}

/* Per-step scores onto the policy's completion tokens: the token whose
 * text covers the step's last byte, found by decoding the policy's ids
 * with the reward model's tokenizer. Only when that decoding reproduces
 * the completion exactly (the two share a vocabulary); else the sample
 * keeps its scalar score only. */
static void place_steps(const rm_cfg *c, rlp_reward_result *r, const rlp_reward_request *q, const sample *s,
                        const double *step_score)
{
    size_t n = q->n_completion_tokens;
    if (!n || !r->token_scores || !r->step_ends)
        return;
    size_t *cum = malloc(n * sizeof *cum);
    rlp_detokenizer *det = NULL;
    if (!cum || rlp_detokenizer_create(&det, c->tok, RLP_DECODE_SKIP_SPECIAL) != RLP_OK) {
        free(cum);
        return;
    }
    size_t at = 0;
    bool same = true;
    for (size_t t = 0; t < n && same; t++) {
        const char *d;
        size_t dl;
        if (rlp_detokenizer_push(&d, &dl, det, q->completion_tokens[t]) != RLP_OK ||
            at + dl > q->completion_len || memcmp(q->completion_text + at, d, dl)) {
            same = false;
            break;
        }
        at += dl;
        cum[t] = at;
    }
    const char *d;
    size_t dl;
    if (same && (rlp_detokenizer_flush(&d, &dl, det) != RLP_OK || dl != 0 || at != q->completion_len))
        same = false;
    rlp_detokenizer_free(det);
    if (same) {
        size_t t = 0;
        for (size_t k = 0; k < s->n_steps; k++) {
            while (t + 1 < n && cum[t] < s->step_end[k])
                t++;
            r->token_scores[t] += (float)step_score[k];
            r->step_ends[t] = 1;
        }
        r->has_token_scores = 1;
    }
    free(cum);
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    rm_cfg *c = impl;
    sample *sm = calloc(n, sizeof *sm);
    rlp_sequence *seqs = calloc(n, sizeof *seqs);
    size_t *seq_of = calloc(n, sizeof *seq_of);
    float *out = NULL;
    double *steps = NULL;
    int rc = sm && seqs && seq_of ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
    size_t n_seqs = 0, total = 0, max_steps = 1;
    for (size_t i = 0; !rc && i < n; i++) {
        const rlp_reward_request *q = &req[i];
        sample *s = &sm[i];
        if (c->with_prompt && q->prompt_len)
            rc = ids_encode(&s->in, c->tok, q->prompt_text, q->prompt_len,
                            RLP_ENCODE_PARSE_SPECIAL | RLP_ENCODE_DEFAULT_BOS);
        else if (!c->with_prompt)
            rc = ids_encode(&s->in, c->tok, "", 0, RLP_ENCODE_DEFAULT_BOS);
        if (rc)
            break;
        if (c->kind == RM_PRM) {
            rc = build_steps(c, q->completion_text, q->completion_len, s);
        } else {
            rc = ids_encode(&s->in, c->tok, q->completion_text, q->completion_len, 0); /* content: case #1 */
            if (!rc && s->in.n) {
                s->rows = malloc(sizeof *s->rows);
                rc = s->rows ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
                if (!rc) {
                    s->rows[0] = s->in.n - 1;
                    s->n_steps = 1;
                }
            }
        }
        if (rc)
            break;
        if (s->n_steps == 0) {
            res[i].valid = 0;
            rlpi_reason(&res[i], "nothing to score (empty completion)");
        } else if (s->in.n > (size_t)c->context) {
            res[i].valid = 0;
            rlpi_reason(&res[i], "%zu tokens: longer than the reward model's context of %d", s->in.n, c->context);
        } else {
            s->ok = true;
            seq_of[i] = total;
            seqs[n_seqs++] = (rlp_sequence){.tokens = s->in.v, .n_tokens = (uint32_t)s->in.n, .n_prompt = 0};
            total += s->in.n;
            if (s->n_steps > max_steps)
                max_steps = s->n_steps;
        }
    }
    if (!rc && n_seqs) {
        out = malloc(total * c->labels * sizeof *out);
        steps = malloc(max_steps * sizeof *steps);
        rc = out && steps ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "reward_model: out of memory");
        if (!rc) {
            pthread_mutex_lock(&c->sh->mu);
            rc = rlp_policy_score(c->model, seqs, n_seqs, out, total * c->labels, NULL);
            pthread_mutex_unlock(&c->sh->mu);
        }
    }
    for (size_t i = 0; !rc && i < n; i++) {
        const sample *s = &sm[i];
        if (!s->ok)
            continue;
        double agg = 0;
        for (size_t k = 0; k < s->n_steps; k++) {
            steps[k] = row_score(c, out + (seq_of[i] + s->rows[k]) * c->labels);
            agg = k == 0 ? steps[k]
                  : c->aggregate == AGG_MIN ? fmin(agg, steps[k])
                  : c->aggregate == AGG_LAST ? steps[k]
                                             : agg + steps[k];
        }
        if (c->aggregate == AGG_MEAN)
            agg /= (double)s->n_steps;
        res[i].score = agg;
        if (c->kind == RM_PRM) {
            place_steps(c, &res[i], &req[i], s, steps);
            rlpi_reason(&res[i], "%zu steps", s->n_steps);
        }
    }
    if (rc)
        rlpi_reason(&res[0], "%s", rlp_error_last());
    for (size_t i = 0; sm && i < n; i++) {
        free(sm[i].in.v);
        free(sm[i].rows);
        free(sm[i].step_end);
    }
    free(sm);
    free(seqs);
    free(seq_of);
    free(out);
    free(steps);
    return rc ? -1 : 0;
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_reward_model(rlpi_scorer **out, rlpi_opts *o)
{
    rm_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    const char *path = NULL, *sep = "\n\n", *step_token = NULL;
    uint32_t threads = 0, label = UINT32_MAX;
    int kind = -1, input = 0;
    static const char *const kinds[] = {"orm", "prm"}, *const aggs[] = {"min", "last", "mean"},
                             *const inputs[] = {"prompt_completion", "completion"};
    int rc;
    if ((rc = rlpi_opt_string(o, "model", &path)) || (rc = rlpi_opt_choice(o, "kind", kinds, 2, &kind)) ||
        (rc = rlpi_opt_string(o, "step_separator", &sep)) || (rc = rlpi_opt_string(o, "step_token", &step_token)) ||
        (rc = rlpi_opt_choice(o, "aggregate", aggs, 3, &c->aggregate)) ||
        (rc = rlpi_opt_choice(o, "input", inputs, 2, &input)) ||
        (rc = rlpi_opt_uint(o, "label", &label)) || (rc = rlpi_opt_uint(o, "model_threads", &threads)))
        goto fail;
    c->with_prompt = input == 0;
    if (!path) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "reward built-in %s: option \"model\" (an HF *ForSequenceClassification or "
                            "*ForTokenClassification folder with its tokenizer.json) is required",
                            o->builtin);
        goto fail;
    }
    if (!*sep) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"step_separator\" is empty", o->builtin);
        goto fail;
    }
    if (!(c->sep = strdup(sep))) {
        rc = rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
        goto fail;
    }
    rlp_model_info info = {.version = RLP_MODEL_INFO_VERSION};
    if ((rc = shared_get(path, threads, &c->sh)) || !(c->model = c->sh->model) ||
        (rc = rlp_policy_info(&info, c->model)) || (rc = rlp_policy_score_labels(&c->labels, c->model))) {
        rc = rlpi_error_wrap("reward built-in %s: model \"%s\"", o->builtin, path);
        goto fail;
    }
    c->context = info.context_length;
    if (c->labels == 0) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG,
                            "reward built-in %s: \"%s\" is a language model; a reward model is an HF "
                            "*ForSequenceClassification (ORM) or *ForTokenClassification (PRM) folder",
                            o->builtin, path);
        goto fail;
    }
    if (!(c->tok = rlp_policy_tokenizer(c->model))) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: \"%s\" has no tokenizer.json", o->builtin, path);
        goto fail;
    }
    c->label = label != UINT32_MAX ? label : c->labels == 1 ? 0 : 1;
    if (c->label >= c->labels) {
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"label\" is %u but the model has %u outputs",
                            o->builtin, c->label, c->labels);
        goto fail;
    }
    /* the class says what the head was trained for; "kind" may say otherwise */
    c->kind = kind >= 0 ? kind : info.score_per_token ? RM_PRM : RM_ORM;
    if (step_token) {
        ids a = {0};
        if ((rc = ids_encode(&a, c->tok, step_token, strlen(step_token), RLP_ENCODE_PARSE_SPECIAL)))
            goto fail;
        if (a.n == 0) {
            free(a.v);
            rc = rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in %s: option \"step_token\" encodes to no tokens",
                                o->builtin);
            goto fail;
        }
        c->step_ids = a.v;
        c->n_step_ids = a.n;
    }
    rc = rlpi_scorer_create(out, &ops, c, 0);
    if (rc == RLP_OK) {
        (*out)->bounds_own_time = 1; /* a forward pass has no deadline to keep: no executor timeout */
        (*out)->needs_reference = 0;
        (*out)->token_scores = c->kind == RM_PRM;
    }
    return rc;
fail:
    destroy(c);
    return rc;
}
