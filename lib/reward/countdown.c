/* Countdown equation reward, scored as TinyZero's
 * (Jiayi-Pan/TinyZero, verl/utils/reward_score/countdown.py): 1 when the
 * equation in the last <answer> block uses each given number exactly once
 * and equals the target, 0.1 when it is a well-formed equation that does
 * not, 0 when there is none. Where TinyZero eval()s the text, this parses
 * it with its own recursive-descent parser and evaluates it over exact
 * int64 fractions (overflow or division by zero makes it wrong). TinyZero
 * also looks only at the last line and gives 0.1 to any <answer> text,
 * parsable or not; here any line counts and unparsable text scores 0.
 * Must never execute or evaluate anything but this grammar:
 *   expr := term (('+' | '-') term)*
 *   term := factor (('*' | '/') factor)*
 *   factor := INTEGER | '(' expr ')'        (ASCII spaces between tokens) */
#include "reward/builtin.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "reward/text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Deepest parenthesis nesting parsed; deeper is unparsable. */
#define MAX_DEPTH 128
/* Most numbers a problem may give. */
#define MAX_NUMBERS 64

typedef struct cd_cfg {
    double correct, format_score, missing;
} cd_cfg;

/* p/q with q > 0, reduced; bad: overflow or division by zero happened. */
typedef struct frac {
    int64_t p, q;
} frac;

typedef struct parser {
    const char *s;
    size_t i, n;
    int depth;
    int error;       /* syntax error: unparsable */
    int bad;         /* arithmetic overflow or division by zero: wrong */
    int64_t lits[MAX_NUMBERS + 1];
    size_t n_lits;   /* literals seen (may exceed what lits holds) */
} parser;

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a < 0 ? -a : a;
}

/* p/q (q > 0) reduced. */
static frac make(int64_t p, int64_t q)
{
    int64_t g = gcd64(p, q);
    frac f = {g > 1 ? p / g : p, g > 1 ? q / g : q};
    return f;
}

/* a op b over int64 fractions; any overflow (INT64_MIN included, so that
 * negation is always safe) marks the parser bad: the answer is then wrong. */
static frac apply(parser *ps, frac a, char op, frac b)
{
    int64_t p, q, x, y;
    int over = 0;
    if (ps->bad)
        return a;
    switch (op) {
    case '+':
    case '-':
        over = __builtin_mul_overflow(a.p, b.q, &x) || __builtin_mul_overflow(b.p, a.q, &y) ||
               (op == '+' ? __builtin_add_overflow(x, y, &p) : __builtin_sub_overflow(x, y, &p)) ||
               __builtin_mul_overflow(a.q, b.q, &q);
        break;
    case '*':
        over = __builtin_mul_overflow(a.p, b.p, &p) || __builtin_mul_overflow(a.q, b.q, &q);
        break;
    default:
        if (b.p == 0) {
            ps->bad = 1;
            return a;
        }
        over = __builtin_mul_overflow(a.p, b.q, &p) || __builtin_mul_overflow(a.q, b.p, &q);
        if (!over && q < 0) {
            over = p == INT64_MIN || q == INT64_MIN;
            p = -p;
            q = -q;
        }
        break;
    }
    if (over || p == INT64_MIN || q == INT64_MIN) {
        ps->bad = 1;
        return a;
    }
    return make(p, q);
}

static void skip(parser *ps)
{
    while (ps->i < ps->n && rlpi_is_space((unsigned char)ps->s[ps->i]))
        ps->i++;
}

static frac expr(parser *ps);

