/* LoRA adapters: their layout (PEFT names, one parameter and one gradient
 * buffer), initialisation, the per-projection forward/backward the
 * transformer calls, and the merge into exported weights. The formulas are
 * in model/lora.h. Only backend wrappers touch activations, so the CUDA
 * backend runs this unchanged. */
#include "model/lora.h"

#include "core/crc32.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/qbase.h"
#include "model/transformer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT ((size_t)-1)

typedef struct lora_slot {
    size_t a, b; /* offsets (floats) of A (r, in) and B (out, r) in params/grads; NO_SLOT: not adapted */
    int64_t in, out;
} lora_slot;

struct rlpi_lora {
    rlpi_lora_config cfg;
    float scale;
    int n_layers;
    lora_slot *slots;       /* (n_layers × RLPI_LORA_N_TARGETS) */
    rlpi_param_info *infos; /* (n_infos): A then B of each adapted projection, layer by layer */
    char **names;
    size_t n_infos, n_params;
    rlpi_buffer *params, *grads;
    rlpi_buffer *h;  /* saved s·x·Aᵀ of the last forward: (h_layers × N_TARGETS) slots of (n, r) */
    rlpi_buffer *dh; /* backward scratch (n, r) */
    int64_t n;       /* tokens of the last forward */
    int h_layers;    /* n_layers when the forward kept its activations, else 1 */
    bool enabled;
    bool have_base_crc; /* base_crc is valid: the base is frozen while adapters are attached */
    uint32_t base_crc;
};

static const char *const target_names[RLPI_LORA_N_TARGETS] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                              "gate_proj", "up_proj", "down_proj"};

const char *rlpi_lora_target_name(int target)
{
    return target >= 0 && target < RLPI_LORA_N_TARGETS ? target_names[target] : NULL;
}

int rlpi_lora_parse_targets(const char *list, uint32_t *mask)
{
    if (!list || !mask)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora targets: NULL argument");
    uint32_t m = 0;
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ", ");
        if (!len)
            break;
        int found = -1;
        for (int t = 0; t < RLPI_LORA_N_TARGETS; t++)
            if (strlen(target_names[t]) == len && !strncmp(p, target_names[t], len))
                found = t;
        if (found >= 0)
            m |= 1u << found;
        else if ((len == 3 && !strncmp(p, "all", 3)) || (len == 10 && !strncmp(p, "all-linear", 10)))
            m |= RLPI_LORA_ALL_TARGETS;
        else
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "lora targets: unknown projection '%.*s' (known: q_proj, k_proj, v_proj, o_proj, "
                                  "gate_proj, up_proj, down_proj, all)",
                                  (int)len, p);
        p += len;
    }
    if (!m)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora targets: the list '%s' names no projection", list);
    *mask = m;
    return RLP_OK;
}

float rlpi_lora_scale(const rlpi_lora_config *cfg)
{
    return cfg->rslora ? cfg->alpha / sqrtf((float)cfg->rank) : cfg->alpha / (float)cfg->rank;
}

void rlpi_lora_free(rlpi_lora *lo)
{
    if (!lo)
        return;
    for (size_t i = 0; i < lo->n_infos; i++)
        free(lo->names[i]);
    free(lo->names);
    free(lo->infos);
    free(lo->slots);
    rlpi_buffer_free(lo->params);
    rlpi_buffer_free(lo->grads);
    rlpi_buffer_free(lo->h);
    rlpi_buffer_free(lo->dh);
    free(lo);
}

bool rlpi_lora_active(const rlpi_lora *lo, int target)
{
    return lo && lo->enabled && (lo->cfg.targets >> target & 1u);
}

