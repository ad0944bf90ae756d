/* The RL step of the default main job (configs/default.json: 4 prompts ×
 * 8 samples, SmolLM2-135M, PPO-clip, one epoch of one mini-batch) on a
 * random model of that shape, and what its memory and time depend on:
 *   step     rlp_policy_train_rl on 32 trajectories of a 35-token prompt and
 *            20–64 completion tokens (mean ≈ 44), per micro-batch size, with
 *            π_prox from the training forward and with its own forward pass
 *            (the behaviour before): wall seconds per step (min / median /
 *            max) and CPU seconds (user + system, median), the
 *            configurations timed in turn, round after round, so that other
 *            load slows them alike; and the process's peak RSS over one step
 *            (VmHWM, reset through /proc/self/clear_refs after a warm-up
 *            step that allocates Adam's moments and the activation buffers)
 *   pack     sequence packing: 8 sequences of 16..256 tokens against 8 × 256,
 *            forward (rlp_policy_logprobs) and train step (NLL): the time
 *            ratio next to the token ratio (what a packed batch should cost)
 *            and the batch × longest ratio (what a padded one would)
 * Set OPENBLAS_CORETYPE=SkylakeX (as rlpost does) on AVX-512 machines.
 * "nopeak" skips the peak-RSS steps (timings only).
 * Usage: bench_rl_step [threads] [repeats] [step|pack|all] [smollm2|tiny] [nopeak] */
#include "../../examples/blas_kernels.h"
#include "algo/rl_step.h"
#include "core/rng.h"
#include "model/policy.h"
#include "../unit/shape_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* VmHWM or VmRSS of this process, MiB; -1 when /proc is not there */
static double proc_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl))
            v = atof(line + kl) / 1024.0;
    if (f)
        fclose(f);
    return v;
}

static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, rlp_error_last());
    return 1;
}

/* 4 prompts × 8 samples as the main job draws them */
static rlp_batch *main_job_batch(int32_t vocab, rlpi_rng *rng, size_t *tokens)
{
    rlp_batch *b;
    if (rlp_batch_create(&b))
        return NULL;
    int32_t prompt[35], comp[64];
    float lp[64];
    *tokens = 0;
    for (int g = 0; g < 4; g++) {
        for (int t = 0; t < 35; t++)
            prompt[t] = (int32_t)rlpi_rng_below(rng, (uint64_t)vocab);
        for (int s = 0; s < 8; s++) {
            size_t n = 20 + (size_t)rlpi_rng_below(rng, 45);
            for (size_t t = 0; t < n; t++) {
                comp[t] = (int32_t)rlpi_rng_below(rng, (uint64_t)vocab);
                lp[t] = -1.0f;
            }
            rlp_trajectory tr = {.version = RLP_TRAJECTORY_VERSION, .group_id = (uint64_t)g, .prompt_tokens = prompt,
                                 .n_prompt_tokens = 35, .completion_tokens = comp, .n_completion_tokens = n,
                                 .logprobs = lp, .temperature = 1.0f, .reward = NAN, .valid = 1,
                                 .sample_index = (uint32_t)s};
            if (rlp_batch_append(b, &tr) || rlp_batch_set_reward(b, (size_t)(g * 8 + s), (float)(rlpi_rng_below(rng, 2)))) {
                rlp_batch_free(b);
                return NULL;
            }
            *tokens += 35 + n;
        }
    }
    return b;
}

