/* Reads the model fixtures written by tests/reference/
 * make_transformer_fixtures.py: a JSON index (config, shapes, seq_start,
 * named arrays) beside a little-endian blob of float32/int32 arrays.
 * Shared by the transformer and policy tests; include after cmocka.h. */
#ifndef RLPOST_TESTS_MODEL_FIXTURE_H
#define RLPOST_TESTS_MODEL_FIXTURE_H

#include "model/config.h"
#include "model/weights.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct model_fixture {
    json_t *meta;
    unsigned char *blob;
    size_t blob_len;
    rlpi_model_config cfg;
    rlpi_weights w;            /* the "w:<tensor>" arrays in HF names */
    int64_t n_seq, n;          /* sequences, tokens */
    int64_t seq_start[16];
} model_fixture;

/* Named array of the blob (float32 or int32); count receives its length. */
static inline const void *fixture_array(const model_fixture *f, const char *key, size_t *count)
{
    json_t *a = json_object_get(json_object_get(f->meta, "arrays"), key);
    assert_non_null(a);
    size_t off = (size_t)json_integer_value(json_object_get(a, "offset"));
    *count = (size_t)json_integer_value(json_object_get(a, "count"));
    assert_true(off + *count * 4 <= f->blob_len);
    return f->blob + off;
}

static inline void fixture_load(model_fixture *f, const char *name)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT");
    char path[1024];
    json_error_t err;
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s.json", root ? root : ".", name);
    f->meta = json_load_file(path, 0, &err);
    if (!f->meta)
        fail_msg("cannot load %s: %s", path, err.text);
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s.bin", root ? root : ".", name);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    f->blob_len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->blob = malloc(f->blob_len);
    assert_int_equal(fread(f->blob, 1, f->blob_len, fp), f->blob_len);
    fclose(fp);

    json_t *c = json_object_get(f->meta, "config");
    memset(&f->cfg, 0, sizeof f->cfg);
    snprintf(f->cfg.arch, sizeof f->cfg.arch, "%s", json_string_value(json_object_get(c, "arch")));
#define I(field) f->cfg.field = (int32_t)json_integer_value(json_object_get(c, #field))
    I(n_layers);
    I(dim);
    I(n_heads);
    I(n_kv_heads);
    I(head_dim);
    I(ffn_dim);
    I(vocab_size);
    I(max_seq_len);
#undef I
    f->cfg.rope_theta = (float)json_number_value(json_object_get(c, "rope_theta"));
    f->cfg.rms_eps = (float)json_number_value(json_object_get(c, "rms_eps"));
    f->cfg.tie_embeddings = json_is_true(json_object_get(c, "tie_embeddings"));
    f->cfg.attention_bias = json_is_true(json_object_get(c, "attention_bias"));
    f->cfg.bos_id = f->cfg.eos_id = -1;
    json_t *sc = json_object_get(c, "rope_scaling");
    if (sc) {
        f->cfg.rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
        f->cfg.rope_factor = (float)json_number_value(json_object_get(sc, "factor"));
        f->cfg.rope_low_freq_factor = (float)json_number_value(json_object_get(sc, "low_freq_factor"));
        f->cfg.rope_high_freq_factor = (float)json_number_value(json_object_get(sc, "high_freq_factor"));
        f->cfg.rope_original_max_pos =
            (int32_t)json_integer_value(json_object_get(sc, "original_max_position_embeddings"));
    }
    json_t *ss = json_object_get(f->meta, "seq_start");
    f->n_seq = (int64_t)json_array_size(ss) - 1;
    assert_true(f->n_seq >= 1 && f->n_seq < 16);
    for (size_t i = 0; i < json_array_size(ss); i++)
        f->seq_start[i] = json_integer_value(json_array_get(ss, i));
    f->n = f->seq_start[f->n_seq];

    rlpi_weights_init(&f->w);
    const char *key;
    json_t *shape;
    json_object_foreach(json_object_get(f->meta, "shapes"), key, shape) {
        int64_t sh[2] = {0, 0};
        for (size_t i = 0; i < json_array_size(shape); i++)
            sh[i] = json_integer_value(json_array_get(shape, i));
        rlpi_tensor *t;
        assert_int_equal(rlpi_weights_add(&f->w, key, (int32_t)json_array_size(shape), sh, &t), RLP_OK);
        char wk[256];
        snprintf(wk, sizeof wk, "w:%s", key);
        size_t count;
        const float *src = fixture_array(f, wk, &count);
        assert_int_equal(count, t->n_elems);
        memcpy(t->data, src, count * 4);
    }
}

/* fixture_load, then the family fields of rlpi_model_config that the
 * Qwen3/Gemma 3 fixtures (make_arch_fixtures.py) carry in their JSON
 * config, field by field; the config must validate. */
static inline double fixture_num(json_t *c, const char *key)
{
    json_t *v = json_object_get(c, key);
    assert_non_null(v);
    return json_number_value(v);
}

static inline void fixture_load_family(model_fixture *f, const char *name)
{
    fixture_load(f, name);
    json_t *c = json_object_get(f->meta, "config");
    rlpi_model_config *cfg = &f->cfg;
    cfg->activation = (int32_t)fixture_num(c, "activation");
    cfg->qk_norm = json_is_true(json_object_get(c, "qk_norm"));
    cfg->post_norms = json_is_true(json_object_get(c, "post_norms"));
    cfg->norm_offset = (float)fixture_num(c, "norm_offset");
    cfg->embed_scale = (float)fixture_num(c, "embed_scale");
    cfg->attn_scale = (float)fixture_num(c, "attn_scale");
    cfg->final_softcap = (float)fixture_num(c, "final_softcap");
    cfg->sliding_window = (int32_t)fixture_num(c, "sliding_window");
    cfg->rope_theta_local = (float)fixture_num(c, "rope_theta_local");
    json_t *lin = json_object_get(c, "rope_linear_factor");
    if (lin) { /* global layers only: the local ones keep plain RoPE */
        cfg->rope_scaling = RLPI_ROPE_SCALING_LINEAR;
        cfg->rope_factor = (float)json_number_value(lin);
    }
    json_t *ll = json_object_get(c, "local_layers");
    for (size_t i = 0; i < json_array_size(ll); i++)
        cfg->local_layers[i] = (uint8_t)json_integer_value(json_array_get(ll, i));
    assert_int_equal(rlpi_model_config_validate(cfg, name), RLP_OK);
}

static inline void fixture_free(model_fixture *f)
{
    json_decref(f->meta);
    free(f->blob);
    rlpi_weights_free(&f->w);
}

#endif
