/* Files ↔ policies: format detection and dispatch to the loaders (GGUF,
 * HF folder, llama2.c), saving as an HF folder, and the optimizer state
 * file for resume. Parsing itself lives in the per-format files. */
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/gguf_tokenizer.h"
#include "model/hf_dir.h"
#include "model/llama2c.h"
#include "model/lora.h"
#include "model/policy.h"
#include "model/qbase.h"
#include "model/safetensors.h"

#include "core/error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum model_format { FORMAT_HF_DIR, FORMAT_GGUF, FORMAT_LLAMA2C } model_format;

static int detect(const char *path, model_format *fmt)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return rlpi_error_set(RLP_E_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        *fmt = FORMAT_HF_DIR;
        return RLP_OK;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return rlpi_error_set(RLP_E_IO, "%s: %s", path, strerror(errno));
    unsigned char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && !memcmp(magic, "GGUF", 4)) {
        *fmt = FORMAT_GGUF;
        return RLP_OK;
    }
    size_t len = strlen(path);
    if (len > 12 && !strcmp(path + len - 12, ".safetensors"))
        return rlpi_error_set(RLP_E_UNSUPPORTED,
                              "%s: a lone safetensors file has no architecture; pass its folder (with config.json)",
                              path);
    /* llama2.c: "ak42" v1 magic, or a legacy header (validated by its parser) */
    *fmt = FORMAT_LLAMA2C;
    return RLP_OK;
}

int rlpi_model_load_weights(const char *path, rlpi_model_config *cfg, rlpi_weights *w, rlpi_threadpool *pool)
{
    model_format fmt;
    int rc = detect(path, &fmt);
    if (rc)
        return rc;
    rlpi_weights_init(w);
    switch (fmt) {
    case FORMAT_HF_DIR: return rlpi_hf_dir_load(path, cfg, w);
    case FORMAT_LLAMA2C: return rlpi_llama2c_load(path, cfg, w);
    case FORMAT_GGUF: return rlpi_gguf_model_load(path, cfg, w, pool, NULL);
    }
    return rlpi_error_set(RLP_E_INTERNAL, "model load: unreachable");
}

int rlp_policy_load(rlp_policy **out, rlp_context *ctx, const char *path, const rlp_policy_options *opts)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(ctx, "ctx is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    rlpi_model_config cfg;
    rlpi_weights w;
    int rc = rlpi_model_load_weights(path, &cfg, &w, rlpi_backend_cpu_pool(ctx->backend));
    if (rc)
        return rlpi_error_wrap("%s", __func__);
    /* one NaN or Inf weight makes every logit NaN: refused here, by tensor
     * and element, rather than as NaN rewards and losses later (a scan of
     * a fraction of the load's time) */
    if ((rc = rlpi_weights_check_finite(&w, path)) != RLP_OK) {
        rlpi_weights_free(&w);
        return rlpi_error_wrap("%s", __func__);
    }
    rlp_policy *p;
    rc = rlpi_policy_create(&p, ctx, &cfg, &w, opts);
    rlpi_weights_free(&w);
    if (rc)
        return rlpi_error_wrap("%s: %s", __func__, path);
    /* the tokenizer that ships with the weights: GGUF metadata, or the HF
     * folder's tokenizer.json; llama2.c checkpoints carry none */
    model_format fmt;
    detect(path, &fmt);
    char tok_path[4096] = "";
    if (fmt == FORMAT_GGUF)
        snprintf(tok_path, sizeof tok_path, "%s", path);
    else if (fmt == FORMAT_HF_DIR) {
        snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", path);
        struct stat st;
        if (stat(tok_path, &st) != 0)
            tok_path[0] = '\0';
    }
    if (tok_path[0] && (rc = rlpi_policy_attach_tokenizer(p, tok_path)) != RLP_OK) {
        rlp_policy_free(p);
        return rlpi_error_wrap("%s: %s", __func__, path);
    }
    *out = p;
    return RLP_OK;
}

/* Copies a file through a temporary name, fsynced and renamed. */
static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return rlpi_error_set(RLP_E_IO, "%s: %s", src, strerror(errno));
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return rlpi_error_set(RLP_E_IO, "%s: %s", tmp, strerror(errno));
    }
    char buf[65536];
    size_t n;
    int rc = RLP_OK;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = rlpi_error_set(RLP_E_IO, "%s: write failed", tmp);
            break;
        }
    if (!rc && (ferror(in) || fflush(out) != 0 || fsync(fileno(out)) != 0))
        rc = rlpi_error_set(RLP_E_IO, "%s: copy failed", tmp);
    fclose(in);
    if (fclose(out) != 0 && !rc)
        rc = rlpi_error_set(RLP_E_IO, "%s: close failed", tmp);
    if (!rc && rename(tmp, dst) != 0)
        rc = rlpi_error_set(RLP_E_IO, "%s: %s", dst, strerror(errno));
    if (rc)
        unlink(tmp);
    return rc;
}

