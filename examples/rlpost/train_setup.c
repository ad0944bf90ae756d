/* `rlpost train` / `rlpost eval`: the configuration turned into handles —
 * its check (ranges, names, files), the task, the reward (built-ins,
 * combinations, a reward library in process or isolated), the metric
 * scorers (format, accuracy, answer parsing), the context, policy and
 * reference, and the trainer's options (make_trainer). */
#define _GNU_SOURCE 1
#include "cli_args.h"
#include "commands.h"
#include "train.h"
#include "train_config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct named {
    const char *name;
    int value;
} named;

static const named advantages[] = {{"grpo", RLP_ADV_GRPO}, {"dr_grpo", RLP_ADV_DR_GRPO}, {"rloo", RLP_ADV_RLOO},
                                   {"reinforce_pp", RLP_ADV_REINFORCE_PP}, {"reinforce", RLP_ADV_REINFORCE},
                                   {"gae", RLP_ADV_GAE}, {NULL, 0}};
static const named losses[] = {{"ppo_clip", RLP_LOSS_PPO_CLIP}, {"decoupled_ppo", RLP_LOSS_DECOUPLED_PPO},
                               {"gspo", RLP_LOSS_GSPO}, {"cispo", RLP_LOSS_CISPO},
                               {"gmpo", RLP_LOSS_GMPO}, {"geo_mean", RLP_LOSS_GMPO}, {"gpg", RLP_LOSS_GPG},
                               {"sapo", RLP_LOSS_SAPO}, {"clip_cov", RLP_LOSS_CLIP_COV},
                               {"kl_cov", RLP_LOSS_KL_COV}, {NULL, 0}};
/* verl's rollout_is / rollout_rs levels ("off": null in verl) and whitening conventions */
static const named is_levels[] = {{"off", RLP_IS_OFF}, {"token", RLP_IS_TOKEN}, {"sequence", RLP_IS_SEQUENCE},
                                  {NULL, 0}};
static const named rs_levels[] = {{"off", RLP_IS_OFF},           {"token", RLP_IS_TOKEN},
                                  {"sequence", RLP_IS_SEQUENCE}, {"geometric", RLP_IS_GEOMETRIC},
                                  {NULL, 0}};
static const named whitens[] = {{"population", RLP_WHITEN_POPULATION}, {"unbiased", RLP_WHITEN_UNBIASED},
                                {NULL, 0}};
/* verl's kl_loss_type spellings too (low_var_kl = k3, mse = k2, kl = k1) */
static const named kl_estimators[] = {{"k1", RLP_KL_K1},         {"k2", RLP_KL_K2}, {"k3", RLP_KL_K3},
                                      {"abs", RLP_KL_ABS},        {"kl", RLP_KL_K1}, {"mse", RLP_KL_K2},
                                      {"low_var_kl", RLP_KL_K3}, {NULL, 0}};
static const named aggs[] = {{"token-mean", RLP_AGG_TOKEN_MEAN}, {"seq-mean-token-sum", RLP_AGG_SEQ_MEAN_TOKEN_SUM},
                             {"seq-mean-token-mean", RLP_AGG_SEQ_MEAN_TOKEN_MEAN},
                             {"seq-mean-token-sum-norm", RLP_AGG_SEQ_MEAN_TOKEN_SUM_NORM}, {NULL, 0}};
static const named schedules[] = {{"constant", RLP_LR_CONSTANT}, {"linear_warmup", RLP_LR_LINEAR_WARMUP},
                                  {"cosine", RLP_LR_COSINE}, {NULL, 0}};
static const named dtypes[] = {{"f32", RLP_DTYPE_F32}, {"f16", RLP_DTYPE_F16}, {"bf16", RLP_DTYPE_BF16}, {NULL, 0}};

/* The entry point a reward library exports (docs/configuration.md). */
typedef int (*reward_entry_fn)(rlp_reward_fn **out, const char *options_json);
#define REWARD_ENTRY "rlpost_reward_create"


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

int train_readable_file(const char *path)
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

