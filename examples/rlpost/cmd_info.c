/* `rlpost info MODEL`: architecture, parameter count, stored dtypes (and,
 * with a tokenizer, its special tokens and chat template) as one JSON object. */
#include "commands.h"
#include "json_out.h"
#include "model_files.h"

#include "rlpost.h"

#include <stdio.h>

static void print_special(const rlp_tokenizer *t, const char *name, int role)
{
    int32_t id;
    const char *text;
    size_t len;
    if (rlp_tokenizer_special_id(&id, t, role) != RLP_OK || id < 0) {
        printf(", \"%s\": null", name);
        return;
    }
    printf(", \"%s\": {\"id\": %d", name, id);
    if (rlp_tokenizer_token_text(&text, &len, t, id) == RLP_OK) {
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < 255 ? len : 255), text);
        printf(", \"text\": ");
        json_print_string(stdout, buf);
    }
    printf("}");
}

/* tokenizer facts, or "tokenizer": null for a model file without one */
static void print_tokenizer_info(const char *model)
{
    rlp_tokenizer *t = load_model_tokenizer(model);
    if (!t) {
        printf(", \"tokenizer\": null");
        return;
    }
    size_t vocab = 0;
    rlp_tokenizer_vocab_size(&vocab, t);
    const char *tmpl = rlp_tokenizer_chat_template(t);
    printf(", \"tokenizer\": {\"vocab_size\": %zu, \"chat_template\": ", vocab);
    if (tmpl)
        json_print_string(stdout, tmpl);
    else
        printf("null");
    print_special(t, "bos", RLP_TOKEN_BOS);
    print_special(t, "eos", RLP_TOKEN_EOS);
    print_special(t, "pad", RLP_TOKEN_PAD);
    print_special(t, "unk", RLP_TOKEN_UNK);
    printf("}");
    rlp_tokenizer_free(t);
}

int cmd_info(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: rlpost info MODEL\n");
        return EXIT_USAGE;
    }
    rlp_model_info mi = {.version = RLP_MODEL_INFO_VERSION};
    if (rlp_model_inspect(&mi, argv[2]) != RLP_OK) {
        fprintf(stderr, "rlpost info: %s\n", rlp_error_last());
        return 1;
    }
    printf("{\"path\": ");
    json_print_string(stdout, argv[2]);
    printf(", \"format\": \"%s\", \"architecture\": \"%s\", \"n_params\": %llu, \"n_tensors\": %llu, "
           "\"dtypes\": \"%s\", \"n_layers\": %d, \"hidden_size\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, "
           "\"head_dim\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, \"context_length\": %d, "
           "\"rope_theta\": %g, \"rope_scaling\": \"%s\", \"rms_norm_eps\": %g, \"tie_word_embeddings\": %s, "
           "\"attention_bias\": %s",
           mi.format, mi.architecture, (unsigned long long)mi.n_params, (unsigned long long)mi.n_tensors, mi.dtypes,
           mi.n_layers, mi.dim, mi.n_heads, mi.n_kv_heads, mi.head_dim, mi.ffn_dim, mi.vocab_size,
           mi.context_length, (double)mi.rope_theta,
           mi.rope_scaling == 1 ? "llama3" : mi.rope_scaling == 2 ? "linear" : "none", (double)mi.rms_eps,
           mi.tie_embeddings ? "true" : "false", mi.attention_bias ? "true" : "false");
    printf(", \"activation\": \"%s\", \"qk_norm\": %s, \"post_norms\": %s, \"norm_offset\": %g, "
           "\"embed_scale\": %g, \"attn_scale\": %g, \"final_softcap\": %g, \"sliding_window\": %d, "
           "\"n_local_layers\": %d, \"rope_theta_local\": %g",
           mi.activation, mi.qk_norm ? "true" : "false", mi.post_norms ? "true" : "false", (double)mi.norm_offset,
           (double)mi.embed_scale, (double)mi.attn_scale, (double)mi.final_softcap, mi.sliding_window,
           mi.n_local_layers, (double)mi.rope_theta_local);
    /* the head: 0 = a language model; else a value/reward model's score head */
    printf(", \"score_labels\": %d, \"head\": \"%s\"", mi.score_labels,
           mi.score_labels == 0 ? "lm" : mi.score_per_token ? "token_classification" : "sequence_classification");
    print_tokenizer_info(argv[2]);
    printf("}\n");
    return 0;
}
