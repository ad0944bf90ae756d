/* rlp_trainer and rlp_rollout_worker on a tiny random Llama (vocab 128)
 * with a llama2.c tokenizer written by the test (the model has none) and
 * the "arith" task as plain text: sync steps and their record and JSON,
 * async η = 0 equal to sync bit for bit, a pull run, checkpoint and resume
 * (the resumed step equals the uninterrupted run's), the errors of misuse,
 * an interrupt from another thread, and the rollout worker on its own
 * (run_once, its thread, its counters). One thread, a few tokens per
 * sample: the whole file runs in seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/policy.h"
#include "tiny_model.h"

#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { VOCAB = 128, G = 2, N = 4, MAX_NEW = 6 };

static rlp_context *ctx;
static rlp_tokenizer *tok;
static char tmpdir[256];

/* ---- fixtures -------------------------------------------------------------------- */

/* A llama2.c tokenizer.bin of VOCAB pieces: <unk>, BOS, EOS, the 95
 * printable ASCII characters, then letter pairs (int32 max_len, then per
 * piece float32 score, int32 length, bytes). */
static void write_tokenizer(const char *path)
{
    char pieces[VOCAB][8];
    int n = 0;
    snprintf(pieces[n++], 8, "<unk>");
    snprintf(pieces[n++], 8, "\n<s>\n");
    snprintf(pieces[n++], 8, "\n</s>\n");
    for (int c = 32; c < 127; c++)
        snprintf(pieces[n++], 8, "%c", c);
    for (int a = 'a'; n < VOCAB; a++)
        for (int b = 'a'; b <= 'z' && n < VOCAB; b++)
            snprintf(pieces[n++], 8, "%c%c", a, b);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t max_len = 6;
    fwrite(&max_len, 4, 1, f);
    for (int i = 0; i < VOCAB; i++) {
        float score = -(float)i;
        int32_t len = (int32_t)strlen(pieces[i]);
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(pieces[i], 1, (size_t)len, f);
    }
    fclose(f);
}

static rlp_policy *tiny(uint64_t seed)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", true);
    cfg.vocab_size = VOCAB;
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, seed), RLP_OK);
    rlp_policy *p;
    assert_int_equal(rlpi_policy_create(&p, ctx, &cfg, &w, NULL), RLP_OK);
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 3e-3f;
    oo.weight_decay = 0;
    assert_int_equal(rlp_policy_set_optimizer(p, &oo), RLP_OK);
    return p;
}

static rlp_task *arith(void)
{
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "arith", "{\"seed\": 3}"), RLP_OK);
    return t;
}

/* the reward: share of even token ids; while *hold is set, it waits (a
 * rollout side kept busy on purpose) */
static int even_share(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    atomic_int *hold = payload;
    while (hold && atomic_load(hold)) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    size_t even = 0;
    for (size_t k = 0; k < req->n_completion_tokens; k++)
        even += req->completion_tokens[k] % 2 == 0;
    res->score = req->n_completion_tokens ? (double)even / (double)req->n_completion_tokens : 0;
    return 0;
}

/* a callback reward on one thread, without a timeout */
static rlp_reward_fn *callback_reward(rlp_reward_callback fn, void *payload)
{
    rlp_reward_options ro = RLP_REWARD_OPTIONS_INIT;
    ro.n_threads = 1;
    ro.timeout_ms = 0;
    rlp_reward_fn *r;
    assert_int_equal(rlp_reward_fn_create_callback(&r, fn, &ro, payload), RLP_OK);
    return r;
}

static rlp_reward_fn *reward(atomic_int *hold)
{
    return callback_reward(even_share, hold);
}

static rlp_trainer_options options(int mode, uint32_t eta)
{
    rlp_trainer_options o;
    assert_int_equal(rlp_trainer_options_init(&o, RLP_TRAINER_OPTIONS_VERSION), RLP_OK);
    o.mode = mode;
    o.max_staleness = eta;
    o.prompts_per_step = G;
    o.seed = 42;
    o.sampling.n = N;
    o.sampling.max_new_tokens = MAX_NEW;
    o.sampling.ignore_eos = 1;
    o.tokenizer = tok;
    o.max_seq_len = 64;
    return o;
}

/* one run: a policy, a task, a reward and a trainer over them */
typedef struct run {
    rlp_policy *policy;
    rlp_task *task;
    rlp_reward_fn *reward;
    rlp_trainer *trainer;
} run;

static void run_open(run *r, const rlp_trainer_options *o, atomic_int *hold)
{
    r->policy = tiny(7);
    r->task = arith();
    r->reward = reward(hold);
    assert_int_equal(rlp_trainer_create(&r->trainer, r->policy, r->task, r->reward, o), RLP_OK);
}

static void run_close(run *r)
{
    rlp_trainer_free(r->trainer);
    rlp_reward_fn_free(r->reward);
    rlp_task_free(r->task);
    rlp_policy_free(r->policy);
}

static rlp_step_record step(rlp_trainer *t)
{
    rlp_step_record rec = {.version = RLP_STEP_RECORD_VERSION};
    int rc = rlp_trainer_step(t, &rec);
    if (rc)
        fail_msg("rlp_trainer_step: %s (%s)", rlp_error_last(), rlp_status_str(rc));
    return rec;
}

static void check_record(const rlp_step_record *r, uint64_t k)
{
    assert_int_equal(r->step, k);
    assert_int_equal(r->policy_version, k);
    assert_int_equal(r->n_prompts, G);
    assert_non_null(r->prompt_index);
    assert_int_equal(r->completions, G * N);
    assert_int_equal(r->completion_tokens, G * N * MAX_NEW);
    assert_int_equal(r->reward_valid, G * N);
    assert_true(r->reward_min >= 0 && r->reward_min <= r->reward_mean && r->reward_mean <= r->reward_max &&
                r->reward_max <= 1);
    assert_true(isfinite(r->rl.loss) && isfinite(r->rl.grad_norm));
    assert_int_equal(r->rl.n_seqs, G * N);
    assert_true(r->step_seconds >= r->train_seconds && r->train_seconds > 0);
}