int train_check_config(run *r)
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
    /* stop strings: a multi-turn task ends a turn at its tool tags ("</search>") */
    const json_t *stops = cfg_get(c, "sampling.stop");
    RANGE("sampling.stop", json_array_size(stops) <= 16, "at most 16 strings");
    for (size_t i = 0; i < json_array_size(stops); i++) {
        const char *st = json_string_value(json_array_get(stops, i));
        RANGE("sampling.stop", st && *st, "an array of non-empty strings");
        r->stops[i] = st; /* borrowed from the configuration, which outlives the trainer */
    }
    s->stop = r->stops;
    s->n_stop = json_array_size(stops);
    RANGE("env", !(cfg_str(c, "env.name") && cfg_str(c, "env.url")), "a built-in \"name\" or a service \"url\", not both");
    RANGE("env.timeout_ms", cfg_int(c, "env.timeout_ms") >= 0 && cfg_int(c, "env.timeout_ms") <= 86400000,
          "in [0, 86400000]");
    RANGE("env.threads", cfg_int(c, "env.threads") >= 1 && cfg_int(c, "env.threads") <= 1024, "in [1, 1024]");
    RANGE("env.max_observation_bytes", cfg_int(c, "env.max_observation_bytes") >= 1, "≥ 1");
    RANGE("multiturn.max_turns", cfg_int(c, "multiturn.max_turns") >= 1 && cfg_int(c, "multiturn.max_turns") <= 100000,
          "in [1, 100000]");
    RANGE("multiturn.max_tokens", cfg_int(c, "multiturn.max_tokens") >= 0 &&
          cfg_int(c, "multiturn.max_tokens") <= 1 << 24, "in [0, 16777216]");

    rlp_rl_options *rl = &r->rl;
    rlp_rl_options_init(rl, RLP_RL_OPTIONS_VERSION);
    if (lookup(advantages, cfg_str(c, "algorithm.advantage"), "algorithm.advantage", &rl->advantage, r->err) ||
        lookup(losses, cfg_str(c, "algorithm.policy_loss"), "algorithm.policy_loss", &rl->policy_loss, r->err) ||
        lookup(aggs, cfg_str(c, "algorithm.loss_agg"), "algorithm.loss_agg", &rl->loss_agg, r->err) ||
        lookup(whitens, cfg_str(c, "algorithm.whiten"), "algorithm.whiten", &rl->whiten, r->err) ||
        lookup(is_levels, cfg_str(c, "algorithm.rollout_is"), "algorithm.rollout_is", &rl->rollout_is, r->err) ||
        lookup(rs_levels, cfg_str(c, "algorithm.rollout_rs"), "algorithm.rollout_rs", &rl->rollout_rs, r->err))
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
    /* the algorithm keys that are rlp_rl_options fields of the same name */
    static const struct {
        const char *key;
        size_t offset;
        int is_bool; /* an int32_t 0/1, else a float */
    } fields[] = {
#define F(name) {"algorithm." #name, offsetof(rlp_rl_options, name), 0}
#define B(name) {"algorithm." #name, offsetof(rlp_rl_options, name), 1}
        F(adv_eps), F(gamma), F(clip_low), F(clip_high), F(dual_clip), F(tis_cap), F(behav_cap), F(kl_coef),
        F(entropy_coef), F(agg_norm_constant), F(sapo_tau_pos), F(sapo_tau_neg), F(rollout_is_threshold),
        F(rollout_rs_threshold), F(rollout_rs_threshold_lower), F(rollout_token_veto), F(clip_cov_ratio),
        F(clip_cov_lb), F(clip_cov_ub), F(kl_cov_ratio), F(ppo_kl_coef), B(adv_batch_norm), B(filter_equal_groups),
        B(behav_mask), B(kl_in_reward), B(rollout_is_batch_normalize), B(overlong_filter),
#undef F
#undef B
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char *at = (char *)rl + fields[i].offset;
        if (fields[i].is_bool)
            *(int32_t *)(void *)at = cfg_bool(c, fields[i].key);
        else
            *(float *)(void *)at = (float)cfg_num(c, fields[i].key);
    }
    rl->kl_estimator = rl->kl_coef > 0 ? kl_est : 0;
    const json_t *mgb = cfg_get(c, "algorithm.max_gen_batches");
    RANGE("algorithm.max_gen_batches", json_is_null(mgb) || (json_integer_value(mgb) >= 0 &&
          json_integer_value(mgb) <= 1000), "null or in [0, 1000] (0: filter only, no over-sampling)");
    RANGE("algorithm.clip_low", rl->clip_low >= 0 && rl->clip_low < 1, "in [0, 1)");
    RANGE("algorithm.clip_high", rl->clip_high >= 0 && rl->clip_high <= 100, "in [0, 100]");
    RANGE("algorithm.kl_coef", rl->kl_coef >= 0, "≥ 0");
    RANGE("algorithm.agg_norm_constant", rl->agg_norm_constant >= 0 && isfinite(rl->agg_norm_constant),
          "≥ 0 (0: the step's longest sequence)");
    RANGE("algorithm.gamma", rl->gamma >= 0 && rl->gamma <= 1, "in [0, 1]");
    RANGE("algorithm.gae_lambda", cfg_num(c, "algorithm.gae_lambda") >= 0 && cfg_num(c, "algorithm.gae_lambda") <= 1, "in [0, 1]");
    RANGE("critic.lr", cfg_num(c, "critic.lr") >= 0 && isfinite(cfg_num(c, "critic.lr")),
          "≥ 0 (0: the policy's optimizer.lr)");
    RANGE("critic.value_clip", cfg_num(c, "critic.value_clip") >= 0 && isfinite(cfg_num(c, "critic.value_clip")),
          "≥ 0 (0: no clipping)");
    RANGE("critic.warmup_steps", cfg_int(c, "critic.warmup_steps") >= 0 && cfg_int(c, "critic.warmup_steps") <= 1000000,
          "in [0, 1000000]");
    RANGE("critic.path", rl->advantage == RLP_ADV_GAE || !cfg_str(c, "critic.path"),
          "null unless algorithm.advantage is \"gae\" (a critic's values feed GAE only)");
    RANGE("distributed.world_size", rl->advantage != RLP_ADV_GAE || cfg_int(c, "distributed.world_size") == 1,
          "1 with algorithm.advantage \"gae\" (PPO with a critic runs on one rank)");
    RANGE("critic.path", !cfg_str(c, "critic.path") || !access(cfg_str(c, "critic.path"), R_OK),
          "a readable folder (an HF *ForTokenClassification with one output, e.g. a checkpoint's critic/)");
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
    /* ranges and contradictions (rollout_is with tis_cap, …) as the library will see them, before anything
     * is written: the message names the field, which is the algorithm key of the same name */
    if (rlp_rl_options_check(rl) != RLP_OK) {
        const char *m = rlp_error_last(), *p = strstr(m, "RL options: ");
        fmt(r->err, ERR_CAP, "algorithm: %s", p ? p + strlen("RL options: ") : m);
        return -1;
    }

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
    if (train_swarm_check(r))
        return -1;
    r->remote = json_array_size(cfg_get(c, "rollout.urls")) > 0 || r->swarm;
    if (cfg_str(c, "rollout.inbox") && (!r->async || r->remote || !*cfg_str(c, "rollout.inbox"))) {
        fmt(r->err, ERR_CAP, "rollout.inbox: needs sync.mode \"async\" and no rollout.urls (the rollouts come "
            "from `rlpost rollout-worker` processes writing into that folder)");
        return -1;
    }
    if (!r->async && cfg_int(c, "sync.staleness") != 0) {
        fmt(r->err, ERR_CAP, "sync.staleness: η applies to sync.mode \"async\" only (\"%s\" is on-policy: every "
            "step generates with the weights it trains); set it to 0 or choose \"async\"", mode);
        return -1;
    }
    if (r->remote && !r->pull && !r->async) {
        fmt(r->err, ERR_CAP, "%s: needs sync.mode \"pull\" or \"async\" (\"sync\" generates with "
            "the trainer's own weights)", r->swarm ? "swarm.listen" : "rollout.urls");
        return -1;
    }
    /* DAPO over-sampling refills sync and pull steps on one rank; null = 10 there, off elsewhere */
    r->max_gen_batches = 0;
    if (rl->filter_equal_groups && !r->async && r->world == 1)
        r->max_gen_batches = json_is_null(mgb) ? 10 : (uint32_t)json_integer_value(mgb);
    else if (rl->filter_equal_groups && !json_is_null(mgb) && json_integer_value(mgb) > 0) {
        fmt(r->err, ERR_CAP, "algorithm.max_gen_batches: over-sampling runs in sync.mode \"sync\" or \"pull\" on one "
            "rank; %s filters all-equal groups at train time (set it to null or 0)",
            r->async ? "an async run" : "a data-parallel run");
        return -1;
    }
    const char *backend = cfg_str(c, "backend"), *transport = cfg_str(c, "distributed.transport");
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda")) {
        fmt(r->err, ERR_CAP, "backend: unknown value \"%s\" (one of: cpu cuda)", backend);
        return -1;
    }
    const char *mm = cfg_str(c, "matmul_precision");
    if (cli_matmul_precision(mm) < 0) {
        fmt(r->err, ERR_CAP, "matmul_precision: unknown value \"%s\" (one of: auto fp32 bf16 tf32)", mm);
        return -1;
    }
    RANGE("device", !cfg_get(c, "device") || json_is_null(cfg_get(c, "device")) || cfg_int(c, "device") >= 0, "≥ 0");
    if (strcmp(transport, "auto") && strcmp(transport, "shm") && strcmp(transport, "nccl") && strcmp(transport, "mpi") &&
        strcmp(transport, "gloo")) {
        fmt(r->err, ERR_CAP, "distributed.transport: unknown value \"%s\" (one of: auto shm nccl mpi gloo)", transport);
        return -1;
    }
    RANGE("distributed.rendezvous", !cfg_str(c, "distributed.rendezvous") || *cfg_str(c, "distributed.rendezvous"),
          "a path, \"env://\", \"tcp://HOST:PORT\", or null");
    RANGE("distributed.timeout_s", cfg_num(c, "distributed.timeout_s") >= 1 &&
          cfg_num(c, "distributed.timeout_s") <= 86400, "in [1, 86400]");
    if (r->world > 1) {
        if (r->async || r->remote) {
            fmt(r->err, ERR_CAP, "distributed.world_size: several ranks need sync.mode \"sync\" or \"pull\" with "
                "the ranks' own engines (not \"async\", not rollout.urls, not swarm.listen)");
            return -1;
        }
        RANGE("prompts_per_step", cfg_int(c, "prompts_per_step") >= r->world,
              "≥ the number of ranks (each rank generates a share of the step's prompts)");
    }
    RANGE("rollout.max_seq_len", cfg_int(c, "rollout.max_seq_len") >= 0, "≥ 0");
    RANGE("rollout.weights", cli_rollout_weights(cfg_str(c, "rollout.weights")) >= 0,
          "\"auto\", \"f32\", \"q8_0\" or \"q4_0\"");
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
    r->gguf_type = -1;
    const char *gguf = cfg_str(c, "checkpoint.gguf");
    if (gguf) {
        int32_t t;
        if (rlp_gguf_type_from_name(&t, gguf) != RLP_OK) {
            fmt(r->err, ERR_CAP, "checkpoint.gguf: '%s' is not f32, f16, bf16, q8_0, q4_0 or q4_k", gguf);
            return -1;
        }
        r->gguf_type = t;
    }

    const char *model = cfg_str(c, "model");
    if (!model || access(model, R_OK)) {
        fmt(r->err, ERR_CAP, "model: cannot read '%s': %s", model ? model : "", strerror(errno));
        return -1;
    }
    const char *tokp = cfg_str(c, "tokenizer");
    if (tokp && !train_readable_file(tokp)) {
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
int train_make_task(run *r, int eval, rlp_task **out)
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
    if (!strcmp(name, "kk") || !strcmp(name, "countdown") || !strcmp(name, "arith") || !strcmp(name, "lookup")) {
        rc = rlp_task_create(out, name, text);
        if (rc)
            fmt(r->err, ERR_CAP, "task.options: %s", rlp_error_last());
    } else if (!strcmp(name, "gsm8k") || !strcmp(name, "jsonl")) {
        const char *path = task_path(c, eval, pbuf, sizeof pbuf);
        const char *key = eval && cfg_str(c, "eval.path") ? "eval.path" : "task.path";
        if (!path) {
            fmt(r->err, ERR_CAP, "task.path: task \"jsonl\" needs a dataset path");
            rc = RLP_E_INVALID_ARG;
        } else if (!train_readable_file(path)) {
            fmt(r->err, ERR_CAP, "%s: cannot read '%s': %s", key, path, strerror(errno));
            rc = RLP_E_IO;
        } else if ((rc = rlp_task_open_jsonl(out, path, text)) != RLP_OK) {
            fmt(r->err, ERR_CAP, "%s: %s", rc == RLP_E_INVALID_ARG ? "task.options" : key, rlp_error_last());
        }
    } else {
        fmt(r->err, ERR_CAP, "task.name: unknown task \"%s\" (one of: arith kk countdown lookup gsm8k jsonl)", name);
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

/* The options of one term of reward.name: reward.options[name] when that
 * is an object (per-term options, e.g. {"reward_model": {"model": ...}}
 * for "logic_rl_format+0.5*reward_model"), else the shared object without
 * the keys that name a term of reward.name. A malloc'd JSON string. */
static char *term_options(json_t *c, const char *name, const char *shared)
{
    json_t *all = cfg_get(c, "reward.options");
    json_t *own = json_is_object(all) ? json_object_get(all, name) : NULL;
    if (json_is_object(own))
        return json_dumps(own, JSON_COMPACT);
    if (!json_is_object(all))
        return shared ? strdup(shared) : NULL;
    json_t *rest = json_deep_copy(all);
    char names[256];
    fmt(names, sizeof names, "%s", cfg_str(c, "reward.name"));
    for (char *save = NULL, *t = strtok_r(names, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
        char *star = strchr(t, '*');
        const char *key = star ? star + 1 : t;
        if (json_is_object(json_object_get(rest, key)))
            json_object_del(rest, key);
    }
    char *out = json_dumps(rest, JSON_COMPACT);
    json_decref(rest);
    return out;
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
        char *topts = n < 8 && !rc ? term_options(c, t, opts) : NULL;
        if (n == 8 || rc || (rc = make_one_reward(r, t, topts, &fns[n])) != RLP_OK) {
            free(topts);
            if (n == 8)
                fmt(r->err, ERR_CAP, "reward.name: at most 8 rewards joined with '+'");
            for (size_t i = 0; i < n; i++)
                rlp_reward_fn_free(fns[i]);
            free(opts);
            return rc ? rc : RLP_E_INVALID_ARG;
        }
        /* the term once more, alone: samples.jsonl shows every term's score
         * (kept in r, freed by teardown) */
        rc = make_one_reward(r, t, topts, &r->terms[r->n_terms]);
        free(topts);
        if (rc != RLP_OK) {
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
        } else if (!strcmp(task, "lookup")) {
            acc = "lookup_em";
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
        char *opts = is_term && !cfg_str(c, "reward.library") ? term_options(c, acc, NULL) : NULL;
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
/* Setup shared by train and eval                                           */
/* ------------------------------------------------------------------------ */

/* Whether a setting of a checkpoint's configuration equals the run's.
 * How the reward runs (reward.isolation and its limits) is not what it
 * computes: it may change on resume, and checkpoints written before those
 * keys existed lack them. */
static int same_setting(const char *key, json_t *saved, json_t *now)
{
    if (!json_is_object(saved) || !json_is_object(now))
        return json_equal(saved, now);
    json_t *a = json_deep_copy(saved), *b = json_deep_copy(now);
    /* a key added since the checkpoint was written takes its default there
     * (algorithm.rollout_is and the other version-2 RL options, say) */
    json_t *defaults = train_config_defaults(), *dsec = json_object_get(defaults, key);
    const char *k;
    json_t *v;
    json_object_foreach(b, k, v)
        if (a && !json_object_get(a, k) && json_object_get(dsec, k))
            json_object_set(a, k, json_object_get(dsec, k));
    json_decref(defaults);
    static const char *const how[] = {"isolation", "workers", "timeout_ms", "batch_size", "max_restarts"};
    for (size_t i = 0; !strcmp(key, "reward") && i < sizeof how / sizeof how[0]; i++) {
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
const char *train_changed_setting(json_t *saved, const json_t *cfg)
{
    static const char *const must_match[] = {"model",    "seed",      "task",   "group_size", "prompts_per_step",
                                             "sampling", "algorithm", "reward", "lora"};
    for (size_t i = 0; saved && i < sizeof must_match / sizeof must_match[0]; i++)
        if (!same_setting(must_match[i], json_object_get(saved, must_match[i]), cfg_get(cfg, must_match[i])))
            return must_match[i];
    return NULL;
}

/* The trainer (lib/train): the run's options from the configuration. With
 * sync.mode "async" and a local engine the rollout side gets a context and
 * a copy of the policy of its own (half the threads). `rlpost eval` uses a
 * sync trainer over the frozen policy for its completions. */
/* The environment of a multi-turn run (env.name or env.url), or none. */
static int make_env(run *r)
{
    const char *name = cfg_str(r->cfg, "env.name"), *url = cfg_str(r->cfg, "env.url");
    if (!name && !url)
        return 0;
    rlp_env_options eo = RLP_ENV_OPTIONS_INIT;
    eo.timeout_ms = (uint32_t)cfg_int(r->cfg, "env.timeout_ms");
    eo.max_threads = (uint32_t)cfg_int(r->cfg, "env.threads");
    eo.max_observation_bytes = (uint64_t)cfg_int(r->cfg, "env.max_observation_bytes");
    int rc;
    if (name) {
        char *opts = json_dumps(cfg_get(r->cfg, "env.options"), JSON_COMPACT);
        rc = rlp_env_create_builtin(&r->env, name, opts ? opts : "{}", &eo);
        free(opts);
    } else {
        rc = rlp_env_create_http(&r->env, url, getenv("RLPOST_ENV_TOKEN"), &eo);
    }
    if (rc) {
        fmt(r->err, ERR_CAP, "env: %s", rlp_error_last());
        return 1;
    }
    return 0;
}

void train_multiturn(const run *r, rlp_multiturn_options *mt)
{
    rlp_multiturn_options_init(mt, RLP_MULTITURN_OPTIONS_VERSION);
    mt->env = r->env;
    mt->max_turns = (uint32_t)cfg_int(r->cfg, "multiturn.max_turns");
    mt->max_tokens = (uint32_t)cfg_int(r->cfg, "multiturn.max_tokens");
    mt->overlap = cfg_bool(r->cfg, "multiturn.overlap");
}

static int make_trainer(run *r, int need_train)
{
    rlp_trainer_options o;
    rlp_trainer_options_init(&o, RLP_TRAINER_OPTIONS_VERSION);
    o.mode = !need_train ? RLP_TRAIN_SYNC : r->async ? RLP_TRAIN_ASYNC : r->pull ? RLP_TRAIN_PULL : RLP_TRAIN_SYNC;
    o.max_staleness = o.mode == RLP_TRAIN_ASYNC ? (uint32_t)cfg_int(r->cfg, "sync.staleness") : 0;
    o.prompts_per_step = (uint32_t)cfg_int(r->cfg, "prompts_per_step");
    o.seed = (uint64_t)cfg_int(r->cfg, "seed");
    o.sampling = r->sampling;
    o.rl = r->rl;
    /* DAPO over-sampling goes with the filter it refills, in the on-policy modes on one rank (async
     * and data-parallel runs filter at train time; docs/configuration.md) */
    o.max_gen_batches = r->max_gen_batches;
    /* PPO with a critic: algorithm.advantage "gae"; the critic a copy of the policy with a value head
     * unless critic.path names a saved one */
    if (r->rl.advantage == RLP_ADV_GAE) {
        o.critic_path = cfg_str(r->cfg, "critic.path") ? cfg_str(r->cfg, "critic.path") : "policy";
        o.critic_lr = (float)cfg_num(r->cfg, "critic.lr");
        o.critic_warmup = (uint32_t)cfg_int(r->cfg, "critic.warmup_steps");
        o.value_clip = (float)cfg_num(r->cfg, "critic.value_clip");
        o.gae_lambda = (float)cfg_num(r->cfg, "algorithm.gae_lambda");
    }
    /* LoRA: the reference of the KL is the policy's own frozen base (adapters off) */
    o.ref = r->ref ? r->ref : r->rl.kl_coef > 0 && cfg_int(r->cfg, "lora.rank") != 0 ? r->policy : NULL;
    o.tokenizer = r->ext_tok;
    o.max_seq_len = (uint32_t)cfg_int(r->cfg, "rollout.max_seq_len");
    o.rollout_weights = cli_rollout_weights(cfg_str(r->cfg, "rollout.weights")); /* checked above */
    /* the engine on the trainer's context generates the training rollouts
     * in sync and local pull mode, and the evaluations in every mode */
    long long eval_n = cfg_int(r->cfg, "eval.n");
    long long mb = !need_train || !(r->async || r->remote) ? cfg_int(r->cfg, "prompts_per_step") * cfg_int(r->cfg, "group_size") : 1;
    mb = eval_n > mb ? eval_n : mb;
    /* an evaluation of 200 prompts decoded all at once holds 200 KV caches:
     * the default job peaked at 3.69 GB with them, 3.00 GB with waves of
     * 64 and 2.80 GB with 32, where the 200-prompt evaluation took 1.2-1.6x
     * as long as with 64 (docs/PERFORMANCE.md) */
    o.max_batch = (uint32_t)(mb < 64 ? mb : 64);
    o.comm = r->comm;
    const char *urls[64];
    json_t *ju = cfg_get(r->cfg, "rollout.urls");
    for (size_t i = 0; need_train && i < json_array_size(ju) && i < 64; i++)
        urls[o.n_worker_urls++] = json_string_value(json_array_get(ju, i));
    o.worker_urls = urls;
    o.remote_workers = need_train && r->swarm; /* the swarm's workers join later (train_swarm.c) */
    o.api_key = r->swarm && r->swarm_token[0] ? r->swarm_token : getenv("RLPOST_SERVE_TOKEN");
    char wdir[PATH_MAX];
    const char *wd = cfg_str(r->cfg, "sync.weights_dir");
    fmt(wdir, sizeof wdir, "%s", wd ? wd : "");
    if (!wd)
        fmt(wdir, sizeof wdir, "%s/weights", r->out);
    o.weights_dir = wdir;
    o.rollout_inbox = need_train ? cfg_str(r->cfg, "rollout.inbox") : NULL;
    if (o.rollout_inbox && train_mkdir_p(o.rollout_inbox)) {
        fmt(r->err, ERR_CAP, "rollout.inbox: cannot create '%s': %s", o.rollout_inbox, strerror(errno));
        return EXIT_USAGE;
    }
    /* what metrics.jsonl reports besides the reward */
    rlp_trainer_metric m[3];
    if (r->format_fn)
        m[o.n_metrics++] = (rlp_trainer_metric){r->format_fn, "format_reward_mean", "format_rate", 0.5};
    if (r->acc_fn)
        m[o.n_metrics++] = (rlp_trainer_metric){r->acc_fn, NULL, "accuracy", r->acc_threshold};
    if (r->parse_fn)
        m[o.n_metrics++] = (rlp_trainer_metric){r->parse_fn, NULL, "answer_parse_rate", 0.5};
    o.metrics = m;
    train_multiturn(r, &o.multiturn);
    o.on_batch = train_on_batch;
    o.on_batch_payload = r;
    o.rollout_threads = need_train && r->async && !r->remote && !o.rollout_inbox ? (uint32_t)r->threads_rollout : 0;
    int rc = rlp_trainer_create(&r->trainer, r->policy, r->task, r->reward, &o);
    if (rc) {
        fmt(r->err, ERR_CAP, "%s", rlp_error_last());
        return rc == RLP_E_INVALID_ARG ? EXIT_USAGE : 1;
    }
    if (need_train && r->remote)
        fprintf(stderr, "rollout: %zu worker%s%s, weights in %s\n", o.n_worker_urls, o.n_worker_urls == 1 ? "" : "s",
                r->swarm ? " (static) and those that join the swarm" : "", wdir);
    return 0;
}

/* Everything that can be refused before anything is written. */
int train_setup(run *r, const char *weights, int need_train)
{
    if (train_check_config(r))
        return EXIT_USAGE;
    if (train_make_task(r, 0, &r->task))
        return EXIT_USAGE;
    if (cfg_int(r->cfg, "eval.n") > 0) { /* the held-out task must open too */
        rlp_task *t;
        if (train_make_task(r, 1, &t))
            return EXIT_USAGE;
        rlp_task_free(t);
    }
    if (make_reward(r) || make_metric_scorers(r) || make_env(r))
        return EXIT_USAGE;
    if (need_train && r->remote && train_check_urls(r))
        return EXIT_USAGE;
    fmt(r->weights, sizeof r->weights, "%s", weights);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = (int32_t)cfg_int(r->cfg, "threads");
    co.seed = (uint64_t)cfg_int(r->cfg, "seed");
    /* checked above: auto, fp32, bf16 or tf32 (TF32 runs as fp32 on the
     * CPU; auto is bf16 on a CPU with bf16 instructions, else fp32) */
    const char *mm = cfg_str(r->cfg, "matmul_precision");
    co.matmul_precision = cli_matmul_precision(mm);
    if (need_train && r->async && !r->remote && !cfg_str(r->cfg, "rollout.inbox")) {
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
    if (need_train && r->rl.kl_coef > 0 && cfg_int(r->cfg, "lora.rank") == 0) {
        rlp_policy_options fo = RLP_POLICY_OPTIONS_INIT;
        fo.trainable = 0;
        if ((rc = rlp_policy_load(&r->ref, r->ctx, cfg_str(r->cfg, "model"), &fo))) {
            fmt(r->err, ERR_CAP, "model: cannot load the reference policy: %s", rlp_error_last());
            return 1;
        }
    }
    if (need_train && cfg_int(r->cfg, "lora.rank") != 0) {
        /* LoRA: adapters over the frozen base; rollout workers and saves get the merged weights */
        rlp_lora_options lo = RLP_LORA_OPTIONS_INIT;
        long long rank = cfg_int(r->cfg, "lora.rank");
        lo.rank = rank > INT32_MAX || rank < 0 ? -1 : (int32_t)rank;
        lo.alpha = (float)cfg_num(r->cfg, "lora.alpha");
        lo.rslora = cfg_bool(r->cfg, "lora.rslora");
        lo.targets = cfg_str(r->cfg, "lora.targets");
        lo.seed = (uint64_t)cfg_int(r->cfg, "seed");
        lo.base_dtype = cfg_str(r->cfg, "lora.base_dtype");
        uint64_t n_all = 0, n_train = 0;
        if ((rc = rlp_policy_enable_lora(r->policy, &lo))) {
            fmt(r->err, ERR_CAP, "lora: %s", rlp_error_last());
            return EXIT_USAGE;
        }
        rlp_policy_n_params(&n_all, r->policy);
        rlp_policy_n_trainable(&n_train, r->policy);
        if (r->rank == 0) {
            rlp_memory_stats ms = {0};
            rlp_policy_memory(&ms, r->policy);
            fprintf(stderr,
                    "lora: rank %d, alpha %g%s, targets %s, base %s: %llu trainable parameters (%.2f%% of %llu); "
                    "weights %.1f MiB\n",
                    (int)lo.rank, (double)lo.alpha, lo.rslora ? " (rsLoRA)" : "", lo.targets ? lo.targets : "all",
                    lo.base_dtype ? lo.base_dtype : "f32", (unsigned long long)n_train,
                    100.0 * (double)n_train / (double)(n_all ? n_all : 1), (unsigned long long)n_all,
                    (double)ms.weights / 1048576.0);
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
    return r->no_trainer ? 0 : make_trainer(r, need_train);
}

void train_teardown(run *r)
{
    train_swarm_stop(r->coord); /* its routes call the trainer */
    r->coord = NULL;
    rlp_trainer_free(r->trainer);
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
    rlp_env_free(r->env);   /* after the trainer: its engines used it */
    rlp_context_free(r->ctx);
    /* the reward library stays loaded: its threads may still run (abandoned calls) */
    json_decref(r->cfg);
}

/* Parses CONFIG.json [--set k=v]... [--resume DIR | --checkpoint DIR]. */
int train_parse_args(int argc, char **argv, const char *cmd, const char *dir_flag, run *r, const char **dir)
{
    const char *config = NULL, *what = strcmp(dir_flag, "--batches") ? "DIR" : "N";
    char **sets = calloc((size_t)argc, sizeof *sets);
    size_t n_sets = 0;
    *dir = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: rlpost %s CONFIG.json [--set key=value]... [%s %s]\n\n"
                   "CONFIG.json is a JSON object of settings over the defaults; --set key=value overrides one\n"
                   "(dotted keys: --set algorithm.advantage='\"gae\"', --set reward.options.reward_model.model=DIR;\n"
                   "the value is JSON, or a plain string). %s\n"
                   "Every key, its default and its range: docs/configuration.md.\n",
                   cmd, dir_flag, what,
                   !strcmp(dir_flag, "--resume")     ? "--resume DIR continues the run of output folder (or checkpoint) "
                                                        "DIR in the configuration's output."
                   : !strcmp(dir_flag, "--checkpoint") ? "--checkpoint DIR evaluates a run's checkpoint."
                                                        : "--batches N stops after N batches.");
            free(sets);
            return TRAIN_ARGS_HELP;
        }
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
                    "[%s %s]\n", cmd, argv[i], cmd, dir_flag, what);
            free(sets);
            return EXIT_USAGE;
        }
    }
    if (!config) {
        fprintf(stderr, "usage: rlpost %s CONFIG.json [--set key=value]... [%s %s]\n", cmd, dir_flag, what);
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

