/* Calculator: a recursive-descent evaluator over a byte string with a
 * depth limit (a hostile "((((…" cannot exhaust the stack) and a length
 * limit. Every intermediate value is checked for finiteness, so an
 * overflow is reported where it happens instead of printing "inf". */
#include "tools/calculator.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct calc {
    const char *s;
    size_t n, i;
    int depth;
    char *msg;
    size_t cap;
    int failed;
} calc;

static int fail(calc *c, const char *what)
{
    if (!c->failed)
        snprintf(c->msg, c->cap, "%s", what);
    c->failed = 1;
    return -1;
}

static int fail_at(calc *c, const char *what)
{
    if (!c->failed) {
        if (c->i < c->n)
            snprintf(c->msg, c->cap, "syntax error at offset %zu ('%c'): %s", c->i,
                     c->s[c->i] >= 32 && c->s[c->i] < 127 ? c->s[c->i] : '?', what);
        else
            snprintf(c->msg, c->cap, "syntax error at the end: %s", what);
    }
    c->failed = 1;
    return -1;
}

static void skip(calc *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static int finite_or_fail(calc *c, double v)
{
    return isfinite(v) ? 0 : fail(c, "the result is not finite (overflow)");
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int expr(calc *c, double *v);
static int unary(calc *c, double *v);

static int number(calc *c, double *v)
{
    size_t b = c->i;
    while (c->i < c->n && is_digit(c->s[c->i]))
        c->i++;
    size_t int_digits = c->i - b;
    size_t frac_digits = 0;
    if (c->i < c->n && c->s[c->i] == '.') {
        c->i++;
        size_t f = c->i;
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
        frac_digits = c->i - f;
    }
    if (!int_digits && !frac_digits) {
        c->i = b;
        return fail_at(c, "expected a number or '('");
    }
    if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        size_t save = c->i++;
        if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
            c->i++;
        size_t e = c->i;
        while (c->i < c->n && is_digit(c->s[c->i]))
            c->i++;
        if (c->i == e)
            c->i = save; /* "2e" is 2 followed by a stray 'e': reported by the caller */
    }
    /* strtod needs a NUL-terminated copy; the limit keeps it small */
    char buf[RLPI_CALC_MAX_LEN + 1];
    size_t len = c->i - b;
    memcpy(buf, c->s + b, len);
    buf[len] = '\0';
    *v = strtod(buf, NULL);
    return finite_or_fail(c, *v);
}

static int primary(calc *c, double *v)
{
    skip(c);
    if (c->i < c->n && c->s[c->i] == '(') {
        if (++c->depth > RLPI_CALC_MAX_DEPTH)
            return fail(c, "expression nested too deeply");
        c->i++;
        if (expr(c, v))
            return -1;
        skip(c);
        if (c->i >= c->n || c->s[c->i] != ')')
            return fail_at(c, "expected ')'");
        c->i++;
        c->depth--;
        return 0;
    }
    return number(c, v);
}

static int power(calc *c, double *v)
{
    if (primary(c, v))
        return -1;
    skip(c);
    size_t op = 0;
    if (c->i < c->n && c->s[c->i] == '^')
        op = 1;
    else if (c->i + 1 < c->n && c->s[c->i] == '*' && c->s[c->i + 1] == '*')
        op = 2;
    if (!op)
        return 0;
    c->i += op;
    if (++c->depth > RLPI_CALC_MAX_DEPTH)
        return fail(c, "expression nested too deeply");
    double e;
    if (unary(c, &e))
        return -1;
    c->depth--;
    if (*v == 0.0 && e < 0)
        return fail(c, "division by zero (0 to a negative power)");
    double r = pow(*v, e);
    if (isnan(r))
        return fail(c, "the result is not a real number (negative base, fractional power)");
    *v = r;
    return finite_or_fail(c, *v);
}

static int unary(calc *c, double *v)
{
    skip(c);
    if (c->i < c->n && (c->s[c->i] == '-' || c->s[c->i] == '+')) {
        int neg = c->s[c->i] == '-';
        c->i++;
        if (++c->depth > RLPI_CALC_MAX_DEPTH)
            return fail(c, "expression nested too deeply");
        if (unary(c, v))
            return -1;
        c->depth--;
        if (neg)
            *v = -*v;
        return 0;
    }
    return power(c, v);
}

static int term(calc *c, double *v)
{
    if (unary(c, v))
        return -1;
    for (;;) {
        skip(c);
        if (c->i >= c->n)
            return 0;
        char op = c->s[c->i];
        /* "**" is a power, handled below the term level */
        if (op != '/' && op != '%' && !(op == '*' && !(c->i + 1 < c->n && c->s[c->i + 1] == '*')))
            return 0;
        c->i++;
        double r;
        if (unary(c, &r))
            return -1;
        if (op == '*') {
            *v *= r;
        } else if (r == 0.0) {
            return fail(c, op == '/' ? "division by zero" : "modulo by zero");
        } else if (op == '/') {
            *v /= r;
        } else {
            double m = fmod(*v, r);
            if (m != 0.0 && ((m < 0) != (r < 0)))
                m += r; /* Python's sign: that of the divisor */
            *v = m;
        }
        if (finite_or_fail(c, *v))
            return -1;
    }
}

static int expr(calc *c, double *v)
{
    if (term(c, v))
        return -1;
    for (;;) {
        skip(c);
        if (c->i >= c->n || (c->s[c->i] != '+' && c->s[c->i] != '-'))
            return 0;
        char op = c->s[c->i++];
        double r;
        if (term(c, &r))
            return -1;
        *v = op == '+' ? *v + r : *v - r;
        if (finite_or_fail(c, *v))
            return -1;
    }
}

int rlpi_calc_eval(const char *s, size_t len, double *value, char *msg, size_t cap)
{
    char dummy[1];
    if (!msg || cap == 0) {
        msg = dummy;
        cap = sizeof dummy;
    }
    msg[0] = '\0';
    calc c = {s, len, 0, 0, msg, cap, 0};
    if (!s || !value)
        return fail(&c, "no expression");
    if (len > RLPI_CALC_MAX_LEN) {
        snprintf(msg, cap, "expression too long (%zu bytes, at most %d)", len, RLPI_CALC_MAX_LEN);
        return -1;
    }
    skip(&c);
    if (c.i >= c.n)
        return fail(&c, "empty expression");
    double v;
    if (expr(&c, &v))
        return -1;
    skip(&c);
    if (c.i < c.n)
        return fail_at(&c, c.s[c.i] == ')' ? "unbalanced ')'" : "unexpected character");
    *value = v == 0.0 ? 0.0 : v; /* no "-0" */
    return 0;
}

void rlpi_calc_format(double v, char *buf, size_t cap)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        snprintf(buf, cap, "%.0f", v == 0.0 ? 0.0 : v);
    else
        snprintf(buf, cap, "%.10g", v);
}
