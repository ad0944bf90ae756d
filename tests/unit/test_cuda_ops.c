/* Every kernel op of the CUDA backend against the CPU backend, on random
 * inputs of awkward sizes: packed sequences of different lengths (1, a
 * partial tile, several tiles, more sequences than one kernel launch
 * takes), GQA groups 1, 2 and 3, head dims 16, 32, 64, 80, 128 and 256,
 * vocabularies and widths that are not multiples of any block size.
 *
 * Each tensor lives on both backends with guard elements before and after
 * it (the GPU's must survive every op), and outputs that an op writes
 * start as NaN on both, so an element a kernel forgets or an index that
 * lands in the wrong row cannot pass. Inputs are scaled so that softmaxes
 * are neither flat nor one-hot: a wrong key, query or head changes the
 * result by O(1) against tolerances of 1e-5.
 *
 * Tolerances (fp32; an element passes when |gpu − cpu| ≤ tol·(|cpu| + rms),
 * rms being the root mean square of the CPU tensor, so elements near zero
 * are judged at the tensor's scale):
 *   exact (0):  embedding forward (a copy), add, add_bias, scale, AdamW
 *               (both backends do the same IEEE operations in the same
 *               order, without contraction)
 *   1e-5:       embedding backward (atomic sums of repeated ids), RMSNorm
 *               forward and backward, RoPE, SwiGLU, bias backward, attention
 *               forward (out and lse), cached attention, logprob forward
 *               (logp and entropy)
 *   2e-5:       attention backward (dq, dk, dv: differences of
 *               softmax-weighted sums, P recomputed from lse), logprob
 *               backward
 *   1e-12 rel.: sum of squares (double accumulation on both)
 * The sources of difference are summation order and exp (CUDA expf and
 * the CPU's polynomial, each within 2 ulp).
 *
 * Also checked: deferred reporting of out-of-range ids (RLP_E_INVALID_ARG at
 * the next synchronisation), RLP_E_UNSUPPORTED for head_dim > 256, GEMM
 * edge cases (k = 0, beta = 0 over NaN, a broadcast operand), and that the
 * attention kernels and the sum of squares give the same bits when run
 * twice.
 *
 * GEMM precisions (the backends' `matmul`): random GEMMs (every transpose,
 * padded ld, batches, a broadcast operand, beta 0 over NaN and beta ≠ 0)
 * with both backends in bf16 agree within 1e-5·√k of |ref| + rms, as in
 * fp32: both multiply the same bf16-rounded operands, whose products are
 * exact in fp32, so only the order of the sums differs. The GPU's bf16
 * against the CPU's fp32 stays within BF16_VS_FP32 and must differ by more
 * than 1e-4 somewhere (the rounding happens); TF32 likewise within
 * TF32_VS_FP32 and above 1e-5. The conversion is checked bit for bit
 * against core/half.h's round-to-nearest-even (ties, ±Inf, NaN, overflow,
 * subnormals), and the GEMM edge cases run again in bf16.
 * Exits 77 (skipped) where no GPU is visible. */
#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "core/rng.h"
#include "gpu_test_check.h"
#include "backend/sampler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rlpi_backend *be[2]; /* 0 = CPU (reference), 1 = CUDA */

/* the softmax scale of standard attention (the CPU's own expression) */
#define DEF_SCALE(hd) (1.0f / sqrtf((float)(hd)))
static rlpi_rng rng;
static int failures;

#define EXPECT(cond, ...)                                                           \
    do {                                                                            \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
            printf(__VA_ARGS__);                                                    \
            printf(" [%s]\n", rlp_error_last());                                    \
        }                                                                           \
    } while (0)

/* ------------------------------------------------------------ twin tensors */

#define GUARD 5
#define SENTINEL (-7777.25f)

/* A tensor of n 4-byte elements on both backends, at element GUARD of its
 * buffers, with GUARD sentinels on each side. */
typedef struct twin {
    rlpi_buffer *buf[2];
    size_t n;
} twin;

static twin twin_new(size_t n)
{
    twin t = {.n = n};
    size_t total = n + 2 * GUARD;
    float *h = malloc(total * sizeof *h);
    if (!h)
        DIE("out of memory");
    for (size_t i = 0; i < total; i++)
        h[i] = i < GUARD || i >= GUARD + n ? SENTINEL : NAN;
    for (int b = 0; b < 2; b++) {
        OK(rlpi_buffer_alloc(be[b], total * 4, &t.buf[b]));
        OK(rlpi_buffer_upload(t.buf[b], 0, h, total * 4));
    }
    free(h);
    return t;
}

static void twin_free(twin *t)
{
    rlpi_buffer_free(t->buf[0]);
    rlpi_buffer_free(t->buf[1]);
}

static rlpi_ref R(twin *t, int b)
{
    return RLPI_REF(t->buf[b], GUARD);
}

/* the same n 4-byte values into both */
static void twin_set(twin *t, const void *vals)
{
    for (int b = 0; b < 2; b++)
        OK(rlpi_buffer_upload(t->buf[b], GUARD * 4, vals, t->n * 4));
}

static void twin_get(twin *t, int b, void *out)
{
    OK(rlpi_buffer_download(t->buf[b], GUARD * 4, out, t->n * 4));
}

static float uni(float lo, float hi)
{
    return lo + (hi - lo) * (float)rlpi_rng_f64(&rng);
}

static float *rand_vec(size_t n, float lo, float hi)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        DIE("out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = uni(lo, hi);
    return v;
}

static twin twin_rand(size_t n, float lo, float hi)
{
    twin t = twin_new(n);
    float *v = rand_vec(n, lo, hi);
    twin_set(&t, v);
    free(v);
    return t;
}

/* the GPU copy's guards are intact */
static int guards_ok(twin *t)
{
    float g[GUARD];
    for (int side = 0; side < 2; side++) {
        size_t off = side ? GUARD + t->n : 0;
        OK(rlpi_buffer_download(t->buf[1], off * 4, g, sizeof g));
        for (int i = 0; i < GUARD; i++)
            if (g[i] != SENTINEL)
                return 0;
    }
    return 1;
}

/* GPU against CPU: every element within tol·(|cpu| + rms(cpu)); returns
 * the largest error seen in those units */
