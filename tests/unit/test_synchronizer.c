/* The synchronizer: the AReaL gate under seeded random arrival and finish
 * orders (accepted never above (η + v + 1)·B, running never above
 * max_concurrent, η = 0 synchronous) and under threads; resume, timeouts
 * and close; the in-process transport in sequential-pull and co-located
 * modes; asynchronous push-pull with a rollout thread, the replay buffer
 * and a trainer thread; the file transport with a reader polling while a
 * writer publishes 100 versions (every load verified equal to the version
 * it claims, versions monotone) and damaged files; and the HTTP transport
 * against in-test libmicrohttpd servers (JSON sent, retries, a failing URL
 * named while the others are updated, timeouts). Tiny random Llama models,
 * one thread each, so a ThreadSanitizer run stays fast. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "http_test_server.h"
#include "model/policy.h"
#include "rollout/engine.h"
#include "tiny_model.h"

#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static rlp_context *ctx;
static char tmpdir[256];

/* ---- tiny models ---------------------------------------------------------------- */

static rlp_policy *tiny_policy(uint64_t seed, int trainable)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", false);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, seed), RLP_OK);
    rlp_policy_options o = RLP_POLICY_OPTIONS_INIT;
    o.trainable = trainable;
    rlp_policy *p;
    assert_int_equal(rlpi_policy_create(&p, ctx, &cfg, &w, &o), RLP_OK);
    rlpi_weights_free(&w);
    return p;
}

/* Gives the policy the weights of `seed` and calls it `version`: a version
 * whose every weight says which version it is. */
static void set_weights(rlp_policy *p, uint64_t seed, uint64_t version)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", false);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, seed), RLP_OK);
    assert_int_equal(rlpi_transformer_set_weights(p->tf, &w), RLP_OK);
    rlpi_weights_free(&w);
    p->version = version;
}

/* Whether the engine's weights are exactly those of `seed`. */
static bool engine_holds(rlp_rollout_engine *e, uint64_t seed)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", false);
    rlpi_weights want, got;
    if (tiny_weights(&cfg, &want, seed) || rlpi_transformer_export(e->policy->tf, &got))
        return false;
    bool same = true;
    for (size_t i = 0; same && i < want.n; i++) {
        const rlpi_tensor *a = &want.tensors[i], *b = rlpi_weights_find(&got, a->name);
        same = b && b->n_elems == a->n_elems &&
               !memcmp(rlpi_tensor_data(&got, b), rlpi_tensor_data(&want, a), a->n_elems * sizeof(float));
    }
    rlpi_weights_free(&want);
    rlpi_weights_free(&got);
    return same;
}

static bool same_weights(rlp_rollout_engine *e, const rlp_policy *p)
{
    rlpi_weights a, b;
    if (rlpi_transformer_export(e->policy->tf, &a) || rlpi_transformer_export(p->tf, &b))
        return false;
    bool same = a.n == b.n;
    for (size_t i = 0; same && i < a.n; i++) {
        const rlpi_tensor *x = &a.tensors[i], *y = rlpi_weights_find(&b, x->name);
        same = y && y->n_elems == x->n_elems &&
               !memcmp(rlpi_tensor_data(&a, x), rlpi_tensor_data(&b, y), x->n_elems * sizeof(float));
    }
    rlpi_weights_free(&a);
    rlpi_weights_free(&b);
    return same;
}

static rlp_rollout_engine *local_engine(rlp_policy *p, int share)
{
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_batch = 8;
    o.max_seq_len = 32;
    o.share_weights = share;
    rlp_rollout_engine *e;
    assert_int_equal(rlp_rollout_engine_create(&e, p, &o), RLP_OK);
    return e;
}

static uint64_t engine_version(const rlp_rollout_engine *e)
{
    uint64_t v;
    assert_int_equal(rlp_rollout_engine_version(&v, e), RLP_OK);
    return v;
}

static rlp_sync_stats sync_stats(const rlp_synchronizer *s)
{
    rlp_sync_stats st;
    assert_int_equal(rlp_synchronizer_stats(&st, s), RLP_OK);
    return st;
}

