/* HF model folders: save then load gives the same config and bit-equal
 * weights (F32) or their exact half roundings (BF16); tied heads are not
 * stored and come back as aliases; sharded folders load; missing and
 * mis-shaped tensors fail naming the tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "core/half.h"
#include "model/hf_config.h"
#include "model/hf_dir.h"
#include "tiny_model.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256];

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/rlpost_hfdir_XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static void rm_tree(const char *p)
{
    DIR *d = opendir(p);
    if (!d) {
        unlink(p);
        return;
    }
    struct dirent *e;
    char q[600];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(q, sizeof q, "%s/%s", p, e->d_name);
        rm_tree(q);
    }
    closedir(d);
    rmdir(p);
}

static int teardown(void **state)
{
    (void)state;
    rm_tree(root);
    return 0;
}

static const char *sub(const char *a, const char *b)
{
    static char p[600];
    if (b)
        snprintf(p, sizeof p, "%s/%s/%s", root, a, b);
    else
        snprintf(p, sizeof p, "%s/%s", root, a);
    return p;
}

static void assert_same(const rlpi_weights *a, const rlpi_weights *b, int bf16)
{
    for (size_t i = 0; i < a->n; i++) {
        const rlpi_tensor *x = &a->tensors[i], *y = rlpi_weights_find(b, x->name);
        if (!y)
            fail_msg("tensor %s missing after load", x->name);
        assert_int_equal(x->n_elems, y->n_elems);
        const float *dx = rlpi_tensor_data(a, x), *dy = rlpi_tensor_data(b, y);
        for (size_t k = 0; k < x->n_elems; k++) {
            float want = bf16 ? rlpi_bf16_to_f32(rlpi_f32_to_bf16(dx[k])) : dx[k];
            if (rlpi_f32_to_bits(want) != rlpi_f32_to_bits(dy[k]))
                fail_msg("%s[%zu]: %a != %a", x->name, k, (double)want, (double)dy[k]);
        }
    }
}

static void save_load_round_trip(void **state)
{
    (void)state;
    const char *archs[] = {"llama", "qwen2", "mistral", "qwen3", "gemma3"};
    for (int ai = 0; ai < 5; ai++) {
        for (int tied = 0; tied < 2; tied++) {
            rlpi_model_config c, c2;
            rlpi_weights w, r;
            tiny_config(&c, archs[ai], tied);
            if (ai == 0) { /* exercise llama3 scaling through the file */
                c.rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
                c.rope_factor = 8.0f;
                c.rope_low_freq_factor = 1.0f;
                c.rope_high_freq_factor = 4.0f;
                c.rope_original_max_pos = 64;
            }
            assert_int_equal(tiny_weights(&c, &w, 7 + (uint64_t)ai), RLP_OK);
            char name[32];
            snprintf(name, sizeof name, "%s_%d", archs[ai], tied);
            if (rlpi_hf_dir_save(sub(name, NULL), &c, &w, RLPI_ST_F32) != RLP_OK)
                fail_msg("save: %s", rlp_error_last());
            struct stat st;
            assert_int_equal(stat(sub(name, "generation_config.json"), &st), 0);
            /* tied: lm_head is not in the file */
            rlpi_weights raw;
            rlpi_weights_init(&raw);
            rlpi_st_metadata m;
            rlpi_st_metadata_init(&m);
            assert_int_equal(rlpi_safetensors_read(sub(name, "model.safetensors"), &raw, &m), 0);
            assert_string_equal(rlpi_st_metadata_get(&m, "format"), "pt");
            assert_int_equal(rlpi_weights_find(&raw, "lm_head.weight") == NULL, tied);
            /* Gemma's norms are stored as scale - 1 (HF's convention), the
             * rest as they are */
            for (size_t k = 0; k < raw.n; k++) {
                const rlpi_tensor *x = &raw.tensors[k], *y = rlpi_weights_find(&w, x->name);
                float off = rlpi_hf_is_norm_weight(x->name) ? c.norm_offset : 0.0f;
                assert_non_null(y);
                for (size_t e = 0; e < x->n_elems; e++)
                    if (x->data[e] != rlpi_tensor_data(&w, y)[e] - off)
                        fail_msg("%s: %s[%zu] = %g stored, want %g", name, x->name, e, (double)x->data[e],
                                 (double)(rlpi_tensor_data(&w, y)[e] - off));
            }
            rlpi_st_metadata_free(&m);
            rlpi_weights_free(&raw);

            if (rlpi_hf_dir_load(sub(name, NULL), &c2, &r) != RLP_OK)
                fail_msg("load: %s", rlp_error_last());
            assert_memory_equal(&c, &c2, sizeof c);
            assert_int_equal(r.n, w.n);
            if (c.norm_offset != 0.0f) {
                /* (x - 1) + 1 is x only where no bits were lost: compare the
                 * norms by what the load must give, (stored) + 1 */
                for (size_t k = 0; k < w.n; k++)
                    if (rlpi_hf_is_norm_weight(w.tensors[k].name))
                        for (size_t e = 0; e < w.tensors[k].n_elems; e++)
                            w.tensors[k].data[e] = (w.tensors[k].data[e] - 1.0f) + 1.0f;
            }
            assert_same(&w, &r, 0);
            const rlpi_tensor *head = rlpi_weights_find(&r, "lm_head.weight");
            if (tied) {
                const rlpi_tensor *emb = rlpi_weights_find(&r, "model.embed_tokens.weight");
                assert_int_equal(head->alias_of, (int)(emb - r.tensors));
                assert_ptr_equal(rlpi_tensor_data(&r, head), emb->data);
            } else {
                assert_int_equal(head->alias_of, -1);
            }
            rlpi_weights_free(&w);
            rlpi_weights_free(&r);
        }
    }
}

