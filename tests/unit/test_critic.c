/* The PPO critic at the model layer (lib/model/critic.c) against
 * transformers (tests/reference/make_critic_fixtures.py): on the committed
 * LlamaForTokenClassification folder score_llama_token, rlpi_policy_values
 * reads V at positions n_prompt - 1 + t, and the clipped value loss
 * (verl compute_value_loss, token-mean) matches autograd in its loss,
 * clipfrac, mean V and the gradient of every parameter, with clip 0.2
 * (every regime: clip inactive, active with the clipped term larger where
 * the gradient is 0, active with the unclipped term larger) and clip 0,
 * whole and micro-batched. Then a critic made from a language model
 * (llama_tied): V ≡ 0 at the start, value steps toward constant returns
 * lower the loss and move V toward them, and the saved folder reloads
 * through rlp_policy_load as a one-label score model with the same values;
 * a LoRA policy's critic holds the merged weights. And the refusals.
 *
 * Tolerances: values within 1e-4 · max(1, |ref|), gradients within
 * 1e-4 · max(1, max|ref|) per tensor (test_score_head.c's margins: fp32
 * through 2 layers is near 1e-6; a value read one position off, a wrong
 * branch of the max or a mask ignored is off by 1e-2 or more); loss,
 * clipfrac and mean V within 1e-5. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "model/lora.h"
#include "model/policy.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_COMPLETION 7 /* 4 + 3 completion tokens in the fixture */

static rlp_context *ctx;
static json_t *expected;
static char root[400];

/* the fixture's sequences, returns, old values and mask */
typedef struct fx {
    int32_t tokens[2][16];
    rlp_sequence seqs[2];
    float returns[N_COMPLETION], old_values[N_COMPLETION];
    uint8_t on[N_COMPLETION];
} fx;

static void floats(const char *key, float *out, size_t n)
{
    json_t *a = json_object_get(expected, key);
    assert_int_equal(json_array_size(a), n);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)json_number_value(json_array_get(a, i));
}

static void fx_load(fx *f)
{
    json_t *seqs = json_object_get(expected, "sequences"), *np = json_object_get(expected, "n_prompt");
    for (size_t s = 0; s < 2; s++) {
        json_t *seq = json_array_get(seqs, s);
        for (size_t i = 0; i < json_array_size(seq); i++)
            f->tokens[s][i] = (int32_t)json_integer_value(json_array_get(seq, i));
        f->seqs[s] = (rlp_sequence){f->tokens[s], (uint32_t)json_array_size(seq),
                                    (uint32_t)json_integer_value(json_array_get(np, s))};
    }
    floats("returns", f->returns, N_COMPLETION);
    floats("old_values", f->old_values, N_COMPLETION);
    json_t *on = json_object_get(expected, "on");
    for (size_t i = 0; i < N_COMPLETION; i++)
        f->on[i] = (uint8_t)json_integer_value(json_array_get(on, i));
}

static rlp_policy *load_policy(const char *name, int trainable)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/hf/%s", root, name);
    rlpi_model_config cfg;
    rlpi_weights w;
    if (rlpi_model_load_weights(dir, &cfg, &w, NULL) != RLP_OK)
        fail_msg("%s: %s", name, rlp_error_last());
    rlp_policy_options o = RLP_POLICY_OPTIONS_INIT;
    o.trainable = trainable;
    rlp_policy *p;
    if (rlpi_policy_create(&p, ctx, &cfg, &w, &o) != RLP_OK)
        fail_msg("%s: %s", name, rlp_error_last());
    rlpi_weights_free(&w);
    return p;
}

static void check_close(const char *what, size_t i, double got, double want, double scale, double *max_err)
{
    double e = fabs(got - want);
    if (!(e <= 1e-4 * scale))
        fail_msg("%s[%zu]: %.7g, transformers %.7g", what, i, got, want);
    if (e / scale > *max_err)
        *max_err = e / scale;
}

