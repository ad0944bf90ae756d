/* GGUF model loader: metadata → config, tensors → HF names/layout (q/k rows
 * un-permuted), tied embeddings as an alias (public-bugs.md case #3 repro A),
 * shape/name checks on hostile files, and the real SmolLM2-135M-Instruct
 * Q4_1 file against gguf-py (skipped when the model is not downloaded).
 *
 * Tolerances: sampled values are compared exactly (the dequantizers are
 * bit-exact with gguf-py, see test_quant.c, and un-permuting only moves
 * rows). Per-tensor float64 sums differ only by summation order:
 * |ours - ref| <= 1e-9 * sum|x|. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "gguf_builder.h"
#include "model/gguf_model.h"
#include "model/quant.h"
#include "test_support.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

/* ---- case #3 repro A: tiny tied / untied pair ---------------------------- */

static void load_tiny(const char *file, rlpi_model_config *cfg, rlpi_weights *w)
{
    char path[1024], rel[256];
    snprintf(rel, sizeof rel, "tests/reference/fixtures/%s", file);
    rlpi_weights_init(w);
    if (rlpi_gguf_model_load(source_path(path, sizeof path, rel), cfg, w, NULL, NULL) != RLP_OK)
        fail_msg("%s: %s", file, rlp_error_last());
}

/* Every tensor equals the HF-layout values gguf-py's writer was given. */
static void check_against_tiny_hf(const rlpi_weights *w)
{
    char path[1024];
    FILE *f = fopen(source_path(path, sizeof path, "tests/reference/fixtures/tiny_hf.txt"), "r");
    assert_non_null(f);
    char line[8192];
    int n_checked = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char *save, *name = strtok_r(line, " \n", &save);
        size_t n = strtoul(strtok_r(NULL, " \n", &save), NULL, 10);
        const rlpi_tensor *t = rlpi_weights_find(w, name);
        if (!t)
            fail_msg("missing %s", name);
        assert_int_equal(t->n_elems, n);
        const float *d = rlpi_tensor_data(w, t);
        for (size_t i = 0; i < n; i++) {
            float want = strtof(strtok_r(NULL, " \n", &save), NULL);
            if (d[i] != want)
                fail_msg("%s[%zu] = %.9g, want %.9g", name, i, (double)d[i], (double)want);
        }
        n_checked++;
    }
    fclose(f);
    assert_int_equal(n_checked, 11);
}

/* logits = head · h for h = embedding row of `tok` */
static void tiny_logits(const rlpi_weights *w, int tok, float *logits)
{
    const rlpi_tensor *emb = rlpi_weights_find(w, "model.embed_tokens.weight");
    const rlpi_tensor *head = rlpi_weights_find(w, "lm_head.weight");
    const float *e = rlpi_tensor_data(w, emb), *h = rlpi_tensor_data(w, head);
    for (int v = 0; v < 6; v++) {
        float acc = 0;
        for (int k = 0; k < 4; k++)
            acc += h[v * 4 + k] * e[tok * 4 + k];
        logits[v] = acc;
    }
}

static void tied_and_untied_load_alike(void **state)
{
    (void)state;
    rlpi_model_config ct, cu;
    rlpi_weights wt, wu;
    load_tiny("tiny_tied.gguf", &ct, &wt);
    load_tiny("tiny_untied.gguf", &cu, &wu);
    assert_string_equal(ct.arch, "llama");
    assert_int_equal(ct.n_layers, 1);
    assert_int_equal(ct.dim, 4);
    assert_int_equal(ct.n_heads, 1);
    assert_int_equal(ct.n_kv_heads, 1);
    assert_int_equal(ct.head_dim, 4);
    assert_int_equal(ct.ffn_dim, 8);
    assert_int_equal(ct.vocab_size, 6); /* from tokenizer.ggml.tokens: no llama.vocab_size */
    assert_int_equal(ct.max_seq_len, 32);
    assert_true(ct.rope_theta == 10000.0f);
    assert_true(ct.rms_eps == 1e-5f);
    assert_int_equal(ct.bos_id, 0);
    assert_int_equal(ct.eos_id, 5);
    assert_true(ct.tie_embeddings);
    assert_false(cu.tie_embeddings);
    assert_false(ct.attention_bias);
    check_against_tiny_hf(&wt);
    check_against_tiny_hf(&wu);

    /* tied: the head is an alias, no copy */
    assert_int_equal(wt.n, 12);
    const rlpi_tensor *head = rlpi_weights_find(&wt, "lm_head.weight");
    const rlpi_tensor *emb = rlpi_weights_find(&wt, "model.embed_tokens.weight");
    assert_non_null(head);
    assert_null(head->data);
    assert_int_equal(head->alias_of, (int32_t)(emb - wt.tensors));
    assert_ptr_equal(rlpi_tensor_data(&wt, head), emb->data);
    assert_int_equal(head->shape[0], 6);
    assert_int_equal(head->shape[1], 4);
    /* untied: a real tensor, equal byte for byte */
    const rlpi_tensor *hu = rlpi_weights_find(&wu, "lm_head.weight");
    assert_non_null(hu->data);
    assert_int_equal(hu->alias_of, -1);
    assert_memory_equal(hu->data, rlpi_weights_find(&wu, "model.embed_tokens.weight")->data, 24 * sizeof(float));

    float lt[6], lu[6];
    for (int tok = 0; tok < 6; tok++) {
        tiny_logits(&wt, tok, lt);
        tiny_logits(&wu, tok, lu);
        assert_memory_equal(lt, lu, sizeof lt);
    }
    rlpi_weights_free(&wt);
    rlpi_weights_free(&wu);
}

