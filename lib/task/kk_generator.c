/* Knights-and-Knaves puzzle generator, written after the grammar and the
 * wording of the K&K benchmark (Xie et al. 2024, arXiv:2410.23123;
 * github.com/AlphaPav/mem-kk-logic, data_prep/lib_kk.py: KKProblemSampler
 * and KKProblemFormatter). Samples statements, keeps a puzzle only when
 * exactly one assignment is consistent, renders quiz and ground truth.
 * Must stay a pure function of (params, seed, index): no global state. */
#include "task/kk_generator.h"

#include "core/error.h"
#include "core/rng.h"
#include "task/strbuf.h"

#include <ctype.h>
#include <string.h>

/* Single-word ASCII names, pairwise distinct ignoring case, none of them a
 * word the quiz itself uses ("If", "So", "Knight"), so that an answer
 * parser matching `NAME is a knight` on word boundaries cannot confuse
 * them. A mix of common and less common names, as the benchmark's
 * COMMON_NAMES / UNCOMMON_NAMES mix. */
static const char *const kk_names[] = {
    "Alice",    "Benjamin", "Chloe",    "Daniel",   "Emma",     "Felix",    "Grace",
    "Henry",    "Isabel",   "Jacob",    "Kate",     "Liam",     "Mia",      "Noah",
    "Olivia",   "Peter",    "Quinn",    "Rose",     "Samuel",   "Tara",     "Uma",
    "Victor",   "Wendy",    "Xavier",   "Yara",     "Zane",     "Aaron",    "Bella",
    "Caleb",    "Daisy",    "Ethan",    "Fiona",    "George",   "Hannah",   "Isaac",
    "Julia",    "Kevin",    "Laura",    "Mason",    "Nora",     "Oscar",    "Paula",
    "Ruby",     "Simon",    "Tessa",    "Ulysses",  "Vera",     "Walter",   "Zoe",
    "Adrian",   "Beatrice", "Dylan",    "Elena",    "Gemma",    "Hugo",     "Ivy",
    "Jasper",   "Leo",      "Lucy",     "Marcus",   "Naomi",    "Owen",     "Priya",
    "Rafael",   "Sofia",    "Theo",     "Violet",   "Wyatt",    "Amara",    "Bruno",
    "Camila",   "Dmitri",   "Esme",     "Farid",    "Greta",    "Hiroshi",  "Ingrid",
    "Jamal",    "Keiko",    "Lars",     "Mateo",    "Nadia",    "Omar",     "Pilar",
    "Ravi",     "Sanjay",   "Tomas",    "Ugo",      "Valentina", "Wei",     "Yusuf",
    "Zofia",    "Anika",    "Cyrus",    "Delphine", "Emeka",    "Fatima",   "Gideon",
    "Thaddeus", "Calliope", "Lysander", "Ottoline", "Peregrine", "Isolde",  "Caspian",
    "Saffron",  "Balthazar", "Xanthe",
};

/* "X said …" forms. {n}: the speaker; {c}: the statement as it reads
 * inside a sentence; {C}: the same with its first letter capitalised, for
 * quotations. Same spirit as the benchmark's TEMPLATES, our own list. */
static const char *const kk_phrasings[] = {
    "{n} said that {c}.",
    "{n} told you that {c}.",
    "{n} claimed that {c}.",
    "{n} mentioned that {c}.",
    "{n} insisted that {c}.",
    "{n} stated, \"{C}.\"",
    "{n} remarked, \"{C}.\"",
    "{n} commented, \"{C}.\"",
    "{n} noted, \"{C}.\"",
    "{n} asserted: \"{C}.\"",
    "{n} was heard saying, \"{C}.\"",
    "\"{C},\" {n} declared.",
    "\"{C},\" {n} claimed.",
    "\"{C},\" {n} whispered.",
    "According to {n}, \"{C}.\"",
    "In {n}'s words: \"{C}.\"",
    "As {n} put it, \"{C}.\"",
    "\"{C}\" - {n}.",
};

#define N_NAMES ((int)(sizeof kk_names / sizeof kk_names[0]))
#define N_PHRASINGS ((int)(sizeof kk_phrasings / sizeof kk_phrasings[0]))

/* A puzzle with 8 people and the default shapes is unique roughly once in
 * a few dozen draws; this bound only stops a runaway loop. */