/* ---- trainer ----------------------------------------------------------------------- */

static void test_sync_steps(void **state)
{
    (void)state;
    rlp_reward_fn *metric = reward(NULL);
    rlp_trainer_metric m = {metric, "even_mean", "even_rate", 0.5};
    rlp_trainer_options o = options(RLP_TRAIN_SYNC, 0);
    o.metrics = &m;
    o.n_metrics = 1;
    run r;
    run_open(&r, &o, NULL);
    for (uint64_t k = 1; k <= 2; k++) {
        rlp_step_record rec = step(r.trainer);
        check_record(&rec, k);
        assert_int_equal(rec.buffer_dropped, 0);
        /* the metric is the training reward here: the same mean */
        assert_true(fabs(rec.metric_mean[0] - rec.reward_mean) < 1e-6);
        assert_true(rec.metric_rate[0] >= 0 && rec.metric_rate[0] <= 1);
        assert_true(isnan(rec.metric_mean[1]));
        uint64_t done = 0;
        assert_int_equal(rlp_trainer_steps_done(&done, r.trainer), RLP_OK);
        assert_int_equal(done, k);
    }
    char buf[8192];
    size_t len = 0;
    assert_int_equal(rlp_trainer_step_json(r.trainer, buf, sizeof buf, &len), RLP_OK);
    assert_int_equal(len, strlen(buf));
    json_error_t je;
    json_t *j = json_loads(buf, 0, &je);
    if (!j)
        fail_msg("step_json is not JSON (%s): %s", je.text, buf);
    assert_int_equal(json_integer_value(json_object_get(j, "step")), 2);
    assert_int_equal(json_integer_value(json_object_get(j, "policy_version")), 2);
    assert_true(json_is_number(json_object_get(j, "reward_mean")));
    assert_true(json_is_number(json_object_get(j, "even_mean")));
    assert_true(json_is_number(json_object_get(j, "even_rate")));
    assert_true(json_is_array(json_object_get(j, "prompt_index")));
    assert_int_equal(json_array_size(json_object_get(j, "prompt_index")), G);
    json_decref(j);
    /* too small a buffer: the length it needs, nothing written past cap */
    char small[16];
    size_t need = 0;
    memset(small, 'x', sizeof small);
    assert_int_equal(rlp_trainer_step_json(r.trainer, small, 8, &need), RLP_E_OVERFLOW);
    assert_int_equal(need, len);
    assert_int_equal(small[8], 'x');
    run_close(&r);
    rlp_reward_fn_free(metric);
}

/* η = 0: the rollout thread may generate step k's groups only once
 * version k − 1 is published, with step k's seed — the groups of a sync
 * run, so every figure of the step is the same bit for bit */
static void test_async_eta0_equals_sync(void **state)
{
    (void)state;
    rlp_trainer_options os = options(RLP_TRAIN_SYNC, 0), oa = options(RLP_TRAIN_ASYNC, 0);
    run s, a;
    run_open(&s, &os, NULL);
    run_open(&a, &oa, NULL);
    for (uint64_t k = 1; k <= 3; k++) {
        rlp_step_record rs = step(s.trainer), ra = step(a.trainer);
        check_record(&rs, k);
        check_record(&ra, k);
        assert_memory_equal(&rs.reward_mean, &ra.reward_mean, sizeof(double));
        assert_memory_equal(&rs.reward_std, &ra.reward_std, sizeof(double));
        assert_memory_equal(&rs.rl.loss, &ra.rl.loss, sizeof rs.rl.loss);
        assert_memory_equal(&rs.rl.grad_norm, &ra.rl.grad_norm, sizeof rs.rl.grad_norm);
        assert_int_equal(rs.policy_version, ra.policy_version);
        assert_int_equal(rs.sampling_seed, ra.sampling_seed);
        assert_memory_equal(rs.prompt_index, ra.prompt_index, G * sizeof(uint64_t));
        assert_true(ra.rl.staleness_max == 0);
        assert_int_equal(ra.buffer_dropped, 0);
    }
    run_close(&s);
    run_close(&a);
}

/* PPO with a critic (GAE): async at η = 0 equals sync with the critic's
 * figures too (the critic trains on the trainer's thread while the rollout
 * thread generates: under TSan in the tsan suite); a version-5 record
 * stops before the critic's fields */
static void test_ppo_critic_async_equals_sync(void **state)
{
    (void)state;
    rlp_trainer_options os = options(RLP_TRAIN_SYNC, 0), oa = options(RLP_TRAIN_ASYNC, 0);
    os.rl.advantage = oa.rl.advantage = RLP_ADV_GAE;
    os.critic_path = oa.critic_path = "policy";
    os.critic_lr = oa.critic_lr = 1e-3f;
    run s, a;
    run_open(&s, &os, NULL);
    run_open(&a, &oa, NULL);
    for (uint64_t k = 1; k <= 3; k++) {
        rlp_step_record rs = step(s.trainer), ra = step(a.trainer);
        check_record(&rs, k);
        check_record(&ra, k);
        assert_true(rs.value_loss > 0 && isfinite(rs.critic_grad_norm) && rs.critic_seconds > 0);
        assert_true(k > 1 || rs.values_mean == 0.0); /* the zero-initialised head */
        assert_memory_equal(&rs.value_loss, &ra.value_loss, sizeof(double));
        assert_memory_equal(&rs.values_mean, &ra.values_mean, sizeof(double));
        assert_memory_equal(&rs.returns_mean, &ra.returns_mean, sizeof(double));
        assert_memory_equal(&rs.rl.loss, &ra.rl.loss, sizeof rs.rl.loss);
    }
    rlp_step_record old = {.version = 5};
    memset(&old.value_loss, 0x5a, sizeof old - offsetof(rlp_step_record, value_loss));
    assert_int_equal(rlp_trainer_step(s.trainer, &old), RLP_OK);
    unsigned char *tail = (unsigned char *)&old.value_loss;
    for (size_t i = 0; i < sizeof old - offsetof(rlp_step_record, value_loss); i++)
        assert_int_equal(tail[i], 0x5a);
    run_close(&s);
    run_close(&a);
}

