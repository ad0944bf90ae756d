/* LoRA adapters on disk in Hugging Face PEFT's layout: a folder with
 * adapter_model.safetensors (tensors named
 * "base_model.model.model.layers.L.<block>.<proj>.lora_{A,B}.weight", as
 * PeftModel.save_pretrained writes them) and adapter_config.json (a
 * LoraConfig). What PEFT can express but this library cannot run (DoRA,
 * trained biases, per-module rank/alpha patterns, modules_to_save,
 * fan_in_fan_out, a layer subset) is refused by name rather than dropped. */
#include "model/lora.h"
#include "model/qbase.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "model/safetensors.h"
#include "model/transformer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int rlpi_lora_save_peft(rlpi_transformer *tf, const char *dir, const char *base_model)
{
    const rlpi_lora_config *c = rlpi_transformer_lora_config(tf);
    if (!c)
        return rlpi_error_set(RLP_E_STATE, "lora save: the model has no adapters");
    if (mkdir(dir, 0777) && errno != EEXIST)
        return rlpi_error_set(RLP_E_IO, "lora save: cannot create '%s': %s", dir, strerror(errno));
    rlpi_weights w;
    rlpi_weights_init(&w);
    int rc = RLP_OK;
    for (size_t i = 0; !rc && i < rlpi_transformer_n_trainable_tensors(tf); i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, i);
        rlpi_tensor *t;
        int64_t shape[2] = {in->shape[0], in->shape[1]};
        if (!(rc = rlpi_weights_add(&w, in->name, 2, shape, &t)))
            rc = rlpi_buffer_download(rlpi_transformer_trainable_params(tf), in->offset * 4, t->data, in->n_elems * 4);
    }
    char path[PATH_MAX];
    rlpi_st_metadata meta;
    rlpi_st_metadata_init(&meta);
    if (!rc)
        rc = rlpi_st_metadata_set(&meta, "format", "pt"); /* what save_pretrained writes */
    uint32_t crc = 0;
    if (!rc)
        rc = rlpi_lora_base_fingerprint(tf, &crc);
    char num[16];
    snprintf(num, sizeof num, "%08x", crc);
    if (!rc) /* the base these adapters belong to: checked by rlpi_lora_load_peft */
        rc = rlpi_st_metadata_set(&meta, "rlpost.base_crc32", num);
    if (!rc) /* and how it was held: an fp32 reader checks it quantized the same way */
        rc = rlpi_st_metadata_set(&meta, "rlpost.base_dtype", rlpi_qbase_dtype_name(rlpi_transformer_base_type(tf)));
    if (!rc) {
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        rlpi_st_write_opts wo = {.dtype = RLPI_ST_F32, .meta = &meta, .skip_aliases = true};
        rc = rlpi_safetensors_write(path, &w, &wo);
    }
    rlpi_st_metadata_free(&meta);
    rlpi_weights_free(&w);
    if (rc)
        return rc;
    json_t *targets = json_array();
    for (int t = 0; t < RLPI_LORA_N_TARGETS; t++)
        if (c->targets >> t & 1u)
            json_array_append_new(targets, json_string(rlpi_lora_target_name(t)));
    json_t *cfg = json_pack("{s:s, s:s, s:i, s:f, s:b, s:o, s:f, s:s, s:b, s:b, s:b, s:n, s:n, s:s?}", "peft_type",
                            "LORA", "task_type", "CAUSAL_LM", "r", (int)c->rank, "lora_alpha", (double)c->alpha,
                            "use_rslora", (int)c->rslora, "target_modules", targets, "lora_dropout", 0.0, "bias",
                            "none", "fan_in_fan_out", 0, "inference_mode", 1, "init_lora_weights", 1, "modules_to_save",
                            "layers_to_transform", "base_model_name_or_path", base_model);
    char *text = cfg ? json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(cfg);
    if (!text)
        return rlpi_error_set(RLP_E_NOMEM, "lora save: out of memory");
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    rc = rlpi_atomic_write_file(path, text, strlen(text));
    free(text);
    return rc;
}

/* The LoraConfig fields this library runs; everything else must be off. */
static int read_config(const char *path, rlpi_lora_config *out)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        return rlpi_error_set(errno == ENOENT ? RLP_E_NOT_FOUND : RLP_E_FORMAT, "%s: %s", path, je.text);
    int rc = RLP_OK;
    const char *type = json_string_value(json_object_get(j, "peft_type"));
    json_t *r = json_object_get(j, "r"), *alpha = json_object_get(j, "lora_alpha");
    json_t *tm = json_object_get(j, "target_modules");
    memset(out, 0, sizeof *out);
    if (!json_is_object(j)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: not a JSON object", path);
    } else if (!type || strcmp(type, "LORA")) {
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: peft_type '%s' (only LORA adapters are supported)", path,
                            type ? type : "(missing)");
    } else if (!json_is_integer(r) || !json_is_number(alpha)) {
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: r and lora_alpha must be numbers", path);
    } else {
        out->rank = (int32_t)(json_integer_value(r) > INT32_MAX ? 0 : json_integer_value(r));
        out->alpha = (float)json_number_value(alpha);
        out->rslora = json_is_true(json_object_get(j, "use_rslora"));
        if (json_is_string(tm)) {
            rc = rlpi_lora_parse_targets(json_string_value(tm), &out->targets);
        } else if (json_is_array(tm) && json_array_size(tm) > 0) {
            size_t i;
            json_t *v;
            json_array_foreach(tm, i, v)
            {
                uint32_t m = 0;
                if (!json_is_string(v))
                    rc = rlpi_error_set(RLP_E_FORMAT, "%s: target_modules holds a non-string", path);
                else
                    rc = rlpi_lora_parse_targets(json_string_value(v), &m);
                if (rc)
                    break;
                out->targets |= m;
            }
        } else {
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: target_modules must be a non-empty list of projection names", path);
        }
        if (rc)
            rc = rlpi_error_wrap("%s", path);
    }
    /* what would change the function computed, refused by name */
    static const char *const must_be_off[] = {
        "use_dora",     "fan_in_fan_out", "modules_to_save",  "layers_to_transform",
        "rank_pattern", "alpha_pattern",  "layer_replication"};
    for (size_t i = 0; !rc && i < sizeof must_be_off / sizeof must_be_off[0]; i++) {
        json_t *v = json_object_get(j, must_be_off[i]);
        bool off = !v || json_is_null(v) || json_is_false(v) || (json_is_object(v) && json_object_size(v) == 0) ||
            (json_is_array(v) && json_array_size(v) == 0);
        if (!off)
            rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: '%s' is set; this library runs plain LoRA only", path,
                                must_be_off[i]);
    }
    const char *bias = json_string_value(json_object_get(j, "bias"));
    if (!rc && bias && strcmp(bias, "none"))
        rc = rlpi_error_set(RLP_E_UNSUPPORTED, "%s: bias '%s' (trained biases) is not supported", path, bias);
    json_decref(j);
    return rc;
}

