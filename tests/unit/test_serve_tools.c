/* `rlpost serve`'s tool calling (examples/rlpost/serve_tools.c): the
 * OpenAI message built from a completion's text, the checks of "tools",
 * "tool_choice" and tool messages (a 400 naming the field), Python's
 * json.dumps, and the prompts of tool requests against transformers'
 * rendering with Qwen2.5's template (fixtures/chat_qwen25_tools.jsonl,
 * tests/reference/make_chat_tools_fixtures.py): exact text, and exact ids
 * with Qwen3's tokenizer when ../shared/data has it. */
#include "../../examples/rlpost/serve.h"
#include "../../examples/rlpost/serve_tools.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static const char *src_root(void)
{
    const char *r = getenv("RLPOST_SOURCE_ROOT");
    return r ? r : ".";
}

/* ---- the response: completion text → OpenAI message ---------------------- */

static json_t *message(const char *text, int parse, int parallel, size_t *called)
{
    json_t *m = serve_tools_message(text, strlen(text), parse, parallel, "chatcmpl-test", 0, called);
    assert_non_null(m);
    assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
    return m;
}

static void assert_args(const json_t *call, const char *name, const char *args_json)
{
    assert_string_equal(json_string_value(json_object_get(call, "type")), "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    assert_non_null(id);
    assert_int_equal(strncmp(id, "call_", 5), 0);
    assert_int_equal(strlen(id), 5 + 24);
    const json_t *fn = json_object_get(call, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), name);
    /* arguments are JSON text (OpenAI's wire format), equal as values */
    const json_t *a = json_object_get(fn, "arguments");
    assert_true(json_is_string(a));
    json_t *got = json_loads(json_string_value(a), 0, NULL), *want = json_loads(args_json, 0, NULL);
    assert_non_null(got);
    assert_non_null(want);
    assert_true(json_equal(got, want));
    json_decref(got);
    json_decref(want);
}

static void plain_text_is_content(void **state)
{
    (void)state;
    size_t called = 9;
    json_t *m = message("The answer is 4.", 1, 1, &called);
    assert_int_equal(called, 0);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "The answer is 4.");
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
}

static void one_call_content_null(void **state)
{
    (void)state;
    size_t called = 0;
    json_t *m =
        message("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2.5]}}\n"
                "</tool_call>",
                1, 1, &called);
    assert_int_equal(called, 1);
    assert_true(json_is_null(json_object_get(m, "content")));
    const json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 1);
    assert_args(json_array_get(calls, 0), "get_weather", "{\"city\": \"Paris\", \"n\": [1, 2.5]}");
    json_decref(m);
}

static void two_calls_with_text(void **state)
{
    (void)state;
    const char *text = "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"q\\\": \\\"x</tool_call>y\\\"}\"}\n"
                       "</tool_call>\n";
    size_t called = 0;
    json_t *m = message(text, 1, 1, &called);
    assert_int_equal(called, 2);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Let me check both.");
    const json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    assert_args(json_array_get(calls, 0), "a", "{}");
    assert_args(json_array_get(calls, 1), "b", "{\"q\": \"x</tool_call>y\"}");
    assert_string_not_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")),
                            json_string_value(json_object_get(json_array_get(calls, 1), "id")));
    json_decref(m);

    /* parallel_tool_calls false: the first call only, the rest is not content */
    m = message(text, 1, 0, &called);
    assert_int_equal(called, 1);
    assert_int_equal(json_array_size(json_object_get(m, "tool_calls")), 1);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Let me check both.");
    json_decref(m);

    /* tool_choice "none" (or no tools): the text as it is */
    m = message(text, 0, 1, &called);
    assert_int_equal(called, 0);
    assert_string_equal(json_string_value(json_object_get(m, "content")), text);
    assert_null(json_object_get(m, "tool_calls"));
    json_decref(m);
}

