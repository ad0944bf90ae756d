#!/usr/bin/python3
"""Reference BM25 scores for lib/tools/bm25.c: Okapi BM25 with k1 = 1.2,
b = 0.75 and Lucene's idf ln(1 + (N - df + 0.5) / (df + 0.5)) (Robertson &
Zaragoza 2009, eq. 3.8; Lucene's BM25Similarity), written here in numpy
from the formula. When the rank_bm25 package is installed, its BM25Okapi
(term counting and length normalisation) is run too with the idf replaced
by the same formula (its own ATIRE idf with an epsilon floor differs), and
both must agree to 1e-12. Tokens: maximal runs of ASCII letters and digits
of title + " " + text, lower-cased. Writes tests/reference/fixtures/
bm25_fixture.json; tests/unit/test_tools.c compares every score of every
query (tolerance 1e-9: both sides sum the same float64 terms, possibly in
another order).

Regenerate: python3 tests/reference/make_bm25_fixture.py
(numpy; optionally pip install rank_bm25==0.2.2)."""
import json
import math
import os
import re

import numpy as np

K1, B = 1.2, 0.75

DOCS = [
    {"id": "d0", "title": "Velmora", "text": "Velmora is a city in the country of Zorvia. Velmora has a river."},
    {"id": "d1", "title": "Zorvia", "text": "Zorvia is a country. The capital of Zorvia is Velmora."},
    {"id": "d2", "title": "Vexaro Labs", "text": "Vexaro Labs is a company founded by Talvin Morasek in 1987."},
    {"id": "d3", "title": "Talvin Morasek", "text": "Talvin Morasek was born in Velmora. Talvin works for Vexaro Labs."},
    {"id": "d4", "title": "River", "text": "A river is a natural flowing watercourse; the river-bank is where the water meets land."},
    {"id": "d5", "title": "", "text": "Numbers like 42, 3.14 and X-11 are tokens too: 42 42."},
    {"id": "d6", "title": "Empty", "text": ""},
    {"id": "d7", "title": "Caf\u00e9 \u00dcber", "text": "Non-ASCII bytes separate words: caf\u00e9 \u00fcber na\u00efve."},
]
QUERIES = [
    "founder of Vexaro Labs",
    "Velmora",
    "capital of Zorvia",
    "river river",
    "42",
    "where was Talvin Morasek born?",
    "nothing matches this zzzz",
    "caf ber na ve",
    "THE the The",
]


def tokens(s):
    # [A-Za-z0-9]+ over the UTF-8 bytes: non-ASCII bytes separate words
    return [t.decode().lower() for t in re.findall(rb"[A-Za-z0-9]+", s.encode("utf-8"))]


def doc_tokens(d):
    return tokens(d["title"]) + tokens(d["text"])


def numpy_scores(corpus, query):
    n = len(corpus)
    dl = np.array([len(c) for c in corpus], dtype=np.float64)
    avgdl = dl.mean()
    score = np.zeros(n)
    for q in query:
        tf = np.array([c.count(q) for c in corpus], dtype=np.float64)
        df = float((tf > 0).sum())
        if df == 0:
            continue
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
    return score


def rank_bm25_scores(corpus, query):
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        return None

    class LuceneIdf(BM25Okapi):
        def _calc_idf(self, nd):
            for word, freq in nd.items():
                self.idf[word] = math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

    return np.array(LuceneIdf(corpus, k1=K1, b=B).get_scores(query))


def main():
    corpus = [doc_tokens(d) for d in DOCS]
    cases = []
    checked = 0
    for q in QUERIES:
        s = numpy_scores(corpus, tokens(q))
        r = rank_bm25_scores(corpus, tokens(q))
        if r is not None:
            assert np.allclose(s, r, rtol=0, atol=1e-12), (q, s, r)
            checked += 1
        cases.append({"query": q, "scores": [float(x) for x in s]})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "bm25_fixture.json")
    with open(out, "w") as f:
        json.dump({"k1": K1, "b": B, "docs": DOCS, "queries": cases}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}; rank_bm25 cross-check on {checked} of {len(QUERIES)} queries")


if __name__ == "__main__":
    main()
