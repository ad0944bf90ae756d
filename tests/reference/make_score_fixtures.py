#!/usr/bin/env python3
"""Tiny Hugging Face score-head models (value / reward models) and what
transformers computes with them, for tests/unit/test_score_head.c.

Regenerate (deterministic given the versions; commit the result):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python tests/reference/make_score_fixtures.py

Output under tests/reference/fixtures/hf/:
  score_llama_token/  LlamaForTokenClassification, num_labels 1 (score.weight
                      and score.bias): a critic / process reward model
  score_qwen2_seq/    Qwen2ForSequenceClassification, num_labels 1 (score.weight
                      only; q/k/v biases): an outcome reward model
  score_qwen2_prm2/   Qwen2ForTokenClassification, num_labels 2: a two-class PRM head
  score_expected.json per folder: two token sequences; the head's output at
                      every token (transformers' forward in float64 on the saved
                      fp32 weights; for the sequence classifier also its pooled
                      output, the last token's); and for num_labels 1 the
                      gradient of L = sum_t c_t * v_t of every parameter.
Last generated with torch 2.15.0 and transformers 4.46.3.
"""
import json
import os
import shutil

import torch
import transformers
from transformers import (LlamaConfig, LlamaForTokenClassification, Qwen2Config,
                          Qwen2ForSequenceClassification, Qwen2ForTokenClassification)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
SEQS = [[1, 5, 9, 2, 17, 30, 4], [3, 8, 8, 21, 11]]


def main():
    torch.manual_seed(1)
    common = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=32, max_position_embeddings=64, bos_token_id=1,
                  eos_token_id=2, pad_token_id=0)
    models = {
        "score_llama_token": LlamaForTokenClassification(LlamaConfig(
            num_labels=1, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, **common)),
        "score_qwen2_seq": Qwen2ForSequenceClassification(Qwen2Config(
            num_labels=1, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, **common)),
        "score_qwen2_prm2": Qwen2ForTokenClassification(Qwen2Config(
            num_labels=2, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, **common)),
    }
    expected = {"generator": "tests/reference/make_score_fixtures.py", "torch": torch.__version__,
                "transformers": transformers.__version__, "sequences": SEQS}
    for name, m in models.items():
        with torch.no_grad():  # every value distinct and non-trivial
            for p in m.parameters():
                p.copy_(torch.randn(p.shape) * 0.5)
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        m.save_pretrained(d)
        md = m.double().eval()
        labels = m.config.num_labels
        rec = {"num_labels": labels, "per_token": [], "pooled": []}
        gen = torch.Generator().manual_seed(7)
        coef = [torch.randn(len(s), generator=gen, dtype=torch.float64) for s in SEQS]
        md.zero_grad()
        for s, c in zip(SEQS, coef):
            ids = torch.tensor([s])
            h = md.model(input_ids=ids).last_hidden_state  # (1, T, d)
            v = md.score(h)[0]  # (T, labels): what the class's forward computes per token
            out = md(input_ids=ids).logits  # the class's own forward
            if out.dim() == 3:
                torch.testing.assert_close(out[0], v)
            else:  # sequence classification pools the last (non-pad) token
                torch.testing.assert_close(out[0], v[-1])
                rec["pooled"].append(out[0].tolist())
            rec["per_token"].append(v.tolist())
            if labels == 1:
                (v[:, 0] * c).sum().backward()
        if labels == 1:
            rec["coef"] = [c.tolist() for c in coef]
            rec["grads"] = {k: p.grad.flatten().tolist() for k, p in md.named_parameters()}
        expected[name] = rec
    with open(os.path.join(OUT, "score_expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


if __name__ == "__main__":
    main()
