/* `rlpost export MODEL OUT.gguf [--type T] [--embed-type T] [--name N]
 * [--tokenizer FILE.gguf]`: any model rlpost loads (GGUF, HF folder — e.g.
 * a checkpoint of `rlpost train` — or llama2.c) written as one GGUF file
 * that llama.cpp and Ollama load (rlp_policy_save_gguf). */
#include "commands.h"

#include "rlpost.h"

#include <stdio.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: rlpost export MODEL OUT.gguf [--type f32|f16|bf16|q8_0|q4_0|q4_k] [--embed-type T] "
                    "[--name NAME] [--tokenizer FILE.gguf]\n");
    return EXIT_USAGE;
}

int cmd_export(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    rlp_gguf_save_options o;
    rlp_gguf_save_options_init(&o, RLP_GGUF_SAVE_OPTIONS_VERSION);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if ((!strcmp(a, "--type") || !strcmp(a, "--embed-type")) && has_value) {
            int32_t t;
            if (rlp_gguf_type_from_name(&t, argv[++i]) != RLP_OK) {
                fprintf(stderr, "rlpost export: %s: %s\n", a, rlp_error_last());
                return EXIT_USAGE;
            }
            *(!strcmp(a, "--type") ? &o.type : &o.embed_type) = t;
        } else if (!strcmp(a, "--name") && has_value) {
            o.name = argv[++i];
        } else if (!strcmp(a, "--tokenizer") && has_value) {
            o.tokenizer_gguf = argv[++i];
        } else if (a[0] == '-') {
            return usage();
        } else if (!model) {
            model = a;
        } else if (!out) {
            out = a;
        } else {
            return usage();
        }
    }
    if (!model || !out)
        return usage();
    rlp_context *ctx = NULL;
    rlp_policy *p = NULL;
    rlp_policy_options po;
    rlp_policy_options_init(&po, RLP_POLICY_OPTIONS_VERSION);
    po.trainable = 0;
    int rc = rlp_context_create(&ctx, NULL);
    if (rc == RLP_OK)
        rc = rlp_policy_load(&p, ctx, model, &po);
    if (rc == RLP_OK)
        rc = rlp_policy_save_gguf(p, out, &o);
    if (rc != RLP_OK)
        fprintf(stderr, "rlpost export: %s\n", rlp_error_last());
    else
        printf("{\"model\": \"%s\", \"output\": \"%s\", \"type\": %d}\n", model, out, (int)o.type);
    rlp_policy_free(p);
    rlp_context_free(ctx);
    return rc == RLP_OK ? 0 : 1;
}
