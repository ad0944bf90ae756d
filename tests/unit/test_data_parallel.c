/* Data parallelism with real processes (forked ranks over the SHM
 * transport) against one process on the whole batch:
 *
 * - rlp_policy_train_step: two ranks on halves of a batch end with weights
 *   bit-identical to each other, and equal to one process that
 *   micro-batches the same batch at the same cut (its gradient is then the
 *   same sum g0 + g1 in the same order); two steps, loss and grad norm too;
 * - rlp_policy_train_rl (GRPO, and REINFORCE++ whose batch normalisation
 *   needs statistics from all ranks) with whole groups per rank, also with
 *   a rank that has no trajectories at all, and with multi-turn
 *   trajectories whose observation tokens (loss mask 0) count on no rank;
 * - rlp_policy_broadcast: weights and version from the root;
 * - the synchronizer's COLLECTIVE transport: a trainer rank publishes after
 *   each step, two rollout ranks pull into their engines' own copies;
 * - a rank whose step fails closes the group, so its peer fails at once
 *   instead of waiting for the timeout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/policy.h"
#include "rank_runner.h"
#include "rollout/engine.h"
#include "tiny_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- what a rank builds: context, tiny policy, its comm ---- */

typedef struct env {
    rlp_context *ctx;
    rlp_policy *p;
    rlp_comm *comm;
} env;

static int setup(env *e, int rank, int world, const char *dir, uint64_t seed, uint32_t timeout_ms)
{
    memset(e, 0, sizeof *e);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    RANK_CHECK(rlp_context_create(&e->ctx, &co) == RLP_OK, "context");
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", true);
    rlpi_weights w;
    RANK_CHECK(tiny_weights(&cfg, &w, seed) == RLP_OK, "weights");
    RANK_CHECK(rlpi_policy_create(&e->p, e->ctx, &cfg, &w, NULL) == RLP_OK, "policy: %s", rlp_error_last());
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 3e-3f;
    RANK_CHECK(rlp_policy_set_optimizer(e->p, &oo) == RLP_OK, "optimizer");
    if (world > 0) {
        char rdv[512];
        snprintf(rdv, sizeof rdv, "%s/rendezvous.json", dir);
        rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
        o.rank = rank;
        o.world_size = world;
        o.rendezvous = rdv;
        o.timeout_ms = timeout_ms;
        RANK_CHECK(rlp_comm_create(&e->comm, e->ctx, &o) == RLP_OK, "comm: %s", rlp_error_last());
        RANK_CHECK(rlp_policy_set_comm(e->p, e->comm) == RLP_OK, "set_comm: %s", rlp_error_last());
    }
    return 0;
}

static void teardown(env *e)
{
    rlp_policy_free(e->p);
    rlp_comm_free(e->comm);
    rlp_context_free(e->ctx);
}

/* params and a few doubles to dir/<name>.bin */
static int save(env *e, const char *dir, const char *name, const double *extra, size_t n_extra)
{
    rlpi_buffer *P = rlpi_transformer_params(e->p->tf);
    size_t n = rlpi_transformer_n_params(e->p->tf);
    float *h = malloc(n * 4);
    RANK_CHECK(h && rlpi_buffer_download(P, 0, h, n * 4) == RLP_OK, "download");
    char path[600];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    RANK_CHECK(f, "open %s", path);
    uint64_t v = e->p->version;
    fwrite(&n, sizeof n, 1, f);
    fwrite(&v, sizeof v, 1, f);
    fwrite(&n_extra, sizeof n_extra, 1, f);
    if (n_extra)
        fwrite(extra, sizeof *extra, n_extra, f);
    fwrite(h, 4, n, f);
    fclose(f);
    free(h);
    return 0;
}

typedef struct saved {
    size_t n, n_extra;
    uint64_t version;
    double extra[16];
    float *p;
} saved;

static void load(const char *dir, const char *name, saved *s)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(&s->n, sizeof s->n, 1, f), 1);
    assert_int_equal(fread(&s->version, sizeof s->version, 1, f), 1);
    assert_int_equal(fread(&s->n_extra, sizeof s->n_extra, 1, f), 1);
    assert_true(s->n_extra <= 16);
    assert_int_equal(fread(s->extra, sizeof *s->extra, s->n_extra, f), s->n_extra);
    s->p = malloc(s->n * 4);
    assert_int_equal(fread(s->p, 4, s->n, f), s->n);
    fclose(f);
    unlink(path);
}

