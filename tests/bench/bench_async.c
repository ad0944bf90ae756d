/* Asynchronous push-pull against synchronous RL on the same model, reward
 * and prompts, both through the library's loop: rlp_trainer in
 * RLP_TRAIN_SYNC mode (generate, score, train on one engine sharing the
 * weights) and in RLP_TRAIN_ASYNC mode (its rollout worker thread on a
 * copy of the policy, on a context of its own, under the staleness gate).
 * Completion lengths are long-tailed: most short, a few long — the shape
 * that leaves a synchronous trainer waiting for the longest sample of
 * every batch. The trainer draws every group with one sampling
 * configuration, so the lengths come from the model: on stories260K a
 * completion ends at EOS or at one of two tokens it samples about once in
 * 80 (a geometric length, printed as a distribution line), at most 200
 * tokens; another model ends at EOS or the cap.
 * Prints trajectories/s of each mode, the ratio, and the trainer's idle
 * fraction (wall time not spent in the RL step). AReaL (Fu et al. 2025)
 * reports 2.77× at cluster scale, where generation and training run on
 * different GPUs; here both share the same cores, so the gain can only come
 * from filling the decode tail. The prompts are the "arith" task's as
 * plain text, encoded with a llama2.c tokenizer of the model's vocabulary
 * written into a temporary folder (stories260K ships none).
 * Usage: bench_async [model] [steps] [threads] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include "../../examples/blas_kernels.h"
#include "rlpost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { PROMPTS = 4, GROUP = 4, MAX_NEW = 200 };

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

/* A llama2.c tokenizer.bin of @p vocab pieces: <unk>, BOS, EOS, printable
 * ASCII, then lower-case letter pairs, then filler pieces. */
static int write_tokenizer(const char *path, int32_t vocab)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int32_t max_len = 6;
    fwrite(&max_len, 4, 1, f);
    char piece[16];
    for (int32_t i = 0, c = 32, a = 'a', b = 'a'; i < vocab; i++) {
        if (i < 3)
            snprintf(piece, sizeof piece, "%s", i == 0 ? "<unk>" : i == 1 ? "\n<s>\n" : "\n</s>\n");
        else if (c < 127)
            snprintf(piece, sizeof piece, "%c", c++);
        else if (a <= 'z') {
            snprintf(piece, sizeof piece, "%c%c", a, b);
            if (++b > 'z')
                b = 'a', a++;
        } else
            snprintf(piece, sizeof piece, "<%d>", (int)i);
        float score = -(float)i;
        int32_t len = (int32_t)strlen(piece);
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(piece, 1, (size_t)len, f);
    }
    return fclose(f) == 0 ? 0 : -1;
}

/* reward: share of even token ids (learnable, cheap) */
static int even_share(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    size_t even = 0;
    for (size_t k = 0; k < req->n_completion_tokens; k++)
        even += req->completion_tokens[k] % 2 == 0;
    res->score = req->n_completion_tokens ? (double)even / (double)req->n_completion_tokens : 0;
    return 0;
}

/* stories260K samples each of these about once in 80 tokens (measured on
 * the bench's prompts): a completion that stops at either has a geometric,
 * long-tailed length (mean about 40 tokens, a few past 150). The model's
 * own EOS alone nearly always runs to the 200-token cap. */
static const int32_t stories260k_stops[2] = {465, 473};

/* completion lengths of the run, for the distribution line */
typedef struct lengths {
    size_t n, cap;
    uint32_t *len;
} lengths;

static int record_lengths(const rlp_batch *b, uint64_t step, void *payload)
{
    (void)step;
    lengths *l = payload;
    size_t n = 0;
    rlp_batch_size(&n, b);
    for (size_t i = 0; i < n && l->n < l->cap; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, b, i) == RLP_OK)
            l->len[l->n++] = (uint32_t)t.n_completion_tokens;
    }
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

typedef struct result {
    double wall, idle, stale_mean;
    size_t n_traj;
    uint64_t tokens, truncated;
} result;

/* One run of @p steps steps; the policy on @p ctx, the rollout side (ASYNC)
 * on a context of its own with @p roll_threads threads. */
