/* The built-in tools' pieces, each against values worked out by hand or
 * by a reference script: the Hermes tool-call and ASearcher tag parsers,
 * BM25 scores (tests/reference/bm25_fixture.json), the calculator and the
 * generated multi-hop lookup task. */
#include "rlpost.h"

#include "task/lookup.h"
#include "test_support.h"
#include "tools/bm25.h"
#include "tools/calculator.h"
#include "tools/tool_call.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- Hermes tool calls ---------------------------------------------------- */

static void parse(const char *text, rlpi_tool_call **calls, size_t *n, size_t *bad)
{
    assert_int_equal(rlpi_tool_calls_parse_hermes(calls, n, bad, text, strlen(text)), RLP_OK);
}

static void test_hermes_basic(void **state)
{
    (void)state;
    rlpi_tool_call *c;
    size_t n, bad;
    const char *t = "I will search.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x y\"}}\n</tool_call>";
    parse(t, &c, &n, &bad);
    assert_int_equal(n, 1);
    assert_int_equal(bad, 0);
    assert_string_equal(c[0].name, "search");
    assert_string_equal(c[0].arguments, "{\"query\":\"x y\"}");
    assert_int_equal(c[0].start, 15);
    assert_int_equal(c[0].end, strlen(t));
    rlpi_tool_calls_free(c, n);
}

static void test_hermes_tricky(void **state)
{
    (void)state;
    rlpi_tool_call *c;
    size_t n, bad;
    /* braces and a close tag inside JSON strings; arguments as a JSON
     * string; two calls; one invalid block between them */
    const char *t = "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"{(1+2)}</tool_call>\"}}</tool_call>"
                    "junk <tool_call>{\"name\": oops}</tool_call>"
                    "<tool_call>{\"name\": \"open\", \"arguments\": \"{\\\"id\\\": \\\"Doc 1\\\"}\"}</tool_call> tail";
    parse(t, &c, &n, &bad);
    assert_int_equal(n, 2);
    assert_int_equal(bad, 1);
    assert_string_equal(c[0].name, "calculator");
    assert_string_equal(c[0].arguments, "{\"expression\":\"{(1+2)}</tool_call>\"}");
    assert_string_equal(c[1].name, "open");
    assert_string_equal(c[1].arguments, "{\"id\":\"Doc 1\"}");
    assert_true(c[1].end < strlen(t));
    assert_memory_equal(t + c[1].end, " tail", 5);
    rlpi_tool_calls_free(c, n);

    /* absent arguments read as {}; arguments that are a number or a string
     * that is not an object are bad; so is a missing or empty name */
    parse("<tool_call>{\"name\":\"f\"}</tool_call><tool_call>{\"name\":\"g\",\"arguments\":3}</tool_call>"
          "<tool_call>{\"name\":\"h\",\"arguments\":\"[1]\"}</tool_call><tool_call>{\"arguments\":{}}</tool_call>"
          "<tool_call>{\"name\":\"\"}</tool_call><tool_call>[1]</tool_call>",
          &c, &n, &bad);
    assert_int_equal(n, 1);
    assert_int_equal(bad, 5);
    assert_string_equal(c[0].arguments, "{}");
    rlpi_tool_calls_free(c, n);

    /* an unclosed last block counts when its JSON is complete */
    t = "<tool_call> {\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}  ";
    parse(t, &c, &n, &bad);
    assert_int_equal(n, 1);
    assert_int_equal(bad, 0);
    assert_int_equal(c[0].end, strlen(t));
    rlpi_tool_calls_free(c, n);
    parse("<tool_call> {\"name\": \"search\", \"argu", &c, &n, &bad);
    assert_int_equal(n, 0);
    assert_int_equal(bad, 1);
    assert_null(c);
    /* text after the object before the close tag makes it bad */
    parse("<tool_call>{\"name\":\"f\"} extra</tool_call>", &c, &n, &bad);
    assert_int_equal(n, 0);
    assert_int_equal(bad, 1);
    /* no calls at all; an empty text */
    parse("just an answer", &c, &n, NULL);
    assert_int_equal(n, 0);
    assert_int_equal(rlpi_tool_calls_parse_hermes(&c, &n, &bad, NULL, 0), RLP_OK);
    assert_int_equal(n, 0);
    assert_int_equal(rlpi_tool_calls_parse_hermes(NULL, &n, &bad, "", 0), RLP_E_INVALID_ARG);
}

/* ---- ASearcher tags ------------------------------------------------------- */

static rlpi_tag_kind tag(const char *t, char *body, size_t cap)
{
    size_t b, n;
    rlpi_tag_kind k = rlpi_tag_action_parse(t, strlen(t), &b, &n);
    assert_true(n < cap);
    memcpy(body, t + b, n);
    body[n] = '\0';
    return k;
}

