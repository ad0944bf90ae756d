/* `rlpost train` / `rlpost eval`: what the driver reports beyond the
 * trainer's step record — greedy and sampled evaluations on held-out
 * prompts with 95 % intervals (rlp_trainer_generate, rlp_stats_*), the
 * overlap of the held-out questions with the training prompts, the change
 * from the first evaluation to the last, and samples.jsonl (each sample
 * with every reward term, format, correctness and advantage). */
#define _GNU_SOURCE 1
#include "train.h"
#include "train_config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Generate and score                                                       */
/* ------------------------------------------------------------------------ */

typedef struct scores {
    size_t n, n_valid;
    double mean, std, min, max;
    double format_rate, format_mean; /* NaN without a format scorer */
    double accuracy;                 /* NaN without an accuracy scorer */
    double parse_rate;               /* answer_parse_rate; NaN without a parse scorer */
    size_t completion_tokens;
    size_t truncated;
    uint64_t reward_failed[4];       /* the training reward's errors, timeouts, non-finite scores, crashed workers */
} scores;

/* Per-sample scores of one scored batch (each NULL or n floats, NaN where
 * the sample is invalid): what samples.jsonl shows. */
typedef struct detail {
    float *format, *acc, *parse, *reward;
    float **terms; /* n_terms arrays */
} detail;

static void detail_free(detail *d, size_t n_terms)
{
    free(d->format);
    free(d->acc);
    free(d->parse);
    free(d->reward);
    for (size_t i = 0; d->terms && i < n_terms; i++)
        free(d->terms[i]);
    free(d->terms);
    memset(d, 0, sizeof *d);
}

/* The rewards now in the batch into a new array (NaN where invalid). */
static float *keep_rewards(const rlp_batch *batch)
{
    size_t n;
    rlp_batch_size(&n, batch);
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, batch, i);
        v[i] = t.valid ? t.reward : NAN;
    }
    return v;
}

/* Runs fn over the batch and returns (fraction ≥ thr, mean) over valid samples. */
static int score_with(rlp_reward_fn *fn, rlp_batch *batch, double thr, double *frac, double *mean)
{
    rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
    int rc = rlp_reward_fn_score(fn, batch, &st);
    if (rc)
        return rc;
    size_t n, hit = 0, valid = 0;
    double sum = 0;
    rlp_batch_size(&n, batch);
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, batch, i);
        if (!t.valid || isnan(t.reward))
            continue;
        valid++;
        sum += t.reward;
        hit += t.reward >= thr;
    }
    *frac = n ? (double)hit / (double)n : NAN;
    *mean = valid ? sum / (double)valid : NAN;
    return RLP_OK;
}

/* Mean, spread, tokens and truncations of the rewards in a scored batch. */
static void reward_summary(const rlp_batch *batch, scores *sc)
{
    rlp_batch_size(&sc->n, batch);
    double sum = 0, sq = 0;
    sc->min = INFINITY;
    sc->max = -INFINITY;
    for (size_t i = 0; i < sc->n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, batch, i);
        sc->completion_tokens += t.n_completion_tokens;
        sc->truncated += t.finish_reason == RLP_FINISH_LENGTH;
        if (!t.valid || isnan(t.reward))
            continue;
        sc->n_valid++;
        sum += t.reward;
        sq += (double)t.reward * t.reward;
        sc->min = fmin(sc->min, t.reward);
        sc->max = fmax(sc->max, t.reward);
    }
    if (sc->n_valid) {
        sc->mean = sum / (double)sc->n_valid;
        sc->std = sc->n_valid > 1 ? sqrt(fmax(0, (sq - sum * sc->mean) / (double)(sc->n_valid - 1))) : 0;
    } else {
        sc->mean = sc->std = sc->min = sc->max = NAN;
    }
}

/* Format, accuracy and answer parsing first, the training reward last:
 * what stays in the batch is the reward the step trains on. With det, the
 * per-sample scores are kept too (and each term of a combined reward, when
 * terms is set). */
