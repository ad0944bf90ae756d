/* AdamW with global-norm clipping, a per-tensor no-decay rule and learning
 * rate schedules, over the transformer's flat parameter/gradient buffers.
 * Knows nothing about losses; the policy's train step drives it. */
#ifndef RLPI_ALGO_OPTIMIZER_H
#define RLPI_ALGO_OPTIMIZER_H

#include "backend/backend.h"
#include "model/transformer.h"

#include <stdbool.h>

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
int rlpi_optimizer_step(rlpi_optimizer *opt, rlpi_transformer *tf, double *grad_norm, float *lr_used,
                        bool *skipped);

void rlpi_optimizer_release(rlpi_optimizer *opt);

#endif