static void test_tags(void **state)
{
    (void)state;
    char b[256];
    assert_int_equal(tag("<think>hmm</think>\n<search> capital of Zorvia </search>", b, sizeof b), RLPI_TAG_SEARCH);
    assert_string_equal(b, "capital of Zorvia");
    /* the last complete block wins; an unclosed later tag is ignored */
    assert_int_equal(tag("<search>a</search> then <answer> Velmora\n</answer> <search>b", b, sizeof b), RLPI_TAG_ANSWER);
    assert_string_equal(b, "Velmora");
    assert_int_equal(tag("<answer>x</answer><access>Doc 7</access>", b, sizeof b), RLPI_TAG_ACCESS);
    assert_string_equal(b, "Doc 7");
    /* a block ends at the first close after its open */
    assert_int_equal(tag("<search>a <search> b</search> c</search>", b, sizeof b), RLPI_TAG_SEARCH);
    assert_string_equal(b, "a <search> b");
    assert_int_equal(tag("<answer></answer>", b, sizeof b), RLPI_TAG_ANSWER);
    assert_string_equal(b, "");
    assert_int_equal(tag("no tags </search> <Search>x</Search> <search>y", b, sizeof b), RLPI_TAG_NONE);
    assert_int_equal(tag("", b, sizeof b), RLPI_TAG_NONE);
}

/* ---- BM25 ----------------------------------------------------------------- */

/* Both sides sum the same float64 terms, maybe in another order: 1e-9 is
 * far above that rounding and far below any score difference that would
 * come from a wrong idf, tf or length normalisation (those move scores by
 * 1e-3 or more on this corpus). */
#define BM25_TOL 1e-9

static json_t *bm25_fixture(void)
{
    char path[1024];
    json_error_t err;
    json_t *fx = json_load_file(source_path(path, sizeof path, "tests/reference/fixtures/bm25_fixture.json"), 0, &err);
    if (!fx)
        fail_msg("%s: %s", path, err.text);
    return fx;
}

static void check_against_fixture(const rlpi_bm25 *ix, const json_t *fx)
{
    size_t nd = json_array_size(json_object_get(fx, "docs"));
    assert_int_equal(rlpi_bm25_size(ix), nd);
    size_t qi;
    json_t *q;
    rlpi_bm25_hit hits[16];
    json_array_foreach(json_object_get(fx, "queries"), qi, q)
    {
        const char *text = json_string_value(json_object_get(q, "query"));
        json_t *want = json_object_get(q, "scores");
        long n = rlpi_bm25_search(ix, text, strlen(text), nd, hits);
        assert_true(n >= 0);
        size_t expect_n = 0;
        for (size_t d = 0; d < nd; d++)
            expect_n += json_real_value(json_array_get(want, d)) > 0;
        assert_int_equal((size_t)n, expect_n);
        for (long h = 0; h < n; h++) {
            double ref = json_real_value(json_array_get(want, hits[h].doc));
            if (ref - hits[h].score > BM25_TOL || hits[h].score - ref > BM25_TOL)
                fail_msg("query \"%s\" doc %zu: score %.17g, reference %.17g", text, hits[h].doc, hits[h].score, ref);
            if (h > 0) /* descending, ties by lower index */
                assert_true(hits[h - 1].score > hits[h].score ||
                            (hits[h - 1].score == hits[h].score && hits[h - 1].doc < hits[h].doc));
        }
    }
}