static int score_detail(run *r, rlp_batch *batch, scores *sc, detail *det, int terms)
{
    memset(sc, 0, sizeof *sc);
    sc->format_rate = sc->format_mean = sc->accuracy = sc->parse_rate = NAN;
    double unused;
    int rc = RLP_OK;
    if (r->format_fn && !(rc = score_with(r->format_fn, batch, 0.5, &sc->format_rate, &sc->format_mean)) && det)
        det->format = keep_rewards(batch);
    if (!rc && r->acc_fn && !(rc = score_with(r->acc_fn, batch, r->acc_threshold, &sc->accuracy, &unused)) && det)
        det->acc = keep_rewards(batch);
    if (!rc && r->parse_fn && !(rc = score_with(r->parse_fn, batch, 0.5, &sc->parse_rate, &unused)) && det)
        det->parse = keep_rewards(batch);
    if (!rc && det && terms && r->n_terms && (det->terms = calloc(r->n_terms, sizeof *det->terms)))
        for (size_t i = 0; !rc && i < r->n_terms; i++)
            if (!(rc = score_with(r->terms[i], batch, 0, &unused, &unused)))
                det->terms[i] = keep_rewards(batch);
    rlp_reward_stats st = {.version = RLP_REWARD_STATS_VERSION};
    if (!rc && !(rc = rlp_reward_fn_score(r->reward, batch, &st))) {
        if (st.crashed)
            fprintf(stderr, "reward: %llu samples invalid: their reward worker died (see samples.jsonl)\n",
                    (unsigned long long)st.crashed);
        reward_summary(batch, sc);
        sc->reward_failed[0] = st.errors;
        sc->reward_failed[1] = st.timeouts;
        sc->reward_failed[2] = st.nonfinite;
        sc->reward_failed[3] = st.crashed;
        if (det)
            det->reward = keep_rewards(batch);
    }
    return rc;
}


/* ------------------------------------------------------------------------ */
/* Evaluation                                                               */
/* ------------------------------------------------------------------------ */

static json_t *jflag(const float *v, size_t i, double thr)
{
    return v && !isnan(v[i]) ? json_boolean(v[i] >= thr) : json_null();
}

/* samples.jsonl: trajectory i of a scored batch with the prompt, the whole
 * completion, the reference, the training reward and each of its terms,
 * format, correctness, whether an answer was found, and the advantage. */
static json_t *sample_record(const run *r, const rlp_batch *batch, size_t i, const detail *d, const float *adv)
{
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    rlp_batch_get(&t, batch, i);
    json_t *rec = json_object(), *meta = t.metadata_json ? json_loads(t.metadata_json, 0, NULL) : NULL;
    json_t *ref = json_object_get(meta, "reference");
    json_object_set_new(rec, "prompt", json_string(t.prompt_text ? t.prompt_text : ""));
    json_object_set_new(rec, "completion", json_string(t.completion_text ? t.completion_text : ""));
    json_object_set_new(rec, "reference", ref ? json_incref(ref) : json_null());
    json_object_set_new(rec, "reward", d->reward ? jnum(d->reward[i]) : json_null());
    if (d->terms) {
        json_t *terms = json_object();
        for (size_t k = 0; k < r->n_terms; k++)
            json_object_set_new(terms, r->term_names[k], d->terms[k] ? jnum(d->terms[k][i]) : json_null());
        json_object_set_new(rec, "reward_terms", terms);
    }
    json_object_set_new(rec, "format", jflag(d->format, i, 0.5));
    json_object_set_new(rec, "correct", jflag(d->acc, i, r->acc_threshold));
    json_object_set_new(rec, "answer_parsed", jflag(d->parse, i, 0.5));
    if (adv)
        json_object_set_new(rec, "advantage", jnum(adv[i]));
    json_object_set_new(rec, "completion_tokens", json_integer((json_int_t)t.n_completion_tokens));
    json_object_set_new(rec, "truncated", json_boolean(t.finish_reason == RLP_FINISH_LENGTH));
    if (!t.valid)
        json_object_set_new(rec, "invalid", json_string(t.error ? t.error : "invalid"));
    if (t.has_episode) {
        static const char *const ends[] = {"running", "done", "max_turns", "budget", "error", "abort"};
        const rlp_episode_stats *e = &t.episode;
        json_object_set_new(rec, "episode",
                            json_pack("{s:i, s:i, s:i, s:i, s:i, s:s, s:f}", "turns", (int)e->turns, "tool_calls",
                                      (int)e->tool_calls, "tool_errors", (int)e->tool_errors, "observation_tokens",
                                      (int)e->observation_tokens, "observations_cut", (int)e->observations_cut, "end",
                                      e->end >= 0 && e->end <= 5 ? ends[e->end] : "?", "tool_seconds",
                                      e->tool_seconds));
    }
    json_decref(meta);
    return rec;
}