/* max |a − b| / (rms of b): 0 for identical */
static double rel_diff(const saved *a, const saved *b)
{
    assert_int_equal(a->n, b->n);
    double m = 0, rms = 0;
    for (size_t i = 0; i < a->n; i++) {
        double d = fabs((double)a->p[i] - (double)b->p[i]);
        m = d > m ? d : m;
        rms += (double)b->p[i] * b->p[i];
    }
    return m / sqrt(rms / (double)a->n);
}

/* ---- supervised train step ---- */

#define N_SEQ 6
static int32_t toks[N_SEQ][40];
static const uint32_t LEN[N_SEQ] = {30, 26, 21, 12, 17, 19}; /* ranks: 77 | 48 tokens */

static void make_tokens(void)
{
    uint64_t s = 99;
    for (int i = 0; i < N_SEQ; i++)
        for (int t = 0; t < 40; t++)
            toks[i][t] = 3 + (int32_t)((tiny_rand(&s) + 1.0f) * 30.0f);
}

static void seqs_of(rlp_sequence *out, int from, int to, int step)
{
    for (int i = from; i < to; i++)
        out[i - from] = (rlp_sequence){toks[i] + step, LEN[i], 3};
}

/* world 0: the single-process reference, micro-batched at the rank cut */
static int train_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, 5, 30000))
        return 1;
    double extra[4];
    for (int step = 0; step < 2; step++) {
        rlp_sequence s[N_SEQ];
        rlp_train_options to = RLP_TRAIN_OPTIONS_INIT;
        size_t n;
        if (world == 0) {
            seqs_of(s, 0, N_SEQ, step);
            n = N_SEQ;
            to.micro_batch_tokens = 77; /* 30 + 26 + 21; the next sequence does not fit */
        }
        else {
            int from = rank == 0 ? 0 : 3, to_ = rank == 0 ? 3 : N_SEQ;
            seqs_of(s, from, to_, step);
            n = (size_t)(to_ - from);
        }
        rlp_train_stats st;
        int rc = rlp_policy_train_step(e.p, s, n, rlp_loss_nll, NULL, &to, &st);
        RANK_CHECK(rc == RLP_OK, "train step: %s", rlp_error_last());
        RANK_CHECK(world == 0 ? st.n_micro_batches == 2 : st.n_micro_batches == 1, "micro-batches %u",
                   st.n_micro_batches);
        RANK_CHECK(st.n_seqs == N_SEQ, "n_seqs %llu", (unsigned long long)st.n_seqs);
        extra[2 * step] = st.loss;
        extra[2 * step + 1] = st.grad_norm;
    }
    char name[32];
    snprintf(name, sizeof name, world ? "rank%d" : "single", rank);
    int rc = save(&e, dir, name, extra, 4);
    teardown(&e);
    return rc;
}

static void test_train_step_matches_one_process(void **state)
{
    (void)state;
    make_tokens();
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(2, train_rank, dir, NULL), 0);
    assert_int_equal(run_ranks_ex(0, 0, 1, train_rank, dir, NULL, NULL), 0);
    saved r0, r1, one;
    load(dir, "rank0", &r0);
    load(dir, "rank1", &r1);
    load(dir, "single", &one);
    assert_int_equal(r0.version, 2);
    assert_int_equal(one.version, 2);
    assert_memory_equal(r0.p, r1.p, r0.n * 4); /* the ranks never drift apart */
    assert_memory_equal(r0.extra, r1.extra, sizeof(double) * 4);
    double d = rel_diff(&r0, &one);
    print_message("data-parallel vs one process after 2 steps: max |Δw| / rms(w) = %.3g; loss %.9g vs %.9g, "
                  "grad norm %.9g vs %.9g\n", d, r0.extra[2], one.extra[2], r0.extra[3], one.extra[3]);
    assert_true(d <= 1e-6);
    for (int k = 0; k < 4; k++)
        assert_true(fabs(r0.extra[k] - one.extra[k]) <= 1e-6 * fabs(one.extra[k]));
    free(r0.p);
    free(r1.p);
    free(one.p);
    rmdir(dir);
}

/* ---- RL step ---- */

/* 4 groups × 3 samples; trajectory j of group g has 6 + (g + j) % 5
 * completion tokens; rewards differ within each group */
