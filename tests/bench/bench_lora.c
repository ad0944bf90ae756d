/* LoRA against full fine-tuning on the SmolLM2-135M shape (random weights:
 * speed does not depend on their values), 8 sequences of 256 tokens (64
 * prompt + 192 completion), the same batch and thread count:
 *   - train-step time: the two policies' steps interleaved one by one (so a
 *     loaded machine slows both alike), min and median over the repeats,
 *     and the LoRA/full speed ratio;
 *   - memory by rlp_policy_memory (weights, gradients, AdamW moments,
 *     activations) after the timed steps;
 *   - what publishing a version costs: the merged export a rollout engine
 *     takes (LoRA) against the plain copy (full), and the bytes and seconds
 *     of the files a version is shipped as: the PEFT adapter folder
 *     (rlp_policy_save_lora) against the whole model (rlp_policy_save, f32).
 * LoRA: rank 16, alpha 32, all seven projections (the setting).
 * "qlora" is the same LoRA over a quantized base (base_dtype, Q8_0 by
 * default: the projections in GGUF blocks, dequantized a layer at a time).
 * Mode "full", "lora" or "qlora" runs one policy only: its process's peak
 * RSS is then that policy's (the "both" default runs all three in one
 * process).
 * Usage: bench_lora [threads] [repeats] [both|full|lora|qlora] [q8_0|q4_0|q4_k] */
