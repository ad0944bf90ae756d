/* Rewards of tool-using episodes: "lookup_em" (SQuAD-normalised exact
 * match or token F1 of the last <answer> against the reference, as
 * ASearcher and Search-R1 score), "search_format" (the ASearcher tags are
 * well formed) and "tool_call_format" (every Hermes <tool_call> parses and
 * the episode ends in an answer). They read only the completion text (the
 * model's turns and the observations between them); no tool runs here. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/text.h"
#include "tools/tool_call.h"

#include <stdlib.h>
#include <string.h>

/* ---- SQuAD normalisation ---- */

/* The SQuAD v1.1 evaluation script's normalize_answer (lower-case, drop
 * ASCII punctuation, drop the articles a/an/the, split on whitespace), as
 * a token list: toks[i] = [starts[i], starts[i] + lens[i]) of buf. */
typedef struct norm {
    char *buf;
    size_t *start, *len;
    size_t n;
} norm;

static int is_punct(unsigned char c)
{
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

static void norm_free(norm *t)
{
    free(t->buf);
    free(t->start);
    free(t->len);
}

static int normalize(norm *t, const char *s, size_t n)
{
    memset(t, 0, sizeof *t);
    t->buf = malloc(n + 1);
    t->start = malloc((n / 2 + 1) * sizeof *t->start);
    t->len = malloc((n / 2 + 1) * sizeof *t->len);
    if (!t->buf || !t->start || !t->len) {
        norm_free(t);
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!is_punct(c))
            t->buf[m++] = (char)rlpi_lower(c);
    }
    size_t i = 0;
    while (i < m) {
        while (i < m && rlpi_is_space((unsigned char)t->buf[i]))
            i++;
        size_t b = i;
        while (i < m && !rlpi_is_space((unsigned char)t->buf[i]))
            i++;
        size_t len = i - b;
        if (!len)
            break;
        if ((len == 1 && t->buf[b] == 'a') || (len == 2 && !memcmp(t->buf + b, "an", 2)) ||
            (len == 3 && !memcmp(t->buf + b, "the", 3)))
            continue;
        t->start[t->n] = b;
        t->len[t->n] = len;
        t->n++;
    }
    return 0;
}

static int tok_eq(const norm *a, size_t i, const norm *b, size_t j)
{
    return a->len[i] == b->len[j] && !memcmp(a->buf + a->start[i], b->buf + b->start[j], a->len[i]);
}

/* SQuAD's exact match (1/0) and F1 (multiset token overlap). */
static double em_or_f1(const norm *p, const norm *g, int f1)
{
    if (!f1 || p->n == 0 || g->n == 0) {
        if (p->n != g->n)
            return 0.0;
        for (size_t i = 0; i < p->n; i++)
            if (!tok_eq(p, i, g, i))
                return 0.0;
        return 1.0;
    }
    /* answers are a few tokens: the quadratic matching is fine, and bounded below */
    unsigned char used[256] = {0};
    size_t ng = g->n < sizeof used ? g->n : sizeof used;
    size_t common = 0;
    for (size_t i = 0; i < p->n && i < 4096; i++)
        for (size_t j = 0; j < ng; j++)
            if (!used[j] && tok_eq(p, i, g, j)) {
                used[j] = 1;
                common++;
                break;
            }
    if (!common)
        return 0.0;
    double prec = (double)common / (double)p->n, rec = (double)common / (double)g->n;
    return 2.0 * prec * rec / (prec + rec);
}

typedef struct em_cfg {
    int f1;
    double wrong;
} em_cfg;

static int lookup_em_score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const em_cfg *c = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        if (!req[i].reference) {
            r->valid = 0;
            rlpi_reason(r, "no reference (metadata \"reference\")");
            continue;
        }
        size_t b, e;
        if (!rlpi_last_block(req[i].completion_text, req[i].completion_len, "<answer>", "</answer>", &b, &e)) {
            r->score = c->wrong;
            rlpi_reason(r, "no <answer> block");
            continue;
        }
        norm p, g;
        if (normalize(&p, req[i].completion_text + b, e - b))
            return rlpi_error_set(RLP_E_NOMEM, "lookup_em: out of memory");
        if (normalize(&g, req[i].reference, strlen(req[i].reference))) {
            norm_free(&p);
            return rlpi_error_set(RLP_E_NOMEM, "lookup_em: out of memory");
        }
        double s = em_or_f1(&p, &g, c->f1);
        norm_free(&p);
        norm_free(&g);
        r->score = s > 0 ? s : c->wrong;
        if (c->f1)
            rlpi_reason(r, "token F1 %.3f", s);
        else
            rlpi_reason(r, s > 0 ? "match" : "no match");
    }
    return 0;
}

static void destroy(void *impl)
{
    free(impl);
}

static const rlpi_scorer_ops em_ops = {lookup_em_score, destroy};

int rlpi_builtin_lookup_em(rlpi_scorer **out, rlpi_opts *o)
{
    em_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    int rc;
    if ((rc = rlpi_opt_bool(o, "f1", &c->f1)) || (rc = rlpi_opt_double(o, "wrong", &c->wrong))) {
        free(c);
        return rc;
    }
    return rlpi_scorer_create(out, &em_ops, c, 1);
}

/* ---- formats ---- */

/* The text after the last answer may hold only whitespace and the
 * end-of-turn marks a decoder leaves in the text. */
