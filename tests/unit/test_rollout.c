/* The local rollout engine on a tiny random Llama (no tokenizer):
 * greedy decoding equals the argmax of a cache-free forward at every step,
 * whatever max_batch (continuous batching) or group size (shared prefill);
 * recorded behaviour logprobs equal the policy's recomputation at the same
 * temperature (public-bugs case #5) within 1e-4; seeded sampling gives the
 * same tokens whatever the rest of the batch, max_batch or thread count;
 * stop ids, length, stream aborts and interruptible generation (AReaL) in
 * both modes; bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/batch.h"
#include "core/error.h"
#include "model/policy.h"
#include "model/safetensors.h"
#include "rollout/engine.h"
#include "tiny_model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOGPROB_TOL 1e-4

static rlp_context *ctx1, *ctx2;

static rlp_policy *tiny_policy(rlp_context *ctx, uint64_t seed, bool tied)
{
    rlpi_model_config cfg;
    tiny_config(&cfg, "llama", tied);
    rlpi_weights w;
    assert_int_equal(tiny_weights(&cfg, &w, seed), RLP_OK);
    /* sharpen the head so greedy/sampled paths are far from ties */
    rlp_policy *p;
    assert_int_equal(rlpi_policy_create(&p, ctx, &cfg, &w, NULL), RLP_OK);
    rlpi_weights_free(&w);
    return p;
}

static rlp_rollout_engine *engine(rlp_policy *p, uint32_t max_batch, int mode)
{
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_batch = max_batch;
    o.max_seq_len = 96;
    o.interrupt_mode = mode;
    rlp_rollout_engine *e;
    assert_int_equal(rlp_rollout_engine_create(&e, p, &o), RLP_OK);
    return e;
}

static const int32_t P0[] = {5, 9, 17}, P1[] = {1, 2, 3, 4, 5, 6, 7}, P2[] = {33},
                     P3[] = {60, 2, 8, 40, 41, 42, 11, 12, 13, 14, 15, 16};

static void four_prompts(rlp_prompt pr[4])
{
    memset(pr, 0, 4 * sizeof *pr);
    pr[0].tokens = P0, pr[0].n_tokens = 3;
    pr[1].tokens = P1, pr[1].n_tokens = 7;
    pr[2].tokens = P2, pr[2].n_tokens = 1;
    pr[3].tokens = P3, pr[3].n_tokens = 12;
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    return t;
}

static void assert_same_tokens(const rlp_trajectory *a, const rlp_trajectory *b)
{
    assert_int_equal(a->n_completion_tokens, b->n_completion_tokens);
    assert_memory_equal(a->completion_tokens, b->completion_tokens, a->n_completion_tokens * sizeof(int32_t));
}

/* argmax at every completion position of one cache-free forward */
static void check_greedy_from(rlp_policy *p, const rlp_trajectory *t, size_t from)
{
    int64_t n = (int64_t)(t->n_prompt_tokens + t->n_completion_tokens);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *pos = malloc((size_t)n * sizeof *pos);
    int32_t *tg = malloc((size_t)n * sizeof *tg), *rows = malloc(t->n_completion_tokens * sizeof *rows);
    memcpy(ids, t->prompt_tokens, t->n_prompt_tokens * sizeof *ids);
    memcpy(ids + t->n_prompt_tokens, t->completion_tokens, t->n_completion_tokens * sizeof *ids);
    for (int64_t i = 0; i < n; i++)
        pos[i] = (int32_t)i, tg[i] = -1;
    for (size_t k = 0; k < t->n_completion_tokens; k++)
        rows[k] = (int32_t)(t->n_prompt_tokens - 1 + k);
    int64_t ss[2] = {0, n};
    rlpi_packed_batch b = {1, ss, n, ids, pos, tg};
    const int V = rlpi_transformer_config(p->tf)->vocab_size;
    float *logits = malloc(t->n_completion_tokens * (size_t)V * sizeof *logits);
    assert_int_equal(rlpi_transformer_logits_rows(p->tf, &b, rows, (int64_t)t->n_completion_tokens, logits), RLP_OK);
    for (size_t k = from; k < t->n_completion_tokens; k++) {
        const float *row = logits + k * (size_t)V;
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best])
                best = v;
        if (best != t->completion_tokens[k])
            fail_msg("step %zu: engine chose %d, argmax is %d", k, t->completion_tokens[k], best);
    }
    free(ids), free(pos), free(tg), free(rows), free(logits);
}

