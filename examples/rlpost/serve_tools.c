/* OpenAI tool calling in `rlpost serve` (serve_tools.h). The prompt side
 * writes what Qwen2.5's Jinja template writes, byte for byte (checked
 * against transformers in tests/reference/make_chat_tools_fixtures.py):
 * the tool definitions in the system message, an assistant's tool_calls as
 * <tool_call> blocks in its content; the chat template renders "tool"
 * messages itself. The response side parses <tool_call> blocks with the
 * library's Hermes parser (lib/tools/tool_call.c, compiled into the driver
 * because it is not public API) the way vLLM's hermes parser answers. */
#include "serve_tools.h"

#include "serve.h"
#include "tools/tool_call.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOOLS 256
#define MAX_NAME 64

#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define SMOLLM_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

/* The "# Tools" block of Qwen2.5's and Qwen3's templates, around the tool list. */
#define TOOLS_HEAD                                                                                                     \
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "           \
    "function signatures within <tools></tools> XML tags:\n<tools>"
#define TOOLS_TAIL                                                                                                     \
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "              \
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "                      \
    "<args-json-object>}\n</tool_call>"

static int efail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

/* ---- a growing string ----------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

/* The string, or NULL (and nothing leaked) when memory ran out. */
static char *take(sbuf *b)
{
    if (b->oom || !b->p) {
        free(b->p);
        return b->oom ? NULL : strdup("");
    }
    return b->p;
}

/* ---- Python's json.dumps -------------------------------------------------- */

static void py_string(sbuf *b, const char *s, size_t n)
{
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char u[8];
        switch (c) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                e = u;
            }
        }
        if (e)
            puts_(b, e);
        else
            put(b, s + i, 1);
    }
    put(b, "\"", 1);
}

/* float.__repr__: the shortest digits that read back to x, positional
 * when the decimal exponent is in [-4, 16), else d.ddde+XX. */
static void py_real(sbuf *b, double x)
{
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    const char *s = buf;
    if (*s == '-') {
        put(b, "-", 1);
        s++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.')
            digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int e10 = *s == 'e' ? atoi(s + 1) : 0, decpt = e10 + 1;
    if (decpt <= -4 || decpt > 16) {
        put(b, digits, 1);
        if (nd > 1) {
            put(b, ".", 1);
            put(b, digits + 1, nd - 1);
        }
        snprintf(buf, sizeof buf, "e%c%02d", e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
        puts_(b, buf);
    } else if (decpt <= 0) {
        put(b, "0.", 2);
        for (int i = 0; i < -decpt; i++)
            put(b, "0", 1);
        put(b, digits, nd);
    } else if ((size_t)decpt >= nd) {
        put(b, digits, nd);
        for (size_t i = nd; i < (size_t)decpt; i++)
            put(b, "0", 1);
        put(b, ".0", 2);
    } else {
        put(b, digits, (size_t)decpt);
        put(b, ".", 1);
        put(b, digits + decpt, nd - (size_t)decpt);
    }
}

static void py_json(sbuf *b, const json_t *v)
{
    char num[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        bool first = true;
        put(b, "{", 1);
        json_object_foreach((json_t *)v, k, x)
        {
            if (!first)
                put(b, ", ", 2);
            first = false;
            py_string(b, k, strlen(k));
            put(b, ": ", 2);
            py_json(b, x);
        }
        put(b, "}", 1);
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *x;
        put(b, "[", 1);
        json_array_foreach(v, i, x)
        {
            if (i)
                put(b, ", ", 2);
            py_json(b, x);
        }
        put(b, "]", 1);
        break;
    }
    case JSON_STRING: py_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, num);
        break;
    case JSON_REAL: py_real(b, json_real_value(v)); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    default: puts_(b, "null"); break;
    }
}

char *serve_tools_pyjson(const json_t *v)
{
    if (!v)
        return NULL;
    sbuf b = {0};
    py_json(&b, v);
    return take(&b);
}

/* ---- the request ---------------------------------------------------------- */

/* OpenAI's function names ([a-zA-Z0-9_-], at most 64) and '.' and ':' of
 * namespaced tools; nothing a template writing the name raw into JSON
 * (Qwen2.5's does) would have to escape. */
static bool good_name(const json_t *name)
{
    if (!json_is_string(name))
        return false;
    const char *s = json_string_value(name);
    size_t n = json_string_length(name);
    if (n == 0 || n > MAX_NAME || strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.' || c == ':'))
            return false;
    }
    return true;
}