static void test_pull(void **state)
{
    (void)state;
    rlp_trainer_options o = options(RLP_TRAIN_PULL, 0);
    run r;
    run_open(&r, &o, NULL);
    for (uint64_t k = 1; k <= 2; k++) {
        rlp_step_record rec = step(r.trainer);
        check_record(&rec, k);
        assert_true(rec.rl.staleness_max == 0);
    }
    /* generation with the current weights, for an evaluation */
    rlp_task *t = arith();
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 3, NULL), RLP_OK);
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    so.n = 2;
    so.max_new_tokens = 4;
    so.ignore_eos = 1;
    rlp_batch *b = NULL;
    assert_int_equal(rlp_trainer_generate(&b, r.trainer, set, &so), RLP_OK);
    size_t n = 0;
    rlp_batch_size(&n, b);
    assert_int_equal(n, 6);
    rlp_batch_free(b);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
    run_close(&r);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* 2 steps, a checkpoint, a fresh trainer and task resumed from it: step 3
 * equals step 3 of the run that never stopped */
static void test_checkpoint_resume(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    rlp_trainer_options o = options(RLP_TRAIN_SYNC, 0);
    run whole, r;
    run_open(&whole, &o, NULL);
    run_open(&r, &o, NULL);
    for (int k = 0; k < 2; k++) {
        step(whole.trainer);
        step(r.trainer);
    }
    rlp_step_record expect = step(whole.trainer);
    assert_int_equal(rlp_trainer_checkpoint(r.trainer, dir, RLP_DTYPE_F32, "{\"host\": 1}"), RLP_OK);
    assert_int_equal(rlp_trainer_checkpoint(r.trainer, dir, RLP_DTYPE_F32, "[1]"), RLP_E_INVALID_ARG);
    /* a resume after a step */
    assert_int_equal(rlp_trainer_resume(r.trainer, dir), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "before the first step"));
    rlp_trainer_free(r.trainer);
    rlp_task_free(r.task);
    r.task = arith(); /* at its start: the cursor comes from the checkpoint */
    /* another prompts_per_step */
    rlp_trainer_options o3 = o;
    o3.prompts_per_step = 3;
    assert_int_equal(rlp_trainer_create(&r.trainer, r.policy, r.task, r.reward, &o3), RLP_OK);
    assert_int_equal(rlp_trainer_resume(r.trainer, dir), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "prompts_per_step"));
    rlp_trainer_free(r.trainer);
    /* no checkpoint there */
    assert_int_equal(rlp_trainer_create(&r.trainer, r.policy, r.task, r.reward, &o), RLP_OK);
    assert_int_equal(rlp_trainer_resume(r.trainer, tmpdir), RLP_E_NOT_FOUND);
    assert_int_equal(rlp_trainer_resume(r.trainer, dir), RLP_OK);
    uint64_t done = 0;
    assert_int_equal(rlp_trainer_steps_done(&done, r.trainer), RLP_OK);
    assert_int_equal(done, 2);
    rlp_step_record got = step(r.trainer);
    check_record(&got, 3);
    assert_int_equal(got.sampling_seed, expect.sampling_seed);
    assert_memory_equal(got.prompt_index, expect.prompt_index, G * sizeof(uint64_t));
    assert_int_equal(got.epoch, expect.epoch);
    assert_memory_equal(&got.reward_mean, &expect.reward_mean, sizeof(double));
    assert_memory_equal(&got.rl.loss, &expect.rl.loss, sizeof got.rl.loss);
    run_close(&r);
    run_close(&whole);
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static int fail_batch(const rlp_batch *b, uint64_t k, void *payload)
{
    (void)b;
    *(uint64_t *)payload = k;
    return 1;
}

static void test_misuse(void **state)
{
    (void)state;
    rlp_policy *p = tiny(7);
    rlp_task *task = arith();
    rlp_reward_fn *rw = reward(NULL);
    rlp_trainer *t = NULL;
    /* η ≠ 0 outside ASYNC */
    rlp_trainer_options o = options(RLP_TRAIN_SYNC, 1);
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "max_staleness"));
    assert_null(t);
    o = options(RLP_TRAIN_PULL, 2);
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_E_INVALID_ARG);
    /* NULL arguments, a bad mode, no tokenizer for a model without one */
    o = options(RLP_TRAIN_SYNC, 0);
    assert_int_equal(rlp_trainer_create(NULL, p, task, rw, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_trainer_create(&t, NULL, task, rw, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_trainer_create(&t, p, NULL, rw, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_trainer_create(&t, p, task, NULL, &o), RLP_E_INVALID_ARG);
    o.mode = 7;
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_E_INVALID_ARG);
    o = options(RLP_TRAIN_SYNC, 0);
    o.tokenizer = NULL;
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "tokenizer"));
    assert_null(t);
    assert_int_equal(rlp_trainer_step(NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_trainer_interrupt(NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_trainer_steps_done(NULL, NULL), RLP_E_INVALID_ARG);
    rlp_trainer_free(NULL);

    /* the JSON before any step; a record of an unknown version */
    o = options(RLP_TRAIN_SYNC, 0);
    uint64_t failed_at = 0;
    o.on_batch = fail_batch;
    o.on_batch_payload = &failed_at;
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_OK);
    char buf[64];
    size_t len = 0;
    assert_int_equal(rlp_trainer_step_json(t, buf, sizeof buf, &len), RLP_E_STATE);
    assert_int_equal(rlp_trainer_step_json(t, NULL, 0, NULL), RLP_E_INVALID_ARG);
    rlp_step_record rec = {.version = 99};
    assert_int_equal(rlp_trainer_step(t, &rec), RLP_E_INVALID_ARG);
    /* a failing on_batch fails the step, nothing trained; then the trainer is failed */
    rec.version = RLP_STEP_RECORD_VERSION;
    assert_int_equal(rlp_trainer_step(t, &rec), RLP_E_CALLBACK);
    assert_int_equal(failed_at, 1);
    uint64_t v = 9;
    rlp_policy_version(&v, p);
    assert_int_equal(v, 0);
    assert_int_equal(rlp_trainer_step(t, &rec), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "earlier step failed"));
    assert_int_equal(rlp_trainer_step_json(t, buf, sizeof buf, &len), RLP_E_STATE);
    rlp_trainer_free(t);
    rlp_reward_fn_free(rw);
    rlp_task_free(task);
    rlp_policy_free(p);
}

