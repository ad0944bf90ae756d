/* Qwen3 and Gemma 3 in the transformer against Hugging Face transformers
 * (Qwen3ForCausalLM, Gemma3ForCausalLM in float64;
 * tests/reference/make_arch_fixtures.py): full logits, per-token logprobs
 * and entropies at a temperature over packed sequences of different
 * lengths, and the gradient of every parameter of L = -Σ w·logp + Σ u·H.
 * The fixtures exercise q/k norms, head_dim ≠ dim/heads, tied and untied
 * heads, Gemma's post-norms, GeGLU, embedding scale, query_pre_attn_scalar,
 * sliding-window layers (window 3–4, shorter than the sequences) with their
 * own RoPE base next to a global layer (with linear RoPE scaling in
 * arch_gemma3, which must not reach the local layers), and the final logit
 * soft-cap.
 *
 * The config is built here field by field from the fixture's JSON (no
 * HF/GGUF loader is involved).
 *
 * Tolerances (fp32 against float64): logits, logprobs and entropies within
 * 1e-4 absolute; gradients within 1e-4 · max(1, max|ref|) per tensor, as
 * test_transformer.c. Observed errors are printed (a few 1e-6).
 *
 * With RLPOST_TEST_BACKEND=cuda the same checks run on the CUDA backend.
 *
 * KV-cached decode (rlpi_transformer_extend) must give the logits of the
 * cache-free forward at every step, within 2e-5 absolute, for prompts and
 * generations longer than the sliding window, several sequences at once,
 * and chunked prefill; greedy tokens must be identical. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "backend/backend.h"
#include "backend/cpu_kernels.h"
#include "core/error.h"
#include "model/kv_cache.h"
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
#define TOL_CACHE 2e-5

static rlpi_backend *be;

typedef struct fixture {
    model_fixture m;
    float inv_temp;
} fixture;

static const void *array(fixture *f, const char *key, size_t *count)
{
    return fixture_array(&f->m, key, count);
}

static void load_fixture(fixture *f, const char *name)
{
    fixture_load_family(&f->m, name);
    f->inv_temp = (float)json_number_value(json_object_get(f->m.meta, "inv_temp"));
}

static rlpi_packed_batch batch_of(fixture *f)
{
    size_t c;
    rlpi_packed_batch b = {
        .n_seq = f->m.n_seq,
        .seq_start = f->m.seq_start,
        .n_tokens = f->m.n,
        .tokens = array(f, "tokens", &c),
        .positions = array(f, "positions", &c),
        .targets = array(f, "targets", &c),
    };
    return b;
}

static float *download_grads(rlpi_transformer *tf)
{
    size_t n = rlpi_transformer_n_params(tf);
    float *g = malloc(n * 4);
    assert_int_equal(rlpi_buffer_download(rlpi_transformer_grads(tf), 0, g, n * 4), RLP_OK);
    return g;
}

/* forward + backward; returns the gradients (caller frees) */
static float *run_fb(fixture *f, rlpi_transformer *tf, float *logp, float *ent)
{
    rlpi_packed_batch b = batch_of(f);
    size_t c;
    assert_int_equal(rlpi_transformer_zero_grad(tf), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f->inv_temp, logp, ent, true), RLP_OK);
    assert_int_equal(rlpi_transformer_backward(tf, array(f, "dlogp", &c), array(f, "dentropy", &c)), RLP_OK);
    return download_grads(tf);
}