static rlp_synchronizer *make_sync(int mode, int transport, uint32_t eta, uint32_t B, uint32_t maxc)
{
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.mode = mode;
    o.transport = transport;
    o.max_staleness = eta;
    o.batch_groups = B;
    o.max_concurrent = maxc;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    return s;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---- the gate ------------------------------------------------------------------ */

/* Seeded random orders of arrivals (acquire), finishes (release, some
 * discarded) and train steps (B finished groups consumed, then publish):
 * every acquire succeeds exactly when the gate condition holds, the counts
 * match a model of them, and the bounds hold after every event. With η = 0
 * every group is consumed at the version it started at (synchronous RL). */
static void test_gate_property(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(1, 0);
    uint64_t admitted_total = 0, consumed_total = 0, sync_trials = 0;
    for (int trial = 0; trial < 300; trial++) {
        uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(trial + 1);
        uint32_t eta = trial % 3 == 0 ? 0 : (uint32_t)(xorshift(&rng) % 4);
        uint32_t B = 1 + (uint32_t)(xorshift(&rng) % 6);
        uint32_t maxc = xorshift(&rng) % 3 == 0 ? 0 : 1 + (uint32_t)(xorshift(&rng) % 10);
        rlp_synchronizer *s = make_sync(RLP_SYNC_COLOCATED, RLP_TRANSPORT_IN_PROCESS, eta, B, maxc);
        uint64_t v = 0, accepted = 0;
        uint64_t running[64], n_running = 0;   /* start versions of rollouts in flight */
        uint64_t fifo[4096], head = 0, tail = 0; /* start versions of finished, unconsumed groups */
        p->version = 0;
        for (int step = 0; step < 1500; step++) {
            uint64_t r = xorshift(&rng) % 100;
            uint64_t bound = (eta + v + 1) * B;
            if (r < 45) {
                bool open = (maxc == 0 || n_running < maxc) && accepted + n_running < bound;
                int rc = rlp_synchronizer_acquire(s, 0);
                assert_int_equal(rc, open ? RLP_OK : RLP_E_AGAIN);
                if (rc == RLP_OK) {
                    assert_true(n_running < 64);
                    running[n_running++] = v;
                    admitted_total++;
                }
            } else if (r < 85 && n_running > 0) {
                uint64_t k = xorshift(&rng) % n_running;
                uint64_t start = running[k];
                running[k] = running[--n_running];
                int keep = xorshift(&rng) % 8 != 0;
                assert_int_equal(rlp_synchronizer_release(s, keep), RLP_OK);
                if (keep) {
                    accepted++;
                    assert_true(tail < 4096);
                    fifo[tail++] = start;
                }
            } else if (tail - head >= B) {
                for (uint32_t i = 0; i < B; i++) {
                    uint64_t staleness = v - fifo[head++];
                    if (eta == 0)
                        assert_int_equal(staleness, 0);
                    consumed_total++;
                }
                p->version = ++v;
                assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
            }
            rlp_sync_stats st = sync_stats(s);
            assert_int_equal(st.policy_version, v);
            assert_int_equal(st.accepted, accepted);
            assert_int_equal(st.running, n_running);
            assert_true(st.accepted <= (eta + v + 1) * B);
            assert_true(st.accepted + st.running <= (eta + v + 1) * B);
            if (maxc)
                assert_true(st.running <= maxc);
        }
        sync_trials += eta == 0;
        rlp_synchronizer_free(s);
    }
    assert_true(sync_trials >= 100);
    print_message("gate: 300 trials x 1500 events, %llu admitted, %llu consumed\n",
                  (unsigned long long)admitted_total, (unsigned long long)consumed_total);
    rlp_policy_free(p);
}

typedef struct gate_worker {
    rlp_synchronizer *s;
    int rounds, closed, violations;
    uint32_t eta, B, maxc;
} gate_worker;

static void *gate_thread(void *arg)
{
    gate_worker *w = arg;
    for (int i = 0; i < w->rounds; i++) {
        int rc = rlp_synchronizer_acquire(w->s, RLP_WAIT_FOREVER);
        if (rc == RLP_E_CLOSED) {
            w->closed = 1;
            return NULL;
        }
        if (rc != RLP_OK)
            abort();
        rlp_sync_stats st;
        rlp_synchronizer_stats(&st, w->s);
        if (st.accepted + st.running > (w->eta + st.policy_version + 1) * w->B || st.running > w->maxc)
            w->violations++;
        if (rlp_synchronizer_release(w->s, i % 5 != 0) != RLP_OK)
            abort();
    }
    return NULL;
}

/* Four rollout threads at the gate while a trainer publishes: the bounds
 * hold in every snapshot, and close ends the waiting ones. */
/* A producer pushes a group and then releases it (the rollout worker's
 * order), so the trainer can consume it, train and publish the next
 * version in between. The version's floor (accepted ≥ v·B) must count the
 * groups still running, or they are counted twice at release and the gate
 * closes one step early for good: with η = 0 the next batch never starts
 * (it failed so about once in ten async runs of test_trainer). */
static void test_gate_floor_counts_running(void **state)
{
    (void)state;
    const uint32_t B = 2;
    rlp_policy *p = tiny_policy(1, 0);
    p->version = 0;
    rlp_synchronizer *s = make_sync(RLP_SYNC_COLOCATED, RLP_TRANSPORT_IN_PROCESS, 0, B, 0);
    for (uint32_t i = 0; i < B; i++)
        assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_E_AGAIN); /* bound (η + v + 1)·B = 2 */
    p->version = 1; /* trained on the pushed, not yet released groups */
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    for (uint32_t i = 0; i < B; i++)
        assert_int_equal(rlp_synchronizer_release(s, 1), RLP_OK);
    rlp_sync_stats st = sync_stats(s);
    assert_int_equal(st.accepted, B); /* not 2B */
    for (uint32_t i = 0; i < B; i++)
        assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_OK); /* the next batch starts */
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_E_AGAIN);
    rlp_synchronizer_free(s);
    rlp_policy_free(p);
}

static void test_gate_threads(void **state)
{
    (void)state;
    enum { T = 4 };
    const uint32_t eta = 1, B = 3, maxc = 3;
    rlp_policy *p = tiny_policy(2, 0);
    p->version = 0;
    rlp_synchronizer *s = make_sync(RLP_SYNC_COLOCATED, RLP_TRANSPORT_IN_PROCESS, eta, B, maxc);
    pthread_t th[T];
    gate_worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (gate_worker){s, 1000000, 0, 0, eta, B, maxc};
        pthread_create(&th[i], NULL, gate_thread, &w[i]);
    }
    uint64_t consumed = 0;
    while (p->version < 200) {
        rlp_sync_stats st = sync_stats(s);
        if (st.accepted - consumed >= B) {
            consumed += B;
            p->version++;
            assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
        } else {
            usleep(50);
        }
    }
    assert_int_equal(rlp_synchronizer_close(s), RLP_OK);
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].violations, 0);
        assert_int_equal(w[i].closed, 1);
    }
    rlp_sync_stats st = sync_stats(s);
    assert_true(st.accepted <= (eta + 200 + 1) * B);
    assert_int_equal(st.running, 0);
    assert_true(st.gate_waits > 0);
    rlp_synchronizer_free(s);
    rlp_policy_free(p);
}

