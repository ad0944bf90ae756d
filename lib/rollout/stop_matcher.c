/* Stop strings and stop ids over one streamed completion (see
 * stop_matcher.h), on top of the public streaming detokenizer: a stop
 * string is matched on the decoded text wherever token boundaries fall,
 * and text that may still turn into a stop string is held back. It decides
 * when generation ends and what text is final; it never drops token ids. */
#include "rollout/stop_matcher.h"

#include "core/error.h"
#include "model/tok_utf8.h"

#include <stdlib.h>
#include <string.h>

typedef struct stop_str {
    char *s;      /* NUL-terminated copy */
    size_t len;
    size_t *fail; /* (len) KMP failure function: fail[i] = longest proper border of s[0..i] */
    size_t state; /* bytes of s matched by the end of the text: the longest suffix of the
                     text that is a prefix of s (a KMP automaton run over the text) */
} stop_str;

struct rlpi_stop_matcher {
    const rlp_tokenizer *tok;
    size_t vocab;
    rlp_detokenizer *det; /* NULL after reset until the next push */
    stop_str *stops;      /* (n_stop) */
    size_t n_stop;
    int32_t *stop_ids;    /* (n_stop_ids) */
    size_t n_stop_ids;
    bool include;
    char *text;           /* the decoded text so far (whole characters), NUL-terminated */
    size_t len, cap;
    size_t sent;          /* text[0..sent) has been streamed */
    char *out;            /* the last delta, NUL-terminated */
    size_t olen, ocap;
    bool done;            /* stopped or finished: no more tokens */
    int matched;
    int32_t matched_id;
};

static void stops_free(stop_str *st, size_t n)
{
    for (size_t i = 0; st && i < n; i++) {
        free(st[i].s);
        free(st[i].fail);
    }
    free(st);
}

void rlpi_stop_matcher_free(rlpi_stop_matcher *m)
{
    if (!m)
        return;
    rlp_detokenizer_free(m->det);
    stops_free(m->stops, m->n_stop);
    free(m->stop_ids);
    free(m->text);
    free(m->out);
    free(m);
}

static void kmp_build(stop_str *st)
{
    const char *s = st->s;
    st->fail[0] = 0;
    size_t k = 0;
    for (size_t i = 1; i < st->len; i++) {
        while (k > 0 && s[i] != s[k])
            k = st->fail[k - 1];
        if (s[i] == s[k])
            k++;
        st->fail[i] = k;
    }
}

int rlpi_stop_matcher_create(rlpi_stop_matcher **out, const rlp_tokenizer *tok,
                             const rlpi_stop_config *cfg)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(tok, "tok is NULL");
    RLPI_CHECK_ARG(cfg, "cfg is NULL");
    RLPI_CHECK_ARG(cfg->n_stop == 0 || cfg->stop, "cfg->stop is NULL with n_stop > 0");
    RLPI_CHECK_ARG(cfg->n_stop_ids == 0 || cfg->stop_ids,
                   "cfg->stop_ids is NULL with n_stop_ids > 0");
    size_t vocab;
    int rc = rlp_tokenizer_vocab_size(&vocab, tok);
    if (rc)
        return rc;
    for (size_t i = 0; i < cfg->n_stop; i++) {
        const char *s = cfg->stop[i];
        if (!s || !*s)
            return rlpi_error_set(RLP_E_INVALID_ARG, "stop matcher: stop[%zu] is %s", i,
                                  s ? "empty" : "NULL");
        if (!rlpi_utf8_valid((const unsigned char *)s, strlen(s)))
            return rlpi_error_set(RLP_E_INVALID_ARG, "stop matcher: stop[%zu] is not valid UTF-8",
                                  i);
    }
    for (size_t i = 0; i < cfg->n_stop_ids; i++) {
        int32_t id = cfg->stop_ids[i];
        if (id < 0 || (size_t)id >= vocab)
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "stop matcher: stop_ids[%zu] = %d is outside the vocabulary (%zu)",
                                  i, (int)id, vocab);
    }
    rlpi_stop_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return rlpi_error_set(RLP_E_NOMEM, "stop matcher: out of memory");
    m->tok = tok;
    m->vocab = vocab;
    m->include = cfg->include_stop_str;
    m->matched = -1;
    m->matched_id = -1;
    if (cfg->n_stop) {
        m->stops = calloc(cfg->n_stop, sizeof *m->stops);
        if (!m->stops)
            goto nomem;
        m->n_stop = cfg->n_stop;
        for (size_t i = 0; i < cfg->n_stop; i++) {
            stop_str *st = &m->stops[i];
            st->len = strlen(cfg->stop[i]);
            st->s = malloc(st->len + 1);
            st->fail = malloc(st->len * sizeof *st->fail);
            if (!st->s || !st->fail)
                goto nomem;
            memcpy(st->s, cfg->stop[i], st->len + 1);
            kmp_build(st);
        }
    }
    if (cfg->n_stop_ids) {
        m->stop_ids = malloc(cfg->n_stop_ids * sizeof *m->stop_ids);
        if (!m->stop_ids)
            goto nomem;
        memcpy(m->stop_ids, cfg->stop_ids, cfg->n_stop_ids * sizeof *m->stop_ids);
        m->n_stop_ids = cfg->n_stop_ids;
    }
    *out = m;
    return RLP_OK;
