/* Decode throughput of the local rollout engine on the main job's model:
 * tokens/s of batched decoding at batch 1, 8, 32 and 64 (prefill timed
 * apart), against llama.cpp on the same GGUF and thread count when
 * llama-cpp-python is importable (tests/bench/llama_cpp_decode.py). The
 * baseline decodes its B sequences the way llama.cpp batches them itself:
 * one context with n_seq_max = B and one llama_decode per step holding one
 * token per sequence. Each run measures ours at every batch size and then
 * llama.cpp at every batch size; the summary gives min / median / max over
 * the runs of each rate and of the per-run ratio ours / llama.cpp. Our
 * engine runs fp32 weights (dequantised at load) unless
 * RLPOST_BENCH_WEIGHTS names its rollout copy (q8_0, q4_0, auto: the
 * copy re-quantized from those fp32 weights, as in training); llama.cpp
 * runs the GGUF's own quantised types. Selects OpenBLAS's kernels for this
 * CPU as `rlpost` does (examples/blas_kernels.h).
 * Usage: bench_decode [threads] [new_tokens] [model.gguf]
 * Environment: RLPOST_BENCH_RUNS (default 3), RLPOST_BENCH_BATCHES
 * (comma-separated, default 1,8,32,64), RLPOST_BENCH_WEIGHTS (f32, q8_0,
 * q4_0 or auto; default f32), RLPOST_BENCH_PYTHON (the Python that has
 * llama_cpp, default python3).
 * Each run also measures the memory system's read rate with the same
 * number of threads (a 256 MiB buffer summed in parallel, best of 3
 * passes): batch-1 decode streams the whole rollout copy every token, so
 * read rate ÷ copy bytes is its ceiling (docs/PERFORMANCE.md). */
#include "../../examples/blas_kernels.h"
#include "decode_rate.h"
#include "rlpost.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BATCHES 16
#define MAX_RUNS 32

#define READ_BYTES ((size_t)256 << 20)

typedef struct reader {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} reader;

static void *read_part(void *arg)
{
    reader *r = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= r->n; i += 4) {
        s0 += r->p[i];
        s1 += r->p[i + 1];
        s2 += r->p[i + 2];
        s3 += r->p[i + 3];
    }
    r->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GB/s of `threads` threads each summing its share of a 256 MiB buffer
 * (far beyond the caches), best of 3 passes; 0 on failure */
static double read_rate(int threads)
{
    uint64_t *buf = malloc(READ_BYTES);
    if (!buf || threads < 1 || threads > 64) {
        free(buf);
        return 0;
    }
    memset(buf, 1, READ_BYTES);
    size_t words = READ_BYTES / 8, share = words / (size_t)threads;
    double best = 0;
    uint64_t check = 0;
    for (int pass = 0; pass < 3; pass++) {
        pthread_t th[64];
        reader rd[64];
        double t0 = now_s();
        int started = 0;
        for (int t = 0; t < threads; t++) {
            rd[t] = (reader){buf + (size_t)t * share, share, 0};
            if (t > 0 && pthread_create(&th[t], NULL, read_part, &rd[t]) == 0)
                started++;
            else if (t > 0)
                read_part(&rd[t]);
        }
        read_part(&rd[0]);
        for (int t = 1; t <= started; t++)
            pthread_join(th[t], NULL);
        double dt = now_s() - t0;
        for (int t = 0; t < threads; t++)
            check += rd[t].sum;
        if (dt > 0 && (double)(share * (size_t)threads * 8) / dt / 1e9 > best)
            best = (double)(share * (size_t)threads * 8) / dt / 1e9;
    }
    free(buf);
    return check ? best : 0; /* the sums are used: the reads cannot be dropped */
}

/* decode at `batch` rows of the same story prompt (tokenised here) */
static double decode_rate(rlp_policy *pol, int32_t weights, uint32_t batch, uint32_t new_tokens,
                          double *prefill_rate)
{
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.weights = weights;
    o.max_batch = batch;
    o.max_seq_len = 512;
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    const char *text = "Once upon a time, in a land far away, there lived a";
    int32_t ids[64];
    size_t n = 0;
    rlp_tokenizer_encode(tok, text, strlen(text), 0, ids, 64, &n);
    return bench_decode_rate(pol, &o, ids, n, 0, batch, new_tokens, prefill_rate);
}

