/* The "calculator" tool: arithmetic on decimal numbers, evaluated by a
 * recursive-descent parser (never by running code). Grammar, loosest
 * binding first:
 *   expr    := term (("+" | "-") term)*
 *   term    := unary (("*" | "/" | "%") unary)*
 *   unary   := ("-" | "+") unary | power
 *   power   := primary (("^" | "**") unary)?      right-associative; -2^2 = -4
 *   primary := number | "(" expr ")"
 *   number  := digits ["." digits] | "." digits, then optionally [eE][+-]digits
 * Spaces anywhere between tokens. "%" is the modulo with the divisor's
 * sign (Python's). Values are doubles. Pure function, thread-safe. */
#ifndef RLPI_TOOLS_CALCULATOR_H
#define RLPI_TOOLS_CALCULATOR_H

#include <stddef.h>

#define RLPI_CALC_MAX_LEN 1024  /* bytes of an expression */
#define RLPI_CALC_MAX_DEPTH 64  /* nested parentheses / unary signs / powers */

/* Evaluates expr (len bytes). Returns 0 with *value set, or -1 with a
 * one-line reason in msg (cap bytes, NUL-terminated): syntax error at a
 * byte offset, division by zero, a non-finite result, too long, too
 * deep. */
int rlpi_calc_eval(const char *expr, size_t len, double *value, char *msg, size_t cap);

/* Writes v as Python prints an int when v is integral and below 2^53 in
 * magnitude ("42", "-7"), else with "%.10g". */
void rlpi_calc_format(double v, char *buf, size_t cap);

#endif
