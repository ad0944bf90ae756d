/* The OpenAI/vLLM wire format of `rlpost serve`: request bodies of
 * /v1/completions and /v1/chat/completions checked field by field into jobs
 * (every type and range; a wrong one is a 400 naming the field), and
 * finished jobs and stream events turned into response JSON. Beyond
 * OpenAI's fields, as vLLM: top_k, min_p, stop_token_ids, ignore_eos,
 * include_stop_str_in_output, return_tokens_as_token_ids; and as the
 * library's remote client reads them: choices[i].token_ids and a top-level
 * weight_version. Sampling parameters it cannot honour (penalties,
 * logit_bias, best_of > n, echo) are refused, never ignored: the behaviour
 * logprobs a trainer gets must be those of the tokens' real distribution. */
#include "serve.h"

#include "json_out.h"
#include "serve_tools.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Deepest nesting of a request body: real ones nest 3-4 levels (chat
 * content parts); the bound is checked by a flat scan before jansson
 * recurses. */
#define MAX_JSON_DEPTH 32

#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

typedef struct pctx {
    serve_server *srv;
    char *err;
    size_t errlen;
} pctx;

static int fail(pctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

json_t *serve_json_text(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    bool clean = true;
    for (size_t i = 0; i < n && clean;) {
        size_t l = utf8_seq(u + i, n - i);
        clean = l > 0;
        i += l;
    }
    if (clean)
        return json_stringn(s, n);
    char *buf = malloc(3 * n + 1), *o = buf;
    if (!buf)
        return NULL;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i);
        if (l) {
            memcpy(o, s + i, l);
            o += l;
            i += l;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, (size_t)(o - buf));
    free(buf);
    return j;
}

/* Code points in s (as Python's len(), which vLLM's text_offset counts). */
static size_t utf8_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* ---- request bodies ----------------------------------------------------- */

json_t *serve_parse_body(const char *body, size_t len, char *err, size_t errlen)
{
    if (!body || len == 0) {
        snprintf(err, errlen, "the request body is empty; expected a JSON object");
        return NULL;
    }
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = body[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '{' || ch == '[') {
            if (++depth > MAX_JSON_DEPTH) {
                snprintf(err, errlen, "malformed request: JSON nested deeper than %d levels", MAX_JSON_DEPTH);
                return NULL;
            }
        } else if (ch == '}' || ch == ']') {
            depth--;
        }
    }
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "malformed JSON in the request body: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(err, errlen, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

