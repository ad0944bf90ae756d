/* The transformer against an independent float64 PyTorch implementation
 * (tests/reference/make_transformer_fixtures.py): per-token logprobs and
 * entropies at a temperature over packed variable-length sequences, and
 * the gradient of every parameter for L = -Σ w·logp + Σ u·H.
 *
 * Tolerances: logprob/entropy within 1e-4 absolute, gradients within
 * 1e-4 · max(1, max|ref|) per tensor. Our fp32 path through 2 layers is
 * expected near 1e-6 (fp32 rounding over reductions of ≤ 97 terms); the
 * margin is 100×, while a wrong index, transpose, scale or missing term is
 * off by 1e-2 or more.
 *
 * Also checked without a reference: chunking of the head, activation
 * checkpointing, fused Q/K/V and gate/up GEMMs and micro-batch
 * accumulation give the same numbers, and
 * central finite differences agree with the analytic gradient. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/error.h"
#include "backend/cpu_kernels.h"
#include "model/transformer.h"
#include "model_fixture.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    model_fixture m;
    float inv_temp;
} fixture;

static rlpi_backend *be;

static const void *array(fixture *f, const char *key, size_t *count)
{
    return fixture_array(&f->m, key, count);
}

static void load_fixture(fixture *f, const char *name)
{
    fixture_load(&f->m, name);
    f->inv_temp = (float)json_number_value(json_object_get(f->m.meta, "inv_temp"));
}

static void free_fixture(fixture *f)
{
    fixture_free(&f->m);
}

static rlpi_packed_batch batch_of(fixture *f)
{
    size_t c;
    rlpi_packed_batch b = {
        .n_seq = f->m.n_seq, .seq_start = f->m.seq_start, .n_tokens = f->m.n,
        .tokens = array(f, "tokens", &c), .positions = array(f, "positions", &c), .targets = array(f, "targets", &c),
    };
    return b;
}

/* forward + backward of the fixture's loss; grads left in tf */
static void run_fb(fixture *f, rlpi_transformer *tf, float *logp, float *ent)
{
    rlpi_packed_batch b = batch_of(f);
    size_t c;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f->inv_temp, logp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, array(f, "dlogp", &c), array(f, "dentropy", &c)), RLP_OK);
}

static float *download_grads(rlpi_transformer *tf)
{
    size_t n = rlpi_transformer_n_params(tf);
    float *g = malloc(n * 4);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g, n * 4), RLP_OK);
    return g;
}

static void check_against_reference(const char *name)
{
    fixture f;
    load_fixture(&f, name);
    rlpi_transformer *tf;
    rlpi_transformer_options o = {.head_chunk_tokens = 5};
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
    float logp[64], ent[64];
    run_fb(&f, tf, logp, ent);
    size_t c;
    const float *rl = array(&f, "logp", &c), *re = array(&f, "entropy", &c);
    double max_lp = 0, max_h = 0;
    for (int64_t i = 0; i < f.m.n; i++) {
        max_lp = fmax(max_lp, fabs(logp[i] - rl[i]));
        max_h = fmax(max_h, fabs(ent[i] - re[i]));
    }
    print_message("%s: max |Δlogp| %.2e, max |Δentropy| %.2e\n", name, max_lp, max_h);
    assert_true(max_lp <= 1e-4);
    assert_true(max_h <= 1e-4);

    float *g = download_grads(tf);
    double worst = 0;
    for (size_t t = 0; t < rlpi_transformer_n_tensors(tf); t++) {
        const rlpi_param_info *in = rlpi_transformer_tensor(tf, t);
        char key[256];
        snprintf(key, sizeof key, "g:%s", in->name);
        const float *ref = array(&f, key, &c);
        assert_int_equal(c, in->n_elems);
        double maxref = 0, maxerr = 0;
        for (size_t i = 0; i < c; i++) {
            maxref = fmax(maxref, fabs(ref[i]));
            maxerr = fmax(maxerr, fabs(g[in->offset + i] - ref[i]));
        }
        double rel = maxerr / fmax(1.0, maxref);
        worst = fmax(worst, rel);
        if (rel > 1e-4)
            fail_msg("%s: gradient of %s off by %.3e (max |ref| %.3e)", name, in->name, maxerr, maxref);
    }
    print_message("%s: %zu tensors, worst gradient error %.2e (relative to max(1, max|ref|))\n", name,
                  rlpi_transformer_n_tensors(tf), worst);
    free(g);
    rlpi_transformer_free(tf);
    free_fixture(&f);
}

