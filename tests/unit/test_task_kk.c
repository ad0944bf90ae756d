/* Knights-and-Knaves tasks, checked by code that shares nothing with the
 * generator: the statements are read back from the benchmark's tuple form
 * in the metadata, rendered and solved here by brute force; the rendered
 * quiz must contain every name and every statement, and the ground-truth
 * lines must parse back to the one solution. */
#include "rlpost.h"

#include "task/kk_generator.h"

#include <ctype.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* ---- an independent reader and solver of the tuple form ------------------ */

typedef struct node {
    char op[16];  /* telling-truth, lying, not, and, or, ->, <=> */
    int person;   /* for telling-truth / lying */
    int n_kids;
    struct node *kid[8];
} node;

typedef struct reader {
    const char *s;
    node pool[512];
    int used;
} reader;

static void expect(reader *r, const char *lit)
{
    size_t n = strlen(lit);
    if (strncmp(r->s, lit, n))
        fail_msg("tuple form: expected '%s' at '%.30s'", lit, r->s);
    r->s += n;
}

static node *read_node(reader *r)
{
    assert_true(r->used < 512);
    node *x = &r->pool[r->used++];
    memset(x, 0, sizeof *x);
    expect(r, "('");
    size_t k = 0;
    while (*r->s && *r->s != '\'' && k < sizeof x->op - 1)
        x->op[k++] = *r->s++;
    expect(r, "', ");
    if (!strcmp(x->op, "telling-truth") || !strcmp(x->op, "lying")) {
        char *end;
        x->person = (int)strtol(r->s, &end, 10);
        assert_true(end != r->s);
        r->s = end;
    } else {
        for (;;) {
            assert_true(x->n_kids < 8);
            x->kid[x->n_kids++] = read_node(r);
            if (*r->s != ',')
                break;
            expect(r, ", ");
        }
    }
    expect(r, ")");
    return x;
}

/* "((...), (...), ...)" → one tree per person. */
static int read_statements(reader *r, const char *text, node **out, int max)
{
    r->s = text;
    r->used = 0;
    int n = 0;
    expect(r, "(");
    for (;;) {
        assert_true(n < max);
        out[n++] = read_node(r);
        if (*r->s != ',')
            break;
        expect(r, ", ");
    }
    expect(r, ")");
    assert_int_equal(*r->s, '\0');
    return n;
}

static int truth(const node *x, const int *knight)
{
    if (!strcmp(x->op, "telling-truth"))
        return knight[x->person];
    if (!strcmp(x->op, "lying"))
        return !knight[x->person];
    if (!strcmp(x->op, "not"))
        return !truth(x->kid[0], knight);
    if (!strcmp(x->op, "and")) {
        for (int i = 0; i < x->n_kids; i++)
            if (!truth(x->kid[i], knight))
                return 0;
        return 1;
    }
    if (!strcmp(x->op, "or")) {
        for (int i = 0; i < x->n_kids; i++)
            if (truth(x->kid[i], knight))
                return 1;
        return 0;
    }
    if (!strcmp(x->op, "->"))
        return !truth(x->kid[0], knight) || truth(x->kid[1], knight);
    if (!strcmp(x->op, "<=>"))
        return truth(x->kid[0], knight) == truth(x->kid[1], knight);
    fail_msg("unknown operator %s", x->op);
    return 0;
}

/* All assignments where each knight's statement is true and each knave's
 * false; returns how many, the last one in sol. */
static int brute_force(node **st, int n, int *sol)
{
    int count = 0;
    int knight[8];
    for (int a = 0; a < (1 << n); a++) {
        for (int i = 0; i < n; i++)
            knight[i] = (a >> i) & 1;
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = truth(st[i], knight) == knight[i];
        if (ok) {
            count++;
            memcpy(sol, knight, sizeof knight);
        }
    }
    return count;
}

static int depth_of(const node *x)
{
    int d = 0;
    for (int i = 0; i < x->n_kids; i++) {
        int k = depth_of(x->kid[i]);
        d = k > d ? k : d;
    }
    return d + 1;
}

/* ---- an independent rendering of one statement --------------------------- */

static void render_leaf(char *buf, size_t cap, const node *x, char names[][32], int negated)
{
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s is %s%s", names[x->person],
             negated ? "not " : "", !strcmp(x->op, "telling-truth") ? "a knight" : "a knave");
}

