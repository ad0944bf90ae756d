/* Scanning helpers of the built-in verifiers (see text.h). Every loop
 * moves forward through its input, so a 1 MB completion costs one pass;
 * nothing here allocates except numbers too large for int64 and the
 * normaliser's output. */
#include "reward/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rlpi_find(const char *s, size_t n, const char *pat, size_t m)
{
    if (m == 0 || m > n)
        return NULL;
    const char *end = s + n - m + 1; /* last start + 1 */
    for (const char *p = s; p < end; p++) {
        p = memchr(p, pat[0], (size_t)(end - p));
        if (!p)
            return NULL;
        if (memcmp(p + 1, pat + 1, m - 1) == 0)
            return p;
    }
    return NULL;
}

int rlpi_ci_eq(const char *a, const char *b, size_t m)
{
    for (size_t i = 0; i < m; i++)
        if (rlpi_lower((unsigned char)a[i]) != rlpi_lower((unsigned char)b[i]))
            return 0;
    return 1;
}

size_t rlpi_count(const char *s, size_t n, const char *pat, size_t m, int ci)
{
    size_t count = 0;
    if (m == 0 || m > n)
        return 0;
    if (!ci) {
        const char *p = s, *end = s + n;
        while ((size_t)(end - p) >= m && (p = rlpi_find(p, (size_t)(end - p), pat, m)) != NULL) {
            count++;
            p += m;
        }
        return count;
    }
    for (size_t i = 0; i + m <= n;) {
        if (rlpi_ci_eq(s + i, pat, m)) {
            count++;
            i += m;
        } else {
            i++;
        }
    }
    return count;
}

int rlpi_last_block(const char *s, size_t n, const char *open, const char *close, size_t *b, size_t *e)
{
    size_t lo = strlen(open), lc = strlen(close), pos = 0;
    int found = 0;
    for (;;) {
        const char *o = rlpi_find(s + pos, n - pos, open, lo);
        if (!o)
            break;
        size_t cb = (size_t)(o - s) + lo;
        const char *c = rlpi_find(s + cb, n - cb, close, lc);
        if (!c)
            break;
        *b = cb;
        *e = (size_t)(c - s);
        found = 1;
        pos = *e + lc;
    }
    return found;
}

void rlpi_trim(const char *s, size_t *b, size_t *e)
{
    while (*b < *e && rlpi_is_space((unsigned char)s[*b]))
        (*b)++;
    while (*e > *b && rlpi_is_space((unsigned char)s[*e - 1]))
        (*e)--;
}

/* Index of the '}' that closes the '{' at s[i] (escaped braces skipped),
 * or n when it is never closed. */
static size_t match_brace(const char *s, size_t n, size_t i)
{
    size_t depth = 0;
    for (size_t k = i; k < n; k++) {
        if (s[k] == '\\') {
            k++;
        } else if (s[k] == '{') {
            depth++;
        } else if (s[k] == '}') {
            if (--depth == 0)
                return k;
        }
    }
    return n;
}

static size_t skip_space(const char *s, size_t n, size_t i)
{
    while (i < n && rlpi_is_space((unsigned char)s[i]))
        i++;
    return i;
}

int rlpi_last_boxed(const char *s, size_t n, size_t *b, size_t *e)
{
    size_t brace = n; /* '{' of the last box */
    for (const char *p = s; (p = memchr(p, '\\', (size_t)(s + n - p))) != NULL; p++) {
        size_t i = (size_t)(p - s) + 1, len;
        if (n - i >= 5 && memcmp(s + i, "boxed", 5) == 0)
            len = 5;
        else if (n - i >= 4 && memcmp(s + i, "fbox", 4) == 0)
            len = 4;
        else
            continue;
        i += len;
        if (i < n && rlpi_is_alpha((unsigned char)s[i]))
            continue; /* another command, e.g. \boxedanswer */
        i = skip_space(s, n, i);
        if (i < n && s[i] == '{')
            brace = i;
    }
    if (brace == n)
        return 0;
    size_t close = match_brace(s, n, brace);
    if (close == n)
        return -1;
    *b = brace + 1;
    *e = close;
    return 1;
}

int rlpi_extract(int mode, const char *s, size_t n, size_t *b, size_t *e)
{
    switch (mode) {
    case RLPI_EXTRACT_ANSWER_TAG:
        return rlpi_last_block(s, n, "<answer>", "</answer>", b, e);
    case RLPI_EXTRACT_BOXED:
        return rlpi_last_boxed(s, n, b, e) == 1;
    case RLPI_EXTRACT_LAST_LINE: {
        size_t end = n;
        while (end > 0) {
            size_t start = end;
            while (start > 0 && s[start - 1] != '\n')
                start--;
            size_t lb = start, le = end;
            rlpi_trim(s, &lb, &le);
            if (lb < le) {
                *b = start;
                *e = end;
                return 1;
            }
            end = start ? start - 1 : 0;
        }
        return 0;
    }
    default:
        *b = 0;
        *e = n;
        return 1;
    }
}

