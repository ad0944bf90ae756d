/* The "tools" environment: reads a model turn with the template's parser
 * (ASearcher tags or Hermes <tool_call> JSON), runs the tools (BM25
 * search, open a document, calculator) and answers with the template's
 * observation text. Built on the public callback API like any user
 * environment; the index is read-only after creation, so episodes run on
 * all worker threads at once. Must not know about engines or tokens. */
#include "env/env_tools.h"

#include "core/error.h"
#include "core/json_guard.h"
#include "task/lookup.h"
#include "tools/bm25.h"
#include "tools/calculator.h"
#include "tools/tool_call.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TPL_SEARCH = 0, TPL_HERMES = 1 };
enum { TOOL_SEARCH = 1u, TOOL_OPEN = 2u, TOOL_CALC = 4u };

#define MAX_TOP_K 50
#define MAX_CALLS_PER_TURN 8
#define PASSAGE_BYTES 1500 /* a search hit shows this much of its text; open shows all */
#define MAX_KBS 16         /* lookup KBs taken from metadata, kept for the environment's life */

typedef struct kb_entry {
    uint64_t seed;
    size_t entities;
    rlpi_bm25 *ix;
} kb_entry;

typedef struct tools_env {
    int tpl;
    unsigned tools;
    size_t top_k;
    char *suffix;     /* "observation_suffix": text after each <information> block, or NULL */
    int no_thinking;  /* "enable_thinking": false: hermes reopens the assistant turn as Qwen3's
                         non-thinking generation prompt does */
    rlpi_bm25 *ix;    /* the fixed corpus, or NULL when KBs come from the metadata */
    pthread_mutex_t mu; /* guards kbs */
    kb_entry kbs[MAX_KBS];
    size_t n_kbs;
} tools_env;

typedef struct tools_episode {
    const rlpi_bm25 *ix; /* borrowed from the environment */
} tools_episode;

/* ---- growing text ---- */

