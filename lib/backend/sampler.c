/* Token sampling from one row of logits (see sampler.h): temperature,
 * top-k, top-p and min-p in Hugging Face's warper order, the behaviour
 * logprob of the drawn token, and a counter-based uniform. Host arrays
 * only, no allocation beyond the caller's scratch, no global state; it must
 * not sort the whole vocabulary (up to ~152k entries per token). */
#include "backend/sampler.h"

#include "core/error.h"
#include "rlpost.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Parameters and scratch                                                   */
/* ------------------------------------------------------------------------ */

int rlpi_sampler_params_check(const rlpi_sampler_params *p)
{
    RLPI_CHECK_ARG(p, "params is NULL");
    if (!isfinite(p->temperature) || p->temperature < 0.0f)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "sampler: temperature is %g (must be finite and >= 0)",
                              (double)p->temperature);
    if (p->top_k < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampler: top_k is %d (must be >= 0; 0 = off)",
                              (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "sampler: top_p is %g (must be in (0, 1]; 1 = off)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "sampler: min_p is %g (must be in [0, 1]; 0 = off)", (double)p->min_p);
    if (p->logprobs_mode != RLPI_LOGPROBS_SAMPLING && p->logprobs_mode != RLPI_LOGPROBS_TEMPERED &&
        p->logprobs_mode != RLPI_LOGPROBS_RAW)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampler: logprobs_mode %d is not a mode",
                              (int)p->logprobs_mode);
    return RLP_OK;
}

void rlpi_sampler_scratch_free(rlpi_sampler_scratch *s)
{
    if (!s)
        return;
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
    s->cap = 0;
}

static int scratch_reserve(rlpi_sampler_scratch *s, size_t n)
{
    if (s->cap >= n && s->probs && s->idx)
        return RLP_OK;
    float *p = realloc(s->probs, n * sizeof *p);
    if (!p)
        return rlpi_error_set(RLP_E_NOMEM, "sampler: out of memory for %zu-token scratch", n);
    s->probs = p;
    int32_t *ix = realloc(s->idx, n * sizeof *ix);
    if (!ix)
        return rlpi_error_set(RLP_E_NOMEM, "sampler: out of memory for %zu-token scratch", n);
    s->idx = ix;
    s->cap = n;
    return RLP_OK;
}

/* ------------------------------------------------------------------------ */
/* The kept set                                                             */
/* ------------------------------------------------------------------------ */

/* What the truncations leave. Weights w[i] = exp((l[i] - lmax) / T) live in
 * scratch->probs (so the largest is exactly 1); sums are in double. */
typedef struct prep {
    int32_t argmax;   /* lowest id among the largest logits */
    float lmax;
    float lmin;       /* smallest finite logit */
    int32_t n_finite; /* logits that are not -Inf */
    double temp;      /* temperature (> 0 once weights exist) */
    double s_all;     /* sum of w over the vocabulary: the tempered normaliser */
    double s_kept;    /* sum of w over the kept set */
    int32_t n_kept;   /* kept ids are idx[0..n_kept); -1: the kept set is {i : w[i] >= min_w} */
    float min_w;
} prep;

/* exp(x) for x <= 0 as a float weight. The argument is formed in double
 * (exact difference, one rounding for the temperature) and rounded to
 * float for expf, which is about twice as fast as exp over a 152k row;
 * the weight's relative error is below |x| * 2^-24 (1.2e-6 at x = -20),
 * and the drawn token's own logprob is recomputed in double. */
static inline float weight(double x)
{
    /* expf underflows to 0 below -103.98; the guard also keeps a huge
     * negative double (or -Inf) out of the float conversion */
    return x < -104.0 ? 0.0f : expf((float)x);
}

/* Max, argmax (lowest id on ties) and the finite count; rejects NaN, +Inf
 * and an all -Inf row. */
