/* Score heads (value and reward models: HF *ForSequenceClassification /
 * *ForTokenClassification) against transformers
 * (tests/reference/make_score_fixtures.py): folders written by
 * save_pretrained load, the head's output at every token of two packed
 * sequences matches transformers' float64 forward on the same fp32
 * weights, and for one label the gradient of L = Σ c·v of every parameter
 * matches autograd.
 *
 * Tolerances: outputs within 1e-4 · max(1, |ref|); gradients within
 * 1e-4 · max(1, max|ref|) per tensor (the same margins as
 * test_transformer.c: fp32 through 2 layers is near 1e-6, a wrong index,
 * transpose or missing bias is off by 1e-2 or more).
 *
 * Also: a row named twice accumulates its gradient; a saved folder reloads
 * to the same config and outputs; the LM paths refuse a score model and
 * the score paths an LM; num_labels as transformers counts it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "core/error.h"
#include "model/hf_config.h"
#include "model/hf_dir.h"
#include "model/policy.h"
#include "model/transformer.h"
#include "test_backend_env.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static rlpi_backend *be;
static json_t *expected;
static char root[400];

/* the fixture's two sequences packed: tokens, positions, seq_start */
typedef struct packed {
    int32_t tokens[64], positions[64];
    int64_t seq_start[3];
    rlpi_packed_batch b;
} packed;

static void pack(packed *p)
{
    json_t *seqs = json_object_get(expected, "sequences");
    int64_t n = 0;
    p->seq_start[0] = 0;
    for (size_t s = 0; s < 2; s++) {
        json_t *seq = json_array_get(seqs, s);
        for (size_t i = 0; i < json_array_size(seq); i++) {
            p->tokens[n] = (int32_t)json_integer_value(json_array_get(seq, i));
            p->positions[n++] = (int32_t)i;
        }
        p->seq_start[s + 1] = n;
    }
    p->b = (rlpi_packed_batch){.n_seq = 2, .seq_start = p->seq_start, .n_tokens = n, .tokens = p->tokens,
                               .positions = p->positions, .targets = NULL};
}

static rlpi_transformer *load(const char *name, rlpi_model_config *cfg)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/hf/%s", root, name);
    rlpi_weights w;
    if (rlpi_model_load_weights(dir, cfg, &w, NULL) != RLP_OK)
        fail_msg("%s: %s", name, rlp_error_last());
    rlpi_transformer *tf;
    if (rlpi_transformer_create(&tf, be, cfg, &w, NULL) != RLP_OK)
        fail_msg("%s: %s", name, rlp_error_last());
    rlpi_weights_free(&w);
    return tf;
}

static void check_close(const char *what, size_t i, double got, double want, double scale)
{
    if (!(fabs(got - want) <= 1e-4 * scale))
        fail_msg("%s[%zu]: %.7g, transformers %.7g", what, i, got, want);
}

/* outputs at every row; with one label also the gradients */
static void check_folder(const char *name)
{
    rlpi_model_config cfg;
    rlpi_transformer *tf = load(name, &cfg);
    json_t *rec = json_object_get(expected, name);
    int64_t L = json_integer_value(json_object_get(rec, "num_labels"));
    assert_int_equal(cfg.score_labels, L);
    packed p;
    pack(&p);
    int64_t n = p.b.n_tokens;
    int32_t rows[64];
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int32_t)i;
    float *out = calloc((size_t)(n * L), sizeof *out);
    bool grads = L == 1;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_score(tf, &p.b, rows, n, out, grads), RLP_OK);
    json_t *pt = json_object_get(rec, "per_token");
    size_t k = 0;
    for (size_t s = 0; s < 2; s++) {
        json_t *seq = json_array_get(pt, s);
        for (size_t t = 0; t < json_array_size(seq); t++, k++)
            for (int64_t j = 0; j < L; j++) {
                double want = json_number_value(json_array_get(json_array_get(seq, t), (size_t)j));
                check_close(name, k * (size_t)L + (size_t)j, out[k * (size_t)L + (size_t)j], want, fmax(1.0, fabs(want)));
            }
    }
    assert_int_equal((int64_t)k, n);
    if (grads) {
        float dscore[64];
        json_t *coef = json_object_get(rec, "coef");
        k = 0;
        for (size_t s = 0; s < 2; s++)
            for (size_t t = 0; t < json_array_size(json_array_get(coef, s)); t++)
                dscore[k++] = (float)json_number_value(json_array_get(json_array_get(coef, s), t));
        assert_int_equal(rlpi_transformer_score_backward(tf, dscore), RLP_OK);
        size_t np = rlpi_transformer_n_params(tf);
        float *g = malloc(np * sizeof *g);
        assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g, np * sizeof *g), RLP_OK);
        json_t *jg = json_object_get(rec, "grads");
        size_t n_checked = 0;
        for (size_t i = 0; i < rlpi_transformer_n_tensors(tf); i++) {
            const rlpi_param_info *in = rlpi_transformer_tensor(tf, i);
            json_t *ref = json_object_get(jg, in->name);
            if (!ref)
                fail_msg("%s: transformers has no gradient for %s", name, in->name);
            assert_int_equal(json_array_size(ref), in->n_elems);
            double mx = 1.0;
            for (size_t e = 0; e < in->n_elems; e++)
                mx = fmax(mx, fabs(json_number_value(json_array_get(ref, e))));
            for (size_t e = 0; e < in->n_elems; e++)
                check_close(in->name, e, g[in->offset + e], json_number_value(json_array_get(ref, e)), mx);
            n_checked++;
        }
        assert_int_equal(n_checked, json_object_size(jg)); /* every parameter, none left over */
        free(g);
    }
    free(out);
    rlpi_transformer_free(tf);
}

