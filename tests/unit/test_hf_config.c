/* HF config.json: real configs of the supported families parse to the
 * values their model cards state, rendering and re-parsing is lossless,
 * and broken or unsupported configs fail with the key or name in the
 * message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/error.h"
#include "model/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse(const char *s, rlpi_model_config *c)
{
    return rlpi_hf_config_parse(s, strlen(s), "config.json", c);
}

/* Llama-3.2-1B (as published, with a Llama 3.1-style eos list). */
static const char LLAMA32[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":128000,\"eos_token_id\":[128001,128008,128009],\"head_dim\":64,"
    "\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,"
    "\"intermediate_size\":8192,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
    "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":16,"
    "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,\"rope_scaling\":"
    "{\"factor\":32.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
    "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"rope_theta\":500000.0,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"vocab_size\":128256}";

static const char QWEN25[] =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,\"bos_token_id\":151643,"
    "\"eos_token_id\":151645,\"hidden_act\":\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,\"max_window_layers\":21,"
    "\"model_type\":\"qwen2\",\"num_attention_heads\":14,\"num_hidden_layers\":24,"
    "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,"
    "\"sliding_window\":32768,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

static const char MISTRAL[] =
    "{\"architectures\":[\"MistralForCausalLM\"],\"bos_token_id\":1,\"eos_token_id\":2,"
    "\"hidden_act\":\"silu\",\"hidden_size\":4096,\"initializer_range\":0.02,"
    "\"intermediate_size\":14336,\"max_position_embeddings\":32768,\"model_type\":\"mistral\","
    "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"num_key_value_heads\":8,"
    "\"rms_norm_eps\":1e-05,\"rope_theta\":10000.0,\"sliding_window\":4096,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\",\"vocab_size\":32000}";

/* SmolLM2-135M: integer rope_theta, rope_scaling null, no head_dim. */
static const char SMOLLM2[] =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":0,"
    "\"eos_token_id\":0,\"hidden_act\":\"silu\",\"hidden_size\":576,"
    "\"initializer_range\":0.041666666666666664,\"intermediate_size\":1536,"
    "\"max_position_embeddings\":8192,\"model_type\":\"llama\",\"num_attention_heads\":9,"
    "\"num_hidden_layers\":30,\"num_key_value_heads\":3,\"pretraining_tp\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_scaling\":null,\"rope_theta\":100000,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"vocab_size\":49152}";

static void real_configs_parse(void **state)
{
    (void)state;
    rlpi_model_config c;
    assert_int_equal(parse(LLAMA32, &c), RLP_OK);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.dim, 2048);
    assert_int_equal(c.n_layers, 16);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.ffn_dim, 8192);
    assert_int_equal(c.vocab_size, 128256);
    assert_int_equal(c.max_seq_len, 131072);
    assert_true(c.rope_theta == 500000.0f);
    assert_true(c.rms_eps == 1e-5f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_LLAMA3);
    assert_true(c.rope_factor == 32.0f && c.rope_low_freq_factor == 1.0f &&
                c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_original_max_pos, 8192);
    assert_true(c.tie_embeddings);
    assert_false(c.attention_bias);
    assert_int_equal(c.bos_id, 128000);
    assert_int_equal(c.eos_id, 128001); /* first of the list */

    assert_int_equal(parse(QWEN25, &c), RLP_OK);
    assert_string_equal(c.arch, "qwen2");
    assert_true(c.attention_bias); /* Qwen2 always has q/k/v bias */
    assert_true(c.tie_embeddings);
    assert_int_equal(c.head_dim, 64); /* 896 / 14 */
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.max_seq_len, 32768); /* use_sliding_window false: no cap */
    assert_true(c.rms_eps == 1e-6f && c.rope_theta == 1e6f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_NONE);

    assert_int_equal(parse(MISTRAL, &c), RLP_OK);
    assert_string_equal(c.arch, "mistral");
    assert_false(c.tie_embeddings);
    assert_false(c.attention_bias);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.max_seq_len, 4096); /* capped at the sliding window */

    assert_int_equal(parse(SMOLLM2, &c), RLP_OK);
    assert_int_equal(c.head_dim, 64); /* 576 / 9 */
    assert_true(c.rope_theta == 100000.0f);
    assert_int_equal(c.bos_id, 0);
    assert_int_equal(c.eos_id, 0);
}