#define NAME_RULE "1 to 64 letters, digits, '_', '-', '.' or ':'"

int serve_tools_parse(serve_tools *out, const json_t *req, char *err, size_t errlen)
{
    out->tools = NULL;
    out->parse = 0;
    out->parallel = 1;
    const json_t *tools = json_object_get(req, "tools");
    if (!absent(tools)) {
        if (!json_is_array(tools))
            return efail(err, errlen, "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
        if (json_array_size(tools) > MAX_TOOLS)
            return efail(err, errlen, "'tools' has %zu tools; at most %d", json_array_size(tools), MAX_TOOLS);
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            if (!json_is_object(t))
                return efail(err, errlen, "'tools'[%zu] must be an object", i);
            const json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
            if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
                return efail(err, errlen, "'tools'[%zu].type must be \"function\"", i);
            if (!json_is_object(fn))
                return efail(err, errlen, "'tools'[%zu].function must be an object", i);
            if (!good_name(json_object_get(fn, "name")))
                return efail(err, errlen, "'tools'[%zu].function.name must be " NAME_RULE, i);
            const json_t *d = json_object_get(fn, "description"), *p = json_object_get(fn, "parameters"),
                         *s = json_object_get(fn, "strict");
            if (!absent(d) && !json_is_string(d))
                return efail(err, errlen, "'tools'[%zu].function.description must be a string", i);
            if (!absent(p) && !json_is_object(p))
                return efail(err, errlen, "'tools'[%zu].function.parameters must be a JSON Schema object", i);
            if (!absent(s) && !json_is_boolean(s))
                return efail(err, errlen, "'tools'[%zu].function.strict must be a boolean", i);
        }
        if (json_array_size(tools) > 0)
            out->tools = tools;
    }
    const json_t *choice = json_object_get(req, "tool_choice");
    int none = 0;
    if (!absent(choice)) {
        if (json_is_object(choice))
            return efail(err, errlen,
                         "'tool_choice': forcing a named function is not supported by this server "
                         "(only \"auto\" or \"none\")");
        if (!json_is_string(choice))
            return efail(err, errlen, "'tool_choice' must be \"auto\" or \"none\"");
        const char *c = json_string_value(choice);
        if (strcmp(c, "required") == 0)
            return efail(err, errlen,
                         "'tool_choice' = \"required\" is not supported by this server (only "
                         "\"auto\" or \"none\")");
        if (strcmp(c, "auto") != 0 && strcmp(c, "none") != 0)
            return efail(err, errlen, "'tool_choice' must be \"auto\" or \"none\"");
        none = strcmp(c, "none") == 0;
    }
    const json_t *par = json_object_get(req, "parallel_tool_calls");
    if (!absent(par)) {
        if (!json_is_boolean(par))
            return efail(err, errlen, "'parallel_tool_calls' must be a boolean");
        out->parallel = json_is_true(par);
    }
    out->parse = out->tools && !none;
    return 0;
}

char *serve_tools_system(const char *template_name, const char *system, const json_t *tools)
{
    const char *name = template_name ? template_name : "";
    const char *lead = system;
    if (!lead && strcmp(name, "chatml") == 0)
        lead = QWEN25_SYSTEM;
    else if (!lead && strcmp(name, "smollm2") == 0)
        lead = SMOLLM_SYSTEM;
    sbuf b = {0};
    if (lead) {
        puts_(&b, lead);
        puts_(&b, "\n\n");
    }
    puts_(&b, TOOLS_HEAD);
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        char *s = serve_tools_pyjson(t);
        if (!s) {
            b.oom = true;
            break;
        }
        put(&b, "\n", 1);
        puts_(&b, s);
        free(s);
    }
    puts_(&b, TOOLS_TAIL);
    return take(&b);
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return false;
    return true;
}

