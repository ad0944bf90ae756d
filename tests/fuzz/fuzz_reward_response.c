/* libFuzzer target: the HTTP verifier's answer reader on arbitrary bytes.
 * Byte 0 (mod 8) is the number of samples the answer is for, each with
 * two completion tokens. Every sample must come out scored or invalid
 * with a reason, token scores only when their count is right. Built by
 * run-fuzzers.sh. */
#include "reward/http_protocol.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t n = data[0] % 8, len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size: ASan sees reads past the body */
    if (!body)
        return 0;
    memcpy(body, data + 1, len);
    static const int32_t toks[2] = {5, 6};
    rlp_reward_request req[8] = {0};
    rlp_reward_result res[8] = {0};
    float tok[8][2];
    uint8_t steps[8][2], fail[8] = {0};
    for (size_t i = 0; i < n; i++) {
        memset(&req[i], 0, sizeof req[i]);
        req[i].completion_text = "x";
        req[i].completion_len = 1;
        req[i].prompt_text = "";
        req[i].completion_tokens = toks;
        req[i].n_completion_tokens = 2;
        memset(&res[i], 0, sizeof res[i]);
        res[i].score = NAN;
        res[i].valid = 1;
        res[i].token_scores = tok[i];
        res[i].step_ends = steps[i];
    }
    rlpi_http_read_answer("http://fuzz", body, len, res, fail, req, n);
    for (size_t i = 0; i < n; i++) {
        if (!memchr(res[i].reason, '\0', sizeof res[i].reason))
            abort();
        if (res[i].valid && isnan(res[i].score))
            abort(); /* JSON has no NaN: a valid sample has a number */
        if (!res[i].valid && res[i].reason[0] == '\0')
            abort();
    }
    free(body);
    return 0;
}
