/* LoRA adapters in the transformer against Hugging Face PEFT
 * (tests/reference/make_lora_fixtures.py: get_peft_model on transformers'
 * LlamaForCausalLM and Qwen2ForCausalLM, float64, random non-zero A and B):
 *   - per-token logprobs and entropies at a temperature over packed
 *     sequences, and the gradient of L = -Σ w·logp + Σ u·H for every
 *     adapter tensor, with the base frozen; in the fused and the separate
 *     projection paths and with activation checkpointing;
 *   - the merged model (our export vs PEFT's merge_and_unload): logits;
 *   - all seven projections (Llama, GQA, untied head) and a subset with
 *     rsLoRA scaling on a tied model with QKV bias (Qwen2).
 * Tolerances (fp32 against float64), as test_transformer_arch.c: values
 * 1e-4 absolute, gradients 1e-4 · max(1, max|ref|) per tensor.
 *
 * Also: central finite differences of the adapters' gradients in fp32
 * (the largest 3 entries of each of 4 tensors, h = 1e-2, within 2 % or
 * 2e-3 absolute); with B = 0 (a fresh attach) and with the adapters
 * disabled the model equals the base bit for bit; bad configs are refused
 * and leave the model usable; the KV-cached decode refuses an adapted
 * model rather than silently ignoring the adapters.
 *
 * With RLPOST_TEST_BACKEND=cuda the same checks run on the CUDA backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/error.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "model_fixture.h"
#include "test_backend_env.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_VALUE 1e-4
#define TOL_GRAD 1e-4

static rlpi_backend *be;

typedef struct fixture {
    model_fixture m;
    float inv_temp;
    rlpi_lora_config lcfg;
} fixture;

static const void *array(fixture *f, const char *key, size_t *count)
{
    return fixture_array(&f->m, key, count);
}

static void load(fixture *f, const char *name)
{
    fixture_load(&f->m, name);
    f->inv_temp = (float)json_number_value(json_object_get(f->m.meta, "inv_temp"));
    json_t *l = json_object_get(f->m.meta, "lora");
    f->lcfg.rank = (int32_t)json_integer_value(json_object_get(l, "rank"));
    f->lcfg.alpha = (float)json_number_value(json_object_get(l, "alpha"));
    f->lcfg.rslora = json_is_true(json_object_get(l, "rslora"));
    f->lcfg.targets = 0;
    json_t *t;
    size_t i;
    json_array_foreach(json_object_get(l, "targets"), i, t)
    {
        uint32_t m;
        assert_int_equal(rlpi_lora_parse_targets(json_string_value(t), &m), RLP_OK);
        f->lcfg.targets |= m;
    }
}

static rlpi_packed_batch batch_of(fixture *f)
{
    size_t c;
    return (rlpi_packed_batch){.n_seq = f->m.n_seq,
                               .seq_start = f->m.seq_start,
                               .n_tokens = f->m.n,
                               .tokens = array(f, "tokens", &c),
                               .positions = array(f, "positions", &c),
                               .targets = array(f, "targets", &c)};
}

/* base from the fixture, adapters attached, then set to the fixture's A and B */
static rlpi_transformer *adapted(fixture *f, const rlpi_transformer_options *opts)
{
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f->m.cfg, &f->m.w, opts), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &f->lcfg, 1), RLP_OK);
    size_t n = rlpi_transformer_n_trainable_tensors(tf);
    assert_int_equal(n, json_object_size(json_object_get(f->m.meta, "adapters")));
    for (size_t i = 0; i < n; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, i);
        char key[256];
        snprintf(key, sizeof key, "l:%s", in->name);
        size_t c;
        const float *src = array(f, key, &c);
        assert_int_equal(c, in->n_elems);
        assert_int_equal(rlpi_buffer_upload(rlpi_transformer_trainable_params(tf), in->offset * 4, src, c * 4), RLP_OK);
    }
    return tf;
}

static float *grads_of(rlpi_transformer *tf)
{
    size_t n = rlpi_transformer_n_trainable(tf);
    float *g = malloc(n * 4);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_trainable_grads(tf), 0, g, n * 4), RLP_OK);
    return g;
}