#include "../../examples/blas_kernels.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/lora.h"
#include "backend/context.h"
#include "model/policy.h"
#include "model/transformer_internal.h"
#include "../unit/shape_models.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static long long dir_bytes(const char *dir, const char *const *files, int n)
{
    long long total = 0;
    for (int i = 0; i < n; i++) {
        char p[1024];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (!stat(p, &st))
            total += st.st_size;
    }
    return total;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 3;
    const char *mode = argc > 3 ? argv[3] : "both", *qtype = argc > 4 ? argv[4] : "q8_0";
    bool both = !strcmp(mode, "both");
    bool run[3] = {both || !strcmp(mode, "full"), both || !strcmp(mode, "lora"), both || !strcmp(mode, "qlora")};
    rlpost_select_blas_kernels(argv); /* the kernels rlpost runs */
    rlp_context *ctx;
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    if (rlp_context_create(&ctx, &co) != RLP_OK) {
        fprintf(stderr, "context: %s\n", rlp_error_last());
        return 1;
    }
    rlpi_model_config cfg;
    shape_config("smollm2", &cfg);
    rlpi_rng rng;
    rlpi_rng_seed(&rng, 7, 0);
    rlpi_weights w;
    if (shape_random_weights(&cfg, &rng, &w)) {
        fprintf(stderr, "weights: %s\n", rlp_error_last());
        return 1;
    }
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    rlp_policy *pol[3] = {NULL, NULL, NULL}; /* full, lora, qlora */
    const char *names[3] = {"full", "lora", "qlora"};
    for (int j = 0; j < 3; j++) {
        if (!run[j])
            continue;
        if (rlpi_policy_create(&pol[j], ctx, &cfg, &w, &po) != RLP_OK) {
            fprintf(stderr, "policy: %s\n", rlp_error_last());
            return 1;
        }
        rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
        oo.lr = j ? 1e-4f : 1e-5f;
        rlp_policy_set_optimizer(pol[j], &oo);
    }
    rlpi_weights_free(&w);
    for (int j = 1; j < 3; j++) {
        if (!pol[j])
            continue;
        rlp_lora_options lo = RLP_LORA_OPTIONS_INIT; /* rank 16, alpha 32, all projections */
        lo.base_dtype = j == 2 ? qtype : NULL;
        if (rlp_policy_enable_lora(pol[j], &lo) != RLP_OK) {
            fprintf(stderr, "lora: %s\n", rlp_error_last());
            return 1;
        }
    }
    enum { N_SEQ = 8, LEN = 256, PROMPT = 64 };
    int32_t *tokens = malloc(sizeof(int32_t) * N_SEQ * LEN);
    rlp_sequence seqs[N_SEQ];
    for (int s = 0; s < N_SEQ; s++) {
        for (int t = 0; t < LEN; t++)
            tokens[s * LEN + t] = (int32_t)rlpi_rng_below(&rng, (uint64_t)cfg.vocab_size);
        seqs[s] = (rlp_sequence){tokens + s * LEN, LEN, PROMPT};
    }
    printf("SmolLM2-135M shape, %d x %d tokens (%d prompt), %d threads, %d timed steps after one warm-up; "
           "qlora base %s\n",
           N_SEQ, LEN, PROMPT, threads, reps, qtype);
    double *times[3] = {calloc((size_t)reps, sizeof(double)), calloc((size_t)reps, sizeof(double)),
                        calloc((size_t)reps, sizeof(double))};
    for (int r = -1; r < reps; r++)
        for (int j = 0; j < 3; j++) {
            if (!pol[j])
                continue;
            rlp_train_stats st = {.version = 1};
            double t0 = now();
            if (rlp_policy_train_step(pol[j], seqs, N_SEQ, rlp_loss_nll, NULL, NULL, &st) != RLP_OK) {
                fprintf(stderr, "%s step: %s\n", names[j], rlp_error_last());
                return 1;
            }
            if (r >= 0)
                times[j][r] = now() - t0;
        }
    double med[3] = {0, 0, 0};
    for (int j = 0; j < 3; j++) {
        if (!pol[j])
            continue;
        qsort(times[j], (size_t)reps, sizeof(double), cmp_d);
        med[j] = times[j][reps / 2];
        uint64_t n_train = 0;
        rlp_policy_n_trainable(&n_train, pol[j]);
        rlp_memory_stats m = {.version = 1};
        rlp_policy_memory(&m, pol[j]);
        printf("%-5s train step min %.3f s, median %.3f s | trainable %llu | MB: weights %.1f, gradients %.1f, "
               "AdamW %.1f, activations %.1f, total %.1f\n",
               names[j], times[j][0], med[j], (unsigned long long)n_train, m.weights / 1e6, m.gradients / 1e6,
               m.optimizer / 1e6, m.activations / 1e6, (m.weights + m.gradients + m.optimizer + m.activations) / 1e6);
    }
    if (pol[0] && pol[1])
        printf("ratio lora/full step speed (median): %.2fx\n", med[0] / med[1]);
    if (pol[1] && pol[2]) {
        rlp_memory_stats a = {.version = 1}, b = {.version = 1};
        rlp_policy_memory(&a, pol[1]);
        rlp_policy_memory(&b, pol[2]);
        printf("ratio qlora/lora step speed (median): %.2fx; weights qlora/lora %.2fx\n", med[1] / med[2],
               (double)b.weights / (double)a.weights);
    }

    /* what a version costs to publish */
    char tmp[] = "/tmp/rlpost-bench-lora-XXXXXX";
    if (!mkdtemp(tmp))
        return 1;
    static const char *const full_files[] = {"model.safetensors", "config.json", "generation_config.json"};
    static const char *const lora_files[] = {"adapter_model.safetensors", "adapter_config.json"};
    char dir[1100];
    double t_full = 0, t_lora = 0;
    rlpi_transformer *engine_tf = NULL;
    long long b_full = 0, b_lora = 0;
    for (int j = 0; j < 2; j++) {
        if (!pol[j])
            continue;
        snprintf(dir, sizeof dir, "%s/%s", tmp, names[j]);
        double t0 = now();
        int rc = j ? rlp_policy_save_lora(pol[j], dir, NULL) : rlp_policy_save(pol[j], dir, RLP_DTYPE_F32);
        double dt = now() - t0;
        if (rc != RLP_OK && rc != RLP_E_UNSUPPORTED) {
            fprintf(stderr, "%s save: %s\n", names[j], rlp_error_last());
            return 1;
        }
        *(j ? &t_lora : &t_full) = dt;
        *(j ? &b_lora : &b_full) = j ? dir_bytes(dir, lora_files, 2) : dir_bytes(dir, full_files, 3);
        /* what a local rollout engine's update does (rollout/engine.c copy_weights): the
         * buffer copied, then for LoRA s·B·A added in place, one GEMM per projection */
        if (!engine_tf) {
            rlpi_weights ex;
            rlpi_transformer_options fo = {.frozen = true};
            if (rlpi_transformer_export(pol[j]->tf, &ex) != RLP_OK ||
                rlpi_transformer_create(&engine_tf, pol[j]->ctx->backend, &cfg, &ex, &fo) != RLP_OK)
                return 1;
            rlpi_weights_free(&ex);
        }
        t0 = now();
        size_t bytes = rlpi_transformer_n_params(pol[j]->tf) * 4;
        if (rlpi_buffer_copy(rlpi_transformer_params(engine_tf), 0, rlpi_transformer_params(pol[j]->tf), 0, bytes) ||
            (j && rlpi_lora_merge_params(pol[j]->tf, engine_tf)))
            return 1;
        printf("%-4s version: files %.2f MB written in %.3f s; a local engine's update (%s) %.3f s\n", names[j],
               (j ? b_lora : b_full) / 1e6, dt, j ? "copy + s·B·A in place" : "copy", now() - t0);
    }
    if (pol[0] && pol[1])
        printf("ratio full/lora bytes per published version: %.1fx, seconds: %.1fx\n", (double)b_full / (double)b_lora,
               t_full / t_lora);
    rlpi_transformer_free(engine_tf);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS of this process (%s): %.1f MB\n", mode, ru.ru_maxrss / 1024.0);
    for (int j = 0; j < 3; j++) {
        rlp_policy_free(pol[j]);
        free(times[j]);
    }
    free(tokens);
    rlp_context_free(ctx);
    return 0;
}