/* ---- DAPO dynamic sampling (max_gen_batches) ------------------------------------- */

/* the task's record index of a sample ("index" of the arith metadata) */
static uint64_t meta_index(const char *meta)
{
    const char *p = meta ? strstr(meta, "\"index\":") : NULL;
    assert_non_null(p);
    return strtoull(p + 8, NULL, 10);
}

/* A reward that depends on the prompt only, not on the model: prompts of an
 * even record index score 1 for every sample (an all-equal group), odd
 * ones sample_index / N (unequal); *payload set: 1 for every sample. */
static int parity_reward(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    const int *constant = payload;
    uint64_t index = meta_index(req->metadata_json);
    res->score = (constant && *constant) || index % 2 == 0 ? 1.0 : (double)req->sample_index / N;
    return 0;
}

static rlp_reward_fn *parity(int *constant)
{
    return callback_reward(parity_reward, constant);
}

/* What a step of dynamic sampling must do, from a second copy of the task
 * (the same prompts in the same order): batches of G prompts until G odd
 * (unequal) ones, at most cap batches; the kept prompts' indices, the
 * batches drawn, the even (all-equal) groups seen, the odd ones seen. */
typedef struct dyn_expect {
    uint64_t ids[G];
    size_t kept;
    uint32_t batches;
    uint64_t even, odd;
} dyn_expect;

static dyn_expect expect_step(rlp_task *ref, uint32_t cap)
{
    dyn_expect x = {0};
    while (x.kept < G && x.batches < cap) {
        rlp_prompt_set *set;
        assert_int_equal(rlp_task_next_batch(&set, ref, G, NULL), RLP_OK);
        x.batches++;
        for (size_t i = 0; i < G; i++) {
            rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
            assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
            if (it.index % 2 == 0) {
                x.even++;
                continue;
            }
            x.odd++;
            if (x.kept < G)
                x.ids[x.kept++] = it.index;
        }
        rlp_prompt_set_free(set);
    }
    return x;
}

/* on_batch: every trained sample is of an odd (unequal) prompt, G groups of N */
static int check_kept(const rlp_batch *b, uint64_t k, void *payload)
{
    (void)k;
    size_t n = 0, groups = 0;
    rlp_batch_size(&n, b);
    uint64_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&tr, b, i) || meta_index(tr.metadata_json) % 2 == 0)
            return 1;
        groups += i == 0 || tr.group_id != prev;
        prev = tr.group_id;
    }
    ++*(int *)payload;
    return n == G * N && groups == G ? 0 : 1;
}

/* dynamic steps of a SYNC or PULL run against the oracle: the record's
 * prompts are the kept groups', its reward figures cover every sample
 * generated, and the RL step trains on G groups, none filtered */
static void dynamic_steps(int mode, int steps)
{
    rlp_reward_fn *metric = parity(NULL);
    rlp_trainer_metric m = {metric, "parity_mean", "parity_rate", 0.5};
    rlp_trainer_options o = options(mode, 0);
    o.rl.filter_equal_groups = 1;
    o.max_gen_batches = 8;
    o.metrics = &m;
    o.n_metrics = 1;
    int batches_seen = 0;
    o.on_batch = check_kept;
    o.on_batch_payload = &batches_seen;
    run r;
    r.policy = tiny(7);
    r.task = arith();
    r.reward = parity(NULL);
    assert_int_equal(rlp_trainer_create(&r.trainer, r.policy, r.task, r.reward, &o), RLP_OK);
    rlp_task *ref = arith();
    uint64_t dropped = 0;
    for (int k = 1; k <= steps; k++) {
        dyn_expect x = expect_step(ref, o.max_gen_batches);
        assert_int_equal(x.kept, G);
        rlp_step_record rec = step(r.trainer);
        assert_int_equal(rec.step, k);
        assert_int_equal(rec.policy_version, k);
        assert_int_equal(rec.gen_batches, x.batches);
        assert_int_equal(rec.dynamic_dropped_groups, x.even);
        dropped += rec.dynamic_dropped_groups;
        /* the prompts trained on */
        assert_int_equal(rec.n_prompts, G);
        assert_memory_equal(rec.prompt_index, x.ids, G * sizeof(uint64_t));
        /* every sample generated: even groups score 1, odd ones 0, 1/4, 2/4, 3/4 */
        uint64_t groups = (uint64_t)x.batches * G;
        assert_int_equal(x.even + x.odd, groups);
        assert_int_equal(rec.completions, groups * N);
        assert_int_equal(rec.reward_valid, groups * N);
        assert_int_equal(rec.completion_tokens, groups * N * MAX_NEW);
        assert_int_equal(rec.rollout_tokens, rec.completion_tokens);
        double mean = ((double)x.even * 1.0 + (double)x.odd * 0.375) / (double)groups;
        assert_true(fabs(rec.reward_mean - mean) < 1e-9);
        assert_true(rec.reward_min == (x.odd ? 0.0 : 1.0) && rec.reward_max == (x.even ? 1.0 : 0.75));
        assert_true(fabs(rec.metric_mean[0] - mean) < 1e-9);
        double rate = ((double)x.even * N + (double)x.odd * 2) / (double)(groups * N);
        assert_true(fabs(rec.metric_rate[0] - rate) < 1e-9);
        assert_true(rec.rollout_seconds > 0 && rec.reward_seconds >= 0);
        /* the RL step: G groups of N, none with all-equal rewards */
        assert_int_equal(rec.rl.n_groups, G);
        assert_int_equal(rec.rl.filtered_groups, 0);
        assert_int_equal(rec.rl.n_seqs, G * N);
        assert_true(isfinite(rec.rl.loss) && isfinite(rec.rl.grad_norm));
    }
    assert_int_equal(batches_seen, steps);
    assert_true(dropped > 0);
    /* the JSON carries the two figures */
    char buf[8192];
    size_t len = 0;
    assert_int_equal(rlp_trainer_step_json(r.trainer, buf, sizeof buf, &len), RLP_OK);
    json_t *j = json_loads(buf, 0, NULL);
    assert_non_null(j);
    assert_true(json_integer_value(json_object_get(j, "gen_batches")) >= 1);
    assert_true(json_is_integer(json_object_get(j, "dynamic_dropped_groups")));
    json_decref(j);
    rlp_task_free(ref);
    run_close(&r);
    rlp_reward_fn_free(metric);
}

