/* Train-step and forward-only throughput of the policy on a random model
 * (speed does not depend on the weights' values), 8 sequences of 256
 * tokens (64 prompt + 192 completion), on either backend:
 *   smollm2  SmolLM2-135M shape: 30 layers, d 576, 9/3 heads, ffn 1536,
 *            vocabulary 49,152, tied (the default)
 *   1b       Llama-3.2-1B shape: 16 layers, d 2048, 32/8 heads, ffn 8192,
 *            vocabulary 128,256, tied (1.24 B parameters; 20 GB of fp32
 *            weights, gradients and moments: a GPU shape)
 *   tiny     2 layers, d 64, 4/2 heads, vocabulary 300: a smoke test of
 *            this program (tests/gpu/run.sh's table code on the kernel
 *            emulator), not a benchmark
 * On the CPU it also runs PyTorch doing the same step on the same thread
 * count in the same run (tests/bench/torch_train_step.py, skipped when
 * PyTorch is absent), and the peak memory of logprobs for 8 x 512 tokens
 * above the weights. Prints achieved GFLOP/s against the fp32 GEMM rate
 * measured now on the same backend; with "decode", also the local rollout
 * engine's decode tokens/s at batch 1 and 64 (sampling runs on the host in
 * this version, so large vocabularies pay a logits download per step).
 * The last line, "RESULT key=value ...", is for tests/gpu/run.sh.
 * Environment (read by this benchmark only): RLPOST_MATMUL=fp32|tf32|bf16
 * sets the context's matmul_precision (default fp32; the GEMM rate is then
 * measured in that precision too). With bf16 on the CPU the same model is
 * then also run in fp32 in the same process (same weights, same batch; the
 * two policies' calls interleaved one by one, so that a loaded machine
 * slows both alike), and the bf16/fp32 speed ratios are printed with the
 * differences bf16 makes: the largest |Δ logprob| of the first forward, the
 * relative |Δ loss| and |Δ grad norm| of the first train step (same
 * weights), and the relative |Δ loss| after the timed steps (the weights
 * have drifted apart by then; RLPOST_BENCH_TWIN=0 skips the twin, e.g. to
 * profile the bf16 step alone). RLPOST_BENCH_TORCH=0 skips the PyTorch
 * baseline. RLPOST_PEAK_TFLOPS gives the GPU's
 * dense bf16 peak for the MFU figure (model FLOPs per second / peak), which
 * otherwise is known only for H100/H200 SXM (989 TF/s) and A100 (312).
 * Usage: bench_train [threads] [repeats] [cpu|cuda] [smollm2|1b|tiny] [decode] */
#include "../../examples/blas_kernels.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/policy.h"
#include "decode_rate.h"
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

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static double gemm_rate(rlp_context *ctx, int64_t n)
{
    rlpi_backend *be = ctx->backend;
    rlpi_buffer *a, *b, *c;
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &a);
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &b);
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &c);
    rlpi_buffer_fill_f32(a, 0, (size_t)(n * n), 0.5f);
    rlpi_buffer_fill_f32(b, 0, (size_t)(n * n), 0.25f);
    rlpi_gemm g = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .batch = 1, .a = {a, 0, n, 0}, .b = {b, 0, n, 0}, .c = {c, 0, n, 0}};
    rlpi_gemm_f32(be, &g);
    rlpi_backend_synchronize(be); /* a GPU runs the products asynchronously */
    int reps = 0;
    double t0 = now();
    while (now() - t0 < 1.0) {
        rlpi_gemm_f32(be, &g);
        if (++reps % 8 == 0)
            rlpi_backend_synchronize(be);
    }
    rlpi_backend_synchronize(be);
    double rate = 2.0 * (double)n * n * n * reps / (now() - t0) / 1e9;
    rlpi_buffer_free(a);
    rlpi_buffer_free(b);
    rlpi_buffer_free(c);
    return rate;
}

/* Decode tokens/s of the local rollout engine at `batch` sequences of 16
 * random prompt tokens, each its own group (every row prefilled). */
