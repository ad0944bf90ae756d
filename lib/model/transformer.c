/* The decoder (every family of model/config.h): forward and backward over packed sequences, the
 * chunked fused logprob head, and the parameter/gradient layout. Like
 * llm.c, parameters and gradients are each one allocation with tensors at
 * offsets, and every layer is a forward/backward pair over explicit
 * buffers. Only backend wrappers are called here (no host loops over
 * activations), so the CUDA backend runs this file unchanged. */
#include "model/transformer_internal.h"

#include "core/checked.h"
#include "core/error.h"
#include "model/qbase.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ parameters */

/* A layer's projection matrix `mat` (RLPI_QB_*) of a quantized base lives
 * in the window (model/qbase.h) and takes no space of its own; every other
 * tensor gets the next free floats. -1: not a projection. */
static int add_info(rlpi_transformer *tf, const char *name, int32_t nd, int64_t d0, int64_t d1,
                    bool no_decay, int mat, size_t *offset_out)
{
    rlpi_param_info *in = &tf->infos[tf->n_infos];
    tf->names[tf->n_infos] = strdup(name);
    if (!tf->names[tf->n_infos])
        return rlpi_error_set(RLP_E_NOMEM, "transformer: out of memory");
    in->name = tf->names[tf->n_infos];
    in->n_dims = nd;
    in->shape[0] = d0;
    in->shape[1] = nd > 1 ? d1 : 0;
    in->n_elems = (size_t)d0 * (size_t)(nd > 1 ? d1 : 1);
    bool windowed = tf->qbase && mat >= 0;
    in->offset = windowed ? tf->qbase->win_off[mat] : tf->n_stored;
    in->no_decay = no_decay;
    *offset_out = in->offset;
    tf->n_params += in->n_elems;
    if (!windowed)
        tf->n_stored += in->n_elems;
    tf->n_infos++;
    return RLP_OK;
}

int rlpi_tf_build_layout(rlpi_transformer *tf)
{
    const rlpi_model_config *c = &tf->cfg;
    size_t max_infos = 4 + (size_t)c->n_layers * 16;
    tf->infos = calloc(max_infos, sizeof *tf->infos);
    tf->names = calloc(max_infos, sizeof *tf->names);
    tf->layers = calloc((size_t)c->n_layers, sizeof *tf->layers);
    if (!tf->infos || !tf->names || !tf->layers)
        return rlpi_error_set(RLP_E_NOMEM, "transformer: out of memory");
    int rc;
    char name[128];
#define ADDM(nm, nd, a, b, nodecay, mat, off)                                \
    do {                                                                     \
        if ((rc = add_info(tf, nm, nd, a, b, nodecay, mat, off)) != RLP_OK)  \
            return rc;                                                       \
    } while (0)
#define ADD(nm, nd, a, b, nodecay, off) ADDM(nm, nd, a, b, nodecay, -1, off)
    ADD("model.embed_tokens.weight", 2, c->vocab_size, c->dim, true, &tf->embed);
    for (int l = 0; l < c->n_layers; l++) {
        layer_params *L = &tf->layers[l];
#define LNAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        ADD(LNAME("input_layernorm.weight"), 1, c->dim, 0, true, &L->attn_norm);
        ADDM(LNAME("self_attn.q_proj.weight"), 2, tf->qdim, c->dim, false, RLPI_QB_WQ, &L->wq);
        ADDM(LNAME("self_attn.k_proj.weight"), 2, tf->kvdim, c->dim, false, RLPI_QB_WK, &L->wk);
        ADDM(LNAME("self_attn.v_proj.weight"), 2, tf->kvdim, c->dim, false, RLPI_QB_WV, &L->wv);
        if (c->attention_bias) {
            ADD(LNAME("self_attn.q_proj.bias"), 1, tf->qdim, 0, true, &L->bq);
            ADD(LNAME("self_attn.k_proj.bias"), 1, tf->kvdim, 0, true, &L->bk);
            ADD(LNAME("self_attn.v_proj.bias"), 1, tf->kvdim, 0, true, &L->bv);
        }
        ADDM(LNAME("self_attn.o_proj.weight"), 2, c->dim, tf->qdim, false, RLPI_QB_WO, &L->wo);
        if (c->qk_norm) {
            ADD(LNAME("self_attn.q_norm.weight"), 1, c->head_dim, 0, true, &L->q_norm);
            ADD(LNAME("self_attn.k_norm.weight"), 1, c->head_dim, 0, true, &L->k_norm);
        }
        /* with post-norms (Gemma 2/3) HF's post_attention_layernorm is the
         * attention OUTPUT norm and the MLP's input norm is
         * pre_feedforward_layernorm; without, post_attention_layernorm is
         * the MLP's input norm (Llama) */
        if (c->post_norms) {
            ADD(LNAME("post_attention_layernorm.weight"), 1, c->dim, 0, true, &L->post_attn_norm);
            ADD(LNAME("pre_feedforward_layernorm.weight"), 1, c->dim, 0, true, &L->ffn_norm);
        } else {
            ADD(LNAME("post_attention_layernorm.weight"), 1, c->dim, 0, true, &L->ffn_norm);
        }
        ADDM(LNAME("mlp.gate_proj.weight"), 2, c->ffn_dim, c->dim, false, RLPI_QB_WG, &L->wg);
        ADDM(LNAME("mlp.up_proj.weight"), 2, c->ffn_dim, c->dim, false, RLPI_QB_WU, &L->wu);
        ADDM(LNAME("mlp.down_proj.weight"), 2, c->dim, c->ffn_dim, false, RLPI_QB_WD, &L->wd);
        if (c->post_norms)
            ADD(LNAME("post_feedforward_layernorm.weight"), 1, c->dim, 0, true, &L->post_ffn_norm);
        L->local = c->sliding_window > 0 && l < RLPI_MAX_LAYERS && c->local_layers[l];
        L->window = L->local ? c->sliding_window : 0;
#undef LNAME
    }
    /* the fused projections (layer_forward) read each group as one matrix */
    size_t qd = (size_t)tf->qdim * (size_t)c->dim, kvd = (size_t)tf->kvdim * (size_t)c->dim;
    tf->can_fuse_qkv = tf->can_fuse_gu = true;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_params *L = &tf->layers[l];
        tf->can_fuse_qkv &= L->wk == L->wq + qd && L->wv == L->wk + kvd &&
                            (!c->attention_bias || (L->bk == L->bq + (size_t)tf->qdim && L->bv == L->bk + (size_t)tf->kvdim));
        tf->can_fuse_gu &= L->wu == L->wg + (size_t)c->ffn_dim * (size_t)c->dim;
    }
    ADD("model.norm.weight", 1, c->dim, 0, true, &tf->final_norm);
    if (c->score_labels > 0) { /* value/reward model: HF's `score` Linear, no lm_head */
        ADD("score.weight", 2, c->score_labels, c->dim, false, &tf->score_w);
        if (c->score_bias)
            ADD("score.bias", 1, c->score_labels, 0, true, &tf->score_b);
    } else if (c->tie_embeddings)
        tf->lm_head = tf->embed;
    else
        ADD("lm_head.weight", 2, c->vocab_size, c->dim, false, &tf->lm_head);
#undef ADD
#undef ADDM
    return RLP_OK;
}

/* inv_freq[i] = θ^(−2i/hd), with Llama 3.1 or linear scaling
 * (HF transformers `_compute_llama3_parameters`) when `scaled`. */
static void compute_inv_freq(const rlpi_model_config *c, double theta, bool scaled, float *out)
{
    int half = c->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = 1.0 / pow(theta, (2.0 * i) / (double)c->head_dim);
        if (!scaled) {
            /* local layers of an interleaved model: plain RoPE (HF builds
             * their rotary embedding with the default rope type) */
        } else if (c->rope_scaling == RLPI_ROPE_SCALING_LINEAR) {
            f /= c->rope_factor;
        } else if (c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3) {
            double old = c->rope_original_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
            double low_wavelen = old / lo, high_wavelen = old / hi;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f /= c->rope_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / c->rope_factor + smooth * f;
            }
        }
        out[i] = (float)f;
    }
}

void rlpi_transformer_free(rlpi_transformer *tf)
{
    if (!tf)
        return;
    for (size_t i = 0; i < tf->n_infos; i++)
        free(tf->names[i]);
    free(tf->names);
    free(tf->infos);
    free(tf->layers);
    rlpi_buffer_free(tf->params);
    rlpi_buffer_free(tf->grads);
    rlpi_buffer_free(tf->inv_freq);
    rlpi_buffer_free(tf->inv_freq_local);
    rlpi_buffer_free(tf->head_capped);
    rlpi_buffer_free(tf->tokens);
    rlpi_buffer_free(tf->positions);
    rlpi_buffer_free(tf->sel);
    rlpi_buffer_free(tf->targets_sel);
    rlpi_buffer_free(tf->xs);
    rlpi_buffer_free(tf->acts);
    rlpi_buffer_free(tf->mlp_act);
    rlpi_buffer_free(tf->norm_out);
    rlpi_buffer_free(tf->h);
    rlpi_buffer_free(tf->rstd_f);
    rlpi_buffer_free(tf->hsel);
    rlpi_buffer_free(tf->head_logits);
    rlpi_buffer_free(tf->head_a);
    rlpi_buffer_free(tf->head_b);
    rlpi_buffer_free(tf->head_dhsel);
    rlpi_buffer_free(tf->grad_scratch);
    rlpi_buffer_free(tf->qkv);
    rlpi_buffer_free(tf->norm_sink);
    rlpi_lora_free(tf->lora);
    rlpi_qbase_free(tf->qbase);
    free(tf->seq_start);
    free(tf->sel_host);
    free(tf);
}