static void bad_blocks_stay_text(void **state)
{
    (void)state;
    size_t called = 5;
    const char *bad = "Hmm <tool_call>{not json}</tool_call> and <tool_call>{\"arguments\": {}}</tool_call>";
    json_t *m = message(bad, 1, 1, &called);
    assert_int_equal(called, 0);
    assert_string_equal(json_string_value(json_object_get(m, "content")), bad);
    json_decref(m);
    /* a good call beside a bad one: the bad one stays in the content */
    m = message("<tool_call>oops</tool_call><tool_call>{\"name\": \"f\"}</tool_call>", 1, 1, &called);
    assert_int_equal(called, 1);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "<tool_call>oops</tool_call>");
    assert_args(json_array_get(json_object_get(m, "tool_calls"), 0), "f", "{}");
    json_decref(m);
    /* cut by a stop string "</tool_call>" (not included): still a call */
    m = message("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n", 1, 1, &called);
    assert_int_equal(called, 1);
    assert_true(json_is_null(json_object_get(m, "content")));
    json_decref(m);
    /* invalid UTF-8 around a call becomes U+FFFD, never a NULL message */
    m = message("\xff<tool_call>{\"name\": \"f\"}</tool_call>", 1, 1, &called);
    assert_int_equal(called, 1);
    assert_string_equal(json_string_value(json_object_get(m, "content")), "\xEF\xBF\xBD");
    json_decref(m);
}

/* What a client sends back (content + tool_calls) renders as the text the
 * model wrote, so the next turn's prompt continues the same tokens. */
static void round_trip_is_the_generation(void **state)
{
    (void)state;
    const char *gens[] = {
        "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Paris weather\", \"top_k\": "
        "3}}\n</tool_call>",
        "I will look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2.5, null, true]}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
    };
    for (size_t g = 0; g < sizeof gens / sizeof gens[0]; g++) {
        size_t called = 0;
        json_t *m = message(gens[g], 1, 1, &called);
        assert_true(called > 0);
        const json_t *c = json_object_get(m, "content");
        char err[256];
        char *back = serve_tools_assistant(json_is_string(c) ? json_string_value(c) : "",
                                           json_object_get(m, "tool_calls"), 0, err, sizeof err);
        assert_non_null(back);
        assert_string_equal(back, gens[g]);
        free(back);
        json_decref(m);
    }
}

static void ids_are_deterministic_per_response(void **state)
{
    (void)state;
    const char *t = "<tool_call>{\"name\": \"f\"}</tool_call>";
    size_t c;
    json_t *a = serve_tools_message(t, strlen(t), 1, 1, "chatcmpl-1", 0, &c);
    json_t *b = serve_tools_message(t, strlen(t), 1, 1, "chatcmpl-1", 0, &c);
    json_t *d = serve_tools_message(t, strlen(t), 1, 1, "chatcmpl-1", 1, &c);
    json_t *e = serve_tools_message(t, strlen(t), 1, 1, "chatcmpl-2", 0, &c);
#define ID(m) json_string_value(json_object_get(json_array_get(json_object_get(m, "tool_calls"), 0), "id"))
    assert_string_equal(ID(a), ID(b));
    assert_string_not_equal(ID(a), ID(d));
    assert_string_not_equal(ID(a), ID(e));
#undef ID
    json_decref(a);
    json_decref(b);
    json_decref(d);
    json_decref(e);
}

/* ---- Python's json.dumps ---------------------------------------------------- */