static int get_bool(pctx *c, const json_t *o, const char *key, int def, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return fail(c, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* An integer (a real with an integral value is accepted, as pydantic does). */
static int get_int(pctx *c, const json_t *o, const char *key, long long def, long long lo, long long hi,
                   long long *out)
{
    const json_t *v = json_object_get(o, key);
    long long x;
    if (absent(v)) {
        *out = def;
        return 0;
    }
    if (json_is_integer(v)) {
        x = (long long)json_integer_value(v);
    } else if (json_is_real(v) && fabs(json_real_value(v)) < 9.0e15 &&
               json_real_value(v) == floor(json_real_value(v))) {
        x = (long long)json_real_value(v);
    } else {
        return fail(c, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi)
        return fail(c, "'%s' = %lld is out of range [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_num(pctx *c, const json_t *o, const char *key, double def, double lo, double hi, double *out)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return fail(c, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return fail(c, "'%s' = %g is out of range [%g, %g]", key, x, lo, hi);
    *out = x;
    return 0;
}

/* A number field that must keep its neutral value (we cannot honour others). */
static int require_neutral(pctx *c, const json_t *o, const char *key, double neutral)
{
    double x = neutral;
    if (get_num(c, o, key, neutral, -1e9, 1e9, &x))
        return -1;
    if (x != neutral)
        return fail(c, "'%s' = %g is not supported by this server (only %g)", key, x, neutral);
    return 0;
}

static uint64_t splitmix64(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static serve_job *job_new(serve_server *srv, int kind)
{
    serve_job *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    job->srv = srv;
    job->refs = 1;
    job->kind = kind;
    job->created = (int64_t)time(NULL);
    job->logprobs = -1;
    pthread_cond_init(&job->cv, NULL);
    rlp_sampling_options d = RLP_SAMPLING_OPTIONS_INIT;
    job->sampling = d;
    uint64_t k = __atomic_fetch_add(&srv->next_id, 1, __ATOMIC_SEQ_CST);
    snprintf(job->id, sizeof job->id, "%s-%016llx", kind == JOB_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)splitmix64(srv->seed_base ^ (k << 1)));
    return job;
}

void serve_job_free(serve_job *job)
{
    if (!job)
        return;
    for (size_t i = 0; job->prompts && i < job->n_prompts; i++)
        free(job->prompts[i]);
    free(job->prompts);
    free(job->prompt_lens);
    for (size_t i = 0; job->stop && i < job->sampling.n_stop; i++)
        free(job->stop[i]);
    free(job->stop);
    free(job->stop_ids);
    free(job->error);
    rlp_batch_free(job->result);
    free(job->sse);
    free(job->choice_chars);
    free(job->choice_started);
    free(job->choice_version);
    for (size_t i = 0; job->choice_text && i < job->n_prompts * job->sampling.n; i++)
        free(job->choice_text[i].p);
    free(job->choice_text);
    pthread_cond_destroy(&job->cv);
    free(job);
}

static int add_prompt(pctx *c, serve_job *job, int32_t *ids, size_t n)
{
    const serve_config *cfg = &c->srv->cfg;
    size_t k = job->n_prompts;
    int32_t **p = realloc(job->prompts, (k + 1) * sizeof *p);
    if (p)
        job->prompts = p;
    size_t *l = realloc(job->prompt_lens, (k + 1) * sizeof *l);
    if (l)
        job->prompt_lens = l;
    if (!p || !l) {
        free(ids);
        return fail(c, "out of memory");
    }
    job->prompts[k] = ids;
    job->prompt_lens[k] = n;
    job->n_prompts++;
    if (n == 0)
        return fail(c, "prompt %zu is empty", k);
    if (n > cfg->max_seq_len - 1)
        return fail(c, "prompt %zu has %zu tokens; this server holds at most %u tokens per sequence "
                       "(prompt and completion)", k, n, cfg->max_seq_len);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->vocab_size)
            return fail(c, "prompt %zu: token %zu is %d, outside the vocabulary [0, %d)", k, i, ids[i],
                        cfg->vocab_size);
    return 0;
}

static int add_text_prompt(pctx *c, serve_job *job, const char *s, size_t len, uint32_t flags)
{
    size_t need = 0, n = 0;
    int rc = rlp_tokenizer_encode(c->srv->tok, s, len, flags, NULL, 0, &need);
    if (rc != RLP_OK && rc != RLP_E_OVERFLOW)
        return fail(c, "prompt %zu: %s", job->n_prompts, rlp_error_last());
    int32_t *ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids)
        return fail(c, "out of memory");
    if (rlp_tokenizer_encode(c->srv->tok, s, len, flags, ids, need, &n) != RLP_OK) {
        free(ids);
        return fail(c, "prompt %zu: %s", job->n_prompts, rlp_error_last());
    }
    return add_prompt(c, job, ids, n);
}

static int add_id_prompt(pctx *c, serve_job *job, const json_t *arr)
{
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids)
        return fail(c, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN || json_integer_value(v) > INT32_MAX) {
            free(ids);
            return fail(c, "'prompt': prompt %zu, element %zu is not a token id", job->n_prompts, i);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    return add_prompt(c, job, ids, n);
}

/* The forms vLLM takes: "text", [ids], ["text", ...], [[ids], ...]. */
static int parse_prompt(pctx *c, const json_t *o, serve_job *job, uint32_t flags)
{
    const json_t *p = json_object_get(o, "prompt");
    if (absent(p))
        return fail(c, "'prompt' is required");
    if (json_is_string(p))
        return add_text_prompt(c, job, json_string_value(p), json_string_length(p), flags);
    if (!json_is_array(p) || json_array_size(p) == 0)
        return fail(c, "'prompt' must be a string, an array of token ids, or a non-empty array of strings "
                       "or of token-id arrays");
    const json_t *first = json_array_get(p, 0);
    if (json_is_integer(first))
        return add_id_prompt(c, job, p);
    if (json_array_size(p) > SERVE_MAX_PROMPTS)
        return fail(c, "'prompt' has %zu prompts; at most %d per request", json_array_size(p), SERVE_MAX_PROMPTS);
    size_t i;
    const json_t *v;
    json_array_foreach(p, i, v) {
        int rc;
        if (json_is_string(v) && json_is_string(first))
            rc = add_text_prompt(c, job, json_string_value(v), json_string_length(v), flags);
        else if (json_is_array(v) && json_is_array(first))
            rc = add_id_prompt(c, job, v);
        else
            rc = fail(c, "'prompt'[%zu]: a prompt array must hold only strings or only token-id arrays", i);
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_stops(pctx *c, const json_t *o, serve_job *job)
{
    const json_t *s = json_object_get(o, "stop");
    size_t n = 0;
    if (absent(s))
        n = 0;
    else if (json_is_string(s))
        n = 1;
    else if (json_is_array(s))
        n = json_array_size(s);
    else
        return fail(c, "'stop' must be a string or an array of strings");
    if (n > SERVE_MAX_STOPS)
        return fail(c, "'stop' has %zu strings; at most %d", n, SERVE_MAX_STOPS);
    if (n && !c->srv->tok)
        return fail(c, "'stop' strings need a tokenizer and this model has none");
    if (n) {
        job->stop = calloc(n, sizeof *job->stop);
        if (!job->stop)
            return fail(c, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v))
            return fail(c, "'stop'[%zu] must be a string", i);
        size_t len = json_string_length(v);
        if (len == 0 || len > SERVE_MAX_STOP_BYTES || strlen(json_string_value(v)) != len)
            return fail(c, "'stop'[%zu] must be 1 to %d bytes without NUL", i, SERVE_MAX_STOP_BYTES);
        if (!(job->stop[i] = strdup(json_string_value(v))))
            return fail(c, "out of memory");
        job->sampling.n_stop = i + 1;
    }
    job->sampling.stop = (const char *const *)job->stop;

    const json_t *ids = json_object_get(o, "stop_token_ids");
    if (absent(ids))
        return 0;
    if (!json_is_array(ids) || json_array_size(ids) > SERVE_MAX_STOP_IDS)
        return fail(c, "'stop_token_ids' must be an array of at most %d token ids", SERVE_MAX_STOP_IDS);
    size_t m = json_array_size(ids);
    job->stop_ids = malloc((m ? m : 1) * sizeof *job->stop_ids);
    if (!job->stop_ids)
        return fail(c, "out of memory");
    for (size_t i = 0; i < m; i++) {
        const json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->srv->cfg.vocab_size)
            return fail(c, "'stop_token_ids'[%zu] must be a token id in [0, %d)", i, c->srv->cfg.vocab_size);
        job->stop_ids[i] = (int32_t)json_integer_value(v);
    }
    job->sampling.stop_token_ids = job->stop_ids;
    job->sampling.n_stop_token_ids = m;
    return 0;
}

static int parse_logprobs_mode(pctx *c, const json_t *o, serve_job *job)
{
    const json_t *v = json_object_get(o, "logprobs_mode");
    job->sampling.logprobs_mode = c->srv->cfg.logprobs_mode;
    if (absent(v))
        return 0;
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    if (!strcmp(s, "sampling"))
        job->sampling.logprobs_mode = RLP_LOGPROBS_SAMPLING;
    else if (!strcmp(s, "tempered"))
        job->sampling.logprobs_mode = RLP_LOGPROBS_TEMPERED;
    else if (!strcmp(s, "raw"))
        job->sampling.logprobs_mode = RLP_LOGPROBS_RAW;
    else
        return fail(c, "'logprobs_mode' must be \"sampling\", \"tempered\" or \"raw\"");
    return 0;
}

/* What both endpoints share: n, lengths, sampling, stops, streaming. */
static int parse_sampling(pctx *c, const json_t *o, serve_job *job, const char *max_key, long long max_default)
{
    const serve_config *cfg = &c->srv->cfg;
    rlp_sampling_options *s = &job->sampling;
    long long n = 1, max_tokens = 1, top_k = 0, best_of = 1;
    double temperature = 1, top_p = 1, min_p = 0;
    int b = 0;
    if (get_int(c, o, "n", 1, 1, SERVE_MAX_N, &n) ||
        get_int(c, o, max_key, max_default, 1, cfg->max_seq_len, &max_tokens) ||
        get_num(c, o, "temperature", 1.0, 0.0, 100.0, &temperature) ||
        get_num(c, o, "top_p", 1.0, 0.0, 1.0, &top_p) ||
        get_int(c, o, "top_k", 0, -1, INT32_MAX, &top_k) ||
        get_num(c, o, "min_p", 0.0, 0.0, 1.0, &min_p))
        return -1;
    if (!(top_p > 0))
        return fail(c, "'top_p' must be in (0, 1]");
    s->n = (uint32_t)n;
    s->max_new_tokens = (uint32_t)max_tokens;
    s->temperature = (float)temperature;
    s->top_p = (float)top_p;
    s->top_k = top_k < 0 ? 0 : (int32_t)top_k; /* -1 (vLLM) and 0 (HF) both mean off */
    s->min_p = (float)min_p;

    const json_t *seed = json_object_get(o, "seed");
    if (absent(seed)) {
        uint64_t k = __atomic_fetch_add(&c->srv->next_id, 1, __ATOMIC_SEQ_CST);
        s->seed = splitmix64(c->srv->seed_base + (k << 1) + 1);
    } else if (json_is_integer(seed)) {
        s->seed = (uint64_t)json_integer_value(seed);
    } else {
        return fail(c, "'seed' must be an integer");
    }
    if (parse_stops(c, o, job))
        return -1;
    if (get_bool(c, o, "include_stop_str_in_output", 0, &b))
        return -1;
    s->include_stop_str = b;
    if (get_bool(c, o, "ignore_eos", 0, &b))
        return -1;
    s->ignore_eos = b;
    if (parse_logprobs_mode(c, o, job) || get_bool(c, o, "stream", 0, &job->stream) ||
        get_bool(c, o, "return_token_ids", 0, &job->return_token_ids))
        return -1;
    /* an rlpost extension: the trainer's staleness bound at the source (a
     * request waits until this server's weights are at least that new) */
    long long minv = 0;
    if (get_int(c, o, "min_weight_version", 0, 0, INT64_MAX, &minv))
        return -1;
    job->min_version = (uint64_t)minv;
    const json_t *so = json_object_get(o, "stream_options");
    if (!absent(so)) {
        if (!json_is_object(so))
            return fail(c, "'stream_options' must be an object");
        if (get_bool(c, so, "include_usage", 0, &job->include_usage))
            return -1;
    }
    /* refused rather than ignored */
    if (require_neutral(c, o, "presence_penalty", 0) || require_neutral(c, o, "frequency_penalty", 0) ||
        require_neutral(c, o, "repetition_penalty", 1) || require_neutral(c, o, "min_tokens", 0) ||
        get_int(c, o, "best_of", (long long)s->n, 1, SERVE_MAX_N, &best_of))
        return -1;
    if (best_of != (long long)s->n)
        return fail(c, "'best_of' = %lld is not supported by this server (only best_of = n)", best_of);
    const json_t *lb = json_object_get(o, "logit_bias");
    if (!absent(lb) && !(json_is_object(lb) && json_object_size(lb) == 0))
        return fail(c, "'logit_bias' is not supported by this server");
    if (get_bool(c, o, "use_beam_search", 0, &b) || (b && fail(c, "'use_beam_search' is not supported")))
        return -1;
    const json_t *model = json_object_get(o, "model");
    if (!absent(model) && !json_is_string(model))
        return fail(c, "'model' must be a string");
    return 0;
}

/* Per-choice stream state, once the prompts and n are known. */
static int finish_job(pctx *c, serve_job *job)
{
    size_t total = job->n_prompts * job->sampling.n;
    if (total > SERVE_MAX_SAMPLES)
        return fail(c, "%zu prompts x n = %u is %zu samples; at most %d per request", job->n_prompts,
                    job->sampling.n, total, SERVE_MAX_SAMPLES);
    job->remaining = total;
    job->choice_chars = calloc(total, sizeof *job->choice_chars);
    job->choice_started = calloc(total, 1);
    job->choice_version = calloc(total, sizeof *job->choice_version);
    if (!job->choice_chars || !job->choice_started || !job->choice_version)
        return fail(c, "out of memory");
    /* tool calls are parsed from a choice's whole text: streamed, it is
     * held back and sent with the calls in the choice's last chunk */
    if (job->stream && job->tool_parse && !(job->choice_text = calloc(total, sizeof *job->choice_text)))
        return fail(c, "out of memory");
    return 0;
}

serve_job *serve_parse_completion(serve_server *srv, const char *body, size_t len, char *err, size_t errlen)
{
    pctx c = {srv, err, errlen};
    json_t *o = serve_parse_body(body, len, err, errlen);
    if (!o)
        return NULL;
    serve_job *job = job_new(srv, JOB_COMPLETION);
    long long logprobs = -1;
    int rc = job ? 0 : fail(&c, "out of memory"), add_special = 0, echo = 0;
    const json_t *lp = json_object_get(o, "logprobs");
    if (!rc && !absent(lp) && !json_is_integer(lp))
        rc = fail(&c, "'logprobs' must be null or an integer in [0, %d]", SERVE_MAX_LOGPROBS);
    if (!rc)
        rc = get_int(&c, o, "logprobs", -1, 0, SERVE_MAX_LOGPROBS, &logprobs);
    if (!rc)
        rc = get_bool(&c, o, "add_special_tokens", 0, &add_special) ||
             get_bool(&c, o, "return_tokens_as_token_ids", 0, &job->tokens_as_ids) ||
             get_bool(&c, o, "echo", 0, &echo);
    if (!rc && echo)
        rc = fail(&c, "'echo' is not supported by this server");
    if (!rc && !absent(json_object_get(o, "suffix")))
        rc = fail(&c, "'suffix' is not supported by this server");
    if (!rc)
        rc = parse_prompt(&c, o, job, add_special ? RLP_ENCODE_ADD_BOS : 0);
    if (!rc)
        rc = parse_sampling(&c, o, job, "max_tokens", 16);
    if (!rc)
        rc = finish_job(&c, job);
    json_decref(o);
    if (rc) {
        serve_job_free(job);
        return NULL;
    }
    job->logprobs = (int)logprobs;
    return job;
}

/* A message's content: a string, null, or an array of {"type": "text"} parts. */
static char *message_content(pctx *c, const json_t *m, size_t i)
{
    const json_t *content = json_object_get(m, "content");
    if (absent(content))
        return strdup("");
    if (json_is_string(content)) {
        if (strlen(json_string_value(content)) != json_string_length(content)) {
            fail(c, "'messages'[%zu].content contains a NUL character", i);
            return NULL;
        }
        return strdup(json_string_value(content));
    }
    if (!json_is_array(content)) {
        fail(c, "'messages'[%zu].content must be a string or an array of text parts", i);
        return NULL;
    }
    size_t total = 0, k;
    const json_t *part;
    json_array_foreach(content, k, part) {
        const json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text) || strlen(json_string_value(text)) != json_string_length(text)) {
            fail(c, "'messages'[%zu].content[%zu] must be {\"type\": \"text\", \"text\": string} (only text "
                    "parts are supported)", i, k);
            return NULL;
        }
        total += json_string_length(text);
    }
    char *s = malloc(total + 1), *o = s;
    if (!s) {
        fail(c, "out of memory");
        return NULL;
    }
    json_array_foreach(content, k, part) {
        const json_t *text = json_object_get(part, "text");
        memcpy(o, json_string_value(text), json_string_length(text));
        o += json_string_length(text);
    }
    *o = '\0';
    return s;
}

