/* HF model folder load/save on top of safetensors.c and hf_config.c. */
#include "model/hf_dir.h"

#include "model/hf_config.h"

#include "core/error.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int expect(const rlpi_weights *w, const char *src, const char *name, int nd, int64_t d0,
                  int64_t d1)
{
    const rlpi_tensor *t = rlpi_weights_find(w, name);
    if (!t)
        return rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' is missing", src, name);
    if (t->n_dims != nd || t->shape[0] != d0 || (nd == 2 && t->shape[1] != d1))
        return rlpi_error_set(RLP_E_FORMAT,
                              "%s: tensor '%s' has shape [%" PRId64 ", %" PRId64
                              "] (%d dims), config implies [%" PRId64 ", %" PRId64 "]",
                              src, name, t->shape[0], t->n_dims > 1 ? t->shape[1] : 0, t->n_dims,
                              d0, nd == 2 ? d1 : 0);
    return RLP_OK;
}

int rlpi_hf_check_weights(const rlpi_model_config *c, const rlpi_weights *w, const char *src)
{
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    int rc;
    if ((rc = expect(w, src, "model.embed_tokens.weight", 2, c->vocab_size, c->dim)) ||
        (rc = expect(w, src, "model.norm.weight", 1, c->dim, 0)))
        return rc;
    if (c->score_labels > 0) { /* value/reward model: HF's `score` Linear instead of lm_head */
        if ((rc = expect(w, src, "score.weight", 2, c->score_labels, c->dim)) ||
            (c->score_bias && (rc = expect(w, src, "score.bias", 1, c->score_labels, 0))))
            return rc;
    } else if ((rc = expect(w, src, "lm_head.weight", 2, c->vocab_size, c->dim))) {
        return rc;
    }
    char name[96];
#define L(fmt, ...) (snprintf(name, sizeof name, "model.layers.%d." fmt, i), \
                     expect(w, src, name, __VA_ARGS__))
    for (int i = 0; i < c->n_layers; i++) {
        if ((rc = L("input_layernorm.weight", 1, c->dim, 0)) ||
            (rc = L("post_attention_layernorm.weight", 1, c->dim, 0)) ||
            (rc = L("self_attn.q_proj.weight", 2, q, c->dim)) ||
            (rc = L("self_attn.k_proj.weight", 2, kv, c->dim)) ||
            (rc = L("self_attn.v_proj.weight", 2, kv, c->dim)) ||
            (rc = L("self_attn.o_proj.weight", 2, c->dim, q)) ||
            (rc = L("mlp.gate_proj.weight", 2, c->ffn_dim, c->dim)) ||
            (rc = L("mlp.up_proj.weight", 2, c->ffn_dim, c->dim)) ||
            (rc = L("mlp.down_proj.weight", 2, c->dim, c->ffn_dim)))
            return rc;
        if (c->qk_norm && ((rc = L("self_attn.q_norm.weight", 1, c->head_dim, 0)) ||
                           (rc = L("self_attn.k_norm.weight", 1, c->head_dim, 0))))
            return rc;
        if (c->post_norms && ((rc = L("pre_feedforward_layernorm.weight", 1, c->dim, 0)) ||
                              (rc = L("post_feedforward_layernorm.weight", 1, c->dim, 0))))
            return rc;
        if (c->attention_bias &&
            ((rc = L("self_attn.q_proj.bias", 1, q, 0)) || (rc = L("self_attn.k_proj.bias", 1, kv, 0)) ||
             (rc = L("self_attn.v_proj.bias", 1, kv, 0))))
            return rc;
    }
#undef L
    return RLP_OK;
}

/* RMSNorm weights by HF name: every *layernorm.weight (input_, post_attention_,
 * pre_/post_feedforward_), q_norm / k_norm, and the final model.norm. */
bool rlpi_hf_is_norm_weight(const char *name)
{
    size_t n = strlen(name);
    static const char *const ends[] = {"layernorm.weight", "_norm.weight"};
    for (size_t i = 0; i < 2; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && !strcmp(name + n - k, ends[i]))
            return true;
    }
    return !strcmp(name, "model.norm.weight");
}

/* HF stores Gemma's norm weights as w with the scale 1 + w; the transformer
 * holds the effective scale (config.h), so the offset is added once here. */