static void tokenizer_arrays_read_back(void **state)
{
    (void)state;
    char path[1024];
    rlpi_gguf *g;
    assert_int_equal(rlpi_gguf_open(&g, source_path(path, sizeof path, "tests/reference/fixtures/tiny_tied.gguf")),
                     RLP_OK);
    rlpi_gguf_str *tok;
    uint64_t n;
    assert_int_equal(rlpi_gguf_get_str_array(g, "tokenizer.ggml.tokens", &tok, &n), RLP_OK);
    assert_int_equal(n, 6);
    assert_int_equal(tok[3].len, 2);
    assert_memory_equal(tok[3].ptr, "ab", 2);
    assert_int_equal(tok[4].len, 2);
    assert_memory_equal(tok[4].ptr, "\xc3\xa9", 2);
    free(tok);
    assert_int_equal(rlpi_gguf_get_str_array(g, "tokenizer.ggml.merges", &tok, &n), RLP_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(tok[0].ptr, "a b", 3);
    free(tok);
    float *sc;
    assert_int_equal(rlpi_gguf_get_f32_array(g, "tokenizer.ggml.scores", &sc, &n), RLP_OK);
    assert_int_equal(n, 6);
    assert_true(sc[3] == -3.5f && sc[4] == -4.25f && sc[5] == 0.5f);
    free(sc);
    int32_t *tt;
    assert_int_equal(rlpi_gguf_get_i32_array(g, "tokenizer.ggml.token_type", &tt, &n), RLP_OK);
    assert_int_equal(n, 6);
    assert_int_equal(tt[0], 2);
    assert_int_equal(tt[5], 3);
    free(tt);
    rlpi_gguf_str s;
    assert_int_equal(rlpi_gguf_get_str(g, "tokenizer.ggml.model", &s), RLP_OK);
    assert_memory_equal(s.ptr, "gpt2", 4);
    rlpi_gguf_close(g);
}

/* ---- hostile / unusual model files, built in memory ---------------------- */

typedef struct tiny_opts {
    const char *arch;
    const char *skip;        /* tensor left out */
    const char *bad_shape;   /* tensor given ne[0] + 32 */
    const char *extra;       /* an additional F32 [32] tensor */
    const float *rope_freqs; /* head_dim/2 floats -> rope_freqs.weight */
    bool bias;
    bool small;              /* head_dim 4 instead of 32 */
    int64_t window;          /* <arch>.attention.sliding_window: 0 absent, < 0 written as int32 */
    uint32_t key_length;     /* <arch>.attention.key_length, 0 absent */
    int32_t pattern;         /* <arch>.attention.sliding_window_pattern: 0 absent, > 0 a period,
                              * -1 an array of 2 bools (one too many for 1 layer) */
    float softcap, attn_scale, theta_swa; /* <arch>.final_logit_softcapping, .attention.scale,
                                           * .rope.freq_base_swa when != 0 */
} tiny_opts;

/* dim 2*hd, 2 heads of hd (1 KV head), ffn hd, vocab hd, 1 layer; all F32;
 * hd = 32 unless o->small (hd = 4, for fuzz seeds). Tensor data value =
 * tensor index + element index / 1024. */
static void build_model(gb *b, const tiny_opts *o)
{
    const uint64_t hd = o->small ? 4 : 32, d = 2 * hd;
    struct {
        const char *name;
        uint64_t ne0, ne1;
    } t[24];
    int n = 0;
#define T(nm, a, c) (t[n].name = nm, t[n].ne0 = a, t[n].ne1 = c, n++)
    T("token_embd.weight", d, hd);
    T("blk.0.attn_norm.weight", d, 1);
    T("blk.0.attn_q.weight", d, d);
    T("blk.0.attn_k.weight", d, hd);
    T("blk.0.attn_v.weight", d, hd);
    T("blk.0.attn_output.weight", d, d);
    T("blk.0.ffn_norm.weight", d, 1);
    T("blk.0.ffn_gate.weight", d, hd);
    T("blk.0.ffn_up.weight", d, hd);
    T("blk.0.ffn_down.weight", hd, d);
    T("output_norm.weight", d, 1);
    const char *arch = o->arch ? o->arch : "llama";
    /* the per-family tensors (arch.c): q/k norms, Gemma's post-norms */
    if (!strcmp(arch, "qwen3") || !strcmp(arch, "gemma3")) {
        T("blk.0.attn_q_norm.weight", hd, 1);
        T("blk.0.attn_k_norm.weight", hd, 1);
    }
    if (!strcmp(arch, "gemma3")) {
        T("blk.0.post_attention_norm.weight", d, 1);
        T("blk.0.post_ffw_norm.weight", d, 1);
    }
    if (o->bias) {
        T("blk.0.attn_q.bias", d, 1);
        T("blk.0.attn_k.bias", hd, 1);
        T("blk.0.attn_v.bias", hd, 1);
    }
    if (o->extra)
        T(o->extra, 32, 1);
    if (o->rope_freqs)
        T("rope_freqs.weight", hd / 2, 1);
#undef T
    int kept = 0;
    for (int i = 0; i < n; i++)
        kept += !(o->skip && !strcmp(o->skip, t[i].name));
    char key[64];
    gb_header(b, 3, (uint64_t)kept,
              10u + (o->window != 0) + (o->key_length != 0) + (o->pattern != 0) + (o->softcap != 0) +
                  (o->attn_scale != 0) + (o->theta_swa != 0));
    gb_kv_str(b, "general.architecture", arch);
#define KV(suffix, v) (snprintf(key, sizeof key, "%s.%s", arch, suffix), gb_kv_u32(b, key, (uint32_t)(v)))
    KV("block_count", 1);
    KV("embedding_length", d);
    KV("attention.head_count", 2);
    KV("attention.head_count_kv", 1);
    KV("feed_forward_length", hd);
    KV("context_length", 128);
    KV("vocab_size", hd);
    KV("rope.scaling.original_context_length", 64);
    if (o->window > 0)
        KV("attention.sliding_window", o->window);
    if (o->key_length)
        KV("attention.key_length", o->key_length);
    if (o->pattern > 0)
        KV("attention.sliding_window_pattern", o->pattern);
#undef KV
    if (o->window < 0) {
        int32_t v = (int32_t)o->window;
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        gb_str(b, key), gb_u32(b, 5), gb_bytes(b, &v, 4);
    }
    const struct {
        const char *suffix;
        float v;
    } fk[3] = {{"final_logit_softcapping", o->softcap}, {"attention.scale", o->attn_scale},
               {"rope.freq_base_swa", o->theta_swa}};
    for (int i = 0; i < 3; i++)
        if (fk[i].v != 0) {
            snprintf(key, sizeof key, "%s.%s", arch, fk[i].suffix);
            gb_str(b, key), gb_u32(b, 6), gb_bytes(b, &fk[i].v, 4);
        }
    if (o->pattern < 0) {
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
        gb_str(b, key), gb_u32(b, 9), gb_u32(b, 7), gb_u64(b, 2), gb_bytes(b, "\1\0", 2);
    }
    float eps = 1e-6f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    gb_str(b, key), gb_u32(b, 6), gb_bytes(b, &eps, 4);
    uint64_t off = 0, offs[24];
    for (int i = 0; i < n; i++) {
        if (o->skip && !strcmp(o->skip, t[i].name))
            continue;
        uint64_t ne[2] = {t[i].ne0 + (o->bad_shape && !strcmp(o->bad_shape, t[i].name) ? 32 : 0), t[i].ne1};
        offs[i] = off;
        gb_tensor(b, t[i].name, t[i].ne1 > 1 ? 2 : 1, ne, RLPI_GGML_F32, off);
        off += (ne[0] * ne[1] * 4 + 31) / 32 * 32;
    }
    gb_pad(b, 32);
    size_t base = b->n;
    for (int i = 0; i < n; i++) {
        if (o->skip && !strcmp(o->skip, t[i].name))
            continue;
        uint64_t cnt = (t[i].ne0 + (o->bad_shape && !strcmp(o->bad_shape, t[i].name) ? 32 : 0)) * t[i].ne1;
        while (b->n < base + offs[i])
            gb_bytes(b, "", 1);
        for (uint64_t k = 0; k < cnt; k++) {
            float v = (float)i + (float)k / 1024.0f;
            if (!strcmp(t[i].name, "rope_freqs.weight"))
                v = o->rope_freqs[k];
            gb_bytes(b, &v, 4);
        }
    }
}

static int load_built(const tiny_opts *o, rlpi_model_config *cfg, rlpi_weights *w)
{
    gb b = {0};
    build_model(&b, o);
    rlpi_gguf *g;
    int rc = rlpi_gguf_open_memory(&g, b.p, b.n, "built.gguf");
    if (rc)
        fail_msg("built file does not parse: %s", rlp_error_last());
    rlpi_weights_init(w);
    rc = rlpi_gguf_model_config(g, cfg);
    if (!rc)
        rc = rlpi_gguf_model_weights(g, cfg, w, NULL);
    rlpi_gguf_close(g);
    gb_free(&b);
    return rc;
}

/* The q/k un-permutation on 2 heads x head_dim 32 (q) and 1 KV head (k):
 * HF row h*32 + s*16 + i comes from GGUF row h*32 + 2i + s. Row r of GGUF
 * tensor index 2 (q) starts with value 2 + r*64/1024. qwen2 is not permuted. */
static void qk_rows_are_unpermuted_for_llama_only(void **state)
{
    (void)state;
    rlpi_model_config c;
    rlpi_weights w;
    tiny_opts o = {0};
    assert_int_equal(load_built(&o, &c, &w), RLP_OK);
    const float *q = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight")->data;
    const float *k = rlpi_weights_find(&w, "model.layers.0.self_attn.k_proj.weight")->data;
    const float *v = rlpi_weights_find(&w, "model.layers.0.self_attn.v_proj.weight")->data;
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < 16; i++) {
                int hf = h * 32 + s * 16 + i, gg = h * 32 + 2 * i + s;
                assert_true(q[hf * 64] == 2.0f + (float)(gg * 64) / 1024.0f);
                assert_true(q[hf * 64 + 63] == 2.0f + (float)(gg * 64 + 63) / 1024.0f);
                if (h == 0)
                    assert_true(k[hf * 64] == 3.0f + (float)(gg * 64) / 1024.0f);
            }
    assert_true(v[5 * 64] == 4.0f + 5.0f * 64 / 1024.0f); /* v untouched */
    assert_true(c.rms_eps == 1e-6f);
    assert_int_equal(c.vocab_size, 32);
    assert_int_equal(c.head_dim, 32);
    rlpi_weights_free(&w);

    o.arch = "qwen2";
    o.bias = true;
    assert_int_equal(load_built(&o, &c, &w), RLP_OK);
    assert_true(c.attention_bias);
    q = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight")->data;
    for (int r = 0; r < 64; r++)
        assert_true(q[r * 64] == 2.0f + (float)(r * 64) / 1024.0f);
    const rlpi_tensor *qb = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.bias");
    assert_non_null(qb);
    assert_int_equal(qb->n_dims, 1);
    assert_int_equal(qb->shape[0], 64);
    rlpi_weights_free(&w);
}

