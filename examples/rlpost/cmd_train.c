/* `rlpost train` and `rlpost eval`: the main job on the public API only.
 * One step: prompts from a task → a group of samples each → reward → one
 * rlp_policy_train_rl() step → a metrics record. Three modes (sync.mode):
 * synchronous (an engine sharing the policy's weights), sequential pull (an
 * engine with its own copy refreshed before each generate, or `rlpost
 * serve` workers at rollout.urls told to load each published version) and
 * asynchronous push-pull (a rollout thread or the workers generate ahead
 * into a replay buffer through the staleness gate; train_rollout.c).
 * Checkpoints are folders written under a temporary name and renamed;
 * sampling seeds are a pure function of (seed, step), so a resumed run
 * repeats the uninterrupted one. */
#define _GNU_SOURCE 1
#include "commands.h"
#include "json_out.h"
#include "rlpost.h"
#include "eval_stats.h"
#include "train.h"
#include "train_config.h"

#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct named {
    const char *name;
    int value;
} named;

static const named advantages[] = {{"grpo", RLP_ADV_GRPO}, {"dr_grpo", RLP_ADV_DR_GRPO}, {"rloo", RLP_ADV_RLOO},
                                   {"reinforce_pp", RLP_ADV_REINFORCE_PP}, {"reinforce", RLP_ADV_REINFORCE},
                                   {NULL, 0}};
static const named losses[] = {{"ppo_clip", RLP_LOSS_PPO_CLIP}, {"decoupled_ppo", RLP_LOSS_DECOUPLED_PPO},
                               {"gspo", RLP_LOSS_GSPO}, {NULL, 0}};
static const named kl_estimators[] = {{"k1", RLP_KL_K1}, {"k2", RLP_KL_K2}, {"k3", RLP_KL_K3}, {NULL, 0}};
static const named aggs[] = {{"token-mean", RLP_AGG_TOKEN_MEAN}, {"seq-mean-token-sum", RLP_AGG_SEQ_MEAN_TOKEN_SUM},
                             {"seq-mean-token-mean", RLP_AGG_SEQ_MEAN_TOKEN_MEAN},
                             {"seq-mean-token-sum-norm", RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM}, {NULL, 0}};
static const named schedules[] = {{"constant", RLP_LR_CONSTANT}, {"linear_warmup", RLP_LR_LINEAR_WARMUP},
                                  {"cosine", RLP_LR_COSINE}, {NULL, 0}};
static const named dtypes[] = {{"f32", RLP_DTYPE_F32}, {"f16", RLP_DTYPE_F16}, {"bf16", RLP_DTYPE_BF16}, {NULL, 0}};

/* The entry point a reward library exports (docs/configuration.md). */
typedef int (*reward_entry_fn)(rlp_reward_fn **out, const char *options_json);
#define REWARD_ENTRY "rlpost_reward_create"


static volatile sig_atomic_t stop_requested;

static void on_sigint(int sig)
{
    (void)sig;
    stop_requested = 1;
    signal(SIGINT, SIG_DFL); /* a second Ctrl-C ends the process at once */
}

static int lookup(const named *table, const char *s, const char *key, int *out, char *err)
{
    for (const named *n = table; n->name; n++)
        if (s && !strcmp(s, n->name)) {
            *out = n->value;
            return 0;
        }
    int len = fmt(err, ERR_CAP, "%s: unknown value \"%s\" (one of:", key, s ? s : "");
    for (const named *n = table; n->name && len < ERR_CAP - 40; n++)
        len += fmt(err + len, (size_t)(ERR_CAP - len), " %s", n->name);
    fmt(err + len, (size_t)(ERR_CAP - len), ")");
    return -1;
}

static int readable_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fclose(f);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Checks of values, in the order of docs/configuration.md                  */
/* ------------------------------------------------------------------------ */

#define RANGE(key, cond, what)                                                   \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fmt(r->err, ERR_CAP, "%s: must be %s", key, what);              \
            return -1;                                                           \
        }                                                                        \
    } while (0)

