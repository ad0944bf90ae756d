/* The CUDA ops that Qwen3 and Gemma 3 added (attention with a softmax scale
 * and a sliding window, GeGLU, logit soft-capping) against a reference
 * computed here in double precision, on the GPU alone (the CPU backend is
 * not the reference: it is being taught the same ops in parallel).
 *
 * Attention cases: packed sequences of lengths 1, partial tiles and several
 * tiles, longer than the window, one of 600 tokens, 300 short ones (more
 * than one launch's sequence table); windows 1, 3, 16, 70 and one longer than
 * every sequence (the same as none); GQA groups 1, 2 and 3; head dims 16,
 * 64, 80 and 256 (256 has 32-key tiles, so with a short window a late row
 * of a query tile sees no key of the first key tile: the online softmax
 * must start from an empty state without NaN); a non-default scale. The
 * cached variant decodes and prefills against KV-cache slots whose rows
 * before every query's window hold NaN: a kernel that read them, rather
 * than skipping them, returns NaN.
 *
 * Outputs start as NaN and sit between sentinel guards, so an element a
 * kernel forgets or writes out of place fails. An element passes when
 * |gpu − ref| ≤ tol·(|ref| + rms(ref)) (rms over the tensor: elements near
 * zero judged at the tensor's scale). Tolerances (fp32 kernels against
 * double; the largest errors seen on the emulator are about 10× smaller):
 *   ATT_TOL    1e-5  attention forward (out, lse), cached attention
 *   ATT_BWD_TOL 3e-5 attention backward (dq, dk, dv: differences of
 *                    softmax-weighted sums; P recomputed from the fp32 lse)
 *   EW_TOL     1e-5  GeGLU forward/backward (tanhf within 2 ulp; the
 *                    backward's 1 − t² loses digits where |t| → 1, where
 *                    the term is small against the tensor's rms)
 *   CAP_TOL    1e-6  soft-cap forward and backward (the backward from the
 *                    GPU's own capped values, as the op is specified)
 * Also: windowed attention gives the same bits on a second run, and
 * invalid scale, window and cap are refused with RLP_E_INVALID_ARG.
 * Exits 77 (skipped) where no GPU is visible. */
#include "backend/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "gpu_test_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATT_TOL 1e-5
#define ATT_BWD_TOL 3e-5
#define EW_TOL 1e-5
#define CAP_TOL 1e-6

static rlpi_backend *be;
static rlpi_rng rng;
static int failures;

/* rc must be `want`; the message names the call */
#define EXPECT_RC(rc, want, ...)                                                    \
    do {                                                                            \
        printf("  ");                                                               \
        printf(__VA_ARGS__);                                                        \
        if ((rc) != (want)) {                                                       \
            failures++;                                                             \
            printf(": FAIL, returned %d\n", (rc));                                  \
        } else {                                                                    \
            printf(": refused (%s)\n", rlp_error_last());                           \
        }                                                                           \
    } while (0)

/* ------------------------------------------------------- device tensors */

#define GUARD 5
#define SENTINEL (-7777.25f)

/* n floats on the GPU at element GUARD of a buffer, sentinels around */
typedef struct dev {
    rlpi_buffer *buf;
    size_t n;
} dev;

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        DIE("out of memory");
    return p;
}

/* a device tensor holding vals, or NaN where vals is NULL */
static dev dev_new(size_t n, const float *vals)
{
    dev t = {.n = n};
    size_t total = n + 2 * GUARD;
    float *h = xmalloc(total * sizeof *h);
    for (size_t i = 0; i < total; i++)
        h[i] = i < GUARD || i >= GUARD + n ? SENTINEL : vals ? vals[i - GUARD] : NAN;
    OK(rlpi_buffer_alloc(be, total * 4, &t.buf));
    OK(rlpi_buffer_upload(t.buf, 0, h, total * 4));
    free(h);
    return t;
}

static rlpi_ref R(dev *t)
{
    return RLPI_REF(t->buf, GUARD);
}

static float *dev_get(dev *t)
{
    float *h = xmalloc(t->n * sizeof *h);
    OK(rlpi_buffer_download(t->buf, GUARD * 4, h, t->n * 4));
    return h;
}

static int guards_ok(dev *t)
{
    float g[GUARD];
    for (int side = 0; side < 2; side++) {
        OK(rlpi_buffer_download(t->buf, (side ? GUARD + t->n : 0) * 4, g, sizeof g));
        for (int i = 0; i < GUARD; i++)
            if (g[i] != SENTINEL)
                return 0;
    }
    return 1;
}

