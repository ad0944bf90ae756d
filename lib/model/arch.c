/* The family table (see arch.h). Sources for each row: the families'
 * modeling code in Hugging Face transformers (modeling_llama.py,
 * modeling_qwen2.py, modeling_qwen3.py, modeling_mistral.py,
 * modeling_gemma3.py) and llama.cpp's converter and graph for the GGUF
 * conventions (convert_hf_to_gguf.py: q/k permutation for llama/mistral,
 * Gemma's norm + 1; llama-model.cpp: Gemma 3's sliding-window period 6 and
 * local RoPE base 10000). */
#include "model/arch.h"

#include <math.h>
#include <string.h>

#define POST_ATTN "post_attention_layernorm.weight"

static const rlpi_arch_desc ARCHS[] = {
    /* name      hf_class                 alt            perm   bias   act                qkn    post   off   emb    swa    per  theta_l  ctx
     *   tie    ffn_norm */
    {"llama", "LlamaForCausalLM", NULL, true, false, RLPI_ACT_SILU, false, false, 0.0f, false, false, 0, 0.0f, 2048,
     false, POST_ATTN},
    {"mistral", "MistralForCausalLM", NULL, true, false, RLPI_ACT_SILU, false, false, 0.0f, false, false, 0, 0.0f, 2048,
     false, POST_ATTN},
    {"qwen2", "Qwen2ForCausalLM", NULL, false, true, RLPI_ACT_SILU, false, false, 0.0f, false, false, 0, 0.0f, 32768,
     false, POST_ATTN},
    {"qwen3", "Qwen3ForCausalLM", NULL, false, false, RLPI_ACT_SILU, true, false, 0.0f, false, false, 0, 0.0f, 40960,
     false, POST_ATTN},
    {"gemma3", "Gemma3ForCausalLM", "gemma3_text", false, false, RLPI_ACT_GELU_TANH, true, true, 1.0f, true, true, 6,
     10000.0f, 131072, true, "pre_feedforward_layernorm.weight"},
};

const rlpi_arch_desc *rlpi_arch_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(name, ARCHS[i].name) || (ARCHS[i].hf_alt_type && !strcmp(name, ARCHS[i].hf_alt_type)))
            return &ARCHS[i];
    return NULL;
}

const rlpi_arch_desc *rlpi_arch_find_hf_class(const char *hf_class)
{
    if (!hf_class)
        return NULL;
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(hf_class, ARCHS[i].hf_class))
            return &ARCHS[i];
    return NULL;
}

const char *rlpi_arch_names(void) { return "llama, mistral, qwen2, qwen3, gemma3"; }

void rlpi_arch_apply(const rlpi_arch_desc *a, rlpi_model_config *c)
{
    strncpy(c->arch, a->name, sizeof c->arch - 1);
    c->arch[sizeof c->arch - 1] = '\0';
    c->activation = a->activation;
    c->qk_norm = a->qk_norm;
    c->post_norms = a->post_norms;
    c->norm_offset = a->norm_offset;
    if (a->qkv_bias)
        c->attention_bias = true;
    c->embed_scale = a->embed_scale_sqrt_dim && c->dim > 0 ? sqrtf((float)c->dim) : 0.0f;
    c->rope_theta_local = a->rope_theta_local;
}

void rlpi_arch_default_local_layers(const rlpi_arch_desc *a, rlpi_model_config *c)
{
    memset(c->local_layers, 0, sizeof c->local_layers);
    if (c->sliding_window <= 0 || !a->sliding_window || a->local_period < 1)
        return;
    for (int32_t i = 0; i < c->n_layers && i < RLPI_MAX_LAYERS; i++)
        c->local_layers[i] = (i + 1) % a->local_period != 0;
}
