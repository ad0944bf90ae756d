/* Exact-match reward: an extracted part of the completion (all of it, the
 * last <answer> block, the last box or the last line) equals the
 * reference, with optional trimming, ASCII case folding and whitespace
 * collapsing applied to both sides. Must not normalise anything else. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/text.h"

#include <stdlib.h>
#include <string.h>

typedef struct em_cfg {
    int extract, trim, case_sensitive, collapse;
    double correct, wrong;
} em_cfg;

/* Next byte of a string under the options: collapsed runs of whitespace
 * read as one ' '. Returns -1 at the end. */
static int next_byte(const em_cfg *c, const char *s, size_t e, size_t *i)
{
    if (*i >= e)
        return -1;
    unsigned char ch = (unsigned char)s[*i];
    if (c->collapse && rlpi_is_space(ch)) {
        while (*i < e && rlpi_is_space((unsigned char)s[*i]))
            (*i)++;
        return ' ';
    }
    (*i)++;
    return c->case_sensitive ? ch : rlpi_lower(ch);
}

static int equal(const em_cfg *c, const char *a, size_t ab, size_t ae, const char *b, size_t bb, size_t be)
{
    if (c->trim) {
        rlpi_trim(a, &ab, &ae);
        rlpi_trim(b, &bb, &be);
    }
    for (;;) {
        int x = next_byte(c, a, ae, &ab), y = next_byte(c, b, be, &bb);
        if (x != y)
            return 0;
        if (x < 0)
            return 1;
    }
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
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
        if (!rlpi_extract(c->extract, req[i].completion_text, req[i].completion_len, &b, &e)) {
            r->score = c->wrong;
            rlpi_reason(r, "nothing to compare: no %s", c->extract == RLPI_EXTRACT_ANSWER_TAG ? "<answer> block"
                                                        : c->extract == RLPI_EXTRACT_BOXED   ? "\\boxed{}"
                                                                                             : "non-empty line");
            continue;
        }
        int eq = equal(c, req[i].completion_text, b, e, req[i].reference, 0, strlen(req[i].reference));
        r->score = eq ? c->correct : c->wrong;
        rlpi_reason(r, eq ? "match" : "no match");
    }
    return 0;
}

static void destroy(void *impl)
{
    free(impl);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_exact_match(rlpi_scorer **out, rlpi_opts *o)
{
    em_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    c->trim = 1;
    c->case_sensitive = 1;
    c->correct = 1.0;
    int rc;
    if ((rc = rlpi_opt_extract(o, &c->extract)) || (rc = rlpi_opt_bool(o, "trim", &c->trim)) ||
        (rc = rlpi_opt_bool(o, "case_sensitive", &c->case_sensitive)) ||
        (rc = rlpi_opt_bool(o, "collapse_whitespace", &c->collapse)) ||
        (rc = rlpi_opt_double(o, "correct", &c->correct)) || (rc = rlpi_opt_double(o, "wrong", &c->wrong))) {
        free(c);
        return rc;
    }
    return rlpi_scorer_create(out, &ops, c, 1);
}