static void test_bm25_reference(void **state)
{
    (void)state;
    json_t *fx = bm25_fixture();
    json_t *docs = json_object_get(fx, "docs");
    size_t nd = json_array_size(docs);
    rlpi_doc d[16];
    assert_true(nd <= 16);
    for (size_t i = 0; i < nd; i++) {
        json_t *o = json_array_get(docs, i);
        d[i] = (rlpi_doc){json_string_value(json_object_get(o, "id")), json_string_value(json_object_get(o, "title")),
                          json_string_value(json_object_get(o, "text"))};
    }
    rlpi_bm25 *ix;
    assert_int_equal(rlpi_bm25_build(&ix, d, nd), RLP_OK);
    check_against_fixture(ix, fx);
    /* the best hit for the company is its own document; k caps the hits */
    rlpi_bm25_hit hits[2];
    assert_int_equal(rlpi_bm25_search(ix, "founder of Vexaro Labs", 22, 1, hits), 1);
    assert_string_equal(rlpi_bm25_doc(ix, hits[0].doc).id, "d2");
    /* find: id first, then title without case */
    assert_int_equal(rlpi_bm25_find(ix, "d3", 2), 3);
    assert_int_equal(rlpi_bm25_find(ix, " talvin MORASEK\n", 16), 3);
    assert_int_equal(rlpi_bm25_find(ix, "Talvin", 6), -1);
    rlpi_bm25_free(ix);

    /* the same through a JSONL file (with a blank line and an integer id) */
    char path[] = "/tmp/rlpost_bm25_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (size_t i = 0; i < nd; i++) {
        char *line = json_dumps(json_array_get(docs, i), JSON_COMPACT);
        fprintf(f, "%s\n%s", line, i == 2 ? "\n" : "");
        free(line);
    }
    fprintf(f, "{\"id\": 99, \"text\": \"untitled\"}\n");
    fclose(f);
    assert_int_equal(rlpi_bm25_load_jsonl(&ix, path), RLP_OK);
    assert_int_equal(rlpi_bm25_size(ix), nd + 1);
    assert_string_equal(rlpi_bm25_doc(ix, nd).id, "99");
    assert_string_equal(rlpi_bm25_doc(ix, nd).title, "");
    rlpi_bm25_free(ix);
    /* a bad line is named */
    f = fopen(path, "a");
    fprintf(f, "{\"id\": \"x\", \"title\": 3, \"text\": \"t\"}\n");
    fclose(f);
    assert_int_equal(rlpi_bm25_load_jsonl(&ix, path), RLP_E_FORMAT);
    char where[64];
    snprintf(where, sizeof where, ":%zu:", nd + 3);
    assert_non_null(strstr(rlp_error_last(), where));
    remove(path);
    assert_int_equal(rlpi_bm25_load_jsonl(&ix, path), RLP_E_IO);
    /* an empty collection finds nothing */
    assert_int_equal(rlpi_bm25_build(&ix, NULL, 0), RLP_OK);
    assert_int_equal(rlpi_bm25_search(ix, "x", 1, 3, hits), 0);
    rlpi_bm25_free(ix);
    json_decref(fx);
}

/* ---- calculator ----------------------------------------------------------- */

static void calc_ok(const char *e, const char *want)
{
    double v;
    char msg[128], out[64];
    if (rlpi_calc_eval(e, strlen(e), &v, msg, sizeof msg))
        fail_msg("\"%s\": %s", e, msg);
    rlpi_calc_format(v, out, sizeof out);
    if (strcmp(out, want))
        fail_msg("\"%s\" = %s, want %s", e, out, want);
}

static void calc_err(const char *e, const char *want_in_msg)
{
    double v;
    char msg[128];
    assert_int_equal(rlpi_calc_eval(e, strlen(e), &v, msg, sizeof msg), -1);
    if (!strstr(msg, want_in_msg))
        fail_msg("\"%s\": message \"%s\" lacks \"%s\"", e, msg, want_in_msg);
}

static void test_calculator(void **state)
{
    (void)state;
    /* values as Python 3 prints them (ints when integral) */
    calc_ok("6*7", "42");
    calc_ok(" 1 + 2 * 3 ", "7");
    calc_ok("(1 + 2) * 3", "9");
    calc_ok("7 / 2", "3.5");
    calc_ok("1/3", "0.3333333333");
    calc_ok("-2^2", "-4");
    calc_ok("-2**2", "-4");
    calc_ok("2^3^2", "512");
    calc_ok("2**-1", "0.5");
    calc_ok("(-2)^3", "-8");
    calc_ok("--3", "3");
    calc_ok("7 % 3", "1");
    calc_ok("-7 % 3", "2");
    calc_ok("7 % -3", "-2");
    calc_ok("7.5 % 2", "1.5");
    calc_ok("0.1 + 0.2", "0.3");
    calc_ok(".5 * 4", "2");
    calc_ok("1.5e3 + 1", "1501");
    calc_ok("-0", "0");
    calc_ok("2^60", "1.152921505e+18");
    calc_ok("123456789 * 1000", "123456789000");
    calc_err("1/0", "division by zero");
    calc_err("5 % 0", "modulo by zero");
    calc_err("0^-1", "division by zero");
    calc_err("10^400", "not finite");
    calc_err("1e308 * 10", "not finite");
    calc_err("(-8)^(1/3)", "not a real number");
    calc_err("2 +", "syntax error at the end");
    calc_err("2 + x", "syntax error at offset 4");
    calc_err("(1 + 2", "expected ')'");
    calc_err("1 + 2)", "unbalanced ')'");
    calc_err("import os", "syntax error at offset 0");
    calc_err("", "empty expression");
    calc_err("2 3", "unexpected character");
    char deep[200];
    memset(deep, '(', 100);
    deep[100] = '1';
    memset(deep + 101, ')', 98);
    deep[199] = '\0';
    calc_err(deep, "nested too deeply");
    memset(deep, '-', 199);
    calc_err(deep, "nested too deeply");
    char *longe = malloc(RLPI_CALC_MAX_LEN + 2);
    memset(longe, '1', RLPI_CALC_MAX_LEN + 1);
    longe[RLPI_CALC_MAX_LEN + 1] = '\0';
    calc_err(longe, "too long");
    free(longe);
}

/* ---- the lookup task ----------------------------------------------------- */

/* The sentence of entity a's document that states relation rel, read
 * back from the text alone (not from the generator's tables). */