static void llama_gqa_matches_pytorch(void **state)
{
    (void)state;
    check_against_reference("transformer_llama_gqa");
}

static void qwen2_tied_bias_llama3_rope_matches_pytorch(void **state)
{
    (void)state;
    check_against_reference("transformer_qwen2_tied_bias_llama3rope");
}

/* the same checks with the streaming attention kernels (used for
 * sequences too long for an L×L score block) */
static void streaming_attention_matches_pytorch(void **state)
{
    (void)state;
    int64_t saved = rlpi_cpu_attention_blas_max_len;
    rlpi_cpu_attention_blas_max_len = 0;
    check_against_reference("transformer_llama_gqa");
    check_against_reference("transformer_qwen2_tied_bias_llama3rope");
    rlpi_cpu_attention_blas_max_len = saved;
}

/* Head chunk size and activation checkpointing are implementation choices:
 * they must not change results beyond fp32 rounding. A 1-row chunk runs
 * OpenBLAS's GEMV-like path instead of the blocked GEMM, so sums are
 * rounded in another order: 1e-5 relative on gradients, 1e-6 on logprobs
 * (a dropped or doubled chunk would be off by > 1e-2). */
static void chunking_and_checkpointing_are_invisible(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "transformer_llama_gqa");
    float lp0[64], e0[64], lp1[64], e1[64];
    rlpi_transformer_options base = {.head_chunk_tokens = 64};
    rlpi_transformer *a, *b;
    assert_int_equal(rlpi_transformer_create(&a, be, &f.m.cfg, &f.m.w, &base), RLP_OK);
    rlpi_transformer_options other = {.head_chunk_tokens = 1, .activation_checkpointing = true};
    assert_int_equal(rlpi_transformer_create(&b, be, &f.m.cfg, &f.m.w, &other), RLP_OK);
    run_fb(&f, a, lp0, e0);
    run_fb(&f, b, lp1, e1);
    for (int64_t i = 0; i < f.m.n; i++) {
        assert_true(fabsf(lp0[i] - lp1[i]) <= 1e-6f);
        assert_true(fabsf(e0[i] - e1[i]) <= 1e-6f);
    }
    float *ga = download_grads(a), *gb = download_grads(b);
    for (size_t i = 0; i < rlpi_transformer_n_params(a); i++)
        if (!(fabsf(ga[i] - gb[i]) <= 1e-5f * fmaxf(1.0f, fabsf(ga[i]))))
            fail_msg("param %zu: %.9g vs %.9g", i, ga[i], gb[i]);
    free(ga);
    free(gb);
    rlpi_transformer_free(a);
    rlpi_transformer_free(b);
    free_fixture(&f);
}

/* Q/K/V as one GEMM and gate/up as one GEMM (forward and backward) against
 * one GEMM per projection: the same numbers up to fp32 rounding (the
 * fused dX sums over qdim + 2·kvdim or 2·ffn in one product instead of
 * three or two): 1e-5 · max(1, max|g|) per tensor on gradients, 1e-6 on logprobs. A wrong
 * block offset or a transposed activation is off by > 1e-2. Also with
 * checkpointing (the recomputed forward is fused too) and QKV biases. */
