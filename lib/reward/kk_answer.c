/* Logic-RL's Knights-and-Knaves answer reward and its total (format +
 * answer). The rules are those of parse_solution_text_format(),
 * parse_model_answer() and compute_score() in Unakar/Logic-RL,
 * verl/utils/reward_score/kk.py (Xie et al. 2025, arXiv:2502.14768); this
 * is our own implementation of them, with two deliberate differences:
 * case folding and \s, \b are ASCII (a Unicode look-alike such as the
 * Kelvin sign never counts as a 'k'), and the answer block is searched in
 * the completion (where kk.py searches after the assistant header).
 * Must not judge the format itself: logic_rl_format.c does. */
#include "reward/builtin.h"

#include "core/error.h"
#include "reward/metadata.h"
#include "reward/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest number of people a reference may name. */
#define KK_MAX_PEOPLE 64

enum { ROLE_KNIGHT = 1, ROLE_KNAVE = 2 };

typedef struct person {
    const char *name;
    size_t len;
    int role;
} person;

/* A role word ("knight" or "knave", ASCII case-insensitive, \b on both
 * sides) at s[i]; its length in *len, or 0. */
static int role_at(const char *s, size_t n, size_t i, size_t *len)
{
    if (!rlpi_word_boundary(s, n, i))
        return 0;
    if (n - i >= 6 && rlpi_ci_eq(s + i, "knight", 6) && rlpi_word_boundary(s, n, i + 6)) {
        *len = 6;
        return ROLE_KNIGHT;
    }
    if (n - i >= 5 && rlpi_ci_eq(s + i, "knave", 5) && rlpi_word_boundary(s, n, i + 5)) {
        *len = 5;
        return ROLE_KNAVE;
    }
    return 0;
}

/* One reference line as kk.py's re.search(r'\b([A-Za-z]+)\b.*?\b(knight|knave)\b', line, re.I):
 * the first ASCII-letter word with a later role word. 1 when found. */
static int parse_line(const char *s, size_t n, person *p)
{
    for (size_t i = 0; i < n; i++) {
        if (!rlpi_is_alpha((unsigned char)s[i]) || !rlpi_word_boundary(s, n, i))
            continue;
        size_t q = i;
        while (q < n && rlpi_is_alpha((unsigned char)s[q]))
            q++;
        if (!rlpi_word_boundary(s, n, q)) {
            i = q;
            continue;
        }
        for (size_t r = q; r < n; r++) {
            size_t len;
            int role = role_at(s, n, r, &len);
            if (role) {
                p->name = s + i;
                p->len = q - i;
                p->role = role;
                return 1;
            }
        }
        return 0; /* a later word has even less text after it */
    }
    return 0;
}

/* The reference's people in first-seen order; a name seen again takes
 * the later role (a Python dict). Returns the count, or -1 when there are
 * more than KK_MAX_PEOPLE. */
static int parse_reference(const char *s, size_t n, person *people)
{
    int count = 0;
    for (size_t b = 0; b < n;) {
        const char *nl = memchr(s + b, '\n', n - b);
        size_t e = nl ? (size_t)(nl - s) : n;
        person p;
        if (parse_line(s + b, e - b, &p)) {
            int k = 0;
            while (k < count && !(people[k].len == p.len && memcmp(people[k].name, p.name, p.len) == 0))
                k++;
            if (k == count) {
                if (count == KK_MAX_PEOPLE)
                    return -1;
                people[count++] = p;
            } else {
                people[k].role = p.role;
            }
        }
        b = e + 1;
    }
    return count;
}

/* The role word that a claim whose name ends at a[r] states: kk.py's
 * \s+is\s+a\s+\b(knight|knave)\b after the name, or 0. */
