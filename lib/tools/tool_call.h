/* Tool calls in a model's text, parsed without running anything: the
 * Qwen/Hermes form "<tool_call>{"name": …, "arguments": {…}}</tool_call>"
 * that `rlpost serve` turns into OpenAI tool_calls and the built-in tool
 * environment runs. Pure functions over bytes (fuzzed); no I/O. */
#ifndef RLPI_TOOLS_TOOL_CALL_H
#define RLPI_TOOLS_TOOL_CALL_H

#include <stddef.h>

typedef struct rlpi_tool_call {
    char *name;       /* owned, NUL-terminated */
    char *arguments;  /* owned: the arguments as compact JSON object text ("{}" when absent) */
    size_t start;     /* byte offset of "<tool_call>" in the text */
    size_t end;       /* byte offset just past "</tool_call>" (or the text's end when unclosed) */
} rlpi_tool_call;

/* Parses every <tool_call>…</tool_call> block of text[0, len) in order.
 * A block whose body is not a JSON object with a string "name" and an
 * object (or JSON-string-encoded object) "arguments" is skipped and
 * counted in *n_bad (may be NULL). An unclosed last block is parsed when
 * its body is complete JSON. *out is malloc'd (NULL when none); free with
 * rlpi_tool_calls_free(). RLP_OK or RLP_E_NOMEM. */
int rlpi_tool_calls_parse_hermes(rlpi_tool_call **out, size_t *n_out, size_t *n_bad, const char *text, size_t len);

void rlpi_tool_calls_free(rlpi_tool_call *calls, size_t n);

/* ASearcher-style action tags. */
typedef enum rlpi_tag_kind {
    RLPI_TAG_NONE = 0,
    RLPI_TAG_SEARCH = 1, /* <search>query</search> */
    RLPI_TAG_ACCESS = 2, /* <access>document title or id</access> */
    RLPI_TAG_ANSWER = 3  /* <answer>final answer</answer> */
} rlpi_tag_kind;

/* Finds the last complete <search>, <access> or <answer> block of
 * text[0, len): the one whose closing tag ends last, where each block
 * ends at the first matching close after its open (tags are
 * case-sensitive; an unclosed open tag is ignored). Returns its kind and
 * the body's byte range [*body, *body + *body_len) with ASCII whitespace
 * trimmed, or RLPI_TAG_NONE (body and body_len set to 0). Linear time,
 * no allocation; body and body_len must not be NULL. */
rlpi_tag_kind rlpi_tag_action_parse(const char *text, size_t len, size_t *body, size_t *body_len);

#endif