nomem:
    rlpi_stop_matcher_free(m);
    return rlpi_error_set(RLP_E_NOMEM, "stop matcher: out of memory");
}

void rlpi_stop_matcher_reset(rlpi_stop_matcher *m)
{
    if (!m)
        return;
    /* a fresh decoder on the next push: flushing could fail (no memory) and
     * leave stale bytes, dropping it cannot */
    rlp_detokenizer_free(m->det);
    m->det = NULL;
    for (size_t i = 0; i < m->n_stop; i++)
        m->stops[i].state = 0;
    m->len = 0;
    if (m->text)
        m->text[0] = '\0';
    m->sent = 0;
    m->olen = 0;
    m->done = false;
    m->matched = -1;
    m->matched_id = -1;
}

/* Appends the new text and runs every stop string's automaton over it.
 * Returns the index of the stop string completed first (the smallest end
 * offset; among those ending there, the longest, then the lowest index),
 * with its end in *end, or -1. */
static int append_and_match(rlpi_stop_matcher *m, const char *s, size_t n, size_t *end)
{
    size_t old = m->len;
    if (!rlpi_buf_append(&m->text, &m->len, &m->cap, s, n))
        return -2;
    for (size_t i = old; i < m->len; i++) {
        unsigned char c = (unsigned char)m->text[i];
        int best = -1;
        for (size_t j = 0; j < m->n_stop; j++) {
            stop_str *st = &m->stops[j];
            size_t k = st->state;
            while (k > 0 && (unsigned char)st->s[k] != c)
                k = st->fail[k - 1];
            if ((unsigned char)st->s[k] == c)
                k++;
            st->state = k;
            if (k == st->len && (best < 0 || st->len > m->stops[best].len))
                best = (int)j;
        }
        if (best >= 0) {
            *end = i + 1;
            return best;
        }
    }
    return -1;
}

/* Sets the delta to text[sent..upto) and marks it streamed. */
static int emit(rlpi_stop_matcher *m, size_t upto, const char **delta, size_t *delta_len)
{
    m->olen = 0;
    size_t n = upto > m->sent ? upto - m->sent : 0;
    if (!rlpi_buf_append(&m->out, &m->olen, &m->ocap, m->text ? m->text + m->sent : "", n))
        return rlpi_error_set(RLP_E_NOMEM, "stop matcher: out of memory");
    if (upto > m->sent)
        m->sent = upto;
    *delta = m->out;
    *delta_len = m->olen;
    return RLP_OK;
}

/* Truncates the text at the matched stop string (its start, or its end
 * with include_stop_str) and ends the completion. */
static void cut_at_stop(rlpi_stop_matcher *m, int idx, size_t end)
{
    size_t keep = m->include ? end : end - m->stops[idx].len;
    m->len = keep;
    m->text[keep] = '\0';
    m->matched = idx;
    m->done = true;
}

/* Bytes at the end of the text that might still begin a stop string (with
 * include_stop_str nothing is held: text before the current end stays in
 * the completion whether or not a stop string completes later). */