static void check_greedy(rlp_policy *p, const rlp_trajectory *t)
{
    check_greedy_from(p, t, 0);
}

static void test_greedy_equals_argmax_any_batching(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 11, true);
    rlp_prompt pr[4];
    four_prompts(pr);
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0;
    s.max_new_tokens = 40;
    s.ignore_eos = 1;
    rlp_batch *ref = NULL;
    const uint32_t batches[] = {1, 3, 8};
    for (size_t bi = 0; bi < 3; bi++) {
        rlp_rollout_engine *e = engine(p, batches[bi], RLP_INTERRUPT_RECOMPUTE);
        rlp_batch *b;
        assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
        size_t n;
        assert_int_equal(rlp_batch_size(&n, b), RLP_OK);
        assert_int_equal(n, 4);
        for (size_t i = 0; i < 4; i++) {
            rlp_trajectory t = get(b, i);
            assert_int_equal(t.n_completion_tokens, 40);
            assert_int_equal(t.finish_reason, RLP_FINISH_LENGTH);
            assert_int_equal(t.n_prompt_tokens, pr[i].n_tokens);
            if (!ref)
                check_greedy(p, &t);
            else {
                rlp_trajectory r = get(ref, i);
                assert_same_tokens(&t, &r);
            }
        }
        /* greedy records log_softmax(logits) (T = 1): the policy agrees */
        rlp_mismatch_stats mm;
        assert_int_equal(rlp_batch_logprob_mismatch(&mm, b, p), RLP_OK);
        assert_int_equal(mm.n_tokens, 160);
        assert_true(mm.max_abs < LOGPROB_TOL);
        if (!ref)
            ref = b;
        else
            rlp_batch_free(b);
        rlp_rollout_engine_free(e);
    }
    rlp_batch_free(ref);
    rlp_policy_free(p);
}

/* n samples of one prompt: one prefill, siblings copy the cached prompt */
static void test_group_shares_prefill(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 12, false);
    rlp_prompt pr = {.tokens = P3, .n_tokens = 12};
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0;
    s.max_new_tokens = 16;
    s.ignore_eos = 1;
    s.n = 4;
    rlp_rollout_engine *e = engine(p, 8, RLP_INTERRUPT_RECOMPUTE);
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, &pr, 1, &s, NULL, NULL), RLP_OK);
    rlp_rollout_stats st = {0};
    assert_int_equal(rlp_rollout_engine_stats(&st, e), RLP_OK);
    assert_int_equal(st.prompts, 1);
    assert_int_equal(st.prefill_tokens, 12);
    assert_int_equal(st.decode_tokens, 64);
    rlp_trajectory t0 = get(b, 0);
    check_greedy(p, &t0);
    for (size_t j = 1; j < 4; j++) {
        rlp_trajectory t = get(b, j);
        assert_same_tokens(&t, &t0);
        assert_int_equal(t.group_id, t0.group_id);
    }
    rlp_batch_free(b);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

/* the same prompt (same group id) alone, inside a bigger batch, with
 * another max_batch and another thread count: the same samples */