static float *rand_vec(size_t n, float lo, float hi)
{
    float *v = xmalloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (float)rlpi_rng_f64(&rng);
    return v;
}

/* the GPU tensor against ref (double, n values): see the header for the
 * criterion, with rms raised to `floor` where the reference is (nearly)
 * all zeros; returns the largest error in units of |ref| + rms */
static double compare_floor(const char *what, dev *t, const double *ref, double tol, double floor)
{
    float *g = dev_get(t);
    size_t n = t->n, bad = 0, first = 0;
    double ss = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        ss += ref[i] * ref[i];
    double rms = fmax(n ? sqrt(ss / (double)n) : 0, floor);
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - ref[i]), scale = fabs(ref[i]) + rms;
        if (!(err <= tol * scale)) {
            if (!bad)
                first = i;
            bad++;
        }
        double r = scale > 0 ? err / scale : (err > 0 ? INFINITY : 0);
        if (r > worst || isnan(r))
            worst = r;
    }
    int guards = guards_ok(t);
    printf("  %-44s n=%-8zu max err %.2e of |ref|+rms (tol %.0e) %s\n", what, n, worst, tol,
           bad || !guards ? "FAIL" : "ok");
    if (bad) {
        failures++;
        printf("    %zu elements off; first at %zu: ref %.9g gpu %.9g (rms %.3g)\n", bad, first, ref[first],
               (double)g[first], rms);
    }
    if (!guards) {
        failures++;
        printf("    the GPU wrote outside the tensor\n");
    }
    free(g);
    return worst;
}

static double compare(const char *what, dev *t, const double *ref, double tol)
{
    return compare_floor(what, t, ref, tol, 0);
}

static void same_bits(const char *what, dev *t, const float *before)
{
    float *g = dev_get(t);
    int same = memcmp(g, before, t->n * sizeof *g) == 0;
    printf("  %-44s %s\n", what, same ? "same bits on a second run" : "FAIL: differs on a second run");
    failures += !same;
    free(g);
}

/* ------------------------------------------------ attention (reference) */

/* Forward and backward of one (sequence, head) in double, straight from
 * the definition: S = scale·Q Kᵀ over the visible keys, P = softmax(S),
 * O = P V, lse = log Σ e^S; dV = Pᵀ dO, dP = dO Vᵀ, dS = P∘(dP − rowsum(P∘dP)),
 * dQ = scale·dS K, dK = scale·dSᵀ Q. The backward (dout non-NULL)
 * accumulates into dq/dk/dv. */
typedef struct att_case {
    const int64_t *ss;
    int64_t n_seq, n, H, KV, hd, window;
    float scale;
} att_case;

static int visible(int64_t i, int64_t j, int64_t w)
{
    return j <= i && (w == 0 || i - j < w);
}

static void ref_attention(const att_case *c, const float *q, const float *k, const float *v, const float *dout,
                          double *out, double *lse, double *dq, double *dk, double *dv)
{
    const int64_t H = c->H, KV = c->KV, hd = c->hd, group = H / KV;
    int64_t max_len = 1;
    for (int64_t s = 0; s < c->n_seq; s++)
        if (c->ss[s + 1] - c->ss[s] > max_len)
            max_len = c->ss[s + 1] - c->ss[s];
    double *p = xmalloc((size_t)max_len * sizeof *p), *dp = xmalloc((size_t)max_len * sizeof *dp);
    for (int64_t s = 0; s < c->n_seq; s++)
        for (int64_t i = c->ss[s]; i < c->ss[s + 1]; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t kvh = h / group, j0 = c->ss[s];
                const float *qi = q + (i * H + h) * hd;
                double m = -INFINITY;
                for (int64_t j = j0; j <= i; j++) {
                    if (!visible(i, j, c->window)) {
                        p[j - j0] = -INFINITY;
                        continue;
                    }
                    const float *kj = k + (j * KV + kvh) * hd;
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += (double)qi[e] * kj[e];
                    p[j - j0] = d * c->scale;
                    m = fmax(m, p[j - j0]);
                }
                double l = 0;
                for (int64_t j = j0; j <= i; j++)
                    l += p[j - j0] = exp(p[j - j0] - m);
                for (int64_t j = j0; j <= i; j++)
                    p[j - j0] /= l;
                if (!dout) {
                    lse[h * c->n + i] = m + log(l);
                    for (int64_t e = 0; e < hd; e++) {
                        double o = 0;
                        for (int64_t j = j0; j <= i; j++)
                            o += p[j - j0] * v[(j * KV + kvh) * hd + e];
                        out[(i * H + h) * hd + e] = o;
                    }
                    continue;
                }
                const float *doi = dout + (i * H + h) * hd;
                double D = 0;
                for (int64_t j = j0; j <= i; j++) {
                    const float *vj = v + (j * KV + kvh) * hd;
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += (double)doi[e] * vj[e];
                    dp[j - j0] = d;
                    D += p[j - j0] * d;
                }
                for (int64_t j = j0; j <= i; j++) {
                    const double pj = p[j - j0], ds = pj * (dp[j - j0] - D) * c->scale;
                    if (pj == 0)
                        continue;
                    const float *kj = k + (j * KV + kvh) * hd;
                    for (int64_t e = 0; e < hd; e++) {
                        dq[(i * H + h) * hd + e] += ds * kj[e];
                        dk[(j * KV + kvh) * hd + e] += ds * qi[e];
                        dv[(j * KV + kvh) * hd + e] += pj * doi[e];
                    }
                }
            }
    free(p);
    free(dp);
}

