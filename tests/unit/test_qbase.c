/* The quantized frozen base (model/qbase.h), on random models of four
 * shapes (Llama with GQA and an untied head; Qwen2 with QKV bias and a tied
 * head; Gemma 3 with q/k norms, post-norms and GeGLU; a 256-wide Llama
 * whose rows take Q4_K's 256-blocks) in Q8_0, Q4_0 and Q4_K:
 *   - a quantized-base model with adapters computes exactly (bit for bit)
 *     what an fp32 model holding the dequantized base and the same adapters
 *     computes: logprobs, entropies and every adapter gradient, fused and
 *     separate projections, with activation checkpointing, the KV-cached
 *     decode and the Q8_0 rollout copy; the same model with the adapters
 *     disabled is the dequantized base;
 *   - against the original fp32 base the logprobs move by what the format
 *     allows (stated per type below, measured on these models);
 *   - the blocks are GGUF's: each row quantized by rlpi_quantize (ggml's
 *     reference quantizers, checked against gguf-py in test_quant);
 *     every dequantized weight within the block's half step;
 *   - an fp32 model of the same base, quantized the same way, has the same
 *     fingerprint (rlpi_qbase_fingerprint_as: QLoRA adapters load there);
 *   - memory: the parameter buffer holds one layer's matrices and the fp32
 *     rest; set_weights re-quantizes; export gives the dequantized values;
 *   - refusals leave the model as it was: a trainable base, twice, an
 *     unknown type, rows that are no multiple of 32, detaching adapters;
 *     a version-1 rlp_lora_options is initialised without writing past it.
 * With RLPOST_TEST_BACKEND=cuda the same runs on the CUDA backend, whose
 * device window is filled through a host staging copy (qbase_cuda on a
 * GPU, qbase_emulated on the kernel emulator; not the 256-wide shape). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/qmat.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/lora.h"
#include "model/qbase.h"
#include "model/quant.h"
#include "model/qweights.h"
#include "model/transformer.h"
#include "model/transformer_internal.h"
#include "rlpost/policy.h"
#include "model_fixture.h"
#include "test_backend_env.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rlpi_backend *be;

/* Max |Δlogp| against the fp32 base allowed per type on these random
 * models (weights ~ N(0, 0.05²), 16 tokens): measured 2.7e-4 … 2.0e-2
 * (Q8_0) and 4e-3 … 0.32 (Q4_0/Q4_K), allowed with a margin of about 3. What the
 * formats cost on a trained model (SmolLM2-135M) is measured by
 * tests/bench/bench_lora and stated in docs/lora.md. */
static double logp_tolerance(uint32_t type)
{
    return type == RLPI_GGML_Q8_0 ? 0.06 : 0.8;
}

static float normal(rlpi_rng *r)
{
    return (float)rlpi_rng_normal(r);
}

static void add(rlpi_weights *w, rlpi_rng *r, const char *name, int64_t a, int64_t b, float scale, float mean)
{
    int64_t sh[2] = {a, b};
    rlpi_tensor *t;
    assert_int_equal(rlpi_weights_add(w, name, b ? 2 : 1, sh, &t), RLP_OK);
    for (size_t i = 0; i < t->n_elems; i++)
        t->data[i] = mean + scale * normal(r);
}

