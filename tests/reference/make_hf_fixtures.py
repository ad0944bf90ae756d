#!/usr/bin/env python3
"""Writes tiny Hugging Face model folders with transformers' own
save_pretrained, for tests/unit/test_hf_dir.c (hf_written_folders_load).

Regenerate (deterministic given the versions; commit the result):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors
    /tmp/venv/bin/python tests/reference/make_hf_fixtures.py

Output under tests/reference/fixtures/hf/:
  llama_tied/    LlamaForCausalLM, tied, llama3 RoPE scaling, rope_theta 500000
  qwen2_sharded/ Qwen2ForCausalLM (q/k/v bias), untied, saved in several shards
                 with model.safetensors.index.json
  expected.json  per folder: the config values transformers holds and every
                 tensor of model.state_dict() as fp32 bit patterns
Last generated with torch 2.15.0 and transformers 5.24.0 (which writes
`rope_parameters` rather than `rope_theta` / `rope_scaling`).
"""
import json
import os
import shutil

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")


def bits(t):
    return [b & 0xFFFFFFFF for b in t.detach().float().contiguous().view(torch.int32).flatten().tolist()]


def main():
    torch.manual_seed(0)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    models = {
        "llama_tied": LlamaForCausalLM(LlamaConfig(
            hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=32, max_position_embeddings=64, rms_norm_eps=1e-5,
            rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
        "qwen2_sharded": Qwen2ForCausalLM(Qwen2Config(
            hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=32, max_position_embeddings=64, rms_norm_eps=1e-6,
            rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=5, eos_token_id=6)),
    }
    expected = {}
    for name, m in models.items():
        with torch.no_grad():  # make every value distinct and non-trivial
            for p in m.parameters():
                p.copy_(torch.randn(p.shape) * 0.5)
        d = os.path.join(OUT, name)
        m.save_pretrained(d, max_shard_size="4KB" if "sharded" in name else "1GB")
        c = m.config
        rp = getattr(c, "rope_parameters", None) or {}
        expected[name] = {
            "config": {"hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
                       "num_attention_heads": c.num_attention_heads,
                       "num_key_value_heads": c.num_key_value_heads,
                       "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
                       "rope_theta": rp.get("rope_theta", getattr(c, "rope_theta", None)),
                       "rope_type": rp.get("rope_type", "default"),
                       "rms_norm_eps": c.rms_norm_eps, "tie": bool(c.tie_word_embeddings),
                       "bos": c.bos_token_id, "eos": c.eos_token_id},
            "tensors": {k: bits(v) for k, v in m.state_dict().items()},
        }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=None, sort_keys=True)
        f.write("\n")
    for root, _, files in os.walk(OUT):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(OUT) for f in fs)
    print(f"transformers {transformers.__version__}: wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