static void test_dynamic_sampling(void **state)
{
    (void)state;
    dynamic_steps(RLP_TRAIN_SYNC, 3);
    dynamic_steps(RLP_TRAIN_PULL, 1);
    /* max_gen_batches 0: one batch, the all-equal groups filtered by the RL step */
    rlp_trainer_options o = options(RLP_TRAIN_SYNC, 0);
    o.rl.filter_equal_groups = 1;
    run r;
    r.policy = tiny(7);
    r.task = arith();
    r.reward = parity(NULL);
    assert_int_equal(rlp_trainer_create(&r.trainer, r.policy, r.task, r.reward, &o), RLP_OK);
    rlp_task *ref = arith();
    dyn_expect x = expect_step(ref, 1);
    rlp_step_record rec = step(r.trainer);
    assert_int_equal(rec.gen_batches, 1);
    assert_int_equal(rec.dynamic_dropped_groups, 0);
    assert_int_equal(rec.n_prompts, G);
    assert_int_equal(rec.completions, G * N);
    assert_int_equal(rec.rl.filtered_groups, x.even);
    assert_int_equal(rec.rl.n_groups, G);
    rlp_task_free(ref);
    run_close(&r);
}

/* a reward that is the same for every sample: no group ever qualifies, so
 * the step fails after max_gen_batches batches, saying so; the trainer is
 * failed (nothing trained) */
static void test_dynamic_sampling_cap(void **state)
{
    (void)state;
    static int constant = 1;
    rlp_trainer_options o = options(RLP_TRAIN_SYNC, 0);
    o.rl.filter_equal_groups = 1;
    o.max_gen_batches = 3;
    run r;
    r.policy = tiny(7);
    r.task = arith();
    r.reward = parity(&constant);
    assert_int_equal(rlp_trainer_create(&r.trainer, r.policy, r.task, r.reward, &o), RLP_OK);
    rlp_step_record rec = {.version = RLP_STEP_RECORD_VERSION};
    assert_int_equal(rlp_trainer_step(r.trainer, &rec), RLP_E_STATE);
    const char *msg = rlp_error_last();
    assert_non_null(strstr(msg, "max_gen_batches"));
    assert_non_null(strstr(msg, "3 batches"));
    assert_non_null(strstr(msg, "6 groups had all-equal rewards"));
    uint64_t v = 9, done = 9;
    rlp_policy_version(&v, r.policy);
    assert_int_equal(v, 0);
    assert_int_equal(rlp_trainer_steps_done(&done, r.trainer), RLP_OK);
    assert_int_equal(done, 0);
    /* the task served the 3 batches: the next prompts are the 4th batch's */
    rlp_task *ref = arith();
    rlp_prompt_set *a, *b;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rlp_task_next_batch(&a, ref, G, NULL), RLP_OK);
        rlp_prompt_set_free(a);
    }
    assert_int_equal(rlp_task_next_batch(&a, ref, 1, NULL), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&b, r.task, 1, NULL), RLP_OK);
    rlp_task_item ia = {.version = RLP_TASK_ITEM_VERSION}, ib = {.version = RLP_TASK_ITEM_VERSION};
    rlp_prompt_set_item(&ia, a, 0);
    rlp_prompt_set_item(&ib, b, 0);
    assert_int_equal(ia.index, ib.index);
    rlp_prompt_set_free(a);
    rlp_prompt_set_free(b);
    rlp_task_free(ref);
    assert_int_equal(rlp_trainer_step(r.trainer, &rec), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "earlier step failed"));
    run_close(&r);
}

/* over-sampling is for SYNC and PULL: ASYNC refuses it at create */
static void test_dynamic_sampling_async(void **state)
{
    (void)state;
    rlp_policy *p = tiny(7);
    rlp_task *task = arith();
    rlp_reward_fn *rw = parity(NULL);
    rlp_trainer *t = NULL;
    rlp_trainer_options o = options(RLP_TRAIN_ASYNC, 0);
    o.rl.filter_equal_groups = 1;
    o.max_gen_batches = 4;
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "max_gen_batches"));
    assert_non_null(strstr(rlp_error_last(), "ASYNC"));
    assert_null(t);
    /* without filter_equal_groups it does nothing, in any mode */
    o.rl.filter_equal_groups = 0;
    assert_int_equal(rlp_trainer_create(&t, p, task, rw, &o), RLP_OK);
    rlp_trainer_free(t);
    rlp_reward_fn_free(rw);
    rlp_task_free(task);
    rlp_policy_free(p);
}

typedef struct interrupter {
    rlp_trainer *t;
    atomic_int done;
} interrupter;

static void *interrupt_later(void *arg)
{
    interrupter *it = arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    rlp_trainer_interrupt(it->t);
    atomic_store(&it->done, 1);
    return NULL;
}

/* a step waiting for rollouts (the reward holds the rollout side) returns
 * RLP_E_CLOSED when interrupted from another thread; then it runs on */