#define KK_MAX_TRIES 1000000

/* Domain separation of the random streams drawn from one user seed. */
#define KK_STREAM_SALT UINT64_C(0x6b6e696768747321) /* "knights!" */

int rlpi_kk_n_phrasings(void)
{
    return N_PHRASINGS;
}

int rlpi_kk_n_names(void)
{
    return N_NAMES;
}

const char *rlpi_kk_name(int i)
{
    return i >= 0 && i < N_NAMES ? kk_names[i] : NULL;
}

int rlpi_kk_params_check(const rlpi_kk_params *p)
{
    if (p->min_people < RLPI_KK_MIN_PEOPLE || p->max_people > RLPI_KK_MAX_PEOPLE ||
        p->min_people > p->max_people)
        return rlpi_error_set(RLP_E_INVALID_ARG,
                              "kk: people must lie in [%d, %d] (got min %d, max %d)",
                              RLPI_KK_MIN_PEOPLE, RLPI_KK_MAX_PEOPLE, p->min_people, p->max_people);
    if (p->width < 2 || p->width > RLPI_KK_MAX_WIDTH)
        return rlpi_error_set(RLP_E_INVALID_ARG, "kk: width must lie in [2, %d] (got %d)",
                              RLPI_KK_MAX_WIDTH, p->width);
    return RLP_OK;
}

static int claim_value(rlpi_kk_claim c, uint32_t a)
{
    return (int)((a >> c.person) & 1u) == c.knight;
}

int rlpi_kk_eval(const rlpi_kk_statement *s, uint32_t a)
{
    switch (s->op) {
    case RLPI_KK_CLAIM: return claim_value(s->c[0], a);
    case RLPI_KK_NOT: return !claim_value(s->c[0], a);
    case RLPI_KK_AND:
        for (int i = 0; i < s->n; i++)
            if (!claim_value(s->c[i], a))
                return 0;
        return 1;
    case RLPI_KK_OR:
        for (int i = 0; i < s->n; i++)
            if (claim_value(s->c[i], a))
                return 1;
        return 0;
    case RLPI_KK_IMPLIES: return !claim_value(s->c[0], a) || claim_value(s->c[1], a);
    case RLPI_KK_IFF: return claim_value(s->c[0], a) == claim_value(s->c[1], a);
    default: return 0;
    }
}

int rlpi_kk_count_solutions(const rlpi_kk_statement *st, int n, int limit, uint32_t *first)
{
    int count = 0;
    for (uint32_t a = 0; a < (1u << n) && count < limit; a++) {
        int ok = 1;
        /* knights say true things, knaves false ones */
        for (int i = 0; i < n && ok; i++)
            ok = rlpi_kk_eval(&st[i], a) == (int)((a >> i) & 1u);
        if (ok && count++ == 0 && first)
            *first = a;
    }
    return count;
}

/* A claim the speaker may make. Never "I am a knave": a knight cannot say
 * it and a knave would be telling the truth (the benchmark's rule). With
 * `negated` set the claim will appear under "not", so "I am a knight" is
 * refused too: "I am not a knight" is the same self-contradiction. */
static rlpi_kk_claim sample_claim(rlpi_rng *r, int speaker, int n, int negated)
{
    for (;;) {
        rlpi_kk_claim c = {(uint8_t)rlpi_rng_below(r, (uint64_t)n),
                           (uint8_t)rlpi_rng_below(r, 2)};
        if (c.person == speaker && (c.knight == negated))
            continue;
        return c;
    }
}

/* The benchmark's _sample_statement at depth ≤ 2: a die with six faces
 * picks claim / not / and / or / if-then / iff; operands are distinct
 * claims. */
