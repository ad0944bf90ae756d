/* The HTTP verifier's wire format (documented at rlp_http_reward_options):
 * building a request body from samples and reading an answer into
 * results. No transport here (http_verifier.c has it), so the answer
 * reader is fuzzed without libcurl. */
#ifndef RLPI_REWARD_HTTP_PROTOCOL_H
#define RLPI_REWARD_HTTP_PROTOCOL_H

#include "reward/scorer.h"

#include <stddef.h>
#include <stdint.h>

/* Characters of the URL quoted in a reason (reasons are short). */
#define URL_QUOTE 48

/* The JSON body for samples [b, e) of req; malloc'd (length in *len), or
 * NULL when out of memory. Invalid UTF-8 in texts is sent as U+FFFD. */
char *rlpi_http_body(const rlp_reward_request *req, size_t b, size_t e, int send_tokens, size_t *len);

/* Reads an answer body (len bytes, no NUL needed) for the n samples of
 * req into res / fail (n each, res pre-initialised): every sample gets a
 * score, or valid = 0 with a reason (and fail set for a malformed answer
 * or entry). url only names the verifier in reasons. */
void rlpi_http_read_answer(const char *url, const char *body, size_t len, rlp_reward_result *res, uint8_t *fail,
                           const rlp_reward_request *req, size_t n);

/* Marks samples [b, e) invalid with kind and why. */
void rlpi_http_fail_all(rlp_reward_result *res, uint8_t *fail, size_t b, size_t e, int kind, const char *why);

#endif