static int only_end_marks(const char *s, size_t n)
{
    static const char *const marks[] = {"<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>"};
    size_t i = 0;
    while (i < n) {
        if (rlpi_is_space((unsigned char)s[i])) {
            i++;
            continue;
        }
        size_t k = 0;
        for (; k < sizeof marks / sizeof marks[0]; k++) {
            size_t m = strlen(marks[k]);
            if (n - i >= m && !memcmp(s + i, marks[k], m)) {
                i += m;
                break;
            }
        }
        if (k == sizeof marks / sizeof marks[0])
            return 0;
    }
    return 1;
}

/* Every open tag of a pair closed before the next open; returns 0 or why not. */
static const char *pairs_closed(const char *s, size_t n, const char *open, const char *close)
{
    size_t lo = strlen(open), lc = strlen(close);
    size_t i = 0;
    int inside = 0;
    while (i < n) {
        if (n - i >= lo && !memcmp(s + i, open, lo)) {
            if (inside)
                return "a tag opened twice";
            inside = 1;
            i += lo;
        } else if (n - i >= lc && !memcmp(s + i, close, lc)) {
            if (!inside)
                return "a close tag without its open tag";
            inside = 0;
            i += lc;
        } else {
            i++;
        }
    }
    return inside ? "an open tag never closed" : NULL;
}

typedef struct fmt_cfg {
    double correct, wrong;
} fmt_cfg;

static int search_format_score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n,
                               uint8_t *fail)
{
    (void)fail;
    const fmt_cfg *c = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        const char *s = req[i].completion_text;
        size_t len = req[i].completion_len;
        const char *why = pairs_closed(s, len, "<search>", "</search>");
        const char *what = "<search>";
        if (!why) {
            why = pairs_closed(s, len, "<access>", "</access>");
            what = "<access>";
        }
        if (!why) {
            what = "<answer>";
            size_t n_open = rlpi_count(s, len, "<answer>", 8, 0), n_close = rlpi_count(s, len, "</answer>", 9, 0);
            const char *close = rlpi_find(s, len, "</answer>", 9);
            const char *open = rlpi_find(s, len, "<answer>", 8);
            if (n_open != 1 || n_close != 1)
                why = "not exactly one answer block";
            else if (close < open)
                why = "</answer> before <answer>";
            else if (!only_end_marks(close + 9, len - (size_t)(close + 9 - s)))
                why = "text after </answer>";
            else if (rlpi_find(open, (size_t)(close - open), "<search>", 8) ||
                     rlpi_find(open, (size_t)(close - open), "<access>", 8))
                why = "a tool tag inside the answer";
        }
        r->score = why ? c->wrong : c->correct;
        if (why)
            rlpi_reason(r, "%s: %s", what, why);
        else
            rlpi_reason(r, "well formed");
    }
    return 0;
}

static int tool_call_format_score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n,
                                  uint8_t *fail)
{
    (void)fail;
    const fmt_cfg *c = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        const char *s = req[i].completion_text;
        size_t len = req[i].completion_len;
        rlpi_tool_call *calls = NULL;
        size_t nc = 0, bad = 0;
        if (rlpi_tool_calls_parse_hermes(&calls, &nc, &bad, s, len))
            return rlpi_error_wrap("tool_call_format");
        const char *why = NULL;
        size_t tail = 0; /* where the final turn starts */
        if (bad)
            why = "a <tool_call> block does not parse";
        else if (nc && (calls[nc - 1].end < 12 || memcmp(s + calls[nc - 1].end - 12, "</tool_call>", 12)))
            why = "the last <tool_call> is not closed";
        if (nc)
            tail = calls[nc - 1].end;
        rlpi_tool_calls_free(calls, nc);
        if (!why) {
            /* the final turn: after the last tool response (or call) */
            const char *p;
            size_t from = tail;
            while ((p = rlpi_find(s + from, len - from, "</tool_response>", 16)) != NULL)
                from = (size_t)(p - s) + 16;
            while ((p = rlpi_find(s + from, len - from, "<|im_start|>assistant", 21)) != NULL)
                from = (size_t)(p - s) + 21;
            size_t b = from, e = len;
            rlpi_trim(s, &b, &e);
            if (nc && only_end_marks(s + b, e - b))
                why = "the episode ends with a tool call, not an answer";
            else if (!nc && b == e)
                why = "empty completion";
        }
        r->score = why ? c->wrong : c->correct;
        if (why)
            rlpi_reason(r, "%s", why);
        else
            rlpi_reason(r, "well formed");
    }
    return 0;
}

static int fmt_create(rlpi_scorer **out, rlpi_opts *o, const rlpi_scorer_ops *ops)
{
    fmt_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    c->correct = 1.0;
    int rc;
    if ((rc = rlpi_opt_double(o, "correct", &c->correct)) || (rc = rlpi_opt_double(o, "wrong", &c->wrong))) {
        free(c);
        return rc;
    }
    rc = rlpi_scorer_create(out, ops, c, 1);
    if (!rc)
        (*out)->needs_reference = 0;
    return rc;
}

static const rlpi_scorer_ops search_ops = {search_format_score, destroy};
static const rlpi_scorer_ops tool_call_ops = {tool_call_format_score, destroy};

int rlpi_builtin_search_format(rlpi_scorer **out, rlpi_opts *o)
{
    return fmt_create(out, o, &search_ops);
}

int rlpi_builtin_tool_call_format(rlpi_scorer **out, rlpi_opts *o)
{
    return fmt_create(out, o, &tool_call_ops);
}