static void expect_fact(const rlpi_lookup_kb *kb, int32_t a, int rel, int32_t b)
{
    static const char *const forms[RLPI_LOOKUP_N_RELATIONS] = {
        "%s was born in the city of %s.", "%s works for %s.",  "%s is a city in the country of %s.",
        "The capital of %s is %s.",       "%s was founded by %s.", "%s is headquartered in the city of %s.",
    };
    char want[256];
    snprintf(want, sizeof want, forms[rel], kb->ents[a].name, kb->ents[b].name);
    if (!strstr(kb->texts[a], want))
        fail_msg("document of %s (\"%s\") does not say \"%s\"", kb->ents[a].name, kb->texts[a], want);
}

static void test_lookup_kb(void **state)
{
    (void)state;
    rlpi_lookup_kb *a, *b, *c;
    assert_int_equal(rlpi_lookup_kb_generate(&a, 5, 200), RLP_OK);
    assert_int_equal(rlpi_lookup_kb_generate(&b, 5, 200), RLP_OK);
    assert_int_equal(rlpi_lookup_kb_generate(&c, 6, 200), RLP_OK);
    assert_int_equal(a->n, 200);
    int differs = 0;
    for (size_t i = 0; i < a->n; i++) {
        /* deterministic in the seed, different across seeds */
        assert_string_equal(a->ents[i].name, b->ents[i].name);
        assert_string_equal(a->texts[i], b->texts[i]);
        differs += strcmp(a->ents[i].name, c->ents[i].name) != 0;
        /* names are unique, and no name is a word of another's */
        for (size_t j = 0; j < i; j++)
            assert_true(strcmp(a->ents[i].name, a->ents[j].name) != 0);
        /* every relation stated in the entity's document */
        for (int r = 0; r < RLPI_LOOKUP_N_RELATIONS; r++)
            if (a->ents[i].rel[r] >= 0)
                expect_fact(a, (int32_t)i, r, a->ents[i].rel[r]);
        /* a country's capital lies in it */
        if (a->ents[i].kind == RLPI_LOOKUP_COUNTRY)
            assert_int_equal(a->ents[a->ents[i].rel[RLPI_LOOKUP_CAPITAL]].rel[RLPI_LOOKUP_LOCATED_IN], (int32_t)i);
    }
    assert_true(differs > 150);
    assert_string_equal(a->ids[7], "e7");
    rlpi_lookup_kb_free(b);
    rlpi_lookup_kb_free(c);
    assert_int_equal(rlpi_lookup_kb_generate(&b, 5, 19), RLP_E_INVALID_ARG);

    int seen[RLPI_LOOKUP_MAX_HOPS + 1] = {0};
    for (uint64_t k = 0; k < 300; k++) {
        rlpi_lookup_question q;
        assert_int_equal(rlpi_lookup_question_generate(&q, a, 11, k, 2, 4), RLP_OK);
        assert_true(q.hops >= 2 && q.hops <= 4);
        seen[q.hops]++;
        /* each hop is a fact of the documents; the question names the
         * start entity and the answer is the last one */
        for (int h = 0; h < q.hops; h++) {
            expect_fact(a, q.path[h], q.rel[h], q.path[h + 1]);
            for (int j = 0; j <= h; j++)
                assert_true(q.path[j] != q.path[h + 1]);
        }
        assert_non_null(strstr(q.text, a->ents[q.path[0]].name));
        assert_string_equal(q.answer, a->ents[q.path[q.hops]].name);
        assert_null(strstr(q.text, q.answer));
        if (k == 0) {
            rlpi_lookup_question q2;
            assert_int_equal(rlpi_lookup_question_generate(&q2, a, 11, k, 2, 4), RLP_OK);
            assert_string_equal(q.text, q2.text);
            free(q2.text);
        }
        free(q.text);
    }
    assert_true(seen[2] > 50 && seen[3] > 50 && seen[4] > 50);
    rlpi_lookup_question q;
    assert_int_equal(rlpi_lookup_question_generate(&q, a, 11, 0, 3, 2), RLP_E_INVALID_ARG);
    rlpi_lookup_kb_free(a);
}

