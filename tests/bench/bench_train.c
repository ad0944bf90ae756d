/* Train-step and forward-only throughput of the policy on a SmolLM2-135M-
 * shaped model (30 layers, d 576, 9/3 heads, ffn 1536, vocab 49,152, tied;
 * random weights: speed does not depend on their values), 8 sequences of
 * 256 tokens (64 prompt + 192 completion), against PyTorch doing the same
 * step on the same thread count in the same run
 * (tests/bench/torch_train_step.py, skipped when PyTorch is absent). Also
 * prints achieved GFLOP/s against the fp32 GEMM rate measured now, and the
 * peak memory of logprobs for 8 x 512 tokens above the weights.
 * Usage: bench_train [threads] [repeats] */
#include "core/error.h"
#include "core/rng.h"
#include "model/policy.h"

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

static double gemm_rate(rlp_context *ctx)
{
    rlpi_backend *be = ctx->backend;
    int64_t n = 1024;
    rlpi_buffer *a, *b, *c;
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &a);
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &b);
    rlpi_buffer_alloc(be, (size_t)(n * n) * 4, &c);
    rlpi_buffer_fill_f32(a, 0, (size_t)(n * n), 0.5f);
    rlpi_buffer_fill_f32(b, 0, (size_t)(n * n), 0.25f);
    rlpi_gemm g = {.m = n, .n = n, .k = n, .alpha = 1, .beta = 0, .batch = 1, .a = {a, 0, n, 0}, .b = {b, 0, n, 0}, .c = {c, 0, n, 0}};
    rlpi_gemm_f32(be, &g);
    int reps = 0;
    double t0 = now();
    while (now() - t0 < 1.0) {
        rlpi_gemm_f32(be, &g);
        reps++;
    }
    double rate = 2.0 * (double)n * n * n * reps / (now() - t0) / 1e9;
    rlpi_buffer_free(a);
    rlpi_buffer_free(b);
    rlpi_buffer_free(c);
    return rate;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 2;
    const int n_seq = 8, seq_len = 256, n_prompt = 64;
    rlpi_model_config cfg = {.arch = "llama", .n_layers = 30, .dim = 576, .n_heads = 9, .n_kv_heads = 3,
                             .head_dim = 64, .ffn_dim = 1536, .vocab_size = 49152, .max_seq_len = 8192,
                             .rope_theta = 100000.0f, .rms_eps = 1e-5f, .tie_embeddings = true, .bos_id = -1, .eos_id = -1};
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx;
    if (rlp_context_create(&ctx, &co) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    printf("%s\n", rlp_context_device_name(ctx));
    double peak = gemm_rate(ctx);
    printf("fp32 GEMM 1024^3 on %d threads: %.1f GFLOP/s (the peak we compare against)\n", threads, peak);

    /* random weights in HF names (std 0.02, norms 1) */
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    char name[128];
    int64_t d = cfg.dim, F = cfg.ffn_dim, qd = cfg.n_heads * cfg.head_dim, kd = cfg.n_kv_heads * cfg.head_dim;
#define ADD(nm, nd, a, b, norm)                                                 \
    do {                                                                        \
        int64_t sh[2] = {a, b};                                                 \
        rlpi_tensor *t;                                                         \
        rlpi_weights_add(&w, nm, nd, sh, &t);                                   \
        for (size_t i = 0; i < t->n_elems; i++)                                 \
            t->data[i] = norm ? 1.0f : (float)(rlpi_rng_f64(&rng) - 0.5) * 0.04f; \
    } while (0)
    ADD("model.embed_tokens.weight", 2, cfg.vocab_size, d, 0);
    for (int l = 0; l < cfg.n_layers; l++) {
#define N(s) (snprintf(name, sizeof name, "model.layers.%d.%s", l, s), name)
        ADD(N("input_layernorm.weight"), 1, d, 0, 1);
        ADD(N("self_attn.q_proj.weight"), 2, qd, d, 0);
        ADD(N("self_attn.k_proj.weight"), 2, kd, d, 0);
        ADD(N("self_attn.v_proj.weight"), 2, kd, d, 0);
        ADD(N("self_attn.o_proj.weight"), 2, d, qd, 0);
        ADD(N("post_attention_layernorm.weight"), 1, d, 0, 1);
        ADD(N("mlp.gate_proj.weight"), 2, F, d, 0);
        ADD(N("mlp.up_proj.weight"), 2, F, d, 0);
        ADD(N("mlp.down_proj.weight"), 2, d, F, 0);
#undef N
    }
    ADD("model.norm.weight", 1, d, 0, 1);
    rlp_policy *p;
    if (rlpi_policy_create(&p, ctx, &cfg, &w, NULL) != RLP_OK) {
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
    rlp_policy_logprobs(p, seqs, n_seq, 1.0f, lp, NULL, (size_t)T, &n); /* warm-up */
    double t0 = now();
    for (int r = 0; r < reps; r++)
        rlp_policy_logprobs(p, seqs, n_seq, 1.0f, lp, NULL, (size_t)T, &n);
    double fwd = (now() - t0) / reps;
    rlp_train_stats st;
    rlp_policy_train_step(p, seqs, n_seq, rlp_loss_nll, NULL, NULL, &st); /* warm-up (allocates moments) */
    t0 = now();
    for (int r = 0; r < reps; r++)
        if (rlp_policy_train_step(p, seqs, n_seq, rlp_loss_nll, NULL, NULL, &st) != RLP_OK)
            fprintf(stderr, "%s\n", rlp_error_last());
    double train = (now() - t0) / reps;
    printf("\nSmolLM2-135M shape (%llu params), %d x %d tokens, %d threads:\n", (unsigned long long)n_params, n_seq,
           seq_len, threads);
    printf("  librlpost forward (logprobs): %7.3f s  %8.1f tok/s  %6.1f GFLOP/s  %.2f of GEMM peak\n", fwd,
           (double)T / fwd, fwd_flops / fwd / 1e9, fwd_flops / fwd / 1e9 / peak);
    printf("  librlpost train step:         %7.3f s  %8.1f tok/s  %6.1f GFLOP/s  %.2f of GEMM peak\n", train,
           (double)T / train, train_flops / train / 1e9, train_flops / train / 1e9 / peak);

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

    /* the same step in PyTorch, same threads, same run */
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
