/* GSM8K answer reward (Cobbe et al. 2021, "Training Verifiers to Solve
 * Math Word Problems"): the completion's final number against the
 * reference's, compared exactly. Which number is final: the one after the
 * last "####" (the dataset's own convention, and verl/TinyZero's strict
 * extraction), else the one in the last balanced \boxed{} (public-bugs
 * case #7: a regex up to the first '}' cuts \frac{1}{3}), else the last
 * number in the text (their flexible extraction). Must not evaluate
 * expressions: "3+4" in a box is not 7. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gsm8k_cfg {
    double correct, wrong, missing;
    int fallback_last_number;
} gsm8k_cfg;

/* The number after the last "####" that has one. 1 / 0 / -1 (no memory). */
static int after_hashes(const char *s, size_t n, rlpi_num *out)
{
    int found = 0;
    for (const char *p = s; (p = rlpi_find(p, (size_t)(s + n - p), "####", 4)) != NULL;) {
        size_t i = (size_t)(p - s) + 4, end;
        while (i < n && s[i] == '#')
            i++;
        rlpi_num x;
        int r = rlpi_num_at(s, n, i, &end, &x);
        if (r < 0)
            return -1;
        if (r > 0) {
            if (found)
                rlpi_num_clear(out);
            *out = x;
            found = 1;
        }
        p = s + i;
    }
    return found;
}

/* A number from LaTeX-ish text (a box's content, a reference): the whole
 * of it when it is one after normalisation, else its last number. */
static int number_in(const char *s, size_t n, rlpi_num *out)
{
    size_t b = 0, e = n;
    rlpi_trim(s, &b, &e);
    int r = rlpi_num_parse(s + b, e - b, out); /* the common case: just a number */
    if (r)
        return r;
    size_t len;
    char *norm = rlpi_math_normalise(s, n, &len);
    if (!norm)
        return -1;
    r = rlpi_num_parse(norm, len, out);
    if (r == 0)
        r = rlpi_num_last_in_text(norm, len, out);
    free(norm);
    return r;
}

/* The final number of a completion, and where it came from. */
static int final_number(const gsm8k_cfg *cfg, const char *s, size_t n, rlpi_num *out, const char **how)
{
    int r = after_hashes(s, n, out);
    if (r) {
        *how = "####";
        return r;
    }
    size_t b, e;
    if (rlpi_last_boxed(s, n, &b, &e) == 1) {
        *how = "\\boxed";
        return number_in(s + b, e - b, out);
    }
    if (!cfg->fallback_last_number)
        return 0;
    *how = "last number";
    return rlpi_num_last_in_text(s, n, out);
}

int rlpi_gsm8k_reference_number(const char *ref, rlpi_num *out)
{
    size_t n = strlen(ref);
    int r = after_hashes(ref, n, out);
    if (r)
        return r;
    size_t b = 0, e = n;
    rlpi_trim(ref, &b, &e);
    if ((r = rlpi_num_parse(ref + b, e - b, out)) != 0)
        return r;
    size_t len;
    char *norm = rlpi_math_normalise(ref + b, e - b, &len);
    if (!norm)
        return -1;
    r = rlpi_num_parse(norm, len, out);
    free(norm);
    return r;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const gsm8k_cfg *cfg = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        if (!req[i].reference) {
            r->valid = 0;
            rlpi_reason(r, "no reference (metadata \"reference\")");
            continue;
        }
        rlpi_num ref, got;
        int rr = rlpi_gsm8k_reference_number(req[i].reference, &ref);
        if (rr <= 0) {
            if (rr < 0)
                return RLP_E_NOMEM;
            r->valid = 0;
            rlpi_reason(r, "reference \"%.60s\" is not a number", req[i].reference);
            continue;
        }
        const char *how = "";
        int rg = final_number(cfg, req[i].completion_text, req[i].completion_len, &got, &how);
        char a[64], b[64];
        rlpi_num_format(&ref, b, sizeof b);
        if (rg < 0) {
            rlpi_num_clear(&ref);
            return RLP_E_NOMEM;
        }
        if (rg == 0) {
            r->score = cfg->missing;
            rlpi_reason(r, "no final number (reference %s)", b);
        } else {
            rlpi_num_format(&got, a, sizeof a);
            int eq = rlpi_num_eq(&got, &ref);
            r->score = eq ? cfg->correct : cfg->wrong;
            /* "correct: 18 from ####, reference 18", without printf */
            r->reason[0] = '\0';
            const char *parts[] = {eq ? "correct: " : "wrong: ", a, " from ", how, ", reference ", b};
            for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
                rlpi_cat(r->reason, sizeof r->reason, parts[k]);
            rlpi_num_clear(&got);
        }
        rlpi_num_clear(&ref);
    }
    return 0;
}

static void destroy(void *impl)
{
    free(impl);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_gsm8k(rlpi_scorer **out, rlpi_opts *o)
{
    gsm8k_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    cfg->correct = 1.0;
    cfg->fallback_last_number = 1;
    int rc;
    if ((rc = rlpi_opt_double(o, "correct", &cfg->correct)) || (rc = rlpi_opt_double(o, "wrong", &cfg->wrong)) ||
        (rc = rlpi_opt_double(o, "missing", &cfg->missing)) ||
        (rc = rlpi_opt_bool(o, "fallback_last_number", &cfg->fallback_last_number))) {
        free(cfg);
        return rc;
    }
    return rlpi_scorer_create(out, &ops, cfg, 1);
}