static int scan_logits(const float *l, int32_t n, prep *pp)
{
    int32_t am = -1, nf = 0;
    float mx = -INFINITY, mn = INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float v = l[i];
        if (isnan(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "sampler: logits[%d] is NaN", (int)i);
        if (v == INFINITY)
            return rlpi_error_set(RLP_E_INVALID_ARG, "sampler: logits[%d] is +Inf", (int)i);
        if (v == -INFINITY)
            continue;
        nf++;
        mn = v < mn ? v : mn;
        if (am < 0 || v > mx) {
            mx = v;
            am = i;
        }
    }
    if (am < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "sampler: all %d logits are -Inf", (int)n);
    pp->argmax = am;
    pp->lmax = mx;
    pp->lmin = mn;
    pp->n_finite = nf;
    return RLP_OK;
}

/* Candidate order: larger logit first, lower id first among equal logits
 * (a total order, so the kept set is a function of the logits alone). */
static inline bool before(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static inline void swap_i32(int32_t *a, int32_t *b)
{
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Lomuto partition of a[lo..hi) (hi - lo >= 2) around a median-of-three
 * pivot: returns r with a[lo..r) before a[r] and a[r+1..hi) after it. */
static size_t partition(int32_t *a, size_t lo, size_t hi, const float *l)
{
    size_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(l, a[mid], a[lo]))
        swap_i32(&a[mid], &a[lo]);
    if (before(l, a[last], a[lo]))
        swap_i32(&a[last], &a[lo]);
    if (before(l, a[last], a[mid]))
        swap_i32(&a[last], &a[mid]);
    swap_i32(&a[mid], &a[last]); /* the median is the pivot, at the end */
    int32_t pv = a[last];
    size_t s = lo;
    for (size_t i = lo; i < last; i++) {
        if (before(l, a[i], pv))
            swap_i32(&a[i], &a[s++]);
    }
    swap_i32(&a[s], &a[last]);
    return s;
}

/* Introselect's safety net: median-of-three quickselect is O(n) expected,
 * but a crafted row could make it quadratic; past this many rounds the
 * remaining range is sorted instead (O(n log n)). qsort has no context
 * argument in C11, hence the thread-local key pointer. */
static _Thread_local const float *t_sort_keys;

static int cmp_before_tls(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return before(t_sort_keys, a, b) ? -1 : before(t_sort_keys, b, a) ? 1 : 0;
}

static void sort_range(int32_t *a, size_t lo, size_t hi, const float *l)
{
    t_sort_keys = l;
    qsort(a + lo, hi - lo, sizeof *a, cmp_before_tls);
}

static size_t max_rounds(size_t n)
{
    size_t r = 8;
    while (n > 1) {
        n >>= 1;
        r += 2;
    }
    return r;
}

/* Rearranges a[0..n) so that a[0..k) are the k first in candidate order
 * (0 < k < n), in no particular order among themselves. */
static void select_first_k(int32_t *a, size_t n, size_t k, const float *l)
{
    size_t lo = 0, hi = n, t = k - 1, rounds = 0, lim = max_rounds(n);
    while (hi - lo > 1) {
        if (++rounds > lim) {
            sort_range(a, lo, hi, l);
            return;
        }
        size_t r = partition(a, lo, hi, l);
        if (r == t)
            return;
        if (r < t)
            lo = r + 1;
        else
            hi = r;
    }
}

/* Top-k (Hugging Face semantics: every logit >= the k-th largest is kept,
 * so ties at the boundary are all kept). a[0..n) holds the candidates (all
 * ids that can be among the k largest, ties included);
 * returns the kept count m >= k, the kept ids moved to a[0..m). */
static size_t apply_top_k(int32_t *a, size_t n, size_t k, const float *l)
{
    if (n <= k)
        return n;
    select_first_k(a, n, k, l);
    /* a[0..k) are the first k; the k-th in candidate order has the
     * smallest logit among them */
    float thr = l[a[0]];
    for (size_t i = 1; i < k; i++)
        if (l[a[i]] < thr)
            thr = l[a[i]];
    size_t m = k;
    for (size_t i = k; i < n; i++)
        if (l[a[i]] == thr)
            swap_i32(&a[i], &a[m++]);
    return m;
}

/* Gathers into a[] the finite ids that can be among the k largest logits
 * (0 < k < n_finite): a histogram of the logits over [lmin, lmax] finds the
 * bucket holding the k-th largest, and only ids in it or above are kept
 * (>= k of them, every tie of the k-th included: equal logits share a
 * bucket). A Qwen-sized row then leaves a few hundred ids to partition
 * instead of all of them. Returns their count. */
enum { TOPK_BUCKETS = 1024 };

static size_t gather_top_k(const float *l, int32_t vocab, size_t k, const prep *pp, int32_t *a)
{
    size_t n = 0;
    const double lo = (double)pp->lmin, span = (double)pp->lmax - lo;
    if (!(span > 0.0)) { /* all finite logits equal: all are candidates */
        for (int32_t i = 0; i < vocab; i++) {
            a[n] = i;
            n += (size_t)(l[i] != -INFINITY);
        }
        return n;
    }
    /* the bucket is a monotone function of the logit (and the same
     * expression in both passes), so a bucket cut never splits a tie */
    const double scale = (TOPK_BUCKETS - 1) / span;
    uint32_t count[TOPK_BUCKETS] = {0};
    for (int32_t i = 0; i < vocab; i++)
        if (l[i] != -INFINITY)
            count[(int)(((double)l[i] - lo) * scale)]++;
    size_t above = 0;
    int b = TOPK_BUCKETS - 1;
    for (; b > 0; b--) {
        above += count[b];
        if (above >= k)
            break;
    }
    for (int32_t i = 0; i < vocab; i++) {
        a[n] = i;
        n += (size_t)(l[i] != -INFINITY && (int)(((double)l[i] - lo) * scale) >= b);
    }
    return n;
}

static double mass(const int32_t *a, size_t lo, size_t hi, const float *w)
{
    double s = 0.0;
    for (size_t i = lo; i < hi; i++)
        s += w[a[i]];
    return s;
}

/* Top-p: keeps the shortest prefix of a[0..m) in candidate order whose
 * mass reaches target (= top_p times the mass of a[0..m)), i.e. a token is
 * kept iff the mass strictly before it is < target — Hugging Face's rule
 * (drop where the ascending cumulative probability <= 1 - top_p). Found by
 * partitioning (expected O(m)), not by sorting. Returns the kept count. */
static size_t apply_top_p(int32_t *a, size_t m, double target, const float *l, const float *w)
{
    size_t lo = 0, hi = m, rounds = 0, lim = max_rounds(m);
    double acc = 0.0; /* mass of a[0..lo): all kept, all before a[lo..hi) */
    while (hi - lo > 1) {
        if (++rounds > lim) {
            sort_range(a, lo, hi, l);
            for (size_t i = lo; i < hi; i++) {
                acc += w[a[i]];
                if (acc >= target)
                    return i + 1;
            }
            return hi;
        }
        size_t r = partition(a, lo, hi, l);
        double up = mass(a, lo, r, w);
        if (acc + up >= target) {
            hi = r; /* the boundary lies among a[lo..r): drop a[r..) */
            continue;
        }
        acc += up + w[a[r]];
        if (acc >= target)
            return r + 1;
        lo = r + 1;
    }
    /* one candidate left (or none, if rounding left the target unreached) */
    return hi > lo ? lo + 1 : (lo > 0 ? lo : 1);
}

/* A weight below which top-p drops a token for sure, so that only the rest
 * need be partitioned: the tokens with w < f, f = (1 - top_p) S / n, weigh
 * less than n f = (1 - top_p) S together, so the tokens with w >= f (which
 * all come first in candidate order, w being monotone in the logit) already
 * reach top_p S and the kept prefix ends among them. Over a 152k row most
 * tokens fall below f. Rounded down so float rounding keeps more, not less. */
static float top_p_floor(double mass_all, size_t n, float top_p)
{
    if (n == 0)
        return 0.0f;
    double f = (1.0 - (double)top_p) * mass_all / (double)n;
    return nextafterf((float)f, 0.0f);
}

/* Computes the weights and the kept set (temperature > 0). */
static int prepare(const float *logits, int32_t vocab, const rlpi_sampler_params *p,
                   rlpi_sampler_scratch *scr, prep *pp)
{
    int rc = scratch_reserve(scr, (size_t)vocab);
    if (rc)
        return rc;
    float *w = scr->probs;
    const double t = (double)p->temperature, inv_t = 1.0 / t, lmax = (double)pp->lmax;
    pp->temp = t;
    const bool top_k = p->top_k > 0 && p->top_k < pp->n_finite;
    const bool top_p = p->top_p < 1.0f;
    const float min_w = p->min_p; /* w_max is exactly 1, so p_i >= min_p * p_max iff w_i >= min_p */
    double s_all = 0.0, s_kept = 0.0;
    for (int32_t i = 0; i < vocab; i++) {
        /* exp(-Inf) = 0 for masked tokens */
        float wi = weight(((double)logits[i] - lmax) * inv_t);
        w[i] = wi;
        s_all += wi;
        if (wi >= min_w)
            s_kept += wi;
    }
    pp->s_all = s_all;
    if (!top_k && !top_p) {
        /* no order needed: the kept set is implicit, never materialised */
        pp->n_kept = -1;
        pp->min_w = min_w;
        pp->s_kept = s_kept;
        return RLP_OK;
    }
    int32_t *a = scr->idx;
    size_t n = 0;
    if (!top_k) {
        /* top-p alone: gather only what can survive it (see top_p_floor) */
        float floor_w = top_p_floor(s_all, (size_t)pp->n_finite, p->top_p);
        /* branch-free: which tokens pass is unpredictable */
        for (int32_t i = 0; i < vocab; i++) {
            a[n] = i;
            n += (size_t)((logits[i] != -INFINITY) & (w[i] >= floor_w));
        }
        pp->n_kept = (int32_t)apply_top_p(a, n, (double)p->top_p * s_all, logits, w);
    } else {
        n = gather_top_k(logits, vocab, (size_t)p->top_k, pp, a);
        n = apply_top_k(a, n, (size_t)p->top_k, logits);
        if (top_p) {
            double kept = mass(a, 0, n, w);
            float floor_w = top_p_floor(kept, n, p->top_p);
            size_t j = 0;
            for (size_t i = 0; i < n; i++) {
                int32_t id = a[i];
                a[j] = id;
                j += (size_t)(w[id] >= floor_w);
            }
            n = apply_top_p(a, j, (double)p->top_p * kept, logits, w);
        }
        pp->n_kept = (int32_t)n;
    }
    size_t m = (size_t)pp->n_kept;
    /* min-p last; the argmax survives top-k and top-p, so w_max is still 1 */
    size_t j = 0;
    double s = 0.0;
    for (size_t i = 0; i < m; i++) {
        if (w[a[i]] >= min_w) {
            s += w[a[i]];
            a[j++] = a[i];
        }
    }
    pp->n_kept = (int32_t)j;
    pp->s_kept = s;
    return RLP_OK;
}

static int check_common(const float *logits, int32_t vocab, const rlpi_sampler_params *p,
                        rlpi_sampler_scratch *scratch)
{
    RLPI_CHECK_ARG(logits, "logits is NULL");
    RLPI_CHECK_ARG(vocab > 0, "vocab must be > 0");
    RLPI_CHECK_ARG(scratch, "scratch is NULL");
    return rlpi_sampler_params_check(p);
}

/* log_softmax(logits)[tok], T = 1, no truncation. */
static double raw_logprob(const float *logits, int32_t vocab, const prep *pp, int32_t tok)
{
    double s = 0.0, mx = (double)pp->lmax;
    for (int32_t i = 0; i < vocab; i++)
        s += weight((double)logits[i] - mx);
    return ((double)logits[tok] - mx) - log(s);
}

int rlpi_sample(const float *logits, int32_t vocab, const rlpi_sampler_params *p, double u,
                rlpi_sampler_scratch *scratch, int32_t *out_token, float *out_logprob)
{
    int rc = check_common(logits, vocab, p, scratch);
    if (rc)
        return rc;
    RLPI_CHECK_ARG(out_token, "out_token is NULL");
    RLPI_CHECK_ARG(out_logprob, "out_logprob is NULL");
    if (!(u >= 0.0 && u < 1.0))
        return rlpi_error_set(RLP_E_INVALID_ARG, "rlpi_sample: u is %g (must be in [0, 1))", u);
    prep pp;
    rc = scan_logits(logits, vocab, &pp);
    if (rc)
        return rc;
    if (p->temperature == 0.0f) {
        *out_token = pp.argmax;
        *out_logprob = (float)raw_logprob(logits, vocab, &pp, pp.argmax);
        return RLP_OK;
    }
    rc = prepare(logits, vocab, p, scratch, &pp);
    if (rc)
        return rc;
    const float *w = scratch->probs;
    /* inverse CDF: the first token whose cumulative weight passes u * S, in
     * the same summation order as S so that the scan always ends inside */
    const double target = u * pp.s_kept;
    double cum = 0.0;
    int32_t tok = -1, last = -1;
    if (pp.n_kept < 0) {
        for (int32_t i = 0; i < vocab; i++) {
            float wi = w[i];
            if (wi >= pp.min_w && wi > 0.0f) {
                cum += wi;
                last = i;
                if (cum > target) {
                    tok = i;
                    break;
                }
            }
        }
    } else {
        const int32_t *a = scratch->idx;
        for (int32_t j = 0; j < pp.n_kept; j++) {
            float wi = w[a[j]];
            if (wi > 0.0f) {
                cum += wi;
                last = a[j];
                if (cum > target) {
                    tok = a[j];
                    break;
                }
            }
        }
    }
    if (tok < 0)
        tok = last >= 0 ? last : pp.argmax; /* u * S rounded up to S */
    /* recomputed in double rather than log(w): w may have lost digits */
    const double z = ((double)logits[tok] - (double)pp.lmax) / pp.temp;
    double lp;
    switch (p->logprobs_mode) {
    case RLPI_LOGPROBS_SAMPLING:
        lp = z - log(pp.s_kept);
        break;
    case RLPI_LOGPROBS_TEMPERED:
        lp = z - log(pp.s_all);
        break;
    default:
        lp = p->temperature == 1.0f ? z - log(pp.s_all) : raw_logprob(logits, vocab, &pp, tok);
        break;
    }
    *out_token = tok;
    *out_logprob = (float)lp;
    return RLP_OK;
}

int rlpi_sampler_distribution(const float *logits, int32_t vocab, const rlpi_sampler_params *p,
                              rlpi_sampler_scratch *scratch, float *out_probs)
{
    int rc = check_common(logits, vocab, p, scratch);
    if (rc)
        return rc;
    RLPI_CHECK_ARG(out_probs, "out_probs is NULL");
    prep pp;
    rc = scan_logits(logits, vocab, &pp);
    if (rc)
        return rc;
    if (p->temperature == 0.0f) {
        for (int32_t i = 0; i < vocab; i++)
            out_probs[i] = 0.0f;
        out_probs[pp.argmax] = 1.0f;
        return RLP_OK;
    }
    rc = prepare(logits, vocab, p, scratch, &pp);
    if (rc)
        return rc;
    const float *w = scratch->probs;
    const double inv = 1.0 / pp.s_kept;
    if (pp.n_kept < 0) {
        for (int32_t i = 0; i < vocab; i++)
            out_probs[i] = w[i] >= pp.min_w ? (float)(w[i] * inv) : 0.0f;
    } else {
        for (int32_t i = 0; i < vocab; i++)
            out_probs[i] = 0.0f;
        for (int32_t j = 0; j < pp.n_kept; j++) {
            int32_t i = scratch->idx[j];
            out_probs[i] = (float)(w[i] * inv);
        }
    }
    return RLP_OK;
}

/* ------------------------------------------------------------------------ */
/* Counter-based uniform                                                    */
/* ------------------------------------------------------------------------ */

/* splitmix64's finaliser (Stafford's Mix13): a bijection of 64-bit words
 * with full avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* h = mix(mix(mix(seed + G) ^ stream * G') ^ mix(step + G)), top 53 bits.
 * Each stage is a bijection of the value mixed in, so for a fixed seed two
 * streams at the same step (or two steps of one stream) never share the
 * 64-bit word; the 53-bit output collides with probability 2^-53. */
double rlpi_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step)
{
    const uint64_t g = UINT64_C(0x9e3779b97f4a7c15);
    uint64_t h = mix64(seed + g);
    h = mix64(h ^ (stream * UINT64_C(0xd1342543de82ef95)));
    h = mix64(h ^ mix64(step + g));
    return (double)(h >> 11) * 0x1.0p-53;
}
