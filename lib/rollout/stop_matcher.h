/* Incremental detokenisation of one completion with stop strings and stop
 * token ids: decides after each token whether generation ends, and which
 * text may be streamed (text that can no longer become part of a stop
 * string and holds only whole UTF-8 characters). Token ids and logprobs
 * are the engine's business: the matcher never asks to drop a token, so
 * ids, logprobs and versions stay aligned (vLLM #3574 / PR #47616). */
#ifndef RLPI_ROLLOUT_STOP_MATCHER_H
#define RLPI_ROLLOUT_STOP_MATCHER_H

#include "rlpost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rlpi_stop_matcher rlpi_stop_matcher;

typedef struct rlpi_stop_config {
    const char *const *stop;      /* (n_stop) stop strings, UTF-8, non-empty */
    size_t n_stop;
    const int32_t *stop_ids;      /* (n_stop_ids) stop token ids (EOS is passed here by the engine) */
    size_t n_stop_ids;
    bool include_stop_str;        /* keep the matched stop string in the text */
} rlpi_stop_config;

/* tok must outlive the matcher; the config is copied. */
int rlpi_stop_matcher_create(rlpi_stop_matcher **out, const rlp_tokenizer *tok, const rlpi_stop_config *cfg);
void rlpi_stop_matcher_free(rlpi_stop_matcher *m);
/* Forget the completion so far (a new sequence; same config). */
void rlpi_stop_matcher_reset(rlpi_stop_matcher *m);

/* Feeds the next generated token. Sets *stopped when generation must end
 * after this token (a stop id, or a stop string now complete in the text;
 * a stop string may begin inside an earlier token and end inside this one).
 * *delta and *delta_len (NUL-terminated, owned by the matcher, valid
 * until the next call) receive the text that is now safe to stream.
 * Special tokens (stop ids) add no text. */
int rlpi_stop_matcher_push(rlpi_stop_matcher *m, int32_t token, bool *stopped, const char **delta,
                           size_t *delta_len);

/* Ends the completion without a stop (length, abort): releases held-back
 * text (an incomplete UTF-8 tail decodes lossily). */
int rlpi_stop_matcher_finish(rlpi_stop_matcher *m, const char **delta, size_t *delta_len);

/* The completion text: up to the start of the matched stop string (or
 * through its end when include_stop_str), never anything past it. Valid
 * until the next call. */
const char *rlpi_stop_matcher_text(const rlpi_stop_matcher *m, size_t *len);

/* Index of the matched stop string, or -1; the stop id hit, or -1. */
int rlpi_stop_matcher_matched_string(const rlpi_stop_matcher *m);
int32_t rlpi_stop_matcher_matched_id(const rlpi_stop_matcher *m);

#endif
