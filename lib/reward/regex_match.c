/* Regex-match reward with PCRE2 in UTF mode (invalid UTF-8 in a completion
 * is matched, never an error): the pattern, given as an option or taken
 * from each sample's reference, is searched in (or, with "full", must
 * match all of) an extracted part of the completion. A match limit turns
 * catastrophic backtracking into an invalid sample, not a hung worker.
 * The compiled pattern is shared read-only by the worker threads; match
 * data is per call. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rx_cfg {
    pcre2_code *code;            /* the "pattern" option, or NULL: the reference is the pattern */
    pcre2_match_context *mctx;
    uint32_t flags;              /* compile options */
    int extract, full;
    uint32_t match_limit;
    double correct, wrong;
} rx_cfg;

static pcre2_code *compile(const rx_cfg *c, const char *pattern, size_t len, char *why, size_t cap)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, len, c->flags, &err, &off, NULL);
    if (!code) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(err, msg, sizeof msg);
        snprintf(why, cap, "regex does not compile at offset %zu: %s", (size_t)off, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* optional: interpreted when it fails */
    return code;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const rx_cfg *c = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        pcre2_code *code = c->code, *own = NULL;
        if (!code) {
            if (!req[i].reference) {
                r->valid = 0;
                rlpi_reason(r, "no pattern: no \"pattern\" option and no reference");
                continue;
            }
            code = own = compile(c, req[i].reference, strlen(req[i].reference), r->reason, sizeof r->reason);
            if (!code) {
                r->valid = 0;
                continue;
            }
        }
        size_t b, e;
        if (!rlpi_extract(c->extract, req[i].completion_text, req[i].completion_len, &b, &e)) {
            r->score = c->wrong;
            rlpi_reason(r, "nothing to match: the part to extract is missing");
            pcre2_code_free(own);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
        if (!md) {
            pcre2_code_free(own);
            rlpi_reason(r, "out of memory");
            return RLP_E_NOMEM;
        }
        uint32_t opt = c->full ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0;
        int rc = pcre2_match(code, (PCRE2_SPTR)(req[i].completion_text + b), e - b, 0, opt, md, c->mctx);
        pcre2_match_data_free(md);
        pcre2_code_free(own);
        if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) {
            r->score = rc >= 0 ? c->correct : c->wrong;
            rlpi_reason(r, rc >= 0 ? "match" : "no match");
        } else {
            PCRE2_UCHAR msg[100];
            pcre2_get_error_message(rc, msg, sizeof msg);
            r->valid = 0;
            rlpi_reason(r, "regex match failed: %s", (const char *)msg);
        }
    }
    return 0;
}

static void destroy(void *impl)
{
    rx_cfg *c = impl;
    pcre2_code_free(c->code);
    pcre2_match_context_free(c->mctx);
    free(c);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_regex_match(rlpi_scorer **out, rlpi_opts *o)
{
    rx_cfg *c = calloc(1, sizeof *c);
    if (!c)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    c->correct = 1.0;
    c->match_limit = 1000000;
    c->flags = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    const char *pattern = NULL, *flags = NULL;
    int rc;
    if ((rc = rlpi_opt_string(o, "pattern", &pattern)) || (rc = rlpi_opt_string(o, "flags", &flags)) ||
        (rc = rlpi_opt_extract(o, &c->extract)) || (rc = rlpi_opt_bool(o, "full", &c->full)) ||
        (rc = rlpi_opt_uint(o, "match_limit", &c->match_limit)) ||
        (rc = rlpi_opt_double(o, "correct", &c->correct)) || (rc = rlpi_opt_double(o, "wrong", &c->wrong))) {
        destroy(c);
        return rc;
    }
    for (const char *f = flags; f && *f; f++) {
        switch (*f) {
        case 'i': c->flags |= PCRE2_CASELESS; break;
        case 'm': c->flags |= PCRE2_MULTILINE; break;
        case 's': c->flags |= PCRE2_DOTALL; break;
        case 'x': c->flags |= PCRE2_EXTENDED; break;
        default:
            destroy(c);
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "reward built-in regex_match: option \"flags\" has '%c'; use i, m, s, x", *f);
        }
    }
    if (c->match_limit == 0)
        c->match_limit = 1;
    if (!(c->mctx = pcre2_match_context_create(NULL))) {
        destroy(c);
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in regex_match: out of memory");
    }
    pcre2_set_match_limit(c->mctx, c->match_limit);
    if (pattern) {
        char why[200];
        if (!(c->code = compile(c, pattern, strlen(pattern), why, sizeof why))) {
            destroy(c);
            return rlpi_error_set(RLP_E_INVALID_ARG, "reward built-in regex_match: option \"pattern\": %s", why);
        }
    }
    return rlpi_scorer_create(out, &ops, c, 1);
}