/* Random HF-named weights for cfg. */
static void random_weights(const rlpi_model_config *c, rlpi_weights *w, uint64_t seed)
{
    rlpi_rng r;
    rlpi_rng_seed(&r, seed, 0);
    rlpi_weights_init(w);
    int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    char n[128];
    float one = c->norm_offset != 0 ? 0.0f : 1.0f; /* Gemma stores norm weights as w of 1 + w */
    add(w, &r, "model.embed_tokens.weight", c->vocab_size, c->dim, 0.5f, 0);
    for (int l = 0; l < c->n_layers; l++) {
#define N(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        add(w, &r, N("input_layernorm.weight"), c->dim, 0, 0.1f, one);
        add(w, &r, N("self_attn.q_proj.weight"), qd, c->dim, 0.05f, 0);
        add(w, &r, N("self_attn.k_proj.weight"), kvd, c->dim, 0.05f, 0);
        add(w, &r, N("self_attn.v_proj.weight"), kvd, c->dim, 0.05f, 0);
        if (c->attention_bias) {
            add(w, &r, N("self_attn.q_proj.bias"), qd, 0, 0.05f, 0);
            add(w, &r, N("self_attn.k_proj.bias"), kvd, 0, 0.05f, 0);
            add(w, &r, N("self_attn.v_proj.bias"), kvd, 0, 0.05f, 0);
        }
        add(w, &r, N("self_attn.o_proj.weight"), c->dim, qd, 0.05f, 0);
        if (c->qk_norm) {
            add(w, &r, N("self_attn.q_norm.weight"), c->head_dim, 0, 0.1f, one);
            add(w, &r, N("self_attn.k_norm.weight"), c->head_dim, 0, 0.1f, one);
        }
        add(w, &r, N("post_attention_layernorm.weight"), c->dim, 0, 0.1f, one);
        if (c->post_norms) {
            add(w, &r, N("pre_feedforward_layernorm.weight"), c->dim, 0, 0.1f, one);
            add(w, &r, N("post_feedforward_layernorm.weight"), c->dim, 0, 0.1f, one);
        }
        add(w, &r, N("mlp.gate_proj.weight"), c->ffn_dim, c->dim, 0.05f, 0);
        add(w, &r, N("mlp.up_proj.weight"), c->ffn_dim, c->dim, 0.05f, 0);
        add(w, &r, N("mlp.down_proj.weight"), c->dim, c->ffn_dim, 0.05f, 0);
#undef N
    }
    add(w, &r, "model.norm.weight", c->dim, 0, 0.1f, one);
    if (!c->tie_embeddings)
        add(w, &r, "lm_head.weight", c->vocab_size, c->dim, 0.05f, 0);
}

/* The four shapes: from committed fixtures' validated configs, widened
 * where a row length must be a multiple of 32 (or 256). */
static void shape(int which, rlpi_model_config *c)
{
    static const char *const src[] = {"transformer_llama_gqa", "transformer_qwen2_tied_bias_llama3rope",
                                      "arch_gemma3", "transformer_llama_gqa"};
    model_fixture f;
    if (which == 2)
        fixture_load_family(&f, src[which]);
    else
        fixture_load(&f, src[which]);
    *c = f.cfg;
    fixture_free(&f);
    if (which == 2) /* Gemma 3: ffn 40 → 64 */
        c->ffn_dim = 64;
    if (which == 3) { /* 256-wide: Q4_K's blocks fit every row but o_proj's (qdim 128 → Q4_0) */
        c->dim = 256;
        c->ffn_dim = 512;
        c->n_heads = 4;
        c->n_kv_heads = 2;
        c->head_dim = 32;
        c->vocab_size = 96;
    }
    assert_int_equal(rlpi_model_config_validate(c, "qbase test"), RLP_OK);
}

typedef struct batch {
    int64_t seq_start[3];
    int32_t tokens[16], positions[16], targets[16];
    float dlogp[16], dent[16];
    rlpi_packed_batch b;
} batch;

static void make_batch(batch *bt, int vocab)
{
    rlpi_rng r;
    rlpi_rng_seed(&r, 7, 0);
    int64_t lens[2] = {9, 7}, i = 0;
    bt->seq_start[0] = 0;
    for (int s = 0; s < 2; s++) {
        for (int64_t p = 0; p < lens[s]; p++, i++) {
            bt->tokens[i] = (int32_t)rlpi_rng_below(&r, (uint64_t)vocab);
            bt->positions[i] = (int32_t)p;
        }
        bt->seq_start[s + 1] = i;
    }
    for (int64_t k = 0; k < i; k++) {
        bool last = k + 1 == bt->seq_start[1] || k + 1 == bt->seq_start[2];
        bt->targets[k] = last || k < 2 ? -1 : bt->tokens[k + 1];
        bt->dlogp[k] = normal(&r);
        bt->dent[k] = 0.3f * normal(&r);
    }
    bt->b = (rlpi_packed_batch){.n_seq = 2,
                                .seq_start = bt->seq_start,
                                .n_tokens = i,
                                .tokens = bt->tokens,
                                .positions = bt->positions,
                                .targets = bt->targets};
}

static const rlpi_lora_config lcfg = {.rank = 4, .alpha = 8.0f, .targets = RLPI_LORA_ALL_TARGETS};