static void target_dims(const rlpi_transformer *tf, int t, int64_t *in, int64_t *out)
{
    int64_t d = tf->cfg.dim, F = tf->cfg.ffn_dim;
    switch (t) {
    case RLPI_LORA_Q: *in = d, *out = tf->qdim; break;
    case RLPI_LORA_K:
    case RLPI_LORA_V: *in = d, *out = tf->kvdim; break;
    case RLPI_LORA_O: *in = tf->qdim, *out = d; break;
    case RLPI_LORA_GATE:
    case RLPI_LORA_UP: *in = d, *out = F; break;
    default: *in = F, *out = d; break;
    }
}

static int check_config(const rlpi_transformer *tf, const rlpi_lora_config *c)
{
    if (c->rank < 1 || c->rank > RLPI_LORA_MAX_RANK)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora: rank %d outside [1, %d]", c->rank, RLPI_LORA_MAX_RANK);
    if (!(c->alpha > 0) || !isfinite(c->alpha))
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora: alpha %g must be a positive number", (double)c->alpha);
    if (!c->targets || (c->targets & ~RLPI_LORA_ALL_TARGETS))
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora: target mask 0x%x is empty or names unknown projections",
                              c->targets);
    for (int t = 0; t < RLPI_LORA_N_TARGETS; t++) {
        int64_t in, out;
        target_dims(tf, t, &in, &out);
        if ((c->targets >> t & 1u) && (c->rank > in || c->rank > out))
            return rlpi_error_set(RLP_E_INVALID_ARG, "lora: rank %d exceeds %s's shape (%lld, %lld)", c->rank,
                                  target_names[t], (long long)out, (long long)in);
    }
    return RLP_OK;
}

static int build(rlpi_transformer *tf, rlpi_lora *lo)
{
    int L = tf->cfg.n_layers, r = lo->cfg.rank, n_targets = 0;
    for (int t = 0; t < RLPI_LORA_N_TARGETS; t++)
        n_targets += (int)(lo->cfg.targets >> t & 1u);
    size_t max_infos = (size_t)L * (size_t)n_targets * 2;
    lo->slots = malloc((size_t)L * RLPI_LORA_N_TARGETS * sizeof *lo->slots);
    lo->infos = calloc(max_infos, sizeof *lo->infos);
    lo->names = calloc(max_infos, sizeof *lo->names);
    if (!lo->slots || !lo->infos || !lo->names)
        return rlpi_error_set(RLP_E_NOMEM, "lora: out of memory");
    for (int l = 0; l < L; l++)
        for (int t = 0; t < RLPI_LORA_N_TARGETS; t++) {
            lora_slot *s = &lo->slots[l * RLPI_LORA_N_TARGETS + t];
            target_dims(tf, t, &s->in, &s->out);
            s->a = s->b = NO_SLOT;
            if (!(lo->cfg.targets >> t & 1u))
                continue;
            const char *block = t <= RLPI_LORA_O ? "self_attn" : "mlp";
            for (int ab = 0; ab < 2; ab++) {
                char name[160];
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l, block,
                         target_names[t], ab ? 'B' : 'A');
                rlpi_param_info *in = &lo->infos[lo->n_infos];
                if (!(lo->names[lo->n_infos] = strdup(name)))
                    return rlpi_error_set(RLP_E_NOMEM, "lora: out of memory");
                in->name = lo->names[lo->n_infos++];
                in->n_dims = 2;
                in->shape[0] = ab ? s->out : r;
                in->shape[1] = ab ? r : s->in;
                in->n_elems = (size_t)(in->shape[0] * in->shape[1]);
                in->offset = lo->n_params;
                in->no_decay = false;
                *(ab ? &s->b : &s->a) = lo->n_params;
                lo->n_params += in->n_elems;
            }
        }
    return RLP_OK;
}

