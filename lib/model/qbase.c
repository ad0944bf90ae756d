/* The quantized frozen base (qbase.h): planning the blocks and the window,
 * converting an fp32 base, per-layer dequantization, and per-tensor reads
 * and writes for export and set_weights. */
#include "model/qbase.h"

#include "core/clock.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "model/lora.h"
#include "model/quant.h"
#include "model/transformer_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rlpi_qbase_parse_dtype(const char *name, uint32_t *type)
{
    static const struct {
        const char *name;
        uint32_t type;
    } map[] = {{"f32", RLPI_GGML_F32}, {"q8_0", RLPI_GGML_Q8_0}, {"q4_0", RLPI_GGML_Q4_0}, {"q4_k", RLPI_GGML_Q4_K}};
    if (!name) {
        *type = RLPI_GGML_F32;
        return RLP_OK;
    }
    /* one spelling each (lowercase, as the config and the adapter metadata
     * write it): a resume compares the configuration's text */
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(name, map[i].name)) {
            *type = map[i].type;
            return RLP_OK;
        }
    return rlpi_error_set(RLP_E_INVALID_ARG, "base_dtype '%s' is not one of f32, q8_0, q4_0, q4_k", name);
}

const char *rlpi_qbase_dtype_name(uint32_t type)
{
    switch (type) {
    case RLPI_GGML_Q8_0:
        return "q8_0";
    case RLPI_GGML_Q4_0:
        return "q4_0";
    case RLPI_GGML_Q4_K:
        return "q4_k";
    default:
        return "f32";
    }
}

static size_t type_bytes(uint32_t type, size_t n)
{
    const rlpi_ggml_type_info *t = rlpi_ggml_type(type);
    return n / t->blck * t->type_size;
}

/* Shapes, types, window and block offsets for tf's config. */
static int plan(const rlpi_transformer *tf, uint32_t type, rlpi_qbase *qb)
{
    const rlpi_model_config *c = &tf->cfg;
    static const char *const names[RLPI_QB_N] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
    int64_t rows[RLPI_QB_N] = {tf->qdim, tf->kvdim, tf->kvdim, c->dim, c->ffn_dim, c->ffn_dim, c->dim};
    int64_t cols[RLPI_QB_N] = {c->dim, c->dim, c->dim, tf->qdim, c->dim, c->dim, c->ffn_dim};
    qb->type = type;
    qb->n_layers = c->n_layers;
    size_t win = 0, bytes = 0;
    for (int m = 0; m < RLPI_QB_N; m++) {
        uint32_t t = type;
        if (cols[m] % (int64_t)rlpi_ggml_type(t)->blck != 0)
            t = RLPI_GGML_Q4_0; /* a K-quant's 256 do not divide the rows: 32-blocks of 4 bits */
        if (cols[m] % (int64_t)rlpi_ggml_type(t)->blck != 0)
            return rlpi_error_set(RLP_E_UNSUPPORTED,
                                  "quantized base: %s rows have %lld weights, not a multiple of the %u of a block",
                                  names[m], (long long)cols[m], rlpi_ggml_type(t)->blck);
        qb->mat_type[m] = t;
        qb->rows[m] = rows[m];
        qb->cols[m] = cols[m];
        qb->win_off[m] = win;
        win += (size_t)rows[m] * (size_t)cols[m];
        qb->mat_off[m] = bytes;
        qb->mat_bytes[m] = type_bytes(t, (size_t)rows[m] * (size_t)cols[m]);
        bytes += (qb->mat_bytes[m] + 63) / 64 * 64;
    }
    qb->window_floats = win;
    qb->layer_bytes = bytes;
    qb->resident = -1;
    return RLP_OK;
}

void rlpi_qbase_free(rlpi_qbase *qb)
{
    if (!qb)
        return;
    free(qb->blocks);
    free(qb->staging);
    free(qb);
}

uint32_t rlpi_transformer_base_type(const rlpi_transformer *tf)
{
    return tf && tf->qbase ? tf->qbase->type : RLPI_GGML_F32;
}

size_t rlpi_transformer_base_block_bytes(const rlpi_transformer *tf)
{
    return tf && tf->qbase ? (size_t)tf->qbase->n_layers * tf->qbase->layer_bytes : 0;
}

void *rlpi_transformer_base_blocks(rlpi_transformer *tf)
{
    if (!tf || !tf->qbase)
        return NULL;
    tf->qbase->resident = -1;
    return tf->qbase->blocks;
}

size_t rlpi_transformer_n_stored(const rlpi_transformer *tf)
{
    return tf->n_stored;
}

/* ------------------------------------------------------ threaded (de)quantization */