static size_t held_back(const rlpi_stop_matcher *m)
{
    if (m->include)
        return 0;
    size_t h = 0;
    for (size_t j = 0; j < m->n_stop; j++)
        if (m->stops[j].state > h)
            h = m->stops[j].state;
    /* never hold what was sent; cannot happen (a held suffix only grows
     * into a longer prefix), kept as a guard */
    return h < m->len - m->sent ? h : m->len - m->sent;
}

static int ensure_det(rlpi_stop_matcher *m)
{
    if (m->det)
        return RLP_OK;
    /* special (control) tokens add no text, as in vLLM's default
     * skip_special_tokens; stop ids never reach the decoder at all */
    return rlp_detokenizer_create(&m->det, m->tok, RLP_DECODE_SKIP_SPECIAL);
}

/* Ends the stream: the decoder's held bytes (an incomplete character,
 * decoded lossily) join the text, and everything is released. */
static int end_stream(rlpi_stop_matcher *m, const char **delta, size_t *delta_len)
{
    int rc = ensure_det(m);
    if (rc)
        return rc;
    const char *t;
    size_t tl;
    rc = rlp_detokenizer_flush(&t, &tl, m->det);
    if (rc)
        return rc;
    size_t end = 0;
    int idx = append_and_match(m, t, tl, &end);
    if (idx == -2)
        return rlpi_error_set(RLP_E_NOMEM, "stop matcher: out of memory");
    if (idx >= 0)
        cut_at_stop(m, idx, end);
    m->done = true;
    return emit(m, m->len, delta, delta_len);
}

int rlpi_stop_matcher_push(rlpi_stop_matcher *m, int32_t token, bool *stopped, const char **delta,
                           size_t *delta_len)
{
    RLPI_CHECK_ARG(m, "m is NULL");
    RLPI_CHECK_ARG(stopped, "stopped is NULL");
    RLPI_CHECK_ARG(delta, "delta is NULL");
    RLPI_CHECK_ARG(delta_len, "delta_len is NULL");
    if (m->done)
        return rlpi_error_set(RLP_E_STATE,
                              "rlpi_stop_matcher_push: the completion has ended (stop or finish); "
                              "reset the matcher first");
    if (token < 0 || (size_t)token >= m->vocab)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "rlpi_stop_matcher_push: token %d is outside the vocabulary (%zu)",
                              (int)token, m->vocab);
    for (size_t i = 0; i < m->n_stop_ids; i++) {
        if (m->stop_ids[i] == token) {
            int rc = end_stream(m, delta, delta_len);
            if (rc)
                return rc;
            m->matched_id = token;
            *stopped = true;
            return RLP_OK;
        }
    }
    int rc = ensure_det(m);
    if (rc)
        return rc;
    const char *t;
    size_t tl;
    rc = rlp_detokenizer_push(&t, &tl, m->det, token);
    if (rc)
        return rc;
    size_t end = 0;
    int idx = append_and_match(m, t, tl, &end);
    if (idx == -2)
        return rlpi_error_set(RLP_E_NOMEM, "stop matcher: out of memory");
    if (idx >= 0) {
        /* the stop may end before this token's text does: what follows it
         * is dropped, and the held-back start of the stop is never sent */
        cut_at_stop(m, idx, end);
        *stopped = true;
        return emit(m, m->len, delta, delta_len);
    }
    *stopped = false;
    return emit(m, m->len - held_back(m), delta, delta_len);
}

int rlpi_stop_matcher_finish(rlpi_stop_matcher *m, const char **delta, size_t *delta_len)
{
    RLPI_CHECK_ARG(m, "m is NULL");
    RLPI_CHECK_ARG(delta, "delta is NULL");
    RLPI_CHECK_ARG(delta_len, "delta_len is NULL");
    if (m->done) /* after a stop everything is out already */
        return emit(m, m->sent, delta, delta_len);
    return end_stream(m, delta, delta_len);
}

const char *rlpi_stop_matcher_text(const rlpi_stop_matcher *m, size_t *len)
{
    if (!m || !m->text) {
        if (len)
            *len = 0;
        return "";
    }
    if (len)
        *len = m->len;
    return m->text;
}

int rlpi_stop_matcher_matched_string(const rlpi_stop_matcher *m)
{
    return m ? m->matched : -1;
}

int32_t rlpi_stop_matcher_matched_id(const rlpi_stop_matcher *m)
{
    return m ? m->matched_id : -1;
}