static void pyjson_matches_python(void **state)
{
    (void)state;
    /* expected strings printed by CPython 3 json.dumps(v, ensure_ascii=False) */
    json_t *v = json_loads("[0.1, 1e16, 1e15, 1e-05, 0.0001, -0.0, 123.0, 1.5e300, 5e-324, 2.5, 100.0, "
                           "0.3333333333333333, 1e22, 9007199254740993.0, 0.000123, 7, -3, true, false, null, "
                           "{}, [], {\"b\": 1, \"a\": [\"x\"]}]",
                           0, NULL);
    assert_non_null(v);
    char *s = serve_tools_pyjson(v);
    assert_string_equal(s,
                        "[0.1, 1e+16, 1000000000000000.0, 1e-05, 0.0001, -0.0, 123.0, 1.5e+300, 5e-324, 2.5, "
                        "100.0, 0.3333333333333333, 1e+22, 9007199254740992.0, 0.000123, 7, -3, true, false, "
                        "null, {}, [], {\"b\": 1, \"a\": [\"x\"]}]");
    free(s);
    json_decref(v);
    v = json_pack("{s:s}", "k\x01", "\x01\t\"\xC3\xA9/\\\x7f\xE2\x80\xA8");
    s = serve_tools_pyjson(v);
    assert_string_equal(s, "{\"k\\u0001\": \"\\u0001\\t\\\"\xC3\xA9/\\\\\x7f\xE2\x80\xA8\"}");
    free(s);
    json_decref(v);
}

/* ---- requests --------------------------------------------------------------- */

typedef struct fixture {
    rlp_tokenizer *tok;
    serve_server srv;
} fixture;

static int setup_tok(fixture *f, const char *path, const char *template_name)
{
    memset(f, 0, sizeof *f);
    if (rlp_tokenizer_load(&f->tok, path) != RLP_OK)
        return -1;
    if (rlp_tokenizer_set_chat_template(f->tok, template_name) != RLP_OK)
        return -1;
    size_t vocab = 0;
    rlp_tokenizer_vocab_size(&vocab, f->tok);
    f->srv.tok = f->tok;
    f->srv.cfg.model_name = "test";
    f->srv.cfg.max_body_bytes = 1 << 20;
    f->srv.cfg.max_seq_len = 16384;
    f->srv.cfg.vocab_size = (int32_t)vocab;
    f->srv.cfg.logprobs_mode = RLP_LOGPROBS_SAMPLING;
    return 0;
}

static char *smollm2_path(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s/tests/reference/fixtures/smollm2/tokenizer.json", src_root());
    return p;
}

/* serve_parse_chat on body: NULL and the message in err when refused. */
static serve_job *chat(fixture *f, const char *body, char *err, size_t errlen)
{
    err[0] = '\0';
    return serve_parse_chat(&f->srv, body, strlen(body), err, errlen);
}

static void expect_400(fixture *f, const char *body, const char *needle)
{
    char err[512];
    serve_job *job = chat(f, body, err, sizeof err);
    if (job || !strstr(err, needle)) {
        fprintf(stderr, "body %s\n  expected a refusal naming \"%s\", got %s \"%s\"\n", body, needle,
                job ? "a job" : "the message", err);
        serve_job_free(job);
        fail();
    }
}

#define USER "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]"
#define TOOL "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}"