/* ---- numbers -------------------------------------------------------------- */

void rlpi_num_clear(rlpi_num *x)
{
    free(x->digits);
    memset(x, 0, sizeof *x);
}

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0)
        a = -a;
    if (b < 0)
        b = -b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int rlpi_num_eq(const rlpi_num *a, const rlpi_num *b)
{
    if (a->big != b->big)
        return 0;
    if (!a->big)
        return a->p == b->p && a->q == b->q;
    return a->neg == b->neg && strcmp(a->digits, b->digits) == 0;
}

void rlpi_num_format(const rlpi_num *x, char *buf, size_t cap)
{
    if (x->big) {
        snprintf(buf, cap, "%s%.40s%s", x->neg ? "-" : "", x->digits, strlen(x->digits) > 40 ? "..." : "");
    } else if (x->q == 1 && cap >= 21) { /* without printf: this runs for every scored sample */
        char tmp[24];
        size_t k = 0;
        uint64_t v = x->p < 0 ? 0 - (uint64_t)x->p : (uint64_t)x->p;
        do {
            tmp[k++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        size_t o = 0;
        if (x->p < 0)
            buf[o++] = '-';
        while (k)
            buf[o++] = tmp[--k];
        buf[o] = '\0';
    } else {
        snprintf(buf, cap, "%lld/%lld", (long long)x->p, (long long)x->q);
    }
}

/* A decimal at s[i]: digits with optional ",ddd" groups and ".digits", or
 * ".digits". Sets the digit ranges (int part may contain commas) and
 * returns the end, or i when there is none. */
static size_t scan_decimal(const char *s, size_t n, size_t i, size_t *ib, size_t *ie, size_t *fb, size_t *fe)
{
    size_t j = i;
    *ib = *ie = *fb = *fe = i;
    while (j < n && rlpi_is_digit((unsigned char)s[j]))
        j++;
    if (j > i) {
        /* thousands groups: exactly three digits after each comma */
        while (j + 3 < n && s[j] == ',' && rlpi_is_digit((unsigned char)s[j + 1]) &&
               rlpi_is_digit((unsigned char)s[j + 2]) && rlpi_is_digit((unsigned char)s[j + 3]) &&
               (j + 4 >= n || !rlpi_is_digit((unsigned char)s[j + 4])))
            j += 4;
        *ie = j;
    }
    if (j + 1 < n && s[j] == '.' && rlpi_is_digit((unsigned char)s[j + 1])) {
        *fb = j + 1;
        j++;
        while (j < n && rlpi_is_digit((unsigned char)s[j]))
            j++;
        *fe = j;
    } else {
        *fb = *fe = j;
    }
    if (*ie == i && *fe == *fb)
        return i;
    return j;
}

/* Builds a number from digit ranges. 1, or -1 when out of memory. */
static int make_num(const char *s, int neg, size_t ib, size_t ie, size_t fb, size_t fe, rlpi_num *out)
{
    memset(out, 0, sizeof *out);
    while (ib < ie && (s[ib] == '0' || s[ib] == ','))
        ib++;
    while (fe > fb && s[fe - 1] == '0')
        fe--;
    size_t n_int = 0;
    for (size_t k = ib; k < ie; k++)
        n_int += s[k] != ',';
    size_t n_frac = fe - fb;
    if (n_int + n_frac <= 18) {
        int64_t p = 0, q = 1;
        for (size_t k = ib; k < ie; k++)
            if (s[k] != ',')
                p = p * 10 + (s[k] - '0');
        for (size_t k = fb; k < fe; k++) {
            p = p * 10 + (s[k] - '0');
            q *= 10;
        }
        int64_t g = gcd64(p, q);
        if (g > 1) {
            p /= g;
            q /= g;
        }
        out->p = neg ? -p : p;
        out->q = q;
        return 1;
    }
    out->big = 1;
    out->neg = neg;
    out->digits = malloc(n_int + n_frac + 2);
    if (!out->digits)
        return -1;
    size_t d = 0;
    for (size_t k = ib; k < ie; k++)
        if (s[k] != ',')
            out->digits[d++] = s[k];
    out->digits[d++] = '.';
    memcpy(out->digits + d, s + fb, n_frac);
    out->digits[d + n_frac] = '\0';
    return 1;
}

/* A signed decimal filling all of s[i, j). 1 / 0 / -1 as rlpi_num_parse. */
static int parse_signed_decimal(const char *s, size_t i, size_t j, rlpi_num *out)
{
    int neg = 0;
    if (i < j && (s[i] == '-' || s[i] == '+')) {
        neg = s[i] == '-';
        i++;
    }
    size_t ib, ie, fb, fe;
    if (i >= j || scan_decimal(s, j, i, &ib, &ie, &fb, &fe) != j)
        return 0;
    return make_num(s, neg, ib, ie, fb, fe, out);
}

/* out = a / b for non-big a, b; 0 when b is 0 or it overflows int64. */
static int divide(const rlpi_num *a, const rlpi_num *b, int neg, rlpi_num *out)
{
    if (a->big || b->big || b->p == 0)
        return 0;
    int64_t p, q;
    if (__builtin_mul_overflow(a->p, b->q, &p) || __builtin_mul_overflow(a->q, b->p, &q) || p == INT64_MIN ||
        q == INT64_MIN)
        return 0;
    if (q < 0) {
        p = -p;
        q = -q;
    }
    if (neg)
        p = -p;
    int64_t g = gcd64(p, q);
    if (g > 1) {
        p /= g;
        q /= g;
    }
    memset(out, 0, sizeof *out);
    out->p = p;
    out->q = q;
    return 1;
}

int rlpi_num_parse(const char *s, size_t n, rlpi_num *out)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && (s[i] == '-' || s[i] == '+')) {
        neg = s[i] == '-';
        i++;
    }
    if (n - i >= 6 && memcmp(s + i, "\\frac{", 6) == 0) {
        size_t c1 = match_brace(s, n, i + 5);
        if (c1 >= n || c1 + 1 >= n || s[c1 + 1] != '{')
            return 0;
        size_t c2 = match_brace(s, n, c1 + 1);
        if (c2 != n - 1)
            return 0;
        rlpi_num a, b;
        int ra = parse_signed_decimal(s, i + 6, c1, &a);
        if (ra != 1)
            return ra;
        int rb = parse_signed_decimal(s, c1 + 2, c2, &b);
        if (rb != 1) {
            rlpi_num_clear(&a);
            return rb;
        }
        int ok = divide(&a, &b, neg, out);
        rlpi_num_clear(&a);
        rlpi_num_clear(&b);
        return ok;
    }
    const char *slash = memchr(s + i, '/', n - i);
    if (slash) {
        size_t k = (size_t)(slash - s);
        rlpi_num a, b;
        int ra = parse_signed_decimal(s, i, k, &a);
        if (ra != 1)
            return ra;
        int rb = parse_signed_decimal(s, k + 1, n, &b);
        if (rb != 1) {
            rlpi_num_clear(&a);
            return rb;
        }
        int ok = divide(&a, &b, neg, out);
        rlpi_num_clear(&a);
        rlpi_num_clear(&b);
        return ok;
    }
    size_t ib, ie, fb, fe;
    if (i >= n || scan_decimal(s, n, i, &ib, &ie, &fb, &fe) != n)
        return 0;
    return make_num(s, neg, ib, ie, fb, fe, out);
}

