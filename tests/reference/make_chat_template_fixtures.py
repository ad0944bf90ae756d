#!/usr/bin/env python3
"""Reference renderings of the Gemma 3 chat template and of Qwen3's with
enable_thinking=False.

Writes, one object per line,
  {"messages": [...], "add_generation_prompt": bool, "text": str, "ids": [...]}
(and "enable_thinking": false on the Qwen3 rows):
  fixtures/chat_gemma3.jsonl          transformers' apply_chat_template with
      GEMMA3_TEMPLATE below (google/gemma-3-*-it's chat template, as in its
      tokenizer_config.json / chat_template.json) and bos_token "<bos>";
      "ids" are llama.cpp's tokenizer (llama-cpp-python, vocab only) on the
      text with special tokens parsed and no BOS added, from
      models/gemma-3-270m-q4_k_m.gguf.
  fixtures/chat_qwen3_nothink.jsonl   the same with Qwen3's own template
      (tokenizer_config.json beside --qwen3) and enable_thinking=False;
      "ids" from `tokenizers` with Qwen3's tokenizer.json.
tests/unit/test_chat_template.c renders each conversation with our code
("gemma3" through the real GGUF's tokenizer, skipped when absent; "qwen3"
through ../shared/data's Qwen3 tokenizer) and compares the ids.
GEMMA3_TEMPLATE must stay the same text as jinja_gemma3 in
lib/model/chat_template_jinja.c (bindings/python/tests/test_chat_template.py
renders that one with jinja2 and compares it with our rendering).

Rerun (a few seconds):
    pip install transformers jinja2 tokenizers llama-cpp-python
    python3 tests/reference/make_chat_template_fixtures.py \
        --qwen3 ../shared/data/tokenizers/qwen3/tokenizer.json \
        --gemma3-gguf models/gemma-3-270m-q4_k_m.gguf --out tests/reference/fixtures
"""
import argparse
import json
import os

GEMMA3_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}"""


def U(c):
    return {"role": "user", "content": c}


def A(c):
    return {"role": "assistant", "content": c}


def S(c):
    return {"role": "system", "content": c}


# system+user, multi-turn, whitespace-edged content (trimmed; a system
# message is not), no system, unicode, special-token text in content
GEMMA3_CONVERSATIONS = [
    [U("Hi")],
    [S("You are a helpful assistant."), U("What is 2+2?")],
    [S("Be brief."), U("Name a colour."), A("Blue."), U("Another?")],
    [U("  What is 2+2?  \n"), A("\n\n 4 \n"), U("\tand 3+3?\n")],
    [S("  spaced system  \n"), U(" hi ")],
    [U("a"), A("b"), U("c"), A("d")],
    [U("你好 🦙 e\u0301"), A("  spaced  ")],
    [U("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
       "in May. How many clips did Natalia sell altogether in April and May?")],
    [S("Reason step by step.\n"), U("Line one.\n\nLine two:\n- a\n- b")],
    [S(""), U("empty system")],
]

QWEN3_CONVERSATIONS = [
    [U("Hi")],
    [S("You are a helpful assistant."), U("What is 2+2?")],
    [U("What is 2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("And 3+3?")],
    [S("S"), U("u1"), A("a1"), U("u2")],
    [U("  What is 2+2?  \n")],
]


def rows(template, convs, encode, **kw):
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models
    hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), bos_token="<bos>")
    out = []
    for conv in convs:
        for gen in (True, False):
            if not gen and conv[-1]["role"] != "assistant" and kw:
                continue  # enable_thinking only changes the generation prompt
            text = hf.apply_chat_template(conv, chat_template=template, tokenize=False,
                                          add_generation_prompt=gen, **kw)
            row = {"messages": conv, "add_generation_prompt": gen}
            row.update({k: v for k, v in kw.items()})
            row.update({"text": text, "ids": encode(text)})
            out.append(row)
    return out


def write(path, rs):
    with open(path, "w", encoding="utf-8") as f:
        for r in rs:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"{path}: {len(rs)} rows")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen3", required=True, help="Qwen3's tokenizer.json")
    ap.add_argument("--gemma3-gguf", required=True, help="models/gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    from llama_cpp import Llama
    gem = Llama(model_path=a.gemma3_gguf, vocab_only=True, verbose=False)
    write(os.path.join(a.out, "chat_gemma3.jsonl"),
          rows(GEMMA3_TEMPLATE, GEMMA3_CONVERSATIONS,
               lambda t: gem.tokenize(t.encode("utf-8"), add_bos=False, special=True)))

    from tokenizers import Tokenizer
    qtok = Tokenizer.from_file(a.qwen3)
    with open(os.path.join(os.path.dirname(a.qwen3), "tokenizer_config.json"), encoding="utf-8") as f:
        qwen3_template = json.load(f)["chat_template"]
    write(os.path.join(a.out, "chat_qwen3_nothink.jsonl"),
          rows(qwen3_template, QWEN3_CONVERSATIONS,
               lambda t: qtok.encode(t, add_special_tokens=False).ids, enable_thinking=False))


if __name__ == "__main__":
    main()