static void requests_are_checked(void **state)
{
    (void)state;
    fixture f;
    assert_int_equal(setup_tok(&f, smollm2_path(), "chatml"), 0);
    expect_400(&f, "{" USER ", \"tools\": {}}", "'tools' must be an array");
    expect_400(&f, "{" USER ", \"tools\": [5]}", "'tools'[0] must be an object");
    expect_400(&f, "{" USER ", \"tools\": [" TOOL ", {\"type\": \"code\", \"function\": {\"name\": \"g\"}}]}",
               "'tools'[1].type must be \"function\"");
    expect_400(&f, "{" USER ", \"tools\": [{\"type\": \"function\"}]}", "'tools'[0].function must be an object");
    expect_400(&f, "{" USER ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}",
               "'tools'[0].function.name");
    expect_400(&f, "{" USER ", \"tools\": [{\"type\": \"function\", \"function\": {\"description\": \"x\"}}]}",
               "'tools'[0].function.name");
    expect_400(&f,
               "{" USER ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", "
               "\"parameters\": []}}]}",
               "'tools'[0].function.parameters");
    expect_400(&f,
               "{" USER ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a\", "
               "\"description\": 3}}]}",
               "'tools'[0].function.description");
    expect_400(&f, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": \"required\"}", "'tool_choice' = \"required\"");
    expect_400(&f,
               "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": {\"type\": \"function\", \"function\": "
               "{\"name\": \"f\"}}}",
               "'tool_choice': forcing a named function is not supported");
    expect_400(&f, "{" USER ", \"tool_choice\": \"sometimes\"}", "'tool_choice' must be \"auto\" or \"none\"");
    expect_400(&f, "{" USER ", \"tool_choice\": 1}", "'tool_choice' must be");
    expect_400(&f, "{" USER ", \"tools\": [" TOOL "], \"parallel_tool_calls\": \"yes\"}", "'parallel_tool_calls'");
    expect_400(&f, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"tool_calls\": []}]}",
               "'messages'[0].tool_calls: only assistant messages");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"tool_calls\": {}}]}",
               "'messages'[1].tool_calls must be an array");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
               "\"[1]\"}}]}]}",
               "'messages'[1].tool_calls[0].function.arguments must be a JSON object");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": "
               "\"{oops\"}}]}]}",
               "'messages'[1].tool_calls[0].function.arguments");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"tool_calls\": [{\"type\": \"function\"}]}]}",
               "'messages'[1].tool_calls[0].function must be an object");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"tool_calls\": [7]}]}",
               "'messages'[1].tool_calls[0] must be an object");
    expect_400(&f, "{\"messages\": [{\"role\": \"tool\", \"content\": \"1\", \"tool_call_id\": 5}]}",
               "'messages'[0].tool_call_id must be a string");

    char err[512];
    /* accepted: auto parses, none does not; stream with tool_choice none is fine */
    serve_job *job = chat(&f, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": \"auto\"}", err, sizeof err);
    assert_non_null(job);
    assert_int_equal(job->tool_parse, 1);
    assert_int_equal(job->tool_parallel, 1);
    serve_job_free(job);
    job = chat(&f, "{" USER ", \"tools\": [" TOOL "], \"tool_choice\": \"none\", \"stream\": true}", err, sizeof err);
    assert_non_null(job);
    assert_int_equal(job->tool_parse, 0);
    serve_job_free(job);
    job = chat(&f, "{" USER ", \"tools\": [], \"parallel_tool_calls\": false}", err, sizeof err);
    assert_non_null(job);
    assert_int_equal(job->tool_parse, 0); /* no tools: nothing to parse */
    serve_job_free(job);
    rlp_tokenizer_free(f.tok);
}

/* ---- streaming with tools ----------------------------------------------------- */

static void event(serve_server *srv, serve_job *job, uint32_t sample, int32_t token, const char *text, int32_t fr)
{
    rlp_stream_event ev = {.version = 1,
                           .sample_index = sample,
                           .token = token,
                           .text = text,
                           .text_len = strlen(text),
                           .finish_reason = fr};
    serve_stream_event(srv, job, 0, &ev);
}

/* The events of job->sse (its JSON chunks, "[DONE]" not included). */
static json_t *sse_chunks(const serve_job *job, bool *done)
{
    json_t *out = json_array();
    *done = false;
    const char *p = job->sse, *end = job->sse + job->sse_len;
    while (p && p < end) {
        assert_int_equal(strncmp(p, "data: ", 6), 0);
        const char *e = strstr(p, "\n\n");
        assert_non_null(e);
        if (strncmp(p + 6, "[DONE]", 6) == 0)
            *done = true;
        else
            json_array_append_new(out, json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL));
        p = e + 2;
    }
    return out;
}

/* Streamed with tools: chunks carry ids but no content until the choice
 * ends; its last chunk has the content outside the calls and the calls
 * (with "index"), finish_reason "tool_calls"; a choice without calls gets
 * its whole text there. */
