/* Boxed math answer reward: the content of the completion's last
 * brace-balanced \boxed{} (or \fbox{}) against the reference after light
 * normalisation (text.c, rlpi_math_normalise); numbers compare as exact
 * fractions, everything else as normalised text. The balanced scan and
 * the last box are the Math-Verify convention and the fix of public-bugs
 * case #7 (trl PR #5026, ms-swift PR #10147, OpenRLHF PR #1285). Must not
 * try to prove symbolic equivalence: what is not normalised is listed in
 * rlpost.h ("boxed_math"). */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct boxed_cfg {
    double correct, wrong, missing;
} boxed_cfg;

/* Normalised answer text; *num set (1) when it is a number. */
typedef struct answer {
    char *text;
    size_t len;
    int is_num;
    rlpi_num num;
} answer;

static int make_answer(const char *s, size_t n, answer *a)
{
    memset(a, 0, sizeof *a);
    a->text = rlpi_math_normalise(s, n, &a->len);
    if (!a->text)
        return -1;
    int r = rlpi_num_parse(a->text, a->len, &a->num);
    if (r < 0) {
        free(a->text);
        return -1;
    }
    a->is_num = r;
    return 0;
}

static void answer_clear(answer *a)
{
    free(a->text);
    if (a->is_num)
        rlpi_num_clear(&a->num);
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const boxed_cfg *cfg = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        const char *ref = req[i].reference;
        if (!ref) {
            r->valid = 0;
            rlpi_reason(r, "no reference (metadata \"reference\")");
            continue;
        }
        size_t rb = 0, re = strlen(ref);
        size_t bb, be;
        if (rlpi_last_boxed(ref, re, &bb, &be) == 1) {
            rb = bb; /* a whole worked solution: its own box */
            re = be;
        }
        size_t ab, ae;
        int box = rlpi_last_boxed(req[i].completion_text, req[i].completion_len, &ab, &ae);
        if (box != 1) {
            r->score = cfg->missing;
            rlpi_reason(r, box == 0 ? "no \\boxed{} answer" : "the last \\boxed{ is not closed");
            continue;
        }
        answer want, got;
        if (make_answer(ref + rb, re - rb, &want))
            return RLP_E_NOMEM;
        if (make_answer(req[i].completion_text + ab, ae - ab, &got)) {
            answer_clear(&want);
            return RLP_E_NOMEM;
        }
        int eq = want.is_num && got.is_num ? rlpi_num_eq(&want.num, &got.num)
                                           : want.len == got.len && memcmp(want.text, got.text, got.len) == 0;
        r->score = eq ? cfg->correct : cfg->wrong;
        rlpi_reason(r, "%s: \\boxed{%.40s%s}, reference %.40s%s", eq ? "correct" : "wrong", got.text,
                    got.len > 40 ? "..." : "", want.text, want.len > 40 ? "..." : "");
        answer_clear(&want);
        answer_clear(&got);
    }
    return 0;
}

static void destroy(void *impl)
{
    free(impl);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_boxed_math(rlpi_scorer **out, rlpi_opts *o)
{
    boxed_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    cfg->correct = 1.0;
    int rc;
    if ((rc = rlpi_opt_double(o, "correct", &cfg->correct)) || (rc = rlpi_opt_double(o, "wrong", &cfg->wrong)) ||
        (rc = rlpi_opt_double(o, "missing", &cfg->missing))) {
        free(cfg);
        return rc;
    }
    return rlpi_scorer_create(out, &ops, cfg, 1);
}
