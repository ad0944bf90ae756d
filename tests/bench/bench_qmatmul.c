/* Quantized rollout weights on the main job's model (SmolLM2-135M):
 * (1) the Q8_0 and Q4_0 product kernels against the fp32 GEMM on the
 *     model's own matrix shapes at m = 1 and 64 rows (ms per product,
 *     weight GB/s);
 * (2) decode tok/s of the local engine at batch 1, 8, 32, 64 with fp32,
 *     Q8_0 and Q4_0 weights, alternated in the same run (ratios to f32);
 * (3) each rollout copy's bytes and its re-quantization time per update.
 * Usage: bench_qmatmul [threads] [new_tokens] [model.gguf] [repeats]
 * (OPENBLAS_CORETYPE=SkylakeX for the AVX-512 SGEMM, as rlpost selects). */
#include "backend/backend.h"
#include "backend/qmat.h"
#include "core/clock.h"
#include "decode_rate.h"
#include "model/policy.h"
#include "model/qweights.h"
#include "model/transformer_internal.h"
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double best_of(double a, double b)
{
    return a < b || b == 0 ? a : b;
}

/* one weight shape (n, k) of the model: fp32 GEMM vs Q8_0 and Q4_0 at m
 * rows (q_off[t]: the matrix in copy qw[t]; head: it is the copies' head,
 * whose type is head_type) */