/* llama.cpp's decode tok/s at each batch size, from one run of the Python
 * script (one JSON line per batch size); 0 where it gave nothing. Returns
 * how many batch sizes it reported. */
static int llama_cpp_rates(const char *root, const char *model, int threads, uint32_t new_tokens,
                           const uint32_t *batches, int n_batches, double *rates)
{
    char list[256] = "";
    for (int i = 0; i < n_batches; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%u", i ? "," : "", batches[i]);
    const char *py = getenv("RLPOST_BENCH_PYTHON") ? getenv("RLPOST_BENCH_PYTHON") : "python3";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s/tests/bench/llama_cpp_decode.py '%s' %d %u %s 2>/dev/null", py, root, model,
             threads, new_tokens, list);
    for (int i = 0; i < n_batches; i++)
        rates[i] = 0;
    FILE *p = popen(cmd, "r");
    if (!p)
        return 0;
    char line[1024];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        const char *kb = strstr(line, "\"batch\": "), *kr = strstr(line, "\"decode_tok_s\": ");
        if (!kb || !kr)
            continue;
        uint32_t b = (uint32_t)atoi(kb + strlen("\"batch\": "));
        for (int i = 0; i < n_batches; i++)
            if (batches[i] == b) {
                rates[i] = atof(kr + strlen("\"decode_tok_s\": "));
                got++;
            }
    }
    pclose(p);
    return got;
}

/* the 1-minute load average, for reading the figures of a shared machine */
static double load_average(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min / median / max of the positive values among v[0..n) into s[3];
 * returns how many there were */
static int summarise(const double *v, int n, double s[3])
{
    double tmp[MAX_RUNS];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > 0)
            tmp[k++] = v[i];
    s[0] = s[1] = s[2] = 0;
    if (!k)
        return 0;
    qsort(tmp, (size_t)k, sizeof *tmp, cmp_double);
    s[0] = tmp[0];
    s[1] = k % 2 ? tmp[k / 2] : 0.5 * (tmp[k / 2 - 1] + tmp[k / 2]);
    s[2] = tmp[k - 1];
    return k;
}