static void bf16_save_rounds_each_weight(void **state)
{
    (void)state;
    rlpi_model_config c, c2;
    rlpi_weights w, r;
    tiny_config(&c, "qwen2", true);
    assert_int_equal(tiny_weights(&c, &w, 99), RLP_OK);
    assert_int_equal(rlpi_hf_dir_save(sub("bf16", NULL), &c, &w, RLPI_ST_BF16), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bf16", NULL), &c2, &r), RLP_OK);
    assert_same(&w, &r, 1);
    assert_string_equal(rlpi_weights_find(&r, "model.norm.weight")->src_dtype, "BF16");
    rlpi_weights_free(&w);
    rlpi_weights_free(&r);
}

static void sharded_folder_loads(void **state)
{
    (void)state;
    /* Gemma 3 too: shards hold HF's values (norms as scale - 1), the load
     * gives the scale */
    const char *archs[2] = {"llama", "gemma3"};
    for (int ai = 0; ai < 2; ai++) {
        rlpi_model_config c, c2;
        rlpi_weights w, a, b, r;
        tiny_config(&c, archs[ai], false);
        assert_int_equal(tiny_weights(&c, &w, 5), RLP_OK);
        assert_int_equal(rlpi_hf_dir_save(sub("sharded", NULL), &c, &w, RLPI_ST_F32), RLP_OK);
        unlink(sub("sharded", "model.safetensors"));
        /* split in two shallow halves and write an index like save_pretrained */
        size_t half = w.n / 2;
        rlpi_weights_init(&a);
        rlpi_weights_init(&b);
        a.tensors = w.tensors;
        a.n = half;
        b.tensors = w.tensors + half;
        b.n = w.n - half;
        assert_int_equal(rlpi_safetensors_write(sub("sharded", "model-00001-of-00002.safetensors"), &a,
                                                NULL), 0);
        assert_int_equal(rlpi_safetensors_write(sub("sharded", "model-00002-of-00002.safetensors"), &b,
                                                NULL), 0);
        FILE *f = fopen(sub("sharded", "model.safetensors.index.json"), "w");
        fprintf(f, "{\"metadata\":{},\"weight_map\":{");
        for (size_t i = 0; i < w.n; i++)
            fprintf(f, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"", i ? "," : "",
                    w.tensors[i].name, i < half ? 1 : 2);
        fprintf(f, "}}");
        fclose(f);
        if (rlpi_hf_dir_load(sub("sharded", NULL), &c2, &r) != RLP_OK)
            fail_msg("%s", rlp_error_last());
        assert_int_equal(r.n, w.n);
        assert_true(c2.norm_offset == c.norm_offset);
        for (size_t i = 0; i < w.n; i++)
            if (rlpi_hf_is_norm_weight(w.tensors[i].name))
                for (size_t e = 0; e < w.tensors[i].n_elems; e++)
                    w.tensors[i].data[e] += c.norm_offset; /* the file's values were HF's */
        assert_same(&w, &r, 0);
        rlpi_weights_free(&r);
        rlpi_weights_free(&w);
    }
}

static void missing_or_misshaped_tensors_fail(void **state)
{
    (void)state;
    rlpi_model_config c, c2;
    rlpi_weights w, r;
    tiny_config(&c, "llama", false);
    assert_int_equal(tiny_weights(&c, &w, 3), RLP_OK);
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &c, &w, RLPI_ST_F32), RLP_OK);
    /* config claims a wider ffn: shape error */
    rlpi_model_config wide = c;
    wide.ffn_dim = 64;
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &wide), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(),
                           "'model.layers.0.mlp.gate_proj.weight' has shape [48, 32] (2 dims), "
                           "config implies [64, 32]"));
    /* tied config over a file that stores a (different) head: the head is
     * the embedding, as transformers re-ties it */
    rlpi_model_config tied0 = c;
    tied0.tie_embeddings = true;
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &tied0), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_OK);
    const rlpi_tensor *h0 = rlpi_weights_find(&r, "lm_head.weight");
    const rlpi_tensor *e0 = rlpi_weights_find(&r, "model.embed_tokens.weight");
    assert_int_equal(h0->alias_of, (int)(e0 - r.tensors));
    assert_ptr_equal(rlpi_tensor_data(&r, h0), e0->data);
    assert_int_equal(r.n, w.n);
    rlpi_weights_free(&r);
    /* untied config but no head in the file */
    rlpi_model_config tied = c;
    tied.tie_embeddings = true;
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &tied, &w, RLPI_ST_F32), RLP_OK);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &c), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "tensor 'lm_head.weight' is missing"));
    /* qwen2 config over llama weights: biases missing */
    rlpi_model_config q = c;
    strcpy(q.arch, "qwen2");
    q.attention_bias = true;
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &c, &w, RLPI_ST_F32), RLP_OK);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &q), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "'model.layers.0.self_attn.q_proj.bias' is missing"));
    /* qwen3 config over llama weights: q_norm missing; gemma3 over qwen3
     * weights: the feed-forward norms missing; gemma3 with q_norm of the
     * wrong width (a head_dim the weights do not have) */
    rlpi_model_config q3, g3;
    rlpi_weights w3;
    tiny_config(&q3, "qwen3", false);
    tiny_config(&g3, "gemma3", false);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &q3), RLP_OK);
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &c, &w, RLPI_ST_F32), RLP_OK);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &q3), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "'model.layers.0.self_attn.q_norm.weight' is missing"));
    assert_int_equal(tiny_weights(&q3, &w3, 5), RLP_OK);
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &q3, &w3, RLPI_ST_F32), RLP_OK);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &g3), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "'model.layers.0.pre_feedforward_layernorm.weight' is missing"));
    rlpi_weights_free(&w3);
    assert_int_equal(tiny_weights(&g3, &w3, 6), RLP_OK);
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &g3, &w3, RLPI_ST_F32), RLP_OK);
    rlpi_model_config g3w = g3;
    g3w.head_dim = 16;
    g3w.attn_scale = 0.25f;
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &g3w), RLP_OK);
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "'model.layers.0.self_attn.q_proj.weight' has shape [32, 32]"));
    rlpi_weights_free(&w3);
    assert_int_equal(rlpi_hf_dir_save(sub("bad", NULL), &c, &w, RLPI_ST_F32), RLP_OK);
    assert_int_equal(rlpi_hf_config_write(sub("bad", "config.json"), &q), RLP_OK);
    /* no weights file at all */
    unlink(sub("bad", "model.safetensors"));
    assert_int_equal(rlpi_hf_dir_load(sub("bad", NULL), &c2, &r), RLP_E_NOT_FOUND);
    /* saving weights that do not match the config is refused up front */
    assert_int_equal(rlpi_hf_dir_save(sub("bad2", NULL), &wide, &w, RLPI_ST_F32), RLP_E_FORMAT);
    rlpi_weights_free(&w);
}