static void render(char *buf, size_t cap, const node *x, char names[][32])
{
    buf[0] = '\0';
    if (!strcmp(x->op, "telling-truth") || !strcmp(x->op, "lying")) {
        render_leaf(buf, cap, x, names, 0);
    } else if (!strcmp(x->op, "not")) {
        render_leaf(buf, cap, x->kid[0], names, 1);
    } else if (!strcmp(x->op, "and") || !strcmp(x->op, "or")) {
        for (int i = 0; i < x->n_kids; i++) {
            if (i)
                snprintf(buf + strlen(buf), cap - strlen(buf), " %s ", x->op);
            render_leaf(buf, cap, x->kid[i], names, 0);
        }
    } else if (!strcmp(x->op, "->")) {
        strcat(buf, "if ");
        render_leaf(buf, cap, x->kid[0], names, 0);
        strcat(buf, " then ");
        render_leaf(buf, cap, x->kid[1], names, 0);
    } else {
        render_leaf(buf, cap, x->kid[0], names, 0);
        strcat(buf, " if and only if ");
        render_leaf(buf, cap, x->kid[1], names, 0);
    }
}

/* The quiz contains the statement, first letter in either case. */
static int quiz_has(const char *quiz, const char *content)
{
    char alt[512];
    snprintf(alt, sizeof alt, "%s", content);
    alt[0] = (char)toupper((unsigned char)alt[0]);
    return strstr(quiz, content) || strstr(quiz, alt);
}

/* ---- per-puzzle checks ---------------------------------------------------- */

typedef struct kk_stats {
    int forms[16]; /* statement shapes seen: 0 claim … 5 iff */
} kk_stats;

static void check_item(const rlp_task_item *it, int n_people, kk_stats *stats)
{
    json_error_t err;
    json_t *meta = json_loads(it->metadata_json, 0, &err);
    assert_non_null(meta);
    json_t *names_j = json_object_get(meta, "names");
    json_t *sol_j = json_object_get(meta, "solution");
    const char *statements = json_string_value(json_object_get(meta, "statements"));
    assert_non_null(statements);
    assert_int_equal(json_array_size(names_j), n_people);
    assert_string_equal(json_string_value(json_object_get(meta, "reference")), it->reference);
    assert_string_equal(json_string_value(json_object_get(meta, "solution_text_format")), it->reference);
    assert_string_equal(json_string_value(json_object_get(meta, "task")), "kk");

    char names[8][32];
    for (int i = 0; i < n_people; i++) {
        snprintf(names[i], sizeof names[i], "%s", json_string_value(json_array_get(names_j, i)));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(names[i], names[j]);
        assert_non_null(strstr(it->question, names[i]));
    }

    /* the benchmark's wording around the statements */
    char head[128];
    snprintf(head, sizeof head, "You meet %d inhabitants: %s, ", n_people, names[0]);
    assert_true(!strncmp(it->question,
                         "A very special island is inhabited only by knights and knaves. Knights "
                         "always tell the truth, and knaves always lie. ",
                         strlen("A very special island is inhabited only by knights and knaves. "
                                "Knights always tell the truth, and knaves always lie. ")));
    assert_non_null(strstr(it->question, head));
    const char *tail = " So who is a knight and who is a knave?";
    assert_string_equal(it->question + strlen(it->question) - strlen(tail), tail);

    reader *r = malloc(sizeof *r);
    node *st[8];
    assert_int_equal(read_statements(r, statements, st, 8), n_people);
    for (int i = 0; i < n_people; i++) {
        assert_true(depth_of(st[i]) <= 2);
        /* never "I am a knave", in any words */
        for (int k = 0; k < (st[i]->n_kids ? st[i]->n_kids : 1); k++) {
            const node *leaf = st[i]->n_kids ? st[i]->kid[k] : st[i];
            assert_true(!strcmp(leaf->op, "telling-truth") || !strcmp(leaf->op, "lying"));
            assert_true(leaf->person < n_people);
            int says_knave = !strcmp(leaf->op, "lying") != !strcmp(st[i]->op, "not");
            if (leaf->person == i && says_knave)
                fail_msg("%s says they are a knave: %s", names[i], statements);
        }
        if (!strcmp(st[i]->op, "and") || !strcmp(st[i]->op, "or"))
            assert_true(st[i]->n_kids >= 2 && st[i]->n_kids <= 2); /* default width */
        static const char *const ops[6] = {"", "not", "and", "or", "->", "<=>"};
        int form = 0;
        for (int f = 1; f < 6; f++)
            if (!strcmp(st[i]->op, ops[f]))
                form = f;
        stats->forms[form]++;
        char content[512];
        render(content, sizeof content, st[i], names);
        if (!quiz_has(it->question, content))
            fail_msg("statement \"%s\" not in quiz: %s", content, it->question);
        char self[300]; /* a name (< 256 bytes) and the claim */
        snprintf(self, sizeof self, "%s is a knave", names[i]);
        /* the speaker's own statement never calls the speaker a knave */
        if (strstr(content, self))
            fail_msg("%s: \"%s\"", names[i], content);
        snprintf(self, sizeof self, "%s is not a knight", names[i]);
        assert_null(strstr(content, self));
    }

    int sol[8];
    assert_int_equal(brute_force(st, n_people, sol), 1);
    for (int i = 0; i < n_people; i++)
        assert_int_equal(json_is_true(json_array_get(sol_j, i)), sol[i]);

    /* "(k) NAME is a knight|knave" lines parse back to the same solution */
    const char *p = it->reference;
    for (int i = 0; i < n_people; i++) {
        int k = 0, used = 0;
        char name[64], role[16];
        assert_int_equal(sscanf(p, "(%d) %63s is a %15[a-z]%n", &k, name, role, &used), 3);
        assert_int_equal(k, i + 1);
        assert_string_equal(name, names[i]);
        assert_string_equal(role, sol[i] ? "knight" : "knave");
        p += used;
        assert_int_equal(*p, i + 1 < n_people ? '\n' : '\0');
        if (*p)
            p++;
    }
    free(r);
    json_decref(meta);
}

