/* Built-in reward verifiers through the public API, table-driven: every
 * row is a labelled completion with the score (or invalidity) a correct
 * implementation gives, derived from the rule each built-in documents
 * (Logic-RL's kk.py, TinyZero's countdown.py, GSM8K's "#### N") and
 * public-bugs case #7 (nested braces in \boxed{}). Each built-in has at
 * least 40 rows, covering right and wrong answers, missing, duplicated and
 * misordered tags, text outside the tags, <answer> inside <think>,
 * Unicode look-alikes, empty input, and 1 MB completions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scores are sums of a few decimal constants (2 − 1.5, 0.1): equal to
 * double rounding. */
#define SCORE_TOL 1e-9
#define MIN_ROWS 40
#define INVALID NAN /* expected score of a row whose sample must be invalid */

typedef struct row {
    const char *label;
    const char *options;    /* JSON or NULL */
    const char *prompt;     /* NULL = "" */
    const char *completion;
    const char *reference;  /* NULL = none (unless in metadata) */
    const char *metadata;   /* NULL = none */
    double expect;          /* INVALID: the sample must be invalid */
} row;

/* Scores one completion with built-in `name`; the handle is reused while
 * the options stay the same. */
static rlp_reward_result score_with(const char *name, const char *options, const char *prompt,
                                    const char *completion, size_t completion_len, const char *reference,
                                    const char *metadata)
{
    static rlp_reward_fn *fn;
    static char key[512];
    char want[512];
    snprintf(want, sizeof want, "%s|%s", name, options ? options : "");
    if (!fn || strcmp(key, want) != 0) {
        rlp_reward_fn_free(fn);
        fn = NULL;
        char opts[400];
        /* one worker: these are correctness tests, not throughput */
        if (options && strlen(options) > 2)
            snprintf(opts, sizeof opts, "{\"threads\": 1, %s", options + 1);
        else
            snprintf(opts, sizeof opts, "{\"threads\": 1}");
        int rc = rlp_reward_fn_create_builtin(&fn, name, opts);
        if (rc)
            fail_msg("create %s %s: %s", name, opts, rlp_error_last());
        snprintf(key, sizeof key, "%s", want);
    }
    rlp_reward_request req;
    memset(&req, 0, sizeof req);
    req.version = RLP_REWARD_REQUEST_VERSION;
    req.prompt_text = prompt ? prompt : "";
    req.prompt_len = strlen(req.prompt_text);
    req.completion_text = completion;
    req.completion_len = completion_len;
    req.reference = reference;
    req.metadata_json = metadata;
    rlp_reward_result res;
    assert_int_equal(rlp_reward_fn_score_one(&res, fn, &req), RLP_OK);
    return res;
}

static int check(const char *name, const row *r, const rlp_reward_result *res)
{
    int ok = isnan(r->expect) ? !res->valid : res->valid && fabs(res->score - r->expect) < SCORE_TOL;
    if (!ok)
        print_error("%s [%s]: got %s %g (%s), want %s %g\n", name, r->label, res->valid ? "valid" : "invalid",
                    res->score, res->reason, isnan(r->expect) ? "invalid" : "valid", r->expect);
    return ok;
}

static void run_table(const char *name, const row *rows, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        rlp_reward_result res = score_with(name, r->options, r->prompt, r->completion, strlen(r->completion),
                                           r->reference, r->metadata);
        bad += !check(name, r, &res);
    }
    assert_int_equal(bad, 0);
}

/* A completion of about 1 MiB: `head`, filler of `fill` bytes, `tail`. */
static char *big(const char *head, char fill, const char *tail, size_t *len)
{
    size_t nh = strlen(head), nt = strlen(tail), nf = (size_t)1 << 20;
    char *s = malloc(nh + nf + nt + 1);
    assert_non_null(s);
    memcpy(s, head, nh);
    memset(s + nh, fill, nf);
    memcpy(s + nh + nf, tail, nt + 1);
    *len = nh + nf + nt;
    return s;
}

/* ---- Logic-RL: format, K&K answer, total ------------------------------------------ */

/* One completion scored three ways: logic_rl_format (fmt), kk_answer
 * (ans), logic_rl (fmt + ans). fmt is kk.py's tags-only rule ("answer":
 * "any"). The default rule also needs an <answer> content that is no
 * placeholder (the reference is no number and there is no metadata, so
 * "auto" means "nonempty"): the rows in auto_fails fail it. */
typedef struct kk_row {
    const char *label;
    const char *prompt;
    const char *completion;
    const char *reference;
    double fmt, ans;
} kk_row;

#define R2 "(1) Zoey is a knight\n(2) Oliver is a knave"
#define R3 "(1) Ann is a knave\n(2) Bob is a knight\n(3) Cid is a knave"
#define OK2 "(1) Zoey is a knight\n(2) Oliver is a knave"
#define T(think, answer) "<think>" think "</think>\n<answer>" answer "</answer>"

static const kk_row kk_rows[] = {
    {"correct", NULL, T("Zoey tells the truth.", OK2), R2, 1, 2},
    {"correct, other case", NULL, T("...", "zoey is a KNIGHT, OLIVER Is A knave"), R2, 1, 2},
    {"correct, whitespace runs", NULL, T("...", "Zoey  is\ta\nknight; Oliver is   a knave"), R2, 1, 2},
    {"correct, reversed order", NULL, T("...", "Oliver is a knave. Zoey is a knight."), R2, 1, 2},
    {"correct, prose", NULL, T("...", "So Zoey is a knight, while Oliver is a knave."), R2, 1, 2},
    {"correct, 3 people", NULL, T("...", "Ann is a knave, Bob is a knight, Cid is a knave"), R3, 1, 2},
    {"wrong, both swapped", NULL, T("...", "Zoey is a knave\nOliver is a knight"), R2, 1, -1.5},
    {"wrong, one of three", NULL, T("...", "Ann is a knight, Bob is a knight, Cid is a knave"), R3, 1, -1.5},
    {"wrong, Oliver a knight too", NULL, T("...", "Zoey is a knight and Oliver is a knight"), R2, 1, -1.5},
    {"prompt opened <think>", "Solve it.\n<|im_start|>assistant\n<think>",
     "Zoey is honest.</think>\n<answer>" OK2 "</answer>", R2, 1, 2},
    {"prompt opened <think>, trailing newline", "...assistant\n<think>\n",
     "reasoning</think><answer>" OK2 "</answer>", R2, 1, 2},
    {"prompt opened <think>, completion repeats it", "...<think>", T("x", OK2), R2, -1, -2},
    {"missing <think>", NULL, "reasoning</think><answer>" OK2 "</answer>", R2, -1, -2},
    {"missing </think>", NULL, "<think>reasoning<answer>" OK2 "</answer>", R2, -1, -2},
    {"missing <answer>", NULL, "<think>reasoning</think>" OK2 "</answer>", R2, -1, -2},
    {"missing </answer>", NULL, "<think>reasoning</think><answer>" OK2, R2, -1, -2},
    {"no answer block at all", NULL, "<think>Zoey is a knight, Oliver is a knave</think>", R2, -1, -2},
    {"no tags at all", NULL, "Zoey is a knight. Oliver is a knave.", R2, -1, -2},
    {"duplicated <think> block", NULL, "<think>a</think><think>b</think><answer>" OK2 "</answer>", R2, -1, -2},
    {"nested <think>", NULL, "<think><think>a</think></think><answer>" OK2 "</answer>", R2, -1, -2},
    {"duplicated answer block", NULL, T("x", OK2) "<answer>" OK2 "</answer>", R2, -1, -2},
    {"<answer> mentioned in the reasoning", NULL, T("I will write it in <answer> tags", OK2), R2, -1, -2},
    {"answer before think", NULL, "<answer>" OK2 "</answer><think>x</think>", R2, -1, -2},
    {"</think> before <think>", NULL, "</think>x<think><answer>" OK2 "</answer>", R2, -1, -2},
    {"</answer> before <answer>", NULL, "<think>x</think></answer>" OK2 "<answer>", R2, -1, -2},
    {"<answer> inside <think>", NULL, "<think>x <answer>" OK2 "</answer> y</think>", R2, -1, -2},
    {"text outside the tags", NULL, "Sure! " T("x", OK2) " Hope this helps.", R2, 1, 2},
    {"upper-case tags", NULL, "<THINK>x</THINK><ANSWER>" OK2 "</ANSWER>", R2, -1, -2},
    {"tag with a space", NULL, "<think >x</think><answer>" OK2 "</answer>", R2, -1, -2},
    {"fullwidth look-alike <think>", NULL, "\xef\xbc\x9cthink\xef\xbc\x9ex</think><answer>" OK2 "</answer>", R2, -1,
     -2},
    {"empty completion", NULL, "", R2, -1, -2},
    {"empty answer", NULL, T("x", "  \n "), R2, 1, -2},
    {"placeholder answer", NULL, T("x", " answer "), R2, 1, -2},
    {"placeholder from Logic-RL's prompt", NULL, T("x", " answer here "), R2, 1, -2},
    {"three mentions for two people", NULL, T("x", OK2 " -- two knights? no"), R2, 1, -2},
    {"one mention for two people", NULL, T("x", "Zoey is a knight"), R2, 1, -2},
    {"name not stated, count right", NULL, T("x", "Zoey is a knight and the other is a knave"), R2, 1, -2},
    {"no article", NULL, T("x", "Zoey is knight, Oliver is a knave"), R2, 1, -2},
    {"name not at a word boundary", NULL, T("x", "Zoeyy is a knight, Oliver is a knave"), R2, 1, -2},
    {"plural is no statement", NULL, T("x", "Zoey is a knights, Oliver is a knave"), R2, 1, -2},
    {"Cyrillic a in 'a knight'", NULL, T("x", "Zoey is \xd0\xb0 knight, Oliver is a knave"), R2, 1, -2},
    {"Kelvin-sign look-alike of 'knight'", NULL, T("x", "Zoey is a \xe2\x84\xaanight, Oliver is a knave"), R2, 1,
     -2},
    {"same name twice, other missing", NULL, T("x", "Zoey is a knave, Zoey is a knight"), R2, 1, -2},
    {"first statement of a name counts", NULL, T("x", "Zoey is a knight; Oliver is a knave"), R2, 1, 2},
    {"whitespace around the tags", NULL, "\n<think>\nx\n</think>\n\n<answer>\n" OK2 "\n</answer>\n", R2, 1, 2},
    {"reference lines without numbers", NULL, T("x", OK2), "Zoey is a knight\nOliver is a knave", 1, 2},
};

