/* Built-in reward throughput on 1 KiB completions: completions per second
 * per thread for logic_rl_format, gsm8k and their combination (format +
 * GSM8K, the target: >= 1e5 /s/thread), through rlp_reward_fn_score on 1
 * and 2 worker threads (the parallel speed-up), and for the verifiers
 * alone without the executor (the cost of copying and handing samples to
 * workers is the difference). Prints figures; asserts nothing.
 *   bench_reward [N_COMPLETIONS [REPEATS]] */
#include "reward/builtin.h"
#include "rlpost.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPLETION_BYTES 1024
static int REPEATS = 3;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A GSM8K-style worked answer of exactly COMPLETION_BYTES bytes. */
static void make_completion(char *buf, size_t i, int *answer)
{
    int a = (int)(i % 97) + 3, b = (int)(i % 13) + 2;
    *answer = a * b + 7;
    char tail[128];
    int nt = snprintf(tail, sizeof tail, "</think>\n<answer>\\boxed{%d}</answer>\n#### %d", *answer,
                      *answer);
    size_t n = (size_t)snprintf(buf, COMPLETION_BYTES, "<think>");
    while (n + 64 < COMPLETION_BYTES - (size_t)nt)
        n += (size_t)snprintf(buf + n, COMPLETION_BYTES - n, "Step: %d * %d = %d, and %d more makes %d. ", a, b, a * b,
                              7, *answer);
    while (n < COMPLETION_BYTES - (size_t)nt)
        buf[n++] = ' ';
    memcpy(buf + n, tail, (size_t)nt + 1);
}

static rlp_batch *make_batch(size_t n)
{
    rlp_batch *batch = NULL;
    rlp_batch_create(&batch);
    char text[COMPLETION_BYTES + 128], meta[64];
    for (size_t i = 0; i < n; i++) {
        int ans;
        make_completion(text, i, &ans);
        snprintf(meta, sizeof meta, "{\"reference\": \"%d\"}", ans);
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = i / 8 + 1;
        t.sample_index = (uint32_t)(i % 8);
        t.prompt_text = "Solve. Show your work in <think> </think> and the answer in <answer> </answer>.";
        t.completion_text = text;
        t.metadata_json = meta;
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        if (rlp_batch_append(batch, &t) != RLP_OK) {
            fprintf(stderr, "append: %s\n", rlp_error_last());
            exit(1);
        }
    }
    return batch;
}

static rlp_reward_fn *builtin(const char *name, int threads)
{
    char opts[64];
    snprintf(opts, sizeof opts, "{\"threads\": %d}", threads);
    rlp_reward_fn *fn = NULL;
    if (rlp_reward_fn_create_builtin(&fn, name, opts) != RLP_OK) {
        fprintf(stderr, "%s: %s\n", name, rlp_error_last());
        exit(1);
    }
    return fn;
}

static rlp_reward_fn *make(const char *what, int threads)
{
    if (strcmp(what, "format+gsm8k") != 0)
        return builtin(what, threads);
    rlp_reward_fn *m[2] = {builtin("logic_rl_format", threads), builtin("gsm8k", threads)};
    rlp_reward_fn *fn = NULL;
    rlp_reward_fn_combine(&fn, m, NULL, 2);
    return fn;
}

/* Best of REPEATS: completions per second through rlp_reward_fn_score. */
static double rate(const char *what, int threads, rlp_batch *batch, size_t n, double expect_mean)
{
    rlp_reward_fn *fn = make(what, threads);
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    rlp_reward_fn_score(fn, batch, &st); /* warm-up: starts the threads */
    double best = 0;
    for (int r = 0; r < REPEATS; r++) {
        double t0 = now_s();
        rlp_reward_fn_score(fn, batch, &st);
        double v = (double)n / (now_s() - t0);
        best = v > best ? v : best;
    }
    if (st.valid != n || fabs(st.mean_score - expect_mean) > 1e-9)
        fprintf(stderr, "warning: %s scored %llu of %zu valid, mean %g (want %g)\n", what,
                (unsigned long long)st.valid, n, st.mean_score, expect_mean);
    rlp_reward_fn_free(fn);
    return best;
}

/* The verifier alone on one thread: the scorer called in a loop. */
static double scorer_rate(const char *name, size_t n)
{
    rlpi_scorer *sc = NULL;
    rlpi_builtin_common common;
    json_t *root = NULL;
    if (rlpi_builtin_create(&sc, &common, &root, name, NULL) != RLP_OK)
        exit(1);
    char *texts = malloc(n * (COMPLETION_BYTES + 128));
    char refs[64];
    rlp_reward_request req;
    rlp_reward_result res;
    for (size_t i = 0; i < n; i++) {
        int ans;
        make_completion(texts + i * (COMPLETION_BYTES + 128), i, &ans);
    }
    double best = 0;
    for (int r = 0; r < REPEATS; r++) {
        double t0 = now_s(), sum = 0;
        for (size_t i = 0; i < n; i++) {
            const char *text = texts + i * (COMPLETION_BYTES + 128);
            int ans = (int)(i % 97 + 3) * (int)(i % 13 + 2) + 7;
            snprintf(refs, sizeof refs, "%d", ans);
            memset(&req, 0, sizeof req);
            req.completion_text = text;
            req.completion_len = strlen(text);
            req.prompt_text = "";
            req.reference = refs;
            memset(&res, 0, sizeof res);
            res.valid = 1;
            uint8_t fail = 0;
            sc->ops->score(sc->impl, &res, &req, 1, &fail);
            sum += res.score;
        }
        double v = (double)n / (now_s() - t0);
        best = v > best ? v : best;
        if (sum != (double)n)
            fprintf(stderr, "warning: %s scorer gave %g of %zu\n", name, sum, n);
    }
    free(texts);
    rlpi_scorer_unref(sc);
    json_decref(root);
    return best;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 20000;
    if (argc > 2) /* more repeats, for a profiler */
        REPEATS = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
    rlp_batch *batch = make_batch(n);
    printf("reward throughput, %zu completions of %d bytes (best of %d)\n", n, COMPLETION_BYTES, REPEATS);
    printf("%-16s %18s %18s %10s\n", "reward", "1 thread /s/thr", "2 threads /s/thr", "speed-up");
    static const char *const what[] = {"logic_rl_format", "gsm8k", "format+gsm8k"};
    static const double mean[] = {1.0, 1.0, 2.0};
    for (int k = 0; k < 3; k++) {
        double r1 = rate(what[k], 1, batch, n, mean[k]);
        double r2 = rate(what[k], 2, batch, n, mean[k]);
        printf("%-16s %18.0f %18.0f %9.2fx\n", what[k], r1, r2 / 2, r2 / r1);
    }
    printf("verifier alone, 1 thread, no executor: logic_rl_format %.0f /s, gsm8k %.0f /s\n",
           scorer_rate("logic_rl_format", n), scorer_rate("gsm8k", n));
    printf("target: format+gsm8k >= 100000 completions/s/thread\n");
    rlp_batch_free(batch);
    return 0;
}