/* The chat template's keyword arguments: `chat_template_kwargs` as vLLM and
 * SGLang take them ({"enable_thinking": false} for Qwen3), and the
 * top-level `enable_thinking` some clients send. Other kwargs are ignored,
 * as a Jinja template ignores variables it does not read. */
static int parse_chat_kwargs(pctx *c, const json_t *o, rlp_chat_options *opts)
{
    const json_t *kw = json_object_get(o, "chat_template_kwargs");
    int top = -1, inner = -1;
    if (!absent(kw)) {
        if (!json_is_object(kw))
            return fail(c, "'chat_template_kwargs' must be an object");
        if (!absent(json_object_get(kw, "enable_thinking")) &&
            get_bool(c, kw, "enable_thinking", 1, &inner))
            return fail(c, "'chat_template_kwargs.enable_thinking' must be a boolean");
    }
    if (!absent(json_object_get(o, "enable_thinking")) && get_bool(c, o, "enable_thinking", 1, &top))
        return -1;
    if (top >= 0 && inner >= 0 && top != inner)
        return fail(c, "'enable_thinking' and 'chat_template_kwargs.enable_thinking' disagree");
    opts->enable_thinking = inner >= 0 ? inner : top >= 0 ? top : 1;
    return 0;
}

/* messages → chat template → prompt ids. Message content is never parsed
 * for special tokens (the template API encodes it apart from its
 * scaffolding: public-bugs case #1). */
