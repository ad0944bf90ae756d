/* An Okapi BM25 index over a small document collection, the "search"
 * tool of the built-in tools environment. Built once, then read-only:
 * searches from many threads at once are safe. Knows nothing of prompts
 * or tool-call syntax.
 *
 * score(D, Q) = sum over query tokens q (repeats count again) of
 *   idf(q) * tf(q, D) * (k1 + 1) / (tf(q, D) + k1 * (1 - b + b * |D| / avgdl))
 * idf(q) = ln(1 + (N - df(q) + 0.5) / (df(q) + 0.5))   (Lucene's, never negative)
 * with k1 = 1.2, b = 0.75 (Robertson & Zaragoza 2009, "The Probabilistic
 * Relevance Framework: BM25 and Beyond", eq. 3.8 with Lucene's idf). A
 * document's tokens are those of its title, then its text; a token is a
 * maximal run of ASCII letters and digits, lower-cased. */
#ifndef RLPI_TOOLS_BM25_H
#define RLPI_TOOLS_BM25_H

#include <stddef.h>

#define RLPI_BM25_K1 1.2
#define RLPI_BM25_B 0.75

typedef struct rlpi_doc {
    const char *id, *title, *text; /* NUL-terminated */
} rlpi_doc;

typedef struct rlpi_bm25_hit {
    size_t doc;   /* index in the collection */
    double score; /* > 0 */
} rlpi_bm25_hit;

typedef struct rlpi_bm25 rlpi_bm25;

/* Indexes docs (copied). n may be 0 (every search finds nothing).
 * RLP_OK, RLP_E_INVALID_ARG (a NULL field), RLP_E_NOMEM. */
int rlpi_bm25_build(rlpi_bm25 **out, const rlpi_doc *docs, size_t n);

/* Indexes a JSONL file, one {"id", "title", "text"} object a line ("id"
 * a string or an integer; "title" may be absent; blank lines skipped).
 * RLP_E_IO (the file), RLP_E_FORMAT naming the line, RLP_E_NOMEM. */
int rlpi_bm25_load_jsonl(rlpi_bm25 **out, const char *path);

void rlpi_bm25_free(rlpi_bm25 *ix);

size_t rlpi_bm25_size(const rlpi_bm25 *ix);
/* Document i (borrowed, valid until the index is freed). */
rlpi_doc rlpi_bm25_doc(const rlpi_bm25 *ix, size_t i);

/* The document whose id equals key, else the first whose title equals it
 * (ASCII case-insensitive, surrounding whitespace of key ignored);
 * -1 when none. */
long rlpi_bm25_find(const rlpi_bm25 *ix, const char *key, size_t len);

/* The k best documents for the query (qlen bytes) into hits (room for k):
 * only documents sharing a token with the query, by score descending,
 * ties by lower index. Returns how many were written, or a negative
 * RLP_E_NOMEM. */
long rlpi_bm25_search(const rlpi_bm25 *ix, const char *query, size_t qlen, size_t k, rlpi_bm25_hit *hits);

/* Calls fn for every token of s (n bytes): the lower-cased bytes in tok
 * (len). Stops early and returns fn's value when it is non-zero. Exposed
 * for tests. */
int rlpi_bm25_tokenize(const char *s, size_t n, int (*fn)(const char *tok, size_t len, void *ctx), void *ctx);

#endif
