/* Validating wrappers of the kernel slots: every element range a kernel
 * will touch is checked against its buffer here, once for all backends, and
 * references are turned into the backend's raw pointers. No arithmetic on
 * values happens here. */
#include "backend/backend.h"

#include "core/checked.h"
#include "core/error.h"
#include "backend/qmat.h"
#include "backend/sampler.h" /* rlpi_sampler_params_check */

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Resolves `r` to a pointer after checking that `count` 4-byte elements from
 * r.off lie inside r.buf, which must belong to `be`. count 0 always passes
 * (NULL buffer allowed then). */
static int resolve(rlpi_backend *be, rlpi_ref r, int64_t count, const char *op, const char *name,
                   void **out)
{
    *out = NULL;
    if (count < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: negative size for %s", op, name);
    if (!r.buf) {
        if (count == 0)
            return RLP_OK;
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s has no buffer", op, name);
    }
    if (r.buf->owner != be)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s belongs to another backend", op, name);
    size_t end;
    if (!rlpi_add_size(&end, r.off, (size_t)count) || end > r.buf->nbytes / 4)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %s needs elements [%zu, %zu+%lld) of a %zu-element buffer",
                              op, name, r.off, r.off, (long long)count, r.buf->nbytes / 4);
    *out = (char *)r.buf->data + r.off * 4;
    return RLP_OK;
}

static int64_t prod(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

#define SLOT(slot)                                                                        \
    if (!be)                                                                              \
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL backend", #slot);              \
    if (!be->ops->slot)                                                                   \
        return rlpi_error_set(RLP_E_UNSUPPORTED, "%s: not implemented by the %s backend", \
                              #slot, be->ops->name)
#define RES(ref, count, var)                                                      \
    do {                                                                          \
        int rc_ = resolve(be, ref, count, op, #ref, (void **)&var);               \
        if (rc_)                                                                  \
            return rc_;                                                           \
    } while (0)
#define DIMS_OK(cond)                                                                       \
    do {                                                                                    \
        if (!(cond))                                                                        \
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: bad dimensions (%s)", op, #cond); \
    } while (0)

int rlpi_op_embedding_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref table, rlpi_ref ids, int64_t n,
                          int64_t dim, int64_t vocab)
{
    static const char op[] = "embedding";
    SLOT(embedding_fwd);
    DIMS_OK(n >= 0 && dim > 0 && vocab > 0);
    float *o, *t;
    int32_t *i;
    RES(out, prod(n, dim), o);
    RES(table, prod(vocab, dim), t);
    RES(ids, n, i);
    return n ? be->ops->embedding_fwd(be, o, t, i, n, dim, vocab) : RLP_OK;
}

int rlpi_op_embedding_bwd(rlpi_backend *be, rlpi_ref dtable, rlpi_ref dout, rlpi_ref ids, int64_t n,
                          int64_t dim, int64_t vocab)
{
    static const char op[] = "embedding backward";
    SLOT(embedding_bwd);
    DIMS_OK(n >= 0 && dim > 0 && vocab > 0);
    float *dt, *d;
    int32_t *i;
    RES(dtable, prod(vocab, dim), dt);
    RES(dout, prod(n, dim), d);
    RES(ids, n, i);
    return n ? be->ops->embedding_bwd(be, dt, d, i, n, dim, vocab) : RLP_OK;
}

int rlpi_op_rmsnorm_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref rstd, rlpi_ref x, rlpi_ref w, int64_t n,
                        int64_t dim, float eps)
{
    static const char op[] = "rmsnorm";
    SLOT(rmsnorm_fwd);
    DIMS_OK(n >= 0 && dim > 0 && eps > 0);
    float *o, *r, *xx, *ww;
    RES(out, prod(n, dim), o);
    RES(rstd, n, r);
    RES(x, prod(n, dim), xx);
    RES(w, dim, ww);
    return n ? be->ops->rmsnorm_fwd(be, o, r, xx, ww, n, dim, eps) : RLP_OK;
}

int rlpi_op_rmsnorm_bwd(rlpi_backend *be, rlpi_ref dx_accum, rlpi_ref dw_accum, rlpi_ref dout, rlpi_ref x,
                        rlpi_ref w, rlpi_ref rstd, int64_t n, int64_t dim)
{
    static const char op[] = "rmsnorm backward";
    SLOT(rmsnorm_bwd);
    DIMS_OK(n >= 0 && dim > 0);
    float *dx, *dw, *d, *xx, *ww, *r;
    RES(dx_accum, prod(n, dim), dx);
    RES(dw_accum, dim, dw);
    RES(dout, prod(n, dim), d);
    RES(x, prod(n, dim), xx);
    RES(w, dim, ww);
    RES(rstd, n, r);
    return n ? be->ops->rmsnorm_bwd(be, dx, dw, d, xx, ww, r, n, dim) : RLP_OK;
}

int rlpi_op_rope(rlpi_backend *be, rlpi_ref x, rlpi_ref pos, rlpi_ref inv_freq, int64_t n, int64_t n_heads,
                 int64_t head_dim, int inverse)
{
    static const char op[] = "rope";
    SLOT(rope);
    DIMS_OK(n >= 0 && n_heads > 0 && head_dim > 0 && head_dim % 2 == 0);
    float *xx, *f;
    int32_t *p;
    RES(x, prod(prod(n, n_heads), head_dim), xx);
    RES(pos, n, p);
    RES(inv_freq, head_dim / 2, f);
    return n ? be->ops->rope(be, xx, p, f, n, n_heads, head_dim, inverse) : RLP_OK;
}

static int check_seqs(const char *op, const int64_t *seq_start, int64_t n_seq, int64_t n)
{
    if (n_seq < 0 || (n_seq > 0 && !seq_start))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: bad sequence table", op);
    if (n_seq == 0)
        return n == 0 ? RLP_OK : rlpi_error_set(RLP_E_INVALID_ARG, "%s: tokens without sequences", op);
    if (seq_start[0] != 0 || seq_start[n_seq] != n)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequences must cover [0, %lld)", op, (long long)n);
    for (int64_t s = 0; s < n_seq; s++)
        if (seq_start[s + 1] < seq_start[s])
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %lld has negative length", op, (long long)s);
    return RLP_OK;
}

/* softmax scale finite and positive, window 0 (none) or positive */
static int check_scale_window(const char *op, float scale, int64_t window)
{
    if (!(scale > 0 && scale < INFINITY))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: softmax scale %g is not a positive finite number", op,
                              (double)scale);
    if (window < 0)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: negative sliding window %lld", op, (long long)window);
    return RLP_OK;
}