static int parse_messages(pctx *c, const json_t *o, serve_job *job, const serve_tools *tools)
{
    const json_t *msgs = json_object_get(o, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0 || json_array_size(msgs) > SERVE_MAX_MESSAGES)
        return fail(c, "'messages' must be a non-empty array of at most %d messages", SERVE_MAX_MESSAGES);
    size_t n = json_array_size(msgs);
    int agp = 1;
    if (get_bool(c, o, "add_generation_prompt", 1, &agp))
        return -1;
    rlp_chat_options copts = RLP_CHAT_OPTIONS_INIT;
    if (parse_chat_kwargs(c, o, &copts))
        return -1;
    copts.add_generation_prompt = agp;
    const char *tname = c->srv->tok ? rlp_tokenizer_chat_template(c->srv->tok) : NULL;
    if (tools->tools && tname && strcmp(tname, "gemma3") == 0)
        return fail(c, "'tools': the model's chat template (gemma3) has no tool-calling format "
                       "(Gemma 3 ships none), so tools are refused rather than guessed");
    /* one more slot: the system message that carries the tools when the
     * request has none */
    rlp_chat_message *cm = calloc(n + 1, sizeof *cm);
    char **contents = calloc(n + 1, sizeof *contents);
    int rc = cm && contents ? 0 : fail(c, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        const json_t *m = json_array_get(msgs, i);
        const json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            rc = fail(c, "'messages'[%zu] must be an object with a string 'role'", i);
            break;
        }
        if (!(contents[i] = message_content(c, m, i))) {
            rc = -1;
            break;
        }
        const json_t *calls = json_object_get(m, "tool_calls"), *call_id = json_object_get(m, "tool_call_id");
        if (!absent(calls)) {
            if (strcmp(json_string_value(role), "assistant") != 0) {
                rc = fail(c, "'messages'[%zu].tool_calls: only assistant messages carry tool calls", i);
                break;
            }
            char *with_calls = serve_tools_assistant(contents[i], calls, i, c->err, c->errlen);
            if (!with_calls) {
                rc = -1;
                break;
            }
            free(contents[i]);
            contents[i] = with_calls;
        }
        if (!absent(call_id) && !json_is_string(call_id)) {
            rc = fail(c, "'messages'[%zu].tool_call_id must be a string", i);
            break;
        }
        cm[i].role = json_string_value(role);
        cm[i].content = contents[i];
    }
    if (!rc && tools->tools) {
        bool has_system = strcmp(cm[0].role, "system") == 0;
        char *sys = serve_tools_system(tname, has_system ? contents[0] : NULL, tools->tools);
        if (!sys) {
            rc = fail(c, "out of memory");
        } else if (has_system) {
            free(contents[0]);
            contents[0] = sys;
            cm[0].content = sys;
        } else {
            memmove(cm + 1, cm, n * sizeof *cm);
            memmove(contents + 1, contents, n * sizeof *contents);
            contents[0] = sys;
            cm[0].role = "system";
            cm[0].content = sys;
            n++;
        }
    }
    size_t need = 0, got = 0;
    int32_t *ids = NULL;
    if (!rc) {
        int r = rlp_tokenizer_apply_chat_template_opts(c->srv->tok, cm, n, &copts, NULL, 0, &need);
        if (r != RLP_OK && r != RLP_E_OVERFLOW)
            rc = fail(c, "'messages': %s", rlp_error_last());
    }
    if (!rc && !(ids = malloc((need ? need : 1) * sizeof *ids)))
        rc = fail(c, "out of memory");
    if (!rc && rlp_tokenizer_apply_chat_template_opts(c->srv->tok, cm, n, &copts, ids, need, &got) != RLP_OK)
        rc = fail(c, "'messages': %s", rlp_error_last());
    for (size_t i = 0; contents && i < n; i++)
        free(contents[i]);
    free(contents);
    free(cm);
    if (rc) {
        free(ids);
        return rc;
    }
    return add_prompt(c, job, ids, got);
}

