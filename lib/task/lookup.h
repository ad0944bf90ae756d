/* A generated multi-hop lookup task: a synthetic knowledge base of
 * fictional people, cities, countries and companies (names made of
 * syllables, so no model knows the answers), one document per entity, and
 * questions that chain 2–4 relations ("the country of the birthplace of
 * the founder of Vexaro Labs"). Pure functions of (seed, entities) and
 * (seed, index); knows nothing of prompts, cursors or tokenizers. The
 * built-in "tools" environment regenerates the same documents to search. */
#ifndef RLPI_TASK_LOOKUP_H
#define RLPI_TASK_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

#define RLPI_LOOKUP_MIN_ENTITIES 20
#define RLPI_LOOKUP_MAX_ENTITIES 20000
#define RLPI_LOOKUP_MAX_HOPS 6

enum { RLPI_LOOKUP_PERSON = 0, RLPI_LOOKUP_CITY = 1, RLPI_LOOKUP_COUNTRY = 2, RLPI_LOOKUP_COMPANY = 3 };

/* Relations; each maps an entity of one kind to exactly one entity. */
enum {
    RLPI_LOOKUP_BORN_IN = 0,          /* person -> city */
    RLPI_LOOKUP_WORKS_FOR = 1,        /* person -> company */
    RLPI_LOOKUP_LOCATED_IN = 2,       /* city -> country */
    RLPI_LOOKUP_CAPITAL = 3,          /* country -> city */
    RLPI_LOOKUP_FOUNDED_BY = 4,       /* company -> person */
    RLPI_LOOKUP_HEADQUARTERED_IN = 5, /* company -> city */
    RLPI_LOOKUP_N_RELATIONS = 6
};

typedef struct rlpi_lookup_entity {
    int kind;                         /* RLPI_LOOKUP_PERSON … */
    char *name;                       /* owned; unique in the KB */
    int32_t rel[RLPI_LOOKUP_N_RELATIONS]; /* target entity index, -1 where the kind has no such relation */
} rlpi_lookup_entity;

typedef struct rlpi_lookup_kb {
    uint64_t seed;
    size_t n;                   /* entities */
    rlpi_lookup_entity *ents;   /* (n) */
    char **ids;                 /* (n) document ids "e<index>" */
    char **texts;               /* (n) document texts: sentences stating the relations */
} rlpi_lookup_kb;

/* The knowledge base of (seed, entities), entities in
 * [RLPI_LOOKUP_MIN_ENTITIES, RLPI_LOOKUP_MAX_ENTITIES]. Document i has id
 * ids[i], title ents[i].name and text texts[i]. *out is malloc'd; free
 * with rlpi_lookup_kb_free(). RLP_OK, RLP_E_INVALID_ARG, RLP_E_NOMEM. */
int rlpi_lookup_kb_generate(rlpi_lookup_kb **out, uint64_t seed, size_t entities);
void rlpi_lookup_kb_free(rlpi_lookup_kb *kb);

typedef struct rlpi_lookup_question {
    int hops;                                /* relations followed */
    int32_t path[RLPI_LOOKUP_MAX_HOPS + 1];  /* entities visited, path[0] the start, all distinct */
    int rel[RLPI_LOOKUP_MAX_HOPS];           /* rel[i] leads from path[i] to path[i+1] */
    char *text;                              /* owned: the question */
    const char *answer;                      /* borrowed from the KB: name of path[hops] */
} rlpi_lookup_question;

/* Question `index` of the stream `seed` over kb: hops uniform in
 * [min_hops, max_hops] (1 ≤ min ≤ max ≤ RLPI_LOOKUP_MAX_HOPS), a random
 * start and random relations, no entity visited twice. Free q->text.
 * RLP_OK, RLP_E_INVALID_ARG, RLP_E_NOMEM, RLP_E_INTERNAL (no such path
 * found after many tries; not seen with the generated KBs). */
int rlpi_lookup_question_generate(rlpi_lookup_question *q, const rlpi_lookup_kb *kb, uint64_t seed, uint64_t index,
                                  int min_hops, int max_hops);

#endif