/* A ~ U(−1/√in, 1/√in) (PEFT: kaiming_uniform_(a = √5)), B = 0. */
static int init_params(rlpi_lora *lo, uint64_t seed)
{
    float *host = calloc(lo->n_params, sizeof *host);
    if (!host)
        return rlpi_error_set(RLP_E_NOMEM, "lora: out of memory");
    rlpi_rng rng;
    rlpi_rng_seed(&rng, seed, 0x4c6f5241u /* "LoRA" */);
    for (size_t i = 0; i < lo->n_infos; i += 2) {
        const rlpi_param_info *a = &lo->infos[i];
        float bound = 1.0f / sqrtf((float)a->shape[1]);
        for (size_t k = 0; k < a->n_elems; k++)
            host[a->offset + k] = (2.0f * rlpi_rng_f32(&rng) - 1.0f) * bound;
    }
    int rc = rlpi_buffer_upload(lo->params, 0, host, lo->n_params * sizeof *host);
    free(host);
    return rc;
}

int rlpi_transformer_attach_lora(rlpi_transformer *tf, const rlpi_lora_config *cfg, uint64_t seed)
{
    if (!tf || !cfg)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora: NULL argument");
    if (tf->lora)
        return rlpi_error_set(RLP_E_STATE, "lora: adapters are already attached");
    /* a frozen (forward-only) transformer gets inference-only adapters: no gradients */
    bool trainable = tf->grads != NULL;
    int rc = check_config(tf, cfg);
    if (rc)
        return rc;
    rlpi_lora *lo = calloc(1, sizeof *lo);
    if (!lo)
        return rlpi_error_set(RLP_E_NOMEM, "lora: out of memory");
    lo->cfg = *cfg;
    lo->scale = rlpi_lora_scale(cfg);
    lo->n_layers = tf->cfg.n_layers;
    lo->enabled = true;
    if (!(rc = build(tf, lo)) && !(rc = rlpi_buffer_alloc(tf->be, lo->n_params * 4, &lo->params)) &&
        (!trainable || (!(rc = rlpi_buffer_alloc(tf->be, lo->n_params * 4, &lo->grads)) &&
                        !(rc = rlpi_buffer_fill_f32(lo->grads, 0, lo->n_params, 0.0f)))) &&
        /* the norms' weight gradients still flow through their kernels: one sink, never read */
        !(rc = rlpi_buffer_alloc(tf->be, (size_t)(tf->cfg.dim > tf->cfg.head_dim ? tf->cfg.dim : tf->cfg.head_dim) * 4,
                                 &tf->norm_sink)))
        rc = init_params(lo, seed);
    if (rc) {
        rlpi_buffer_free(tf->norm_sink);
        tf->norm_sink = NULL;
        rlpi_lora_free(lo);
        return rc;
    }
    rlpi_buffer_free(tf->grads); /* the base is frozen from here on */
    tf->grads = NULL;
    tf->lora = lo;
    return RLP_OK;
}

int rlpi_transformer_detach_lora(rlpi_transformer *tf)
{
    if (!tf || !tf->lora)
        return RLP_OK;
    if (tf->qbase) /* the fp32 base is gone: it cannot train again */
        return rlpi_error_set(RLP_E_STATE, "lora: the base is quantized (%s); its adapters stay attached",
                              rlpi_qbase_dtype_name(tf->qbase->type));
    if (tf->lora->grads) { /* trainable adapters: the base trains again */
        rlpi_buffer *g = NULL;
        int rc = rlpi_buffer_alloc(tf->be, tf->n_params * 4, &g);
        if (!rc)
            rc = rlpi_buffer_fill_f32(g, 0, tf->n_params, 0.0f);
        if (rc) {
            rlpi_buffer_free(g);
            return rc;
        }
        tf->grads = g;
    }
    rlpi_lora_free(tf->lora);
    tf->lora = NULL;
    rlpi_buffer_free(tf->norm_sink);
    tf->norm_sink = NULL;
    return RLP_OK;
}

const rlpi_lora_config *rlpi_transformer_lora_config(const rlpi_transformer *tf)
{
    return tf && tf->lora ? &tf->lora->cfg : NULL;
}

