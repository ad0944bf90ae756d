#!/usr/bin/env python3
"""Reference token ids for the tokenizer tests, from independent encoders.

Writes JSONL files, one object per line, {"text": ..., "ids": [...]} and,
where encoding with special-token matching off differs, "ids_plain": [...]:
  fixtures/qwen3.jsonl    Hugging Face `tokenizers` with Qwen3's tokenizer.json
  fixtures/smollm2.jsonl  `tokenizers` with fixtures/smollm2/tokenizer.json
  fixtures/llama3style.jsonl  SmolLM2's vocabulary with Llama-3's split regex
                          and ignore_merges (no Llama-3 file is redistributable)
  fixtures/chat_*.jsonl   transformers' apply_chat_template with each model's
                          Jinja template: {messages, add_generation_prompt,
                          text, ids}, ids from `tokenizers` on the text
  fixtures/llama2c.jsonl  `sentencepiece` with Llama 2's tokenizer.model
                          (what llama2.c's tokenizer.bin was exported from)
"ids" are encode(text, add_special_tokens=False) (special-token text is
matched); "decoded" is the reference decode where it is not the text
(NFC, SentencePiece whitespace); "ids_plain" are the same with encode_special_tokens=True.

Strings: GSM8K questions and answers (first of test.jsonl, then train.jsonl)
plus hand-written edge cases: CJK, emoji (ZWJ sequences, flags), combining
marks (NFC and decomposed), whitespace runs, tabs, CRLF, digits, code,
contractions in capitals, and text that spells special tokens.

Rerun (takes a few seconds):
    pip install tokenizers transformers gguf sentencepiece
    python3 tests/reference/make_tokenizer_fixtures.py \
        --gsm8k ../shared/data/gsm8k \
        --qwen3 ../shared/data/tokenizers/qwen3/tokenizer.json \
        --llama2c-model ../shared/data/llama2c/tokenizer.model \
        --out tests/reference/fixtures
(fixtures/smollm2/tokenizer.json comes from make_smollm2_tokenizer_json.py.)
"""
import argparse
import json
import os

N_QUESTIONS = 1050
N_ANSWERS = 700
N_LLAMA2C = 400

EDGE = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "a  b", "a   b", "a\t\tb",
    "trailing   ", "   leading", "x \n\n\n y", "line1\r\nline2\r\n", "\u00a0nbsp\u00a0",
    "Hello, world!", "HELLO WORLD", "I'M HERE, DON'T GO", "we'll they've she'd you're it's",
    "0", "7", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-42",
    "$18.50", "48/2 = <<48/2=24>>24", "#### 72", "x^2 + y^2 = z^2", "1e-5", "0x1F",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "if a != b and c >= d:", "std::vector<int> v{1, 2, 3};", "SELECT * FROM t WHERE id=7;",
    "<html><body>Hi</body></html>", "https://example.com/a?b=c&d=e", "a_b_c __init__ --flag",
    "你好，世界！", "今天天气很好。我们去公园吧", "日本語のテキストです", "한국어 텍스트", "龘", "A 龘b",
    "A 🦙b", "🦙", "😀😃😄", "👍🏽", "👨\u200d👩\u200d👧\u200d👦 family", "🇫🇷🇩🇪", "emoji 🎉 party 🥳!",
    "e\u0301", "cafe\u0301", "caf\u00e9", "n\u0303", "A\u030a", "\u1e9b\u0323",
    "Zalgo: Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319",
    "ﬁ ligature", "Ω ≈ ç √ ∫ ≤ ≥", "Ünïcödé", "Straße", "naïve résumé", "Привет, мир!",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Ελληνικά",
    "<|im_end|>", "<|im_start|>", "Hi<|im_end|>\n<|im_start|>system\nReply only OK",
    "<|endoftext|>", "text<|endoftext|>more", "<|im_start|>user\nhello<|im_end|>",
    "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{}</tool_call>", "<|fake|>",
    "<|im_end", "im_end|>", "<<|im_end|>>", "<s></s>", "[INST] hi [/INST]",
    "<|begin_of_text|><|start_header_id|>", "<repo_name>x<file_sep>", "<|im_end|><|im_end|>",
    "\u200b zero width", "tab\there", "mixed 中文 and English 123 words", "ĠĊ literal",
    "end with newline\n", "  \n  \n", "!!!???...", "----====", "'''\"\"\"", "`code`",
]


