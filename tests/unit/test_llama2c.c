/* llama2.c checkpoints: public-bugs case #3 repro B on the real
 * stories260K.bin (shared classifier -> alias; -512 + appended matrix ->
 * separate head; -512 without it -> size error), synthetic v0/v1 files
 * whose every float is its own index so any misplaced tensor or wrong
 * permutation shows, the RoPE equivalence that justifies the q/k
 * permutation, and broken headers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "model/llama2c.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct h7 {
    int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
} h7;

/* ---- synthetic files --------------------------------------------------- */

static size_t n_floats(const h7 *h, int legacy, int shared)
{
    size_t D = (size_t)h->dim, L = (size_t)h->layers, F = (size_t)h->hidden;
    size_t hd = D / (size_t)h->heads, KV = hd * (size_t)h->kv_heads;
    size_t V = (size_t)abs(h->vocab);
    size_t n = V * D + 2 * L * D + 2 * L * D * D + 2 * L * KV * D + 3 * L * F * D + D;
    if (legacy)
        n += (size_t)h->seq * hd;
    if (!shared)
        n += V * D;
    return n;
}

/* float k of the weight area is k + 1: every value names its position */
static uint8_t *build(const h7 *h, int legacy, int shared, size_t *len)
{
    size_t hdr = legacy ? 28 : 256, n = n_floats(h, legacy, shared);
    *len = hdr + 4 * n;
    uint8_t *b = calloc(*len, 1);
    size_t off = 0;
    if (!legacy) {
        uint32_t magic = RLPI_LLAMA2C_MAGIC;
        int32_t version = 1;
        memcpy(b, &magic, 4);
        memcpy(b + 4, &version, 4);
        off = 8;
    }
    memcpy(b + off, h, 28);
    if (!legacy)
        b[off + 28] = (uint8_t)shared;
    for (size_t k = 0; k < n; k++) {
        float f = (float)(k + 1);
        memcpy(b + hdr + 4 * k, &f, 4);
    }
    return b;
}

static float at(const rlpi_weights *w, const char *name, size_t i)
{
    const rlpi_tensor *t = rlpi_weights_find(w, name);
    if (!t)
        fail_msg("no tensor %s", name);
    assert_true(i < t->n_elems);
    return rlpi_tensor_data(w, t)[i];
}

/* Checks the layout of one loaded synthetic model against the export.py
 * order for its version. */