static void test_gate_api(void **state)
{
    (void)state;
    /* resume: accepted = v·B */
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.initial_version = 7;
    o.batch_groups = 4;
    o.max_staleness = 0;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    rlp_sync_stats st = sync_stats(s);
    assert_int_equal(st.accepted, 28);
    assert_int_equal(st.policy_version, 7);
    uint64_t v;
    assert_int_equal(rlp_synchronizer_version(&v, s), RLP_OK);
    assert_int_equal(v, 7);
    /* (0 + 7 + 1)·4 = 32: four rollouts, then closed */
    for (int i = 0; i < 4; i++)
        assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_E_AGAIN);
    double t0 = now_s();
    assert_int_equal(rlp_synchronizer_acquire(s, 50), RLP_E_TIMEOUT);
    assert_true(now_s() - t0 >= 0.045);
    /* a discarded one frees its slot; an accepted one does not */
    assert_int_equal(rlp_synchronizer_release(s, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(rlp_synchronizer_release(s, 1), RLP_OK);
    assert_int_equal(rlp_synchronizer_release(s, 1), RLP_E_STATE);
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_E_AGAIN);
    st = sync_stats(s);
    assert_int_equal(st.accepted, 32);
    assert_int_equal(st.running, 0);
    assert_int_equal(st.admitted, 5);
    /* publishing version 8 opens it for B more */
    rlp_policy *p = tiny_policy(3, 0);
    p->version = 6;
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_E_STATE); /* older than 7 */
    p->version = 8;
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK); /* again: nothing to do */
    assert_int_equal(sync_stats(s).publishes, 1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(s, 0), RLP_E_AGAIN);
    assert_int_equal(rlp_synchronizer_close(s), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(s, RLP_WAIT_FOREVER), RLP_E_CLOSED);
    rlp_synchronizer_free(s);
    rlp_policy_free(p);

    /* bad options */
    o = (rlp_sync_options)RLP_SYNC_OPTIONS_INIT;
    o.batch_groups = 0;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);
    o = (rlp_sync_options)RLP_SYNC_OPTIONS_INIT;
    o.mode = RLP_SYNC_COLOCATED;
    o.transport = RLP_TRANSPORT_FILE;
    o.dir = tmpdir;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);
    o.mode = RLP_SYNC_ASYNC;
    o.dir = NULL;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);
    o.transport = RLP_TRANSPORT_RELAY;
    o.dir = tmpdir;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG); /* no parent */
    o.transport = RLP_TRANSPORT_HTTP;
    o.n_urls = 1; /* and urls NULL */
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);
    o.n_urls = 0;
    o.transport = 9;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_sync_options_init(&o, RLP_SYNC_OPTIONS_VERSION), RLP_OK);
    assert_int_equal(o.mode, RLP_SYNC_SEQUENTIAL_PULL);
    assert_int_equal(o.keep_versions, 3);
    rlp_synchronizer_free(NULL);
}

/* ---- in-process transport --------------------------------------------------------- */

static rlp_batch *generate(rlp_rollout_engine *e, uint64_t group, uint32_t n)
{
    int32_t prompt[3] = {1, (int32_t)(group % 50) + 3, 7};
    rlp_prompt pr = {.tokens = prompt, .n_tokens = 3, .group_id = group};
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    so.n = n;
    so.max_new_tokens = 6;
    so.seed = 11;
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, &pr, 1, &so, NULL, NULL), RLP_OK);
    size_t m;
    rlp_batch_size(&m, b);
    for (size_t i = 0; i < m; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, b, i);
        /* a reward that depends on the tokens, so groups have signal */
        float r = t.n_completion_tokens ? (float)(t.completion_tokens[0] % 3) : 0.0f;
        rlp_batch_set_reward(b, i, r);
    }
    return b;
}

static void train(rlp_policy *p, const rlp_batch *b, rlp_rl_stats *st)
{
    rlp_rl_options o = RLP_RL_OPTIONS_INIT;
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 1e-2f;
    assert_int_equal(rlp_policy_set_optimizer(p, &oo), RLP_OK);
    assert_int_equal(rlp_policy_train_rl(p, b, NULL, &o, st), RLP_OK);
}

/* Echo's sequential pull: before each generate call the engine is brought
 * to the trainer's latest version, and its tokens carry that version. */