static void bad_models_are_refused_by_name(void **state)
{
    (void)state;
    rlpi_model_config c;
    rlpi_weights w;
    const struct {
        tiny_opts o;
        int rc;
        const char *msg;
    } cases[] = {
        {{.skip = "blk.0.ffn_up.weight"}, RLP_E_FORMAT, "missing tensor for 'model.layers.0.mlp.up_proj.weight'"},
        {{.bad_shape = "blk.0.attn_k.weight"}, RLP_E_FORMAT, "tensor 'blk.0.attn_k.weight' has shape [96, 32"},
        {{.extra = "blk.0.attn_rot_embd"}, RLP_E_UNSUPPORTED, "tensor 'blk.0.attn_rot_embd' is not part"},
        {{.extra = "blk.1.attn_norm.weight"}, RLP_E_UNSUPPORTED, "'blk.1.attn_norm.weight'"},
        {{.extra = "blk.00.attn_norm.weight"}, RLP_E_UNSUPPORTED, "'blk.00.attn_norm.weight'"},
        {{.arch = "gpt2"}, RLP_E_UNSUPPORTED, "architecture 'gpt2'"},
        {{.skip = "token_embd.weight"}, RLP_E_FORMAT, "token_embd.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = load_built(&cases[i].o, &c, &w);
        if (rc != cases[i].rc || !strstr(rlp_error_last(), cases[i].msg))
            fail_msg("case %zu: rc %d \"%s\", want %d \"%s\"", i, rc, rlp_error_last(), cases[i].rc, cases[i].msg);
        rlpi_weights_free(&w);
    }
}

/* Qwen3 and Gemma 3 files: q/k norms and Gemma's four norms land under
 * HF's names with the file's values (Gemma's 1 + w is already the
 * effective scale), no q/k permutation, the window and its layers from the
 * keys or llama.cpp's defaults; and hostile variants fail by name. */
static void qwen3_and_gemma3_files(void **state)
{
    (void)state;
    rlpi_model_config c;
    rlpi_weights w;
    tiny_opts o = {.arch = "qwen3"};
    if (load_built(&o, &c, &w) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_true(c.qk_norm && !c.post_norms && c.norm_offset == 0.0f && c.sliding_window == 0);
    const rlpi_tensor *qn = rlpi_weights_find(&w, "model.layers.0.self_attn.q_norm.weight");
    assert_non_null(qn);
    assert_int_equal(qn->shape[0], 32);
    const float *q = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight")->data;
    for (int r = 0; r < 64; r++) /* not permuted */
        assert_true(q[r * 64] == 2.0f + (float)(r * 64) / 1024.0f);
    assert_non_null(rlpi_weights_find(&w, "model.layers.0.post_attention_layernorm.weight"));
    rlpi_weights_free(&w);

    o = (tiny_opts){.arch = "gemma3", .window = 16};
    if (load_built(&o, &c, &w) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_true(c.qk_norm && c.post_norms && c.norm_offset == 1.0f);
    assert_int_equal(c.activation, RLPI_ACT_GELU_TANH);
    assert_true(c.embed_scale == 8.0f); /* sqrt(64) */
    assert_int_equal(c.sliding_window, 16);
    assert_int_equal(c.local_layers[0], 1); /* period 6: layer 0 is local */
    assert_true(c.rope_theta_local == 10000.0f && c.attn_scale == 0.0f);
    /* tensor index 6 is ffn_norm: the MLP's input norm, values unchanged */
    const float *pre = rlpi_weights_find(&w, "model.layers.0.pre_feedforward_layernorm.weight")->data;
    assert_true(pre[0] == 6.0f && pre[5] == 6.0f + 5.0f / 1024.0f);
    const float *post = rlpi_weights_find(&w, "model.layers.0.post_attention_layernorm.weight")->data;
    assert_true(post[0] == 13.0f); /* post_attention_norm, after the q/k norms (11, 12) */
    assert_non_null(rlpi_weights_find(&w, "model.layers.0.post_feedforward_layernorm.weight"));
    rlpi_weights_free(&w);
    o.pattern = 1; /* every layer global */
    assert_int_equal(load_built(&o, &c, &w), RLP_OK);
    assert_int_equal(c.local_layers[0], 0);
    rlpi_weights_free(&w);
    /* the optional keys llama.cpp's newer converters write */
    o = (tiny_opts){.arch = "gemma3", .window = 16, .softcap = 30.0f, .attn_scale = 0.125f, .theta_swa = 5e4f};
    assert_int_equal(load_built(&o, &c, &w), RLP_OK);
    assert_true(c.final_softcap == 30.0f && c.attn_scale == 0.125f && c.rope_theta_local == 5e4f);
    rlpi_weights_free(&w);
    o.softcap = -1.0f;
    assert_int_equal(load_built(&o, &c, &w), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "final_logit_softcapping -1 must be >= 0"));
    rlpi_weights_free(&w);

    const struct {
        tiny_opts o;
        int rc;
        const char *msg;
    } cases[] = {
        {{.arch = "qwen3", .skip = "blk.0.attn_q_norm.weight"}, RLP_E_FORMAT,
         "missing tensor for 'model.layers.0.self_attn.q_norm.weight' (qwen3 needs 'blk.0.attn_q_norm.weight')"},
        {{.arch = "gemma3", .window = 16, .skip = "blk.0.post_ffw_norm.weight"}, RLP_E_FORMAT,
         "missing tensor for 'model.layers.0.post_feedforward_layernorm.weight'"},
        {{.arch = "gemma3", .window = 16, .skip = "blk.0.ffn_norm.weight"}, RLP_E_FORMAT,
         "'model.layers.0.pre_feedforward_layernorm.weight' (gemma3 needs 'blk.0.ffn_norm.weight')"},
        {{.arch = "gemma3"}, RLP_E_NOT_FOUND, "gemma3.attention.sliding_window"},
        {{.arch = "gemma3", .window = -1}, RLP_E_FORMAT, "gemma3.attention.sliding_window"},
        {{.arch = "gemma3", .window = (1 << 24) + 1}, RLP_E_FORMAT,
         "'gemma3.attention.sliding_window' = 16777217 is out of range"},
        {{.arch = "gemma3", .window = 16, .key_length = 16}, RLP_E_FORMAT,
         "tensor 'blk.0.attn_q.weight' has shape [64, 64, 1, 1] (ne order), expected [64, 32]"},
        {{.arch = "qwen3", .key_length = 48}, RLP_E_FORMAT, "tensor 'blk.0.attn_q.weight' has shape"},
        {{.arch = "gemma3", .window = 16, .pattern = -1}, RLP_E_FORMAT,
         "'gemma3.attention.sliding_window_pattern' must be 1 bools (one per layer), not 2"},
        {{.arch = "gemma3", .window = 16, .pattern = 5}, RLP_E_FORMAT, "= 5 exceeds the 1 layers"},
        {{.extra = "blk.0.attn_q_norm.weight"}, RLP_E_UNSUPPORTED,
         "tensor 'blk.0.attn_q_norm.weight' is not part of a llama model"},
        {{.arch = "qwen2", .bias = true, .extra = "blk.0.post_ffw_norm.weight"}, RLP_E_UNSUPPORTED,
         "'blk.0.post_ffw_norm.weight' is not part of a qwen2 model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = load_built(&cases[i].o, &c, &w);
        if (rc != cases[i].rc || !strstr(rlp_error_last(), cases[i].msg))
            fail_msg("case %zu: rc %d \"%s\", want %d \"%s\"", i, rc, rlp_error_last(), cases[i].rc,
                     cases[i].msg);
        rlpi_weights_free(&w);
    }
}

/* llama.cpp stores Llama-3 RoPE scaling as per-frequency divisors; with
 * factor 8, low 1, high 4, original context 64, head_dim 32, theta 10000
 * these are the converter's values (computed here by its formula). */
static void llama3_rope_scaling_is_recovered(void **state)
{
    (void)state;
    float rf[16];
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < 16; i++) {
        double wavelen = 2 * pi * pow(10000.0, 2.0 * i / 32);
        if (wavelen < 64.0 / 4)
            rf[i] = 1.0f;
        else if (wavelen > 64.0 / 1)
            rf[i] = 8.0f;
        else {
            double smooth = (64.0 / wavelen - 1) / 3;
            rf[i] = (float)(1 / ((1 - smooth) / 8 + smooth));
        }
    }
    assert_true(rf[1] == 1.0f && rf[15] == 8.0f && rf[2] > 1.0f && rf[2] < 8.0f); /* all three regimes */
    rlpi_model_config c;
    rlpi_weights w;
    tiny_opts o = {.rope_freqs = rf};
    assert_int_equal(load_built(&o, &c, &w), RLP_OK);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_LLAMA3);
    assert_true(c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_original_max_pos, 64);
    assert_null(rlpi_weights_find(&w, "rope_freqs.weight"));
    rlpi_weights_free(&w);
    rf[3] *= 1.01f; /* not what the formula gives: refuse, don't approximate */
    assert_int_equal(load_built(&o, &c, &w), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "rope_freqs.weight[3]"));
    rlpi_weights_free(&w);
    rf[0] = 0.5f; /* a divisor below 1 is malformed, and the message keeps its value */
    assert_int_equal(load_built(&o, &c, &w), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "rope_freqs.weight[0] = 0.5 is not"));
    rlpi_weights_free(&w);
}