/* 1,000 puzzles for each size 2–8 through the public API. */
static void thousand_per_size_unique_and_rendered(void **state)
{
    (void)state;
    for (int n = RLPI_KK_MIN_PEOPLE; n <= RLPI_KK_MAX_PEOPLE; n++) {
        char opts[64];
        snprintf(opts, sizeof opts, "{\"people\": %d, \"seed\": %d}", n, 1000 + n);
        rlp_task *t;
        assert_int_equal(rlp_task_create(&t, "kk", opts), RLP_OK);
        rlp_prompt_set *set;
        clock_t c0 = clock();
        assert_int_equal(rlp_task_next_batch(&set, t, 1000, NULL), RLP_OK);
        double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
        kk_stats stats;
        memset(&stats, 0, sizeof stats);
        for (size_t i = 0; i < 1000; i++) {
            rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
            assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
            assert_int_equal(it.index, i);
            check_item(&it, n, &stats);
        }
        /* every statement shape shows up */
        for (int f = 0; f < 6; f++)
            assert_true(stats.forms[f] > 0);
        /* the generator's own view: how many draws a unique puzzle costs */
        rlpi_kk_params p = {n, n, 2};
        uint64_t tries = 0;
        for (uint64_t i = 0; i < 1000; i++) {
            rlpi_kk_puzzle pz;
            assert_int_equal(rlpi_kk_generate(&pz, &p, 1000 + (uint64_t)n, i), RLP_OK);
            tries += pz.tries;
        }
        printf("kk %d people: 1000 unique puzzles, %.1f%% of sampled puzzles unique, %.0f prompts/s\n",
               n, 100.0 * 1000 / (double)tries, secs > 0 ? 1000 / secs : 0.0);
        rlp_prompt_set_free(set);
        rlp_task_free(t);
    }
}

static char *batch_text(rlp_task *t, size_t n)
{
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, n, NULL), RLP_OK);
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(rlp_prompt_set_prompts(set)[i].text) +
               strlen(rlp_prompt_set_prompts(set)[i].metadata_json) + 2;
    char *s = calloc(1, len + 1);
    for (size_t i = 0; i < n; i++) {
        strcat(s, rlp_prompt_set_prompts(set)[i].text);
        strcat(s, "\n");
        strcat(s, rlp_prompt_set_prompts(set)[i].metadata_json);
        strcat(s, "\n");
    }
    rlp_prompt_set_free(set);
    return s;
}