static void check_case(const char *name, const rlpi_transformer_options *opts, bool separate)
{
    fixture f;
    load(&f, name);
    rlpi_transformer *tf = adapted(&f, opts);
    if (separate)
        rlpi_transformer_set_fused_projections(tf, false, false);
    assert_null(rlpi_transformer_grads(tf)); /* the base is frozen: no gradient buffer */
    rlpi_packed_batch b = batch_of(&f);
    float logp[64], ent[64];
    size_t c;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, logp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, array(&f, "dlogp", &c), array(&f, "dentropy", &c)), RLP_OK);
    const float *rl = array(&f, "logp", &c), *re = array(&f, "entropy", &c);
    double max_lp = 0, max_h = 0;
    for (int64_t i = 0; i < f.m.n; i++) {
        max_lp = fmax(max_lp, fabs(logp[i] - rl[i]));
        max_h = fmax(max_h, fabs(ent[i] - re[i]));
    }
    float *g = grads_of(tf);
    double worst = 0;
    for (size_t t = 0; t < rlpi_transformer_n_trainable_tensors(tf); t++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, t);
        char key[256];
        snprintf(key, sizeof key, "lg:%s", in->name);
        const float *ref = array(&f, key, &c);
        double maxref = 0, maxerr = 0;
        for (size_t i = 0; i < c; i++) {
            maxref = fmax(maxref, fabs(ref[i]));
            maxerr = fmax(maxerr, fabs(g[in->offset + i] - ref[i]));
        }
        double rel = maxerr / fmax(1.0, maxref);
        worst = fmax(worst, rel);
        if (rel > TOL_GRAD)
            fail_msg("%s: gradient of %s off by %.3e (max |ref| %.3e)", name, in->name, maxerr, maxref);
    }

    /* the merged export against PEFT's merge_and_unload */
    rlpi_weights w;
    assert_int_equal(rlpi_transformer_export(tf, &w), RLP_OK);
    rlpi_transformer *merged;
    assert_int_equal(rlpi_transformer_create(&merged, be, &f.m.cfg, &w, NULL), RLP_OK);
    int64_t n = f.m.n, V = f.m.cfg.vocab_size;
    int32_t *rows = malloc((size_t)n * sizeof *rows);
    float *logits = malloc((size_t)(n * V) * sizeof *logits);
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int32_t)i;
    assert_int_equal(rlpi_transformer_logits_rows(merged, &b, rows, n, logits), RLP_OK);
    const float *rm = array(&f, "merged_logits", &c);
    assert_int_equal(c, (size_t)(n * V));
    double max_merged = 0;
    for (size_t i = 0; i < c; i++)
        max_merged = fmax(max_merged, fabs(logits[i] - rm[i]));
    /* the same merge made in place in another transformer's buffer (what a rollout engine gets) */
    rlpi_transformer *inplace;
    assert_int_equal(rlpi_transformer_create(&inplace, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_lora_merge_params(tf, inplace), RLP_OK);
    assert_int_equal(rlpi_transformer_logits_rows(inplace, &b, rows, n, logits), RLP_OK);
    for (size_t i = 0; i < c; i++)
        max_merged = fmax(max_merged, fabs(logits[i] - rm[i]));
    rlpi_transformer_free(inplace);
    print_message("%s%s%s: |Δlogp| %.2e, |Δentropy| %.2e, worst adapter gradient %.2e over %zu tensors, merged "
                  "|Δlogits| %.2e\n",
                  name, separate ? " (separate projections)" : "",
                  opts && opts->activation_checkpointing ? " (checkpointed)" : "", max_lp, max_h, worst,
                  rlpi_transformer_n_trainable_tensors(tf), max_merged);
    assert_true(max_lp <= TOL_VALUE);
    assert_true(max_h <= TOL_VALUE);
    assert_true(max_merged <= TOL_VALUE);
    free(rows);
    free(logits);
    free(g);
    rlpi_weights_free(&w);
    rlpi_transformer_free(merged);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

static void llama_all_targets_match_peft(void **state)
{
    (void)state;
    check_case("lora_llama_all", NULL, false);
    check_case("lora_llama_all", NULL, true);
    rlpi_transformer_options o = {.activation_checkpointing = true};
    check_case("lora_llama_all", &o, false);
}

static void qwen2_rslora_subset_matches_peft(void **state)
{
    (void)state;
    check_case("lora_qwen2_rslora", NULL, false);
    check_case("lora_qwen2_rslora", NULL, true);
}

static double loss_of(fixture *f, rlpi_transformer *tf)
{
    rlpi_packed_batch b = batch_of(f);
    float logp[64], ent[64];
    size_t c;
    assert_int_equal(rlpi_transformer_forward(tf, &b, f->inv_temp, logp, ent, false), RLP_OK);
    const float *dl = array(f, "dlogp", &c), *de = array(f, "dentropy", &c);
    double L = 0;
    for (int64_t i = 0; i < f->m.n; i++)
        L += (double)dl[i] * logp[i] + (double)de[i] * ent[i];
    return L;
}

/* (L(p + h) − L(p − h)) / (2h) at adapter float `at`, restored afterwards */
static double central_difference(fixture *f, rlpi_transformer *tf, size_t at, float h)
{
    rlpi_buffer *P = rlpi_transformer_trainable_params(tf);
    float v0, vp, vm;
    assert_int_equal(rlpi_buffer_download(P, at * 4, &v0, 4), RLP_OK);
    vp = v0 + h, vm = v0 - h;
    assert_int_equal(rlpi_buffer_upload(P, at * 4, &vp, 4), RLP_OK);
    double lp = loss_of(f, tf);
    assert_int_equal(rlpi_buffer_upload(P, at * 4, &vm, 4), RLP_OK);
    double lm = loss_of(f, tf);
    assert_int_equal(rlpi_buffer_upload(P, at * 4, &v0, 4), RLP_OK);
    return (lp - lm) / (double)(vp - vm);
}

static void finite_differences(void **state)
{
    (void)state;
    fixture f;
    load(&f, "lora_llama_all");
    rlpi_transformer *tf = adapted(&f, NULL);
    rlpi_packed_batch b = batch_of(&f);
    float logp[64], ent[64];
    size_t c;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, logp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, array(&f, "dlogp", &c), array(&f, "dentropy", &c)), RLP_OK);
    float *g = grads_of(tf);
    /* A and B of the first layer's q_proj and of the last layer's down_proj */
    size_t nt = rlpi_transformer_n_trainable_tensors(tf), pick[4] = {0, 1, nt - 2, nt - 1};
    const float h = 1e-2f;
    int checked = 0;
    for (int k = 0; k < 4; k++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, pick[k]);
        bool used[4096] = {false};
        assert_true(in->n_elems <= 4096);
        for (int rep = 0; rep < 3; rep++) {
            size_t best = 0;
            for (size_t i = 0; i < in->n_elems; i++)
                if (!used[i] && (used[best] || fabsf(g[in->offset + i]) > fabsf(g[in->offset + best])))
                    best = i;
            used[best] = true;
            double fd = central_difference(&f, tf, in->offset + best, h), an = g[in->offset + best];
            if (fabs(fd - an) > fmax(2e-3, 0.02 * fabs(an)))
                fail_msg("%s[%zu]: finite difference %.6f, backward %.6f", in->name, best, fd, an);
            checked++;
        }
    }
    print_message("finite differences agree at %d adapter entries\n", checked);
    free(g);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

