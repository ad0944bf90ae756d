/* libFuzzer target: rlpi_remote_parse_completion on arbitrary bytes. A
 * leading digit is the expected choice count (anything else: any count).
 * An accepted body must give choices the rollout engine can use unchecked;
 * a rejected one must leave nothing allocated. Built by run-fuzzers.sh. */
#include "rollout/remote_client.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint32_t n_expected = data[0] >= '0' && data[0] <= '9' ? (uint32_t)(data[0] - '0') : 0;
    size_t len = size - 1;
    /* an exact-size copy, so ASan sees any read past the body */
    char *body = malloc(len ? len : 1);
    if (!body)
        return 0;
    memcpy(body, data + 1, len);

    rlpi_remote_result r;
    memset(&r, 0, sizeof r);
    if (rlpi_remote_parse_completion(body, len, n_expected, &r) == 0) {
        if (!r.choices || r.n_choices == 0 || (n_expected && r.n_choices != n_expected) ||
            r.weight_version < -1)
            abort();
        for (size_t i = 0; i < r.n_choices; i++) {
            const rlpi_remote_choice *c = &r.choices[i];
            if (!c->text || !c->tokens || !c->logprobs ||
                !memchr(c->finish_reason, '\0', sizeof c->finish_reason))
                abort();
            for (size_t t = 0; t < c->n_tokens; t++)
                if (c->tokens[t] < 0 || !isfinite(c->logprobs[t]))
                    abort();
        }
    } else if (r.choices || r.n_choices || r.weight_version != -1) {
        abort();
    }
    rlpi_remote_result_clear(&r);
    free(body);
    return 0;
}