int rlpi_transformer_set_weights(rlpi_transformer *tf, const rlpi_weights *w)
{
    int rc = RLP_OK;
    rlpi_lora_base_changed(tf);
    for (size_t i = 0; i < tf->n_infos; i++) {
        const rlpi_param_info *in = &tf->infos[i];
        const rlpi_tensor *t = rlpi_weights_find(w, in->name);
        if (!t) {
            rc = rlpi_error_set(RLP_E_FORMAT, "model: missing tensor '%s'", in->name);
            return rc;
        }
        bool shape_ok = t->n_dims == in->n_dims && t->shape[0] == in->shape[0] &&
                        (in->n_dims == 1 || t->shape[1] == in->shape[1]);
        if (!shape_ok) {
            rc = rlpi_error_set(RLP_E_FORMAT, "model: tensor '%s' has shape (%lld, %lld), expected (%lld, %lld)",
                                in->name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0),
                                (long long)in->shape[0], (long long)in->shape[1]);
            return rc;
        }
        int layer, mat;
        if (rlpi_qbase_find(tf, in, &layer, &mat))
            rc = rlpi_qbase_write(tf, layer, mat, rlpi_tensor_data(w, t));
        else
            rc = rlpi_buffer_upload(tf->params, in->offset * sizeof(float), rlpi_tensor_data(w, t),
                                    in->n_elems * sizeof(float));
        if (rc != RLP_OK)
            return rc;
    }
    return RLP_OK;
}

/* What the layers below cannot do beyond rlpi_model_config_validate's
 * ranges: refused here with the field named rather than computed wrongly. */
static int check_runnable(const rlpi_model_config *c)
{
    /* compute_inv_freq divides by (high − low) and by low */
    if (c->rope_scaling == RLPI_ROPE_SCALING_LLAMA3 &&
        !(c->rope_low_freq_factor > 0 && c->rope_high_freq_factor > c->rope_low_freq_factor &&
          c->rope_original_max_pos > 0))
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "transformer: Llama 3 RoPE scaling needs 0 < low_freq_factor (%g) < high_freq_factor "
                              "(%g) and original_max_position_embeddings (%d) > 0",
                              (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
                              c->rope_original_max_pos);
    /* below this every logit would be capped flat (and 1/cap overflows long before 0) */
    if (c->final_softcap > 0 && !(c->final_softcap >= 1e-3f))
        return rlpi_error_set(RLP_E_UNSUPPORTED, "transformer: final logit soft-cap %g is below 1e-3",
                              (double)c->final_softcap);
    return RLP_OK;
}

int rlpi_transformer_create(rlpi_transformer **out, rlpi_backend *be, const rlpi_model_config *cfg,
                            const rlpi_weights *w, const rlpi_transformer_options *opts)
{
    if (!out || !be || !cfg || !w)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: NULL argument");
    int rc = rlpi_model_config_validate(cfg, "transformer");
    if (rc)
        return rc;
    rlpi_transformer *tf = calloc(1, sizeof *tf);
    if (!tf)
        return rlpi_error_set(RLP_E_NOMEM, "transformer: out of memory");
    tf->cfg = *cfg;
    if (cfg->score_labels > 0)
        tf->cfg.tie_embeddings = false; /* no lm_head to tie */
    else if (!rlpi_weights_find(w, "lm_head.weight"))
        tf->cfg.tie_embeddings = true; /* no head tensor: tied (public-bugs case #3) */
    if (opts)
        tf->opts = *opts;
    if (tf->opts.head_chunk_tokens <= 0)
        tf->opts.head_chunk_tokens = 64;
    tf->be = be;
    tf->qdim = (int64_t)cfg->n_heads * cfg->head_dim;
    tf->kvdim = (int64_t)cfg->n_kv_heads * cfg->head_dim;
    tf->attn_scale = rlpi_model_config_attn_scale(cfg);
    if ((rc = check_runnable(&tf->cfg)) != RLP_OK)
        goto fail;
    if ((rc = rlpi_tf_build_layout(tf)) != RLP_OK)
        goto fail;
    if ((rc = rlpi_buffer_alloc(be, tf->n_params * sizeof(float), &tf->params)) != RLP_OK ||
        (!tf->opts.frozen && (rc = rlpi_buffer_alloc(be, tf->n_params * sizeof(float), &tf->grads)) != RLP_OK))
        goto fail;
    if ((rc = rlpi_transformer_set_weights(tf, w)) != RLP_OK)
        goto fail;
    /* zero without touching host pages: LoRA frees this buffer unread */
    if (tf->grads && (rc = rlpi_buffer_zero(tf->grads)) != RLP_OK)
        goto fail;
    float inv_freq[512]; /* head_dim <= 1024 (rlpi_model_config_validate) */
    size_t half_bytes = (size_t)cfg->head_dim / 2 * sizeof(float);
    compute_inv_freq(&tf->cfg, tf->cfg.rope_theta, true, inv_freq);
    if ((rc = rlpi_buffer_alloc(be, half_bytes, &tf->inv_freq)) != RLP_OK ||
        (rc = rlpi_buffer_upload(tf->inv_freq, 0, inv_freq, half_bytes)) != RLP_OK)
        goto fail;
    if (rlpi_model_config_n_local_layers(&tf->cfg) > 0) {
        double theta_local = tf->cfg.rope_theta_local > 0 ? tf->cfg.rope_theta_local : tf->cfg.rope_theta;
        compute_inv_freq(&tf->cfg, theta_local, false, inv_freq);
        if ((rc = rlpi_buffer_alloc(be, half_bytes, &tf->inv_freq_local)) != RLP_OK ||
            (rc = rlpi_buffer_upload(tf->inv_freq_local, 0, inv_freq, half_bytes)) != RLP_OK)
            goto fail;
    }
    *out = tf;
    return RLP_OK;
fail:
    rlpi_transformer_free(tf);
    return rc;
}

void rlpi_transformer_set_fused_projections(rlpi_transformer *tf, bool qkv, bool gate_up)
{
    if (tf) {
        tf->separate_qkv = !qkv;
        tf->separate_gu = !gate_up;
    }
}

const rlpi_model_config *rlpi_transformer_config(const rlpi_transformer *tf)
{
    return &tf->cfg;
}

size_t rlpi_transformer_n_params(const rlpi_transformer *tf)
{
    return tf->n_params;
}

size_t rlpi_transformer_n_tensors(const rlpi_transformer *tf)
{
    return tf->n_infos;
}

const rlpi_param_info *rlpi_transformer_tensor(const rlpi_transformer *tf, size_t i)
{
    return i < tf->n_infos ? &tf->infos[i] : NULL;
}

rlpi_buffer *rlpi_transformer_params(rlpi_transformer *tf)
{
    return tf->params;
}

rlpi_buffer *rlpi_transformer_grads(rlpi_transformer *tf)
{
    return tf->grads;
}

int rlpi_transformer_zero_grad(rlpi_transformer *tf)
{
    if (tf->lora)
        return rlpi_lora_zero_grad(tf->lora);
    if (!tf->grads)
        return rlpi_error_set(RLP_E_STATE, "transformer: frozen model has no gradients");
    return rlpi_buffer_fill_f32(tf->grads, 0, tf->n_params, 0.0f);
}

void rlpi_transformer_release_grads(rlpi_transformer *tf)
{
    if (tf) {
        rlpi_buffer_discard(tf->grads);
        rlpi_lora_release_grads(tf->lora);
    }
}

size_t rlpi_transformer_activation_bytes(const rlpi_transformer *tf)
{
    const rlpi_buffer *bufs[] = {tf->tokens, tf->positions, tf->sel, tf->targets_sel, tf->xs, tf->acts,
                                 tf->mlp_act, tf->norm_out, tf->h, tf->rstd_f, tf->hsel};
    size_t total = 0;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        total += bufs[i] ? bufs[i]->nbytes : 0;
    return total + rlpi_lora_activation_bytes(tf->lora);
}

int rlpi_transformer_grad_norm(rlpi_transformer *tf, double *out)
{
    rlpi_buffer *G = rlpi_transformer_trainable_grads(tf);
    if (!G)
        return rlpi_error_set(RLP_E_STATE, "transformer: frozen model has no gradients");
    double ss;
    int rc = rlpi_op_sum_squares(tf->be, &ss, RLPI_REF(G, 0), (int64_t)rlpi_transformer_n_trainable(tf));
    if (rc == RLP_OK)
        *out = sqrt(ss);
    return rc;
}