static double compare(const char *what, twin *t, double tol)
{
    size_t n = t->n;
    float *c = malloc(n * sizeof *c), *g = malloc(n * sizeof *g);
    if (!c || !g)
        DIE("out of memory");
    twin_get(t, 0, c);
    twin_get(t, 1, g);
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (double)c[i] * c[i];
    double rms = n ? sqrt(ss / (double)n) : 0;
    double worst = 0;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - (double)c[i]), scale = fabs((double)c[i]) + rms;
        if (!(err <= tol * scale)) { /* NaN on either side fails too */
            if (!bad)
                first_bad = i;
            bad++;
        }
        double r = scale > 0 ? err / scale : (err > 0 ? INFINITY : 0);
        if (r > worst || isnan(r))
            worst = r;
    }
    int guards = guards_ok(t);
    printf("  %-46s n=%-8zu max err %.2e of |ref|+rms (tol %.0e) %s\n", what, n, worst, tol,
           bad || !guards ? "FAIL" : "ok");
    if (bad) {
        failures++;
        printf("    %zu elements off; first at %zu: cpu %.9g gpu %.9g (rms %.3g)\n", bad, first_bad,
               (double)c[first_bad], (double)g[first_bad], rms);
    }
    if (!guards) {
        failures++;
        printf("    the GPU wrote outside the tensor\n");
    }
    free(c);
    free(g);
    return worst;
}

/* the GPU copy holds the same bits as `ref` (a previous GPU result) */
static void same_bits(const char *what, twin *t, const float *ref)
{
    float *g = malloc(t->n * sizeof *g);
    if (!g)
        DIE("out of memory");
    twin_get(t, 1, g);
    int same = memcmp(g, ref, t->n * sizeof *g) == 0;
    printf("  %-46s %s\n", what, same ? "same bits on a second run" : "FAIL: differs on a second run");
    failures += !same;
    free(g);
}

static float *gpu_copy(twin *t)
{
    float *h = malloc(t->n * sizeof *h);
    if (!h)
        DIE("out of memory");
    twin_get(t, 1, h);
    return h;
}

/* ------------------------------------------------------------- embedding */

static void test_embedding(int64_t n, int64_t dim, int64_t vocab, int64_t id_range)
{
    printf("embedding n=%lld dim=%lld vocab=%lld (ids in [0, %lld))\n", (long long)n, (long long)dim,
           (long long)vocab, (long long)id_range);
    twin table = twin_rand((size_t)(vocab * dim), -1, 1), out = twin_new((size_t)(n * dim));
    twin ids = twin_new((size_t)n), dout = twin_rand((size_t)(n * dim), -1, 1);
    int32_t *h = malloc((size_t)n * sizeof *h);
    for (int64_t i = 0; i < n; i++)
        h[i] = i == 0 ? (int32_t)(vocab - 1) : (int32_t)rlpi_rng_below(&rng, (uint64_t)id_range);
    twin_set(&ids, h);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_embedding_fwd(be[b], R(&out, b), R(&table, b), R(&ids, b), n, dim, vocab));
    compare("embedding forward", &out, 0);
    twin dtable = twin_rand((size_t)(vocab * dim), -1, 1); /* accumulated into */
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_embedding_bwd(be[b], R(&dtable, b), R(&dout, b), R(&ids, b), n, dim, vocab));
    compare("embedding backward (scatter-add)", &dtable, 1e-5);

    /* an id out of range: the CPU says so at once, the GPU at the next
     * synchronisation, and the row is zero on both */
    h[n / 2] = (int32_t)vocab;
    twin_set(&ids, h);
    EXPECT(rlpi_op_embedding_fwd(be[0], R(&out, 0), R(&table, 0), R(&ids, 0), n, dim, vocab) == RLP_E_INVALID_ARG,
           "cpu accepted id %lld", (long long)vocab);
    int rc = rlpi_op_embedding_fwd(be[1], R(&out, 1), R(&table, 1), R(&ids, 1), n, dim, vocab);
    EXPECT(rc == RLP_OK, "gpu embedding returned %d before synchronising", rc);
    rc = rlpi_backend_synchronize(be[1]);
    EXPECT(rc == RLP_E_INVALID_ARG && strstr(rlp_error_last(), "embedding"), "gpu synchronize returned %d", rc);
    EXPECT(rlpi_backend_synchronize(be[1]) == RLP_OK, "the flag was not cleared");
    compare("embedding forward, one id out of range", &out, 0);
    free(h);
    twin_free(&table);
    twin_free(&out);
    twin_free(&ids);
    twin_free(&dout);
    twin_free(&dtable);
}

/* --------------------------------------------------------------- RMSNorm */

static void test_rmsnorm(int64_t n, int64_t dim)
{
    printf("rmsnorm n=%lld dim=%lld\n", (long long)n, (long long)dim);
    float *xv = rand_vec((size_t)(n * dim), -1, 1);
    for (int64_t i = 0; i < n; i++) { /* rows from 1e-3 to 1e2 in scale */
        float s = powf(10.0f, (float)(i % 6) - 3.0f);
        for (int64_t c = 0; c < dim; c++)
            xv[i * dim + c] *= s;
    }
    twin x = twin_new((size_t)(n * dim)), w = twin_rand((size_t)dim, -2, 2);
    twin_set(&x, xv);
    twin out = twin_new((size_t)(n * dim)), rstd = twin_new((size_t)n);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_rmsnorm_fwd(be[b], R(&out, b), R(&rstd, b), R(&x, b), R(&w, b), n, dim, 1e-5f));
    compare("rmsnorm forward: out", &out, 1e-5);
    compare("rmsnorm forward: rstd", &rstd, 1e-5);

    /* backward from the CPU's rstd on both, into random accumulators */
    float *r = malloc((size_t)n * sizeof *r);
    twin_get(&rstd, 0, r);
    twin_set(&rstd, r);
    twin dout = twin_rand((size_t)(n * dim), -1, 1);
    twin dx = twin_rand((size_t)(n * dim), -1, 1), dw = twin_rand((size_t)dim, -1, 1);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_rmsnorm_bwd(be[b], R(&dx, b), R(&dw, b), R(&dout, b), R(&x, b), R(&w, b), R(&rstd, b), n, dim));
    compare("rmsnorm backward: dx (accumulated)", &dx, 1e-5);
    compare("rmsnorm backward: dw (accumulated)", &dw, 1e-5);
    free(xv);
    free(r);
    twin *all[] = {&x, &w, &out, &rstd, &dout, &dx, &dw};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        twin_free(all[i]);
}

/* ------------------------------------------------------------------ RoPE */

