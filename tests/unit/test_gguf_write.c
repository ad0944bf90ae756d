/* GGUF out: quantizers against the dequantizers (every fp16/bf16 value
 * exact, Q8_0/Q4_0/Q4_K within their bounds), the writer's layout against
 * the loader (F32 round trip bit for bit on the tiny fixtures, a synthetic
 * model of every family — llama, mistral, qwen2, qwen3, gemma3 — in every
 * writable type, and the real SmolLM2 when downloaded — skipped
 * otherwise), the GGUF names of Qwen3's and Gemma 3's tensors, what GGUF
 * cannot express, and bad input (NULL, unwritable path, unknown type: a
 * clear error and no file left).
 *
 * Bounds: Q8_0 stores d16 = fp16(amax/127) and q = round(x·127/amax), so
 * |x − d16·q| ≤ d/2 + 127·|d16 − d| ≤ d·(0.5 + 127·2^-11); Q4_0 stores
 * d = m/−8 and clips +8 to 7, so |x − d16·q| ≤ |d|·(1 + 8·2^-11); F16 and
 * BF16 are one rounding: relative 2^-11 and 2^-8 (normal range). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_write.h"
#include "model/quant.h"
#include "rlpost.h"
#include "test_support.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* ---- quantizers ----------------------------------------------------------- */