int rlpi_transformer_export(rlpi_transformer *tf, rlpi_weights *out)
{
    rlpi_weights_init(out);
    int rc = RLP_OK;
    for (size_t i = 0; i < tf->n_infos && rc == RLP_OK; i++) {
        const rlpi_param_info *in = &tf->infos[i];
        rlpi_tensor *t;
        int64_t shape[2] = {in->shape[0], in->shape[1]};
        int layer, mat;
        if ((rc = rlpi_weights_add(out, in->name, in->n_dims, shape, &t)) != RLP_OK)
            break;
        if (rlpi_qbase_find(tf, in, &layer, &mat))
            rc = rlpi_qbase_read(tf, layer, mat, t->data);
        else
            rc = rlpi_buffer_download(tf->params, in->offset * sizeof(float), t->data, in->n_elems * sizeof(float));
    }
    if (rc == RLP_OK)
        rc = rlpi_lora_merge_into(tf, out); /* the model the adapters make */
    if (rc == RLP_OK && tf->cfg.tie_embeddings)
        rc = rlpi_weights_add_alias(out, "lm_head.weight", "model.embed_tokens.weight");
    if (rc != RLP_OK)
        rlpi_weights_free(out);
    return rc;
}

/* ------------------------------------------------------------ activations */

static act_layout layout_for(const rlpi_transformer *tf, int64_t n)
{
    const rlpi_model_config *c = &tf->cfg;
    act_layout L;
    size_t off = 0, nd = (size_t)(n * c->dim), nf = (size_t)(n * c->ffn_dim);
#define PLACE(field, count) (L.field = off, off += (count))
    L.xn1 = L.xn2 = 0; /* in tf->norm_out, not here */
    PLACE(rstd1, (size_t)n);
    PLACE(q, (size_t)(n * tf->qdim));
    PLACE(k, (size_t)(n * tf->kvdim));
    PLACE(v, (size_t)(n * tf->kvdim));
    PLACE(att, (size_t)(n * tf->qdim));
    PLACE(lse, (size_t)(n * c->n_heads));
    PLACE(x_mid, nd);
    PLACE(rstd2, (size_t)n);
    PLACE(gate, nf); /* gate and up back to back: with fused_gu they are one (2·ffn, n) product */
    PLACE(up, nf);
    L.act = 0; /* in tf->mlp_act, not here */
    /* the new families' extras (empty when off: a Llama layer is as before) */
    size_t nh = c->qk_norm ? (size_t)n : 0, npost = c->post_norms ? nd : 0, rpost = c->post_norms ? (size_t)n : 0;
    PLACE(q_raw, nh * (size_t)tf->qdim);
    PLACE(k_raw, nh * (size_t)tf->kvdim);
    PLACE(rstd_q, nh * (size_t)c->n_heads);
    PLACE(rstd_k, nh * (size_t)c->n_kv_heads);
    PLACE(attn_o, npost);
    PLACE(rstd_po, rpost);
    PLACE(mlp_o, npost);
    PLACE(rstd_pf, rpost);
#undef PLACE
    if (!c->qk_norm) { /* the projections write q and k directly */
        L.q_raw = L.q;
        L.k_raw = L.k;
    }
    L.total = off;
    L.fused_qkv = tf->can_fuse_qkv && !tf->separate_qkv;
    L.fused_gu = tf->can_fuse_gu && !tf->separate_gu;
    return L;
}

int rlpi_tf_realloc(rlpi_backend *be, rlpi_buffer **buf, size_t bytes)
{
    if (*buf && (*buf)->nbytes >= bytes && (*buf)->nbytes <= 2 * bytes + 4096)
        return RLP_OK;
    rlpi_buffer_free(*buf);
    *buf = NULL;
    return rlpi_buffer_alloc(be, bytes ? bytes : 4, buf);
}

int rlpi_tf_mm(rlpi_transformer *tf, rlpi_buffer *C, size_t coff, rlpi_buffer *A, size_t aoff, int ta,
               rlpi_buffer *B, size_t boff, int tb, int64_t m, int64_t n, int64_t k, float beta)
{
    rlpi_gemm g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 1.0f, .beta = beta,
                   .batch = 1,
                   .a = {A, aoff, ta ? m : k, 0},
                   .b = {B, boff, tb ? k : n, 0},
                   .c = {C, coff, n, 0}};
    return rlpi_gemm_f32(tf->be, &g);
}

int rlpi_tf_softcap(rlpi_transformer *tf, rlpi_buffer *logits, size_t off, int64_t rows)
{
    if (!(tf->cfg.final_softcap > 0))
        return RLP_OK;
    return rlpi_op_softcap_fwd(tf->be, RLPI_REF(logits, off), rows * tf->cfg.vocab_size, tf->cfg.final_softcap);
}

int rlpi_tf_embed_scale(rlpi_transformer *tf, rlpi_buffer *x, size_t off, int64_t rows)
{
    float s = tf->cfg.embed_scale;
    if (!(s > 0) || s == 1.0f)
        return RLP_OK;
    return rlpi_op_scale(tf->be, RLPI_REF(x, off), s, rows * tf->cfg.dim);
}

rlpi_buffer *rlpi_tf_inv_freq(rlpi_transformer *tf, int l)
{
    return tf->layers[l].local && tf->inv_freq_local ? tf->inv_freq_local : tf->inv_freq;
}

/* The gated MLP's activation: SwiGLU or GeGLU (cfg.activation). */
static int mlp_act_fwd(rlpi_transformer *tf, rlpi_ref out, rlpi_ref gate, rlpi_ref up, int64_t n)
{
    return tf->cfg.activation == RLPI_ACT_GELU_TANH ? rlpi_op_geglu_fwd(tf->be, out, gate, up, n)
                                                    : rlpi_op_swiglu_fwd(tf->be, out, gate, up, n);
}

static int mlp_act_bwd(rlpi_transformer *tf, rlpi_ref dgate, rlpi_ref dup, rlpi_ref dout, rlpi_ref gate, rlpi_ref up,
                       int64_t n)
{
    return tf->cfg.activation == RLPI_ACT_GELU_TANH ? rlpi_op_geglu_bwd(tf->be, dgate, dup, dout, gate, up, n)
                                                    : rlpi_op_swiglu_bwd(tf->be, dgate, dup, dout, gate, up, n);
}

/* Where the (n, qdim + 2·kvdim) fused Q/K/V product (or its gradient)
 * lives: in the layer's own gate/up region (n × 2·ffn floats, given as
 * buf/off) when it fits, which is unused at that moment in both passes;
 * otherwise in tf->qkv. */
static int qkv_place(rlpi_transformer *tf, rlpi_buffer **buf, size_t *off)
{
    int64_t n = tf->n, D = tf->qdim + 2 * tf->kvdim;
    if (D <= 2 * (int64_t)tf->cfg.ffn_dim)
        return RLP_OK;
    TRY(rlpi_tf_realloc(tf->be, &tf->qkv, (size_t)(n * D) * 4));
    *buf = tf->qkv;
    *off = 0;
    return RLP_OK;
}

/* Q, K and V as one product: qkv (n, qdim + 2·kvdim) = xn1 · [Wq; Wk; Wv]ᵀ
 * (+ [bq; bk; bv]), then its column blocks copied into the contiguous
 * q_raw, k_raw, v that RoPE, the q/k norms and attention read. The copy
 * (n × (qdim + 2·kvdim) floats) is small against the product (× dim
 * multiply-adds per element) and keeps every kernel's layout as it is. */
static int qkv_forward(rlpi_transformer *tf, const layer_params *P, rlpi_buffer *a, size_t aoff)
{
    const act_layout *L = &tf->lay;
    int64_t n = tf->n, d = tf->cfg.dim, qd = tf->qdim, kvd = tf->kvdim, D = qd + 2 * kvd;
    rlpi_buffer *Q = a;
    size_t qo = aoff + L->gate; /* before this layer's gate/up product is written */
    TRY(qkv_place(tf, &Q, &qo));
    TRY(rlpi_tf_mm(tf, Q, qo, tf->norm_out, L->xn1, 0, tf->params, P->wq, 1, n, D, d, 0.0f));
    if (tf->cfg.attention_bias)
        TRY(rlpi_op_add_bias(tf->be, RLPI_REF(Q, qo), RLPI_REF(tf->params, P->bq), n, D));
    size_t pitch = (size_t)D * 4;
    qo *= 4;
    TRY(rlpi_buffer_copy_2d(a, (aoff + L->q_raw) * 4, (size_t)qd * 4, Q, qo, pitch, (size_t)qd * 4, (size_t)n));
    TRY(rlpi_buffer_copy_2d(a, (aoff + L->k_raw) * 4, (size_t)kvd * 4, Q, qo + (size_t)qd * 4, pitch, (size_t)kvd * 4,
                            (size_t)n));
    TRY(rlpi_buffer_copy_2d(a, (aoff + L->v) * 4, (size_t)kvd * 4, Q, qo + (size_t)(qd + kvd) * 4, pitch,
                            (size_t)kvd * 4, (size_t)n));
    return RLP_OK;
}

/* The backward of qkv_forward: dq_raw, dk_raw, dv gathered into one
 * (n, qdim + 2·kvdim) gradient (at S[dgu], the MLP's spent (n, 2·ffn)
 * gradient, when it fits), then one product for dxn and one for
 * d[Wq; Wk; Wv], and one bias reduction. */