static void values_match_torch(void **state)
{
    (void)state;
    fx f;
    fx_load(&f);
    rlp_policy *p = load_policy("score_llama_token", 1);
    float v[N_COMPLETION], want[N_COMPLETION];
    floats("values", want, N_COMPLETION);
    assert_int_equal(rlpi_policy_values(p, f.seqs, 2, v), RLP_OK);
    double max_err = 0;
    for (size_t i = 0; i < N_COMPLETION; i++)
        check_close("values", i, v[i], want[i], fmax(1.0, fabs(want[i])), &max_err);
    printf("# values: max scaled error %.3g\n", max_err);
    /* a sequence without completion tokens contributes nothing, anywhere */
    rlp_sequence three[3] = {f.seqs[0], {f.tokens[1], 3, 3}, f.seqs[1]};
    float v3[N_COMPLETION];
    assert_int_equal(rlpi_policy_values(p, three, 3, v3), RLP_OK);
    assert_memory_equal(v, v3, sizeof v);
    rlp_policy_free(p);
}

/* the gradient left by rlpi_policy_value_grads against the case's */
static void check_grads(rlp_policy *p, json_t *jg, double *max_err)
{
    rlpi_transformer *tf = p->tf;
    size_t np = rlpi_transformer_n_params(tf);
    float *g = malloc(np * sizeof *g);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g, np * sizeof *g), RLP_OK);
    size_t n_checked = 0;
    for (size_t i = 0; i < rlpi_transformer_n_tensors(tf); i++) {
        const rlpi_param_info *in = rlpi_transformer_tensor(tf, i);
        json_t *ref = json_object_get(jg, in->name);
        if (!ref)
            fail_msg("transformers has no gradient for %s", in->name);
        assert_int_equal(json_array_size(ref), in->n_elems);
        double mx = 1.0;
        for (size_t e = 0; e < in->n_elems; e++)
            mx = fmax(mx, fabs(json_number_value(json_array_get(ref, e))));
        for (size_t e = 0; e < in->n_elems; e++)
            check_close(in->name, e, g[in->offset + e], json_number_value(json_array_get(ref, e)), mx, max_err);
        n_checked++;
    }
    assert_int_equal(n_checked, json_object_size(jg)); /* every parameter, none left over */
    free(g);
}

static void value_loss_matches_torch(void **state)
{
    (void)state;
    fx f;
    fx_load(&f);
    rlp_policy *p = load_policy("score_llama_token", 1);
    rlpi_value_batch b = {f.seqs, 2, f.returns, f.old_values, f.on};
    json_t *cases = json_object_get(expected, "cases");
    assert_int_equal(json_array_size(cases), 2);
    double max_err = 0;
    for (size_t c = 0; c < 2; c++) {
        json_t *jc = json_array_get(cases, c);
        float clip = (float)json_number_value(json_object_get(jc, "clip"));
        /* all at once; one sequence a micro-batch (7 + 5 tokens, budget 7) */
        static const uint32_t budgets[] = {0, 7};
        for (size_t k = 0; k < 2; k++) {
            rlpi_value_stats st;
            if (rlpi_policy_value_grads(p, &b, clip, budgets[k], &st) != RLP_OK)
                fail_msg("clip %g: %s", (double)clip, rlp_error_last());
            assert_int_equal(st.n_tokens, 5);
            assert_true(fabs(st.loss - json_number_value(json_object_get(jc, "loss"))) < 1e-5);
            assert_true(fabs(st.clipfrac - json_number_value(json_object_get(jc, "clipfrac"))) < 1e-5);
            assert_true(fabs(st.vpred_mean - json_number_value(json_object_get(jc, "vpred_mean"))) < 1e-5);
            check_grads(p, json_object_get(jc, "grads"), &max_err);
        }
    }
    printf("# value-loss gradients: max scaled error %.3g\n", max_err);
    /* the step proper with lr 0 and no decay: the same statistics, the
     * version advanced, the weights (hence the values) unchanged */
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 0;
    oo.weight_decay = 0;
    assert_int_equal(rlp_policy_set_optimizer(p, &oo), RLP_OK);
    float v0[N_COMPLETION], v1[N_COMPLETION];
    assert_int_equal(rlpi_policy_values(p, f.seqs, 2, v0), RLP_OK);
    rlpi_value_stats st;
    json_t *jc = json_array_get(cases, 0);
    assert_int_equal(rlpi_policy_value_step(p, &b, 0.2f, 0, &st), RLP_OK);
    assert_true(fabs(st.loss - json_number_value(json_object_get(jc, "loss"))) < 1e-5);
    assert_true(fabs(st.clipfrac - json_number_value(json_object_get(jc, "clipfrac"))) < 1e-5);
    assert_true(st.grad_norm > 0 && isfinite(st.grad_norm));
    assert_int_equal(st.skipped, 0);
    uint64_t version;
    assert_int_equal(rlp_policy_version(&version, p), RLP_OK);
    assert_int_equal(version, 1);
    assert_int_equal(rlpi_policy_values(p, f.seqs, 2, v1), RLP_OK);
    assert_memory_equal(v0, v1, sizeof v0);
    /* the mask matters: all on is another loss */
    rlpi_value_batch all = b;
    all.on = NULL;
    rlpi_value_stats sa;
    assert_int_equal(rlpi_policy_value_grads(p, &all, 0.2f, 0, &sa), RLP_OK);
    assert_int_equal(sa.n_tokens, N_COMPLETION);
    assert_true(fabs(sa.loss - st.loss) > 1e-3);
    rlp_policy_free(p);
}