/* One matrix split by rows across the pool: rows are whole blocks. */
typedef struct mat_job {
    uint32_t type;
    int64_t cols;
    size_t row_bytes;
    uint8_t *blocks;
    float *f32;
    bool quantize;
    int failed; /* a chunk's (de)quantizer refused (cannot happen for the planned geometry) */
} mat_job;

static void mat_range(void *arg, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    mat_job *j = arg;
    size_t n = (size_t)(end - begin) * (size_t)j->cols, bytes = (size_t)(end - begin) * j->row_bytes;
    uint8_t *b = j->blocks + (size_t)begin * j->row_bytes;
    float *f = j->f32 + (size_t)begin * (size_t)j->cols;
    int rc = j->quantize ? rlpi_quantize(j->type, f, n, b, bytes) : rlpi_dequantize(j->type, b, bytes, f, n);
    if (rc)
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
}

static int run_mat(rlpi_transformer *tf, int layer, int m, float *f32, bool quantize)
{
    rlpi_qbase *qb = tf->qbase;
    mat_job j = {.type = qb->mat_type[m],
                 .cols = qb->cols[m],
                 .row_bytes = type_bytes(qb->mat_type[m], (size_t)qb->cols[m]),
                 .blocks = qb->blocks + (size_t)layer * qb->layer_bytes + qb->mat_off[m],
                 .f32 = f32,
                 .quantize = quantize};
    /* K-quants search per block: bigger chunks than the cheap 32-blocks */
    rlpi_threadpool_parallel_for(rlpi_backend_cpu_pool(tf->be), qb->rows[m], 16, mat_range, &j);
    return j.failed ? rlpi_error_set(RLP_E_INTERNAL, "quantized base: %s of layer %d failed",
                                     quantize ? "quantizing" : "dequantizing", layer)
                    : RLP_OK;
}

int rlpi_qbase_load_layer(rlpi_transformer *tf, int l)
{
    rlpi_qbase *qb = tf->qbase;
    if (!qb || qb->resident == l)
        return RLP_OK;
    if (l < 0 || l >= qb->n_layers)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized base: no layer %d", l);
    double t0 = rlpi_now_s();
    float *win = qb->staging ? qb->staging : rlpi_buffer_host(tf->params);
    qb->resident = -1; /* a failure below leaves the window undefined */
    for (int m = 0; m < RLPI_QB_N; m++)
        TRY(run_mat(tf, l, m, win + qb->win_off[m], false));
    if (qb->staging)
        TRY(rlpi_buffer_upload(tf->params, 0, qb->staging, qb->window_floats * sizeof(float)));
    qb->resident = l;
    qb->loads++;
    qb->load_s += rlpi_now_s() - t0;
    return RLP_OK;
}

bool rlpi_qbase_find(const rlpi_transformer *tf, const rlpi_param_info *in, int *layer, int *mat)
{
    const rlpi_qbase *qb = tf->qbase;
    if (!qb || in->offset >= qb->window_floats)
        return false;
    int l = -1;
    if (sscanf(in->name, "model.layers.%d.", &l) != 1 || l < 0 || l >= qb->n_layers)
        return false;
    for (int m = 0; m < RLPI_QB_N; m++)
        if (qb->win_off[m] == in->offset && (size_t)qb->rows[m] * (size_t)qb->cols[m] == in->n_elems) {
            *layer = l;
            *mat = m;
            return true;
        }
    return false;
}

int rlpi_qbase_read(rlpi_transformer *tf, int layer, int mat, float *dst)
{
    return run_mat(tf, layer, mat, dst, false);
}

static int scratch_reserve(rlpi_f32_scratch *s, size_t n)
{
    if (s->cap >= n)
        return RLP_OK;
    float *grown = realloc(s->p, n * sizeof *grown);
    if (!grown)
        return rlpi_error_set(RLP_E_NOMEM, "quantized base: out of memory for %zu floats", n);
    s->p = grown;
    s->cap = n;
    return RLP_OK;
}

int rlpi_tf_tensor_values(rlpi_transformer *tf, const rlpi_param_info *in, rlpi_f32_scratch *s, const float **data)
{
    int layer, mat;
    bool blocks = rlpi_qbase_find(tf, in, &layer, &mat);
    const float *host = rlpi_buffer_host(tf->params);
    if (host && !blocks) {
        *data = host + in->offset;
        return RLP_OK;
    }
    TRY(scratch_reserve(s, in->n_elems));
    TRY(blocks ? rlpi_qbase_read(tf, layer, mat, s->p)
               : rlpi_buffer_download(tf->params, in->offset * 4, s->p, in->n_elems * 4));
    *data = s->p;
    return RLP_OK;
}