static int qkv_backward(rlpi_transformer *tf, const layer_params *P, rlpi_buffer *xn, size_t xnoff, rlpi_buffer *S,
                        size_t dgu, size_t dq, size_t dk, size_t dv, size_t dxn)
{
    int64_t n = tf->n, d = tf->cfg.dim, qd = tf->qdim, kvd = tf->kvdim, D = qd + 2 * kvd;
    rlpi_buffer *Q = S;
    size_t qo = dgu;
    TRY(qkv_place(tf, &Q, &qo));
    size_t pitch = (size_t)D * 4, qb = qo * 4;
    TRY(rlpi_buffer_copy_2d(Q, qb, pitch, S, dq * 4, (size_t)qd * 4, (size_t)qd * 4, (size_t)n));
    TRY(rlpi_buffer_copy_2d(Q, qb + (size_t)qd * 4, pitch, S, dk * 4, (size_t)kvd * 4, (size_t)kvd * 4, (size_t)n));
    TRY(rlpi_buffer_copy_2d(Q, qb + (size_t)(qd + kvd) * 4, pitch, S, dv * 4, (size_t)kvd * 4, (size_t)kvd * 4,
                            (size_t)n));
    if (tf->cfg.attention_bias && tf->grads)
        TRY(rlpi_op_bias_bwd(tf->be, RLPI_REF(tf->grads, P->bq), RLPI_REF(Q, qo), n, D));
    TRY(rlpi_tf_mm(tf, S, dxn, Q, qo, 0, tf->params, P->wq, 0, n, d, D, 0.0f));
    if (tf->grads) /* NULL: frozen base (LoRA) */
        TRY(rlpi_tf_mm(tf, tf->grads, P->wq, Q, qo, 1, xn, xnoff, 0, D, d, n, 1.0f));
    return RLP_OK;
}

/* One decoder layer: xs[l] → xs[l+1], saving what backward needs in `a`
 * (a buffer laid out by tf->lay starting at aoff). */
static int layer_forward(rlpi_transformer *tf, int l, rlpi_buffer *a, size_t aoff, size_t x_in, size_t x_out)
{
    const rlpi_model_config *c = &tf->cfg;
    const layer_params *P = &tf->layers[l];
    const act_layout *L = &tf->lay;
    rlpi_backend *be = tf->be;
    rlpi_buffer *W = tf->params;
    int64_t n = tf->n, d = c->dim;
    TRY(rlpi_qbase_load_layer(tf, l));
#define A(field) RLPI_REF(a, aoff + L->field)
    rlpi_buffer *freq = rlpi_tf_inv_freq(tf, l);
    TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(tf->norm_out, L->xn1), A(rstd1), RLPI_REF(tf->xs, x_in),
                            RLPI_REF(W, P->attn_norm), n, d, c->rms_eps));
    if (L->fused_qkv) {
        TRY(qkv_forward(tf, P, a, aoff));
    } else {
        TRY(rlpi_tf_mm(tf, a, aoff + L->q_raw, tf->norm_out, L->xn1, 0, W, P->wq, 1, n, tf->qdim, d, 0.0f));
        TRY(rlpi_tf_mm(tf, a, aoff + L->k_raw, tf->norm_out, L->xn1, 0, W, P->wk, 1, n, tf->kvdim, d, 0.0f));
        TRY(rlpi_tf_mm(tf, a, aoff + L->v, tf->norm_out, L->xn1, 0, W, P->wv, 1, n, tf->kvdim, d, 0.0f));
    }
    if (c->attention_bias && !L->fused_qkv) {
        TRY(rlpi_op_add_bias(be, A(q_raw), RLPI_REF(W, P->bq), n, tf->qdim));
        TRY(rlpi_op_add_bias(be, A(k_raw), RLPI_REF(W, P->bk), n, tf->kvdim));
        TRY(rlpi_op_add_bias(be, A(v), RLPI_REF(W, P->bv), n, tf->kvdim));
    }
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_Q, tf->norm_out, L->xn1, 0, a, aoff + L->q_raw, 0));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_K, tf->norm_out, L->xn1, 0, a, aoff + L->k_raw, 0));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_V, tf->norm_out, L->xn1, 0, a, aoff + L->v, 0));
    if (c->qk_norm) { /* per-head RMSNorm before RoPE: (n·heads) rows of head_dim */
        TRY(rlpi_op_rmsnorm_fwd(be, A(q), A(rstd_q), A(q_raw), RLPI_REF(W, P->q_norm), n * c->n_heads, c->head_dim,
                                c->rms_eps));
        TRY(rlpi_op_rmsnorm_fwd(be, A(k), A(rstd_k), A(k_raw), RLPI_REF(W, P->k_norm), n * c->n_kv_heads, c->head_dim,
                                c->rms_eps));
    }
    TRY(rlpi_op_rope(be, A(q), RLPI_REF(tf->positions, 0), RLPI_REF(freq, 0), n, c->n_heads, c->head_dim, 0));
    TRY(rlpi_op_rope(be, A(k), RLPI_REF(tf->positions, 0), RLPI_REF(freq, 0), n, c->n_kv_heads, c->head_dim, 0));
    TRY(rlpi_op_attention_fwd(be, A(att), A(lse), A(q), A(k), A(v), tf->seq_start, tf->n_seq, n, c->n_heads,
                              c->n_kv_heads, c->head_dim, tf->attn_scale, P->window));
    if (c->post_norms) {
        /* x_mid = x_in + RMSNorm_post_attn(att·Woᵀ) */
        TRY(rlpi_tf_mm(tf, a, aoff + L->attn_o, a, aoff + L->att, 0, W, P->wo, 1, n, d, tf->qdim, 0.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_O, a, aoff + L->att, 0, a, aoff + L->attn_o, 0));
        TRY(rlpi_op_rmsnorm_fwd(be, A(x_mid), A(rstd_po), A(attn_o), RLPI_REF(W, P->post_attn_norm), n, d, c->rms_eps));
        TRY(rlpi_op_add(be, A(x_mid), RLPI_REF(tf->xs, x_in), n * d));
    } else {
        /* x_mid = x_in + att·Woᵀ */
        TRY(rlpi_buffer_copy(a, (aoff + L->x_mid) * 4, tf->xs, x_in * 4, (size_t)(n * d) * 4));
        TRY(rlpi_tf_mm(tf, a, aoff + L->x_mid, a, aoff + L->att, 0, W, P->wo, 1, n, d, tf->qdim, 1.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_O, a, aoff + L->att, 0, a, aoff + L->x_mid, 0));
    }
    TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(tf->norm_out, L->xn2), A(rstd2), A(x_mid), RLPI_REF(W, P->ffn_norm), n, d,
                            c->rms_eps));
    /* fused: [gate; up]ᵀ (2·ffn, n) = W_gu (2·ffn, d) · xn2ᵀ in one product,
     * and act stays transposed (the activation is elementwise), so the down
     * projection reads actᵀ with trans_a */
    int gt = L->fused_gu;
    if (gt) {
        TRY(rlpi_tf_mm(tf, a, aoff + L->gate, W, P->wg, 0, tf->norm_out, L->xn2, 1, 2 * c->ffn_dim, n, d, 0.0f));
    } else {
        TRY(rlpi_tf_mm(tf, a, aoff + L->gate, tf->norm_out, L->xn2, 0, W, P->wg, 1, n, c->ffn_dim, d, 0.0f));
        TRY(rlpi_tf_mm(tf, a, aoff + L->up, tf->norm_out, L->xn2, 0, W, P->wu, 1, n, c->ffn_dim, d, 0.0f));
    }
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_GATE, tf->norm_out, L->xn2, 0, a, aoff + L->gate, gt));
    TRY(rlpi_lora_forward(tf, l, RLPI_LORA_UP, tf->norm_out, L->xn2, 0, a, aoff + L->up, gt));
    TRY(mlp_act_fwd(tf, RLPI_REF(tf->mlp_act, L->act), A(gate), A(up), n * c->ffn_dim));
    if (c->post_norms) {
        /* x_out = x_mid + RMSNorm_post_ffw(act·Wdᵀ) */
        TRY(rlpi_tf_mm(tf, a, aoff + L->mlp_o, tf->mlp_act, L->act, gt, W, P->wd, 1, n, d, c->ffn_dim, 0.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_DOWN, tf->mlp_act, L->act, gt, a, aoff + L->mlp_o, 0));
        TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(tf->xs, x_out), A(rstd_pf), A(mlp_o), RLPI_REF(W, P->post_ffn_norm), n, d,
                                c->rms_eps));
        TRY(rlpi_op_add(be, RLPI_REF(tf->xs, x_out), A(x_mid), n * d));
    } else {
        /* x_out = x_mid + act·Wdᵀ */
        TRY(rlpi_buffer_copy(tf->xs, x_out * 4, a, (aoff + L->x_mid) * 4, (size_t)(n * d) * 4));
        TRY(rlpi_tf_mm(tf, tf->xs, x_out, tf->mlp_act, L->act, gt, W, P->wd, 1, n, d, c->ffn_dim, 1.0f));
        TRY(rlpi_lora_forward(tf, l, RLPI_LORA_DOWN, tf->mlp_act, L->act, gt, tf->xs, x_out, 0));
    }
#undef A
    return RLP_OK;
}