static double decode_rate(rlp_policy *p, uint32_t batch, uint32_t new_tokens, int32_t vocab, rlpi_rng *rng)
{
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_batch = batch;
    o.max_seq_len = 16 + new_tokens;
    o.share_weights = 1;
    int32_t *ids = malloc((size_t)batch * 16 * sizeof *ids);
    if (!ids)
        return 0;
    for (uint32_t i = 0; i < batch * 16; i++)
        ids[i] = (int32_t)rlpi_rng_below(rng, (uint64_t)vocab);
    double rate = bench_decode_rate(p, &o, ids, 16, 16, batch, new_tokens, NULL);
    free(ids);
    return rate;
}

/* The timed part: a warm-up forward (its logprobs into lp0, *n_lp of them)
 * and `reps` timed ones, a warm-up train step (its stats into st0) and
 * `reps` timed ones (the last one's stats into st1); seconds per call.
 * With a second policy q (the fp32 twin of a bf16 run), q's calls are
 * interleaved with p's one by one, so that both see the same machine load;
 * q's results go to the *_q outputs. */
typedef struct timed {
    float *lp0;
    size_t n_lp;
    rlp_train_stats st0, st1;
    double fwd, train;
} timed;

static int measure(rlp_context *ctx, rlp_policy *p, timed *tp, rlp_policy *q, timed *tq, rlp_sequence *seqs,
                   int n_seq, int64_t T, int reps)
{
    rlp_policy *pol[2] = {p, q};
    timed *out[2] = {tp, tq};
    int np = q ? 2 : 1;
    float *lp = malloc((size_t)T * sizeof *lp);
    size_t n;
    for (int j = 0; j < np; j++) {
        if (rlp_policy_logprobs(pol[j], seqs, n_seq, 1.0f, out[j]->lp0, NULL, (size_t)T, &out[j]->n_lp) != RLP_OK) {
            fprintf(stderr, "logprobs: %s\n", rlp_error_last()); /* warm-up */
            return 1;
        }
        out[j]->fwd = out[j]->train = 0;
    }
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < np; j++) {
            double t0 = now();
            rlp_policy_logprobs(pol[j], seqs, n_seq, 1.0f, lp, NULL, (size_t)T, &n);
            out[j]->fwd += (now() - t0) / reps;
        }
    free(lp);
    for (int j = 0; j < np; j++) {
        if (rlp_policy_train_step(pol[j], seqs, n_seq, rlp_loss_nll, NULL, NULL, &out[j]->st0) != RLP_OK) {
            fprintf(stderr, "train step: %s\n", rlp_error_last()); /* warm-up (allocates moments) */
            return 1;
        }
        out[j]->st1 = out[j]->st0;
    }
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < np; j++) {
            double t0 = now();
            if (rlp_policy_train_step(pol[j], seqs, n_seq, rlp_loss_nll, NULL, NULL, &out[j]->st1) != RLP_OK)
                fprintf(stderr, "%s\n", rlp_error_last());
            rlpi_backend_synchronize(ctx->backend); /* the last step's update may still run on a GPU */
            out[j]->train += (now() - t0) / reps;
        }
    return 0;
}