static rlp_batch *rl_batch(int first_group, int n_groups, int masked)
{
    /* multi-turn: tokens 2..3 of each completion are an observation */
    static const uint8_t mask[12] = {1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    rlp_batch *b;
    if (rlp_batch_create(&b))
        return NULL;
    uint64_t s = 7;
    for (int g = 0; g < 4; g++)
        for (int j = 0; j < 3; j++) {
            int32_t prompt[4] = {5 + g, 9, 17, 20 + j}, comp[12];
            float lp[12];
            size_t n = 6 + (size_t)((g + j) % 5);
            for (size_t t = 0; t < n; t++) {
                comp[t] = 3 + (int32_t)((tiny_rand(&s) + 1.0f) * 30.0f);
                lp[t] = -2.0f - 0.5f * (tiny_rand(&s) + 1.0f);
            }
            if (g < first_group || g >= first_group + n_groups)
                continue;
            rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = (uint64_t)g, .prompt_tokens = prompt,
                                .n_prompt_tokens = 4, .completion_tokens = comp, .n_completion_tokens = n,
                                .logprobs = lp, .finish_reason = RLP_FINISH_LENGTH, .stop_index = -1,
                                .temperature = 1.0f, .reward = (float)((g * 3 + j * 7) % 5) * 0.25f, .valid = 1,
                                .sample_index = (uint32_t)j, .loss_mask = masked ? mask : NULL};
            if (rlp_batch_append(b, &t)) {
                rlp_batch_free(b);
                return NULL;
            }
        }
    return b;
}

typedef struct rl_case {
    int advantage;
    int split;   /* groups on rank 0 (the rest on rank 1) */
    int masked;  /* multi-turn trajectories with a loss mask */
    int v2;      /* verl's whitening and batch-normalised sequence IS weights (summed over the ranks) */
} rl_case;

static int rl_rank(int rank, int world, const char *dir, void *arg)
{
    const rl_case *c = arg;
    env e;
    if (setup(&e, rank, world, dir, 11, 30000))
        return 1;
    int first = world == 0 ? 0 : rank == 0 ? 0 : c->split, count = world == 0 ? 4 : rank == 0 ? c->split : 4 - c->split;
    rlp_batch *b = rl_batch(first, count, c->masked);
    RANK_CHECK(b, "batch");
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    o.advantage = c->advantage;
    if (c->v2) {
        o.whiten = RLP_WHITEN_UNBIASED;
        o.rollout_is = RLP_IS_SEQUENCE;
        o.rollout_is_threshold = 1e6f; /* the behaviour logprobs here are not the model's: weights far from 1 */
        o.rollout_is_batch_normalize = 1;
        o.policy_loss = RLP_LOSS_SAPO;
    }
    rlp_rl_stats st;
    int rc = rlp_policy_train_rl(e.p, b, NULL, &o, &st);
    RANK_CHECK(rc == RLP_OK, "train_rl: %s", rlp_error_last());
    RANK_CHECK(st.optimizer_steps == 1 && st.n_seqs == 12, "steps %u seqs %llu", st.optimizer_steps,
               (unsigned long long)st.n_seqs);
    double extra[6] = {st.loss, st.grad_norm, st.reward_mean, st.adv_mean, st.adv_std, (double)st.n_tokens};
    char name[32];
    snprintf(name, sizeof name, world ? "rl%d" : "rl_single", rank);
    rc = save(&e, dir, name, extra, 6);
    rlp_batch_free(b);
    teardown(&e);
    return rc;
}

static void check_rl_v(int advantage, int split, double tol, int masked, int v2)
{
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    rl_case c = {advantage, split, masked, v2};
    assert_int_equal(run_ranks(2, rl_rank, dir, &c), 0);
    assert_int_equal(run_ranks_ex(0, 0, 1, rl_rank, dir, &c, NULL), 0);
    saved r0, r1, one;
    load(dir, "rl0", &r0);
    load(dir, "rl1", &r1);
    load(dir, "rl_single", &one);
    assert_memory_equal(r0.p, r1.p, r0.n * 4);
    double d = rel_diff(&r0, &one);
    print_message("RL advantage %d, %d|%d groups: max |Δw| / rms(w) = %.3g; loss %.9g vs %.9g; "
                  "grad norm %.9g vs %.9g; adv std %.6g vs %.6g\n",
                  advantage, split, 4 - split, d, r0.extra[0], one.extra[0], r0.extra[1], one.extra[1], r0.extra[4],
                  one.extra[4]);
    assert_true(d <= tol);
    for (int k = 0; k < 6; k++)
        assert_true(fabs(r0.extra[k] - one.extra[k]) <= 1e-5 * (fabs(one.extra[k]) + 1e-3));
    assert_true(one.extra[1] > 0); /* a real update happened */
    if (masked) /* 97 completion tokens in 12 trajectories, 2 of each an observation */
        assert_int_equal((size_t)one.extra[5], 97 - 24);
    free(r0.p);
    free(r1.p);
    free(one.p);
    rmdir(dir);
}