static void sample_statement(rlpi_kk_statement *s, rlpi_rng *r, int speaker, int n,
                             const rlpi_kk_params *p)
{
    int face = (int)rlpi_rng_below(r, 6);
    memset(s, 0, sizeof *s);
    static const uint8_t ops[6] = {RLPI_KK_CLAIM, RLPI_KK_NOT, RLPI_KK_AND,
                                   RLPI_KK_OR,    RLPI_KK_IMPLIES, RLPI_KK_IFF};
    s->op = ops[face];
    if (s->op == RLPI_KK_CLAIM || s->op == RLPI_KK_NOT) {
        s->n = 1;
        s->c[0] = sample_claim(r, speaker, n, s->op == RLPI_KK_NOT);
        return;
    }
    int k = 2;
    if (s->op == RLPI_KK_AND || s->op == RLPI_KK_OR)
        k = 2 + (int)rlpi_rng_below(r, (uint64_t)(p->width - 1));
    /* 2n − 1 distinct claims exist (no "I am a knave"); 2 people allow 3 */
    if (k > 2 * n - 1)
        k = 2 * n - 1;
    while (s->n < k) {
        rlpi_kk_claim c = sample_claim(r, speaker, n, 0);
        int dup = 0;
        for (int i = 0; i < s->n; i++)
            dup |= s->c[i].person == c.person && s->c[i].knight == c.knight;
        if (!dup)
            s->c[s->n++] = c;
    }
}

int rlpi_kk_curriculum_people(const rlpi_kk_curriculum *c, uint64_t p)
{
    if (p >= c->prompts)
        return c->end;
    /* floor(stages · p / prompts) by repeated addition: p < prompts ≤ 2^63,
     * so rem + p never overflows and no product is formed */
    uint64_t rem = 0;
    int stage = 0;
    for (int k = c->start; k <= c->end; k++) {
        rem += p;
        if (rem >= c->prompts) {
            rem -= c->prompts;
            stage++;
        }
    }
    return c->start + stage < c->end ? c->start + stage : c->end;
}

int rlpi_kk_generate(rlpi_kk_puzzle *out, const rlpi_kk_params *p, uint64_t seed, uint64_t index)
{
    int rc = rlpi_kk_params_check(p);
    if (rc)
        return rc;
    rlpi_rng r;
    rlpi_rng_seed(&r, seed ^ KK_STREAM_SALT, index);
    rlpi_kk_puzzle pz;
    memset(&pz, 0, sizeof pz);
    pz.n_people = p->min_people + (int)rlpi_rng_below(&r, (uint64_t)(p->max_people - p->min_people + 1));
    for (uint32_t t = 1; t <= KK_MAX_TRIES; t++) {
        for (int i = 0; i < pz.n_people; i++)
            sample_statement(&pz.st[i], &r, i, pz.n_people, p);
        uint32_t sol = 0;
        if (rlpi_kk_count_solutions(pz.st, pz.n_people, 2, &sol) != 1)
            continue;
        pz.solution = sol;
        pz.tries = t;
        /* names: a partial Fisher–Yates draw without replacement */
        int pick[N_NAMES];
        for (int i = 0; i < N_NAMES; i++)
            pick[i] = i;
        for (int i = 0; i < pz.n_people; i++) {
            int j = i + (int)rlpi_rng_below(&r, (uint64_t)(N_NAMES - i));
            int tmp = pick[i];
            pick[i] = pick[j];
            pick[j] = tmp;
            pz.names[i] = kk_names[pick[i]];
            pz.phrasing[i] = (uint8_t)rlpi_rng_below(&r, N_PHRASINGS);
        }
        *out = pz;
        return RLP_OK;
    }
    return rlpi_error_set(RLP_E_INTERNAL, "kk: no puzzle with a unique solution in %d tries",
                          KK_MAX_TRIES);
}

/* ---- rendering ----------------------------------------------------------- */

static void put_claim(rlpi_sb *b, const rlpi_kk_puzzle *pz, rlpi_kk_claim c, int negated)
{
    rlpi_sb_puts(b, pz->names[c.person]);
    rlpi_sb_puts(b, negated ? " is not " : " is ");
    rlpi_sb_puts(b, c.knight ? "a knight" : "a knave");
}

/* The statement as it reads inside a sentence (the benchmark's
 * format_statement, with "if" in lower case there). */