static void defaults_and_variants(void **state)
{
    (void)state;
    rlpi_model_config c;
    /* model_type alone, old "type" key for linear scaling, kv heads default */
    assert_int_equal(parse("{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":128,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100,"
                           "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}",
                           &c),
                     RLP_OK);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_seq_len, 2048);
    assert_true(c.rms_eps == 1e-6f && c.rope_theta == 10000.0f);
    assert_false(c.tie_embeddings);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 2.0f);
    assert_int_equal(c.bos_id, -1);
    assert_int_equal(c.eos_id, -1);
    /* explicit head_dim that is not hidden/heads (Gemma-like sizes) */
    assert_int_equal(parse("{\"model_type\":\"mistral\",\"hidden_size\":60,\"intermediate_size\":8,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"head_dim\":32,"
                           "\"vocab_size\":10,\"sliding_window\":null}",
                           &c),
                     RLP_OK);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.max_seq_len, 2048);
    /* rope_type "default" is no scaling */
    assert_int_equal(parse("{\"model_type\":\"qwen2\",\"hidden_size\":64,\"intermediate_size\":8,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
                           "\"use_sliding_window\":true,\"sliding_window\":1024,"
                           "\"rope_scaling\":{\"rope_type\":\"default\"}}",
                           &c),
                     RLP_OK);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_NONE);
    assert_int_equal(c.max_seq_len, 1024);
    assert_int_equal(c.max_seq_len < 32768, 1);
}

/* dump -> parse gives back the same struct, for every arch and scaling. */
static void dump_round_trips(void **state)
{
    (void)state;
    const char *srcs[] = {LLAMA32, QWEN25, MISTRAL, SMOLLM2};
    for (int i = 0; i < 4; i++) {
        rlpi_model_config a, b;
        assert_int_equal(parse(srcs[i], &a), RLP_OK);
        char *s;
        assert_int_equal(rlpi_hf_config_dump(&a, &s), RLP_OK);
        if (parse(s, &b) != RLP_OK)
            fail_msg("%s\n%s", rlp_error_last(), s);
        assert_memory_equal(&a, &b, sizeof a);
        if (i == 0) {
            /* shortest decimal (jansson drops the exponent zero), not 9.99999975e-06 */
            assert_non_null(strstr(s, "\"rms_norm_eps\": 1e-5,"));
            assert_non_null(strstr(s, "\"rope_theta\": 500000.0"));
            assert_non_null(strstr(s, "\"rope_type\": \"llama3\""));
            assert_non_null(strstr(s, "\"architectures\": [\n    \"LlamaForCausalLM\""));
        }
        if (i == 1)
            assert_null(strstr(s, "attention_bias")); /* Qwen2Config has no such key */
        free(s);
    }
    rlpi_model_config c;
    assert_int_equal(parse(SMOLLM2, &c), RLP_OK);
    strcpy(c.arch, "gpt2");
    char *s;
    assert_int_equal(rlpi_hf_config_dump(&c, &s), RLP_E_UNSUPPORTED);
}

/* Keys of another family (Gemma 3's query_pre_attn_scalar, per-layer-kind
 * rope_parameters, layer_types, rope_local_base_freq) in a family without
 * them: ignored as transformers' config classes ignore them, and the config
 * still survives a dump (two fuzz_config_json finds: a local RoPE base and
 * an attention scale that the dump of a Llama config does not carry). */