static void streaming_holds_text_for_tools(void **state)
{
    (void)state;
    fixture f;
    assert_int_equal(setup_tok(&f, smollm2_path(), "chatml"), 0);
    pthread_mutex_init(&f.srv.mu, NULL);
    char err[512];
    serve_job *job = chat(&f, "{" USER ", \"tools\": [" TOOL "], \"stream\": true, \"n\": 2}", err, sizeof err);
    assert_non_null(job);
    assert_non_null(job->choice_text);
    event(&f.srv, job, 0, 5, "Let me look.\n", RLP_FINISH_NONE);
    event(&f.srv, job, 1, 6, "Just ", RLP_FINISH_NONE);
    event(&f.srv, job, 0, 7, "<tool_call>\n{\"name\": \"f\", ", RLP_FINISH_NONE);
    event(&f.srv, job, 1, 8, "text.", RLP_FINISH_NONE);
    event(&f.srv, job, 0, 9, "\"arguments\": {\"x\": 1}}\n</tool_call>", RLP_FINISH_NONE);
    event(&f.srv, job, 1, -1, "", RLP_FINISH_STOP);
    event(&f.srv, job, 0, -1, "", RLP_FINISH_STOP);
    bool done = false;
    json_t *chunks = sse_chunks(job, &done);
    assert_true(done);
    assert_int_equal(json_array_size(chunks), 7);
    size_t i;
    const json_t *ck;
    json_array_foreach(chunks, i, ck) {
        const json_t *ch = json_array_get(json_object_get(ck, "choices"), 0);
        const json_t *delta = json_object_get(ch, "delta"), *fr = json_object_get(ch, "finish_reason");
        json_int_t index = json_integer_value(json_object_get(ch, "index"));
        if (i < 5) {
            assert_null(json_object_get(delta, "content"));
            assert_true(json_is_null(fr));
            assert_int_equal(json_array_size(json_object_get(ch, "token_ids")), 1);
        } else if (index == 1) {
            assert_string_equal(json_string_value(json_object_get(delta, "content")), "Just text.");
            assert_null(json_object_get(delta, "tool_calls"));
            assert_string_equal(json_string_value(fr), "stop");
        } else {
            assert_string_equal(json_string_value(json_object_get(delta, "content")), "Let me look.");
            const json_t *calls = json_object_get(delta, "tool_calls");
            assert_int_equal(json_array_size(calls), 1);
            assert_int_equal(json_integer_value(json_object_get(json_array_get(calls, 0), "index")), 0);
            assert_args(json_array_get(calls, 0), "f", "{\"x\": 1}");
            assert_string_equal(json_string_value(fr), "tool_calls");
        }
    }
    json_decref(chunks);
    serve_job_free(job);
    /* tool_choice "none": streamed as text, nothing held back */
    job = chat(&f, "{" USER ", \"tools\": [" TOOL "], \"stream\": true, \"tool_choice\": \"none\"}", err,
               sizeof err);
    assert_non_null(job);
    assert_null(job->choice_text);
    serve_job_free(job);
    pthread_mutex_destroy(&f.srv.mu);
    rlp_tokenizer_free(f.tok);
}

/* ---- prompts against transformers' Qwen2.5 rendering ---------------------- */

static char *decode(const rlp_tokenizer *tok, const int32_t *ids, size_t n)
{
    size_t need = 0;
    int rc = rlp_tokenizer_decode(tok, ids, n, 0, NULL, 0, &need);
    assert_true(rc == RLP_OK || rc == RLP_E_OVERFLOW);
    char *s = malloc(need + 1);
    assert_non_null(s);
    size_t got = 0;
    assert_int_equal(rlp_tokenizer_decode(tok, ids, n, 0, s, need + 1, &got), RLP_OK);
    s[got] = '\0';
    return s;
}

/* Every fixture request through the server's parser: the prompt decodes
 * to transformers' text exactly; with_ids: and is its very ids. */
