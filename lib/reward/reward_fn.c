/* rlp_reward_fn: the public handle. A leaf handle is a scorer plus its own
 * executor (threads, deadlines); a combination runs its members one after
 * the other and sums their outcomes. Scoring a batch reads it into
 * requests, runs, and writes rewards back only when nothing failed as a
 * whole, so an error return leaves the batch as it was. Must not run
 * scorers itself: executor.c does. */
#include "core/clock.h"
#include "core/batch.h"
#include "core/error.h"
#include "reward/builtin.h"
#include "reward/callback.h"
#include "reward/executor.h"
#include "reward/isolated.h"
#include "reward/refine.h"
#ifdef RLPI_HAVE_CURL
#include "reward/http_verifier.h"
#endif

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Upper bound of n_threads = 0 (one per online core). */
#define MAX_DEFAULT_THREADS 64

struct rlp_reward_fn {
    char *name;
    pthread_mutex_t mu;           /* serialises score calls */
    int refine;
    float eta;
    /* leaf */
    rlpi_scorer *sc;
    rlpi_reward_exec *ex;         /* created by the first score call */
    int n_threads;
    uint32_t timeout_ms, max_abandoned;
    /* combination */
    rlp_reward_fn **members;      /* (n_members), owned */
    double *weights;              /* (n_members) */
    size_t n_members;
};


static int resolve_threads(uint32_t n)
{
    if (n)
        return (int)(n > MAX_DEFAULT_THREADS ? MAX_DEFAULT_THREADS : n);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    return (int)(cores > MAX_DEFAULT_THREADS ? MAX_DEFAULT_THREADS : cores);
}

/* A leaf handle around sc (its reference is taken over, also on failure). */
static int leaf_create(rlp_reward_fn **out, rlpi_scorer *sc, const char *name, uint32_t n_threads,
                       uint32_t timeout_ms, uint32_t max_abandoned)
{
    rlp_reward_fn *fn = calloc(1, sizeof *fn);
    if (!fn || !(fn->name = strdup(name))) {
        free(fn);
        rlpi_scorer_unref(sc);
        return rlpi_error_set(RLP_E_NOMEM, "reward: out of memory");
    }
    pthread_mutex_init(&fn->mu, NULL);
    fn->sc = sc;
    fn->n_threads = sc->bounds_own_time ? 1 : resolve_threads(n_threads);
    fn->timeout_ms = timeout_ms;
    fn->max_abandoned = max_abandoned;
    *out = fn;
    return RLP_OK;
}

/* ---- options ---------------------------------------------------------------------- */

int rlp_reward_options_init(rlp_reward_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_REWARD_OPTIONS_VERSION, "unknown version");
    rlp_reward_options d = RLP_REWARD_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

int rlp_http_reward_options_init(rlp_http_reward_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_HTTP_REWARD_OPTIONS_VERSION, "unknown version");
    rlp_http_reward_options d = RLP_HTTP_REWARD_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

/* ---- creation ----------------------------------------------------------------------- */

static int create_callback(rlp_reward_fn **out, rlp_reward_callback one, rlp_reward_batch_callback many,
                           const rlp_reward_options *opts, void *payload)
{
    rlp_reward_options d = RLP_REWARD_OPTIONS_INIT;
    if (!opts)
        opts = &d;
    if (!out || (!one && !many) || opts->version != RLP_REWARD_OPTIONS_VERSION) {
        if (opts->version == RLP_REWARD_OPTIONS_VERSION && opts->payload_free)
            opts->payload_free(payload);
        RLPI_CHECK_ARG(out, "out is NULL");
        RLPI_CHECK_ARG(one || many, "fn is NULL");
        return rlpi_error_set(RLP_E_INVALID_ARG, "reward callback: options version %u is not %u", opts->version,
                              RLP_REWARD_OPTIONS_VERSION);
    }
    rlpi_scorer *sc;
    int rc = rlpi_callback_scorer(&sc, one, many, opts->batch_size ? opts->batch_size : 64, payload,
                                  opts->payload_free);
    if (rc)
        return rc;
    return leaf_create(out, sc, opts->name ? opts->name : "callback", opts->n_threads, opts->timeout_ms,
                       opts->max_abandoned);
}

int rlp_reward_fn_create_callback(rlp_reward_fn **out, rlp_reward_callback fn, const rlp_reward_options *opts,
                                  void *payload)
{
    if (!fn) {
        if (opts && opts->version == RLP_REWARD_OPTIONS_VERSION && opts->payload_free)
            opts->payload_free(payload);
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: fn is NULL", __func__);
    }
    return create_callback(out, fn, NULL, opts, payload);
}

