/* Decode throughput of the local rollout engine on the main job's model:
 * tokens/s of batched decoding at batch 1, 8, 32 and 64 (prefill timed
 * apart), each as a ratio to batch 1 measured in the same run, and batch 1
 * against llama.cpp on the same GGUF and thread count when
 * llama-cpp-python is importable. Our engine runs fp32 weights (dequantised
 * at load); llama.cpp runs the GGUF's own quantised types.
 * Usage: bench_decode [threads] [new_tokens] [model.gguf] */
#include "decode_rate.h"
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* decode at `batch` rows of the same story prompt (tokenised here) */
static double decode_rate(rlp_policy *pol, uint32_t batch, uint32_t new_tokens, double *prefill_rate)
{
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_batch = batch;
    o.max_seq_len = 512;
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    const char *text = "Once upon a time, in a land far away, there lived a";
    int32_t ids[64];
    size_t n = 0;
    rlp_tokenizer_encode(tok, text, strlen(text), 0, ids, 64, &n);
    return bench_decode_rate(pol, &o, ids, n, 0, batch, new_tokens, prefill_rate);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    uint32_t new_tokens = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
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
        fprintf(stderr, "bench_decode: %s (run scripts/fetch-model.sh)\n", rlp_error_last());
        return 77;
    }
    printf("decode on %s, %d threads, %u new tokens per sequence, fp32 weights\n", path, threads, new_tokens);
    printf("%8s %14s %12s %14s\n", "batch", "decode tok/s", "vs batch 1", "prefill tok/s");
    const uint32_t batches[] = {1, 8, 32, 64};
    double base = 0;
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        double pf = 0, r = decode_rate(pol, batches[i], new_tokens, &pf);
        if (i == 0)
            base = r;
        printf("%8u %14.1f %11.2fx %14.1f\n", batches[i], r, base > 0 ? r / base : 0, pf);
        fflush(stdout);
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/bench/llama_cpp_decode.py '%s' %d %u 2>/dev/null",
             root ? root : ".", path, threads, new_tokens);
    FILE *py = popen(cmd, "r");
    char line[1024] = {0};
    double lc = 0;
    if (py && fgets(line, sizeof line, py)) {
        const char *k = strstr(line, "\"decode_tok_s\": ");
        if (k)
            lc = atof(k + strlen("\"decode_tok_s\": "));
    }
    if (py)
        pclose(py);
    if (lc > 0)
        printf("llama.cpp (llama-cpp-python, the GGUF's own Q4_1/Q8_0 weights) batch 1: %.1f tok/s; "
               "librlpost / llama.cpp = %.2fx\n", lc, base / lc);
    else
        printf("llama.cpp baseline skipped (python3 -c 'import llama_cpp' failed)\n");
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    return 0;
}