static void test_attention(const int64_t *lens, int64_t n_seq, int64_t H, int64_t KV, int64_t hd, int64_t window,
                           float scale, int twice)
{
    int64_t *ss = xmalloc((size_t)(n_seq + 1) * sizeof *ss);
    ss[0] = 0;
    for (int64_t s = 0; s < n_seq; s++)
        ss[s + 1] = ss[s] + lens[s];
    const int64_t n = ss[n_seq];
    att_case c = {.ss = ss, .n_seq = n_seq, .n = n, .H = H, .KV = KV, .hd = hd, .window = window, .scale = scale};
    printf("attention %lld sequences (%lld tokens) H=%lld KV=%lld head_dim=%lld window=%lld scale=%g\n",
           (long long)n_seq, (long long)n, (long long)H, (long long)KV, (long long)hd, (long long)window,
           (double)scale);
    const size_t nq = (size_t)(n * H * hd), nkv = (size_t)(n * KV * hd), nl = (size_t)(n * H);
    /* q·k·scale of standard deviation about 4/3·(scale·√hd): peaked, not one-hot */
    float *qv = rand_vec(nq, -2, 2), *kv = rand_vec(nkv, -2, 2), *vv = rand_vec(nkv, -1, 1);
    float *dov = rand_vec(nq, -1, 1);
    dev q = dev_new(nq, qv), k = dev_new(nkv, kv), v = dev_new(nkv, vv), dout = dev_new(nq, dov);
    dev out = dev_new(nq, NULL), lse = dev_new(nl, NULL);
    dev dq = dev_new(nq, NULL), dk = dev_new(nkv, NULL), dv = dev_new(nkv, NULL);
    double *ro = xmalloc(nq * sizeof *ro), *rl = xmalloc(nl * sizeof *rl);
    double *rdq = calloc(nq, sizeof *rdq), *rdk = calloc(nkv, sizeof *rdk), *rdv = calloc(nkv, sizeof *rdv);
    if (!rdq || !rdk || !rdv)
        DIE("out of memory");
    ref_attention(&c, qv, kv, vv, NULL, ro, rl, NULL, NULL, NULL);
    ref_attention(&c, qv, kv, vv, dov, NULL, NULL, rdq, rdk, rdv);

    OK(rlpi_op_attention_fwd(be, R(&out), R(&lse), R(&q), R(&k), R(&v), ss, n_seq, n, H, KV, hd, scale, window));
    compare("attention forward: out", &out, ro, ATT_TOL);
    compare("attention forward: lse", &lse, rl, ATT_TOL);
    /* the backward from the GPU's own out and lse, as in training */
    OK(rlpi_op_attention_bwd(be, R(&dq), R(&dk), R(&dv), R(&dout), R(&q), R(&k), R(&v), R(&out), R(&lse), ss, n_seq,
                             n, H, KV, hd, scale, window));
    /* with window 1 every P is 1 and dq, dk are exactly 0: the GPU's are the
     * rounding difference of dO·V and dO·O, judged at the inputs' unit scale */
    const double floor = window == 1 ? 1.0 : 0.0;
    compare_floor("attention backward: dq", &dq, rdq, ATT_BWD_TOL, floor);
    compare_floor("attention backward: dk", &dk, rdk, ATT_BWD_TOL, floor);
    compare("attention backward: dv", &dv, rdv, ATT_BWD_TOL);
    if (twice) {
        float *o1 = dev_get(&out), *l1 = dev_get(&lse), *g1 = dev_get(&dq), *g2 = dev_get(&dk), *g3 = dev_get(&dv);
        OK(rlpi_op_attention_fwd(be, R(&out), R(&lse), R(&q), R(&k), R(&v), ss, n_seq, n, H, KV, hd, scale,
                                 window));
        OK(rlpi_op_attention_bwd(be, R(&dq), R(&dk), R(&dv), R(&dout), R(&q), R(&k), R(&v), R(&out), R(&lse), ss,
                                 n_seq, n, H, KV, hd, scale, window));
        same_bits("attention forward: out", &out, o1);
        same_bits("attention forward: lse", &lse, l1);
        same_bits("attention backward: dq", &dq, g1);
        same_bits("attention backward: dk", &dk, g2);
        same_bits("attention backward: dv", &dv, g3);
        free(o1);
        free(l1);
        free(g1);
        free(g2);
        free(g3);
    }
    dev *all[] = {&q, &k, &v, &dout, &out, &lse, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        rlpi_buffer_free(all[i]->buf);
    void *host[] = {qv, kv, vv, dov, ro, rl, rdq, rdk, rdv, ss};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* rows[s] new query rows of sequence s in slot slot[s] after past[s] rows;
 * cache rows that no query of their sequence can see (before the window
 * of its first new row) are NaN */
static void test_attention_cached(const int64_t *rows, const int64_t *slot, const int64_t *past, int64_t n_seq,
                                  int64_t n_slots, int64_t capacity, int64_t H, int64_t KV, int64_t hd,
                                  int64_t window, float scale)
{
    int64_t *qs = xmalloc((size_t)(n_seq + 1) * sizeof *qs);
    qs[0] = 0;
    for (int64_t s = 0; s < n_seq; s++)
        qs[s + 1] = qs[s] + rows[s];
    const int64_t n = qs[n_seq], row = KV * hd, stride = capacity * row;
    printf("cached attention %lld sequences (%lld rows) in %lld slots of %lld, H=%lld KV=%lld head_dim=%lld "
           "window=%lld scale=%g\n",
           (long long)n_seq, (long long)n, (long long)n_slots, (long long)capacity, (long long)H, (long long)KV,
           (long long)hd, (long long)window, (double)scale);
    const size_t ncache = (size_t)(n_slots * stride), nq = (size_t)(n * H * hd);
    float *kc = rand_vec(ncache, -2, 2), *vc = rand_vec(ncache, -1, 1), *qv = rand_vec(nq, -2, 2);
    int64_t poisoned = 0;
    if (window > 0)
        for (int64_t s = 0; s < n_seq; s++)
            for (int64_t j = 0; j < past[s] - window + 1; j++, poisoned++)
                for (int64_t e = 0; e < row; e++)
                    kc[slot[s] * stride + j * row + e] = vc[slot[s] * stride + j * row + e] = NAN;
    double *ref = xmalloc(nq * sizeof *ref), *p = xmalloc((size_t)capacity * sizeof *p);
    for (int64_t s = 0; s < n_seq; s++)
        for (int64_t i = qs[s]; i < qs[s + 1]; i++)
            for (int64_t h = 0; h < H; h++) {
                const int64_t pos = past[s] + i - qs[s], kvh = h / (H / KV);
                const int64_t j0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
                const float *K = kc + slot[s] * stride + kvh * hd, *V = vc + slot[s] * stride + kvh * hd;
                const float *qi = qv + (i * H + h) * hd;
                double m = -INFINITY, l = 0;
                for (int64_t j = j0; j <= pos; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += (double)qi[e] * K[j * row + e];
                    p[j] = d * scale;
                    m = fmax(m, p[j]);
                }
                for (int64_t j = j0; j <= pos; j++)
                    l += p[j] = exp(p[j] - m);
                for (int64_t e = 0; e < hd; e++) {
                    double o = 0;
                    for (int64_t j = j0; j <= pos; j++)
                        o += p[j] * V[j * row + e];
                    ref[(i * H + h) * hd + e] = o / l;
                }
            }
    dev dkc = dev_new(ncache, kc), dvc = dev_new(ncache, vc), q = dev_new(nq, qv), out = dev_new(nq, NULL);
    OK(rlpi_op_attention_cached(be, R(&out), R(&q), R(&dkc), R(&dvc), qs, slot, past, n_seq, n, n_slots, stride, H,
                                KV, hd, scale, window));
    char what[96];
    snprintf(what, sizeof what, "cached attention (%lld NaN rows unread)", (long long)poisoned);
    compare(what, &out, ref, ATT_TOL);
    dev *all[] = {&dkc, &dvc, &q, &out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        rlpi_buffer_free(all[i]->buf);
    void *host[] = {kc, vc, qv, ref, p, qs};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* ----------------------------------------------------------- elementwise */

static double gelu_tanh(double x, double *deriv)
{
    const double c = sqrt(2.0 / M_PI), a = 0.044715, t = tanh(c * (x + a * x * x * x));
    *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x);
    return 0.5 * x * (1 + t);
}

static void test_geglu(int64_t n)
{
    printf("geglu n=%lld\n", (long long)n);
    float *g = rand_vec((size_t)n, -12, 12), *u = rand_vec((size_t)n, -2, 2), *d = rand_vec((size_t)n, -1, 1);
    g[0] = 0.0f; /* and a few special points */
    g[1] = -40.0f;
    g[2] = 40.0f;
    double *ry = xmalloc((size_t)n * sizeof *ry), *rdg = xmalloc((size_t)n * sizeof *rdg);
    double *rdu = xmalloc((size_t)n * sizeof *rdu);
    for (int64_t i = 0; i < n; i++) {
        double dgelu, ge = gelu_tanh(g[i], &dgelu);
        ry[i] = ge * u[i];
        rdg[i] = (double)d[i] * u[i] * dgelu;
        rdu[i] = (double)d[i] * ge;
    }
    dev G = dev_new((size_t)n, g), U = dev_new((size_t)n, u), D = dev_new((size_t)n, d);
    dev Y = dev_new((size_t)n, NULL), DG = dev_new((size_t)n, NULL), DU = dev_new((size_t)n, NULL);
    OK(rlpi_op_geglu_fwd(be, R(&Y), R(&G), R(&U), n));
    OK(rlpi_op_geglu_bwd(be, R(&DG), R(&DU), R(&D), R(&G), R(&U), n));
    compare("geglu forward", &Y, ry, EW_TOL);
    compare("geglu backward: dgate", &DG, rdg, EW_TOL);
    compare("geglu backward: dup", &DU, rdu, EW_TOL);
    dev *all[] = {&G, &U, &D, &Y, &DG, &DU};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        rlpi_buffer_free(all[i]->buf);
    void *host[] = {g, u, d, ry, rdg, rdu};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void test_softcap(int64_t n, float cap)
{
    printf("softcap n=%lld cap=%g\n", (long long)n, (double)cap);
    /* from well inside the linear range to deep saturation */
    float *x = rand_vec((size_t)n, -4 * cap, 4 * cap), *dx = rand_vec((size_t)n, -1, 1);
    double *ry = xmalloc((size_t)n * sizeof *ry), *rdx = xmalloc((size_t)n * sizeof *rdx);
    for (int64_t i = 0; i < n; i++)
        ry[i] = cap * tanh((double)x[i] / cap);
    dev X = dev_new((size_t)n, x), DX = dev_new((size_t)n, dx);
    OK(rlpi_op_softcap_fwd(be, R(&X), n, cap));
    compare("softcap forward (in place)", &X, ry, CAP_TOL);
    float *y = dev_get(&X); /* the backward's contract: from the capped values */
    for (int64_t i = 0; i < n; i++) {
        double r = (double)y[i] / cap;
        rdx[i] = dx[i] * (1 - r * r);
    }
    OK(rlpi_op_softcap_bwd(be, R(&DX), R(&X), n, cap));
    compare("softcap backward (in place)", &DX, rdx, CAP_TOL);
    rlpi_buffer_free(X.buf);
    rlpi_buffer_free(DX.buf);
    void *host[] = {x, dx, ry, rdx, y};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* invalid scale, window and cap: refused before any kernel runs */
static void test_invalid(void)
{
    printf("invalid arguments\n");
    const int64_t ss[2] = {0, 4}, hd = 16;
    dev q = dev_new(4 * hd, NULL), lse = dev_new(4, NULL);
    const float bad_scale[] = {0.0f, -1.0f, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_scale / sizeof *bad_scale; i++) {
        int rc = rlpi_op_attention_fwd(be, R(&q), R(&lse), R(&q), R(&q), R(&q), ss, 1, 4, 1, 1, hd, bad_scale[i], 0);
        EXPECT_RC(rc, RLP_E_INVALID_ARG, "attention with scale %g", (double)bad_scale[i]);
    }
    int rc = rlpi_op_attention_fwd(be, R(&q), R(&lse), R(&q), R(&q), R(&q), ss, 1, 4, 1, 1, hd, 0.25f, -1);
    EXPECT_RC(rc, RLP_E_INVALID_ARG, "attention with window -1");
    rc = rlpi_op_attention_bwd(be, R(&q), R(&q), R(&q), R(&q), R(&q), R(&q), R(&q), R(&q), R(&lse), ss, 1, 4, 1, 1, hd,
                               0.25f, -3);
    EXPECT_RC(rc, RLP_E_INVALID_ARG, "attention backward with window -3");
    const int64_t slot = 0, past = 0;
    rc = rlpi_op_attention_cached(be, R(&q), R(&q), R(&q), R(&q), ss, &slot, &past, 1, 4, 1, 4 * hd, 1, 1, hd, 0.0f,
                                  0);
    EXPECT_RC(rc, RLP_E_INVALID_ARG, "cached attention with scale 0");
    rc = rlpi_op_softcap_fwd(be, R(&q), 4, 0.0f);
    EXPECT_RC(rc, RLP_E_INVALID_ARG, "softcap with cap 0");
    rc = rlpi_op_softcap_bwd(be, R(&q), R(&q), 4, -30.0f);
    EXPECT_RC(rc, RLP_E_INVALID_ARG, "softcap backward with cap -30");
    rlpi_buffer_free(q.buf);
    rlpi_buffer_free(lse.buf);
}

int main(void)
{
    if (rlpi_backend_cuda_device_count() == 0) {
        printf("skipped: no usable GPU: %s\n", rlp_error_last());
        return 77;
    }
    OK(rlpi_backend_cuda_create(&be, 0));
    printf("testing %s against a double-precision reference\n", be->description);
    rlpi_rng_seed(&rng, 20261204, 0);

    /* lengths: 1, partial tiles, several tiles of 64, all longer than most windows */
    const int64_t lens_a[] = {37, 1, 64, 130, 5}, lens_b[] = {1, 65, 100}, lens_c[] = {3, 17, 1, 9};
    test_attention(lens_a, 5, 6, 2, 64, 16, 1.0f / sqrtf(64.0f), 1); /* group 3, window inside a tile */
    test_attention(lens_a, 5, 6, 2, 64, 0, 0.0625f, 0);               /* a non-default scale, no window */
    test_attention(lens_b, 3, 2, 1, 256, 3, 1.0f / 16.0f, 0);         /* 32-key tiles, late rows see none */
    test_attention(lens_b, 3, 4, 4, 16, 70, 0.3f, 0);                 /* a window longer than a tile */
    test_attention(lens_b, 3, 3, 1, 80, 1, 0.1f, 0);                  /* every query sees only itself */
    test_attention(lens_c, 4, 4, 2, 16, 1000, 0.25f, 0);              /* a window no sequence reaches */
    {
        /* one long sequence (many tiles outside every query tile's window),
         * and 300 short ones: more than one launch's table (256) */
        const int64_t long_seq[] = {600};
        test_attention(long_seq, 1, 2, 1, 64, 16, 0.125f, 0);
        int64_t many[300];
        for (int i = 0; i < 300; i++)
            many[i] = 1 + i % 7;
        test_attention(many, 300, 2, 1, 32, 3, 0.2f, 0);
    }

    {
        /* decode at the start, inside and past the window; a prefill
         * chunk crossing the window; a prompt prefill longer than it */
        const int64_t rows[] = {1, 1, 7, 1, 40}, slot[] = {3, 0, 4, 1, 2}, past[] = {0, 57, 20, 99, 0};
        test_attention_cached(rows, slot, past, 5, 5, 120, 6, 2, 64, 16, 1.0f / 8.0f);
        test_attention_cached(rows, slot, past, 5, 5, 120, 4, 4, 256, 5, 0.0625f);
        test_attention_cached(rows, slot, past, 5, 5, 120, 2, 1, 16, 0, 0.3f);
        test_attention_cached(rows, slot, past, 5, 5, 120, 4, 2, 80, 1, 0.2f);
    }

    test_geglu(100003);
    test_softcap(100003, 30.0f);
    test_softcap(4099, 50.0f);
    test_invalid();

    rlpi_backend_destroy(be);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("the CUDA backend's windowed and scaled attention, GeGLU and soft-capping match the reference\n");
    return 0;
}
