/* `rlpost generate MODEL --prompt P [--prompt P]... [--chat] [--system S]
 *   [--assistant-prefix A] [--no-thinking] [--temperature x] [--top-p x] [--top-k k] [--min-p x] [--max-new-tokens n]
 *   [--n k] [--seed s] [--stop STR]... [--max-batch b] [--threads t]
 *   [--weights f32|q8_0|q4_0|auto] [--matmul-precision fp32|bf16|tf32|auto]`:
 * samples completions with the local rollout engine and prints one JSON
 * object: per sample its text, token ids, behaviour logprobs, finish reason
 * and policy version, and the engine's prefill/decode counters. With --chat
 * each prompt is one user message of the model's chat template (after an
 * optional system message); the message text is never parsed for special
 * tokens (public-bugs case #1). --assistant-prefix opens the assistant's
 * turn with plain text (no special tokens), as a task's "assistant_prefix"
 * does, so a checkpoint can be replayed on exactly its training prompt.
 * --no-thinking renders Qwen3's non-thinking generation prompt (its
 * template's enable_thinking=False; other templates ignore it). */
#include "cli_args.h"
#include "commands.h"
#include "json_out.h"
#include "model_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PROMPTS 256
#define MAX_STOPS 16

static void usage(void)
{
    fprintf(stderr,
            "usage: rlpost generate MODEL --prompt P [--prompt P]... [--chat] [--system S]\n"
            "         [--assistant-prefix A] [--no-thinking] [--temperature x] [--top-p x] [--top-k k] [--min-p x] [--max-new-tokens n]\n"
            "         [--n k] [--seed s] [--stop STR]... [--max-batch b] [--threads t] [--weights f32|q8_0|q4_0|auto]\n"
            "         [--matmul-precision fp32|bf16|tf32|auto]\n");
}


static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_ids(const int32_t *ids, size_t n)
{
    printf("[");
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]");
}

static void print_stats(const rlp_rollout_stats *st, double wall)
{
    printf("{\"prompts\": %llu, \"completions\": %llu, \"prefill_tokens\": %llu, \"decode_tokens\": %llu, "
           "\"decode_steps\": %llu, \"prefill_seconds\": %.6f, \"decode_seconds\": %.6f, "
           "\"prefill_tokens_per_s\": %.3f, \"decode_tokens_per_s\": %.3f, \"wall_seconds\": %.6f}",
           (unsigned long long)st->prompts, (unsigned long long)st->completions,
           (unsigned long long)st->prefill_tokens, (unsigned long long)st->decode_tokens,
           (unsigned long long)st->decode_steps, st->prefill_seconds, st->decode_seconds,
           st->prefill_seconds > 0 ? (double)st->prefill_tokens / st->prefill_seconds : 0.0,
           st->decode_seconds > 0 ? (double)st->decode_tokens / st->decode_seconds : 0.0, wall);
}

/* ids (n of them, malloc'd) followed by the plain-text encoding of
 * prefix: a new array (ids is freed), or NULL with a message printed. */
static int32_t *append_prefix(const rlp_tokenizer *tok, int32_t *ids, size_t *n, const char *prefix)
{
    size_t m = 0;
    int32_t *more = encode_text(tok, prefix, 0, &m);
    int32_t *all = more ? realloc(ids, (*n + m) * sizeof *ids) : NULL;
    if (!all) {
        if (more)
            fprintf(stderr, "rlpost generate: out of memory\n");
        free(ids);
        free(more);
        return NULL;
    }
    memcpy(all + *n, more, m * sizeof *more);
    *n += m;
    free(more);
    return all;
}

