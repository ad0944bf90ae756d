/* Reward-function handles through the public API: what a callback is
 * given, callback faults (error, NaN/Inf, a score outside float, a call
 * that sleeps past its deadline) that must leave the batch complete with
 * only those samples invalid, abandoned calls and the payload's lifetime,
 * the batch form, per-token scores with the Clip/Delta refinements, the
 * weighted combination and the stats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* float(reward) of scores that are small integers or halves: exact. */
#define EXACT 0.0f
/* Sums of a few float products. */
#define TOK_TOL 1e-6f

/* cmocka 1.1 compares floats only. */
#define assert_double_equal(a, b, tol)                                          \
    do {                                                                        \
        double a_ = (a), b_ = (b);                                              \
        if (!(fabs(a_ - b_) <= (tol)))                                          \
            fail_msg("%s = %.17g, want %.17g", #a, a_, b_);                     \
    } while (0)

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A batch of n trajectories: completion "c<i>", tokens (i % 5 + 1 of
 * them), metadata with a reference, group i / 4, sample i % 4. */
static rlp_batch *make_batch(size_t n)
{
    rlp_batch *b = NULL;
    assert_int_equal(rlp_batch_create(&b), RLP_OK);
    for (size_t i = 0; i < n; i++) {
        int32_t toks[8];
        float lps[8];
        size_t nt = i % 5 + 1;
        for (size_t t = 0; t < nt; t++) {
            toks[t] = (int32_t)(100 + t);
            lps[t] = -0.5f;
        }
        char text[32], prompt[32], meta[64];
        snprintf(text, sizeof text, "c%zu", i);
        snprintf(prompt, sizeof prompt, "p%zu", i / 4);
        snprintf(meta, sizeof meta, "{\"reference\": \"r%zu\"}", i);
        rlp_trajectory tr;
        memset(&tr, 0, sizeof tr);
        tr.version = RLP_TRAJECTORY_VERSION;
        tr.group_id = i / 4 + 1;
        tr.sample_index = (uint32_t)(i % 4);
        tr.completion_tokens = toks;
        tr.logprobs = lps;
        tr.n_completion_tokens = nt;
        tr.prompt_text = prompt;
        tr.completion_text = text;
        tr.policy_version = 7;
        tr.finish_reason = RLP_FINISH_STOP;
        tr.stop_index = -1;
        tr.temperature = 1.0f;
        tr.reward = NAN;
        tr.valid = 1;
        tr.metadata_json = meta;
        assert_int_equal(rlp_batch_append(b, &tr), RLP_OK);
    }
    return b;
}

static rlp_trajectory get(const rlp_batch *b, size_t i)
{
    rlp_trajectory t;
    memset(&t, 0, sizeof t);
    t.version = RLP_TRAJECTORY_VERSION;
    assert_int_equal(rlp_batch_get(&t, b, i), RLP_OK);
    return t;
}

static rlp_reward_stats new_stats(void)
{
    rlp_reward_stats s;
    memset(&s, 0, sizeof s);
    s.version = RLP_REWARD_STATS_VERSION;
    return s;
}

/* ---- what a callback sees ------------------------------------------------------- */

typedef struct seen {
    pthread_mutex_t mu;
    pthread_t caller;
    int on_caller;        /* calls made on the scoring thread (must stay 0) */
    int calls;
    int bad;              /* a request field was not what the batch holds */
} seen;

static int check_request(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    seen *s = payload;
    size_t i = req->batch_index;
    char text[32], prompt[32], ref[32];
    snprintf(text, sizeof text, "c%zu", i);
    snprintf(prompt, sizeof prompt, "p%zu", i / 4);
    snprintf(ref, sizeof ref, "r%zu", i);
    int bad = req->version != RLP_REWARD_REQUEST_VERSION || strcmp(req->completion_text, text) != 0 ||
              req->completion_len != strlen(text) || strcmp(req->prompt_text, prompt) != 0 ||
              req->prompt_len != strlen(prompt) || !req->reference || strcmp(req->reference, ref) != 0 ||
              !req->metadata_json || req->group_id != i / 4 + 1 || req->sample_index != i % 4 ||
              req->policy_version != 7 || req->n_completion_tokens != i % 5 + 1;
    for (size_t t = 0; !bad && t < req->n_completion_tokens; t++)
        bad = req->completion_tokens[t] != (int32_t)(100 + t);
    bad = bad || res->version != RLP_REWARD_RESULT_VERSION || !isnan(res->score) || res->valid != 1 ||
          res->reason[0] != '\0' || res->has_token_scores != 0 || !res->token_scores || !res->step_ends;
    for (size_t t = 0; !bad && t < req->n_completion_tokens; t++)
        bad = res->token_scores[t] != 0.0f || res->step_ends[t] != 0;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->bad += bad;
    s->on_caller += pthread_equal(pthread_self(), s->caller) != 0;
    pthread_mutex_unlock(&s->mu);
    res->score = (double)i * 0.5;
    /* dirty the buffers: the next call must get them zeroed again */
    for (size_t t = 0; t < req->n_completion_tokens; t++)
        res->token_scores[t] = 9.0f;
    return 0;
}

static void test_callback_sees_the_batch(void **state)
{
    (void)state;
    seen s = {PTHREAD_MUTEX_INITIALIZER, pthread_self(), 0, 0, 0};
    rlp_reward_options o;
    assert_int_equal(rlp_reward_options_init(&o, RLP_REWARD_OPTIONS_VERSION), RLP_OK);
    o.n_threads = 4;
    o.name = "check";
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, check_request, &o, &s), RLP_OK);
    assert_string_equal(rlp_reward_fn_name(fn), "check");
    rlp_batch *b = make_batch(37);
    for (int round = 0; round < 2; round++) { /* the second round reuses the workers */
        rlp_reward_stats st = new_stats();
        assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
        assert_int_equal(st.scored, 37);
        assert_int_equal(st.valid, 37);
        assert_int_equal(st.invalid, 0);
        assert_double_equal(st.mean_score, 0.5 * 36 / 2, 1e-12);
        assert_double_equal(st.min_score, 0.0, 0);
        assert_double_equal(st.max_score, 18.0, 0);
    }
    assert_int_equal(s.calls, 74);
    assert_int_equal(s.bad, 0);
    assert_int_equal(s.on_caller, 0);
    for (size_t i = 0; i < 37; i++) {
        rlp_trajectory t = get(b, i);
        assert_true(t.valid);
        assert_float_equal(t.reward, (float)i * 0.5f, EXACT);
        assert_null(t.error);
        assert_null(t.token_rewards); /* written but has_token_scores not set */
    }
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