/* B = 0 (fresh adapters) and disabled adapters: the base model bit for bit */
static void zero_b_and_disabled_are_the_base(void **state)
{
    (void)state;
    fixture f;
    load(&f, "lora_llama_all");
    rlpi_packed_batch b = batch_of(&f);
    rlpi_transformer *base, *tf;
    assert_int_equal(rlpi_transformer_create(&base, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &f.lcfg, 42), RLP_OK);
    float lp0[64], e0[64], lp1[64], e1[64];
    assert_int_equal(rlpi_transformer_forward(base, &b, f.inv_temp, lp0, e0, false), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp1, e1, true), RLP_OK);
    assert_memory_equal(lp0, lp1, (size_t)f.m.n * 4);
    assert_memory_equal(e0, e1, (size_t)f.m.n * 4);
    /* A is drawn U(−1/√in, 1/√in), B is zero */
    size_t n = rlpi_transformer_n_trainable(tf);
    float *p = malloc(n * 4);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_trainable_params(tf), 0, p, n * 4), RLP_OK);
    for (size_t t = 0; t < rlpi_transformer_n_trainable_tensors(tf); t++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, t);
        bool is_b = strstr(in->name, "lora_B") != NULL;
        double bound = 1.0 / sqrt((double)in->shape[1]), maxabs = 0;
        for (size_t i = 0; i < in->n_elems; i++)
            maxabs = fmax(maxabs, fabs(p[in->offset + i]));
        if (is_b)
            assert_true(maxabs == 0.0);
        else
            assert_true(maxabs > 0.5 * bound && maxabs <= bound);
    }
    free(p);
    rlpi_transformer_free(tf);
    /* the fixture's non-zero adapters, switched off: the base again */
    tf = adapted(&f, NULL);
    rlpi_transformer_set_lora_enabled(tf, false);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp1, e1, false), RLP_OK);
    assert_memory_equal(lp0, lp1, (size_t)f.m.n * 4);
    rlpi_weights w;
    assert_int_equal(rlpi_transformer_export(tf, &w), RLP_OK); /* disabled: exports the base */
    const rlpi_tensor *q = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight");
    const rlpi_tensor *q0 = rlpi_weights_find(&f.m.w, "model.layers.0.self_attn.q_proj.weight");
    assert_memory_equal(q->data, q0->data, q->n_elems * 4);
    rlpi_weights_free(&w);
    rlpi_transformer_set_lora_enabled(tf, true);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp1, e1, false), RLP_OK);
    size_t c;
    const float *rl = array(&f, "logp", &c);
    for (int64_t i = 0; i < f.m.n; i++)
        assert_true(fabs(lp1[i] - rl[i]) <= TOL_VALUE);
    rlpi_transformer_free(tf);
    rlpi_transformer_free(base);
    fixture_free(&f.m);
}