static int check_batch(const rlpi_transformer *tf, const rlpi_packed_batch *b)
{
    if (!b || b->n_seq < 1 || !b->seq_start || b->n_tokens < 1 || !b->tokens || !b->positions)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: empty or incomplete batch");
    if (b->seq_start[0] != 0 || b->seq_start[b->n_seq] != b->n_tokens)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: sequences must cover the %lld tokens",
                              (long long)b->n_tokens);
    for (int64_t s = 0; s < b->n_seq; s++)
        if (b->seq_start[s + 1] <= b->seq_start[s])
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: sequence %lld is empty or reversed", (long long)s);
    for (int64_t i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= tf->cfg.vocab_size)
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: token %lld has id %d outside the vocabulary of %d",
                                  (long long)i, b->tokens[i], tf->cfg.vocab_size);
        if (b->targets && (b->targets[i] < -1 || b->targets[i] >= tf->cfg.vocab_size))
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: target %lld has id %d outside the vocabulary",
                                  (long long)i, b->targets[i]);
        if (b->positions[i] < 0 || b->positions[i] >= tf->cfg.max_seq_len)
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer: position %d of token %lld outside [0, %d)",
                                  b->positions[i], (long long)i, tf->cfg.max_seq_len);
    }
    return RLP_OK;
}

/* Everything below the head: embeddings, the layers and the final norm of
 * the whole batch into tf->h, then the m rows `sel` (token indices)
 * gathered into tf->hsel for the head. `tsel` (m target ids) goes to the
 * device for the logprob head, or NULL (score head). Records the state a
 * backward needs; tf->kept is left false (the caller sets it once its head
 * has run). */
static int trunk_forward(rlpi_transformer *tf, const rlpi_packed_batch *batch, const int32_t *sel,
                         const int32_t *tsel, int64_t m, bool keep_for_backward)
{
    /* before anything is allocated: nothing to free on this refusal */
    if (keep_for_backward && !tf->grads && !rlpi_lora_trainable(tf->lora))
        return rlpi_error_set(RLP_E_STATE, "transformer forward: a frozen model keeps no activations");
    const rlpi_model_config *c = &tf->cfg;
    rlpi_backend *be = tf->be;
    int64_t n = batch->n_tokens, d = c->dim;
    tf->kept = false;
    tf->n = n;
    tf->n_seq = batch->n_seq;

    int64_t *ss = realloc(tf->seq_start, (size_t)(batch->n_seq + 1) * sizeof *ss);
    if (ss)
        tf->seq_start = ss;
    int32_t *sh = realloc(tf->sel_host, (size_t)(m ? m : 1) * sizeof *sh);
    if (sh)
        tf->sel_host = sh;
    if (!ss || !sh)
        return rlpi_error_set(RLP_E_NOMEM, "transformer forward: out of memory");
    memcpy(tf->seq_start, batch->seq_start, (size_t)(batch->n_seq + 1) * sizeof *ss);
    if (m)
        memcpy(tf->sel_host, sel, (size_t)m * sizeof *sel);
    tf->m = m;

    tf->lay = layout_for(tf, n);
    int64_t n_act = keep_for_backward && !tf->opts.activation_checkpointing ? c->n_layers : 1;
    /* the residual stream of every layer is kept for backward (it is the
     * checkpoint); a forward-only pass ping-pongs between two slots */
    int64_t n_xs = keep_for_backward ? c->n_layers + 1 : 2;
    TRY(rlpi_tf_realloc(be, &tf->tokens, (size_t)n * 4));
    TRY(rlpi_tf_realloc(be, &tf->positions, (size_t)n * 4));
    TRY(rlpi_tf_realloc(be, &tf->sel, (size_t)(m ? m : 1) * 4));
    TRY(rlpi_tf_realloc(be, &tf->targets_sel, (size_t)(m ? m : 1) * 4));
    TRY(rlpi_tf_realloc(be, &tf->xs, (size_t)n_xs * (size_t)(n * d) * 4));
    TRY(rlpi_tf_realloc(be, &tf->acts, (size_t)n_act * tf->lay.total * 4));
    TRY(rlpi_tf_realloc(be, &tf->mlp_act, (size_t)(n * c->ffn_dim) * 4));
    TRY(rlpi_tf_realloc(be, &tf->norm_out, (size_t)(n * d) * 4));
    TRY(rlpi_tf_realloc(be, &tf->h, (size_t)(n * d) * 4));
    TRY(rlpi_tf_realloc(be, &tf->rstd_f, (size_t)n * 4));
    TRY(rlpi_tf_realloc(be, &tf->hsel, (size_t)((m ? m : 1) * d) * 4));
    TRY(rlpi_buffer_upload(tf->tokens, 0, batch->tokens, (size_t)n * 4));
    TRY(rlpi_buffer_upload(tf->positions, 0, batch->positions, (size_t)n * 4));
    TRY(rlpi_buffer_upload(tf->sel, 0, sel, (size_t)m * 4));
    if (tsel)
        TRY(rlpi_buffer_upload(tf->targets_sel, 0, tsel, (size_t)m * 4));
    TRY(rlpi_lora_begin_forward(tf, n, keep_for_backward));

    TRY(rlpi_op_embedding_fwd(be, RLPI_REF(tf->xs, 0), RLPI_REF(tf->params, tf->embed), RLPI_REF(tf->tokens, 0),
                              n, d, c->vocab_size));
    TRY(rlpi_tf_embed_scale(tf, tf->xs, 0, n));
    size_t nd = (size_t)(n * d);
    for (int l = 0; l < c->n_layers; l++) {
        size_t x_in = keep_for_backward ? (size_t)l * nd : (size_t)(l % 2) * nd;
        size_t x_out = keep_for_backward ? x_in + nd : (size_t)((l + 1) % 2) * nd;
        TRY(layer_forward(tf, l, tf->acts, n_act > 1 ? (size_t)l * tf->lay.total : 0, x_in, x_out));
    }
    size_t x_last = keep_for_backward ? (size_t)c->n_layers * nd : (size_t)(c->n_layers % 2) * nd;
    TRY(rlpi_op_rmsnorm_fwd(be, RLPI_REF(tf->h, 0), RLPI_REF(tf->rstd_f, 0), RLPI_REF(tf->xs, x_last),
                            RLPI_REF(tf->params, tf->final_norm), n, d, c->rms_eps));
    if (m > 0)
        TRY(rlpi_op_embedding_fwd(be, RLPI_REF(tf->hsel, 0), RLPI_REF(tf->h, 0), RLPI_REF(tf->sel, 0), m, d, n));
    return RLP_OK;
}

static int refuse_score_head(const rlpi_transformer *tf, const char *what)
{
    return rlpi_error_set(RLP_E_STATE,
                          "transformer %s: this model has a score head (%d outputs, a value or reward model), "
                          "not a language-model head",
                          what, tf->cfg.score_labels);
}

int rlpi_transformer_forward(rlpi_transformer *tf, const rlpi_packed_batch *batch, float inv_temp,
                             float *logp, float *entropy, bool keep_for_backward)
{
    if (!tf || !logp || !(inv_temp > 0))
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer forward: bad arguments");
    if (tf->cfg.score_labels > 0)
        return refuse_score_head(tf, "forward");
    if (batch && !batch->targets)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer forward: the batch has no targets");
    TRY(check_batch(tf, batch));
    const rlpi_model_config *c = &tf->cfg;
    rlpi_backend *be = tf->be;
    int64_t n = batch->n_tokens, d = c->dim;
    tf->inv_temp = inv_temp;
    int32_t *sel = malloc((size_t)n * sizeof *sel), *tsel = malloc((size_t)n * sizeof *tsel);
    if (!sel || !tsel) {
        free(sel);
        free(tsel);
        return rlpi_error_set(RLP_E_NOMEM, "transformer forward: out of memory");
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (batch->targets[i] >= 0) {
            sel[m] = (int32_t)i;
            tsel[m++] = batch->targets[i];
        }
    int rc = trunk_forward(tf, batch, sel, tsel, m, keep_for_backward);
    free(tsel);
    free(sel);
    if (rc)
        return rc;
    sel = tf->sel_host;

    /* fused head over the m target rows, `chunk` rows of logits at a time:
     * peak memory chunk × vocab, independent of m */
    memset(logp, 0, (size_t)n * sizeof *logp);
    if (entropy)
        memset(entropy, 0, (size_t)n * sizeof *entropy);
    if (m > 0) {
        int64_t chunk = tf->opts.head_chunk_tokens < m ? tf->opts.head_chunk_tokens : m;
        rlpi_buffer *logits, *lp, *ent;
        float *lp_host = malloc((size_t)m * 2 * sizeof(float));
        rc = lp_host ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "transformer forward: out of memory");
        if (!rc)
            rc = rlpi_tf_realloc(be, &tf->head_logits, (size_t)(chunk * c->vocab_size) * 4);
        if (!rc)
            rc = rlpi_tf_realloc(be, &tf->head_a, (size_t)m * 4);
        if (!rc)
            rc = rlpi_tf_realloc(be, &tf->head_b, (size_t)m * 4);
        logits = tf->head_logits, lp = tf->head_a, ent = tf->head_b;
        for (int64_t r0 = 0; !rc && r0 < m; r0 += chunk) {
            int64_t rows = m - r0 < chunk ? m - r0 : chunk;
            rc = rlpi_tf_mm(tf, logits, 0, tf->hsel, (size_t)(r0 * d), 0, tf->params, tf->lm_head, 1, rows, c->vocab_size, d, 0.0f);
            if (!rc)
                rc = rlpi_tf_softcap(tf, logits, 0, rows);
            if (!rc)
                rc = rlpi_op_logprob_rows(be, RLPI_REF(lp, (size_t)r0), RLPI_REF(ent, (size_t)r0), RLPI_REF(logits, 0),
                                          RLPI_REF(tf->targets_sel, (size_t)r0), rows, c->vocab_size, inv_temp);
        }
        if (!rc)
            rc = rlpi_buffer_download(lp, 0, lp_host, (size_t)m * 4);
        if (!rc)
            rc = rlpi_buffer_download(ent, 0, lp_host + m, (size_t)m * 4);
        if (!rc)
            for (int64_t r = 0; r < m; r++) {
                logp[sel[r]] = lp_host[r];
                if (entropy)
                    entropy[sel[r]] = lp_host[m + r];
            }
        free(lp_host);
        if (rc)
            return rc;
    }
    tf->kept = keep_for_backward;
    return RLP_OK;
}