/* One decoding mode of an evaluation (greedy, or k samples per prompt at
 * the training temperature) over the same n prompts: its figures with 95 %
 * intervals go into rec under `prefix`, its per-prompt accuracies into
 * rec[prefix "correct"], every completion into samples. 0, or -1 with err. */
static int eval_pass(run *r, const rlp_prompt_set *set, size_t n, int greedy, uint32_t k, long long step,
                     json_t *rec, json_t *samples, char *err)
{
    rlp_sampling_options s = r->sampling;
    s.n = k;
    if (greedy)
        s.temperature = 0;
    s.seed = mix_seed((uint64_t)cfg_int(r->cfg, "seed"), (UINT64_C(1) << 62) + (greedy ? 0 : 1));
    rlp_batch *batch = NULL;
    scores sc;
    detail d = {0};
    int rc = rlp_trainer_generate(&batch, r->trainer, set, &s);
    if (!rc)
        rc = score_detail(r, batch, &sc, &d, 1);
    if (rc)
        fmt(err, ERR_CAP, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
    size_t total = 0;
    if (!rc)
        rlp_batch_size(&total, batch);
    if (!rc && total != n * k) {
        fmt(err, ERR_CAP, "%zu completions for %zu prompts × %u", total, n, k);
        rc = RLP_E_INTERNAL;
    }
    double *per = rc ? NULL : calloc(n ? n : 1, sizeof *per);
    size_t hits = 0, fmt_hits = 0, parse_hits = 0, episodes = 0, with_call = 0, turns = 0;
    const char *mode = greedy ? "greedy" : "sampled";
    for (size_t i = 0; per && i < total; i++) {
        /* completions come prompt-major: k samples of prompt 0, then of prompt 1, … */
        int ok = d.acc && !isnan(d.acc[i]) && d.acc[i] >= r->acc_threshold;
        per[i / k] += ok ? 1.0 / k : 0.0;
        hits += ok;
        fmt_hits += d.format && !isnan(d.format[i]) && d.format[i] >= 0.5;
        parse_hits += d.parse && !isnan(d.parse[i]) && d.parse[i] >= 0.5;
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        if (!rlp_batch_get(&tr, batch, i) && tr.has_episode) {
            episodes++;
            with_call += tr.episode.tool_calls > 0;
            turns += tr.episode.turns;
        }
        json_t *x = sample_record(r, batch, i, &d, NULL);
        json_object_set_new(x, "kind", json_string("eval"));
        json_object_set_new(x, "step", json_integer(step));
        json_object_set_new(x, "mode", json_string(mode));
        json_object_set_new(x, "prompt_index", json_integer((json_int_t)(i / k)));
        json_object_set_new(x, "sample", json_integer((json_int_t)(i % k)));
        json_array_append_new(samples, x);
    }
    if (per) {
        char key[64];
        double lo, hi;
        json_t *arr = json_array();
        for (size_t p = 0; p < n; p++)
            json_array_append_new(arr, json_real(per[p]));
        fmt(key, sizeof key, "%s_accuracy", mode);
        json_object_set_new(rec, key, r->acc_fn ? json_real((double)hits / (double)total) : json_null());
        /* greedy: one Bernoulli trial per prompt (Wilson); sampled: the k
         * samples of a prompt are correlated, so prompts are resampled */
        if (greedy)
            rlp_stats_wilson(&lo, &hi, hits, total, EVAL_Z95);
        else
            rlp_stats_bootstrap_mean(&lo, &hi, per, n, EVAL_BOOTSTRAP, (uint64_t)step * 2 + 1);
        fmt(key, sizeof key, "%s_accuracy_ci", mode);
        json_object_set_new(rec, key, r->acc_fn ? json_pack("[f, f]", lo, hi) : json_null());
        fmt(key, sizeof key, "%s_format_rate", mode);
        json_object_set_new(rec, key, r->format_fn ? json_real((double)fmt_hits / (double)total) : json_null());
        rlp_stats_wilson(&lo, &hi, fmt_hits, total, EVAL_Z95);
        fmt(key, sizeof key, "%s_format_rate_ci", mode);
        json_object_set_new(rec, key, r->format_fn ? json_pack("[f, f]", lo, hi) : json_null());
        fmt(key, sizeof key, "%s_answer_parse_rate", mode);
        json_object_set_new(rec, key, r->parse_fn ? json_real((double)parse_hits / (double)total) : json_null());
        fmt(key, sizeof key, "%s_reward_mean", mode);
        json_object_set_new(rec, key, jnum(sc.mean));
        fmt(key, sizeof key, "%s_mean_completion_tokens", mode);
        json_object_set_new(rec, key, json_real((double)sc.completion_tokens / (double)(total ? total : 1)));
        fmt(key, sizeof key, "%s_truncated", mode);
        json_object_set_new(rec, key, json_integer((json_int_t)sc.truncated));
        fmt(key, sizeof key, "%s_correct", mode);
        json_object_set_new(rec, key, r->acc_fn ? arr : (json_decref(arr), json_null())); /* no verifier: no change to report */
        if (episodes) { /* multi-turn: how often the model used a tool, with its interval */
            fmt(key, sizeof key, "%s_tool_call_rate", mode);
            json_object_set_new(rec, key, json_real((double)with_call / (double)episodes));
            rlp_stats_wilson(&lo, &hi, with_call, episodes, EVAL_Z95);
            fmt(key, sizeof key, "%s_tool_call_rate_ci", mode);
            json_object_set_new(rec, key, json_pack("[f, f]", lo, hi));
            fmt(key, sizeof key, "%s_turns_mean", mode);
            json_object_set_new(rec, key, json_real((double)turns / (double)episodes));
        }
        if (!greedy)
            json_object_set_new(rec, "sampled_k", json_integer(k));
        /* the fields of earlier versions: the first mode evaluated */
        if (!json_object_get(rec, "accuracy")) {
            json_object_set_new(rec, "accuracy", jnum(sc.accuracy));
            json_object_set_new(rec, "format_rate", jnum(sc.format_rate));
            json_object_set_new(rec, "format_reward_mean", jnum(sc.format_mean));
            json_object_set_new(rec, "answer_parse_rate", jnum(sc.parse_rate));
            json_object_set_new(rec, "reward_mean", jnum(sc.mean));
            json_object_set_new(rec, "mean_completion_tokens",
                                json_real((double)sc.completion_tokens / (double)(total ? total : 1)));
        }
    } else if (!rc) {
        fmt(err, ERR_CAP, "out of memory");
        rc = RLP_E_NOMEM;
    }
    free(per);
    detail_free(&d, r->n_terms);
    rlp_batch_free(batch);
    return rc ? -1 : 0;
}

/* How many of the held-out prompts' questions are among the questions of
 * the training prompts this run draws (steps × prompts_per_step from the
 * training task, from step 1; the first 200,000 of a longer run): 0 for a
 * held-out set that deserves the name. Counted once, on a copy of the
 * training task. */
#define OVERLAP_MAX_PROMPTS 200000
static void count_overlap(run *r, const rlp_prompt_set *held)
{
    r->overlap = r->overlap_checked = 0;
    long long total = cfg_int(r->cfg, "steps") * cfg_int(r->cfg, "prompts_per_step");
    total = total < OVERLAP_MAX_PROMPTS ? total : OVERLAP_MAX_PROMPTS;
    rlp_task *t;
    if (total <= 0 || train_make_task(r, 0, &t))
        return;
    json_t *seen = json_object(); /* questions as keys: a hash set */
    for (long long done = 0; done < total;) {
        size_t k = (size_t)(total - done < 4096 ? total - done : 4096), m = 0;
        rlp_prompt_set *set = NULL;
        if (rlp_task_next_batch(&set, t, k, NULL) || rlp_prompt_set_size(&m, set))
            break;
        for (size_t i = 0; i < m; i++) {
            rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
            if (!rlp_prompt_set_item(&it, set, i) && it.question)
                json_object_set_new(seen, it.question, json_true());
        }
        rlp_prompt_set_free(set);
        done += (long long)k;
        r->overlap_checked = done;
    }
    size_t n = 0;
    rlp_prompt_set_size(&n, held);
    for (size_t i = 0; i < n; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        if (!rlp_prompt_set_item(&it, held, i) && it.question && json_object_get(seen, it.question))
            r->overlap++;
    }
    json_decref(seen);
    rlp_task_free(t);
}

/* Greedy and/or sampled completions (eval.greedy, eval.samples) on the first
 * eval.n prompts of the held-out task; the same prompts every time, so two
 * evaluations compare prompt by prompt. Every completion goes to
 * samples.jsonl when out is set. */
json_t *train_evaluate(run *r, long long step, const char *out, json_t **keep)
{
    long long n = cfg_int(r->cfg, "eval.n");
    if (n <= 0)
        return NULL;
    double t0 = now_s();
    rlp_task *task;
    if (train_make_task(r, 1, &task)) {
        fprintf(stderr, "rlpost eval: %s\n", r->err);
        return NULL;
    }
    uint64_t size = 0;
    rlp_task_size(&size, task);
    if (size > 0 && (uint64_t)n > size)
        n = (long long)size; /* a finite held-out set: each prompt once */
    rlp_prompt_set *set = NULL;
    char err[ERR_CAP] = "";
    int rc = rlp_task_next_batch(&set, task, (size_t)n, r->tok);
    if (rc)
        fmt(err, sizeof err, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
    rlp_task_free(task);
    json_t *rec = json_object(), *samples = json_array();
    json_object_set_new(rec, "step", json_integer(step));
    json_object_set_new(rec, "n", json_integer(n));
    json_object_set_new(rec, "greedy", json_boolean(cfg_bool(r->cfg, "eval.greedy")));
    const char *task_name = cfg_str(r->cfg, "task.name");
    if (!rc && r->overlap < 0)
        count_overlap(r, set);
    int held_out = (strcmp(task_name, "jsonl") || cfg_str(r->cfg, "eval.path")) && r->overlap == 0;
    json_object_set_new(rec, "held_out", json_boolean(held_out));
    json_object_set_new(rec, "train_overlap", json_integer(r->overlap));
    json_object_set_new(rec, "train_prompts_checked", json_integer(r->overlap_checked));
    if (!rc && cfg_bool(r->cfg, "eval.greedy"))
        rc = eval_pass(r, set, (size_t)n, 1, 1, step, rec, samples, err);
    if (!rc && cfg_int(r->cfg, "eval.samples") > 0)
        rc = eval_pass(r, set, (size_t)n, 0, (uint32_t)cfg_int(r->cfg, "eval.samples"), step, rec, samples, err);
    rlp_prompt_set_free(set);
    if (rc) {
        fprintf(stderr, "rlpost eval: %s\n", err);
        json_decref(rec);
        json_decref(samples);
        return NULL;
    }
    json_object_set_new(rec, "seconds", json_real(now_s() - t0));
    if (out)
        train_append_jsonl_all(out, "samples.jsonl", samples, 9);
    if (keep)
        *keep = json_incref(samples);
    json_t *g = json_object_get(rec, "greedy_accuracy"), *sm = json_object_get(rec, "sampled_accuracy");
    json_t *gc = json_object_get(rec, "greedy_accuracy_ci"), *smc = json_object_get(rec, "sampled_accuracy_ci");
    char gtxt[96] = "", stxt[96] = "";
    if (json_is_number(g))
        fmt(gtxt, sizeof gtxt, " | greedy acc %.3f [%.3f, %.3f]", json_number_value(g),
            json_number_value(json_array_get(gc, 0)), json_number_value(json_array_get(gc, 1)));
    if (json_is_number(sm))
        fmt(stxt, sizeof stxt, " | sampled acc %.3f [%.3f, %.3f] (k=%lld)", json_number_value(sm),
            json_number_value(json_array_get(smc, 0)), json_number_value(json_array_get(smc, 1)),
            cfg_int(r->cfg, "eval.samples"));
    json_t *fr = json_object_get(rec, "format_rate"), *pr = json_object_get(rec, "answer_parse_rate");
    fprintf(stderr, "eval  step %lld | %lld prompts%s%s | %.1f s\n", step, n, gtxt, stxt, now_s() - t0);
    if (json_is_number(fr))
        fprintf(stderr, "      format rate %.3f\n", json_number_value(fr));
    if (json_is_number(pr))
        fprintf(stderr, "      answer parse rate %.3f\n", json_number_value(pr));
    if (!strcmp(task_name, "jsonl") && !cfg_str(r->cfg, "eval.path"))
        fprintf(stderr, "      warning: eval.path is null, so these prompts come from the training file: "
                        "not held out\n");
    if (r->overlap > 0)
        fprintf(stderr, "      warning: %lld of the %lld held-out questions are among the %lld training prompts of "
                        "this run: not held out\n", r->overlap, n, r->overlap_checked);
    json_decref(samples);
    return rec;
}

/* The change from the first evaluation to the last, prompt by prompt, with
 * paired bootstrap 95 % intervals: {"greedy": {"first", "last", "delta",
 * "delta_ci"}, "sampled": {…}}, or NULL. */
json_t *train_eval_change(const json_t *first, const json_t *last)
{
    if (!first || !last)
        return NULL;
    json_t *out = json_object();
    static const char *const modes[2] = {"greedy", "sampled"};
    for (int m = 0; m < 2; m++) {
        char key[64];
        fmt(key, sizeof key, "%s_correct", modes[m]);
        const json_t *a = json_object_get(first, key), *b = json_object_get(last, key);
        size_t n = json_array_size(a);
        if (!n || json_array_size(b) != n)
            continue;
        double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), lo = NAN, hi = NAN, sa = 0, sb = 0;
        for (size_t i = 0; x && y && i < n; i++) {
            sa += x[i] = json_number_value(json_array_get(a, i));
            sb += y[i] = json_number_value(json_array_get(b, i));
        }
        if (x && y)
            rlp_stats_bootstrap_paired(&lo, &hi, x, y, n, EVAL_BOOTSTRAP, UINT64_C(0x5eed));
        json_object_set_new(out, modes[m], json_pack("{s:f, s:f, s:f, s:[f, f], s:b}", "first", sa / (double)n,
                                                     "last", sb / (double)n, "delta", (sb - sa) / (double)n,
                                                     "delta_ci", lo, hi, "ci_excludes_zero", lo > 0 || hi < 0));
        free(x);
        free(y);
    }
    return out;
}

/* samples.jsonl: samples.per_step completions of a training step's scored
 * batch, spread over its groups, each with every reward term and the
 * advantage the step gives it. The chosen trajectories are scored again on
 * a copy (the batch keeps its training reward). */
static void step_samples(run *r, const rlp_batch *batch, long long step)
{
    size_t n = 0, want = (size_t)cfg_int(r->cfg, "samples.per_step");
    rlp_batch_size(&n, batch);
    if (want == 0 || n == 0)
        return;
    want = want < n ? want : n;
    float *adv = malloc(n * sizeof *adv);
    rlp_batch *copy = NULL;
    size_t *pick = malloc(want * sizeof *pick);
    int rc = adv && pick ? RLP_OK : RLP_E_NOMEM;
    /* GAE's advantage is per token, from the critic's values: no one number a sample (null) */
    for (size_t i = 0; !rc && r->rl.advantage == RLP_ADV_GAE && i < n; i++)
        adv[i] = NAN;
    if (!rc && r->rl.advantage != RLP_ADV_GAE)
        rc = rlp_rl_advantages(adv, n, batch, &r->rl);
    if (!rc)
        rc = rlp_batch_create(&copy);
    for (size_t j = 0; !rc && j < want; j++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        pick[j] = j * n / want;
        if (!(rc = rlp_batch_get(&t, batch, pick[j])))
            rc = rlp_batch_append(copy, &t);
    }
    scores sc;
    detail d = {0};
    if (!rc)
        rc = score_detail(r, copy, &sc, &d, 1);
    if (!rc) {
        json_t *arr = json_array();
        for (size_t j = 0; j < want; j++) {
            json_t *x = sample_record(r, copy, j, &d, NULL);
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            rlp_batch_get(&t, batch, pick[j]);
            json_object_set_new(x, "kind", json_string("train"));
            json_object_set_new(x, "step", json_integer(step));
            json_object_set_new(x, "group_id", json_integer((json_int_t)t.group_id));
            json_object_set_new(x, "sample", json_integer((json_int_t)t.sample_index));
            json_object_set_new(x, "advantage", jnum(adv[pick[j]]));
            json_object_set_new(x, "policy_version", json_integer((json_int_t)t.policy_version));
            json_array_append_new(arr, x);
        }
        train_append_jsonl_all(r->out, "samples.jsonl", arr, 9);
        json_decref(arr);
    } else {
        fprintf(stderr, "rlpost train: step %lld: samples.jsonl: %s\n", step, rlp_error_last());
    }
    detail_free(&d, r->n_terms);
    rlp_batch_free(copy);
    free(adv);
    free(pick);
}

/* The trainer's on_batch: rank 0 writes each step's samples. */
int train_on_batch(const rlp_batch *batch, uint64_t step, void *payload)
{
    run *r = payload;
    if (r->rank == 0)
        step_samples(r, batch, (long long)step);
    return 0;
}