/* Base + adapters with non-zero B (drawn from `seed`). */
static rlpi_transformer *adapted(const rlpi_model_config *c, const rlpi_weights *w, bool ckpt)
{
    rlpi_transformer_options o = {.activation_checkpointing = ckpt};
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, c, w, &o), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &lcfg, 3), RLP_OK);
    size_t n = rlpi_transformer_n_trainable(tf);
    float *p = malloc(n * 4);
    rlpi_rng r;
    rlpi_rng_seed(&r, 11, 0);
    for (size_t i = 0; i < n; i++)
        p[i] = 0.05f * normal(&r);
    assert_int_equal(rlpi_buffer_upload(rlpi_transformer_trainable_params(tf), 0, p, n * 4), RLP_OK);
    free(p);
    return tf;
}

typedef struct pass {
    float logp[16], ent[16];
    float *grads;
    size_t n_grads;
} pass;

static void run(rlpi_transformer *tf, const batch *bt, pass *out)
{
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &bt->b, 1.25f, out->logp, out->ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, bt->dlogp, bt->dent), RLP_OK);
    out->n_grads = rlpi_transformer_n_trainable(tf);
    out->grads = malloc(out->n_grads * 4);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_trainable_grads(tf), 0, out->grads, out->n_grads * 4),
                     RLP_OK);
}

static void same_pass(const pass *a, const pass *b, int64_t n)
{
    assert_memory_equal(a->logp, b->logp, (size_t)n * 4);
    assert_memory_equal(a->ent, b->ent, (size_t)n * 4);
    assert_int_equal(a->n_grads, b->n_grads);
    assert_memory_equal(a->grads, b->grads, a->n_grads * 4);
}

/* KV-cached decode of sequence 0, a token a step: the logits of every step. */
static void decode(rlpi_transformer *tf, const batch *bt, bool qweights, float *out, int V)
{
    rlpi_kv_cache *kv;
    rlpi_qweights *qw = NULL;
    assert_int_equal(rlpi_kv_cache_create(&kv, tf, 1, 32), RLP_OK);
    if (qweights) {
        assert_int_equal(rlpi_qweights_create(&qw, tf, RLPI_QMAT_Q8_0), RLP_OK);
        rlpi_kv_cache_set_qweights(kv, qw);
    }
    int64_t L0 = bt->seq_start[1];
    for (int64_t t = 0; t < L0; t++) { /* one token a step */
        int64_t qs[2] = {0, 1}, slot = 0, past = t;
        assert_int_equal(rlpi_transformer_extend(tf, kv, 1, qs, &slot, &past, bt->tokens + t, out + t * V), RLP_OK);
    }
    rlpi_kv_cache_free(kv);
    rlpi_qweights_free(qw);
}

