#!/usr/bin/env python3
"""One-off check of the Llama-2-style tokenizer.json path against HF tokenizers.

No Llama-2 tokenizer.json is shipped here, so this builds two from Llama 2's
tokenizer.model (vocab and merges by transformers' SentencePieceExtractor):
one with the Prepend+Replace normalizer, one with the Metaspace
pre-tokenizer (the two ways HF files spell Llama's spaces). For each it
writes HF `tokenizers` ids for the edge strings and 1,000 GSM8K strings as
fixtures/llama2c.jsonl in a scratch source tree whose
../shared/data/llama2c/tokenizer.bin is that tokenizer.json (the loader
detects JSON by content), and runs the built test_tokenizer_ref there.

Rerun:
    pip install tokenizers transformers sentencepiece protobuf
    python3 tests/reference/check_llama2_tokenizer_json.py \
        --model ../shared/data/llama2c/tokenizer.model --gsm8k ../shared/data/gsm8k \
        --test build/tests/test_tokenizer_ref --scratch /tmp/llama2json
It prints the test's summary line for each form; both should say every
string matches.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import make_tokenizer_fixtures as m  # noqa: E402

SPACE = "\u2581"


def build(model_path, variant):
    from transformers.convert_slow_tokenizer import SentencePieceExtractor
    from tokenizers.models import BPE
    r = SentencePieceExtractor(model_path).extract(BPE)
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
    meta = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i, c in [(0, "<unk>"), (1, "<s>"), (2, "</s>")]],
        "normalizer": normalizer if variant == "normalizer" else None,
        "pre_tokenizer": meta if variant == "metaspace" else None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": r["vocab"], "merges": [list(x) for x in r["merges"]]},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--scratch", required=True)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    here = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    texts = m.edge_strings() + m.gsm8k(a.gsm8k)[:1000]
    for variant in ["normalizer", "metaspace"]:
        root = os.path.join(a.scratch, variant)
        shutil.rmtree(root, ignore_errors=True)
        src = os.path.join(root, "src")
        shutil.copytree(os.path.join(here, "tests", "reference"),
                        os.path.join(src, "tests", "reference"))
        os.makedirs(os.path.join(root, "shared", "data", "llama2c"))
        tj = os.path.join(root, "shared", "data", "llama2c", "tokenizer.bin")
        with open(tj, "w", encoding="utf-8") as f:
            json.dump(build(a.model, variant), f, ensure_ascii=False)
        tok = Tokenizer.from_file(tj)
        rows = []
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            row = {"text": t, "ids": ids}
            dec = tok.decode(ids, skip_special_tokens=False)
            if dec != t:
                row["decoded"] = dec
            rows.append(row)
        m.write(os.path.join(src, "tests", "reference", "fixtures", "llama2c.jsonl"), rows)
        out = subprocess.run([os.path.abspath(a.test)], env=dict(os.environ, RLPOST_SOURCE_ROOT=src),
                             capture_output=True, text=True, cwd=root)
        for line in out.stdout.splitlines():
            if "llama2c.jsonl" in line:
                print(variant + ":", line)


if __name__ == "__main__":
    main()