static void test_sequential_pull_in_process(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(4, 1);
    rlp_rollout_engine *e = local_engine(p, 0);
    rlp_synchronizer *s = make_sync(RLP_SYNC_SEQUENTIAL_PULL, RLP_TRANSPORT_IN_PROCESS, 1, 1, 0);
    assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK); /* nothing published: nothing to do */
    assert_int_equal(sync_stats(s).weight_loads, 0);
    for (int step = 0; step < 4; step++) {
        assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK);
        uint64_t pv;
        rlp_policy_version(&pv, p);
        assert_int_equal(engine_version(e), pv);
        assert_true(same_weights(e, p));
        rlp_batch *b = generate(e, (uint64_t)step + 1, 4);
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, b, 0);
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            assert_int_equal(t.token_versions[k], pv);
        rlp_rl_stats rs;
        train(p, b, &rs);
        assert_true(rs.staleness_max == 0);
        rlp_batch_free(b);
        assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
        /* the trainer moved on: the engine is one version behind until it pulls */
        assert_false(same_weights(e, p));
        assert_int_equal(engine_version(e), pv);
    }
    rlp_sync_stats st = sync_stats(s);
    assert_int_equal(st.publishes, 4);
    assert_int_equal(st.weight_loads, 3); /* versions 1..3; version 0 was the engine's own */
    assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK);
    assert_int_equal(sync_stats(s).weight_loads, 4);
    assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK); /* up to date: no copy */
    assert_int_equal(sync_stats(s).weight_loads, 4);
    rlp_synchronizer_free(s);
    rlp_rollout_engine_free(e);

    /* co-located with shared weights: pull has nothing to do, the engine
     * reads the trainer's version */
    e = local_engine(p, 1);
    s = make_sync(RLP_SYNC_COLOCATED, RLP_TRANSPORT_IN_PROCESS, 0, 1, 0);
    rlp_batch *b = generate(e, 9, 2);
    rlp_rl_stats rs;
    train(p, b, &rs);
    rlp_batch_free(b);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull(s, e), RLP_OK);
    uint64_t pv;
    rlp_policy_version(&pv, p);
    assert_int_equal(engine_version(e), pv);
    assert_int_equal(sync_stats(s).weight_loads, 0);
    rlp_synchronizer_free(s);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

/* ---- asynchronous push-pull ---------------------------------------------------------- */

#define ASYNC_ETA 1
#define ASYNC_B 2
#define ASYNC_STEPS 5

typedef struct rollout_arg {
    rlp_synchronizer *s;
    rlp_replay_buffer *buf;
    rlp_rollout_engine *e;
    int groups, violations;
} rollout_arg;

static void *rollout_worker(void *arg)
{
    rollout_arg *a = arg;
    for (uint64_t g = 1;; g++) {
        int rc = rlp_synchronizer_acquire(a->s, RLP_WAIT_FOREVER);
        if (rc == RLP_E_CLOSED)
            break;
        if (rc != RLP_OK)
            abort();
        rlp_sync_stats st;
        rlp_synchronizer_stats(&st, a->s);
        if (st.accepted + st.running > (ASYNC_ETA + st.policy_version + 1) * ASYNC_B)
            a->violations++;
        if (rlp_synchronizer_pull(a->s, a->e) != RLP_OK)
            abort();
        rlp_batch *b = generate(a->e, g, 4);
        rc = rlp_replay_buffer_push(a->buf, b);
        rlp_batch_free(b);
        if (rlp_synchronizer_release(a->s, rc == RLP_OK) != RLP_OK)
            abort();
        if (rc == RLP_E_CLOSED)
            break;
        if (rc != RLP_OK)
            abort();
        a->groups++;
    }
    return NULL;
}

/* A rollout thread generates and pushes through the gate while the trainer
 * pulls B groups per step, trains and publishes: every group the trainer
 * sees is within η, none is dropped, and the gate's bound held. */
static void test_async_push_pull(void **state)
{
    (void)state;
    rlp_policy *trainer = tiny_policy(5, 1);
    rlp_rollout_engine *e = local_engine(trainer, 0);
    rlp_synchronizer *s = make_sync(RLP_SYNC_ASYNC, RLP_TRANSPORT_IN_PROCESS, ASYNC_ETA, ASYNC_B, 2);
    rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
    bo.max_staleness = ASYNC_ETA;
    rlp_replay_buffer *buf;
    assert_int_equal(rlp_replay_buffer_create(&buf, &bo), RLP_OK);
    assert_int_equal(rlp_synchronizer_publish(s, trainer), RLP_OK); /* version 0 */
    rollout_arg a = {s, buf, e, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, rollout_worker, &a);
    double max_stale = 0;
    for (int step = 0; step < ASYNC_STEPS; step++) {
        uint64_t v;
        rlp_policy_version(&v, trainer);
        rlp_batch *b;
        assert_int_equal(rlp_replay_buffer_pull(&b, buf, ASYNC_B, v, 60000), RLP_OK);
        rlp_rl_stats rs;
        train(trainer, b, &rs);
        assert_int_equal(rs.n_groups, ASYNC_B);
        if (rs.staleness_max > max_stale)
            max_stale = rs.staleness_max;
        rlp_batch_free(b);
        assert_int_equal(rlp_synchronizer_publish(s, trainer), RLP_OK);
    }
    rlp_synchronizer_close(s);
    rlp_replay_buffer_close(buf);
    pthread_join(th, NULL);
    rlp_buffer_stats bs;
    assert_int_equal(rlp_replay_buffer_stats(&bs, buf), RLP_OK);
    rlp_sync_stats st = sync_stats(s);
    assert_int_equal(a.violations, 0);
    assert_int_equal(bs.consumed, ASYNC_STEPS * ASYNC_B);
    assert_int_equal(bs.dropped_stale, 0);
    assert_true(bs.max_staleness_seen <= ASYNC_ETA);
    assert_true(max_stale <= ASYNC_ETA);
    assert_true(st.accepted <= (ASYNC_ETA + ASYNC_STEPS + 1) * ASYNC_B);
    assert_int_equal(st.publishes, ASYNC_STEPS + 1);
    print_message("async: %d groups generated, %d steps, staleness histogram [%llu %llu], max %g\n", a.groups,
                  ASYNC_STEPS, (unsigned long long)bs.staleness_hist[0], (unsigned long long)bs.staleness_hist[1],
                  max_stale);
    rlp_replay_buffer_free(buf);
    rlp_synchronizer_free(s);
    rlp_rollout_engine_free(e);
    rlp_policy_free(trainer);
}

/* ---- file transport ----------------------------------------------------------------- */