int rlpi_transformer_score(rlpi_transformer *tf, const rlpi_packed_batch *batch, const int32_t *rows,
                           int64_t n_rows, float *out, bool keep_for_backward)
{
    if (!tf || !rows || !out || n_rows < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer score: bad arguments");
    if (tf->cfg.score_labels < 1)
        return rlpi_error_set(RLP_E_STATE, "transformer score: this model has no score head (a language model)");
    TRY(check_batch(tf, batch));
    for (int64_t r = 0; r < n_rows; r++)
        if (rows[r] < 0 || rows[r] >= batch->n_tokens)
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer score: row %d outside the %lld tokens", rows[r],
                                  (long long)batch->n_tokens);
    const rlpi_model_config *c = &tf->cfg;
    int64_t L = c->score_labels, d = c->dim;
    TRY(trunk_forward(tf, batch, rows, NULL, n_rows, keep_for_backward));
    /* (m, L) = hsel (m, d) · W_scoreᵀ; the bias (L floats) is added on the host */
    TRY(rlpi_tf_realloc(tf->be, &tf->head_logits, (size_t)(n_rows * L) * 4));
    TRY(rlpi_tf_mm(tf, tf->head_logits, 0, tf->hsel, 0, 0, tf->params, tf->score_w, 1, n_rows, L, d, 0.0f));
    TRY(rlpi_buffer_download(tf->head_logits, 0, out, (size_t)(n_rows * L) * 4));
    if (c->score_bias) {
        float *b = malloc((size_t)L * sizeof *b);
        if (!b)
            return rlpi_error_set(RLP_E_NOMEM, "transformer score: out of memory");
        int rc = rlpi_buffer_download(tf->params, tf->score_b * sizeof(float), b, (size_t)L * sizeof *b);
        for (int64_t r = 0; !rc && r < n_rows; r++)
            for (int64_t j = 0; j < L; j++)
                out[r * L + j] += b[j];
        free(b);
        if (rc)
            return rc;
    }
    tf->kept = keep_for_backward;
    return RLP_OK;
}

