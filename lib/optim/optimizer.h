/* AdamW with global-norm clipping, a per-tensor no-decay rule and learning
 * rate schedules, over a flat fp32 parameter/gradient view. Knows nothing
 * about models or losses: the policy's train step hands it the view of its
 * transformer's buffers and drives it. It sits between the backend and
 * the model (lib/optim: backend below, model above). */
#ifndef RLPI_OPTIM_OPTIMIZER_H
#define RLPI_OPTIM_OPTIMIZER_H

#include "backend/backend.h"

#include <stdbool.h>
#include <stddef.h>

/* One tensor of the flat buffers: where it lies (in floats) and whether
 * weight decay applies to it (norms, biases, embeddings: no). */
typedef struct rlpi_param_span {
    size_t offset, n_elems;
    bool no_decay;
} rlpi_param_span;

/* What a step updates: n floats of parameters and of their gradients, in
 * the same layout, cut into n_spans tensors that cover them. Borrowed for
 * the call. */
typedef struct rlpi_param_view {
    rlpi_buffer *params, *grads;
    size_t n;
    const rlpi_param_span *spans;
    size_t n_spans;
} rlpi_param_view;

typedef enum rlpi_schedule {
    RLPI_SCHEDULE_CONSTANT = 0,
    RLPI_SCHEDULE_LINEAR_WARMUP = 1, /* linear ramp over warmup_steps, then constant */
    RLPI_SCHEDULE_COSINE = 2         /* linear warmup, then cosine decay to min_lr_ratio·lr */
} rlpi_schedule;

typedef struct rlpi_optim_config {
    float lr, beta1, beta2, eps, weight_decay;
    float max_grad_norm;   /* <= 0: no clipping */
    int32_t schedule;      /* rlpi_schedule */
    int64_t warmup_steps, total_steps;
    float min_lr_ratio;
} rlpi_optim_config;

typedef struct rlpi_optimizer {
    rlpi_optim_config cfg;
    rlpi_buffer *m, *v;    /* first/second moments, same layout as the gradients; lazily allocated */
    int64_t step;          /* updates applied */
    int64_t skipped;       /* steps skipped for a non-finite gradient */
} rlpi_optimizer;

/* Learning rate of update number `step` (0-based): with warmup W > 0 the
 * factor is min(1, (step+1)/W) — the first update is not wasted at lr 0 —
 * and cosine then follows 0.5·(1 + cos(π·p)), p = (step+1−W)/(total−W)
 * clamped to [0, 1], floored at min_lr_ratio. */
float rlpi_schedule_lr(const rlpi_optim_config *cfg, int64_t step);

int rlpi_optimizer_validate(const rlpi_optim_config *cfg);

/* One update from the accumulated gradients: global L2 norm (reported),
 * clipping factor min(1, max_norm / (norm + 1e-6)), AdamW per tensor
 * (weight decay 0 for no-decay tensors). A non-finite norm skips the
 * update, leaves the weights untouched and counts it (*skipped = true).
 * Gradients are zeroed afterwards either way. */
int rlpi_optimizer_step(rlpi_optimizer *opt, const rlpi_param_view *view, double *grad_norm, float *lr_used,
                        bool *skipped);

void rlpi_optimizer_release(rlpi_optimizer *opt);

#endif