#define FILE_VERSIONS 100

typedef struct file_reader {
    const char *dir;
    atomic_int done;
    int loads, mismatches, regressions, errors;
    uint64_t last;
    char error[256];
} file_reader;

static rlp_synchronizer *file_sync(const char *dir, uint32_t keep)
{
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.mode = RLP_SYNC_ASYNC;
    o.transport = RLP_TRANSPORT_FILE;
    o.dir = dir;
    o.keep_versions = keep;
    o.verify_retries = 20;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    return s;
}

static void *file_reader_thread(void *arg)
{
    file_reader *r = arg;
    /* its own synchronizer on the folder, as another process would have */
    rlp_synchronizer *s = file_sync(r->dir, 2);
    rlp_policy *p = tiny_policy(0, 0);
    rlp_rollout_engine *e = local_engine(p, 0);
    for (int last_round = 0; last_round < 2;) {
        if (atomic_load(&r->done))
            last_round++;
        int rc = rlp_synchronizer_pull(s, e);
        if (rc != RLP_OK) {
            r->errors++;
            snprintf(r->error, sizeof r->error, "%s", rlp_error_last());
            continue;
        }
        uint64_t v;
        rlp_rollout_engine_version(&v, e);
        if (v < r->last)
            r->regressions++;
        if (v != r->last) {
            r->loads++;
            /* version v was published with the weights of seed v */
            if (!engine_holds(e, v))
                r->mismatches++;
        }
        r->last = v;
    }
    rlp_sync_stats st;
    rlp_synchronizer_stats(&st, s);
    print_message("file transport: reader loaded %d versions (last %llu), %llu checksum/prune retries\n", r->loads,
                  (unsigned long long)r->last, (unsigned long long)st.checksum_retries);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
    rlp_synchronizer_free(s);
    return NULL;
}

static void test_file_transport_race(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/weights", tmpdir);
    rlp_policy *p = tiny_policy(0, 0);
    rlp_synchronizer *w = file_sync(dir, 2);
    file_reader r = {.dir = dir};
    atomic_init(&r.done, 0);
    pthread_t th;
    pthread_create(&th, NULL, file_reader_thread, &r);
    double t0 = now_s();
    for (uint64_t v = 1; v <= FILE_VERSIONS; v++) {
        set_weights(p, v, v);
        assert_int_equal(rlp_synchronizer_publish(w, p), RLP_OK);
    }
    double dt = now_s() - t0;
    atomic_store(&r.done, 1);
    pthread_join(th, NULL);
    if (r.errors)
        print_message("reader errors: %d, last: %s\n", r.errors, r.error);
    assert_int_equal(r.errors, 0);
    assert_int_equal(r.mismatches, 0);
    assert_int_equal(r.regressions, 0);
    assert_int_equal(r.last, FILE_VERSIONS);
    assert_true(r.loads >= 2);
    rlp_sync_stats st = sync_stats(w);
    assert_int_equal(st.publishes, FILE_VERSIONS);
    print_message("file transport: %d versions published in %.3f s (%.1f ms each, %llu bytes)\n", FILE_VERSIONS, dt,
                  1e3 * dt / FILE_VERSIONS, (unsigned long long)st.bytes_published);
    /* pruning kept the last two */
    int kept = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d)))
        kept += de->d_name[0] == 'v' || strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    assert_int_equal(kept, 2);
    uint64_t v;
    rlp_synchronizer *fresh = file_sync(dir, 2);
    assert_int_equal(rlp_synchronizer_version(&v, fresh), RLP_OK);
    assert_int_equal(v, FILE_VERSIONS);
    rlp_synchronizer_free(fresh);
    rlp_synchronizer_free(w);
    rlp_policy_free(p);
    rm_tree(dir);
}

static void flip_byte(const char *path, long from_end)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Damaged or forged files are never loaded: the engine keeps its weights
 * and the error names what is wrong. */