static void check_against_reference(const char *name, const rlpi_transformer_options *opts)
{
    fixture f;
    load_fixture(&f, name);
    rlpi_transformer *tf;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, opts), RLP_OK);
    float logp[64], ent[64];
    float *g = run_fb(&f, tf, logp, ent);
    size_t c;
    const float *rl = array(&f, "logp", &c), *re = array(&f, "entropy", &c);
    double max_lp = 0, max_h = 0;
    for (int64_t i = 0; i < f.m.n; i++) {
        max_lp = fmax(max_lp, fabs(logp[i] - rl[i]));
        max_h = fmax(max_h, fabs(ent[i] - re[i]));
    }

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
        if (rel > TOL_GRAD)
            fail_msg("%s: gradient of %s off by %.3e (max |ref| %.3e)", name, in->name, maxerr, maxref);
    }
    /* every fixture tensor is one of ours: nothing HF has is left out */
    assert_int_equal(json_object_size(json_object_get(f.m.meta, "shapes")), rlpi_transformer_n_tensors(tf));

    /* full logits (soft-capped, no temperature) at every row */
    rlpi_packed_batch b = batch_of(&f);
    int64_t n = f.m.n, V = f.m.cfg.vocab_size;
    int32_t *rows = malloc((size_t)n * sizeof *rows);
    float *logits = malloc((size_t)(n * V) * sizeof *logits);
    for (int64_t i = 0; i < n; i++)
        rows[i] = (int32_t)i;
    assert_int_equal(rlpi_transformer_logits_rows(tf, &b, rows, n, logits), RLP_OK);
    const float *rlog = array(&f, "logits", &c);
    assert_int_equal(c, (size_t)(n * V));
    double max_logit = 0;
    for (size_t i = 0; i < c; i++)
        max_logit = fmax(max_logit, fabs(logits[i] - rlog[i]));
    print_message("%s%s: max |Δlogits| %.2e, |Δlogp| %.2e, |Δentropy| %.2e, worst gradient %.2e over %zu tensors\n",
                  name, opts && opts->activation_checkpointing ? " (checkpointed)" : "", max_logit, max_lp, max_h,
                  worst, rlpi_transformer_n_tensors(tf));
    assert_true(max_lp <= TOL_VALUE);
    assert_true(max_h <= TOL_VALUE);
    assert_true(max_logit <= TOL_VALUE);
    free(rows);
    free(logits);
    free(g);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

static void qwen3_tied_matches_transformers(void **state)
{
    (void)state;
    rlpi_transformer_options o = {.head_chunk_tokens = 5};
    check_against_reference("arch_qwen3_tied", &o);
}

static void qwen3_untied_matches_transformers(void **state)
{
    (void)state;
    rlpi_transformer_options o = {.head_chunk_tokens = 5};
    check_against_reference("arch_qwen3_untied", &o);
}

static void gemma3_matches_transformers(void **state)
{
    (void)state;
    rlpi_transformer_options o = {.head_chunk_tokens = 5};
    check_against_reference("arch_gemma3", &o);
}

static void gemma3_softcap_matches_transformers(void **state)
{
    (void)state;
    rlpi_transformer_options o = {.head_chunk_tokens = 7};
    check_against_reference("arch_gemma3_softcap", &o);
}

/* recomputing each layer in backward, and the streaming (no score matrix)
 * attention kernels, see the same windows, norms and scales */
static void checkpointing_and_streaming_attention(void **state)
{
    (void)state;
    rlpi_transformer_options o = {.head_chunk_tokens = 64, .activation_checkpointing = true};
    check_against_reference("arch_gemma3_softcap", &o);
    check_against_reference("arch_qwen3_untied", &o);
    int64_t saved = rlpi_cpu_attention_blas_max_len;
    rlpi_cpu_attention_blas_max_len = 0;
    check_against_reference("arch_gemma3", NULL);
    check_against_reference("arch_qwen3_tied", NULL);
    rlpi_cpu_attention_blas_max_len = saved;
}

/* Q/K/V and gate/up as one GEMM each against separate GEMMs, through the
 * q/k norms, post-norms, GeGLU and soft-cap: fp32 rounding only (1e-5
 * · max(1, max|g|) per tensor on gradients, 1e-6 · max(1, |x|) on
 * logprobs and entropies; see
 * test_transformer.c) */
