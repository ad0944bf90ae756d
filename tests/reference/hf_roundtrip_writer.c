/* Writes tiny models with our HF folder writer for check_hf_roundtrip.py:
 * Llama (untied, GQA, llama3 RoPE scaling), tied Llama, Qwen2 (q/k/v bias,
 * tied), Mistral, Llama in BF16 and F16, and (if given) stories260K.bin
 * converted from llama2.c. Next to each folder's files it writes raw.bin
 * (every tensor's fp32 values, aliases resolved) and raw.json (name, shape,
 * element offset), an independent copy for the bit-exact comparison.
 * Usage: hf_roundtrip_writer OUTDIR [stories260K.bin] */
#include "model/hf_dir.h"
#include "model/llama2c.h"

#include "../unit/tiny_model.h"

#include <rlpost.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int dump_raw(const char *dir, const rlpi_weights *w)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/raw.bin", dir);
    FILE *b = fopen(p, "wb");
    snprintf(p, sizeof p, "%s/raw.json", dir);
    FILE *j = fopen(p, "w");
    if (!b || !j)
        return -1;
    fprintf(j, "[");
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const rlpi_tensor *t = &w->tensors[i];
        fprintf(j, "%s\n {\"name\": \"%s\", \"offset\": %zu, \"shape\": [", i ? "," : "", t->name,
                off);
        for (int d = 0; d < t->n_dims; d++)
            fprintf(j, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        fprintf(j, "]}");
        fwrite(rlpi_tensor_data(w, t), sizeof(float), t->n_elems, b);
        off += t->n_elems;
    }
    fprintf(j, "\n]\n");
    fclose(b);
    fclose(j);
    return 0;
}

static int save(const char *out, const char *name, const rlpi_model_config *c,
                const rlpi_weights *w, rlpi_st_dtype dt)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", out, name);
    int rc = rlpi_hf_dir_save(dir, c, w, dt);
    if (rc) {
        fprintf(stderr, "%s: %s\n", name, rlp_error_last());
        return rc;
    }
    return dump_raw(dir, w);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUTDIR [stories260K.bin]\n", argv[0]);
        return 2;
    }
    mkdir(argv[1], 0755);
    struct {
        const char *name, *arch;
        bool tied;
        rlpi_st_dtype dt;
    } models[] = {
        {"llama", "llama", false, RLPI_ST_F32},      {"llama_tied", "llama", true, RLPI_ST_F32},
        {"qwen2", "qwen2", true, RLPI_ST_F32},       {"qwen2_untied", "qwen2", false, RLPI_ST_F32},
        {"mistral", "mistral", false, RLPI_ST_F32},  {"llama_bf16", "llama", false, RLPI_ST_BF16},
        {"llama_f16", "llama", true, RLPI_ST_F16},   {"qwen3", "qwen3", false, RLPI_ST_F32},
        {"qwen3_tied", "qwen3", true, RLPI_ST_F32},  {"gemma3", "gemma3", true, RLPI_ST_F32},
        {"gemma3_untied", "gemma3", false, RLPI_ST_F32}, {"gemma3_linear", "gemma3", true, RLPI_ST_F32},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        rlpi_model_config c;
        rlpi_weights w;
        tiny_config(&c, models[i].arch, models[i].tied);
        if (i == 0) { /* non-default theta so a misread key shows */
            c.rope_theta = 500000.0f;
            c.rope_scaling = RLPI_ROPE_SCALING_LLAMA3;
            c.rope_factor = 8.0f;
            c.rope_low_freq_factor = 1.0f;
            c.rope_high_freq_factor = 4.0f;
            c.rope_original_max_pos = 64;
        }
        if (c.rope_theta_local > 0) /* Gemma 3: global and local bases differ, as in the real model */
            c.rope_theta = 1000000.0f;
        if (!strcmp(models[i].name, "gemma3_linear")) { /* Gemma 3 4B+: linear scaling on global layers */
            c.rope_scaling = RLPI_ROPE_SCALING_LINEAR;
            c.rope_factor = 8.0f;
            c.final_softcap = 30.0f;
        }
        if (tiny_weights(&c, &w, 100 + i) || save(argv[1], models[i].name, &c, &w, models[i].dt))
            return 1;
        rlpi_weights_free(&w);
    }
    if (argc > 2) {
        rlpi_model_config c;
        rlpi_weights w;
        rlpi_weights_init(&w);
        if (rlpi_llama2c_load(argv[2], &c, &w) || save(argv[1], "stories260K", &c, &w, RLPI_ST_F32)) {
            fprintf(stderr, "stories260K: %s\n", rlp_error_last());
            return 1;
        }
        rlpi_weights_free(&w);
    }
    return 0;
}