static void test_seeded_sampling_independent_of_batch(void **state)
{
    (void)state;
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0.9f;
    s.top_p = 0.95f;
    s.max_new_tokens = 24;
    s.ignore_eos = 1;
    s.n = 3;
    s.seed = 1234;
    rlp_prompt pr[4];
    four_prompts(pr);
    for (int i = 0; i < 4; i++)
        pr[i].group_id = 100 + (uint64_t)i;
    rlp_batch *alone = NULL;
    for (int variant = 0; variant < 3; variant++) {
        rlp_policy *p = tiny_policy(variant == 2 ? ctx2 : ctx1, 13, true);
        rlp_rollout_engine *e = engine(p, variant == 1 ? 2 : 16, RLP_INTERRUPT_RECOMPUTE);
        rlp_batch *b;
        if (variant == 0) {
            assert_int_equal(rlp_rollout_generate(&b, e, &pr[2], 1, &s, NULL, NULL), RLP_OK);
            alone = b;
            /* samples of a group differ (different streams) */
            rlp_trajectory a = get(b, 0), c = get(b, 1);
            assert_true(memcmp(a.completion_tokens, c.completion_tokens, 24 * sizeof(int32_t)) != 0);
        } else {
            assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
            for (size_t j = 0; j < 3; j++) {
                rlp_trajectory t = get(b, 2 * 3 + j), r = get(alone, j);
                assert_same_tokens(&t, &r);
                /* logits of a row depend on the GEMM's shape only through rounding */
                for (size_t k = 0; k < t.n_completion_tokens; k++)
                    assert_true(fabsf(t.logprobs[k] - r.logprobs[k]) < 1e-5f);
                assert_int_equal(t.group_id, 102);
            }
            rlp_batch_free(b);
        }
        rlp_rollout_engine_free(e);
        rlp_policy_free(p);
    }
    rlp_batch_free(alone);
}

/* behaviour logprobs at T = 0.7 equal the trainer's recomputation at 0.7;
 * with top-k, SAMPLING ≥ TEMPERED (renormalised over the kept set) and
 * TEMPERED still matches the trainer */
static void test_behaviour_logprobs_after_temperature(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 14, true);
    rlp_prompt pr[4];
    four_prompts(pr);
    rlp_rollout_engine *e = engine(p, 8, RLP_INTERRUPT_RECOMPUTE);
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0.7f;
    s.max_new_tokens = 32;
    s.ignore_eos = 1;
    s.n = 2;
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
    rlp_mismatch_stats mm;
    assert_int_equal(rlp_batch_logprob_mismatch(&mm, b, p), RLP_OK);
    assert_int_equal(mm.n_tokens, 4 * 2 * 32);
    assert_true(mm.max_abs < LOGPROB_TOL);
    assert_true(mm.mean_ratio_dev < LOGPROB_TOL);
    rlp_batch_free(b);

    s.top_k = 5;
    s.logprobs_mode = RLP_LOGPROBS_TEMPERED;
    rlp_batch *bt, *bs;
    assert_int_equal(rlp_rollout_generate(&bt, e, pr, 4, &s, NULL, NULL), RLP_OK);
    assert_int_equal(rlp_batch_logprob_mismatch(&mm, bt, p), RLP_OK);
    assert_true(mm.max_abs < LOGPROB_TOL);
    s.logprobs_mode = RLP_LOGPROBS_SAMPLING;
    assert_int_equal(rlp_rollout_generate(&bs, e, pr, 4, &s, NULL, NULL), RLP_OK);
    double gap = 0;
    for (size_t i = 0; i < 8; i++) {
        rlp_trajectory a = get(bt, i), c = get(bs, i);
        assert_same_tokens(&a, &c); /* same seed, same draws: only the recorded number differs */
        for (size_t k = 0; k < a.n_completion_tokens; k++) {
            assert_true(c.logprobs[k] >= a.logprobs[k] - 1e-6f);
            gap += c.logprobs[k] - a.logprobs[k];
        }
    }
    assert_true(gap > 0.01); /* truncation removed some mass somewhere */
    rlp_batch_free(bt);
    rlp_batch_free(bs);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

static int abort_at_3(const rlp_stream_event *ev, void *payload)
{
    size_t *count = payload;
    if (ev->prompt_index == 1 && ev->sample_index == 0 && ev->token >= 0)
        return ++*count == 3;
    return 0;
}