/* public-bugs.md case #4 through the model loader, from a file on disk:
 * the error names tensor 'b' and the weights stay empty. */
static void case4_file_fails_model_load(void **state)
{
    (void)state;
    gb b = {0};
    gb_header(&b, 3, 2, 1);
    gb_kv_u32(&b, "general.alignment", 32);
    uint64_t ne_a[1] = {64}, ne_b[4] = {4, 1073741823, 1073741825, 1};
    gb_tensor(&b, "a", 1, ne_a, RLPI_GGML_F32, 0);
    gb_tensor(&b, "b", 4, ne_b, RLPI_GGML_F32, 256);
    gb_pad(&b, 32);
    gb_fill(&b, 256, 9);
    char path[] = "/tmp/rlpost_case4_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.n), (ssize_t)b.n);
    close(fd);
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    assert_int_equal(rlpi_gguf_model_load(path, &c, &w, NULL, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "tensor 'b'"));
    assert_int_equal(w.n, 0);
    unlink(path);
    gb_free(&b);
}

/* ---- special token ids out of range (issue 18 item 9) -------------------- */

/* The tiny tied fixture with one u32 special-token id rewritten: the model
 * loader and the tokenizer refuse it by key and value, for BOS as for EOS,
 * whether the id is past the vocabulary or past INT32_MAX (once silently
 * dropped). */