void rlpi_transformer_set_lora_enabled(rlpi_transformer *tf, bool enabled)
{
    if (tf && tf->lora)
        tf->lora->enabled = enabled;
}

size_t rlpi_transformer_n_trainable(const rlpi_transformer *tf)
{
    return tf->lora ? tf->lora->n_params : tf->n_params;
}

size_t rlpi_transformer_n_trainable_tensors(const rlpi_transformer *tf)
{
    return tf->lora ? tf->lora->n_infos : tf->n_infos;
}

const rlpi_param_info *rlpi_transformer_trainable_tensor(const rlpi_transformer *tf, size_t i)
{
    if (!tf->lora)
        return rlpi_transformer_tensor(tf, i);
    return i < tf->lora->n_infos ? &tf->lora->infos[i] : NULL;
}

rlpi_buffer *rlpi_transformer_trainable_params(rlpi_transformer *tf)
{
    return tf->lora ? tf->lora->params : tf->params;
}

bool rlpi_lora_trainable(const rlpi_lora *lo)
{
    return lo && lo->grads;
}

rlpi_buffer *rlpi_transformer_trainable_grads(rlpi_transformer *tf)
{
    return tf->lora ? tf->lora->grads : tf->grads;
}

int rlpi_lora_begin_forward(rlpi_transformer *tf, int64_t n, bool keep)
{
    rlpi_lora *lo = tf->lora;
    if (!lo)
        return RLP_OK;
    lo->n = n;
    lo->h_layers = keep ? lo->n_layers : 1;
    size_t slot = (size_t)n * (size_t)lo->cfg.rank;
    int rc = rlpi_tf_realloc(tf->be, &lo->h, (size_t)lo->h_layers * RLPI_LORA_N_TARGETS * slot * 4);
    if (!rc)
        rc = rlpi_tf_realloc(tf->be, &lo->dh, slot * 4);
    return rc;
}

static size_t h_offset(const rlpi_lora *lo, int l, int t)
{
    int hl = lo->h_layers > 1 ? l : 0;
    return ((size_t)hl * RLPI_LORA_N_TARGETS + (size_t)t) * (size_t)lo->n * (size_t)lo->cfg.rank;
}

int rlpi_lora_forward(rlpi_transformer *tf, int l, int target, rlpi_buffer *x, size_t xoff, int xT, rlpi_buffer *y,
                      size_t yoff, int yT)
{
    rlpi_lora *lo = tf->lora;
    if (!rlpi_lora_active(lo, target))
        return RLP_OK;
    const lora_slot *s = &lo->slots[l * RLPI_LORA_N_TARGETS + target];
    int64_t n = lo->n, r = lo->cfg.rank;
    size_t h = h_offset(lo, l, target);
    /* h (n, r) = s · x · Aᵀ */
    TRY(rlpi_tf_mm(tf, lo->h, h, x, xoff, xT, lo->params, s->a, 1, n, r, s->in, 0.0f));
    TRY(rlpi_op_scale(tf->be, RLPI_REF(lo->h, h), lo->scale, n * r));
    if (yT) /* yᵀ (out, n) += B · hᵀ */
        return rlpi_tf_mm(tf, y, yoff, lo->params, s->b, 0, lo->h, h, 1, s->out, n, r, 1.0f);
    return rlpi_tf_mm(tf, y, yoff, lo->h, h, 0, lo->params, s->b, 1, n, s->out, r, 1.0f);
}