typedef struct text {
    char *s;
    size_t len, cap;
    int failed;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->failed)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->failed = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void puts_(text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* ---- the tools ---- */

/* Search results as "[1] Title: T (id: I)\ntext" blocks. Returns 0, or
 * -1 when out of memory. */
static int run_search(text *out, const tools_env *env, const rlpi_bm25 *ix, const char *q, size_t qlen)
{
    rlpi_bm25_hit hits[MAX_TOP_K];
    long n = rlpi_bm25_search(ix, q, qlen, env->top_k, hits);
    if (n < 0)
        return -1;
    if (n == 0)
        puts_(out, "No results.");
    for (long i = 0; i < n; i++) {
        rlpi_doc d = rlpi_bm25_doc(ix, hits[i].doc);
        char head[64];
        snprintf(head, sizeof head, "%s[%ld] Title: ", i ? "\n" : "", i + 1);
        puts_(out, head);
        puts_(out, d.title);
        puts_(out, " (id: ");
        puts_(out, d.id);
        puts_(out, ")\n");
        size_t len = strlen(d.text);
        if (len > PASSAGE_BYTES) {
            /* cut at a UTF-8 character boundary */
            len = PASSAGE_BYTES;
            while (len > 0 && ((unsigned char)d.text[len] & 0xC0) == 0x80)
                len--;
            put(out, d.text, len);
            puts_(out, " …");
        } else {
            put(out, d.text, len);
        }
    }
    return out->failed ? -1 : 0;
}

/* The document named by key (id or title). Returns 1 found, 0 not. */
static int run_open(text *out, const rlpi_bm25 *ix, const char *key, size_t len)
{
    long i = rlpi_bm25_find(ix, key, len);
    if (i < 0)
        return 0;
    rlpi_doc d = rlpi_bm25_doc(ix, (size_t)i);
    puts_(out, "Title: ");
    puts_(out, d.title);
    puts_(out, " (id: ");
    puts_(out, d.id);
    puts_(out, ")\n");
    puts_(out, d.text);
    return 1;
}

/* ---- the search template (ASearcher tags) ---- */

static int reply_information(rlp_env_reply *reply, const text *body, const char *suffix)
{
    int rc = rlp_env_reply_add_text(reply, "\n\n<information>\n", 16, 0);
    if (!rc)
        rc = rlp_env_reply_add_text(reply, body->s ? body->s : "", body->len, 0);
    if (!rc)
        rc = rlp_env_reply_add_text(reply, "\n</information>\n\n", 17, 0);
    /* e.g. "<answer>": a cue that starts the model's next turn (a scaffold
     * for a model too small to follow the protocol unprompted) */
    if (!rc && suffix)
        rc = rlp_env_reply_add_text(reply, suffix, strlen(suffix), 0);
    return rc;
}

/* A turn that begins inside a tag the prompt opened (an assistant prefix
 * "<search>"): "query </search>" with no opening tag of its own is that
 * search. Only when the action has no complete tag. */
static rlpi_tag_kind open_tag_from_prompt(const char *action, size_t len, size_t *b, size_t *n)
{
    static const struct { const char *close; rlpi_tag_kind kind; } tags[] = {
        {"</search>", RLPI_TAG_SEARCH}, {"</access>", RLPI_TAG_ACCESS}};
    for (size_t t = 0; t < sizeof tags / sizeof tags[0]; t++) {
        size_t cl = strlen(tags[t].close);
        for (size_t i = 0; i + cl <= len; i++) {
            if (memcmp(action + i, tags[t].close, cl))
                continue;
            if (memchr(action, '<', i)) /* some other tag before it: not a continuation */
                return RLPI_TAG_NONE;
            size_t s0 = 0, e0 = i;
            while (s0 < e0 && (action[s0] == ' ' || action[s0] == '\n' || action[s0] == '\t'))
                s0++;
            while (e0 > s0 && (action[e0 - 1] == ' ' || action[e0 - 1] == '\n' || action[e0 - 1] == '\t'))
                e0--;
            *b = s0;
            *n = e0 - s0;
            return tags[t].kind;
        }
    }
    return RLPI_TAG_NONE;
}

static int step_search(rlp_env_reply *reply, const tools_env *env, const rlpi_bm25 *ix, const char *action,
                       size_t len)
{
    size_t b, n;
    rlpi_tag_kind k = rlpi_tag_action_parse(action, len, &b, &n);
    if (k == RLPI_TAG_NONE)
        k = open_tag_from_prompt(action, len, &b, &n);
    if (k == RLPI_TAG_NONE || k == RLPI_TAG_ANSWER) {
        int rc = rlp_env_reply_set_done(reply, 1);
        return rc ? rc : rlp_env_reply_set_tool_call(reply, 0);
    }
    int rc = rlp_env_reply_set_tool_call(reply, 1);
    if (rc)
        return rc;
    text body = {0};
    const char *err = NULL;
    char msg[256];
    if (k == RLPI_TAG_SEARCH) {
        if (!(env->tools & TOOL_SEARCH))
            err = "the search tool is not enabled";
        else if (n == 0)
            err = "empty search query";
        else if (run_search(&body, env, ix, action + b, n))
            rc = RLP_E_NOMEM;
    } else {
        if (!(env->tools & TOOL_OPEN)) {
            err = "the access tool is not enabled";
        } else if (!run_open(&body, ix, action + b, n)) {
            snprintf(msg, sizeof msg, "no document with the title or id \"%.*s\"", n > 200 ? 200 : (int)n,
                     action + b);
            err = msg;
        }
    }
    if (!rc && err) {
        body.len = 0;
        puts_(&body, "Error: ");
        puts_(&body, err);
        rc = rlp_env_reply_set_tool_error(reply, err);
    }
    if (!rc && body.failed)
        rc = RLP_E_NOMEM;
    if (!rc)
        rc = reply_information(reply, &body, env->suffix);
    free(body.s);
    return rc;
}

/* ---- the hermes template (Qwen <tool_call> JSON) ---- */

/* Runs one call into out; *err gets the reason of a tool error (static
 * or in msg). Returns 0, or -1 when out of memory. */
static int run_call(text *out, const char **err, char *msg, size_t cap, const tools_env *env, const rlpi_bm25 *ix,
                    const rlpi_tool_call *c)
{
    *err = NULL;
    json_t *args = json_loads(c->arguments, 0, NULL); /* compact object text the parser wrote */
    if (!args)
        return -1;
    const char *name = c->name;
    int rc = 0;
    if (!strcmp(name, "search") && (env->tools & TOOL_SEARCH)) {
        json_t *q = json_object_get(args, "query");
        if (!json_is_string(q) || json_string_length(q) == 0)
            *err = "search needs {\"query\": a non-empty string}";
        else
            rc = run_search(out, env, ix, json_string_value(q), json_string_length(q));
    } else if (!strcmp(name, "open") && (env->tools & TOOL_OPEN)) {
        json_t *id = json_object_get(args, "id");
        char num[32];
        const char *key = NULL;
        size_t klen = 0;
        if (json_is_string(id)) {
            key = json_string_value(id);
            klen = json_string_length(id);
        } else if (json_is_integer(id)) {
            snprintf(num, sizeof num, "%lld", (long long)json_integer_value(id));
            key = num;
            klen = strlen(num);
        }
        if (!key) {
            *err = "open needs {\"id\": a document id or title}";
        } else if (!run_open(out, ix, key, klen)) {
            snprintf(msg, cap, "no document with the title or id \"%.*s\"", klen > 200 ? 200 : (int)klen, key);
            *err = msg;
        }
    } else if (!strcmp(name, "calculator") && (env->tools & TOOL_CALC)) {
        json_t *e = json_object_get(args, "expression");
        double v;
        if (!json_is_string(e)) {
            *err = "calculator needs {\"expression\": a string}";
        } else if (rlpi_calc_eval(json_string_value(e), json_string_length(e), &v, msg, cap)) {
            *err = msg;
        } else {
            char num[64];
            rlpi_calc_format(v, num, sizeof num);
            puts_(out, num);
        }
    } else {
        snprintf(msg, cap, "unknown tool \"%.64s\" (%s%s%s)", name, env->tools & TOOL_SEARCH ? "search " : "",
                 env->tools & TOOL_OPEN ? "open " : "", env->tools & TOOL_CALC ? "calculator" : "");
        *err = msg;
    }
    json_decref(args);
    if (*err) {
        out->len = 0;
        out->failed = 0;
        puts_(out, "Error: ");
        puts_(out, *err);
    }
    return rc || out->failed ? -1 : 0;
}

/* Whether the action already closed the assistant turn (it stopped at the
 * end-of-turn token, decoded): then the observation must not close it again. */
static int ends_turn(const char *a, size_t len)
{
    static const char eot[] = "<|im_end|>";
    while (len && (a[len - 1] == ' ' || a[len - 1] == '\n' || a[len - 1] == '\r' || a[len - 1] == '\t'))
        len--;
    return len >= sizeof eot - 1 && !memcmp(a + len - (sizeof eot - 1), eot, sizeof eot - 1);
}

static int step_hermes(rlp_env_reply *reply, const tools_env *env, const rlpi_bm25 *ix, const char *action,
                       size_t len)
{
    rlpi_tool_call *calls = NULL;
    size_t n = 0, bad = 0;
    int rc = rlpi_tool_calls_parse_hermes(&calls, &n, &bad, action, len);
    if (rc)
        return rc;
    if (n == 0 && bad == 0) {
        rc = rlp_env_reply_set_done(reply, 1);
        return rc ? rc : rlp_env_reply_set_tool_call(reply, 0);
    }
    rc = rlp_env_reply_set_tool_call(reply, 1);
    const char *open = ends_turn(action, len) ? "\n<|im_start|>user\n" : "<|im_end|>\n<|im_start|>user\n";
    if (!rc)
        rc = rlp_env_reply_add_text(reply, open, strlen(open), RLP_ENCODE_PARSE_SPECIAL);
    const char *first_err = NULL;
    char first_msg[256];
    /* one response per call, then one for the blocks that did not parse */
    size_t n_resp = n + (bad ? 1 : 0);
    for (size_t i = 0; i < n_resp && !rc; i++) {
        text body = {0};
        const char *err = NULL;
        char msg[256];
        if (i >= n) {
            snprintf(msg, sizeof msg, "%zu tool call%s could not be parsed: write <tool_call>{\"name\": …, "
                     "\"arguments\": {…}}</tool_call> with valid JSON", bad, bad == 1 ? "" : "s");
            err = msg;
            puts_(&body, "Error: ");
            puts_(&body, msg);
        } else if (i >= MAX_CALLS_PER_TURN) {
            snprintf(msg, sizeof msg, "more than %d tool calls in one turn; this one was not run", MAX_CALLS_PER_TURN);
            err = msg;
            puts_(&body, "Error: ");
            puts_(&body, msg);
        } else if (run_call(&body, &err, msg, sizeof msg, env, ix, &calls[i])) {
            rc = RLP_E_NOMEM;
        }
        if (!rc && body.failed)
            rc = RLP_E_NOMEM;
        if (!rc && err && !first_err) {
            snprintf(first_msg, sizeof first_msg, "%s", err);
            first_err = first_msg;
        }
        if (!rc)
            rc = rlp_env_reply_add_text(reply, i ? "\n<tool_response>\n" : "<tool_response>\n", i ? 17 : 16, 0);
        if (!rc)
            rc = rlp_env_reply_add_text(reply, body.s ? body.s : "", body.len, 0);
        if (!rc)
            rc = rlp_env_reply_add_text(reply, "\n</tool_response>", 17, 0);
        free(body.s);
    }
    if (!rc)
        rc = rlp_env_reply_add_text(reply, "<|im_end|>\n<|im_start|>assistant\n", 33, RLP_ENCODE_PARSE_SPECIAL);
    /* the task's prompt ended the same way (its "chat": {"enable_thinking": false}) */
    if (!rc && env->no_thinking)
        rc = rlp_env_reply_add_text(reply, "<think>\n\n</think>\n\n", 19, RLP_ENCODE_PARSE_SPECIAL);
    if (!rc && first_err)
        rc = rlp_env_reply_set_tool_error(reply, first_err);
    rlpi_tool_calls_free(calls, n);
    return rc;
}

/* ---- callbacks ---- */

static rlpi_bm25 *kb_index(tools_env *env, uint64_t seed, size_t entities, char *msg, size_t cap)
{
    pthread_mutex_lock(&env->mu);
    rlpi_bm25 *ix = NULL;
    for (size_t i = 0; i < env->n_kbs && !ix; i++)
        if (env->kbs[i].seed == seed && env->kbs[i].entities == entities)
            ix = env->kbs[i].ix;
    if (!ix && env->n_kbs == MAX_KBS)
        snprintf(msg, cap, "more than %d lookup KBs in one environment", MAX_KBS);
    if (!ix && env->n_kbs < MAX_KBS) {
        /* built under the lock: a KB of a few hundred entities takes
         * milliseconds, and two episodes must not build the same one */
        rlpi_lookup_kb *kb = NULL;
        int rc = rlpi_lookup_kb_generate(&kb, seed, entities);
        rlpi_doc *docs = rc ? NULL : malloc(kb->n * sizeof *docs);
        if (docs) {
            for (size_t i = 0; i < kb->n; i++)
                docs[i] = (rlpi_doc){kb->ids[i], kb->ents[i].name, kb->texts[i]};
            rc = rlpi_bm25_build(&ix, docs, kb->n);
            if (rc)
                ix = NULL;
        }
        if (rc || !docs)
            snprintf(msg, cap, "lookup KB (seed %llu, %zu entities): %s", (unsigned long long)seed, entities,
                     rc ? rlp_error_last() : "out of memory");
        free(docs);
        rlpi_lookup_kb_free(kb);
        if (ix)
            env->kbs[env->n_kbs++] = (kb_entry){seed, entities, ix};
    }
    pthread_mutex_unlock(&env->mu);
    return ix;
}

static int tools_reset(void **episode, rlp_env_reply *reply, const char *metadata_json, void *user)
{
    tools_env *env = user;
    const rlpi_bm25 *ix = env->ix;
    if (!ix && (env->tools & (TOOL_SEARCH | TOOL_OPEN))) {
        char msg[300] = "the prompt's metadata has no integer \"kb_seed\" and \"entities\" (lookup_kb "
                        "\"metadata\" reads them there)";
        json_t *m = metadata_json ? json_loads(metadata_json, 0, NULL) : NULL;
        json_t *s = json_object_get(m, "kb_seed"), *e = json_object_get(m, "entities");
        if (json_is_integer(s) && json_is_integer(e) && json_integer_value(s) >= 0 && json_integer_value(e) >= 0)
            ix = kb_index(env, (uint64_t)json_integer_value(s), (size_t)json_integer_value(e), msg, sizeof msg);
        json_decref(m);
        if (!ix) {
            rlp_env_reply_set_tool_error(reply, msg);
            return RLP_E_INVALID_ARG;
        }
    }
    tools_episode *ep = malloc(sizeof *ep);
    if (!ep)
        return RLP_E_NOMEM;
    ep->ix = ix;
    *episode = ep;
    return RLP_OK;
}

static int tools_step(rlp_env_reply *reply, void *episode, const char *action, size_t action_len,
                      const int32_t *action_ids, size_t n_action_ids, void *user)
{
    (void)action_ids;
    (void)n_action_ids;
    tools_env *env = user;
    tools_episode *ep = episode;
    if (!ep)
        return RLP_E_STATE;
    return env->tpl == TPL_SEARCH ? step_search(reply, env, ep->ix, action, action_len)
                                  : step_hermes(reply, env, ep->ix, action, action_len);
}

static void tools_close(void *episode, void *user)
{
    (void)user;
    free(episode);
}

static void tools_free(void *user)
{
    tools_env *env = user;
    if (!env)
        return;
    rlpi_bm25_free(env->ix);
    for (size_t i = 0; i < env->n_kbs; i++)
        rlpi_bm25_free(env->kbs[i].ix);
    pthread_mutex_destroy(&env->mu);
    free(env->suffix);
    free(env);
}

/* ---- options ---- */

static int inline_corpus(rlpi_bm25 **out, const json_t *arr)
{
    if (!json_is_array(arr))
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"corpus_inline\" must be an array of {\"id\", \"title\", \"text\"}");
    size_t n = json_array_size(arr);
    rlpi_doc *docs = malloc((n ? n : 1) * sizeof *docs);
    char (*ids)[32] = malloc((n ? n : 1) * sizeof *ids);
    if (!docs || !ids) {
        free(docs);
        free(ids);
        return rlpi_error_set(RLP_E_NOMEM, "corpus_inline: out of memory");
    }
    int rc = RLP_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *o = json_array_get(arr, i);
        json_t *id = json_object_get(o, "id"), *title = json_object_get(o, "title"), *txt = json_object_get(o, "text");
        if (!json_is_object(o) || !json_is_string(txt) || (title && !json_is_string(title)) ||
            !(json_is_string(id) || json_is_integer(id))) {
            rc = rlpi_error_set(RLP_E_INVALID_ARG,
                                "corpus_inline[%zu]: not a {\"id\": string or integer, \"title\": string, \"text\": "
                                "string} object",
                                i);
            break;
        }
        if (json_is_integer(id))
            snprintf(ids[i], sizeof ids[i], "%lld", (long long)json_integer_value(id));
        docs[i] = (rlpi_doc){json_is_string(id) ? json_string_value(id) : ids[i],
                             title ? json_string_value(title) : "", json_string_value(txt)};
    }
    if (!rc)
        rc = rlpi_bm25_build(out, docs, n);
    free(docs);
    free(ids);
    return rc;
}