static void check_layout(const h7 *h, int legacy, int shared, const rlpi_weights *w)
{
    size_t D = (size_t)h->dim, L = (size_t)h->layers, F = (size_t)h->hidden;
    size_t hd = D / (size_t)h->heads, KV = hd * (size_t)h->kv_heads, V = (size_t)abs(h->vocab);
    size_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, norm, end;
    if (legacy) {
        emb = 0;
        rms_att = emb + V * D;
        wq = rms_att + L * D;
        wk = wq + L * D * D;
        wv = wk + L * KV * D;
        wo = wv + L * KV * D;
        rms_ffn = wo + L * D * D;
        w1 = rms_ffn + L * D;
        w2 = w1 + L * F * D;
        w3 = w2 + L * F * D;
        norm = w3 + L * F * D;
        end = norm + D + (size_t)h->seq * hd;
    } else {
        rms_att = 0;
        rms_ffn = L * D;
        norm = 2 * L * D;
        emb = norm + D;
        wq = emb + V * D;
        wk = wq + L * D * D;
        wv = wk + L * KV * D;
        wo = wv + L * KV * D;
        w1 = wo + L * D * D;
        w2 = w1 + L * F * D;
        w3 = w2 + L * F * D;
        end = w3 + L * F * D;
    }
#define V_(k) ((float)((k) + 1))
    assert_true(at(w, "model.embed_tokens.weight", 3 * D + 2) == V_(emb + 3 * D + 2));
    assert_true(at(w, "model.norm.weight", D - 1) == V_(norm + D - 1));
    size_t l = L - 1; /* last layer: catches per-layer stride errors */
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "model.layers.%zu." s, l), n)
    assert_true(at(w, NAME("input_layernorm.weight"), 1) == V_(rms_att + l * D + 1));
    assert_true(at(w, NAME("post_attention_layernorm.weight"), 2) == V_(rms_ffn + l * D + 2));
    assert_true(at(w, NAME("self_attn.v_proj.weight"), 5) == V_(wv + l * KV * D + 5));
    assert_true(at(w, NAME("self_attn.o_proj.weight"), 7) == V_(wo + l * D * D + 7));
    assert_true(at(w, NAME("mlp.gate_proj.weight"), 9) == V_(w1 + l * F * D + 9));
    assert_true(at(w, NAME("mlp.down_proj.weight"), 9) == V_(w2 + l * F * D + 9));
    assert_true(at(w, NAME("mlp.up_proj.weight"), 9) == V_(w3 + l * F * D + 9));
    /* q/k permutation: HF row h*hd + j <- row h*hd + 2j; h*hd + hd/2 + j <- h*hd + 2j + 1 */
    for (size_t head = 0; head < (size_t)h->heads; head++)
        for (size_t j = 0; j < hd / 2; j++) {
            size_t c = 3 % D;
            assert_true(at(w, NAME("self_attn.q_proj.weight"), (head * hd + j) * D + c) ==
                        V_(wq + l * D * D + (head * hd + 2 * j) * D + c));
            assert_true(at(w, NAME("self_attn.q_proj.weight"), (head * hd + hd / 2 + j) * D + c) ==
                        V_(wq + l * D * D + (head * hd + 2 * j + 1) * D + c));
            if (head < (size_t)h->kv_heads)
                assert_true(at(w, NAME("self_attn.k_proj.weight"), (head * hd + hd / 2 + j) * D) ==
                            V_(wk + l * KV * D + (head * hd + 2 * j + 1) * D));
        }
    const rlpi_tensor *head = rlpi_weights_find(w, "lm_head.weight");
    assert_non_null(head);
    if (shared) {
        assert_int_equal(head->alias_of,
                         (int)(rlpi_weights_find(w, "model.embed_tokens.weight") - w->tensors));
    } else {
        assert_int_equal(head->alias_of, -1);
        assert_true(at(w, "lm_head.weight", 0) == V_(end));
        assert_true(at(w, "lm_head.weight", V * D - 1) == V_(end + V * D - 1));
    }
#undef NAME
#undef V_
}

static void synthetic_v0_and_v1_layouts(void **state)
{
    (void)state;
    const h7 h = {16, 24, 3, 4, 2, 10, 6};
    for (int legacy = 0; legacy < 2; legacy++)
        for (int shared = 0; shared < 2; shared++) {
            h7 hh = h;
            if (legacy && !shared)
                hh.vocab = -hh.vocab;
            size_t len;
            uint8_t *b = build(&hh, legacy, shared, &len);
            rlpi_model_config c;
            rlpi_weights w;
            rlpi_weights_init(&w);
            if (rlpi_llama2c_parse(b, len, "syn.bin", &c, &w) != RLP_OK)
                fail_msg("legacy=%d shared=%d: %s", legacy, shared, rlp_error_last());
            assert_int_equal(c.vocab_size, 10);
            assert_int_equal(c.head_dim, 4);
            assert_int_equal(c.n_kv_heads, 2);
            assert_int_equal(c.tie_embeddings, shared);
            assert_int_equal(w.n, 3 + 9 * 3);
            check_layout(&hh, legacy, shared, &w);
            rlpi_weights_free(&w);
            free(b);
        }
}

/* ---- why the permutation: run.c's RoPE vs HF's rotate_half -------------- */

/* run.c: rotate pairs (i, i+1) of each head by pos * theta^(-(i % hd)/hd) */
static void rope_interleaved(double *v, int n, int hd, int pos)
{
    for (int i = 0; i < n; i += 2) {
        double f = 1.0 / pow(10000.0, (double)(i % hd) / hd), a = pos * f;
        double x = v[i], y = v[i + 1];
        v[i] = x * cos(a) - y * sin(a);
        v[i + 1] = x * sin(a) + y * cos(a);
    }
}