static const char *const auto_fails[] = {"empty answer", "placeholder answer", "placeholder from Logic-RL's prompt"};

static int fails_auto(const char *label)
{
    for (size_t i = 0; i < sizeof auto_fails / sizeof auto_fails[0]; i++)
        if (!strcmp(label, auto_fails[i]))
            return 1;
    return 0;
}

static void test_logic_rl_tables(void **state)
{
    (void)state;
    size_t n = sizeof kk_rows / sizeof kk_rows[0];
    assert_true(n >= MIN_ROWS);
    int bad = 0;
    /* pass 0: the default ("answer": "auto"); pass 1: kk.py's rule exactly */
    for (int pass = 0; pass < 2; pass++) {
        const char *opts = pass ? "{\"answer\": \"any\"}" : NULL;
        for (size_t i = 0; i < n; i++) {
            const kk_row *k = &kk_rows[i];
            double fmt = pass == 0 && fails_auto(k->label) ? -1 : k->fmt;
            /* a failed format makes the answer unparsable (require_format) */
            double ans = fmt < 0 ? -2 : k->ans;
            row f = {k->label, opts, k->prompt, k->completion, k->reference, NULL, fmt};
            row a = f, t = f;
            a.expect = ans;
            t.expect = fmt + ans;
            size_t len = strlen(k->completion);
            rlp_reward_result r1 =
                score_with("logic_rl_format", opts, k->prompt, k->completion, len, k->reference, NULL);
            rlp_reward_result r2 = score_with("kk_answer", opts, k->prompt, k->completion, len, k->reference, NULL);
            rlp_reward_result r3 = score_with("logic_rl", opts, k->prompt, k->completion, len, k->reference, NULL);
            bad += !check("logic_rl_format", &f, &r1) + !check("kk_answer", &a, &r2) + !check("logic_rl", &t, &r3);
            /* Logic-RL's totals are only these four */
            double tot = fmt + ans;
            assert_true(tot == 3.0 || tot == -0.5 || tot == -1.0 || tot == -3.0);
        }
    }
    assert_int_equal(bad, 0);
}

/* ---- the <answer> content the format needs ("answer") ----------------------------------- */

#define KK_META "{\"answer_type\": \"kk\", \"names\": [\"Zoey\", \"Oliver\"]}"
#define CD_META "{\"answer_type\": \"equation\", \"numbers\": [44, 19, 35], \"target\": 98}"

/* logic_rl_format on T("x", content): 1 when the content parses as the
 * answer type that the options, metadata or reference give, else -1. */
static const row answer_rows[] = {
    /* auto: a numeric reference asks for a number */
    {"number", NULL, NULL, T("x", "42"), "42", NULL, 1},
    {"number, spaces", NULL, NULL, T("x", "\n 42 \n"), "42", NULL, 1},
    {"wrong number still has the format", NULL, NULL, T("x", "41"), "42", NULL, 1},
    {"number, trailing period", NULL, NULL, T("x", "42."), "42", NULL, 1},
    {"negative decimal", NULL, NULL, T("x", "-3.5"), "-3.5", NULL, 1},
    {"thousands", NULL, NULL, T("x", "1,000"), "1000", NULL, 1},
    {"fraction", NULL, NULL, T("x", "3/4"), "0.75", NULL, 1},
    {"\\frac", NULL, NULL, T("x", "\\frac{3}{4}"), "0.75", NULL, 1},
    {"\\boxed{N}", NULL, NULL, T("x", "\\boxed{42}"), "42", NULL, 1},
    {"$\\boxed{N}$.", NULL, NULL, T("x", "$\\boxed{42}$."), "42", NULL, 1},
    {"GSM8K reference", NULL, NULL, T("x", "18"), "9 * 2 = 18\n#### 18", NULL, 1},
    {"reference from metadata", NULL, NULL, T("x", "18"), NULL, "{\"reference\": 18}", 1},
    {"placeholder 'answer'", NULL, NULL, T("x", " answer "), "42", NULL, -1},
    {"placeholder 'Answer'", NULL, NULL, T("x", "Answer"), "42", NULL, -1},
    {"placeholder 'your answer'", NULL, NULL, T("x", "your answer"), "42", NULL, -1},
    {"placeholder 'answer here'", NULL, NULL, T("x", "answer here"), "42", NULL, -1},
    {"placeholder '...'", NULL, NULL, T("x", "..."), "42", NULL, -1},
    {"empty", NULL, NULL, T("x", ""), "42", NULL, -1},
    {"sentence around the number", NULL, NULL, T("x", "The answer is 42"), "42", NULL, -1},
    {"number with a unit", NULL, NULL, T("x", "42 apples"), "42", NULL, -1},
    {"x = N", NULL, NULL, T("x", "x = 42"), "42", NULL, -1},
    {"words", NULL, NULL, T("x", "forty-two"), "42", NULL, -1},
    {"box with text after", NULL, NULL, T("x", "\\boxed{42} apples"), "42", NULL, -1},
    {"box of no number", NULL, NULL, T("x", "\\boxed{answer}"), "42", NULL, -1},
    {"two periods", NULL, NULL, T("x", "42.."), "42", NULL, -1},
    /* auto: the metadata's answer_type wins */
    {"answer_type number without reference", NULL, NULL, T("x", "7"), NULL, "{\"answer_type\": \"number\"}", 1},
    {"answer_type number, placeholder", NULL, NULL, T("x", "answer"), NULL, "{\"answer_type\": \"number\"}", -1},
    {"kk", NULL, NULL, T("x", OK2), NULL, KK_META, 1},
    {"kk, wrong roles still have the format", NULL, NULL, T("x", "Zoey is a knave, Oliver is a knight"), NULL,
     KK_META, 1},
    {"kk, placeholder", NULL, NULL, T("x", " answer "), NULL, KK_META, -1},
    {"kk, Logic-RL's example", NULL, NULL, T("x", "(1) Zoey is a knight\n(2) ... "), NULL, KK_META, -1},
    {"kk, one person missing", NULL, NULL, T("x", "Zoey is a knight"), NULL, KK_META, -1},
    {"kk, roles without names", NULL, NULL, T("x", "knight, knave"), NULL, KK_META, -1},
    {"kk without names: one claim", NULL, NULL, T("x", "(1) Ann is a knave"), NULL, "{\"answer_type\": \"kk\"}", 1},
    {"kk without names: placeholder", NULL, NULL, T("x", "answer here"), NULL, "{\"answer_type\": \"kk\"}", -1},
    {"equation", NULL, NULL, T("x", "(44 + 19) + 35"), NULL, CD_META, 1},
    {"equation, wrong value still has the format", NULL, NULL, T("x", "44 - 19 + 35"), NULL, CD_META, 1},
    {"equation, placeholder", NULL, NULL, T("x", "answer"), NULL, CD_META, -1},
    {"equation with '= target'", NULL, NULL, T("x", "44 + 19 + 35 = 98"), NULL, CD_META, -1},
    {"equation, TinyZero's example", NULL, NULL, T("x", " (1 + 2) / 3 "), NULL, CD_META, 1},
    {"unknown answer_type", NULL, NULL, T("x", "42"), NULL, "{\"answer_type\": \"colour\"}", INVALID},
    {"answer_type auto is no type", NULL, NULL, T("x", "42"), NULL, "{\"answer_type\": \"auto\"}", INVALID},
    /* auto: a reference that is no number asks for some non-placeholder text */
    {"free text", NULL, NULL, T("x", "Paris"), "Paris", NULL, 1},
    {"free text, placeholder", NULL, NULL, T("x", "final answer"), "Paris", NULL, -1},
    {"free text, placeholder in brackets", NULL, NULL, T("x", "[Your Answer]"), "Paris", NULL, -1},
    {"free text, ellipsis", NULL, NULL, T("x", " \xe2\x80\xa6 "), "Paris", NULL, -1},
    {"no reference, no metadata", NULL, NULL, T("x", "anything real"), NULL, NULL, 1},
    {"no reference, placeholder", NULL, NULL, T("x", "answer"), NULL, NULL, -1},
    /* explicit options win over the metadata */
    {"any: placeholder passes", "{\"answer\": \"any\"}", NULL, T("x", "answer"), "42", KK_META, 1},
    {"any: empty passes", "{\"answer\": \"any\"}", NULL, T("x", ""), "42", NULL, 1},
    {"nonempty over kk metadata", "{\"answer\": \"nonempty\"}", NULL, T("x", "blah"), NULL, KK_META, 1},
    {"nonempty, placeholder", "{\"answer\": \"nonempty\"}", NULL, T("x", "answer"), NULL, KK_META, -1},
    {"number over a text reference", "{\"answer\": \"number\"}", NULL, T("x", "Paris"), "Paris", NULL, -1},
    {"equation option", "{\"answer\": \"equation\"}", NULL, T("x", "3 * (4 + 5)"), NULL, NULL, 1},
    {"kk option, no names", "{\"answer\": \"kk\"}", NULL, T("x", "Bob is a knight"), NULL, NULL, 1},
    {"tags still come first", "{\"answer\": \"number\"}", NULL, "<answer>42</answer>", NULL, NULL, -1},
};