int rlpi_op_attention_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref lse, rlpi_ref q, rlpi_ref k, rlpi_ref v,
                          const int64_t *seq_start, int64_t n_seq, int64_t n, int64_t n_heads,
                          int64_t n_kv_heads, int64_t head_dim, float scale, int64_t window)
{
    static const char op[] = "attention";
    SLOT(attention_fwd);
    DIMS_OK(n >= 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0);
    {
        int rc_ = check_scale_window(op, scale, window);
        if (rc_)
            return rc_;
    }
    int rc = check_seqs(op, seq_start, n_seq, n);
    if (rc)
        return rc;
    float *o, *l, *qq, *kk, *vv;
    RES(out, prod(prod(n, n_heads), head_dim), o);
    RES(lse, prod(n, n_heads), l);
    RES(q, prod(prod(n, n_heads), head_dim), qq);
    RES(k, prod(prod(n, n_kv_heads), head_dim), kk);
    RES(v, prod(prod(n, n_kv_heads), head_dim), vv);
    return n ? be->ops->attention_fwd(be, o, l, qq, kk, vv, seq_start, n_seq, n, n_heads, n_kv_heads, head_dim,
                                      scale, window)
             : RLP_OK;
}

int rlpi_op_attention_bwd(rlpi_backend *be, rlpi_ref dq, rlpi_ref dk, rlpi_ref dv, rlpi_ref dout, rlpi_ref q,
                          rlpi_ref k, rlpi_ref v, rlpi_ref out, rlpi_ref lse, const int64_t *seq_start,
                          int64_t n_seq, int64_t n, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                          float scale, int64_t window)
{
    static const char op[] = "attention backward";
    SLOT(attention_bwd);
    DIMS_OK(n >= 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim > 0);
    {
        int rc_ = check_scale_window(op, scale, window);
        if (rc_)
            return rc_;
    }
    int rc = check_seqs(op, seq_start, n_seq, n);
    if (rc)
        return rc;
    int64_t nq = prod(prod(n, n_heads), head_dim), nkv = prod(prod(n, n_kv_heads), head_dim);
    float *a, *b, *c, *d, *qq, *kk, *vv, *o, *l;
    RES(dq, nq, a);
    RES(dk, nkv, b);
    RES(dv, nkv, c);
    RES(dout, nq, d);
    RES(q, nq, qq);
    RES(k, nkv, kk);
    RES(v, nkv, vv);
    RES(out, nq, o);
    RES(lse, prod(n, n_heads), l);
    return n ? be->ops->attention_bwd(be, a, b, c, d, qq, kk, vv, o, l, seq_start, n_seq, n, n_heads,
                                      n_kv_heads, head_dim, scale, window)
             : RLP_OK;
}