static void check_shape_type(int which, uint32_t type)
{
    rlpi_model_config c;
    shape(which, &c);
    rlpi_weights w;
    random_weights(&c, &w, 100 + (uint64_t)which);
    batch bt;
    make_batch(&bt, c.vocab_size);
    int64_t n = bt.b.n_tokens;

    rlpi_transformer *tq = adapted(&c, &w, false), *tf32 = adapted(&c, &w, false);
    pass orig;
    run(tf32, &bt, &orig);
    size_t all = rlpi_transformer_n_params(tq);
    assert_int_equal(rlpi_transformer_quantize_base(tq, type), RLP_OK);
    assert_int_equal(rlpi_transformer_base_type(tq), type);
    assert_int_equal(rlpi_transformer_n_params(tq), all); /* still the model's parameter count */
    assert_true(rlpi_transformer_n_stored(tq) < all);

    /* the dequantized base, as an fp32 model with the same adapters */
    rlpi_transformer_set_lora_enabled(tq, false);
    rlpi_weights deq;
    assert_int_equal(rlpi_transformer_export(tq, &deq), RLP_OK);
    rlpi_transformer_set_lora_enabled(tq, true);
    rlpi_transformer *tref = adapted(&c, &deq, false);

    /* each dequantized weight within what its block's format allows:
     * Q8_0 half a step, max|x|/254, plus |q|·|d − fp16(d)| ≤ 127·d·2⁻¹¹
     * because ggml rounds x/d with the fp32 d (max|x|/220 covers both); Q4_0 reaches
     * −8d on the side of the block's largest |x| but only 7d on the other,
     * so up to max|x|/8 there; Q4_K (6-bit scales and mins, 4-bit quants)
     * max|x|/7 */
    const rlpi_qbase *qb = tq->qbase;
    size_t n_mat = 0, mat_bytes = 0;
    for (size_t i = 0; i < rlpi_transformer_n_tensors(tq); i++) {
        const rlpi_param_info *in = rlpi_transformer_tensor(tq, i);
        int layer, mat;
        if (!rlpi_qbase_find(tq, in, &layer, &mat))
            continue;
        const rlpi_tensor *a = rlpi_weights_find(&w, in->name), *b = rlpi_weights_find(&deq, in->name);
        uint32_t t = qb->mat_type[mat];
        size_t blk = rlpi_ggml_type(t)->blck;
        double frac = t == RLPI_GGML_Q8_0 ? 1.0 / 220 : t == RLPI_GGML_Q4_0 ? 1.0 / 8 : 1.0 / 7;
        for (size_t s = 0; s < in->n_elems; s += blk) {
            double amax = 0;
            for (size_t e = s; e < s + blk; e++)
                amax = fmax(amax, fabs(a->data[e]));
            for (size_t e = s; e < s + blk; e++)
                if (!(fabs(a->data[e] - b->data[e]) <= amax * frac * 1.01 + 1e-7))
                    fail_msg("%s[%zu]: %g dequantized to %g (block max %g, type %u)", in->name, e, a->data[e],
                             b->data[e], amax, t);
        }
        /* GGUF's rows: the blocks are rlpi_quantize of each row */
        size_t row_bytes = qb->mat_bytes[mat] / (size_t)qb->rows[mat];
        uint8_t *want = malloc(row_bytes);
        const uint8_t *have = qb->blocks + (size_t)layer * qb->layer_bytes + qb->mat_off[mat];
        for (int64_t r = 0; r < qb->rows[mat]; r++) {
            assert_int_equal(rlpi_quantize(t, a->data + r * qb->cols[mat], (size_t)qb->cols[mat], want, row_bytes),
                             RLP_OK);
            assert_memory_equal(want, have + (size_t)r * row_bytes, row_bytes);
        }
        free(want);
        n_mat += in->n_elems;
        mat_bytes += qb->mat_bytes[mat];
        if (which == 3 && type == RLPI_GGML_Q4_K)
            assert_int_equal(t, mat == RLPI_QB_WO ? RLPI_GGML_Q4_0 : RLPI_GGML_Q4_K);
        else
            assert_int_equal(t, type == RLPI_GGML_Q4_K ? RLPI_GGML_Q4_0 : type);
    }
    /* an fp32 reader of the same base, quantizing it the same way, gets the
     * trainer's fingerprint (what lets a QLoRA adapter load onto the fp32 base) */
    uint32_t crc_q, crc_as, crc_f;
    assert_int_equal(rlpi_lora_base_fingerprint(tq, &crc_q), RLP_OK);
    assert_int_equal(rlpi_qbase_fingerprint_as(tf32, type, &crc_as), RLP_OK);
    assert_int_equal(rlpi_lora_base_fingerprint(tf32, &crc_f), RLP_OK);
    assert_int_equal(crc_as, crc_q);
    assert_true(crc_f != crc_q);
    assert_int_equal(rlpi_qbase_fingerprint_as(tq, type, &crc_as), RLP_OK);
    assert_int_equal(crc_as, crc_q);
    assert_int_equal(rlpi_qbase_fingerprint_as(tq, type == RLPI_GGML_Q8_0 ? RLPI_GGML_Q4_0 : RLPI_GGML_Q8_0, &crc_as),
                     RLP_E_INVALID_ARG);

    /* memory: blocks + the fp32 rest + one layer's window */
    assert_true(rlpi_transformer_base_block_bytes(tq) >= mat_bytes);
    assert_int_equal(rlpi_transformer_n_stored(tq), all - n_mat + qb->window_floats);

    /* bit for bit the dequantized fp32 model: fused, separate, checkpointed */
    pass pq, pr;
    run(tq, &bt, &pq);
    run(tref, &bt, &pr);
    same_pass(&pq, &pr, n);
    rlpi_transformer_set_fused_projections(tq, false, false);
    rlpi_transformer_set_fused_projections(tref, false, false);
    pass pq2, pr2;
    run(tq, &bt, &pq2);
    run(tref, &bt, &pr2);
    same_pass(&pq2, &pr2, n);
    rlpi_transformer *tck = adapted(&c, &w, true);
    assert_int_equal(rlpi_transformer_quantize_base(tck, type), RLP_OK);
    pass pc;
    run(tck, &bt, &pc);
    same_pass(&pc, &pr, n);
    /* adapters off: the dequantized base */
    float lq[16], lr[16];
    rlpi_transformer_set_lora_enabled(tq, false);
    rlpi_transformer_set_lora_enabled(tref, false);
    assert_int_equal(rlpi_transformer_forward(tq, &bt.b, 1.0f, lq, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tref, &bt.b, 1.0f, lr, NULL, false), RLP_OK);
    assert_memory_equal(lq, lr, (size_t)n * 4);
    rlpi_transformer_set_lora_enabled(tq, true);
    rlpi_transformer_set_lora_enabled(tref, true);

    /* against the original fp32 base: what the format costs */
    double dmax = 0;
    for (int64_t i = 0; i < n; i++)
        dmax = fmax(dmax, fabs(pq.logp[i] - orig.logp[i]));
    printf("    shape %d %s: max |Δlogp| vs the fp32 base %.2e (allowed %.0e); base %zu -> %zu bytes\n", which,
           rlpi_qbase_dtype_name(type), dmax, logp_tolerance(type), all * 4,
           rlpi_transformer_n_stored(tq) * 4 + rlpi_transformer_base_block_bytes(tq));
    assert_true(dmax <= logp_tolerance(type));
    assert_true(dmax > 0); /* it did quantize */

    /* KV-cached decode, fp32 products (the window) and the Q8_0 rollout copy */
    int V = c.vocab_size;
    float *dq = malloc(16 * (size_t)V * 4), *dr = malloc(16 * (size_t)V * 4);
    decode(tq, &bt, false, dq, V);
    decode(tref, &bt, false, dr, V);
    assert_memory_equal(dq, dr, (size_t)bt.seq_start[1] * (size_t)V * 4);
    if (rlpi_op_qmatmul_available(be)) {
        decode(tq, &bt, true, dq, V);
        decode(tref, &bt, true, dr, V);
        assert_memory_equal(dq, dr, (size_t)bt.seq_start[1] * (size_t)V * 4);
    }
    free(dq);
    free(dr);

    /* set_weights re-quantizes (export of the dequantized values: the
     * same blocks for Q8_0 and Q4_0, whose formulas are idempotent) */
    if (type != RLPI_GGML_Q4_K) {
        size_t bytes = rlpi_transformer_base_block_bytes(tq);
        uint8_t *before = malloc(bytes);
        memcpy(before, tq->qbase->blocks, bytes);
        assert_int_equal(rlpi_transformer_set_weights(tq, &deq), RLP_OK);
        assert_memory_equal(before, tq->qbase->blocks, bytes);
        free(before);
        pass again;
        rlpi_transformer_set_fused_projections(tq, true, true);
        run(tq, &bt, &again);
        same_pass(&again, &pq, n);
        free(again.grads);
    }
    /* adapters stay: the fp32 base is gone */
    assert_int_equal(rlpi_transformer_detach_lora(tq), RLP_E_STATE);
    assert_non_null(rlpi_transformer_lora_config(tq));
    assert_int_equal(rlpi_transformer_quantize_base(tq, RLPI_GGML_Q8_0), RLP_E_STATE);

    free(orig.grads);
    free(pq.grads);
    free(pr.grads);
    free(pq2.grads);
    free(pr2.grads);
    free(pc.grads);
    rlpi_transformer_free(tck);
    rlpi_transformer_free(tref);
    rlpi_transformer_free(tf32);
    rlpi_transformer_free(tq);
    rlpi_weights_free(&deq);
    rlpi_weights_free(&w);
}