static void test_rope(int64_t n, int64_t n_heads, int64_t head_dim)
{
    printf("rope n=%lld heads=%lld head_dim=%lld\n", (long long)n, (long long)n_heads, (long long)head_dim);
    size_t nx = (size_t)(n * n_heads * head_dim);
    float *xv = rand_vec(nx, -1, 1);
    twin x = twin_new(nx), pos = twin_new((size_t)n), freq = twin_new((size_t)(head_dim / 2));
    twin_set(&x, xv);
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = i < 3 ? (int32_t)i : (int32_t)rlpi_rng_below(&rng, 8192);
    twin_set(&pos, p);
    float *f = malloc((size_t)(head_dim / 2) * sizeof *f);
    for (int64_t i = 0; i < head_dim / 2; i++)
        f[i] = (float)(1.0 / pow(10000.0, 2.0 * (double)i / (double)head_dim));
    twin_set(&freq, f);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_rope(be[b], R(&x, b), R(&pos, b), R(&freq, b), n, n_heads, head_dim, 0));
    compare("rope", &x, 1e-5);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_rope(be[b], R(&x, b), R(&pos, b), R(&freq, b), n, n_heads, head_dim, 1));
    compare("rope then inverse rope", &x, 1e-5);
    float *back = gpu_copy(&x); /* the inverse undoes the rotation */
    double worst = 0;
    for (size_t i = 0; i < nx; i++)
        worst = fmax(worst, fabs((double)back[i] - xv[i]));
    EXPECT(worst < 1e-5, "gpu rope∘inverse is off by %.3g", worst);
    free(back);
    free(xv);
    free(p);
    free(f);
    twin_free(&x);
    twin_free(&pos);
    twin_free(&freq);
}

/* -------------------------------------------------------------- attention */

static void test_attention(const int64_t *lens, int64_t n_seq, int64_t H, int64_t KV, int64_t hd)
{
    int64_t *ss = malloc((size_t)(n_seq + 1) * sizeof *ss);
    ss[0] = 0;
    for (int64_t s = 0; s < n_seq; s++)
        ss[s + 1] = ss[s] + lens[s];
    int64_t n = ss[n_seq];
    printf("attention %lld sequences (%lld tokens) H=%lld KV=%lld head_dim=%lld\n", (long long)n_seq, (long long)n,
           (long long)H, (long long)KV, (long long)hd);
    size_t nq = (size_t)(n * H * hd), nkv = (size_t)(n * KV * hd);
    /* q·k/sqrt(hd) has standard deviation 4/3 whatever hd: peaked, not one-hot */
    twin q = twin_rand(nq, -2, 2), k = twin_rand(nkv, -2, 2), v = twin_rand(nkv, -1, 1);
    twin out = twin_new(nq), lse = twin_new((size_t)(n * H));
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_attention_fwd(be[b], R(&out, b), R(&lse, b), R(&q, b), R(&k, b), R(&v, b), ss, n_seq, n, H, KV, hd, DEF_SCALE(hd), 0));
    compare("attention forward: out", &out, 1e-5);
    compare("attention forward: lse", &lse, 1e-5);
    float *o1 = gpu_copy(&out), *l1 = gpu_copy(&lse);
    OK(rlpi_op_attention_fwd(be[1], R(&out, 1), R(&lse, 1), R(&q, 1), R(&k, 1), R(&v, 1), ss, n_seq, n, H, KV, hd, DEF_SCALE(hd), 0));
    same_bits("attention forward: out", &out, o1);
    same_bits("attention forward: lse", &lse, l1);

    /* backward from the CPU's out and lse on both: it alone is compared */
    float *tmp = malloc((nq > (size_t)(n * H) ? nq : (size_t)(n * H)) * sizeof *tmp);
    twin_get(&out, 0, tmp);
    twin_set(&out, tmp);
    twin_get(&lse, 0, tmp);
    twin_set(&lse, tmp);
    free(tmp);
    twin dout = twin_rand(nq, -1, 1);
    twin dq = twin_new(nq), dk = twin_new(nkv), dv = twin_new(nkv);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_attention_bwd(be[b], R(&dq, b), R(&dk, b), R(&dv, b), R(&dout, b), R(&q, b), R(&k, b), R(&v, b),
                                 R(&out, b), R(&lse, b), ss, n_seq, n, H, KV, hd, DEF_SCALE(hd), 0));
    compare("attention backward: dq", &dq, 2e-5);
    compare("attention backward: dk", &dk, 2e-5);
    compare("attention backward: dv", &dv, 2e-5);
    float *g1 = gpu_copy(&dq), *g2 = gpu_copy(&dk), *g3 = gpu_copy(&dv);
    OK(rlpi_op_attention_bwd(be[1], R(&dq, 1), R(&dk, 1), R(&dv, 1), R(&dout, 1), R(&q, 1), R(&k, 1), R(&v, 1),
                             R(&out, 1), R(&lse, 1), ss, n_seq, n, H, KV, hd, DEF_SCALE(hd), 0));
    same_bits("attention backward: dq", &dq, g1);
    same_bits("attention backward: dk", &dk, g2);
    same_bits("attention backward: dv", &dv, g3);
    free(o1);
    free(l1);
    free(g1);
    free(g2);
    free(g3);
    free(ss);
    twin *all[] = {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        twin_free(all[i]);
}

/* rows[s] new query rows of sequence s in slot slot[s] after past[s] rows */
static void test_attention_cached(const int64_t *rows, const int64_t *slot, const int64_t *past, int64_t n_seq,
                                  int64_t n_slots, int64_t capacity, int64_t H, int64_t KV, int64_t hd)
{
    int64_t *qs = malloc((size_t)(n_seq + 1) * sizeof *qs);
    qs[0] = 0;
    for (int64_t s = 0; s < n_seq; s++)
        qs[s + 1] = qs[s] + rows[s];
    int64_t n = qs[n_seq], stride = capacity * KV * hd;
    printf("cached attention %lld sequences (%lld rows) in %lld slots of %lld, H=%lld KV=%lld head_dim=%lld\n",
           (long long)n_seq, (long long)n, (long long)n_slots, (long long)capacity, (long long)H, (long long)KV,
           (long long)hd);
    /* the whole cache is random: a kernel that reads a row past a query's
     * position, or the wrong slot, adds a key the CPU does not */
    twin kc = twin_rand((size_t)(n_slots * stride), -2, 2), vc = twin_rand((size_t)(n_slots * stride), -1, 1);
    twin q = twin_rand((size_t)(n * H * hd), -2, 2), out = twin_new((size_t)(n * H * hd));
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_attention_cached(be[b], R(&out, b), R(&q, b), R(&kc, b), R(&vc, b), qs, slot, past, n_seq, n,
                                    n_slots, stride, H, KV, hd, DEF_SCALE(hd), 0));
    compare("cached attention", &out, 1e-5);
    free(qs);
    twin_free(&kc);
    twin_free(&vc);
    twin_free(&q);
    twin_free(&out);
}