static int claim_tail(const char *a, size_t m, size_t r)
{
    size_t s0 = r;
    while (r < m && rlpi_is_space((unsigned char)a[r]))
        r++;
    if (r == s0 || m - r < 2 || !rlpi_ci_eq(a + r, "is", 2))
        return 0;
    r += 2;
    s0 = r;
    while (r < m && rlpi_is_space((unsigned char)a[r]))
        r++;
    if (r == s0 || r >= m || rlpi_lower((unsigned char)a[r]) != 'a')
        return 0;
    r++;
    s0 = r;
    while (r < m && rlpi_is_space((unsigned char)a[r]))
        r++;
    size_t len;
    return r > s0 ? role_at(a, m, r, &len) : 0;
}

int rlpi_kk_stated_role(const char *a, size_t m, const char *name, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i + len <= m; i++) {
        if (rlpi_lower((unsigned char)a[i]) != rlpi_lower((unsigned char)name[0]) ||
            !rlpi_word_boundary(a, m, i) || !rlpi_ci_eq(a + i, name, len) || !rlpi_word_boundary(a, m, i + len))
            continue;
        int role = claim_tail(a, m, i + len);
        if (role)
            return role;
    }
    return 0;
}

int rlpi_kk_any_claim(const char *a, size_t m)
{
    for (size_t i = 0; i < m; i++) {
        if (!rlpi_is_alpha((unsigned char)a[i]) || !rlpi_word_boundary(a, m, i))
            continue;
        size_t q = i;
        while (q < m && rlpi_is_alpha((unsigned char)a[q]))
            q++;
        if (rlpi_word_boundary(a, m, q) && claim_tail(a, m, q))
            return 1;
        i = q;
    }
    return 0;
}

int rlpi_kk_read(rlpi_opts *o, rlpi_kk_cfg *cfg)
{
    cfg->correct = 2.0;
    cfg->wrong = -1.5;
    cfg->unparsable = -2.0;
    cfg->count_mismatch = -2.0;
    cfg->require_format = 1;
    int rc;
    if ((rc = rlpi_opt_double(o, "answer_correct", &cfg->correct)) ||
        (rc = rlpi_opt_double(o, "answer_wrong", &cfg->wrong)) ||
        (rc = rlpi_opt_double(o, "answer_unparsable", &cfg->unparsable)) ||
        (rc = rlpi_opt_double(o, "count_mismatch", &cfg->count_mismatch)) ||
        (rc = rlpi_opt_bool(o, "require_format", &cfg->require_format)))
        return rc;
    return RLP_OK;
}

/* The reference text: req->reference, else the metadata's
 * "solution_text_format" (the K&K benchmark's field); *owned is set when
 * it had to be read. */
static const char *reference_text(const rlp_reward_request *req, char **owned)
{
    *owned = NULL;
    if (req->reference)
        return req->reference;
    if (!req->metadata_json)
        return NULL;
    int bad;
    *owned = rlpi_metadata_field(req->metadata_json, "solution_text_format", 0, &bad);
    return *owned;
}

