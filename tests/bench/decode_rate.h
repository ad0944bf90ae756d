/* Decode throughput of a fresh local rollout engine, shared by bench_decode
 * and bench_train: `batch` prompts, prompt i being ids + i·stride (n_ids
 * tokens; stride 0 gives every row the same prompt), each its own group so
 * every row is prefilled, `new_tokens` sampled with temperature 1 past EOS.
 * Returns decode tokens/s (0 on failure, with the reason on stderr) and, if
 * prefill_rate is not NULL, prefill tokens/s. */
#ifndef RLPOST_BENCH_DECODE_RATE_H
#define RLPOST_BENCH_DECODE_RATE_H

#include "rlpost.h"

#include <stdio.h>
#include <stdlib.h>

static double bench_decode_rate(rlp_policy *pol, const rlp_rollout_options *o, const int32_t *ids, size_t n_ids,
                                size_t stride, uint32_t batch, uint32_t new_tokens, double *prefill_rate)
{
    rlp_rollout_engine *e;
    if (rlp_rollout_engine_create(&e, pol, o) != RLP_OK) {
        fprintf(stderr, "engine: %s\n", rlp_error_last());
        return 0;
    }
    rlp_prompt *pr = calloc(batch, sizeof *pr);
    for (uint32_t i = 0; pr && i < batch; i++) {
        pr[i].tokens = ids + i * stride;
        pr[i].n_tokens = n_ids;
        pr[i].group_id = i + 1; /* distinct groups: no prefill sharing, every row prefilled */
    }
    rlp_sampling_options s = RLP_SAMPLING_OPTIONS_INIT;
    s.temperature = 1.0f;
    s.max_new_tokens = new_tokens;
    s.ignore_eos = 1;
    rlp_batch *b = NULL;
    double rate = 0;
    if (pr && rlp_rollout_generate(&b, e, pr, batch, &s, NULL, NULL) == RLP_OK) {
        rlp_rollout_stats st = {0};
        rlp_rollout_engine_stats(&st, e);
        rate = (double)st.decode_tokens / st.decode_seconds;
        if (prefill_rate)
            *prefill_rate = (double)st.prefill_tokens / st.prefill_seconds;
    } else {
        fprintf(stderr, "generate: %s\n", pr ? rlp_error_last() : "out of memory");
    }
    rlp_batch_free(b);
    free(pr);
    rlp_rollout_engine_free(e);
    return rate;
}

#endif