/* A view of a parameter-shaped buffer (parameters, AdamW's m or v) as
 * HF-named tensors whose data points into the buffer itself: a checkpoint
 * writes from it without a host copy of the model (0.5 GB for SmolLM2,
 * 1 GB for the two moments, which set the main job's peak memory). Names
 * are `prefix` + the parameter's name (owned by the view); the tied head
 * is an alias. 1 when the buffer is not host memory (CUDA): the caller
 * copies then. Free with view_free. Parameter-shaped means the base's
 * tensors for the weights; the optimizer's moments have the trainable
 * layout (the adapters' under LoRA, else the same), hence `trainable`. */
static int buffer_view(const rlp_policy *p, const rlpi_buffer *buf, const char *prefix, bool tied_head, bool trainable,
                       rlpi_weights *view)
{
    rlpi_weights_init(view);
    float *host = buf ? rlpi_buffer_host(buf) : NULL;
    if (!host)
        return 1;
    size_t n = trainable ? rlpi_transformer_n_trainable_tensors(p->tf) : rlpi_transformer_n_tensors(p->tf);
    view->tensors = calloc(n + 1, sizeof *view->tensors);
    if (!view->tensors)
        return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
    view->cap = n + 1;
    int32_t embed = -1;
    for (size_t i = 0; i < n; i++) {
        const rlpi_param_info *in =
            trainable ? rlpi_transformer_trainable_tensor(p->tf, i) : rlpi_transformer_tensor(p->tf, i);
        rlpi_tensor *t = &view->tensors[view->n];
        size_t len = strlen(prefix) + strlen(in->name) + 1;
        if (!(t->name = malloc(len)))
            return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
        snprintf(t->name, len, "%s%s", prefix, in->name);
        t->n_dims = in->n_dims;
        t->shape[0] = in->shape[0];
        t->shape[1] = in->shape[1];
        t->n_elems = in->n_elems;
        t->data = host + in->offset;
        t->alias_of = -1;
        snprintf(t->src_dtype, sizeof t->src_dtype, "F32");
        if (!strcmp(in->name, "model.embed_tokens.weight"))
            embed = (int32_t)view->n;
        view->n++;
    }
    if (tied_head && rlpi_transformer_config(p->tf)->tie_embeddings && embed >= 0) {
        rlpi_tensor *t = &view->tensors[view->n];
        *t = view->tensors[embed];
        if (!(t->name = strdup("lm_head.weight")))
            return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
        t->data = NULL;
        t->alias_of = embed;
        view->n++;
    }
    return RLP_OK;
}

/* The view's names are its own, its data the buffer's. */
static void view_free(rlpi_weights *view)
{
    for (size_t i = 0; i < view->n; i++)
        free(view->tensors[i].name);
    free(view->tensors);
    rlpi_weights_init(view);
}

int rlp_policy_save(const rlp_policy *policy, const char *dir, int dtype)
{
    return rlpi_policy_save_hf(policy, dir, dtype, true);
}