static void foreign_family_keys_ignored(void **state)
{
    (void)state;
    const char *srcs[] = {LLAMA32, QWEN25, MISTRAL, SMOLLM2};
    const char *extra =
        ",\"query_pre_attn_scalar\":24,\"rope_local_base_freq\":20000.0,\"sliding_window_pattern\":2,"
        "\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
        "\"rope_parameters\":{\"full_attention\":{\"rope_theta\":1e6,\"rope_type\":\"linear\",\"factor\":8.0},"
        "\"sliding_attention\":{\"rope_theta\":2e4,\"rope_type\":\"default\"}}}";
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(srcs[i]);
        while (n > 0 && srcs[i][n - 1] != '}')
            n--;
        char *txt = malloc(n + strlen(extra) + 1);
        assert_non_null(txt);
        memcpy(txt, srcs[i], n - 1);
        strcpy(txt + n - 1, extra);
        rlpi_model_config a, b;
        if (parse(txt, &a) != RLP_OK)
            fail_msg("%d: %s", i, rlp_error_last());
        assert_true(a.attn_scale == 0.0f && a.rope_theta_local == 0.0f);
        assert_int_equal(rlpi_model_config_n_local_layers(&a), 0);
        assert_true(a.rope_theta == 1e6f && a.rope_factor == 8.0f); /* full_attention's RoPE is the model's */
        char *s;
        assert_int_equal(rlpi_hf_config_dump(&a, &s), RLP_OK);
        if (parse(s, &b) != RLP_OK)
            fail_msg("%s\n%s", rlp_error_last(), s);
        assert_memory_equal(&a, &b, sizeof a);
        free(s);
        free(txt);
    }
}

static void broken_and_unsupported_configs(void **state)
{
    (void)state;
    /* a valid base with one key replaced by the case's text */
    static const struct {
        const char *json;
        int code;
        const char *msg;
    } cases[] = {
        {"{\"architectures\":[\"GPT2LMHeadModel\"],\"hidden_size\":64}", RLP_E_UNSUPPORTED,
         "architecture 'GPT2LMHeadModel' is not supported"},
        {"{\"model_type\":\"gemma\"}", RLP_E_UNSUPPORTED, "model_type 'gemma' is not supported"},
        {"{\"hidden_size\":64}", RLP_E_FORMAT, "neither 'architectures' nor 'model_type'"},
        {"{\"architectures\":[]}", RLP_E_FORMAT, "non-empty array"},
        {"{\"architectures\":\"LlamaForCausalLM\"}", RLP_E_FORMAT, "non-empty array"},
        {"{\"model_type\":\"llama\",\"hidden_size\":\"576\"}", RLP_E_FORMAT,
         "'hidden_size' must be an integer"},
        {"{\"model_type\":\"llama\",\"hidden_size\":576.5}", RLP_E_FORMAT,
         "'hidden_size' must be an integer"},
        {"{\"model_type\":\"llama\",\"hidden_size\":1099511627776}", RLP_E_FORMAT,
         "'hidden_size' = 1099511627776 is out of range"},
        {"{\"model_type\":\"llama\",\"hidden_size\":-5}", RLP_E_FORMAT, "out of range"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4}",
         RLP_E_FORMAT, "required key 'vocab_size' is missing"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"rms_norm_eps\":\"x\"}",
         RLP_E_FORMAT, "'rms_norm_eps' must be a number"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"rope_theta\":1e300}",
         RLP_E_FORMAT, "'rope_theta' = 1e+300 does not fit a float"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"rope_theta\":1e400}",
         RLP_E_FORMAT, "invalid JSON"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"rms_norm_eps\":2}",
         RLP_E_FORMAT, "rms epsilon"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":5,\"vocab_size\":10}",
         RLP_E_FORMAT, "not a multiple of num_attention_heads 5"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
         "\"vocab_size\":10}",
         RLP_E_FORMAT, "not a valid grouping"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
         "\"tie_word_embeddings\":\"yes\"}",
         RLP_E_FORMAT, "'tie_word_embeddings' must be true or false"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
         "\"attention_bias\":true}",
         RLP_E_UNSUPPORTED, "attention_bias=true (o_proj bias) is not supported for LlamaForCausalLM"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"mlp_bias\":true}",
         RLP_E_UNSUPPORTED, "mlp_bias"},
        {"{\"model_type\":\"llama\",\"hidden_act\":\"gelu\"}", RLP_E_UNSUPPORTED,
         "hidden_act 'gelu' is not supported"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
         "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}",
         RLP_E_UNSUPPORTED, "rope_scaling type 'yarn' is not supported"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
         "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"high_freq_factor\":4.0,"
         "\"original_max_position_embeddings\":8192}}",
         RLP_E_FORMAT, "required key 'low_freq_factor' is missing"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,"
         "\"rope_scaling\":{\"factor\":8.0}}",
         RLP_E_FORMAT, "rope_scaling needs a string 'rope_type'"},
        {"{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":8,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"vocab_size\":10,\"eos_token_id\":-3}",
         RLP_E_FORMAT, "'eos_token_id' must be a non-negative integer id"},
        {"[1]", RLP_E_FORMAT, "config is not a JSON object"},
        {"{\"model_type\":\"llama\",", RLP_E_FORMAT, "invalid JSON"},
        {"", RLP_E_FORMAT, "invalid JSON"},
        {"{\"model_type\":\"llama\",\"model_type\":\"qwen2\"}", RLP_E_FORMAT, "duplicate"},
        {"{\"model_type\":\"ll\xc3\x28\"}", RLP_E_FORMAT, "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rlpi_model_config c;
        int rc = parse(cases[i].json, &c);
        if (rc != cases[i].code || !strstr(rlp_error_last(), cases[i].msg))
            fail_msg("case %zu: got %d '%s', want %d '%s'", i, rc, rlp_error_last(), cases[i].code,
                     cases[i].msg);
    }
    /* 10^5 nested arrays */
    size_t n = 100000;
    char *deep = malloc(n + 32);
    strcpy(deep, "{\"model_type\":");
    size_t p = strlen(deep);
    memset(deep + p, '[', n);
    deep[p + n] = '\0';
    rlpi_model_config c;
    assert_int_equal(rlpi_hf_config_parse(deep, p + n, "config.json", &c), RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "nested deeper"));
    free(deep);
}

