/* Tool calls in generated text: the Hermes <tool_call>{json}</tool_call>
 * blocks and the ASearcher <search>/<access>/<answer> tags. Parses only:
 * nothing here runs a tool or allocates beyond the returned calls, and
 * the scans stay linear in the text so a hostile completion costs little. */
#include "tools/tool_call.h"

#include "core/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>";
static const char CLOSE[] = "</tool_call>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static const char *find(const char *s, size_t n, const char *pat, size_t m)
{
    if (m == 0 || n < m)
        return NULL;
    const char *end = s + n - m + 1;
    for (const char *p = s; p < end;) {
        p = memchr(p, pat[0], (size_t)(end - p));
        if (!p)
            return NULL;
        if (memcmp(p, pat, m) == 0)
            return p;
        p++;
    }
    return NULL;
}

/* The arguments as compact object text: an object as it is, a string
 * that holds an object (some models encode them so, like OpenAI's wire
 * format), "{}" for absent or null. NULL when they are anything else or
 * memory ran out (*nomem tells which). */
static char *arguments_text(json_t *args, int *nomem)
{
    *nomem = 0;
    if (!args || json_is_null(args)) {
        char *s = strdup("{}");
        *nomem = s == NULL;
        return s;
    }
    json_t *obj = args;
    json_t *decoded = NULL;
    if (json_is_string(args)) {
        decoded = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        if (!decoded || !json_is_object(decoded)) {
            json_decref(decoded);
            return NULL;
        }
        obj = decoded;
    } else if (!json_is_object(args)) {
        return NULL;
    }
    char *s = json_dumps(obj, JSON_COMPACT);
    json_decref(decoded);
    *nomem = s == NULL;
    return s;
}

/* Parses one call body starting at text[b] (the JSON may run on; the
 * decoder stops at the object's end, so "</tool_call>" inside a JSON
 * string does not cut it). On success fills *call and *json_end. Returns
 * 1 parsed, 0 not a valid call, -1 out of memory. */