int rlpi_op_swiglu_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref gate, rlpi_ref up, int64_t n)
{
    static const char op[] = "swiglu";
    SLOT(swiglu_fwd);
    float *o, *g, *u;
    RES(out, n, o);
    RES(gate, n, g);
    RES(up, n, u);
    return n ? be->ops->swiglu_fwd(be, o, g, u, n) : RLP_OK;
}

int rlpi_op_swiglu_bwd(rlpi_backend *be, rlpi_ref dgate, rlpi_ref dup, rlpi_ref dout, rlpi_ref gate,
                       rlpi_ref up, int64_t n)
{
    static const char op[] = "swiglu backward";
    SLOT(swiglu_bwd);
    float *dg, *du, *d, *g, *u;
    RES(dgate, n, dg);
    RES(dup, n, du);
    RES(dout, n, d);
    RES(gate, n, g);
    RES(up, n, u);
    return n ? be->ops->swiglu_bwd(be, dg, du, d, g, u, n) : RLP_OK;
}

int rlpi_op_geglu_fwd(rlpi_backend *be, rlpi_ref out, rlpi_ref gate, rlpi_ref up, int64_t n)
{
    static const char op[] = "geglu";
    SLOT(geglu_fwd);
    float *o, *g, *u;
    RES(out, n, o);
    RES(gate, n, g);
    RES(up, n, u);
    return n ? be->ops->geglu_fwd(be, o, g, u, n) : RLP_OK;
}

int rlpi_op_geglu_bwd(rlpi_backend *be, rlpi_ref dgate, rlpi_ref dup, rlpi_ref dout, rlpi_ref gate,
                      rlpi_ref up, int64_t n)
{
    static const char op[] = "geglu backward";
    SLOT(geglu_bwd);
    float *dg, *du, *d, *g, *u;
    RES(dgate, n, dg);
    RES(dup, n, du);
    RES(dout, n, d);
    RES(gate, n, g);
    RES(up, n, u);
    return n ? be->ops->geglu_bwd(be, dg, du, d, g, u, n) : RLP_OK;
}

int rlpi_op_add(rlpi_backend *be, rlpi_ref y, rlpi_ref x, int64_t n)
{
    static const char op[] = "add";
    SLOT(add);
    float *yy, *xx;
    RES(y, n, yy);
    RES(x, n, xx);
    return n ? be->ops->add(be, yy, xx, n) : RLP_OK;
}

int rlpi_op_add_bias(rlpi_backend *be, rlpi_ref y, rlpi_ref bias, int64_t rows, int64_t cols)
{
    static const char op[] = "add bias";
    SLOT(add_bias);
    DIMS_OK(rows >= 0 && cols > 0);
    float *yy, *b;
    RES(y, prod(rows, cols), yy);
    RES(bias, cols, b);
    return rows ? be->ops->add_bias(be, yy, b, rows, cols) : RLP_OK;
}

int rlpi_op_bias_bwd(rlpi_backend *be, rlpi_ref dbias, rlpi_ref dy, int64_t rows, int64_t cols)
{
    static const char op[] = "bias backward";
    SLOT(bias_bwd);
    DIMS_OK(rows >= 0 && cols > 0);
    float *db, *d;
    RES(dbias, cols, db);
    RES(dy, prod(rows, cols), d);
    return rows ? be->ops->bias_bwd(be, db, d, rows, cols) : RLP_OK;
}

int rlpi_op_scale(rlpi_backend *be, rlpi_ref x, float alpha, int64_t n)
{
    static const char op[] = "scale";
    SLOT(scale);
    float *xx;
    RES(x, n, xx);
    return n ? be->ops->scale(be, xx, alpha, n) : RLP_OK;
}