static void test_lookup_task(void **state)
{
    (void)state;
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"seed\": 3, \"entities\": 50, \"min_hops\": 3, \"max_hops\": 3}"),
                     RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 4, NULL), RLP_OK);
    const rlp_prompt *p = rlp_prompt_set_prompts(set);
    rlpi_lookup_kb *kb;
    assert_int_equal(rlpi_lookup_kb_generate(&kb, 3, 50), RLP_OK);
    for (size_t i = 0; i < 4; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        json_t *m = json_loads(it.metadata_json, 0, NULL);
        assert_non_null(m);
        assert_int_equal(json_integer_value(json_object_get(m, "hops")), 3);
        assert_int_equal(json_integer_value(json_object_get(m, "kb_seed")), 3);
        assert_int_equal(json_integer_value(json_object_get(m, "entities")), 50);
        assert_string_equal(json_string_value(json_object_get(m, "reference")), it.reference);
        /* the reference is an entity of the KB the metadata names */
        int found = 0;
        for (size_t j = 0; j < kb->n; j++)
            found |= !strcmp(kb->ents[j].name, it.reference);
        assert_true(found);
        /* the default template is the search one */
        assert_non_null(strstr(p[i].text, "<search> query </search>"));
        assert_non_null(strstr(p[i].text, it.question));
        json_decref(m);
    }
    rlpi_lookup_kb_free(kb);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
    /* hermes: the tools are described as JSON */
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"template\": \"hermes\", \"kb_seed\": 9}"), RLP_OK);
    assert_int_equal(rlp_task_next_batch(&set, t, 1, NULL), RLP_OK);
    p = rlp_prompt_set_prompts(set);
    assert_non_null(strstr(p[0].text, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"search\""));
    assert_non_null(strstr(p[0].text, "\"kb_seed\":9") == NULL ? strstr(p[0].metadata_json, "\"kb_seed\":9")
                                                              : p[0].text);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"min_hops\": 4, \"max_hops\": 2}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"entities\": 5}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"hops\": 5}"), RLP_E_INVALID_ARG);
}

/* ---- the "tools" environment ---------------------------------------------- */

static const char INLINE[] =
    "\"corpus_inline\": [{\"id\": \"d0\", \"title\": \"Velmora\", \"text\": \"Velmora is a city in Zorvia.\"},"
    "{\"id\": \"d1\", \"title\": \"Vexaro Labs\", \"text\": \"Vexaro Labs was founded by Talvin Morasek.\"},"
    "{\"id\": 7, \"title\": \"Talvin Morasek\", \"text\": \"Talvin Morasek was born in Velmora.\"}]";

static rlp_env *make_env(const char *opts_body)
{
    char opts[2048];
    snprintf(opts, sizeof opts, "{%s}", opts_body);
    rlp_env *env = NULL;
    if (rlp_env_create_builtin(&env, "tools", opts, NULL) != RLP_OK)
        fail_msg("tools env %s: %s", opts, rlp_error_last());
    return env;
}

static void step(rlp_env_episode *ep, const char *action, rlp_env_outcome *o)
{
    o->version = RLP_ENV_OUTCOME_VERSION;
    assert_int_equal(rlp_env_episode_step(o, ep, action, strlen(action), NULL, 0), RLP_OK);
    assert_int_equal(o->status, RLP_OK);
}

static void test_env_search_template(void **state)
{
    (void)state;
    char body[1024];
    snprintf(body, sizeof body, "\"template\": \"search\", \"top_k\": 2, %s", INLINE);
    rlp_env *env = make_env(body);
    assert_string_equal(rlp_env_name(env), "tools");
    rlp_env_episode *ep;
    rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
    assert_int_equal(rlp_env_episode_start(&ep, env, "{\"reference\": \"Velmora\"}", &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_int_equal(o.observation_len, 0); /* reset: no observation */

    step(ep, "<think>Find the founder.</think>\n<search> founder of Vexaro Labs </search>", &o);
    assert_int_equal(o.done, 0);
    assert_int_equal(o.tool_call, 1);
    assert_null(o.tool_error);
    assert_string_equal(o.observation, "\n\n<information>\n[1] Title: Vexaro Labs (id: d1)\nVexaro Labs was founded "
                                       "by Talvin Morasek.\n</information>\n\n");

    step(ep, "<access> talvin morasek </access>", &o);
    assert_int_equal(o.tool_call, 1);
    assert_string_equal(o.observation, "\n\n<information>\nTitle: Talvin Morasek (id: 7)\nTalvin Morasek was born "
                                       "in Velmora.\n</information>\n\n");
    step(ep, "<access>7</access>", &o); /* by id */
    assert_non_null(strstr(o.observation, "Title: Talvin Morasek"));

    /* two hits, best first; a query matching nothing; a missing document */
    step(ep, "<search>Velmora</search>", &o);
    assert_non_null(strstr(o.observation, "[1] Title: Velmora (id: d0)"));
    assert_non_null(strstr(o.observation, "\n[2] Title: Talvin Morasek"));
    step(ep, "<search>zzz</search>", &o);
    assert_string_equal(o.observation, "\n\n<information>\nNo results.\n</information>\n\n");
    assert_null(o.tool_error);
    step(ep, "<access>Nowhere</access>", &o);
    assert_int_equal(o.done, 0);
    assert_non_null(o.tool_error);
    assert_non_null(strstr(o.tool_error, "Nowhere"));
    assert_non_null(strstr(o.observation, "Error: no document"));
    step(ep, "<search>  </search>", &o);
    assert_non_null(o.tool_error);

    /* the answer ends it */
    step(ep, "<think>so</think><answer>Velmora</answer>", &o);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.tool_call, 0);
    rlp_env_episode_free(ep);

    /* no tag at all ends it too */
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, NULL), RLP_OK);
    step(ep, "I do not know.", &o);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.tool_call, 0);
    rlp_env_episode_free(ep);
    rlp_env_free(env);

    /* only search enabled: access is a tool error */
    snprintf(body, sizeof body, "\"tools\": [\"search\"], %s", INLINE);
    env = make_env(body);
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, NULL), RLP_OK);
    step(ep, "<access>d0</access>", &o);
    assert_non_null(o.tool_error);
    assert_non_null(strstr(o.tool_error, "not enabled"));
    rlp_env_episode_free(ep);
    rlp_env_free(env);
}