static void test_format_answer_content(void **state)
{
    (void)state;
    assert_true(sizeof answer_rows / sizeof answer_rows[0] >= MIN_ROWS);
    run_table("logic_rl_format", answer_rows, sizeof answer_rows / sizeof answer_rows[0]);
    /* the reason names the content and the type */
    rlp_reward_result r = score_with("logic_rl_format", NULL, NULL, T("x", " answer "), strlen(T("x", " answer ")),
                                     "42", NULL);
    assert_non_null(strstr(r.reason, "format: <answer> content \"answer\" is not a number"));
    r = score_with("logic_rl_format", NULL, NULL, T("x", "answer"), strlen(T("x", "answer")), NULL, KK_META);
    assert_non_null(strstr(r.reason, "no \"Zoey is a knight|knave\""));
    /* logic_rl on K&K metadata: a real answer keeps kk.py's totals, a
     * placeholder loses the format bonus (-1 - 2 instead of 1 - 2) */
    const char *meta = "{\"answer_type\": \"kk\", \"names\": [\"Zoey\", \"Oliver\"], "
                       "\"reference\": \"(1) Zoey is a knight\\n(2) Oliver is a knave\"}";
    r = score_with("logic_rl", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), NULL, meta);
    assert_true(r.valid && r.score == 3.0);
    r = score_with("logic_rl", NULL, NULL, T("x", "Zoey is a knave, Oliver is a knight"),
                   strlen(T("x", "Zoey is a knave, Oliver is a knight")), NULL, meta);
    assert_true(r.valid && r.score == -0.5);
    r = score_with("logic_rl", NULL, NULL, T("x", "answer"), strlen(T("x", "answer")), NULL, meta);
    assert_true(r.valid && r.score == -3.0);
    r = score_with("logic_rl", "{\"answer\": \"any\"}", NULL, T("x", "answer"), strlen(T("x", "answer")), NULL,
                   meta);
    assert_true(r.valid && r.score == -1.0);
    /* a bad option value is refused by name */
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "logic_rl_format", "{\"answer\": \"numeric\"}"),
                     RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "numeric"));
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "logic_rl", "{\"answer\": 3}"), RLP_E_INVALID_ARG);
}

static void test_logic_rl_big_and_options(void **state)
{
    (void)state;
    size_t len;
    char *s = big("<think>", 'a', "</think><answer>" OK2 "</answer>", &len);
    rlp_reward_result r = score_with("logic_rl", NULL, NULL, s, len, R2, NULL);
    assert_true(r.valid && r.score == 3.0);
    free(s);
    s = big("", 'k', "", &len); /* 1 MiB of 'k', no tags */
    r = score_with("logic_rl", NULL, NULL, s, len, R2, NULL);
    assert_true(r.valid && r.score == -3.0);
    free(s);
    s = big("<think>", ' ', "</think><answer>Zoey is a knight, Oliver is a knight</answer>", &len);
    r = score_with("logic_rl", NULL, NULL, s, len, R2, NULL);
    assert_true(r.valid && r.score == -0.5);
    free(s);

    /* the reference from the metadata; the K&K benchmark's own field */
    r = score_with("logic_rl", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), NULL,
                   "{\"reference\": \"(1) Zoey is a knight\\n(2) Oliver is a knave\"}");
    assert_true(r.valid && r.score == 3.0);
    r = score_with("kk_answer", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), NULL,
                   "{\"solution_text_format\": \"(1) Zoey is a knight\\n(2) Oliver is a knave\"}");
    assert_true(r.valid && r.score == 2.0);
    /* no reference, or one without people: invalid, not a score */
    r = score_with("logic_rl", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), NULL, NULL);
    assert_false(r.valid);
    r = score_with("kk_answer", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), "nobody here", NULL);
    assert_false(r.valid);
    /* the format alone needs no reference */
    r = score_with("logic_rl_format", NULL, NULL, T("x", OK2), strlen(T("x", OK2)), NULL, NULL);
    assert_true(r.valid && r.score == 1.0);

    /* explicit prefix: counts even when the prompt does not show it */
    const char *c = "x</think><answer>" OK2 "</answer>";
    r = score_with("logic_rl", "{\"assistant_prefix\": \"<think>\"}", NULL, c, strlen(c), R2, NULL);
    assert_true(r.valid && r.score == 3.0);
    /* the metadata says what the prompt opened (rlp_task prompts carry it) */
    r = score_with("logic_rl", NULL, NULL, c, strlen(c), NULL,
                   "{\"reference\": \"(1) Zoey is a knight\\n(2) Oliver is a knave\", "
                   "\"assistant_prefix\": \"<think>\"}");
    assert_true(r.valid && r.score == 3.0);
    /* "" switches the automatic prefix off */
    r = score_with("logic_rl", "{\"assistant_prefix\": \"\"}", "...<think>", c, strlen(c), R2, NULL);
    assert_true(r.valid && r.score == -3.0);
    /* scores are options */
    r = score_with("logic_rl", "{\"answer_wrong\": -1, \"format_correct\": 0.5}", NULL,
                   T("x", "Zoey is a knave, Oliver is a knight"), strlen(T("x", "Zoey is a knave, Oliver is a knight")),
                   R2, NULL);
    assert_true(r.valid && r.score == -0.5);
    r = score_with("kk_answer", "{\"count_mismatch\": -1.5}", NULL, T("x", "Zoey is a knight"),
                   strlen(T("x", "Zoey is a knight")), R2, NULL);
    assert_true(r.valid && r.score == -1.5);
    /* without the format gate a misformatted but right answer counts */
    r = score_with("kk_answer", "{\"require_format\": false}", NULL, "<answer>" OK2 "</answer>",
                   strlen("<answer>" OK2 "</answer>"), R2, NULL);
    assert_true(r.valid && r.score == 2.0);
    /* the last of several blocks, as re.finditer finds them */
    const char *two = "<answer>Zoey is a knave, Oliver is a knight</answer><answer>" OK2 "</answer>";
    r = score_with("kk_answer", "{\"require_format\": false}", NULL, two, strlen(two), R2, NULL);
    assert_true(r.valid && r.score == 2.0);
}