serve_job *serve_parse_chat(serve_server *srv, const char *body, size_t len, char *err, size_t errlen)
{
    pctx c = {srv, err, errlen};
    json_t *o = serve_parse_body(body, len, err, errlen);
    if (!o)
        return NULL;
    serve_job *job = job_new(srv, JOB_CHAT);
    int rc = job ? 0 : fail(&c, "out of memory"), logprobs = 0;
    long long top = 0;
    serve_tools tools = {0};
    if (!rc && serve_tools_parse(&tools, o, err, errlen))
        rc = -1;
    if (!rc)
        rc = parse_messages(&c, o, job, &tools);
    if (!rc) {
        /* OpenAI's newer name wins; the default fills the context */
        const char *key = absent(json_object_get(o, "max_completion_tokens")) ? "max_tokens"
                                                                               : "max_completion_tokens";
        long long room = (long long)srv->cfg.max_seq_len - (long long)job->prompt_lens[0];
        rc = parse_sampling(&c, o, job, key, room > 0 ? room : 1);
    }
    if (!rc)
        rc = get_bool(&c, o, "logprobs", 0, &logprobs) ||
             get_int(&c, o, "top_logprobs", 0, 0, SERVE_MAX_LOGPROBS, &top);
    if (!rc && top > 0 && !logprobs)
        rc = fail(&c, "'top_logprobs' needs 'logprobs': true");
    if (!rc) {
        job->tool_parse = tools.parse;
        job->tool_parallel = tools.parallel;
    }
    if (!rc)
        rc = finish_job(&c, job);
    json_decref(o);
    if (rc) {
        serve_job_free(job);
        return NULL;
    }
    job->logprobs = logprobs;
    return job;
}