static void test_env_hermes_template(void **state)
{
    (void)state;
    char body[1024];
    snprintf(body, sizeof body, "\"template\": \"hermes\", \"top_k\": 1, %s", INLINE);
    rlp_env *env = make_env(body);
    rlp_env_episode *ep;
    rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, NULL), RLP_OK);

    step(ep, "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}\n</tool_call>", &o);
    assert_int_equal(o.tool_call, 1);
    assert_int_equal(o.done, 0);
    assert_null(o.tool_error);
    assert_string_equal(o.observation, "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response>"
                                       "<|im_end|>\n<|im_start|>assistant\n");

    /* two calls (search, open by an integer id): two responses in one user turn */
    step(ep, "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"Vexaro\"}}</tool_call>\n"
             "<tool_call>{\"name\": \"open\", \"arguments\": \"{\\\"id\\\": 7}\"}</tool_call>",
         &o);
    assert_string_equal(o.observation,
                        "<|im_end|>\n<|im_start|>user\n<tool_response>\n[1] Title: Vexaro Labs (id: d1)\nVexaro Labs was "
                        "founded by Talvin Morasek.\n</tool_response>\n<tool_response>\nTitle: Talvin Morasek (id: 7)\n"
                        "Talvin Morasek was born in Velmora.\n</tool_response><|im_end|>\n<|im_start|>assistant\n");

    /* an unknown tool, bad arguments, a block that does not parse: tool
     * errors, the episode goes on */
    step(ep, "<tool_call>{\"name\": \"browse\", \"arguments\": {}}</tool_call>", &o);
    assert_int_equal(o.done, 0);
    assert_non_null(o.tool_error);
    assert_non_null(strstr(o.tool_error, "unknown tool \"browse\""));
    assert_non_null(strstr(o.observation, "<tool_response>\nError: unknown tool"));
    step(ep, "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1/0\"}}</tool_call>", &o);
    assert_non_null(o.tool_error);
    assert_non_null(strstr(o.observation, "Error: division by zero"));
    step(ep, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}</tool_call>", &o);
    assert_non_null(strstr(o.tool_error, "query"));
    step(ep, "<tool_call>{name: search}</tool_call>", &o);
    assert_int_equal(o.tool_call, 1);
    assert_non_null(strstr(o.tool_error, "could not be parsed"));
    /* a turn that already ended with <|im_end|> is not closed twice */
    step(ep, "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2^10\"}}</tool_call><|im_end|>", &o);
    assert_string_equal(o.observation, "\n<|im_start|>user\n<tool_response>\n1024\n</tool_response>"
                                       "<|im_end|>\n<|im_start|>assistant\n");

    step(ep, "<answer>Velmora</answer>", &o);
    assert_int_equal(o.done, 1);
    assert_int_equal(o.tool_call, 0);
    rlp_env_episode_free(ep);
    rlp_env_free(env);

    /* Qwen3's non-thinking mode: the reopened assistant turn gets the
     * empty reasoning block its prompt had */
    snprintf(body, sizeof body, "\"template\": \"hermes\", \"enable_thinking\": false, %s", INLINE);
    env = make_env(body);
    assert_int_equal(rlp_env_episode_start(&ep, env, NULL, NULL), RLP_OK);
    step(ep, "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6*7\"}}\n</tool_call>", &o);
    assert_string_equal(o.observation, "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response>"
                                       "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    rlp_env_episode_free(ep);
    rlp_env_free(env);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"enable_thinking\": false, \"corpus_inline\": []}", NULL),
                     RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "hermes"));
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"template\": \"hermes\", \"enable_thinking\": 0}", NULL),
                     RLP_E_INVALID_ARG);
}

/* An oracle agent on the lookup task: it follows the question's path
 * through the environment, one search per hop for the current entity's
 * name, and must find that entity's document among the hits and the next
 * entity's name in it: the task is solvable with the tools it gets. */
