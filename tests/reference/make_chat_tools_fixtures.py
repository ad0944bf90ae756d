#!/usr/bin/env python3
"""Reference prompts of `rlpost serve` chat requests with tools.

Writes fixtures/chat_qwen25_tools.jsonl, chat_qwen3_tools.jsonl and
chat_qwen3_tools_nothink.jsonl, one object per line:
  {"request": {"messages": [...], "tools": [...]?}, "add_generation_prompt": bool,
   "text": str, "ids": [...]}
"request" is what an OpenAI client sends (tool_calls' arguments as JSON
text, content null beside tool calls); "text" is transformers'
apply_chat_template with Qwen2.5-Instruct's Jinja template (below, as in
Qwen/Qwen2.5-*-Instruct's tokenizer_config.json), or with Qwen3's (from
the tokenizer_config.json beside --qwen3), after vLLM's
preprocessing (tool_calls' arguments decoded into objects); the
_nothink file's requests ask for Qwen3's non-thinking mode, alternately as
vLLM's "chat_template_kwargs": {"enable_thinking": false} and as a
top-level "enable_thinking": false, and its text is rendered with
enable_thinking=False; "ids" are
`tokenizers` on the text with Qwen3's tokenizer.json (the same byte-level
vocabulary and <tool_call>/<tool_response> tokens as Qwen2.5).

tests/unit/test_serve_tools.c sends each request through the server's
request parser with the "chatml" (or "qwen3") template and checks the decoded prompt
equals "text" exactly (with a tokenizer committed in fixtures/) and, when
../shared/data has Qwen3's tokenizer, the ids too.

Rerun (a few seconds):
    pip install transformers jinja2 tokenizers
    python3 tests/reference/make_chat_tools_fixtures.py \
        --qwen3 ../shared/data/tokenizers/qwen3/tokenizer.json --out tests/reference/fixtures
"""
import argparse
import copy
import json
import os

QWEN25_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather in a city — temperature in °C.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "e.g. \"Paris\" or 東京"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search",
    "description": "Search the corpus.\nReturns passages.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "top_k": {"type": "integer", "default": 3},
        "min_score": {"type": "number", "minimum": 0.1, "maximum": 1.0, "default": 1e-07},
        "filters": {"type": "array", "items": {"type": "string"}},
        "exact": {"type": "boolean", "default": False},
        "lang": {"type": ["string", "null"], "default": None}}}}}
NOPARAMS = {"type": "function", "function": {"name": "now"}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def cases():
    sys = {"role": "system", "content": "You are a careful assistant."}
    q = {"role": "user", "content": "What's the weather in Paris?"}
    c1 = call("call_1", "get_weather", "{\"city\": \"Paris\", \"unit\": \"celsius\"}")
    yield {"messages": [sys, q], "tools": [WEATHER, SEARCH]}
    yield {"messages": [q], "tools": [WEATHER]}
    yield {"messages": [q], "tools": [NOPARAMS, WEATHER, SEARCH]}
    yield {"messages": [sys, q, {"role": "assistant", "content": None, "tool_calls": [c1]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"clear\"}"}],
           "tools": [WEATHER]}
    # content beside two calls (compact and odd argument text), two results in one turn, an answer, a follow-up
    two = [call("a", "get_weather", "{\"city\":\"Paris\",\"days\":3}"),
           call("b", "search", " {\"query\": \"Paris\\nweather \\\"today\\\"\", \"min_score\": 0.5,"
                               " \"filters\": [\"news\", \"météo\"], \"exact\": true, \"lang\": null,"
                               " \"nested\": {\"x\": [1, 2.25, -0.0, 1e20, 1e-05, 123456789.125]}} ")]
    conv = [sys, q, {"role": "assistant", "content": "Let me check both.", "tool_calls": two},
            {"role": "tool", "tool_call_id": "a", "content": "18°C"},
            {"role": "tool", "tool_call_id": "b", "content": "Sunny.\n<b>2 passages</b>"},
            {"role": "assistant", "content": "It is 18°C and sunny in Paris."},
            {"role": "user", "content": "And tomorrow?"}]
    yield {"messages": conv, "tools": [WEATHER, SEARCH]}
    # no tools in the request, tool turns still rendered; arguments absent or empty
    yield {"messages": [sys, q, {"role": "assistant", "content": "", "tool_calls": [call("c", "now", "")]},
                        {"role": "tool", "content": "12:00"}]}
    yield {"messages": [sys, q, {"role": "assistant", "content": None,
                                 "tool_calls": [{"type": "function", "function": {"name": "now"}}]},
                        {"role": "tool", "content": "12:00"}, {"role": "tool", "content": ""}],
           "tools": [NOPARAMS]}
    # an empty system message with tools
    yield {"messages": [{"role": "system", "content": ""}, q], "tools": [SEARCH]}


def vllm_messages(msgs):
    """vLLM decodes tool_calls' JSON-text arguments before the template
    (and a null content is "", which Qwen3's template needs)."""
    out = copy.deepcopy(msgs)
    for m in out:
        if m.get("content") is None:
            m["content"] = ""
        for tc in m.get("tool_calls") or []:
            fn = tc["function"]
            a = fn.get("arguments")
            fn["arguments"] = json.loads(a) if isinstance(a, str) and a.strip() else (a or {})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen3", required=True, help="Qwen3's tokenizer.json")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_file=a.qwen3)
    tok = Tokenizer.from_file(a.qwen3)
    with open(os.path.join(os.path.dirname(a.qwen3), "tokenizer_config.json"), encoding="utf-8") as f:
        qwen3_template = json.load(f)["chat_template"]
    for name, template in (("chat_qwen25_tools.jsonl", QWEN25_TEMPLATE), ("chat_qwen3_tools.jsonl", qwen3_template)):
        rows = []
        for req in cases():
            for gen in (True, False):
                if not gen and req["messages"][-1]["role"] == "user":
                    continue
                text = hf.apply_chat_template(vllm_messages(req["messages"]), tools=req.get("tools"),
                                              chat_template=template, tokenize=False,
                                              add_generation_prompt=gen)
                rows.append({"request": req, "add_generation_prompt": gen, "text": text,
                             "ids": tok.encode(text, add_special_tokens=False).ids})
        write(os.path.join(a.out, name), rows)
    rows = []
    for k, req in enumerate(cases()):
        req = dict(req)
        if k % 2 == 0:
            req["chat_template_kwargs"] = {"enable_thinking": False}
        else:
            req["enable_thinking"] = False
        text = hf.apply_chat_template(vllm_messages(req["messages"]), tools=req.get("tools"),
                                      chat_template=qwen3_template, tokenize=False,
                                      add_generation_prompt=True, enable_thinking=False)
        rows.append({"request": req, "add_generation_prompt": True, "text": text,
                     "ids": tok.encode(text, add_special_tokens=False).ids})
    write(os.path.join(a.out, "chat_qwen3_tools_nothink.jsonl"), rows)


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{path}: {len(rows)} requests")


if __name__ == "__main__":
    main()