int rlpi_transformer_logits_rows(rlpi_transformer *tf, const rlpi_packed_batch *batch, const int32_t *rows,
                                 int64_t n_rows, float *logits)
{
    if (!tf || !batch || !rows || !logits || n_rows < 1 || batch->n_seq < 1 || batch->n_tokens < 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer logits: bad arguments");
    if (tf->cfg.score_labels > 0)
        return refuse_score_head(tf, "logits");
    for (int64_t r = 0; r < n_rows; r++)
        if (rows[r] < 0 || rows[r] >= batch->n_tokens)
            return rlpi_error_set(RLP_E_INVALID_ARG, "transformer logits: row %d outside the %lld tokens", rows[r],
                                  (long long)batch->n_tokens);
    TRY(check_batch(tf, batch));
    /* the trunk gathers the rows' final hidden states into hsel; the head runs on them alone */
    TRY(trunk_forward(tf, batch, rows, NULL, n_rows, false));
    const rlpi_model_config *c = &tf->cfg;
    int64_t R = n_rows, d = c->dim;
    rlpi_buffer *out = NULL;
    int rc = rlpi_buffer_alloc(tf->be, (size_t)(R * c->vocab_size) * 4, &out);
    if (!rc)
        rc = rlpi_tf_mm(tf, out, 0, tf->hsel, 0, 0, tf->params, tf->lm_head, 1, R, c->vocab_size, d, 0.0f);
    if (!rc)
        rc = rlpi_tf_softcap(tf, out, 0, R);
    if (!rc)
        rc = rlpi_buffer_download(out, 0, logits, (size_t)(R * c->vocab_size) * 4);
    rlpi_buffer_free(out);
    return rc;
}

int rlpi_transformer_last_logits(rlpi_transformer *tf, const rlpi_packed_batch *batch, float *logits)
{
    if (!tf || !batch || !logits || batch->n_seq < 1 || batch->n_tokens < 1 || !batch->seq_start)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer last logits: bad arguments");
    int32_t *last = malloc((size_t)batch->n_seq * sizeof *last);
    if (!last)
        return rlpi_error_set(RLP_E_NOMEM, "transformer last logits: out of memory");
    for (int64_t s = 0; s < batch->n_seq; s++)
        last[s] = (int32_t)(batch->seq_start[s + 1] - 1);
    int rc = rlpi_transformer_logits_rows(tf, batch, last, batch->n_seq, logits);
    free(last);
    return rc;
}

/* ---------------------------------------------------------------- backward */

typedef struct grad_scratch {
    rlpi_buffer *buf;
    size_t dx, dxn, dact, dgate, dup, datt, dq, dk, dv; /* offsets */
    size_t dq_raw, dk_raw, dpost; /* qk_norm: before the norm (alias dq/dk without); post_norms: (n, dim) */
    size_t xn, rstd_re;           /* xn2, then xn1, recomputed (n, dim), and their rstd (n, unread) */
} grad_scratch;

/* Whether backward reads the input shared by the projections in `targets`
 * (a mask of 1 << RLPI_LORA_*): for the base weights' gradients, or for an
 * adapter's on one of them. */
static bool need_input(const rlpi_transformer *tf, unsigned targets)
{
    if (tf->grads)
        return true;
    for (int t = 0; t < RLPI_LORA_N_TARGETS; t++)
        if (targets >> t & 1u && rlpi_lora_active(tf->lora, t))
            return true;
    return false;
}

/* The MLP activation (kept in no layer's buffer: see act_layout)
 * recomputed from the layer's saved gate and up into S at `off`, the
 * (n, ffn) space of dgate, which holds nothing until mlp_act_bwd writes
 * it; the same kernel on the same inputs as the forward, so the same bits.
 * Skipped when nothing reads it (a frozen base without a LoRA adapter on
 * the down projection). */
static int recompute_act(rlpi_transformer *tf, rlpi_buffer *a, size_t aoff, rlpi_buffer *S, size_t off)
{
    if (!need_input(tf, 1u << RLPI_LORA_DOWN))
        return RLP_OK;
    const act_layout *L = &tf->lay;
    return mlp_act_fwd(tf, RLPI_REF(S, off), RLPI_REF(a, aoff + L->gate), RLPI_REF(a, aoff + L->up),
                       tf->n * tf->cfg.ffn_dim);
}

static int layer_backward(rlpi_transformer *tf, int l, rlpi_buffer *a, size_t aoff, grad_scratch *g)
{
    const rlpi_model_config *c = &tf->cfg;
    const layer_params *P = &tf->layers[l];
    const act_layout *L = &tf->lay;
    rlpi_backend *be = tf->be;
    TRY(rlpi_qbase_load_layer(tf, l));
    rlpi_buffer *W = tf->params, *G = tf->grads, *S = g->buf;
    int64_t n = tf->n, d = c->dim, F = c->ffn_dim;
    size_t x_in = (size_t)l * (size_t)(n * d);
#define A(field) RLPI_REF(a, aoff + L->field)
#define SR(field) RLPI_REF(S, g->field)
    /* frozen base (LoRA): no ∂W products, the norms' ∂w into a sink */
#define GN(off) (G ? RLPI_REF(G, (off)) : RLPI_REF(tf->norm_sink, 0))
    int gt = L->fused_gu;
    /* MLP: out = x_mid + act·Wdᵀ, or x_mid + RMSNorm_post_ffw(act·Wdᵀ); dmlp = ∂L/∂(act·Wdᵀ) */
    size_t dmlp = g->dx;
    if (c->post_norms) {
        TRY(rlpi_buffer_fill_f32(S, g->dpost, (size_t)(n * d), 0.0f));
        TRY(rlpi_op_rmsnorm_bwd(be, SR(dpost), GN(P->post_ffn_norm), SR(dx), A(mlp_o), RLPI_REF(W, P->post_ffn_norm),
                                A(rstd_pf), n, d));
        dmlp = g->dpost;
    }
    if (need_input(tf, 1u << RLPI_LORA_GATE | 1u << RLPI_LORA_UP)) /* xn2 */
        TRY(rlpi_op_rmsnorm_fwd(be, SR(xn), SR(rstd_re), A(x_mid), RLPI_REF(W, P->ffn_norm), n, d, c->rms_eps));
    if (L->fused_gu) {
        /* everything of the MLP transposed (layer_forward): dactᵀ (F, n) =
         * Wdᵀ · dmlpᵀ; dWd += dmlpᵀ · act; [dgate; dup]ᵀ is one (2F, n)
         * matrix, so dxn = [dgate dup] · W_gu and dW_gu += [dgate; dup]ᵀ · xn2
         * are one product each */
        TRY(rlpi_tf_mm(tf, S, g->dact, W, P->wd, 1, S, dmlp, 1, F, n, d, 0.0f));
        TRY(recompute_act(tf, a, aoff, S, g->dgate));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wd, S, dmlp, 1, S, g->dgate, 1, d, F, n, 1.0f));
        TRY(rlpi_lora_backward(tf, l, RLPI_LORA_DOWN, S, dmlp, 0, S, g->dgate, gt, S, g->dact, gt));
        TRY(mlp_act_bwd(tf, SR(dgate), SR(dup), SR(dact), A(gate), A(up), n * F));
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dgate, 1, W, P->wg, 0, n, d, 2 * F, 0.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wg, S, g->dgate, 0, S, g->xn, 0, 2 * F, d, n, 1.0f));
    } else {
        TRY(rlpi_tf_mm(tf, S, g->dact, S, dmlp, 0, W, P->wd, 0, n, F, d, 0.0f));
        TRY(recompute_act(tf, a, aoff, S, g->dgate));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wd, S, dmlp, 1, S, g->dgate, 0, d, F, n, 1.0f));
        TRY(rlpi_lora_backward(tf, l, RLPI_LORA_DOWN, S, dmlp, 0, S, g->dgate, gt, S, g->dact, gt));
        TRY(mlp_act_bwd(tf, SR(dgate), SR(dup), SR(dact), A(gate), A(up), n * F));
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dgate, 0, W, P->wg, 0, n, d, F, 0.0f));
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dup, 0, W, P->wu, 0, n, d, F, 1.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wg, S, g->dgate, 1, S, g->xn, 0, F, d, n, 1.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wu, S, g->dup, 1, S, g->xn, 0, F, d, n, 1.0f));
    }
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_GATE, S, g->dgate, gt, S, g->xn, 0, S, g->dxn, 0));
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_UP, S, g->dup, gt, S, g->xn, 0, S, g->dxn, 0));
    TRY(rlpi_op_rmsnorm_bwd(be, SR(dx), GN(P->ffn_norm), SR(dxn), A(x_mid), RLPI_REF(W, P->ffn_norm), A(rstd2), n, d));
    /* attention: x_mid = x_in + att·Woᵀ, or x_in + RMSNorm_post_attn(att·Woᵀ); dattn = ∂L/∂(att·Woᵀ) */
    size_t dattn = g->dx;
    if (c->post_norms) {
        TRY(rlpi_buffer_fill_f32(S, g->dpost, (size_t)(n * d), 0.0f));
        TRY(rlpi_op_rmsnorm_bwd(be, SR(dpost), GN(P->post_attn_norm), SR(dx), A(attn_o), RLPI_REF(W, P->post_attn_norm),
                                A(rstd_po), n, d));
        dattn = g->dpost;
    }
    rlpi_buffer *freq = rlpi_tf_inv_freq(tf, l);
    TRY(rlpi_tf_mm(tf, S, g->datt, S, dattn, 0, W, P->wo, 0, n, tf->qdim, d, 0.0f));
    if (G)
        TRY(rlpi_tf_mm(tf, G, P->wo, S, dattn, 1, a, aoff + L->att, 0, d, tf->qdim, n, 1.0f));
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_O, S, dattn, 0, a, aoff + L->att, 0, S, g->datt, 0));
    TRY(rlpi_op_attention_bwd(be, SR(dq), SR(dk), SR(dv), SR(datt), A(q), A(k), A(v), A(att), A(lse), tf->seq_start,
                              tf->n_seq, n, c->n_heads, c->n_kv_heads, c->head_dim, tf->attn_scale, P->window));
    TRY(rlpi_op_rope(be, SR(dq), RLPI_REF(tf->positions, 0), RLPI_REF(freq, 0), n, c->n_heads, c->head_dim, 1));
    TRY(rlpi_op_rope(be, SR(dk), RLPI_REF(tf->positions, 0), RLPI_REF(freq, 0), n, c->n_kv_heads, c->head_dim, 1));
    if (c->qk_norm) { /* dq_raw, dk_raw = the per-head norms' input gradients */
        TRY(rlpi_buffer_fill_f32(S, g->dq_raw, (size_t)(n * tf->qdim), 0.0f));
        TRY(rlpi_buffer_fill_f32(S, g->dk_raw, (size_t)(n * tf->kvdim), 0.0f));
        TRY(rlpi_op_rmsnorm_bwd(be, SR(dq_raw), GN(P->q_norm), SR(dq), A(q_raw), RLPI_REF(W, P->q_norm), A(rstd_q),
                                n * c->n_heads, c->head_dim));
        TRY(rlpi_op_rmsnorm_bwd(be, SR(dk_raw), GN(P->k_norm), SR(dk), A(k_raw), RLPI_REF(W, P->k_norm), A(rstd_k),
                                n * c->n_kv_heads, c->head_dim));
    }
    if (need_input(tf, 1u << RLPI_LORA_Q | 1u << RLPI_LORA_K | 1u << RLPI_LORA_V))
        TRY(rlpi_op_rmsnorm_fwd(be, SR(xn), SR(rstd_re), RLPI_REF(tf->xs, x_in), RLPI_REF(W, P->attn_norm), n, d,
                                c->rms_eps)); /* xn1 */
    if (L->fused_qkv) {
        TRY(qkv_backward(tf, P, S, g->xn, S, g->dgate, g->dq_raw, g->dk_raw, g->dv, g->dxn));
    } else {
        if (c->attention_bias) {
            if (G)
                TRY(rlpi_op_bias_bwd(be, RLPI_REF(G, P->bq), SR(dq_raw), n, tf->qdim));
            if (G)
                TRY(rlpi_op_bias_bwd(be, RLPI_REF(G, P->bk), SR(dk_raw), n, tf->kvdim));
            if (G)
                TRY(rlpi_op_bias_bwd(be, RLPI_REF(G, P->bv), SR(dv), n, tf->kvdim));
        }
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dq_raw, 0, W, P->wq, 0, n, d, tf->qdim, 0.0f));
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dk_raw, 0, W, P->wk, 0, n, d, tf->kvdim, 1.0f));
        TRY(rlpi_tf_mm(tf, S, g->dxn, S, g->dv, 0, W, P->wv, 0, n, d, tf->kvdim, 1.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wq, S, g->dq_raw, 1, S, g->xn, 0, tf->qdim, d, n, 1.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wk, S, g->dk_raw, 1, S, g->xn, 0, tf->kvdim, d, n, 1.0f));
        if (G)
            TRY(rlpi_tf_mm(tf, G, P->wv, S, g->dv, 1, S, g->xn, 0, tf->kvdim, d, n, 1.0f));
    }
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_Q, S, g->dq_raw, 0, S, g->xn, 0, S, g->dxn, 0));
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_K, S, g->dk_raw, 0, S, g->xn, 0, S, g->dxn, 0));
    TRY(rlpi_lora_backward(tf, l, RLPI_LORA_V, S, g->dv, 0, S, g->xn, 0, S, g->dxn, 0));
    TRY(rlpi_op_rmsnorm_bwd(be, SR(dx), GN(P->attn_norm), SR(dxn), RLPI_REF(tf->xs, x_in), RLPI_REF(W, P->attn_norm),
                            A(rstd1), n, d));
#undef A
#undef SR
#undef GN
    return RLP_OK;
}