/* ---- reasons cut at a character ---------------------------------------------------- */

static int long_reason_cb(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    /* fill the reason with 2-, 3- and 4-byte characters up to the last byte,
     * shifted by the sample index so every cut position is hit */
    static const char *chars[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    size_t cap = sizeof res->reason, len = 0;
    for (size_t k = 0; k < req->batch_index % 4; k++)
        res->reason[len++] = 'x';
    for (size_t k = 0;; k++) {
        const char *c = chars[(k + req->batch_index) % 3];
        if (len + strlen(c) >= cap)
            break;
        memcpy(res->reason + len, c, strlen(c));
        len += strlen(c);
    }
    res->reason[len] = '\0';
    res->valid = 0;
    return 0;
}

static int utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t need = *p < 0x80 ? 0 : *p >= 0xF0 ? 3 : *p >= 0xE0 ? 2 : *p >= 0xC0 ? 1 : 9;
        if (need == 9)
            return 0;
        for (size_t k = 1; k <= need; k++)
            if ((p[k] & 0xC0) != 0x80)
                return 0;
        p += need + 1;
    }
    return 1;
}

static void test_reason_cut_at_a_character(void **state)
{
    (void)state;
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.name = "named"; /* "named: " is prefixed, so the callback's reason is cut */
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, long_reason_cb, &o, NULL), RLP_OK);
    rlp_batch *b = make_batch(12);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    assert_int_equal(st.invalid, 12);
    for (size_t i = 0; i < 12; i++) {
        rlp_trajectory t = get(b, i);
        assert_false(t.valid);
        assert_non_null(t.error);
        assert_true(strncmp(t.error, "named: ", 7) == 0);
        assert_true(strlen(t.error) > RLP_REWARD_REASON_MAX - 8); /* cut at most 3 bytes short */
        assert_true(utf8_valid(t.error));
    }
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

/* ---- faults ------------------------------------------------------------------------ */