static void deterministic_by_seed(void **state)
{
    (void)state;
    rlp_task *a, *b, *c, *d;
    assert_int_equal(rlp_task_create(&a, "kk", "{\"seed\": 7}"), RLP_OK);
    assert_int_equal(rlp_task_create(&b, "kk", "{\"seed\": 7}"), RLP_OK);
    assert_int_equal(rlp_task_create(&c, "kk", "{\"seed\": 8}"), RLP_OK);
    assert_int_equal(rlp_task_create(&d, "kk", "{\"seed\": 7}"), RLP_OK);
    char *ta = batch_text(a, 50), *tb = batch_text(b, 50), *tc = batch_text(c, 50);
    assert_string_equal(ta, tb);
    assert_string_not_equal(ta, tc);
    /* problem i does not depend on how the stream is cut into batches */
    char *d1 = batch_text(d, 17), *d2 = batch_text(d, 33);
    char *joined = malloc(strlen(d1) + strlen(d2) + 1);
    strcpy(joined, d1);
    strcat(joined, d2);
    assert_string_equal(joined, ta);
    free(ta), free(tb), free(tc), free(d1), free(d2), free(joined);
    rlp_task_free(a), rlp_task_free(b), rlp_task_free(c), rlp_task_free(d);
}

/* Names and phrasings vary; the name table has no two names equal up to case. */
static void names_and_phrasings_vary(void **state)
{
    (void)state;
    int n_names = rlpi_kk_n_names();
    assert_true(n_names >= 60);
    for (int i = 0; i < n_names; i++)
        for (int j = 0; j < i; j++)
            assert_true(strcasecmp(rlpi_kk_name(i), rlpi_kk_name(j)) != 0);
    int seen_phrasing[64] = {0};
    int seen_name[256] = {0};
    rlpi_kk_params p = {3, 7, 2};
    for (uint64_t i = 0; i < 2000; i++) {
        rlpi_kk_puzzle pz;
        assert_int_equal(rlpi_kk_generate(&pz, &p, 3, i), RLP_OK);
        for (int k = 0; k < pz.n_people; k++) {
            seen_phrasing[pz.phrasing[k]] = 1;
            for (int j = 0; j < n_names; j++)
                if (pz.names[k] == rlpi_kk_name(j))
                    seen_name[j] = 1;
        }
    }
    int np = 0, nn = 0;
    for (int i = 0; i < 64; i++)
        np += seen_phrasing[i];
    for (int i = 0; i < 256; i++)
        nn += seen_name[i];
    assert_int_equal(np, rlpi_kk_n_phrasings());
    assert_int_equal(nn, n_names);
}