static void test_file_transport_damage(void **state)
{
    (void)state;
    char dir[512], path[700], manifest[700];
    snprintf(dir, sizeof dir, "%s/damaged", tmpdir);
    snprintf(manifest, sizeof manifest, "%s/latest.json", dir);
    rlp_policy *p = tiny_policy(0, 0);
    rlp_synchronizer *w = file_sync(dir, 3);
    rlp_sync_options ro = RLP_SYNC_OPTIONS_INIT;
    ro.transport = RLP_TRANSPORT_FILE;
    ro.dir = dir;
    ro.verify_retries = 2;
    rlp_synchronizer *r;
    assert_int_equal(rlp_synchronizer_create(&r, &ro), RLP_OK);
    rlp_policy *rp = tiny_policy(0, 0);
    rlp_rollout_engine *e = local_engine(rp, 0);
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_OK); /* nothing yet */

    set_weights(p, 1, 1);
    assert_int_equal(rlp_synchronizer_publish(w, p), RLP_OK);
    /* one bit of the weights flipped */
    snprintf(path, sizeof path, "%s/v1/model.safetensors", dir);
    flip_byte(path, 5);
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "model.safetensors"));
    assert_non_null(strstr(rlp_error_last(), "CRC-32"));
    assert_int_equal(engine_version(e), 0);
    assert_true(engine_holds(e, 0));
    assert_int_equal(sync_stats(r).checksum_retries, 2);
    /* a torn manifest (what a non-atomic writer would leave) */
    write_text(manifest, "{\"format\": \"rlpost-weights\", \"manifest_version\": 1, \"vers");
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_E_FORMAT);
    /* a manifest pointing outside the folder */
    write_text(manifest, "{\"format\":\"rlpost-weights\",\"manifest_version\":1,\"version\":1,\"path\":\"../v1\","
                         "\"checksum\":\"crc32\",\"files\":[{\"name\":\"config.json\",\"size\":1,\"crc32\":\"00000000\"}]}");
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "\"path\""));
    write_text(manifest, "{\"format\":\"rlpost-weights\",\"manifest_version\":1,\"version\":1,\"path\":\"v1\","
                         "\"checksum\":\"crc32\",\"files\":[{\"name\":\"../../etc/passwd\",\"size\":1,\"crc32\":\"00000000\"}]}");
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_E_FORMAT);
    assert_int_equal(engine_version(e), 0);
    /* the next good version loads */
    set_weights(p, 2, 2);
    assert_int_equal(rlp_synchronizer_publish(w, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull(r, e), RLP_OK);
    assert_int_equal(engine_version(e), 2);
    assert_true(engine_holds(e, 2));
    /* a reader's gate follows the manifest: joining at v = 2 (B = 1, η = 1)
     * it counts accepted = v·B = 2, so it admits (1 + 2 + 1)·1 − 2 = 2 */
    assert_int_equal(sync_stats(r).accepted, 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rlp_synchronizer_acquire(r, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(r, 0), RLP_E_AGAIN);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rlp_synchronizer_release(r, 1), RLP_OK);
    set_weights(p, 3, 3);
    assert_int_equal(rlp_synchronizer_publish(w, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_acquire(r, 2000), RLP_OK); /* saw version 3 by polling */
    rlp_synchronizer_free(r);
    rlp_synchronizer_free(w);
    rlp_rollout_engine_free(e);
    rlp_policy_free(rp);
    rlp_policy_free(p);
    rm_tree(dir);
}

/* ---- HTTP transport ------------------------------------------------------------------ */

enum { M_LOAD, M_FAIL_ONCE, M_500, M_400, M_SLOW, M_SUCCESS_FALSE, M_SLOW5 };

typedef struct server {
    http_test_server http; /* the daemon, its base URL, `stopping` */
    atomic_int mode;
    atomic_int hits;
    pthread_mutex_t mu;
    char *last_body, *last_auth, *last_url;
    rlp_rollout_engine *engine; /* M_LOAD: loads what it is told, as rlpost serve does */
} server;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *body, size_t len)
{
    (void)method;
    (void)len;
    server *s = cls;
    int hit = atomic_fetch_add(&s->hits, 1) + 1;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    pthread_mutex_lock(&s->mu);
    free(s->last_body);
    free(s->last_auth);
    free(s->last_url);
    s->last_body = body ? strdup(body) : NULL;
    s->last_auth = auth ? strdup(auth) : NULL;
    s->last_url = strdup(url);
    pthread_mutex_unlock(&s->mu);
    switch (atomic_load(&s->mode)) {
    case M_FAIL_ONCE:
        if (hit == 1)
            return http_test_reply(conn, 500, "{\"message\":\"warming up\"}");
        return http_test_reply(conn, 200, "{\"success\":true}");
    case M_500: return http_test_reply(conn, 500, "{\"message\":\"out of GPU memory\"}");
    case M_400: return http_test_reply(conn, 400, "{\"success\":false,\"message\":\"no such folder\"}");
    case M_SUCCESS_FALSE: return http_test_reply(conn, 200, "{\"success\":false,\"message\":\"shape mismatch\"}");
    case M_SLOW:
    case M_SLOW5:
        for (int i = 0; i < (atomic_load(&s->mode) == M_SLOW5 ? 500 : 100) && !atomic_load(&s->http.stopping); i++)
            usleep(10000);
        return http_test_reply(conn, 200, "{\"success\":true}");
    default: {
        json_t *j = body ? json_loads(body, 0, NULL) : NULL;
        const char *path = json_string_value(json_object_get(j, "model_path"));
        json_int_t v = json_integer_value(json_object_get(j, "version"));
        int rc = path && s->engine ? rlp_rollout_engine_load_weights(s->engine, path, (uint64_t)v) : RLP_OK;
        json_decref(j);
        return rc == RLP_OK ? http_test_reply(conn, 200, "{\"success\":true,\"message\":\"loaded\"}")
                            : http_test_reply(conn, 400, "{\"success\":false,\"message\":\"load failed\"}");
    }
    }
}

static server *server_start(int mode)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->mode, mode);
    atomic_init(&s->hits, 0);
    http_test_server_start(&s->http, on_request, s);
    return s;
}