/* transformers 5 writes rope_parameters (theta inside) and layer_types. */
static void transformers5_configs_parse(void **state)
{
    (void)state;
    rlpi_model_config c;
    assert_int_equal(parse("{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":16,"
                           "\"intermediate_size\":24,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                           "\"num_key_value_heads\":1,\"vocab_size\":32,\"rope_parameters\":{"
                           "\"factor\":8.0,\"high_freq_factor\":4.0,\"low_freq_factor\":1.0,"
                           "\"original_max_position_embeddings\":32,\"rope_theta\":500000.0,"
                           "\"rope_type\":\"llama3\"},\"dtype\":\"float32\"}",
                           &c),
                     RLP_OK);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_LLAMA3);
    assert_true(c.rope_factor == 8.0f);
    assert_int_equal(c.rope_original_max_pos, 32);
    /* rope_parameters wins over stale legacy keys */
    assert_int_equal(parse("{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
                           "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"vocab_size\":32,"
                           "\"rope_theta\":10000.0,\"rope_scaling\":{\"type\":\"linear\",\"factor\":4.0},"
                           "\"rope_parameters\":{\"rope_theta\":1000000.0,\"rope_type\":\"default\"},"
                           "\"sliding_window\":16,\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
                           &c),
                     RLP_OK);
    assert_true(c.rope_theta == 1e6f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_NONE);
    assert_int_equal(c.max_seq_len, 16); /* a sliding layer caps the context */
    assert_int_equal(parse("{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":32,"
                           "\"layer_types\":[\"chunked_attention\"]}",
                           &c),
                     RLP_E_UNSUPPORTED);
    assert_non_null(strstr(rlp_error_last(), "layer type 'chunked_attention'"));
    assert_int_equal(parse("{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,"
                           "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"vocab_size\":32,"
                           "\"rope_parameters\":[1]}",
                           &c),
                     RLP_E_FORMAT);
    assert_non_null(strstr(rlp_error_last(), "'rope_parameters' must be an object"));
    /* the writer emits both spellings with the same values */
    assert_int_equal(parse(LLAMA32, &c), RLP_OK);
    char *s;
    assert_int_equal(rlpi_hf_config_dump(&c, &s), RLP_OK);
    assert_non_null(strstr(s, "\"rope_parameters\": {\n    \"rope_theta\": 500000.0,\n    \"rope_type\": "
                              "\"llama3\""));
    free(s);
}

