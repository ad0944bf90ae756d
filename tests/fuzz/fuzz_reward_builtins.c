/* libFuzzer target: every built-in verifier on arbitrary text. Byte 0
 * picks the built-in (low 3 bits) and whether the rest of the input is the
 * completion or the reference (bit 3); the other side is a fixed, valid
 * one. Each must return a finite score or an invalid sample with a reason,
 * never crash, hang or read past the text. Built by run-fuzzers.sh. */
#include "reward/builtin.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
    const char *name, *options, *completion, *reference, *metadata;
} cases[8] = {
    {"logic_rl_format", NULL, "<think>a</think><answer>b</answer>", NULL, NULL},
    {"kk_answer", "{\"require_format\": false}", "<answer>Zoey is a knight, Oliver is a knave</answer>",
     "(1) Zoey is a knight\n(2) Oliver is a knave", NULL},
    /* K&K metadata: the format check parses the answer for every name */
    {"logic_rl", NULL, "<think>x</think><answer>Zoey is a knight, Oliver is a knave</answer>",
     "(1) Zoey is a knight\n(2) Oliver is a knave", "{\"answer_type\": \"kk\", \"names\": [\"Zoey\", \"Oliver\"]}"},
    {"gsm8k", NULL, "#### 18", "18", NULL},
    {"boxed_math", NULL, "\\boxed{\\frac{1}{3}}", "\\frac{1}{3}", NULL},
    {"countdown", NULL, "<answer>3*5+7</answer>", NULL, "{\"numbers\": [3, 5, 7], \"target\": 22}"},
    {"exact_match", "{\"extract\": \"answer_tag\"}", "<answer>Paris</answer>", "Paris", NULL},
    {"regex_match", "{\"match_limit\": 100000}", "aab", "^a+b$", NULL},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int k = data[0] & 7, as_reference = (data[0] >> 3) & 1;
    /* an exact-size, NUL-terminated copy, so ASan sees any read past it */
    size_t len = size - 1;
    char *text = malloc(len + 1);
    if (!text)
        return 0;
    memcpy(text, data + 1, len);
    text[len] = '\0';

    rlpi_scorer *sc = NULL;
    rlpi_builtin_common common;
    json_t *root = NULL;
    if (rlpi_builtin_create(&sc, &common, &root, cases[k].name, cases[k].options) != 0)
        abort();
    rlp_reward_request req;
    memset(&req, 0, sizeof req);
    req.version = RLP_REWARD_REQUEST_VERSION;
    req.prompt_text = "";
    req.completion_text = as_reference ? cases[k].completion : text;
    req.completion_len = strlen(req.completion_text); /* a NUL inside ends the text, as in a batch */
    req.reference = as_reference ? text : cases[k].reference;
    req.metadata_json = as_reference && k == 5 ? text : cases[k].metadata;
    rlp_reward_result res;
    memset(&res, 0, sizeof res);
    res.version = RLP_REWARD_RESULT_VERSION;
    res.score = NAN;
    res.valid = 1;
    uint8_t fail = 0;
    int rc = sc->ops->score(sc->impl, &res, &req, 1, &fail);
    if (rc == 0 && res.valid && !isfinite(res.score))
        abort(); /* a built-in must score or say why not */
    if (!memchr(res.reason, '\0', sizeof res.reason))
        abort();
    if (rc == 0 && !res.valid && res.reason[0] == '\0')
        abort();
    rlpi_scorer_unref(sc);
    json_decref(root);
    free(text);
    return 0;
}