int rlpi_op_softcap_fwd(rlpi_backend *be, rlpi_ref x, int64_t n, float cap)
{
    static const char op[] = "softcap";
    SLOT(softcap_fwd);
    DIMS_OK(cap > 0 && cap < INFINITY);
    float *xx;
    RES(x, n, xx);
    return n ? be->ops->softcap_fwd(be, xx, n, cap) : RLP_OK;
}

int rlpi_op_softcap_bwd(rlpi_backend *be, rlpi_ref dx, rlpi_ref y, int64_t n, float cap)
{
    static const char op[] = "softcap backward";
    SLOT(softcap_bwd);
    DIMS_OK(cap > 0 && cap < INFINITY);
    float *d, *yy;
    RES(dx, n, d);
    RES(y, n, yy);
    return n ? be->ops->softcap_bwd(be, d, yy, n, cap) : RLP_OK;
}

int rlpi_op_logprob_rows(rlpi_backend *be, rlpi_ref logp, rlpi_ref entropy, rlpi_ref logits, rlpi_ref targets,
                         int64_t n, int64_t vocab, float inv_temp)
{
    static const char op[] = "logprob";
    SLOT(logprob_rows);
    DIMS_OK(n >= 0 && vocab > 0 && inv_temp > 0);
    float *lp, *ent, *lg;
    int32_t *t;
    RES(logp, n, lp);
    RES(entropy, entropy.buf ? n : 0, ent);
    RES(logits, prod(n, vocab), lg);
    RES(targets, n, t);
    return n ? be->ops->logprob_rows(be, lp, ent, lg, t, n, vocab, inv_temp) : RLP_OK;
}

int rlpi_op_logprob_rows_bwd(rlpi_backend *be, rlpi_ref logits, rlpi_ref targets, rlpi_ref dlogp,
                             rlpi_ref dentropy, int64_t n, int64_t vocab, float inv_temp)
{
    static const char op[] = "logprob backward";
    SLOT(logprob_rows_bwd);
    DIMS_OK(n >= 0 && vocab > 0 && inv_temp > 0);
    float *lg, *dl, *de;
    int32_t *t;
    RES(logits, prod(n, vocab), lg);
    RES(targets, n, t);
    RES(dlogp, n, dl);
    RES(dentropy, dentropy.buf ? n : 0, de);
    return n ? be->ops->logprob_rows_bwd(be, lg, t, dl, de, n, vocab, inv_temp) : RLP_OK;
}

int rlpi_op_sum_squares(rlpi_backend *be, double *out, rlpi_ref x, int64_t n)
{
    static const char op[] = "sum of squares";
    SLOT(sum_squares);
    if (!out)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL output", op);
    float *xx;
    RES(x, n, xx);
    *out = 0;
    return n ? be->ops->sum_squares(be, out, xx, n) : RLP_OK;
}

int rlpi_op_adamw(rlpi_backend *be, rlpi_ref param, rlpi_ref grad, rlpi_ref m, rlpi_ref v, int64_t n,
                  const rlpi_adamw_step *step)
{
    static const char op[] = "adamw";
    SLOT(adamw);
    if (!step)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL step", op);
    float *p, *g, *mm, *vv;
    RES(param, n, p);
    RES(grad, n, g);
    RES(m, n, mm);
    RES(v, n, vv);
    return n ? be->ops->adamw(be, p, g, mm, vv, n, step) : RLP_OK;
}