static void half_types_round_trip_exactly(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rlpi_fp16_to_fp32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(f))));
        else if (rlpi_fp32_to_fp16(f) != h)
            fail_msg("fp16 %04x -> %g -> %04x", h, (double)f, rlpi_fp32_to_fp16(f));
        f = rlpi_bf16_to_fp32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(rlpi_bf16_to_fp32(rlpi_fp32_to_bf16(f))));
        else
            assert_int_equal(rlpi_fp32_to_bf16(f), h);
    }
    /* ties to even, overflow, underflow */
    assert_int_equal(rlpi_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);     /* tie, even stays */
    assert_int_equal(rlpi_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie, odd rounds up */
    assert_int_equal(rlpi_fp32_to_fp16(65520.0f), 0x7c00);            /* rounds past max: inf */
    assert_int_equal(rlpi_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(rlpi_fp32_to_fp16(0x1p-25f), 0x0000);            /* half the smallest subnormal: even 0 */
    assert_int_equal(rlpi_fp32_to_fp16(0x1.8p-25f), 0x0001);
    assert_int_equal(rlpi_fp32_to_fp16(-0x1p-24f), 0x8001);
    assert_int_equal(rlpi_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      /* tie to even */
    assert_int_equal(rlpi_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    for (int i = 0; i < 100000; i++) {
        float x = frand() * 100.0f;
        float y = rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(x));
        if (fabsf(x) > 1e-4f)
            assert_true(fabsf(y - x) <= fabsf(x) * 0x1p-11f);
        y = rlpi_bf16_to_fp32(rlpi_fp32_to_bf16(x));
        assert_true(fabsf(y - x) <= fabsf(x) * 0x1p-8f);
    }
}

/* Per-element bound of a type, given the block's max |x| (amax) and |x|.
 * Block types: the rounding of x / d (d/2 for Q8_0; d for Q4_0, whose +8
 * clips to 7) plus |q|·|d16 − d| for the scale's own fp16 rounding (which is
 * coarse when d is an fp16 subnormal), with 1e-4 relative slack for the
 * fp32 arithmetic. */
static float type_bound(uint32_t type, float amax, float x)
{
    float d, qmax, step;
    switch (type) {
    case RLPI_GGML_F32: return 0.0f;
    case RLPI_GGML_F16: return fabsf(x) * 0x1p-11f + 0x1p-25f;
    case RLPI_GGML_BF16: return fabsf(x) * 0x1p-8f;
    case RLPI_GGML_Q8_0: d = amax / 127.0f, qmax = 127.0f, step = 0.5f; break;
    default: d = amax / 8.0f, qmax = 8.0f, step = 1.0f; break;
    }
    float d16 = rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(d));
    return (step * d + qmax * fabsf(d16 - d)) * 1.0001f;
}

static void block_quant_within_bounds(void **state)
{
    (void)state;
    enum { N = 32 * 200 };
    static float x[N], y[N];
    static uint8_t q[N / 32 * 34];
    for (int i = 0; i < N; i++)
        x[i] = frand() * (float)(1 + i / 32 % 7) * ((i / 32) % 5 == 0 ? 1e-3f : 1.0f);
    for (int k = 0; k < 32; k++)
        x[32 * 3 + k] = 0.0f; /* an all-zero block: d = 0, no division */
    static const uint32_t types[] = {RLPI_GGML_Q8_0, RLPI_GGML_Q4_0};
    for (size_t t = 0; t < 2; t++) {
        const rlpi_ggml_type_info *ti = rlpi_ggml_type(types[t]);
        size_t nb = N / 32 * ti->type_size;
        assert_int_equal(rlpi_quantize(types[t], x, N, q, nb), RLP_OK);
        assert_int_equal(rlpi_dequantize(types[t], q, nb, y, N), RLP_OK);
        for (int b = 0; b < N / 32; b++) {
            float amax = 0, m = 0;
            for (int k = 0; k < 32; k++)
                if (fabsf(x[32 * b + k]) > amax)
                    amax = fabsf(x[32 * b + k]), m = x[32 * b + k];
            float bound = type_bound(types[t], amax, 0.0f);
            for (int k = 0; k < 32; k++) {
                float e = fabsf(y[32 * b + k] - x[32 * b + k]);
                if (e > bound)
                    fail_msg("%s block %d elem %d: |%g - %g| > %g", ti->name, b, k, (double)y[32 * b + k],
                             (double)x[32 * b + k], (double)bound);
                if (x[32 * b + k] == m && amax > 0) /* the extreme maps exactly onto the grid end */
                    assert_true(y[32 * b + k] == rlpi_fp16_to_fp32(rlpi_fp32_to_fp16(
                                                     types[t] == RLPI_GGML_Q8_0 ? amax / 127.0f : m / -8.0f)) *
                                                     (types[t] == RLPI_GGML_Q8_0 ? (m > 0 ? 127.0f : -127.0f) : -8.0f));
            }
        }
    }
    /* Q4_K: each element within two of its sub-block's steps
     * ((max - min) / 15): the weighted least-squares fit of ggml's search
     * may clip an extreme (about 1.1 steps seen), and the 6-bit scale and
     * min are rounded; the bytes themselves equal llama.cpp's quantizer
     * (bindings/python/tests/test_gguf_out.py) */
    enum { NK = 256 * 8 };
    static float xk[NK], yk[NK];
    static uint8_t qk[NK / 256 * 144];
    for (int i = 0; i < NK; i++)
        xk[i] = frand() * (float)(1 + i / 32 % 5) + (i / 256 == 2 ? 3.0f : 0.0f); /* one block all positive */
    for (int k = 0; k < 256; k++)
        xk[256 * 5 + k] = 0.0f;
    assert_int_equal(rlpi_quantize(RLPI_GGML_Q4_K, xk, NK, qk, sizeof qk), RLP_OK);
    assert_int_equal(rlpi_dequantize(RLPI_GGML_Q4_K, qk, sizeof qk, yk, NK), RLP_OK);
    double se = 0, sx = 0;
    for (int j = 0; j < NK / 32; j++) {
        float lo = xk[32 * j], hi = xk[32 * j];
        for (int k = 0; k < 32; k++)
            lo = fminf(lo, xk[32 * j + k]), hi = fmaxf(hi, xk[32 * j + k]);
        float step = (hi - fminf(lo, 0.0f)) / 15.0f;
        for (int k = 0; k < 32; k++) {
            float e = fabsf(yk[32 * j + k] - xk[32 * j + k]);
            if (e > step * 2.0f + 1e-6f)
                fail_msg("Q4_K sub-block %d elem %d: |%g - %g| > %g", j, k, (double)yk[32 * j + k],
                         (double)xk[32 * j + k], (double)step);
            se += (double)e * e;
            sx += (double)xk[32 * j + k] * xk[32 * j + k];
        }
    }
    assert_true(se / sx < 0.01); /* relative RMS error below 10% (4-bit: ~3-5% expected) */
    for (int k = 0; k < 256; k++)
        assert_true(yk[256 * 5 + k] == 0.0f);

    /* geometry and type errors */
    assert_int_equal(rlpi_quantize(RLPI_GGML_Q8_0, x, 31, q, 34), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_quantize(RLPI_GGML_Q8_0, x, 32, q, 33), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_quantize(RLPI_GGML_Q4_1, x, 32, q, 20), RLP_E_UNSUPPORTED);
}

/* ---- writer vs loader ------------------------------------------------------ */

static void assert_weights_equal(const rlpi_weights *a, const rlpi_weights *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const rlpi_tensor *ta = &a->tensors[i], *tb = rlpi_weights_find(b, ta->name);
        if (!tb)
            fail_msg("missing %s", ta->name);
        assert_int_equal(ta->n_dims, tb->n_dims);
        assert_memory_equal(ta->shape, tb->shape, sizeof ta->shape);
        assert_int_equal(ta->alias_of >= 0, tb->alias_of >= 0);
        if (memcmp(rlpi_tensor_data(a, ta), rlpi_tensor_data(b, tb), ta->n_elems * sizeof(float)))
            fail_msg("%s differs", ta->name);
    }
}