static double mean_abs_err(const float *v, size_t n, float target)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs(v[i] - target);
    return s / (double)n;
}

static void critic_from_language_model(void **state)
{
    (void)state;
    rlp_policy *lm = load_policy("llama_tied", 1);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 1e-2f;
    oo.weight_decay = 0;
    rlp_policy *critic;
    if (rlpi_policy_create_critic(&critic, lm, &oo) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    uint32_t labels;
    assert_int_equal(rlp_policy_score_labels(&labels, critic), RLP_OK);
    assert_int_equal(labels, 1);
    assert_null(critic->tokenizer);
    assert_true(critic->trainable);
    assert_int_equal(critic->opt.cfg.lr, 1e-2f);

    int32_t t1[] = {1, 5, 9, 2, 17, 30, 4, 12}, t2[] = {3, 8, 8, 21, 11, 6};
    rlp_sequence seqs[2] = {{t1, 8, 3}, {t2, 6, 2}};
    enum { N = 9 };
    float v[N], returns[N], old[N];
    assert_int_equal(rlpi_policy_values(critic, seqs, 2, v), RLP_OK);
    for (size_t i = 0; i < N; i++) {
        assert_true(v[i] == 0.0f); /* a zero head: exactly 0 */
        returns[i] = 1.0f;
    }
    /* PPO's loop: each step's old values are the critic's values at its start */
    double first = 0, last = 0;
    for (int step = 0; step < 15; step++) {
        memcpy(old, v, sizeof v);
        rlpi_value_batch b = {seqs, 2, returns, old, NULL};
        rlpi_value_stats st;
        if (rlpi_policy_value_step(critic, &b, 0.2f, 8, &st) != RLP_OK)
            fail_msg("step %d: %s", step, rlp_error_last());
        assert_int_equal(st.n_tokens, N);
        if (step == 0) {
            first = st.loss;
            assert_true(fabs(st.loss - 0.5) < 1e-6); /* ½ (0 − 1)² */
            assert_true(st.vpred_mean == 0.0);
        }
        last = st.loss;
        assert_int_equal(rlpi_policy_values(critic, seqs, 2, v), RLP_OK);
    }
    printf("# critic from an LM: loss %.4g -> %.4g, mean |V - 1| %.4g\n", first, last, mean_abs_err(v, N, 1.0f));
    assert_true(last < 0.5 * first);
    assert_true(mean_abs_err(v, N, 1.0f) < 0.5);
    uint64_t version;
    assert_int_equal(rlp_policy_version(&version, critic), RLP_OK);
    assert_int_equal(version, 15);

    /* the policy it came from is untouched: still a language model */
    assert_int_equal(rlp_policy_score_labels(&labels, lm), RLP_OK);
    assert_int_equal(labels, 0);
    float lp[16];
    size_t n_lp;
    assert_int_equal(rlp_policy_logprobs(lm, seqs, 2, 1.0f, lp, NULL, 16, &n_lp), RLP_OK);

    /* saved as a token classifier, it loads back as a score model */
    char dir[] = "/tmp/rlpost-critic-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[64];
    snprintf(sub, sizeof sub, "%s/critic", dir);
    if (rlpi_policy_save_hf(critic, sub, RLP_DTYPE_F32, true) != RLP_OK)
        fail_msg("save: %s", rlp_error_last());
    rlp_policy *back;
    if (rlp_policy_load(&back, ctx, sub, NULL) != RLP_OK)
        fail_msg("reload: %s", rlp_error_last());
    assert_int_equal(rlp_policy_score_labels(&labels, back), RLP_OK);
    assert_int_equal(labels, 1);
    float v2[N];
    assert_int_equal(rlpi_policy_values(back, seqs, 2, v2), RLP_OK);
    assert_memory_equal(v, v2, sizeof v);
    /* rlp_policy_score at every token agrees at the value positions */
    float sc[14];
    size_t n_sc;
    assert_int_equal(rlp_policy_score(back, seqs, 2, sc, 14, &n_sc), RLP_OK);
    assert_int_equal(n_sc, 14);
    for (size_t t = 0; t < 5; t++)
        assert_true(sc[2 + t] == v[t]);
    for (size_t t = 0; t < 4; t++)
        assert_true(sc[8 + 1 + t] == v[5 + t]);
    rlp_policy_free(back);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);

    /* a critic of a critic: the head is replaced again (zero), the body kept */
    rlp_policy *c2;
    assert_int_equal(rlpi_policy_create_critic(&c2, critic, NULL), RLP_OK);
    assert_int_equal(c2->opt.cfg.lr, 1e-2f);
    assert_int_equal(rlpi_policy_values(c2, seqs, 2, v2), RLP_OK);
    for (size_t i = 0; i < N; i++)
        assert_true(v2[i] == 0.0f);
    rlp_policy_free(c2);
    rlp_policy_free(critic);
    rlp_policy_free(lm);
}

