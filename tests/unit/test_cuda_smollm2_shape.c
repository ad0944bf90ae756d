/* A full train step of the SmolLM2-135M shape (random weights: the model
 * file is not on GPU machines, and numerics do not depend on trained
 * values) on CUDA against the CPU backend: logprobs before the step, the
 * loss and gradient norm of two AdamW steps, logprobs after them, and
 * greedy generation, in fp32. 4 sequences of 160 tokens (32 prompt).
 * The gpu suite; skips (77) without a GPU. */
#include <string.h>
#include "model/policy.h"
#include "shape_models.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define DIE(...)                                                \
    do {                                                        \
        printf("FAIL: " __VA_ARGS__);                           \
        printf(" (%s)\n", rlp_error_last());                    \
        exit(1);                                                \
    } while (0)

enum { N_SEQ = 4, LEN = 160, PROMPT = 32 };

static rlp_policy *make(int cuda, const rlpi_model_config *cfg, rlp_context **ctx)
{
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.backend = cuda ? RLP_BACKEND_CUDA : RLP_BACKEND_CPU;
    long t = sysconf(_SC_NPROCESSORS_ONLN);
    co.n_threads = (int32_t)(t > 0 ? t : 1);
    if (rlp_context_create(ctx, &co))
        DIE("context");
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    rlpi_weights w;
    if (shape_random_weights(cfg, &rng, &w))
        DIE("weights");
    rlp_policy *p;
    if (rlpi_policy_create(&p, *ctx, cfg, &w, NULL))
        DIE("policy");
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 1e-4f;
    if (rlp_policy_set_optimizer(p, &oo))
        DIE("optimizer");
    return p;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double m = 0, rms = 0;
    for (size_t i = 0; i < n; i++)
        rms += (double)b[i] * b[i];
    rms = sqrt(rms / (double)n);
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + rms));
    return m;
}

int main(void)
{
    if (rlp_backend_available(RLP_BACKEND_CUDA) != 1) {
        printf("skipped: no usable GPU: %s\n", rlp_error_last());
        return 77;
    }
    /* RLPOST_TEST_SHAPE=tiny checks this program itself on the kernel emulator */
    const char *shape = getenv("RLPOST_TEST_SHAPE");
    rlpi_model_config cfg;
    if (shape_config(shape && *shape ? shape : "smollm2", &cfg))
        DIE("unknown RLPOST_TEST_SHAPE");
    rlp_context *ctx[2];
    rlp_policy *p[2] = {make(0, &cfg, &ctx[0]), make(1, &cfg, &ctx[1])};
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 11, 0);
    static int32_t tok[N_SEQ * LEN];
    for (int i = 0; i < N_SEQ * LEN; i++)
        tok[i] = (int32_t)rlpi_rng_below(&rng, (uint64_t)cfg.vocab_size);
    rlp_sequence seqs[N_SEQ];
    for (int s = 0; s < N_SEQ; s++)
        seqs[s] = (rlp_sequence){tok + s * LEN, LEN, PROMPT};
    size_t n = (size_t)N_SEQ * (LEN - PROMPT);
    float *lp[2] = {malloc(n * 4), malloc(n * 4)};
    int fails = 0;
    for (int phase = 0; phase < 2; phase++) {
        for (int b = 0; b < 2; b++)
            if (rlp_policy_logprobs(p[b], seqs, N_SEQ, 1.0f, lp[b], NULL, n, NULL))
                DIE("logprobs");
        double d = max_rel(lp[1], lp[0], n);
        printf("%s logprobs %s: max |Δ| / (|cpu| + rms) = %.3g (tolerance 1e-4)\n", d <= 1e-4 ? "ok  " : "FAIL",
               phase ? "after 2 steps" : "before", d);
        fails += d > 1e-4;
        if (phase)
            break;
        for (int step = 0; step < 2; step++) {
            rlp_train_stats st[2];
            for (int b = 0; b < 2; b++)
                if (rlp_policy_train_step(p[b], seqs, N_SEQ, rlp_loss_nll, NULL, NULL, &st[b]))
                    DIE("train step");
            double dl = fabs(st[1].loss - st[0].loss) / fabs(st[0].loss);
            double dg = fabs(st[1].grad_norm - st[0].grad_norm) / st[0].grad_norm;
            int ok = dl <= 1e-5 && dg <= 1e-4;
            printf("%s step %d: loss %.9g vs %.9g (rel %.2g, tolerance 1e-5), grad norm %.9g vs %.9g (rel %.2g, "
                   "tolerance 1e-4); CUDA %.2f s, CPU %.2f s\n", ok ? "ok  " : "FAIL", step + 1, st[1].loss,
                   st[0].loss, dl, st[1].grad_norm, st[0].grad_norm, dg, st[1].seconds, st[0].seconds);
            fails += !ok;
        }
    }
    /* greedy: 16 tokens from the first prompt on both */
    int32_t out[2][16];
    for (int b = 0; b < 2; b++) {
        rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
        ro.max_batch = 1;
        ro.max_seq_len = 64;
        ro.share_weights = 1;
        rlp_rollout_engine *e;
        if (rlp_rollout_engine_create(&e, p[b], &ro))
            DIE("engine");
        rlp_prompt pr = {.tokens = tok, .n_tokens = PROMPT};
        rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
        so.temperature = 0;
        so.max_new_tokens = 16;
        so.ignore_eos = 1;
        rlp_batch *bt;
        if (rlp_rollout_generate(&bt, e, &pr, 1, &so, NULL, NULL))
            DIE("generate");
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, bt, 0);
        for (int i = 0; i < 16; i++)
            out[b][i] = i < (int)t.n_completion_tokens ? t.completion_tokens[i] : -1;
        rlp_batch_free(bt);
        rlp_rollout_engine_free(e);
    }
    int same = !memcmp(out[0], out[1], sizeof out[0]);
    printf("%s greedy 16 tokens %s\n", same ? "ok  " : "FAIL", same ? "identical" : "differ");
    fails += !same;
    for (int b = 0; b < 2; b++) {
        rlp_policy_free(p[b]);
        rlp_context_free(ctx[b]);
        free(lp[b]);
    }
    return fails ? 1 : 0;
}