/* HF: rotate pairs (j, j + hd/2) by pos * theta^(-2j/hd) */
static void rope_half(double *v, int n, int hd, int pos)
{
    for (int h0 = 0; h0 < n; h0 += hd)
        for (int j = 0; j < hd / 2; j++) {
            double f = 1.0 / pow(10000.0, 2.0 * j / hd), a = pos * f;
            double x = v[h0 + j], y = v[h0 + j + hd / 2];
            v[h0 + j] = x * cos(a) - y * sin(a);
            v[h0 + j + hd / 2] = y * cos(a) + x * sin(a);
        }
}

static void matvec(double *out, const float *m, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        out[r] = 0;
        for (int c = 0; c < cols; c++)
            out[r] += (double)m[r * cols + c] * x[c];
    }
}

/* Attention scores q(pos 5)·k(pos 2) per head: run.c on the file's rows
 * must equal HF's convention on the permuted rows (to 1e-9, double
 * rounding only), and differ without the permutation (so the test can
 * tell). */
static void permutation_makes_hf_rope_match_run_c(void **state)
{
    (void)state;
    enum { D = 16, HEADS = 2, HD = 8 };
    float wq[D * D], wk[D * D], pq[D * D], pk[D * D];
    double x1[D], x2[D];
    uint32_t s = 12345;
    for (int i = 0; i < D * D; i++) {
        s = s * 1664525u + 1013904223u;
        wq[i] = (float)((int)(s >> 8) % 2001 - 1000) / 1000.0f;
        s = s * 1664525u + 1013904223u;
        wk[i] = (float)((int)(s >> 8) % 2001 - 1000) / 1000.0f;
    }
    for (int i = 0; i < D; i++) {
        x1[i] = sin(i + 1.0);
        x2[i] = cos(3.0 * i);
    }
    rlpi_llama2c_permute_rope_rows(pq, wq, HEADS, HD, D);
    rlpi_llama2c_permute_rope_rows(pk, wk, HEADS, HD, D);
    double q[D], k[D], qh[D], kh[D], qn[D], kn[D];
    matvec(q, wq, x1, D, D);
    matvec(k, wk, x2, D, D);
    matvec(qh, pq, x1, D, D);
    matvec(kh, pk, x2, D, D);
    memcpy(qn, q, sizeof q);
    memcpy(kn, k, sizeof k);
    rope_interleaved(q, D, HD, 5);
    rope_interleaved(k, D, HD, 2);
    rope_half(qh, D, HD, 5);
    rope_half(kh, D, HD, 2);
    rope_half(qn, D, HD, 5); /* unpermuted rows under HF's RoPE: wrong */
    rope_half(kn, D, HD, 2);
    double max_unpermuted_diff = 0;
    for (int h = 0; h < HEADS; h++) {
        double ref = 0, hf = 0, bad = 0;
        for (int i = h * HD; i < (h + 1) * HD; i++) {
            ref += q[i] * k[i];
            hf += qh[i] * kh[i];
            bad += qn[i] * kn[i];
        }
        assert_true(fabs(ref - hf) < 1e-9);
        max_unpermuted_diff = fmax(max_unpermuted_diff, fabs(ref - bad));
    }
    assert_true(max_unpermuted_diff > 1e-3);
}

/* ---- case #3 repro B: stories260K.bin ---------------------------------- */

static char data_file[512];

static uint8_t *read_stories(size_t *len)
{
    const char *dir = getenv("RLPOST_SHARED_DATA");
    if (!dir)
        return NULL;
    snprintf(data_file, sizeof data_file, "%s/llama2c/stories260K.bin", dir);
    FILE *f = fopen(data_file, "rb");
    if (!f)
        return NULL;
    uint8_t *b = malloc(1056540 + 131072);
    *len = fread(b, 1, 1056540 + 131072, f);
    fclose(f);
    return b;
}