static void run_fixture(const char *tok_path, const char *template_name, const char *fixture_name, bool with_ids)
{
    fixture f;
    assert_int_equal(setup_tok(&f, tok_path, template_name), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/reference/fixtures/%s", src_root(), fixture_name);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *line = NULL;
    size_t cap = 0, rows = 0, ok = 0;
    ssize_t ll;
    while ((ll = getline(&line, &cap, fp)) > 0) {
        json_t *row = json_loadb(line, (size_t)ll, 0, NULL);
        assert_non_null(row);
        json_t *req = json_deep_copy(json_object_get(row, "request"));
        json_object_set(req, "add_generation_prompt", json_object_get(row, "add_generation_prompt"));
        char *body = json_dumps(req, JSON_COMPACT);
        char err[512];
        serve_job *job = chat(&f, body, err, sizeof err);
        if (!job)
            fprintf(stderr, "refused: %s\n  %s\n", err, body);
        assert_non_null(job);
        char *text = decode(f.tok, job->prompts[0], job->prompt_lens[0]);
        const char *want = json_string_value(json_object_get(row, "text"));
        bool same = strcmp(text, want) == 0;
        if (same && with_ids) {
            const json_t *ids = json_object_get(row, "ids");
            same = json_array_size(ids) == job->prompt_lens[0];
            for (size_t i = 0; same && i < job->prompt_lens[0]; i++)
                same = json_integer_value(json_array_get(ids, i)) == job->prompts[0][i];
            if (!same)
                fprintf(stderr, "row %zu: the text matches, the ids differ\n", rows);
        } else if (!same) {
            fprintf(stderr, "row %zu differs\n--- transformers:\n%s\n--- rlpost serve:\n%s\n---\n", rows, want, text);
        }
        ok += same;
        rows++;
        free(text);
        free(body);
        serve_job_free(job);
        json_decref(req);
        json_decref(row);
    }
    free(line);
    fclose(fp);
    rlp_tokenizer_free(f.tok);
    printf("%s, %s: %zu requests, %zu match%s\n", fixture_name, tok_path, rows, ok,
           with_ids ? " (text and ids)" : " (text)");
    assert_true(rows >= 8);
    assert_int_equal(ok, rows);
}

static void prompts_match_qwen25_text(void **state)
{
    (void)state;
    run_fixture(smollm2_path(), "chatml", "chat_qwen25_tools.jsonl", false);
}

static const char *qwen3_tokenizer(void)
{
    const char *data = getenv("RLPOST_SHARED_DATA");
    static char p[4096];
    snprintf(p, sizeof p, "%s/tokenizers/qwen3/tokenizer.json", data ? data : "../shared/data");
    if (access(p, R_OK) != 0) {
        fprintf(stderr, "skip: %s not present\n", p);
        return NULL;
    }
    return p;
}

static void prompts_match_qwen25_ids(void **state)
{
    (void)state;
    const char *p = qwen3_tokenizer();
    if (!p)
        skip();
    run_fixture(p, "chatml", "chat_qwen25_tools.jsonl", true);
}

/* Qwen3's own template (tools block without a default system prompt,
 * <think> handling around tool calls) */
static void prompts_match_qwen3(void **state)
{
    (void)state;
    run_fixture(smollm2_path(), "qwen3", "chat_qwen3_tools.jsonl", false);
    run_fixture(smollm2_path(), "qwen3", "chat_qwen3_tools_nothink.jsonl", false);
    const char *p = qwen3_tokenizer();
    if (p) {
        run_fixture(p, "qwen3", "chat_qwen3_tools.jsonl", true);
        run_fixture(p, "qwen3", "chat_qwen3_tools_nothink.jsonl", true);
    }
}

/* The thinking switch's request fields are checked; Gemma 3 (no tool
 * format) refuses tools and tool turns with a message saying so. */
static void chat_kwargs_and_gemma3_tools(void **state)
{
    (void)state;
    fixture f;
    assert_int_equal(setup_tok(&f, smollm2_path(), "qwen3"), 0);
    expect_400(&f, "{" USER ", \"chat_template_kwargs\": []}", "'chat_template_kwargs' must be an object");
    expect_400(&f, "{" USER ", \"chat_template_kwargs\": {\"enable_thinking\": \"no\"}}",
               "'chat_template_kwargs.enable_thinking' must be a boolean");
    expect_400(&f, "{" USER ", \"enable_thinking\": 0}", "'enable_thinking' must be a boolean");
    expect_400(&f, "{" USER ", \"enable_thinking\": true, \"chat_template_kwargs\": {\"enable_thinking\": false}}",
               "disagree");
    char err[512];
    /* other kwargs are ignored, as by a Jinja template; null is absent */
    serve_job *job = chat(&f, "{" USER ", \"chat_template_kwargs\": {\"foo\": 1, \"enable_thinking\": null}}", err,
                          sizeof err);
    assert_non_null(job);
    char *text = decode(f.tok, job->prompts[0], job->prompt_lens[0]);
    assert_string_equal(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(text);
    serve_job_free(job);
    job = chat(&f, "{" USER ", \"enable_thinking\": false}", err, sizeof err);
    assert_non_null(job);
    text = decode(f.tok, job->prompts[0], job->prompt_lens[0]);
    assert_string_equal(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    free(text);
    serve_job_free(job);
    rlp_tokenizer_free(f.tok);

    assert_int_equal(setup_tok(&f, smollm2_path(), "gemma3"), 0);
    expect_400(&f, "{" USER ", \"tools\": [" TOOL "]}", "gemma3) has no tool-calling format");
    expect_400(&f,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
               "\"content\": \"x\"}, {\"role\": \"tool\", \"content\": \"1\"}]}",
               "Gemma 3 has no tool turns");
    /* the switch is ignored; the prompt is Gemma's */
    job = chat(&f, "{" USER ", \"chat_template_kwargs\": {\"enable_thinking\": false}}", err, sizeof err);
    assert_non_null(job);
    text = decode(f.tok, job->prompts[0], job->prompt_lens[0]);
    assert_non_null(strstr(text, "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"));
    assert_null(strstr(text, "think"));
    free(text);
    serve_job_free(job);
    rlp_tokenizer_free(f.tok);
}

/* Other templates get the same tools block: Qwen3's without a default
 * system prompt, SmolLM2's with its own. */
static void system_prompts_per_template(void **state)
{
    (void)state;
    json_t *tools = json_loads("[" TOOL "]", 0, NULL);
    char *q3 = serve_tools_system("qwen3", NULL, tools), *q3s = serve_tools_system("qwen3", "Be brief.", tools);
    char *sm = serve_tools_system("smollm2", NULL, tools), *q25 = serve_tools_system("chatml", NULL, tools);
    assert_int_equal(strncmp(q3, "# Tools\n\nYou may call", 21), 0);
    assert_int_equal(strncmp(q3s, "Be brief.\n\n# Tools\n\n", 20), 0);
    assert_int_equal(strncmp(sm, "You are a helpful AI assistant named SmolLM", 43), 0);
    assert_int_equal(strncmp(q25, "You are Qwen, created by Alibaba Cloud.", 39), 0);
    assert_non_null(strstr(q3,
                           "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                           "{\"type\": \"object\"}}}\n</tools>"));
    free(q3);
    free(q3s);
    free(sm);
    free(q25);
    json_decref(tools);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_text_is_content),        cmocka_unit_test(one_call_content_null),
        cmocka_unit_test(two_calls_with_text),          cmocka_unit_test(bad_blocks_stay_text),
        cmocka_unit_test(round_trip_is_the_generation), cmocka_unit_test(ids_are_deterministic_per_response),
        cmocka_unit_test(pyjson_matches_python),        cmocka_unit_test(requests_are_checked),
        cmocka_unit_test(streaming_holds_text_for_tools),
        cmocka_unit_test(prompts_match_qwen25_text),    cmocka_unit_test(prompts_match_qwen25_ids),
        cmocka_unit_test(prompts_match_qwen3),          cmocka_unit_test(system_prompts_per_template),
        cmocka_unit_test(chat_kwargs_and_gemma3_tools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
