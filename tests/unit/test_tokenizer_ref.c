/* Token ids against independent reference encoders (HF `tokenizers` for
 * Qwen3 and SmolLM2, `sentencepiece` for Llama 2 / llama2.c), from the
 * fixtures that tests/reference/make_tokenizer_fixtures.py wrote: every
 * string must give exactly the reference ids with special-token matching
 * on and off, and decode back to the reference text. Tokenizer files that
 * live in ../shared/data are skipped when absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rlpost.h"
#include "tok_test_util.h"

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

static bool ids_equal(const int32_t *a, size_t na, json_t *ref)
{
    if (na != json_array_size(ref))
        return false;
    for (size_t i = 0; i < na; i++) {
        if (a[i] != (int32_t)json_integer_value(json_array_get(ref, i)))
            return false;
    }
    return true;
}

static void print_ids(const char *what, const int32_t *a, size_t n, json_t *ref)
{
    fprintf(stderr, "  %s got:", what);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", a[i]);
    fprintf(stderr, "\n  %s want:", what);
    for (size_t i = 0; i < json_array_size(ref) && i < 40; i++)
        fprintf(stderr, " %d", (int)json_integer_value(json_array_get(ref, i)));
    fprintf(stderr, "\n");
}

/* Runs one fixture file; returns the number of strings that disagree. */
static void run_fixture(const char *tok_path, const char *fixture, size_t min_rows, bool check_plain)
{
    if (access(tok_path, R_OK) != 0) {
        fprintf(stderr, "skip: %s not present\n", tok_path);
        skip();
    }
    rlp_tokenizer *tok;
    int rc = rlp_tokenizer_load(&tok, tok_path);
    if (rc)
        fprintf(stderr, "%s\n", rlp_error_last());
    assert_int_equal(rc, RLP_OK);
    FILE *f = fopen(fixture, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t lcap = 0, rows = 0, id_ok = 0, plain_ok = 0, dec_ok = 0;
    ssize_t ll;
    size_t cap = 1 << 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *text = malloc(1 << 20);
    assert_non_null(ids);
    assert_non_null(text);
    while ((ll = getline(&line, &lcap, f)) > 0) {
        json_error_t err;
        json_t *row = json_loadb(line, (size_t)ll, 0, &err);
        assert_non_null(row);
        const char *s = json_string_value(json_object_get(row, "text"));
        size_t slen = json_string_length(json_object_get(row, "text"));
        json_t *ref = json_object_get(row, "ids");
        json_t *plain = json_object_get(row, "ids_plain");
        if (!plain)
            plain = ref;
        size_t n = 0;
        rows++;
        assert_int_equal(rlp_tokenizer_encode(tok, s, slen, RLP_ENCODE_PARSE_SPECIAL, ids, cap, &n),
                         RLP_OK);
        if (ids_equal(ids, n, ref)) {
            id_ok++;
        } else {
            fprintf(stderr, "%s: ids differ for \"%.80s\"\n", fixture, s);
            print_ids("special", ids, n, ref);
        }
        if (check_plain) {
            assert_int_equal(rlp_tokenizer_encode(tok, s, slen, 0, ids, cap, &n), RLP_OK);
            if (ids_equal(ids, n, plain)) {
                plain_ok++;
            } else {
                fprintf(stderr, "%s: plain ids differ for \"%.80s\"\n", fixture, s);
                print_ids("plain", ids, n, plain);
            }
        } else {
            plain_ok++;
        }
        /* decode(encode(s)) == s, or the reference decode where it differs (NFC) */
        json_t *dref = json_object_get(row, "decoded");
        const char *want = dref ? json_string_value(dref) : s;
        size_t wlen = dref ? json_string_length(dref) : slen;
        assert_int_equal(rlp_tokenizer_encode(tok, s, slen, RLP_ENCODE_PARSE_SPECIAL, ids, cap, &n),
                         RLP_OK);
        size_t tl = 0;
        assert_int_equal(rlp_tokenizer_decode(tok, ids, n, 0, text, 1 << 20, &tl), RLP_OK);
        if (tl == wlen && memcmp(text, want, wlen) == 0)
            dec_ok++;
        else
            fprintf(stderr, "%s: decode gives \"%.80s\" for \"%.80s\"\n", fixture, text, want);
        json_decref(row);
    }
    printf("%s: %zu strings; ids match %zu (special on), %zu (special off); round-trip %zu\n",
           fixture, rows, id_ok, plain_ok, dec_ok);
    free(line);
    free(ids);
    free(text);
    fclose(f);
    rlp_tokenizer_free(tok);
    assert_true(rows >= min_rows);
    assert_int_equal(id_ok, rows);
    assert_int_equal(plain_ok, rows);
    assert_int_equal(dec_ok, rows);
}

static void qwen3_matches_hf(void **state)
{
    (void)state;
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/../shared/data/tokenizers/qwen3/tokenizer.json", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/qwen3.jsonl", src_root());
    run_fixture(tp, fx, 2000, true);
}