static void test_interrupt(void **state)
{
    (void)state;
    static atomic_int hold;
    atomic_store(&hold, 1);
    rlp_trainer_options o = options(RLP_TRAIN_ASYNC, 1);
    o.stall_polls = 1000; /* the worker sits in the reward, not at the gate: no stall anyway */
    run r;
    run_open(&r, &o, &hold);
    interrupter it = {.t = r.trainer};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, interrupt_later, &it), 0);
    rlp_step_record rec = {.version = RLP_STEP_RECORD_VERSION};
    assert_int_equal(rlp_trainer_step(r.trainer, &rec), RLP_E_CLOSED);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&it.done), 1);
    uint64_t done = 9, v = 9;
    rlp_trainer_steps_done(&done, r.trainer);
    rlp_policy_version(&v, r.policy);
    assert_int_equal(done, 0);
    assert_int_equal(v, 0);
    atomic_store(&hold, 0);
    for (uint64_t k = 1; k <= 2; k++) {
        rec = step(r.trainer);
        check_record(&rec, k);
        assert_true(rec.rl.staleness_max <= 1);
    }
    /* stopped: a later step is refused, the trainer can still be freed */
    assert_int_equal(rlp_trainer_stop(r.trainer), RLP_OK);
    assert_int_equal(rlp_trainer_step(r.trainer, &rec), RLP_E_CLOSED);
    run_close(&r);
}

/* ---- rollout worker ---------------------------------------------------------------- */

typedef struct producer {
    rlp_policy *policy;
    rlp_rollout_engine *engine;
    rlp_task *task;
    rlp_reward_fn *reward;
    rlp_synchronizer *sync;
    rlp_replay_buffer *buf;
    rlp_rollout_worker *worker;
} producer;

static void producer_open(producer *pr, uint32_t eta)
{
    pr->policy = tiny(7);
    pr->task = arith();
    pr->reward = reward(NULL);
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = G * N;
    ro.max_seq_len = 64;
    assert_int_equal(rlp_rollout_engine_create(&pr->engine, pr->policy, &ro), RLP_OK);
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.max_staleness = eta;
    so.batch_groups = G;
    assert_int_equal(rlp_synchronizer_create(&pr->sync, &so), RLP_OK);
    rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
    bo.sync = pr->sync; /* one η: the gate's */
    assert_int_equal(rlp_replay_buffer_create(&pr->buf, &bo), RLP_OK);
    assert_int_equal(rlp_synchronizer_publish(pr->sync, pr->policy), RLP_OK);
    rlp_rollout_worker_options wo;
    assert_int_equal(rlp_rollout_worker_options_init(&wo, RLP_ROLLOUT_WORKER_OPTIONS_VERSION), RLP_OK);
    wo.prompts_per_batch = G;
    wo.seed = 42;
    wo.sampling.n = N;
    wo.sampling.max_new_tokens = MAX_NEW;
    wo.sampling.ignore_eos = 1;
    wo.tokenizer = tok;
    assert_int_equal(rlp_rollout_worker_create(&pr->worker, pr->engine, pr->task, pr->reward, pr->sync, pr->buf, &wo),
                     RLP_OK);
}

static void producer_close(producer *pr)
{
    rlp_rollout_worker_free(pr->worker);
    rlp_replay_buffer_free(pr->buf);
    rlp_synchronizer_free(pr->sync);
    rlp_rollout_engine_free(pr->engine);
    rlp_reward_fn_free(pr->reward);
    rlp_task_free(pr->task);
    rlp_policy_free(pr->policy);
}

static rlp_rollout_worker_stats worker_stats(const rlp_rollout_worker *w)
{
    rlp_rollout_worker_stats st = {.version = 1};
    assert_int_equal(rlp_rollout_worker_stats_get(&st, w), RLP_OK);
    return st;
}

static void test_worker_run_once(void **state)
{
    (void)state;
    producer pr;
    producer_open(&pr, 1);
    rlp_rollout_worker *w = NULL;
    assert_int_equal(rlp_rollout_worker_create(&w, NULL, pr.task, pr.reward, pr.sync, pr.buf, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_worker_run_once(NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_worker_run_once(pr.worker), RLP_OK);
    rlp_rollout_worker_stats st = worker_stats(pr.worker);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.groups_pushed, G);
    assert_int_equal(st.groups_released, 0);
    assert_int_equal(st.tokens, G * N * MAX_NEW);
    assert_int_equal(st.reward_errors, 0);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.at_gate, 0);
    rlp_buffer_stats bs = {.version = 1};
    rlp_replay_buffer_stats(&bs, pr.buf);
    assert_int_equal(bs.size, G);
    /* the G groups, whole and scored, generated at version 0 */
    rlp_batch *b = NULL;
    assert_int_equal(rlp_replay_buffer_pull(&b, pr.buf, G, 0, 0), RLP_OK);
    size_t n = 0;
    rlp_batch_size(&n, b);
    assert_int_equal(n, G * N);
    uint64_t groups = 0, last = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
        assert_true(t.valid && t.reward >= 0 && t.reward <= 1);
        assert_int_equal(t.policy_version, 0);
        groups += i == 0 || t.group_id != last;
        last = t.group_id;
    }
    assert_int_equal(groups, G);
    rlp_batch_free(b);
    assert_int_equal(rlp_rollout_worker_error(pr.worker, NULL), RLP_OK);
    /* stopped: run_once refuses */
    assert_int_equal(rlp_rollout_worker_stop(pr.worker), RLP_OK);
    assert_int_equal(rlp_rollout_worker_run_once(pr.worker), RLP_E_CLOSED);
    producer_close(&pr);
}

/* the thread fills the gate's window ((η + 1)·G groups at version 0),
 * then waits at the gate; stop returns and nothing more is pushed */
static void test_worker_thread(void **state)
{
    (void)state;
    producer pr;
    producer_open(&pr, 1);
    assert_int_equal(rlp_rollout_worker_start(pr.worker), RLP_OK);
    assert_int_equal(rlp_rollout_worker_start(pr.worker), RLP_E_STATE);
    rlp_rollout_worker_stats st;
    for (int i = 0; i < 3000; i++) { /* at most 30 s; a few ms here */
        st = worker_stats(pr.worker);
        if (st.at_gate && st.groups_pushed == 2 * G)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.running, 1);
    assert_int_equal(st.at_gate, 1);
    assert_int_equal(st.groups_pushed, 2 * G);
    assert_int_equal(st.batches, 2);
    assert_int_equal(rlp_rollout_worker_stop(pr.worker), RLP_OK);
    st = worker_stats(pr.worker);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.at_gate, 0);
    assert_int_equal(st.groups_pushed, 2 * G);
    assert_int_equal(st.tokens, 2 * G * N * MAX_NEW);
    assert_true(st.idle_seconds > 0 && st.generate_seconds > 0);
    /* a stop is not a failure */
    const char *why = NULL;
    assert_int_equal(rlp_rollout_worker_error(pr.worker, &why), RLP_OK);
    assert_string_equal(why, "");
    assert_int_equal(rlp_rollout_worker_stop(pr.worker), RLP_OK);
    producer_close(&pr);
}