static void test_stop_ids_length_and_stream_abort(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 15, true);
    rlp_prompt pr[4];
    four_prompts(pr);
    rlp_rollout_engine *e = engine(p, 4, RLP_INTERRUPT_RECOMPUTE);
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0;
    s.max_new_tokens = 20;
    s.ignore_eos = 1;
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
    rlp_trajectory t = get(b, 0);
    int32_t stop = t.completion_tokens[5];
    size_t first = 0;
    while (t.completion_tokens[first] != stop)
        first++;
    s.stop_token_ids = &stop;
    s.n_stop_token_ids = 1;
    rlp_batch *b2;
    size_t count = 0;
    assert_int_equal(rlp_rollout_generate(&b2, e, pr, 4, &s, abort_at_3, &count), RLP_OK);
    rlp_trajectory t2 = get(b2, 0);
    assert_int_equal(t2.finish_reason, RLP_FINISH_STOP);
    assert_int_equal(t2.n_completion_tokens, first + 1); /* the stop id is kept */
    assert_memory_equal(t2.completion_tokens, t.completion_tokens, (first + 1) * sizeof(int32_t));
    rlp_trajectory t3 = get(b2, 1);
    assert_int_equal(t3.finish_reason, RLP_FINISH_ABORT);
    assert_int_equal(t3.n_completion_tokens, 3);
    /* stop strings need a tokenizer: this model has none */
    const char *stops[] = {"x"};
    s.stop = stops;
    s.n_stop = 1;
    rlp_batch *b3 = NULL;
    assert_int_equal(rlp_rollout_generate(&b3, e, pr, 4, &s, NULL, NULL), RLP_E_STATE);
    assert_null(b3);
    rlp_batch_free(b);
    rlp_batch_free(b2);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

/* ---- interruptible generation: an update from another thread lands
 * between two steps; the stream callback holds the step open until the
 * updater is waiting, so the switch point is deterministic */
typedef struct interrupt_ctx {
    rlp_rollout_engine *e;
    rlp_policy *fresh;
    pthread_t th;
    bool started;
    int update_rc;
} interrupt_ctx;

static void *updater(void *arg)
{
    interrupt_ctx *c = arg;
    c->update_rc = rlp_rollout_engine_update_weights(c->e, c->fresh);
    return NULL;
}

static int update_at_token_8(const rlp_stream_event *ev, void *payload)
{
    interrupt_ctx *c = payload;
    if (!c->started && ev->prompt_index == 0 && ev->token >= 0) {
        static int seen;
        if (++seen == 8) {
            seen = 0;
            c->started = true;
            pthread_create(&c->th, NULL, updater, c);
            while (!__atomic_load_n(&c->e->pending, __ATOMIC_SEQ_CST))
                ; /* the updater now waits for this step to end */
        }
    }
    return 0;
}

static void interrupt_case(int mode)
{
    rlp_policy *p = tiny_policy(ctx1, 16, true);
    rlp_policy *fresh = tiny_policy(ctx1, 17, true);
    fresh->version = 5;
    rlp_rollout_engine *e = engine(p, 8, mode);
    rlp_prompt pr[4];
    four_prompts(pr);
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 0;
    s.max_new_tokens = 20;
    s.ignore_eos = 1;
    interrupt_ctx c = {.e = e, .fresh = fresh};
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, update_at_token_8, &c), RLP_OK);
    assert_true(c.started);
    pthread_join(c.th, NULL);
    assert_int_equal(c.update_rc, RLP_OK);
    uint64_t v;
    assert_int_equal(rlp_rollout_engine_version(&v, e), RLP_OK);
    assert_int_equal(v, 5);
    rlp_rollout_stats st = {0};
    assert_int_equal(rlp_rollout_engine_stats(&st, e), RLP_OK);
    assert_int_equal(st.interrupts, mode == RLP_INTERRUPT_DEFER ? 0 : 4);
    rlp_policy *p_old = p;
    for (size_t i = 0; i < 4; i++) {
        rlp_trajectory t = get(b, i);
        assert_int_equal(t.policy_version, 0);
        /* all 4 run together: every one has 8 tokens of version 0 */
        for (size_t k = 0; k < 8; k++)
            assert_int_equal(t.token_versions[k], 0);
        if (mode == RLP_INTERRUPT_DEFER) {
            /* the update waited for the call to end: one version throughout */
            assert_int_equal(t.finish_reason, RLP_FINISH_LENGTH);
            assert_int_equal(t.n_completion_tokens, 20);
            for (size_t k = 0; k < 20; k++)
                assert_int_equal(t.token_versions[k], 0);
            check_greedy(p_old, &t);
        } else if (mode == RLP_INTERRUPT_ABORT) {
            assert_int_equal(t.finish_reason, RLP_FINISH_ABORT);
            assert_int_equal(t.n_completion_tokens, 8);
        } else {
            assert_int_equal(t.finish_reason, RLP_FINISH_LENGTH);
            assert_int_equal(t.n_completion_tokens, 20);
            for (size_t k = 8; k < 20; k++)
                assert_int_equal(t.token_versions[k], 5);
            /* tokens after the switch are the new weights' argmax given the
             * whole prefix (the cache was recomputed, not reused) */
            check_greedy_from(fresh, &t, 8);
        }
    }
    rlp_batch_free(b);
    rlp_rollout_engine_free(e);
    rlp_policy_free(fresh);
    rlp_policy_free(p);
}

