/* Chat templates beyond the per-model fixtures of test_tokenizer_ref: the
 * canonical Jinja source of every built-in kind is recognised back as that
 * kind; Qwen3's enable_thinking=False against transformers' rendering of
 * Qwen3's own template (fixtures/chat_qwen3_nothink.jsonl, written by
 * tests/reference/make_chat_template_fixtures.py; skipped without
 * ../shared/data's Qwen3 tokenizer); other templates ignore the switch;
 * Gemma 3 by name, by source, its role rules and errors, and its single BOS
 * on a small SentencePiece vocabulary. The real Gemma 3 GGUF is
 * test_chat_gemma3.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "model/tokenizer.h"
#include "rlpost.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *src_root(void)
{
    const char *r = getenv("RLPOST_SOURCE_ROOT");
    return r ? r : ".";
}

static const int kinds[] = {RLPI_CHAT_CHATML, RLPI_CHAT_CHATML_SMOLLM, RLPI_CHAT_QWEN3,
                            RLPI_CHAT_LLAMA3, RLPI_CHAT_LLAMA2, RLPI_CHAT_GEMMA3};

static void jinja_sources_detect_as_their_kind(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const char *src = rlpi_chat_template_jinja(kinds[i]);
        assert_non_null(src);
        int k = -1;
        assert_int_equal(rlpi_chat_template_detect(&k, src), RLP_OK);
        assert_int_equal(k, kinds[i]);
        /* and its name too */
        k = -1;
        assert_int_equal(rlpi_chat_template_detect(&k, rlpi_chat_template_name(kinds[i])), RLP_OK);
        assert_int_equal(k, kinds[i]);
    }
    assert_null(rlpi_chat_template_jinja(RLPI_CHAT_NONE));
    assert_null(rlpi_chat_template_jinja(99));
    /* Qwen3's source is the official one: it has the thinking switch */
    assert_non_null(strstr(rlpi_chat_template_jinja(RLPI_CHAT_QWEN3), "enable_thinking"));
    int k = -1;
    assert_int_equal(rlpi_chat_template_detect(&k, "gemma"), RLP_OK);
    assert_int_equal(k, RLPI_CHAT_GEMMA3);
    /* each template's end-of-turn token is what its Jinja closes a turn with */
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const char *eot = rlpi_chat_template_end_of_turn(kinds[i]);
        if (kinds[i] == RLPI_CHAT_LLAMA2) {
            assert_null(eot);
            continue;
        }
        assert_non_null(eot);
        assert_non_null(strstr(rlpi_chat_template_jinja(kinds[i]), eot));
    }
    assert_string_equal(rlpi_chat_template_end_of_turn(RLPI_CHAT_GEMMA3), "<end_of_turn>");
    assert_null(rlpi_chat_template_end_of_turn(RLPI_CHAT_NONE));
}

static rlp_tokenizer *load(const char *rel)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", src_root(), rel);
    rlp_tokenizer *t = NULL;
    assert_int_equal(rlp_tokenizer_load(&t, p), RLP_OK);
    return t;
}

/* Options: NULL = defaults, bad versions refused; enable_thinking is
 * ignored by a template other than Qwen3's. */