/* ---- GSM8K ------------------------------------------------------------------------------ */

static const row gsm8k_rows[] = {
    {"#### N", NULL, NULL, "so she makes 9 * 2 = 18.\n#### 18", "18", NULL, 1},
    {"#### N, no space", NULL, NULL, "####18", "18", NULL, 1},
    {"\\boxed{N}", NULL, NULL, "The answer is \\boxed{18}.", "18", NULL, 1},
    {"last number", NULL, NULL, "She makes 18 dollars.", "18", NULL, 1},
    {"#### off by one", NULL, NULL, "#### 17", "18", NULL, 0},
    {"\\boxed off by one", NULL, NULL, "\\boxed{19}", "18", NULL, 0},
    {"last number off by one", NULL, NULL, "She makes 17 dollars.", "18", NULL, 0},
    {"thousands comma", NULL, NULL, "#### 1,000", "1000", NULL, 1},
    {"millions commas", NULL, NULL, "It costs 1,234,567 in total", "1234567", NULL, 1},
    {"reference with commas", NULL, NULL, "#### 1000", "1,000", NULL, 1},
    {"comma that is no thousands separator", NULL, NULL, "the values 1,23", "123", NULL, 0},
    {"currency", NULL, NULL, "She makes $18 every day.", "18", NULL, 1},
    {"#### with currency and cents", NULL, NULL, "#### $18.50", "18.5", NULL, 1},
    {"trailing .0", NULL, NULL, "#### 18.0", "18", NULL, 1},
    {"trailing .00 in text", NULL, NULL, "That is 18.00 dollars", "18", NULL, 1},
    {"decimal off", NULL, NULL, "#### 18.5", "18", NULL, 0},
    {"ten times", NULL, NULL, "#### 180", "18", NULL, 0},
    {"leading zero", NULL, NULL, "The answer is 018", "18", NULL, 1},
    {"negative", NULL, NULL, "The change is -5", "-5", NULL, 1},
    {"#### negative", NULL, NULL, "#### -7", "-7", NULL, 1},
    {"minus of a subtraction is no sign", NULL, NULL, "5-3=2", "2", NULL, 1},
    {"x = -3", NULL, NULL, "x = -3", "-3", NULL, 1},
    {"Unicode minus is not '-'", NULL, NULL, "#### \xe2\x88\x92" "18", "-18", NULL, 0},
    {"#### beats a later number", NULL, NULL, "#### 18\nActually maybe 19", "18", NULL, 1},
    {"last #### wins", NULL, NULL, "#### 17\n#### 18", "18", NULL, 1},
    {"#### beats a box", NULL, NULL, "\\boxed{18}\n#### 17", "18", NULL, 0},
    {"box beats a later number", NULL, NULL, "\\boxed{18} but maybe 20", "18", NULL, 1},
    {"box with text", NULL, NULL, "\\boxed{18 \\text{ dollars}}", "18", NULL, 1},
    {"box with an equation", NULL, NULL, "\\boxed{x = 18}", "18", NULL, 1},
    {"box with \\$", NULL, NULL, "\\boxed{\\$18}", "18", NULL, 1},
    {"case 7.3: box with {,}", NULL, NULL, "The total is \\boxed{1{,}000} dollars.", "1000", NULL, 1},
    {"case 7.1: nested braces", NULL, NULL, "So the answer is \\boxed{\\frac{1}{3}}.", "\\frac{1}{3}", NULL, 1},
    {"case 7.2: other fraction", NULL, NULL, "So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{3}", NULL, 0},
    {"case 7.4: unclosed box", NULL, NULL, "\\boxed{\\frac{1}{3}", "\\frac{1}{3}", NULL, 0},
    {"fraction vs decimal", NULL, NULL, "\\boxed{0.5}", "1/2", NULL, 1},
    {"percent sign", NULL, NULL, "a rise of 18%", "18", NULL, 1},
    {"last of several numbers", NULL, NULL, "18 apples and 2 oranges", "18", NULL, 0},
    {"no number", NULL, NULL, "I do not know.", "18", NULL, 0},
    {"empty", NULL, NULL, "", "18", NULL, 0},
    {"fullwidth digits", NULL, NULL, "#### \xef\xbc\x91\xef\xbc\x98", "18", NULL, 0},
    {"Arabic-Indic digits", NULL, NULL, "\xd9\xa1\xd9\xa8", "18", NULL, 0},
    {"full GSM8K answer as reference", NULL, NULL, "18",
     "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18", NULL, 1},
    {"reference from metadata", NULL, NULL, "#### 18", NULL, "{\"reference\": \"18\"}", 1},
    {"numeric reference in metadata", NULL, NULL, "#### 18", NULL, "{\"reference\": 18}", 1},
    {"huge numbers equal", NULL, NULL, "#### 123456789012345678901234567890", "123456789012345678901234567890", NULL,
     1},
    {"huge numbers off by one", NULL, NULL, "#### 123456789012345678901234567891", "123456789012345678901234567890",
     NULL, 0},
    {"strict: no fallback", "{\"fallback_last_number\": false}", NULL, "She makes 18 dollars.", "18", NULL, 0},
    {"scores are options", "{\"correct\": 2, \"wrong\": -1}", NULL, "#### 17", "18", NULL, -1},
    {"no reference", NULL, NULL, "#### 18", NULL, NULL, INVALID},
    {"reference not a number", NULL, NULL, "#### 18", "eighteen", NULL, INVALID},
};

static void test_gsm8k_table(void **state)
{
    (void)state;
    assert_true(sizeof gsm8k_rows / sizeof gsm8k_rows[0] >= MIN_ROWS);
    run_table("gsm8k", gsm8k_rows, sizeof gsm8k_rows / sizeof gsm8k_rows[0]);
    size_t len;
    char *s = big("Let me think. ", 'x', " #### 18", &len);
    rlp_reward_result r = score_with("gsm8k", NULL, NULL, s, len, "18", NULL);
    assert_true(r.valid && r.score == 1.0);
    free(s);
    s = big("", '9', "", &len); /* one 1 MiB number */
    r = score_with("gsm8k", NULL, NULL, s, len, "18", NULL);
    assert_true(r.valid && r.score == 0.0);
    free(s);
}

/* ---- boxed math ------------------------------------------------------------------------------ */

