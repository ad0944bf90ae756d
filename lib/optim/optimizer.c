/* AdamW (Loshchilov & Hutter 2019, Algorithm 2) with bias correction
 * (Kingma & Ba 2015), global-norm gradient clipping (Pascanu et al. 2013)
 * and warmup/cosine schedules (Loshchilov & Hutter 2017, SGDR). Runs the
 * update through the backend's adamw kernel, tensor by tensor. */
#include "optim/optimizer.h"

#include "core/error.h"

#include <math.h>

float rlpi_schedule_lr(const rlpi_optim_config *c, int64_t step)
{
    double f = 1.0;
    if (c->schedule != RLPI_SCHEDULE_CONSTANT && c->warmup_steps > 0 && step + 1 < c->warmup_steps)
        f = (double)(step + 1) / (double)c->warmup_steps;
    else if (c->schedule == RLPI_SCHEDULE_COSINE && c->total_steps > c->warmup_steps) {
        double p = (double)(step + 1 - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
        p = p < 0 ? 0 : p > 1 ? 1 : p;
        double cosine = 0.5 * (1.0 + cos(M_PI * p));
        f = c->min_lr_ratio + (1.0 - c->min_lr_ratio) * cosine;
    }
    return (float)(c->lr * f);
}

int rlpi_optimizer_validate(const rlpi_optim_config *c)
{
#define BAD(...) return rlpi_error_set(RLP_E_INVALID_ARG, __VA_ARGS__)
    if (!(c->lr >= 0) || !isfinite(c->lr))
        BAD("optimizer: learning rate %g must be a finite value >= 0", (double)c->lr);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        BAD("optimizer: betas (%g, %g) must lie in [0, 1)", (double)c->beta1, (double)c->beta2);
    if (!(c->eps > 0))
        BAD("optimizer: eps %g must be > 0", (double)c->eps);
    if (!(c->weight_decay >= 0))
        BAD("optimizer: weight decay %g must be >= 0", (double)c->weight_decay);
    if (!(c->max_grad_norm >= 0) && !(c->max_grad_norm <= 0))
        BAD("optimizer: max_grad_norm is NaN");
    if (c->schedule < RLPI_SCHEDULE_CONSTANT || c->schedule > RLPI_SCHEDULE_COSINE)
        BAD("optimizer: unknown schedule %d", c->schedule);
    if (c->warmup_steps < 0 || c->total_steps < 0)
        BAD("optimizer: negative warmup/total steps");
    if (!(c->min_lr_ratio >= 0 && c->min_lr_ratio <= 1))
        BAD("optimizer: min_lr_ratio %g outside [0, 1]", (double)c->min_lr_ratio);
    return RLP_OK;
#undef BAD
}

int rlpi_optimizer_step(rlpi_optimizer *opt, const rlpi_param_view *view, double *grad_norm, float *lr_used,
                        bool *skipped)
{
    rlpi_buffer *G = view->grads, *P = view->params;
    rlpi_backend *be = P->owner;
    size_t n = view->n;
    int rc;
    double ss;
    if ((rc = rlpi_op_sum_squares(be, &ss, RLPI_REF(G, 0), (int64_t)n)) != RLP_OK)
        return rc;
    double norm = sqrt(ss);
    *grad_norm = norm;
    *skipped = !isfinite(norm);
    *lr_used = 0.0f;
    if (*skipped) {
        opt->skipped++;
        return rlpi_buffer_fill_f32(G, 0, n, 0.0f);
    }
    if (!opt->m) {
        if ((rc = rlpi_buffer_alloc(be, n * 4, &opt->m)) != RLP_OK ||
            (rc = rlpi_buffer_alloc(be, n * 4, &opt->v)) != RLP_OK ||
            (rc = rlpi_buffer_fill_f32(opt->m, 0, n, 0.0f)) != RLP_OK ||
            (rc = rlpi_buffer_fill_f32(opt->v, 0, n, 0.0f)) != RLP_OK)
            return rc;
    }
    const rlpi_optim_config *c = &opt->cfg;
    float clip = 1.0f;
    if (c->max_grad_norm > 0 && norm > c->max_grad_norm)
        clip = (float)(c->max_grad_norm / (norm + 1e-6));
    int64_t t = opt->step + 1;
    rlpi_adamw_step st = {
        .lr = rlpi_schedule_lr(c, opt->step),
        .beta1 = c->beta1,
        .beta2 = c->beta2,
        .eps = c->eps,
        .bias_correction1 = (float)(1.0 - pow(c->beta1, (double)t)),
        .bias_correction2 = (float)(1.0 - pow(c->beta2, (double)t)),
        .grad_scale = clip,
    };
    for (size_t i = 0; i < view->n_spans; i++) {
        const rlpi_param_span *in = &view->spans[i];
        if (in->offset > n || in->n_elems > n - in->offset)
            return rlpi_error_set(RLP_E_INTERNAL, "optimizer: tensor %zu [%zu, +%zu) outside %zu parameters", i,
                                  in->offset, in->n_elems, n);
        st.weight_decay = in->no_decay ? 0.0f : c->weight_decay;
        if ((rc = rlpi_op_adamw(be, RLPI_REF(P, in->offset), RLPI_REF(G, in->offset), RLPI_REF(opt->m, in->offset),
                                RLPI_REF(opt->v, in->offset), (int64_t)in->n_elems, &st)) != RLP_OK)
            return rc;
    }
    opt->step = t;
    *lr_used = st.lr;
    return rlpi_buffer_fill_f32(G, 0, n, 0.0f);
}

void rlpi_optimizer_release(rlpi_optimizer *opt)
{
    rlpi_buffer_free(opt->m);
    rlpi_buffer_free(opt->v);
    opt->m = opt->v = NULL;
}