int rlp_reward_fn_create_batch_callback(rlp_reward_fn **out, rlp_reward_batch_callback fn,
                                        const rlp_reward_options *opts, void *payload)
{
    if (!fn) {
        if (opts && opts->version == RLP_REWARD_OPTIONS_VERSION && opts->payload_free)
            opts->payload_free(payload);
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: fn is NULL", __func__);
    }
    return create_callback(out, NULL, fn, opts, payload);
}

int rlp_reward_fn_create_builtin(rlp_reward_fn **out, const char *name, const char *options_json)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(name, "name is NULL");
    *out = NULL; /* a failed call leaves no stale handle behind */
    rlpi_scorer *sc;
    rlpi_builtin_common common;
    json_t *root;
    int rc = rlpi_builtin_create(&sc, &common, &root, name, options_json);
    if (rc)
        return rc;
    rc = leaf_create(out, sc, common.name, common.threads, common.timeout_ms, 16);
    if (rc == RLP_OK) {
        (*out)->refine = common.refine;
        (*out)->eta = common.refine_eta;
    }
    json_decref(root);
    return rc;
}

int rlp_isolation_options_init(rlp_isolation_options *opts, uint32_t version)
{
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(version == RLP_ISOLATION_OPTIONS_VERSION, "unknown version");
    rlp_isolation_options d = RLP_ISOLATION_OPTIONS_INIT;
    *opts = d;
    return RLP_OK;
}

/* Upper bound of n_workers = 0 (one per online core): processes cost more than threads. */
#define MAX_DEFAULT_WORKERS 8
#define MAX_WORKERS 64
#define MAX_ISOLATED_BATCH 4096

int rlp_reward_fn_create_isolated(rlp_reward_fn **out, const char *library_path, const char *options_json,
                                  const rlp_isolation_options *opts)
{
    rlp_isolation_options d = RLP_ISOLATION_OPTIONS_INIT;
    if (!opts)
        opts = &d;
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(library_path && *library_path, "library_path is NULL or empty");
    RLPI_CHECK_ARG(opts->version == RLP_ISOLATION_OPTIONS_VERSION, "opts->version is unknown");
    if (opts->n_workers > MAX_WORKERS)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: n_workers %u is out of range (0 … %d)", __func__,
                              opts->n_workers, MAX_WORKERS);
    if (opts->batch_size > MAX_ISOLATED_BATCH)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: batch_size %u is out of range (0 … %d)", __func__,
                              opts->batch_size, MAX_ISOLATED_BATCH);
    if (opts->max_restarts > 100000)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: max_restarts %u is out of range (0 … 100000)", __func__,
                              opts->max_restarts);
    rlp_isolation_options o = *opts;
    o.batch_size = o.batch_size ? o.batch_size : 1;
    uint32_t n_workers = o.n_workers ? o.n_workers : (uint32_t)resolve_threads(0);
    if (!o.n_workers && n_workers > MAX_DEFAULT_WORKERS)
        n_workers = MAX_DEFAULT_WORKERS;
    rlpi_scorer *sc;
    int rc = rlpi_isolated_scorer(&sc, library_path, options_json, &o, n_workers);
    if (rc)
        return rc;
    rc = leaf_create(out, sc, opts->name ? opts->name : "isolated", 1, o.timeout_ms, 0);
    if (rc == RLP_OK)
        (*out)->n_threads = (int)n_workers; /* one executor thread per worker process */
    return rc;
}

const char *rlp_reward_builtin_name(size_t index)
{
    return rlpi_builtin_name(index);
}

int rlp_reward_fn_create_http(rlp_reward_fn **out, const rlp_http_reward_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(opts, "opts is NULL");
    RLPI_CHECK_ARG(opts->version == RLP_HTTP_REWARD_OPTIONS_VERSION, "opts->version is unknown");
#ifdef RLPI_HAVE_CURL
    rlpi_scorer *sc;
    int rc = rlpi_http_scorer(&sc, opts);
    if (rc)
        return rc;
    return leaf_create(out, sc, opts->name ? opts->name : "http", 1, 0, 0);
#else
    return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: librlpost was built without libcurl", __func__);
#endif
}