static void add_norm_offset(rlpi_weights *w, float offset)
{
    if (offset == 0.0f)
        return;
    for (size_t i = 0; i < w->n; i++) {
        rlpi_tensor *t = &w->tensors[i];
        if (t->alias_of < 0 && t->data && rlpi_hf_is_norm_weight(t->name))
            for (size_t j = 0; j < t->n_elems; j++)
                t->data[j] += offset;
    }
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int rlpi_hf_dir_load(const char *dir, rlpi_model_config *cfg, rlpi_weights *w)
{
    rlpi_weights_init(w);
    char *cpath = join(dir, "config.json");
    char *spath = join(dir, "model.safetensors");
    char *ipath = join(dir, "model.safetensors.index.json");
    int rc;
    if (!cpath || !spath || !ipath) {
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
        goto out;
    }
    if ((rc = rlpi_hf_config_read(cpath, cfg)))
        goto out;
    if (exists(spath))
        rc = rlpi_safetensors_read(spath, w, NULL);
    else if (exists(ipath))
        rc = rlpi_safetensors_read_index(ipath, w, NULL);
    else
        rc = rlpi_error_set(RLP_E_NOT_FOUND,
                            "%s: neither model.safetensors nor model.safetensors.index.json exists",
                            dir);
    if (rc)
        goto out;
    /* Tied checkpoints ship no head (llama.cpp #12567 is the bug of
     * requiring one); the head is the embedding, shared, not copied. */
    if (cfg->tie_embeddings && !rlpi_weights_find(w, "lm_head.weight") &&
        (rc = rlpi_weights_add_alias(w, "lm_head.weight", "model.embed_tokens.weight")))
        goto out;
    if ((rc = rlpi_hf_check_weights(cfg, w, dir)))
        goto out;
    add_norm_offset(w, cfg->norm_offset);
    /* A tied model that stores a head anyway: transformers re-ties it to
     * the embedding and ignores the stored values, so do the same. */
    if (cfg->tie_embeddings) {
        rlpi_tensor *head = (rlpi_tensor *)rlpi_weights_find(w, "lm_head.weight");
        const rlpi_tensor *emb = rlpi_weights_find(w, "model.embed_tokens.weight");
        if (head->alias_of < 0 && emb->alias_of < 0) {
            free(head->data);
            head->data = NULL;
            head->alias_of = (int32_t)(emb - w->tensors);
        }
    }
out:
    if (rc)
        rlpi_weights_free(w);
    free(cpath);
    free(spath);
    free(ipath);
    return rc;
}

int rlpi_hf_dir_save(const char *dir, const rlpi_model_config *cfg, const rlpi_weights *w,
                     rlpi_st_dtype dtype)
{
    int rc = rlpi_model_config_validate(cfg, dir);
    if (rc || (rc = rlpi_hf_check_weights(cfg, w, dir)))
        return rc;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return rlpi_error_set(RLP_E_IO, "%s: cannot create folder: %s", dir, strerror(errno));
    char *cpath = join(dir, "config.json");
    char *spath = join(dir, "model.safetensors");
    char *gpath = join(dir, "generation_config.json");
    rlpi_st_metadata meta;
    rlpi_st_metadata_init(&meta);
    rlpi_weights view;
    rlpi_weights_init(&view);
    float **owned = NULL; /* offset-free norm copies of the view */
    size_t n_owned = 0;
    if (!cpath || !spath || !gpath) {
        rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
        goto out;
    }
    if ((rc = rlpi_st_metadata_set(&meta, "format", "pt")))
        goto out;
    /* A shallow view of `w` without lm_head when tied: save_pretrained
     * drops tied weights too, and from_pretrained re-ties the head. Norm
     * weights of a family with a norm offset are copies with the offset
     * taken off (HF's convention; `w` holds the effective scale). */
    const rlpi_weights *src = w;
    const rlpi_tensor *head = rlpi_weights_find(w, "lm_head.weight");
    bool drop_head = cfg->tie_embeddings && head;
    if (drop_head || cfg->norm_offset != 0.0f) {
        view.tensors = calloc(w->n ? w->n : 1, sizeof *view.tensors);
        owned = calloc(w->n ? w->n : 1, sizeof *owned);
        if (!view.tensors || !owned) {
            rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
            goto out;
        }
        for (size_t i = 0; i < w->n; i++) {
            if (drop_head && &w->tensors[i] == head)
                continue;
            view.tensors[view.n] = w->tensors[i];
            /* resolve aliases to data pointers so indices may shift */
            const float *d = rlpi_tensor_data(w, &w->tensors[i]);
            view.tensors[view.n].data = (float *)d;
            view.tensors[view.n].alias_of = -1;
            if (cfg->norm_offset != 0.0f && rlpi_hf_is_norm_weight(w->tensors[i].name)) {
                size_t ne = w->tensors[i].n_elems;
                float *c = malloc((ne ? ne : 1) * sizeof *c);
                if (!c) {
                    rc = rlpi_error_set(RLP_E_NOMEM, "%s: out of memory", dir);
                    goto out;
                }
                for (size_t j = 0; j < ne; j++)
                    c[j] = d[j] - cfg->norm_offset;
                owned[n_owned++] = c;
                view.tensors[view.n].data = c;
            }
            view.n++;
        }
        src = &view;
    }
    rlpi_st_write_opts o = {dtype, &meta, false};
    if ((rc = rlpi_safetensors_write(spath, src, &o)) || (rc = rlpi_hf_config_write(cpath, cfg)) ||
        (rc = rlpi_hf_generation_config_write(gpath, cfg)))
        goto out;
out:
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(view.tensors); /* borrowed names and data: not rlpi_weights_free */
    rlpi_st_metadata_free(&meta);
    free(cpath);
    free(spath);
    free(gpath);
    return rc;
}