static const row boxed_rows[] = {
    /* public-bugs case #7, verbatim */
    {"case 7.1: \\frac{1}{3}", NULL, NULL, "So the answer is \\boxed{\\frac{1}{3}}.", "\\frac{1}{3}", NULL, 1},
    {"case 7.2: \\frac{1}{2} vs 1/3", NULL, NULL, "So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{3}", NULL, 0},
    {"case 7.3: 1{,}000", NULL, NULL, "The total is \\boxed{1{,}000} dollars.", "1000", NULL, 1},
    {"case 7.4: unclosed", NULL, NULL, "\\boxed{\\frac{1}{3}", "\\frac{1}{3}", NULL, 0},
    /* the kind: LaTeX groups inside the box */
    {"\\frac{2}{3} vs \\frac{2}{5}: same prefix", NULL, NULL, "\\boxed{\\frac{2}{3}}", "\\frac{2}{5}", NULL, 0},
    {"\\sqrt{2} vs \\sqrt{3}", NULL, NULL, "\\boxed{\\sqrt{2}}", "\\sqrt{3}", NULL, 0},
    {"\\frac{\\sqrt{3}}{2}", NULL, NULL, "\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", NULL, 1},
    {"nested fraction", NULL, NULL, "\\boxed{\\frac{1}{\\frac{1}{2}}}", "\\frac{1}{\\frac12}", NULL, 1},
    {"exponent group", NULL, NULL, "\\boxed{2^{10}}", "2^{10}", NULL, 1},
    {"exponent group differs", NULL, NULL, "\\boxed{2^{11}}", "2^{10}", NULL, 0},
    {"set braces", NULL, NULL, "\\boxed{\\{1,2\\}}", "\\{1, 2\\}", NULL, 1},
    {"escaped brace inside", NULL, NULL, "\\boxed{a\\}b}", "a\\}b", NULL, 1},
    {"extra closing brace after", NULL, NULL, "\\boxed{\\frac{1}{3}}}", "\\frac{1}{3}", NULL, 1},
    {"double braces", NULL, NULL, "\\boxed{{5}}", "5", NULL, 1},
    {"box in a box", NULL, NULL, "\\boxed{\\boxed{5}}", "5", NULL, 1},
    /* normalisation */
    {"\\dfrac", NULL, NULL, "\\boxed{\\dfrac{1}{3}}", "\\frac{1}{3}", NULL, 1},
    {"\\tfrac shorthand", NULL, NULL, "\\boxed{\\tfrac13}", "\\frac{1}{3}", NULL, 1},
    {"a/b", NULL, NULL, "\\boxed{1/3}", "\\frac{1}{3}", NULL, 1},
    {"equal fractions", NULL, NULL, "\\boxed{\\frac{2}{6}}", "1/3", NULL, 1},
    {"decimal vs fraction", NULL, NULL, "\\boxed{0.5}", "\\frac12", NULL, 1},
    {"0.333 is not 1/3", NULL, NULL, "\\boxed{0.333}", "\\frac{1}{3}", NULL, 0},
    {"signs", NULL, NULL, "\\boxed{-\\frac{1}{3}}", "\\frac{-1}{3}", NULL, 1},
    {"sign differs", NULL, NULL, "\\boxed{-\\frac{1}{3}}", "\\frac{1}{3}", NULL, 0},
    {"symbolic \\frac", NULL, NULL, "\\boxed{\\frac{a}{b}}", "\\frac ab", NULL, 1},
    {"\\left \\right", NULL, NULL, "\\boxed{\\left( 1, 2 \\right)}", "(1,2)", NULL, 1},
    {"spaces", NULL, NULL, "\\boxed{ x + 1 }", "x+1", NULL, 1},
    {"thin space thousands", NULL, NULL, "\\boxed{3\\,000}", "3000", NULL, 1},
    {"comma thousands", NULL, NULL, "\\boxed{1,000}", "1000", NULL, 1},
    {"comma that is no thousands separator", NULL, NULL, "\\boxed{1,00}", "100", NULL, 0},
    {"trailing period", NULL, NULL, "\\boxed{5.}", "5", NULL, 1},
    {"dollars around", NULL, NULL, "$\\boxed{3}$", "$3$", NULL, 1},
    {"command spacing kept", NULL, NULL, "\\boxed{\\pi r^2}", "\\pi  r^2", NULL, 1},
    {"\\text kept", NULL, NULL, "\\boxed{\\text{(A)}}", "\\text{(A)}", NULL, 1},
    /* not normalised, by design */
    {"order of terms", NULL, NULL, "\\boxed{1+x}", "x+1", NULL, 0},
    {"percent", NULL, NULL, "\\boxed{10\\%}", "10", NULL, 0},
    {"x = 5", NULL, NULL, "\\boxed{x=5}", "5", NULL, 0},
    /* which box */
    {"\\fbox", NULL, NULL, "\\fbox{7}", "7", NULL, 1},
    {"space before the brace", NULL, NULL, "\\boxed {5}", "5", NULL, 1},
    {"last box wins", NULL, NULL, "\\boxed{3}, no wait: \\boxed{4}", "4", NULL, 1},
    {"earlier box is not the answer", NULL, NULL, "\\boxed{3}, no wait: \\boxed{4}", "3", NULL, 0},
    {"reference with its own box", NULL, NULL, "\\boxed{2}", "\\boxed{2}", NULL, 1},
    {"worked solution as reference", NULL, NULL, "\\boxed{1/3}", "so the probability is $\\boxed{\\frac{1}{3}}$.",
     NULL, 1},
    {"other command", NULL, NULL, "\\boxedanswer{5}", "5", NULL, 0},
    {"no box", NULL, NULL, "the answer is 5", "5", NULL, 0},
    {"empty box", NULL, NULL, "\\boxed{}", "5", NULL, 0},
    {"empty", NULL, NULL, "", "5", NULL, 0},
    {"Greek omicron look-alike", NULL, NULL, "\\b\xce\xbfxed{5}", "5", NULL, 0},
    {"fullwidth brace look-alike", NULL, NULL, "\\boxed\xef\xbd\x9b" "5\xef\xbd\x9d", "5", NULL, 0},
    {"answer tags do not matter", NULL, NULL, "<answer>\\boxed{5}</answer>", "5", NULL, 1},
    {"reference from metadata", NULL, NULL, "\\boxed{5}", NULL, "{\"reference\": \"5\"}", 1},
    {"no reference", NULL, NULL, "\\boxed{5}", NULL, NULL, INVALID},
    {"scores are options", "{\"missing\": -1}", NULL, "no box", "5", NULL, -1},
};

static void test_boxed_math_table(void **state)
{
    (void)state;
    assert_true(sizeof boxed_rows / sizeof boxed_rows[0] >= MIN_ROWS);
    run_table("boxed_math", boxed_rows, sizeof boxed_rows / sizeof boxed_rows[0]);
    size_t len;
    char *s = big("\\boxed{41} ", 'z', " so \\boxed{42}", &len);
    rlp_reward_result r = score_with("boxed_math", NULL, NULL, s, len, "42", NULL);
    assert_true(r.valid && r.score == 1.0);
    free(s);
    s = big("\\boxed{", '{', "", &len); /* 1 MiB of unclosed groups: no crash, no answer */
    r = score_with("boxed_math", NULL, NULL, s, len, "42", NULL);
    assert_true(r.valid && r.score == 0.0);
    free(s);
    /* a closed box 100,000 fractions deep: normalised without deep recursion */
    size_t depth = 100000, k = 0;
    s = malloc(7 + depth * 10 + 2 + 1);
    assert_non_null(s);
    memcpy(s, "\\boxed{", 7);
    k = 7;
    for (size_t d = 0; d < depth; d++, k += 9)
        memcpy(s + k, "\\frac{1}{", 9);
    s[k++] = '2';
    memset(s + k, '}', depth + 1);
    k += depth + 1;
    s[k] = '\0';
    r = score_with("boxed_math", NULL, NULL, s, k, "42", NULL);
    assert_true(r.valid && r.score == 0.0);
    free(s);
}

/* ---- Countdown ------------------------------------------------------------------------------ */

#define CD "{\"numbers\": [3, 5, 7], \"target\": 22}"