/* width 3: and/or with up to three claims, still unique. */
static void width_and_bad_options(void **state)
{
    (void)state;
    rlpi_kk_params p3 = {5, 5, 3};
    int three = 0;
    for (uint64_t i = 0; i < 300; i++) {
        rlpi_kk_puzzle pz;
        assert_int_equal(rlpi_kk_generate(&pz, &p3, 1, i), RLP_OK);
        for (int k = 0; k < pz.n_people; k++)
            three += pz.st[k].n == 3;
        assert_int_equal(rlpi_kk_count_solutions(pz.st, pz.n_people, 8, NULL), 1);
    }
    assert_true(three > 0);
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "kk", "{\"people\": 9}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{\"people\": 1}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{\"depth\": 1}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{\"width\": 5}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{\"peeple\": 3}"), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "peeple"));
    assert_int_equal(rlp_task_create(&t, "kk", "{\"people\": 3, \"min_people\": 2}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "[1]"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{\"seed\": -1}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "kk", "{"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "chess", NULL), RLP_E_INVALID_ARG);
    /* the default people range is Logic-RL's 3–7 */
    assert_int_equal(rlp_task_create(&t, "kk", NULL), RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 200, NULL), RLP_OK);
    int seen[9] = {0};
    for (size_t i = 0; i < 200; i++) {
        json_t *m = json_loads(rlp_prompt_set_prompts(set)[i].metadata_json, 0, NULL);
        size_t n = json_array_size(json_object_get(m, "names"));
        assert_true(n >= 3 && n <= 7);
        seen[n] = 1;
        json_decref(m);
    }
    assert_int_equal(seen[3] + seen[4] + seen[5] + seen[6] + seen[7], 5);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
}

/* ---- the people-count curriculum ------------------------------------------ */

/* People of prompt i of a set (the length of its metadata's "names"),
 * after checking the puzzle like any other. */
static int people_of(const rlp_prompt_set *set, size_t i)
{
    rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
    assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
    json_t *m = json_loads(it.metadata_json, 0, NULL);
    assert_non_null(m);
    int n = (int)json_array_size(json_object_get(m, "names"));
    json_decref(m);
    kk_stats stats;
    memset(&stats, 0, sizeof stats);
    check_item(&it, n, &stats);
    return n;
}

/* The stages, computed here: 3→7 over 50 prompts is five stages of ten. */
static void curriculum_stages(void **state)
{
    (void)state;
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "kk", "{\"seed\": 4, \"curriculum_start\": 3, \"curriculum_end\": 7, "
                                               "\"curriculum_prompts\": 50}"),
                     RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 70, NULL), RLP_OK);
    int per_count[9] = {0};
    for (size_t p = 0; p < 70; p++) {
        int n = people_of(set, p);
        assert_int_equal(n, p < 50 ? 3 + (int)(p / 10) : 7);
        per_count[n]++;
    }
    assert_int_equal(per_count[3], 10);
    assert_int_equal(per_count[4], 10);
    assert_int_equal(per_count[5], 10);
    assert_int_equal(per_count[6], 10);
    assert_int_equal(per_count[7], 30); /* the end count, from prompt 40 on */
    rlp_prompt_set_free(set);
    rlp_task_free(t);

    /* uneven stages: 2→4 over 7 prompts gives 2 + floor(3p/7) */
    assert_int_equal(rlp_task_create(&t, "kk", "{\"curriculum_start\": 2, \"curriculum_end\": 4, "
                                               "\"curriculum_prompts\": 7}"),
                     RLP_OK);
    assert_int_equal(rlp_task_next_batch(&set, t, 9, NULL), RLP_OK);
    const int want[9] = {2, 2, 2, 3, 3, 4, 4, 4, 4};
    for (size_t p = 0; p < 9; p++)
        assert_int_equal(people_of(set, p), want[p]);
    rlp_prompt_set_free(set);
    rlp_task_free(t);

    /* the formula itself, at the edges (no overflow near 2^63) */
    rlpi_kk_curriculum c = {3, 7, 3};
    assert_int_equal(rlpi_kk_curriculum_people(&c, 0), 3);
    assert_int_equal(rlpi_kk_curriculum_people(&c, 1), 4); /* floor(5/3) */
    assert_int_equal(rlpi_kk_curriculum_people(&c, 2), 6); /* floor(10/3) */
    assert_int_equal(rlpi_kk_curriculum_people(&c, 3), 7);
    assert_int_equal(rlpi_kk_curriculum_people(&c, UINT64_MAX), 7);
    rlpi_kk_curriculum big = {3, 7, UINT64_C(1) << 63};
    assert_int_equal(rlpi_kk_curriculum_people(&big, (UINT64_C(1) << 63) - 1), 7);
    assert_int_equal(rlpi_kk_curriculum_people(&big, UINT64_C(1) << 62), 5); /* floor(5/2) = 2 stages up */
    /* the first stage ends exactly at ceil(2^63 / 5) */
    assert_int_equal(rlpi_kk_curriculum_people(&big, (UINT64_C(1) << 63) / 5), 3);
    assert_int_equal(rlpi_kk_curriculum_people(&big, (UINT64_C(1) << 63) / 5 + 1), 4);
    rlpi_kk_curriculum one = {5, 5, 10};
    assert_int_equal(rlpi_kk_curriculum_people(&one, 0), 5);
    assert_int_equal(rlpi_kk_curriculum_people(&one, 9), 5);
}

/* A run stopped mid-curriculum and resumed from its saved cursor serves
 * the prompts of one uninterrupted run, in an endless stream and in a
 * finite set served over epochs (where the stage follows the position
 * over all epochs). */