/* Qwen3-0.6B as published (tied, head_dim 128 != 1024/16, no bias). */
static const char QWEN3[] =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"head_dim\":128,\"hidden_act\":\"silu\","
    "\"hidden_size\":1024,\"initializer_range\":0.02,\"intermediate_size\":3072,"
    "\"max_position_embeddings\":40960,\"max_window_layers\":28,\"model_type\":\"qwen3\","
    "\"num_attention_heads\":16,\"num_hidden_layers\":28,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-06,"
    "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":null,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

#define G3_LT5 "\"sliding_attention\",\"sliding_attention\",\"sliding_attention\",\"sliding_attention\"," \
               "\"sliding_attention\",\"full_attention\","
/* google/gemma-3-270m's config.json (transformers 4.5x: layer_types, the
 * pattern, rope_local_base_freq; no tie key: Gemma 3 ties by default),
 * with 19 layers instead of 18 so that the list is not a whole number of
 * periods. */
static const char GEMMA3_270M[] =
    "{\"_sliding_window_pattern\":6,\"architectures\":[\"Gemma3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"eos_token_id\":1,"
    "\"final_logit_softcapping\":null,\"head_dim\":256,\"hidden_activation\":\"gelu_pytorch_tanh\","
    "\"hidden_size\":640,\"initializer_range\":0.02,\"intermediate_size\":2048,\"layer_types\":["
    G3_LT5 G3_LT5 G3_LT5 "\"sliding_attention\"],\"max_position_embeddings\":32768,\"model_type\":\"gemma3_text\","
    "\"num_attention_heads\":4,\"num_hidden_layers\":19,\"num_key_value_heads\":1,\"pad_token_id\":0,"
    "\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-06,\"rope_local_base_freq\":10000.0,"
    "\"rope_scaling\":null,\"rope_theta\":1000000.0,\"sliding_window\":512,\"torch_dtype\":\"bfloat16\","
    "\"use_bidirectional_attention\":false,\"use_cache\":true,\"vocab_size\":262144}";

/* Gemma3TextConfig as transformers 5.25 writes it (nested rope_parameters,
 * no rope_theta at the top, no architectures), with linear scaling on the
 * global layers as Gemma 3 4B+ has, a soft-cap and an odd layer count. */
static const char GEMMA3_V5[] =
    "{\"_sliding_window_pattern\":6,\"attention_bias\":false,\"attn_logit_softcapping\":null,"
    "\"bos_token_id\":2,\"eos_token_id\":[1,106],\"final_logit_softcapping\":30.0,\"head_dim\":16,"
    "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":32,\"intermediate_size\":64,"
    "\"layer_types\":[" G3_LT5 "\"sliding_attention\",\"sliding_attention\"],"
    "\"max_position_embeddings\":131072,\"model_type\":\"gemma3_text\",\"num_attention_heads\":2,"
    "\"num_hidden_layers\":8,\"num_key_value_heads\":1,\"query_pre_attn_scalar\":24,\"rms_norm_eps\":1e-06,"
    "\"rope_parameters\":{\"full_attention\":{\"factor\":8.0,\"rope_theta\":1000000.0,\"rope_type\":\"linear\"},"
    "\"sliding_attention\":{\"rope_theta\":20000.0,\"rope_type\":\"default\"}},\"sliding_window\":4096,"
    "\"tie_word_embeddings\":true,\"use_bidirectional_attention\":false,\"vocab_size\":64}";

/* A Gemma 3 base (4 layers) for the hostile cases: `%s` takes extra keys. */
#define G3_BASE(extra)                                                                                     \
    "{\"model_type\":\"gemma3_text\",\"hidden_size\":32,\"intermediate_size\":64,\"num_hidden_layers\":4," \
    "\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":16,\"vocab_size\":64" extra "}"