/* user + system CPU seconds of the whole process (every thread) */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int bench_step(rlp_policy *p, int32_t vocab, int reps, int peak_pass, rlpi_rng *rng)
{
    size_t tokens;
    rlp_batch *b = main_job_batch(vocab, rng, &tokens);
    if (!b)
        return die("batch");
    printf("\nRL step of the default main job: 32 trajectories, %zu tokens (prompt 35 + 20..64 completion)\n", tokens);
    /* smallest memory first: each configuration then grows the buffers */
    struct {
        const char *name;
        int force;
        uint32_t micro;
        double peak, *t, *cpu;
    } cfg[] = {
        {"reuse pi_prox, micro 256", 0, 256, 0, NULL, NULL},   {"reuse pi_prox, micro 1024", 0, 1024, 0, NULL, NULL},
        {"reuse pi_prox, micro 0 (all)", 0, 0, 0, NULL, NULL},
        {"own pi_prox pass, micro 0 (before)", 1, 0, 0, NULL, NULL},
    };
    enum { NC = sizeof cfg / sizeof *cfg };
    rlp_rl_stats st;
    /* peak RSS of each: a warm-up step (buffers, Adam's moments), then one
     * measured step after the high-water mark is reset */
    for (size_t c = 0; c < NC; c++) {
        rlp_rl_options o = RLP_RL_OPTIONS_INIT;
        o.micro_batch_tokens = cfg[c].micro;
        rlpi_rl_force_prox_forward(cfg[c].force);
        if (peak_pass || c == 0) /* c == 0: Adam's moments before any timing */
            if (rlp_policy_train_rl(p, b, NULL, &o, &st))
                return die("train");
        reset_peak();
        if (peak_pass && rlp_policy_train_rl(p, b, NULL, &o, &st))
            return die("train");
        cfg[c].peak = peak_pass ? proc_mib("VmHWM:") : NAN;
        cfg[c].t = malloc((size_t)reps * sizeof(double));
        cfg[c].cpu = malloc((size_t)reps * sizeof(double));
    }
    /* times: the configurations in turn, `reps` rounds, so that a busy
     * neighbour slows them alike; wall and CPU (user + system, all threads)
     * seconds. The order keeps each one's buffers as in a run of its own:
     * "before" follows a smaller configuration (its π_prox pass shrinks the
     * buffers and its training forward regrows them, as at every step of
     * a run), "reuse, all" follows "before" (its buffers are already the
     * training size, as in a run) */
    static const size_t order[] = {0, 1, 3, 2};
    for (int r = 0; r < reps; r++)
        for (size_t oi = 0; oi < NC; oi++) {
            size_t c = order[oi];
            rlp_rl_options o = RLP_RL_OPTIONS_INIT;
            o.micro_batch_tokens = cfg[c].micro;
            rlpi_rl_force_prox_forward(cfg[c].force);
            double t0 = now(), c0 = cpu_s();
            if (rlp_policy_train_rl(p, b, NULL, &o, &st))
                return die("train");
            cfg[c].t[r] = now() - t0;
            cfg[c].cpu[r] = cpu_s() - c0;
        }
    double base = 0, base_cpu = 0;
    for (size_t c = 0; c < NC; c++) {
        qsort(cfg[c].t, (size_t)reps, sizeof(double), cmp_d);
        qsort(cfg[c].cpu, (size_t)reps, sizeof(double), cmp_d);
        if (cfg[c].force) {
            base = cfg[c].t[reps / 2];
            base_cpu = cfg[c].cpu[reps / 2];
        }
    }
    printf("%-36s %7s %7s %7s %8s %8s %8s %9s\n", "configuration", "min s", "median", "max", "/ before", "CPU s",
           "/ before", "peak MiB");
    for (size_t c = 0; c < NC; c++) {
        printf("%-36s %7.2f %7.2f %7.2f %8.3f %8.2f %8.3f %9.0f\n", cfg[c].name, cfg[c].t[0], cfg[c].t[reps / 2],
               cfg[c].t[reps - 1], cfg[c].t[reps / 2] / base, cfg[c].cpu[reps / 2], cfg[c].cpu[reps / 2] / base_cpu,
               cfg[c].peak);
        free(cfg[c].t);
        free(cfg[c].cpu);
    }
    rlpi_rl_force_prox_forward(0);
    rlp_batch_free(b);
    return 0;
}