/* LoRA adapters are merged into the critic's body: its weights are the
 * policy's merged model (rlpi_transformer_export) but for the head */
static void critic_of_lora_policy_is_merged(void **state)
{
    (void)state;
    rlp_policy *lm = load_policy("llama_tied", 1);
    rlp_lora_options lo = RLP_LORA_OPTIONS_INIT;
    lo.rank = 2;
    assert_int_equal(rlp_policy_enable_lora(lm, &lo), RLP_OK);
    rlp_optimizer_options oo = RLP_OPTIMIZER_OPTIONS_INIT;
    oo.lr = 1e-1f;
    assert_int_equal(rlp_policy_set_optimizer(lm, &oo), RLP_OK);
    int32_t t1[] = {1, 5, 9, 2, 17, 30, 4, 12};
    rlp_sequence seq = {t1, 8, 3};
    assert_int_equal(rlp_policy_train_step(lm, &seq, 1, rlp_loss_nll, NULL, NULL, NULL), RLP_OK); /* B != 0 */
    rlp_policy *critic;
    assert_int_equal(rlpi_policy_create_critic(&critic, lm, NULL), RLP_OK);
    assert_null(rlpi_transformer_lora_config(critic->tf));
    rlpi_weights wl, wc;
    assert_int_equal(rlpi_transformer_export(lm->tf, &wl), RLP_OK);
    assert_int_equal(rlpi_transformer_export(critic->tf, &wc), RLP_OK);
    const rlpi_tensor *base_q = NULL;
    size_t n_same = 0;
    for (size_t i = 0; i < wc.n; i++) {
        const rlpi_tensor *c = &wc.tensors[i];
        if (!strncmp(c->name, "score.", 6))
            continue;
        const rlpi_tensor *l = rlpi_weights_find(&wl, c->name);
        assert_non_null(l);
        assert_int_equal(l->n_elems, c->n_elems);
        assert_memory_equal(rlpi_tensor_data(&wl, l), rlpi_tensor_data(&wc, c), c->n_elems * sizeof(float));
        if (!strcmp(c->name, "model.layers.0.self_attn.q_proj.weight"))
            base_q = c;
        n_same++;
    }
    assert_non_null(base_q);
    /* and the merge moved the weights off the file's: the adapters counted */
    rlpi_model_config cfg;
    rlpi_weights wf;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/hf/llama_tied", root);
    assert_int_equal(rlpi_model_load_weights(dir, &cfg, &wf, NULL), RLP_OK);
    const rlpi_tensor *fq = rlpi_weights_find(&wf, base_q->name);
    assert_true(memcmp(rlpi_tensor_data(&wf, fq), rlpi_tensor_data(&wc, base_q), fq->n_elems * sizeof(float)) != 0);
    printf("# LoRA critic: %zu body tensors equal the merged policy's\n", n_same);
    rlpi_weights_free(&wf);
    rlpi_weights_free(&wl);
    rlpi_weights_free(&wc);
    rlp_policy_free(critic);
    rlp_policy_free(lm);
}

