/* The lookup task's generator: syllable names, a random but consistent
 * set of relations (every country has a capital among its own cities),
 * documents that state each entity's relations in plain sentences, and
 * relation chains rendered as nested "the X of" phrases. Everything comes
 * from rlpi_rng streams, so the same (seed, entities) gives the same KB on
 * every platform. */
#include "task/lookup.h"

#include "core/error.h"
#include "core/rng.h"
#include "task/strbuf.h"

#include <stdlib.h>
#include <string.h>

static const char *const SYLLABLES[] = {
    "ka", "lo", "mir", "ven", "ta", "ro", "sel", "dru", "vex", "qua", "zor", "fen", "bal", "tri", "nor",
    "ela", "mos", "pav", "rin", "tho", "gal", "dor", "ish", "u",   "bre", "cal", "lum", "ny",  "os",  "pe",
    "sar", "tul", "vi",  "wen", "xa",  "yor", "zel", "kri", "mo",  "dan", "fi",  "har", "jo",  "kel", "ra",
};
#define N_SYL (sizeof SYLLABLES / sizeof SYLLABLES[0])

static const char *const COMPANY_SUFFIX[] = {"Labs", "Industries", "Systems", "Group", "Works", "Holdings"};
static const char *const COUNTRY_SUFFIX[] = {"ia", "land", "stan", "ora"};

/* Open-addressing set of the words used so far: names must be unique,
 * and words too, so that a query for one entity never matches another's
 * name by a shared word. */
typedef struct word_set {
    char **slot;
    size_t cap;
} word_set;

static uint64_t hash_str(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * UINT64_C(0x100000001b3);
    return h;
}

/* 1 inserted, 0 already there. */
static int set_insert(word_set *ws, char *w)
{
    size_t i = (size_t)(hash_str(w) & (ws->cap - 1));
    while (ws->slot[i]) {
        if (!strcmp(ws->slot[i], w))
            return 0;
        i = (i + 1) & (ws->cap - 1);
    }
    ws->slot[i] = w;
    return 1;
}

/* A fresh capitalised word of 2–3 syllables (plus an optional suffix),
 * written to buf. Returns 0, or -1 when no unused word was found. */
static int fresh_word(rlpi_rng *r, word_set *ws, const char *suffix, char *buf, size_t cap, char **owned)
{
    for (int tries = 0; tries < 1000; tries++) {
        int n = 2 + (int)rlpi_rng_below(r, 2);
        size_t len = 0;
        buf[0] = '\0';
        for (int k = 0; k < n; k++) {
            const char *s = SYLLABLES[rlpi_rng_below(r, N_SYL)];
            size_t m = strlen(s);
            memcpy(buf + len, s, m);
            len += m;
        }
        if (suffix) {
            size_t m = strlen(suffix);
            memcpy(buf + len, suffix, m);
            len += m;
        }
        buf[len] = '\0';
        (void)cap;
        buf[0] = (char)(buf[0] - 'a' + 'A');
        char *w = strdup(buf);
        if (!w)
            return -2;
        if (set_insert(ws, w)) {
            *owned = w;
            return 0;
        }
        free(w);
    }
    return -1;
}

void rlpi_lookup_kb_free(rlpi_lookup_kb *kb)
{
    if (!kb)
        return;
    for (size_t i = 0; i < kb->n; i++) {
        if (kb->ents)
            free(kb->ents[i].name);
        if (kb->ids)
            free(kb->ids[i]);
        if (kb->texts)
            free(kb->texts[i]);
    }
    free(kb->ents);
    free(kb->ids);
    free(kb->texts);
    free(kb);
}

static int pick(rlpi_rng *r, size_t lo, size_t hi)
{
    return (int)(lo + rlpi_rng_below(r, hi - lo));
}

static char *render_doc(const rlpi_lookup_kb *kb, size_t i)
{
    const rlpi_lookup_entity *e = &kb->ents[i];
    const rlpi_lookup_entity *E = kb->ents;
    rlpi_sb b = {0};
    switch (e->kind) {
    case RLPI_LOOKUP_PERSON:
        rlpi_sb_printf(&b, "%s is a person. ", e->name);
        rlpi_sb_printf(&b, "%s was born in the city of %s. ", e->name, E[e->rel[RLPI_LOOKUP_BORN_IN]].name);
        rlpi_sb_printf(&b, "%s works for %s.", e->name, E[e->rel[RLPI_LOOKUP_WORKS_FOR]].name);
        break;
    case RLPI_LOOKUP_CITY:
        rlpi_sb_printf(&b, "%s is a city in the country of %s.", e->name, E[e->rel[RLPI_LOOKUP_LOCATED_IN]].name);
        break;
    case RLPI_LOOKUP_COUNTRY:
        rlpi_sb_printf(&b, "%s is a country. The capital of %s is %s.", e->name, e->name,
                       E[e->rel[RLPI_LOOKUP_CAPITAL]].name);
        break;
    default:
        rlpi_sb_printf(&b, "%s is a company. ", e->name);
        rlpi_sb_printf(&b, "%s was founded by %s. ", e->name, E[e->rel[RLPI_LOOKUP_FOUNDED_BY]].name);
        rlpi_sb_printf(&b, "%s is headquartered in the city of %s.", e->name,
                       E[e->rel[RLPI_LOOKUP_HEADQUARTERED_IN]].name);
        break;
    }
    return rlpi_sb_take(&b);
}