static void options_and_other_templates(void **state)
{
    (void)state;
    rlp_tokenizer *t = load("tests/reference/fixtures/smollm2/tokenizer.json");
    rlp_chat_message m[2] = {{"system", "S"}, {"user", "What is 2+2?"}};
    int32_t a[256], b[256];
    size_t na = 0, nb = 0;
    rlp_chat_options o;
    assert_int_equal(rlp_chat_options_init(&o, RLP_CHAT_OPTIONS_VERSION), RLP_OK);
    assert_int_equal(o.add_generation_prompt, 1);
    assert_int_equal(o.enable_thinking, 1);
    assert_int_equal(rlp_chat_options_init(&o, 0), RLP_E_INVALID_ARG);
    assert_int_equal(rlp_chat_options_init(NULL, 1), RLP_E_INVALID_ARG);
    rlp_chat_options_init(&o, RLP_CHAT_OPTIONS_VERSION);
    const char *names[] = {"smollm2", "chatml", "llama3", "gemma3"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(rlp_tokenizer_set_chat_template(t, names[i]), RLP_OK);
        assert_int_equal(rlp_tokenizer_apply_chat_template(t, m, 2, 1, a, 256, &na), RLP_OK);
        o.enable_thinking = 0;
        assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, &o, b, 256, &nb), RLP_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, NULL, b, 256, &nb), RLP_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        o.add_generation_prompt = 0;
        assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, &o, b, 256, &nb), RLP_OK);
        assert_true(nb < na);
        o.add_generation_prompt = 1;
    }
    o.version = 2;
    assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, &o, b, 256, &nb), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "version"));
    assert_int_equal(rlp_tokenizer_apply_chat_template_opts(NULL, m, 2, NULL, b, 256, &nb),
                     RLP_E_INVALID_ARG);
    assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, NULL, b, 256, NULL),
                     RLP_E_INVALID_ARG);
    /* the Qwen3 kind renders the closed empty block, also on a vocabulary
     * without <think> tokens (there as plain characters) */
    assert_int_equal(rlp_tokenizer_set_chat_template(t, "qwen3"), RLP_OK);
    o.version = 1;
    o.enable_thinking = 1;
    assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, &o, a, 256, &na), RLP_OK);
    o.enable_thinking = 0;
    assert_int_equal(rlp_tokenizer_apply_chat_template_opts(t, m, 2, &o, b, 256, &nb), RLP_OK);
    assert_true(nb > na);
    assert_memory_equal(a, b, na * sizeof *a);
    char text[512];
    size_t tl = 0;
    assert_int_equal(rlp_tokenizer_decode(t, b + na, nb - na, 0, text, sizeof text, &tl), RLP_OK);
    assert_string_equal(text, "<think>\n\n</think>\n\n");
    rlp_tokenizer_free(t);
}

/* Gemma 3's rules on a tokenizer without Gemma's tokens: text as the
 * official template writes it, one BOS, roles alternating. */
static void gemma3_rendering_and_errors(void **state)
{
    (void)state;
    rlp_tokenizer *t = load("tests/reference/fixtures/smollm2/tokenizer.json");
    assert_int_equal(rlp_tokenizer_set_chat_template(t, "gemma"), RLP_OK);
    assert_string_equal(rlp_tokenizer_chat_template(t), "gemma3");
    /* the official source is recognised */
    assert_int_equal(rlp_tokenizer_set_chat_template(t, "chatml"), RLP_OK);
    assert_int_equal(rlp_tokenizer_set_chat_template(t, rlpi_chat_template_jinja(RLPI_CHAT_GEMMA3)),
                     RLP_OK);
    assert_string_equal(rlp_tokenizer_chat_template(t), "gemma3");
    rlp_chat_message m[4] = {{"system", " Be brief. "}, {"user", "  Hi \n"}, {"assistant", "\nHello!  "},
                             {"user", "Bye"}};
    int32_t ids[512];
    size_t n = 0, tl = 0;
    assert_int_equal(rlp_tokenizer_apply_chat_template(t, m, 4, 1, ids, 512, &n), RLP_OK);
    char text[2048];
    assert_int_equal(rlp_tokenizer_decode(t, ids, n, 0, text, sizeof text, &tl), RLP_OK);
    int32_t bos;
    assert_int_equal(rlp_tokenizer_special_id(&bos, t, RLP_TOKEN_BOS), RLP_OK);
    const char *bt;
    size_t bl;
    assert_int_equal(rlp_tokenizer_token_text(&bt, &bl, t, bos), RLP_OK);
    char want[1024];
    snprintf(want, sizeof want,
             "%s<start_of_turn>user\n Be brief. \n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
             "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n",
             bt);
    assert_string_equal(text, want);
    size_t n_bos = 0;
    for (size_t i = 0; i < n; i++)
        n_bos += ids[i] == bos;
    assert_int_equal(n_bos, 1);
    assert_int_equal(ids[0], bos);

    rlp_chat_message twice[2] = {{"user", "a"}, {"user", "b"}};
    assert_int_equal(rlp_tokenizer_apply_chat_template(t, twice, 2, 1, ids, 512, &n), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "alternating"));
    rlp_chat_message tool[3] = {{"user", "a"}, {"assistant", "b"}, {"tool", "c"}};
    assert_int_equal(rlp_tokenizer_apply_chat_template(t, tool, 3, 1, ids, 512, &n), RLP_E_INVALID_ARG);
    assert_non_null(strstr(rlp_error_last(), "msgs[2]"));
    rlp_chat_message first_model[1] = {{"assistant", "a"}};
    assert_int_equal(rlp_tokenizer_apply_chat_template(t, first_model, 1, 1, ids, 512, &n),
                     RLP_E_INVALID_ARG);
    rlp_tokenizer_free(t);
}