static void test_env_lookup_oracle(void **state)
{
    (void)state;
    const char *const modes[] = {"\"lookup_kb\": {\"seed\": 4, \"entities\": 200}", "\"lookup_kb\": \"metadata\""};
    rlpi_lookup_kb *kb;
    assert_int_equal(rlpi_lookup_kb_generate(&kb, 4, 200), RLP_OK);
    for (int m = 0; m < 2; m++) {
        rlp_env *env = make_env(modes[m]);
        int found_top1 = 0, total = 0;
        for (uint64_t k = 0; k < 40; k++) {
            rlpi_lookup_question q;
            assert_int_equal(rlpi_lookup_question_generate(&q, kb, 99, k, 2, 4), RLP_OK);
            rlp_env_episode *ep;
            rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
            assert_int_equal(rlp_env_episode_start(&ep, env, "{\"kb_seed\": 4, \"entities\": 200}", &o), RLP_OK);
            assert_int_equal(o.status, RLP_OK);
            for (int h = 0; h < q.hops; h++) {
                char action[256], want[160];
                snprintf(action, sizeof action, "<search>%s</search>", kb->ents[q.path[h]].name);
                step(ep, action, &o);
                snprintf(want, sizeof want, "Title: %s (id: e%d)", kb->ents[q.path[h]].name, (int)q.path[h]);
                const char *hit = strstr(o.observation, want);
                if (!hit)
                    fail_msg("search \"%s\" did not find its document:\n%s", kb->ents[q.path[h]].name, o.observation);
                found_top1 += strstr(o.observation, "[1] ") + 4 == hit;
                total++;
                step(ep, "<access>", &o); /* no complete tag: the episode would end; use a fresh one */
                rlp_env_episode_free(ep);
                assert_int_equal(rlp_env_episode_start(&ep, env, "{\"kb_seed\": 4, \"entities\": 200}", NULL), RLP_OK);
                snprintf(action, sizeof action, "<access>%s</access>", kb->ents[q.path[h]].name);
                step(ep, action, &o);
                assert_non_null(strstr(o.observation, kb->ents[q.path[h + 1]].name));
            }
            step(ep, "<answer>x</answer>", &o);
            assert_int_equal(o.done, 1);
            rlp_env_episode_free(ep);
            free(q.text);
        }
        /* the name's own document is almost always the best hit */
        assert_true(found_top1 * 10 >= total * 9);
        rlp_env_free(env);
    }
    rlpi_lookup_kb_free(kb);
    /* metadata mode without the keys: the reset fails, the sample is invalid */
    rlp_env *env = make_env(modes[1]);
    rlp_env_episode *ep;
    rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
    assert_int_equal(rlp_env_episode_start(&ep, env, "{}", &o), RLP_OK);
    assert_int_equal(o.status, RLP_E_CALLBACK);
    rlp_env_episode_free(ep);
    rlp_env_free(env);
}

/* Task, environment and reward together, through the public API only:
 * prompts of the lookup task, an environment that takes each episode's KB
 * from the prompt's metadata, an oracle that reads the answer out of the
 * documents it opens, and lookup_em + search_format on the episode text. */
static void test_lookup_end_to_end(void **state)
{
    (void)state;
    rlp_task *t;
    assert_int_equal(rlp_task_create(&t, "lookup", "{\"seed\": 21, \"entities\": 60, \"min_hops\": 2, \"max_hops\": 2}"),
                     RLP_OK);
    rlp_prompt_set *set;
    assert_int_equal(rlp_task_next_batch(&set, t, 5, NULL), RLP_OK);
    rlp_env *env = make_env("\"lookup_kb\": \"metadata\", \"top_k\": 1");
    rlp_reward_fn *em, *fmt;
    assert_int_equal(rlp_reward_fn_create_builtin(&em, "lookup_em", "{\"threads\": 1}"), RLP_OK);
    assert_int_equal(rlp_reward_fn_create_builtin(&fmt, "search_format", "{\"threads\": 1}"), RLP_OK);
    rlpi_lookup_kb *kb;
    assert_int_equal(rlpi_lookup_kb_generate(&kb, 21, 60), RLP_OK);
    for (size_t i = 0; i < 5; i++) {
        rlp_task_item it = {.version = RLP_TASK_ITEM_VERSION};
        assert_int_equal(rlp_prompt_set_item(&it, set, i), RLP_OK);
        /* the oracle: the question's start entity is the name it contains;
         * two hops, each read off the opened document */
        rlpi_lookup_question q;
        assert_int_equal(rlpi_lookup_question_generate(&q, kb, 21, it.index, 2, 2), RLP_OK);
        assert_string_equal(q.text, it.question);
        rlp_env_episode *ep;
        rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
        assert_int_equal(rlp_env_episode_start(&ep, env, it.metadata_json, &o), RLP_OK);
        assert_int_equal(o.status, RLP_OK);
        char episode[4096] = "", action[256];
        for (int h = 0; h < 2; h++) {
            snprintf(action, sizeof action, "<think>hop %d</think><access>%s</access>", h, kb->ents[q.path[h]].name);
            step(ep, action, &o);
            strncat(episode, action, sizeof episode - strlen(episode) - 1);
            strncat(episode, o.observation, sizeof episode - strlen(episode) - 1);
        }
        /* the last observation names the answer */
        assert_non_null(strstr(o.observation, it.reference));
        snprintf(action, sizeof action, "<answer> %s </answer>", it.reference);
        step(ep, action, &o);
        assert_int_equal(o.done, 1);
        strncat(episode, action, sizeof episode - strlen(episode) - 1);
        rlp_env_episode_free(ep);
        rlp_reward_request req = {0};
        req.version = RLP_REWARD_REQUEST_VERSION;
        req.prompt_text = "";
        req.completion_text = episode;
        req.completion_len = strlen(episode);
        req.metadata_json = it.metadata_json;
        rlp_reward_result r;
        assert_int_equal(rlp_reward_fn_score_one(&r, em, &req), RLP_OK);
        assert_true(r.valid);
        assert_true(r.score == 1.0f);
        assert_int_equal(rlp_reward_fn_score_one(&r, fmt, &req), RLP_OK);
        assert_true(r.score == 1.0f);
        free(q.text);
    }
    rlpi_lookup_kb_free(kb);
    rlp_reward_fn_free(em);
    rlp_reward_fn_free(fmt);
    rlp_env_free(env);
    rlp_prompt_set_free(set);
    rlp_task_free(t);
}

