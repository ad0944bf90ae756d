/* Knights-and-Knaves puzzles (Xie et al. 2024, "On Memorization of Large
 * Language Models in Logical Reasoning", the K&K benchmark; grammar and
 * rendering after its lib_kk.py, github.com/AlphaPav/mem-kk-logic):
 * sampling, exhaustive solving, and rendering to the benchmark's text.
 * Pure functions of (params, seed, index); knows nothing of datasets,
 * cursors or tokenizers. */
#ifndef RLPI_TASK_KK_GENERATOR_H
#define RLPI_TASK_KK_GENERATOR_H

#include <stdint.h>

#define RLPI_KK_MIN_PEOPLE 2
#define RLPI_KK_MAX_PEOPLE 8
#define RLPI_KK_MAX_WIDTH 4 /* most claims joined by one and/or */

/* Statement shapes. Depth 1 is a single claim; depth 2 is one operator over
 * claims (NOT over one, IMPLIES/IFF over two, AND/OR over 2..width). */
enum {
    RLPI_KK_CLAIM = 0,   /* c[0] */
    RLPI_KK_NOT = 1,     /* not c[0] */
    RLPI_KK_AND = 2,     /* c[0] and … and c[n-1] */
    RLPI_KK_OR = 3,      /* c[0] or … or c[n-1] */
    RLPI_KK_IMPLIES = 4, /* if c[0] then c[1] */
    RLPI_KK_IFF = 5      /* c[0] if and only if c[1] */
};

/* "person is a knight" (knight = 1) or "person is a knave" (knight = 0). */
typedef struct rlpi_kk_claim {
    uint8_t person;
    uint8_t knight;
} rlpi_kk_claim;

typedef struct rlpi_kk_statement {
    uint8_t op; /* RLPI_KK_* */
    uint8_t n;  /* claims used in c */
    rlpi_kk_claim c[RLPI_KK_MAX_WIDTH];
} rlpi_kk_statement;

/* Statements are always of depth ≤ 2, never depth 1 only: with bare
 * claims every constraint is "K_i iff K_j" or "K_i iff not K_j", so the
 * complement of a solution is a solution too and no puzzle is unique. */
typedef struct rlpi_kk_params {
    int min_people, max_people; /* 2 ≤ min ≤ max ≤ 8 */
    int width;                  /* 2..RLPI_KK_MAX_WIDTH */
} rlpi_kk_params;

typedef struct rlpi_kk_puzzle {
    int n_people;
    rlpi_kk_statement st[RLPI_KK_MAX_PEOPLE]; /* st[i] is what person i says */
    const char *names[RLPI_KK_MAX_PEOPLE];    /* static strings, distinct */
    uint8_t phrasing[RLPI_KK_MAX_PEOPLE];     /* index into the "X said …" forms */
    uint32_t solution;                        /* bit i set: person i is a knight */
    uint32_t tries;                           /* puzzles sampled to find this one */
} rlpi_kk_puzzle;

/* A people-count curriculum (Logic-RL trains on 3 then 4 … then 7 people,
 * Xie et al. 2025, arXiv:2502.14768): the count rises from start to end in
 * end − start + 1 equal stages over the first `prompts` problems of the
 * stream and stays at end after them. prompts == 0: no curriculum. */
typedef struct rlpi_kk_curriculum {
    int start, end;   /* 2 ≤ start ≤ end ≤ 8 */
    uint64_t prompts; /* ≤ 2^63 */
} rlpi_kk_curriculum;

/* People for problem p of the stream (0-based, counted over all epochs):
 * start + floor((end − start + 1) · p / prompts), at most end. A pure
 * function of p, so a resumed stream continues the same curriculum. */
int rlpi_kk_curriculum_people(const rlpi_kk_curriculum *c, uint64_t p);

/* Checks params; RLP_E_INVALID_ARG naming the bad field. */
int rlpi_kk_params_check(const rlpi_kk_params *p);

/* Puzzle `index` of the stream `seed`: sampled until exactly one of the
 * 2^n knight/knave assignments is consistent. RLP_E_INTERNAL if that takes
 * absurdly many tries (never seen). */
int rlpi_kk_generate(rlpi_kk_puzzle *out, const rlpi_kk_params *p, uint64_t seed, uint64_t index);

/* Truth value of a statement under an assignment (bit i: person i is a
 * knight). */
int rlpi_kk_eval(const rlpi_kk_statement *s, uint32_t assignment);

/* Number of consistent assignments (person i is a knight iff st[i] holds),
 * counting up to `limit` then stopping; *first gets the first found. */
int rlpi_kk_count_solutions(const rlpi_kk_statement *st, int n_people, int limit, uint32_t *first);

/* Malloc'd renderings (NULL when out of memory):
 * - the quiz, worded as the benchmark's `quiz` field;
 * - the ground truth as "(1) NAME is a knight\n(2) …" (no final newline);
 * - the statements in the benchmark's Python-tuple form, e.g.
 *   "(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))". */
char *rlpi_kk_render_quiz(const rlpi_kk_puzzle *pz);
char *rlpi_kk_render_solution(const rlpi_kk_puzzle *pz);
char *rlpi_kk_render_statements(const rlpi_kk_puzzle *pz);

/* Number of "X said …" phrasings and of names the generator draws from. */
int rlpi_kk_n_phrasings(void);
int rlpi_kk_n_names(void);
/* Name i of the table (0 ≤ i < rlpi_kk_n_names()), for tests. */
const char *rlpi_kk_name(int i);

#endif