/* Whether a '-' at s[k] is a sign: not after a letter, digit or ')'. */
static int is_sign(const char *s, size_t k)
{
    if (s[k] != '-')
        return 0;
    if (k == 0)
        return 1;
    unsigned char p = (unsigned char)s[k - 1];
    return !(rlpi_is_alpha(p) || rlpi_is_digit(p) || p == ')' || p == '_');
}

int rlpi_num_last_in_text(const char *s, size_t n, rlpi_num *out)
{
    int found = 0, neg = 0;
    size_t lib = 0, lie = 0, lfb = 0, lfe = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        int lead_dot = c == '.' && i + 1 < n && rlpi_is_digit((unsigned char)s[i + 1]) &&
                       (i == 0 || !rlpi_is_digit((unsigned char)s[i - 1]));
        if (!rlpi_is_digit(c) && !lead_dot) {
            i++;
            continue;
        }
        size_t ib, ie, fb, fe;
        size_t j = scan_decimal(s, n, i, &ib, &ie, &fb, &fe);
        if (j == i) {
            i++;
            continue;
        }
        size_t k = i;
        if (k > 0 && s[k - 1] == '$')
            k--;
        neg = k > 0 && is_sign(s, k - 1);
        lib = ib;
        lie = ie;
        lfb = fb;
        lfe = fe;
        found = 1;
        i = j;
    }
    if (!found)
        return 0;
    return make_num(s, neg, lib, lie, lfb, lfe, out);
}

int rlpi_num_at(const char *s, size_t n, size_t i, size_t *end, rlpi_num *out)
{
    i = skip_space(s, n, i);
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i < n && s[i] == '$')
        i++;
    if (!neg && i < n && s[i] == '-') { /* "$-5" */
        neg = 1;
        i++;
    }
    size_t ib, ie, fb, fe;
    size_t j = i < n ? scan_decimal(s, n, i, &ib, &ie, &fb, &fe) : i;
    if (j == i)
        return 0;
    *end = j;
    return make_num(s, neg, ib, ie, fb, fe, out);
}