int main(int argc, char **argv)
{
    rlpost_select_blas_kernels(argv);
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    uint32_t new_tokens = argc > 2 ? (uint32_t)atoi(argv[2]) : 64;
    const char *root = getenv("RLPOST_SOURCE_ROOT") ? getenv("RLPOST_SOURCE_ROOT") : ".";
    char path[4096];
    if (argc > 3)
        snprintf(path, sizeof path, "%s", argv[3]);
    else
        snprintf(path, sizeof path, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", root);
    int runs = getenv("RLPOST_BENCH_RUNS") ? atoi(getenv("RLPOST_BENCH_RUNS")) : 3;
    if (runs < 1 || runs > MAX_RUNS)
        runs = 3;
    uint32_t batches[MAX_BATCHES] = {1, 8, 32, 64};
    int n_batches = 4;
    if (getenv("RLPOST_BENCH_BATCHES")) {
        n_batches = 0;
        for (const char *s = getenv("RLPOST_BENCH_BATCHES"); *s && n_batches < MAX_BATCHES;) {
            char *end;
            long b = strtol(s, &end, 10);
            if (end == s)
                break;
            if (b > 0 && b <= 4096)
                batches[n_batches++] = (uint32_t)b;
            s = *end == ',' ? end + 1 : end;
        }
        if (!n_batches) {
            fprintf(stderr, "bench_decode: RLPOST_BENCH_BATCHES has no batch size\n");
            return 2;
        }
    }

    const char *wname = getenv("RLPOST_BENCH_WEIGHTS") ? getenv("RLPOST_BENCH_WEIGHTS") : "f32";
    int32_t weights = !strcmp(wname, "f32")    ? RLP_ROLLOUT_WEIGHTS_F32
                      : !strcmp(wname, "q8_0") ? RLP_ROLLOUT_WEIGHTS_Q8_0
                      : !strcmp(wname, "q4_0") ? RLP_ROLLOUT_WEIGHTS_Q4_0
                      : !strcmp(wname, "auto") ? RLP_ROLLOUT_WEIGHTS_AUTO
                                               : -1;
    if (weights < 0) {
        fprintf(stderr, "bench_decode: RLPOST_BENCH_WEIGHTS: f32, q8_0, q4_0 or auto, not \"%s\"\n", wname);
        return 2;
    }

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
    const char *kernels = getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "OpenBLAS default";
    printf("decode on %s, %d threads, %u new tokens per sequence, %s weights, %s kernels, %d runs, "
           "load average %.2f\n", path, threads, new_tokens, wname, kernels, runs, load_average());
    printf("%4s %6s %14s %14s %14s %10s\n", "run", "batch", "decode tok/s", "prefill tok/s", "llama.cpp", "ratio");
    static double ours[MAX_BATCHES][MAX_RUNS], theirs[MAX_BATCHES][MAX_RUNS], ratio[MAX_BATCHES][MAX_RUNS];
    static double membw[MAX_RUNS];
    int have_llama = 0;
    for (int r = 0; r < runs; r++) {
        double pf[MAX_BATCHES];
        for (int i = 0; i < n_batches; i++)
            ours[i][r] = decode_rate(pol, weights, batches[i], new_tokens, &pf[i]);
        double lc[MAX_BATCHES];
        have_llama |= llama_cpp_rates(root, path, threads, new_tokens, batches, n_batches, lc) > 0;
        for (int i = 0; i < n_batches; i++) {
            theirs[i][r] = lc[i];
            ratio[i][r] = lc[i] > 0 ? ours[i][r] / lc[i] : 0;
            printf("%4d %6u %14.1f %14.1f %14.1f %9.2fx\n", r + 1, batches[i], ours[i][r], pf[i], lc[i],
                   ratio[i][r]);
        }
        membw[r] = read_rate(threads);
        printf("%4d memory read, %d threads: %.1f GB/s\n", r + 1, threads, membw[r]);
        fflush(stdout);
    }
    printf("\nload average at the end: %.2f\n", load_average());
    printf("min / median / max over %d runs; llama.cpp = llama-cpp-python, the GGUF's own Q4_1/Q8_0 weights, "
           "B sequences in one llama_decode per step\n", runs);
    printf("%6s %24s %24s %24s\n", "batch", "ours tok/s", "llama.cpp tok/s", "ours / llama.cpp");
    for (int i = 0; i < n_batches; i++) {
        double a[3], b[3], c[3];
        summarise(ours[i], runs, a);
        char col_b[64] = "-", col_c[64] = "-";
        if (summarise(theirs[i], runs, b)) {
            snprintf(col_b, sizeof col_b, "%.1f / %.1f / %.1f", b[0], b[1], b[2]);
            summarise(ratio[i], runs, c);
            snprintf(col_c, sizeof col_c, "%.2f / %.2f / %.2fx", c[0], c[1], c[2]);
        }
        printf("%6u %8.1f / %.1f / %.1f %24s %24s\n", batches[i], a[0], a[1], a[2], col_b, col_c);
    }
    double bw[3];
    if (summarise(membw, runs, bw))
        printf("memory read, %d threads, 256 MiB: %.1f / %.1f / %.1f GB/s (batch 1 streams the whole rollout copy "
               "each token: this rate / its bytes bounds batch-1 tok/s)\n",
               threads, bw[0], bw[1], bw[2]);
    if (!have_llama)
        printf("llama.cpp baseline skipped (%s -c 'import llama_cpp' failed; set RLPOST_BENCH_PYTHON)\n",
               getenv("RLPOST_BENCH_PYTHON") ? getenv("RLPOST_BENCH_PYTHON") : "python3");
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    return 0;
}