static void check_rl(int advantage, int split, double tol, int masked)
{
    check_rl_v(advantage, split, tol, masked, 0);
}

static void test_rl_grpo(void **state)
{
    (void)state;
    /* the ranks' gradients are summed in another order than one process's,
     * and Adam's g/(|g| + ε) turns last-bit differences of near-zero
     * gradient elements into steps of up to lr: measured 2.6e-7 on one Xeon,
     * 2.0e-6 on another (OpenBLAS SkylakeX kernels); the loss, grad norm and
     * advantage statistics below are held to 1e-5 relative. */
    check_rl(RLP_ADV_GRPO, 2, 1e-5, 0);
}

static void test_rl_reinforce_pp_global_normalisation(void **state)
{
    (void)state;
    /* the batch mean and std are summed per rank, then over ranks (another
     * order than one process), and Adam's first step g/(|g| + ε) turns the
     * last-bit differences of gradient elements near ε = 1e-8 into visible
     * ones: measured 3.1e-6 on one Xeon, 1.4e-5 on another (OpenBLAS
     * SkylakeX kernels) */
    check_rl(RLP_ADV_REINFORCE_PP, 1, 1e-4, 0);
}

/* multi-turn: the whole-batch normalisation's mean and std and the token
 * counts are of model tokens on every rank */
static void test_rl_reinforce_pp_masked(void **state)
{
    (void)state;
    check_rl(RLP_ADV_REINFORCE_PP, 1, 1e-4, 1); /* tolerance: as the unmasked case above */
}

/* version-2 options whose statistics span the ranks: verl's whitening
 * (unbiased variance over all ranks' tokens) and batch-normalised sequence
 * IS weights (their mean over all ranks' sequences), with SAPO */
static void test_rl_whiten_and_is_normalisation(void **state)
{
    (void)state;
    check_rl_v(RLP_ADV_REINFORCE_PP, 1, 1e-4, 1, 1); /* tolerance: as REINFORCE++ above */
}

static void test_rl_rank_without_trajectories(void **state)
{
    (void)state;
    check_rl(RLP_ADV_GRPO, 4, 1e-6, 0);
}

/* ---- broadcast ---- */

static int bcast_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, rank == 0 ? 21 : 22, 30000))
        return 1;
    RANK_CHECK(rlp_policy_set_comm(e.p, NULL) == RLP_OK, "detach");
    if (rank == 0) {
        make_tokens();
        rlp_sequence s[3];
        seqs_of(s, 0, 3, 0);
        RANK_CHECK(rlp_policy_train_step(e.p, s, 3, rlp_loss_nll, NULL, NULL, NULL) == RLP_OK, "step: %s",
                   rlp_error_last());
    }
    RANK_CHECK(rlp_policy_broadcast(e.p, e.comm, 0) == RLP_OK, "broadcast: %s", rlp_error_last());
    char name[32];
    snprintf(name, sizeof name, "b%d", rank);
    int rc = save(&e, dir, name, NULL, 0);
    RANK_CHECK(rlp_policy_broadcast(NULL, e.comm, 0) == RLP_E_INVALID_ARG, "NULL policy");
    RANK_CHECK(rlp_policy_broadcast(e.p, e.comm, 5) == RLP_E_INVALID_ARG, "bad root");
    teardown(&e);
    return rc;
}

/* Runs `fn` on 3 ranks; each saved "<prefix><rank>": all hold the same
 * weights at `version`. */
