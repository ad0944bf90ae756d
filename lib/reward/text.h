/* Text scanning the built-in verifiers share: tag blocks, the last
 * balanced \boxed{}, exact numbers (decimal, thousands separators,
 * fractions) and light LaTeX normalisation. Byte-oriented: ASCII rules,
 * non-ASCII bytes count as word characters and are never folded, so a
 * Unicode look-alike of a tag or keyword never matches it. Linear time in
 * the input, no recursion deeper than RLPI_NORM_MAX_DEPTH. */
#ifndef RLPI_REWARD_TEXT_H
#define RLPI_REWARD_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Deepest \frac / \sqrt argument nesting that is normalised; deeper
 * groups are copied as they are. */
#define RLPI_NORM_MAX_DEPTH 32

static inline int rlpi_is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static inline int rlpi_is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static inline int rlpi_is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* A regex \w character, approximated: ASCII letters, digits, '_', and
 * every non-ASCII byte. */
static inline int rlpi_is_word(unsigned char c)
{
    return rlpi_is_alpha(c) || rlpi_is_digit(c) || c == '_' || c >= 0x80;
}

static inline unsigned char rlpi_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* \b at position i of s (n). */
static inline int rlpi_word_boundary(const char *s, size_t n, size_t i)
{
    int before = i > 0 && rlpi_is_word((unsigned char)s[i - 1]);
    int after = i < n && rlpi_is_word((unsigned char)s[i]);
    return before != after;
}

/* The first occurrence of pat (m > 0 bytes) in s (n), or NULL. memchr
 * on the first byte, then memcmp: faster than glibc's memmem on the short
 * tags and markers searched here, which rarely start with a common byte. */
const char *rlpi_find(const char *s, size_t n, const char *pat, size_t m);

/* ASCII case-insensitive equality of m bytes. */
int rlpi_ci_eq(const char *a, const char *b, size_t m);

/* Non-overlapping occurrences of pat (m > 0) in s (n); ci: ASCII
 * case-insensitive. */
size_t rlpi_count(const char *s, size_t n, const char *pat, size_t m, int ci);

/* The content of the last open…close block as Python's
 * re.finditer(open + "(.*?)" + close, s, re.DOTALL) finds it: matches are
 * taken left to right, each ending at the first close after its open.
 * Returns 1 with [*b, *e) the content, 0 when there is none. */
int rlpi_last_block(const char *s, size_t n, const char *open, const char *close, size_t *b, size_t *e);

/* Shrinks [*b, *e) past ASCII whitespace at both ends. */
void rlpi_trim(const char *s, size_t *b, size_t *e);

/* The content of the last \boxed{…} or \fbox{…} (spaces allowed before
 * the brace; \{ and \} inside do not count as braces). Returns 1 with
 * [*b, *e) the content; 0 when there is no box; -1 when the last box is
 * not closed. */
int rlpi_last_boxed(const char *s, size_t n, size_t *b, size_t *e);

/* What exact_match / regex_match compare. */
enum { RLPI_EXTRACT_NONE = 0, RLPI_EXTRACT_ANSWER_TAG, RLPI_EXTRACT_BOXED, RLPI_EXTRACT_LAST_LINE };

/* Extracts the part of s (n) that `mode` names into [*b, *e). Returns 1,
 * or 0 when there is no such part. */
int rlpi_extract(int mode, const char *s, size_t n, size_t *b, size_t *e);

/* An exact number: p/q reduced with q > 0, or, when it does not fit
 * int64, its normalised decimal digits (big = 1, digits malloc'd). */
typedef struct rlpi_num {
    int big;
    int neg;
    int64_t p, q;
    char *digits; /* big only: "<int digits>.<fraction digits>", no leading/trailing zeros */
} rlpi_num;

void rlpi_num_clear(rlpi_num *x);

/* Whether two numbers are equal (exactly). */
int rlpi_num_eq(const rlpi_num *a, const rlpi_num *b);

/* Writes x as "p", "p/q" or its digits (truncated to cap). */
void rlpi_num_format(const rlpi_num *x, char *buf, size_t cap);

/* Parses all of s (n) as a number: [+-] then a decimal (digits with
 * optional 3-digit comma groups and a fraction part), a/b, or
 * \frac{a}{b} with optionally signed decimals a and b (b != 0). Returns 1
 * (out set), 0 when s is not such a number, -1 when out of memory. */
int rlpi_num_parse(const char *s, size_t n, rlpi_num *out);

/* The last number in free text s (n): an optional '-' (not after a
 * letter, digit or ')'), an optional '$', digits with optional 3-digit
 * comma groups and an optional fraction part. Returns 1 (out set) or 0
 * (none), -1 when out of memory. */
int rlpi_num_last_in_text(const char *s, size_t n, rlpi_num *out);

/* The number that starts at s[i] after optional spaces ('-', '$', digits
 * as in rlpi_num_last_in_text). Returns 1 with *end past it, 0 when none
 * starts there, -1 when out of memory. */
int rlpi_num_at(const char *s, size_t n, size_t i, size_t *end, rlpi_num *out);

/* Light LaTeX normalisation of s (n) (see "boxed_math" in rlpost.h):
 * returns a malloc'd NUL-terminated string and its length, or NULL when
 * out of memory. */
char *rlpi_math_normalise(const char *s, size_t n, size_t *out_len);

#endif