int rlpi_kk_score(const rlpi_kk_cfg *cfg, const rlp_reward_request *req, int format_ok, double *score, char *why,
                  size_t cap)
{
    char *owned;
    const char *ref = reference_text(req, &owned);
    if (!ref) {
        snprintf(why, cap, "no reference (metadata \"reference\" or \"solution_text_format\")");
        return 0;
    }
    person truth[KK_MAX_PEOPLE], said;
    int n_people = parse_reference(ref, strlen(ref), truth);
    int valid = 1;
    if (n_people <= 0) {
        if (n_people < 0)
            snprintf(why, cap, "reference names more than %d people", KK_MAX_PEOPLE);
        else
            snprintf(why, cap, "reference has no \"NAME is a knight|knave\" line");
        valid = 0;
        goto done;
    }
    if (!format_ok && cfg->require_format) {
        *score = cfg->unparsable;
        snprintf(why, cap, "answer not checked: format failed");
        goto done;
    }
    const char *a = req->completion_text;
    size_t b, e;
    if (!rlpi_last_block(a, req->completion_len, "<answer>", "</answer>", &b, &e)) {
        *score = cfg->unparsable;
        snprintf(why, cap, "no <answer>...</answer> block");
        goto done;
    }
    rlpi_trim(a, &b, &e);
    if (b == e) {
        *score = cfg->unparsable;
        snprintf(why, cap, "empty answer");
        goto done;
    }
    size_t mentions = rlpi_count(a + b, e - b, "knight", 6, 1) + rlpi_count(a + b, e - b, "knave", 5, 1);
    if (mentions != (size_t)n_people) {
        *score = cfg->count_mismatch;
        snprintf(why, cap, "%zu knight/knave mentions for %d people", mentions, n_people);
        goto done;
    }
    int correct = 1;
    for (int k = 0; k < n_people; k++) {
        said = truth[k];
        said.role = rlpi_kk_stated_role(a + b, e - b, truth[k].name, truth[k].len);
        if (!said.role) {
            *score = cfg->unparsable;
            snprintf(why, cap, "no \"%.*s is a knight|knave\" in the answer", (int)(said.len < 40 ? said.len : 40),
                     said.name);
            goto done;
        }
        if (said.role != truth[k].role && correct) {
            correct = 0;
            snprintf(why, cap, "wrong: %.*s is a %s, not a %s", (int)(said.len < 40 ? said.len : 40), said.name,
                     truth[k].role == ROLE_KNIGHT ? "knight" : "knave", said.role == ROLE_KNIGHT ? "knight" : "knave");
        }
    }
    *score = correct ? cfg->correct : cfg->wrong;
    if (correct)
        snprintf(why, cap, "correct");
done:
    free(owned);
    return valid;
}

/* ---- kk_answer and logic_rl -------------------------------------------------- */

typedef struct kk_impl {
    rlpi_format_cfg format;
    rlpi_kk_cfg kk;
    int total; /* logic_rl: format score + answer score */
} kk_impl;

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const kk_impl *k = impl;
    for (size_t i = 0; i < n; i++) {
        char fwhy[RLP_REWARD_REASON_MAX], awhy[RLP_REWARD_REASON_MAX];
        int fc = rlpi_format_check(&k->format, &req[i], fwhy, sizeof fwhy);
        if (fc == RLPI_FORMAT_NOMEM) {
            rlpi_reason(&res[i], "out of memory");
            return RLP_E_NOMEM;
        }
        if (fc == RLPI_FORMAT_INVALID) {
            res[i].valid = 0;
            rlpi_reason(&res[i], "%s", fwhy);
            continue;
        }
        int format_ok = fc == RLPI_FORMAT_OK;
        double answer = 0.0;
        if (!rlpi_kk_score(&k->kk, &req[i], format_ok, &answer, awhy, sizeof awhy)) {
            res[i].valid = 0;
            rlpi_reason(&res[i], "%s", awhy);
            continue;
        }
        if (k->total) {
            res[i].score = (format_ok ? k->format.correct : k->format.wrong) + answer;
            rlpi_reason(&res[i], "%.76s; answer: %.40s", fwhy, awhy);
        } else {
            res[i].score = answer;
            rlpi_reason(&res[i], "%s", awhy);
        }
    }
    return 0;
}

static void destroy(void *impl)
{
    kk_impl *k = impl;
    rlpi_format_free(&k->format);
    free(k);
}

static const rlpi_scorer_ops ops = {score, destroy};

static int create(rlpi_scorer **out, rlpi_opts *o, int total)
{
    kk_impl *k = calloc(1, sizeof *k);
    if (!k)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    k->total = total;
    int rc = rlpi_format_read(o, &k->format);
    if (rc == RLP_OK)
        rc = rlpi_kk_read(o, &k->kk);
    if (rc) {
        destroy(k);
        return rc;
    }
    return rlpi_scorer_create(out, &ops, k, 1);
}

int rlpi_builtin_kk_answer(rlpi_scorer **out, rlpi_opts *o)
{
    return create(out, o, 0);
}

int rlpi_builtin_logic_rl(rlpi_scorer **out, rlpi_opts *o)
{
    return create(out, o, 1);
}