/* ------------------------------------------------------------ elementwise */

static void test_elementwise(int64_t n, int64_t rows, int64_t cols)
{
    printf("elementwise n=%lld, bias %lld x %lld\n", (long long)n, (long long)rows, (long long)cols);
    twin g = twin_rand((size_t)n, -12, 12), u = twin_rand((size_t)n, -2, 2), d = twin_rand((size_t)n, -1, 1);
    twin y = twin_new((size_t)n), dg = twin_new((size_t)n), du = twin_new((size_t)n);
    for (int b = 0; b < 2; b++) {
        OK(rlpi_op_swiglu_fwd(be[b], R(&y, b), R(&g, b), R(&u, b), n));
        OK(rlpi_op_swiglu_bwd(be[b], R(&dg, b), R(&du, b), R(&d, b), R(&g, b), R(&u, b), n));
    }
    compare("swiglu forward", &y, 1e-5);
    compare("swiglu backward: dgate", &dg, 1e-5);
    compare("swiglu backward: dup", &du, 1e-5);
    float *yv = rand_vec((size_t)n, -5, 5); /* the same y on both before y += u */
    twin_set(&y, yv);
    free(yv);
    for (int b = 0; b < 2; b++) {
        OK(rlpi_op_add(be[b], R(&y, b), R(&u, b), n));
        OK(rlpi_op_scale(be[b], R(&u, b), -0.37f, n));
    }
    compare("add", &y, 0);
    compare("scale", &u, 0);

    twin m = twin_rand((size_t)(rows * cols), -3, 3), bias = twin_rand((size_t)cols, -1, 1);
    twin db = twin_rand((size_t)cols, -1, 1);
    for (int b = 0; b < 2; b++) {
        OK(rlpi_op_add_bias(be[b], R(&m, b), R(&bias, b), rows, cols));
        OK(rlpi_op_bias_bwd(be[b], R(&db, b), R(&m, b), rows, cols));
    }
    compare("add bias", &m, 0);
    compare("bias backward (accumulated)", &db, 1e-5);
    twin *all[] = {&g, &u, &d, &y, &dg, &du, &m, &bias, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        twin_free(all[i]);
}

/* --------------------------------------------------------- logprob head */

static void test_logprob(int64_t n, int64_t vocab, float inv_temp, int with_entropy)
{
    printf("logprob rows=%lld vocab=%lld T=%.2f entropy=%s\n", (long long)n, (long long)vocab, 1.0 / inv_temp,
           with_entropy ? "yes" : "NULL");
    float *lv = rand_vec((size_t)(n * vocab), -8, 8);
    for (int64_t i = 0; i < n; i++) /* a few rows nearly one-hot */
        if (i % 5 == 1)
            lv[i * vocab + (i * 7919) % vocab] = 40.0f;
    twin logits = twin_new((size_t)(n * vocab)), tg = twin_new((size_t)n);
    twin_set(&logits, lv);
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int64_t i = 0; i < n; i++)
        t[i] = i == 0 ? (int32_t)(vocab - 1) : i % 5 == 1 ? (int32_t)((i * 7919) % vocab)
                                                           : (int32_t)rlpi_rng_below(&rng, (uint64_t)vocab);
    twin_set(&tg, t);
    twin lp = twin_new((size_t)n), ent = twin_new((size_t)n);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_logprob_rows(be[b], R(&lp, b), with_entropy ? R(&ent, b) : RLPI_REF(NULL, 0), R(&logits, b),
                                R(&tg, b), n, vocab, inv_temp));
    compare("logprob forward: logp", &lp, 1e-5);
    if (with_entropy)
        compare("logprob forward: entropy", &ent, 1e-5);

    twin dl = twin_rand((size_t)n, -1, 1), de = twin_rand((size_t)n, -1, 1);
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_logprob_rows_bwd(be[b], R(&logits, b), R(&tg, b), R(&dl, b),
                                    with_entropy ? R(&de, b) : RLPI_REF(NULL, 0), n, vocab, inv_temp));
    compare("logprob backward: dlogits (in place)", &logits, 2e-5);

    /* a target out of range: reported at the next synchronisation */
    t[n - 1] = -3;
    twin_set(&tg, t);
    int rc = rlpi_op_logprob_rows(be[1], R(&lp, 1), RLPI_REF(NULL, 0), R(&logits, 1), R(&tg, 1), n, vocab, inv_temp);
    EXPECT(rc == RLP_OK, "gpu logprob returned %d before synchronising", rc);
    float probe;
    rc = rlpi_buffer_download(lp.buf[1], GUARD * 4, &probe, 4);
    EXPECT(rc == RLP_E_INVALID_ARG && strstr(rlp_error_last(), "target"), "gpu download returned %d", rc);
    EXPECT(rlpi_backend_synchronize(be[1]) == RLP_OK, "the flag was not cleared");
    free(lv);
    free(t);
    twin *all[] = {&logits, &tg, &lp, &ent, &dl, &de};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        twin_free(all[i]);
}

/* ------------------------------------------------------------- sampling */

/* Token sampling (rlpi_op_sample_rows): the CPU backend runs the host
 * sampler, the GPU kernel replays its algorithm, so for the same u both
 * must draw the same token. The one allowed difference: u within
 * SAMPLE_U_EPS of a boundary of the inverse CDF, where the kernel's sums
 * (another order, exp within an ulp of the CPU's expf) may round to the
 * neighbouring token; such a draw passes only if the GPU's token is the
 * host sampler's at u − eps or u + eps, and is counted. Logprobs of equal
 * tokens: |gpu − cpu| <= SAMPLE_LP_TOL·max(1, |cpu|) (double sums of float
 * terms in another order, rounded to float). */
#define SAMPLE_U_EPS 1e-5
#define SAMPLE_LP_TOL 1e-5
static struct {
    long draws, boundary;
    double max_lp_diff;
} samp;
static int emulated; /* the CPU emulator of the kernels: fewer draws */

