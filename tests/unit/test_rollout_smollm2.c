/* The rollout engine on SmolLM2-135M-Instruct (GGUF, dequantised fp32):
 * - greedy generation of 64 tokens for 4 prompts (chat-templated and
 *   plain, decoded together) equals the argmax of a cache-free forward at
 *   every step;
 * - behaviour logprobs of T = 1 samples equal the policy's recomputation
 *   within 1e-4 (the engine's train/inference mismatch is printed);
 * - a stop string that the greedy text contains ends generation at the
 *   token that completes it, keeps every sampled id and logprob, and
 *   trims the text at the stop (public-bugs case #6 on a real model).
 * Skipped (77) when the model file is absent (scripts/fetch-model.sh). */
#include "core/error.h"
#include "model/policy.h"
#include "rlpost.h"
#include "test_support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOGPROB_TOL 1e-4

static int failures;
#define CHECK(cond, ...)                                                \
    do {                                                                \
        if (!(cond)) {                                                  \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                               \
            fprintf(stderr, "\n");                                      \
            failures++;                                                 \
        }                                                               \
    } while (0)

static int argmax_mismatches(rlp_policy *p, const rlp_trajectory *t)
{
    int64_t n = (int64_t)(t->n_prompt_tokens + t->n_completion_tokens);
    int32_t *ids = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4), *tg = malloc((size_t)n * 4);
    int32_t *rows = malloc(t->n_completion_tokens * 4);
    memcpy(ids, t->prompt_tokens, t->n_prompt_tokens * 4);
    memcpy(ids + t->n_prompt_tokens, t->completion_tokens, t->n_completion_tokens * 4);
    for (int64_t i = 0; i < n; i++)
        pos[i] = (int32_t)i, tg[i] = -1;
    for (size_t k = 0; k < t->n_completion_tokens; k++)
        rows[k] = (int32_t)(t->n_prompt_tokens - 1 + k);
    int64_t ss[2] = {0, n};
    rlpi_packed_batch b = {1, ss, n, ids, pos, tg};
    const int V = rlpi_transformer_config(p->tf)->vocab_size;
    float *lg = malloc(t->n_completion_tokens * (size_t)V * 4);
    int bad = 0;
    if (rlpi_transformer_logits_rows(p->tf, &b, rows, (int64_t)t->n_completion_tokens, lg) != RLP_OK) {
        fprintf(stderr, "logits: %s\n", rlp_error_last());
        bad = 1000;
    }
    for (size_t k = 0; !bad && k < t->n_completion_tokens; k++) {
        const float *row = lg + k * (size_t)V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        if (best != t->completion_tokens[k]) {
            fprintf(stderr, "  step %zu: engine %d, argmax %d (logits %g vs %g)\n", k, t->completion_tokens[k], best,
                    (double)row[t->completion_tokens[k]], (double)row[best]);
            bad++;
        }
    }
    free(ids), free(pos), free(tg), free(rows), free(lg);
    return bad;
}

/* streamed text per sequence (8 sequences: 4 prompts × 2) */
typedef struct stream_acc {
    char text[8][4096];
    size_t len[8];
    int events[8], finals[8], bad_utf8;
} stream_acc;

static int on_token(const rlp_stream_event *ev, void *payload)
{
    stream_acc *a = payload;
    size_t i = ev->prompt_index * 2 + ev->sample_index;
    if (i >= 8)
        return 0;
    if (ev->text_len && strstr(ev->text, "\xef\xbf\xbd"))
        a->bad_utf8++;
    if (a->len[i] + ev->text_len < sizeof a->text[i]) {
        memcpy(a->text[i] + a->len[i], ev->text, ev->text_len);
        a->len[i] += ev->text_len;
    }
    a->events[i]++;
    a->finals[i] += ev->finish_reason != RLP_FINISH_NONE;
    return 0;
}