static void refuses_bad_configs(void **state)
{
    (void)state;
    fixture f;
    load(&f, "lora_llama_all");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    size_t base_params = rlpi_transformer_n_trainable(tf);
    const rlpi_lora_config bad[] = {
        {.rank = 0, .alpha = 8, .targets = RLPI_LORA_ALL_TARGETS},
        {.rank = 4, .alpha = 0, .targets = RLPI_LORA_ALL_TARGETS},
        {.rank = 4, .alpha = NAN, .targets = RLPI_LORA_ALL_TARGETS},
        {.rank = 4, .alpha = 8, .targets = 0},
        {.rank = 4, .alpha = 8, .targets = 1u << 7},
        {.rank = 17, .alpha = 8, .targets = 1u << RLPI_LORA_K}, /* above k_proj's 16 outputs */
        {.rank = RLPI_LORA_MAX_RANK + 1, .alpha = 8, .targets = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rlpi_transformer_attach_lora(tf, &bad[i], 1), RLP_E_INVALID_ARG);
        assert_null(rlpi_transformer_lora_config(tf));
        assert_int_equal(rlpi_transformer_n_trainable(tf), base_params); /* nothing changed */
        assert_non_null(rlpi_transformer_grads(tf));
    }
    uint32_t m;
    assert_int_equal(rlpi_lora_parse_targets("q_proj, v_proj", &m), RLP_OK);
    assert_int_equal(m, (1u << RLPI_LORA_Q) | (1u << RLPI_LORA_V));
    assert_int_equal(rlpi_lora_parse_targets("all-linear", &m), RLP_OK);
    assert_int_equal(m, RLPI_LORA_ALL_TARGETS);
    assert_int_equal(rlpi_lora_parse_targets("q_proj,lm_head", &m), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "lm_head"));
    assert_int_equal(rlpi_lora_parse_targets(" , ", &m), RLP_E_INVALID_ARG);

    assert_int_equal(rlpi_transformer_attach_lora(tf, &f.lcfg, 1), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &f.lcfg, 1), RLP_E_STATE);
    /* r·(in + out) per adapted projection: q (32→32), k, v (32→16), o (32→32), gate, up (32→48), down (48→32) */
    int64_t r = f.lcfg.rank, per_layer = r * (64 + 48 + 48 + 64 + 80 + 80 + 80);
    assert_int_equal(rlpi_transformer_n_trainable(tf), (size_t)(per_layer * f.m.cfg.n_layers));
    assert_int_equal(rlpi_transformer_n_trainable_tensors(tf), (size_t)(14 * f.m.cfg.n_layers));
    assert_string_equal(rlpi_transformer_trainable_tensor(tf, 0)->name,
                        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    assert_null(rlpi_transformer_trainable_tensor(tf, 1000));

    rlpi_transformer_free(tf);

    /* a frozen (forward-only) transformer takes inference-only adapters: no gradients, no backward */
    rlpi_transformer_options frozen = {.frozen = true};
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, &frozen), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &f.lcfg, 1), RLP_OK);
    assert_null(rlpi_transformer_trainable_grads(tf));
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_E_STATE);
    rlpi_packed_batch b = batch_of(&f);
    float lp[64];
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp, NULL, true), RLP_E_STATE);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_detach_lora(tf), RLP_OK);
    assert_null(rlpi_transformer_grads(tf)); /* still frozen */
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