static int parse_body(const char *text, size_t len, size_t b, rlpi_tool_call *call, size_t *json_end)
{
    while (b < len && is_space((unsigned char)text[b]))
        b++;
    if (b >= len || text[b] != '{')
        return 0;
    json_error_t err;
    json_t *root = json_loadb(text + b, len - b, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return 0;
    *json_end = b + (size_t)err.position;
    /* jansson reports the position after one character of lookahead when
     * the object is followed by more text; step back over what is not
     * part of the object so the close tag is found where it starts. */
    while (*json_end > b && text[*json_end - 1] != '}')
        (*json_end)--;
    json_t *name = json_object_get(root, "name");
    if (!json_is_string(name) || json_string_length(name) == 0) {
        json_decref(root);
        return 0;
    }
    int nomem = 0;
    char *args = arguments_text(json_object_get(root, "arguments"), &nomem);
    if (!args) {
        json_decref(root);
        return nomem ? -1 : 0;
    }
    char *nm = strdup(json_string_value(name));
    json_decref(root);
    if (!nm) {
        free(args);
        return -1;
    }
    call->name = nm;
    call->arguments = args;
    return 1;
}

int rlpi_tool_calls_parse_hermes(rlpi_tool_call **out, size_t *n_out, size_t *n_bad, const char *text, size_t len)
{
    RLPI_CHECK_ARG(out && n_out, "out and n_out must not be NULL");
    RLPI_CHECK_ARG(text || len == 0, "text is NULL");
    *out = NULL;
    *n_out = 0;
    if (n_bad)
        *n_bad = 0;
    rlpi_tool_call *calls = NULL;
    size_t n = 0, cap = 0, bad = 0;
    size_t i = 0;
    while (i < len) {
        const char *o = find(text + i, len - i, OPEN, OPEN_LEN);
        if (!o)
            break;
        size_t start = (size_t)(o - text);
        size_t b = start + OPEN_LEN;
        rlpi_tool_call call = {0};
        size_t json_end = 0;
        int r = parse_body(text, len, b, &call, &json_end);
        if (r < 0)
            goto nomem;
        size_t end = 0;
        if (r == 1) {
            /* The object must be followed by only whitespace, then the
             * close tag or the end of the text (an unclosed last block). */
            size_t k = json_end;
            while (k < len && is_space((unsigned char)text[k]))
                k++;
            if (k + CLOSE_LEN <= len && memcmp(text + k, CLOSE, CLOSE_LEN) == 0) {
                end = k + CLOSE_LEN;
            } else if (k == len) {
                end = len;
            } else {
                free(call.name);
                free(call.arguments);
                r = 0;
            }
        }
        if (r == 0) {
            bad++;
            const char *c = find(text + b, len - b, CLOSE, CLOSE_LEN);
            i = c ? (size_t)(c - text) + CLOSE_LEN : len;
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 4;
            rlpi_tool_call *p = realloc(calls, nc * sizeof *p);
            if (!p) {
                free(call.name);
                free(call.arguments);
                goto nomem;
            }
            calls = p;
            cap = nc;
        }
        call.start = start;
        call.end = end;
        calls[n++] = call;
        i = end;
    }
    *out = calls;
    *n_out = n;
    if (n_bad)
        *n_bad = bad;
    return RLP_OK;
nomem:
    rlpi_tool_calls_free(calls, n);
    return rlpi_error_set(RLP_E_NOMEM, "tool calls: out of memory");
}

void rlpi_tool_calls_free(rlpi_tool_call *calls, size_t n)
{
    if (!calls)
        return;
    for (size_t i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}

static const struct {
    const char *open, *close;
    size_t open_len, close_len;
    rlpi_tag_kind kind;
} TAGS[] = {
    {"<search>", "</search>", 8, 9, RLPI_TAG_SEARCH},
    {"<access>", "</access>", 8, 9, RLPI_TAG_ACCESS},
    {"<answer>", "</answer>", 8, 9, RLPI_TAG_ANSWER},
};
#define N_TAGS (sizeof TAGS / sizeof TAGS[0])

rlpi_tag_kind rlpi_tag_action_parse(const char *text, size_t len, size_t *body, size_t *body_len)
{
    *body = 0;
    *body_len = 0;
    if (!text)
        return RLPI_TAG_NONE;
    /* Where each close tag last occurs: an open tag after it can never be
     * completed, so the scan skips it without searching to the end (which
     * would make "<search>" repeated n times quadratic). */
    size_t last_close[N_TAGS];
    int has_close[N_TAGS];
    for (size_t t = 0; t < N_TAGS; t++) {
        has_close[t] = 0;
        const char *p = text;
        size_t rest = len;
        const char *c;
        while ((c = find(p, rest, TAGS[t].close, TAGS[t].close_len)) != NULL) {
            has_close[t] = 1;
            last_close[t] = (size_t)(c - text);
            rest -= (size_t)(c - p) + 1;
            p = c + 1;
        }
    }
    rlpi_tag_kind kind = RLPI_TAG_NONE;
    size_t bb = 0, be = 0;
    size_t i = 0;
    while (i < len) {
        const char *lt = memchr(text + i, '<', len - i);
        if (!lt)
            break;
        size_t pos = (size_t)(lt - text);
        int matched = 0;
        for (size_t t = 0; t < N_TAGS && !matched; t++) {
            if (pos + TAGS[t].open_len > len || memcmp(lt, TAGS[t].open, TAGS[t].open_len) != 0)
                continue;
            size_t b = pos + TAGS[t].open_len;
            if (!has_close[t] || last_close[t] < b)
                break;
            const char *c = find(text + b, len - b, TAGS[t].close, TAGS[t].close_len);
            /* c exists: last_close[t] >= b */
            size_t e = (size_t)(c - text);
            kind = TAGS[t].kind;
            bb = b;
            be = e;
            i = e + TAGS[t].close_len;
            matched = 1;
        }
        if (!matched)
            i = pos + 1;
    }
    if (kind == RLPI_TAG_NONE)
        return kind;
    while (bb < be && is_space((unsigned char)text[bb]))
        bb++;
    while (be > bb && is_space((unsigned char)text[be - 1]))
        be--;
    *body = bb;
    *body_len = be - bb;
    return kind;
}