static void token_classifier_with_bias(void **state)
{
    (void)state;
    check_folder("score_llama_token");
}

static void sequence_classifier_qwen2(void **state)
{
    (void)state;
    check_folder("score_qwen2_seq");
}

static void two_label_token_classifier(void **state)
{
    (void)state;
    check_folder("score_qwen2_prm2");
}

/* rows [r, r] with ∂ a and b give the gradient of row r with a + b */
static void repeated_rows_accumulate(void **state)
{
    (void)state;
    rlpi_model_config cfg;
    rlpi_transformer *tf = load("score_llama_token", &cfg);
    packed p;
    pack(&p);
    size_t np = rlpi_transformer_n_params(tf);
    float *g1 = malloc(np * 4), *g2 = malloc(np * 4), v[2];
    int32_t twice[2] = {3, 3}, once[1] = {3};
    float d2[2] = {0.25f, -1.5f}, d1[1] = {-1.25f};
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_score(tf, &p.b, twice, 2, v, true), RLP_OK);
    assert_true(v[0] == v[1]);
    assert_int_equal(rlpi_transformer_score_backward(tf, d2), RLP_OK);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g1, np * 4), RLP_OK);
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_score(tf, &p.b, once, 1, v, true), RLP_OK);
    assert_int_equal(rlpi_transformer_score_backward(tf, d1), RLP_OK);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g2, np * 4), RLP_OK);
    for (size_t i = 0; i < np; i++)
        if (!(fabsf(g1[i] - g2[i]) <= 1e-5f * fmaxf(1.0f, fabsf(g2[i]))))
            fail_msg("param %zu: %g vs %g", i, (double)g1[i], (double)g2[i]);
    free(g1);
    free(g2);
    rlpi_transformer_free(tf);
}