static void test_interrupt_recompute(void **state)
{
    (void)state;
    interrupt_case(RLP_INTERRUPT_RECOMPUTE);
}

static void test_interrupt_abort(void **state)
{
    (void)state;
    interrupt_case(RLP_INTERRUPT_ABORT);
}

static void test_interrupt_defer(void **state)
{
    (void)state;
    interrupt_case(RLP_INTERRUPT_DEFER);
}

static void test_bad_input(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 18, true);
    rlp_rollout_engine *e = engine(p, 4, RLP_INTERRUPT_RECOMPUTE);
    rlp_batch *b = NULL;
    int32_t bad[2] = {3, 64};
    rlp_prompt pr = {.tokens = bad, .n_tokens = 2};
    assert_int_equal(rlp_rollout_generate(&b, e, &pr, 1, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "outside the vocabulary"));
    int32_t *longp = calloc(96, sizeof *longp);
    rlp_prompt lp = {.tokens = longp, .n_tokens = 96};
    assert_int_equal(rlp_rollout_generate(&b, e, &lp, 1, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    free(longp);
    rlp_prompt txt = {.text = "hello"};
    assert_int_equal(rlp_rollout_generate(&b, e, &txt, 1, NULL, NULL, NULL), RLP_E_STATE);
    rlp_prompt ok = {.tokens = P0, .n_tokens = 3};
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.top_p = 0;
    assert_int_equal(rlp_rollout_generate(&b, e, &ok, 1, &s, NULL, NULL), RLP_E_INVALID_ARG);
    s = (rlp_sampling_options)RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = NAN;
    assert_int_equal(rlp_rollout_generate(&b, e, &ok, 1, &s, NULL, NULL), RLP_E_INVALID_ARG);
    s = (rlp_sampling_options)RLP_SAMPLING_OPTIONS_INIT;
    s.n = 0;
    assert_int_equal(rlp_rollout_generate(&b, e, &ok, 1, &s, NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_generate(&b, e, NULL, 1, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_generate(&b, e, &ok, 0, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    assert_null(b);
    /* the engine still works after all that */
    s = (rlp_sampling_options)RLP_SAMPLING_OPTIONS_INIT;
    s.max_new_tokens = 4;
    assert_int_equal(rlp_rollout_generate(&b, e, &ok, 1, &s, NULL, NULL), RLP_OK);
    rlp_batch_free(b);
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_seq_len = 1000; /* beyond the tiny model's context of 128 */
    rlp_rollout_engine *e2 = NULL;
    assert_int_equal(rlp_rollout_engine_create(&e2, p, &o), RLP_E_INVALID_ARG);
    o = (rlp_rollout_options)RLP_ROLLOUT_OPTIONS_INIT;
    o.share_weights = 1;
    assert_int_equal(rlp_rollout_engine_create(&e2, p, &o), RLP_OK);
    assert_int_equal(rlp_rollout_engine_update_weights(e2, p), RLP_E_STATE);
    /* a local engine has no servers to change or count */
    const char *urls[1] = {"http://127.0.0.1:9"};
    assert_int_equal(rlp_rollout_engine_set_urls(e2, urls, 1), RLP_E_STATE);
    size_t n_servers = 7;
    assert_int_equal(rlp_rollout_engine_server_stats(NULL, 0, &n_servers, e2), RLP_E_STATE);
    assert_int_equal(n_servers, 7);
    rlp_rollout_engine_free(e2);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

/* a remote engine whose server is gone: the call succeeds, every sample
 * comes back as an invalid RLP_FINISH_ERROR trajectory naming the URL */
static void test_remote_dead_server(void **state)
{
    (void)state;
    const char *urls[1] = {"http://127.0.0.1:9"}; /* discard port: refused */
    rlp_remote_options o = RLP_REMOTE_OPTIONS_INIT;
    o.urls = urls;
    o.n_urls = 1;
    o.max_retries = 1;
    o.timeout_ms = 2000;
    rlp_rollout_engine *e = NULL;
    int rc = rlp_rollout_engine_create_remote(&e, NULL, &o);
    if (rc == RLP_E_UNSUPPORTED) {
        skip(); /* built without libcurl */
    }
    assert_int_equal(rc, RLP_OK);
    rlp_prompt pr[2] = {{.tokens = P0, .n_tokens = 3, .metadata_json = "{\"reference\": \"x\"}"},
                        {.tokens = P1, .n_tokens = 7}};
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.n = 2;
    rlp_batch *b;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 2, &s, NULL, NULL), RLP_OK);
    size_t n;
    assert_int_equal(rlp_batch_size(&n, b), RLP_OK);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < 4; i++) {
        rlp_trajectory t = get(b, i);
        assert_int_equal(t.finish_reason, RLP_FINISH_ERROR);
        assert_int_equal(t.valid, 0);
        assert_non_null(t.error);
        assert_non_null(strstr(t.error, "127.0.0.1:9"));
        assert_int_equal(t.n_completion_tokens, 0);
        assert_int_equal(t.sample_index, i % 2);
    }
    rlp_trajectory t0 = get(b, 0);
    assert_string_equal(t0.metadata_json, "{\"reference\": \"x\"}");
    rlp_rollout_stats st = {0};
    assert_int_equal(rlp_rollout_engine_stats(&st, e), RLP_OK);
    assert_int_equal(st.remote_errors, 2);
    /* the remote engine takes weights from its servers, not from a policy */
    assert_int_equal(rlp_rollout_engine_update_weights(e, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_rollout_engine_set_version(e, 9), RLP_OK);
    uint64_t v;
    assert_int_equal(rlp_rollout_engine_version(&v, e), RLP_OK);
    assert_int_equal(v, 9);
    rlp_batch_free(b);
    rlp_rollout_engine_free(e);
}

static void test_batch_api(void **state)
{
    (void)state;
    rlp_batch *b, *c;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    assert_int_equal(rlp_batch_create(&c), RLP_OK);
    int32_t prompt[2] = {1, 2}, comp[3] = {4, 5, 6};
    float lp[3] = {-0.5f, -1.0f, -0.25f};
    rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION, .group_id = 9, .prompt_tokens = prompt,
                        .n_prompt_tokens = 2, .completion_tokens = comp, .n_completion_tokens = 3, .logprobs = lp,
                        .completion_text = "abc", .policy_version = 3, .finish_reason = RLP_FINISH_STOP,
                        .stop_index = -1, .temperature = 1.0f, .reward = NAN, .valid = 1,
                        .metadata_json = "{\"answer\": \"4\"}"};
    assert_int_equal(rlp_batch_append(b, &t), RLP_OK);
    lp[1] = 0.5f;
    assert_int_equal(rlp_batch_append(b, &t), RLP_E_INVALID_ARG);
    lp[1] = NAN;
    assert_int_equal(rlp_batch_append(b, &t), RLP_E_INVALID_ARG);
    lp[1] = -1.0f;
    t.finish_reason = 9;
    assert_int_equal(rlp_batch_append(b, &t), RLP_E_INVALID_ARG);
    t.finish_reason = RLP_FINISH_STOP;
    assert_int_equal(rlp_batch_append(c, &t), RLP_OK);
    assert_int_equal(rlp_batch_extend(b, c), RLP_OK);
    size_t n;
    assert_int_equal(rlp_batch_size(&n, b), RLP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(rlp_batch_size(&n, c), RLP_OK);
    assert_int_equal(n, 0);
    rlp_trajectory g = get(b, 1);
    assert_int_equal(g.group_id, 9);
    assert_string_equal(g.completion_text, "abc");
    assert_string_equal(g.metadata_json, "{\"answer\": \"4\"}");
    assert_int_equal(g.token_versions[2], 3); /* filled from policy_version */
    assert_true(isnan(g.reward));
    assert_int_equal(rlp_batch_set_reward(b, 1, 0.75f), RLP_OK);
    assert_int_equal(rlp_batch_set_reward(b, 1, INFINITY), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_batch_set_reward(b, 2, 1.0f), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_batch_set_invalid(b, 0, "format"), RLP_OK);
    g = get(b, 1);
    assert_true(g.reward == 0.75f);
    g = get(b, 0);
    assert_int_equal(g.valid, 0);
    assert_string_equal(g.error, "format");
    rlp_trajectory bad = {0};
    assert_int_equal(rlp_batch_get(&bad, b, 0), RLP_E_INVALID_ARG); /* version unset */
    rlp_batch_free(b);
    rlp_batch_free(c);
    rlp_batch_free(NULL);
}

/* Weights holding a NaN or an Inf are refused before the swap (issue 18,
 * item 7): the engine keeps its weights and version and still generates;
 * the message names the tensor. The same folder with finite values loads. */
static void test_load_weights_non_finite(void **state)
{
    (void)state;
    rlp_policy *p = tiny_policy(ctx1, 11, false);
    rlp_rollout_engine *e = engine(p, 4, RLP_INTERRUPT_RECOMPUTE);
    char dir[] = "/tmp/rlpost-nonfinite-XXXXXX", st[128];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(rlp_policy_save(p, dir, RLP_DTYPE_F32), RLP_OK);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    rlp_prompt pr = {.tokens = P0, .n_tokens = 3};
    rlp_sampling_options so = RLP_SAMPLING_OPTIONS_INIT;
    so.max_new_tokens = 4;
    so.temperature = 0;
    const float bad_values[2] = {NAN, -INFINITY};
    for (int k = 0; k < 2; k++) {
        rlpi_weights w;
        rlpi_weights_init(&w);
        assert_int_equal(rlpi_safetensors_read(st, &w, NULL), RLP_OK);
        rlpi_tensor *t = NULL;
        for (size_t i = 0; i < w.n && !t; i++)
            if (strstr(w.tensors[i].name, "layers.1.mlp.down_proj"))
                t = &w.tensors[i];
        assert_non_null(t);
        float keep = t->data[7];
        t->data[7] = bad_values[k];
        rlpi_st_write_opts wo = {.dtype = RLPI_ST_F32};
        assert_int_equal(rlpi_safetensors_write(st, &w, &wo), RLP_OK);
        assert_int_equal(rlp_rollout_engine_load_weights(e, dir, 5), RLP_E_FORMAT);
        assert_non_null(strstr(rlp_error_last(), "layers.1.mlp.down_proj"));
        assert_non_null(strstr(rlp_error_last(), k == 0 ? "NaN" : "Inf"));
        assert_non_null(strstr(rlp_error_last(), "element 7"));
        uint64_t v = 99;
        assert_int_equal(rlp_rollout_engine_version(&v, e), RLP_OK);
        assert_int_equal(v, 0);
        /* still the old weights: greedy tokens equal the policy's argmax */
        rlp_batch *b = NULL;
        assert_int_equal(rlp_rollout_generate(&b, e, &pr, 1, &so, NULL, NULL), RLP_OK);
        rlp_trajectory tr = get(b, 0);
        assert_true(tr.n_completion_tokens > 0);
        check_greedy(p, &tr);
        rlp_batch_free(b);
        t->data[7] = keep;
        assert_int_equal(rlpi_safetensors_write(st, &w, &wo), RLP_OK);
        rlpi_weights_free(&w);
    }
    assert_int_equal(rlp_rollout_engine_load_weights(e, dir, 5), RLP_OK);
    uint64_t v = 0;
    rlp_rollout_engine_version(&v, e);
    assert_int_equal(v, 5);
    unlink(st);
    snprintf(st, sizeof st, "%s/config.json", dir);
    unlink(st);
    rmdir(dir);
    rlp_rollout_engine_free(e);
    rlp_policy_free(p);
}

/* A Q8_0 engine: behaviour logprobs near (not equal to) the policy's, and
 * after update_weights it decodes the new weights (its copy re-quantized):
 * its logprobs then sit near the new policy's and far from the old one's. */
static void test_q8_0_weights_follow_updates(void **state)
{
    (void)state;
    rlp_policy *old = tiny_policy(ctx2, 14, true), *fresh = tiny_policy(ctx2, 15, true);
    rlp_rollout_options o = RLP_ROLLOUT_OPTIONS_INIT;
    o.max_batch = 8;
    o.max_seq_len = 96;
    o.weights = RLP_ROLLOUT_WEIGHTS_Q8_0;
    rlp_rollout_engine *e;
    assert_int_equal(rlp_rollout_engine_create(&e, old, &o), RLP_OK);
    rlp_prompt pr[4];
    four_prompts(pr);
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.max_new_tokens = 16;
    s.ignore_eos = 1;
    s.n = 2;
    rlp_batch *b;
    rlp_mismatch_stats to_old, to_new;
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
    assert_int_equal(rlp_batch_logprob_mismatch(&to_old, b, old), RLP_OK);
    assert_int_equal(rlp_batch_logprob_mismatch(&to_new, b, fresh), RLP_OK);
    print_message("before the update: mean |dlogp| to old %.4f, to new %.4f\n", to_old.mean_abs, to_new.mean_abs);
    assert_true(to_old.mean_abs > 0 && to_old.mean_abs < 0.1 && to_old.mean_abs * 5 < to_new.mean_abs);
    rlp_batch_free(b);
    assert_int_equal(rlp_rollout_engine_update_weights(e, fresh), RLP_OK);
    assert_int_equal(rlp_rollout_generate(&b, e, pr, 4, &s, NULL, NULL), RLP_OK);
    assert_int_equal(rlp_batch_logprob_mismatch(&to_old, b, old), RLP_OK);
    assert_int_equal(rlp_batch_logprob_mismatch(&to_new, b, fresh), RLP_OK);
    print_message("after: to old %.4f, to new %.4f\n", to_old.mean_abs, to_new.mean_abs);
    assert_true(to_new.mean_abs > 0 && to_new.mean_abs < 0.1 && to_new.mean_abs * 5 < to_old.mean_abs);
    rlp_batch_free(b);
    rlp_rollout_engine_free(e);
    /* a version-1 options struct still works (F32), a bad value does not */
    o.weights = 9;
    assert_int_equal(rlp_rollout_engine_create(&e, old, &o), RLP_E_INVALID_ARG);
    o.version = 1;
    assert_int_equal(rlp_rollout_engine_create(&e, old, &o), RLP_OK);
    rlp_rollout_engine_free(e);
    rlp_policy_free(old);
    rlp_policy_free(fresh);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 1;
    if (rlp_context_create(&ctx1, &o) != RLP_OK)
        return -1;
    o.n_threads = 2;
    return rlp_context_create(&ctx2, &o) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlp_context_free(ctx1);
    rlp_context_free(ctx2);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_equals_argmax_any_batching),
        cmocka_unit_test(test_group_shares_prefill),
        cmocka_unit_test(test_seeded_sampling_independent_of_batch),
        cmocka_unit_test(test_behaviour_logprobs_after_temperature),
        cmocka_unit_test(test_stop_ids_length_and_stream_abort),
        cmocka_unit_test(test_interrupt_recompute),
        cmocka_unit_test(test_interrupt_abort),
        cmocka_unit_test(test_interrupt_defer),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_remote_dead_server),
        cmocka_unit_test(test_batch_api),
        cmocka_unit_test(test_load_weights_non_finite),
        cmocka_unit_test(test_q8_0_weights_follow_updates),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
