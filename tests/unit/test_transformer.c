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
 * checkpointing and micro-batch accumulation give the same numbers, and
 * central finite differences agree with the analytic gradient. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/error.h"
#include "model/transformer.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    json_t *meta;
    unsigned char *blob;
    size_t blob_len;
    rlpi_model_config cfg;
    rlpi_weights w;
    int64_t n, n_seq;
    int64_t seq_start[16];
    float inv_temp;
} fixture;

static rlpi_backend *be;

static const void *array(fixture *f, const char *key, size_t *count)
{
    json_t *a = json_object_get(json_object_get(f->meta, "arrays"), key);
    assert_non_null(a);
    size_t off = (size_t)json_integer_value(json_object_get(a, "offset"));
    *count = (size_t)json_integer_value(json_object_get(a, "count"));
    assert_true(off + *count * 4 <= f->blob_len);
    return f->blob + off;
}

static void load_fixture(fixture *f, const char *name)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s.json", root ? root : ".", name);
    json_error_t err;
    f->meta = json_load_file(path, 0, &err);
    if (!f->meta)
        fail_msg("cannot load %s: %s", path, err.text);
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s.bin", root ? root : ".", name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    f->blob_len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->blob = malloc(f->blob_len);
    assert_int_equal(fread(f->blob, 1, f->blob_len, fp), f->blob_len);
    fclose(fp);

    json_t *c = json_object_get(f->meta, "config");
    memset(&f->cfg, 0, sizeof f->cfg);
    snprintf(f->cfg.arch, sizeof f->cfg.arch, "%s", json_string_value(json_object_get(c, "arch")));
#define I(field, key) f->cfg.field = (int32_t)json_integer_value(json_object_get(c, key))
    I(n_layers, "n_layers");
    I(dim, "dim");
    I(n_heads, "n_heads");
    I(n_kv_heads, "n_kv_heads");
    I(head_dim, "head_dim");
    I(ffn_dim, "ffn_dim");
    I(vocab_size, "vocab_size");
    I(max_seq_len, "max_seq_len");
#undef I
    f->cfg.rope_theta = (float)json_number_value(json_object_get(c, "rope_theta"));
    f->cfg.rms_eps = (float)json_number_value(json_object_get(c, "rms_eps"));
    f->cfg.tie_embeddings = json_is_true(json_object_get(c, "tie_embeddings"));
    f->cfg.attention_bias = json_is_true(json_object_get(c, "attention_bias"));
    f->cfg.bos_id = f->cfg.eos_id = -1;
    json_t *sc = json_object_get(c, "rope_scaling");
    if (sc) {
        f->cfg.rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
        f->cfg.rope_factor = (float)json_number_value(json_object_get(sc, "factor"));
        f->cfg.rope_low_freq_factor = (float)json_number_value(json_object_get(sc, "low_freq_factor"));
        f->cfg.rope_high_freq_factor = (float)json_number_value(json_object_get(sc, "high_freq_factor"));
        f->cfg.rope_original_max_pos =
            (int32_t)json_integer_value(json_object_get(sc, "original_max_position_embeddings"));
    }
    f->inv_temp = (float)json_number_value(json_object_get(f->meta, "inv_temp"));
    json_t *ss = json_object_get(f->meta, "seq_start");
    f->n_seq = (int64_t)json_array_size(ss) - 1;
    for (size_t i = 0; i < json_array_size(ss); i++)
        f->seq_start[i] = json_integer_value(json_array_get(ss, i));
    f->n = f->seq_start[f->n_seq];

    rlpi_weights_init(&f->w);
    const char *key;
    json_t *shape;
    json_object_foreach(json_object_get(f->meta, "shapes"), key, shape) {
        int64_t sh[2] = {0, 0};
        for (size_t i = 0; i < json_array_size(shape); i++)
            sh[i] = json_integer_value(json_array_get(shape, i));
        rlpi_tensor *t;
        assert_int_equal(rlpi_weights_add(&f->w, key, (int32_t)json_array_size(shape), sh, &t), RLP_OK);
        char wk[256];
        snprintf(wk, sizeof wk, "w:%s", key);
        size_t count;
        const float *src = array(f, wk, &count);
        assert_int_equal(count, t->n_elems);
        memcpy(t->data, src, count * 4);
    }
}

