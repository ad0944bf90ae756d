/* OpenAI tool calling in `rlpost serve`: the request's "tools" and
 * "tool_choice" checked, tool definitions and an assistant's tool_calls
 * written into the text the chat template renders (Qwen2.5's Hermes form),
 * and a completion's <tool_call> blocks turned back into an OpenAI
 * message. Pure functions over jansson values; no server state. */
#ifndef RLPOST_SERVE_TOOLS_H
#define RLPOST_SERVE_TOOLS_H

#include <jansson.h>
#include <stddef.h>

typedef struct serve_tools {
    const json_t *tools; /* the request's "tools" (borrowed), NULL when absent or empty */
    int parse;           /* 1: completions' <tool_call> blocks become tool_calls ("auto") */
    int parallel;        /* parallel_tool_calls: 0 keeps only the first call */
} serve_tools;

/* Checks "tools", "tool_choice" and "parallel_tool_calls" of a chat
 * request body. 0, or -1 with a message naming the field in err. */
int serve_tools_parse(serve_tools *out, const json_t *req, char *err, size_t errlen);

/* The system message content the chat template `template_name` (as
 * rlp_tokenizer_chat_template() names it) gets when the request has tools:
 * the request's system message (`system`, NULL when it has none; Qwen2.5's
 * default for "chatml" and SmolLM2's for "smollm2") followed by the
 * "# Tools" block of Qwen2.5/Qwen3 with each tool as JSON. malloc'd, NULL
 * when out of memory. */
char *serve_tools_system(const char *template_name, const char *system, const json_t *tools);

/* An assistant message's content with its "tool_calls" appended as Qwen2.5
 * writes them ("\n<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>",
 * arguments given as a JSON string decoded first, as vLLM does). `i` names
 * the message in errors. malloc'd, or NULL with the message in err. */
char *serve_tools_assistant(const char *content, const json_t *tool_calls, size_t i, char *err, size_t errlen);

/* The OpenAI message of a chat completion's text: {"role": "assistant",
 * "content": …} and, when `parse` and the text holds <tool_call> blocks,
 * "tool_calls" [{"id": "call_…", "type": "function", "function": {"name",
 * "arguments": JSON text}}] with "content" the text outside the blocks
 * (trimmed; null when empty). Call ids derive from id_base and choice.
 * *called is set to the number of calls. NULL when out of memory. */
json_t *serve_tools_message(const char *text, size_t len, int parse, int parallel, const char *id_base, size_t choice,
                            size_t *called);

/* v as Python's json.dumps(v, ensure_ascii=False) writes it (the "tojson"
 * of transformers' chat templates): ", " and ": " separators, key order
 * kept, floats in their shortest round-trip form. malloc'd, or NULL. */
char *serve_tools_pyjson(const json_t *v);

#endif