static void assert_config_equal(const rlpi_model_config *a, const rlpi_model_config *b)
{
    assert_string_equal(a->arch, b->arch);
    assert_int_equal(a->n_layers, b->n_layers);
    assert_int_equal(a->dim, b->dim);
    assert_int_equal(a->n_heads, b->n_heads);
    assert_int_equal(a->n_kv_heads, b->n_kv_heads);
    assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->ffn_dim, b->ffn_dim);
    assert_int_equal(a->vocab_size, b->vocab_size);
    assert_int_equal(a->max_seq_len, b->max_seq_len);
    assert_true(a->rope_theta == b->rope_theta);
    assert_true(a->rms_eps == b->rms_eps);
    assert_int_equal(a->rope_scaling, b->rope_scaling);
    assert_true(a->rope_factor == b->rope_factor);
    assert_int_equal(a->tie_embeddings, b->tie_embeddings);
    assert_int_equal(a->attention_bias, b->attention_bias);
    assert_int_equal(a->bos_id, b->bos_id);
    assert_int_equal(a->eos_id, b->eos_id);
    /* what families differ in (Qwen3, Gemma 3) */
    assert_int_equal(a->activation, b->activation);
    assert_int_equal(a->qk_norm, b->qk_norm);
    assert_int_equal(a->post_norms, b->post_norms);
    assert_true(a->norm_offset == b->norm_offset);
    assert_true((a->embed_scale == 0 ? 1 : a->embed_scale) == (b->embed_scale == 0 ? 1 : b->embed_scale));
    assert_true(rlpi_model_config_attn_scale(a) == rlpi_model_config_attn_scale(b));
    assert_true(a->final_softcap == b->final_softcap);
    assert_int_equal(a->sliding_window, b->sliding_window);
    assert_true((a->sliding_window ? a->rope_theta_local : 0) == (b->sliding_window ? b->rope_theta_local : 0));
    assert_memory_equal(a->local_layers, b->local_layers, (size_t)a->n_layers);
}

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    const char *d = getenv("TMPDIR");
    snprintf(buf, n, "%s/rlpost_gguf_write_%d_%s", d && *d ? d : "/tmp", (int)getpid(), name);
    return buf;
}

/* Every tokenizer.* key of `a` is in `b` with the same bytes. */
static void assert_tokenizer_copied(const char *pa, const char *pb)
{
    rlpi_gguf *a, *b;
    assert_int_equal(rlpi_gguf_open(&a, pa), RLP_OK);
    assert_int_equal(rlpi_gguf_open(&b, pb), RLP_OK);
    int n = 0;
    for (uint64_t i = 0; i < a->n_kv; i++) {
        if (strncmp(a->kv[i].key, "tokenizer.", 10))
            continue;
        const rlpi_gguf_kv *k = rlpi_gguf_find(b, a->kv[i].key);
        if (!k)
            fail_msg("%s missing", a->kv[i].key);
        assert_int_equal(k->type, a->kv[i].type);
        assert_int_equal(k->arr_n, a->kv[i].arr_n);
        assert_int_equal(k->val_bytes, a->kv[i].val_bytes);
        assert_memory_equal(k->val, a->kv[i].val, a->kv[i].val_bytes);
        n++;
    }
    assert_true(n >= 3);
    rlpi_gguf_close(a);
    rlpi_gguf_close(b);
}