static int head_backward(rlpi_transformer *tf, const float *dlogp, const float *dentropy, grad_scratch *g)
{
    const rlpi_model_config *c = &tf->cfg;
    rlpi_backend *be = tf->be;
    int64_t m = tf->m, n = tf->n, d = c->dim;
    if (m == 0)
        return RLP_OK;
    int64_t chunk = tf->opts.head_chunk_tokens < m ? tf->opts.head_chunk_tokens : m;
    rlpi_buffer *logits = NULL, *dl = NULL, *de = NULL, *dhsel = NULL; /* the transformer's scratch */
    float *host = malloc((size_t)m * 2 * sizeof(float));
    int rc = host ? RLP_OK : rlpi_error_set(RLP_E_NOMEM, "transformer backward: out of memory");
    if (!rc) {
        for (int64_t r = 0; r < m; r++) {
            host[r] = dlogp[tf->sel_host[r]];
            host[m + r] = dentropy ? dentropy[tf->sel_host[r]] : 0.0f;
        }
        rc = rlpi_tf_realloc(be, &tf->head_logits, (size_t)(chunk * c->vocab_size) * 4);
        logits = tf->head_logits;
    }
    if (!rc)
        rc = rlpi_tf_realloc(be, &tf->head_a, (size_t)m * 4);
    if (!rc && dentropy)
        rc = rlpi_tf_realloc(be, &tf->head_b, (size_t)m * 4);
    if (!rc)
        rc = rlpi_tf_realloc(be, &tf->head_dhsel, (size_t)(m * d) * 4);
    bool capped = c->final_softcap > 0;
    if (!rc && capped)
        rc = rlpi_tf_realloc(be, &tf->head_capped, (size_t)(chunk * c->vocab_size) * 4);
    if (!rc) {
        dl = tf->head_a;
        de = dentropy ? tf->head_b : NULL;
        dhsel = tf->head_dhsel;
    }
    if (!rc)
        rc = rlpi_buffer_upload(dl, 0, host, (size_t)m * 4);
    if (!rc && de)
        rc = rlpi_buffer_upload(de, 0, host + m, (size_t)m * 4);
    for (int64_t r0 = 0; !rc && r0 < m; r0 += chunk) {
        int64_t rows = m - r0 < chunk ? m - r0 : chunk;
        /* recompute this chunk's logits rather than keep m × vocab of them */
        rc = rlpi_tf_mm(tf, logits, 0, tf->hsel, (size_t)(r0 * d), 0, tf->params, tf->lm_head, 1, rows, c->vocab_size, d, 0.0f);
        size_t nlog = (size_t)(rows * c->vocab_size);
        if (!rc && capped) { /* keep y = c·tanh(logits/c): its backward needs it after logits become dlogits */
            rc = rlpi_tf_softcap(tf, logits, 0, rows);
            if (!rc)
                rc = rlpi_buffer_copy(tf->head_capped, 0, logits, 0, nlog * 4);
        }
        if (!rc)
            rc = rlpi_op_logprob_rows_bwd(be, RLPI_REF(logits, 0), RLPI_REF(tf->targets_sel, (size_t)r0),
                                          RLPI_REF(dl, (size_t)r0), de ? RLPI_REF(de, (size_t)r0) : RLPI_REF(NULL, 0),
                                          rows, c->vocab_size, tf->inv_temp);
        if (!rc && capped)
            rc = rlpi_op_softcap_bwd(be, RLPI_REF(logits, 0), RLPI_REF(tf->head_capped, 0), (int64_t)nlog,
                                     c->final_softcap);
        if (!rc) /* dhsel = dlogits · W_lm */
            rc = rlpi_tf_mm(tf, dhsel, (size_t)(r0 * d), logits, 0, 0, tf->params, tf->lm_head, 0, rows, d, c->vocab_size, 0.0f);
        if (!rc && tf->grads) /* dW_lm += dlogitsᵀ · hsel (no base gradients under LoRA) */
            rc = rlpi_tf_mm(tf, tf->grads, tf->lm_head, logits, 0, 1, tf->hsel, (size_t)(r0 * d), 0, c->vocab_size, d, rows, 1.0f);
    }
    /* scatter the target rows back to token positions of dh (in dxn) */
    if (!rc)
        rc = rlpi_buffer_fill_f32(g->buf, g->dxn, (size_t)(n * d), 0.0f);
    if (!rc)
        rc = rlpi_op_embedding_bwd(be, RLPI_REF(g->buf, g->dxn), RLPI_REF(dhsel, 0), RLPI_REF(tf->sel, 0), m, d, n);
    free(host);
    return rc;
}

/* The per-layer gradient scratch of a backward over the last forward's n tokens. */
static int place_grad_scratch(rlpi_transformer *tf, grad_scratch *g)
{
    const rlpi_model_config *c = &tf->cfg;
    int64_t n = tf->n, d = c->dim, F = c->ffn_dim;
    *g = (grad_scratch){0};
    size_t off = 0;
#define PLACE(field, count) (g->field = off, off += (size_t)(count))
    PLACE(dx, n * d);
    PLACE(dxn, n * d);
    PLACE(dact, n * F);
    PLACE(dgate, n * F);
    PLACE(dup, n * F);
    PLACE(datt, n * tf->qdim);
    PLACE(dq, n * tf->qdim);
    PLACE(dk, n * tf->kvdim);
    PLACE(dv, n * tf->kvdim);
    PLACE(dq_raw, c->qk_norm ? n * tf->qdim : 0);
    PLACE(dk_raw, c->qk_norm ? n * tf->kvdim : 0);
    PLACE(dpost, c->post_norms ? n * d : 0);
    PLACE(xn, n * d);
    PLACE(rstd_re, n);
#undef PLACE
    if (!c->qk_norm) {
        g->dq_raw = g->dq;
        g->dk_raw = g->dk;
    }
    TRY(rlpi_tf_realloc(tf->be, &tf->grad_scratch, off * 4));
    g->buf = tf->grad_scratch;
    return RLP_OK;
}

/* From ∂L/∂h (the final norm's output, in g->dxn, written by a head's
 * backward) down through the final norm, the layers and the embedding. */
static int trunk_backward(rlpi_transformer *tf, grad_scratch *gs)
{
    const rlpi_model_config *c = &tf->cfg;
    rlpi_backend *be = tf->be;
    int64_t n = tf->n, d = c->dim;
    grad_scratch g = *gs;
    /* final norm: dx = ∂L/∂xs[L] */
    int rc = rlpi_buffer_fill_f32(g.buf, g.dx, (size_t)(n * d), 0.0f);
    if (!rc)
        rc = rlpi_op_rmsnorm_bwd(be, RLPI_REF(g.buf, g.dx),
                                 tf->grads ? RLPI_REF(tf->grads, tf->final_norm) : RLPI_REF(tf->norm_sink, 0),
                                 RLPI_REF(g.buf, g.dxn), RLPI_REF(tf->xs, (size_t)c->n_layers * (size_t)(n * d)),
                                 RLPI_REF(tf->params, tf->final_norm), RLPI_REF(tf->rstd_f, 0), n, d);
    bool ckpt = tf->opts.activation_checkpointing;
    for (int l = c->n_layers - 1; !rc && l >= 0; l--) {
        size_t aoff = ckpt ? 0 : (size_t)l * tf->lay.total;
        if (ckpt) /* recompute this layer's activations from its saved input */
            rc = layer_forward(tf, l, tf->acts, 0, (size_t)l * (size_t)(n * d), (size_t)(l + 1) * (size_t)(n * d));
        if (!rc)
            rc = layer_backward(tf, l, tf->acts, aoff, &g);
    }
    if (!tf->grads) /* frozen base: the embedding's gradient is not wanted */
        return rc;
    if (!rc) /* the lookup's output was scaled: so is its gradient (the tied head's is not) */
        rc = rlpi_tf_embed_scale(tf, g.buf, g.dx, n);
    if (!rc)
        rc = rlpi_op_embedding_bwd(be, RLPI_REF(tf->grads, tf->embed), RLPI_REF(g.buf, g.dx), RLPI_REF(tf->tokens, 0),
                                   n, d, c->vocab_size);
    return rc;
}

int rlpi_transformer_backward(rlpi_transformer *tf, const float *dlogp, const float *dentropy)
{
    if (!tf || !dlogp)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer backward: NULL argument");
    if (tf->cfg.score_labels > 0)
        return refuse_score_head(tf, "backward");
    if (!tf->kept)
        return rlpi_error_set(RLP_E_STATE, "transformer backward: the last forward did not keep its activations");
    grad_scratch g;
    TRY(place_grad_scratch(tf, &g));
    TRY(head_backward(tf, dlogp, dentropy, &g));
    return trunk_backward(tf, &g);
}

int rlpi_transformer_score_backward(rlpi_transformer *tf, const float *dscore)
{
    if (!tf || !dscore)
        return rlpi_error_set(RLP_E_INVALID_ARG, "transformer score backward: NULL argument");
    if (tf->cfg.score_labels < 1)
        return rlpi_error_set(RLP_E_STATE, "transformer score backward: this model has no score head");
    if (!tf->kept)
        return rlpi_error_set(RLP_E_STATE,
                              "transformer score backward: the last score pass did not keep its activations");
    const rlpi_model_config *c = &tf->cfg;
    rlpi_backend *be = tf->be;
    int64_t m = tf->m, n = tf->n, d = c->dim, L = c->score_labels;
    grad_scratch g;
    TRY(place_grad_scratch(tf, &g));
    TRY(rlpi_tf_realloc(be, &tf->head_logits, (size_t)(m * L) * 4));
    TRY(rlpi_tf_realloc(be, &tf->head_dhsel, (size_t)(m * d) * 4));
    TRY(rlpi_buffer_upload(tf->head_logits, 0, dscore, (size_t)(m * L) * 4));
    /* dhsel (m, d) = dscore (m, L) · W (L, d) */
    TRY(rlpi_tf_mm(tf, tf->head_dhsel, 0, tf->head_logits, 0, 0, tf->params, tf->score_w, 0, m, d, L, 0.0f));
    if (tf->grads) { /* dW += dscoreᵀ · hsel; db += Σ_rows dscore */
        TRY(rlpi_tf_mm(tf, tf->grads, tf->score_w, tf->head_logits, 0, 1, tf->hsel, 0, 0, L, d, m, 1.0f));
        if (c->score_bias)
            TRY(rlpi_op_bias_bwd(be, RLPI_REF(tf->grads, tf->score_b), RLPI_REF(tf->head_logits, 0), m, L));
    }
    /* scatter the rows back to token positions of dh (in dxn); a row named
     * twice accumulates */
    TRY(rlpi_buffer_fill_f32(g.buf, g.dxn, (size_t)(n * d), 0.0f));
    TRY(rlpi_op_embedding_bwd(be, RLPI_REF(g.buf, g.dxn), RLPI_REF(tf->head_dhsel, 0), RLPI_REF(tf->sel, 0), m, d, n));
    return trunk_backward(tf, &g);
}