int rlpi_policy_save_hf(const rlp_policy *policy, const char *dir, int dtype, bool merged)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(dir, "dir is NULL");
    RLPI_CHECK_ARG(dtype >= RLP_DTYPE_F32 && dtype <= RLP_DTYPE_BF16, "dtype is not an rlp_dtype");
    static const rlpi_st_dtype map[] = {RLPI_ST_F32, RLPI_ST_F16, RLPI_ST_BF16};
    rlpi_weights w;
    /* adapters, merged: the model W + s·B·A (rlpi_transformer_export), as
     * PEFT's merge_and_unload then save_pretrained; unmerged: the base */
    bool lora = rlpi_transformer_lora_config(policy->tf) != NULL;
    bool quantized = rlpi_transformer_base_type(policy->tf) != RLPI_GGML_F32; /* blocks: dequantized copies */
    int rc = (lora && merged) || quantized ? 1
                                           : buffer_view(policy, rlpi_transformer_params(policy->tf), "", true, false, &w);
    if (rc == RLP_OK) {
        rc = rlpi_hf_dir_save(dir, rlpi_transformer_config(policy->tf), &w, map[dtype]);
        view_free(&w);
    } else if (rc == 1) { /* not host memory, or the merged model: a copy */
        if (lora && !merged)
            rlpi_transformer_set_lora_enabled(policy->tf, false);
        rc = rlpi_transformer_export(policy->tf, &w);
        if (lora && !merged)
            rlpi_transformer_set_lora_enabled(policy->tf, true);
        if (rc != RLP_OK)
            return rc;
        rc = rlpi_hf_dir_save(dir, rlpi_transformer_config(policy->tf), &w, map[dtype]);
        rlpi_weights_free(&w);
    } else {
        view_free(&w);
        return rc;
    }
    /* the tokenizer goes along: written from GGUF metadata, or the
     * tokenizer.json it came as copied (with its config) */
    const char *tp = policy->tokenizer_path;
    size_t tl = tp ? strlen(tp) : 0;
    model_format tfmt;
    if (!rc && tp && detect(tp, &tfmt) == RLP_OK && tfmt == FORMAT_GGUF) {
        rlpi_gguf *g;
        if ((rc = rlpi_gguf_open(&g, tp)) == RLP_OK) {
            rc = rlpi_tokenizer_json_from_gguf(g, dir);
            rlpi_gguf_close(g);
        }
    } else if (!rc && tl >= 14 && !strcmp(tp + tl - 14, "tokenizer.json")) {
        char src[4096], dst[4096];
        snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
        if (strcmp(tp, dst) != 0) {
            rc = copy_file(tp, dst);
            snprintf(src, sizeof src, "%.*stokenizer_config.json", (int)(tl - 14), tp);
            snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
            struct stat st;
            if (!rc && stat(src, &st) == 0)
                rc = copy_file(src, dst);
        }
    }
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

/* The optimizer file: tensors "m/<param>" and "v/<param>" in fp32 with
 * __metadata__ {format: "rlpost-adamw", step, skipped, version}. */
static void optimizer_tensor_name(char *buf, size_t cap, int which, const char *param)
{
    snprintf(buf, cap, "%s/%s", which ? "v" : "m", param);
}

/* AdamW's m and v as one view ("m/<p>", "v/<p>" per parameter p): RLP_OK, 1 when there is
 * none to view (no step yet, or device memory), or an error (the view
 * freed). */
static int moments_view(const rlp_policy *p, rlpi_weights *w)
{
    rlpi_weights m, v;
    rlpi_weights_init(w);
    int rc = buffer_view(p, p->opt.m, "m/", false, true, &m);
    if (rc != RLP_OK) {
        view_free(&m);
        return rc;
    }
    if ((rc = buffer_view(p, p->opt.v, "v/", false, true, &v)) != RLP_OK) {
        view_free(&m);
        view_free(&v);
        return rc;
    }
    rlpi_tensor *all = malloc((m.n + v.n) * sizeof *all);
    if (!all) {
        view_free(&m);
        view_free(&v);
        return rlpi_error_set(RLP_E_NOMEM, "policy: out of memory");
    }
    for (size_t i = 0; i < m.n; i++) { /* m/p, v/p per parameter: the file's order as before */
        all[2 * i] = m.tensors[i];
        all[2 * i + 1] = v.tensors[i];
    }
    w->tensors = all;
    w->n = w->cap = m.n + v.n;
    free(m.tensors); /* their names now belong to w */
    free(v.tensors);
    return RLP_OK;
}