static void qwen3_and_gemma3_configs(void **state)
{
    (void)state;
    rlpi_model_config c;
    if (parse(QWEN3, &c) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_string_equal(c.arch, "qwen3");
    assert_int_equal(c.head_dim, 128);
    assert_true(c.qk_norm && !c.post_norms && !c.attention_bias && c.tie_embeddings);
    assert_int_equal(c.activation, RLPI_ACT_SILU);
    assert_int_equal(c.max_seq_len, 40960); /* use_sliding_window false: no cap */
    assert_true(c.norm_offset == 0.0f && c.embed_scale == 0.0f && c.attn_scale == 0.0f);
    assert_int_equal(c.sliding_window, 0);

    if (parse(GEMMA3_270M, &c) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_string_equal(c.arch, "gemma3");
    assert_int_equal(c.head_dim, 256);
    assert_int_equal(c.activation, RLPI_ACT_GELU_TANH);
    assert_true(c.qk_norm && c.post_norms && c.tie_embeddings && !c.attention_bias);
    assert_true(c.norm_offset == 1.0f);
    assert_true(c.embed_scale == sqrtf(640.0f));
    assert_true(c.attn_scale == 0.0625f);
    assert_true(c.final_softcap == 0.0f);
    assert_int_equal(c.sliding_window, 512);
    assert_int_equal(c.max_seq_len, 32768); /* the window is per layer, not a cap */
    assert_true(c.rope_theta == 1e6f && c.rope_theta_local == 1e4f);
    assert_int_equal(rlpi_model_config_n_local_layers(&c), 16);
    for (int i = 0; i < 19; i++)
        assert_int_equal(c.local_layers[i], (i + 1) % 6 != 0);
    assert_int_equal(c.bos_id, 2);
    assert_int_equal(c.eos_id, 1);

    if (parse(GEMMA3_V5, &c) != RLP_OK)
        fail_msg("%s", rlp_error_last());
    assert_true(c.rope_theta == 1e6f && c.rope_theta_local == 2e4f);
    assert_int_equal(c.rope_scaling, RLPI_ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 8.0f);
    assert_true(c.final_softcap == 30.0f);
    assert_true(c.attn_scale == 1.0f / sqrtf(24.0f));
    assert_int_equal(rlpi_model_config_n_local_layers(&c), 7);
    assert_int_equal(c.local_layers[5], 0);
    assert_int_equal(c.eos_id, 1);
    /* older files: only the pattern (layer 6k+5 global); none: the row's 6 */
    assert_int_equal(parse(G3_BASE(",\"sliding_window\":8,\"sliding_window_pattern\":2"), &c), RLP_OK);
    assert_true(c.local_layers[0] && !c.local_layers[1] && c.local_layers[2] && !c.local_layers[3]);
    assert_int_equal(parse(G3_BASE(",\"sliding_window\":8"), &c), RLP_OK);
    assert_int_equal(rlpi_model_config_n_local_layers(&c), 4);
    assert_true(c.rope_theta_local == 10000.0f && c.attn_scale == 1.0f / 16.0f /* HF default query_pre_attn_scalar 256 */ && c.tie_embeddings);

    /* dump -> parse is lossless for both families */
    const char *srcs[] = {QWEN3, GEMMA3_270M, GEMMA3_V5};
    for (int i = 0; i < 3; i++) {
        rlpi_model_config a, b;
        assert_int_equal(parse(srcs[i], &a), RLP_OK);
        char *s;
        assert_int_equal(rlpi_hf_config_dump(&a, &s), RLP_OK);
        if (parse(s, &b) != RLP_OK)
            fail_msg("%s\n%s", rlp_error_last(), s);
        assert_memory_equal(&a, &b, sizeof a);
        if (i == 1) {
            assert_non_null(strstr(s, "\"model_type\": \"gemma3_text\""));
            assert_non_null(strstr(s, "\"hidden_activation\": \"gelu_pytorch_tanh\""));
            assert_non_null(strstr(s, "\"query_pre_attn_scalar\": 256,"));
        }
        free(s);
    }

    static const struct {
        const char *json;
        int code;
        const char *msg;
    } cases[] = {
        {G3_BASE(""), RLP_E_FORMAT, "required key 'sliding_window' is missing"},
        {G3_BASE(",\"sliding_window\":-1"), RLP_E_FORMAT, "'sliding_window' = -1 is out of range"},
        {G3_BASE(",\"sliding_window\":16777217"), RLP_E_FORMAT, "'sliding_window' = 16777217 is out of range"},
        {G3_BASE(",\"sliding_window\":\"512\""), RLP_E_FORMAT, "'sliding_window' must be an integer"},
        {G3_BASE(",\"sliding_window\":8,\"layer_types\":[\"sliding_attention\",\"full_attention\"]"), RLP_E_FORMAT,
         "'layer_types' has 2 entries, num_hidden_layers is 4"},
        {G3_BASE(",\"sliding_window\":8,\"sliding_window_pattern\":2,\"layer_types\":[\"sliding_attention\","
                 "\"full_attention\",\"sliding_attention\",\"sliding_attention\"]"),
         RLP_E_FORMAT, "'layer_types'[3] is sliding_attention but 'sliding_window_pattern' = 2 makes it full_attention"},
        {G3_BASE(",\"sliding_window\":8,\"sliding_window_pattern\":0"), RLP_E_FORMAT,
         "'sliding_window_pattern' = 0 is out of range"},
        {G3_BASE(",\"sliding_window\":8,\"layer_types\":[\"sliding_attention\",\"full_attention\","
                 "\"chunked_attention\",\"full_attention\"]"),
         RLP_E_UNSUPPORTED, "layer type 'chunked_attention'"},
        {G3_BASE(",\"sliding_window\":8,\"attn_logit_softcapping\":50.0"), RLP_E_UNSUPPORTED,
         "attn_logit_softcapping"},
        {G3_BASE(",\"sliding_window\":8,\"final_logit_softcapping\":-3"), RLP_E_FORMAT,
         "'final_logit_softcapping' = -3 must be positive"},
        {G3_BASE(",\"sliding_window\":8,\"query_pre_attn_scalar\":0"), RLP_E_FORMAT,
         "'query_pre_attn_scalar' = 0 must be positive"},
        {G3_BASE(",\"sliding_window\":8,\"hidden_activation\":\"silu\""), RLP_E_UNSUPPORTED,
         "hidden_activation 'silu' is not supported for Gemma3ForCausalLM"},
        {G3_BASE(",\"sliding_window\":8,\"use_bidirectional_attention\":true"), RLP_E_UNSUPPORTED,
         "use_bidirectional_attention"},
        {G3_BASE(",\"sliding_window\":8,\"rope_parameters\":{\"full_attention\":{\"rope_theta\":1e6},"
                 "\"sliding_attention\":{\"rope_theta\":1e4,\"rope_type\":\"linear\",\"factor\":2}}"),
         RLP_E_UNSUPPORTED, "RoPE scaling on local (sliding-window) layers is not supported"},
        {G3_BASE(",\"sliding_window\":8,\"rope_parameters\":{\"full_attention\":7}"), RLP_E_FORMAT,
         "'rope_parameters.full_attention' must be an object"},
        {"{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":10,\"attention_bias\":true}",
         RLP_E_UNSUPPORTED, "attention_bias=true (o_proj bias) is not supported for Qwen3ForCausalLM"},
        {"{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":10,\"head_dim\":7}",
         RLP_E_FORMAT, "head_dim 7 must be even"},
        {"{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,"
         "\"num_attention_heads\":4,\"vocab_size\":10,\"hidden_act\":\"gelu_pytorch_tanh\"}",
         RLP_E_UNSUPPORTED, "hidden_act 'gelu_pytorch_tanh' is not supported for Qwen3ForCausalLM"},
        {"{\"model_type\":\"gemma3\"}", RLP_E_FORMAT, "required key 'hidden_size' is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse(cases[i].json, &c);
        if (rc != cases[i].code || !strstr(rlp_error_last(), cases[i].msg))
            fail_msg("case %zu: got %d '%s', want %d '%s'", i, rc, rlp_error_last(), cases[i].code,
                     cases[i].msg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_configs_parse),
        cmocka_unit_test(defaults_and_variants),
        cmocka_unit_test(dump_round_trips),
        cmocka_unit_test(foreign_family_keys_ignored),
        cmocka_unit_test(transformers5_configs_parse),
        cmocka_unit_test(broken_and_unsupported_configs),
        cmocka_unit_test(qwen3_and_gemma3_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