int main(void)
{
    char path[4096];
    model_path(path, sizeof path, "SmolLM2-135M-Instruct.Q4_1.gguf");
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("SKIP: %s not found (run scripts/fetch-model.sh)\n", path);
        return 77;
    }
    fclose(f);
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = 2;
    rlp_context *ctx;
    rlp_policy *pol;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, &co) || rlp_policy_load(&pol, ctx, path, &po)) {
        fprintf(stderr, "load: %s\n", rlp_error_last());
        return 1;
    }
    const rlp_tokenizer *tok = rlp_policy_tokenizer(pol);
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.max_batch = 8;
    ro.max_seq_len = 256;
    rlp_rollout_engine *e;
    if (rlp_rollout_engine_create(&e, pol, &ro)) {
        fprintf(stderr, "engine: %s\n", rlp_error_last());
        return 1;
    }
    /* two chat-templated, two plain prompts */
    const char *questions[2] = {"What is 7 times 8? Think step by step.",
                                "Write a haiku about the sea."};
    int32_t chat_ids[2][256];
    size_t chat_n[2];
    for (int i = 0; i < 2; i++) {
        rlp_chat_message m = {"user", questions[i]};
        if (rlp_tokenizer_apply_chat_template(tok, &m, 1, 1, chat_ids[i], 256, &chat_n[i])) {
            fprintf(stderr, "template: %s\n", rlp_error_last());
            return 1;
        }
    }
    rlp_prompt pr[4] = {
        {.tokens = chat_ids[0], .n_tokens = chat_n[0]},
        {.text = "The capital of France is"},
        {.tokens = chat_ids[1], .n_tokens = chat_n[1]},
        {.text = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
    };
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0;
    s.max_new_tokens = 64;
    s.ignore_eos = 1;
    rlp_batch *b;
    if (rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL)) {
        fprintf(stderr, "generate: %s\n", rlp_error_last());
        return 1;
    }
    int total_bad = 0;
    for (size_t i = 0; i < 4; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, b, i);
        CHECK(t.n_completion_tokens == 64, "prompt %zu: %zu tokens", i, t.n_completion_tokens);
        int bad = argmax_mismatches(pol, &t);
        total_bad += bad;
        printf("greedy prompt %zu: %zu tokens, %d argmax mismatches: %.60s…\n", i, t.n_completion_tokens, bad,
               t.completion_text);
    }
    CHECK(total_bad == 0, "%d greedy tokens differ from the cache-free argmax", total_bad);
    rlp_mismatch_stats mm;
    CHECK(rlp_batch_logprob_mismatch(&mm, b, pol) == RLP_OK, "mismatch: %s", rlp_error_last());
    printf("greedy logprobs vs policy: mean %.3g, max %.3g over %llu tokens\n", mm.mean_abs, mm.max_abs,
           (unsigned long long)mm.n_tokens);
    CHECK(mm.max_abs < LOGPROB_TOL, "greedy logprob mismatch %g", mm.max_abs);

    /* stop string taken from the greedy text of prompt 1, across tokens */
    rlp_trajectory g1 = {.version = RLP_TRAJECTORY_VERSION};
    rlp_batch_get(&g1, b, 1);
    char stop[16] = {0};
    size_t glen = strlen(g1.completion_text);
    /* a 5-byte stop starting mid-text, at a position unlikely to be a token boundary */
    size_t at = glen > 20 ? glen / 3 + 1 : 0;
    memcpy(stop, g1.completion_text + at, glen > at + 5 ? 5 : 0);
    if (stop[0]) {
        const char *stops[1] = {stop};
        rlp_sampling_options s2 = s;
        s2.stop = stops;
        s2.n_stop = 1;
        rlp_batch *b2;
        CHECK(rlp_rollout_generate(&b2, e, &pr[1], 1, &s2, NULL, NULL) == RLP_OK, "%s", rlp_error_last());
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, b2, 0);
        const char *first = strstr(g1.completion_text, stop);
        size_t want_len = (size_t)(first - g1.completion_text);
        CHECK(t.finish_reason == RLP_FINISH_STOP && t.stop_index == 0, "stop: finish %d index %d", t.finish_reason,
              t.stop_index);
        CHECK(strlen(t.completion_text) == want_len && !strncmp(t.completion_text, g1.completion_text, want_len),
              "stop text '%s' (want the first %zu bytes of the greedy text)", t.completion_text, want_len);
        /* ids: a prefix of the greedy ids, ending at the token that completes the stop */
        CHECK(t.n_completion_tokens <= g1.n_completion_tokens &&
                  !memcmp(t.completion_tokens, g1.completion_tokens, t.n_completion_tokens * 4),
              "stop ids are not a prefix of the greedy ids");
        char dec[4096];
        size_t dn = 0;
        rlp_tokenizer_decode(tok, t.completion_tokens, t.n_completion_tokens, 0, dec, sizeof dec, &dn);
        dec[dn < sizeof dec ? dn : sizeof dec - 1] = 0;
        CHECK(strstr(dec, stop) != NULL, "the kept ids '%s' do not contain the stop", dec);
        if (t.n_completion_tokens > 1) {
            rlp_tokenizer_decode(tok, t.completion_tokens, t.n_completion_tokens - 1, 0, dec, sizeof dec, &dn);
            dec[dn < sizeof dec ? dn : sizeof dec - 1] = 0;
            CHECK(strstr(dec, stop) == NULL, "generation ran past the token that completed the stop");
        }
        printf("stop '%s': %zu ids kept, text '%s'\n", stop, t.n_completion_tokens, t.completion_text);
        rlp_batch_free(b2);
    }
    rlp_batch_free(b);

    /* T = 1 samples: behaviour logprobs vs the policy at T = 1 */
    s.temperature = 1.0f;
    s.seed = 3;
    s.n = 2;
    s.max_new_tokens = 48;
    rlp_batch *b3;
    static stream_acc acc;
    CHECK(rlp_rollout_generate(&b3, e, pr, 4, &s, on_token, &acc) == RLP_OK, "%s", rlp_error_last());
    /* the stream shows exactly the final text, piece by piece (case #2) */
    for (size_t i = 0; i < 8; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        rlp_batch_get(&t, b3, i);
        CHECK(acc.len[i] == strlen(t.completion_text) && !memcmp(acc.text[i], t.completion_text, acc.len[i]),
              "sequence %zu: streamed text differs from the final text", i);
        CHECK(acc.finals[i] == 1, "sequence %zu: %d final events", i, acc.finals[i]);
        CHECK(acc.events[i] == (int)t.n_completion_tokens + 1, "sequence %zu: %d events for %zu tokens", i,
              acc.events[i], t.n_completion_tokens);
    }
    CHECK(acc.bad_utf8 == 0, "a streamed delta contained U+FFFD");
    CHECK(rlp_batch_logprob_mismatch(&mm, b3, pol) == RLP_OK, "mismatch: %s", rlp_error_last());
    printf("T=1 behaviour logprobs vs policy: mean %.3g, max %.3g, mean |ratio-1| %.3g over %llu tokens\n",
           mm.mean_abs, mm.max_abs, mm.mean_ratio_dev, (unsigned long long)mm.n_tokens);
    CHECK(mm.max_abs < LOGPROB_TOL, "sampled logprob mismatch %g", mm.max_abs);
    rlp_rollout_stats st = {0};
    rlp_rollout_engine_stats(&st, e);
    printf("engine: %llu prefill tokens in %.2f s, %llu decode tokens in %.2f s (%llu steps)\n",
           (unsigned long long)st.prefill_tokens, st.prefill_seconds, (unsigned long long)st.decode_tokens,
           st.decode_seconds, (unsigned long long)st.decode_steps);
    rlp_batch_free(b3);
    rlp_rollout_engine_free(e);
    rlp_policy_free(pol);
    rlp_context_free(ctx);
    if (failures)
        fprintf(stderr, "%d failures\n", failures);
    return failures ? 1 : 0;
}