int rlpi_lora_load_peft(rlpi_transformer *tf, const char *dir)
{
    char path[PATH_MAX];
    rlpi_lora_config c;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    int rc = read_config(path, &c);
    if (rc)
        return rc;
    const rlpi_lora_config *have = rlpi_transformer_lora_config(tf);
    if (have && (have->rank != c.rank || have->targets != c.targets || rlpi_lora_scale(have) != rlpi_lora_scale(&c)))
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "%s: rank %d, scale %g, targets 0x%x differ from the attached adapters' (rank %d, "
                              "scale %g, targets 0x%x)",
                              path, c.rank, (double)rlpi_lora_scale(&c), c.targets, have->rank,
                              (double)rlpi_lora_scale(have), have->targets);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    rlpi_weights w;
    rlpi_weights_init(&w);
    rlpi_st_metadata meta;
    rlpi_st_metadata_init(&meta);
    rc = rlpi_safetensors_read(path, &w, &meta);
    if (!rc)
        rc = rlpi_weights_check_finite(&w, path);
    const char *want = rc ? NULL : rlpi_st_metadata_get(&meta, "rlpost.base_crc32");
    const char *held = rc ? NULL : rlpi_st_metadata_get(&meta, "rlpost.base_dtype");
    uint32_t crc = 0, held_type = RLPI_GGML_F32;
    if (want && held && rlpi_qbase_parse_dtype(held, &held_type) != RLP_OK)
        rc = rlpi_error_set(RLP_E_FORMAT, "%s: metadata rlpost.base_dtype '%s' is not a base type", path, held);
    /* trained over a quantized base: this model's base, quantized the same
     * way, is the one they were trained on (the usual QLoRA deployment:
     * adapters from a quantized base applied to the full-precision one) */
    if (want && !rc)
        rc = held_type != RLPI_GGML_F32 ? rlpi_qbase_fingerprint_as(tf, held_type, &crc)
                                        : rlpi_lora_base_fingerprint(tf, &crc);
    if (want && !rc) {
        char num[16];
        snprintf(num, sizeof num, "%08x", crc);
        if (strcmp(num, want))
            rc = rlpi_error_set(RLP_E_INVALID_ARG,
                                "%s: the adapters were trained on another base (its CRC-32 %s%s%s, this model's %s): "
                                "start from the trainer's base model",
                                path, want, held_type != RLPI_GGML_F32 ? " held as " : "",
                                held_type != RLPI_GGML_F32 ? held : "", num);
    }
    rlpi_st_metadata_free(&meta);
    /* attach (validating the config against this model) only once the file reads */
    bool attached = false;
    if (!rc && !have) {
        rc = rlpi_transformer_attach_lora(tf, &c, 0);
        attached = rc == RLP_OK;
    }
    size_t n = rc ? 0 : rlpi_transformer_n_trainable_tensors(tf);
    for (size_t i = 0; !rc && i < n; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, i);
        const rlpi_tensor *t = rlpi_weights_find(&w, in->name);
        if (!t || t->n_dims != 2 || t->shape[0] != in->shape[0] || t->shape[1] != in->shape[1])
            rc = rlpi_error_set(RLP_E_FORMAT, "%s: tensor '%s' %s (expected (%lld, %lld))", path, in->name,
                                t ? "has the wrong shape" : "is missing", (long long)in->shape[0],
                                (long long)in->shape[1]);
    }
    if (!rc && w.n != n)
        rc = rlpi_error_set(RLP_E_FORMAT,
                            "%s: %zu tensors where this model's adapters have %zu (adapters on other "
                            "modules or layers?)",
                            path, w.n, n);
    for (size_t i = 0; !rc && i < n; i++) {
        const rlpi_param_info *in = rlpi_transformer_trainable_tensor(tf, i);
        rc = rlpi_buffer_upload(rlpi_transformer_trainable_params(tf), in->offset * 4,
                                rlpi_tensor_data(&w, rlpi_weights_find(&w, in->name)), in->n_elems * 4);
    }
    if (rc && attached)
        rlpi_transformer_detach_lora(tf); /* as it was */
    rlpi_weights_free(&w);
    return rc;
}