/* The batch as JSON (prompt-major, as rlp_rollout_generate returns it). */
static int print_result(const char *model, const rlp_batch *batch, const rlp_prompt *prompts,
                        const char *const *texts, size_t n_prompts, const rlp_sampling_options *so,
                        uint64_t version, const rlp_rollout_stats *st, double wall)
{
    size_t count = 0, non_finite = 0;
    if (rlp_batch_size(&count, batch) != RLP_OK)
        return -1;
    printf("{\"model\": ");
    json_print_string(stdout, model);
    printf(", \"policy_version\": %llu, \"sampling\": {\"n\": %u, \"temperature\": %g, \"top_p\": %g, "
           "\"top_k\": %d, \"min_p\": %g, \"max_new_tokens\": %u, \"seed\": %llu, \"stop\": [",
           (unsigned long long)version, so->n, (double)so->temperature, (double)so->top_p, so->top_k,
           (double)so->min_p, so->max_new_tokens, (unsigned long long)so->seed);
    for (size_t i = 0; i < so->n_stop; i++) {
        printf("%s", i ? ", " : "");
        json_print_string(stdout, so->stop[i]);
    }
    printf("]}, \"prompts\": [");
    for (size_t p = 0; p < n_prompts; p++) {
        printf("%s{\"text\": ", p ? ", " : "");
        json_print_string(stdout, texts[p]);
        printf(", \"tokens\": ");
        print_ids(prompts[p].tokens, prompts[p].n_tokens);
        printf("}");
    }
    printf("], \"completions\": [");
    for (size_t i = 0; i < count; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        if (rlp_batch_get(&t, batch, i) != RLP_OK)
            return -1;
        printf("%s\n  {\"prompt_index\": %zu, \"sample_index\": %zu, \"text\": ", i ? "," : "", i / so->n,
               i % so->n);
        json_print_string(stdout, t.completion_text ? t.completion_text : "");
        printf(", \"tokens\": ");
        print_ids(t.completion_tokens, t.n_completion_tokens);
        printf(", \"logprobs\": [");
        for (size_t k = 0; k < t.n_completion_tokens; k++) {
            printf("%s", k ? ", " : "");
            json_print_number(stdout, "%.9g", (double)t.logprobs[k], &non_finite);
        }
        const char *fr = finish_reason_name(t.finish_reason);
        printf("], \"finish_reason\": \"%s\", \"stop_index\": %d, \"policy_version\": %llu}",
               fr ? fr : "none", t.stop_index, (unsigned long long)t.policy_version);
    }
    printf("\n], \"non_finite_values\": %zu, \"stats\": ", non_finite);
    print_stats(st, wall);
    printf("}\n");
    if (non_finite)
        fprintf(stderr, "rlpost generate: %zu logprobs are NaN or infinite (printed as null)\n", non_finite);
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    const char *model = NULL, *system = NULL, *prefix = NULL;
    const char *texts[MAX_PROMPTS], *stops[MAX_STOPS];
    size_t n_prompts = 0, n_stops = 0;
    int chat = 0, bad = 0, no_thinking = 0;
    int weights = RLP_ROLLOUT_WEIGHTS_F32, matmul = RLP_MATMUL_FP32;
    long long threads = 0, max_batch = 32, v;
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    for (int i = 2; i < argc && !bad; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (!strcmp(a, "--chat"))
            chat = 1, takes = 0;
        else if (!strcmp(a, "--no-thinking"))
            no_thinking = 1, takes = 0;
        else if (!val && a[0] == '-')
            bad = 1;
        else if (!strcmp(a, "--prompt"))
            bad = n_prompts == MAX_PROMPTS || !(texts[n_prompts++] = val);
        else if (!strcmp(a, "--system"))
            system = val;
        else if (!strcmp(a, "--assistant-prefix"))
            prefix = val;
        else if (!strcmp(a, "--stop"))
            bad = n_stops == MAX_STOPS || !*val || !(stops[n_stops++] = val);
        else if (!strcmp(a, "--temperature"))
            bad = cli_float(val, 0, 1e4, &so.temperature);
        else if (!strcmp(a, "--top-p"))
            bad = cli_float(val, 1e-9, 1, &so.top_p);
        else if (!strcmp(a, "--min-p"))
            bad = cli_float(val, 0, 1, &so.min_p);
        else if (!strcmp(a, "--top-k"))
            bad = cli_int(val, 0, INT32_MAX, &v) || ((so.top_k = (int32_t)v), 0);
        else if (!strcmp(a, "--max-new-tokens"))
            bad = cli_int(val, 1, 1 << 20, &v) || ((so.max_new_tokens = (uint32_t)v), 0);
        else if (!strcmp(a, "--n"))
            bad = cli_int(val, 1, 65536, &v) || ((so.n = (uint32_t)v), 0);
        else if (!strcmp(a, "--seed"))
            bad = cli_u64(val, &so.seed);
        else if (!strcmp(a, "--max-batch"))
            bad = cli_int(val, 1, 4096, &max_batch);
        else if (!strcmp(a, "--threads"))
            bad = cli_int(val, 0, 1024, &threads);
        else if (!strcmp(a, "--weights"))
            bad = (weights = cli_rollout_weights(val)) < 0;
        else if (!strcmp(a, "--matmul-precision"))
            bad = (matmul = cli_matmul_precision(val)) < 0;
        else if (!model && a[0] != '-')
            model = a, takes = 0;
        else
            bad = 1;
        if (bad)
            fprintf(stderr, "rlpost generate: bad argument '%s'%s%s\n", a, val && takes ? " " : "",
                    val && takes ? val : "");
        i += takes;
    }
    if (bad || !model || n_prompts == 0 || ((system || prefix || no_thinking) && !chat)) {
        if ((system || prefix || no_thinking) && !chat)
            fprintf(stderr, "rlpost generate: %s needs --chat\n",
                    system ? "--system" : prefix ? "--assistant-prefix" : "--no-thinking");
        usage();
        return EXIT_USAGE;
    }
    so.stop = stops;
    so.n_stop = n_stops;

    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = (int32_t)threads;
    co.matmul_precision = matmul;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    rlp_rollout_options ro = RLP_ROLLOUT_OPTIONS_INIT;
    ro.weights = weights;
    ro.share_weights = 1; /* nothing trains here: no copy of the weights */
    rlp_context *ctx = NULL;
    rlp_policy *policy = NULL;
    rlp_rollout_engine *engine = NULL;
    rlp_batch *batch = NULL;
    rlp_prompt prompts[MAX_PROMPTS];
    int32_t *ids[MAX_PROMPTS] = {0};
    size_t longest = 0;
    int status = 1;
    rlp_model_info mi = {.version = RLP_MODEL_INFO_VERSION};
    if (rlp_model_inspect(&mi, model) != RLP_OK || rlp_context_create(&ctx, &co) != RLP_OK ||
        rlp_policy_load(&policy, ctx, model, &po) != RLP_OK) {
        fprintf(stderr, "rlpost generate: %s\n", rlp_error_last());
        goto done;
    }
    const rlp_tokenizer *tok = rlp_policy_tokenizer(policy);
    if (!tok) {
        fprintf(stderr, "rlpost generate: %s has no tokenizer\n", model);
        goto done;
    }
    for (size_t p = 0; p < n_prompts; p++) {
        size_t n = 0;
        if (chat) {
            rlp_chat_message msgs[2] = {{"system", system}, {"user", texts[p]}};
            rlp_chat_options copts = RLP_CHAT_OPTIONS_INIT;
            copts.enable_thinking = !no_thinking;
            ids[p] = system ? encode_chat_messages_opts(tok, msgs, 2, &copts, &n)
                            : encode_chat_messages_opts(tok, msgs + 1, 1, &copts, &n);
            if (ids[p] && prefix && *prefix && !(ids[p] = append_prefix(tok, ids[p], &n, prefix)))
                goto done;
        } else {
            /* plain text, as the engine encodes rlp_prompt::text: the tokenizer's own BOS
             * setting, no special tokens */
            ids[p] = encode_text(tok, texts[p], RLP_ENCODE_DEFAULT_BOS, &n);
        }
        if (!ids[p])
            goto done;
        if (n == 0) {
            fprintf(stderr, "rlpost generate: prompt %zu encodes to no tokens\n", p);
            status = EXIT_USAGE;
            goto done;
        }
        prompts[p] = (rlp_prompt){.tokens = ids[p], .n_tokens = n};
        longest = n > longest ? n : longest;
    }
    /* a KV cache for this work only: no more slots than samples, no longer
     * than the longest prompt plus the completion (within the context) */
    uint64_t samples = (uint64_t)n_prompts * so.n, need = (uint64_t)longest + so.max_new_tokens;
    uint64_t ctx_len = mi.context_length > 1 ? (uint64_t)mi.context_length : 2048;
    ro.max_batch = samples < (uint64_t)max_batch ? (uint32_t)samples : (uint32_t)max_batch;
    ro.max_seq_len = (uint32_t)(need < ctx_len ? (need < 2 ? 2 : need) : ctx_len);
    if (rlp_rollout_engine_create(&engine, policy, &ro) != RLP_OK) {
        fprintf(stderr, "rlpost generate: %s\n", rlp_error_last());
        goto done;
    }
    double t0 = now_s();
    if (rlp_rollout_generate(&batch, engine, prompts, n_prompts, &so, NULL, NULL) != RLP_OK) {
        fprintf(stderr, "rlpost generate: %s\n", rlp_error_last());
        status = rlp_error_last_code() == RLP_E_INVALID_ARG ? EXIT_USAGE : 1;
        goto done;
    }
    double wall = now_s() - t0;
    rlp_rollout_stats st = {.version = 1};
    uint64_t version = 0;
    rlp_rollout_engine_stats(&st, engine);
    rlp_rollout_engine_version(&version, engine);
    if (print_result(model, batch, prompts, texts, n_prompts, &so, version, &st, wall) != 0)
        fprintf(stderr, "rlpost generate: %s\n", rlp_error_last());
    else
        status = 0;
done:
    rlp_batch_free(batch);
    for (size_t p = 0; p < n_prompts; p++)
        free(ids[p]);
    rlp_rollout_engine_free(engine);
    rlp_policy_free(policy);
    rlp_context_free(ctx);
    return status;
}