/* Two engines (lanes) over one worker: batches generate at once but are
 * drawn and pushed in order (provenance batch 0, 1, 2; task positions
 * in order), group ids never collide, and at_gate means every lane waits
 * there. In the tsan suite: the lanes share the gate, the task cursor, the
 * push order and the counters. */
static void test_worker_lanes(void **state)
{
    (void)state;
    producer pr;
    producer_open(&pr, 2);
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = G * N;
    ro.max_seq_len = 64;
    rlp_rollout_engine *e2 = NULL;
    assert_int_equal(rlp_rollout_engine_create(&e2, pr.policy, &ro), RLP_OK);
    assert_int_equal(rlp_rollout_worker_add_engine(NULL, e2), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_worker_add_engine(pr.worker, pr.engine), RLP_E_INVALID_ARG); /* its first */
    assert_int_equal(rlp_rollout_worker_add_engine(pr.worker, e2), RLP_OK);
    assert_int_equal(rlp_rollout_worker_add_engine(pr.worker, e2), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_worker_start(pr.worker), RLP_OK);
    assert_int_equal(rlp_rollout_worker_add_engine(pr.worker, e2), RLP_E_STATE);
    rlp_rollout_worker_stats st;
    for (int i = 0; i < 3000; i++) { /* η = 2: (η + 1)·G groups at version 0, then both lanes at the gate */
        st = worker_stats(pr.worker);
        if (st.at_gate && st.groups_pushed == 3 * G)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    assert_int_equal(st.at_gate, 1);
    assert_int_equal(st.groups_pushed, 3 * G);
    assert_int_equal(st.batches, 3);
    assert_int_equal(st.tokens, 3 * G * N * MAX_NEW);
    assert_int_equal(rlp_rollout_worker_stop(pr.worker), RLP_OK);
    assert_int_equal(rlp_rollout_worker_error(pr.worker, NULL), RLP_OK);
    rlp_batch *b = NULL;
    assert_int_equal(rlp_replay_buffer_pull(&b, pr.buf, 3 * G, 0, 0), RLP_OK);
    size_t n = 0;
    rlp_batch_size(&n, b);
    assert_int_equal(n, 3 * G * N);
    uint64_t ids[3 * G], n_ids = 0;
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
        assert_true(t.has_provenance);
        /* in the buffer's (push) order: batch i / (G·N), positions 0, 1, 2, ... */
        assert_int_equal(t.provenance.batch, i / (G * N));
        assert_int_equal(t.provenance.epoch, 0);
        assert_int_equal(t.provenance.position, i / N); /* the task's draws, in order */
        if (i % N == 0) {
            for (uint64_t k = 0; k < n_ids; k++)
                assert_true(ids[k] != t.group_id);
            ids[n_ids++] = t.group_id;
        } else {
            assert_int_equal(t.group_id, ids[n_ids - 1]);
        }
    }
    rlp_batch_free(b);
    producer_close(&pr); /* frees the worker before the engines */
    rlp_rollout_engine_free(e2);
}

/* ---- a rollout worker in another process ------------------------------------------ */

enum { XP_BATCHES = 3 };

/* The worker process (this program run with --rollout-worker DIR): its own
 * context, policy, engine, task and reward, and a FILE synchronizer that
 * reads the versions the trainer publishes in DIR/weights; it writes
 * XP_BATCHES batches into DIR/inbox through its own gate (η = 1), then
 * exits 0 if it loaded a version the trainer published after its first
 * step (it did take the trainer's weights). */
static int worker_process(const char *dir)
{
    char path[600], wdir[600], inbox[600];
    snprintf(path, sizeof path, "%s/tok128.bin", dir);
    snprintf(wdir, sizeof wdir, "%s/xp-weights", dir);
    snprintf(inbox, sizeof inbox, "%s/xp-inbox", dir);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    if (rlp_context_create(&ctx, &co) || rlp_tokenizer_load(&tok, path))
        return 10;
    rlp_policy *p = tiny(7);
    rlp_task *task = arith();
    rlp_reward_fn *r = reward(NULL);
    rlp_rollout_options eo = RLP_ROLLOUT_OPTIONS_INIT;
    eo.max_batch = G * N;
    eo.max_seq_len = 64;
    rlp_rollout_engine *e = NULL;
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.transport = RLP_TRANSPORT_FILE;
    so.dir = wdir;
    so.max_staleness = 1;
    so.batch_groups = G;
    rlp_synchronizer *sync = NULL;
    if (rlp_rollout_engine_create(&e, p, &eo) || rlp_synchronizer_create(&sync, &so))
        return 11;
    rlp_rollout_worker_options wo;
    rlp_rollout_worker_options_init(&wo, RLP_ROLLOUT_WORKER_OPTIONS_VERSION);
    wo.prompts_per_batch = G;
    wo.seed = 42;
    wo.sampling.n = N;
    wo.sampling.max_new_tokens = MAX_NEW;
    wo.sampling.ignore_eos = 1;
    wo.tokenizer = tok;
    wo.outbox_dir = inbox;
    rlp_rollout_worker *w = NULL;
    int rc = rlp_rollout_worker_create(&w, e, task, r, sync, NULL, &wo);
    for (int k = 0; !rc && k < XP_BATCHES; k++)
        rc = rlp_rollout_worker_run_once(w);
    if (rc)
        fprintf(stderr, "worker process: %s\n", rlp_error_last());
    uint64_t v = 0;
    rlp_rollout_engine_version(&v, e);
    rlp_rollout_worker_free(w);
    rlp_synchronizer_free(sync);
    rlp_rollout_engine_free(e);
    rlp_reward_fn_free(r);
    rlp_task_free(task);
    rlp_policy_free(p);
    rlp_tokenizer_free(tok);
    rlp_context_free(ctx);
    return rc ? 12 : v >= 1 ? 0 : 13;
}