char *serve_tools_assistant(const char *content, const json_t *tool_calls, size_t i, char *err, size_t errlen)
{
    if (!json_is_array(tool_calls)) {
        efail(err, errlen, "'messages'[%zu].tool_calls must be an array", i);
        return NULL;
    }
    sbuf b = {0};
    puts_(&b, content);
    size_t k;
    const json_t *tc;
    json_array_foreach(tool_calls, k, tc)
    {
        const json_t *type = json_object_get(tc, "type"), *id = json_object_get(tc, "id");
        const json_t *fn = json_object_get(tc, "function");
        const char *bad = NULL;
        if (!json_is_object(tc))
            bad = "must be an object";
        else if (!absent(type) && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0))
            bad = ".type must be \"function\"";
        else if (!absent(id) && !json_is_string(id))
            bad = ".id must be a string";
        else if (!json_is_object(fn))
            bad = ".function must be an object";
        else if (!good_name(json_object_get(fn, "name")))
            bad = ".function.name must be " NAME_RULE;
        json_t *args = NULL;
        if (!bad) {
            /* OpenAI sends the arguments as JSON text; vLLM decodes them
             * before the template writes them with tojson */
            const json_t *a = json_object_get(fn, "arguments");
            if (absent(a) || (json_is_string(a) && blank(json_string_value(a), json_string_length(a))))
                args = json_object();
            else if (json_is_string(a))
                args = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
            else
                args = json_incref((json_t *)a);
            if (!json_is_object(args))
                bad = ".function.arguments must be a JSON object or a string holding one";
        }
        if (bad) {
            json_decref(args);
            free(b.p);
            efail(err, errlen, "'messages'[%zu].tool_calls[%zu]%s%s", i, k, bad[0] == '.' ? "" : " ", bad);
            return NULL;
        }
        char *a = serve_tools_pyjson(args);
        json_decref(args);
        if (!a)
            b.oom = true;
        if (k > 0 || content[0])
            put(&b, "\n", 1);
        puts_(&b, "<tool_call>\n{\"name\": \"");
        puts_(&b, json_string_value(json_object_get(fn, "name")));
        puts_(&b, "\", \"arguments\": ");
        if (a)
            puts_(&b, a);
        puts_(&b, "}\n</tool_call>");
        free(a);
    }
    char *s = take(&b);
    if (!s)
        efail(err, errlen, "out of memory");
    return s;
}

/* ---- the response --------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x += UINT64_C(0x9E3779B97F4A7C15);
    x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
    return x ^ (x >> 31);
}

static json_t *call_json(const rlpi_tool_call *c, const char *id_base, size_t choice, size_t k)
{
    uint64_t h = UINT64_C(1469598103934665603); /* FNV-1a of the response id */
    for (const char *p = id_base ? id_base : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * UINT64_C(1099511628211);
    uint64_t a = mix64(h ^ ((uint64_t)choice << 32) ^ k), b2 = mix64(a);
    char id[48];
    snprintf(id, sizeof id, "call_%016llx%08llx", (unsigned long long)a, (unsigned long long)(b2 >> 32));
    return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name", c->name, "arguments",
                     c->arguments);
}

json_t *serve_tools_message(const char *text, size_t len, int parse, int parallel, const char *id_base, size_t choice,
                            size_t *called)
{
    *called = 0;
    rlpi_tool_call *calls = NULL;
    size_t n = 0;
    if (parse && rlpi_tool_calls_parse_hermes(&calls, &n, NULL, text, len) != 0)
        return NULL;
    if (n == 0)
        return json_pack("{s:s, s:o?}", "role", "assistant", "content", serve_json_text(text, len));
    /* the text outside every parsed block (an unparsable block stays
     * text), trimmed: a client sending it back with the calls gets the
     * same prompt from the template, which writes the newline itself */
    sbuf b = {0};
    size_t at = 0;
    for (size_t k = 0; k < n; k++) {
        put(&b, text + at, calls[k].start - at);
        at = calls[k].end;
    }
    put(&b, text + at, len - at);
    json_t *msg = NULL, *arr = json_array();
    if (!b.oom && arr) {
        const char *s = b.p ? b.p : "";
        size_t lo = 0, hi = b.n;
        while (lo < hi && blank(s + lo, 1))
            lo++;
        while (hi > lo && blank(s + hi - 1, 1))
            hi--;
        bool ok = true;
        size_t keep = parallel ? n : 1;
        for (size_t k = 0; k < keep && ok; k++)
            ok = json_array_append_new(arr, call_json(&calls[k], id_base, choice, k)) == 0;
        if (ok)
            msg = json_pack("{s:s, s:o?, s:O}", "role", "assistant", "content",
                            hi > lo ? serve_json_text(s + lo, hi - lo) : json_null(), "tool_calls", arr);
        if (msg)
            *called = keep;
    }
    json_decref(arr);
    free(b.p);
    rlpi_tool_calls_free(calls, n);
    return msg;
}