/* What bf16 changes against its fp32 twin (see the top). */
static void bf16_report(const timed *b, const timed *f, int reps)
{
    double dlp = 0;
    size_t n = b->n_lp < f->n_lp ? b->n_lp : f->n_lp;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)f->lp0[i] - (double)b->lp0[i]);
        dlp = d > dlp ? d : dlp;
    }
    double dl0 = fabs(b->st0.loss - f->st0.loss) / fabs(f->st0.loss);
    double dg0 = fabs(b->st0.grad_norm - f->st0.grad_norm) / f->st0.grad_norm;
    double dl1 = fabs(b->st1.loss - f->st1.loss) / fabs(f->st1.loss);
    printf("  fp32 twin, interleaved:       forward %7.3f s, train step %7.3f s\n", f->fwd, f->train);
    printf("  bf16 / fp32 speed: forward %.2fx, train step %.2fx\n", f->fwd / b->fwd, f->train / b->train);
    printf("  bf16 - fp32 (same weights): logprobs max |diff| %.2e nats over %zu tokens; first step loss %.6g vs "
           "%.6g (rel. diff %.2e), grad norm rel. diff %.2e; after %d more steps loss rel. diff %.2e\n",
           dlp, n, b->st0.loss, f->st0.loss, dl0, dg0, reps, dl1);
    printf("RESULT_BF16 fwd_ratio=%.3f train_ratio=%.3f dlogp_max=%.3e dloss0_rel=%.3e dgnorm0_rel=%.3e\n",
           f->fwd / b->fwd, f->train / b->train, dlp, dl0, dg0);
}

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv); /* the kernels rlpost runs */
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 2;
    const char *backend = argc > 3 ? argv[3] : "cpu", *shape = argc > 4 ? argv[4] : "smollm2";
    int decode = argc > 5 && !strcmp(argv[5], "decode");
    int cuda = !strcmp(backend, "cuda");
    if ((!cuda && strcmp(backend, "cpu")) || (strcmp(shape, "smollm2") && strcmp(shape, "1b") && strcmp(shape, "tiny"))) {
        fprintf(stderr, "usage: bench_train [threads] [repeats] [cpu|cuda] [smollm2|1b|tiny] [decode]\n");
        return 2;
    }
    const int n_seq = 8, seq_len = 256, n_prompt = 64;
    rlpi_model_config cfg;
    shape_config(shape, &cfg);
    const char *matmul = getenv("RLPOST_MATMUL") ? getenv("RLPOST_MATMUL") : "fp32";
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    if (!strcmp(matmul, "bf16"))
        co.matmul_precision = RLP_MATMUL_BF16;
    else if (!strcmp(matmul, "tf32"))
        co.matmul_precision = RLP_MATMUL_TF32;
    else if (strcmp(matmul, "fp32")) {
        fprintf(stderr, "RLPOST_MATMUL=%s: expected fp32, tf32 or bf16\n", matmul);
        return 2;
    }
    if (cuda)
        co.backend = RLP_BACKEND_CUDA;
    rlp_context *ctx;
    if (rlp_context_create(&ctx, &co) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return cuda ? 77 : 1;
    }
    printf("%s\n", rlp_context_device_name(ctx));
    int64_t gemm_n = !strcmp(shape, "tiny") ? 64 : cuda ? 4096 : 1024;
    double peak = gemm_rate(ctx, gemm_n);
    printf("%s GEMM %lld^3 on %s: %.1f GFLOP/s (the peak we compare against)\n", matmul, (long long)gemm_n,
           cuda ? "the GPU" : "the CPU threads", peak);
    /* the hardware's dense bf16 tensor-core peak, for MFU */
    const char *dev = rlp_context_device_name(ctx);
    double hw_peak = getenv("RLPOST_PEAK_TFLOPS") ? atof(getenv("RLPOST_PEAK_TFLOPS")) * 1e3
                     : cuda && (strstr(dev, "H100") || strstr(dev, "H200")) ? 989e3
                     : cuda && strstr(dev, "A100") ? 312e3 : 0;

    /* random weights in HF names (uniform ±0.02, norms 1) */
    rlpi_weights w;
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    if (shape_random_weights(&cfg, &rng, &w)) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    int64_t d = cfg.dim, F = cfg.ffn_dim, qd = (int64_t)cfg.n_heads * cfg.head_dim,
            kd = (int64_t)cfg.n_kv_heads * cfg.head_dim;
    rlp_policy *p;
    /* on a GPU the fused head can afford a larger chunk of logits (1024 ×
     * vocabulary floats) and is then fewer, larger products */
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.head_chunk_tokens = cuda ? 1024 : 0;
    if (rlpi_policy_create(&p, ctx, &cfg, &w, &po) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    rlpi_weights_free(&w);
    uint64_t n_params;
    rlp_policy_n_params(&n_params, p);

    int32_t *tok = malloc((size_t)n_seq * 512 * sizeof(int32_t));
    for (int i = 0; i < n_seq * 512; i++)
        tok[i] = (int32_t)rlpi_rng_below(&rng, (uint64_t)cfg.vocab_size);
    rlp_sequence seqs[8];
    for (int s = 0; s < n_seq; s++)
        seqs[s] = (rlp_sequence){tok + s * seq_len, (uint32_t)seq_len, (uint32_t)n_prompt};
    int64_t T = (int64_t)n_seq * seq_len, S = (int64_t)n_seq * (seq_len - n_prompt);
    /* FLOPs: 2 per weight per token in the layers, the head on scored tokens
     * only, causal attention 2·2·(L²/2)·hd per head; backward 2× forward */
    double layer_w = (double)cfg.n_layers * (double)(2 * qd * d + 2 * kd * d + 3 * F * d);
    double attn = (double)cfg.n_layers * cfg.n_heads * 4.0 * ((double)seq_len * seq_len / 2) * cfg.head_dim * n_seq;
    double fwd_flops = 2.0 * layer_w * (double)T + 2.0 * (double)S * d * cfg.vocab_size + attn;
    double train_flops = 3.0 * fwd_flops;

    float *lp = malloc((size_t)n_seq * 512 * sizeof(float));
    size_t n;
    /* bf16 on the CPU: an fp32 twin (same weights) in this process */
    rlp_context *ctx32 = NULL;
    rlp_policy *p32 = NULL;
    timed tb = {.lp0 = lp}, tf = {.lp0 = malloc((size_t)T * sizeof(float))};
    const char *twin_env = getenv("RLPOST_BENCH_TWIN");
    if (!cuda && !strcmp(matmul, "bf16") && !(twin_env && !strcmp(twin_env, "0"))) {
        rlp_context_options c32 = RLP_CONTEXT_OPTIONS_INIT;
        c32.n_threads = threads;
        rlpi_rng r32;
        rlpi_rng_seed(&r32, 7, 0); /* the weights above */
        if (rlp_context_create(&ctx32, &c32) != RLP_OK || shape_random_weights(&cfg, &r32, &w) ||
            rlpi_policy_create(&p32, ctx32, &cfg, &w, &po) != RLP_OK) {
            fprintf(stderr, "fp32 twin: %s\n", rlp_error_last());
            return 1;
        }
        rlpi_weights_free(&w);
    }
    if (measure(ctx, p, &tb, p32, &tf, seqs, n_seq, T, reps))
        return 1;
    double fwd = tb.fwd, train = tb.train;
    printf("\n%s shape (%llu params), %d x %d tokens, %s:\n",
           !strcmp(shape, "1b") ? "Llama-3.2-1B" : !strcmp(shape, "tiny") ? "tiny" : "SmolLM2-135M",
           (unsigned long long)n_params, n_seq, seq_len, cuda ? "CUDA" : "CPU");
    printf("  librlpost forward (logprobs): %7.3f s  %8.1f tok/s  %6.1f GFLOP/s  %.2f of GEMM peak\n", fwd,
           (double)T / fwd, fwd_flops / fwd / 1e9, fwd_flops / fwd / 1e9 / peak);
    printf("  librlpost train step:         %7.3f s  %8.1f tok/s  %6.1f GFLOP/s  %.2f of GEMM peak\n", train,
           (double)T / train, train_flops / train / 1e9, train_flops / train / 1e9 / peak);
    double mfu = hw_peak > 0 ? train_flops / train / 1e9 / hw_peak : 0;
    if (hw_peak > 0)
        printf("  train step MFU: %.3f of the GPU's dense bf16 peak (%.0f TFLOP/s), %s GEMMs\n", mfu, hw_peak / 1e3,
               matmul);

    double dec1 = 0, dec64 = 0;
    if (decode) {
        uint32_t new_tokens = !strcmp(shape, "1b") ? 32 : !strcmp(shape, "tiny") ? 8 : 64;
        dec1 = decode_rate(p, 1, new_tokens, cfg.vocab_size, &rng);
        dec64 = decode_rate(p, 64, new_tokens, cfg.vocab_size, &rng);
        printf("  decode (%u new tokens, host sampling): batch 1 %.1f tok/s, batch 64 %.1f tok/s (%.1fx)\n", new_tokens,
               dec1, dec64, dec1 > 0 ? dec64 / dec1 : 0);
    }
    printf("RESULT backend=%s shape=%s matmul=%s params=%llu gemm_gflops=%.1f fwd_tok_s=%.1f train_tok_s=%.1f "
           "train_gflops=%.1f mfu=%.4f decode1_tok_s=%.1f decode64_tok_s=%.1f\n",
           backend, shape, matmul, (unsigned long long)n_params, peak, (double)T / fwd, (double)T / train,
           train_flops / train / 1e9, mfu, dec1, dec64);
    if (p32) {
        bf16_report(&tb, &tf, reps);
        rlp_policy_free(p32);
        rlp_context_free(ctx32);
    }
    free(tf.lp0);
    fflush(stdout);
    if (cuda || strcmp(shape, "smollm2")) { /* the CPU comparisons below are for the SmolLM2 shape */
        rlp_policy_free(p);
        free(tok);
        free(lp);
        rlp_context_free(ctx);
        return 0;
    }

    /* logprob memory: 8 x 512 tokens on a fresh frozen clone */
    rlp_policy *frozen;
    rlp_policy_clone(&frozen, p, 0);
    rlp_policy_free(p);
    long rss0 = peak_rss_kib();
    for (int s = 0; s < n_seq; s++)
        seqs[s] = (rlp_sequence){tok + s * 512, 512u, 16u};
    rlp_memory_stats ms;
    rlp_policy_logprobs(frozen, seqs, n_seq, 1.0f, lp, NULL, (size_t)n_seq * 512, &n);
    rlp_policy_memory(&ms, frozen);
    printf("  logprobs 8 x 512 tokens: activation buffers %.1f MiB above the weights (peak RSS grew %.1f MiB)\n",
           (double)ms.activations / 1048576.0, (double)(peak_rss_kib() - rss0) / 1024.0);
    rlp_policy_free(frozen);

    /* the same step in PyTorch, same threads, same run (RLPOST_BENCH_TORCH=0
     * skips it: on a loaded machine PyTorch's spinning threads make it take
     * many minutes) */
    if (getenv("RLPOST_BENCH_TORCH") && !strcmp(getenv("RLPOST_BENCH_TORCH"), "0")) {
        printf("  PyTorch baseline skipped (RLPOST_BENCH_TORCH=0)\n");
        free(tok);
        free(lp);
        rlp_context_free(ctx);
        return 0;
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/bench/torch_train_step.py %d %d %d %d %d 2>/dev/null",
             getenv("RLPOST_SOURCE_ROOT") ? getenv("RLPOST_SOURCE_ROOT") : ".", threads, n_seq, seq_len, n_prompt, reps);
    FILE *py = popen(cmd, "r");
    char line[1024] = "";
    if (py && fgets(line, sizeof line, py)) {
        double tf = 0, tt = 0;
        const char *a = strstr(line, "\"forward_s\": "), *b = strstr(line, "\"train_s\": ");
        if (a && b) {
            tf = atof(a + 13);
            tt = atof(b + 11);
            printf("  PyTorch forward:              %7.3f s  %8.1f tok/s   -> librlpost %.2fx\n", tf, (double)T / tf, tf / fwd);
            printf("  PyTorch train step:           %7.3f s  %8.1f tok/s   -> librlpost %.2fx\n", tt, (double)T / tt, tt / train);
        }
    } else {
        printf("  PyTorch baseline skipped (/usr/bin/python3 with torch not found)\n");
    }
    if (py)
        pclose(py);
    free(tok);
    free(lp);
    rlp_context_free(ctx);
    return 0;
}