static void fused_projections_match_separate(void **state)
{
    (void)state;
    const char *names[] = {"arch_qwen3_untied", "arch_gemma3_softcap"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        fixture f;
        load_fixture(&f, names[k]);
        rlpi_transformer_options o = {.head_chunk_tokens = 5, .activation_checkpointing = k == 1};
        rlpi_transformer *a, *b;
        assert_int_equal(rlpi_transformer_create(&a, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
        assert_int_equal(rlpi_transformer_create(&b, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
        rlpi_transformer_set_fused_projections(b, false, false);
        float lp0[64], e0[64], lp1[64], e1[64];
        float *ga = run_fb(&f, a, lp0, e0), *gb = run_fb(&f, b, lp1, e1);
        /* relative to the value (a logprob of -10 has ulp 9.5e-7): the
         * BLAS's summation order differs between the two GEMM shapes and
         * between kernel families (Haswell vs SkylakeX: 1.4e-6 absolute
         * on this fixture with the former) */
        double worst_lp = 0, worst_g = 0;
        for (int64_t i = 0; i < f.m.n; i++)
            worst_lp = fmax(worst_lp, fmax(fabs(lp0[i] - lp1[i]) / fmax(1.0, fabs(lp1[i])),
                                           fabs(e0[i] - e1[i]) / fmax(1.0, fabs(e1[i]))));
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
        print_message("%s: fused vs separate projections: |Δlogp|, |Δentropy| <= %.2e (relative), gradients %.2e\n", names[k],
                      worst_lp, worst_g);
        assert_true(worst_lp <= 1e-6);
        free(ga);
        free(gb);
        rlpi_transformer_free(a);
        rlpi_transformer_free(b);
        fixture_free(&f.m);
    }
}

/* ------------------------------------------------------------ KV cache */

static void full_logits(rlpi_transformer *tf, const int32_t *tokens, int64_t len, float *out)
{
    int64_t ss[2] = {0, len};
    int32_t *pos = malloc((size_t)len * sizeof *pos), *tg = malloc((size_t)len * sizeof *tg);
    for (int64_t i = 0; i < len; i++) {
        pos[i] = (int32_t)i;
        tg[i] = -1;
    }
    rlpi_packed_batch b = {
        .n_seq = 1, .seq_start = ss, .n_tokens = len, .tokens = tokens, .positions = pos, .targets = tg};
    assert_int_equal(rlpi_transformer_last_logits(tf, &b, out), RLP_OK);
    free(pos);
    free(tg);
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (int32_t)best;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

/* Three sequences in slots 2, 0, 1: prompts of 2, 5 and 7 tokens (the last
 * two longer than the window), the first prefilled in two chunks; then 14
 * greedy steps together. Every step's logits equal the full forward's. */
static void check_decode(const char *name)
{
    fixture f;
    load_fixture(&f, name);
    rlpi_transformer *tf;
    rlpi_transformer_options o = {.frozen = true};
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, &o), RLP_OK);
    const int64_t V = f.m.cfg.vocab_size, S = 3, steps = 14, cap = 32;
    rlpi_kv_cache *kv;
    assert_int_equal(rlpi_kv_cache_create(&kv, tf, 4, cap), RLP_OK);
    int32_t seq[3][32];
    int64_t len[3] = {2, 5, 7}, slot[3] = {2, 0, 1};
    size_t c;
    const int32_t *tok = array(&f, "tokens", &c);
    for (int64_t s = 0; s < S; s++)
        for (int64_t i = 0; i < len[s]; i++)
            seq[s][i] = tok[(s * 7 + i) % (int64_t)c];
    float *got = malloc((size_t)(S * V) * sizeof *got), *want = malloc((size_t)V * sizeof *want);
    double worst = 0;

    /* prefill: sequence 0 in two chunks of 1, then all three together
     * (0 gets its 2nd token, 1 and 2 their whole prompts) */
    {
        int64_t qs[2] = {0, 1}, sl[1] = {slot[0]}, past[1] = {0};
        assert_int_equal(rlpi_transformer_extend(tf, kv, 1, qs, sl, past, seq[0], got), RLP_OK);
        full_logits(tf, seq[0], 1, want);
        worst = fmax(worst, max_diff(got, want, V));
    }
    {
        int32_t packed[32];
        int64_t qs[4] = {0, 1, 1 + len[1], 1 + len[1] + len[2]}, past[3] = {1, 0, 0};
        packed[0] = seq[0][1];
        memcpy(packed + 1, seq[1], (size_t)len[1] * 4);
        memcpy(packed + 1 + len[1], seq[2], (size_t)len[2] * 4);
        assert_int_equal(rlpi_transformer_extend(tf, kv, S, qs, slot, past, packed, got), RLP_OK);
        for (int64_t s = 0; s < S; s++) {
            full_logits(tf, seq[s], len[s], want);
            worst = fmax(worst, max_diff(got + s * V, want, V));
            assert_int_equal(argmax(got + s * V, V), argmax(want, V));
        }
    }
    for (int64_t t = 0; t < steps; t++) {
        int32_t next[3];
        int64_t qs[4] = {0, 1, 2, 3}, past[3];
        for (int64_t s = 0; s < S; s++) {
            next[s] = argmax(got + s * V, V);
            past[s] = len[s];
            seq[s][len[s]++] = next[s];
        }
        assert_int_equal(rlpi_transformer_extend(tf, kv, S, qs, slot, past, next, got), RLP_OK);
        for (int64_t s = 0; s < S; s++) {
            full_logits(tf, seq[s], len[s], want);
            double d = max_diff(got + s * V, want, V);
            worst = fmax(worst, d);
            if (d > TOL_CACHE)
                fail_msg("%s: step %lld sequence %lld (length %lld): cached logits off by %.3e", name, (long long)t,
                         (long long)s, (long long)len[s], d);
            assert_int_equal(argmax(got + s * V, V), argmax(want, V));
        }
    }
    print_message("%s: KV-cached decode to %lld tokens (window %d): max |Δlogits| %.2e\n", name, (long long)len[2],
                  f.m.cfg.sliding_window, worst);
    assert_true(worst <= TOL_CACHE);
    free(got);
    free(want);
    rlpi_kv_cache_free(kv);
    rlpi_transformer_free(tf);
    fixture_free(&f.m);
}

static void qwen3_cached_decode_equals_forward(void **state)
{
    (void)state;
    check_decode("arch_qwen3_tied");
    check_decode("arch_qwen3_untied");
}

static void gemma3_cached_decode_equals_forward(void **state)
{
    (void)state;
    check_decode("arch_gemma3");
    check_decode("arch_gemma3_softcap");
}

/* ------------------------------------------------------------ the new ops */

/* GeGLU and soft-cap against double formulas; argument checks */
static void geglu_and_softcap_ops(void **state)
{
    (void)state;
    enum { N = 301 };
    float g[N], u[N], d[N], y[N], dg[N], du[N], x[N], dx[N];
    for (int i = 0; i < N; i++) {
        g[i] = -9.0f + 18.0f * (float)i / (N - 1);
        u[i] = 0.5f + 0.01f * (float)(i % 17);
        d[i] = 1.0f - 0.003f * (float)i;
        x[i] = -40.0f + 80.0f * (float)i / (N - 1);
    }
    rlpi_buffer *buf;
    assert_int_equal(rlpi_buffer_alloc(be, 8 * N * 4, &buf), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(buf, 0, g, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(buf, N * 4, u, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(buf, 2 * N * 4, d, N * 4), RLP_OK);
    assert_int_equal(rlpi_op_geglu_fwd(be, RLPI_REF(buf, 3 * N), RLPI_REF(buf, 0), RLPI_REF(buf, N), N), RLP_OK);
    assert_int_equal(rlpi_op_geglu_bwd(be, RLPI_REF(buf, 4 * N), RLPI_REF(buf, 5 * N), RLPI_REF(buf, 2 * N),
                                       RLPI_REF(buf, 0), RLPI_REF(buf, N), N),
                     RLP_OK);
    assert_int_equal(rlpi_buffer_download(buf, 3 * N * 4, y, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_download(buf, 4 * N * 4, dg, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_download(buf, 5 * N * 4, du, N * 4), RLP_OK);
    double e_y = 0, e_dg = 0, e_du = 0;
    for (int i = 0; i < N; i++) {
        double a = g[i], k = sqrt(2.0 / M_PI), z = k * (a + 0.044715 * a * a * a), t = tanh(z);
        double gelu = 0.5 * a * (1 + t), dgelu = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * k * (1 + 3 * 0.044715 * a * a);
        e_y = fmax(e_y, fabs(y[i] - gelu * u[i]));
        e_dg = fmax(e_dg, fabs(dg[i] - d[i] * u[i] * dgelu));
        e_du = fmax(e_du, fabs(du[i] - d[i] * gelu));
    }
    print_message("geglu: max error y %.2e, dgate %.2e, dup %.2e\n", e_y, e_dg, e_du);
    assert_true(e_y < 1e-5 && e_dg < 1e-5 && e_du < 1e-5);

    const float cap = 7.5f;
    for (int i = 0; i < N; i++)
        dx[i] = d[i];
    assert_int_equal(rlpi_buffer_upload(buf, 6 * N * 4, x, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(buf, 7 * N * 4, dx, N * 4), RLP_OK);
    assert_int_equal(rlpi_op_softcap_fwd(be, RLPI_REF(buf, 6 * N), N, cap), RLP_OK);
    assert_int_equal(rlpi_op_softcap_bwd(be, RLPI_REF(buf, 7 * N), RLPI_REF(buf, 6 * N), N, cap), RLP_OK);
    float yc[N];
    assert_int_equal(rlpi_buffer_download(buf, 6 * N * 4, yc, N * 4), RLP_OK);
    assert_int_equal(rlpi_buffer_download(buf, 7 * N * 4, dx, N * 4), RLP_OK);
    double e_c = 0, e_dc = 0;
    for (int i = 0; i < N; i++) {
        double t = tanh((double)x[i] / cap);
        e_c = fmax(e_c, fabs(yc[i] - cap * t));
        e_dc = fmax(e_dc, fabs(dx[i] - d[i] * (1 - t * t)));
    }
    print_message("softcap: max error y %.2e, dx %.2e\n", e_c, e_dc);
    assert_true(e_c < 1e-5 && e_dc < 1e-5);

    /* hostile arguments: a clear error, nothing computed */
    assert_int_equal(rlpi_op_softcap_fwd(be, RLPI_REF(buf, 0), N, 0.0f), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_op_softcap_fwd(be, RLPI_REF(buf, 0), N, NAN), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_op_softcap_bwd(be, RLPI_REF(buf, 0), RLPI_REF(buf, N), N, -1.0f), RLP_E_INVALID_ARG);
    assert_int_equal(rlpi_op_geglu_fwd(be, RLPI_REF(buf, 0), RLPI_REF(buf, 0), RLPI_REF(buf, 0), 9 * N),
                     RLP_E_INVALID_ARG);
    int64_t ss[2] = {0, 4};
    assert_int_equal(rlpi_op_attention_fwd(be, RLPI_REF(buf, 0), RLPI_REF(buf, 100), RLPI_REF(buf, 200),
                                           RLPI_REF(buf, 300), RLPI_REF(buf, 400), ss, 1, 4, 1, 1, 8, 0.3f, -1),
                     RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "window"));
    assert_int_equal(rlpi_op_attention_fwd(be, RLPI_REF(buf, 0), RLPI_REF(buf, 100), RLPI_REF(buf, 200),
                                           RLPI_REF(buf, 300), RLPI_REF(buf, 400), ss, 1, 4, 1, 1, 8, NAN, 0),
                     RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "scale"));
    rlpi_buffer_free(buf);
}

/* a window as wide as the sequence is no window: bit-identical outputs
 * (window 1 = each query sees only itself: out = v) */
static void window_edges(void **state)
{
    (void)state;
    enum { n = 9, H = 2, KV = 1, hd = 8 };
    float q[n * H * hd], k[n * KV * hd], v[n * KV * hd];
    for (int i = 0; i < n * H * hd; i++)
        q[i] = sinf(0.37f * (float)i);
    for (int i = 0; i < n * KV * hd; i++) {
        k[i] = cosf(0.21f * (float)i);
        v[i] = sinf(0.11f * (float)i + 1.0f);
    }
    rlpi_buffer *b;
    size_t oq = 0, ok = oq + n * H * hd, ov = ok + n * KV * hd, o1 = ov + n * KV * hd, o2 = o1 + n * H * hd,
           l1 = o2 + n * H * hd, l2 = l1 + n * H, tot = l2 + n * H;
    assert_int_equal(rlpi_buffer_alloc(be, tot * 4, &b), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(b, oq * 4, q, sizeof q), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(b, ok * 4, k, sizeof k), RLP_OK);
    assert_int_equal(rlpi_buffer_upload(b, ov * 4, v, sizeof v), RLP_OK);
    int64_t ss[3] = {0, 4, n};
    float a1[n * H * hd], a2[n * H * hd];
    for (int streaming = 0; streaming < 2; streaming++) {
        int64_t saved = rlpi_cpu_attention_blas_max_len;
        if (streaming)
            rlpi_cpu_attention_blas_max_len = 0;
        assert_int_equal(rlpi_op_attention_fwd(be, RLPI_REF(b, o1), RLPI_REF(b, l1), RLPI_REF(b, oq), RLPI_REF(b, ok),
                                               RLPI_REF(b, ov), ss, 2, n, H, KV, hd, 0.4f, 0),
                         RLP_OK);
        assert_int_equal(rlpi_op_attention_fwd(be, RLPI_REF(b, o2), RLPI_REF(b, l2), RLPI_REF(b, oq), RLPI_REF(b, ok),
                                               RLPI_REF(b, ov), ss, 2, n, H, KV, hd, 0.4f, 5),
                         RLP_OK);
        assert_int_equal(rlpi_buffer_download(b, o1 * 4, a1, sizeof a1), RLP_OK);
        assert_int_equal(rlpi_buffer_download(b, o2 * 4, a2, sizeof a2), RLP_OK);
        assert_memory_equal(a1, a2, sizeof a1);
        assert_int_equal(rlpi_op_attention_fwd(be, RLPI_REF(b, o2), RLPI_REF(b, l2), RLPI_REF(b, oq), RLPI_REF(b, ok),
                                               RLPI_REF(b, ov), ss, 2, n, H, KV, hd, 0.4f, 1),
                         RLP_OK);
        assert_int_equal(rlpi_buffer_download(b, o2 * 4, a2, sizeof a2), RLP_OK);
        for (int i = 0; i < n; i++)
            for (int h = 0; h < H; h++)
                for (int e = 0; e < hd; e++)
                    assert_float_equal(a2[(i * H + h) * hd + e], v[i * hd + e], 1e-6);
        rlpi_cpu_attention_blas_max_len = saved;
    }
    rlpi_buffer_free(b);
}

/* a Gemma 3 file without its post-feed-forward norm, or with a q_norm of
 * the wrong size, is refused naming the tensor */
static void refuses_incomplete_weights(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "arch_gemma3");
    rlpi_weights w;
    rlpi_weights_init(&w);
    for (size_t i = 0; i < f.m.w.n; i++) {
        const rlpi_tensor *t = &f.m.w.tensors[i];
        if (strcmp(t->name, "model.layers.1.post_feedforward_layernorm.weight") == 0)
            continue;
        rlpi_tensor *o;
        int64_t sh[2] = {t->shape[0], t->n_dims > 1 ? t->shape[1] : 0};
        if (strcmp(t->name, "model.layers.0.self_attn.q_norm.weight") == 0)
            sh[0] = 8;
        assert_int_equal(rlpi_weights_add(&w, t->name, t->n_dims, sh, &o), RLP_OK);
    }
    rlpi_transformer *tf = NULL;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &w, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "model.layers.0.self_attn.q_norm.weight"));
    rlpi_weights_free(&w);
    rlpi_weights_init(&w);
    for (size_t i = 0; i < f.m.w.n; i++) {
        const rlpi_tensor *t = &f.m.w.tensors[i];
        if (strcmp(t->name, "model.layers.1.post_feedforward_layernorm.weight") == 0)
            continue;
        rlpi_tensor *o;
        int64_t sh[2] = {t->shape[0], t->n_dims > 1 ? t->shape[1] : 0};
        assert_int_equal(rlpi_weights_add(&w, t->name, t->n_dims, sh, &o), RLP_OK);
    }
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &w, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "post_feedforward_layernorm"));
    rlpi_weights_free(&w);

    /* a sliding-window flag on a layer without a window size: the config check */
    rlpi_model_config bad = f.m.cfg;
    bad.sliding_window = 0;
    assert_int_equal(rlpi_transformer_create(&tf, be, &bad, &f.m.w, NULL), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "sliding-window"));
    /* what validate lets through but the layers cannot compute */
    bad = f.m.cfg;
    bad.rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
    bad.rope_factor = 8;
    bad.rope_low_freq_factor = bad.rope_high_freq_factor = 4;
    bad.rope_original_max_pos = 8192;
    assert_int_equal(rlpi_transformer_create(&tf, be, &bad, &f.m.w, NULL), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "high_freq_factor"));
    bad = f.m.cfg;
    bad.final_softcap = 1e-6f;
    assert_int_equal(rlpi_transformer_create(&tf, be, &bad, &f.m.w, NULL), RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "soft-cap"));
    fixture_free(&f.m);
}