/* row kinds: bell-shaped, 40 % masked, ties (multiples of 0.5, the max
 * repeated), flat, one dominant token */
enum { ROW_KINDS = 5 };

static void sample_row(float *r, int64_t V, int kind)
{
    for (int64_t i = 0; i < V; i++) {
        float x = 0;
        for (int k = 0; k < 4; k++)
            x += uni(-1.5f, 1.5f);
        r[i] = 2.0f * x;
    }
    if (kind == 1) {
        for (int64_t i = 0; i < V; i++)
            if (rlpi_rng_f64(&rng) < 0.4)
                r[i] = -INFINITY;
        r[V / 2] = 1.0f; /* one finite at least */
    } else if (kind == 2) {
        for (int64_t i = 0; i < V; i++)
            r[i] = 0.5f * floorf(r[i] * 0.5f);
        r[V - 1] = r[0] = 6.0f;
    } else if (kind == 3) {
        for (int64_t i = 0; i < V; i++)
            r[i] = 0.25f;
    } else if (kind == 4) {
        r[(V * 3) / 4] = 25.0f;
    }
}

static void sample_compare(twin *logits, int64_t n_rows, int64_t V, const float *lv, const rlpi_sampler_params *p,
                           int n_u)
{
    const int64_t n = n_rows * n_u;
    int32_t *rows = malloc((size_t)n * sizeof *rows), *tok[2];
    float *lp[2];
    double *u = malloc((size_t)n * sizeof *u);
    rlpi_sampler_params *ps = malloc((size_t)n * sizeof *ps);
    for (int b = 0; b < 2; b++) {
        tok[b] = malloc((size_t)n * sizeof *tok[b]);
        lp[b] = malloc((size_t)n * sizeof *lp[b]);
    }
    for (int64_t i = 0; i < n; i++) {
        rows[i] = (int32_t)(n_rows - 1 - i % n_rows); /* rows reversed: the indirection matters */
        int k = (int)(i / n_rows);
        u[i] = k == 0 ? 0.0 : k == 1 ? 0.99999994 : rlpi_sample_uniform(20250611, (uint64_t)i, (uint64_t)V);
        ps[i] = *p;
    }
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_sample_rows(be[b], tok[b], lp[b], R(logits, b), n_rows, rows, n, V, ps, u));
    rlpi_sampler_scratch scr = {0};
    for (int64_t i = 0; i < n; i++) {
        samp.draws++;
        if (tok[1][i] != tok[0][i]) {
            int32_t t_lo, t_hi;
            float l_;
            const float *row = lv + (size_t)rows[i] * (size_t)V;
            double u_lo = u[i] > SAMPLE_U_EPS ? u[i] - SAMPLE_U_EPS : 0.0;
            double u_hi = u[i] + SAMPLE_U_EPS < 1.0 ? u[i] + SAMPLE_U_EPS : 0.99999999;
            OK(rlpi_sample(row, (int32_t)V, p, u_lo, &scr, &t_lo, &l_));
            OK(rlpi_sample(row, (int32_t)V, p, u_hi, &scr, &t_hi, &l_));
            EXPECT(tok[1][i] == t_lo || tok[1][i] == t_hi,
                   "sample V=%lld T=%g k=%d p=%g min_p=%g mode=%d row %d u=%.17g: gpu %d, cpu %d (%d/%d at u∓eps)",
                   (long long)V, (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p,
                   p->logprobs_mode, rows[i], u[i], tok[1][i], tok[0][i], t_lo, t_hi);
            samp.boundary++;
            continue;
        }
        double d = fabs((double)lp[1][i] - (double)lp[0][i]);
        samp.max_lp_diff = d > samp.max_lp_diff ? d : samp.max_lp_diff;
        EXPECT(d <= SAMPLE_LP_TOL * fmax(1.0, fabs((double)lp[0][i])),
               "sample logprob V=%lld T=%g k=%d p=%g min_p=%g mode=%d row %d: gpu %.9g cpu %.9g", (long long)V,
               (double)p->temperature, p->top_k, (double)p->top_p, (double)p->min_p, p->logprobs_mode, rows[i],
               (double)lp[1][i], (double)lp[0][i]);
    }
    rlpi_sampler_scratch_free(&scr);
    for (int b = 0; b < 2; b++) {
        free(tok[b]);
        free(lp[b]);
    }
    free(rows);
    free(u);
    free(ps);
}

/* The parameter grid over rows of every kind of a V-token vocabulary;
 * `full` = every combination, else a thinner grid (large V on the emulator). */
static void test_sample(int64_t V, int n_u, int full)
{
    long d0 = samp.draws, b0 = samp.boundary;
    float *lv = malloc((size_t)(ROW_KINDS * V) * sizeof *lv);
    for (int k = 0; k < ROW_KINDS; k++)
        sample_row(lv + k * V, V, k);
    twin logits = twin_new((size_t)(ROW_KINDS * V));
    twin_set(&logits, lv);
    static const float temps[] = {0.7f, 1.0f, 1.3f}, top_ps[] = {1.0f, 0.9f, 0.5f}, min_ps[] = {0.0f, 0.05f};
    static const int32_t top_ks[] = {0, 1, 5, 50};
    for (int mode = 0; mode < 3; mode++) {
        rlpi_sampler_params g = {0.0f, 0, 1.0f, 0.0f, mode}; /* greedy */
        sample_compare(&logits, ROW_KINDS, V, lv, &g, 2);
        for (int ti = 0; ti < 3; ti++)
            for (int ki = 0; ki < 4; ki++)
                for (int pi = 0; pi < 3; pi++)
                    for (int mi = 0; mi < 2; mi++) {
                        if (!full && (ti + ki + pi + mi + mode) % 4 != 0)
                            continue;
                        rlpi_sampler_params p = {temps[ti], top_ks[ki], top_ps[pi], min_ps[mi], mode};
                        sample_compare(&logits, ROW_KINDS, V, lv, &p, n_u);
                    }
    }
    printf("sample vocab=%lld: %ld draws, %ld within %g of a CDF boundary\n", (long long)V, samp.draws - d0,
           samp.boundary - b0, SAMPLE_U_EPS);
    free(lv);
    twin_free(&logits);
}

/* NaN, +Inf and all -Inf rows: RLP_E_INVALID_ARG with the same message on
 * both backends (the lowest failing draw, its row and the index); the GPU
 * backend stays usable. */
