/* The built-in tools' pieces, each against values worked out by hand or
 * by a reference script: the Hermes tool-call and ASearcher tag parsers,
 * BM25 scores (tests/reference/bm25_fixture.json), the calculator and the
 * generated multi-hop lookup task. */
#include "rlpost.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes_basic),
        cmocka_unit_test(test_hermes_tricky),
        cmocka_unit_test(test_tags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