static void tiny_fixtures_round_trip_bit_for_bit(void **state)
{
    (void)state;
    static const char *const files[] = {"tiny_tied.gguf", "tiny_untied.gguf"};
    for (int f = 0; f < 2; f++) {
        char src[1024], rel[256], out[1024];
        snprintf(rel, sizeof rel, "tests/reference/fixtures/%s", files[f]);
        source_path(src, sizeof src, rel);
        tmp_path(out, sizeof out, files[f]);
        rlpi_model_config c1, c2;
        rlpi_weights w1, w2;
        rlpi_weights_init(&w1);
        rlpi_weights_init(&w2);
        assert_int_equal(rlpi_gguf_model_load(src, &c1, &w1, NULL, NULL), RLP_OK);
        rlpi_gguf *g;
        assert_int_equal(rlpi_gguf_open(&g, src), RLP_OK);
        rlpi_gguf_tok_src tok = {g, NULL, NULL, NULL};
        rlpi_gguf_write_opts o = {RLPI_GGML_F32, -1, "tiny"};
        if (rlpi_gguf_write_model(out, &c1, &w1, &tok, &o) != RLP_OK)
            fail_msg("%s", rlp_error_last());
        rlpi_gguf_close(g);
        if (rlpi_gguf_model_load(out, &c2, &w2, NULL, NULL) != RLP_OK)
            fail_msg("%s", rlp_error_last());
        assert_config_equal(&c1, &c2);
        assert_weights_equal(&w1, &w2);
        /* tied: no output.weight in the file */
        assert_int_equal(rlpi_gguf_open(&g, out), RLP_OK);
        assert_int_equal(rlpi_gguf_find_tensor(g, "output.weight") != NULL, !c1.tie_embeddings);
        rlpi_gguf_str s;
        assert_int_equal(rlpi_gguf_get_str(g, "general.name", &s), RLP_OK);
        assert_int_equal(s.len, 4);
        rlpi_gguf_close(g);
        assert_tokenizer_copied(src, out);
        rlpi_weights_free(&w1);
        rlpi_weights_free(&w2);
        unlink(out);
    }
}

/* A random model of `arch` whose rows are multiples of 32 (all types
 * apply), with every tensor its family has. */
static void synth_model(const char *arch, rlpi_model_config *c, rlpi_weights *w)
{
    memset(c, 0, sizeof *c);
    c->n_layers = 2, c->dim = 64, c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 32, c->ffn_dim = 96;
    c->vocab_size = 40, c->max_seq_len = 128, c->rope_theta = 10000.0f, c->rms_eps = 1e-6f;
    c->rope_factor = 1.0f, c->bos_id = -1, c->eos_id = -1; /* no tokenizer keys written */
    const rlpi_arch_desc *a = rlpi_arch_find(arch);
    assert_non_null(a);
    rlpi_arch_apply(a, c);
    c->tie_embeddings = strcmp(arch, "mistral") == 0 ? false : true;
    if (a->sliding_window) {
        c->sliding_window = 16;
        rlpi_arch_default_local_layers(a, c);
        c->final_softcap = 30.0f;
    }
    rlpi_weights_init(w);
    int64_t q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    struct {
        const char *n;
        int nd;
        int64_t r, k;
        bool want;
    } per[] = {
        {"input_layernorm.weight", 1, c->dim, 0, true},
        {"self_attn.q_proj.weight", 2, q, c->dim, true},
        {"self_attn.k_proj.weight", 2, kv, c->dim, true},
        {"self_attn.v_proj.weight", 2, kv, c->dim, true},
        {"self_attn.q_proj.bias", 1, q, 0, c->attention_bias},
        {"self_attn.k_proj.bias", 1, kv, 0, c->attention_bias},
        {"self_attn.v_proj.bias", 1, kv, 0, c->attention_bias},
        {"self_attn.q_norm.weight", 1, c->head_dim, 0, c->qk_norm},
        {"self_attn.k_norm.weight", 1, c->head_dim, 0, c->qk_norm},
        {"self_attn.o_proj.weight", 2, c->dim, q, true},
        {"post_attention_layernorm.weight", 1, c->dim, 0, true},
        {"pre_feedforward_layernorm.weight", 1, c->dim, 0, c->post_norms},
        {"post_feedforward_layernorm.weight", 1, c->dim, 0, c->post_norms},
        {"mlp.gate_proj.weight", 2, c->ffn_dim, c->dim, true},
        {"mlp.up_proj.weight", 2, c->ffn_dim, c->dim, true},
        {"mlp.down_proj.weight", 2, c->dim, c->ffn_dim, true},
    };
    rlpi_tensor *t;
    int64_t sh[2] = {c->vocab_size, c->dim};
    assert_int_equal(rlpi_weights_add(w, "model.embed_tokens.weight", 2, sh, &t), RLP_OK);
    for (size_t i = 0; i < t->n_elems; i++)
        t->data[i] = frand() * 0.1f;
    char name[128];
    for (int l = 0; l < c->n_layers; l++)
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            if (!per[k].want)
                continue;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per[k].n);
            int64_t s2[2] = {per[k].r, per[k].k};
            assert_int_equal(rlpi_weights_add(w, name, per[k].nd, s2, &t), RLP_OK);
            for (size_t i = 0; i < t->n_elems; i++)
                t->data[i] = per[k].nd == 1 ? 1.0f + 0.1f * frand() : frand() * 0.2f;
        }
    int64_t sn[1] = {c->dim};
    assert_int_equal(rlpi_weights_add(w, "model.norm.weight", 1, sn, &t), RLP_OK);
    for (size_t i = 0; i < t->n_elems; i++)
        t->data[i] = 1.0f + 0.1f * frand();
    if (c->tie_embeddings)
        assert_int_equal(rlpi_weights_add_alias(w, "lm_head.weight", "model.embed_tokens.weight"), RLP_OK);
    else {
        assert_int_equal(rlpi_weights_add(w, "lm_head.weight", 2, sh, &t), RLP_OK);
        for (size_t i = 0; i < t->n_elems; i++)
            t->data[i] = frand() * 0.1f;
    }
}