static void free_fixture(fixture *f)
{
    json_decref(f->meta);
    free(f->blob);
    rlpi_weights_free(&f->w);
}

static rlpi_packed_batch batch_of(fixture *f)
{
    size_t c;
    rlpi_packed_batch b = {
        .n_seq = f->n_seq, .seq_start = f->seq_start, .n_tokens = f->n,
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
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.cfg, &f.w, &o), RLP_OK);
    float logp[64], ent[64];
    run_fb(&f, tf, logp, ent);
    size_t c;
    const float *rl = array(&f, "logp", &c), *re = array(&f, "entropy", &c);
    double max_lp = 0, max_h = 0;
    for (int64_t i = 0; i < f.n; i++) {
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
    assert_int_equal(rlpi_transformer_create(&a, be, &f.cfg, &f.w, &base), RLP_OK);
    rlpi_transformer_options other = {.head_chunk_tokens = 1, .activation_checkpointing = true};
    assert_int_equal(rlpi_transformer_create(&b, be, &f.cfg, &f.w, &other), RLP_OK);
    run_fb(&f, a, lp0, e0);
    run_fb(&f, b, lp1, e1);
    for (int64_t i = 0; i < f.n; i++) {
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

/* Two micro-batches (the sequences split in two packs) accumulate to the
 * gradient of the whole batch. */
static void micro_batches_accumulate(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "transformer_llama_gqa");
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.cfg, &f.w, NULL), RLP_OK);
    float lp[64], ent[64];
    run_fb(&f, tf, lp, ent);
    float *whole = download_grads(tf);

    size_t c;
    const int32_t *tok = array(&f, "tokens", &c), *pos = array(&f, "positions", &c), *tgt = array(&f, "targets", &c);
    const float *dl = array(&f, "dlogp", &c), *de = array(&f, "dentropy", &c);
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    int64_t cut = f.seq_start[1]; /* first sequence | the rest */
    int64_t ss1[2] = {0, cut}, ss2[16];
    for (int64_t s = 1; s <= f.n_seq; s++)
        ss2[s - 1] = f.seq_start[s] - cut;
    rlpi_packed_batch b1 = {1, ss1, cut, tok, pos, tgt};
    rlpi_packed_batch b2 = {f.n_seq - 1, ss2, f.n - cut, tok + cut, pos + cut, tgt + cut};
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
    for (int64_t i = 0; i < f->n; i++)
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
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.cfg, &f.w, NULL), RLP_OK);
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
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.cfg, &f.w, NULL), RLP_OK);
    float lp[64];
    rlpi_packed_batch b = batch_of(&f);
    int32_t bad_tokens[64];
    memcpy(bad_tokens, b.tokens, (size_t)f.n * 4);
    bad_tokens[3] = f.cfg.vocab_size; /* out of vocabulary */
    rlpi_packed_batch x = b;
    x.tokens = bad_tokens;
    assert_int_equal(rlpi_transformer_forward(tf, &x, 1.0f, lp, NULL, false), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "vocabulary"));
    int64_t ss[4] = {0, 5, 4, f.n}; /* reversed sequence */
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
    assert_int_equal(rlpi_transformer_create(&t2, be, &f.cfg, &w2, NULL), RLP_E_FORMAT);
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
        cmocka_unit_test(chunking_and_checkpointing_are_invisible),
        cmocka_unit_test(micro_batches_accumulate),
        cmocka_unit_test(finite_differences_agree),
        cmocka_unit_test(rejects_bad_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