/* The Qwen3 and Gemma 3 fixtures of make_arch_fixtures.py (q/k norms,
 * post-norms, GeGLU, sliding windows, soft-cap) with adapters on every
 * projection and random non-zero B: the adapted forward equals the merged
 * export's, and the adapters' gradients agree with finite differences. */
static void family_adapters(const char *name)
{
    fixture f;
    memset(&f, 0, sizeof f);
    fixture_load_family(&f.m, name);
    f.inv_temp = (float)json_number_value(json_object_get(f.m.meta, "inv_temp"));
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    rlpi_lora_config lc = {.rank = 3, .alpha = 6, .targets = RLPI_LORA_ALL_TARGETS};
    assert_int_equal(rlpi_transformer_attach_lora(tf, &lc, 9), RLP_OK);
    size_t np = rlpi_transformer_n_trainable(tf);
    float *p = malloc(np * 4);
    rlpi_buffer *P = rlpi_transformer_trainable_params(tf);
    assert_int_equal(rlpi_buffer_download(P, 0, p, np * 4), RLP_OK);
    unsigned x = 12345;
    for (size_t t = 0; t < rlpi_transformer_n_trainable_tensors(tf); t++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, t);
        if (strstr(in->name, "lora_B"))
            for (size_t i = 0; i < in->n_elems; i++) {
                x = x * 1103515245u + 12345u;
                p[in->offset + i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.4f;
            }
    }
    assert_int_equal(rlpi_buffer_upload(P, 0, p, np * 4), RLP_OK);
    free(p);
    /* adapted forward = merged export */
    rlpi_packed_batch b = batch_of(&f);
    int64_t n = f.m.n, V = f.m.cfg.vocab_size;
    int32_t *rows = malloc((size_t)n * sizeof *rows);
    float *la = malloc((size_t)(n * V) * 4), *lm = malloc((size_t)(n * V) * 4);
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int32_t)i;
    rlpi_weights w;
    rlpi_transformer *merged;
    assert_int_equal(rlpi_transformer_export(tf, &w), RLP_OK);
    assert_int_equal(rlpi_transformer_create(&merged, be, &f.m.cfg, &w, NULL), RLP_OK);
    assert_int_equal(rlpi_transformer_logits_rows(tf, &b, rows, n, la), RLP_OK);
    assert_int_equal(rlpi_transformer_logits_rows(merged, &b, rows, n, lm), RLP_OK);
    double dmax = 0, base_diff = 0;
    for (int64_t i = 0; i < n * V; i++)
        dmax = fmax(dmax, fabs(la[i] - lm[i]));
    rlpi_transformer_set_lora_enabled(tf, false);
    assert_int_equal(rlpi_transformer_logits_rows(tf, &b, rows, n, lm), RLP_OK);
    rlpi_transformer_set_lora_enabled(tf, true);
    for (int64_t i = 0; i < n * V; i++)
        base_diff = fmax(base_diff, fabs(la[i] - lm[i]));
    assert_true(dmax <= 2e-5);
    assert_true(base_diff > 1e-2); /* the adapters do change this model */
    /* the KV-cached decode runs the adapters unmerged: each step's logits are the full forward's */
    int64_t L0 = f.m.seq_start[1] - f.m.seq_start[0], pre = L0 / 2;
    rlpi_kv_cache *kv;
    assert_int_equal(rlpi_kv_cache_create(&kv, tf, 1, 64), RLP_OK);
    double dec = 0;
    for (int64_t t = pre; t <= L0; t++) {
        int64_t q0 = t == pre ? 0 : t - 1, qs[2] = {0, t - q0}, slot = 0, past = q0;
        float step[128];
        assert_true(V <= 128);
        assert_int_equal(rlpi_transformer_extend(tf, kv, 1, qs, &slot, &past, b.tokens + q0, step), RLP_OK);
        rlpi_packed_batch pb = b;
        int64_t ss[2] = {0, t};
        int32_t last = (int32_t)(t - 1);
        pb.n_seq = 1, pb.seq_start = ss, pb.n_tokens = t;
        assert_int_equal(rlpi_transformer_logits_rows(tf, &pb, &last, 1, lm), RLP_OK);
        for (int64_t v = 0; v < V; v++)
            dec = fmax(dec, fabs(step[v] - lm[v]));
    }
    rlpi_kv_cache_free(kv);
    assert_true(dec <= 2e-5);
    /* finite differences at the largest gradients of 4 tensors */
    float logp[64], ent[64];
    size_t c;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, logp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, array(&f, "dlogp", &c), array(&f, "dentropy", &c)), RLP_OK);
    float *g = grads_of(tf);
    size_t nt = rlpi_transformer_n_trainable_tensors(tf), pick[4] = {0, 1, nt - 2, nt - 1};
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, pick[k]);
        size_t best = 0;
        for (size_t i = 0; i < in->n_elems; i++)
            if (fabsf(g[in->offset + i]) > fabsf(g[in->offset + best]))
                best = i;
        double fd = central_difference(&f, tf, in->offset + best, 1e-2f), an = g[in->offset + best];
        worst = fmax(worst, fabs(fd - an) / fmax(1e-1, fabs(an)));
        if (fabs(fd - an) > fmax(2e-3, 0.02 * fabs(an)))
            fail_msg("%s %s[%zu]: finite difference %.6f, backward %.6f", name, in->name, best, fd, an);
    }
    print_message("%s with adapters: merged |Δlogits| %.2e (adapters move logits by %.2e), cached decode "
                  "|Δlogits| %.2e, finite differences within %.2e relative\n",
                  name, dmax, base_diff, dec, worst);
    free(g);
    free(rows);
    free(la);
    free(lm);
    rlpi_weights_free(&w);
    rlpi_transformer_free(merged);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