static void kernel_row(rlpi_backend *be, rlpi_transformer *tf, rlpi_qweights *const *qw, const char *name,
                       size_t w_off, const size_t *q_off, int64_t n, int64_t k, int64_t m)
{
    const int head = !strcmp(name, "head");
    const int type[2] = {head ? qw[0]->head_type : qw[0]->type, head ? qw[1]->head_type : qw[1]->type};
    rlpi_buffer *a, *c;
    if (rlpi_buffer_alloc(be, (size_t)(m * k) * 4, &a) || rlpi_buffer_alloc(be, (size_t)(m * n) * 4, &c))
        return;
    float *ah = rlpi_buffer_host(a);
    for (int64_t i = 0; i < m * k; i++)
        ah[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    int reps = m == 1 ? 50 : 5;
    double tf32 = 0, tq[2] = {0, 0};
    for (int round = 0; round < 3; round++) {
        double t0 = rlpi_now_s();
        for (int r = 0; r < reps; r++) {
            rlpi_gemm g = {.trans_b = 1, .m = m, .n = n, .k = k, .alpha = 1, .beta = 0, .batch = 1,
                           .a = {a, 0, k, 0}, .b = {tf->params, w_off, k, 0}, .c = {c, 0, n, 0}};
            rlpi_gemm_f32(be, &g);
        }
        tf32 = best_of((rlpi_now_s() - t0) / reps, tf32);
        for (int t = 0; t < 2; t++) {
            double t1 = rlpi_now_s();
            for (int r = 0; r < reps; r++)
                rlpi_op_qmatmul(be, RLPI_REF(c, 0), RLPI_REF(a, 0), qw[t]->buf, q_off[t], type[t], m, n, k, 0.0f);
            tq[t] = best_of((rlpi_now_s() - t1) / reps, tq[t]);
        }
    }
    double bf = (double)n * k * 4, b8 = (double)rlpi_qmat_bytes(type[0], n, k);
    double b4 = (double)rlpi_qmat_bytes(type[1], n, k);
    printf("%-8s %6lld x %5lld m=%-3lld f32 %7.3f ms %5.1f GB/s  %s %7.3f ms %5.1f GB/s  %s %7.3f ms %5.1f GB/s  "
           "speed vs f32 %.2fx / %.2fx\n",
           name, (long long)n, (long long)k, (long long)m, tf32 * 1e3, bf / tf32 / 1e9,
           type[0] == RLPI_QMAT_Q4_0 ? "q4_0" : "q8_0", tq[0] * 1e3, b8 / tq[0] / 1e9,
           type[1] == RLPI_QMAT_Q4_0 ? "q4_0" : "q8_0", tq[1] * 1e3, b4 / tq[1] / 1e9, tf32 / tq[0], tf32 / tq[1]);
    rlpi_buffer_free(a);
    rlpi_buffer_free(c);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    uint32_t new_tokens = argc > 2 ? (uint32_t)atoi(argv[2]) : 32;
    int repeats = argc > 4 ? atoi(argv[4]) : 1;
    char path[4096];
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    if (argc > 3)
        snprintf(path, sizeof path, "%s", argv[3]);
    else
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root ? root : ".");
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx;
    rlp_policy *pol;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, &co) != RLP_OK || rlp_policy_load(&pol, ctx, path, &po) != RLP_OK) {
        fprintf(stderr, "bench_qmatmul: %s (run scripts/fetch-model.sh)\n", rlp_error_last());
        return 77;
    }
    rlpi_transformer *tf = pol->tf;
    rlpi_backend *be = ctx->backend;
    printf("%s, %d threads, kernel %s\n", path, threads,
           rlpi_qmat_isa_name(rlpi_qmat_isa()));

    /* (3) the copies: Q8_0, and Q4_0 layers with a Q8_0 head */
    rlpi_qweights *copies[2];
    const int types[2] = {RLPI_QMAT_Q8_0, RLPI_QMAT_Q4_0};
    size_t lin = 0;
    const rlpi_model_config *c = &tf->cfg;
    lin = (size_t)c->n_layers * (size_t)(tf->qdim * c->dim * 2 + tf->kvdim * c->dim * 2 + 3 * c->ffn_dim * c->dim) +
          (size_t)c->vocab_size * c->dim;
    for (int t = 0; t < 2; t++) {
        if (rlpi_qweights_create(&copies[t], tf, types[t]) != RLP_OK) {
            fprintf(stderr, "bench_qmatmul: %s\n", rlp_error_last());
            return 1;
        }
        double tq = 1e9;
        for (int r = 0; r < 3; r++) {
            rlpi_qweights_update(copies[t], tf);
            tq = copies[t]->last_update_s < tq ? copies[t]->last_update_s : tq;
        }
        printf("rollout copy %s: %.1f MB (the same weights in fp32: %.1f MB), re-quantization %.3f s per update "
               "(best of 3)\n",
               t ? "Q4_0 (head Q8_0)" : "Q8_0", (double)rlpi_qweights_bytes(copies[t]) / 1e6, (double)lin * 4 / 1e6,
               tq);
    }
    rlpi_qweights *qw = copies[0];

    /* (1) kernels */
    const layer_params *P = &tf->layers[0];
    for (int64_t m = 1; m <= 64; m *= 64) {
        /* the fused matrices whole (their scales follow all their rows); the
         * fp32 side times an fp32 product of the same shape over the layer's
         * parameters from wq / wg on (the timing, not the values, matters) */
        const rlpi_qlayer *L8 = &copies[0]->layers[0], *L4 = &copies[1]->layers[0];
        kernel_row(be, tf, copies, "head", tf->lm_head, (size_t[]){copies[0]->head, copies[1]->head}, c->vocab_size,
                   c->dim, m);
        kernel_row(be, tf, copies, "qkv", P->wq, (size_t[]){L8->qkv, L4->qkv}, tf->qdim + 2 * tf->kvdim, c->dim, m);
        kernel_row(be, tf, copies, "o", P->wo, (size_t[]){L8->wo, L4->wo}, c->dim, tf->qdim, m);
        kernel_row(be, tf, copies, "gate-up", P->wg, (size_t[]){L8->gu, L4->gu}, 2 * c->ffn_dim, c->dim, m);
        kernel_row(be, tf, copies, "down", P->wd, (size_t[]){L8->wd, L4->wd}, c->dim, c->ffn_dim, m);
    }
    /* the int8 kernel against the dequantize + SGEMM route at m rows */
    printf("int8 kernel (i8) vs dequantized tiles + SGEMM (deq) on the fused gate-up %lld x %lld:\n",
           (long long)(2 * c->ffn_dim), (long long)c->dim);
    for (int64_t m = 2; m <= 64; m *= 2) {
        double t[2] = {0, 0};
        rlpi_buffer *a, *cc;
        rlpi_buffer_alloc(be, (size_t)(m * c->dim) * 4, &a);
        rlpi_buffer_alloc(be, (size_t)(m * 2 * c->ffn_dim) * 4, &cc);
        memset(rlpi_buffer_host(a), 0, (size_t)(m * c->dim) * 4);
        for (int round = 0; round < 3; round++)
            for (int route = 0; route < 2; route++) {
                rlpi_qmat_set_gemm_min_rows(route ? 1 : 1 << 30);
                double t0 = rlpi_now_s();
                for (int r = 0; r < 10; r++)
                    rlpi_op_qmatmul(be, RLPI_REF(cc, 0), RLPI_REF(a, 0), qw->buf, qw->layers[0].gu, qw->type, m,
                                    2 * c->ffn_dim, c->dim, 0.0f);
                t[route] = best_of((rlpi_now_s() - t0) / 10, t[route]);
            }
        rlpi_qmat_set_gemm_min_rows(0);
        printf("  m=%-3lld i8 %7.3f ms  deq %7.3f ms  i8/deq speed %.2fx\n", (long long)m, t[0] * 1e3, t[1] * 1e3,
               t[1] / t[0]);
        rlpi_buffer_free(a);
        rlpi_buffer_free(cc);
    }
    rlpi_qweights_free(copies[0]);
    rlpi_qweights_free(copies[1]);

    /* (2) decode */
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    const char *text = "Once upon a time, in a land far away, there lived a";
    int32_t ids[64];
    size_t n = 0;
    rlp_tokenizer_encode(tok, text, strlen(text), 0, ids, 64, &n);
    printf("decode, %u new tokens per sequence, %d repeat(s): tok/s (prefill tok/s)\n", new_tokens, repeats);
    printf("%6s %20s %20s %20s %10s %10s\n", "batch", "f32", "q8_0", "q4_0", "q8_0/f32", "q4_0/f32");
    const uint32_t batches[] = {1, 8, 32, 64};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        for (int rep = 0; rep < repeats; rep++) {
            double r[3], pf[3];
            const int32_t kinds[3] = {RLP_ROLLOUT_WEIGHTS_F32, RLP_ROLLOUT_WEIGHTS_Q8_0, RLP_ROLLOUT_WEIGHTS_Q4_0};
            for (int w = 0; w < 3; w++) {
                rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
                o.max_batch = batches[i];
                o.max_seq_len = 512;
                o.weights = kinds[w];
                r[w] = bench_decode_rate(pol, &o, ids, n, 0, batches[i], new_tokens, &pf[w]);
            }
            printf("%6u %11.1f (%6.0f) %11.1f (%6.0f) %11.1f (%6.0f) %9.2fx %9.2fx\n", batches[i], r[0], pf[0], r[1],
                   pf[1], r[2], pf[2], r[0] > 0 ? r[1] / r[0] : 0, r[0] > 0 ? r[2] / r[0] : 0);
            fflush(stdout);
        }
    }
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    return 0;
}