static void llama_q8_0(void **state)
{
    (void)state;
    check_shape_type(0, RLPI_GGML_Q8_0);
}

static void qwen2_bias_tied_q4_0(void **state)
{
    (void)state;
    check_shape_type(1, RLPI_GGML_Q4_0);
    check_shape_type(1, RLPI_GGML_Q8_0);
}

static void gemma3_all_types(void **state)
{
    (void)state;
    check_shape_type(2, RLPI_GGML_Q8_0);
    check_shape_type(2, RLPI_GGML_Q4_0);
    check_shape_type(2, RLPI_GGML_Q4_K); /* rows of 32 and 64: Q4_0 throughout */
}

static void wide_llama_q4_k(void **state)
{
    (void)state;
    if (use_cuda) /* the kernel emulator is slow at this width; the other shapes cover the device path */
        skip();
    check_shape_type(3, RLPI_GGML_Q4_K);
    check_shape_type(3, RLPI_GGML_Q8_0);
}

/* Refusals: each leaves the model computing what it did. */
static void refusals(void **state)
{
    (void)state;
    rlpi_model_config c;
    shape(0, &c);
    rlpi_weights w;
    random_weights(&c, &w, 5);
    batch bt;
    make_batch(&bt, c.vocab_size);
    float before[16], after[16];
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &c, &w, NULL), RLP_OK);
    assert_int_equal(rlpi_transformer_quantize_base(tf, RLPI_GGML_Q8_0), RLP_E_STATE); /* trainable base */
    assert_non_null(strstr(rlp_error_last(), "trainable"));
    assert_int_equal(rlpi_transformer_quantize_base(tf, RLPI_GGML_F32), RLP_OK); /* no-op */
    assert_int_equal(rlpi_transformer_attach_lora(tf, &lcfg, 1), RLP_OK);
    assert_int_equal(rlpi_transformer_quantize_base(tf, RLPI_GGML_Q5_0), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_transformer_forward(tf, &bt.b, 1.0f, before, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_base_type(tf), RLPI_GGML_F32);
    rlpi_transformer_free(tf);
    rlpi_weights_free(&w);

    /* rows of 40 (Gemma 3 fixture's ffn): no 32-block fits down_proj */
    shape(2, &c);
    c.ffn_dim = 40;
    random_weights(&c, &w, 6);
    make_batch(&bt, c.vocab_size);
    assert_int_equal(rlpi_transformer_create(&tf, be, &c, &w, NULL), RLP_OK);
    assert_int_equal(rlpi_transformer_attach_lora(tf, &lcfg, 1), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &bt.b, 1.0f, before, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_quantize_base(tf, RLPI_GGML_Q8_0), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "down_proj"));
    assert_int_equal(rlpi_transformer_forward(tf, &bt.b, 1.0f, after, NULL, false), RLP_OK);
    assert_memory_equal(before, after, (size_t)bt.b.n_tokens * 4);
    assert_int_equal(rlpi_transformer_detach_lora(tf), RLP_OK); /* still fp32: the base trains again */
    rlpi_transformer_free(tf);
    rlpi_weights_free(&w);

    /* the public options: a version-1 caller's struct ends before base_dtype,
     * and its init writes nothing past it */
    struct {
        rlp_lora_options o;
        unsigned char guard[16];
    } mem;
    memset(&mem, 0xA5, sizeof mem);
    assert_int_equal(rlp_lora_options_init(&mem.o, 1), RLP_OK);
    for (size_t i = offsetof(rlp_lora_options, base_dtype); i < sizeof mem; i++)
        assert_int_equal(((const unsigned char *)&mem)[i], 0xA5);
    assert_int_equal(mem.o.version, 1);
    assert_int_equal(mem.o.rank, 16);
    rlp_lora_options v2;
    assert_int_equal(rlp_lora_options_init(&v2, RLP_LORA_OPTIONS_VERSION), RLP_OK);
    assert_null(v2.base_dtype);
    assert_int_equal(rlp_lora_options_init(&v2, RLP_LORA_OPTIONS_VERSION + 1), RLP_E_INVALID_ARG);

    uint32_t t;
    assert_int_equal(rlpi_qbase_parse_dtype("q4_k", &t), RLP_OK);
    assert_int_equal(t, RLPI_GGML_Q4_K);
    assert_int_equal(rlpi_qbase_parse_dtype("Q4_K", &t), RLP_E_INVALID_ARG); /* one spelling: resumes compare text */
    assert_int_equal(rlpi_qbase_parse_dtype("", &t), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_qbase_parse_dtype(NULL, &t), RLP_OK);
    assert_int_equal(t, RLPI_GGML_F32);
    assert_int_equal(rlpi_qbase_parse_dtype("nf4", &t), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "nf4"));
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
        cmocka_unit_test(llama_q8_0),       cmocka_unit_test(qwen2_bias_tied_q4_0), cmocka_unit_test(gemma3_all_types),
        cmocka_unit_test(wide_llama_q4_k), cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