static void test_sample_errors(void)
{
    const int64_t V = 300;
    float *lv = malloc(4 * V * sizeof *lv);
    for (int k = 0; k < 4; k++)
        sample_row(lv + k * V, V, 0);
    lv[1 * V + 3] = NAN;
    lv[1 * V + 200] = INFINITY;
    lv[2 * V + 77] = INFINITY;
    for (int64_t i = 0; i < V; i++)
        lv[3 * V + i] = -INFINITY;
    twin logits = twin_new((size_t)(4 * V));
    twin_set(&logits, lv);
    const struct {
        int32_t bad_row;
        const char *what;
    } cases[] = {{1, "logits[3] is NaN"}, {2, "logits[77] is +Inf"}, {3, "all 300 logits are -Inf"}};
    for (int greedy = 0; greedy < 2; greedy++)
        for (size_t c = 0; c < 3; c++) {
            int32_t rows[3] = {0, cases[c].bad_row, 0}, tok[3];
            float lp[3];
            double u[3] = {0.5, 0.5, 0.5};
            rlpi_sampler_params ps[3];
            for (int i = 0; i < 3; i++)
                ps[i] = (rlpi_sampler_params){greedy ? 0.0f : 1.0f, 5, 0.9f, 0.0f, RLPI_LOGPROBS_SAMPLING};
            char msg[2][256];
            for (int b = 0; b < 2; b++) {
                int rc = rlpi_op_sample_rows(be[b], tok, lp, R(&logits, b), 4, rows, 3, V, ps, u);
                snprintf(msg[b], sizeof msg[b], "%s", rlp_error_last());
                EXPECT(rc == RLP_E_INVALID_ARG && strstr(msg[b], cases[c].what) && strstr(msg[b], "draw 1"),
                       "backend %d: sample over a bad row returned %d", b, rc);
            }
            EXPECT(!strcmp(msg[0], msg[1]), "messages differ: cpu '%s', gpu '%s'", msg[0], msg[1]);
        }
    int32_t row0 = 0, tok;
    float lp;
    double u = 0.25;
    rlpi_sampler_params p = {1.0f, 0, 1.0f, 0.0f, RLPI_LOGPROBS_SAMPLING};
    EXPECT(rlpi_op_sample_rows(be[1], &tok, &lp, R(&logits, 1), 4, &row0, 1, V, &p, &u) == RLP_OK,
           "gpu sampling after an error");
    free(lv);
    twin_free(&logits);
}

/* ------------------------------------------------- reductions, optimizer */

static void test_sum_squares(int64_t n)
{
    twin x = twin_rand((size_t)n, -3, 3);
    double r[2], again;
    for (int b = 0; b < 2; b++)
        OK(rlpi_op_sum_squares(be[b], &r[b], R(&x, b), n));
    OK(rlpi_op_sum_squares(be[1], &again, R(&x, 1), n));
    double rel = fabs(r[1] - r[0]) / r[0];
    printf("sum of squares n=%lld: cpu %.17g gpu %.17g rel err %.2e (tol 1e-12) %s\n", (long long)n, r[0], r[1], rel,
           rel <= 1e-12 ? "ok" : "FAIL");
    failures += !(rel <= 1e-12);
    EXPECT(memcmp(&again, &r[1], sizeof again) == 0, "second run %.17g against %.17g", again, r[1]);
    twin_free(&x);
}

static void test_adamw(int64_t n)
{
    printf("adamw n=%lld (3 steps)\n", (long long)n);
    twin p = twin_rand((size_t)n, -1, 1), g = twin_rand((size_t)n, -0.01f, 0.01f);
    twin m = twin_rand((size_t)n, -1e-3f, 1e-3f), v = twin_rand((size_t)n, 0, 1e-5f);
    for (int t = 1; t <= 3; t++) {
        rlpi_adamw_step st = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                              .weight_decay = t == 2 ? 0.0f : 0.01f,
                              .bias_correction1 = (float)(1.0 - pow(0.9, t)),
                              .bias_correction2 = (float)(1.0 - pow(0.999, t)), .grad_scale = 0.5f};
        for (int b = 0; b < 2; b++)
            OK(rlpi_op_adamw(be[b], R(&p, b), R(&g, b), R(&m, b), R(&v, b), n, &st));
    }
    compare("adamw: param", &p, 0);
    compare("adamw: m", &m, 0);
    compare("adamw: v", &v, 0);
    twin_free(&p);
    twin_free(&g);
    twin_free(&m);
    twin_free(&v);
}

/* ------------------------------------------------------------ GEMM edges */

static void test_gemm_edges(void)
{
    printf("gemm edge cases\n");
    const int64_t m = 37, n = 29, k = 45, batch = 3;
    twin a = twin_rand((size_t)(m * k), -1, 1), bm = twin_rand((size_t)(batch * k * n), -1, 1);
    twin c = twin_new((size_t)(batch * m * n)); /* NaN: beta = 0 must not read it */
    for (int b = 0; b < 2; b++) { /* A broadcast over the batch (stride 0), B transposed */
        rlpi_gemm gm = {.trans_a = 0, .trans_b = 1, .m = m, .n = n, .k = k, .alpha = 0.5f, .beta = 0.0f,
                        .batch = batch, .a = {a.buf[b], GUARD, k, 0}, .b = {bm.buf[b], GUARD, k, n * k},
                        .c = {c.buf[b], GUARD, n, m * n}};
        OK(rlpi_gemm_f32(be[b], &gm));
    }
    compare("gemm: broadcast A, B transposed, beta 0 over NaN", &c, 1e-5);
    float *cv = rand_vec(c.n, -4, 4); /* the same C on both */
    twin_set(&c, cv);
    free(cv);
    for (int b = 0; b < 2; b++) { /* k = 0: C = beta·C */
        rlpi_gemm gm = {.m = m, .n = n, .k = 0, .alpha = 1.0f, .beta = 2.0f, .batch = batch,
                        .a = {a.buf[b], GUARD, 1, 0}, .b = {bm.buf[b], GUARD, n, 0}, .c = {c.buf[b], GUARD, n, m * n}};
        OK(rlpi_gemm_f32(be[b], &gm));
    }
    compare("gemm: k = 0, beta 2", &c, 0);
    twin c2 = twin_new((size_t)(m * n));
    for (int b = 0; b < 2; b++) { /* k = 0, beta = 0 over NaN: zeros */
        rlpi_gemm gm = {.m = m, .n = n, .k = 0, .alpha = 1.0f, .beta = 0.0f, .batch = 1,
                        .a = {a.buf[b], GUARD, 1, 0}, .b = {bm.buf[b], GUARD, n, 0}, .c = {c2.buf[b], GUARD, n, 0}};
        OK(rlpi_gemm_f32(be[b], &gm));
    }
    compare("gemm: k = 0, beta 0 over NaN", &c2, 0);
    twin_free(&a);
    twin_free(&bm);
    twin_free(&c);
    twin_free(&c2);
}