/* Folders written by transformers' own save_pretrained (5.x: rope_parameters,
 * a tied head left out, a 6-shard index) load with the config values and
 * the exact fp32 bits of model.state_dict() (tests/reference/make_hf_fixtures.py). */
static void hf_written_folders_load(void **state)
{
    (void)state;
    const char *src = getenv("RLPOST_SOURCE_ROOT");
    if (!src)
        skip();
    char dir[512], path[600];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/hf/expected.json", src);
    json_error_t err;
    json_t *exp = json_load_file(path, 0, &err);
    if (!exp)
        fail_msg("%s: %s", path, err.text);
    const char *name;
    json_t *m;
    int n = 0;
    json_object_foreach(exp, name, m) {
        snprintf(dir, sizeof dir, "%s/tests/reference/fixtures/hf/%s", src, name);
        rlpi_model_config c;
        rlpi_weights w;
        if (rlpi_hf_dir_load(dir, &c, &w) != RLP_OK)
            fail_msg("%s: %s", name, rlp_error_last());
        json_t *jc = json_object_get(m, "config");
#define CI(key, field) assert_int_equal(c.field, json_integer_value(json_object_get(jc, key)))
        CI("hidden_size", dim);
        CI("num_hidden_layers", n_layers);
        CI("num_attention_heads", n_heads);
        CI("num_key_value_heads", n_kv_heads);
        CI("intermediate_size", ffn_dim);
        CI("vocab_size", vocab_size);
        CI("bos", bos_id);
        CI("eos", eos_id);
#undef CI
        assert_true(c.rope_theta == (float)json_number_value(json_object_get(jc, "rope_theta")));
        assert_true(c.rms_eps == (float)json_number_value(json_object_get(jc, "rms_norm_eps")));
        assert_int_equal(c.tie_embeddings, json_is_true(json_object_get(jc, "tie")));
        const char *rt = json_string_value(json_object_get(jc, "rope_type"));
        assert_int_equal(c.rope_scaling, !strcmp(rt, "llama3") ? RLPI_ROPE_SCALING_LLAMA3
                                                                : RLPI_ROPE_SCALING_NONE);
        json_t *ts = json_object_get(m, "tensors");
        assert_int_equal(w.n, json_object_size(ts));
        const char *tn;
        json_t *tv;
        json_object_foreach(ts, tn, tv) {
            const rlpi_tensor *t = rlpi_weights_find(&w, tn);
            if (!t)
                fail_msg("%s: %s missing", name, tn);
            assert_int_equal(t->n_elems, json_array_size(tv));
            const float *d = rlpi_tensor_data(&w, t);
            for (size_t i = 0; i < t->n_elems; i++)
                assert_int_equal(rlpi_f32_to_bits(d[i]), (uint32_t)json_integer_value(json_array_get(tv, i)));
        }
        if (c.tie_embeddings)
            assert_true(rlpi_weights_find(&w, "lm_head.weight")->alias_of >= 0);
        rlpi_weights_free(&w);
        n++;
    }
    json_decref(exp);
    assert_int_equal(n, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(save_load_round_trip),
        cmocka_unit_test(bf16_save_rounds_each_weight),
        cmocka_unit_test(sharded_folder_loads),
        cmocka_unit_test(missing_or_misshaped_tensors_fail),
        cmocka_unit_test(hf_written_folders_load),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