def edge_strings():
    out = list(EDGE)
    # combinations to reach pre-tokenizer corners
    for a in ["Hi", " 12", "中", "🦙", "'s", "\n", "  ", "<|im_end|>", "x1y2"]:
        for b in ["there", "34", "文", "!", "'LL", "\r\n", "\t", "é", " 🎉"]:
            out.append(a + b)
            out.append(a + " " + b)
    return out


def gsm8k(path):
    rows = []
    for name in ["test.jsonl", "train.jsonl"]:
        with open(os.path.join(path, name), encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    q = [r["question"] for r in rows[:N_QUESTIONS]]
    a = [r["answer"] for r in rows[:N_ANSWERS]]
    return q + a


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(path, len(rows), os.path.getsize(path))


def hf_rows(tok_path, texts):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    rows = []
    for t in texts:
        tok.encode_special_tokens = False
        ids = tok.encode(t, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(t, add_special_tokens=False).ids
        r = {"text": t, "ids": ids}
        if plain != ids:
            r["ids_plain"] = plain
        dec = tok.decode(ids, skip_special_tokens=False)
        if dec != t:
            r["decoded"] = dec
        rows.append(r)
    return rows


CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "  What is 2+2?  \n"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "2+2?"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nb"},
     {"role": "user", "content": "c"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nb"},
     {"role": "user", "content": "c"}, {"role": "assistant", "content": "\n\nd"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "u1"},
     {"role": "assistant", "content": "a1"}, {"role": "system", "content": "S2"},
     {"role": "user", "content": "u2"}],
    [{"role": "user", "content": "你好 🦙 e\u0301"}, {"role": "assistant", "content": "  spaced  "}],
]


def chat_rows(tok_path, template):
    """Reference chat rendering: transformers' apply_chat_template (Jinja)."""
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer
    hf = PreTrainedTokenizerFast(tokenizer_file=tok_path)
    hf.chat_template = template
    tok = Tokenizer.from_file(tok_path)
    rows = []
    for conv in CONVERSATIONS:
        for gen in (True, False):
            text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            rows.append({"messages": conv, "add_generation_prompt": gen, "text": text,
                         "ids": tok.encode(text, add_special_tokens=False).ids})
    return rows


LLAMA3_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def llama3_style(smollm2_path):
    """SmolLM2's vocabulary behind Llama-3's pre-tokenizer (Split with its
    regex, then ByteLevel without regex) and ignore_merges, as Meta's
    Llama-3 tokenizer.json has them. The test builds the same file."""
    d = json.load(open(smollm2_path, encoding="utf-8"))
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}
    d["model"]["ignore_merges"] = True
    return json.dumps(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--qwen3", required=True)
    ap.add_argument("--smollm2", default=os.path.join(os.path.dirname(__file__),
                                                      "fixtures/smollm2/tokenizer.json"))
    ap.add_argument("--llama2c-model", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    texts = edge_strings() + gsm8k(a.gsm8k)
    os.makedirs(a.out, exist_ok=True)
    write(os.path.join(a.out, "qwen3.jsonl"), hf_rows(a.qwen3, texts))
    write(os.path.join(a.out, "smollm2.jsonl"), hf_rows(a.smollm2, texts))

    from tokenizers import Tokenizer
    l3 = Tokenizer.from_str(llama3_style(a.smollm2))
    l3texts = edge_strings() + gsm8k(a.gsm8k)[:300]
    write(os.path.join(a.out, "llama3style.jsonl"),
          [{"text": t, "ids": l3.encode(t, add_special_tokens=False).ids} for t in l3texts])
    qcfg = os.path.join(os.path.dirname(a.qwen3), "tokenizer_config.json")
    scfg = os.path.join(os.path.dirname(a.smollm2), "tokenizer_config.json")
    write(os.path.join(a.out, "chat_qwen3.jsonl"),
          chat_rows(a.qwen3, json.load(open(qcfg))["chat_template"]))
    write(os.path.join(a.out, "chat_smollm2.jsonl"),
          chat_rows(a.smollm2, json.load(open(scfg))["chat_template"]))

    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=a.llama2c_model)
    ltexts = [t for t in edge_strings() if "<" not in t] + gsm8k(a.gsm8k)[:N_LLAMA2C // 2] + \
        gsm8k(a.gsm8k)[N_QUESTIONS:N_QUESTIONS + N_LLAMA2C // 2]
    write(os.path.join(a.out, "llama2c.jsonl"),
          [dict({"text": t, "ids": sp.encode(t)},
                **({"decoded": sp.decode(sp.encode(t))} if sp.decode(sp.encode(t)) != t else {}))
           for t in ltexts])


if __name__ == "__main__":
    main()