/* ---- responses ------------------------------------------------------------ */

static json_t *ids_array(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static json_t *token_string(const serve_server *srv, const serve_job *job, int32_t id)
{
    if (job->tokens_as_ids) {
        char buf[32];
        snprintf(buf, sizeof buf, "token_id:%d", id);
        return json_string(buf);
    }
    const char *piece = "";
    size_t len = 0;
    rlp_tokenizer_token_text(&piece, &len, srv->tok, id);
    return serve_json_text(piece, len);
}

/* OpenAI chat logprobs entry; `id` as llama.cpp's server has it. */
static json_t *chat_logprob_entry(const serve_server *srv, int32_t id, float lp)
{
    const char *piece = "";
    size_t len = 0;
    rlp_tokenizer_token_text(&piece, &len, srv->tok, id);
    json_t *bytes = json_array();
    for (size_t i = 0; bytes && i < len; i++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:o?, s:f, s:o?, s:[], s:I}", "token", serve_json_text(piece, len), "logprob", (double)lp,
                     "bytes", bytes, "top_logprobs", "id", (json_int_t)id);
}

static json_t *base_object(const serve_server *srv, const serve_job *job, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", srv->cfg.model_name);
}

/* vLLM's logprobs object of a completion; text_offset counts code points
 * of the completion text before each token (the detokenizer's deltas).
 * A model without a tokenizer (token-id prompts only) has no text: every
 * offset is 0, and the ids and logprobs are still there. */
static json_t *completion_logprobs(const serve_server *srv, const serve_job *job, const rlp_trajectory *t)
{
    rlp_detokenizer *det = NULL;
    if (srv->tok && rlp_detokenizer_create(&det, srv->tok, 0) != RLP_OK)
        return NULL;
    json_t *tokens = json_array(), *lps = json_array(), *offsets = json_array();
    size_t chars = 0, text_chars = utf8_chars(t->completion_text, strlen(t->completion_text));
    for (size_t i = 0; tokens && lps && offsets && i < t->n_completion_tokens; i++) {
        json_array_append_new(tokens, token_string(srv, job, t->completion_tokens[i]));
        json_array_append_new(lps, json_real((double)t->logprobs[i]));
        json_array_append_new(offsets, json_integer((json_int_t)(chars < text_chars ? chars : text_chars)));
        const char *d = "";
        size_t dl = 0;
        if (det && rlp_detokenizer_push(&d, &dl, det, t->completion_tokens[i]) == RLP_OK)
            chars += utf8_chars(d, dl);
    }
    rlp_detokenizer_free(det);
    return json_pack("{s:o?, s:o?, s:o?, s:n}", "tokens", tokens, "token_logprobs", lps, "text_offset", offsets,
                     "top_logprobs");
}

static json_t *chat_logprobs(const serve_server *srv, const rlp_trajectory *t)
{
    json_t *content = json_array();
    for (size_t i = 0; content && i < t->n_completion_tokens; i++)
        json_array_append_new(content, chat_logprob_entry(srv, t->completion_tokens[i], t->logprobs[i]));
    return json_pack("{s:o?}", "content", content);
}

/* vLLM's stop_reason: the stop string matched, the stop token id hit, or null (EOS, length). */
static json_t *stop_reason(const serve_job *job, const rlp_trajectory *t)
{
    if (t->stop_index >= 0 && (size_t)t->stop_index < job->sampling.n_stop)
        return json_string(job->stop[t->stop_index]);
    if (t->finish_reason == RLP_FINISH_STOP && t->n_completion_tokens > 0) {
        int32_t last = t->completion_tokens[t->n_completion_tokens - 1];
        for (size_t i = 0; i < job->sampling.n_stop_token_ids; i++)
            if (job->stop_ids[i] == last)
                return json_integer(last);
    }
    return json_null();
}

