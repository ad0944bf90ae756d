/* custom_reward.c — write a reward in C and score a batch with it.
 *
 * The reward below grades arithmetic answers: 1 when the integer inside
 * <answer>…</answer> equals the "reference" of the prompt's metadata, 0
 * otherwise, minus a small penalty per byte past 200 (keep it short). It
 * says "cannot judge" (the sample becomes invalid, not 0) when there is no
 * reference. It is then combined with the built-in Logic-RL format reward,
 * and a batch of hand-written completions is scored. Uses only rlpost.h.
 *
 *   build: part of the examples (meson); run: ./custom_reward
 *   prints one JSON line per trajectory, then the counts.
 */
#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the callback may read: shared, read-only after setup. It runs on
 * the reward function's worker threads, several at once, so anything it
 * writes must be thread-safe. */
typedef struct grader {
    double penalty_per_byte;
    size_t free_bytes;
} grader;

/* The callback: fill `out` from `req`. Returning non-zero would mark the
 * sample invalid with out->reason; so would a NaN score or running past
 * the handle's timeout — the rest of the batch is scored regardless. */
static int grade(rlp_reward_result *out, const rlp_reward_request *req, void *payload)
{
    const grader *g = payload;
    if (!req->reference) { /* req->reference is the metadata's "reference" */
        out->valid = 0;
        snprintf(out->reason, sizeof out->reason, "cannot judge: no reference");
        return 0;
    }
    const char *open = strstr(req->completion_text, "<answer>");
    const char *close = open ? strstr(open, "</answer>") : NULL;
    long got = 0, want = strtol(req->reference, NULL, 10);
    int found = open && close && sscanf(open + 8, " %ld", &got) == 1;
    out->score = found && got == want ? 1.0 : 0.0;
    if (req->completion_len > g->free_bytes)
        out->score -= g->penalty_per_byte * (double)(req->completion_len - g->free_bytes);
    snprintf(out->reason, sizeof out->reason, "%s", !found ? "no answer" : got == want ? "right" : "wrong");
    return 0;
}

static int check(int rc, const char *what)
{
    if (rc != RLP_OK) {
        fprintf(stderr, "custom_reward: %s: %s (%s)\n", what, rlp_error_last(), rlp_status_str(rc));
        exit(1);
    }
    return rc;
}

int main(void)
{
    /* 1. The reward function: our callback, 2 worker threads, 1 s per call. */
    static grader g = {0.001, 200};
    rlp_reward_options opts = RLP_REWARD_OPTIONS_INIT;
    opts.name = "arith";
    opts.n_threads = 2;
    opts.timeout_ms = 1000;
    rlp_reward_fn *arith = NULL, *format = NULL, *total = NULL;
    check(rlp_reward_fn_create_callback(&arith, grade, &opts, &g), "create callback");

    /* 2. Combined with a built-in: total = 1.0·arith + 0.5·format. The
     *    combination owns both handles from here on. */
    check(rlp_reward_fn_create_builtin(&format, "logic_rl_format", "{\"threads\": 1}"), "create built-in");
    rlp_reward_fn *members[2] = {arith, format};
    const double weights[2] = {1.0, 0.5};
    check(rlp_reward_fn_combine(&total, members, weights, 2), "combine");

    /* 3. A batch, as a rollout engine would return it (built by hand here). */
    static const struct {
        const char *completion, *metadata;
    } samples[] = {
        {"<think>17 * 23 = 391</think><answer>391</answer>", "{\"reference\": \"391\"}"},
        {"<think>17 * 23 = 381?</think><answer>381</answer>", "{\"reference\": \"391\"}"},
        {"391", "{\"reference\": \"391\"}"},
        {"<think>no idea</think><answer>42</answer>", NULL},
    };
    size_t n = sizeof samples / sizeof samples[0];
    rlp_batch *batch = NULL;
    check(rlp_batch_create(&batch), "batch");
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        t.group_id = 1;
        t.sample_index = (uint32_t)i;
        t.prompt_text = "What is 17 * 23?";
        t.completion_text = samples[i].completion;
        t.metadata_json = samples[i].metadata;
        t.finish_reason = RLP_FINISH_STOP;
        t.stop_index = -1;
        t.temperature = 1.0f;
        check(rlp_batch_append(batch, &t), "append");
    }

    /* 4. Score: every trajectory gets a reward or is marked invalid. */
    rlp_reward_stats st;
    memset(&st, 0, sizeof st);
    st.version = RLP_REWARD_STATS_VERSION;
    check(rlp_reward_fn_score(total, batch, &st), "score");
    for (size_t i = 0; i < n; i++) {
        rlp_trajectory t;
        memset(&t, 0, sizeof t);
        t.version = RLP_TRAJECTORY_VERSION;
        check(rlp_batch_get(&t, batch, i), "get");
        if (t.valid)
            printf("{\"sample\": %zu, \"reward\": %g}\n", i, (double)t.reward);
        else
            printf("{\"sample\": %zu, \"invalid\": \"%s\"}\n", i, t.error);
    }
    printf("{\"valid\": %llu, \"invalid\": %llu, \"mean\": %g}\n", (unsigned long long)st.valid,
           (unsigned long long)st.invalid, st.mean_score);

    /* Right answer with the format: 1 + 0.5; wrong: 0 + 0.5; no tags:
     * 0 - 0.5; no reference: invalid. */
    int ok = st.valid == 3 && st.invalid == 1 && st.mean_score == (1.5 + 0.5 - 0.5) / 3;
    rlp_batch_free(batch);
    rlp_reward_fn_free(total);
    return ok ? 0 : 1;
}
