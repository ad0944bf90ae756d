/* llama2.c's stories260K.bin loaded through the public API (legacy header,
 * shared classifier, q/k rows permuted to the HF layout) gives the logprob
 * of every token and the entropy at every position of a float64 PyTorch
 * port of llama2.c's run.c, which applies RoPE to the raw interleaved rows
 * (tests/reference/make_stories_fixtures.py). The fixture's sequence is
 * that reference's greedy continuation of BOS, so our argmax at every
 * position must reproduce it token for token. Tolerance 1e-4 absolute: a
 * 5-layer, 64-wide fp32 model is expected near 1e-6, and a wrong RoPE
 * layout is off by > 0.1. Skipped (77) without ../shared/data. */
#include "model/policy.h"
#include "rlpost.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    const char *root = getenv("RLPOST_SOURCE_ROOT"), *data = getenv("RLPOST_SHARED_DATA");
    char model[2048], fixture[2048];
    snprintf(model, sizeof model, "%s/llama2c/stories260K.bin", data ? data : "../shared/data");
    snprintf(fixture, sizeof fixture, "%s/tests/reference/fixtures/stories260k_logprobs.json", root ? root : ".");
    FILE *probe = fopen(model, "rb");
    if (!probe) {
        printf("skipped: %s is absent\n", model);
        return 77;
    }
    fclose(probe);
    json_error_t err;
    json_t *fx = json_load_file(fixture, 0, &err);
    if (!fx) {
        fprintf(stderr, "%s: %s\n", fixture, err.text);
        return 1;
    }
    rlp_context *ctx;
    rlp_policy *p;
    rlp_policy_options po = RLP_POLICY_OPTIONS_INIT;
    po.trainable = 0;
    if (rlp_context_create(&ctx, NULL) != RLP_OK || rlp_policy_load(&p, ctx, model, &po) != RLP_OK) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    if (rlp_policy_tokenizer(p) != NULL || rlp_error_last_code() != RLP_E_NOT_FOUND) {
        fprintf(stderr, "a llama2.c checkpoint has no tokenizer of its own\n");
        return 1;
    }
    json_t *ids = json_object_get(fx, "ids"), *rl = json_object_get(fx, "logprobs"), *re = json_object_get(fx, "entropy");
    size_t n = json_array_size(ids);
    int32_t tok[256];
    float lp[256], ent[256];
    for (size_t i = 0; i < n && i < 256; i++)
        tok[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    rlp_sequence seq = {tok, (uint32_t)n, 0};
    size_t got;
    if (rlp_policy_logprobs(p, &seq, 1, 1.0f, lp, ent, 256, &got) != RLP_OK || got != n - 1) {
        fprintf(stderr, "%s\n", rlp_error_last());
        return 1;
    }
    double max_lp = 0, max_h = 0;
    for (size_t i = 0; i < got; i++) {
        max_lp = fmax(max_lp, fabs(lp[i] - json_number_value(json_array_get(rl, i))));
        max_h = fmax(max_h, fabs(ent[i] - json_number_value(json_array_get(re, i))));
    }
    /* greedy: argmax of the last-position logits after each prefix */
    size_t same = 0;
    float logits[512];
    for (size_t len = 1; len < n; len++) {
        int64_t ss[2] = {0, (int64_t)len};
        int32_t pos[256], tg[256];
        for (size_t i = 0; i < len; i++) {
            pos[i] = (int32_t)i;
            tg[i] = -1;
        }
        rlpi_packed_batch b = {1, ss, (int64_t)len, tok, pos, tg};
        if (rlpi_transformer_last_logits(p->tf, &b, logits) != RLP_OK) {
            fprintf(stderr, "%s\n", rlp_error_last());
            return 1;
        }
        int32_t best = 0;
        for (int32_t v = 1; v < 512; v++)
            if (logits[v] > logits[best])
                best = v;
        same += best == tok[len];
    }
    printf("stories260K: %zu tokens, max |dlogprob| %.2e, max |dentropy| %.2e, greedy %zu of %zu equal\n", n,
           max_lp, max_h, same, n - 1);
    if (same != n - 1)
        return 1;
    rlp_policy_free(p);
    rlp_context_free(ctx);
    json_decref(fx);
    return max_lp <= 1e-4 && max_h <= 1e-4 ? 0 : 1;
}