/* seconds of `reps` forward passes and train steps over seqs */
static int pack_time(rlp_policy *p, const rlp_sequence *s, size_t n, int reps, double *fwd, double *train)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += s[i].n_tokens;
    float *lp = malloc(cap * sizeof *lp);
    double *tf = malloc((size_t)reps * sizeof *tf), *tt = malloc((size_t)reps * sizeof *tt);
    rlp_train_options to = RLP_TRAIN_OPTIONS_INIT;
    for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
        double t0 = now();
        if (rlp_policy_logprobs(p, s, n, 1.0f, lp, NULL, cap, NULL))
            return die("logprobs");
        double t1 = now();
        if (rlp_policy_train_step(p, s, n, rlp_loss_nll, NULL, &to, NULL))
            return die("train step");
        if (r > 0) {
            tf[r - 1] = t1 - t0;
            tt[r - 1] = now() - t1;
        }
    }
    qsort(tf, (size_t)reps, sizeof *tf, cmp_d);
    qsort(tt, (size_t)reps, sizeof *tt, cmp_d);
    *fwd = tf[reps / 2];
    *train = tt[reps / 2];
    free(lp), free(tf), free(tt);
    return 0;
}

static int bench_pack(rlp_policy *p, int32_t vocab, int reps, rlpi_rng *rng)
{
    enum { N = 8, LMAX = 256 };
    int32_t *ids = malloc((size_t)N * LMAX * sizeof *ids);
    for (size_t i = 0; i < (size_t)N * LMAX; i++)
        ids[i] = (int32_t)rlpi_rng_below(rng, (uint64_t)vocab);
    rlp_sequence tail[N], full[N];
    double tok_tail = 0, sq_tail = 0;
    for (int i = 0; i < N; i++) {
        uint32_t len = (uint32_t)(16 + (LMAX - 16) * i / (N - 1)); /* 16, 50, ..., 256 */
        tail[i] = (rlp_sequence){ids + i * LMAX, len, 8};
        full[i] = (rlp_sequence){ids + i * LMAX, LMAX, 8};
        tok_tail += len;
        sq_tail += (double)len * len;
    }
    printf("\nsequence packing: 8 sequences of 16..256 tokens (%.0f) against 8 x 256 (%d), median of %d\n", tok_tail,
           N * LMAX, reps);
    double ft, tt, ff, tf;
    if (pack_time(p, tail, N, reps, &ft, &tt) || pack_time(p, full, N, reps, &ff, &tf))
        return 1;
    printf("%-12s %10s %10s %8s\n", "", "16..256", "8 x 256", "ratio");
    printf("%-12s %10.3f %10.3f %8.3f\n", "forward s", ft, ff, ft / ff);
    printf("%-12s %10.3f %10.3f %8.3f\n", "train s", tt, tf, tt / tf);
    printf("tokens ratio %.3f (a packed batch), attention pairs ratio %.3f, padded to the longest 1.000\n",
           tok_tail / (N * LMAX), sq_tail / ((double)N * LMAX * LMAX));
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv); /* the kernels rlpost runs */
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 3;
    const char *what = argc > 3 ? argv[3] : "all", *shape = argc > 4 ? argv[4] : "smollm2";
    int peak_pass = !(argc > 5 && !strcmp(argv[5], "nopeak"));
    rlpi_model_config cfg;
    if (reps < 1 || shape_config(shape, &cfg) || (strcmp(what, "step") && strcmp(what, "pack") && strcmp(what, "all"))) {
        fprintf(stderr, "usage: bench_rl_step [threads] [repeats] [step|pack|all] [smollm2|tiny] [nopeak]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they come when redirected */
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx;
    if (rlp_context_create(&ctx, &co))
        return die("context");
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    rlpi_weights w;
    rlp_policy *p;
    if (shape_random_weights(&cfg, &rng, &w) || rlpi_policy_create(&p, ctx, &cfg, &w, NULL))
        return die("model");
    rlpi_weights_free(&w);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 1e-7f; /* speed does not depend on the values; keep them sane */
    rlp_policy_set_optimizer(p, &oo);
    printf("%s shape, %d threads, RSS after load %.0f MiB\n", shape, threads, proc_mib("VmRSS:"));
    int rc = 0;
    if (!strcmp(what, "step") || !strcmp(what, "all"))
        rc = bench_step(p, cfg.vocab_size, reps, peak_pass, &rng);
    if (!rc && (!strcmp(what, "pack") || !strcmp(what, "all")))
        rc = bench_pack(p, cfg.vocab_size, reps, &rng);
    rlp_policy_free(p);
    rlp_context_free(ctx);
    return rc;
}