static const row countdown_rows[] = {
    {"correct", NULL, NULL, "<answer>3*5+7</answer>", NULL, CD, 1},
    {"correct, spaces", NULL, NULL, "<answer> 3 * 5 + 7 </answer>", NULL, CD, 1},
    {"correct, parentheses", NULL, NULL, "<answer>(3*5)+7</answer>", NULL, CD, 1},
    {"correct, other order", NULL, NULL, "<answer>7 + 5 * 3</answer>", NULL, CD, 1},
    {"correct, redundant parentheses", NULL, NULL, "<answer>(((3)*(5))+(7))</answer>", NULL, CD, 1},
    {"correct, multi-line", NULL, NULL, "<answer>\n3*5\n+7\n</answer>", NULL, CD, 1},
    {"correct after thinking", NULL, NULL, "<think>3+5+7 is 15, too small</think>\n<answer>3*5+7</answer>", NULL,
     CD, 1},
    {"text outside the tags", NULL, NULL, "Let me see. <answer>3*5+7</answer> Done.", NULL, CD, 1},
    {"last block wins", NULL, NULL, "<answer>3+5+7</answer> oops <answer>3*5+7</answer>", NULL, CD, 1},
    {"last block is wrong", NULL, NULL, "<answer>3*5+7</answer> hmm <answer>3+5+7</answer>", NULL, CD, 0.1},
    {"unclosed last block", NULL, NULL, "<answer>3*5+7</answer><answer>", NULL, CD, 1},
    {"<answer> inside <think>", NULL, NULL, "<think>maybe <answer>3*5+7</answer></think>", NULL, CD, 1},
    {"leading zero literal", NULL, NULL, "<answer>3*5+07</answer>", NULL, CD, 1},
    {"wrong value", NULL, NULL, "<answer>3+5+7</answer>", NULL, CD, 0.1},
    {"wrong value, all numbers", NULL, NULL, "<answer>(7-5)*3</answer>", NULL, CD, 0.1},
    {"number missing", NULL, NULL, "<answer>3*5</answer>", NULL, CD, 0.1},
    {"number reused", NULL, NULL, "<answer>3*5+7+3-3</answer>", NULL, CD, 0.1},
    {"foreign number", NULL, NULL, "<answer>3*5+8-1</answer>", NULL, CD, 0.1},
    {"just the target", NULL, NULL, "<answer>22</answer>", NULL, CD, 0.1},
    {"a given number unused", NULL, NULL, "<answer>3*5+7</answer>", NULL,
     "{\"numbers\": [3, 5, 7, 7], \"target\": 22}", 0.1},
    {"division by zero", NULL, NULL, "<answer>5/(3-3)</answer>", NULL, "{\"numbers\": [5, 3, 3], \"target\": 5}",
     0.1},
    {"overflow is wrong", NULL, NULL, "<answer>1000000000*1000000000*1000000000</answer>", NULL,
     "{\"numbers\": [1000000000, 1000000000, 1000000000], \"target\": 0}", 0.1},
    {"huge literal", NULL, NULL, "<answer>99999999999999999999999+1</answer>", NULL,
     "{\"numbers\": [1, 2], \"target\": 3}", 0.1},
    {"fraction is not the target", NULL, NULL, "<answer>1/2</answer>", NULL, "{\"numbers\": [1, 2], \"target\": 0}",
     0.1},
    {"exact fractions", NULL, NULL, "<answer>4/6*3</answer>", NULL, "{\"numbers\": [4, 6, 3], \"target\": 2}", 1},
    {"exact where floats round", NULL, NULL, "<answer>(1/3+1/3+1/3)*9</answer>", NULL,
     "{\"numbers\": [1, 3, 1, 3, 1, 3, 9], \"target\": 9}", 1},
    {"negative target", NULL, NULL, "<answer>2-9-4</answer>", NULL, "{\"numbers\": [2, 9, 4], \"target\": -11}", 1},
    {"\"nums\" field", NULL, NULL, "<answer>3*5+7</answer>", NULL, "{\"nums\": [3, 5, 7], \"target\": 22}", 1},
    {"no block", NULL, NULL, "3*5+7", NULL, CD, 0},
    {"empty block", NULL, NULL, "<answer></answer>", NULL, CD, 0},
    {"empty", NULL, NULL, "", NULL, CD, 0},
    {"upper-case tags", NULL, NULL, "<ANSWER>3*5+7</ANSWER>", NULL, CD, 0},
    {"unclosed tag", NULL, NULL, "<answer>3*5+7</answer", NULL, CD, 0},
    {"with '= target'", NULL, NULL, "<answer>3*5+7=22</answer>", NULL, CD, 0},
    {"unary minus", NULL, NULL, "<answer>-3*5+7+30</answer>", NULL, CD, 0},
    {"power", NULL, NULL, "<answer>3**5+7</answer>", NULL, CD, 0},
    {"unbalanced (", NULL, NULL, "<answer>3*(5+7</answer>", NULL, CD, 0},
    {"unbalanced )", NULL, NULL, "<answer>3*5+7)</answer>", NULL, CD, 0},
    {"decimal literal", NULL, NULL, "<answer>3.0*5+7</answer>", NULL, CD, 0},
    {"numbers without operators", NULL, NULL, "<answer>3 5 7</answer>", NULL, CD, 0},
    {"words", NULL, NULL, "<answer>three times five plus seven</answer>", NULL, CD, 0},
    {"code is not run", NULL, NULL, "<answer>__import__('os').system('true')</answer>", NULL, CD, 0},
    {"Unicode multiplication sign", NULL, NULL, "<answer>3\xc3\x97" "5+7</answer>", NULL, CD, 0},
    {"fullwidth digit", NULL, NULL, "<answer>\xef\xbc\x93*5+7</answer>", NULL, CD, 0},
    {"no metadata", NULL, NULL, "<answer>3*5+7</answer>", NULL, NULL, INVALID},
    {"metadata without target", NULL, NULL, "<answer>3*5+7</answer>", NULL, "{\"numbers\": [3, 5, 7]}", INVALID},
    {"metadata not JSON", NULL, NULL, "<answer>3*5+7</answer>", NULL, "numbers: 3 5 7", INVALID},
    {"scores are options", "{\"format_score\": 0.25}", NULL, "<answer>3+5+7</answer>", NULL, CD, 0.25},
};

static void test_countdown_table(void **state)
{
    (void)state;
    assert_true(sizeof countdown_rows / sizeof countdown_rows[0] >= MIN_ROWS);
    run_table("countdown", countdown_rows, sizeof countdown_rows / sizeof countdown_rows[0]);
    size_t len;
    char *s = big("<think>", 't', "</think><answer>3*5+7</answer>", &len);
    rlp_reward_result r = score_with("countdown", NULL, NULL, s, len, NULL, CD);
    assert_true(r.valid && r.score == 1.0);
    free(s);
    s = big("<answer>3*5+7", ' ', "+1</answer>", &len); /* long but parsable: wrong numbers */
    r = score_with("countdown", NULL, NULL, s, len, NULL, CD);
    assert_true(r.valid && fabs(r.score - 0.1) < SCORE_TOL);
    free(s);
    s = big("<answer>", '(', "3*5+7</answer>", &len); /* 1 MiB of '(': depth-limited, unparsable */
    r = score_with("countdown", NULL, NULL, s, len, NULL, CD);
    assert_true(r.valid && r.score == 0.0);
    free(s);
}

/* ---- exact match ------------------------------------------------------------------------------ */

#define AT "{\"extract\": \"answer_tag\"}"
#define BX "{\"extract\": \"boxed\"}"
#define LL "{\"extract\": \"last_line\"}"
#define CI "{\"case_sensitive\": false}"
#define CW "{\"collapse_whitespace\": true}"
#define NT "{\"trim\": false}"

static const row exact_rows[] = {
    {"equal", NULL, NULL, "Paris", "Paris", NULL, 1},
    {"surrounding whitespace trimmed", NULL, NULL, "  Paris\n", "Paris", NULL, 1},
    {"reference whitespace trimmed", NULL, NULL, "Paris", " Paris ", NULL, 1},
    {"no trim", NT, NULL, "Paris\n", "Paris", NULL, 0},
    {"no trim, equal", NT, NULL, "Paris", "Paris", NULL, 1},
    {"case differs", NULL, NULL, "paris", "Paris", NULL, 0},
    {"case-insensitive", CI, NULL, "PARIS", "Paris", NULL, 1},
    {"case-insensitive, still different", CI, NULL, "Pari", "Paris", NULL, 0},
    {"trailing period", NULL, NULL, "Paris.", "Paris", NULL, 0},
    {"longer", NULL, NULL, "The answer is Paris", "Paris", NULL, 0},
    {"prefix", NULL, NULL, "Par", "Paris", NULL, 0},
    {"inner spaces differ", NULL, NULL, "New  York", "New York", NULL, 0},
    {"collapsed spaces", CW, NULL, "New  \t York", "New York", NULL, 1},
    {"collapsed newline", CW, NULL, "New\nYork", "New York", NULL, 1},
    {"collapse does not remove", CW, NULL, "NewYork", "New York", NULL, 0},
    {"Cyrillic look-alike", NULL, NULL, "P\xd0\xb0ris", "Paris", NULL, 0},
    {"fullwidth look-alike", NULL, NULL, "\xef\xbc\xb0" "aris", "Paris", NULL, 0},
    {"non-ASCII equal", NULL, NULL, "Z\xc3\xbcrich", "Z\xc3\xbcrich", NULL, 1},
    {"no ASCII folding beyond ASCII", CI, NULL, "Z\xc3\x9c" "RICH", "Z\xc3\xbcrich", NULL, 0},
    {"empty vs word", NULL, NULL, "", "Paris", NULL, 0},
    {"empty vs empty", NULL, NULL, "", "", NULL, 1},
    {"whitespace vs empty", NULL, NULL, "  \n", "", NULL, 1},
    {"answer tag", AT, NULL, "<think>Lyon?</think><answer>Paris</answer>", "Paris", NULL, 1},
    {"answer tag, spaces inside", AT, NULL, "<answer> Paris </answer>", "Paris", NULL, 1},
    {"answer tag, wrong", AT, NULL, "<answer>Lyon</answer>", "Paris", NULL, 0},
    {"answer tag, last block", AT, NULL, "<answer>Lyon</answer><answer>Paris</answer>", "Paris", NULL, 1},
    {"answer tag, earlier block", AT, NULL, "<answer>Paris</answer><answer>Lyon</answer>", "Paris", NULL, 0},
    {"answer tag missing", AT, NULL, "Paris", "Paris", NULL, 0},
    {"answer tag unclosed", AT, NULL, "<answer>Paris", "Paris", NULL, 0},
    {"answer inside think", AT, NULL, "<think><answer>Paris</answer></think>", "Paris", NULL, 1},
    {"text outside the tags ignored", AT, NULL, "Sure. <answer>Paris</answer> Bye.", "Paris", NULL, 1},
    {"duplicated open tag", AT, NULL, "<answer><answer>Paris</answer>", "Paris", NULL, 0},
    {"upper-case tag", AT, NULL, "<ANSWER>Paris</ANSWER>", "Paris", NULL, 0},
    {"boxed", BX, NULL, "so \\boxed{Paris}.", "Paris", NULL, 1},
    {"boxed with group", BX, NULL, "\\boxed{\\frac{1}{3}}", "\\frac{1}{3}", NULL, 1},
    {"boxed missing", BX, NULL, "Paris", "Paris", NULL, 0},
    {"boxed unclosed", BX, NULL, "\\boxed{Paris", "Paris", NULL, 0},
    {"last line", LL, NULL, "I think\nParis\n\n", "Paris", NULL, 1},
    {"last line, wrong", LL, NULL, "Paris\nor Lyon", "Paris", NULL, 0},
    {"last line of one", LL, NULL, "Paris", "Paris", NULL, 1},
    {"last line of nothing", LL, NULL, " \n \n", "Paris", NULL, 0},
    {"reference from metadata", NULL, NULL, "Paris", NULL, "{\"reference\": \"Paris\"}", 1},
    {"no reference", NULL, NULL, "Paris", NULL, NULL, INVALID},
    {"scores are options", "{\"wrong\": -0.5}", NULL, "Lyon", "Paris", NULL, -0.5},
};