/* ------------------------------------------------------ GEMM precisions */

/* bf16 (8 significant bits) against fp32: up to 2^-7 of Σ|a·b| per element
 * in the worst case; random rounding errors mostly cancel, so measured in
 * |ref| + rms units they stay several times below these bounds */
#define BF16_VS_FP32 3e-2
#define TF32_VS_FP32 4e-3

static void set_matmul(int cpu, int gpu)
{
    be[0]->matmul = cpu;
    be[1]->matmul = gpu;
}

/* C = alpha·op(A)·op(B) + beta·C on both backends (each in its own
 * precision), C starting from `c0` (NULL: NaN, for beta = 0). */
static void gemm_both(const rlpi_gemm *shape, twin *a, twin *b, twin *c, const float *c0)
{
    if (c0)
        twin_set(c, c0);
    else
        for (int k = 0; k < 2; k++)
            OK(rlpi_buffer_fill_f32(c->buf[k], GUARD, c->n, NAN));
    for (int k = 0; k < 2; k++) {
        rlpi_gemm g = *shape;
        g.a.buf = a->buf[k];
        g.b.buf = b->buf[k];
        g.c.buf = c->buf[k];
        OK(rlpi_gemm_f32(be[k], &g));
    }
}

static void test_gemm_precisions(void)
{
    printf("gemm in bf16 and tf32\n");
    double worst_same = 0, worst_bf16 = 0, worst_tf32 = 0;
    for (int rep = 0; rep < 12; rep++) {
        int ta = rep & 1, tb = (rep >> 1) & 1, broadcast = rep % 3 == 2;
        int64_t m = 1 + (int64_t)rlpi_rng_below(&rng, 90), n = 1 + (int64_t)rlpi_rng_below(&rng, 90);
        int64_t k = 1 + (int64_t)rlpi_rng_below(&rng, 200), batch = 1 + (int64_t)rlpi_rng_below(&rng, 3);
        int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        int64_t lda = ac + (int64_t)rlpi_rng_below(&rng, 3), ldb = bc + (int64_t)rlpi_rng_below(&rng, 3);
        int64_t ldc = n + (int64_t)rlpi_rng_below(&rng, 3);
        int64_t sa = ar * lda + (int64_t)rlpi_rng_below(&rng, 2), sb = broadcast ? 0 : br * ldb + 1;
        int64_t sc = m * ldc;
        float alpha = rep % 4 == 3 ? -0.5f : 1.0f, beta = rep % 2 ? 0.5f : 0.0f;
        twin a = twin_rand((size_t)((batch - 1) * sa + ar * lda), -1, 1);
        twin b = twin_rand((size_t)((broadcast ? 0 : batch - 1) * sb + br * ldb), -1, 1);
        twin c = twin_new((size_t)(batch * sc));
        float *c0 = rand_vec(c.n, -2, 2); /* padding included; beta = 0 over NaN: test_gemm_edges */
        rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                       .batch = batch, .a = {NULL, GUARD, lda, sa}, .b = {NULL, GUARD, ldb, sb},
                       .c = {NULL, GUARD, ldc, sc}};
        char what[160];
        snprintf(what, sizeof what, "bf16 %c%c %lldx%lldx%lld b%lld%s", ta ? 'T' : 'N', tb ? 'T' : 'N',
                 (long long)m, (long long)n, (long long)k, (long long)batch, broadcast ? " bcast B" : "");
        set_matmul(RLP_MATMUL_BF16, RLP_MATMUL_BF16);
        gemm_both(&g, &a, &b, &c, c0);
        worst_same = fmax(worst_same, compare(what, &c, 1e-5 * sqrt((double)k)) / sqrt((double)k));
        set_matmul(RLP_MATMUL_FP32, RLP_MATMUL_BF16);
        gemm_both(&g, &a, &b, &c, c0);
        snprintf(what, sizeof what, "bf16 vs fp32");
        worst_bf16 = fmax(worst_bf16, compare(what, &c, BF16_VS_FP32));
        set_matmul(RLP_MATMUL_FP32, RLP_MATMUL_TF32);
        gemm_both(&g, &a, &b, &c, c0);
        snprintf(what, sizeof what, "tf32 vs fp32");
        worst_tf32 = fmax(worst_tf32, compare(what, &c, TF32_VS_FP32));
        set_matmul(RLP_MATMUL_FP32, RLP_MATMUL_FP32);
        free(c0);
        twin_free(&a);
        twin_free(&b);
        twin_free(&c);
    }
    printf("  worst: bf16 vs bf16 %.2e·sqrt(k) (tol 1e-5), bf16 vs fp32 %.2e (tol %.0e, must exceed 1e-4), "
           "tf32 vs fp32 %.2e (tol %.0e, must exceed 1e-5)\n",
           worst_same, worst_bf16, BF16_VS_FP32, worst_tf32, TF32_VS_FP32);
    EXPECT(worst_bf16 > 1e-4, "bf16 GEMMs on the GPU look unrounded (%.2e)", worst_bf16);
    EXPECT(worst_tf32 > 1e-5, "tf32 GEMMs on the GPU look unrounded (%.2e)", worst_tf32);

    /* the conversion, bit for bit: C (N, 1) = A (N, 1)·[1] gives A rounded */
    static const uint32_t special[] = {
        0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf818000u, 0x40490fdbu, /* ties, near ties, pi */
        0x7f7fffffu, 0x7f7f7fffu, 0x7f800000u, 0xff800000u, 0x7fc00001u,              /* overflow, Inf, NaN */
        0x00018000u, 0x00008000u, 0x0000ffffu, 0x807fffffu, 0x00000001u,              /* subnormals */
    };
    enum { NS = sizeof special / sizeof special[0] };
    float av[NS], one = 1.0f, got[NS];
    for (int i = 0; i < NS; i++)
        av[i] = rlpi_bits_to_f32(special[i]);
    twin a = twin_new(NS), b = twin_new(1), c = twin_new(NS);
    twin_set(&a, av);
    twin_set(&b, &one);
    rlpi_gemm g = {.m = NS, .n = 1, .k = 1, .alpha = 1, .beta = 0, .batch = 1,
                   .a = {NULL, GUARD, 1, 0}, .b = {NULL, GUARD, 1, 0}, .c = {NULL, GUARD, 1, 0}};
    set_matmul(RLP_MATMUL_BF16, RLP_MATMUL_BF16);
    gemm_both(&g, &a, &b, &c, NULL);
    twin_get(&c, 1, got);
    int bad = 0;
    for (int i = 0; i < NS; i++) {
        float want = rlpi_f32_round_bf16(av[i]);
        if (isnan(want) ? !isnan(got[i]) : got[i] != want) {
            printf("    0x%08x rounded to 0x%08x on the GPU, round to nearest even gives 0x%08x\n", special[i],
                   rlpi_f32_to_bits(got[i]), rlpi_f32_to_bits(want));
            bad++;
        }
    }
    printf("  bf16 rounding of %d special values (ties, Inf, NaN, overflow, subnormals): %s\n", NS,
           bad ? "FAIL" : "round to nearest even, bit for bit");
    failures += bad != 0;
    twin_free(&a);
    twin_free(&b);
    twin_free(&c);

    printf("gemm edge cases in bf16\n");
    test_gemm_edges();
    set_matmul(RLP_MATMUL_FP32, RLP_MATMUL_FP32);
}