int rlp_reward_fn_combine(rlp_reward_fn **out, rlp_reward_fn *const *fns, const double *weights, size_t n)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(fns && n > 0, "no members");
    for (size_t i = 0; i < n; i++) {
        if (!fns[i])
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: fns[%zu] is NULL", __func__, i);
        if (weights && !isfinite(weights[i]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: weights[%zu] is not finite", __func__, i);
        for (size_t k = 0; k < i; k++)
            if (fns[k] == fns[i])
                return rlpi_error_set(RLP_E_INVALID_ARG, "%s: fns[%zu] and fns[%zu] are the same handle", __func__,
                                      k, i);
    }
    rlp_reward_fn *fn = calloc(1, sizeof *fn);
    if (fn) {
        fn->name = strdup("combine");
        fn->members = malloc(n * sizeof *fn->members);
        fn->weights = malloc(n * sizeof *fn->weights);
    }
    if (!fn || !fn->name || !fn->members || !fn->weights) {
        if (fn) {
            free(fn->name);
            free(fn->members);
            free(fn->weights);
        }
        free(fn);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    }
    pthread_mutex_init(&fn->mu, NULL);
    for (size_t i = 0; i < n; i++) {
        fn->members[i] = fns[i];
        fn->weights[i] = weights ? weights[i] : 1.0;
    }
    fn->n_members = n;
    *out = fn;
    return RLP_OK;
}

int rlp_reward_fn_set_refine(rlp_reward_fn *fn, int mode, float eta)
{
    RLPI_CHECK_ARG(fn, "fn is NULL");
    RLPI_CHECK_ARG(mode >= RLP_REFINE_NONE && mode <= RLP_REFINE_CLIP_DELTA, "mode is not an rlp_reward_refine_mode");
    RLPI_CHECK_ARG(isfinite(eta), "eta is not finite");
    fn->refine = mode;
    fn->eta = eta;
    return RLP_OK;
}

const char *rlp_reward_fn_name(const rlp_reward_fn *fn)
{
    return fn ? fn->name : NULL;
}

void rlp_reward_fn_free(rlp_reward_fn *fn)
{
    if (!fn)
        return;
    rlpi_reward_exec_free(fn->ex);
    rlpi_scorer_unref(fn->sc);
    for (size_t i = 0; i < fn->n_members; i++)
        rlp_reward_fn_free(fn->members[i]);
    free(fn->members);
    free(fn->weights);
    pthread_mutex_destroy(&fn->mu);
    free(fn->name);
    free(fn);
}

/* ---- running --------------------------------------------------------------------------- */

static void clear_outcomes(rlpi_outcome *o, size_t n)
{
    for (size_t i = 0; o && i < n; i++)
        rlpi_outcome_clear(&o[i]);
}

/* Prefixes an invalid outcome's reason with the handle's name. */
static void name_reason(const rlp_reward_fn *fn, rlpi_outcome *o)
{
    char tmp[RLP_REWARD_REASON_MAX];
    memcpy(tmp, o->reason, sizeof tmp);
    o->reason[0] = '\0';
    rlpi_cat(o->reason, sizeof o->reason, fn->name);
    rlpi_cat(o->reason, sizeof o->reason, ": ");
    rlpi_cat(o->reason, sizeof o->reason, tmp);
}

static int run(rlp_reward_fn *fn, const rlp_reward_request *reqs, size_t n, rlpi_outcome *out,
               uint64_t *abandoned);

/* A combination: members one after the other, then the weighted sum. */
static int run_combined(rlp_reward_fn *fn, const rlp_reward_request *reqs, size_t n, rlpi_outcome *out,
                        uint64_t *abandoned)
{
    rlpi_outcome *part = calloc(n ? n : 1, sizeof *part);
    if (!part)
        return rlpi_error_set(RLP_E_NOMEM, "reward combine: out of memory");
    for (size_t i = 0; i < n; i++) {
        out[i].valid = 1;
        out[i].score = 0.0;
    }
    int rc = RLP_OK;
    for (size_t m = 0; m < fn->n_members && rc == RLP_OK; m++) {
        uint64_t ab = 0;
        memset(part, 0, n * sizeof *part);
        rc = run(fn->members[m], reqs, n, part, &ab);
        *abandoned += ab;
        double w = fn->weights[m];
        for (size_t i = 0; rc == RLP_OK && i < n; i++) {
            rlpi_outcome *o = &out[i], *p = &part[i];
            if (!o->valid)
                continue;
            if (!p->valid) { /* the first failing member decides */
                o->valid = 0;
                o->kind = p->kind;
                memcpy(o->reason, p->reason, sizeof o->reason);
                free(o->token_scores);
                free(o->step_ends);
                o->token_scores = NULL;
                o->step_ends = NULL;
                continue;
            }
            o->score += w * p->score;
            if (p->reason[0]) {
                if (o->reason[0])
                    rlpi_cat(o->reason, sizeof o->reason, "; ");
                rlpi_cat(o->reason, sizeof o->reason, fn->members[m]->name);
                rlpi_cat(o->reason, sizeof o->reason, ": ");
                rlpi_cat(o->reason, sizeof o->reason, p->reason);
            }
            if (p->token_scores) {
                if (!o->token_scores) {
                    o->token_scores = calloc(p->n_tokens, sizeof *o->token_scores);
                    o->step_ends = calloc(p->n_tokens, 1);
                    o->n_tokens = p->n_tokens;
                    if (!o->token_scores || !o->step_ends) {
                        rc = rlpi_error_set(RLP_E_NOMEM, "reward combine: out of memory");
                        break;
                    }
                }
                for (size_t t = 0; t < p->n_tokens; t++) {
                    o->token_scores[t] += (float)(w * p->token_scores[t]);
                    o->step_ends[t] |= p->step_ends[t];
                }
            }
        }
        clear_outcomes(part, n);
    }
    free(part);
    if (rc == RLP_OK && fn->refine != RLP_REFINE_NONE)
        for (size_t i = 0; i < n; i++)
            if (out[i].valid && out[i].token_scores)
                rlpi_refine_tokens(out[i].token_scores, out[i].step_ends, out[i].n_tokens, fn->refine, fn->eta);
    return rc;
}

/* Fills out (n, zeroed) for reqs. */
static int run(rlp_reward_fn *fn, const rlp_reward_request *reqs, size_t n, rlpi_outcome *out, uint64_t *abandoned)
{
    if (fn->n_members)
        return run_combined(fn, reqs, n, out, abandoned);
    if (!fn->ex) {
        int rc = rlpi_reward_exec_create(&fn->ex, fn->n_threads, fn->max_abandoned);
        if (rc)
            return rc;
    }
    int rc = rlpi_reward_exec_run(fn->ex, fn->sc, fn->timeout_ms, fn->refine, fn->eta, reqs, n, out, abandoned);
    if (rc == RLP_OK && fn->sc->check)
        rc = fn->sc->check(fn->sc->impl);
    if (rc) {
        clear_outcomes(out, n);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (!out[i].valid)
            name_reason(fn, &out[i]);
    return RLP_OK;
}

/* The request of trajectory t (pointers borrowed from the batch). */
static void request_of(rlp_reward_request *r, const rlpi_traj *t, size_t index)
{
    memset(r, 0, sizeof *r);
    r->version = RLP_REWARD_REQUEST_VERSION;
    r->prompt_text = t->prompt_text ? t->prompt_text : "";
    r->prompt_len = strlen(r->prompt_text);
    r->completion_text = t->text ? t->text : "";
    r->completion_len = strlen(r->completion_text);
    r->completion_tokens = t->tokens;
    r->n_completion_tokens = t->n_tokens;
    r->reference = NULL; /* read from the metadata by the workers */
    r->metadata_json = t->metadata;
    r->group_id = t->group_id;
    r->sample_index = t->sample_index;
    r->policy_version = t->policy_version;
    r->batch_index = index;
}

int rlp_reward_fn_score(rlp_reward_fn *fn, rlp_batch *batch, rlp_reward_stats *stats)
{
    RLPI_CHECK_ARG(fn, "fn is NULL");
    RLPI_CHECK_ARG(batch, "batch is NULL");
    RLPI_CHECK_ARG(!stats || stats->version >= 1, "stats->version must be set to RLP_REWARD_STATS_VERSION");
    uint64_t t0 = rlpi_now_ns();
    size_t n = batch->n, m = 0;
    rlp_reward_request *reqs = malloc((n ? n : 1) * sizeof *reqs);
    size_t *idx = malloc((n ? n : 1) * sizeof *idx);
    rlpi_outcome *out = calloc(n ? n : 1, sizeof *out);
    char **errs = calloc(n ? n : 1, sizeof *errs);
    if (!reqs || !idx || !out || !errs) {
        free(reqs);
        free(idx);
        free(out);
        free(errs);
        return rlpi_error_set(RLP_E_NOMEM, "%s: out of memory for %zu trajectories", __func__, n);
    }
    for (size_t i = 0; i < n; i++) {
        if (batch->items[i].finish_reason == RLP_FINISH_ERROR)
            continue;
        request_of(&reqs[m], &batch->items[i], i);
        idx[m++] = i;
    }
    uint64_t abandoned = 0;
    pthread_mutex_lock(&fn->mu);
    int rc = run(fn, reqs, m, out, &abandoned);
    pthread_mutex_unlock(&fn->mu);
    /* every allocation before any change, so that a failure changes nothing */
    for (size_t k = 0; rc == RLP_OK && k < m; k++)
        if (!out[k].valid && !(errs[k] = strdup(out[k].reason)))
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", __func__);
    if (rc) {
        for (size_t k = 0; k < m; k++)
            free(errs[k]);
        clear_outcomes(out, m);
        free(reqs);
        free(idx);
        free(out);
        free(errs);
        return rc;
    }
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.scored = m;
    st.skipped = n - m;
    double sum = 0.0, lo = INFINITY, hi = -INFINITY;
    for (size_t k = 0; k < m; k++) {
        rlpi_traj *t = &batch->items[idx[k]];
        rlpi_outcome *o = &out[k];
        free(t->error);
        t->error = errs[k];
        if (o->valid) {
            t->valid = 1;
            t->reward = (float)o->score;
            if (o->token_scores && o->n_tokens == t->n_tokens) {
                free(t->token_rewards);
                t->token_rewards = o->token_scores;
                o->token_scores = NULL;
            }
            st.valid++;
            sum += t->reward;
            lo = t->reward < lo ? t->reward : lo;
            hi = t->reward > hi ? t->reward : hi;
        } else {
            t->valid = 0;
            t->reward = NAN;
            free(t->token_rewards);
            t->token_rewards = NULL;
            st.invalid++;
            st.errors += o->kind == RLPI_RW_ERROR;
            st.timeouts += o->kind == RLPI_RW_TIMEOUT;
            st.nonfinite += o->kind == RLPI_RW_NONFINITE;
            st.crashed += o->kind == RLPI_RW_CRASH;
        }
    }
    clear_outcomes(out, m);
    free(reqs);
    free(idx);
    free(out);
    free(errs);
    if (stats) {
        st.version = stats->version;
        st.abandoned_running = abandoned;
        st.mean_score = st.valid ? sum / (double)st.valid : NAN;
        st.min_score = st.valid ? lo : NAN;
        st.max_score = st.valid ? hi : NAN;
        st.seconds = (double)(rlpi_now_ns() - t0) * 1e-9;
        /* only the fields the caller's version has */
        memcpy(stats, &st, stats->version >= 2 ? sizeof st : offsetof(rlp_reward_stats, crashed));
    }
    return RLP_OK;
}

int rlp_reward_fn_score_one(rlp_reward_result *out, rlp_reward_fn *fn, const rlp_reward_request *request)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(fn, "fn is NULL");
    RLPI_CHECK_ARG(request, "request is NULL");
    RLPI_CHECK_ARG(request->version >= 1, "request->version must be set to RLP_REWARD_REQUEST_VERSION");
    RLPI_CHECK_ARG(request->completion_text || request->completion_len == 0, "completion_text is NULL");
    RLPI_CHECK_ARG(request->prompt_text || request->prompt_len == 0, "prompt_text is NULL");
    RLPI_CHECK_ARG(request->completion_tokens || request->n_completion_tokens == 0, "completion_tokens is NULL");
    rlp_reward_request r = *request;
    r.version = RLP_REWARD_REQUEST_VERSION;
    if (!r.completion_text)
        r.completion_text = "";
    if (!r.prompt_text)
        r.prompt_text = "";
    rlpi_outcome o;
    memset(&o, 0, sizeof o);
    uint64_t abandoned = 0;
    pthread_mutex_lock(&fn->mu);
    int rc = run(fn, &r, 1, &o, &abandoned);
    pthread_mutex_unlock(&fn->mu);
    if (rc)
        return rc;
    memset(out, 0, sizeof *out);
    out->version = RLP_REWARD_RESULT_VERSION;
    out->valid = o.valid;
    out->score = o.valid ? o.score : NAN;
    snprintf(out->reason, sizeof out->reason, "%s", o.reason);
    rlpi_outcome_clear(&o);
    return RLP_OK;
}