static void test_exact_match_table(void **state)
{
    (void)state;
    assert_true(sizeof exact_rows / sizeof exact_rows[0] >= MIN_ROWS);
    run_table("exact_match", exact_rows, sizeof exact_rows / sizeof exact_rows[0]);
    size_t len;
    char *s = big("", 'P', "", &len);
    rlp_reward_result r = score_with("exact_match", NULL, NULL, s, len, "P", NULL);
    assert_true(r.valid && r.score == 0.0);
    free(s);
    s = big("<answer>", ' ', "Paris</answer>", &len);
    r = score_with("exact_match", AT, NULL, s, len, "Paris", NULL);
    assert_true(r.valid && r.score == 1.0);
    free(s);
}

/* ---- regex match ------------------------------------------------------------------------------ */

static const row regex_rows[] = {
    {"reference as pattern", NULL, NULL, "The answer is 42.", "\\b42\\b", NULL, 1},
    {"reference pattern, no match", NULL, NULL, "The answer is 420.", "\\b42\\b", NULL, 0},
    {"option pattern", "{\"pattern\": \"^Paris$\"}", NULL, "Paris", NULL, NULL, 1},
    {"option pattern beats reference", "{\"pattern\": \"Paris\"}", NULL, "Paris", "Lyon", NULL, 1},
    {"anchors", "{\"pattern\": \"^Paris$\"}", NULL, "Paris!", NULL, NULL, 0},
    {"search finds a middle", "{\"pattern\": \"ar\"}", NULL, "Paris", NULL, NULL, 1},
    {"full match", "{\"pattern\": \"ar\", \"full\": true}", NULL, "Paris", NULL, NULL, 0},
    {"full match, whole", "{\"pattern\": \"P.*s\", \"full\": true}", NULL, "Paris", NULL, NULL, 1},
    {"case-sensitive by default", "{\"pattern\": \"paris\"}", NULL, "Paris", NULL, NULL, 0},
    {"flag i", "{\"pattern\": \"paris\", \"flags\": \"i\"}", NULL, "PARIS", NULL, NULL, 1},
    {"dot and newline", "{\"pattern\": \"a.b\"}", NULL, "a\nb", NULL, NULL, 0},
    {"flag s", "{\"pattern\": \"a.b\", \"flags\": \"s\"}", NULL, "a\nb", NULL, NULL, 1},
    {"^ without m", "{\"pattern\": \"^b\"}", NULL, "a\nb", NULL, NULL, 0},
    {"flag m", "{\"pattern\": \"^b\", \"flags\": \"m\"}", NULL, "a\nb", NULL, NULL, 1},
    {"flag x", "{\"pattern\": \"P a r i s\", \"flags\": \"x\"}", NULL, "Paris", NULL, NULL, 1},
    {"alternation", "{\"pattern\": \"^(yes|no)$\"}", NULL, "no", NULL, NULL, 1},
    {"number format", "{\"pattern\": \"^-?\\\\d+(\\\\.\\\\d+)?$\"}", NULL, "-3.25", NULL, NULL, 1},
    {"number format, bad", "{\"pattern\": \"^-?\\\\d+(\\\\.\\\\d+)?$\"}", NULL, "3.", NULL, NULL, 0},
    {"UTF-8 class", "{\"pattern\": \"^\\\\w+$\"}", NULL, "Z\xc3\xbcrich", NULL, NULL, 0},
    {"UTF-8 dot is one character", "{\"pattern\": \"^Z.rich$\"}", NULL, "Z\xc3\xbcrich", NULL, NULL, 1},
    {"invalid UTF-8 in the completion", "{\"pattern\": \"ok\"}", NULL, "\xff\xfe ok", NULL, NULL, 1},
    {"Cyrillic look-alike", "{\"pattern\": \"^Paris$\"}", NULL, "P\xd0\xb0ris", NULL, NULL, 0},
    {"empty completion, empty pattern", "{\"pattern\": \"\"}", NULL, "", NULL, NULL, 1},
    {"empty completion", "{\"pattern\": \"x\"}", NULL, "", NULL, NULL, 0},
    {"answer tag", "{\"pattern\": \"^42$\", \"extract\": \"answer_tag\"}", NULL, "<answer>42</answer>", NULL, NULL,
     1},
    {"answer tag keeps spaces", "{\"pattern\": \"^42$\", \"extract\": \"answer_tag\"}", NULL, "<answer> 42 </answer>",
     NULL, NULL, 0},
    {"answer tag, last block", "{\"pattern\": \"^42$\", \"extract\": \"answer_tag\"}", NULL,
     "<answer>41</answer><answer>42</answer>", NULL, NULL, 1},
    {"answer tag missing", "{\"pattern\": \"42\", \"extract\": \"answer_tag\"}", NULL, "42", NULL, NULL, 0},
    {"text outside the tags not searched", "{\"pattern\": \"42\", \"extract\": \"answer_tag\"}", NULL,
     "42 <answer>41</answer>", NULL, NULL, 0},
    {"answer inside think", "{\"pattern\": \"42\", \"extract\": \"answer_tag\"}", NULL,
     "<think><answer>42</answer></think>", NULL, NULL, 1},
    {"boxed", "{\"pattern\": \"^\\\\\\\\frac\\\\{1\\\\}\\\\{3\\\\}$\", \"extract\": \"boxed\"}", NULL,
     "\\boxed{\\frac{1}{3}}", NULL, NULL, 1},
    {"last line", "{\"pattern\": \"^final: \", \"extract\": \"last_line\"}", NULL, "work\nfinal: 3", NULL, NULL, 1},
    {"bad pattern from a reference", NULL, NULL, "x", "(unclosed", NULL, INVALID},
    {"no pattern at all", NULL, NULL, "x", NULL, NULL, INVALID},
    {"catastrophic backtracking is cut off", "{\"pattern\": \"^(a+)+$\", \"match_limit\": 10000}", NULL,
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", NULL, NULL, INVALID},
    {"the limit lets ordinary matches through", "{\"pattern\": \"^(a+)+$\", \"match_limit\": 10000}", NULL, "aaaa",
     NULL, NULL, 1},
    {"reference from metadata", NULL, NULL, "abc", NULL, "{\"reference\": \"b\"}", 1},
    {"lookahead", "{\"pattern\": \"^(?=.*\\\\d)(?=.*[a-z]).+$\"}", NULL, "a1", NULL, NULL, 1},
    {"lookahead fails", "{\"pattern\": \"^(?=.*\\\\d)(?=.*[a-z]).+$\"}", NULL, "aa", NULL, NULL, 0},
    {"backreference", "{\"pattern\": \"^(\\\\w)\\\\1$\"}", NULL, "zz", NULL, NULL, 1},
    {"scores are options", "{\"pattern\": \"x\", \"correct\": 3}", NULL, "x", NULL, NULL, 3},
};

/* The tool-episode rewards. lookup_em follows the SQuAD v1.1 script
 * (normalize_answer, exact_match_score, f1_score); the F1 values are
 * what that script gives for the same strings. */
static const row tool_rows[] = {
    {"em: exact", NULL, NULL, "<answer>Velmora</answer>", "Velmora", NULL, 1},
    {"em: case, article, punctuation", NULL, NULL, "<answer> The velmora. </answer>", "Velmora", NULL, 1},
    {"em: last answer counts", NULL, NULL, "<answer>Zorvia</answer> no, <answer>Velmora</answer>", "Velmora", NULL, 1},
    {"em: wrong", NULL, NULL, "<answer>Zorvia</answer>", "Velmora", NULL, 0},
    {"em: extra word", NULL, NULL, "<answer>Velmora city</answer>", "Velmora", NULL, 0},
    {"em: inner punctuation dropped", NULL, NULL, "<answer>Talvin-Morasek</answer>", "TalvinMorasek", NULL, 1},
    {"em: no answer", NULL, NULL, "Velmora", "Velmora", NULL, 0},
    {"em: unclosed answer", NULL, NULL, "<answer>Velmora", "Velmora", NULL, 0},
    {"em: no reference", NULL, NULL, "<answer>Velmora</answer>", NULL, NULL, INVALID},
    {"em: reference from metadata", NULL, NULL, "<answer>Velmora</answer>", NULL, "{\"reference\": \"Velmora\"}", 1},
    {"f1: partial", "{\"f1\": true}", NULL, "<answer>Talvin Morasek Jr</answer>", "Talvin Morasek", NULL, 0.8},
    {"f1: exact", "{\"f1\": true}", NULL, "<answer>the Talvin Morasek</answer>", "Talvin Morasek", NULL, 1},
    {"f1: repeated tokens count once each", "{\"f1\": true}", NULL, "<answer>x b b</answer>", "b c", NULL, 0.4},
    {"f1: none", "{\"f1\": true}", NULL, "<answer>x</answer>", "y", NULL, 0},
    {"f1: only articles vs empty", "{\"f1\": true}", NULL, "<answer>the</answer>", "a", NULL, 1},

    {"search: ok", NULL, NULL, "<think>t</think><search>q</search>\n\n<information>\nx\n</information>\n\n<answer>A</answer>",
     NULL, NULL, 1},
    {"search: answer only", NULL, NULL, "<answer>A</answer><|im_end|>\n", NULL, NULL, 1},
    {"search: access ok", NULL, NULL, "<access>d1</access><information>y</information><answer>A</answer>", NULL, NULL, 1},
    {"search: unclosed search", NULL, NULL, "<search>q <answer>A</answer>", NULL, NULL, 0},
    {"search: nested search", NULL, NULL, "<search>q <search>r</search></search><answer>A</answer>", NULL, NULL, 0},
    {"search: stray close", NULL, NULL, "</search><answer>A</answer>", NULL, NULL, 0},
    {"search: two answers", NULL, NULL, "<answer>A</answer><answer>B</answer>", NULL, NULL, 0},
    {"search: no answer", NULL, NULL, "<search>q</search>", NULL, NULL, 0},
    {"search: text after answer", NULL, NULL, "<answer>A</answer> and more", NULL, NULL, 0},
    {"search: search in answer", NULL, NULL, "<answer>A <search>q</search></answer>", NULL, NULL, 0},
    {"search: unclosed answer", NULL, NULL, "<answer>A", NULL, NULL, 0},
    {"search: weights", "{\"correct\": 0.5, \"wrong\": -1}", NULL, "<answer>A", NULL, NULL, -1},

    {"hermes: call then answer", NULL, NULL,
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"q\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
     "<tool_response>\nx\n</tool_response><|im_end|>\n<|im_start|>assistant\n<answer>A</answer>",
     NULL, NULL, 1},
    {"hermes: plain answer, no calls", NULL, NULL, "It is Velmora.", NULL, NULL, 1},
    {"hermes: bad json", NULL, NULL, "<tool_call>{name: 1}</tool_call>\n<tool_response>\ne\n</tool_response>Velmora",
     NULL, NULL, 0},
    {"hermes: ends with a call", NULL, NULL,
     "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call><|im_end|>", NULL, NULL, 0},
    {"hermes: ends with an open call", NULL, NULL,
     "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call><tool_response>x</tool_response>"
     "<tool_call>{\"name\": \"search\"", NULL, NULL, 0},
    {"hermes: ends with a complete unclosed call", NULL, NULL, "<tool_call>{\"name\": \"search\"}", NULL, NULL, 0},
    {"hermes: ends after a response with nothing", NULL, NULL,
     "<tool_call>{\"name\": \"search\"}</tool_call><tool_response>x</tool_response>\n", NULL, NULL, 0},
    {"hermes: empty", NULL, NULL, "  ", NULL, NULL, 0},
};

static void test_tool_rewards_table(void **state)
{
    (void)state;
    static const char *const names[] = {"lookup_em", "search_format", "tool_call_format"};
    size_t n = sizeof tool_rows / sizeof tool_rows[0];
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        const row *r = &tool_rows[i];
        const char *name = names[r->label[0] == 'e' || r->label[0] == 'f' ? 0 : r->label[0] == 's' ? 1 : 2];
        rlp_reward_result res = score_with(name, r->options, r->prompt, r->completion, strlen(r->completion),
                                           r->reference, r->metadata);
        bad += !check(name, r, &res);
    }
    assert_int_equal(bad, 0);
    rlp_reward_fn *fn;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "lookup_em", "{\"f1\": 1}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "search_format", "{\"extract\": \"boxed\"}"), RLP_E_INVALID_ARG);
}