static result run(int mode, uint32_t eta, rlp_context *ctx, uint32_t roll_threads, const char *model,
                  const rlp_tokenizer *tok, const int32_t *stop_ids, lengths *lengths, int steps)
{
    rlp_policy *p;
    CHECK(rlp_policy_load(&p, ctx, model, NULL));
    rlp_task *task;
    CHECK(rlp_task_create(&task, "arith", "{\"seed\": 12345, \"chat\": false}"));
    rlp_reward_options rwo = RLP_REWARD_OPTIONS_INIT;
    rwo.n_threads = 1;
    rlp_reward_fn *reward;
    CHECK(rlp_reward_fn_create_callback(&reward, even_share, &rwo, NULL));
    rlp_trainer_options o;
    CHECK(rlp_trainer_options_init(&o, RLP_TRAINER_OPTIONS_VERSION));
    o.mode = mode;
    o.max_staleness = eta;
    o.prompts_per_step = PROMPTS;
    o.seed = 1;
    o.sampling.n = GROUP;
    o.sampling.max_new_tokens = MAX_NEW;
    if (stop_ids) {
        o.sampling.stop_token_ids = stop_ids;
        o.sampling.n_stop_token_ids = 2;
    }
    o.on_batch = record_lengths;
    o.on_batch_payload = lengths;
    o.tokenizer = tok;
    o.max_seq_len = 256;
    o.rollout_threads = mode == RLP_TRAIN_ASYNC ? roll_threads : 0;
    rlp_trainer *t;
    CHECK(rlp_trainer_create(&t, p, task, reward, &o));
    result r = {0};
    double t0 = now(), busy = 0, stale = 0;
    for (int s = 0; s < steps; s++) {
        rlp_step_record rec = {.version = RLP_STEP_RECORD_VERSION};
        CHECK(rlp_trainer_step(t, &rec));
        busy += rec.train_seconds;
        stale += rec.rl.staleness_mean;
        r.n_traj += rec.rl.n_seqs;
        r.tokens += rec.completion_tokens;
        r.truncated += rec.truncated;
    }
    r.wall = now() - t0;
    r.idle = 1.0 - busy / r.wall;
    r.stale_mean = stale / steps;
    rlp_trainer_free(t);
    rlp_reward_fn_free(reward);
    rlp_task_free(task);
    rlp_policy_free(p);
    return r;
}

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv); /* the kernels rlpost runs */
    char path[4096];
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    if (argc > 1)
        snprintf(path, sizeof path, "%s", argv[1]);
    else
        snprintf(path, sizeof path, "%s/../shared/data/llama2c/stories260K.bin", root ? root : ".");
    int steps = argc > 2 ? atoi(argv[2]) : 8;
    if (steps < 1 || steps > 16)
        steps = steps < 1 ? 1 : 16;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    rlp_model_info info = {.version = RLP_MODEL_INFO_VERSION};
    if (rlp_model_inspect(&info, path) != RLP_OK) {
        fprintf(stderr, "bench_async: %s: %s\n", path, rlp_error_last());
        return 77;
    }
    char dir[] = "/tmp/rlpost-bench-async-XXXXXX", tok_path[64];
    if (!mkdtemp(dir))
        return 1;
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", dir);
    if (write_tokenizer(tok_path, info.vocab_size) != 0) {
        fprintf(stderr, "bench_async: cannot write %s\n", tok_path);
        return 1;
    }
    rlp_tokenizer *tok;
    CHECK(rlp_tokenizer_load(&tok, tok_path));
    unlink(tok_path);
    rmdir(dir);

    /* sync: one context with every thread; async: the trainer and the
     * rollout worker get a context each with half the threads, so that
     * they share the cores instead of oversubscribing them */
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx, *ctx_train;
    CHECK(rlp_context_create(&ctx, &co));
    co.n_threads = threads > 1 ? threads / 2 : 1;
    CHECK(rlp_context_create(&ctx_train, &co));
    const uint32_t roll_threads = threads > 1 ? (uint32_t)(threads - threads / 2) : 1;

    printf("%s: %d steps × %d prompts × %d samples, long-tailed lengths (stop tokens, at most %d), "
           "%d threads, through rlp_trainer\n", path, steps, PROMPTS, GROUP, MAX_NEW, threads);
    const int32_t *stops = info.vocab_size == 512 ? stories260k_stops : NULL;
    static uint32_t len_buf[16 * PROMPTS * GROUP];
    lengths lens = {0, sizeof len_buf / sizeof *len_buf, len_buf};
    result s = run(RLP_TRAIN_SYNC, 0, ctx, 0, path, tok, stops, &lens, steps);
    qsort(lens.len, lens.n, sizeof *lens.len, cmp_u32);
    if (lens.n)
        printf("completion lengths: mean %.1f, median %u, p90 %u, max %u tokens; %llu of %zu at the cap\n",
               (double)s.tokens / (double)s.n_traj, lens.len[lens.n / 2], lens.len[lens.n * 9 / 10],
               lens.len[lens.n - 1], (unsigned long long)s.truncated, s.n_traj);
    printf("synchronous:        %6.1f s, %5.2f trajectories/s, trainer idle %4.1f %%\n", s.wall,
           (double)s.n_traj / s.wall, 100 * s.idle);
    const uint32_t etas[] = {1, 4};
    for (int k = 0; k < 2; k++) {
        lengths ignored = {0, 0, NULL};
        result a = run(RLP_TRAIN_ASYNC, etas[k], ctx_train, roll_threads, path, tok, stops, &ignored, steps);
        printf("async push-pull η=%u: %6.1f s, %5.2f trajectories/s, trainer idle %4.1f %%, mean staleness %.2f; "
               "async / sync = %.2fx\n",
               etas[k], a.wall, (double)a.n_traj / a.wall, 100 * a.idle, a.stale_mean,
               ((double)a.n_traj / a.wall) / ((double)s.n_traj / s.wall));
    }
    rlp_tokenizer_free(tok);
    rlp_context_free(ctx_train);
    rlp_context_free(ctx);
    return 0;
}
