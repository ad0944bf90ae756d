/* The HTTP verifier's wire format: request bodies out, answers in (see
 * http_protocol.h and rlp_http_reward_options). Answers are untrusted:
 * parsed with a depth bound, each entry checked for type and size before
 * use. Must not do I/O. */
#include "reward/http_protocol.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "core/json_text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A JSON string of s (n bytes): invalid UTF-8 bytes (a completion cut in
 * the middle of a character) become U+FFFD, which JSON can carry. */
static json_t *json_text(const char *s, size_t n)
{
    return rlpi_json_string_lossy(s, n, false);
}

static int put(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

char *rlpi_http_body(const rlp_reward_request *req, size_t b, size_t e, int send_tokens, size_t *len)
{
    json_t *root = json_object(), *samples = json_array();
    int bad = !root || !samples;
    if (bad)
        json_decref(samples);
    else
        bad = put(root, "version", json_integer(1)) || put(root, "samples", samples);
    for (size_t i = b; !bad && i < e; i++) {
        const rlp_reward_request *r = &req[i];
        json_t *s = json_object();
        bad = !s || json_array_append_new(samples, s);
        bad = bad || put(s, "id", json_integer((json_int_t)r->batch_index));
        bad = bad || put(s, "prompt", json_text(r->prompt_text, r->prompt_len));
        bad = bad || put(s, "completion", json_text(r->completion_text, r->completion_len));
        bad = bad || put(s, "reference", r->reference ? json_text(r->reference, strlen(r->reference)) : json_null());
        json_t *meta = r->metadata_json ? json_loads(r->metadata_json, 0, NULL) : NULL;
        bad = bad || put(s, "metadata", meta ? meta : json_null());
        bad = bad || put(s, "group_id", json_integer((json_int_t)r->group_id));
        bad = bad || put(s, "sample_index", json_integer(r->sample_index));
        bad = bad || put(s, "policy_version", json_integer((json_int_t)r->policy_version));
        if (!bad && send_tokens) {
            json_t *toks = json_array();
            bad = put(s, "completion_tokens", toks);
            for (size_t t = 0; !bad && t < r->n_completion_tokens; t++)
                bad = json_array_append_new(toks, json_integer(r->completion_tokens[t]));
        }
    }
    char *out = bad ? NULL : json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    if (out)
        *len = strlen(out);
    return out;
}

/* ---- answers ------------------------------------------------------------------ */

void rlpi_http_fail_all(rlp_reward_result *res, uint8_t *fail, size_t b, size_t e, int kind, const char *why)
{
    for (size_t i = b; i < e; i++) {
        res[i].valid = 0;
        fail[i] = (uint8_t)kind;
        rlpi_reason(&res[i], "%s", why);
    }
}

/* Reads one answer into res[b, e). */
void rlpi_http_read_answer(const char *url, const char *body, size_t len, rlp_reward_result *res, uint8_t *fail,
                           const rlp_reward_request *req, size_t n)
{
    const size_t b = 0, e = n;
    char why[RLP_REWARD_REASON_MAX];
    json_t *root = NULL;
    if (rlpi_json_load_guarded(body, len, RLPI_JSON_MAX_DEPTH, "verifier response", &root)) {
        snprintf(why, sizeof why, "%.*s: malformed response: %s", URL_QUOTE, url, rlp_error_last());
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
        return;
    }
    json_t *scores = json_is_object(root) ? json_object_get(root, "scores") : NULL;
    if (!json_is_array(scores)) {
        snprintf(why, sizeof why, "%.*s: malformed response: no \"scores\" array", URL_QUOTE, url);
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
    } else if (json_array_size(scores) != e - b) {
        snprintf(why, sizeof why, "%.*s: %s response: %zu scores for %zu samples", URL_QUOTE, url,
                 json_array_size(scores) < e - b ? "short" : "long", json_array_size(scores), e - b);
        rlpi_http_fail_all(res, fail, b, e, RLPI_RW_ERROR, why);
    } else {
        for (size_t i = b; i < e; i++) {
            json_t *v = json_array_get(scores, i - b);
            rlp_reward_result *r = &res[i];
            if (json_is_number(v)) {
                r->score = json_number_value(v);
                continue;
            }
            if (json_is_null(v)) {
                r->valid = 0;
                rlpi_reason(r, "verifier returned null");
                continue;
            }
            json_t *sc = json_object_get(v, "score"), *valid = json_object_get(v, "valid");
            json_t *reason = json_object_get(v, "reason"), *toks = json_object_get(v, "token_scores");
            if (!json_is_object(v) || (valid && !json_is_boolean(valid)) || (reason && !json_is_string(reason)) ||
                (!json_is_false(valid) && !json_is_number(sc))) {
                r->valid = 0;
                fail[i] = RLPI_RW_ERROR;
                rlpi_reason(r, "malformed score entry %zu (want a number, null or {\"score\": x, ...})", i - b);
                continue;
            }
            /* an empty reason says nothing: an invalid sample always gets one */
            const char *why = reason && *json_string_value(reason) ? json_string_value(reason) : NULL;
            if (why)
                rlpi_reason(r, "%s", why);
            if (json_is_false(valid)) {
                r->valid = 0;
                if (!why)
                    rlpi_reason(r, "verifier marked it invalid");
                continue;
            }
            r->score = json_number_value(sc);
            if (toks && !json_is_null(toks)) {
                size_t nt = req[i].n_completion_tokens;
                int ok = json_is_array(toks) && json_array_size(toks) == nt;
                for (size_t t = 0; ok && t < nt; t++)
                    ok = json_is_number(json_array_get(toks, t));
                if (!ok) {
                    r->valid = 0;
                    fail[i] = RLPI_RW_ERROR;
                    rlpi_reason(r, "token_scores must be %zu numbers", nt);
                    continue;
                }
                for (size_t t = 0; t < nt; t++)
                    r->token_scores[t] = (float)json_number_value(json_array_get(toks, t));
                r->has_token_scores = nt > 0;
            }
        }
    }
    json_decref(root);
}

