/* Fused against separate projection GEMMs in the training passes: the
 * forward (logprobs) and the train step of a random SmolLM2-135M-shaped
 * policy (30 layers, d 576, 9/3 heads, ffn 1536, vocabulary 49,152) over
 * n_seq × 256 tokens, with Q/K/V as one GEMM and gate/up as one GEMM
 * (the default) and with one GEMM per projection
 * (rlpi_transformer_set_fused_projections), alternating the two in the same
 * process so that both see the same machine load. Prints every pair, the
 * ratio separate / fused (> 1: fused is faster) as min / median / max of
 * the wall times and of the process's CPU times (robust to other load), and
 * the GEMM calls per forward and per train step in each mode (counted by
 * wrapping the backend's gemm slot) and the share of the fused runs spent
 * in the strided copies that split Q/K/V and gather their gradients.
 * With "gemm" first it times only the projection GEMMs of one layer,
 * forward and backward, as the training passes issue them (SmolLM2 shapes,
 * n tokens), separate against fused, on the CPU backend:
 * Usage: bench_fused [threads] [pairs] [n_seq]
 *        bench_fused gemm [threads] [reps] [n_tokens] */
#include "core/error.h"
#include "core/rng.h"
#include "model/policy.h"
#include "../unit/shape_models.h"

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

/* CPU seconds of this process (all threads): on a shared machine a
 * preempted thread stretches the wall time but not this */
static double cpu_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

static int (*real_gemm)(rlpi_backend *be, const rlpi_gemm *g);
static long n_gemm;

static int counting_gemm(rlpi_backend *be, const rlpi_gemm *g)
{
    n_gemm++;
    return real_gemm(be, g);
}

/* time in the strided block copies that split the fused Q/K/V product */
static int (*real_copy_2d)(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, size_t dst_pitch,
                           const rlpi_buffer *src, size_t src_off, size_t src_pitch, size_t width, size_t rows);
static double copy_seconds;

static int timed_copy_2d(rlpi_backend *be, rlpi_buffer *dst, size_t dst_off, size_t dst_pitch, const rlpi_buffer *src,
                         size_t src_off, size_t src_pitch, size_t width, size_t rows)
{
    double t0 = now();
    int rc = real_copy_2d(be, dst, dst_off, dst_pitch, src, src_off, src_pitch, width, rows);
    copy_seconds += now() - t0;
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void summary(const char *what, double *r, int n)
{
    qsort(r, (size_t)n, sizeof *r, cmp_double);
    printf("  %s separate / fused: min %.3f  median %.3f  max %.3f  (%d pairs)\n", what, r[0],
           n % 2 ? r[n / 2] : 0.5 * (r[n / 2 - 1] + r[n / 2]), r[n - 1], n);
}

/* ---- GEMM level: one layer's projection products, as transformer.c issues them */
static rlpi_backend *gbe;
static rlpi_buffer *ga, *gb, *gc;

static void mm(int ta, int tb, int64_t m, int64_t n, int64_t k, float beta)
{
    rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1, .beta = beta, .batch = 1,
                   .a = {ga, 0, ta ? m : k, 0}, .b = {gb, 0, tb ? k : n, 0}, .c = {gc, 0, n, 0}};
    if (rlpi_gemm_f32(gbe, &g) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        exit(1);
    }
}

/* fused: bit 0 = Q/K/V as one product, bit 1 = gate/up as one (transposed) */
static void layer_gemms(int fused, int64_t N, int64_t d, int64_t q, int64_t kv, int64_t F)
{
    int64_t D = q + 2 * kv;
    if (fused & 1) {
        mm(0, 1, N, D, d, 0); /* Q|K|V */
    } else {
        mm(0, 1, N, q, d, 0), mm(0, 1, N, kv, d, 0), mm(0, 1, N, kv, d, 0);
    }
    if (fused & 2) {
        mm(0, 1, 2 * F, N, d, 0), mm(1, 1, N, d, F, 1);     /* [gate; up]ᵀ, down from actᵀ */
        mm(1, 1, F, N, d, 0), mm(1, 1, d, F, N, 1);         /* dactᵀ, dWd */
        mm(1, 0, N, d, 2 * F, 0), mm(0, 0, 2 * F, d, N, 1); /* dxn, dW_gu */
    } else {
        mm(0, 1, N, F, d, 0), mm(0, 1, N, F, d, 0), mm(0, 1, N, d, F, 1); /* gate, up, down */
        mm(0, 0, N, F, d, 0), mm(1, 0, d, F, N, 1);                       /* dact, dWd */
        mm(0, 0, N, d, F, 0), mm(0, 0, N, d, F, 1), mm(1, 0, F, d, N, 1), mm(1, 0, F, d, N, 1);
    }
    if (fused & 1) {
        mm(0, 0, N, d, D, 0), mm(1, 0, D, d, N, 1); /* dxn, dW_qkv */
    } else {
        mm(0, 0, N, d, q, 0), mm(0, 0, N, d, kv, 1), mm(0, 0, N, d, kv, 1);
        mm(1, 0, q, d, N, 1), mm(1, 0, kv, d, N, 1), mm(1, 0, kv, d, N, 1);
    }
}