static void three_ranks_agree(rank_fn fn, const char *prefix, uint64_t version)
{
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(3, fn, dir, NULL), 0);
    saved b[3];
    for (int r = 0; r < 3; r++) {
        char name[16];
        snprintf(name, sizeof name, "%s%d", prefix, r);
        load(dir, name, &b[r]);
        assert_int_equal(b[r].version, version);
    }
    assert_memory_equal(b[0].p, b[1].p, b[0].n * 4);
    assert_memory_equal(b[0].p, b[2].p, b[0].n * 4);
    for (int r = 0; r < 3; r++)
        free(b[r].p);
    rmdir(dir);
}

static void test_broadcast_policy(void **state)
{
    (void)state;
    three_ranks_agree(bcast_rank, "b", 1);
}

/* ---- the synchronizer's COLLECTIVE transport ---- */

/* A COLLECTIVE synchronizer rooted at rank 0 and, on the other ranks, a
 * rollout engine over the rank's policy; the shared token table. */
static int collective_side(env *e, int rank, rlp_synchronizer **sync, rlp_rollout_engine **eng)
{
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_COLLECTIVE;
    so.comm = e->comm;
    so.root = 0;
    RANK_CHECK(rlp_synchronizer_create(sync, &so) == RLP_OK, "sync: %s", rlp_error_last());
    *eng = NULL;
    if (rank != 0) {
        rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
        ro.max_batch = 2;
        ro.max_seq_len = 32;
        RANK_CHECK(rlp_rollout_engine_create(eng, e->p, &ro) == RLP_OK, "engine: %s", rlp_error_last());
    }
    make_tokens();
    return 0;
}

/* `steps` rounds: rank 0 trains a step and publishes, the others pull into
 * their engines, which must then be at the version just published. */
static int train_and_sync(env *e, int rank, rlp_synchronizer *sync, rlp_rollout_engine *eng, int steps)
{
    for (int step = 0; step < steps; step++) {
        if (rank == 0) {
            rlp_sequence s[3];
            seqs_of(s, 0, 3, step);
            RANK_CHECK(rlp_policy_train_step(e->p, s, 3, rlp_loss_nll, NULL, NULL, NULL) == RLP_OK, "step: %s",
                       rlp_error_last());
            RANK_CHECK(rlp_synchronizer_publish(sync, e->p) == RLP_OK, "publish: %s", rlp_error_last());
        } else {
            RANK_CHECK(rlp_synchronizer_pull(sync, eng) == RLP_OK, "pull: %s", rlp_error_last());
            uint64_t v;
            rlp_rollout_engine_version(&v, eng);
            RANK_CHECK(v == (uint64_t)step + 1, "engine version %llu after pull %d", (unsigned long long)v, step);
        }
    }
    return 0;
}

/* A LoRA trainer over the COLLECTIVE transport: its adapters go out, the
 * base only when a rank's differs. Ranks 0 and 1 load the same base, rank 2
 * another: the first pull sends the base (to everyone, as one broadcast)
 * and the adapters, the second the adapters only. Every engine then holds
 * root's merged model; the receivers count base + 2 × adapter bytes. */
static int lora_collective_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, rank == 2 ? 77 : 31, 30000))
        return 1;
    RANK_CHECK(rlp_policy_set_comm(e.p, NULL) == RLP_OK, "detach");
    rlp_lora_options lo = RLP_LORA_OPTIONS_INIT;
    lo.rank = 2;
    lo.alpha = 4.0f;
    uint64_t n_params = 0, n_adapter = 0;
    rlp_policy_n_params(&n_params, e.p);
    {
        rlp_policy *probe = NULL; /* the adapters' size, on any rank */
        RANK_CHECK(rlp_policy_clone(&probe, e.p, 1) == RLP_OK && rlp_policy_enable_lora(probe, &lo) == RLP_OK,
                   "probe: %s", rlp_error_last());
        rlp_policy_n_trainable(&n_adapter, probe);
        rlp_policy_free(probe);
    }
    if (rank == 0) {
        RANK_CHECK(rlp_policy_enable_lora(e.p, &lo) == RLP_OK, "lora: %s", rlp_error_last());
        rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
        oo.lr = 2e-2f;
        RANK_CHECK(rlp_policy_set_optimizer(e.p, &oo) == RLP_OK, "optimizer");
    }
    rlp_synchronizer *sync;
    rlp_rollout_engine *eng = NULL;
    if (collective_side(&e, rank, &sync, &eng))
        return 1;
    if (train_and_sync(&e, rank, sync, eng, 2))
        return 1;
    char name[16];
    snprintf(name, sizeof name, "l%d", rank);
    if (rank != 0) {
        rlp_sync_stats st = {.version = 1};
        rlp_synchronizer_stats(&st, sync);
        RANK_CHECK(st.bytes_published == (n_params + 2 * n_adapter) * 4,
                   "bytes received %llu, expected base %llu + 2 x adapters %llu", (unsigned long long)st.bytes_published,
                   (unsigned long long)n_params * 4, (unsigned long long)n_adapter * 4);
        env view = e;
        view.p = eng->policy;
        RANK_CHECK(save(&view, dir, name, NULL, 0) == 0, "save");
    } else { /* root's merged model */
        env view = e;
        RANK_CHECK(rlp_policy_clone(&view.p, e.p, 0) == RLP_OK, "clone: %s", rlp_error_last());
        RANK_CHECK(save(&view, dir, name, NULL, 0) == 0, "save");
        rlp_policy_free(view.p);
    }
    rlp_rollout_engine_free(eng);
    rlp_synchronizer_free(sync);
    teardown(&e);
    return 0;
}