static void stories260k_shared_head_is_embedding_alias(void **state)
{
    (void)state;
    size_t len;
    uint8_t *b = read_stories(&len);
    if (!b)
        skip();
    assert_int_equal(len, 1056540); /* 28 + 4 * 264,128 */
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    if (rlpi_llama2c_load(data_file, &c, &w) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_int_equal(c.dim, 64);
    assert_int_equal(c.ffn_dim, 172);
    assert_int_equal(c.n_layers, 5);
    assert_int_equal(c.n_heads, 8);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.vocab_size, 512);
    assert_int_equal(c.max_seq_len, 512);
    assert_true(c.tie_embeddings);
    const rlpi_tensor *emb = rlpi_weights_find(&w, "model.embed_tokens.weight");
    const rlpi_tensor *head = rlpi_weights_find(&w, "lm_head.weight");
    assert_int_equal(head->alias_of, (int)(emb - w.tensors));
    assert_ptr_equal(rlpi_tensor_data(&w, head), emb->data);
    assert_memory_equal(emb->data, b + 28, 512 * 64 * 4);
    /* layer 0 q_proj: HF row 5 (head 0, second half, j=1) is file row 3 */
    const size_t wq0 = (512 * 64 + 5 * 64) * 4 + 28;
    assert_memory_equal(rlpi_weights_find(&w, "model.layers.0.self_attn.q_proj.weight")->data + 5 * 64,
                        b + wq0 + 3 * 64 * 4, 64 * 4);
    rlpi_weights_free(&w);
    free(b);
}

static char tmpfile_path[64];

static void write_variant(const uint8_t *b, size_t len)
{
    snprintf(tmpfile_path, sizeof tmpfile_path, "/tmp/rlpost_l2c_XXXXXX");
    int fd = mkstemp(tmpfile_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b, len), (ssize_t)len);
    close(fd);
}

static void stories260k_negative_vocab_reads_appended_head(void **state)
{
    (void)state;
    size_t len;
    uint8_t *b = read_stories(&len);
    if (!b)
        skip();
    int32_t neg = -512;
    memcpy(b + 20, &neg, 4);
    /* 512 * 64 floats, each its own index, so placement is checked */
    for (int i = 0; i < 512 * 64; i++) {
        float f = (float)i * 0.5f - 3.0f;
        memcpy(b + len + 4 * (size_t)i, &f, 4);
    }
    write_variant(b, len + 131072);
    rlpi_model_config c;
    rlpi_weights w;
    rlpi_weights_init(&w);
    int rc = rlpi_llama2c_load(tmpfile_path, &c, &w);
    unlink(tmpfile_path);
    if (rc != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_false(c.tie_embeddings);
    assert_int_equal(c.vocab_size, 512);
    const rlpi_tensor *head = rlpi_weights_find(&w, "lm_head.weight");
    assert_int_equal(head->alias_of, -1);
    assert_memory_equal(head->data, b + len, 131072);
    assert_true(head->data[0] == -3.0f && head->data[512 * 64 - 1] == 16380.5f);
    rlpi_weights_free(&w);

    /* the same header without the classifier: a size error, no read past EOF */
    write_variant(b, len);
    rlpi_weights_init(&w);
    rc = rlpi_llama2c_load(tmpfile_path, &c, &w);
    unlink(tmpfile_path);
    assert_int_equal(rc, RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(),
                           "file has 1056540 bytes but its header (separate classifier) implies "
                           "1187612"));
    assert_int_equal(w.n, 0);
    free(b);
}

/* ---- broken headers ---------------------------------------------------- */