static int check_config(run *r)
{
    json_t *c = r->cfg;
    RANGE("threads", cfg_int(c, "threads") >= 0 && cfg_int(c, "threads") <= 1024, "in [0, 1024]");
    RANGE("seed", cfg_int(c, "seed") >= 0, "≥ 0");
    RANGE("steps", cfg_int(c, "steps") >= 1 && cfg_int(c, "steps") <= 10000000, "in [1, 10000000]");
    RANGE("group_size", cfg_int(c, "group_size") >= 1 && cfg_int(c, "group_size") <= 4096, "in [1, 4096]");
    RANGE("prompts_per_step", cfg_int(c, "prompts_per_step") >= 1 && cfg_int(c, "prompts_per_step") <= 4096,
          "in [1, 4096]");
    RANGE("output", cfg_str(c, "output") && *cfg_str(c, "output"), "a folder name");
    RANGE("reward.isolation", !strcmp(cfg_str(c, "reward.isolation"), "thread") ||
          (!strcmp(cfg_str(c, "reward.isolation"), "process") && cfg_str(c, "reward.library")),
          "\"thread\" or \"process\" (\"process\" needs reward.library)");
    RANGE("reward.workers", cfg_int(c, "reward.workers") >= 0 && cfg_int(c, "reward.workers") <= 64, "in [0, 64]");
    RANGE("reward.timeout_ms", cfg_int(c, "reward.timeout_ms") >= 0 && cfg_int(c, "reward.timeout_ms") <= 86400000,
          "in [0, 86400000]");
    RANGE("reward.batch_size", cfg_int(c, "reward.batch_size") >= 1 && cfg_int(c, "reward.batch_size") <= 4096,
          "in [1, 4096]");
    RANGE("reward.max_restarts",
          cfg_int(c, "reward.max_restarts") >= 0 && cfg_int(c, "reward.max_restarts") <= 100000, "in [0, 100000]");

    rlp_sampling_options *s = &r->sampling;
    rlp_sampling_options_init(s, RLP_SAMPLING_OPTIONS_VERSION);
    s->n = (uint32_t)cfg_int(c, "group_size");
    s->temperature = (float)cfg_num(c, "sampling.temperature");
    s->top_p = (float)cfg_num(c, "sampling.top_p");
    s->top_k = (int32_t)cfg_int(c, "sampling.top_k");
    s->min_p = (float)cfg_num(c, "sampling.min_p");
    RANGE("sampling.temperature", s->temperature >= 0 && s->temperature <= 100, "in [0, 100]");
    RANGE("sampling.top_p", s->top_p > 0 && s->top_p <= 1, "in (0, 1]");
    RANGE("sampling.top_k", cfg_int(c, "sampling.top_k") >= 0 && cfg_int(c, "sampling.top_k") < INT32_MAX, "≥ 0");
    RANGE("sampling.min_p", s->min_p >= 0 && s->min_p <= 1, "in [0, 1]");
    RANGE("sampling.max_new_tokens",
          cfg_int(c, "sampling.max_new_tokens") >= 1 && cfg_int(c, "sampling.max_new_tokens") <= 1 << 20,
          "in [1, 1048576]");
    s->max_new_tokens = (uint32_t)cfg_int(c, "sampling.max_new_tokens");

    rlp_rl_options *rl = &r->rl;
    rlp_rl_options_init(rl, RLP_RL_OPTIONS_VERSION);
    if (lookup(advantages, cfg_str(c, "algorithm.advantage"), "algorithm.advantage", &rl->advantage, r->err) ||
        lookup(losses, cfg_str(c, "algorithm.policy_loss"), "algorithm.policy_loss", &rl->policy_loss, r->err) ||
        lookup(aggs, cfg_str(c, "algorithm.loss_agg"), "algorithm.loss_agg", &rl->loss_agg, r->err))
        return -1;
    int kl_est;
    if (lookup(kl_estimators, cfg_str(c, "algorithm.kl_estimator"), "algorithm.kl_estimator", &kl_est, r->err))
        return -1;
    if (cfg_int(c, "group_size") < 2 &&
        (rl->advantage == RLP_ADV_GRPO || rl->advantage == RLP_ADV_RLOO || rl->advantage == RLP_ADV_DR_GRPO)) {
        fmt(r->err, ERR_CAP, "group_size: 1 with advantage \"%s\" gives every sample a zero advantage "
                 "(a group needs ≥ 2 samples)", cfg_str(c, "algorithm.advantage"));
        return -1;
    }
    rl->adv_eps = (float)cfg_num(c, "algorithm.adv_eps");
    rl->adv_batch_norm = cfg_bool(c, "algorithm.adv_batch_norm");
    rl->gamma = (float)cfg_num(c, "algorithm.gamma");
    rl->filter_equal_groups = cfg_bool(c, "algorithm.filter_equal_groups");
    rl->clip_low = (float)cfg_num(c, "algorithm.clip_low");
    rl->clip_high = (float)cfg_num(c, "algorithm.clip_high");
    rl->dual_clip = (float)cfg_num(c, "algorithm.dual_clip");
    rl->tis_cap = (float)cfg_num(c, "algorithm.tis_cap");
    rl->behav_cap = (float)cfg_num(c, "algorithm.behav_cap");
    rl->behav_mask = cfg_bool(c, "algorithm.behav_mask");
    rl->kl_coef = (float)cfg_num(c, "algorithm.kl_coef");
    rl->kl_estimator = rl->kl_coef > 0 ? kl_est : 0;
    rl->kl_in_reward = cfg_bool(c, "algorithm.kl_in_reward");
    rl->entropy_coef = (float)cfg_num(c, "algorithm.entropy_coef");
    rl->agg_norm_constant = (float)cfg_num(c, "algorithm.agg_norm_constant");
    RANGE("algorithm.clip_low", rl->clip_low >= 0 && rl->clip_low < 1, "in [0, 1)");
    RANGE("algorithm.clip_high", rl->clip_high >= 0 && rl->clip_high <= 100, "in [0, 100]");
    RANGE("algorithm.kl_coef", rl->kl_coef >= 0, "≥ 0");
    RANGE("algorithm.agg_norm_constant", rl->agg_norm_constant >= 0 && isfinite(rl->agg_norm_constant),
          "≥ 0 (0: the step's longest sequence)");
    RANGE("algorithm.gamma", rl->gamma >= 0 && rl->gamma <= 1, "in [0, 1]");
    RANGE("algorithm.overlong_max", cfg_int(c, "algorithm.overlong_max") >= 0, "≥ 0");
    RANGE("algorithm.overlong_cache", cfg_int(c, "algorithm.overlong_cache") >= 0, "≥ 0");
    RANGE("algorithm.ppo_epochs", cfg_int(c, "algorithm.ppo_epochs") >= 1 && cfg_int(c, "algorithm.ppo_epochs") <= 1000,
          "in [1, 1000]");
    RANGE("algorithm.mini_batches",
          cfg_int(c, "algorithm.mini_batches") >= 1 && cfg_int(c, "algorithm.mini_batches") <= 4096, "in [1, 4096]");
    RANGE("algorithm.micro_batch_tokens", cfg_int(c, "algorithm.micro_batch_tokens") >= 0, "≥ 0");
    rl->overlong_max = (uint32_t)cfg_int(c, "algorithm.overlong_max");
    rl->overlong_cache = (uint32_t)cfg_int(c, "algorithm.overlong_cache");
    rl->ppo_epochs = (uint32_t)cfg_int(c, "algorithm.ppo_epochs");
    rl->mini_batches = (uint32_t)cfg_int(c, "algorithm.mini_batches");
    rl->micro_batch_tokens = (uint32_t)cfg_int(c, "algorithm.micro_batch_tokens");

    rlp_optimizer_options *o = &r->opt;
    rlp_optimizer_options_init(o, RLP_OPTIMIZER_OPTIONS_VERSION);
    if (lookup(schedules, cfg_str(c, "optimizer.schedule"), "optimizer.schedule", &o->schedule, r->err))
        return -1;
    o->lr = (float)cfg_num(c, "optimizer.lr");
    o->beta1 = (float)cfg_num(c, "optimizer.beta1");
    o->beta2 = (float)cfg_num(c, "optimizer.beta2");
    o->eps = (float)cfg_num(c, "optimizer.eps");
    o->weight_decay = (float)cfg_num(c, "optimizer.weight_decay");
    o->max_grad_norm = (float)cfg_num(c, "optimizer.max_grad_norm");
    o->warmup_steps = cfg_int(c, "optimizer.warmup_steps");
    o->min_lr_ratio = (float)cfg_num(c, "optimizer.min_lr_ratio");
    o->total_steps = cfg_int(c, "steps") * rl->ppo_epochs * rl->mini_batches;
    RANGE("optimizer.lr", o->lr >= 0 && o->lr < 1, "in [0, 1)");
    RANGE("optimizer.warmup_steps", o->warmup_steps >= 0, "≥ 0");
    RANGE("optimizer.weight_decay", o->weight_decay >= 0, "≥ 0");
    RANGE("optimizer.beta1", o->beta1 >= 0 && o->beta1 < 1, "in [0, 1)");
    RANGE("optimizer.beta2", o->beta2 >= 0 && o->beta2 < 1, "in [0, 1)");

    const char *mode = cfg_str(c, "sync.mode");
    RANGE("sync.staleness", cfg_int(c, "sync.staleness") >= 0, "≥ 0 (η bounds how many versions old a rollout may be)");
    RANGE("sync.staleness", cfg_int(c, "sync.staleness") <= 1000000, "≤ 1000000");
    if (strcmp(mode, "sync") && strcmp(mode, "pull") && strcmp(mode, "async")) {
        fmt(r->err, ERR_CAP, "sync.mode: unknown value \"%s\" (one of: sync pull async)", mode);
        return -1;
    }
    r->pull = !strcmp(mode, "pull");
    r->async = !strcmp(mode, "async");
    r->remote = json_array_size(cfg_get(c, "rollout.urls")) > 0;
    if (r->remote && !r->pull && !r->async) {
        fmt(r->err, ERR_CAP, "rollout.urls: needs sync.mode \"pull\" or \"async\" (\"sync\" generates with "
            "the trainer's own weights)");
        return -1;
    }
    const char *backend = cfg_str(c, "backend"), *transport = cfg_str(c, "distributed.transport");
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) {
        fmt(r->err, ERR_CAP, "backend: unknown value \"%s\" (one of: cpu cuda)", backend);
        return -1;
    }
    RANGE("device", !cfg_get(c, "device") || json_is_null(cfg_get(c, "device")) || cfg_int(c, "device") >= 0, "≥ 0");
    if (strcmp(transport, "auto") && strcmp(transport, "shm") && strcmp(transport, "nccl")) {
        fmt(r->err, ERR_CAP, "distributed.transport: unknown value \"%s\" (one of: auto shm nccl)", transport);
        return -1;
    }
    RANGE("distributed.rendezvous", !cfg_str(c, "distributed.rendezvous") || *cfg_str(c, "distributed.rendezvous"),
          "a path, or null");
    RANGE("distributed.timeout_s", cfg_num(c, "distributed.timeout_s") >= 1 &&
          cfg_num(c, "distributed.timeout_s") <= 86400, "in [1, 86400]");
    if (r->world > 1) {
        if (r->async || r->remote) {
            fmt(r->err, ERR_CAP, "distributed.world_size: several ranks need sync.mode \"sync\" or \"pull\" with "
                "the ranks' own engines (not \"async\", not rollout.urls)");
            return -1;
        }
        RANGE("prompts_per_step", cfg_int(c, "prompts_per_step") >= r->world,
              "≥ the number of ranks (each rank generates a share of the step's prompts)");
    }
    RANGE("rollout.max_seq_len", cfg_int(c, "rollout.max_seq_len") >= 0, "≥ 0");
    RANGE("eval.interval", cfg_int(c, "eval.interval") >= 0, "≥ 0");
    RANGE("eval.n", cfg_int(c, "eval.n") >= 0 && cfg_int(c, "eval.n") <= 100000, "in [0, 100000]");
    RANGE("eval.samples", cfg_int(c, "eval.samples") >= 0 && cfg_int(c, "eval.samples") <= 64, "in [0, 64]");
    RANGE("eval.greedy", cfg_bool(c, "eval.greedy") || cfg_int(c, "eval.samples") > 0,
          "true when eval.samples is 0 (an evaluation needs greedy or sampled completions)");
    RANGE("samples.per_step", cfg_int(c, "samples.per_step") >= 0 && cfg_int(c, "samples.per_step") <= 1024,
          "in [0, 1024]");
    if (cfg_get(cfg_get(c, "task.options"), "split") && !strcmp(cfg_str(c, "task.name"), "arith")) {
        fmt(r->err, ERR_CAP, "task.options.split: rlpost train chooses the arith split itself (\"train\" to "
                             "train on, \"eval\" to evaluate on)");
        return -1;
    }
    RANGE("eval.seed", !cfg_get(c, "eval.seed") || json_is_null(cfg_get(c, "eval.seed")) || cfg_int(c, "eval.seed") >= 0,
          "≥ 0");
    RANGE("checkpoint.interval", cfg_int(c, "checkpoint.interval") >= 0, "≥ 0");
    RANGE("checkpoint.minutes", cfg_num(c, "checkpoint.minutes") >= 0 && cfg_num(c, "checkpoint.minutes") <= 10080,
          "in [0, 10080] (0: no timed checkpoints)");
    RANGE("checkpoint.keep", cfg_int(c, "checkpoint.keep") >= 0 && cfg_int(c, "checkpoint.keep") <= 100000,
          "in [0, 100000] (0: keep every checkpoint)");
    if (lookup(dtypes, cfg_str(c, "checkpoint.dtype"), "checkpoint.dtype", &r->dtype, r->err))
        return -1;

    const char *model = cfg_str(c, "model");
    if (!model || access(model, R_OK)) {
        fmt(r->err, ERR_CAP, "model: cannot read '%s': %s", model ? model : "", strerror(errno));
        return -1;
    }
    const char *tokp = cfg_str(c, "tokenizer");
    if (tokp && !readable_file(tokp)) {
        fmt(r->err, ERR_CAP, "tokenizer: cannot read '%s': %s", tokp, strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Task, reward                                                             */
/* ------------------------------------------------------------------------ */

static const char *task_path(const json_t *cfg, int eval, char *buf, size_t cap)
{
    const char *p = eval && cfg_str(cfg, "eval.path") ? cfg_str(cfg, "eval.path") : cfg_str(cfg, "task.path");
    if (p || strcmp(cfg_str(cfg, "task.name"), "gsm8k"))
        return p;
    const char *shared = getenv("RLPOST_SHARED_DATA");
    fmt(buf, cap, "%s/gsm8k/%s", shared ? shared : "../shared/data", eval ? "test.jsonl" : "train.jsonl");
    return buf;
}

/* A task instance: the training one (seed = config seed unless the options
 * fix it) or the held-out one (eval.seed, default seed + 1). */
static int make_task(run *r, int eval, rlp_task **out)
{
    json_t *c = r->cfg;
    const char *name = cfg_str(c, "task.name");
    json_t *opts = json_deep_copy(cfg_get(c, "task.options"));
    if (cfg_str(c, "task.template"))
        json_object_set_new(opts, "template", json_string(cfg_str(c, "task.template")));
    long long seed = cfg_int(c, "seed");
    if (json_object_get(opts, "seed"))
        seed = (long long)json_integer_value(json_object_get(opts, "seed"));
    if (eval)
        seed = cfg_get(c, "eval.seed") && !json_is_null(cfg_get(c, "eval.seed")) ? cfg_int(c, "eval.seed")
                                                                                  : seed + 1;
    json_t *over = eval ? cfg_get(c, "eval.task_options") : NULL;
    if (json_is_object(over)) {
        /* the held-out task's own options over the training task's: a K&K
         * curriculum's stages give way to a fixed people count there */
        static const char *const people[] = {"people", "min_people", "max_people"};
        for (size_t i = 0; i < 3; i++)
            if (json_object_get(over, people[i])) {
                json_object_del(opts, "curriculum_start");
                json_object_del(opts, "curriculum_end");
                json_object_del(opts, "curriculum_prompts");
                json_object_del(opts, "people");
                json_object_del(opts, "min_people");
                json_object_del(opts, "max_people");
                break;
            }
        json_object_update(opts, over);
    }
    json_object_set_new(opts, "seed", json_integer(seed));
    /* the generated arithmetic task: training and held-out problems are
     * the two sides of a fixed partition, disjoint for any seeds */
    if (!strcmp(name, "arith"))
        json_object_set_new(opts, "split", json_string(eval ? "eval" : "train"));
    if (!strcmp(name, "gsm8k") && !json_object_get(opts, "task"))
        json_object_set_new(opts, "task", json_string("gsm8k"));
    char *text = json_dumps(opts, JSON_COMPACT);
    json_decref(opts);
    int rc;
    char pbuf[PATH_MAX];
    if (!strcmp(name, "kk") || !strcmp(name, "countdown") || !strcmp(name, "arith")) {
        rc = rlp_task_create(out, name, text);
        if (rc)
            fmt(r->err, ERR_CAP, "task.options: %s", rlp_error_last());
    } else if (!strcmp(name, "gsm8k") || !strcmp(name, "jsonl")) {
        const char *path = task_path(c, eval, pbuf, sizeof pbuf);
        const char *key = eval && cfg_str(c, "eval.path") ? "eval.path" : "task.path";
        if (!path) {
            fmt(r->err, ERR_CAP, "task.path: task \"jsonl\" needs a dataset path");
            rc = RLP_E_INVALID_ARG;
        } else if (!readable_file(path)) {
            fmt(r->err, ERR_CAP, "%s: cannot read '%s': %s", key, path, strerror(errno));
            rc = RLP_E_IO;
        } else if ((rc = rlp_task_open_jsonl(out, path, text)) != RLP_OK) {
            fmt(r->err, ERR_CAP, "%s: %s", rc == RLP_E_INVALID_ARG ? "task.options" : key, rlp_error_last());
        }
    } else {
        fmt(r->err, ERR_CAP, "task.name: unknown task \"%s\" (one of: arith kk countdown gsm8k jsonl)", name);
        rc = RLP_E_INVALID_ARG;
    }
    free(text);
    return rc;
}

/* The graded format reward of examples/grpo_sync.c, as a driver-side reward
 * ("format_progress"): 0.25 per Logic-RL tag found once and after the
 * previous one, 0 when a tag is written twice. It gives a 135M model that
 * never writes the whole strict format a signal to climb. */
static int format_progress_cb(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    static const char *tags[4] = {"<think>", "</think>", "<answer>", "</answer>"};
    const char *prefix = "";
    json_t *meta = req->metadata_json ? json_loads(req->metadata_json, 0, NULL) : NULL;
    if (meta && json_is_string(json_object_get(meta, "assistant_prefix")))
        prefix = json_string_value(json_object_get(meta, "assistant_prefix"));
    size_t lp = strlen(prefix);
    char *text = malloc(lp + req->completion_len + 1);
    if (!text) {
        json_decref(meta);
        return -1;
    }
    memcpy(text, prefix, lp);
    memcpy(text + lp, req->completion_text, req->completion_len);
    text[lp + req->completion_len] = 0;
    json_decref(meta);
    const char *at = text;
    double score = 0;
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(at, tags[i]);
        if (!p)
            break;
        if (strstr(p + 1, tags[i])) {
            score = 0;
            break;
        }
        score += 0.25;
        at = p + strlen(tags[i]);
    }
    free(text);
    res->score = score;
    res->valid = 1;
    return 0;
}

static int make_one_reward(run *r, const char *name, const char *opts, rlp_reward_fn **out)
{
    if (!strcmp(name, "format_progress")) {
        rlp_reward_options ro = RLP_REWARD_OPTIONS_INIT;
        ro.name = "format_progress";
        ro.n_threads = 1;
        return rlp_reward_fn_create_callback(out, format_progress_cb, &ro, NULL);
    }
    int rc = rlp_reward_fn_create_builtin(out, name, opts);
    if (rc)
        fmt(r->err, ERR_CAP, "reward.name: %s", rlp_error_last());
    return rc;
}

/* reward.name term "W*name" → W, and name moved to the start of term;
 * "name" → 1. -1 with r->err set when W is not a finite number. */
static int reward_weight(run *r, char *term, double *w)
{
    char *star = strchr(term, '*');
    *w = 1.0;
    if (!star)
        return 0;
    *star = '\0';
    char *end;
    errno = 0;
    *w = strtod(term, &end);
    if (end == term || *end || errno || !isfinite(*w)) {
        fmt(r->err, ERR_CAP, "reward.name: '%s' is not a weight (write W*name, e.g. 2*gsm8k)", term);
        return -1;
    }
    memmove(term, star + 1, strlen(star + 1) + 1);
    return 0;
}

/* reward.library (dlopen) or reward.name: a built-in, the driver's
 * "format_progress", or several joined by '+' (summed), each optionally
 * weighted as W*name. */
static int make_reward(run *r)
{
    json_t *c = r->cfg;
    char *opts = json_dumps(cfg_get(c, "reward.options"), JSON_COMPACT);
    int rc = RLP_OK;
    const char *lib = cfg_str(c, "reward.library");
    if (lib && !strcmp(cfg_str(c, "reward.isolation"), "process")) {
        /* the library is loaded by the worker processes only: a crash in
         * it costs its samples, not the run */
        rlp_isolation_options io = RLP_ISOLATION_OPTIONS_INIT;
        io.name = "library";
        io.n_workers = (uint32_t)cfg_int(c, "reward.workers");
        io.timeout_ms = (uint32_t)cfg_int(c, "reward.timeout_ms");
        io.batch_size = (uint32_t)cfg_int(c, "reward.batch_size");
        io.max_restarts = (uint32_t)cfg_int(c, "reward.max_restarts");
        if ((rc = rlp_reward_fn_create_isolated(&r->reward, lib, opts, &io)) != RLP_OK)
            fmt(r->err, ERR_CAP, "reward.library: %s", rlp_error_last());
        free(opts);
        return rc;
    }
    if (lib) {
        r->reward_lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!r->reward_lib) {
            fmt(r->err, ERR_CAP, "reward.library: %s", dlerror());
            free(opts);
            return RLP_E_IO;
        }
        reward_entry_fn entry;
        *(void **)&entry = dlsym(r->reward_lib, REWARD_ENTRY);
        if (!entry) {
            fmt(r->err, ERR_CAP, "reward.library: '%s' does not export %s()", lib, REWARD_ENTRY);
            rc = RLP_E_NOT_FOUND;
        } else if ((rc = entry(&r->reward, opts)) != RLP_OK || !r->reward) {
            fmt(r->err, ERR_CAP, "reward.library: %s() failed: %s", REWARD_ENTRY, rlp_error_last());
            rc = rc ? rc : RLP_E_CALLBACK;
        }
        free(opts);
        return rc;
    }
    char names[256];
    fmt(names, sizeof names, "%s", cfg_str(c, "reward.name"));
    rlp_reward_fn *fns[8];
    double weights[8];
    size_t n = 0;
    int weighted = 0;
    for (char *save = NULL, *t = strtok_r(names, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        if (n < 8 && reward_weight(r, t, &weights[n]))
            rc = RLP_E_INVALID_ARG;
        if (n == 8 || rc || (rc = make_one_reward(r, t, opts, &fns[n])) != RLP_OK) {
            if (n == 8)
                fmt(r->err, ERR_CAP, "reward.name: at most 8 rewards joined with '+'");
            for (size_t i = 0; i < n; i++)
                rlp_reward_fn_free(fns[i]);
            free(opts);
            return rc ? rc : RLP_E_INVALID_ARG;
        }
        /* the term once more, alone: samples.jsonl shows every term's score
         * (kept in r, freed by teardown) */
        if ((rc = make_one_reward(r, t, opts, &r->terms[r->n_terms])) != RLP_OK) {
            for (size_t i = 0; i <= n; i++)
                rlp_reward_fn_free(fns[i]);
            free(opts);
            return rc;
        }
        /* a name that came before (gsm8k+gsm8k) gets "#2", "#3": one key
         * per term in samples.jsonl's reward_terms */
        size_t same = 1;
        for (size_t k = 0; k < r->n_terms; k++)
            same += strncmp(r->term_names[k], t, strlen(t)) == 0 &&
                    (r->term_names[k][strlen(t)] == 0 || r->term_names[k][strlen(t)] == '#');
        if (same > 1)
            fmt(r->term_names[r->n_terms++], sizeof r->term_names[0], "%s#%zu", t, same);
        else
            fmt(r->term_names[r->n_terms++], sizeof r->term_names[0], "%s", t);
        weighted |= weights[n] != 1.0;
        n++;
    }
    free(opts);
    if (n == 0) {
        fmt(r->err, ERR_CAP, "reward.name: empty");
        return RLP_E_INVALID_ARG;
    }
    if (n == 1 && !weighted) {
        r->reward = fns[0];
        rlp_reward_fn_free(r->terms[0]); /* the reward is its only term */
        r->terms[0] = NULL;
        r->n_terms = 0;
        return RLP_OK;
    }
    if ((rc = rlp_reward_fn_combine(&r->reward, fns, weighted ? weights : NULL, n)) != RLP_OK) {
        fmt(r->err, ERR_CAP, "reward.name: %s", rlp_error_last());
        for (size_t i = 0; i < n; i++)
            rlp_reward_fn_free(fns[i]);
    }
    return rc;
}

/* The strict format scorer (format rate) and the accuracy scorer, by task
 * unless eval.format / eval.accuracy_reward say otherwise. */
static int make_metric_scorers(run *r)
{
    json_t *c = r->cfg;
    const char *task = cfg_str(c, "task.name");
    const char *tmpl = cfg_str(c, "task.template");
    json_t *fmt_opt = cfg_get(c, "eval.format");
    int want_format = json_is_boolean(fmt_opt) ? json_is_true(fmt_opt)
                                           : (!strcmp(task, "kk") || !strcmp(task, "countdown") ||
                                              (tmpl && (strstr(tmpl, "logic-rl") || strstr(tmpl, "tinyzero"))));
    if (want_format && rlp_reward_fn_create_builtin(&r->format_fn, "logic_rl_format", NULL)) {
        fmt(r->err, ERR_CAP, "eval.format: %s", rlp_error_last());
        return -1;
    }
    const char *acc = cfg_str(c, "eval.accuracy_reward");
    double thr = 1.0;
    if (!acc) {
        if (!strcmp(task, "kk")) {
            acc = "kk_answer";
            thr = 2.0; /* kk_answer: +2 right, negative otherwise */
        } else if (!strcmp(task, "countdown") || !strcmp(task, "gsm8k")) {
            acc = task;
        } else if (!cfg_str(c, "reward.library") && !strpbrk(cfg_str(c, "reward.name"), "+*") &&
                   strcmp(cfg_str(c, "reward.name"), "format_progress")) {
            acc = cfg_str(c, "reward.name");
        }
    }
    json_t *t = cfg_get(c, "eval.accuracy_threshold");
    if (json_is_number(t))
        thr = json_number_value(t);
    r->acc_threshold = thr;
    if (acc) {
        /* configured like the training reward's term of the same name, if it has one */
        char terms[256];
        int is_term = 0;
        fmt(terms, sizeof terms, "%s", cfg_str(c, "reward.name"));
        for (char *save = NULL, *t = strtok_r(terms, "+", &save); t && !is_term; t = strtok_r(NULL, "+", &save)) {
            const char *star = strchr(t, '*');
            is_term = !strcmp(star ? star + 1 : t, acc);
        }
        char *opts = is_term && !cfg_str(c, "reward.library") ? json_dumps(cfg_get(c, "reward.options"), JSON_COMPACT)
                                                            : NULL;
        int rc = rlp_reward_fn_create_builtin(&r->acc_fn, acc, opts);
        free(opts);
        if (rc) {
            fmt(r->err, ERR_CAP, "eval.accuracy_reward: %s", rlp_error_last());
            return -1;
        }
        /* answer_parse_rate: the same verifier, scoring 1 for any answer it
         * can read (right or wrong) and 0 when it finds none */
        static const struct {
            const char *name, *opts;
        } parse[] = {
            {"gsm8k", "{\"correct\": 1, \"wrong\": 1, \"missing\": 0}"},
            {"boxed_math", "{\"correct\": 1, \"wrong\": 1, \"missing\": 0}"},
            {"countdown", "{\"correct\": 1, \"format_score\": 1, \"missing\": 0}"},
            {"kk_answer", "{\"answer_correct\": 1, \"answer_wrong\": 1, \"answer_unparsable\": 0, "
                          "\"count_mismatch\": 0}"},
        };
        for (size_t i = 0; i < sizeof parse / sizeof parse[0]; i++)
            if (!strcmp(acc, parse[i].name) && rlp_reward_fn_create_builtin(&r->parse_fn, acc, parse[i].opts)) {
                fmt(r->err, ERR_CAP, "eval.accuracy_reward: %s", rlp_error_last());
                return -1;
            }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Generate and score                                                       */
/* ------------------------------------------------------------------------ */

/* Prompts of a set, with token ids from the external tokenizer when the
 * model has none (token-level models such as llama2.c checkpoints). */
typedef struct prompts {
    rlp_prompt *p;
    int32_t **ids;
    size_t n;
} prompts;

static void prompts_free(prompts *ps)
{
    for (size_t i = 0; ps->ids && i < ps->n; i++)
        free(ps->ids[i]);
    free(ps->ids);
    free(ps->p);
    memset(ps, 0, sizeof *ps);
}

static int prompts_make(run *r, const rlp_prompt_set *set, prompts *ps)
{
    size_t n;
    rlp_prompt_set_size(&n, set);
    ps->n = n;
    ps->p = calloc(n, sizeof *ps->p);
    ps->ids = calloc(n, sizeof *ps->ids);
    if (!ps->p || !ps->ids)
        return RLP_E_NOMEM;
    memcpy(ps->p, rlp_prompt_set_prompts(set), n * sizeof *ps->p);
    if (!r->ext_tok)
        return RLP_OK;
    for (size_t i = 0; i < n; i++) {
        const char *text = ps->p[i].text ? ps->p[i].text : "";
        size_t cap = strlen(text) * 4 + 8, got = 0;
        ps->ids[i] = malloc(cap * sizeof(int32_t));
        if (!ps->ids[i])
            return RLP_E_NOMEM;
        int rc = rlp_tokenizer_encode(r->ext_tok, text, strlen(text), RLP_ENCODE_ADD_BOS, ps->ids[i], cap, &got);
        if (rc)
            return rc;
        ps->p[i].tokens = ps->ids[i];
        ps->p[i].n_tokens = got;
    }
    return RLP_OK;
}

/* With an external tokenizer the engine has no text: decode it here. */
static int add_texts(run *r, rlp_batch **batch)
{
    size_t n;
    rlp_batch_size(&n, *batch);
    rlp_batch *nb;
    int rc = rlp_batch_create(&nb);
    for (size_t i = 0; !rc && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if ((rc = rlp_batch_get(&t, *batch, i)))
            break;
        size_t cap = 16 * t.n_completion_tokens + 16, len = 0;
        char *text = malloc(cap);
        if (!text) {
            rc = RLP_E_NOMEM;
            break;
        }
        rc = rlp_tokenizer_decode(r->ext_tok, t.completion_tokens, t.n_completion_tokens, RLP_DECODE_SKIP_SPECIAL,
                                  text, cap, &len);
        if (!rc) {
            t.completion_text = text;
            rc = rlp_batch_append(nb, &t);
        }
        free(text);
    }
    if (rc) {
        rlp_batch_free(nb);
        return rc;
    }
    rlp_batch_free(*batch);
    *batch = nb;
    return RLP_OK;
}

/* Prompts whose group holds a RLP_FINISH_ERROR trajectory (a remote
 * request that failed after the client's retries on every URL); the
 * message of the first in @p why. */
static size_t failed_groups(const rlp_batch *b, size_t n_prompts, unsigned char *failed, char *why, size_t cap)
{
    size_t n, k = 0;
    rlp_batch_size(&n, b);
    size_t per = n_prompts ? n / n_prompts : 0;
    memset(failed, 0, n_prompts);
    for (size_t i = 0; per && i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, b, i) || t.finish_reason != RLP_FINISH_ERROR || failed[i / per])
            continue;
        if (!k)
            fmt(why, cap, "%s", t.error ? t.error : "request failed");
        failed[i / per] = 1;
        k++;
    }
    return k;
}

/* Replaces the groups of the failed prompts in *b by those of @p redo
 * (generated for exactly the failed prompts, in order). */
static int merge_groups(rlp_batch **b, const rlp_batch *redo, size_t n_prompts, const unsigned char *failed)
{
    size_t n;
    rlp_batch_size(&n, *b);
    size_t per = n / n_prompts, r_i = 0;
    rlp_batch *nb;
    int rc = rlp_batch_create(&nb);
    for (size_t p = 0; !rc && p < n_prompts; p++) {
        for (size_t j = 0; !rc && j < per; j++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            rc = failed[p] ? rlp_batch_get(&t, redo, r_i * per + j) : rlp_batch_get(&t, *b, p * per + j);
            if (!rc)
                rc = rlp_batch_append(nb, &t);
        }
        r_i += failed[p];
    }
    if (rc) {
        rlp_batch_free(nb);
        return rc;
    }
    rlp_batch_free(*b);
    *b = nb;
    return RLP_OK;
}

int train_generate(run *r, rlp_rollout_engine *engine, const rlp_prompt_set *set, const rlp_sampling_options *s,
                   rlp_batch **out, char *err)
{
    return train_generate_range(r, engine, set, 0, SIZE_MAX, s, out, err);
}

int train_generate_range(run *r, rlp_rollout_engine *engine, const rlp_prompt_set *set, size_t first,
                         size_t count, const rlp_sampling_options *s, rlp_batch **out, char *err)
{
    prompts ps = {0};
    rlp_batch *b = NULL;
    unsigned char *failed = NULL;
    rlp_prompt *redo = NULL;
    int rc = prompts_make(r, set, &ps);
    if (!rc && first > 0) {
        /* a rank's share: drop the prompts before it */
        first = first < ps.n ? first : ps.n;
        for (size_t i = 0; i < first; i++)
            free(ps.ids[i]);
        memmove(ps.p, ps.p + first, (ps.n - first) * sizeof *ps.p);
        memmove(ps.ids, ps.ids + first, (ps.n - first) * sizeof *ps.ids);
        ps.n -= first;
    }
    if (!rc && count < ps.n) {
        for (size_t i = count; i < ps.n; i++)
            free(ps.ids[i]);
        ps.n = count;
    }
    if (!rc)
        rc = rlp_rollout_generate(&b, engine, ps.p, ps.n, s, NULL, NULL);
    if (rc)
        fmt(err, ERR_CAP, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
    if (!rc && (!(failed = malloc(ps.n)) || !(redo = malloc(ps.n * sizeof *redo)))) {
        rc = RLP_E_NOMEM;
        fmt(err, ERR_CAP, "out of memory");
    }
    /* a remote group that failed (its request failed on every URL) is
     * generated again, so that every group trains or none does */
    for (int attempt = 0; !rc; attempt++) {
        char why[256];
        size_t k = failed_groups(b, ps.n, failed, why, sizeof why);
        if (!k)
            break;
        if (attempt == 2) {
            fmt(err, ERR_CAP, "%zu of %zu prompt groups failed 3 times, the last with: %s", k, ps.n, why);
            rc = RLP_E_NETWORK;
            break;
        }
        size_t m = 0;
        for (size_t i = 0; i < ps.n; i++)
            if (failed[i])
                redo[m++] = ps.p[i];
        rlp_batch *again = NULL;
        if ((rc = rlp_rollout_generate(&again, engine, redo, m, s, NULL, NULL)) != RLP_OK ||
            (rc = merge_groups(&b, again, ps.n, failed)) != RLP_OK)
            fmt(err, ERR_CAP, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
        rlp_batch_free(again);
    }
    free(failed);
    free(redo);
    prompts_free(&ps);
    if (!rc && r->ext_tok && (rc = add_texts(r, &b)) != RLP_OK)
        fmt(err, ERR_CAP, "decoding completions: %s", rlp_error_last());
    if (rc) {
        rlp_batch_free(b);
        return rc;
    }
    *out = b;
    return RLP_OK;
}

json_t *train_prompt_ids(const rlp_prompt_set *set, uint64_t *epoch)
{
    size_t n = 0;
    rlp_prompt_set_size(&n, set);
    json_t *ids = json_array();
    *epoch = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        if (!rlp_prompt_set_item(&it, set, i)) {
            json_array_append_new(ids, json_integer((json_int_t)it.index));
            if (i == 0)
                *epoch = it.epoch;
        }
    }
    return ids;
}

/* The engine of a training generate call in sync and pull mode (a pull
 * engine gets the policy's weights first; with rollout.urls the workers
 * load the latest published version). */
static int generate(run *r, rlp_rollout_engine *engine, int refresh, int share, const rlp_prompt_set *set,
                    const rlp_sampling_options *s, rlp_batch **out, char *err)
{
    if (refresh) {
        int rc = rlp_rollout_engine_update_weights(engine, r->policy);
        if (rc) {
            fmt(err, ERR_CAP, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
            return rc;
        }
    }
    size_t n = 0, first = 0, count;
    rlp_prompt_set_size(&n, set);
    count = n;
    if (share && r->world > 1) /* a training step: this rank's share (evaluations run whole on rank 0) */
        train_dist_share(r, n, &first, &count);
    return train_generate_range(r, engine, set, first, count, s, out, err);
}

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

/* Several ranks: the step's scores over all ranks' completions (each
 * rank scored its share). Rates and means are weighted by completions (by
 * valid ones for the reward). */
static int scores_reduce(run *r, scores *sc)
{
    double n = (double)sc->n, v = (double)sc->n_valid;
    double sum = v > 0 ? sc->mean * v : 0, sq = v > 1 ? sc->std * sc->std * (v - 1) + sum * sc->mean : sum * sc->mean;
    int has_fmt = !isnan(sc->format_rate), has_acc = !isnan(sc->accuracy), has_parse = !isnan(sc->parse_rate);
    double a[] = {n, v, sum, sq, has_fmt ? sc->format_rate * n : 0, has_fmt && !isnan(sc->format_mean) ? sc->format_mean * n : 0,
                  has_acc ? sc->accuracy * n : 0, (double)sc->completion_tokens, (double)sc->truncated,
                  has_parse ? sc->parse_rate * n : 0, (double)sc->reward_failed[0], (double)sc->reward_failed[1],
                  (double)sc->reward_failed[2], (double)sc->reward_failed[3]};
    double range[2] = {v > 0 ? sc->min : INFINITY, v > 0 ? -sc->max : INFINITY}; /* min, −max: one call */
    if (rlp_comm_all_reduce(r->comm, a, sizeof a / sizeof *a, RLP_REDUCE_SUM) ||
        rlp_comm_all_reduce(r->comm, range, 2, RLP_REDUCE_MIN))
        return -1;
    sc->n = (size_t)a[0];
    sc->n_valid = (size_t)a[1];
    sc->completion_tokens = (size_t)a[7];
    sc->truncated = (size_t)a[8];
    for (int k = 0; k < 4; k++)
        sc->reward_failed[k] = (uint64_t)a[10 + k];
    if (sc->n_valid) {
        sc->mean = a[2] / a[1];
        sc->std = sc->n_valid > 1 ? sqrt(fmax(0, (a[3] - a[2] * sc->mean) / (a[1] - 1))) : 0;
        sc->min = range[0];
        sc->max = -range[1];
    } else
        sc->mean = sc->std = sc->min = sc->max = NAN;
    if (has_fmt) {
        sc->format_rate = a[0] > 0 ? a[4] / a[0] : NAN;
        sc->format_mean = a[0] > 0 ? a[5] / a[0] : NAN;
    }
    if (has_acc)
        sc->accuracy = a[0] > 0 ? a[6] / a[0] : NAN;
    if (has_parse)
        sc->parse_rate = a[0] > 0 ? a[9] / a[0] : NAN;
    return 0;
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

static int score(run *r, rlp_batch *batch, scores *sc)
{
    return score_detail(r, batch, sc, NULL, 0);
}

/* The metrics of a batch the rollout side has scored already (async):
 * format and accuracy are measured on a copy, so that the batch keeps the
 * reward the step trains on. */
static int score_scored(run *r, const rlp_batch *batch, scores *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->format_rate = sc->format_mean = sc->accuracy = sc->parse_rate = NAN;
    int rc = RLP_OK;
    if (r->format_fn || r->acc_fn || r->parse_fn) {
        size_t n;
        rlp_batch_size(&n, batch);
        rlp_batch *copy;
        if ((rc = rlp_batch_create(&copy)))
            return rc;
        for (size_t i = 0; !rc && i < n; i++) {
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
            if (!(rc = rlp_batch_get(&t, batch, i)))
                rc = rlp_batch_append(copy, &t);
        }
        double unused;
        if (!rc && r->format_fn)
            rc = score_with(r->format_fn, copy, 0.5, &sc->format_rate, &sc->format_mean);
        if (!rc && r->acc_fn)
            rc = score_with(r->acc_fn, copy, r->acc_threshold, &sc->accuracy, &unused);
        if (!rc && r->parse_fn)
            rc = score_with(r->parse_fn, copy, 0.5, &sc->parse_rate, &unused);
        rlp_batch_free(copy);
    }
    if (!rc)
        reward_summary(batch, sc);
    return rc;
}

static json_t *jnum(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* ------------------------------------------------------------------------ */
/* Files: atomic writes, checkpoints                                        */
/* ------------------------------------------------------------------------ */

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Writes text to path through path.tmp, fsync and rename. */
static int write_atomic(const char *path, const char *text)
{
    char tmp[PATH_MAX];
    fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    ok &= fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    fmt(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(buf, 0777) && errno != EEXIST ? -1 : 0;
}

/* After step_K is written and named latest: removes what a crash left
 * half-written (.tmp-step_*) and all but the newest `keep` checkpoints up
 * to K (keep 0: all are kept). Checkpoints of later steps than K (an older
 * checkpoint was resumed) are not this run's to judge and stay. */
static void prune_checkpoints(const char *dir, long long step, long long keep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    long long *older = NULL;
    size_t n = 0, cap = 0;
    char path[PATH_MAX];
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long long k = -1;
        int end = 0;
        if (!strncmp(e->d_name, ".tmp-step_", 10)) {
            fmt(path, sizeof path, "%s/%s", dir, e->d_name);
            rm_tree(path);
        }
        else if (sscanf(e->d_name, "step_%lld%n", &k, &end) == 1 && !e->d_name[end] && k < step && k >= 0) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                long long *no = realloc(older, nc * sizeof *no);
                if (!no)
                    break; /* nothing is removed that should be kept */
                older = no;
                cap = nc;
            }
            older[n++] = k;
        }
    }
    closedir(d);
    /* newest first; the newest keep − 1 older ones stay beside step_K */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && older[j - 1] < older[j]; j--) {
            long long t = older[j];
            older[j] = older[j - 1];
            older[j - 1] = t;
        }
    for (size_t i = 0; keep > 0 && i < n; i++)
        if ((long long)i >= keep - 1) {
            fmt(path, sizeof path, "%s/step_%lld", dir, older[i]);
            rm_tree(path);
        }
    free(older);
}

/* OUTPUT/checkpoints/step_K/: weights, optimizer.safetensors, state.json,
 * written as .tmp-step_K and renamed; then "latest" names it. @p cursor:
 * the task cursor after the prompts of step K (async: the rollout thread
 * owns the task and has served prompts beyond it), or NULL to read the
 * task's own. */
static int checkpoint(run *r, long long step, const char *cursor_json)
{
    char dir[PATH_MAX], tmp[PATH_MAX], fin[PATH_MAX], path[PATH_MAX];
    fmt(dir, sizeof dir, "%s/checkpoints", r->out);
    fmt(tmp, sizeof tmp, "%s/.tmp-step_%lld", dir, step);
    fmt(fin, sizeof fin, "%s/step_%lld", dir, step);
    if (mkdir_p(dir)) {
        fprintf(stderr, "rlpost train: cannot create '%s': %s\n", dir, strerror(errno));
        return -1;
    }
    rm_tree(tmp);
    if (mkdir(tmp, 0777)) {
        fprintf(stderr, "rlpost train: cannot create '%s': %s\n", tmp, strerror(errno));
        return -1;
    }
    int rc = rlp_policy_save(r->policy, tmp, r->dtype);
    /* a model without a tokenizer of its own still has its weights saved */
    if (rc == RLP_E_UNSUPPORTED)
        rc = RLP_OK;
    fmt(path, sizeof path, "%s/optimizer.safetensors", tmp);
    if (!rc)
        rc = rlp_policy_save_optimizer(r->policy, path);
    if (rc) {
        fprintf(stderr, "rlpost train: checkpoint %s: %s\n", tmp, rlp_error_last());
        return -1;
    }
    char cursor[512];
    size_t clen;
    if (cursor_json)
        fmt(cursor, sizeof cursor, "%s", cursor_json);
    else
        rlp_task_cursor_save(r->task, cursor, sizeof cursor, &clen);
    uint64_t version = 0;
    rlp_policy_version(&version, r->policy);
    json_t *state = json_object();
    json_object_set_new(state, "step", json_integer(step));
    json_object_set_new(state, "version", json_integer((json_int_t)version));
    json_object_set_new(state, "cursor", json_loads(cursor, 0, NULL));
    json_object_set_new(state, "seed", json_integer(cfg_int(r->cfg, "seed")));
    json_object_set_new(state, "sampling_seed_next", json_integer((json_int_t)(mix_seed((uint64_t)cfg_int(r->cfg, "seed"),
                                                                                        (uint64_t)step + 1) >> 1)));
    json_object_set_new(state, "sync_mode", json_string(cfg_str(r->cfg, "sync.mode")));
    json_object_set(state, "config", r->cfg);
    char *text = json_dumps(state, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    json_decref(state);
    fmt(path, sizeof path, "%s/state.json", tmp);
    int bad = write_atomic(path, text);
    free(text);
    if (bad || fsync_path(tmp)) {
        fprintf(stderr, "rlpost train: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    rm_tree(fin);
    if (rename(tmp, fin)) {
        fprintf(stderr, "rlpost train: cannot rename '%s': %s\n", tmp, strerror(errno));
        return -1;
    }
    char name[64];
    fmt(name, sizeof name, "step_%lld\n", step);
    fmt(path, sizeof path, "%s/latest", dir);
    if (write_atomic(path, name) || fsync_path(dir)) {
        fprintf(stderr, "rlpost train: cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    prune_checkpoints(dir, step, cfg_int(r->cfg, "checkpoint.keep"));
    fprintf(stderr, "checkpoint %s\n", fin);
    return 0;
}

/* The checkpoint folder named by --resume DIR: DIR itself (holding
 * state.json), or the one DIR/checkpoints/latest or DIR/latest names. */
static int find_checkpoint(const char *dir, char *out, size_t cap)
{
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/state.json", dir);
    if (readable_file(path)) {
        fmt(out, cap, "%s", dir);
        return 0;
    }
    const char *subs[2] = {"/checkpoints", ""};
    for (int i = 0; i < 2; i++) {
        fmt(path, sizeof path, "%s%s/latest", dir, subs[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char name[128] = {0};
        int ok = fgets(name, sizeof name, f) != NULL;
        fclose(f);
        name[strcspn(name, "\r\n")] = 0;
        if (!ok || !*name || strchr(name, '/'))
            continue;
        fmt(out, cap, "%s%s/%s", dir, subs[i], name);
        return 0;
    }
    return -1;
}

/* Keeps the records of a JSONL file whose "step" is ≤ step (a resumed run
 * rewrites what came after its checkpoint); a line that does not parse (the
 * torn last line of a killed run) goes too. Lines of any length (getline:
 * a samples.jsonl record holds whole completions). -1 when the file could
 * not be rewritten (it is then left as it was). */
static int truncate_jsonl(const char *path, long long step)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    size_t cap = 1 << 16, len = 0, lcap = 0;
    char *keep = malloc(cap), *line = NULL;
    int bad = !keep;
    if (keep)
        keep[0] = 0;
    for (ssize_t l; !bad && (l = getline(&line, &lcap, f)) > 0;) {
        json_t *rec = json_loads(line, 0, NULL);
        json_t *js = json_object_get(rec, "step");
        long long s = json_is_integer(js) ? (long long)json_integer_value(js) : LLONG_MAX;
        json_decref(rec);
        if (s > step)
            continue;
        if (len + (size_t)l + 1 > cap) {
            size_t ncap = 2 * (len + (size_t)l + 1);
            char *nk = realloc(keep, ncap);
            if (!nk) {
                bad = 1;
                break;
            }
            keep = nk;
            cap = ncap;
        }
        memcpy(keep + len, line, (size_t)l + 1);
        len += (size_t)l;
    }
    free(line);
    fclose(f);
    if (!bad)
        bad = write_atomic(path, keep) != 0;
    free(keep);
    return bad ? -1 : 0;
}

/* Appends every record of arr to OUT/file, one line each (reals with
 * `digits` significant digits), with one fsync. */
static void append_jsonl_all(const char *out, const char *file, json_t *arr, int digits)
{
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/%s", out, file);
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    size_t i;
    json_t *rec;
    json_array_foreach(arr, i, rec)
    {
        json_dumpf(rec, f, JSON_COMPACT | JSON_REAL_PRECISION(digits));
        fputc('\n', f);
    }
    fflush(f);
    fsync(fileno(f));
    fclose(f);
}

static void append_jsonl(const char *out, const char *file, json_t *rec)
{
    json_t *one = json_pack("[O]", rec);
    append_jsonl_all(out, file, one, 17);
    json_decref(one);
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
    int rc = generate(r, r->engine, r->pull && !r->remote, 0, set, &s, &batch, err);
    if (!rc && (rc = score_detail(r, batch, &sc, &d, 1)) != RLP_OK)
        fmt(err, ERR_CAP, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
    size_t total = 0;
    if (!rc)
        rlp_batch_size(&total, batch);
    if (!rc && total != n * k) {
        fmt(err, ERR_CAP, "%zu completions for %zu prompts × %u", total, n, k);
        rc = RLP_E_INTERNAL;
    }
    double *per = rc ? NULL : calloc(n ? n : 1, sizeof *per);
    size_t hits = 0, fmt_hits = 0, parse_hits = 0;
    const char *mode = greedy ? "greedy" : "sampled";
    for (size_t i = 0; per && i < total; i++) {
        /* completions come prompt-major: k samples of prompt 0, then of prompt 1, … */
        int ok = d.acc && !isnan(d.acc[i]) && d.acc[i] >= r->acc_threshold;
        per[i / k] += ok ? 1.0 / k : 0.0;
        hits += ok;
        fmt_hits += d.format && !isnan(d.format[i]) && d.format[i] >= 0.5;
        parse_hits += d.parse && !isnan(d.parse[i]) && d.parse[i] >= 0.5;
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
            eval_wilson(hits, total, EVAL_Z95, &lo, &hi);
        else
            eval_bootstrap_mean(per, n, EVAL_BOOTSTRAP, (uint64_t)step * 2 + 1, &lo, &hi);
        fmt(key, sizeof key, "%s_accuracy_ci", mode);
        json_object_set_new(rec, key, r->acc_fn ? json_pack("[f, f]", lo, hi) : json_null());
        fmt(key, sizeof key, "%s_format_rate", mode);
        json_object_set_new(rec, key, r->format_fn ? json_real((double)fmt_hits / (double)total) : json_null());
        eval_wilson(fmt_hits, total, EVAL_Z95, &lo, &hi);
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
    if (total <= 0 || make_task(r, 0, &t))
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
static json_t *evaluate(run *r, long long step, const char *out, json_t **keep)
{
    long long n = cfg_int(r->cfg, "eval.n");
    if (n <= 0)
        return NULL;
    double t0 = now_s();
    rlp_task *task;
    if (make_task(r, 1, &task)) {
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
        append_jsonl_all(out, "samples.jsonl", samples, 9);
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
static json_t *eval_change(const json_t *first, const json_t *last)
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
            eval_bootstrap_paired(x, y, n, EVAL_BOOTSTRAP, UINT64_C(0x5eed), &lo, &hi);
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
    int rc = adv && pick ? rlp_rl_advantages(adv, n, batch, &r->rl) : RLP_E_NOMEM;
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
        append_jsonl_all(r->out, "samples.jsonl", arr, 9);
        json_decref(arr);
    } else {
        fprintf(stderr, "rlpost train: step %lld: samples.jsonl: %s\n", step, rlp_error_last());
    }
    detail_free(&d, r->n_terms);
    rlp_batch_free(copy);
    free(adv);
    free(pick);
}

/* ------------------------------------------------------------------------ */
/* Setup shared by train and eval                                           */
/* ------------------------------------------------------------------------ */

/* Whether a setting of a checkpoint's configuration equals the run's.
 * How the reward runs (reward.isolation and its limits) is not what it
 * computes: it may change on resume, and checkpoints written before those
 * keys existed lack them. */
static int same_setting(const char *key, json_t *saved, json_t *now)
{
    if (strcmp(key, "reward") || !json_is_object(saved) || !json_is_object(now))
        return json_equal(saved, now);
    static const char *const how[] = {"isolation", "workers", "timeout_ms", "batch_size", "max_restarts"};
    json_t *a = json_deep_copy(saved), *b = json_deep_copy(now);
    for (size_t i = 0; i < sizeof how / sizeof how[0]; i++) {
        json_object_del(a, how[i]);
        json_object_del(b, how[i]);
    }
    int eq = a && b && json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return eq;
}

/* The first key of what a resumed (or restarted) run must keep that
 * differs between an earlier run's configuration and this one, or NULL. */
static const char *changed_setting(json_t *saved, const json_t *cfg)
{
    static const char *const must_match[] = {"model", "seed", "task", "group_size", "prompts_per_step", "sampling",
                                             "algorithm", "reward"};
    for (size_t i = 0; saved && i < sizeof must_match / sizeof must_match[0]; i++)
        if (!same_setting(must_match[i], json_object_get(saved, must_match[i]), cfg_get(cfg, must_match[i])))
            return must_match[i];
    return NULL;
}

/* Everything that can be refused before anything is written. */
static int setup(run *r, const char *weights, int need_train)
{
    if (check_config(r))
        return EXIT_USAGE;
    if (make_task(r, 0, &r->task))
        return EXIT_USAGE;
    if (cfg_int(r->cfg, "eval.n") > 0) { /* the held-out task must open too */
        rlp_task *t;
        if (make_task(r, 1, &t))
            return EXIT_USAGE;
        rlp_task_free(t);
    }
    if (make_reward(r) || make_metric_scorers(r))
        return EXIT_USAGE;
    if (need_train && r->remote && train_rollout_check_urls(r))
        return EXIT_USAGE;
    fmt(r->weights, sizeof r->weights, "%s", weights);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = (int32_t)cfg_int(r->cfg, "threads");
    co.seed = (uint64_t)cfg_int(r->cfg, "seed");
    if (need_train && r->async && !r->remote) {
        /* the trainer and the rollout thread each get a context of their
         * own, sharing the cores instead of oversubscribing them */
        long t = co.n_threads > 0 ? co.n_threads : sysconf(_SC_NPROCESSORS_ONLN);
        t = t > 0 ? t : 1;
        r->threads_rollout = t / 2 > 0 ? (int)(t / 2) : 1;
        r->threads_train = t - t / 2 > 0 ? (int)(t - t / 2) : 1;
        co.n_threads = r->threads_train;
    }
    if (r->world > 1 && cfg_int(r->cfg, "threads") == 0) {
        /* the ranks share this machine's cores */
        long t = sysconf(_SC_NPROCESSORS_ONLN) / r->world;
        co.n_threads = t > 0 ? (int32_t)t : 1;
    }
    if (!strcmp(cfg_str(r->cfg, "backend"), "cuda")) {
        co.backend = RLP_BACKEND_CUDA;
        const json_t *dev = cfg_get(r->cfg, "device");
        const char *local = getenv("LOCAL_RANK");
        int n_dev = 0;
        rlp_backend_device_count(&n_dev, RLP_BACKEND_CUDA);
        n_dev = n_dev > 0 ? n_dev : 1;
        /* one GPU per rank (the rank's local index) unless a device is named;
         * more ranks than GPUs share them round-robin, over shared memory
         * (NCCL refuses two ranks on one GPU) */
        co.device = dev && !json_is_null(dev) ? (int32_t)json_integer_value(dev)
                    : r->world > 1 ? (int32_t)((local && *local ? atoi(local) : r->rank) % n_dev) : 0;
        r->shared_gpu = r->world > n_dev || (dev && !json_is_null(dev) && r->world > 1);
    }
    int rc = rlp_context_create(&r->ctx, &co);
    if (rc) {
        fmt(r->err, ERR_CAP, "%s: %s", co.backend == RLP_BACKEND_CUDA ? "backend" : "threads", rlp_error_last());
        return EXIT_USAGE;
    }
    if (need_train && train_dist_join(r))
        return 1;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = need_train;
    if ((rc = rlp_policy_load(&r->policy, r->ctx, weights, &po))) {
        fmt(r->err, ERR_CAP, "%s: cannot load '%s': %s", weights == cfg_str(r->cfg, "model") ? "model" : "--resume",
                 weights, rlp_error_last());
        return EXIT_USAGE;
    }
    r->tok = rlp_policy_tokenizer(r->policy);
    const char *tokp = cfg_str(r->cfg, "tokenizer");
    if (tokp) {
        if ((rc = rlp_tokenizer_load(&r->ext_tok, tokp))) {
            fmt(r->err, ERR_CAP, "tokenizer: cannot load '%s': %s", tokp, rlp_error_last());
            return EXIT_USAGE;
        }
        if (!r->tok) {
            /* prompts are rendered as plain text and encoded here */
        } else {
            rlp_tokenizer_free(r->ext_tok);
            r->ext_tok = NULL;
        }
    } else if (!r->tok) {
        fmt(r->err, ERR_CAP, "tokenizer: the model '%s' has no tokenizer; name one (a tokenizer.json or "
                 "llama2.c tokenizer.bin)", cfg_str(r->cfg, "model"));
        return EXIT_USAGE;
    }
    if (r->ext_tok)
        r->tok = NULL;
    if (need_train && r->rl.kl_coef > 0) {
        rlp_policy_options fo = RLP_POLICY_OPTIONS_INIT;
        fo.trainable = 0;
        if ((rc = rlp_policy_load(&r->ref, r->ctx, cfg_str(r->cfg, "model"), &fo))) {
            fmt(r->err, ERR_CAP, "model: cannot load the reference policy: %s", rlp_error_last());
            return 1;
        }
    }
    if (need_train && (rc = rlp_policy_set_optimizer(r->policy, &r->opt))) {
        fmt(r->err, ERR_CAP, "optimizer: %s", rlp_error_last());
        return EXIT_USAGE;
    }
    if (need_train && r->comm && (rc = rlp_policy_set_comm(r->policy, r->comm))) {
        fmt(r->err, ERR_CAP, "distributed: %s", rlp_error_last());
        return 1;
    }
    if (need_train && train_dist_agree(r))
        return 1;
    /* The engine on the trainer's context: it generates the training
     * rollouts in sync and (local) pull mode, and the evaluations in every
     * mode; with rollout.urls or in async mode it serves evaluations only. */
    int trains = !need_train || !(r->async || r->remote);
    long long eval_n = cfg_int(r->cfg, "eval.n");
    if (!trains && eval_n <= 0)
        return 0;
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    long long mb = trains ? cfg_int(r->cfg, "prompts_per_step") * cfg_int(r->cfg, "group_size") : 1;
    if (eval_n > mb)
        mb = eval_n;
    ro.max_batch = (uint32_t)(mb < 256 ? mb : 256);
    ro.max_seq_len = (uint32_t)cfg_int(r->cfg, "rollout.max_seq_len");
    ro.share_weights = !(r->pull && !r->remote);
    if ((rc = rlp_rollout_engine_create(&r->engine, r->policy, &ro))) {
        fmt(r->err, ERR_CAP, "rollout: %s", rlp_error_last());
        return 1;
    }
    return 0;
}

static void teardown(run *r)
{
    train_rollout_free(r->ro);
    r->ro = NULL;
    rlp_rollout_engine_free(r->engine);
    rlp_policy_free(r->ref);
    rlp_policy_free(r->policy);
    rlp_tokenizer_free(r->ext_tok);
    rlp_task_free(r->task);
    rlp_reward_fn_free(r->reward);
    rlp_reward_fn_free(r->format_fn);
    rlp_reward_fn_free(r->acc_fn);
    rlp_reward_fn_free(r->parse_fn);
    for (size_t i = 0; i < r->n_terms; i++)
        rlp_reward_fn_free(r->terms[i]);
    rlp_comm_free(r->comm); /* peers still waiting for this rank learn that it left */
    rlp_context_free(r->ctx);
    /* the reward library stays loaded: its threads may still run (abandoned calls) */
    json_decref(r->cfg);
}

/* Parses CONFIG.json [--set k=v]... [--resume DIR | --checkpoint DIR]. */
static int parse_args(int argc, char **argv, const char *cmd, const char *dir_flag, run *r, const char **dir)
{
    const char *config = NULL;
    char **sets = calloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    *dir = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc)
            sets[n_sets++] = argv[++i];
        else if (!strncmp(argv[i], "--set=", 6))
            sets[n_sets++] = argv[i] + 6;
        else if (!strcmp(argv[i], dir_flag) && i + 1 < argc)
            *dir = argv[++i];
        else if (argv[i][0] != '-' && !config)
            config = argv[i];
        else {
            fprintf(stderr, "rlpost %s: unexpected argument '%s'\nusage: rlpost %s CONFIG.json [--set key=value]... "
                    "[%s DIR]\n", cmd, argv[i], cmd, dir_flag);
            free(sets);
            return EXIT_USAGE;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: rlpost %s CONFIG.json [--set key=value]... [%s DIR]\n", cmd, dir_flag);
        free(sets);
        return EXIT_USAGE;
    }
    r->cfg = train_config_load(config, sets, n_sets, r->err, ERR_CAP);
    free(sets);
    if (!r->cfg) {
        fprintf(stderr, "rlpost %s: %s\n", cmd, r->err);
        return EXIT_USAGE;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Plot and summary                                                         */
/* ------------------------------------------------------------------------ */

static int have_program(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        size_t l = strcspn(p, ":");
        fmt(buf, sizeof buf, "%.*s/%s", (int)l, p, name);
        if (!access(buf, X_OK))
            return 1;
        p += l + (p[l] == ':');
    }
    return 0;
}

/* training.png from metrics.jsonl and eval.jsonl, through gnuplot. */
/* Runs `prog arg` (PATH lookup) in folder dir with its stdout on our
 * stderr, from an argument vector, and waits: its exit status, or -1. */
static int run_in(const char *dir, const char *prog, const char *arg)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa))
        return -1;
    char *argv[] = {(char *)prog, (char *)arg, NULL};
    pid_t pid;
    int rc = posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO) ||
                     posix_spawn_file_actions_addchdir_np(&fa, dir) ||
                     posix_spawnp(&pid, prog, &fa, NULL, argv, environ)
                 ? -1
                 : 0;
    posix_spawn_file_actions_destroy(&fa);
    int st;
    while (!rc && waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return rc ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *plot(const char *out)
{
    static char png[PATH_MAX];
    if (!have_program("gnuplot")) {
        fprintf(stderr, "no plot: gnuplot is not installed (apt-get install gnuplot-nox)\n");
        return NULL;
    }
    char path[PATH_MAX], line[1 << 15];
    const char *src[2] = {"metrics.jsonl", "eval.jsonl"}, *dst[2] = {"plot_train.tsv", "plot_eval.tsv"};
    for (int k = 0; k < 2; k++) {
        fmt(path, sizeof path, "%s/%s", out, dst[k]);
        FILE *o = fopen(path, "w");
        fmt(path, sizeof path, "%s/%s", out, src[k]);
        FILE *f = fopen(path, "r");
        while (f && o && fgets(line, sizeof line, f)) {
            json_t *rec = json_loads(line, 0, NULL);
            /* train: step, reward, format rate, accuracy; eval: step, then
             * value, low, high of greedy accuracy, sampled accuracy, format rate */
            static const char *const cols[2][3] = {{"reward_mean", "format_rate", "accuracy"},
                                                   {"greedy_accuracy", "sampled_accuracy", "format_rate"}};
            fprintf(o, "%lld", (long long)json_integer_value(json_object_get(rec, "step")));
            for (int c = 0; c < 3; c++) {
                json_t *v = json_object_get(rec, cols[k][c]);
                fprintf(o, "\t%.6g", json_is_number(v) ? json_number_value(v) : NAN);
                if (k == 1) {
                    char key[64];
                    fmt(key, sizeof key, "%s_ci", c == 2 ? "greedy_format_rate" : cols[k][c]);
                    json_t *ci = json_object_get(rec, key);
                    for (int e = 0; e < 2; e++) {
                        json_t *b = json_array_get(ci, (size_t)e);
                        fprintf(o, "\t%.6g", json_is_number(b) ? json_number_value(b) : NAN);
                    }
                }
            }
            fputc('\n', o);
            json_decref(rec);
        }
        if (f)
            fclose(f);
        if (o)
            fclose(o);
    }
    fmt(png, sizeof png, "%s/training.png", out);
    /* The script names only files in the run folder, by relative names, and
     * gnuplot runs there from an argument vector: no path or other
     * configuration value reaches a shell or gnuplot's own command
     * language (gnuplot has `system`). The title shows the folder's name
     * with anything but [A-Za-z0-9._/+-] replaced. */
    char title[128];
    size_t tl = 0;
    for (const char *c = out; *c && tl + 1 < sizeof title; c++)
        title[tl++] = strchr("._/+-", *c) || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                              (*c >= '0' && *c <= '9')
                          ? *c
                          : '_';
    title[tl] = '\0';
    static const char *const terminals[2] = {"pngcairo", "png"}; /* pngcairo is missing in some builds */
    for (int t = 0; t < 2; t++) {
        fmt(path, sizeof path, "%s/plot.gp", out);
        FILE *gp = fopen(path, "w");
        if (!gp)
            return NULL;
        fprintf(gp,
                "set terminal %s size 1000,600 noenhanced\n"
                "set output 'training.png'\n"
                "set datafile missing 'nan'\n"
                "set key outside bottom center horizontal\n"
                "set xlabel 'step'\nset grid\n"
                "set offsets 0.5, 0.5, 0.02, 0.02\n" /* interval bars at the first and last step stay whole */
                "set title 'rlpost train: %s'\n"
                "plot 'plot_train.tsv' using 1:2 with linespoints title 'train: mean reward', \\\n"
                "     'plot_train.tsv' using 1:4 with linespoints title 'train: accuracy', \\\n"
                "     'plot_train.tsv' using 1:3 with linespoints title 'train: format rate', \\\n"
                "     'plot_eval.tsv' using 1:2:3:4 with yerrorlines lw 2 title 'held-out greedy accuracy (95%% CI)', \\\n"
                "     'plot_eval.tsv' using 1:5:6:7 with yerrorlines lw 2 title 'held-out sampled accuracy (95%% CI)', \\\n"
                "     'plot_eval.tsv' using 1:8:9:10 with yerrorlines title 'held-out format rate (greedy)'\n",
                terminals[t], title);
        fclose(gp);
        if (run_in(out, "gnuplot", "plot.gp") == 0)
            return png;
    }
    fprintf(stderr, "no plot: gnuplot failed\n");
    return NULL;
}

static double mean_of(const double *v, size_t n)
{
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += v[i];
            k++;
        }
    return k ? s / (double)k : NAN;
}

static void fmt_eta(double s, char *buf, size_t cap)
{
    if (!isfinite(s) || s < 0)
        fmt(buf, cap, "?");
    else if (s >= 3600)
        fmt(buf, cap, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else
        fmt(buf, cap, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

/* ------------------------------------------------------------------------ */
/* rlpost train                                                             */
/* ------------------------------------------------------------------------ */

int cmd_train(int argc, char **argv)
{
    double t_start = now_s();
    run rr = {.overlap = -1}, *r = &rr;
    const char *resume;
    int rc = parse_args(argc, argv, "train", "--resume", r, &resume);
    if (rc)
        return rc;
    fmt(r->out, sizeof r->out, "%s", cfg_str(r->cfg, "output"));
    /* several ranks: the launcher checks the configuration once, then forks
     * them here, before any thread exists */
    int part = train_dist_resolve(r);
    if (part < 0 || (part == 1 && check_config(r))) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    if (part == 1 && train_dist_launch(r, &rc)) {
        json_decref(r->cfg);
        return rc;
    }
    const int lead = r->rank == 0; /* writes the run's files; the other ranks only train */

    /* --- everything that can be refused, before anything is written --- */
    char ckpt[PATH_MAX] = {0};
    json_t *state = NULL;
    int restart = 0; /* --resume of a run that stopped before its first checkpoint */
    if (resume && find_checkpoint(resume, ckpt, sizeof ckpt)) {
        /* No checkpoint. If DIR is this configuration's output folder and
         * holds a run (it died before its first checkpoint), that run
         * starts again from step 0 over its own files; anything else has
         * nothing to resume. */
        char a[PATH_MAX], b[PATH_MAX], path[PATH_MAX];
        fmt(path, sizeof path, "%s/config.json", resume);
        json_t *prev = lead ? json_load_file(path, 0, NULL) : NULL;
        int same = realpath(resume, a) && realpath(r->out, b) && !strcmp(a, b);
        if (lead && (!same || !prev)) {
            fprintf(stderr, "rlpost train: --resume %s: no checkpoint there (state.json or checkpoints/latest)%s\n",
                    resume, !same ? "; a run that stopped before its first checkpoint is started again by resuming "
                                    "its output folder (the configuration's \"output\")" : "");
            json_decref(prev);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        const char *changed = changed_setting(prev, r->cfg);
        if (changed) {
            fprintf(stderr, "rlpost train: --resume %s: \"%s\" differs from that run's configuration (its "
                    "config.json)\n", resume, changed);
            json_decref(prev);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        json_decref(prev);
        if (lead)
            fprintf(stderr, "rlpost train: --resume %s: the run stopped before its first checkpoint; starting it "
                    "again from step 0 (its metrics, evaluations and samples are written anew)\n", resume);
        restart = 1;
        resume = NULL;
    }
    if (resume) {
        char path[PATH_MAX];
        fmt(path, sizeof path, "%s/state.json", ckpt);
        json_error_t je;
        state = json_load_file(path, 0, &je);
        if (!state || !json_is_integer(json_object_get(state, "step")) || !json_object_get(state, "cursor")) {
            fprintf(stderr, "rlpost train: --resume %s: %s\n", path, state ? "missing step or cursor" : je.text);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        const char *changed = changed_setting(json_object_get(state, "config"), r->cfg);
        if (changed) {
            fprintf(stderr, "rlpost train: --resume %s: \"%s\" differs from the checkpoint's configuration\n",
                    resume, changed);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    }
    struct stat st;
    if (!lead) {
        /* the output folder is rank 0's */
    } else if (!stat(r->out, &st)) {
        if (!S_ISDIR(st.st_mode) || access(r->out, W_OK | X_OK)) {
            fprintf(stderr, "rlpost train: output: '%s' is not a writable folder\n", r->out);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
        char path[PATH_MAX];
        fmt(path, sizeof path, "%s/metrics.jsonl", r->out);
        if (!resume && !restart && !access(path, F_OK)) {
            fprintf(stderr, "rlpost train: output: '%s' already holds a run; resume it with --resume %s or choose "
                    "another folder\n", r->out, r->out);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    } else {
        char parent[PATH_MAX];
        fmt(parent, sizeof parent, "%s", r->out);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == 0) { /* trailing slashes */
            *slash = 0;
            slash = strrchr(parent, '/');
        }
        if (!slash)
            fmt(parent, sizeof parent, ".");
        else if (slash == parent)
            parent[1] = 0;
        else
            *slash = 0;
        /* the nearest existing ancestor must be writable */
        while (stat(parent, &st)) {
            char *s = strrchr(parent, '/');
            if (!s) {
                fmt(parent, sizeof parent, ".");
                break;
            }
            if (s == parent) {
                parent[1] = 0;
                break;
            }
            *s = 0;
        }
        if (stat(parent, &st) || !S_ISDIR(st.st_mode) || access(parent, W_OK | X_OK)) {
            fprintf(stderr, "rlpost train: output: cannot create '%s' ('%s' is not a writable folder)\n", r->out,
                    parent);
            json_decref(state);
            json_decref(r->cfg);
            return EXIT_USAGE;
        }
    }
    char weights_dir[PATH_MAX];
    fmt(weights_dir, sizeof weights_dir, "%s", ckpt);
    if ((rc = setup(r, resume ? weights_dir : cfg_str(r->cfg, "model"), 1)) != 0) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        json_decref(state);
        teardown(r);
        return rc;
    }
    long long start = 0, steps = cfg_int(r->cfg, "steps");
    if (resume) {
        char path[PATH_MAX];
        fmt(path, sizeof path, "%s/optimizer.safetensors", ckpt);
        char *cursor = json_dumps(json_object_get(state, "cursor"), JSON_COMPACT);
        if ((rc = rlp_policy_load_optimizer(r->policy, path)) ||
            (rc = rlp_task_cursor_restore(r->task, cursor, strlen(cursor)))) {
            fprintf(stderr, "rlpost train: --resume %s: %s\n", ckpt, rlp_error_last());
            free(cursor);
            json_decref(state);
            teardown(r);
            return EXIT_USAGE;
        }
        free(cursor);
        start = (long long)json_integer_value(json_object_get(state, "step"));
        fprintf(stderr, "resumed from %s at step %lld\n", ckpt, start);
    }
    json_decref(state);

    /* --- the output folder --- */
    if (lead && mkdir_p(r->out)) {
        fprintf(stderr, "rlpost train: output: cannot create '%s': %s\n", r->out, strerror(errno));
        teardown(r);
        return EXIT_USAGE;
    }
    if (lead) {
        char path[PATH_MAX];
        char *text = json_dumps(r->cfg, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
        fmt(path, sizeof path, "%s/config.json", r->out);
        int bad = write_atomic(path, text);
        free(text);
        if (bad) {
            fprintf(stderr, "rlpost train: output: cannot write '%s': %s\n", path, strerror(errno));
            teardown(r);
            return EXIT_USAGE;
        }
        fmt(path, sizeof path, "%s/metrics.jsonl", r->out);
        /* a resumed run keeps what its checkpoint's steps wrote; a new (or
         * restarted) one starts its files empty */
        static const char *files[] = {"metrics.jsonl", "eval.jsonl", "samples.jsonl"};
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            fmt(path, sizeof path, "%s/%s", r->out, files[i]);
            FILE *f = NULL;
            if (resume ? truncate_jsonl(path, start) : (f = fopen(path, "w")) == NULL || fclose(f)) {
                fprintf(stderr, "rlpost train: output: cannot write '%s': %s\n", path, strerror(errno));
                teardown(r);
                return EXIT_USAGE;
            }
        }
    }
    signal(SIGINT, on_sigint);
    if ((r->async || r->remote) && train_rollout_create(r, start, &r->ro)) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        teardown(r);
        return 1;
    }

    json_t *first_eval = NULL, *last_eval = NULL;
    int eval_failed = 0;
    if (lead && start == 0 && cfg_int(r->cfg, "eval.n") > 0) {
        if ((first_eval = evaluate(r, 0, r->out, NULL)) != NULL)
            append_jsonl(r->out, "eval.jsonl", first_eval);
        else
            eval_failed = 1;
    }
    char cursor[512] = {0}; /* async: the task cursor after the last step's prompts */
    const char *ck_cursor = r->async ? cursor : NULL;
    size_t clen;
    rlp_task_cursor_save(r->task, cursor, sizeof cursor, &clen); /* before the rollout thread takes the task */
    if (r->async && train_rollout_start(r->ro)) {
        fprintf(stderr, "rlpost train: %s\n", r->err);
        json_decref(first_eval);
        teardown(r);
        return 1;
    }

    size_t n_hist = (size_t)steps + 1;
    double *hist_reward = calloc(n_hist, sizeof(double)), *hist_format = calloc(n_hist, sizeof(double));
    double *hist_fmt_rate = calloc(n_hist, sizeof(double));
    if (!hist_reward || !hist_format || !hist_fmt_rate) {
        fprintf(stderr, "rlpost train: out of memory for %lld steps of history\n", steps);
        free(hist_reward);
        free(hist_format);
        free(hist_fmt_rate);
        json_decref(first_eval);
        teardown(r);
        return 1;
    }
    for (size_t i = 0; i < n_hist; i++)
        hist_reward[i] = hist_format[i] = hist_fmt_rate[i] = NAN;
    long long eval_every = cfg_int(r->cfg, "eval.interval"), ckpt_every = cfg_int(r->cfg, "checkpoint.interval");
    /* a checkpoint at least every checkpoint.minutes of training (rank 0's
     * clock: only rank 0 writes them), so a crash costs minutes, not the run */
    double ckpt_period_s = 60.0 * cfg_num(r->cfg, "checkpoint.minutes"), last_ckpt_s = now_s();
    size_t per_step = (size_t)cfg_int(r->cfg, "prompts_per_step");
    double loop_start = now_s(), stale_max = 0;
    long long step = start, last_ckpt = -1;
    int failed = 0, interrupted = 0;
    while (step < steps) {
        long long k = step + 1;
        double t0 = now_s(), t1, t2;
        rlp_batch *batch = NULL;
        json_t *prompt_ids = NULL;
        uint64_t epoch = 0, seed = 0;
        scores sc;
        train_step_input in;
        memset(&in, 0, sizeof in);
        char err[ERR_CAP] = "";
        if (r->async) {
            /* the rollout side generated and scored this step's groups */
            int got = train_rollout_next(r->ro, &stop_requested, &in);
            if (got == 1) {
                interrupted = 1;
                fprintf(stderr, "interrupted while waiting for rollouts: %s\n",
                        step > start ? "checkpointing the last step" : "no step to checkpoint");
                if (step > start && last_ckpt != step) {
                    if (checkpoint(r, step, ck_cursor))
                        failed = 1;
                    last_ckpt = step;
                }
                break;
            }
            if (got < 0) {
                fprintf(stderr, "rlpost train: step %lld: %s\n", k, r->err);
                /* a stalled gate: the steps so far are good, and a resume
                 * restarts the gate at their version */
                if (got == -2 && step > start && last_ckpt != step && !checkpoint(r, step, ck_cursor))
                    last_ckpt = step;
                failed = 1;
                break;
            }
            batch = in.batch;
            prompt_ids = in.prompt_ids;
            epoch = in.epoch;
            seed = in.seed;
            t1 = now_s();
            if ((rc = score_scored(r, batch, &sc)) == RLP_OK)
                memcpy(sc.reward_failed, in.reward_failed, sizeof sc.reward_failed);
            else
                fmt(err, sizeof err, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
            t2 = now_s();
        } else {
            rlp_prompt_set *set = NULL;
            if ((rc = rlp_task_next_batch(&set, r->task, per_step, r->tok))) {
                fprintf(stderr, "rlpost train: step %lld: prompts: %s\n", k, rlp_error_last());
                failed = 1;
                break;
            }
            prompt_ids = train_prompt_ids(set, &epoch);
            seed = mix_seed((uint64_t)cfg_int(r->cfg, "seed"), (uint64_t)k);
            /* each rank draws its own random streams (rank 0 the single-process ones) */
            r->sampling.seed = r->rank ? mix_seed(seed, (uint64_t)r->rank) : seed;
            rc = r->remote ? train_rollout_generate(r->ro, set, &r->sampling, &batch)
                           : generate(r, r->engine, r->pull, 1, set, &r->sampling, &batch, err);
            if (rc && r->remote)
                fmt(err, sizeof err, "%s", r->err);
            rlp_prompt_set_free(set);
            t1 = now_s();
            if (!rc && (rc = score(r, batch, &sc)) != RLP_OK)
                fmt(err, sizeof err, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
            if (!rc && r->comm && scores_reduce(r, &sc)) {
                fmt(err, sizeof err, "distributed: %s", rlp_error_last());
                rc = RLP_E_CLOSED;
            }
            t2 = now_s();
        }
        if (!rc && lead)
            step_samples(r, batch, k);
        rlp_rl_stats rs;
        memset(&rs, 0, sizeof rs);
        if (!rc && (rc = rlp_policy_train_rl(r->policy, batch, r->ref, &r->rl, &rs)) != RLP_OK)
            fmt(err, sizeof err, "%s (%s)", rlp_error_last(), rlp_status_str(rc));
        double t3 = now_s();
        rlp_batch_free(batch);
        if (!rc && r->ro && train_rollout_publish(r->ro)) {
            fmt(err, sizeof err, "%s", r->err);
            rc = RLP_E_IO;
        }
        double t4 = now_s();
        if (rc) {
            fprintf(stderr, "rlpost train: step %lld: %s\n", k, err);
            json_decref(prompt_ids);
            failed = 1;
            break;
        }
        step = k;
        if (r->async)
            fmt(cursor, sizeof cursor, "%s", in.cursor);
        hist_reward[k] = sc.mean;
        hist_format[k] = sc.format_mean;
        hist_fmt_rate[k] = sc.format_rate;
        stale_max = fmax(stale_max, rs.staleness_max);

        /* Phases: in sync and pull mode the trainer waits while the
         * rollouts are generated and scored, and the engine waits while
         * the trainer trains and publishes; in async mode both sides run
         * at once, and their idle times are measured where they wait. */
        double roll_s = r->async ? in.rollout_seconds : t1 - t0;
        double reward_s = r->async ? in.reward_seconds : t2 - t1;
        double tokens = r->async ? (double)in.rollout_tokens : (double)sc.completion_tokens;
        double tps = roll_s > 0 ? tokens / roll_s : NAN;
        double trainer_idle = r->async ? in.trainer_idle : t2 - t0;
        double rollout_idle = r->async ? in.rollout_idle : t4 - t2;
        json_t *m = json_object();
        json_object_set_new(m, "step", json_integer(k));
        json_object_set_new(m, "policy_version", json_integer((json_int_t)rs.policy_version));
        json_object_set_new(m, "epoch", json_integer((json_int_t)epoch));
        json_object_set_new(m, "prompt_index", prompt_ids);
        json_object_set_new(m, "sampling_seed", json_integer((json_int_t)(seed >> 1)));
        json_object_set_new(m, "reward_mean", jnum(sc.mean));
        json_object_set_new(m, "reward_std", jnum(sc.std));
        json_object_set_new(m, "reward_min", jnum(sc.min));
        json_object_set_new(m, "reward_max", jnum(sc.max));
        json_object_set_new(m, "reward_valid", json_integer((json_int_t)sc.n_valid));
        /* why samples were invalid (the reward handle's counters; async: the
         * rollout side's since the previous step) */
        json_object_set_new(m, "reward_errors", json_integer((json_int_t)sc.reward_failed[0]));
        json_object_set_new(m, "reward_timeouts", json_integer((json_int_t)sc.reward_failed[1]));
        json_object_set_new(m, "reward_nonfinite", json_integer((json_int_t)sc.reward_failed[2]));
        json_object_set_new(m, "reward_crashed", json_integer((json_int_t)sc.reward_failed[3]));
        json_object_set_new(m, "format_rate", jnum(sc.format_rate));
        json_object_set_new(m, "format_reward_mean", jnum(sc.format_mean));
        json_object_set_new(m, "accuracy", jnum(sc.accuracy));
        json_object_set_new(m, "answer_parse_rate", jnum(sc.parse_rate));
        json_object_set_new(m, "completions", json_integer((json_int_t)sc.n));
        json_object_set_new(m, "completion_tokens", json_integer((json_int_t)sc.completion_tokens));
        json_object_set_new(m, "truncated", json_integer((json_int_t)sc.truncated));
        json_object_set_new(m, "loss", jnum(rs.loss));
        json_object_set_new(m, "pg_loss", jnum(rs.pg_loss));
        json_object_set_new(m, "kl", jnum(rs.kl));
        json_object_set_new(m, "entropy", jnum(rs.entropy));
        json_object_set_new(m, "clip_frac_low", jnum(rs.clip_frac_low));
        json_object_set_new(m, "clip_frac_high", jnum(rs.clip_frac_high));
        json_object_set_new(m, "ratio_mean", jnum(rs.ratio_mean));
        json_object_set_new(m, "ratio_max", jnum(rs.ratio_max));
        json_object_set_new(m, "behav_weight_mean", jnum(rs.behav_weight_mean));
        json_object_set_new(m, "behav_weight_max", jnum(rs.behav_weight_max));
        json_object_set_new(m, "grad_norm", jnum(rs.grad_norm));
        json_object_set_new(m, "adv_mean", jnum(rs.adv_mean));
        json_object_set_new(m, "adv_std", jnum(rs.adv_std));
        json_object_set_new(m, "train_reward_mean", jnum(rs.reward_mean));
        json_object_set_new(m, "staleness_mean", jnum(rs.staleness_mean));
        json_object_set_new(m, "staleness_max", jnum(rs.staleness_max));
        json_object_set_new(m, "n_seqs", json_integer((json_int_t)rs.n_seqs));
        json_object_set_new(m, "n_tokens", json_integer((json_int_t)rs.n_tokens));
        json_object_set_new(m, "n_groups", json_integer((json_int_t)rs.n_groups));
        json_object_set_new(m, "filtered_groups", json_integer((json_int_t)rs.filtered_groups));
        json_object_set_new(m, "zero_std_groups", json_integer((json_int_t)rs.zero_std_groups));
        json_object_set_new(m, "invalid_seqs", json_integer((json_int_t)rs.invalid_seqs));
        json_object_set_new(m, "optimizer_steps", json_integer(rs.optimizer_steps));
        json_object_set_new(m, "skipped_steps", json_integer(rs.skipped_steps));
        json_object_set_new(m, "buffer_dropped", json_integer((json_int_t)in.buffer_dropped));
        json_object_set_new(m, "buffer_dropped_total", json_integer((json_int_t)in.buffer_dropped_total));
        json_object_set_new(m, "buffer_size", json_integer((json_int_t)in.buffer_size));
        json_object_set_new(m, "rollout_seconds", json_real(roll_s));
        json_object_set_new(m, "reward_seconds", json_real(reward_s));
        json_object_set_new(m, "train_seconds", json_real(t3 - t2));
        json_object_set_new(m, "publish_seconds", json_real(t4 - t3));
        json_object_set_new(m, "trainer_idle_seconds", json_real(trainer_idle));
        json_object_set_new(m, "rollout_idle_seconds", json_real(rollout_idle));
        json_object_set_new(m, "step_seconds", json_real(t4 - t0));
        json_object_set_new(m, "tokens_per_second", jnum(tps));
        json_object_set_new(m, "elapsed_seconds", json_real(now_s() - t_start));
        if (lead)
            append_jsonl(r->out, "metrics.jsonl", m);
        json_decref(m);

        double per = (now_s() - loop_start) / (double)(k - start);
        char eta[32], idle[96] = "";
        fmt_eta(per * (double)(steps - k), eta, sizeof eta);
        if (r->async)
            fmt(idle, sizeof idle, " | idle trainer %.1f s, rollout %.1f s | buffer %llu", trainer_idle, rollout_idle,
                (unsigned long long)in.buffer_size);
        if (lead)
            fprintf(stderr, "step %lld/%lld | reward %.3f | format %.3f | acc %.3f | loss %.4f | %.0f tok/s | stale %.0f "
                "| %.1f s/step%s | ETA %s\n", k, steps, sc.mean, sc.format_rate, sc.accuracy, rs.loss,
                isfinite(tps) ? tps : 0.0, rs.staleness_max, t4 - t0, idle, eta);

        /* Read the flag once: with several ranks every rank must act on the
         * reduced value, not on a signal that lands after the reduction
         * (that rank alone would stop, and its peers would wait for it). */
        int stop = stop_requested != 0;
        if (r->comm) {
            /* a rank interrupted during the step stops them all here, together */
            double f = stop;
            if (rlp_comm_all_reduce(r->comm, &f, 1, RLP_REDUCE_MAX)) {
                fprintf(stderr, "rlpost train: step %lld: distributed: %s\n", k, rlp_error_last());
                failed = 1;
                break;
            }
            stop = f > 0;
        }
        if (stop) {
            if (lead)
                fprintf(stderr, "interrupted: checkpointing step %lld of %lld\n", k, steps);
            interrupted = 1;
            if (lead && checkpoint(r, k, ck_cursor))
                failed = 1;
            last_ckpt = k;
            break;
        }
        if (lead && k < steps && eval_every > 0 && k % eval_every == 0) {
            json_t *e = evaluate(r, k, r->out, NULL);
            if (e) {
                append_jsonl(r->out, "eval.jsonl", e);
                json_decref(e);
            } else {
                eval_failed = 1;
            }
        }
        if (k < steps && ((ckpt_every > 0 && k % ckpt_every == 0) ||
                          (lead && ckpt_period_s > 0 && now_s() - last_ckpt_s >= ckpt_period_s))) {
            if (lead && checkpoint(r, k, ck_cursor)) {
                failed = 1;
                break;
            }
            last_ckpt = k;
            last_ckpt_s = now_s();
        }
    }
    /* the rollout side stops here (a generate call in flight is aborted),
     * so that the last evaluation has the cores to itself */
    train_rollout_free(r->ro);
    r->ro = NULL;
    if (!lead) {
        /* rank 0 evaluates, checkpoints and reports */
        free(hist_reward);
        free(hist_format);
        free(hist_fmt_rate);
        json_decref(first_eval);
        teardown(r);
        return failed ? 1 : 0;
    }
    /* a run resumed after its last step has had its final evaluation */
    if (!failed && !interrupted && step == steps) {
        if (start < steps && (last_eval = evaluate(r, step, r->out, NULL)) != NULL)
            append_jsonl(r->out, "eval.jsonl", last_eval);
        else if (start < steps && cfg_int(r->cfg, "eval.n") > 0)
            eval_failed = 1; /* asked for and not done: the run does not end well */
        if (last_ckpt != step && checkpoint(r, step, ck_cursor))
            failed = 1;
    }
    const char *png = plot(r->out);

    /* summary */
    size_t first_n = 0, last_n = 0;
    double fr[3], lr[3], ff[3], lf[3], fq[3], lq[3];
    for (long long k = 1; k <= step && first_n < 3; k++, first_n++) {
        fr[first_n] = hist_reward[k];
        ff[first_n] = hist_format[k];
        fq[first_n] = hist_fmt_rate[k];
    }
    for (long long k = step; k >= 1 && last_n < 3; k--, last_n++) {
        lr[last_n] = hist_reward[k];
        lf[last_n] = hist_format[k];
        lq[last_n] = hist_fmt_rate[k];
    }
    json_t *sum = json_object();
    json_object_set_new(sum, "steps", json_integer(steps));
    json_object_set_new(sum, "steps_completed", json_integer(step));
    json_object_set_new(sum, "resumed_from", json_integer(start));
    json_object_set_new(sum, "interrupted", json_boolean(interrupted));
    json_object_set_new(sum, "sync_mode", json_string(cfg_str(r->cfg, "sync.mode")));
    json_object_set_new(sum, "staleness_max", json_real(stale_max));
    json_object_set_new(sum, "output", json_string(r->out));
    json_object_set_new(sum, "wall_seconds", json_real(now_s() - t_start));
    json_object_set_new(sum, "reward_first3", jnum(mean_of(fr, first_n)));
    json_object_set_new(sum, "reward_last3", jnum(mean_of(lr, last_n)));
    json_object_set_new(sum, "format_reward_first3", jnum(mean_of(ff, first_n)));
    json_object_set_new(sum, "format_reward_last3", jnum(mean_of(lf, last_n)));
    json_object_set_new(sum, "format_rate_first3", jnum(mean_of(fq, first_n)));
    json_object_set_new(sum, "format_rate_last3", jnum(mean_of(lq, last_n)));
    if (!first_eval && start > 0) {
        /* resumed: the run's first evaluation is in its eval.jsonl */
        char path[PATH_MAX], line[1 << 16];
        fmt(path, sizeof path, "%s/eval.jsonl", r->out);
        FILE *f = fopen(path, "r");
        if (f && fgets(line, sizeof line, f))
            first_eval = json_loads(line, 0, NULL);
        if (f)
            fclose(f);
    }
    json_t *change = eval_change(first_eval, last_eval);
    json_object_set_new(sum, "heldout_change", change ? change : json_null());
    static const char *const bulky[] = {"greedy_correct", "sampled_correct"}; /* in eval.jsonl */
    for (size_t i = 0; i < 2; i++) {
        json_object_del(first_eval, bulky[i]);
        json_object_del(last_eval, bulky[i]);
    }
    json_object_set_new(sum, "eval_first", first_eval ? first_eval : json_null());
    json_object_set_new(sum, "eval_last", last_eval ? last_eval : json_null());
    json_object_set_new(sum, "plot", png ? json_string(png) : json_null());
    char ck[PATH_MAX];
    fmt(ck, sizeof ck, "%s/checkpoints/step_%lld", r->out, step);
    json_object_set_new(sum, "checkpoint", last_ckpt >= 0 || (!failed && step == steps && start < steps)
                                               ? json_string(ck)
                                               : json_null());
    json_dumpf(sum, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(sum);
    free(hist_reward);
    free(hist_format);
    free(hist_fmt_rate);
    teardown(r);
    if (failed)
        return 1;
    if (eval_failed) {
        fprintf(stderr, "rlpost train: an evaluation asked for (eval.n > 0) did not happen; see above\n");
        return 1;
    }
    if (interrupted)
        return 0;
    if (step < steps) {
        fprintf(stderr, "rlpost train: ended after %lld of %lld steps\n", step, steps);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* rlpost eval                                                              */
/* ------------------------------------------------------------------------ */

int cmd_eval(int argc, char **argv)
{
    run rr = {.overlap = -1}, *r = &rr;
    const char *ckpt_arg;
    int rc = parse_args(argc, argv, "eval", "--checkpoint", r, &ckpt_arg);
    if (rc)
        return rc;
    char ckpt[PATH_MAX];
    if (ckpt_arg && find_checkpoint(ckpt_arg, ckpt, sizeof ckpt)) {
        /* a plain model folder or file is fine too */
        fmt(ckpt, sizeof ckpt, "%s", ckpt_arg);
    }
    if (cfg_int(r->cfg, "eval.n") <= 0) {
        fprintf(stderr, "rlpost eval: eval.n: must be ≥ 1\n");
        json_decref(r->cfg);
        return EXIT_USAGE;
    }
    if ((rc = setup(r, ckpt_arg ? ckpt : cfg_str(r->cfg, "model"), 0)) != 0) {
        fprintf(stderr, "rlpost eval: %s\n", r->err);
        teardown(r);
        return rc;
    }
    /* the step a checkpoint of `rlpost train` was taken at (its weights
     * do not carry the version: optimizer.safetensors does); else the
     * policy's version (0 for a model) */
    uint64_t version = 0;
    rlp_policy_version(&version, r->policy);
    long long step = (long long)version;
    char path[PATH_MAX];
    fmt(path, sizeof path, "%s/state.json", ckpt);
    json_t *state = ckpt_arg ? json_load_file(path, 0, NULL) : NULL;
    if (json_is_integer(json_object_get(state, "step")))
        step = (long long)json_integer_value(json_object_get(state, "step"));
    json_decref(state);
    json_t *samples = NULL;
    json_t *rec = evaluate(r, step, NULL, &samples);
    if (!rec) {
        teardown(r);
        return 1;
    }
    /* a few completions of each mode, as they were written */
    long long shown[2] = {0, 0};
    size_t i;
    json_t *x;
    json_array_foreach(samples, i, x)
    {
        int sampled = !strcmp(json_string_value(json_object_get(x, "mode")), "sampled");
        if (shown[sampled]++ >= 3)
            continue;
        const json_t *ok = json_object_get(x, "correct"), *ref = json_object_get(x, "reference");
        fprintf(stderr, "--- %s, prompt %lld%s: %s (reference %s)\n", sampled ? "sampled" : "greedy",
                (long long)json_integer_value(json_object_get(x, "prompt_index")),
                json_is_string(ref) ? "" : "", json_is_true(ok) ? "correct" : json_is_false(ok) ? "wrong" : "unscored",
                json_is_string(ref) ? json_string_value(ref) : "none");
        fprintf(stderr, "%s\n", json_string_value(json_object_get(x, "completion")));
    }
    json_decref(samples);
    json_object_set_new(rec, "model", json_string(ckpt_arg ? ckpt : cfg_str(r->cfg, "model")));
    json_dumpf(rec, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6));
    fputc('\n', stdout);
    json_decref(rec);
    teardown(r);
    return 0;
}