/* b within the type's bound of a; 1-D tensors exact (written in F32). */
static void assert_within_type(const rlpi_weights *a, const rlpi_weights *b, uint32_t type)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        const rlpi_tensor *ta = &a->tensors[i], *tb = rlpi_weights_find(b, ta->name);
        assert_non_null(tb);
        const float *x = rlpi_tensor_data(a, ta), *y = rlpi_tensor_data(b, tb);
        uint32_t t = ta->n_dims == 1 ? RLPI_GGML_F32 : type;
        int64_t cols = ta->n_dims == 1 ? (int64_t)ta->n_elems : ta->shape[1];
        for (size_t e = 0; e < ta->n_elems; e += 32) {
            size_t end = e + 32 < ta->n_elems ? e + 32 : ta->n_elems;
            float amax = 0;
            for (size_t k = e; k < end; k++)
                amax = fmaxf(amax, fabsf(x[k]));
            for (size_t k = e; k < end; k++)
                if (fabsf(x[k] - y[k]) > type_bound(t, amax, x[k]))
                    fail_msg("%s %s[%zu]: %.9g vs %.9g", rlpi_ggml_type(t)->name, ta->name, k, (double)x[k],
                             (double)y[k]);
        }
        (void)cols;
    }
}

static void synthetic_models_every_type(void **state)
{
    (void)state;
    static const char *const archs[] = {"llama", "mistral", "qwen2", "qwen3", "gemma3"};
    static const uint32_t types[] = {RLPI_GGML_F32, RLPI_GGML_F16, RLPI_GGML_BF16, RLPI_GGML_Q8_0, RLPI_GGML_Q4_0,
                                     RLPI_GGML_Q4_K};
    char out[1024];
    tmp_path(out, sizeof out, "synth.gguf");
    for (size_t a = 0; a < 5; a++) {
        rlpi_model_config c, c2;
        rlpi_weights w, w2;
        synth_model(archs[a], &c, &w);
        for (size_t t = 0; t < 6; t++) {
            rlpi_gguf_write_opts o = {types[t], -1, NULL};
            /* rows of 64 and 96 are not whole Q4_K blocks: Q8_0 */
            uint32_t written = types[t] == RLPI_GGML_Q4_K ? RLPI_GGML_Q8_0 : types[t];
            if (rlpi_gguf_write_model(out, &c, &w, NULL, &o) != RLP_OK)
                fail_msg("%s %s: %s", archs[a], rlpi_ggml_type(types[t])->name, rlp_error_last());
            rlpi_weights_init(&w2);
            if (rlpi_gguf_model_load(out, &c2, &w2, NULL, NULL) != RLP_OK)
                fail_msg("%s %s: %s", archs[a], rlpi_ggml_type(types[t])->name, rlp_error_last());
            assert_config_equal(&c, &c2);
            if (types[t] == RLPI_GGML_F32)
                assert_weights_equal(&w, &w2);
            else
                assert_within_type(&w, &w2, written);
            /* every matrix in the asked type, every 1-D tensor in F32 */
            rlpi_gguf *g;
            assert_int_equal(rlpi_gguf_open(&g, out), RLP_OK);
            for (uint64_t i = 0; i < g->n_tensors; i++)
                assert_int_equal(g->tensors[i].type, g->tensors[i].n_dims == 1 ? RLPI_GGML_F32 : written);
            uint32_t ft;
            assert_int_equal(rlpi_gguf_get_u32(g, "general.file_type", &ft), RLP_OK);
            assert_int_equal(ft, rlpi_gguf_file_type(types[t]));
            rlpi_gguf_close(g);
            rlpi_weights_free(&w2);
        }
        /* embedding type apart: Q8_0 matrices, F16... here F32 embedding */
        rlpi_gguf_write_opts o = {RLPI_GGML_Q8_0, RLPI_GGML_F32, NULL};
        assert_int_equal(rlpi_gguf_write_model(out, &c, &w, NULL, &o), RLP_OK);
        rlpi_gguf *g;
        assert_int_equal(rlpi_gguf_open(&g, out), RLP_OK);
        assert_int_equal(rlpi_gguf_find_tensor(g, "token_embd.weight")->type, RLPI_GGML_F32);
        assert_int_equal(rlpi_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, RLPI_GGML_Q8_0);
        rlpi_gguf_close(g);
        rlpi_weights_free(&w);
    }
    unlink(out);
}