int rlpi_qbase_write(rlpi_transformer *tf, int layer, int mat, const float *src)
{
    tf->qbase->resident = -1;
    return run_mat(tf, layer, mat, (float *)src, true);
}

/* ------------------------------------------------------------ conversion */

/* What the conversion replaces, kept to restore on failure and freed on success. */
typedef struct layout_state {
    rlpi_param_info *infos;
    char **names;
    size_t n_infos, n_params, n_stored;
    size_t embed, final_norm, lm_head;
    layer_params *layers;
    rlpi_buffer *params;
    bool can_fuse_qkv, can_fuse_gu;
    rlpi_qbase *qbase;
} layout_state;

static void take(rlpi_transformer *tf, layout_state *s)
{
    *s = (layout_state){tf->infos,  tf->names,  tf->n_infos,      tf->n_params,    tf->n_stored,
                        tf->embed,  tf->final_norm, tf->lm_head,  tf->layers,      tf->params,
                        tf->can_fuse_qkv, tf->can_fuse_gu, tf->qbase};
}

static void put(rlpi_transformer *tf, const layout_state *s)
{
    tf->infos = s->infos;
    tf->names = s->names;
    tf->n_infos = s->n_infos;
    tf->n_params = s->n_params;
    tf->n_stored = s->n_stored;
    tf->embed = s->embed;
    tf->final_norm = s->final_norm;
    tf->lm_head = s->lm_head;
    tf->layers = s->layers;
    tf->params = s->params;
    tf->can_fuse_qkv = s->can_fuse_qkv;
    tf->can_fuse_gu = s->can_fuse_gu;
    tf->qbase = s->qbase;
}

static void drop(layout_state *s)
{
    for (size_t i = 0; i < s->n_infos; i++)
        free(s->names[i]);
    free(s->names);
    free(s->infos);
    free(s->layers);
    rlpi_buffer_free(s->params);
    rlpi_qbase_free(s->qbase);
}

/* Fills the new layout (tf) from the old one (old): fp32 tensors copied
 * buffer to buffer, matrices quantized from the old fp32 values. */
static int fill(rlpi_transformer *tf, const layout_state *old)
{
    const float *host = rlpi_buffer_host(old->params);
    rlpi_f32_scratch tmp = {0};
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < tf->n_infos; i++) {
        const rlpi_param_info *in = &tf->infos[i], *was = &old->infos[i];
        int layer, mat;
        if (!rlpi_qbase_find(tf, in, &layer, &mat)) {
            rc = rlpi_buffer_copy(tf->params, in->offset * 4, old->params, was->offset * 4, in->n_elems * 4);
            continue;
        }
        const float *src = host ? host + was->offset : NULL;
        if (!src) { /* device memory: one matrix at a time through the host */
            if ((rc = scratch_reserve(&tmp, in->n_elems)) != RLP_OK ||
                (rc = rlpi_buffer_download(old->params, was->offset * 4, tmp.p, in->n_elems * 4)) != RLP_OK)
                break;
            src = tmp.p;
        }
        rc = rlpi_qbase_write(tf, layer, mat, src);
    }
    free(tmp.p);
    return rc;
}

int rlpi_transformer_quantize_base(rlpi_transformer *tf, uint32_t type)
{
    if (!tf)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized base: NULL transformer");
    if (type == RLPI_GGML_F32)
        return RLP_OK;
    if (type != RLPI_GGML_Q8_0 && type != RLPI_GGML_Q4_0 && type != RLPI_GGML_Q4_K)
        return rlpi_error_set(RLP_E_INVALID_ARG, "quantized base: ggml type %u is not Q8_0, Q4_0 or Q4_K", type);
    if (tf->qbase)
        return rlpi_error_set(RLP_E_STATE, "quantized base: the base is already %s",
                              rlpi_qbase_dtype_name(tf->qbase->type));
    if (tf->grads)
        return rlpi_error_set(RLP_E_STATE, "quantized base: the base is trainable (attach adapters first)");
    rlpi_qbase *qb = calloc(1, sizeof *qb);
    if (!qb)
        return rlpi_error_set(RLP_E_NOMEM, "quantized base: out of memory");
    int rc = plan(tf, type, qb);
    size_t total = (size_t)qb->n_layers * qb->layer_bytes;
    if (!rc && !(qb->blocks = aligned_alloc(64, (total + 63) / 64 * 64)))
        rc = rlpi_error_set(RLP_E_NOMEM, "quantized base: out of memory for %.1f MiB of blocks",
                            (double)total / 1048576.0);
    if (rc) {
        rlpi_qbase_free(qb);
        return rc;
    }
    layout_state old;
    take(tf, &old);
    tf->infos = NULL;
    tf->names = NULL;
    tf->layers = NULL;
    tf->params = NULL;
    tf->n_infos = tf->n_params = 0;
    tf->qbase = qb;
    tf->n_stored = qb->window_floats; /* build_layout places the fp32 tensors after the window */
    if (!(rc = rlpi_tf_build_layout(tf)) && !(rc = rlpi_buffer_alloc(tf->be, tf->n_stored * 4, &tf->params))) {
        if (!rlpi_buffer_host(tf->params) && !(qb->staging = malloc(qb->window_floats * sizeof(float))))
            rc = rlpi_error_set(RLP_E_NOMEM, "quantized base: out of memory");
        if (!rc && tf->n_infos != old.n_infos)
            rc = rlpi_error_set(RLP_E_INTERNAL, "quantized base: layout has %zu tensors, not %zu", tf->n_infos,
                                old.n_infos);
        if (!rc)
            rc = fill(tf, &old);
    }
    if (rc) {
        layout_state failed;
        take(tf, &failed);
        put(tf, &old);
        drop(&failed);
        return rc;
    }
    old.qbase = NULL;
    drop(&old);
    return RLP_OK;
}

