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
    if (c->activation != RLPI_ACT_SILU && c->activation != RLPI_ACT_GELU_TANH)
        BAD("%s: unknown activation %d", source, c->activation);
    if (!(c->norm_offset == 0.0f || c->norm_offset == 1.0f))
        BAD("%s: norm offset %g must be 0 or 1", source, (double)c->norm_offset);
    if (!(c->embed_scale >= 0) || !isfinite(c->embed_scale) || c->embed_scale > 1e4f)
        BAD("%s: embedding scale %g out of [0, 1e4]", source, (double)c->embed_scale);
    if (!(c->attn_scale >= 0) || !isfinite(c->attn_scale) || c->attn_scale > 1e3f)
        BAD("%s: attention scale %g out of [0, 1e3]", source, (double)c->attn_scale);
    if (!(c->final_softcap >= 0) || !isfinite(c->final_softcap))
        BAD("%s: final logit soft-cap %g must be >= 0", source, (double)c->final_softcap);
    if (c->sliding_window < 0 || c->sliding_window > 1 << 24)
        BAD("%s: sliding window %d out of range [0, %d]", source, c->sliding_window, 1 << 24);
    if (!(c->rope_theta_local >= 0) || !isfinite(c->rope_theta_local))
        BAD("%s: local rope theta %g must be >= 0", source, (double)c->rope_theta_local);
    if (c->score_labels < 0 || c->score_labels > 1 << 16)
        BAD("%s: score head labels %d out of range [0, %d]", source, c->score_labels, 1 << 16);
    if (c->score_labels == 0 && (c->score_bias || c->score_per_token))
        BAD("%s: a score-head bias or per-token scoring without a score head", source);
    for (int32_t i = 0; i < RLPI_MAX_LAYERS; i++) {
        if (c->local_layers[i] > 1)
            BAD("%s: layer %d has local flag %u (0 or 1)", source, i, (unsigned)c->local_layers[i]);
        if (c->local_layers[i] && (i >= c->n_layers || c->sliding_window == 0))
            BAD("%s: layer %d is marked sliding-window but %s", source, i,
                i >= c->n_layers ? "the model has fewer layers" : "no window size is set");
    }
    return RLP_OK;
#undef BAD
}

int32_t rlpi_model_config_n_local_layers(const rlpi_model_config *c)
{
    int32_t n = 0;
    for (int32_t i = 0; i < c->n_layers && i < RLPI_MAX_LAYERS; i++)
        n += c->local_layers[i] != 0;
    return c->sliding_window > 0 ? n : 0;
}

float rlpi_model_config_attn_scale(const rlpi_model_config *c)
{
    return c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim);
}