int rlpi_lora_backward(rlpi_transformer *tf, int l, int target, rlpi_buffer *dy, size_t dyoff, int dyT, rlpi_buffer *x,
                       size_t xoff, int xT, rlpi_buffer *dx, size_t dxoff, int dxT)
{
    rlpi_lora *lo = tf->lora;
    if (!rlpi_lora_active(lo, target))
        return RLP_OK;
    const lora_slot *s = &lo->slots[l * RLPI_LORA_N_TARGETS + target];
    int64_t n = lo->n, r = lo->cfg.rank;
    size_t h = h_offset(lo, l, target);
    /* dB (out, r) += dyᵀ · h  (h already carries s) */
    TRY(rlpi_tf_mm(tf, lo->grads, s->b, dy, dyoff, !dyT, lo->h, h, 0, s->out, r, n, 1.0f));
    /* dh (n, r) = s · dy · B */
    TRY(rlpi_tf_mm(tf, lo->dh, 0, dy, dyoff, dyT, lo->params, s->b, 0, n, r, s->out, 0.0f));
    TRY(rlpi_op_scale(tf->be, RLPI_REF(lo->dh, 0), lo->scale, n * r));
    /* dA (r, in) += dhᵀ · x */
    TRY(rlpi_tf_mm(tf, lo->grads, s->a, lo->dh, 0, 1, x, xoff, xT, r, s->in, n, 1.0f));
    if (dxT) /* dxᵀ (in, n) += Aᵀ · dhᵀ */
        return rlpi_tf_mm(tf, dx, dxoff, lo->params, s->a, 1, lo->dh, 0, 1, s->in, n, r, 1.0f);
    return rlpi_tf_mm(tf, dx, dxoff, lo->dh, 0, 0, lo->params, s->a, 0, n, s->in, r, 1.0f);
}

/* C (out, in) = s · B (out, r) · A (r, in) + beta · C, at float offset coff:
 * the merged update of one adapted projection, one GEMM on the backend. */
static int scaled_update(rlpi_transformer *src, const lora_slot *s, rlpi_buffer *c, size_t coff, float beta)
{
    const rlpi_lora *lo = src->lora;
    rlpi_gemm g = {.trans_a = 0, .trans_b = 0, .m = s->out, .n = s->in, .k = lo->cfg.rank, .alpha = lo->scale,
                   .beta = beta, .batch = 1,
                   .a = {lo->params, s->b, lo->cfg.rank, 0},
                   .b = {lo->params, s->a, s->in, 0},
                   .c = {c, coff, s->in, 0}};
    return rlpi_gemm_f32(src->be, &g);
}

int rlpi_lora_merge_into(rlpi_transformer *tf, rlpi_weights *w)
{
    rlpi_lora *lo = tf->lora;
    if (!lo || !lo->enabled)
        return RLP_OK;
    int64_t biggest = 0;
    for (int t = 0; t < RLPI_LORA_N_TARGETS; t++) {
        int64_t in, out;
        target_dims(tf, t, &in, &out);
        biggest = in * out > biggest ? in * out : biggest;
    }
    rlpi_buffer *delta = NULL;
    float *host = malloc((size_t)biggest * sizeof *host);
    int rc = host ? rlpi_buffer_alloc(tf->be, (size_t)biggest * 4, &delta)
                  : rlpi_error_set(RLP_E_NOMEM, "lora merge: out of memory");
    for (int l = 0; !rc && l < lo->n_layers; l++)
        for (int t = 0; !rc && t < RLPI_LORA_N_TARGETS; t++) {
            const lora_slot *s = &lo->slots[l * RLPI_LORA_N_TARGETS + t];
            if (s->a == NO_SLOT)
                continue;
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, t <= RLPI_LORA_O ? "self_attn" : "mlp",
                     target_names[t]);
            const rlpi_tensor *wt = rlpi_weights_find(w, name);
            if (!wt || !wt->data || wt->n_dims != 2 || wt->shape[0] != s->out || wt->shape[1] != s->in) {
                rc = rlpi_error_set(RLP_E_FORMAT, "lora merge: no (%lld, %lld) tensor '%s'", (long long)s->out,
                                    (long long)s->in, name);
                break;
            }
            /* W (out, in) += s · B · A: the product on the backend, the add on the host */
            size_t count = (size_t)(s->out * s->in);
            if (!(rc = scaled_update(tf, s, delta, 0, 0.0f)) && !(rc = rlpi_buffer_download(delta, 0, host, count * 4))) {
                float *W = wt->data; /* projections are never aliases */
                for (size_t i = 0; i < count; i++)
                    W[i] += host[i];
            }
        }
    rlpi_buffer_free(delta);
    free(host);
    return rc;
}