typedef struct faulty {
    atomic_int woke;        /* the sleeping call returned */
    atomic_int freed;       /* payload_free ran */
    long sleep_ms;
} faulty;

/* Sample i % 10 decides: 1 error with a reason, 2 error without, 3 NaN,
 * 4 +Inf, 5 1e39 (not a float), 6 valid = 0, 7 sleeps past the deadline,
 * 8 a NaN token score; others score i. */
static int faulty_cb(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    faulty *f = payload;
    size_t i = req->batch_index;
    switch (i % 10) {
    case 1:
        snprintf(res->reason, sizeof res->reason, "verifier crashed on %zu", i);
        return -3;
    case 2: return 5;
    case 3: res->score = NAN; return 0;
    case 4: res->score = INFINITY; return 0;
    case 5: res->score = 1e39; return 0;
    case 6:
        res->valid = 0;
        snprintf(res->reason, sizeof res->reason, "cannot judge");
        return 0;
    case 7:
        sleep_ms(f->sleep_ms);
        atomic_fetch_add(&f->woke, 1);
        res->score = 1.0;
        return 0;
    case 8:
        res->score = 1.0;
        res->token_scores[0] = NAN;
        res->has_token_scores = 1;
        return 0;
    default: res->score = (double)i; return 0;
    }
}

static void free_faulty(void *p)
{
    atomic_store(&((faulty *)p)->freed, 1);
}

static void test_callback_faults(void **state)
{
    (void)state;
    static faulty f; /* outlives the handle: payload_free says when */
    atomic_store(&f.woke, 0);
    atomic_store(&f.freed, 0);
    f.sleep_ms = 1500;
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.n_threads = 2;
    o.timeout_ms = 100;
    o.payload_free = free_faulty;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, faulty_cb, &o, &f), RLP_OK);
    rlp_batch *b = make_batch(20);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    /* returned while the two sleeping calls still sleep */
    assert_int_equal(atomic_load(&f.woke), 0);
    assert_int_equal(st.scored, 20);
    assert_int_equal(st.valid, 4); /* i % 10 in {0, 9} */
    assert_int_equal(st.invalid, 16);
    assert_int_equal(st.errors, 4);    /* i % 10 in {1, 2} */
    assert_int_equal(st.timeouts, 2);  /* 7 */
    assert_int_equal(st.nonfinite, 8); /* 3, 4, 5, 8 */
    assert_int_equal(st.abandoned_running, 2);
    assert_double_equal(st.mean_score, (0.0 + 9 + 10 + 19) / 4, 1e-12);
    for (size_t i = 0; i < 20; i++) {
        rlp_trajectory t = get(b, i);
        int k = (int)(i % 10);
        if (k == 0 || k == 9) {
            assert_true(t.valid);
            assert_float_equal(t.reward, (float)i, EXACT);
            continue;
        }
        assert_false(t.valid);
        assert_true(isnan(t.reward));
        assert_non_null(t.error);
        const char *want = k == 1 ? "verifier crashed" : k == 2 ? "callback returned 5" : k == 3 ? "nan"
                         : k == 4 ? "inf" : k == 5 ? "fit in a float" : k == 6 ? "cannot judge"
                         : k == 7 ? "timed out after 100 ms" : "token score 0";
        if (!strstr(t.error, want))
            fail_msg("sample %zu: reason \"%s\" lacks \"%s\"", i, t.error, want);
        assert_true(strncmp(t.error, "callback: ", 10) == 0); /* named after the handle */
    }
    /* the handle goes; the payload stays until the abandoned calls return */
    rlp_reward_fn_free(fn);
    assert_int_equal(atomic_load(&f.freed), 0);
    for (int w = 0; w < 500 && !atomic_load(&f.freed); w++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&f.woke), 2);
    assert_int_equal(atomic_load(&f.freed), 1);
    rlp_batch_free(b);
}

/* Every call hangs (until released): with one worker and max_abandoned 1
 * the handle runs out of workers and says so instead of waiting. */
static atomic_int hang_release;
static atomic_int hang_running;

static int hang_cb(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)req;
    (void)payload;
    atomic_fetch_add(&hang_running, 1);
    while (!atomic_load(&hang_release))
        sleep_ms(5);
    atomic_fetch_sub(&hang_running, 1);
    res->score = 1.0;
    return 0;
}