static void fused_projections_match_separate(void **state)
{
    (void)state;
    const char *names[] = {"transformer_llama_gqa", "transformer_qwen2_tied_bias_llama3rope"};
    for (int ck = 0; ck < 2; ck++)
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            fixture f;
            load_fixture(&f, names[k]);
            rlpi_transformer_options o = {.head_chunk_tokens = 64, .activation_checkpointing = ck};
            rlpi_transformer *a, *b;
            assert_int_equal(rlpi_transformer_create(&a, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
            assert_int_equal(rlpi_transformer_create(&b, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
            rlpi_transformer_set_fused_projections(b, false, false);
            float lp0[64], e0[64], lp1[64], e1[64];
            run_fb(&f, a, lp0, e0);
            run_fb(&f, b, lp1, e1);
            double worst_lp = 0, worst_g = 0;
            for (int64_t i = 0; i < f.m.n; i++) {
                worst_lp = fmax(worst_lp, fabs(lp0[i] - lp1[i]));
                worst_lp = fmax(worst_lp, fabs(e0[i] - e1[i]));
            }
            float *ga = download_grads(a), *gb = download_grads(b);
            for (size_t t = 0; t < rlpi_transformer_n_tensors(a); t++) { /* per tensor, as against the references */
                const rlpi_param_info *in = rlpi_transformer_tensor(a, t);
                double scale = 1.0, err = 0;
                for (size_t i = in->offset; i < in->offset + in->n_elems; i++) {
                    scale = fmax(scale, fabs(gb[i]));
                    err = fmax(err, fabs(ga[i] - gb[i]));
                }
                worst_g = fmax(worst_g, err / scale);
                if (!(err <= 1e-5 * scale))
                    fail_msg("%s: gradient of %s: fused and separate differ by %.3e (max |g| %.3e)", names[k], in->name, err, scale);
            }
            print_message("%s%s: fused vs separate projections: |Δlogp|, |Δentropy| <= %.2e, gradients %.2e\n",
                          names[k], ck ? " (checkpointed)" : "", worst_lp, worst_g);
            assert_true(worst_lp <= 1e-6);
            free(ga);
            free(gb);
            rlpi_transformer_free(a);
            rlpi_transformer_free(b);
            free_fixture(&f);
        }
}

/* Two micro-batches (the sequences split in two packs) accumulate to the
 * gradient of the whole batch. */
static void micro_batches_accumulate(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "transformer_llama_gqa");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    float lp[64], ent[64];
    run_fb(&f, tf, lp, ent);
    float *whole = download_grads(tf);

    size_t c;
    const int32_t *tok = array(&f, "tokens", &c), *pos = array(&f, "positions", &c), *tgt = array(&f, "targets", &c);
    const float *dl = array(&f, "dlogp", &c), *de = array(&f, "dentropy", &c);
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    int64_t cut = f.m.seq_start[1]; /* first sequence | the rest */
    int64_t ss1[2] = {0, cut}, ss2[16];
    for (int64_t s = 1; s <= f.m.n_seq; s++)
        ss2[s - 1] = f.m.seq_start[s] - cut;
    rlpi_packed_batch b1 = {1, ss1, cut, tok, pos, tgt};
    rlpi_packed_batch b2 = {f.m.n_seq - 1, ss2, f.m.n - cut, tok + cut, pos + cut, tgt + cut};
    assert_int_equal(rlpi_transformer_forward(tf, &b1, f.inv_temp, lp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, dl, de), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b2, f.inv_temp, lp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, dl + cut, de + cut), RLP_OK);
    float *acc = download_grads(tf);
    for (size_t i = 0; i < rlpi_transformer_n_params(tf); i++)
        assert_true(fabsf(whole[i] - acc[i]) <= 1e-5f * fmaxf(1.0f, fabsf(whole[i])));
    free(whole);
    free(acc);
    rlpi_transformer_free(tf);
    free_fixture(&f);
}

/* Central differences on the fp32 model: for the 3 largest-gradient
 * coordinates of every tensor, (L(θ+h) − L(θ−h)) / 2h with h = 1e-2 agrees
 * with the analytic gradient within 3% + 2e-3 absolute (fp32 loss
 * evaluation error ~1e-6·|L|/h dominates; truncation is O(h²)). */
static double fixture_loss(fixture *f, rlpi_transformer *tf)
{
    rlpi_packed_batch b = batch_of(f);
    float lp[64], ent[64];
    size_t c;
    const float *dl = array(f, "dlogp", &c), *de = array(f, "dentropy", &c);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f->inv_temp, lp, ent, false), RLP_OK);
    double L = 0;
    for (int64_t i = 0; i < f->m.n; i++)
        if (b.targets[i] >= 0)
            L += (double)dl[i] * lp[i] + (double)de[i] * ent[i];
    return L;
}

