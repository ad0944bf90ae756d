/* Strict parser of one OpenAI-compatible /v1/completions response body
 * (vLLM, SGLang, llama.cpp server): completion token ids, their behaviour
 * logprobs, text, finish reason, weight version. The body is hostile input:
 * every type, count and index is checked. No network code here (that is
 * remote_client.c), so the fuzz target and curl-less builds have it too. */
#include "rollout/remote_client.h"

#include "core/error.h"
#include "core/json_guard.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SRC "completion response"

/* Characters of a server's own error message quoted back to the caller. */
#define QUOTE_MAX 200

static void free_choices(rlpi_remote_choice *ch, size_t n)
{
    for (size_t i = 0; ch && i < n; i++) {
        free(ch[i].tokens);
        free(ch[i].logprobs);
        free(ch[i].text);
    }
    free(ch);
}

/* "token_id:N" (vLLM's return_tokens_as_token_ids) with N a decimal int32
 * >= 0 and nothing after it. */
static int token_id_from_string(const char *s, size_t len, int32_t *out)
{
    static const char prefix[] = "token_id:";
    const size_t plen = sizeof prefix - 1;
    if (len <= plen || memcmp(s, prefix, plen) != 0)
        return -1;
    int64_t v = 0;
    for (size_t i = plen; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > INT32_MAX)
            return -1;
    }
    *out = (int32_t)v;
    return 0;
}

static int token_id_from_json(const json_t *v, int32_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || x > INT32_MAX)
        return -1;
    *out = (int32_t)x;
    return 0;
}

/* A logprob must be a JSON number that stays finite as a float; null (what
 * some servers send for a token without a logprob) is an error, because the
 * trainer needs every behaviour logprob. */
static int logprob_from_json(const json_t *v, float *out)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    float f = (float)d;
    if (!isfinite(d) || !isfinite(f))
        return -1;
    *out = f;
    return 0;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

/* Token ids of choice `ci`, from the first source present: token_ids,
 * logprobs.tokens ("token_id:N"), logprobs.content[].id (llama.cpp). */
static int parse_ids(const json_t *ch, const json_t *lp, size_t ci, rlpi_remote_choice *dst)
{
    const json_t *tid = json_object_get(ch, "token_ids");
    const json_t *toks = json_object_get(lp, "tokens");
    const json_t *content = json_object_get(lp, "content");
    const json_t *arr;
    const char *where;
    if (tid && !json_is_null(tid)) {
        arr = tid;
        where = "token_ids";
    } else if (toks && !json_is_null(toks)) {
        arr = toks;
        where = "logprobs.tokens";
    } else if (content && !json_is_null(content)) {
        arr = content;
        where = "logprobs.content";
    } else {
        return rlpi_error_set(RLP_E_FORMAT,
                              SRC ": choices[%zu] has no token ids (token_ids, logprobs.tokens as "
                                  "\"token_id:N\", or logprobs.content[].id)",
                              ci);
    }
    if (!json_is_array(arr))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].%s is %s, not an array", ci, where,
                              json_kind(arr));
    size_t n = json_array_size(arr);
    dst->tokens = malloc((n ? n : 1) * sizeof *dst->tokens);
    dst->logprobs = malloc((n ? n : 1) * sizeof *dst->logprobs);
    if (!dst->tokens || !dst->logprobs)
        return rlpi_error_set(RLP_E_NOMEM, SRC ": out of memory for %zu tokens", n);
    dst->n_tokens = n;
    for (size_t t = 0; t < n; t++) {
        const json_t *e = json_array_get(arr, t);
        int bad;
        if (arr == toks)
            bad = !json_is_string(e) ||
                  token_id_from_string(json_string_value(e), json_string_length(e), &dst->tokens[t]);
        else if (arr == content)
            bad = !json_is_object(e) || token_id_from_json(json_object_get(e, "id"), &dst->tokens[t]);
        else
            bad = token_id_from_json(e, &dst->tokens[t]);
        if (bad && arr == toks)
            return rlpi_error_set(RLP_E_FORMAT,
                                  SRC ": choices[%zu].logprobs.tokens[%zu] is not \"token_id:N\" "
                                      "with 0 <= N <= INT32_MAX (did the server ignore "
                                      "return_tokens_as_token_ids?)",
                                  ci, t);
        if (bad)
            return rlpi_error_set(RLP_E_FORMAT,
                                  SRC ": choices[%zu].%s[%zu]%s is not an integer in 0..INT32_MAX",
                                  ci, where, t, arr == content ? ".id" : "");
    }
    return RLP_OK;
}