static void special_ids_out_of_range_are_refused(void **state)
{
    (void)state;
    char src[1024];
    FILE *f = fopen(source_path(src, sizeof src, "tests/reference/fixtures/tiny_tied.gguf"), "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof buf);
    static const char *const keys[2] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    static const uint32_t values[2] = {1000, 0xFFFFFFFFu};
    for (int k = 0; k < 2; k++)
        for (int v = 0; v < 2; v++) {
            unsigned char *copy = malloc(n);
            memcpy(copy, buf, n);
            size_t klen = strlen(keys[k]), at = 0;
            for (size_t i = 0; i + klen + 8 <= n && !at; i++)
                if (!memcmp(copy + i, keys[k], klen))
                    at = i + klen;
            assert_true(at > 0);
            uint32_t type;
            memcpy(&type, copy + at, 4);
            assert_int_equal(type, 4); /* GGUF u32 */
            memcpy(copy + at + 4, &values[v], 4);
            char path[] = "/tmp/rlpost_ids_XXXXXX";
            int fd = mkstemp(path);
            assert_true(fd >= 0);
            assert_int_equal(write(fd, copy, n), (ssize_t)n);
            close(fd);
            free(copy);
            char want[128];
            snprintf(want, sizeof want, "'%s' = %lu is not a token", keys[k], (unsigned long)values[v]);
            rlpi_model_config c;
            rlpi_weights w;
            rlpi_weights_init(&w);
            assert_int_equal(rlpi_gguf_model_load(path, &c, &w, NULL, NULL), RLP_E_FORMAT);
            if (!strstr(rlp_error_last(), want))
                fail_msg("model: %s", rlp_error_last());
            rlpi_weights_free(&w);
            rlp_tokenizer *tok = NULL;
            assert_int_equal(rlp_tokenizer_load(&tok, path), RLP_E_FORMAT);
            if (!strstr(rlp_error_last(), want))
                fail_msg("tokenizer: %s", rlp_error_last());
            assert_null(tok);
            unlink(path);
        }
}

/* ---- the real model ------------------------------------------------------ */

static long status_kib(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n))
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static void smollm2_matches_gguf_py(void **state)
{
    (void)state;
    char path[1024], fix[1024];
    model_path(path, sizeof path, "SmolLM2-135M-Instruct.Q4_1.gguf");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s absent; run scripts/fetch-model.sh (or set RLPOST_MODEL_DIR)\n", path);
        skip();
    }
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_gguf_load_stats st;
    rlpi_threadpool *pool = NULL;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(rlpi_threadpool_create(&pool, ncpu > 0 ? (int)(ncpu > 16 ? 16 : ncpu) : 1), RLP_OK);
    long rss0 = status_kib("VmRSS:");
    if (rlpi_gguf_model_load(path, &c, &w, pool, &st) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    long rss1 = status_kib("VmRSS:");
    fprintf(stderr,
            "SmolLM2-135M Q4_1: %llu tensors, file %.1f MB -> fp32 %.1f MB; open+validate %.1f ms, "
            "dequant+map %.1f ms (%d threads, %.0f M elems/s); RSS %ld -> %ld MiB (peak %ld MiB)\n",
            (unsigned long long)st.n_tensors, st.file_bytes / 1e6, st.fp32_bytes / 1e6, st.open_s * 1e3,
            st.dequant_s * 1e3, rlpi_threadpool_size(pool), st.fp32_bytes / 4 / st.dequant_s / 1e6, rss0 / 1024,
            rss1 / 1024, status_kib("VmHWM:") / 1024);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.n_layers, 30);
    assert_int_equal(c.dim, 576);
    assert_int_equal(c.n_heads, 9);
    assert_int_equal(c.n_kv_heads, 3);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn_dim, 1536);
    assert_int_equal(c.vocab_size, 49152);
    assert_int_equal(c.max_seq_len, 8192);
    assert_true(c.rope_theta == 100000.0f);
    assert_true(c.rms_eps == 1e-5f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_NONE);
    assert_true(c.tie_embeddings);
    assert_int_equal(c.bos_id, 1);
    assert_int_equal(c.eos_id, 2);
    assert_int_equal(w.n, 273); /* 272 tensors + the lm_head alias */
    assert_null(rlpi_weights_find(&w, "lm_head.weight")->data);

    /* raw (file-layout) values through the reader too */
    rlpi_gguf *g;
    assert_int_equal(rlpi_gguf_open(&g, path), RLP_OK);
    FILE *f = fopen(source_path(fix, sizeof fix, "tests/reference/fixtures/smollm2_q4_1.txt"), "r");
    assert_non_null(f);
    char line[4096];
    int n_checked = 0;
    float *raw = NULL;
    size_t raw_n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != 'T')
            continue;
        char *save;
        strtok_r(line, " \n", &save);
        const char *gname = strtok_r(NULL, " \n", &save), *hname = strtok_r(NULL, " \n", &save);
        const char *type = strtok_r(NULL, " \n", &save);
        size_t n = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
        double sum = strtod(strtok_r(NULL, " \n", &save), NULL), sum_abs = strtod(strtok_r(NULL, " \n", &save), NULL);
        int k = atoi(strtok_r(NULL, " \n", &save));
        const rlpi_gguf_tensor *gt = rlpi_gguf_find_tensor(g, gname);
        const rlpi_tensor *t = rlpi_weights_find(&w, hname);
        if (!gt || !t)
            fail_msg("tensor %s / %s missing", gname, hname);
        assert_string_equal(t->src_dtype, type);
        assert_int_equal(t->n_elems, n);
        if (raw_n < n) {
            free(raw);
            raw = malloc(n * sizeof *raw);
            raw_n = n;
        }
        assert_int_equal(rlpi_dequantize(gt->type, gt->data, gt->nbytes, raw, n), RLP_OK);
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += t->data[i];
        if (fabs(s - sum) > 1e-9 * sum_abs)
            fail_msg("%s: sum %.17g, gguf-py %.17g", hname, s, sum);
        for (int j = 0; j < k; j++) {
            size_t idx = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
            float rv = strtof(strtok_r(NULL, " \n", &save), NULL), hv = strtof(strtok_r(NULL, " \n", &save), NULL);
            assert_true(idx < n);
            if (raw[idx] != rv || t->data[idx] != hv)
                fail_msg("%s[%zu]: raw %.9g (ref %.9g), HF %.9g (ref %.9g)", hname, idx, (double)raw[idx],
                         (double)rv, (double)t->data[idx], (double)hv);
        }
        n_checked++;
    }
    fclose(f);
    free(raw);
    assert_int_equal(n_checked, 272);
    rlpi_gguf_close(g);
    rlpi_weights_free(&w);
    rlpi_threadpool_free(pool);
}