static void test_env_options(void **state)
{
    (void)state;
    rlp_env *env = NULL;
    assert_int_equal(rlp_env_create_builtin(&env, "browser", "{}", NULL), RLP_E_NOT_FOUND);
    assert_non_null(strstr(rlp_error_last(), "tools"));
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{}", NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", NULL, NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"corpus\": \"/nonexistent/c.jsonl\"}", NULL), RLP_E_IO);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"lookup_kb\": {\"seed\": 1}, \"top_k\": 0}", NULL),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"lookup_kb\": {\"seed\": 1}, \"tools\": [\"calculator\"]}", NULL),
                     RLP_E_INVALID_ARG); /* the search template has no calculator */
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"lookup_kb\": {\"seed\": 1}, \"template\": \"x\"}", NULL),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"lookup_kb\": {\"seed\": 1, \"entities\": 3}}", NULL),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"lookup_kb\": {\"seed\": 1}, \"colour\": 1}", NULL),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"corpus_inline\": [{\"id\": \"a\"}]}", NULL),
                     RLP_E_INVALID_ARG);
    assert_null(env);
    assert_int_equal(rlp_env_create_builtin(NULL, "tools", "{}", NULL), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"template\": \"search\", \"observation_suffix\": 3, "
                                            "\"lookup_kb\": {\"seed\": 1}}", NULL),
                     RLP_E_INVALID_ARG);
}

/* Tool-integrated math (GSM8K): a calculator-only Hermes environment
 * needs no corpus; a search call there is an unknown tool, not a crash. */
static void test_env_calculator_only(void **state)
{
    (void)state;
    rlp_env *env = NULL;
    assert_int_equal(rlp_env_create_builtin(&env, "tools", "{\"template\": \"hermes\", \"tools\": [\"calculator\"]}",
                                            NULL),
                     RLP_OK);
    rlp_env_episode *ep;
    rlp_env_outcome o = {.version = RLP_ENV_OUTCOME_VERSION};
    assert_int_equal(rlp_env_episode_start(&ep, env, "{\"reference\": \"84\"}", &o), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    const char *call = "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*(3+4)\"}}</tool_call>";
    assert_int_equal(rlp_env_episode_step(&o, ep, call, strlen(call), NULL, 0), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_true(o.tool_call && !o.done);
    assert_non_null(strstr(o.observation, "<tool_response>\n84\n</tool_response>"));
    const char *search = "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}</tool_call>";
    assert_int_equal(rlp_env_episode_step(&o, ep, search, strlen(search), NULL, 0), RLP_OK);
    assert_int_equal(o.status, RLP_OK);
    assert_non_null(o.tool_error);
    assert_non_null(strstr(o.tool_error, "unknown tool"));
    rlp_env_episode_free(ep);
    rlp_env_free(env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes_basic),
        cmocka_unit_test(test_hermes_tricky),
        cmocka_unit_test(test_tags),
        cmocka_unit_test(test_bm25_reference),
        cmocka_unit_test(test_calculator),
        cmocka_unit_test(test_lookup_kb),
        cmocka_unit_test(test_lookup_task),
        cmocka_unit_test(test_env_search_template),
        cmocka_unit_test(test_env_hermes_template),
        cmocka_unit_test(test_env_lookup_oracle),
        cmocka_unit_test(test_lookup_end_to_end),
        cmocka_unit_test(test_env_options),
        cmocka_unit_test(test_env_calculator_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