static void test_abandoned_limit(void **state)
{
    (void)state;
    atomic_store(&hang_release, 0);
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.n_threads = 1;
    o.timeout_ms = 50;
    o.max_abandoned = 1;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, hang_cb, &o, NULL), RLP_OK);
    rlp_batch *b = make_batch(6);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    /* call 1 timed out and was replaced (1 live + 1 abandoned = n_threads +
     * max_abandoned); call 2 timed out with no room for another worker;
     * the four left had nobody to run them */
    assert_int_equal(st.timeouts, 2);
    assert_int_equal(st.invalid, 6);
    assert_int_equal(st.abandoned_running, 2);
    assert_non_null(strstr(get(b, 5).error, "no worker left"));
    /* still stuck: the next call fails fast, not after a deadline per sample */
    st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    assert_int_equal(st.invalid, 6);
    assert_int_equal(st.timeouts, 0);
    /* once they return, the handle recovers its worker */
    atomic_store(&hang_release, 1);
    for (int w = 0; w < 500 && atomic_load(&hang_running); w++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&hang_running), 0);
    /* the abandoned threads exit just after their call returns */
    for (int w = 0; w < 500; w++) {
        st = new_stats();
        assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
        if (st.valid == 6)
            break;
        sleep_ms(10);
    }
    assert_int_equal(st.valid, 6);
    assert_int_equal(st.abandoned_running, 0);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

/* Samples 3 and 250 hang: the calls claimed with them in one block must
 * still be scored by the other (or a replacement) worker. */
static atomic_int slow_woke;

static int hang_two(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    if (req->batch_index == 3 || req->batch_index == 250) {
        sleep_ms(600);
        atomic_fetch_add(&slow_woke, 1);
    }
    res->score = (double)req->batch_index;
    return 0;
}

static void test_rest_of_an_abandoned_block(void **state)
{
    (void)state;
    for (uint32_t threads = 1; threads <= 2; threads++) {
        atomic_store(&slow_woke, 0);
        rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
        o.n_threads = threads;
        o.timeout_ms = 50;
        rlp_reward_fn *fn = NULL;
        assert_int_equal(rlp_reward_fn_create_callback(&fn, hang_two, &o, NULL), RLP_OK);
        rlp_batch *b = make_batch(400);
        rlp_reward_stats st = new_stats();
        assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
        assert_int_equal(st.timeouts, 2);
        assert_int_equal(st.valid, 398);
        for (size_t i = 0; i < 400; i++) {
            rlp_trajectory t = get(b, i);
            assert_int_equal(t.valid, i != 3 && i != 250);
            if (t.valid)
                assert_float_equal(t.reward, (float)i, EXACT);
        }
        rlp_batch_free(b);
        rlp_reward_fn_free(fn);
        for (int w = 0; w < 300 && atomic_load(&slow_woke) < 2; w++)
            sleep_ms(10);
        assert_int_equal(atomic_load(&slow_woke), 2);
    }
}

/* ---- batch form ------------------------------------------------------------------------ */

static atomic_int max_n;

static int batch_cb(rlp_reward_result *res, const rlp_reward_request *req, size_t n, void *payload)
{
    (void)payload;
    int cur = atomic_load(&max_n);
    while ((int)n > cur && !atomic_compare_exchange_weak(&max_n, &cur, (int)n))
        ;
    for (size_t i = 0; i < n; i++) {
        if (req[i].batch_index == 13)
            return -1; /* the whole call fails */
        res[i].score = (double)req[i].batch_index;
    }
    return 0;
}

static void test_batch_callback(void **state)
{
    (void)state;
    atomic_store(&max_n, 0);
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.n_threads = 3;
    o.batch_size = 4;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_batch_callback(&fn, batch_cb, &o, NULL), RLP_OK);
    rlp_batch *b = make_batch(18);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    assert_int_equal(atomic_load(&max_n), 4);
    /* calls are [0,4) [4,8) [8,12) [12,16) [16,18): 12..15 fail together */
    assert_int_equal(st.errors, 4);
    assert_int_equal(st.valid, 14);
    for (size_t i = 0; i < 18; i++) {
        rlp_trajectory t = get(b, i);
        assert_int_equal(t.valid, !(i >= 12 && i < 16));
        if (t.valid)
            assert_float_equal(t.reward, (float)i, EXACT);
    }
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

