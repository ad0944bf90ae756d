#!/usr/bin/env python3
"""Tiny learned reward models (HF folders with a byte-level BPE
tokenizer.json) and the scores the reward_model built-in must give, for
tests/unit/test_reward_model.c.

Regenerate (deterministic given the versions; commit the result):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors tokenizers
    /tmp/venv/bin/python tests/reference/make_reward_model_fixtures.py

Output under tests/reference/fixtures/hf/:
  rm_orm/   LlamaForSequenceClassification, num_labels 1: an outcome reward
            model; score = the head's output at the last token of
            prompt + completion
  rm_prm/   Qwen2ForTokenClassification, num_labels 2, with the special token
            <extra_0>: a process reward model in Qwen2.5-Math-PRM's format
            (steps joined by <extra_0> instead of the separator; a step's
            score is softmax(head)[1] at its <extra_0>)
  rm_prm1/  LlamaForTokenClassification, num_labels 1: a PRM scored at the
            last token of each step, separator included
  rm_expected.json  per folder and sample: the model's input ids, the rows
            read, each step's score and the aggregate (min over steps), from
            transformers' forward in float64 on the saved fp32 weights; the
            policy-side completion ids (the same tokenizer) and the completion
            token where each step ends
The last sample spells the control tokens <extra_0> and <|bos|> in its
text: completion text is content, encoded with split_special_tokens (public-bugs
case #1), so it forges no step. The tokenizer: 256 byte-level symbols, the merge "\\n\\n" -> one token, and
the special tokens <|bos|> and <extra_0> (no BOS added: add_bos_token false).
Last generated with torch 2.15.0, transformers 4.46.3, tokenizers 0.20.
"""
import json
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (LlamaConfig, LlamaForSequenceClassification, LlamaForTokenClassification,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForTokenClassification)
from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
SEP = "\n\n"
PROMPT = "Q: 2+3? Think in steps.\n"
SAMPLES = [
    "First add 2 and 3.\n\nThat is 5.\n\nAnswer: 5",
    "First add 2 and 3.\n\n",
    "First add 2 and 3.\n\nFirst add 2 and 3.\n\nFirst add 2 and 3.\n\n",
    "no steps at all",
    # public-bugs case #1: content spelling control tokens stays text (no forged step or turn)
    "Two<extra_0> steps<|bos|> here.\n\nDone",
]


def make_tokenizer():
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(range(256))}
    nl = b2u[ord("\n")]
    vocab[nl + nl] = 256
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(nl, nl)]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|bos|>", "<extra_0>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", add_bos_token=False)


def steps_of(text):
    """(piece, end byte, ended by a separator) for each step."""
    out, b, data = [], 0, text.encode()
    sep = SEP.encode()
    i = 0
    while i <= len(data):
        at_sep = data[i:i + len(sep)] == sep
        if not at_sep and i < len(data):
            i += 1
            continue
        e = i + len(sep) if at_sep else len(data)
        if e > b:
            out.append((data[b:e], data[b:i] if at_sep else data[b:e], e))
        if i >= len(data):
            break
        i = b = e
    return out


def main():
    torch.manual_seed(3)
    tk = make_tokenizer()
    V = len(tk)  # 259
    common = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=V, max_position_embeddings=256, bos_token_id=257,
                  eos_token_id=257, pad_token_id=257)
    models_ = {
        "rm_orm": (LlamaForSequenceClassification(LlamaConfig(num_labels=1, tie_word_embeddings=False,
                                                              **common)), "orm", None),
        "rm_prm": (Qwen2ForTokenClassification(Qwen2Config(num_labels=2, tie_word_embeddings=False,
                                                           **common)), "prm", "<extra_0>"),
        "rm_prm1": (LlamaForTokenClassification(LlamaConfig(num_labels=1, tie_word_embeddings=False,
                                                            **common)), "prm", None),
    }
    enc = lambda s: tk.encode(s, add_special_tokens=False)
    # completion text is content: special-token spellings are not matched (split_special_tokens)
    enc_content = lambda s: tk.encode(s, add_special_tokens=False, split_special_tokens=True)
    expected = {"generator": "tests/reference/make_reward_model_fixtures.py", "torch": torch.__version__,
                "transformers": transformers.__version__, "prompt": PROMPT, "samples": SAMPLES,
                "separator": SEP}
    for name, (m, kind, step_token) in models_.items():
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape) * 0.5)
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        m.save_pretrained(d)
        tk.save_pretrained(d)
        md = m.double().eval()
        recs = []
        for text in SAMPLES:
            ids = enc(PROMPT)
            rows, ends = [], []
            if kind == "orm":
                ids += enc_content(text)
                rows.append(len(ids) - 1)
                ends.append(len(text.encode()))
            else:
                for piece, body, e in steps_of(text):
                    if step_token:
                        ids += enc_content(body.decode()) + enc(step_token)
                    else:
                        ids += enc_content(piece.decode())
                    rows.append(len(ids) - 1)
                    ends.append(e)
            with torch.no_grad():
                h = md.model(input_ids=torch.tensor([ids])).last_hidden_state
                out = md.score(h)[0]
            if out.shape[1] == 1:
                steps = [float(out[r, 0]) for r in rows]
            else:
                steps = [float(torch.softmax(out[r], -1)[1]) for r in rows]
            # where each step ends among the policy's completion tokens
            ctoks = enc_content(text)
            cum, at = [], 0
            for t in ctoks:
                at += len(tk.decode([t]).encode())
                cum.append(at)
            tok_end = []
            for e in ends:
                t = 0
                while t + 1 < len(ctoks) and cum[t] < e:
                    t += 1
                tok_end.append(t)
            recs.append({"input_ids": ids, "rows": rows, "steps": steps, "score": min(steps),
                         "completion_tokens": ctoks, "step_token_index": tok_end})
        expected[name] = {"kind": kind, "step_token": step_token, "samples": recs}
    with open(os.path.join(OUT, "rm_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