static void curriculum_resume(void **state)
{
    (void)state;
    const char *opts[] = {
        "{\"seed\": 9, \"curriculum_start\": 3, \"curriculum_end\": 6, \"curriculum_prompts\": 40}",
        "{\"seed\": 9, \"size\": 12, \"curriculum_start\": 3, \"curriculum_end\": 6, \"curriculum_prompts\": 40}",
    };
    for (int k = 0; k < 2; k++) {
        rlp_task *whole, *first, *second;
        assert_int_equal(rlp_task_create(&whole, "kk", opts[k]), RLP_OK);
        assert_int_equal(rlp_task_create(&first, "kk", opts[k]), RLP_OK);
        assert_int_equal(rlp_task_create(&second, "kk", opts[k]), RLP_OK);
        char *all = batch_text(whole, 48);
        char *a = batch_text(first, 17); /* stops in the second stage */
        char cur[512];
        size_t len;
        assert_int_equal(rlp_task_cursor_save(first, cur, sizeof cur, &len), RLP_OK);
        assert_int_equal(rlp_task_cursor_restore(second, cur, len), RLP_OK);
        char *b = batch_text(second, 31);
        char *joined = malloc(strlen(a) + strlen(b) + 1);
        strcpy(joined, a);
        strcat(joined, b);
        assert_string_equal(joined, all);
        free(all), free(a), free(b), free(joined);
        rlp_task_free(whole), rlp_task_free(first), rlp_task_free(second);
    }
    /* in the finite set, the third epoch (positions 24..35) is stage 2 and 3 */
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "kk", opts[1]), RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 48, NULL), RLP_OK);
    for (size_t p = 0; p < 48; p++)
        assert_int_equal(people_of(set, p), p < 40 ? 3 + (int)(p / 10) : 6);
    rlp_prompt_set_free(set);
    /* a cursor of another curriculum, or of no curriculum, is refused */
    char cur[512];
    size_t len;
    assert_int_equal(rlp_task_cursor_save(t, cur, sizeof cur, &len), RLP_OK);
    rlp_task *other;
    assert_int_equal(rlp_task_create(&other, "kk", "{\"seed\": 9, \"size\": 12, \"curriculum_start\": 3, "
                                                   "\"curriculum_end\": 6, \"curriculum_prompts\": 80}"),
                     RLP_OK);
    assert_int_equal(rlp_task_cursor_restore(other, cur, len), RLP_E_INVALID_ARG);
    rlp_task_free(other);
    assert_int_equal(rlp_task_create(&other, "kk", "{\"seed\": 9, \"size\": 12, \"min_people\": 3, "
                                                   "\"max_people\": 6}"),
                     RLP_OK);
    assert_int_equal(rlp_task_cursor_restore(other, cur, len), RLP_E_INVALID_ARG);
    rlp_task_free(other);
    rlp_task_free(t);
}

static void curriculum_bad_options(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": 10, \"people\": 3}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": 10, \"min_people\": 3}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": 10, \"max_people\": 7}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7}",
        "{\"curriculum_prompts\": 10}",
        "{\"curriculum_start\": 3, \"curriculum_prompts\": 10}",
        "{\"curriculum_start\": 7, \"curriculum_end\": 3, \"curriculum_prompts\": 10}",
        "{\"curriculum_start\": 1, \"curriculum_end\": 3, \"curriculum_prompts\": 10}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 9, \"curriculum_prompts\": 10}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": 0}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": -5}",
        "{\"curriculum_start\": 3, \"curriculum_end\": 7, \"curriculum_prompts\": 1.5}",
        "{\"curriculum_start\": \"3\", \"curriculum_end\": 7, \"curriculum_prompts\": 10}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rlp_task *t = NULL;
        if (rlp_task_create(&t, "kk", bad[i]) != RLP_E_INVALID_ARG)
            fail_msg("accepted %s", bad[i]);
        assert_null(t);
    }
    rlp_task *t = NULL;
    assert_int_equal(rlp_task_create(&t, "kk", bad[0]), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "people"));
    assert_int_equal(rlp_task_create(&t, "kk", bad[6]), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "curriculum_end"));
    /* one stage is allowed */
    assert_int_equal(rlp_task_create(&t, "kk", "{\"curriculum_start\": 4, \"curriculum_end\": 4, "
                                               "\"curriculum_prompts\": 1}"),
                     RLP_OK);
    rlp_task_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(thousand_per_size_unique_and_rendered),
        cmocka_unit_test(deterministic_by_seed),
        cmocka_unit_test(names_and_phrasings_vary),
        cmocka_unit_test(width_and_bad_options),
        cmocka_unit_test(curriculum_stages),
        cmocka_unit_test(curriculum_resume),
        cmocka_unit_test(curriculum_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