/* ---- per-token scores and refinement ---------------------------------------------------- */

/* Step rewards 0.9, 0.2, 0.6 at tokens 0, 2, 4 of a 5-token completion. */
static int prm_cb(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    res->score = 1.0;
    if (req->n_completion_tokens == 5) {
        const float step[3] = {0.9f, 0.2f, 0.6f};
        for (int k = 0; k < 3; k++) {
            res->token_scores[2 * k] = step[k];
            res->step_ends[2 * k] = 1;
        }
        res->has_token_scores = 1;
    }
    return 0;
}

static void expect_tokens(const rlp_batch *b, size_t i, const float *want)
{
    rlp_trajectory t = get(b, i);
    assert_non_null(t.token_rewards);
    for (size_t k = 0; k < 5; k++)
        if (fabsf(t.token_rewards[k] - want[k]) > TOK_TOL)
            fail_msg("token %zu: %g, want %g", k, (double)t.token_rewards[k], (double)want[k]);
}

static void test_token_scores_and_refinement(void **state)
{
    (void)state;
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.n_threads = 2;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, prm_cb, &o, NULL), RLP_OK);
    rlp_batch *b = make_batch(5); /* trajectory 4 has 5 tokens */
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_OK);
    const float raw[5] = {0.9f, 0, 0.2f, 0, 0.6f};
    expect_tokens(b, 4, raw);
    assert_null(get(b, 0).token_rewards);

    /* Clip, eta 0.5: min(r - 0.5, 0) on the steps only */
    assert_int_equal(rlp_reward_fn_set_refine(fn, RLP_REFINE_CLIP, 0.5f), RLP_OK);
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_OK);
    const float clip[5] = {0, 0, -0.3f, 0, 0};
    expect_tokens(b, 4, clip);
    /* Delta: r_k - r_{k+1}, the last kept: 0.7, -0.4, 0.6 (sum telescopes to r_1) */
    assert_int_equal(rlp_reward_fn_set_refine(fn, RLP_REFINE_DELTA, 0.0f), RLP_OK);
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_OK);
    const float delta[5] = {0.7f, 0, -0.4f, 0, 0.6f};
    expect_tokens(b, 4, delta);
    /* Clip then Delta: clipped 0, -0.3, 0 -> 0.3, -0.3, 0 */
    assert_int_equal(rlp_reward_fn_set_refine(fn, RLP_REFINE_CLIP_DELTA, 0.5f), RLP_OK);
    assert_int_equal(rlp_reward_fn_score(fn, b, NULL), RLP_OK);
    const float cd[5] = {0.3f, 0, -0.3f, 0, 0};
    expect_tokens(b, 4, cd);
    assert_int_equal(rlp_reward_fn_set_refine(fn, 4, 0.0f), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_set_refine(fn, RLP_REFINE_CLIP, NAN), RLP_E_INVALID_ARG);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
}