int rlpi_lookup_kb_generate(rlpi_lookup_kb **out, uint64_t seed, size_t entities)
{
    RLPI_CHECK_ARG(out, "out is NULL");
    if (entities < RLPI_LOOKUP_MIN_ENTITIES || entities > RLPI_LOOKUP_MAX_ENTITIES)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lookup KB: \"entities\" must be in [%d, %d], not %zu",
                              RLPI_LOOKUP_MIN_ENTITIES, RLPI_LOOKUP_MAX_ENTITIES, entities);
    /* kinds by share of the KB: about 1/12 countries, 1/4 cities, 1/6
     * companies, the rest people; at least 2 cities per country */
    size_t n_country = entities / 12 < 2 ? 2 : entities / 12;
    size_t n_city = entities / 4 < 2 * n_country ? 2 * n_country : entities / 4;
    size_t n_company = entities / 6 < 2 ? 2 : entities / 6;
    size_t n_person = entities - n_country - n_city - n_company;
    size_t c0 = 0, c1 = n_country, c2 = c1 + n_city, c3 = c2 + n_company; /* kind ranges */
    (void)n_person;

    rlpi_lookup_kb *kb = calloc(1, sizeof *kb);
    word_set ws = {0};
    ws.cap = 1;
    while (ws.cap < 4 * entities + 16)
        ws.cap *= 2;
    ws.slot = calloc(ws.cap, sizeof *ws.slot);
    if (!kb || !ws.slot) {
        free(kb);
        free(ws.slot);
        return rlpi_error_set(RLP_E_NOMEM, "lookup KB: out of memory");
    }
    kb->seed = seed;
    kb->n = entities;
    kb->ents = calloc(entities, sizeof *kb->ents);
    kb->ids = calloc(entities, sizeof *kb->ids);
    kb->texts = calloc(entities, sizeof *kb->texts);
    int rc = RLP_OK;
    if (!kb->ents || !kb->ids || !kb->texts) {
        rc = rlpi_error_set(RLP_E_NOMEM, "lookup KB: out of memory");
        goto done;
    }
    /* a stream id no question stream uses (those are the item indices) */
    rlpi_rng r;
    rlpi_rng_seed(&r, seed, UINT64_C(0x6b62000000000000));
    char buf[128];
    for (size_t i = 0; i < entities && !rc; i++) {
        rlpi_lookup_entity *e = &kb->ents[i];
        for (int k = 0; k < RLPI_LOOKUP_N_RELATIONS; k++)
            e->rel[k] = -1;
        e->kind = i < c1 ? RLPI_LOOKUP_COUNTRY : i < c2 ? RLPI_LOOKUP_CITY : i < c3 ? RLPI_LOOKUP_COMPANY : RLPI_LOOKUP_PERSON;
        char *w1 = NULL, *w2 = NULL;
        int f = 0;
        if (e->kind == RLPI_LOOKUP_COUNTRY) {
            f = fresh_word(&r, &ws, COUNTRY_SUFFIX[rlpi_rng_below(&r, 4)], buf, sizeof buf, &w1);
            e->name = f ? NULL : strdup(w1);
        } else if (e->kind == RLPI_LOOKUP_CITY) {
            f = fresh_word(&r, &ws, NULL, buf, sizeof buf, &w1);
            e->name = f ? NULL : strdup(w1);
        } else {
            f = fresh_word(&r, &ws, NULL, buf, sizeof buf, &w1);
            if (!f)
                f = fresh_word(&r, &ws, NULL, buf, sizeof buf, &w2);
            if (!f) {
                rlpi_sb b = {0};
                if (e->kind == RLPI_LOOKUP_COMPANY)
                    rlpi_sb_printf(&b, "%s %s", w1, COMPANY_SUFFIX[rlpi_rng_below(&r, 6)]);
                else
                    rlpi_sb_printf(&b, "%s %s", w1, w2);
                e->name = rlpi_sb_take(&b);
            }
        }
        if (f == -1)
            rc = rlpi_error_set(RLP_E_INTERNAL, "lookup KB: ran out of fresh names at entity %zu", i);
        else if (f || !e->name)
            rc = rlpi_error_set(RLP_E_NOMEM, "lookup KB: out of memory");
        else {
            snprintf(buf, sizeof buf, "e%zu", i);
            if (!(kb->ids[i] = strdup(buf)))
                rc = rlpi_error_set(RLP_E_NOMEM, "lookup KB: out of memory");
        }
    }
    if (rc)
        goto done;
    /* cities: the first n_country ones are the capitals of the countries
     * in order, the rest fall in random countries */
    for (size_t i = c1; i < c2; i++) {
        size_t j = i - c1;
        int country = j < n_country ? (int)j : pick(&r, c0, c1);
        kb->ents[i].rel[RLPI_LOOKUP_LOCATED_IN] = country;
        if (j < n_country)
            kb->ents[country].rel[RLPI_LOOKUP_CAPITAL] = (int32_t)i;
    }
    for (size_t i = c2; i < c3; i++) {
        kb->ents[i].rel[RLPI_LOOKUP_FOUNDED_BY] = pick(&r, c3, entities);
        kb->ents[i].rel[RLPI_LOOKUP_HEADQUARTERED_IN] = pick(&r, c1, c2);
    }
    for (size_t i = c3; i < entities; i++) {
        kb->ents[i].rel[RLPI_LOOKUP_BORN_IN] = pick(&r, c1, c2);
        kb->ents[i].rel[RLPI_LOOKUP_WORKS_FOR] = pick(&r, c2, c3);
    }
    for (size_t i = 0; i < entities && !rc; i++)
        if (!(kb->texts[i] = render_doc(kb, i)))
            rc = rlpi_error_set(RLP_E_NOMEM, "lookup KB: out of memory");