/* RLPOST_WRITE_GGUF_SEEDS=<dir>: write the built models as fuzz seeds. */
static int write_seeds(const char *dir)
{
    static const float rf[2] = {1, 8};
    const struct {
        const char *name;
        tiny_opts o;
    } seeds[] = {{"model_llama", {.small = true}},
                 {"model_qwen2_bias", {.arch = "qwen2", .bias = true, .small = true}},
                 {"model_rope_freqs", {.rope_freqs = rf, .small = true}},
                 {"model_qwen3", {.arch = "qwen3", .small = true}},
                 {"model_gemma3", {.arch = "gemma3", .window = 4, .small = true}},
                 {"model_gemma3_pattern", {.arch = "gemma3", .window = 4, .pattern = -1, .small = true}}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        gb b = {0};
        char path[512];
        build_model(&b, &seeds[i].o);
        snprintf(path, sizeof path, "%s/%s.gguf", dir, seeds[i].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0)
            return 1;
        gb_free(&b);
    }
    return 0;
}

int main(void)
{
    const char *seeds = getenv("RLPOST_WRITE_GGUF_SEEDS");
    if (seeds)
        return write_seeds(seeds);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tied_and_untied_load_alike),
        cmocka_unit_test(tokenizer_arrays_read_back),
        cmocka_unit_test(qk_rows_are_unpermuted_for_llama_only),
        cmocka_unit_test(bad_models_are_refused_by_name),
        cmocka_unit_test(qwen3_and_gemma3_files),
        cmocka_unit_test(llama3_rope_scaling_is_recovered),
        cmocka_unit_test(case4_file_fails_model_load),
        cmocka_unit_test(special_ids_out_of_range_are_refused),
        cmocka_unit_test(smollm2_matches_gguf_py),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