int rlp_policy_save_optimizer(const rlp_policy *policy, const char *path)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    if (!policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen", __func__);
    rlpi_weights w;
    rlpi_st_metadata meta;
    rlpi_st_metadata_init(&meta);
    const rlpi_optimizer *opt = &policy->opt;
    /* host moments are written from their buffers; otherwise (no step
     * yet: zeros; device memory) copied */
    int rc = moments_view(policy, &w);
    bool viewed = rc == RLP_OK;
    if (rc < 0) {
        rlpi_st_metadata_free(&meta);
        return rc;
    }
    rc = RLP_OK;
    for (size_t i = 0; !viewed && i < rlpi_transformer_n_trainable_tensors(policy->tf) && rc == RLP_OK; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(policy->tf, i);
        for (int which = 0; which < 2 && rc == RLP_OK; which++) {
            char name[300];
            optimizer_tensor_name(name, sizeof name, which, in->name);
            rlpi_tensor *t;
            int64_t shape[2] = {in->shape[0], in->shape[1]};
            rc = rlpi_weights_add(&w, name, in->n_dims, shape, &t);
            if (rc == RLP_OK && opt->m) /* before the first step the moments are zero */
                rc = rlpi_buffer_download(which ? opt->v : opt->m, in->offset * 4, t->data, in->n_elems * 4);
        }
    }
    char num[32];
    if (rc == RLP_OK)
        rc = rlpi_st_metadata_set(&meta, "format", "rlpost-adamw");
    snprintf(num, sizeof num, "%" PRId64, opt->step);
    if (rc == RLP_OK)
        rc = rlpi_st_metadata_set(&meta, "step", num);
    snprintf(num, sizeof num, "%" PRId64, opt->skipped);
    if (rc == RLP_OK)
        rc = rlpi_st_metadata_set(&meta, "skipped", num);
    snprintf(num, sizeof num, "%" PRIu64, policy->version);
    if (rc == RLP_OK)
        rc = rlpi_st_metadata_set(&meta, "version", num);
    if (rc == RLP_OK) {
        rlpi_st_write_opts wo = {.dtype = RLPI_ST_F32, .meta = &meta, .skip_aliases = true};
        rc = rlpi_safetensors_write(path, &w, &wo);
    }
    if (viewed)
        view_free(&w);
    else
        rlpi_weights_free(&w);
    rlpi_st_metadata_free(&meta);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

static int parse_count(const rlpi_st_metadata *meta, const char *key, const char *path, int64_t *out)
{
    const char *v = rlpi_st_metadata_get(meta, key);
    char *end;
    errno = 0;
    long long x = v ? strtoll(v, &end, 10) : -1;
    if (!v || errno || *end || x < 0)
        return rlpi_error_set(RLP_E_FORMAT, "%s: optimizer metadata '%s' missing or not a count", path, key);
    *out = x;
    return RLP_OK;
}

int rlp_policy_load_optimizer(rlp_policy *policy, const char *path)
{
    RLPI_CHECK_ARG(policy, "policy is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    if (!policy->trainable)
        return rlpi_error_set(RLP_E_STATE, "%s: the policy is frozen", __func__);
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_st_metadata meta;
    rlpi_st_metadata_init(&meta);
    int rc = rlpi_safetensors_read(path, &w, &meta);
    if (rc) {
        rlpi_st_metadata_free(&meta);
        return rlpi_error_wrap("%s", __func__);
    }
    int64_t step = 0, skipped = 0, version = 0;
    const char *fmt = rlpi_st_metadata_get(&meta, "format");
    if (!fmt || strcmp(fmt, "rlpost-adamw"))
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: not an rlpost optimizer file (format '%s')", path, fmt ? fmt : "");
    if (!rc)
        rc = parse_count(&meta, "step", path, &step);
    if (!rc)
        rc = parse_count(&meta, "skipped", path, &skipped);
    if (!rc)
        rc = parse_count(&meta, "version", path, &version);
    /* validate every tensor before touching the optimizer */
    size_t n_tensors = rlpi_transformer_n_trainable_tensors(policy->tf);
    for (size_t i = 0; i < n_tensors && !rc; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(policy->tf, i);
        for (int which = 0; which < 2 && !rc; which++) {
            char name[300];
            optimizer_tensor_name(name, sizeof name, which, in->name);
            const rlpi_tensor *t = rlpi_weights_find(&w, name);
            if (!t || t->n_elems != in->n_elems)
                rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' %s", path, name,
                                    t ? "has the wrong size for this model" : "is missing");
        }
    }
    if (!rc && w.n != 2 * n_tensors)
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: %zu tensors, this model's optimizer has %zu", path, w.n, 2 * n_tensors);
    rlpi_optimizer *opt = &policy->opt;
    size_t n = rlpi_transformer_n_trainable(policy->tf);
    rlpi_backend *be = policy->ctx->backend;
    if (!rc && !opt->m) {
        if ((rc = rlpi_buffer_alloc(be, n * 4, &opt->m)) == RLP_OK)
            rc = rlpi_buffer_alloc(be, n * 4, &opt->v);
        if (rc)
            rlpi_optimizer_release(opt);
    }
    for (size_t i = 0; i < n_tensors && !rc; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(policy->tf, i);
        for (int which = 0; which < 2 && !rc; which++) {
            char name[300];
            optimizer_tensor_name(name, sizeof name, which, in->name);
            const rlpi_tensor *t = rlpi_weights_find(&w, name);
            rc = rlpi_buffer_upload(which ? opt->v : opt->m, in->offset * 4, rlpi_tensor_data(&w, t), in->n_elems * 4);
        }
    }
    if (!rc) {
        opt->step = step;
        opt->skipped = skipped;
        policy->version = (uint64_t)version;
    }
    rlpi_weights_free(&w);
    rlpi_st_metadata_free(&meta);
    return rc ? rlpi_error_wrap("%s", __func__) : RLP_OK;
}

/* The fields of rlp_model_info a model config says (all but format,
 * n_params, n_tensors and dtypes), for a caller of version `want`. */
static void info_from_config(rlp_model_info *info, const rlpi_model_config *c, uint32_t want)
{
    memset(info, 0, sizeof *info);
    info->version = want >= 3 ? RLP_MODEL_INFO_VERSION : want == 2 ? 2 : 1;
    snprintf(info->architecture, sizeof info->architecture, "%s", c->arch);
    info->n_layers = c->n_layers;
    info->dim = c->dim;
    info->n_heads = c->n_heads;
    info->n_kv_heads = c->n_kv_heads;
    info->head_dim = c->head_dim;
    info->ffn_dim = c->ffn_dim;
    info->vocab_size = c->vocab_size;
    info->context_length = c->max_seq_len;
    info->rope_theta = c->rope_theta;
    info->rms_eps = c->rms_eps;
    info->rope_scaling = c->rope_scaling;
    info->tie_embeddings = c->tie_embeddings;
    info->attention_bias = c->attention_bias;
    snprintf(info->activation, sizeof info->activation, "%s", c->activation == RLPI_ACT_GELU_TANH ? "gelu_tanh" : "silu");
    info->qk_norm = c->qk_norm;
    info->post_norms = c->post_norms;
    info->norm_offset = c->norm_offset;
    info->embed_scale = c->embed_scale;
    info->attn_scale = rlpi_model_config_attn_scale(c);
    info->final_softcap = c->final_softcap;
    info->sliding_window = c->sliding_window;
    info->n_local_layers = rlpi_model_config_n_local_layers(c);
    info->rope_theta_local = c->rope_theta_local;
    info->score_labels = c->score_labels;
    info->score_per_token = c->score_per_token;
}

/* How many bytes of rlp_model_info a caller of version `want` owns. */
static size_t info_size(uint32_t want)
{
    return want >= 3   ? sizeof(rlp_model_info)
           : want == 2 ? offsetof(rlp_model_info, score_labels)
                       : offsetof(rlp_model_info, activation);
}

int rlp_model_inspect(rlp_model_info *out, const char *path)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(path, "path is NULL");
    model_format fmt;
    int rc = detect(path, &fmt);
    if (rc)
        return rc;
    rlpi_model_config c;
    rlpi_weights w;
    if ((rc = rlpi_model_load_weights(path, &c, &w, NULL)) != RLP_OK)
        return rlpi_error_wrap("%s", __func__);
    /* read before anything is written: it says how long the caller's struct is */
    uint32_t want = out->version;
    rlp_model_info info;
    info_from_config(&info, &c, want);
    snprintf(info.format, sizeof info.format, "%s",
             fmt == FORMAT_GGUF ? "gguf" : fmt == FORMAT_HF_DIR ? "hf" : "llama2c");
    /* dtype histogram over stored tensors (aliases are not stored) */
    char names[8][8];
    uint64_t counts[8];
    int kinds = 0;
    for (size_t i = 0; i < w.n; i++) {
        const rlpi_tensor *t = &w.tensors[i];
        if (t->alias_of >= 0)
            continue;
        info.n_tensors++;
        info.n_params += t->n_elems;
        int k = 0;
        while (k < kinds && strcmp(names[k], t->src_dtype))
            k++;
        if (k == kinds && kinds < 8) {
            snprintf(names[kinds], sizeof names[kinds], "%s", t->src_dtype[0] ? t->src_dtype : "F32");
            counts[kinds++] = 0;
        }
        if (k < kinds)
            counts[k]++;
    }
    size_t used = 0;
    for (int k = 0; k < kinds && used < sizeof info.dtypes; k++)
        used += (size_t)snprintf(info.dtypes + used, sizeof info.dtypes - used, "%s%s:%llu", k ? " " : "", names[k],
                                 (unsigned long long)counts[k]);
    rlpi_weights_free(&w);
    memcpy(out, &info, info_size(want));
    return RLP_OK;
}

int rlp_policy_info(rlp_model_info *out, const rlp_policy *policy)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(policy, "policy is NULL");
    uint32_t want = out->version;
    RLPI_CHECK_ARG(want >= 1, "out->version must be set (RLP_MODEL_INFO_VERSION)");
    rlp_model_info info;
    info_from_config(&info, rlpi_transformer_config(policy->tf), want);
    info.n_params = rlpi_transformer_n_params(policy->tf);
    info.n_tensors = rlpi_transformer_n_tensors(policy->tf);
    snprintf(info.dtypes, sizeof info.dtypes, "F32:%llu", (unsigned long long)info.n_tensors);
    memcpy(out, &info, info_size(want));
    return RLP_OK;
}
