/* `rlpost logprobs MODEL (--text T | --chat T | --tokens 1,2,3) [--temperature x] [--threads n]`:
 * the logprob of every token given the ones before it, and the entropy of
 * the model's distribution there, as JSON on stdout. */
#include "commands.h"
#include "json_out.h"
#include "model_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t *parse_ids(const char *s, size_t *n)
{
    size_t cap = 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    *n = 0;
    while (ids && *s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(ids);
            return NULL;
        }
        if (*n == cap) {
            int32_t *g = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!g) {
                free(ids);
                return NULL;
            }
            ids = g;
        }
        ids[(*n)++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return ids;
}

int cmd_logprobs(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *chat = NULL, *tokens = NULL;
    float temperature = 1.0f;
    int threads = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--text") && i + 1 < argc)
            text = argv[++i];
        else if (!strcmp(argv[i], "--chat") && i + 1 < argc)
            chat = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = argv[++i];
        else if (!strcmp(argv[i], "--temperature") && i + 1 < argc)
            temperature = strtof(argv[++i], NULL);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!model && argv[i][0] != '-')
            model = argv[i];
        else {
            model = NULL;
            break;
        }
    }
    if (!model || (!!text + !!chat + !!tokens) != 1 || !(temperature > 0)) {
        fprintf(stderr, "usage: rlpost logprobs MODEL (--text T | --chat T | --tokens 1,2,3) "
                        "[--temperature x] [--threads n]\n");
        return EXIT_USAGE;
    }
    rlp_context_options co = RLP_CONTEXT_OPTIONS_INIT;
    co.n_threads = threads;
    rlp_context *ctx = NULL;
    rlp_policy *p = NULL;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, &co) != RLP_OK || rlp_policy_load(&p, ctx, model, &po) != RLP_OK) {
        fprintf(stderr, "rlpost logprobs: %s\n", rlp_error_last());
        rlp_context_free(ctx);
        return 1;
    }
    const rlp_tokenizer *tok = rlp_policy_tokenizer(p);
    size_t n = 0;
    int32_t *ids = NULL;
    if (tokens)
        ids = parse_ids(tokens, &n);
    else if (!tok)
        fprintf(stderr, "rlpost logprobs: %s (use --tokens)\n", rlp_error_last());
    else
        ids = text ? encode_text(tok, text, RLP_ENCODE_ADD_BOS, &n) : encode_chat(tok, chat, &n);
    int status = 1;
    float *lp = malloc((n ? n : 1) * sizeof *lp), *ent = malloc((n ? n : 1) * sizeof *ent);
    size_t got = 0;
    rlp_sequence seq = {ids, (uint32_t)n, 0};
    if (!ids || n == 0)
        fprintf(stderr, "rlpost logprobs: no tokens\n");
    else if (rlp_policy_logprobs(p, &seq, 1, temperature, lp, ent, n, &got) != RLP_OK)
        fprintf(stderr, "rlpost logprobs: %s\n", rlp_error_last());
    else {
        double sum = 0;
        size_t non_finite = 0;
        printf("{\"model\": ");
        json_print_string(stdout, model);
        printf(", \"temperature\": %g, \"tokens\": [", (double)temperature);
        for (size_t i = 0; i < n; i++) {
            const char *piece = "";
            size_t len = 0;
            char buf[128] = "";
            if (tok && rlp_tokenizer_token_text(&piece, &len, tok, ids[i]) == RLP_OK)
                snprintf(buf, sizeof buf, "%.*s", (int)(len < 127 ? len : 127), piece);
            printf("%s{\"id\": %d, \"text\": ", i ? ", " : "", ids[i]);
            json_print_string(stdout, buf);
            if (i == 0)
                printf(", \"logprob\": null, \"entropy\": null}");
            else {
                printf(", \"logprob\": ");
                json_print_number(stdout, "%.6f", (double)lp[i - 1], &non_finite);
                printf(", \"entropy\": ");
                json_print_number(stdout, "%.6f", (double)ent[i - 1], &non_finite);
                printf("}");
                sum += lp[i - 1];
            }
        }
        printf("], \"sum_logprob\": ");
        json_print_number(stdout, "%.6f", sum, &non_finite);
        printf(", \"mean_logprob\": ");
        json_print_number(stdout, "%.6f", got ? sum / (double)got : 0.0, &non_finite);
        /* the flag: a consumer sees at once that the nulls are not "no value" */
        printf(", \"non_finite_values\": %zu}\n", non_finite);
        status = 0;
        if (non_finite) {
            fprintf(stderr, "rlpost logprobs: %zu values are NaN or infinite (printed as null): the model's "
                    "weights or the temperature give non-finite logits\n", non_finite);
            status = 1;
        }
    }
    free(lp);
    free(ent);
    free(ids);
    rlp_policy_free(p);
    rlp_context_free(ctx);
    return status;
}