static void test_regex_match_table(void **state)
{
    (void)state;
    assert_true(sizeof regex_rows / sizeof regex_rows[0] >= MIN_ROWS);
    run_table("regex_match", regex_rows, sizeof regex_rows / sizeof regex_rows[0]);
    size_t len;
    char *s = big("", 'a', "END", &len);
    rlp_reward_result r = score_with("regex_match", "{\"pattern\": \"END$\"}", NULL, s, len, NULL, NULL);
    assert_true(r.valid && r.score == 1.0);
    free(s);
}

/* ---- creation errors ------------------------------------------------------------------------------ */

static void test_create_errors(void **state)
{
    (void)state;
    rlp_reward_fn *fn = NULL;
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8", NULL), RLP_E_NOT_FOUND);
    assert_non_null(strstr(rlp_error_last(), "gsm8k"));
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{\"corect\": 1}"), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "corect"));
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{\"correct\": \"1\"}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "[1]"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{\"refine\": \"clap\"}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "exact_match", "{\"extract\": \"tags\"}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "regex_match", "{\"pattern\": \"(\"}"), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "offset"));
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "regex_match", "{\"flags\": \"q\"}"), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_reward_fn_create_builtin(NULL, "gsm8k", NULL), RLP_E_INVALID_ARG);
    assert_null(fn);
    size_t n = 0;
    while (rlp_reward_builtin_name(n)) {
        if (!strcmp(rlp_reward_builtin_name(n), "reward_model")) { /* needs a model folder (test_reward_model.c) */
            assert_int_equal(rlp_reward_fn_create_builtin(&fn, "reward_model", "{\"threads\": 1}"), RLP_E_INVALID_ARG);
            assert_null(fn);
            n++;
            continue;
        }
        assert_int_equal(rlp_reward_fn_create_builtin(&fn, rlp_reward_builtin_name(n), "{\"threads\": 1}"), RLP_OK);
        assert_string_equal(rlp_reward_fn_name(fn), rlp_reward_builtin_name(n));
        rlp_reward_fn_free(fn);
        n++;
    }
    assert_int_equal(n, 12);
    assert_int_equal(rlp_reward_fn_create_builtin(&fn, "gsm8k", "{\"name\": \"math\"}"), RLP_OK);
    assert_string_equal(rlp_reward_fn_name(fn), "math");
    rlp_reward_fn_free(fn);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logic_rl_tables),  cmocka_unit_test(test_logic_rl_big_and_options),
        cmocka_unit_test(test_format_answer_content),
        cmocka_unit_test(test_gsm8k_table),      cmocka_unit_test(test_boxed_math_table),
        cmocka_unit_test(test_countdown_table),  cmocka_unit_test(test_exact_match_table),
        cmocka_unit_test(test_regex_match_table),
        cmocka_unit_test(test_tool_rewards_table), cmocka_unit_test(test_create_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
