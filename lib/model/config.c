/* Consistency checks of a model config, shared by every loader so that a
 * hostile file cannot give the transformer impossible shapes. */
#include "model/config.h"

#include "core/error.h"

#include <math.h>

int rlpi_model_config_validate(const rlpi_model_config *c, const char *source)
{
#define BAD(...) return rlpi_error_set(RLP_E_FORMAT, __VA_ARGS__)
    if (c->n_layers < 1 || c->n_layers > 1024)
        BAD("%s: n_layers %d out of range", source, c->n_layers);
    if (c->dim < 1 || c->dim > 65536)
        BAD("%s: hidden size %d out of range", source, c->dim);
    if (c->n_heads < 1 || c->n_heads > 1024 || c->n_kv_heads < 1 || c->n_kv_heads > c->n_heads ||
        c->n_heads % c->n_kv_heads != 0)
        BAD("%s: heads %d / kv heads %d are not a valid grouping", source, c->n_heads, c->n_kv_heads);
    if (c->head_dim < 2 || c->head_dim % 2 != 0 || c->head_dim > 1024)
        BAD("%s: head_dim %d must be even and in [2, 1024]", source, c->head_dim);
    if (c->ffn_dim < 1 || c->ffn_dim > 1 << 20)
        BAD("%s: intermediate size %d out of range", source, c->ffn_dim);
    if (c->vocab_size < 1 || c->vocab_size > 1 << 24)
        BAD("%s: vocab size %d out of range", source, c->vocab_size);
    if (c->max_seq_len < 1)
        BAD("%s: context length %d out of range", source, c->max_seq_len);
    if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
        BAD("%s: rope theta %g is not positive", source, (double)c->rope_theta);
    if (!(c->rms_eps > 0) || !(c->rms_eps < 1))
        BAD("%s: rms epsilon %g out of (0, 1)", source, (double)c->rms_eps);
    if (c->rope_scaling < RLPI_ROPE_SCALING_NONE || c->rope_scaling > RLPI_ROPE_SCALING_LINEAR)
        BAD("%s: unknown rope scaling %d", source, c->rope_scaling);
    if (c->rope_scaling != RLPI_ROPE_SCALING_NONE && !(c->rope_factor >= 1.0f))
        BAD("%s: rope scaling factor %g must be >= 1", source, (double)c->rope_factor);
    return RLP_OK;
#undef BAD
}