/* ---- light LaTeX normalisation ---------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
    int oom;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap * 2 > b->len + n + 1 ? b->cap * 2 : b->len + n + 1;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void put1(buf *b, char c)
{
    put(b, &c, 1);
}

static int is_name(const char *s, size_t len, const char *name)
{
    return strlen(name) == len && memcmp(s, name, len) == 0;
}

static void norm(const char *s, size_t n, buf *b, int depth);

/* Emits the macro argument at s[i] (after spaces) in braces: a group, a
 * command token or one character (so \frac12 becomes \frac{1}{2}).
 * Returns the index after it. */
static size_t norm_arg(const char *s, size_t n, size_t i, buf *b, int depth)
{
    i = skip_space(s, n, i);
    if (i >= n || s[i] == '}')
        return i;
    if (s[i] == '{') {
        size_t m = match_brace(s, n, i);
        if (m >= n) { /* unclosed: the rest as it is */
            norm(s + i, n - i, b, depth + 1);
            return n;
        }
        put1(b, '{');
        norm(s + i + 1, m - i - 1, b, depth + 1);
        put1(b, '}');
        return m + 1;
    }
    size_t j = i + 1;
    if (s[i] == '\\' && j < n) {
        if (rlpi_is_alpha((unsigned char)s[j]))
            while (j < n && rlpi_is_alpha((unsigned char)s[j]))
                j++;
        else
            j++;
    }
    put1(b, '{');
    norm(s + i, j - i, b, depth + 1);
    put1(b, '}');
    return j;
}

static void norm(const char *s, size_t n, buf *b, int depth)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (rlpi_is_space(c) || c == '$' || c == '~') {
            i++;
            continue;
        }
        if (c == '{' && i + 2 < n && s[i + 1] == ',' && s[i + 2] == '}') {
            put1(b, ','); /* {,}: LaTeX's thousands separator */
            i += 3;
            continue;
        }
        if (c != '\\' || i + 1 >= n) {
            put1(b, (char)c);
            i++;
            continue;
        }
        unsigned char d = (unsigned char)s[i + 1];
        if (!rlpi_is_alpha(d)) {
            if (!(d == ',' || d == ';' || d == ':' || d == '!' || d == '$' || rlpi_is_space(d)))
                put(b, s + i, 2); /* \{ \} \\ … kept */
            i += 2;
            continue;
        }
        size_t j = i + 1;
        while (j < n && rlpi_is_alpha((unsigned char)s[j]))
            j++;
        const char *name = s + i + 1;
        size_t len = j - i - 1;
        if (is_name(name, len, "left") || is_name(name, len, "right")) {
            i = skip_space(s, n, j);
            if (i < n && s[i] == '.')
                i++; /* \left. is an invisible delimiter */
            continue;
        }
        int frac = is_name(name, len, "frac") || is_name(name, len, "dfrac") || is_name(name, len, "tfrac");
        if (frac && depth < RLPI_NORM_MAX_DEPTH) {
            put(b, "\\frac", 5);
            i = norm_arg(s, n, j, b, depth);
            i = norm_arg(s, n, i, b, depth);
            continue;
        }
        if (frac) {
            put(b, "\\frac", 5);
            i = j;
            continue;
        }
        if (is_name(name, len, "sqrt") && depth < RLPI_NORM_MAX_DEPTH) {
            put(b, "\\sqrt", 5);
            i = skip_space(s, n, j);
            if (i < n && s[i] == '[') {
                const char *close = memchr(s + i, ']', n - i);
                size_t m = close ? (size_t)(close - s) : n;
                put1(b, '[');
                norm(s + i + 1, (m < n ? m : n) - i - 1, b, depth + 1);
                put1(b, ']');
                i = m < n ? m + 1 : n;
            }
            i = norm_arg(s, n, i, b, depth);
            continue;
        }
        put(b, s + i, j - i);
        i = j;
        /* "\pi r" must not become "\pir" */
        size_t k = skip_space(s, n, i);
        if (k > i && k < n && rlpi_is_alpha((unsigned char)s[k]))
            put1(b, ' ');
    }
}

char *rlpi_math_normalise(const char *s, size_t n, size_t *out_len)
{
    buf b = {malloc(n + 16), 0, n + 16, 0};
    if (!b.p)
        return NULL;
    norm(s, n, &b, 0);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    size_t len = b.len;
    char *p = b.p;
    for (int pass = 0; pass < 2; pass++) {
        if (len > 0 && p[len - 1] == '.')
            len--;
        if (len >= 2 && p[0] == '{' && match_brace(p, len, 0) == len - 1) {
            memmove(p, p + 1, len - 2);
            len -= 2;
        }
    }
    p[len] = '\0';
    *out_len = len;
    return p;
}