/* ------------------------------------------------------------ fingerprint as quantized */

/* Rows [begin, end) of one fp32 matrix quantized as `type` and back, in place
 * in `out` (the rows' dequantized values). */
typedef struct roundtrip_job {
    uint32_t type;
    int64_t cols;
    const float *src;
    float *out;
    int failed;
} roundtrip_job;

static void roundtrip_range(void *arg, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    roundtrip_job *j = arg;
    size_t row_bytes = type_bytes(j->type, (size_t)j->cols);
    uint8_t *blk = malloc(row_bytes);
    if (!blk) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->src + (size_t)r * (size_t)j->cols;
        float *y = j->out + (size_t)r * (size_t)j->cols;
        if (rlpi_quantize(j->type, x, (size_t)j->cols, blk, row_bytes) ||
            rlpi_dequantize(j->type, blk, row_bytes, y, (size_t)j->cols))
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
    }
    free(blk);
}

int rlpi_qbase_fingerprint_as(rlpi_transformer *tf, uint32_t type, uint32_t *out)
{
    if (tf->qbase) {
        if (tf->qbase->type != type)
            return rlpi_error_set(RLP_E_INVALID_ARG, "quantized base: held as %s, not %s",
                                  rlpi_qbase_dtype_name(tf->qbase->type), rlpi_qbase_dtype_name(type));
        return rlpi_lora_base_fingerprint(tf, out);
    }
    /* cached only for a frozen base: an optimizer step writes a trainable one unseen */
    if (tf->qcrc_valid && tf->qcrc_type == type && !tf->grads) {
        *out = tf->qcrc;
        return RLP_OK;
    }
    rlpi_qbase plan_only = {0};
    int rc = plan(tf, type, &plan_only);
    if (rc)
        return rc;
    rlpi_f32_scratch in = {0}, rt = {0};
    uint32_t crc = 0;
    for (size_t i = 0; !rc && i < tf->n_infos; i++) {
        const rlpi_param_info *p = &tf->infos[i];
        int mat = -1;
        for (int l = 0; mat < 0 && l < tf->cfg.n_layers; l++) {
            const layer_params *P = &tf->layers[l];
            const size_t off[RLPI_QB_N] = {P->wq, P->wk, P->wv, P->wo, P->wg, P->wu, P->wd};
            for (int m = 0; m < RLPI_QB_N; m++)
                if (off[m] == p->offset && (size_t)plan_only.rows[m] * (size_t)plan_only.cols[m] == p->n_elems)
                    mat = m;
        }
        const float *data;
        if ((rc = rlpi_tf_tensor_values(tf, p, &in, &data)) != RLP_OK)
            break;
        if (mat >= 0) {
            if ((rc = scratch_reserve(&rt, p->n_elems)) != RLP_OK)
                break;
            roundtrip_job j = {.type = plan_only.mat_type[mat], .cols = plan_only.cols[mat], .src = data, .out = rt.p};
            rlpi_threadpool_parallel_for(rlpi_backend_cpu_pool(tf->be), plan_only.rows[mat], 16, roundtrip_range, &j);
            if (j.failed) {
                rc = rlpi_error_set(RLP_E_NOMEM, "quantized base: round trip of %s failed", p->name);
                break;
            }
            data = rt.p;
        }
        crc = rlpi_crc32(crc, data, p->n_elems * 4);
    }
    free(in.p);
    free(rt.p);
    if (rc)
        return rc;
    tf->qcrc_valid = !tf->grads;
    tf->qcrc_type = type;
    tf->qcrc = crc;
    *out = crc;
    return RLP_OK;
}