/* export gives our names back (post-norm names in Gemma's meaning) and a
 * model built from the export computes the same */
static void export_round_trip(void **state)
{
    (void)state;
    fixture f;
    load_fixture(&f, "arch_gemma3_softcap");
    rlpi_transformer *tf, *tf2;
    assert_int_equal(rlpi_transformer_create(&tf, be, &f.m.cfg, &f.m.w, NULL), RLP_OK);
    rlpi_weights w;
    assert_int_equal(rlpi_transformer_export(tf, &w), RLP_OK);
    for (size_t i = 0; i < f.m.w.n; i++) {
        const rlpi_tensor *a = &f.m.w.tensors[i], *b = rlpi_weights_find(&w, a->name);
        assert_non_null(b);
        assert_memory_equal(rlpi_tensor_data(&f.m.w, a), rlpi_tensor_data(&w, b), a->n_elems * 4);
    }
    assert_int_equal(rlpi_transformer_create(&tf2, be, &f.m.cfg, &w, NULL), RLP_OK);
    float lp1[64], lp2[64];
    rlpi_packed_batch b = batch_of(&f);
    assert_int_equal(rlpi_transformer_forward(tf, &b, f.inv_temp, lp1, NULL, false), RLP_OK);
    assert_int_equal(rlpi_transformer_forward(tf2, &b, f.inv_temp, lp2, NULL, false), RLP_OK);
    assert_memory_equal(lp1, lp2, (size_t)f.m.n * 4);
    rlpi_weights_free(&w);
    rlpi_transformer_free(tf);
    rlpi_transformer_free(tf2);
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

/* RLPOST_TEST_BACKEND=cuda runs every check on the CUDA backend (the gpu
 * and cuda_emu suites: the kernels of cuda/ under the same tolerances);
 * exits 77 (skipped) where no CUDA backend can be made. */
int main(void)
{
    int skip = test_backend_from_env();
    if (skip)
        return skip;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen3_tied_matches_transformers),
        cmocka_unit_test(qwen3_untied_matches_transformers),
        cmocka_unit_test(gemma3_matches_transformers),
        cmocka_unit_test(gemma3_softcap_matches_transformers),
        cmocka_unit_test(checkpointing_and_streaming_attention),
        cmocka_unit_test(fused_projections_match_separate),
        cmocka_unit_test(qwen3_cached_decode_equals_forward),
        cmocka_unit_test(gemma3_cached_decode_equals_forward),
        cmocka_unit_test(geglu_and_softcap_ops),
        cmocka_unit_test(window_edges),
        cmocka_unit_test(refuses_incomplete_weights),
        cmocka_unit_test(export_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