static frac factor(parser *ps)
{
    frac zero = {0, 1};
    skip(ps);
    if (ps->i >= ps->n) {
        ps->error = 1;
        return zero;
    }
    char c = ps->s[ps->i];
    if (c == '(') {
        if (++ps->depth > MAX_DEPTH) {
            ps->error = 1;
            return zero;
        }
        ps->i++;
        frac v = expr(ps);
        skip(ps);
        if (ps->error || ps->i >= ps->n || ps->s[ps->i] != ')') {
            ps->error = 1;
            return zero;
        }
        ps->i++;
        ps->depth--;
        return v;
    }
    if (!rlpi_is_digit((unsigned char)c)) {
        ps->error = 1;
        return zero;
    }
    int64_t v = 0;
    int overflow = 0;
    while (ps->i < ps->n && rlpi_is_digit((unsigned char)ps->s[ps->i])) {
        int d = ps->s[ps->i++] - '0';
        if (v > (INT64_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    if (overflow) { /* cannot be one of the numbers */
        ps->bad = 1;
        v = -1;
    }
    if (ps->n_lits < MAX_NUMBERS + 1)
        ps->lits[ps->n_lits] = v;
    ps->n_lits++;
    frac f = {v, 1};
    return f;
}

static frac term(parser *ps)
{
    frac v = factor(ps);
    for (;;) {
        skip(ps);
        if (ps->error || ps->i >= ps->n || (ps->s[ps->i] != '*' && ps->s[ps->i] != '/'))
            return v;
        char op = ps->s[ps->i++];
        frac r = factor(ps);
        v = apply(ps, v, op, r);
    }
}

static frac expr(parser *ps)
{
    frac v = term(ps);
    for (;;) {
        skip(ps);
        if (ps->error || ps->i >= ps->n || (ps->s[ps->i] != '+' && ps->s[ps->i] != '-'))
            return v;
        char op = ps->s[ps->i++];
        frac r = term(ps);
        v = apply(ps, v, op, r);
    }
}

/* Parses all of s (n) as an equation of the grammar into *ps (zeroed
 * here); 1 when it is well formed, with *v its value (meaningless when
 * ps->bad), else 0. */
static int parse_equation(parser *ps, const char *s, size_t n, frac *v)
{
    memset(ps, 0, sizeof *ps);
    ps->s = s;
    ps->n = n;
    *v = expr(ps);
    skip(ps);
    return !ps->error && ps->i == ps->n;
}

int rlpi_countdown_well_formed(const char *s, size_t n)
{
    parser ps;
    frac v;
    return parse_equation(&ps, s, n, &v);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* numbers (<= MAX_NUMBERS) and target from the metadata; 1, or 0 with why. */
static int read_problem(const char *meta, int64_t *nums, size_t *n_nums, int64_t *target, char *why, size_t cap)
{
    json_t *root = NULL;
    if (!meta || rlpi_json_load_guarded(meta, strlen(meta), RLPI_JSON_MAX_DEPTH, "metadata", &root) ||
        !json_is_object(root)) {
        snprintf(why, cap, "metadata must be a JSON object with \"numbers\" and \"target\"");
        json_decref(root);
        return 0;
    }
    json_t *arr = json_object_get(root, "numbers");
    if (!arr)
        arr = json_object_get(root, "nums");
    json_t *t = json_object_get(root, "target");
    int ok = json_is_array(arr) && json_array_size(arr) >= 1 && json_array_size(arr) <= MAX_NUMBERS &&
             json_is_integer(t);
    for (size_t k = 0; ok && k < json_array_size(arr); k++) {
        json_t *v = json_array_get(arr, k);
        ok = json_is_integer(v) && json_integer_value(v) >= 0;
        if (ok)
            nums[k] = json_integer_value(v);
    }
    if (ok) {
        *n_nums = json_array_size(arr);
        *target = json_integer_value(t);
    } else {
        snprintf(why, cap, "metadata needs \"numbers\" (1 to %d integers >= 0) and an integer \"target\"",
                 MAX_NUMBERS);
    }
    json_decref(root);
    return ok;
}

static int score(void *impl, rlp_reward_result *res, const rlp_reward_request *req, size_t n, uint8_t *fail)
{
    (void)fail;
    const cd_cfg *cfg = impl;
    for (size_t i = 0; i < n; i++) {
        rlp_reward_result *r = &res[i];
        int64_t nums[MAX_NUMBERS], target;
        size_t n_nums = 0;
        if (!read_problem(req[i].metadata_json, nums, &n_nums, &target, r->reason, sizeof r->reason)) {
            r->valid = 0;
            continue;
        }
        size_t b, e;
        if (!rlpi_last_block(req[i].completion_text, req[i].completion_len, "<answer>", "</answer>", &b, &e)) {
            r->score = cfg->missing;
            rlpi_reason(r, "no <answer>...</answer> block");
            continue;
        }
        parser ps;
        frac v;
        if (!parse_equation(&ps, req[i].completion_text + b, e - b, &v)) {
            r->score = cfg->missing;
            rlpi_reason(r, "answer is not an equation of integers, + - * / and parentheses");
            continue;
        }
        int same = ps.n_lits == n_nums;
        if (same) {
            qsort(ps.lits, n_nums, sizeof *ps.lits, cmp64);
            qsort(nums, n_nums, sizeof *nums, cmp64);
            same = memcmp(ps.lits, nums, n_nums * sizeof *nums) == 0;
        }
        if (!same) {
            r->score = cfg->format_score;
            rlpi_reason(r, "wrong: does not use each of the %zu numbers exactly once", n_nums);
        } else if (ps.bad) {
            r->score = cfg->format_score;
            rlpi_reason(r, "wrong: division by zero or overflow");
        } else if (v.q != 1 || v.p != target) {
            r->score = cfg->format_score;
            if (v.q == 1)
                rlpi_reason(r, "wrong: equals %lld, target %lld", (long long)v.p, (long long)target);
            else
                rlpi_reason(r, "wrong: equals %lld/%lld, target %lld", (long long)v.p, (long long)v.q,
                            (long long)target);
        } else {
            r->score = cfg->correct;
            rlpi_reason(r, "correct: equals %lld", (long long)target);
        }
    }
    return 0;
}

static void destroy(void *impl)
{
    free(impl);
}

static const rlpi_scorer_ops ops = {score, destroy};

int rlpi_builtin_countdown(rlpi_scorer **out, rlpi_opts *o)
{
    cd_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return rlpi_error_set(RLP_E_NOMEM, "reward built-in %s: out of memory", o->builtin);
    cfg->correct = 1.0;
    cfg->format_score = 0.1;
    int rc;
    if ((rc = rlpi_opt_double(o, "correct", &cfg->correct)) ||
        (rc = rlpi_opt_double(o, "format_score", &cfg->format_score)) ||
        (rc = rlpi_opt_double(o, "missing", &cfg->missing))) {
        free(cfg);
        return rc;
    }
    rc = rlpi_scorer_create(out, &ops, cfg, 1);
    if (rc == RLP_OK)
        (*out)->needs_reference = 0; /* numbers and target come from the metadata itself */
    return rc;
}