/* The base weight of layer l that `target` adapts (offset in params). */
static size_t weight_offset(const rlpi_transformer *tf, int l, int target)
{
    const layer_params *P = &tf->layers[l];
    const size_t off[RLPI_LORA_N_TARGETS] = {P->wq, P->wk, P->wv, P->wo, P->wg, P->wu, P->wd};
    return off[target];
}

int rlpi_lora_merge_params(rlpi_transformer *src, rlpi_transformer *dst)
{
    rlpi_lora *lo = src->lora;
    if (!lo || !lo->enabled)
        return RLP_OK;
    if (dst->n_params != src->n_params || dst->cfg.n_layers != src->cfg.n_layers || dst->params->owner != lo->params->owner)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora merge: the target model differs or lives on another backend");
    if (dst->qbase) /* its matrices are blocks: nothing to add s·B·A to in place */
        return rlpi_error_set(RLP_E_INVALID_ARG, "lora merge: the target model's base is quantized");
    for (int l = 0; l < lo->n_layers; l++)
        for (int t = 0; t < RLPI_LORA_N_TARGETS; t++) {
            const lora_slot *s = &lo->slots[l * RLPI_LORA_N_TARGETS + t];
            if (s->a == NO_SLOT)
                continue;
            /* W (out, in) += s · B · A, in place on the backend */
            int rc = scaled_update(src, s, dst->params, weight_offset(dst, l, t), 1.0f);
            if (rc)
                return rc;
        }
    return RLP_OK;
}

void rlpi_lora_base_changed(rlpi_transformer *tf)
{
    if (tf && tf->lora)
        tf->lora->have_base_crc = false;
    if (tf)
        tf->qcrc_valid = false;
}

int rlpi_lora_base_fingerprint(rlpi_transformer *tf, uint32_t *out)
{
    rlpi_lora *lo = tf->lora;
    if (lo && lo->have_base_crc) {
        *out = lo->base_crc;
        return RLP_OK;
    }
    /* the tensors' fp32 values in layout order: the bytes of the whole
     * buffer for an fp32 base (its tensors tile it in that order), and for
     * a quantized one the CRC an fp32 model holding its dequantized values
     * has, so its adapters apply there */
    rlpi_f32_scratch tmp = {0};
    uint32_t crc = 0;
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < tf->n_infos; i++) {
        const rlpi_param_info *in = &tf->infos[i];
        const float *data;
        if ((rc = rlpi_tf_tensor_values(tf, in, &tmp, &data)) == RLP_OK)
            crc = rlpi_crc32(crc, data, in->n_elems * 4);
    }
    free(tmp.p);
    if (rc)
        return rc;
    *out = crc;
    if (lo) {
        lo->base_crc = crc;
        lo->have_base_crc = true;
    }
    return RLP_OK;
}

int rlpi_lora_zero_grad(rlpi_lora *lo)
{
    if (lo && !lo->grads)
        return rlpi_error_set(RLP_E_STATE, "transformer: inference-only adapters have no gradients");
    return lo ? rlpi_buffer_fill_f32(lo->grads, 0, lo->n_params, 0.0f) : RLP_OK;
}

void rlpi_lora_release_grads(rlpi_lora *lo)
{
    if (lo)
        rlpi_buffer_discard(lo->grads);
}

size_t rlpi_lora_activation_bytes(const rlpi_lora *lo)
{
    return lo ? (lo->h ? lo->h->nbytes : 0) + (lo->dh ? lo->dh->nbytes : 0) : 0;
}