static void broken_headers_fail(void **state)
{
    (void)state;
    static const struct {
        h7 h;
        const char *msg;
    } cases[] = {
        {{-64, 172, 5, 8, 4, 512, 512}, "dim -64 out of range"},
        {{1 << 30, 172, 5, 8, 4, 512, 512}, "dim 1073741824 out of range"},
        {{64, 0, 5, 8, 4, 512, 512}, "hidden_dim 0 out of range"},
        {{64, 172, 0, 8, 4, 512, 512}, "n_layers 0 out of range"},
        {{64, 172, 5, 7, 7, 512, 512}, "n_heads 7 does not divide dim 64"},
        {{64, 172, 5, 8, 3, 512, 512}, "n_kv_heads 3 does not divide n_heads 8"},
        {{64, 172, 5, 8, 16, 512, 512}, "n_kv_heads 16"},
        {{48, 172, 5, 16, 16, 512, 512}, "head size 3 is odd"},
        {{64, 172, 5, 8, 4, 0, 512}, "vocab_size 0 out of range"},
        {{64, 172, 5, 8, 4, INT32_MIN, 512}, "vocab_size -2147483648 out of range"},
        {{64, 172, 5, 8, 4, 512, -1}, "seq_len -1 out of range"},
        {{65536, 1 << 20, 1024, 1024, 1024, 1 << 24, 1 << 24}, "implies"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t b[300] = {0};
        memcpy(b, &cases[i].h, 28);
        rlpi_model_config c;
        rlpi_weights w;
        rlpi_weights_init(&w);
        int rc = rlpi_llama2c_parse(b, sizeof b, "bad.bin", &c, &w);
        if (rc != RLP_E_FORMAT || !strstr(rlp_error_last(), cases[i].msg))
            fail_msg("case %zu: %d '%s' lacks '%s'", i, rc, rlp_error_last(), cases[i].msg);
        assert_int_equal(w.n, 0);
    }
    /* truncations of a valid file, v0 and v1, all the way down */
    const h7 h = {16, 24, 2, 4, 2, 10, 6};
    for (int legacy = 0; legacy < 2; legacy++) {
        size_t len;
        uint8_t *b = build(&h, legacy, 1, &len);
        const size_t cuts[] = {0, 3, 27, 28, 200, 255, 256, len - 4, len - 1};
        for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
            rlpi_model_config c;
            rlpi_weights w;
            rlpi_weights_init(&w);
            /* an exact-size heap copy so ASan sees any read past the end */
            uint8_t *cut = malloc(cuts[k] ? cuts[k] : 1);
            memcpy(cut, b, cuts[k]);
            int rc = rlpi_llama2c_parse(cut, cuts[k], "cut.bin", &c, &w);
            free(cut);
            if (rc != RLP_E_FORMAT)
                fail_msg("legacy=%d cut %zu: %d '%s'", legacy, cuts[k], rc, rlp_error_last());
            assert_int_equal(w.n, 0);
        }
        /* one byte too many is also wrong */
        uint8_t *more = calloc(len + 1, 1);
        memcpy(more, b, len);
        rlpi_model_config c;
        rlpi_weights w;
        rlpi_weights_init(&w);
        assert_int_equal(rlpi_llama2c_parse(more, len + 1, "long.bin", &c, &w), RLP_E_FORMAT);
        free(more);
        if (!legacy) {
            b[4] = 2; /* version 2 (Q8_0) */
            assert_int_equal(rlpi_llama2c_parse(b, len, "v2.bin", &c, &w), RLP_E_UNSUPPORTED);
            assert_non_null(strstr(rlp_error_last(), "version 2 is not supported"));
            b[4] = 1;
            b[8 + 28] = 7;
            assert_int_equal(rlpi_llama2c_parse(b, len, "flag.bin", &c, &w), RLP_E_FORMAT);
            assert_non_null(strstr(rlp_error_last(), "shared_classifier byte is 7"));
        }
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(synthetic_v0_and_v1_layouts),
        cmocka_unit_test(permutation_makes_hf_rope_match_run_c),
        cmocka_unit_test(stories260k_shared_head_is_embedding_alias),
        cmocka_unit_test(stories260k_negative_vocab_reads_appended_head),
        cmocka_unit_test(broken_headers_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