/* export → save_pretrained-style folder → load: same config, same outputs */
static void save_and_reload(void **state)
{
    (void)state;
    static const char *const names[] = {"score_llama_token", "score_qwen2_seq", "score_qwen2_prm2"};
    for (size_t f = 0; f < 3; f++) {
        rlpi_model_config cfg, cfg2;
        rlpi_transformer *tf = load(names[f], &cfg);
        rlpi_weights w;
        assert_int_equal(rlpi_transformer_export(tf, &w), RLP_OK);
        char dir[] = "/tmp/rlpost-score-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char sub[64];
        snprintf(sub, sizeof sub, "%s/m", dir);
        if (rlpi_hf_dir_save(sub, rlpi_transformer_config(tf), &w, RLPI_ST_F32) != RLP_OK)
            fail_msg("%s: %s", names[f], rlp_error_last());
        rlpi_weights_free(&w);
        rlpi_weights w2;
        if (rlpi_hf_dir_load(sub, &cfg2, &w2) != RLP_OK)
            fail_msg("%s reloaded: %s", names[f], rlp_error_last());
        assert_int_equal(memcmp(rlpi_transformer_config(tf), &cfg2, sizeof cfg2), 0);
        rlpi_transformer *tf2;
        assert_int_equal(rlpi_transformer_create(&tf2, be, &cfg2, &w2, NULL), RLP_OK);
        rlpi_weights_free(&w2);
        packed p;
        pack(&p);
        int32_t rows[3] = {0, 6, 11};
        float a[6], b[6];
        assert_int_equal(rlpi_transformer_score(tf, &p.b, rows, 3, a, false), RLP_OK);
        assert_int_equal(rlpi_transformer_score(tf2, &p.b, rows, 3, b, false), RLP_OK);
        assert_memory_equal(a, b, (size_t)(3 * cfg.score_labels) * sizeof *a);
        rlpi_transformer_free(tf2);
        rlpi_transformer_free(tf);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

static void refusals(void **state)
{
    (void)state;
    rlpi_model_config cfg;
    rlpi_transformer *tf = load("score_llama_token", &cfg);
    packed p;
    pack(&p);
    int32_t targets[64];
    for (int64_t i = 0; i < p.b.n_tokens; i++)
        targets[i] = -1;
    targets[0] = 5;
    rlpi_packed_batch with_t = p.b;
    with_t.targets = targets;
    float out[64];
    assert_int_equal(rlpi_transformer_forward(tf, &with_t, 1.0f, out, NULL, false), RLP_E_STATE);
    assert_non_null(strstr(rlp_error_last(), "score head"));
    assert_int_equal(rlpi_transformer_backward(tf, out, NULL), RLP_E_STATE);
    int32_t bad[1] = {(int32_t)p.b.n_tokens};
    assert_int_equal(rlpi_transformer_score(tf, &p.b, bad, 1, out, false), RLP_E_INVALID_ARG);
    int32_t ok[1] = {0};
    assert_int_equal(rlpi_transformer_score(tf, &p.b, ok, 0, out, false), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_transformer_score(tf, &p.b, ok, 1, out, false), RLP_OK);
    assert_int_equal(rlpi_transformer_score_backward(tf, out), RLP_E_STATE); /* not kept */
    rlpi_transformer_free(tf);

    /* a language model has no score head */
    rlpi_model_config lc;
    rlpi_weights w;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/hf/llama_tied", root);
    assert_int_equal(rlpi_hf_dir_load(dir, &lc, &w), RLP_OK);
    assert_int_equal(lc.score_labels, 0);
    assert_int_equal(rlpi_transformer_create(&tf, be, &lc, &w, NULL), RLP_OK);
    rlpi_weights_free(&w);
    assert_int_equal(rlpi_transformer_score(tf, &p.b, ok, 1, out, false), RLP_E_STATE);
    assert_int_equal(rlpi_transformer_score_backward(tf, out), RLP_E_STATE);
    rlpi_transformer_free(tf);
}

static int parse(const char *json, rlpi_model_config *c)
{
    int rc = rlpi_hf_config_parse(json, strlen(json), "test", c);
    if (rc)
        printf("# %s\n", rlp_error_last());
    return rc;
}

#define BASE "\"hidden_size\": 16, \"intermediate_size\": 24, \"num_hidden_layers\": 1, " \
             "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 32"

static void config_classes(void **state)
{
    (void)state;
    rlpi_model_config c;
    /* PretrainedConfig's num_labels is 2 without id2label */
    assert_int_equal(parse("{\"architectures\": [\"MistralForSequenceClassification\"], " BASE "}", &c), RLP_OK);
    assert_int_equal(c.score_labels, 2);
    assert_false(c.score_bias);
    assert_false(c.score_per_token);
    assert_string_equal(c.arch, "mistral");
    assert_int_equal(parse("{\"architectures\": [\"Qwen3ForTokenClassification\"], \"num_labels\": 3, " BASE "}", &c),
                     RLP_OK);
    assert_int_equal(c.score_labels, 3);
    assert_true(c.score_bias && c.score_per_token);
    assert_false(c.tie_embeddings);
    assert_int_equal(parse("{\"architectures\": [\"LlamaForCausalLM\"], " BASE "}", &c), RLP_OK);
    assert_int_equal(c.score_labels, 0);
    assert_int_equal(parse("{\"architectures\": [\"LlamaForQuestionAnswering\"], " BASE "}", &c), RLP_E_UNSUPPORTED);
    assert_int_equal(parse("{\"architectures\": [\"FooForTokenClassification\"], " BASE "}", &c), RLP_E_UNSUPPORTED);
    assert_int_equal(parse("{\"architectures\": [\"LlamaForTokenClassification\"], \"id2label\": {}, " BASE "}", &c),
                     RLP_E_FORMAT);
    assert_int_equal(parse("{\"architectures\": [\"LlamaForTokenClassification\"], \"id2label\": [1], " BASE "}", &c),
                     RLP_E_FORMAT);
    /* a dumped score config re-parses to the same struct */
    assert_int_equal(parse("{\"architectures\": [\"Gemma3ForTokenClassification\"], \"model_type\": \"gemma3_text\", "
                           "\"id2label\": {\"0\": \"a\"}, \"head_dim\": 4, \"sliding_window\": 8, " BASE "}", &c), RLP_OK);
    char *s;
    rlpi_model_config c2;
    assert_int_equal(rlpi_hf_config_dump(&c, &s), RLP_OK);
    assert_non_null(strstr(s, "Gemma3ForTokenClassification"));
    assert_int_equal(parse(s, &c2), RLP_OK);
    assert_int_equal(memcmp(&c, &c2, sizeof c), 0);
    free(s);
}

int main(void)
{
    int skip = test_backend_from_env();
    if (skip)
        return skip;
    const char *src = getenv("RLPOST_SOURCE_ROOT");
    if (!src) {
        printf("skipped: RLPOST_SOURCE_ROOT is not set\n");
        return 77;
    }
    snprintf(root, sizeof root, "%s", src);
    char path[512];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/hf/score_expected.json", root);
    json_error_t err;
    expected = json_load_file(path, 0, &err);
    if (!expected) {
        fprintf(stderr, "%s: %s\n", path, err.text);
        return 1;
    }
    if (test_backend_create(&be))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(token_classifier_with_bias), cmocka_unit_test(sequence_classifier_qwen2),
        cmocka_unit_test(two_label_token_classifier), cmocka_unit_test(repeated_rows_accumulate),
        cmocka_unit_test(save_and_reload),           cmocka_unit_test(refusals),
        cmocka_unit_test(config_classes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rlpi_backend_destroy(be);
    json_decref(expected);
    return rc;
}
