/* Asynchronous push-pull against synchronous RL on the same model, reward
 * and prompts, with long-tailed completion lengths (most short, a few
 * long: the shape that leaves a synchronous trainer waiting for the
 * longest sample of every batch). Prints trajectories/s of each mode, the
 * ratio, and the trainer's idle fraction (wall time not spent in the RL
 * step). AReaL (Fu et al. 2025) reports 2.77× at cluster scale, where
 * generation and training run on different GPUs; here both share the
 * same cores, so the gain can only come from filling the decode tail.
 * Usage: bench_async [model] [steps] [threads] */
#include "rlpost.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PROMPTS = 4, GROUP = 4, PROMPT_LEN = 8 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHECK(call)                                                                               \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        if (rc_ != RLP_OK) {                                                                      \
            fprintf(stderr, "bench_async: %s: %s\n", #call, rlp_error_last());                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* prompt i of step s: fixed ids; its length budget is long-tailed (a
 * Pareto-like draw, the same in both modes) */
typedef struct workload {
    int32_t ids[64][PROMPT_LEN];
    rlp_sampling_options opts[64];
} workload;

static void make_workload(workload *w, int steps, int vocab)
{
    uint64_t s = 12345;
    for (int i = 0; i < steps * PROMPTS && i < 64; i++) {
        for (int k = 0; k < PROMPT_LEN; k++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            w->ids[i][k] = (int32_t)((s >> 33) % (uint64_t)vocab);
        }
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(s >> 11) / 9007199254740992.0;
        uint32_t len = (uint32_t)(12.0 / pow(1.0 - u, 1.0 / 1.2)); /* Pareto, α = 1.2, min 12 */
        rlp_sampling_options o = RLP_SAMPLING_OPTIONS_INIT;
        o.n = GROUP;
        o.max_new_tokens = len > 200 ? 200 : len;
        o.ignore_eos = 1;
        o.seed = (uint64_t)i + 1;
        w->opts[i] = o;
    }
}

/* reward: share of even token ids (learnable, cheap) */
static void score(rlp_batch *b)
{
    size_t n;
    CHECK(rlp_batch_size(&n, b));
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        CHECK(rlp_batch_get(&t, b, i));
        size_t even = 0;
        for (size_t k = 0; k < t.n_completion_tokens; k++)
            even += t.completion_tokens[k] % 2 == 0;
        CHECK(rlp_batch_set_reward(b, i, t.n_completion_tokens ? (float)even / (float)t.n_completion_tokens : 0));
    }
}

static void prompts_of(const workload *w, int step, rlp_prompt *pr)
{
    for (int i = 0; i < PROMPTS; i++) {
        int k = step * PROMPTS + i;
        pr[i] = (rlp_prompt){.tokens = w->ids[k], .n_tokens = PROMPT_LEN, .sampling = &w->opts[k],
                             .group_id = (uint64_t)k + 1};
    }
}

static double run_sync(rlp_context *ctx, const char *model, const workload *w, int steps, double *idle, size_t *n_traj)
{
    rlp_policy *p;
    CHECK(rlp_policy_load(&p, ctx, model, NULL));
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = PROMPTS * GROUP;
    ro.max_seq_len = 256;
    ro.share_weights = 1;
    rlp_rollout_engine *e;
    CHECK(rlp_rollout_engine_create(&e, p, &ro));
    double t0 = now(), busy = 0;
    *n_traj = 0;
    for (int s = 0; s < steps; s++) {
        rlp_prompt pr[PROMPTS];
        prompts_of(w, s, pr);
        rlp_batch *b;
        CHECK(rlp_rollout_generate(&b, e, pr, PROMPTS, NULL, NULL, NULL));
        score(b);
        double a = now();
        rlp_rl_stats st;
        CHECK(rlp_policy_train_rl(p, b, NULL, NULL, &st));
        busy += now() - a;
        *n_traj += st.n_seqs;
        rlp_batch_free(b);
    }
    double wall = now() - t0;
    *idle = 1.0 - busy / wall;
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
    return wall;
}

typedef struct async_ctx {
    rlp_rollout_engine *engine;
    rlp_synchronizer *sync;
    rlp_replay_buffer *buf;
    const workload *w;
    int steps;
} async_ctx;

/* the rollout side: admits a step's groups through the gate, refreshes to
 * the latest version (Echo's pull), generates them together (the same
 * batching as the synchronous loop) and pushes them with their tags */
static void *rollout_thread(void *arg)
{
    async_ctx *a = arg;
    for (int s = 0; s < a->steps; s++) {
        for (int i = 0; i < PROMPTS; i++)
            if (rlp_synchronizer_acquire(a->sync, RLP_WAIT_FOREVER) != RLP_OK)
                return NULL;
        CHECK(rlp_synchronizer_pull(a->sync, a->engine));
        rlp_prompt pr[PROMPTS];
        prompts_of(a->w, s, pr);
        rlp_batch *b;
        CHECK(rlp_rollout_generate(&b, a->engine, pr, PROMPTS, NULL, NULL, NULL));
        score(b);
        int rc = rlp_replay_buffer_push(a->buf, b);
        rlp_batch_free(b);
        for (int i = 0; i < PROMPTS; i++)
            rlp_synchronizer_release(a->sync, rc == RLP_OK);
        if (rc != RLP_OK)
            return NULL;
    }
    return NULL;
}