static void run_fixture(const char *tok_rel, const char *fixture_rel)
{
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/%s", src_root(), tok_rel);
    snprintf(fx, sizeof fx, "%s/%s", src_root(), fixture_rel);
    if (access(tp, R_OK) != 0) {
        fprintf(stderr, "skip: %s not present\n", tp);
        skip();
    }
    rlp_tokenizer *tok;
    assert_int_equal(rlp_tokenizer_load(&tok, tp), RLP_OK);
    FILE *f = fopen(fx, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t lcap = 0, rows = 0, ok = 0;
    ssize_t ll;
    int32_t ids[4096];
    while ((ll = getline(&line, &lcap, f)) > 0) {
        json_error_t err;
        json_t *row = json_loadb(line, (size_t)ll, 0, &err);
        assert_non_null(row);
        json_t *msgs = json_object_get(row, "messages"), *want = json_object_get(row, "ids");
        rlp_chat_message m[16];
        size_t nm = json_array_size(msgs);
        assert_true(nm <= 16);
        for (size_t i = 0; i < nm; i++) {
            m[i].role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
            m[i].content = json_string_value(json_object_get(json_array_get(msgs, i), "content"));
        }
        rlp_chat_options o = RLP_CHAT_OPTIONS_INIT;
        o.add_generation_prompt = json_is_true(json_object_get(row, "add_generation_prompt"));
        o.enable_thinking = !json_is_false(json_object_get(row, "enable_thinking"));
        size_t n = 0;
        assert_int_equal(rlp_tokenizer_apply_chat_template_opts(tok, m, nm, &o, ids, 4096, &n), RLP_OK);
        bool same = n == json_array_size(want);
        for (size_t i = 0; same && i < n; i++)
            same = ids[i] == (int32_t)json_integer_value(json_array_get(want, i));
        rows++;
        ok += same;
        if (!same)
            fprintf(stderr, "%s: ids differ for \"%s\"\n", fx,
                    json_string_value(json_object_get(row, "text")));
        json_decref(row);
    }
    printf("%s: %zu conversations, %zu match\n", fx, rows, ok);
    free(line);
    fclose(f);
    rlp_tokenizer_free(tok);
    assert_true(rows >= 5);
    assert_int_equal(ok, rows);
}

static void qwen3_no_thinking_matches_jinja(void **state)
{
    (void)state;
    run_fixture("../shared/data/tokenizers/qwen3/tokenizer.json",
                "tests/reference/fixtures/chat_qwen3_nothink.jsonl");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(jinja_sources_detect_as_their_kind),
        cmocka_unit_test(options_and_other_templates),
        cmocka_unit_test(gemma3_rendering_and_errors),
        cmocka_unit_test(qwen3_no_thinking_matches_jinja),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