static void test_collective_sync_lora_adapters_only(void **state)
{
    (void)state;
    three_ranks_agree(lora_collective_rank, "l", 2);
}


static int collective_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, rank == 0 ? 31 : 32 + (uint64_t)rank, 30000))
        return 1;
    RANK_CHECK(rlp_policy_set_comm(e.p, NULL) == RLP_OK, "detach");
    rlp_synchronizer *sync;
    rlp_rollout_engine *eng = NULL;
    if (collective_side(&e, rank, &sync, &eng))
        return 1;
    if (train_and_sync(&e, rank, sync, eng, 2))
        return 1;
    uint64_t sv;
    rlp_synchronizer_version(&sv, sync);
    RANK_CHECK(sv == 2, "synchronizer version %llu", (unsigned long long)sv);
    if (rank != 0) {
        rlp_sync_stats st = {.version = 1};
        rlp_synchronizer_stats(&st, sync);
        RANK_CHECK(st.weight_loads == 2, "weight loads %llu", (unsigned long long)st.weight_loads);
        /* what the engine generates with */
        env view = e;
        view.p = eng->policy;
        char name[16];
        snprintf(name, sizeof name, "c%d", rank);
        RANK_CHECK(save(&view, dir, name, NULL, 0) == 0, "save");
        /* the root publishes, it never pulls; a receiving rank never publishes */
        RANK_CHECK(rlp_synchronizer_publish(sync, e.p) == RLP_E_STATE, "publish on a receiving rank");
    }
    else {
        RANK_CHECK(save(&e, dir, "c0", NULL, 0) == 0, "save");
        RANK_CHECK(rlp_synchronizer_pull(sync, NULL) == RLP_E_INVALID_ARG, "pull without an engine");
    }
    rlp_rollout_engine_free(eng);
    rlp_synchronizer_free(sync);
    teardown(&e);
    return 0;
}

static void test_collective_sync_transport(void **state)
{
    (void)state;
    three_ranks_agree(collective_rank, "c", 2);
}

/* Both ranks publish (rank 1 by mistake): rank 1 is refused at once, and
 * the root, waiting in the broadcast for a pull that will never come, is
 * released with the reason instead of waiting out the timeout. */
static int misuse_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, 31, 60000))
        return 1;
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_COLLECTIVE;
    so.comm = e.comm;
    rlp_synchronizer *sync;
    RANK_CHECK(rlp_synchronizer_create(&sync, &so) == RLP_OK, "sync");
    if (rank == 1)
        usleep(200000);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = rlp_synchronizer_publish(sync, e.p);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (rank == 1)
        RANK_CHECK(rc == RLP_E_STATE && strstr(rlp_error_last(), "not the publishing rank") &&
                   !strstr(rlp_error_last(), "rlp_synchronizer_publish: rlp_synchronizer_publish"),
                   "rc %d: %s", rc, rlp_error_last());
    else
        RANK_CHECK(rc == RLP_E_CLOSED && strstr(rlp_error_last(), "publish on a receiving rank") && secs < 10,
                   "rc %d after %.1f s: %s", rc, secs, rlp_error_last());
    rlp_synchronizer_free(sync);
    teardown(&e);
    return 0;
}