json_t *serve_response(serve_server *srv, const serve_job *job)
{
    size_t count = 0;
    if (rlp_batch_size(&count, job->result) != RLP_OK)
        return NULL;
    json_t *root = base_object(srv, job, job->kind == JOB_CHAT ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    uint64_t prompt_tokens = 0, completion_tokens = 0, wv = UINT64_MAX;
    bool ok = root && choices && json_object_set_new(root, "choices", choices) == 0;
    for (size_t k = 0; k < job->n_prompts; k++)
        prompt_tokens += job->prompt_lens[k];
    for (size_t i = 0; ok && i < count; i++) {
        rlp_trajectory t = {.version = RLP_TRAJECTORY_VERSION};
        ok = rlp_batch_get(&t, job->result, i) == RLP_OK;
        if (!ok)
            break;
        const char *text = t.completion_text ? t.completion_text : "";
        t.completion_text = text;
        const char *fr = finish_reason_name(t.finish_reason);
        json_t *ch = json_pack("{s:I}", "index", (json_int_t)i);
        if (!ch) {
            ok = false;
            break;
        }
        json_array_append_new(choices, ch);
        if (job->kind == JOB_CHAT) {
            size_t called = 0;
            json_t *msg =
                serve_tools_message(text, strlen(text), job->tool_parse, job->tool_parallel, job->id, i, &called);
            if (!msg) {
                ok = false;
                break;
            }
            if (called)
                fr = "tool_calls"; /* as vLLM: also when the calls ended at max_tokens */
            json_object_set_new(ch, "message", msg);
            json_object_set_new(ch, "logprobs", job->logprobs > 0 ? chat_logprobs(srv, &t) : json_null());
        } else {
            json_object_set_new(ch, "text", serve_json_text(text, strlen(text)));
            json_object_set_new(ch, "logprobs",
                                job->logprobs >= 0 ? completion_logprobs(srv, job, &t) : json_null());
        }
        json_object_set_new(ch, "finish_reason", fr ? json_string(fr) : json_null());
        json_object_set_new(ch, "stop_reason", stop_reason(job, &t));
        json_object_set_new(ch, "token_ids", ids_array(t.completion_tokens, t.n_completion_tokens));
        json_object_set_new(ch, "weight_version", json_integer((json_int_t)t.policy_version));
        if (job->return_token_ids) {
            size_t k = i / job->sampling.n;
            json_object_set_new(ch, "prompt_token_ids", ids_array(job->prompts[k], job->prompt_lens[k]));
        }
        completion_tokens += t.n_completion_tokens;
        if (t.policy_version < wv)
            wv = t.policy_version;
    }
    if (wv == UINT64_MAX)
        rlp_rollout_engine_version(&wv, srv->engine);
    /* the oldest weights any of its samples started with: the staleness that counts */
    ok = ok && json_object_set_new(root, "weight_version", json_integer((json_int_t)wv)) == 0 &&
         json_object_set_new(root, "usage",
                             json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens,
                                       "completion_tokens", (json_int_t)completion_tokens, "total_tokens",
                                       (json_int_t)(prompt_tokens + completion_tokens))) == 0;
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* ---- streaming ------------------------------------------------------------ */

/* Under srv->mu. A failed growth ends the stream (nothing half-written). */
static void sse_append(serve_job *job, const char *s, size_t n)
{
    if (job->sse_done)
        return;
    if (job->sse_pos == job->sse_len)
        job->sse_pos = job->sse_len = 0;
    if (job->sse_len + n > job->sse_cap) {
        size_t cap = (job->sse_len + n) * 2;
        char *b = realloc(job->sse, cap);
        if (!b) {
            job->sse_done = 1;
            return;
        }
        job->sse = b;
        job->sse_cap = cap;
    }
    memcpy(job->sse + job->sse_len, s, n);
    job->sse_len += n;
}

static void sse_append_event(serve_job *job, const char *data)
{
    sse_append(job, "data: ", 6);
    sse_append(job, data, strlen(data));
    sse_append(job, "\n\n", 2);
}

void serve_stream_fail(serve_job *job, const char *message)
{
    json_t *e = json_pack("{s:{s:s, s:s}}", "error", "message", message ? message : "generation failed", "type",
                          "server_error");
    char *s = e ? json_dumps(e, DUMP_FLAGS) : NULL;
    if (s)
        sse_append_event(job, s);
    sse_append_event(job, "[DONE]");
    job->sse_done = 1;
    pthread_cond_broadcast(&job->cv);
    free(s);
    json_decref(e);
}

/* A chat choice with tools: its text is kept until it ends; the last
 * chunk's delta then holds the content outside the tool calls and the
 * calls (each with its "index", as OpenAI streams them), and its
 * finish_reason is "tool_calls" when there are any. Earlier chunks carry
 * the token ids and logprobs without content. */
static void stream_tools(serve_job *job, size_t choice, const rlp_stream_event *ev, bool final, json_t *ch,
                         json_t *delta)
{
    serve_text *t = &job->choice_text[choice];
    size_t add = ev->text ? ev->text_len : 0;
    if (add && t->n + add > t->cap) {
        size_t cap = (t->n + add) * 2;
        char *p = realloc(t->p, cap);
        if (p) {
            t->p = p;
            t->cap = cap;
        }
    }
    if (add && t->n + add <= t->cap) {
        memcpy(t->p + t->n, ev->text, add);
        t->n += add;
    }
    if (!final)
        return;
    size_t called = 0;
    json_t *msg = serve_tools_message(t->p ? t->p : "", t->n, 1, job->tool_parallel, job->id, choice, &called);
    if (!msg) { /* out of memory: the text as it is */
        json_object_set_new(delta, "content", serve_json_text(t->p ? t->p : "", t->n));
        return;
    }
    const json_t *content = json_object_get(msg, "content"), *calls = json_object_get(msg, "tool_calls");
    if (json_is_string(content))
        json_object_set(delta, "content", (json_t *)content);
    if (calls) {
        size_t k;
        json_t *call;
        json_array_foreach(calls, k, call)
            json_object_set_new(call, "index", json_integer((json_int_t)k));
        json_object_set(delta, "tool_calls", (json_t *)calls);
        json_object_set_new(ch, "finish_reason", json_string("tool_calls"));
    }
    json_decref(msg);
}

void serve_stream_event(serve_server *srv, serve_job *job, size_t prompt, const rlp_stream_event *ev)
{
    size_t choice = prompt * job->sampling.n + ev->sample_index;
    bool has_token = ev->token >= 0, final = ev->finish_reason != RLP_FINISH_NONE;
    const char *fr = finish_reason_name(ev->finish_reason);
    json_t *text = serve_json_text(ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
    size_t offset = job->choice_chars[choice];
    job->choice_chars[choice] += utf8_chars(ev->text ? ev->text : "", ev->text ? ev->text_len : 0);
    json_t *ch = json_pack("{s:I, s:o?, s:o?}", "index", (json_int_t)choice, "finish_reason",
                           fr ? json_string(fr) : json_null(), "token_ids",
                           has_token ? ids_array(&ev->token, 1) : json_array());
    if (job->kind == JOB_CHAT) {
        json_t *delta = json_object();
        if (!job->choice_started[choice]) {
            json_object_set_new(delta, "role", json_string("assistant"));
            job->choice_started[choice] = 1;
        }
        if (job->choice_text)
            stream_tools(job, choice, ev, final, ch, delta);
        else if (!final || ev->text_len > 0)
            json_object_set(delta, "content", text);
        json_object_set_new(ch, "delta", delta);
        json_object_set_new(ch, "logprobs", job->logprobs > 0 && has_token
                                                ? json_pack("{s:[o?]}", "content",
                                                            chat_logprob_entry(srv, ev->token, ev->logprob))
                                                : json_null());
    } else {
        json_object_set(ch, "text", text);
        json_t *lp = json_null();
        if (job->logprobs >= 0)
            lp = has_token ? json_pack("{s:[o?], s:[f], s:[I], s:n}", "tokens", token_string(srv, job, ev->token),
                                       "token_logprobs", (double)ev->logprob, "text_offset", (json_int_t)offset,
                                       "top_logprobs")
                           : json_pack("{s:[], s:[], s:[], s:n}", "tokens", "token_logprobs", "text_offset",
                                       "top_logprobs");
        json_object_set_new(ch, "logprobs", lp);
    }
    json_decref(text);
    job->completion_tokens += has_token;
    if (final)
        job->remaining--;
    json_t *chunk = base_object(srv, job, job->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(chunk, "choices", json_pack("[o?]", ch));
    /* a chunk's version is that of the weights that made its token; the
     * final event (no token) reports the rollout's start, so it keeps the
     * version of the choice's last token instead: versions never go back
     * within a choice, also across a weight update mid-stream */
    uint64_t version = ev->policy_version;
    if (has_token)
        job->choice_version[choice] = ev->policy_version + 1;
    else if (job->choice_version[choice])
        version = job->choice_version[choice] - 1;
    json_object_set_new(chunk, "weight_version", json_integer((json_int_t)version));
    char *s = json_dumps(chunk, DUMP_FLAGS);
    json_decref(chunk);
    char *usage = NULL;
    if (final && job->remaining == 0 && job->include_usage) {
        uint64_t prompt_tokens = 0;
        for (size_t k = 0; k < job->n_prompts; k++)
            prompt_tokens += job->prompt_lens[k];
        json_t *u = base_object(srv, job, job->kind == JOB_CHAT ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens,
                                                  "completion_tokens", (json_int_t)job->completion_tokens,
                                                  "total_tokens",
                                                  (json_int_t)(prompt_tokens + job->completion_tokens)));
        usage = json_dumps(u, DUMP_FLAGS);
        json_decref(u);
    }
    pthread_mutex_lock(&srv->mu);
    if (s)
        sse_append_event(job, s);
    if (final && job->remaining == 0) {
        if (usage)
            sse_append_event(job, usage);
        sse_append_event(job, "[DONE]");
        job->sse_done = 1;
    }
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&srv->mu);
    free(s);
    free(usage);
}