/* Rows the 32-block does not divide fall back to F16 (the tiny fixture's
 * rows are 4 and 8 wide). */
static void short_rows_fall_back_to_f16(void **state)
{
    (void)state;
    char src[1024], out[1024];
    source_path(src, sizeof src, "tests/reference/fixtures/tiny_untied.gguf");
    tmp_path(out, sizeof out, "short.gguf");
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    assert_int_equal(rlpi_gguf_model_load(src, &c, &w, NULL, NULL), RLP_OK);
    rlpi_gguf_write_opts o = {RLPI_GGML_Q4_0, -1, NULL};
    assert_int_equal(rlpi_gguf_write_model(out, &c, &w, NULL, &o), RLP_OK);
    rlpi_gguf *g;
    assert_int_equal(rlpi_gguf_open(&g, out), RLP_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        assert_int_equal(g->tensors[i].type, g->tensors[i].n_dims == 1 ? RLPI_GGML_F32 : RLPI_GGML_F16);
    rlpi_gguf_close(g);
    rlpi_weights_free(&w);
    unlink(out);
}

/* qwen3 and gemma3: names, types and keys on the file itself (llama.cpp's
 * names, which the round trip above cannot tell from a consistent
 * misnaming). */
static void qwen3_gemma3_names_and_keys(void **state)
{
    (void)state;
    char out[1024];
    tmp_path(out, sizeof out, "fam.gguf");
    static const char *const archs[] = {"qwen3", "gemma3"};
    for (int a = 0; a < 2; a++) {
        rlpi_model_config c;
        rlpi_weights w;
        synth_model(archs[a], &c, &w);
        rlpi_gguf_write_opts o = {RLPI_GGML_Q8_0, -1, NULL};
        if (rlpi_gguf_write_model(out, &c, &w, NULL, &o) != RLP_OK)
            fail_msg("%s: %s", archs[a], rlp_error_last());
        rlpi_gguf *g;
        assert_int_equal(rlpi_gguf_open(&g, out), RLP_OK);
        rlpi_gguf_str s;
        assert_int_equal(rlpi_gguf_get_str(g, "general.architecture", &s), RLP_OK);
        assert_true(s.len == strlen(archs[a]) && !memcmp(s.ptr, archs[a], s.len));
        const char *want[] = {"blk.1.attn_q_norm.weight", "blk.1.attn_k_norm.weight", "blk.0.ffn_norm.weight"};
        for (int k = 0; k < 3; k++) {
            const rlpi_gguf_tensor *t = rlpi_gguf_find_tensor(g, want[k]);
            if (!t)
                fail_msg("%s: %s missing", archs[a], want[k]);
            assert_int_equal(t->type, RLPI_GGML_F32);
        }
        assert_null(rlpi_gguf_find_tensor(g, "output.weight"));
        bool gemma = a == 1;
        assert_int_equal(rlpi_gguf_find_tensor(g, "blk.0.post_attention_norm.weight") != NULL, gemma);
        assert_int_equal(rlpi_gguf_find_tensor(g, "blk.0.post_ffw_norm.weight") != NULL, gemma);
        /* Gemma's ffn_norm is HF's pre_feedforward_layernorm: same values */
        const rlpi_gguf_tensor *fn = rlpi_gguf_find_tensor(g, "blk.0.ffn_norm.weight");
        const rlpi_tensor *hf = rlpi_weights_find(
            &w, gemma ? "model.layers.0.pre_feedforward_layernorm.weight" : "model.layers.0.post_attention_layernorm.weight");
        assert_memory_equal(fn->data, hf->data, (size_t)c.dim * sizeof(float));
        /* q rows not permuted for these families */
        const rlpi_gguf_tensor *q = rlpi_gguf_find_tensor(g, "blk.0.attn_q.weight");
        float row[64];
        assert_int_equal(rlpi_dequantize(RLPI_GGML_Q8_0, q->data + 34 * 2, 34 * 2, row, 64), RLP_OK); /* row 1 */
        const float *hq = rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight")->data + 64;
        for (int k = 0; k < 64; k++)
            assert_true(fabsf(row[k] - hq[k]) < 0.01f);
        uint32_t u;
        float f;
        char key[64];
        snprintf(key, sizeof key, "%s.attention.key_length", archs[a]);
        assert_int_equal(rlpi_gguf_get_u32(g, key, &u), RLP_OK);
        assert_int_equal(u, 32);
        snprintf(key, sizeof key, "%s.attention.sliding_window", archs[a]);
        assert_int_equal(rlpi_gguf_get_u32(g, key, &u), gemma ? RLP_OK : RLP_E_NOT_FOUND);
        if (gemma) {
            assert_int_equal(u, 16);
            assert_int_equal(rlpi_gguf_get_f32(g, "gemma3.final_logit_softcapping", &f), RLP_OK);
            assert_true(f == 30.0f);
        }
        rlpi_gguf_close(g);
        if (gemma) {
            /* what GGUF cannot say is refused, and no file is written */
            unlink(out);
            rlpi_model_config bad = c;
            bad.local_layers[1] = 0; /* only every 6th layer is global in Gemma 3 */
            assert_int_equal(rlpi_gguf_write_model(out, &bad, &w, NULL, &o), RLP_E_UNSUPPORTED);
            assert_non_null(strstr(rlp_error_last(), "layer 1 is global"));
            bad = c;
            bad.attn_scale = 0.0625f; /* query_pre_attn_scalar 256 with head_dim 32 */
            assert_int_equal(rlpi_gguf_write_model(out, &bad, &w, NULL, &o), RLP_E_UNSUPPORTED);
            assert_non_null(strstr(rlp_error_last(), "attention scale"));
            bad = c;
            bad.embed_scale = 1.0f;
            assert_int_equal(rlpi_gguf_write_model(out, &bad, &w, NULL, &o), RLP_E_UNSUPPORTED);
            assert_false(file_exists(out));
            bad = c;
            bad.attn_scale = 1.0f / sqrtf(32.0f); /* the default, spelt out: fine */
            assert_int_equal(rlpi_gguf_write_model(out, &bad, &w, NULL, &o), RLP_OK);
        }
        rlpi_weights_free(&w);
    }
    unlink(out);
}

/* ---- through the public API ------------------------------------------------ */

static void bad_input_leaves_no_file(void **state)
{
    (void)state;
    rlp_context *ctx;
    assert_int_equal(rlp_context_create(&ctx, NULL), RLP_OK);
    char src[1024], out[1024];
    source_path(src, sizeof src, "tests/reference/fixtures/tiny_tied.gguf");
    rlp_policy *p;
    if (rlp_policy_load(&p, ctx, src, NULL) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    tmp_path(out, sizeof out, "bad.gguf");
    unlink(out);
    rlp_gguf_save_options o;
    assert_int_equal(rlp_gguf_save_options_init(&o, RLP_GGUF_SAVE_OPTIONS_VERSION), RLP_OK);
    assert_int_equal(rlp_gguf_save_options_init(&o, 99), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_policy_save_gguf(NULL, out, &o), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_policy_save_gguf(p, NULL, &o), RLP_E_INVALID_ARG);
    o.type = 13; /* Q5_K: readable, not writable */
    assert_int_equal(rlp_policy_save_gguf(p, out, &o), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "type 13"));
    assert_false(file_exists(out));
    o.type = RLP_GGUF_F16;
    o.embed_type = 7;
    assert_int_equal(rlp_policy_save_gguf(p, out, &o), RLP_E_INVALID_ARG);
    assert_false(file_exists(out));
    o.embed_type = -1;
    assert_int_equal(rlp_policy_save_gguf(p, "/nonexistent-dir/x.gguf", &o), RLP_E_IO);
    assert_non_null(strstr(rlp_error_last(), "/nonexistent-dir/x.gguf"));
    /* an existing file survives a failed save untouched */
    FILE *f = fopen(out, "wb");
    fputs("keep", f);
    fclose(f);
    o.type = 3; /* Q4_1 */
    assert_int_equal(rlp_policy_save_gguf(p, out, &o), RLP_E_INVALID_ARG);
    f = fopen(out, "rb");
    char buf[8] = {0};
    assert_int_equal(fread(buf, 1, sizeof buf, f), 4);
    fclose(f);
    assert_string_equal(buf, "keep");
    /* type names */
    int32_t t;
    assert_int_equal(rlp_gguf_type_from_name(&t, "Q8_0"), RLP_OK);
    assert_int_equal(t, RLP_GGUF_Q8_0);
    assert_int_equal(rlp_gguf_type_from_name(&t, "bf16"), RLP_OK);
    assert_int_equal(t, RLP_GGUF_BF16);
    assert_int_equal(rlp_gguf_type_from_name(&t, "q4_k"), RLP_OK);
    assert_int_equal(t, RLP_GGUF_Q4_K);
    assert_int_equal(rlp_gguf_type_from_name(&t, "q5_k"), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "q5_k"));
    /* and a good save through the API replaces it */
    o.type = RLP_GGUF_F32;
    if (rlp_policy_save_gguf(p, out, &o) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    rlp_policy *p2;
    if (rlp_policy_load(&p2, ctx, out, NULL) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    rlp_policy_free(p2);
    unlink(out);
    rlp_policy_free(p);
    rlp_context_free(ctx);
}

/* A real model: F32 bit for bit (config, weights, tokenizer keys) and
 * Q8_0 within its bound; skipped when the file is absent. */
static void real_model_round_trip(const char *file)
{
    char path[1024], out[1024];
    model_path(path, sizeof path, file);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "SKIP: %s absent; run scripts/fetch-model.sh (or set RLPOST_MODEL_DIR)\n", path);
        skip();
    }
    tmp_path(out, sizeof out, "real.gguf");
    rlpi_model_config c1, c2;
    rlpi_weights w1, w2;
    rlpi_weights_init(&w1);
    assert_int_equal(rlpi_gguf_model_load(path, &c1, &w1, NULL, NULL), RLP_OK);
    rlpi_gguf *g;
    assert_int_equal(rlpi_gguf_open(&g, path), RLP_OK);
    rlpi_gguf_tok_src tok = {g, NULL, NULL, NULL};
    static const uint32_t types[] = {RLPI_GGML_F32, RLPI_GGML_Q8_0};
    for (int t = 0; t < 2; t++) {
        rlpi_gguf_write_opts o = {types[t], -1, NULL};
        if (rlpi_gguf_write_model(out, &c1, &w1, &tok, &o) != RLP_OK)
            fail_msg("%s", rlp_error_last());
        rlpi_weights_init(&w2);
        if (rlpi_gguf_model_load(out, &c2, &w2, NULL, NULL) != RLP_OK)
            fail_msg("%s", rlp_error_last());
        assert_config_equal(&c1, &c2);
        if (t == 0) {
            assert_weights_equal(&w1, &w2);
            assert_tokenizer_copied(path, out);
        } else {
            assert_within_type(&w1, &w2, types[t]);
        }
        rlpi_weights_free(&w2);
    }
    rlpi_gguf_close(g);
    rlpi_weights_free(&w1);
    unlink(out);
}

static void smollm2_round_trip(void **state)
{
    (void)state;
    real_model_round_trip("SmolLM2-135M-Instruct.Q4_1.gguf");
}

/* Gemma 3 270M (Q4_K_M; scripts/fetch-model.sh gemma3-270m): sandwich
 * norms, q/k norms, sliding-window layers, SentencePiece vocabulary. */
static void gemma3_round_trip(void **state)
{
    (void)state;
    real_model_round_trip("gemma-3-270m-q4_k_m.gguf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_types_round_trip_exactly),
        cmocka_unit_test(block_quant_within_bounds),
        cmocka_unit_test(tiny_fixtures_round_trip_bit_for_bit),
        cmocka_unit_test(synthetic_models_every_type),
        cmocka_unit_test(short_rows_fall_back_to_f16),
        cmocka_unit_test(qwen3_gemma3_names_and_keys),
        cmocka_unit_test(bad_input_leaves_no_file),
        cmocka_unit_test(smollm2_round_trip),
        cmocka_unit_test(gemma3_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