static int parse_logprobs(const json_t *lp, size_t ci, rlpi_remote_choice *dst)
{
    const json_t *tlp = json_object_get(lp, "token_logprobs");
    const json_t *content = json_object_get(lp, "content");
    int from_content = !(tlp && !json_is_null(tlp));
    const json_t *arr = from_content ? content : tlp;
    const char *where = from_content ? "logprobs.content" : "logprobs.token_logprobs";
    if (!arr || json_is_null(arr))
        return rlpi_error_set(RLP_E_FORMAT,
                              SRC ": choices[%zu] has no logprobs (logprobs.token_logprobs or "
                                  "logprobs.content[].logprob)",
                              ci);
    if (!json_is_array(arr))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].%s is %s, not an array", ci, where,
                              json_kind(arr));
    if (json_array_size(arr) != dst->n_tokens)
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].%s has %zu entries for %zu tokens",
                              ci, where, json_array_size(arr), dst->n_tokens);
    for (size_t t = 0; t < dst->n_tokens; t++) {
        const json_t *e = json_array_get(arr, t);
        if (from_content)
            e = json_is_object(e) ? json_object_get(e, "logprob") : NULL;
        if (!e || logprob_from_json(e, &dst->logprobs[t]))
            return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].%s[%zu]%s is %s, not a finite logprob",
                                  ci, where, t, from_content ? ".logprob" : "",
                                  e ? json_kind(e) : "missing");
    }
    return RLP_OK;
}

static int parse_choice(const json_t *ch, size_t ci, size_t n, unsigned char *seen,
                        rlpi_remote_choice *choices)
{
    if (!json_is_object(ch))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu] is %s, not an object", ci,
                              json_kind(ch));
    const json_t *idx = json_object_get(ch, "index");
    if (!json_is_integer(idx))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].index is %s, not an integer", ci,
                              idx ? json_kind(idx) : "missing");
    json_int_t k = json_integer_value(idx);
    if (k < 0 || (uint64_t)k >= n)
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].index %lld is outside 0..%zu", ci,
                              (long long)k, n - 1);
    if (seen[k])
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].index %lld appears twice", ci,
                              (long long)k);
    seen[k] = 1;
    rlpi_remote_choice *dst = &choices[k];

    const json_t *text = json_object_get(ch, "text");
    if (!json_is_string(text))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].text is %s, not a string", ci,
                              text ? json_kind(text) : "missing");
    size_t tlen = json_string_length(text);
    dst->text = malloc(tlen + 1);
    if (!dst->text)
        return rlpi_error_set(RLP_E_NOMEM, SRC ": out of memory for %zu bytes of text", tlen);
    memcpy(dst->text, json_string_value(text), tlen);
    dst->text[tlen] = '\0';

    /* null: a server that did not say why it stopped; any other reason is
     * kept, cut to the field's size */
    const json_t *fr = json_object_get(ch, "finish_reason");
    if (!fr || !(json_is_string(fr) || json_is_null(fr)))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": choices[%zu].finish_reason is %s, not a string",
                              ci, fr ? json_kind(fr) : "missing");
    if (json_is_string(fr)) {
        size_t flen = json_string_length(fr);
        if (flen > sizeof dst->finish_reason - 1)
            flen = sizeof dst->finish_reason - 1;
        memcpy(dst->finish_reason, json_string_value(fr), flen);
        dst->finish_reason[flen] = '\0';
    }

    const json_t *lp = json_object_get(ch, "logprobs");
    if (!json_is_object(lp))
        return rlpi_error_set(RLP_E_FORMAT,
                              SRC ": choices[%zu].logprobs is %s, not an object (the request asks "
                              "for logprobs: 1)",
                              ci, lp ? json_kind(lp) : "missing");
    int rc = parse_ids(ch, lp, ci, dst);
    if (rc)
        return rc;
    return parse_logprobs(lp, ci, dst);
}