static void smollm2_matches_hf(void **state)
{
    (void)state;
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/tests/reference/fixtures/smollm2/tokenizer.json", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/smollm2.jsonl", src_root());
    run_fixture(tp, fx, 2000, true);
}

static void llama2c_matches_sentencepiece(void **state)
{
    (void)state;
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/../shared/data/llama2c/tokenizer.bin", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/llama2c.jsonl", src_root());
    run_fixture(tp, fx, 300, false);
}

static void llama3_style_matches_hf(void **state)
{
    (void)state;
    char sp[4096], fx[4096];
    snprintf(sp, sizeof sp, "%s/tests/reference/fixtures/smollm2/tokenizer.json", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/llama3style.jsonl", src_root());
    const char *p = write_llama3_style(sp);
    assert_non_null(p);
    run_fixture(p, fx, 300, false);
}

/* Chat templates against transformers' Jinja rendering of each model's own
 * template, tokenized by HF tokenizers (benign content, so scaffolding and
 * content split invisibly). */
static void run_chat_fixture(const char *tok_path, const char *fixture)
{
    if (access(tok_path, R_OK) != 0) {
        fprintf(stderr, "skip: %s not present\n", tok_path);
        skip();
    }
    rlp_tokenizer *tok;
    assert_int_equal(rlp_tokenizer_load(&tok, tok_path), RLP_OK);
    json_error_t err;
    FILE *f = fopen(fixture, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t lcap = 0, rows = 0, ok = 0;
    ssize_t ll;
    int32_t ids[4096];
    while ((ll = getline(&line, &lcap, f)) > 0) {
        json_t *row = json_loadb(line, (size_t)ll, 0, &err);
        assert_non_null(row);
        json_t *msgs = json_object_get(row, "messages");
        rlp_chat_message m[16];
        size_t nm = json_array_size(msgs);
        assert_true(nm <= 16);
        for (size_t i = 0; i < nm; i++) {
            m[i].role = json_string_value(json_object_get(json_array_get(msgs, i), "role"));
            m[i].content = json_string_value(json_object_get(json_array_get(msgs, i), "content"));
        }
        int gen = json_is_true(json_object_get(row, "add_generation_prompt"));
        size_t n = 0;
        assert_int_equal(rlp_tokenizer_apply_chat_template(tok, m, nm, gen, ids, 4096, &n), RLP_OK);
        rows++;
        if (ids_equal(ids, n, json_object_get(row, "ids"))) {
            ok++;
        } else {
            fprintf(stderr, "%s: chat ids differ for \"%s\"\n", fixture,
                    json_string_value(json_object_get(row, "text")));
            print_ids("chat", ids, n, json_object_get(row, "ids"));
        }
        json_decref(row);
    }
    printf("%s: %zu conversations, %zu match\n", fixture, rows, ok);
    free(line);
    fclose(f);
    rlp_tokenizer_free(tok);
    assert_true(rows >= 20);
    assert_int_equal(ok, rows);
}

static void chat_qwen3_matches_jinja(void **state)
{
    (void)state;
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/../shared/data/tokenizers/qwen3/tokenizer.json", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/chat_qwen3.jsonl", src_root());
    run_chat_fixture(tp, fx);
}

static void chat_smollm2_matches_jinja(void **state)
{
    (void)state;
    char tp[4096], fx[4096];
    snprintf(tp, sizeof tp, "%s/tests/reference/fixtures/smollm2/tokenizer.json", src_root());
    snprintf(fx, sizeof fx, "%s/tests/reference/fixtures/chat_smollm2.jsonl", src_root());
    run_chat_fixture(tp, fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(smollm2_matches_hf),
        cmocka_unit_test(qwen3_matches_hf),
        cmocka_unit_test(llama2c_matches_sentencepiece),
        cmocka_unit_test(llama3_style_matches_hf),
        cmocka_unit_test(chat_smollm2_matches_jinja),
        cmocka_unit_test(chat_qwen3_matches_jinja),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