static void server_stop(server *s)
{
    http_test_server_stop(&s->http);
    free(s->last_body);
    free(s->last_auth);
    free(s->last_url);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* A remote engine on one server (the synchronizer tells it what it holds). */
static rlp_rollout_engine *remote_engine_on(const char *url)
{
    rlp_remote_options ro = RLP_REMOTE_OPTIONS_INIT;
    ro.urls = &url;
    ro.n_urls = 1;
    rlp_rollout_engine *remote = NULL;
    assert_int_equal(rlp_rollout_engine_create_remote(&remote, NULL, &ro), RLP_OK);
    return remote;
}

static void test_http_transport(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/http", tmpdir);
    server *good = server_start(M_LOAD), *flaky = server_start(M_FAIL_ONCE), *bad = server_start(M_500);
    rlp_policy *served = tiny_policy(0, 0);
    good->engine = local_engine(served, 0);
    char good_v1[80];
    snprintf(good_v1, sizeof good_v1, "%s/v1/", good->http.base); /* a base URL with /v1/ works too */
    const char *urls[3] = {good_v1, flaky->http.base, bad->http.base};
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.mode = RLP_SYNC_ASYNC;
    o.transport = RLP_TRANSPORT_HTTP;
    o.dir = dir;
    o.urls = urls;
    o.n_urls = 3;
    o.api_key = "sekret";
    o.timeout_ms = 5000;
    o.max_retries = 2;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    rlp_rollout_engine *remote = remote_engine_on(urls[0]);

    rlp_policy *p = tiny_policy(0, 0);
    set_weights(p, 1, 1);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    assert_int_equal(atomic_load(&good->hits), 0); /* publish writes; pull tells */

    assert_int_equal(rlp_synchronizer_pull(s, remote), RLP_E_NETWORK);
    const char *err = rlp_error_last();
    assert_non_null(strstr(err, bad->http.base));
    assert_non_null(strstr(err, "HTTP 500"));
    assert_non_null(strstr(err, "2 of 3"));
    assert_null(strstr(err, flaky->http.base));
    assert_int_equal(atomic_load(&good->hits), 1);
    assert_int_equal(atomic_load(&flaky->hits), 2); /* a 500, then retried */
    assert_int_equal(atomic_load(&bad->hits), 3);   /* 1 + max_retries */
    assert_int_equal(engine_version(remote), 0);     /* not every server has it yet */
    /* what was sent, and that it was loadable */
    json_t *j = json_loads(good->last_body, 0, NULL);
    char want_path[600];
    snprintf(want_path, sizeof want_path, "%s/v1", dir);
    char *real = realpath(dir, NULL);
    char real_path[600];
    snprintf(real_path, sizeof real_path, "%s/v1", real);
    free(real);
    assert_string_equal(json_string_value(json_object_get(j, "model_path")), real_path);
    assert_int_equal(json_integer_value(json_object_get(j, "version")), 1);
    assert_string_equal(json_string_value(json_object_get(j, "weight_version")), "1");
    json_decref(j);
    assert_string_equal(good->last_url, "/update_weights_from_disk");
    assert_string_equal(good->last_auth, "Bearer sekret");
    assert_int_equal(engine_version(good->engine), 1);
    assert_true(engine_holds(good->engine, 1));

    /* the bad server recovers: only it is asked again, then the engine moves */
    atomic_store(&bad->mode, M_LOAD);
    assert_int_equal(rlp_synchronizer_pull(s, remote), RLP_OK);
    assert_int_equal(atomic_load(&good->hits), 1);
    assert_int_equal(atomic_load(&flaky->hits), 2);
    assert_int_equal(atomic_load(&bad->hits), 4);
    assert_int_equal(engine_version(remote), 1);
    assert_int_equal(rlp_synchronizer_pull(s, remote), RLP_OK); /* up to date: no requests */
    assert_int_equal(atomic_load(&good->hits) + atomic_load(&flaky->hits) + atomic_load(&bad->hits), 7);

    /* a new version; NULL engine = just tell the servers */
    set_weights(p, 2, 2);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    assert_int_equal(engine_version(good->engine), 2);
    assert_true(engine_holds(good->engine, 2));
    rlp_sync_stats st = sync_stats(s);
    assert_int_equal(st.http_requests, 10);
    assert_int_equal(st.http_failures, 1);

    /* 4xx and {"success": false} are not retried; a timeout is */
    atomic_store(&bad->mode, M_400);
    atomic_store(&flaky->mode, M_SUCCESS_FALSE);
    atomic_store(&good->mode, M_SLOW);
    rlp_synchronizer_free(s);
    o.timeout_ms = 300;
    o.max_retries = 1;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK); /* a new one knows no server's version */
    int h0 = atomic_load(&good->hits), h1 = atomic_load(&flaky->hits), h2 = atomic_load(&bad->hits);
    double t0 = now_s();
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_E_NETWORK);
    double dt = now_s() - t0;
    err = rlp_error_last();
    assert_non_null(strstr(err, "0 of 3"));
    assert_non_null(strstr(err, "shape mismatch"));
    assert_non_null(strstr(err, "HTTP 400"));
    assert_true(strstr(err, "imeout") || strstr(err, "timed out"));
    assert_int_equal(atomic_load(&good->hits) - h0, 2); /* timed out, retried once */
    assert_int_equal(atomic_load(&flaky->hits) - h1, 1);
    assert_int_equal(atomic_load(&bad->hits) - h2, 1);
    assert_true(dt < 3.0); /* the servers were asked at once, not one after another */
    rlp_synchronizer_free(s);

    /* a remote engine needs the HTTP transport */
    rlp_synchronizer *ip = make_sync(RLP_SYNC_ASYNC, RLP_TRANSPORT_IN_PROCESS, 1, 1, 0);
    assert_int_equal(rlp_synchronizer_pull(ip, remote), RLP_E_STATE);
    rlp_synchronizer_free(ip);

    rlp_rollout_engine_free(remote);
    rlp_rollout_engine *served_engine = good->engine;
    server_stop(good);
    server_stop(flaky);
    server_stop(bad);
    rlp_rollout_engine_free(served_engine);
    rlp_policy_free(served);
    rlp_policy_free(p);
    rm_tree(dir);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 1; /* OpenBLAS threads are invisible to ThreadSanitizer */
    if (rlp_context_create(&ctx, &o) != RLP_OK)
        return -1;
    snprintf(tmpdir, sizeof tmpdir, "%s/rlp_sync_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rm_tree(tmpdir);
    rlp_context_free(ctx);
    return 0;
}

/* pull_at_least over HTTP: the update runs on the synchronizer's thread
 * (the call does not wait for a slow server), a failed round is reported
 * once by a later call, a server set can change while rounds run, and
 * freeing stops a round in flight. */