/* The two sides get their own contexts with half the threads each, so
 * that they share the cores instead of oversubscribing them. */
static double run_async(int threads, const char *model, const workload *w, int steps, uint32_t eta,
                        double *idle, size_t *n_traj, double *stale_mean)
{
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads > 1 ? threads / 2 : 1;
    rlp_context *ctx_train, *ctx_roll;
    CHECK(rlp_context_create(&ctx_train, &co));
    co.n_threads = threads > 1 ? threads - threads / 2 : 1;
    CHECK(rlp_context_create(&ctx_roll, &co));
    rlp_policy *p, *rp;
    CHECK(rlp_policy_load(&p, ctx_train, model, NULL));
    rlp_policy_options fo = RLP_POLICY_OPTIONS_INIT;
    fo.trainable = 0;
    CHECK(rlp_policy_load(&rp, ctx_roll, model, &fo));
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = PROMPTS * GROUP;
    ro.max_seq_len = 256;
    rlp_rollout_engine *e;
    CHECK(rlp_rollout_engine_create(&e, rp, &ro));
    rlp_sync_options so = RLP_SYNC_OPTIONS_INIT;
    so.mode = RLP_SYNC_ASYNC;
    so.max_staleness = eta;
    so.batch_groups = PROMPTS;
    rlp_synchronizer *sync;
    CHECK(rlp_synchronizer_create(&sync, &so));
    rlp_buffer_options bo = RLP_BUFFER_OPTIONS_INIT;
    bo.sync = sync; /* one η: the gate's */
    bo.capacity = 64;
    rlp_replay_buffer *buf;
    CHECK(rlp_replay_buffer_create(&buf, &bo));
    CHECK(rlp_synchronizer_publish(sync, p));
    async_ctx a = {e, sync, buf, w, steps};
    double t0 = now(), busy = 0, stale = 0;
    pthread_t th;
    pthread_create(&th, NULL, rollout_thread, &a);
    *n_traj = 0;
    for (int s = 0; s < steps; s++) {
        uint64_t v;
        CHECK(rlp_policy_version(&v, p));
        rlp_batch *b;
        CHECK(rlp_replay_buffer_pull(&b, buf, PROMPTS, v, RLP_WAIT_FOREVER));
        double t1 = now();
        rlp_rl_stats st;
        CHECK(rlp_policy_train_rl(p, b, NULL, NULL, &st));
        CHECK(rlp_synchronizer_publish(sync, p));
        busy += now() - t1;
        stale += st.staleness_mean;
        *n_traj += st.n_seqs;
        rlp_batch_free(b);
    }
    double wall = now() - t0;
    rlp_synchronizer_close(sync);
    rlp_replay_buffer_close(buf);
    pthread_join(th, NULL);
    *idle = 1.0 - busy / wall;
    *stale_mean = stale / steps;
    rlp_replay_buffer_free(buf);
    rlp_synchronizer_free(sync);
    rlp_rollout_engine_free(e);
    rlp_policy_free(rp);
    rlp_policy_free(p);
    rlp_context_free(ctx_roll);
    rlp_context_free(ctx_train);
    return wall;
}

int main(int argc, char **argv)
{
    char path[4096];
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/../shared/data/llama2c/stories260K.bin", root ? root : ".");
    int steps = argc > 2 ? atoi(argv[2]) : 8;
    if (steps > 16)
        steps = 16;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = argc > 3 ? atoi(argv[3]) : 2;
    rlp_context *ctx;
    CHECK(rlp_context_create(&ctx, &co));
    rlp_model_info info = {0};
    if (rlp_model_inspect(&info, path) != RLP_OK) {
        fprintf(stderr, "bench_async: %s: %s\n", path, rlp_error_last());
        return 77;
    }
    static workload w;
    make_workload(&w, steps, info.vocab_size);
    printf("%s: %d steps × %d prompts × %d samples, long-tailed lengths (Pareto α 1.2, 12–200 tokens), "
           "%d threads\n", path, steps, PROMPTS, GROUP, co.n_threads);
    double idle_s, idle_a, stale;
    size_t ns, na;
    double ws = run_sync(ctx, path, &w, steps, &idle_s, &ns);
    printf("synchronous:        %6.1f s, %5.2f trajectories/s, trainer idle %4.1f %%\n", ws, ns / ws,
           100 * idle_s);
    const uint32_t etas[] = {1, 4};
    for (int k = 0; k < 2; k++) {
        double wa = run_async(co.n_threads, path, &w, steps, etas[k], &idle_a, &na, &stale);
        printf("async push-pull η=%u: %6.1f s, %5.2f trajectories/s, trainer idle %4.1f %%, mean staleness %.2f; "
               "async / sync = %.2fx\n",
               etas[k], wa, na / wa, 100 * idle_a, stale, (na / wa) / (ns / ws));
    }
    rlp_context_free(ctx);
    return 0;
}
