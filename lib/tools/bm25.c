/* BM25 index: a term dictionary (open addressing), postings of
 * (document, term frequency) per term, document lengths. Scores are
 * accumulated per query in a scratch array the query owns, so the index
 * itself is never written after it is built. */
#include "tools/bm25.h"

#include "core/error.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct posting {
    uint32_t doc, tf;
} posting;

typedef struct term {
    char *s; /* lower-cased token */
    size_t len;
    posting *post; /* (n_post), by document ascending */
    size_t n_post, cap_post;
    double idf;
} term;

struct rlpi_bm25 {
    size_t n;
    char **ids, **titles, **texts; /* (n) owned */
    uint32_t *len;                 /* (n) tokens per document */
    double avgdl;
    term *terms; /* (n_terms) */
    size_t n_terms, cap_terms;
    size_t *slot; /* (cap_slot) term index + 1; 0 = empty */
    size_t cap_slot;
};

static int is_alnum(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int rlpi_bm25_tokenize(const char *s, size_t n, int (*fn)(const char *tok, size_t len, void *ctx), void *ctx)
{
    char buf[256];
    size_t i = 0;
    while (i < n) {
        while (i < n && !is_alnum((unsigned char)s[i]))
            i++;
        size_t b = i;
        while (i < n && is_alnum((unsigned char)s[i]))
            i++;
        if (i == b)
            break;
        /* tokens longer than the buffer keep their first 255 bytes: such
         * strings are not words anyway */
        size_t len = i - b < sizeof buf ? i - b : sizeof buf - 1;
        for (size_t k = 0; k < len; k++) {
            unsigned char c = (unsigned char)s[b + k];
            buf[k] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        int r = fn(buf, len, ctx);
        if (r)
            return r;
    }
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* The slot of a term in the table: where it is, or the empty slot where
 * it would go. */
static size_t slot_of(const rlpi_bm25 *ix, const char *s, size_t n)
{
    size_t i = (size_t)(hash_bytes(s, n) & (ix->cap_slot - 1));
    while (ix->slot[i]) {
        const term *t = &ix->terms[ix->slot[i] - 1];
        if (t->len == n && !memcmp(t->s, s, n))
            return i;
        i = (i + 1) & (ix->cap_slot - 1);
    }
    return i;
}

static long term_lookup(const rlpi_bm25 *ix, const char *s, size_t n)
{
    if (!ix->cap_slot)
        return -1;
    size_t i = slot_of(ix, s, n);
    return ix->slot[i] ? (long)ix->slot[i] - 1 : -1;
}

static int grow_table(rlpi_bm25 *ix)
{
    size_t cap = ix->cap_slot ? ix->cap_slot * 2 : 1024;
    size_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return -1;
    free(ix->slot);
    ix->slot = slot;
    ix->cap_slot = cap;
    for (size_t t = 0; t < ix->n_terms; t++)
        ix->slot[slot_of(ix, ix->terms[t].s, ix->terms[t].len)] = t + 1;
    return 0;
}

typedef struct add_ctx {
    rlpi_bm25 *ix;
    uint32_t doc;
    uint32_t tokens;
} add_ctx;

/* Adds one occurrence of a token in document ctx->doc. */
static int add_token(const char *tok, size_t len, void *vctx)
{
    add_ctx *c = vctx;
    rlpi_bm25 *ix = c->ix;
    c->tokens++;
    if ((ix->n_terms + 1) * 2 > ix->cap_slot && grow_table(ix))
        return -1;
    size_t i = slot_of(ix, tok, len);
    term *t;
    if (ix->slot[i]) {
        t = &ix->terms[ix->slot[i] - 1];
    } else {
        if (ix->n_terms == ix->cap_terms) {
            size_t cap = ix->cap_terms ? ix->cap_terms * 2 : 256;
            term *p = realloc(ix->terms, cap * sizeof *p);
            if (!p)
                return -1;
            ix->terms = p;
            ix->cap_terms = cap;
        }
        t = &ix->terms[ix->n_terms];
        memset(t, 0, sizeof *t);
        if (!(t->s = malloc(len + 1)))
            return -1;
        memcpy(t->s, tok, len);
        t->s[len] = '\0';
        t->len = len;
        ix->slot[i] = ++ix->n_terms;
    }
    if (t->n_post && t->post[t->n_post - 1].doc == c->doc) {
        t->post[t->n_post - 1].tf++;
        return 0;
    }
    if (t->n_post == t->cap_post) {
        size_t cap = t->cap_post ? t->cap_post * 2 : 4;
        posting *p = realloc(t->post, cap * sizeof *p);
        if (!p)
            return -1;
        t->post = p;
        t->cap_post = cap;
    }
    t->post[t->n_post++] = (posting){c->doc, 1};
    return 0;
}

void rlpi_bm25_free(rlpi_bm25 *ix)
{
    if (!ix)
        return;
    for (size_t i = 0; i < ix->n; i++) {
        if (ix->ids)
            free(ix->ids[i]);
        if (ix->titles)
            free(ix->titles[i]);
        if (ix->texts)
            free(ix->texts[i]);
    }
    for (size_t t = 0; t < ix->n_terms; t++) {
        free(ix->terms[t].s);
        free(ix->terms[t].post);
    }
    free(ix->ids);
    free(ix->titles);
    free(ix->texts);
    free(ix->len);
    free(ix->terms);
    free(ix->slot);
    free(ix);
}

int rlpi_bm25_build(rlpi_bm25 **out, const rlpi_doc *docs, size_t n)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    RLPI_CHECK_ARG(docs || n == 0, "docs is NULL");
    RLPI_CHECK_ARG(n < UINT32_MAX, "too many documents");
    for (size_t i = 0; i < n; i++)
        if (!docs[i].id || !docs[i].title || !docs[i].text)
            return rlpi_error_set(RLP_E_INVALID_ARG, "BM25 index: document %zu has a NULL field", i);
    rlpi_bm25 *ix = calloc(1, sizeof *ix);
    if (!ix)
        return rlpi_error_set(RLP_E_NOMEM, "BM25 index: out of memory");
    ix->n = n;
    size_t m = n ? n : 1;
    ix->ids = calloc(m, sizeof *ix->ids);
    ix->titles = calloc(m, sizeof *ix->titles);
    ix->texts = calloc(m, sizeof *ix->texts);
    ix->len = calloc(m, sizeof *ix->len);
    int fail = !ix->ids || !ix->titles || !ix->texts || !ix->len;
    uint64_t total = 0;
    for (size_t i = 0; i < n && !fail; i++) {
        fail = !(ix->ids[i] = strdup(docs[i].id)) || !(ix->titles[i] = strdup(docs[i].title)) ||
               !(ix->texts[i] = strdup(docs[i].text));
        add_ctx c = {ix, (uint32_t)i, 0};
        fail = fail || rlpi_bm25_tokenize(docs[i].title, strlen(docs[i].title), add_token, &c) ||
               rlpi_bm25_tokenize(docs[i].text, strlen(docs[i].text), add_token, &c);
        ix->len[i] = c.tokens;
        total += c.tokens;
    }
    if (fail) {
        rlpi_bm25_free(ix);
        return rlpi_error_set(RLP_E_NOMEM, "BM25 index: out of memory");
    }
    ix->avgdl = n ? (double)total / (double)n : 0.0;
    for (size_t t = 0; t < ix->n_terms; t++) {
        double df = (double)ix->terms[t].n_post;
        ix->terms[t].idf = log(1.0 + ((double)n - df + 0.5) / (df + 0.5));
    }
    *out = ix;
    return RLP_OK;
}

size_t rlpi_bm25_size(const rlpi_bm25 *ix)
{
    return ix ? ix->n : 0;
}

rlpi_doc rlpi_bm25_doc(const rlpi_bm25 *ix, size_t i)
{
    return (rlpi_doc){ix->ids[i], ix->titles[i], ix->texts[i]};
}

long rlpi_bm25_find(const rlpi_bm25 *ix, const char *key, size_t len)
{
    if (!ix || !key)
        return -1;
    while (len && (key[0] == ' ' || key[0] == '\n' || key[0] == '\t' || key[0] == '\r')) {
        key++;
        len--;
    }
    while (len && (key[len - 1] == ' ' || key[len - 1] == '\n' || key[len - 1] == '\t' || key[len - 1] == '\r'))
        len--;
    for (size_t i = 0; i < ix->n; i++)
        if (strlen(ix->ids[i]) == len && !memcmp(ix->ids[i], key, len))
            return (long)i;
    for (size_t i = 0; i < ix->n; i++) {
        const char *t = ix->titles[i];
        if (strlen(t) != len)
            continue;
        size_t k = 0;
        for (; k < len; k++) {
            unsigned char a = (unsigned char)t[k], b = (unsigned char)key[k];
            if ((a >= 'A' && a <= 'Z' ? a + 32 : a) != (b >= 'A' && b <= 'Z' ? b + 32 : b))
                break;
        }
        if (k == len)
            return (long)i;
    }
    return -1;
}

typedef struct query_ctx {
    const rlpi_bm25 *ix;
    double *score;   /* (n) */
    uint32_t *touched; /* documents with a score, in first-touch order */
    size_t n_touched;
} query_ctx;

static int score_token(const char *tok, size_t len, void *vctx)
{
    query_ctx *q = vctx;
    const rlpi_bm25 *ix = q->ix;
    long t = term_lookup(ix, tok, len);
    if (t < 0)
        return 0;
    const term *tm = &ix->terms[t];
    for (size_t p = 0; p < tm->n_post; p++) {
        uint32_t d = tm->post[p].doc;
        double tf = (double)tm->post[p].tf;
        double norm = RLPI_BM25_K1 * (1.0 - RLPI_BM25_B + RLPI_BM25_B * (double)ix->len[d] / ix->avgdl);
        if (q->score[d] == 0.0)
            q->touched[q->n_touched++] = d;
        q->score[d] += tm->idf * tf * (RLPI_BM25_K1 + 1.0) / (tf + norm);
    }
    return 0;
}


long rlpi_bm25_search(const rlpi_bm25 *ix, const char *query, size_t qlen, size_t k, rlpi_bm25_hit *hits)
{
    if (!ix || !query || !hits || k == 0 || ix->n == 0)
        return 0;
    query_ctx q = {ix, calloc(ix->n, sizeof(double)), malloc(ix->n * sizeof(uint32_t)), 0};
    if (!q.score || !q.touched) {
        free(q.score);
        free(q.touched);
        return rlpi_error_set(RLP_E_NOMEM, "BM25 search: out of memory");
    }
    rlpi_bm25_tokenize(query, qlen, score_token, &q);
    /* selection of the k best by repeated scans: k is a handful (top_k),
     * so k passes over the touched documents beat sorting them all, and
     * need no shared comparator state between threads */
    size_t n_out = 0;
    for (; n_out < k && n_out < q.n_touched; n_out++) {
        size_t best = n_out;
        for (size_t j = n_out + 1; j < q.n_touched; j++) {
            uint32_t a = q.touched[j], b = q.touched[best];
            if (q.score[a] > q.score[b] || (q.score[a] == q.score[b] && a < b))
                best = j;
        }
        uint32_t tmp = q.touched[n_out];
        q.touched[n_out] = q.touched[best];
        q.touched[best] = tmp;
        hits[n_out] = (rlpi_bm25_hit){q.touched[n_out], q.score[q.touched[n_out]]};
    }
    free(q.score);
    free(q.touched);
    return (long)n_out;
}

/* ---- JSONL corpus ---------------------------------------------------------- */

int rlpi_bm25_load_jsonl(rlpi_bm25 **out, const char *path)
{
    RLPI_CHECK_ARG(out && path, "NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f)
        return rlpi_error_set(RLP_E_IO, "corpus %s: %s", path, strerror(errno));
    rlpi_doc *docs = NULL;
    json_t **objs = NULL;
    char **ids = NULL; /* ids written from integers */
    size_t n = 0, cap = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t got;
    size_t lineno = 0;
    int rc = RLP_OK;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        size_t k = 0;
        while (k < (size_t)got && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n'))
            k++;
        if (k == (size_t)got)
            continue;
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)got, 0, &err);
        if (!o) {
            rc = rlpi_error_set(RLP_E_FORMAT, "corpus %s:%zu: %s", path, lineno, err.text);
            break;
        }
        json_t *id = json_object_get(o, "id"), *title = json_object_get(o, "title"),
               *text = json_object_get(o, "text");
        if (!json_is_object(o) || !json_is_string(text) || (title && !json_is_string(title)) ||
            !(json_is_string(id) || json_is_integer(id))) {
            json_decref(o);
            rc = rlpi_error_set(RLP_E_FORMAT,
                                "corpus %s:%zu: not a {\"id\": string or integer, \"title\": string, \"text\": "
                                "string} object",
                                path, lineno);
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            rlpi_doc *d = realloc(docs, nc * sizeof *d);
            if (d)
                docs = d;
            json_t **j = realloc(objs, nc * sizeof *j);
            if (j)
                objs = j;
            char **s = realloc(ids, nc * sizeof *s);
            if (s)
                ids = s;
            if (!d || !j || !s) {
                json_decref(o);
                rc = rlpi_error_set(RLP_E_NOMEM, "corpus %s: out of memory", path);
                break;
            }
            cap = nc;
        }
        objs[n] = o;
        ids[n] = NULL;
        if (json_is_integer(id)) {
            char buf[32];
            snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(id));
            ids[n] = strdup(buf);
        }
        docs[n] = (rlpi_doc){ids[n] ? ids[n] : json_is_string(id) ? json_string_value(id) : "",
                             title ? json_string_value(title) : "", json_string_value(text)};
        n++;
        if (json_is_integer(id) && !ids[n - 1]) {
            rc = rlpi_error_set(RLP_E_NOMEM, "corpus %s: out of memory", path);
            break;
        }
    }
    if (!rc && ferror(f))
        rc = rlpi_error_set(RLP_E_IO, "corpus %s: read error", path);
    free(line);
    fclose(f);
    if (!rc)
        rc = rlpi_bm25_build(out, docs, n);
    for (size_t i = 0; i < n; i++) {
        json_decref(objs[i]);
        free(ids[i]);
    }
    free(docs);
    free(objs);
    free(ids);
    return rc;
}
