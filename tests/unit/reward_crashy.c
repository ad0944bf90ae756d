/* A hostile reward library for tests/unit/test_reward_isolated.c and
 * tests/bench/bench_isolation.c, loaded like `reward.library`. What a
 * sample's completion text says is what its callback does:
 *   "segv"    dereferences NULL        "abort"  calls abort()
 *   "recurse" recurses without end (stack overflow)
 *   "hang"    never returns            "exit"   calls _exit(3)
 *   "error"   returns 1                "nan"    scores NaN
 *   "ref"     scores the reference as a number
 *   "tokens"  gives per-token scores (the token ids) and scores 2
 * anything else scores its length in bytes. Options (compact JSON, as
 * `rlpost train` passes them): {"pid_file":P} writes the worker's pid to P
 * at creation; {"segv_if":S} dereferences NULL on every sample whose
 * completion contains S (for runs on a real model's text). Built without sanitizers:
 * the crashes must be the signals themselves, not a sanitizer's report. */
#include <rlpost.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int *volatile null_ptr;
static volatile int never = -1; /* depth that ends the recursion: none */

/* not a tail call: every level keeps a frame */
__attribute__((noinline)) static int recurse(int depth)
{
    if (depth == never)
        return 0;
    volatile char pad[256];
    pad[depth & 255] = (char)depth;
    return recurse(depth + 1) + pad[(depth + 1) & 255];
}

static int score(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    const char *segv_if = payload;
    const char *t = req->completion_text;
    if (segv_if && strstr(t, segv_if))
        *null_ptr = 1;
    if (!strcmp(t, "segv"))
        *null_ptr = 1;
    if (!strcmp(t, "abort"))
        abort();
    if (!strcmp(t, "recurse"))
        res->score = recurse(0);
    if (!strcmp(t, "hang"))
        for (;;)
            pause();
    if (!strcmp(t, "exit"))
        _exit(3);
    if (!strcmp(t, "error")) {
        snprintf(res->reason, sizeof res->reason, "told to fail");
        return 1;
    }
    if (!strcmp(t, "nan")) {
        res->score = 0.0 / 0.0;
        return 0;
    }
    if (!strcmp(t, "ref")) {
        res->score = req->reference ? atof(req->reference) : -1.0;
        return 0;
    }
    if (!strcmp(t, "tokens")) {
        for (size_t i = 0; i < req->n_completion_tokens; i++)
            res->token_scores[i] = (float)req->completion_tokens[i];
        res->has_token_scores = 1;
        res->score = 2.0;
        return 0;
    }
    res->score = (double)req->completion_len;
    return 0;
}

int rlpost_reward_create(rlp_reward_fn **out, const char *options_json);

int rlpost_reward_create(rlp_reward_fn **out, const char *options_json)
{
    const char *p = options_json ? strstr(options_json, "\"pid_file\":\"") : NULL;
    if (p) {
        char path[512];
        p += strlen("\"pid_file\":\"");
        size_t n = strcspn(p, "\"");
        snprintf(path, sizeof path, "%.*s", (int)(n < sizeof path ? n : sizeof path - 1), p);
        FILE *f = fopen(path, "a");
        if (f) {
            fprintf(f, "%ld\n", (long)getpid());
            fclose(f);
        }
    }
    const char *m = options_json ? strstr(options_json, "\"segv_if\":\"") : NULL;
    char *segv_if = NULL;
    if (m) {
        m += strlen("\"segv_if\":\"");
        segv_if = strndup(m, strcspn(m, "\""));
    }
    rlp_reward_options ro = RLP_REWARD_OPTIONS_INIT;
    ro.payload_free = free;
    ro.name = "crashy";
    ro.n_threads = 1;
    ro.timeout_ms = 60000; /* the parent's deadline is the one under test */
    ro.max_abandoned = 64;
    return rlp_reward_fn_create_callback(out, score, &ro, segv_if);
}