static void finite_differences_agree(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "transformer_qwen2_tied_bias_llama3rope");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    float lp[64], ent[64];
    run_fb(&f, tf, lp, ent);
    float *g = download_grads(tf);
    rlpi_buffer *P = rlpi_transformer_params(tf);
    const float h = 1e-2f;
    int checked = 0;
    for (size_t t = 0; t < rlpi_transformer_n_tensors(tf); t++) {
        const rlpi_param_info *in = rlpi_transformer_tensor(tf, t);
        size_t best[3] = {0, 0, 0};
        for (size_t i = 0; i < in->n_elems; i++) {
            float a = fabsf(g[in->offset + i]);
            if (a > fabsf(g[in->offset + best[0]])) {
                best[2] = best[1];
                best[1] = best[0];
                best[0] = i;
            } else if (a > fabsf(g[in->offset + best[1]])) {
                best[2] = best[1];
                best[1] = i;
            } else if (a > fabsf(g[in->offset + best[2]])) {
                best[2] = i;
            }
        }
        for (int r = 0; r < 3; r++) {
            size_t idx = in->offset + best[r];
            float orig;
            rlpi_buffer_download(P, idx * 4, &orig, 4);
            float plus = orig + h, minus = orig - h;
            rlpi_buffer_upload(P, idx * 4, &plus, 4);
            double Lp = fixture_loss(&f, tf);
            rlpi_buffer_upload(P, idx * 4, &minus, 4);
            double Lm = fixture_loss(&f, tf);
            rlpi_buffer_upload(P, idx * 4, &orig, 4);
            double fd = (Lp - Lm) / (2.0 * h), an = g[idx];
            if (!(fabs(fd - an) <= 0.03 * fabs(an) + 2e-3))
                fail_msg("finite difference of %s[%zu]: %.6f vs analytic %.6f", in->name, best[r], fd, an);
            checked++;
        }
    }
    print_message("%d coordinates checked by central differences\n", checked);
    free(g);
    rlpi_transformer_free(tf);
    free_fixture(&f);
}

static void rejects_bad_batches(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "transformer_llama_gqa");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    float lp[64];
    rlpi_packed_batch b = batch_of(&f);
    int32_t bad_tokens[64];
    memcpy(bad_tokens, b.tokens, (size_t)f.m.n * 4);
    bad_tokens[3] = f.m.cfg.vocab_size; /* out of vocabulary */
    rlpi_packed_batch x = b;
    x.tokens = bad_tokens;
    assert_int_equal(rlpi_transformer_forward(tf, &x, 1.0f, lp, NULL, false), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "vocabulary"));
    int64_t ss[4] = {0, 5, 4, f.m.n}; /* reversed sequence */
    x = b;
    x.seq_start = ss;
    assert_int_equal(rlpi_transformer_forward(tf, &x, 1.0f, lp, NULL, false), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_transformer_forward(tf, &b, 0.0f, lp, NULL, false), RLP_E_INVALID_ARG);
    /* backward without kept activations */
    assert_int_equal(rlpi_transformer_forward(tf, &b, 1.0f, lp, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, lp, NULL), RLP_E_STATE);
    /* a missing tensor is named */
    rlpi_weights w2;
    rlpi_weights_init(&w2);
    rlpi_transformer *t2 = NULL;
    assert_int_equal(rlpi_transformer_create(&t2, be, &f.m.cfg, &w2, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "model.embed_tokens.weight"));
    rlpi_transformer_free(tf);
    free_fixture(&f);
}

static int setup(void **state)
{
    (void)state;
    return rlpi_backend_cpu_create(&be, 2) == RLP_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rlpi_backend_destroy(be);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_gqa_matches_pytorch),
        cmocka_unit_test(qwen2_tied_bias_llama3_rope_matches_pytorch),
        cmocka_unit_test(streaming_attention_matches_pytorch),
        cmocka_unit_test(chunking_and_checkpointing_are_invisible),
        cmocka_unit_test(fused_projections_match_separate),
        cmocka_unit_test(micro_batches_accumulate),
        cmocka_unit_test(finite_differences_agree),
        cmocka_unit_test(rejects_bad_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