static int parse_options(tools_env *env, const json_t *o)
{
    static const char *const keys[] = {"template", "corpus", "corpus_inline", "lookup_kb", "top_k", "tools",
                                       "observation_suffix", "enable_thinking"};
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v)
    {
        size_t k = 0;
        while (k < sizeof keys / sizeof keys[0] && strcmp(keys[k], key))
            k++;
        if (k == sizeof keys / sizeof keys[0])
            return rlpi_error_set(RLP_E_INVALID_ARG,
                                  "unknown option \"%.64s\" (template, corpus, corpus_inline, lookup_kb, top_k, tools, "
                                  "observation_suffix, enable_thinking)",
                                  key);
    }
    env->tpl = TPL_SEARCH;
    if ((v = json_object_get(o, "template"))) {
        const char *t = json_string_value(v);
        if (t && !strcmp(t, "search"))
            env->tpl = TPL_SEARCH;
        else if (t && !strcmp(t, "hermes"))
            env->tpl = TPL_HERMES;
        else
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"template\" must be \"search\" or \"hermes\"");
    }
    unsigned known = env->tpl == TPL_SEARCH ? TOOL_SEARCH | TOOL_OPEN : TOOL_SEARCH | TOOL_OPEN | TOOL_CALC;
    env->tools = known;
    if ((v = json_object_get(o, "tools"))) {
        if (!json_is_array(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"tools\" must be an array of tool names");
        env->tools = 0;
        size_t i;
        json_t *t;
        json_array_foreach(v, i, t)
        {
            const char *s = json_string_value(t);
            unsigned bit = !s ? 0 : !strcmp(s, "search") ? TOOL_SEARCH : !strcmp(s, "open") ? TOOL_OPEN
                                  : !strcmp(s, "calculator") ? TOOL_CALC : 0;
            if (!(bit & known))
                return rlpi_error_set(RLP_E_INVALID_ARG, "tools[%zu]: not a tool of the %s template (%s)", i,
                                      env->tpl == TPL_SEARCH ? "search" : "hermes",
                                      env->tpl == TPL_SEARCH ? "search, open" : "search, open, calculator");
            env->tools |= bit;
        }
    }
    if ((v = json_object_get(o, "observation_suffix")) && !json_is_null(v)) {
        if (!json_is_string(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"observation_suffix\" must be a string");
        if (!(env->suffix = strdup(json_string_value(v))))
            return rlpi_error_set(RLP_E_NOMEM, "tools environment: out of memory");
    }
    if ((v = json_object_get(o, "enable_thinking"))) {
        if (!json_is_boolean(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"enable_thinking\" must be true or false");
        if (env->tpl != TPL_HERMES && json_is_false(v))
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"enable_thinking\": false needs the hermes template (the "
                                  "search template opens no assistant turn)");
        env->no_thinking = json_is_false(v);
    }
    env->top_k = 3;
    if ((v = json_object_get(o, "top_k"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > MAX_TOP_K)
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"top_k\" must be an integer in [1, %d]", MAX_TOP_K);
        env->top_k = (size_t)json_integer_value(v);
    }
    json_t *corpus = json_object_get(o, "corpus"), *inl = json_object_get(o, "corpus_inline"),
           *kb = json_object_get(o, "lookup_kb");
    /* a calculator-only environment (tool-integrated math) needs no corpus */
    if (!corpus && !inl && !kb && !(env->tools & (TOOL_SEARCH | TOOL_OPEN)))
        return RLP_OK;
    if (!!corpus + !!inl + !!kb != 1)
        return rlpi_error_set(RLP_E_INVALID_ARG, "give exactly one of \"corpus\", \"corpus_inline\" and \"lookup_kb\" "
                              "(or only the calculator in \"tools\")");
    if (corpus) {
        if (!json_is_string(corpus))
            return rlpi_error_set(RLP_E_INVALID_ARG, "\"corpus\" must be a path to a JSONL file");
        return rlpi_bm25_load_jsonl(&env->ix, json_string_value(corpus));
    }
    if (inl)
        return inline_corpus(&env->ix, inl);
    if (json_is_string(kb) && !strcmp(json_string_value(kb), "metadata"))
        return RLP_OK; /* each episode's KB is named by its prompt's metadata */
    json_t *s = json_object_get(kb, "seed"), *e = json_object_get(kb, "entities");
    if (!json_is_object(kb) || !json_is_integer(s) || json_integer_value(s) < 0 ||
        (e && !json_is_integer(e)) || json_object_size(kb) != 1u + !!e)
        return rlpi_error_set(RLP_E_INVALID_ARG, "\"lookup_kb\" must be {\"seed\": S, \"entities\": N} or \"metadata\"");
    char msg[300] = "";
    size_t entities = e ? (size_t)(json_integer_value(e) < 0 ? 0 : json_integer_value(e)) : 200;
    env->ix = kb_index(env, (uint64_t)json_integer_value(s), entities, msg, sizeof msg);
    if (!env->ix)
        return rlpi_error_set(RLP_E_INVALID_ARG, "%s", msg);
    env->n_kbs = 0; /* it is the fixed index now, freed as such */
    return RLP_OK;
}

int rlpi_env_tools_create(rlp_env **out, const char *options_json, const rlp_env_options *opts)
{
    json_t *o = NULL;
    int rc = options_json ? rlpi_json_load_guarded(options_json, strlen(options_json), 8, "tools options", &o)
                          : RLP_OK;
    if (rc == RLP_E_FORMAT)
        rc = RLP_E_INVALID_ARG;
    if (!rc && (!o || !json_is_object(o)))
        rc = rlpi_error_set(RLP_E_INVALID_ARG, "options must be a JSON object naming a corpus");
    tools_env *env = rc ? NULL : calloc(1, sizeof *env);
    if (!rc && !env)
        rc = rlpi_error_set(RLP_E_NOMEM, "out of memory");
    if (env)
        pthread_mutex_init(&env->mu, NULL);
    if (!rc)
        rc = parse_options(env, o);
    json_decref(o);
    if (!rc) {
        rlp_env_callbacks cb = {RLP_ENV_CALLBACKS_VERSION, tools_reset, tools_step, tools_close, tools_free};
        rc = rlp_env_create(out, "tools", &cb, env, opts);
    }
    if (rc) {
        tools_free(env); /* rlp_env_create does not take user on failure */
        return rlpi_error_wrap("rlp_env_create_builtin(\"tools\")");
    }
    return RLP_OK;
}
