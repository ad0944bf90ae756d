#!/usr/bin/env python3
"""Seeds of fuzz_gguf_tokenizer: small GGUF files (metadata only, no
tensors) whose tokenizer.ggml.* keys describe a byte-level BPE tokenizer
(for each pre-tokenizer and chat template the library knows) or a
SentencePiece one, written by hand from the GGUF v3 layout so the seeds
need no package. Regenerate (from the repository root):
    python3 tests/fuzz/make_gguf_tokenizer_seeds.py
Writes tests/fuzz/corpus/gguf_tokenizer/seed_*.gguf (deterministic)."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf_tokenizer")
U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9


def s(x):
    b = x.encode("utf-8") if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == U32:
        return struct.pack("<I", v)
    if t == I32:
        return struct.pack("<i", v)
    if t == F32:
        return struct.pack("<f", v)
    if t == BOOL:
        return struct.pack("<B", 1 if v else 0)
    if t == STR:
        return s(v)
    raise ValueError(t)


def gguf(kvs):
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, t, v in kvs:
        out += s(key)
        if isinstance(t, tuple):  # (ARR, elem type)
            out += struct.pack("<IIQ", ARR, t[1], len(v)) + b"".join(val(t[1], x) for x in v)
        else:
            out += struct.pack("<I", t) + val(t, v)
    return out


def byte_tokens():
    """GPT-2's bytes_to_unicode, in byte order."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra, toks = 0, []
    for b in range(256):
        if b in bs:
            toks.append(chr(b))
        else:
            toks.append(chr(256 + extra))
            extra += 1
    return toks


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
SMOLLM = ("{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant "
          "named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}" + CHATML)
QWEN3 = CHATML + "{% if message.reasoning_content %}<think>\\n{{ reasoning_content }}\\n</think>{% endif %}"
LLAMA3 = ("{{ '<|begin_of_text|>' }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] +"
          " '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}")
LLAMA2 = "{% for message in messages %}{{ bos_token + '[INST] <<SYS>>\\n' + message['content'] + ' [/INST]' }}{% endfor %}"


def bpe(pre, template, specials, bos, eos):
    toks = byte_tokens()
    merges = ["Ġ t", "h e", "i n", "Ġt he", "e r", "o n", "Ġ a", "Ġ w", "o r", "l d", "Ġw or", "Ġwor ld", "1 2"]
    toks += [m.replace(" ", "") for m in merges]
    types = [1] * len(toks) + [3] * len(specials)
    toks += specials
    kvs = [("general.architecture", STR, "llama"), ("tokenizer.ggml.model", STR, "gpt2")]
    if pre:
        kvs.append(("tokenizer.ggml.pre", STR, pre))
    kvs += [("tokenizer.ggml.tokens", (ARR, STR), toks), ("tokenizer.ggml.token_type", (ARR, I32), types),
            ("tokenizer.ggml.merges", (ARR, STR), merges)]
    if bos is not None:
        kvs.append(("tokenizer.ggml.bos_token_id", U32, toks.index(bos)))
    if eos is not None:
        kvs.append(("tokenizer.ggml.eos_token_id", U32, toks.index(eos)))
    if template:
        kvs.append(("tokenizer.chat_template", STR, template))
    return gguf(kvs)


def spm():
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    pieces = ["▁", "▁t", "he", "▁the", "in", "▁w", "or", "ld", "▁wor", "▁world", "1", "2", "H", "e", "l", "o",
              "▁H", "ll", "▁Hello"]
    toks += pieces
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    return gguf([("general.architecture", STR, "llama"), ("tokenizer.ggml.model", STR, "llama"),
                 ("tokenizer.ggml.tokens", (ARR, STR), toks), ("tokenizer.ggml.scores", (ARR, F32), scores),
                 ("tokenizer.ggml.token_type", (ARR, I32), types),
                 ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
                 ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True),
                 ("tokenizer.ggml.add_space_prefix", BOOL, True), ("tokenizer.chat_template", STR, LLAMA2)])


def main():
    os.makedirs(OUT, exist_ok=True)
    im = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    seeds = {
        "smollm_chatml": bpe("smollm", SMOLLM, im, "<|im_start|>", "<|im_end|>"),
        "qwen2_chatml": bpe("qwen2", CHATML, im, None, "<|endoftext|>"),
        "qwen3": bpe("qwen2", QWEN3, im + ["<think>", "</think>"], None, "<|im_end|>"),
        "llama3": bpe("llama-bpe", LLAMA3,
                      ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                       "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>"),
        "gpt2_plain": bpe(None, None, ["<|endoftext|>"], None, "<|endoftext|>"),
        "spm_llama2": spm(),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, "seed_%s.gguf" % name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