/* A body without "choices" that carries {"error": ...} or {"message": ...}
 * (vLLM, OpenAI) gets the server's words in the message. */
static int missing_choices(const json_t *root)
{
    const json_t *err = json_object_get(root, "error");
    const json_t *msg = json_is_object(err) ? json_object_get(err, "message")
                        : json_is_string(err) ? err
                                              : json_object_get(root, "message");
    if (json_is_string(msg))
        return rlpi_error_set(RLP_E_FORMAT, SRC ": no \"choices\"; the server says: %.*s", QUOTE_MAX,
                              json_string_value(msg));
    return rlpi_error_set(RLP_E_FORMAT, SRC ": no \"choices\" array");
}

/* On entry out->choices holds nothing (it is overwritten, not freed). On
 * success sets choices, n_choices and weight_version; on failure leaves
 * them NULL, 0, -1. Never touches status, error, http_code or attempts. */
int rlpi_remote_parse_completion(const char *body, size_t len, uint32_t n_expected,
                                 rlpi_remote_result *out)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    out->choices = NULL;
    out->n_choices = 0;
    out->weight_version = -1;
    RLPI_CHECK_ARG(body || len == 0, "body is NULL");
    if (len == 0)
        return rlpi_error_set(RLP_E_FORMAT, SRC ": empty body");

    json_t *root;
    int rc = rlpi_json_load_guarded(body, len, RLPI_JSON_MAX_DEPTH, SRC, &root);
    if (rc)
        return rc;
    rlpi_remote_choice *choices = NULL;
    unsigned char *seen = NULL;
    size_t n = 0;
    int64_t wv = -1;

    if (!json_is_object(root)) {
        rc = rlpi_error_set(RLP_E_FORMAT, SRC ": top level is %s, not an object", json_kind(root));
        goto done;
    }
    const json_t *wvj = json_object_get(root, "weight_version");
    if (wvj && !json_is_null(wvj)) {
        if (!json_is_integer(wvj)) {
            rc = rlpi_error_set(RLP_E_FORMAT, SRC ": weight_version is %s, not an integer",
                                json_kind(wvj));
            goto done;
        }
        if (json_integer_value(wvj) < 0) {
            rc = rlpi_error_set(RLP_E_FORMAT, SRC ": weight_version %lld is negative",
                                (long long)json_integer_value(wvj));
            goto done;
        }
        wv = (int64_t)json_integer_value(wvj);
    }
    const json_t *arr = json_object_get(root, "choices");
    if (!arr) {
        rc = missing_choices(root);
        goto done;
    }
    if (!json_is_array(arr)) {
        rc = rlpi_error_set(RLP_E_FORMAT, SRC ": choices is %s, not an array", json_kind(arr));
        goto done;
    }
    n = json_array_size(arr);
    if (n == 0 || (n_expected && n != n_expected)) {
        if (n_expected)
            rc = rlpi_error_set(RLP_E_FORMAT, SRC ": %zu choices, expected %u", n, n_expected);
        else
            rc = rlpi_error_set(RLP_E_FORMAT, SRC ": empty choices array");
        goto done;
    }
    choices = calloc(n, sizeof *choices);
    seen = calloc(n, 1);
    if (!choices || !seen) {
        rc = rlpi_error_set(RLP_E_NOMEM, SRC ": out of memory for %zu choices", n);
        goto done;
    }
    for (size_t i = 0; i < n && rc == RLP_OK; i++)
        rc = parse_choice(json_array_get(arr, i), i, n, seen, choices);

done:
    json_decref(root);
    free(seen);
    if (rc) {
        free_choices(choices, n);
        return rc;
    }
    out->choices = choices;
    out->n_choices = n;
    out->weight_version = wv;
    return RLP_OK;
}

void rlpi_remote_result_clear(rlpi_remote_result *r)
{
    if (!r)
        return;
    free_choices(r->choices, r->n_choices);
    free(r->error);
    memset(r, 0, sizeof *r);
    r->weight_version = -1;
}