static void test_refine_function(void **state)
{
    (void)state;
    /* every entry a step */
    float r[4] = {0.2f, 0.9f, 0.5f, 0.7f};
    assert_int_equal(rlp_reward_refine(r, 4, NULL, RLP_REFINE_DELTA, 0), RLP_OK);
    const float d[4] = {-0.7f, 0.4f, -0.2f, 0.7f};
    float sum = 0;
    for (int i = 0; i < 4; i++) {
        assert_float_equal(r[i], d[i], TOK_TOL);
        sum += r[i];
    }
    assert_float_equal(sum, 0.2f, TOK_TOL); /* the return is the first step's reward */
    float c[4] = {0.2f, 0.9f, 0.5f, 0.7f};
    assert_int_equal(rlp_reward_refine(c, 4, NULL, RLP_REFINE_CLIP, 0.6f), RLP_OK);
    const float cw[4] = {-0.4f, 0, -0.1f, 0};
    for (int i = 0; i < 4; i++)
        assert_float_equal(c[i], cw[i], TOK_TOL);
    /* a mask: entries between steps stay */
    float m[5] = {0.5f, 3.0f, 0.25f, 3.0f, 1.0f};
    const uint8_t mask[5] = {1, 0, 1, 0, 1};
    assert_int_equal(rlp_reward_refine(m, 5, mask, RLP_REFINE_DELTA, 0), RLP_OK);
    const float mw[5] = {0.25f, 3.0f, -0.75f, 3.0f, 1.0f};
    for (int i = 0; i < 5; i++)
        assert_float_equal(m[i], mw[i], TOK_TOL);
    float one = 0.4f;
    assert_int_equal(rlp_reward_refine(&one, 1, NULL, RLP_REFINE_CLIP_DELTA, 0.1f), RLP_OK);
    assert_float_equal(one, 0.0f, 0);
    assert_int_equal(rlp_reward_refine(NULL, 0, NULL, RLP_REFINE_CLIP, 0), RLP_OK);
    assert_int_equal(rlp_reward_refine(NULL, 1, NULL, RLP_REFINE_CLIP, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_refine(r, 4, NULL, -1, 0), RLP_E_INVALID_ARG);
}

/* ---- combination ---------------------------------------------------------------------------- */

static int score_index(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    res->score = (double)req->batch_index;
    if (req->n_completion_tokens) {
        res->token_scores[0] = 1.0f;
        res->has_token_scores = 1;
    }
    return 0;
}

static int score_one_or_fail(rlp_reward_result *res, const rlp_reward_request *req, void *payload)
{
    (void)payload;
    if (req->batch_index == 2) {
        snprintf(res->reason, sizeof res->reason, "boom");
        return 1;
    }
    res->score = 1.0;
    return 0;
}

static void test_combine(void **state)
{
    (void)state;
    rlp_reward_options o1 = RLP_REWARD_OPTIONS_INIT, o2 = RLP_REWARD_OPTIONS_INIT;
    o1.name = "index";
    o1.n_threads = 2;
    o2.name = "one";
    o2.n_threads = 1;
    rlp_reward_fn *a = NULL, *c = NULL, *fmt = NULL, *comb = NULL;
    assert_int_equal(rlp_reward_fn_create_callback(&a, score_index, &o1, NULL), RLP_OK);
    assert_int_equal(rlp_reward_fn_create_callback(&c, score_one_or_fail, &o2, NULL), RLP_OK);
    assert_int_equal(rlp_reward_fn_create_builtin(&fmt, "logic_rl_format", "{\"threads\": 1}"), RLP_OK);
    rlp_reward_fn *members[3] = {a, c, fmt};
    const double w[3] = {0.5, 2.0, 0.25};
    assert_int_equal(rlp_reward_fn_combine(&comb, members, (const double[]){1, NAN, 1}, 3), RLP_E_INVALID_ARG);
    rlp_reward_fn *dup[2] = {a, a};
    assert_int_equal(rlp_reward_fn_combine(&comb, dup, NULL, 2), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_combine(&comb, members, w, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_combine(&comb, members, w, 3), RLP_OK);
    assert_string_equal(rlp_reward_fn_name(comb), "combine");
    rlp_batch *b = make_batch(5);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(comb, b, &st), RLP_OK);
    assert_int_equal(st.valid, 4);
    assert_int_equal(st.errors, 1);
    for (size_t i = 0; i < 5; i++) {
        rlp_trajectory t = get(b, i);
        if (i == 2) {
            assert_false(t.valid);
            assert_string_equal(t.error, "one: boom");
            continue;
        }
        /* 0.5 i + 2 * 1 + 0.25 * (-1: no tags) */
        assert_true(t.valid);
        assert_float_equal(t.reward, (float)(0.5 * (double)i + 2.0 - 0.25), EXACT);
        assert_non_null(t.token_rewards);
        assert_float_equal(t.token_rewards[0], 0.5f, TOK_TOL);
    }
    /* score_one through a combination: the members' reasons, joined */
    rlp_reward_request req;
    memset(&req, 0, sizeof req);
    req.version = RLP_REWARD_REQUEST_VERSION;
    req.completion_text = "<think>a</think><answer>b</answer>";
    req.completion_len = strlen(req.completion_text);
    req.batch_index = 4;
    rlp_reward_result res;
    assert_int_equal(rlp_reward_fn_score_one(&res, comb, &req), RLP_OK);
    assert_true(res.valid);
    assert_double_equal(res.score, 0.5 * 4 + 2.0 + 0.25, 1e-12);
    assert_non_null(strstr(res.reason, "logic_rl_format: format ok"));
    assert_null(res.token_scores);
    rlp_batch_free(b);
    rlp_reward_fn_free(comb); /* frees the members */
}

/* ---- odds and ends ---------------------------------------------------------------------------- */

static void test_skips_failed_rollouts_and_args(void **state)
{
    (void)state;
    rlp_reward_fn *fn = NULL;
    rlp_reward_options o = RLP_REWARD_OPTIONS_INIT;
    o.n_threads = 1;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, score_index, &o, NULL), RLP_OK);
    rlp_batch *b = make_batch(3);
    rlp_trajectory tr;
    memset(&tr, 0, sizeof tr);
    tr.version = RLP_TRAJECTORY_VERSION;
    tr.finish_reason = RLP_FINISH_ERROR;
    tr.reward = NAN;
    tr.error = "HTTP 503";
    assert_int_equal(rlp_batch_append(b, &tr), RLP_OK);
    rlp_reward_stats st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, b, &st), RLP_OK);
    assert_int_equal(st.scored, 3);
    assert_int_equal(st.skipped, 1);
    rlp_trajectory t = get(b, 3);
    assert_false(t.valid);
    assert_string_equal(t.error, "HTTP 503");
    /* an empty batch is fine; stats without a version are not */
    rlp_batch *e = NULL;
    assert_int_equal(rlp_batch_create(&e), RLP_OK);
    st = new_stats();
    assert_int_equal(rlp_reward_fn_score(fn, e, &st), RLP_OK);
    assert_int_equal(st.scored, 0);
    assert_true(isnan(st.mean_score));
    st.version = 0;
    assert_int_equal(rlp_reward_fn_score(fn, e, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_score(NULL, e, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_score(fn, NULL, NULL), RLP_E_INVALID_ARG);
    rlp_batch_free(e);
    rlp_batch_free(b);
    rlp_reward_fn_free(fn);
    rlp_reward_fn_free(NULL);
    assert_int_equal(rlp_reward_fn_create_callback(&fn, NULL, NULL, NULL), RLP_E_INVALID_ARG);
    o.version = 99;
    assert_int_equal(rlp_reward_fn_create_callback(&fn, score_index, &o, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_options_init(&o, 99), RLP_E_INVALID_ARG);
    rlp_http_reward_options h;
    assert_int_equal(rlp_http_reward_options_init(&h, RLP_HTTP_REWARD_OPTIONS_VERSION), RLP_OK);
    assert_int_equal(rlp_reward_fn_create_http(&fn, &h), RLP_E_INVALID_ARG); /* no URL */
    h.url = "ftp://example.invalid/";
    assert_int_equal(rlp_reward_fn_create_http(&fn, &h), RLP_E_INVALID_ARG);
}

/* Two threads scoring through one handle take turns. */
typedef struct shared_job {
    rlp_reward_fn *fn;
    rlp_batch *b;
    int rc;
} shared_job;

static void *score_thread(void *p)
{
    shared_job *j = p;
    for (int k = 0; k < 20 && j->rc == RLP_OK; k++)
        j->rc = rlp_reward_fn_score(j->fn, j->b, NULL);
    return NULL;
}

static void test_concurrent_callers(void **state)
{
    (void)state;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "exact_match", "{\"threads\": 2}"), RLP_OK);
    shared_job j[2];
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        j[k].fn = fn;
        j[k].b = make_batch(50);
        j[k].rc = RLP_OK;
        assert_int_equal(pthread_create(&th[k], NULL, score_thread, &j[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(j[k].rc, RLP_OK);
        rlp_trajectory t = get(j[k].b, 7);
        assert_true(t.valid); /* "c7" vs reference "r7": a valid 0 */
        assert_float_equal(t.reward, 0.0f, EXACT);
        rlp_batch_free(j[k].b);
    }
    rlp_reward_fn_free(fn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_callback_sees_the_batch),
        cmocka_unit_test(test_reason_cut_at_a_character),
        cmocka_unit_test(test_callback_faults),
        cmocka_unit_test(test_abandoned_limit),
        cmocka_unit_test(test_rest_of_an_abandoned_block),
        cmocka_unit_test(test_batch_callback),
        cmocka_unit_test(test_token_scores_and_refinement),
        cmocka_unit_test(test_refine_function),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_skips_failed_rollouts_and_args),
        cmocka_unit_test(test_concurrent_callers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