static void test_http_pull_at_least(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/http_bg", tmpdir);
    server *good = server_start(M_LOAD), *slow = server_start(M_SLOW), *bad = server_start(M_500);
    const char *urls[3] = {good->http.base, slow->http.base, bad->http.base};
    rlp_sync_options o = RLP_SYNC_OPTIONS_INIT;
    o.mode = RLP_SYNC_ASYNC;
    o.transport = RLP_TRANSPORT_HTTP;
    o.dir = dir;
    o.urls = urls;
    o.n_urls = 2; /* good and slow */
    o.timeout_ms = 5000;
    o.max_retries = 0;
    rlp_synchronizer *s;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    rlp_rollout_engine *remote = remote_engine_on(urls[0]);
    /* nothing published: nothing to do */
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 0), RLP_OK);
    rlp_policy *p = tiny_policy(0, 0);
    set_weights(p, 1, 1);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    /* the slow server answers after 1 s; the call returns at once */
    double t0 = now_s();
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 1), RLP_OK);
    assert_true(now_s() - t0 < 0.9);
    assert_int_equal(engine_version(remote), 0); /* no server is known to hold 1 yet */
    while (atomic_load(&slow->hits) < 1 || atomic_load(&good->hits) < 1)
        usleep(1000);
    /* the round ends once the slow one answers: then every server holds 1 */
    t0 = now_s();
    while (engine_version(remote) != 1 && now_s() - t0 < 5) {
        assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 1), RLP_OK);
        usleep(20000);
    }
    assert_int_equal(engine_version(remote), 1);
    assert_int_equal(atomic_load(&good->hits), 1); /* one round, each asked once */
    assert_int_equal(atomic_load(&slow->hits), 1);

    /* a new server joins (the others keep what they hold): only it is asked,
     * and its failure is reported once, by a later call */
    const char *urls2[3] = {good->http.base, slow->http.base, bad->http.base};
    assert_int_equal(rlp_synchronizer_set_urls(s, urls2, 3), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 0), RLP_OK);
    t0 = now_s();
    int rc = RLP_OK;
    while ((rc = rlp_synchronizer_pull_at_least(s, remote, 0)) == RLP_OK && now_s() - t0 < 5)
        usleep(20000);
    assert_int_equal(rc, RLP_E_NETWORK);
    assert_non_null(strstr(rlp_error_last(), bad->http.base));
    assert_int_equal(atomic_load(&good->hits), 1);
    assert_int_equal(atomic_load(&slow->hits), 1);
    assert_true(atomic_load(&bad->hits) >= 1);
    /* the set may shrink; an empty one tells nobody; bad URLs are refused */
    assert_int_equal(rlp_synchronizer_set_urls(s, urls2, 2), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 1), RLP_OK);
    assert_int_equal(rlp_synchronizer_set_urls(s, NULL, 0), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull(s, NULL), RLP_OK);
    const char *bad_url[1] = {"ftp://x"};
    assert_int_equal(rlp_synchronizer_set_urls(s, bad_url, 1), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_synchronizer_set_urls(NULL, urls2, 1), RLP_E_INVALID_ARG);

    /* freeing stops a round in flight (the slow server now holds it for 5 s) */
    atomic_store(&slow->mode, M_SLOW5);
    assert_int_equal(rlp_synchronizer_set_urls(s, urls2 + 1, 1), RLP_OK); /* slow only, its version kept */
    set_weights(p, 2, 2);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    int h = atomic_load(&slow->hits);
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 2), RLP_OK);
    while (atomic_load(&slow->hits) == h)
        usleep(1000);
    t0 = now_s();
    rlp_synchronizer_free(s);
    assert_true(now_s() - t0 < 2.5);

    /* HTTP may start with no server (a swarm whose workers join later); RELAY needs its parent */
    o.urls = NULL;
    o.n_urls = 0;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_OK);
    assert_int_equal(rlp_synchronizer_publish(s, p), RLP_OK);
    assert_int_equal(rlp_synchronizer_pull_at_least(s, remote, 2), RLP_OK); /* nobody to tell */
    assert_int_equal(rlp_synchronizer_pull(s, remote), RLP_OK);
    rlp_synchronizer_free(s);
    o.transport = RLP_TRANSPORT_RELAY;
    assert_int_equal(rlp_synchronizer_create(&s, &o), RLP_E_INVALID_ARG);

    /* other transports: set_urls is refused, pull_at_least is pull */
    rlp_synchronizer *ip = make_sync(RLP_SYNC_ASYNC, RLP_TRANSPORT_IN_PROCESS, 1, 1, 0);
    assert_int_equal(rlp_synchronizer_set_urls(ip, urls, 1), RLP_E_STATE);
    assert_int_equal(rlp_synchronizer_pull_at_least(ip, remote, 0), RLP_E_STATE);
    rlp_synchronizer_free(ip);

    rlp_rollout_engine_free(remote);
    server_stop(good);
    server_stop(slow);
    server_stop(bad);
    rlp_policy_free(p);
    rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_property),
        cmocka_unit_test(test_gate_floor_counts_running),
        cmocka_unit_test(test_gate_threads),
        cmocka_unit_test(test_gate_api),
        cmocka_unit_test(test_sequential_pull_in_process),
        cmocka_unit_test(test_async_push_pull),
        cmocka_unit_test(test_file_transport_race),
        cmocka_unit_test(test_file_transport_damage),
        cmocka_unit_test(test_http_transport),
        cmocka_unit_test(test_http_pull_at_least),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