static void refusals(void **state)
{
    (void)state;
    fx f;
    fx_load(&f);
    rlp_policy *lm = load_policy("llama_tied", 1);
    rlp_policy *p = load_policy("score_llama_token", 1);
    float v[N_COMPLETION];
    rlpi_value_batch b = {f.seqs, 2, f.returns, f.old_values, f.on};
    rlpi_value_stats st;

    /* a language model is no critic */
    assert_int_equal(rlpi_policy_values(lm, f.seqs, 2, v), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "score head"));
    assert_int_equal(rlpi_policy_value_step(lm, &b, 0.2f, 0, &st), RLP_E_STATE);

    /* no prompt: no state before the first completion token */
    rlp_sequence bad[2] = {f.seqs[0], f.seqs[1]};
    bad[1].n_prompt = 0;
    assert_int_equal(rlpi_policy_values(p, bad, 2, v), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "sequence 1 has n_prompt 0"));
    rlpi_value_batch bb = b;
    bb.seqs = bad;
    assert_int_equal(rlpi_policy_value_step(p, &bb, 0.2f, 0, &st), RLP_E_INVALID_ARG);

    /* non-finite returns or old values of a trained token; NaN clip */
    float r[N_COMPLETION], o[N_COMPLETION];
    memcpy(r, f.returns, sizeof r);
    memcpy(o, f.old_values, sizeof o);
    r[3] = NAN;
    bb = b;
    bb.returns = r;
    assert_int_equal(rlpi_policy_value_step(p, &bb, 0.2f, 0, &st), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "returns[3]"));
    o[0] = INFINITY;
    bb = b;
    bb.old_values = o;
    assert_int_equal(rlpi_policy_value_step(p, &bb, 0.2f, 0, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_value_step(p, &b, NAN, 0, &st), RLP_E_INVALID_ARG);
    /* old values are not read without clipping */
    bb.old_values = NULL;
    assert_int_equal(rlpi_policy_value_step(p, &bb, 0.2f, 0, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_value_grads(p, &bb, 0.0f, 0, &st), RLP_OK);
    /* a NaN where the mask is off is never read */
    r[3] = 0;
    r[2] = NAN; /* on[2] == 0 */
    assert_int_equal(f.on[2], 0);
    bb = b;
    bb.returns = r;
    assert_int_equal(rlpi_policy_value_grads(p, &bb, 0.2f, 0, &st), RLP_OK);
    /* nothing to train */
    uint8_t off[N_COMPLETION] = {0};
    bb = b;
    bb.on = off;
    assert_int_equal(rlpi_policy_value_step(p, &bb, 0.2f, 0, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_value_step(p, NULL, 0.2f, 0, &st), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_values(p, f.seqs, 2, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_values(p, NULL, 2, v), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_policy_create_critic(NULL, lm, NULL), RLP_E_INVALID_ARG);
    uint64_t version;
    assert_int_equal(rlp_policy_version(&version, p), RLP_OK);
    assert_int_equal(version, 0); /* no refused step took one */

    /* a frozen critic has no gradients */
    rlp_policy *frozen = load_policy("score_llama_token", 0);
    assert_int_equal(rlpi_policy_values(frozen, f.seqs, 2, v), RLP_OK); /* values need none */
    assert_int_equal(rlpi_policy_value_step(frozen, &b, 0.2f, 0, &st), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "frozen"));
    rlp_policy_free(frozen);
    rlp_policy_free(p);
    rlp_policy_free(lm);
}

static int setup(void **state)
{
    (void)state;
    rlp_context_options o = RLP_CONTEXT_OPTIONS_INIT;
    o.n_threads = 2;
    return rlp_context_create(&ctx, &o) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlp_context_free(ctx);
    return 0;
}

int main(void)
{
    const char *src = getenv("RLPOST_SOURCE_ROOT");
    if (!src) {
        printf("skipped: RLPOST_SOURCE_ROOT is not set\n");
        return 77;
    }
    snprintf(root, sizeof root, "%s", src);
    char path[512];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/hf/critic_expected.json", root);
    json_error_t err;
    expected = json_load_file(path, 0, &err);
    if (!expected) {
        fprintf(stderr, "%s: %s\n", path, err.text);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(values_match_torch),
        cmocka_unit_test(value_loss_matches_torch),
        cmocka_unit_test(critic_from_language_model),
        cmocka_unit_test(critic_of_lora_policy_is_merged),
        cmocka_unit_test(refusals),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    json_decref(expected);
    return rc;
}