done:
    for (size_t i = 0; i < ws.cap; i++)
        free(ws.slot[i]);
    free(ws.slot);
    if (rc) {
        rlpi_lookup_kb_free(kb);
        return rc;
    }
    *out = kb;
    return RLP_OK;
}

/* "the X of <np>" for each relation: nested, they read inside out. */
static const char *const REL_NOUN[RLPI_LOOKUP_N_RELATIONS] = {
    "the birthplace of", "the employer of", "the country of", "the capital of", "the founder of",
    "the headquarters city of",
};

/* What the answer is, for the question's wording. */
static const char *const REL_ANSWER_KIND[RLPI_LOOKUP_N_RELATIONS] = {
    "city", "company", "country", "city", "person", "city",
};

int rlpi_lookup_question_generate(rlpi_lookup_question *q, const rlpi_lookup_kb *kb, uint64_t seed, uint64_t index,
                                  int min_hops, int max_hops)
{
    RLPI_CHECK_ARG(q && kb, "NULL argument");
    if (min_hops < 1 || max_hops < min_hops || max_hops > RLPI_LOOKUP_MAX_HOPS)
        return rlpi_error_set(RLP_E_INVALID_ARG, "lookup: hops must satisfy 1 <= min_hops (%d) <= max_hops (%d) <= %d",
                              min_hops, max_hops, RLPI_LOOKUP_MAX_HOPS);
    memset(q, 0, sizeof *q);
    rlpi_rng r;
    rlpi_rng_seed(&r, seed, index);
    int hops = min_hops + (int)rlpi_rng_below(&r, (uint64_t)(max_hops - min_hops + 1));
    for (int tries = 0; tries < 10000; tries++) {
        int32_t cur = (int32_t)rlpi_rng_below(&r, kb->n);
        q->path[0] = cur;
        int ok = 1;
        for (int h = 0; h < hops && ok; h++) {
            const rlpi_lookup_entity *e = &kb->ents[cur];
            int cand[RLPI_LOOKUP_N_RELATIONS], nc = 0;
            for (int k = 0; k < RLPI_LOOKUP_N_RELATIONS; k++)
                if (e->rel[k] >= 0)
                    cand[nc++] = k;
            int k = cand[rlpi_rng_below(&r, (uint64_t)nc)];
            int32_t next = e->rel[k];
            for (int j = 0; j <= h; j++)
                if (q->path[j] == next)
                    ok = 0;
            q->rel[h] = k;
            q->path[h + 1] = next;
            cur = next;
        }
        if (!ok)
            continue;
        q->hops = hops;
        rlpi_sb b = {0};
        /* the outermost relation is the question word; the inner ones nest */
        int last = q->rel[hops - 1];
        if (last == RLPI_LOOKUP_LOCATED_IN)
            rlpi_sb_puts(&b, "In which country is ");
        else if (last == RLPI_LOOKUP_FOUNDED_BY)
            rlpi_sb_puts(&b, "Who is the founder of ");
        else
            rlpi_sb_printf(&b, "Which %s is %s ", REL_ANSWER_KIND[last], REL_NOUN[last]);
        for (int h = hops - 2; h >= 0; h--)
            rlpi_sb_printf(&b, "%s ", REL_NOUN[q->rel[h]]);
        rlpi_sb_printf(&b, "%s?", kb->ents[q->path[0]].name);
        if (!(q->text = rlpi_sb_take(&b)))
            return rlpi_error_set(RLP_E_NOMEM, "lookup: out of memory");
        q->answer = kb->ents[q->path[hops]].name;
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_INTERNAL, "lookup: no %d-hop path without repeats found (seed %llu, index %llu)",
                          hops, (unsigned long long)seed, (unsigned long long)index);
}