int rlpi_op_attention_cached(rlpi_backend *be, rlpi_ref out, rlpi_ref q, rlpi_ref kc, rlpi_ref vc,
                             const int64_t *q_start, const int64_t *slot, const int64_t *past, int64_t n_seq,
                             int64_t n, int64_t n_slots, int64_t slot_stride, int64_t n_heads, int64_t n_kv_heads,
                             int64_t head_dim, float scale, int64_t window)
{
    static const char op[] = "cached attention";
    SLOT(attention_cached);
    DIMS_OK(n >= 0 && n_seq >= 0 && n_slots > 0 && n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0 &&
            head_dim > 0 && slot_stride > 0 && slot_stride % prod(n_kv_heads, head_dim) == 0);
    {
        int rc_ = check_scale_window(op, scale, window);
        if (rc_)
            return rc_;
    }
    if (!slot || !past)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL slot or past", op);
    int rc = check_seqs(op, q_start, n_seq, n);
    if (rc)
        return rc;
    int64_t capacity = slot_stride / (n_kv_heads * head_dim);
    for (int64_t s = 0; s < n_seq; s++) {
        if (slot[s] < 0 || slot[s] >= n_slots)
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %lld uses slot %lld of %lld", op, (long long)s,
                                  (long long)slot[s], (long long)n_slots);
        if (past[s] < 0 || past[s] > capacity - (q_start[s + 1] - q_start[s]))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: sequence %lld needs %lld rows of a %lld-row slot", op,
                                  (long long)s, (long long)(past[s] + q_start[s + 1] - q_start[s]), (long long)capacity);
    }
    float *o, *qq, *kk, *vv;
    RES(out, prod(prod(n, n_heads), head_dim), o);
    RES(q, prod(prod(n, n_heads), head_dim), qq);
    RES(kc, prod(n_slots, slot_stride), kk);
    RES(vc, prod(n_slots, slot_stride), vv);
    return n ? be->ops->attention_cached(be, o, qq, kk, vv, q_start, slot, past, n_seq, n, slot_stride, n_heads,
                                         n_kv_heads, head_dim, scale, window)
             : RLP_OK;
}

/* sampling (rollout engine) */
int rlpi_op_sample_rows(rlpi_backend *be, int32_t *tokens, float *logprobs, rlpi_ref logits, int64_t n_logit_rows,
                        const int32_t *rows, int64_t n, int64_t vocab, const rlpi_sampler_params *params,
                        const double *u)
{
    static const char op[] = "sample rows";
    SLOT(sample_rows);
    DIMS_OK(n >= 0 && n_logit_rows >= 0 && vocab > 0 && vocab <= INT32_MAX);
    if (n == 0)
        return RLP_OK;
    if (!tokens || !logprobs || !params || !u)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: NULL tokens, logprobs, params or u", op);
    if (!rows && n > n_logit_rows)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: %lld draws from %lld rows of logits", op, (long long)n,
                              (long long)n_logit_rows);
    for (int64_t i = 0; i < n; i++) {
        if (rows && (rows[i] < 0 || rows[i] >= n_logit_rows))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: rows[%lld] is %d, outside [0, %lld)", op, (long long)i,
                                  (int)rows[i], (long long)n_logit_rows);
        if (!(u[i] >= 0.0 && u[i] < 1.0))
            return rlpi_error_set(RLP_E_INVALID_ARG, "%s: u[%lld] is %g (must be in [0, 1))", op, (long long)i,
                                  u[i]);
        if (rlpi_sampler_params_check(&params[i]) != RLP_OK)
            return rlpi_error_wrap("%s: params[%lld]", op, (long long)i);
    }
    float *lg;
    RES(logits, prod(n_logit_rows, vocab), lg);
    return be->ops->sample_rows(be, tokens, logprobs, lg, rows, n, vocab, params, u);
}

int rlpi_op_qmatmul_available(const rlpi_backend *be)
{
    return be && be->ops->qmatmul;
}

int rlpi_op_qmatmul(rlpi_backend *be, rlpi_ref c, rlpi_ref a, const rlpi_buffer *w, size_t w_off, int type, int64_t m,
                    int64_t n, int64_t k, float beta)
{
    static const char op[] = "quantized matmul";
    SLOT(qmatmul);
    DIMS_OK(m >= 0 && n > 0 && k > 0 && (beta == 0.0f || beta == 1.0f));
    size_t wbytes = rlpi_qmat_bytes(type, n, k);
    if (!wbytes)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: unknown weight type %d", op, type);
    if (!w || w->owner != be || w_off > w->nbytes || w->nbytes - w_off < wbytes)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: the weights need bytes [%zu, %zu+%zu) of their buffer", op,
                              w_off, w_off, wbytes);
    if (m == 0)
        return RLP_OK;
    float *cc, *aa;
    RES(c, prod(m, n), cc);
    RES(a, prod(m, k), aa);
    if (c.buf == a.buf && c.off < a.off + (size_t)prod(m, k) && a.off < c.off + (size_t)prod(m, n))
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s: C overlaps A", op);
    return be->ops->qmatmul(be, cc, aa, (const char *)w->data + w_off, type, m, n, k, beta);
}