/* An ASYNC trainer with rollout_inbox, fed by a worker process: its steps
 * train on the other process's groups (their provenance came through the
 * file), that process loads the versions published as files, and a
 * malformed file in the inbox is set aside without stopping the run. */
static void test_worker_other_process(void **state)
{
    (void)state;
    char wdir[600], inbox[600], junk[700];
    snprintf(wdir, sizeof wdir, "%s/xp-weights", tmpdir);
    snprintf(inbox, sizeof inbox, "%s/xp-inbox", tmpdir);
    assert_int_equal(mkdir(wdir, 0777), 0);
    assert_int_equal(mkdir(inbox, 0777), 0);
    snprintf(junk, sizeof junk, "%s/0-junk.rlpb", inbox);
    FILE *f = fopen(junk, "w");
    assert_non_null(f);
    fputs("not a batch file", f);
    fclose(f);
    rlp_trainer_options o = options(RLP_TRAIN_ASYNC, 1);
    o.rollout_inbox = inbox;
    o.weights_dir = wdir;
    run r;
    run_open(&r, &o, NULL);
    /* misuse: an inbox outside ASYNC, or without weights_dir */
    rlp_trainer_options bad = options(RLP_TRAIN_SYNC, 0);
    bad.rollout_inbox = inbox;
    bad.weights_dir = wdir;
    rlp_trainer *t = NULL;
    assert_int_equal(rlp_trainer_create(&t, r.policy, r.task, r.reward, &bad), RLP_E_INVALID_ARG);
    bad = options(RLP_TRAIN_ASYNC, 1);
    bad.rollout_inbox = inbox;
    assert_int_equal(rlp_trainer_create(&t, r.policy, r.task, r.reward, &bad), RLP_E_INVALID_ARG);

    char *argv[] = {"/proc/self/exe", "--rollout-worker", tmpdir, NULL};
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    for (uint64_t k = 1; k <= XP_BATCHES; k++) {
        rlp_step_record rec = step(r.trainer);
        assert_int_equal(rec.step, k);
        assert_int_equal(rec.policy_version, k);
        assert_int_equal(rec.n_prompts, G);
        assert_int_equal(rec.reward_valid, G * N);
        assert_true(rec.rl.staleness_max <= 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the junk was set aside, the worker's files taken in */
    struct stat st;
    char bad_path[720];
    snprintf(bad_path, sizeof bad_path, "%s.bad", junk);
    assert_int_equal(stat(bad_path, &st), 0);
    run_close(&r);
}

/* a batch file round trip, and refusals */
static void test_batch_file(void **state)
{
    (void)state;
    producer pr;
    producer_open(&pr, 1);
    assert_int_equal(rlp_rollout_worker_run_once(pr.worker), RLP_OK);
    rlp_batch *b = NULL, *back = NULL;
    assert_int_equal(rlp_replay_buffer_pull(&b, pr.buf, G, 0, 0), RLP_OK);
    char path[600];
    snprintf(path, sizeof path, "%s/one.rlpb", tmpdir);
    assert_int_equal(rlp_batch_write_file(b, path), RLP_OK);
    assert_int_equal(rlp_batch_read_file(&back, path), RLP_OK);
    size_t n = 0, m = 0;
    rlp_batch_size(&n, b);
    rlp_batch_size(&m, back);
    assert_int_equal(n, m);
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory x = {.version = RLP_TRAJECTORY_VERSION}, y = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&x, b, i);
        rlp_batch_get(&y, back, i);
        assert_int_equal(x.group_id, y.group_id);
        assert_true(x.reward == y.reward);
        assert_int_equal(x.n_completion_tokens, y.n_completion_tokens);
        assert_memory_equal(x.completion_tokens, y.completion_tokens, x.n_completion_tokens * sizeof(int32_t));
        assert_memory_equal(x.logprobs, y.logprobs, x.n_completion_tokens * sizeof(float));
        assert_true(y.has_provenance && x.provenance.prompt_index == y.provenance.prompt_index &&
                    x.provenance.sampling_seed == y.provenance.sampling_seed);
    }
    rlp_batch_free(back);
    /* a cut file is refused with a clear error, and nothing is returned */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    assert_int_equal(truncate(path, size / 2), 0);
    back = NULL;
    assert_int_equal(rlp_batch_read_file(&back, path), RLP_E_FORMAT);
    assert_null(back);
    assert_int_equal(rlp_batch_read_file(&back, "/nonexistent/x.rlpb"), RLP_E_NOT_FOUND);
    rlp_batch *empty = NULL;
    rlp_batch_create(&empty);
    assert_int_equal(rlp_batch_write_file(empty, path), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_batch_write_file(NULL, path), RLP_E_INVALID_ARG);
    rlp_batch_free(empty);
    rlp_batch_free(b);
    producer_close(&pr);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    if (rlp_context_create(&ctx, &co) != RLP_OK)
        return -1;
    snprintf(tmpdir, sizeof tmpdir, "%s/rlp_trainer_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    char path[300];
    snprintf(path, sizeof path, "%s/tok128.bin", tmpdir);
    write_tokenizer(path);
    return rlp_tokenizer_load(&tok, path) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlp_tokenizer_free(tok);
    rlp_context_free(ctx);
    nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--rollout-worker"))
        return worker_process(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_steps),
        cmocka_unit_test(test_async_eta0_equals_sync),
        cmocka_unit_test(test_ppo_critic_async_equals_sync),
        cmocka_unit_test(test_pull),
        cmocka_unit_test(test_checkpoint_resume),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_dynamic_sampling),
        cmocka_unit_test(test_dynamic_sampling_cap),
        cmocka_unit_test(test_dynamic_sampling_async),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_worker_run_once),
        cmocka_unit_test(test_worker_thread),
        cmocka_unit_test(test_worker_lanes),
        cmocka_unit_test(test_batch_file),
        cmocka_unit_test(test_worker_other_process),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
