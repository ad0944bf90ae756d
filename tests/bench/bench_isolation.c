/* Process-isolated rewards against in-process ones: the same cheap reward
 * library (tests/unit/reward_crashy.c; a sample's score is its length) and
 * batch of N completions of 256 bytes, scored through rlp_reward_fn_score
 * by the library's own handle in-process (1 worker thread) and through
 * rlp_reward_fn_create_isolated() with 1 and 2 worker processes at
 * several samples per request. Prints µs per sample, the overhead per
 * sample over in-process and the ratio (best of REPEATS, measured in the
 * same run). Asserts nothing.
 *   bench_isolation CRASHY_LIBRARY [N [REPEATS]] */
#include "rlpost.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COMPLETION_BYTES 256

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static rlp_batch *make_batch(size_t n)
{
    rlp_batch *batch = NULL;
    rlp_batch_create(&batch);
    char text[COMPLETION_BYTES + 1];
    int32_t toks[64];
    float lps[64];
    for (size_t k = 0; k < 64; k++) {
        toks[k] = (int32_t)k;
        lps[k] = -1.0f;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < COMPLETION_BYTES; k++)
            text[k] = (char)('a' + (i + k) % 26);
        text[COMPLETION_BYTES] = '\0';
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = i / 8 + 1;
        t.sample_index = (uint32_t)(i % 8);
        t.prompt_text = "Write 256 letters.";
        t.completion_text = text;
        t.completion_tokens = toks;
        t.n_completion_tokens = 64;
        t.logprobs = lps;
        t.metadata_json = "{\"reference\": \"x\"}";
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

/* Best of repeats: seconds per sample. */
static double per_sample(rlp_reward_fn *fn, rlp_batch *batch, size_t n, int repeats)
{
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    rlp_reward_fn_score(fn, batch, &st); /* warm-up: threads, pages */
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double t0 = now_s();
        if (rlp_reward_fn_score(fn, batch, &st) != RLP_OK) {
            fprintf(stderr, "score: %s\n", rlp_error_last());
            exit(1);
        }
        double v = (now_s() - t0) / (double)n;
        best = v < best ? v : best;
    }
    if (st.valid != n || st.mean_score != COMPLETION_BYTES)
        fprintf(stderr, "warning: %llu of %zu valid, mean %g\n", (unsigned long long)st.valid, n, st.mean_score);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CRASHY_LIBRARY [N [REPEATS]]\n", argv[0]);
        return 1;
    }
    const char *lib = argv[1];
    size_t n = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 20000;
    int repeats = argc > 3 && atoi(argv[3]) > 0 ? atoi(argv[3]) : 3;
    rlp_batch *batch = make_batch(n);

    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    int (*entry)(rlp_reward_fn **, const char *);
    *(void **)&entry = h ? dlsym(h, "rlpost_reward_create") : NULL;
    rlp_reward_fn *inproc = NULL;
    if (!entry || entry(&inproc, NULL) != RLP_OK) {
        fprintf(stderr, "%s: %s\n", lib, h ? rlp_error_last() : dlerror());
        return 1;
    }
    double base = per_sample(inproc, batch, n, repeats);
    rlp_reward_fn_free(inproc);

    printf("process-isolated vs in-process reward, %zu samples of %d bytes + 64 tokens, cheap callback "
           "(best of %d)\n", n, COMPLETION_BYTES, repeats);
    printf("%-34s %12s %16s %8s\n", "configuration", "us/sample", "overhead us/smp", "ratio");
    printf("%-34s %12.2f %16s %7.2fx\n", "in-process (thread), 1 thread", base * 1e6, "-", 1.0);
    static const uint32_t workers[] = {1, 1, 1, 1, 2};
    static const uint32_t batches[] = {1, 8, 64, 256, 64};
    for (size_t k = 0; k < sizeof workers / sizeof *workers; k++) {
        rlp_isolation_options o = RLP_ISOLATION_OPTIONS_INIT;
        o.n_workers = workers[k];
        o.batch_size = batches[k];
        rlp_reward_fn *fn = NULL;
        if (rlp_reward_fn_create_isolated(&fn, lib, NULL, &o) != RLP_OK) {
            fprintf(stderr, "isolated: %s\n", rlp_error_last());
            return 1;
        }
        double t = per_sample(fn, batch, n, repeats);
        rlp_reward_fn_free(fn);
        char label[64];
        snprintf(label, sizeof label, "process, %u worker%s, %u/request", workers[k], workers[k] > 1 ? "s" : "",
                 batches[k]);
        printf("%-34s %12.2f %16.2f %7.2fx\n", label, t * 1e6, (t - base) * 1e6, t / base);
    }
    rlp_batch_free(batch);
    return 0;
}