static void qwen3_and_gemma3_adapters(void **state)
{
    (void)state;
    family_adapters("arch_qwen3_tied");
    family_adapters("arch_gemma3");
    family_adapters("arch_gemma3_softcap");
}

static void fixture_dir(char *out, size_t cap, const char *name)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    snprintf(out, cap, "%s/tests/reference/fixtures/%s", root ? root : ".", name);
}

static void logp_of(fixture *f, rlpi_transformer *tf, float *logp)
{
    rlpi_packed_batch b = batch_of(f);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f->inv_temp, logp, NULL, false), RLP_OK);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* PEFT's own save_pretrained folder loads and gives PEFT's logprobs; ours
 * loads back bit for bit (RLPOST_LORA_EXPORT_DIR keeps ours for
 * tests/reference/check_lora_peft_load.py, which loads it in PEFT) */
static void peft_folders(void **state)
{
    (void)state;
    fixture f;
    load(&f, "lora_llama_all");
    char dir[1024];
    fixture_dir(dir, sizeof dir, "lora_llama_peft");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_lora_load_peft(tf, dir), RLP_OK); /* attaches from adapter_config.json */
    const rlpi_lora_config *c = rlpi_transformer_lora_config(tf);
    assert_non_null(c);
    assert_int_equal(c->rank, f.lcfg.rank);
    assert_int_equal(c->targets, RLPI_LORA_ALL_TARGETS);
    float lp[64], lp2[64];
    logp_of(&f, tf, lp);
    size_t cnt;
    const float *rl = array(&f, "logp", &cnt);
    double worst = 0;
    for (int64_t i = 0; i < f.m.n; i++)
        worst = fmax(worst, fabs(lp[i] - rl[i]));
    print_message("PEFT's save_pretrained folder: |Δlogp| %.2e against PEFT\n", worst);
    assert_true(worst <= TOL_VALUE);

    /* ours: save, load into a fresh base, same logprobs bit for bit */
    const char *keep = getenv("RLPOST_LORA_EXPORT_DIR");
    char tmp[] = "/tmp/rlpost-lora-XXXXXX", ours[1100];
    assert_non_null(mkdtemp(tmp));
    snprintf(ours, sizeof ours, "%s", keep ? keep : tmp);
    assert_int_equal(rlpi_lora_save_peft(tf, ours, "fixture:lora_llama_all"), RLP_OK);
    rlpi_transformer *tf2;
    assert_int_equal(rlpi_transformer_create(&tf2, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_lora_load_peft(tf2, ours), RLP_OK);
    logp_of(&f, tf2, lp2);
    assert_memory_equal(lp, lp2, (size_t)f.m.n * 4);
    /* ours names its base: another base is refused (PEFT's folder above carries no fingerprint) */
    rlpi_weights w2;
    assert_int_equal(rlpi_transformer_export(tf2, &w2), RLP_OK); /* the merged model: another base */
    rlpi_transformer *other_base;
    assert_int_equal(rlpi_transformer_create(&other_base, be, &f.m.cfg, &w2, NULL), RLP_OK);
    assert_int_equal(rlpi_lora_load_peft(other_base, ours), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "another base"));
    assert_null(rlpi_transformer_lora_config(other_base));
    rlpi_transformer_free(other_base);
    rlpi_weights_free(&w2);
    /* loading into attached adapters of another rank is refused */
    rlpi_transformer *tf3;
    assert_int_equal(rlpi_transformer_create(&tf3, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    rlpi_lora_config other = {.rank = 2, .alpha = 8, .targets = RLPI_LORA_ALL_TARGETS};
    assert_int_equal(rlpi_transformer_attach_lora(tf3, &other, 1), RLP_OK);
    assert_int_equal(rlpi_lora_load_peft(tf3, ours), RLP_E_INVALID_ARG);
    rlpi_transformer_free(tf3);

    /* bad folders: refused with the reason, the model untouched (no adapters attached) */
    char bad[] = "/tmp/rlpost-lora-bad-XXXXXX", path[1200];
    assert_non_null(mkdtemp(bad));
    rlpi_transformer *base;
    assert_int_equal(rlpi_transformer_create(&base, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_NOT_FOUND);
    snprintf(path, sizeof path, "%s/adapter_config.json", bad);
    write_text(path,
               "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"use_dora\": true, "
               "\"target_modules\": [\"q_proj\"]}");
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "use_dora"));
    write_text(path, "{\"peft_type\": \"IA3\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}");
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_UNSUPPORTED);
    write_text(path, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"lm_head\"]}");
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_INVALID_ARG);
    write_text(path, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}");
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_NOT_FOUND); /* no weights file */
    /* a weights file with more adapters than the config names: refused, nothing attached */
    char src[1200];
    snprintf(src, sizeof src, "cp %s/adapter_model.safetensors %s/", ours, bad);
    assert_int_equal(system(src), 0);
    assert_int_equal(rlpi_lora_load_peft(base, bad), RLP_E_FORMAT);
    assert_null(rlpi_transformer_lora_config(base));
    assert_non_null(rlpi_transformer_grads(base)); /* trainable again as before */
    logp_of(&f, base, lp2);                        /* still runs */
    rlpi_transformer_free(base);
    snprintf(src, sizeof src, "rm -rf %s %s", bad, tmp);
    assert_int_equal(system(src), 0);
    rlpi_transformer_free(tf2);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

static int setup(void **state)
{
    (void)state;
    return test_backend_create(&be);
}

static int teardown(void **state)
{
    (void)state;
    rlpi_backend_destroy(be);
    return 0;
}

int main(void)
{
    int skip = test_backend_from_env();
    if (skip)
        return skip;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_all_targets_match_peft), cmocka_unit_test(qwen2_rslora_subset_matches_peft),
        cmocka_unit_test(finite_differences),           cmocka_unit_test(zero_b_and_disabled_are_the_base),
        cmocka_unit_test(refuses_bad_configs),          cmocka_unit_test(peft_folders),
        cmocka_unit_test(qwen3_and_gemma3_adapters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