static int gemm_level(int threads, int reps, int64_t N)
{
    const int64_t d = 576, q = 576, kv = 192, F = 1536;
    size_t big = (size_t)(N > d ? N : d) * 2 * F;
    /* through a context, which sets OpenBLAS single-threaded as the library runs it */
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx;
    if (rlp_context_create(&ctx, &co) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    gbe = ctx->backend;
    if (rlpi_buffer_alloc(gbe, big * 4, &ga) ||
        rlpi_buffer_alloc(gbe, big * 4, &gb) || rlpi_buffer_alloc(gbe, big * 4, &gc) ||
        rlpi_buffer_fill_f32(ga, 0, big, 0.01f) || rlpi_buffer_fill_f32(gb, 0, big, 0.02f) ||
        rlpi_buffer_fill_f32(gc, 0, big, 0.0f)) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    for (int f = 0; f < 4; f++)
        layer_gemms(f, N, d, q, kv, F);
    /* rounds of all four variants in rotating order; ratios against the separate one of the same round */
    double *r[2][4], sum[4] = {0, 0, 0, 0};
    for (int m = 0; m < 2; m++)
        for (int f = 0; f < 4; f++)
            r[m][f] = malloc((size_t)reps * sizeof(double));
    for (int i = 0; i < reps; i++) {
        double c[4], w[4];
        for (int k = 0; k < 4; k++) {
            int f = (i + k) % 4;
            double c0 = cpu_now(), w0 = now();
            layer_gemms(f, N, d, q, kv, F);
            c[f] = cpu_now() - c0;
            w[f] = now() - w0;
            sum[f] += c[f];
        }
        for (int f = 0; f < 4; f++) {
            r[0][f][i] = w[0] / w[f];
            r[1][f][i] = c[0] / c[f];
        }
    }
    printf("one SmolLM2 layer's projection GEMMs, forward + backward, %lld tokens, %d threads; CPU s per round: "
           "separate %.4f (18 GEMMs), Q/K/V fused %.4f (14), gate/up fused %.4f (13), both %.4f (9)\n",
           (long long)N, threads, sum[0] / reps, sum[1] / reps, sum[2] / reps, sum[3] / reps);
    const char *names[4] = {"", "Q/K/V fused,  ", "gate/up fused,", "both fused,   "};
    for (int f = 1; f < 4; f++) {
        char what[96];
        snprintf(what, sizeof what, "%s wall time:", names[f]);
        summary(what, r[0][f], reps);
        snprintf(what, sizeof what, "%s CPU time: ", names[f]);
        summary(what, r[1][f], reps);
    }
    for (int m = 0; m < 2; m++)
        for (int f = 0; f < 4; f++)
            free(r[m][f]);
    rlpi_buffer_free(ga);
    rlpi_buffer_free(gb);
    rlpi_buffer_free(gc);
    rlp_context_free(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "gemm"))
        return gemm_level(argc > 2 ? atoi(argv[2]) : 2, argc > 3 ? atoi(argv[3]) : 10,
                          argc > 4 ? atoll(argv[4]) : 2048);
    int threads = argc > 1 ? atoi(argv[1]) : 2, pairs = argc > 2 ? atoi(argv[2]) : 3;
    int n_seq = argc > 3 ? atoi(argv[3]) : 8;
    const int seq_len = 256, n_prompt = 64;
    if (threads < 1 || pairs < 1 || n_seq < 1 || n_seq > 8) {
        fprintf(stderr, "usage: bench_fused [threads] [pairs] [n_seq 1..8]\n");
        return 2;
    }
    rlpi_model_config cfg;
    shape_config("smollm2", &cfg);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx;
    rlpi_weights w;
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    rlp_policy *p;
    if (rlp_context_create(&ctx, &co) != RLP_OK || shape_random_weights(&cfg, &rng, &w) != RLP_OK ||
        rlpi_policy_create(&p, ctx, &cfg, &w, NULL) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    rlpi_weights_free(&w);
    int32_t *tok = malloc((size_t)n_seq * seq_len * sizeof *tok);
    float *lp = malloc((size_t)n_seq * seq_len * sizeof *lp);
    rlp_sequence seqs[8];
    for (int i = 0; i < n_seq * seq_len; i++)
        tok[i] = (int32_t)rlpi_rng_below(&rng, (uint64_t)cfg.vocab_size);
    for (int s = 0; s < n_seq; s++)
        seqs[s] = (rlp_sequence){tok + s * seq_len, (uint32_t)seq_len, (uint32_t)n_prompt};
    size_t T = (size_t)n_seq * seq_len, n;
    rlp_train_stats st;

    /* GEMM calls per pass in each mode (and a warm-up of both) */
    rlpi_backend *be = ctx->backend;
    rlpi_backend_ops counting = *be->ops;
    const rlpi_backend_ops *saved = be->ops;
    real_gemm = saved->gemm_f32;
    counting.gemm_f32 = counting_gemm;
    real_copy_2d = saved->buffer_copy_2d;
    if (real_copy_2d)
        counting.buffer_copy_2d = timed_copy_2d;
    be->ops = &counting; /* kept for the timed runs: a counter and a clock read per call cost nothing here */
    long calls[2][2];
    for (int mode = 0; mode < 2; mode++) {
        rlpi_transformer_set_fused_projections(p->tf, mode == 0, mode == 0);
        n_gemm = 0;
        int rc = rlp_policy_logprobs(p, seqs, (size_t)n_seq, 1.0f, lp, NULL, T, &n);
        calls[mode][0] = n_gemm;
        n_gemm = 0;
        if (!rc)
            rc = rlp_policy_train_step(p, seqs, (size_t)n_seq, rlp_loss_nll, NULL, NULL, &st);
        calls[mode][1] = n_gemm;
        if (rc) {
            fprintf(stderr, "%s\n", rlp_error_last());
            return 1;
        }
    }
    printf("SmolLM2-135M shape, %d x %d tokens, %d threads\n", n_seq, seq_len, threads);
    printf("GEMM calls: forward %ld fused, %ld separate; train step %ld fused, %ld separate "
           "(%d layers: %.0f fewer per layer in the forward, %.0f in the train step)\n",
           calls[0][0], calls[1][0], calls[0][1], calls[1][1], cfg.n_layers,
           (double)(calls[1][0] - calls[0][0]) / cfg.n_layers, (double)(calls[1][1] - calls[0][1]) / cfg.n_layers);

    double *rf = malloc((size_t)pairs * sizeof *rf), *rt = malloc((size_t)pairs * sizeof *rt), fused_total = 0;
    double *cf = malloc((size_t)pairs * sizeof *cf), *ct = malloc((size_t)pairs * sizeof *ct);
    copy_seconds = 0;
    for (int r = 0; r < pairs; r++) {
        double t[2][2], c[2][2];
        for (int k = 0; k < 2; k++) {
            int mode = (r + k) % 2; /* alternate which goes first */
            rlpi_transformer_set_fused_projections(p->tf, mode == 0, mode == 0);
            double t0 = now(), c0 = cpu_now();
            rlp_policy_logprobs(p, seqs, (size_t)n_seq, 1.0f, lp, NULL, T, &n);
            double t1 = now(), c1 = cpu_now();
            if (rlp_policy_train_step(p, seqs, (size_t)n_seq, rlp_loss_nll, NULL, NULL, &st) != RLP_OK) {
                fprintf(stderr, "%s\n", rlp_error_last());
                return 1;
            }
            t[mode][0] = t1 - t0;
            t[mode][1] = now() - t1;
            c[mode][0] = c1 - c0;
            c[mode][1] = cpu_now() - c1;
            if (mode == 0)
                fused_total += now() - t0;
        }
        rf[r] = t[1][0] / t[0][0];
        rt[r] = t[1][1] / t[0][1];
        cf[r] = c[1][0] / c[0][0];
        ct[r] = c[1][1] / c[0][1];
        printf("  pair %d: forward fused %.3f s, separate %.3f s (%.3fx; CPU s %.3fx); train step fused %.3f s, "
               "separate %.3f s (%.3fx; CPU s %.3fx)\n", r + 1, t[0][0], t[1][0], rf[r], cf[r], t[0][1], t[1][1], rt[r],
               ct[r]);
        fflush(stdout);
    }
    summary("forward,    wall time:", rf, pairs);
    summary("train step, wall time:", rt, pairs);
    summary("forward,    CPU time: ", cf, pairs);
    summary("train step, CPU time: ", ct, pairs);
    free(cf);
    free(ct);
    printf("  Q/K/V block copies: %.3f s of the fused runs' %.3f s (%.2f %%)\n", copy_seconds, fused_total,
           100.0 * copy_seconds / fused_total);
    be->ops = saved;
    free(rf);
    free(rt);
    free(tok);
    free(lp);
    rlp_policy_free(p);
    rlp_context_free(ctx);
    return 0;
}