static void put_statement(rlpi_sb *b, const rlpi_kk_puzzle *pz, const rlpi_kk_statement *s)
{
    switch (s->op) {
    case RLPI_KK_CLAIM: put_claim(b, pz, s->c[0], 0); break;
    case RLPI_KK_NOT: put_claim(b, pz, s->c[0], 1); break;
    case RLPI_KK_AND:
    case RLPI_KK_OR:
        for (int i = 0; i < s->n; i++) {
            if (i)
                rlpi_sb_puts(b, s->op == RLPI_KK_AND ? " and " : " or ");
            put_claim(b, pz, s->c[i], 0);
        }
        break;
    case RLPI_KK_IMPLIES:
        rlpi_sb_puts(b, "if ");
        put_claim(b, pz, s->c[0], 0);
        rlpi_sb_puts(b, " then ");
        put_claim(b, pz, s->c[1], 0);
        break;
    case RLPI_KK_IFF:
        put_claim(b, pz, s->c[0], 0);
        rlpi_sb_puts(b, " if and only if ");
        put_claim(b, pz, s->c[1], 0);
        break;
    default: break;
    }
}

static void put_saying(rlpi_sb *b, const rlpi_kk_puzzle *pz, int person)
{
    rlpi_sb content = {0};
    put_statement(&content, pz, &pz->st[person]);
    if (content.failed) {
        b->failed = true;
        return;
    }
    const char *t = kk_phrasings[pz->phrasing[person] % N_PHRASINGS];
    while (*t) {
        if (t[0] == '{' && t[1] && t[2] == '}') {
            if (t[1] == 'n') {
                rlpi_sb_puts(b, pz->names[person]);
            } else {
                size_t start = b->len;
                rlpi_sb_append(b, content.s, content.len);
                if (t[1] == 'C' && !b->failed && b->len > start)
                    b->s[start] = (char)toupper((unsigned char)b->s[start]);
            }
            t += 3;
        } else {
            rlpi_sb_append(b, t, 1);
            t++;
        }
    }
    rlpi_sb_free(&content);
}

char *rlpi_kk_render_quiz(const rlpi_kk_puzzle *pz)
{
    rlpi_sb b = {0};
    /* the benchmark's PREFIX / "You meet" / POSTFIX wording, verbatim, so
     * that puzzles read like the published sets (lib_kk.py) */
    rlpi_sb_puts(&b, "A very special island is inhabited only by knights and knaves. "
                     "Knights always tell the truth, and knaves always lie. ");
    rlpi_sb_printf(&b, "You meet %d inhabitants: ", pz->n_people);
    for (int i = 0; i < pz->n_people; i++) {
        if (i)
            rlpi_sb_puts(&b, i == pz->n_people - 1 ? ", and " : ", ");
        rlpi_sb_puts(&b, pz->names[i]);
    }
    rlpi_sb_puts(&b, ".");
    for (int i = 0; i < pz->n_people; i++) {
        rlpi_sb_puts(&b, " ");
        put_saying(&b, pz, i);
    }
    rlpi_sb_puts(&b, " So who is a knight and who is a knave?");
    return rlpi_sb_take(&b);
}

char *rlpi_kk_render_solution(const rlpi_kk_puzzle *pz)
{
    rlpi_sb b = {0};
    for (int i = 0; i < pz->n_people; i++) {
        rlpi_sb_printf(&b, "%s(%d) ", i ? "\n" : "", i + 1);
        rlpi_sb_puts(&b, pz->names[i]);
        rlpi_sb_puts(&b, (pz->solution >> i) & 1u ? " is a knight" : " is a knave");
    }
    return rlpi_sb_take(&b);
}

static void put_tuple_claim(rlpi_sb *b, rlpi_kk_claim c)
{
    rlpi_sb_printf(b, "('%s', %d)", c.knight ? "telling-truth" : "lying", c.person);
}

char *rlpi_kk_render_statements(const rlpi_kk_puzzle *pz)
{
    static const char *const op_names[] = {"", "not", "and", "or", "->", "<=>"};
    rlpi_sb b = {0};
    rlpi_sb_puts(&b, "(");
    for (int i = 0; i < pz->n_people; i++) {
        const rlpi_kk_statement *s = &pz->st[i];
        if (i)
            rlpi_sb_puts(&b, ", ");
        if (s->op == RLPI_KK_CLAIM) {
            put_tuple_claim(&b, s->c[0]);
            continue;
        }
        rlpi_sb_printf(&b, "('%s'", op_names[s->op]);
        for (int k = 0; k < s->n; k++) {
            rlpi_sb_puts(&b, ", ");
            put_tuple_claim(&b, s->c[k]);
        }
        rlpi_sb_puts(&b, ")");
    }
    rlpi_sb_puts(&b, ")");
    return rlpi_sb_take(&b);
}