static void test_collective_sync_misuse_releases_peers(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(2, misuse_rank, dir, NULL), 0);
    rmdir(dir);
}

static void test_collective_sync_options(void **state)
{
    (void)state;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 1;
    rlp_context *ctx;
    assert_int_equal(rlp_context_create(&ctx, &co), RLP_OK);
    rlp_comm_options o = RLP_COMM_OPTIONS_INIT;
    o.rank = 0;
    o.world_size = 1;
    rlp_comm *comm;
    assert_int_equal(rlp_comm_create(&comm, ctx, &o), RLP_OK);
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.transport = RLP_TRANSPORT_COLLECTIVE;
    rlp_synchronizer *sync = NULL;
    assert_int_equal(rlp_synchronizer_create(&sync, &so), RLP_E_INVALID_ARG); /* no comm */
    so.comm = comm;
    so.root = 1;
    assert_int_equal(rlp_synchronizer_create(&sync, &so), RLP_E_INVALID_ARG); /* root outside */
    so.root = 0;
    so.mode = RLP_SYNC_ASYNC;
    assert_int_equal(rlp_synchronizer_create(&sync, &so), RLP_E_INVALID_ARG);
    /* a version-1 caller's struct ends before comm: its init writes nothing past it */
    struct {
        rlp_sync_options o;
        unsigned char guard[16];
    } mem;
    memset(&mem, 0xA5, sizeof mem);
    assert_int_equal(rlp_sync_options_init(&mem.o, 1), RLP_OK);
    assert_int_equal(mem.o.version, 1);
    for (size_t i = offsetof(rlp_sync_options, comm); i < sizeof mem; i++)
        assert_int_equal(((const unsigned char *)&mem)[i], 0xA5);
    /* a version-1 caller (no comm, no root fields) still gets the old transports */
    so = (rlp_sync_options)RLP_SYNC_OPTIONS_INIT;
    so.version = 1;
    so.comm = (rlp_comm *)0x1; /* past a version-1 struct: must not be read */
    assert_int_equal(rlp_synchronizer_create(&sync, &so), RLP_OK);
    rlp_synchronizer_free(sync);
    rlp_comm_free(comm);
    rlp_context_free(ctx);
}

/* ---- a failing rank releases its peers ---- */

static int fail_rank(int rank, int world, const char *dir, void *arg)
{
    (void)arg;
    env e;
    if (setup(&e, rank, world, dir, 5, 60000))
        return 1;
    make_tokens();
    rlp_sequence s[3];
    seqs_of(s, 0, 3, 0);
    int32_t bad[5] = {1, 2, 3, 999, 4};
    if (rank == 1)
        s[1] = (rlp_sequence){bad, 5, 2};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = rlp_policy_train_step(e.p, s, 3, rlp_loss_nll, NULL, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    if (rank == 1)
        RANK_CHECK(rc == RLP_E_INVALID_ARG && strstr(rlp_error_last(), "outside the vocabulary"), "rc %d: %s", rc,
                   rlp_error_last());
    else {
        RANK_CHECK(rc == RLP_E_CLOSED, "rc %d: %s", rc, rlp_error_last());
        RANK_CHECK(strstr(rlp_error_last(), "train step"), "message: %s", rlp_error_last());
        RANK_CHECK(secs < 10, "took %.1f s", secs);
    }
    RANK_CHECK(e.p->version == 0, "weights changed");
    teardown(&e);
    return 0;
}

static void test_failing_rank_releases_peers(void **state)
{
    (void)state;
    char dir[256];
    rank_tmpdir(dir, sizeof dir);
    assert_int_equal(run_ranks(2, fail_rank, dir, NULL), 0);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_step_matches_one_process),
        cmocka_unit_test(test_rl_grpo),
        cmocka_unit_test(test_rl_reinforce_pp_global_normalisation),
        cmocka_unit_test(test_rl_reinforce_pp_masked),
        cmocka_unit_test(test_rl_whiten_and_is_normalisation),
        cmocka_unit_test(test_rl_rank_without_trajectories),
        cmocka_unit_test(test_broadcast_policy),
        cmocka_unit_test(test_collective_sync_transport),
        cmocka_unit_test(test_collective_sync_lora_adapters_only),
        cmocka_unit_test(test_collective_sync_options),
        cmocka_unit_test(test_collective_sync_misuse_releases_peers),
        cmocka_unit_test(test_failing_rank_releases_peers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