static void test_unsupported_head_dim(void)
{
    const int64_t hd = 264, n = 3, ss[2] = {0, 3};
    twin q = twin_rand((size_t)(n * hd), -1, 1), out = twin_new((size_t)(n * hd)), lse = twin_new((size_t)n);
    int rc = rlpi_op_attention_fwd(be[1], R(&out, 1), R(&lse, 1), R(&q, 1), R(&q, 1), R(&q, 1), ss, 1, n, 1, 1, hd, DEF_SCALE(hd), 0);
    printf("attention with head_dim %lld on the GPU: %s\n", (long long)hd, rlp_error_last());
    EXPECT(rc == RLP_E_UNSUPPORTED, "returned %d", rc);
    twin_free(&q);
    twin_free(&out);
    twin_free(&lse);
}

int main(void)
{
    if (rlpi_backend_cuda_device_count() == 0) {
        printf("skipped: no usable GPU: %s\n", rlp_error_last());
        return 77;
    }
    OK(rlpi_backend_cpu_create(&be[0], 2));
    OK(rlpi_backend_cuda_create(&be[1], 0));
    printf("reference %s\nagainst   %s\n", be[0]->description, be[1]->description);
    rlpi_rng_seed(&rng, 20250611, 0);

    test_embedding(237, 96, 1000, 1000);
    test_embedding(300, 576, 4099, 17); /* many repeated ids: colliding atomics */
    test_rmsnorm(237, 100);
    test_rmsnorm(65, 2048);
    test_rope(237, 6, 64);
    test_rope(100, 4, 32);
    test_rope(19, 3, 16);

    /* lengths: 1, partial tiles, several tiles of 64 */
    const int64_t lens_a[] = {37, 1, 64, 130, 5}, lens_b[] = {1, 65, 200}, lens_c[] = {3, 17, 1};
    test_attention(lens_a, 5, 6, 2, 64);  /* group 3 */
    test_attention(lens_a, 5, 4, 4, 32);  /* group 1 */
    test_attention(lens_b, 3, 2, 1, 128); /* group 2 */
    test_attention(lens_c, 3, 4, 2, 16);  /* the policy test's shape */
    test_attention(lens_b, 3, 3, 1, 80);  /* padded to the 128 tiles */
    test_attention(lens_c, 3, 2, 2, 256);
    {
        /* 300 sequences: more than one launch's table (256) */
        int64_t many[300];
        for (int i = 0; i < 300; i++)
            many[i] = 1 + i % 4;
        test_attention(many, 300, 2, 1, 32);
    }

    {
        /* one-token decode at the start and deep into a slot, a prefill
         * chunk, a prompt prefill */
        const int64_t rows[] = {1, 1, 7, 1, 40}, slot[] = {3, 0, 4, 1, 2}, past[] = {0, 257, 20, 99, 0};
        test_attention_cached(rows, slot, past, 5, 5, 300, 6, 2, 64);
        test_attention_cached(rows, slot, past, 5, 5, 300, 4, 4, 32);
        test_attention_cached(rows, slot, past, 5, 5, 300, 2, 1, 128);
        test_attention_cached(rows, slot, past, 5, 5, 300, 4, 2, 16);
        test_attention_cached(rows, slot, past, 5, 5, 300, 2, 2, 256);
        /* 150 sequences decoding at once: more than one launch's table (128) */
        int64_t r2[150], s2[150], p2[150];
        for (int i = 0; i < 150; i++) {
            r2[i] = 1 + (i % 7 == 0);
            s2[i] = 149 - i;
            p2[i] = i % 13;
        }
        test_attention_cached(r2, s2, p2, 150, 150, 16, 3, 1, 64);
    }

    test_elementwise(100003, 237, 100);
    test_elementwise(4099, 5000, 33); /* many rows: several column-sum splits */
    test_logprob(37, 1003, 1.0f, 1);
    test_logprob(9, 49159, 1.0f / 0.7f, 1);
    test_logprob(5, 300, 1.0f, 0);
    emulated = strstr(be[1]->description, "emulator") != NULL;
    /* u = 0, u just below 1, then random ones; the emulator spends about
     * 1.3 ms per draw, so it gets fewer u and a thinner grid at 49152 */
    test_sample(1, emulated ? 3 : 8, 1);
    test_sample(7, emulated ? 3 : 8, 1);
    test_sample(300, emulated ? 4 : 16, 1);
    test_sample(49152, emulated ? 2 : 16, !emulated);
    test_sample_errors();
    printf("sample: %ld draws, %ld within %g of a CDF boundary, max |logprob diff| %.3g\n", samp.draws,
           samp.boundary, SAMPLE_U_EPS, samp.max_lp_diff);
    test_sum_squares(1000003);
    test_sum_squares(7);
    test_adamw(10007);
    test_gemm_edges();
    test_gemm_precisions();
    test_unsupported_head_dim();

    rlpi_backend_destroy(be[1]);
    rlpi_backend_destroy(be[0]);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("every op of the CUDA backend matches the CPU backend\n");
    return 0;
}
