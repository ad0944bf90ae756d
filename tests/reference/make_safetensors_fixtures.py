#!/usr/bin/env python3
"""Writes small safetensors fixtures with the reference `safetensors` package
and the values our reader must produce from them.

Regenerate (values are deterministic; the order of __metadata__ keys in
the files may change between runs, the Rust writer hashes them):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install safetensors torch numpy
    /tmp/venv/bin/python tests/reference/make_safetensors_fixtures.py

Output: tests/reference/fixtures/safetensors/*.safetensors and expected.json,
which maps file -> {"metadata": {...}, "tensors": {name: {"dtype", "shape",
"f32_bits"}}} where f32_bits are the uint32 patterns of torch's `.float()`
of each stored tensor (the exact widening our reader must match), or
file -> {"error": text} for a file our reader must refuse as unsupported.
tests/unit/test_safetensors.c (reference_fixtures_match) reads them.
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "safetensors")


def bits(t):
    return t.detach().float().contiguous().view(torch.int32).flatten().tolist()


def tensors_for(dtype, gen):
    # shapes like a tiny Llama layer, plus values that stress conversion
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, 1 / 3, 1e-40, 65504.0, 70000.0,
                            6.0e-8, float("inf"), float("-inf"), 1.00390625], dtype=torch.float32)
    return {
        "model.embed_tokens.weight": torch.randn(16, 8, generator=gen).to(dtype),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(8, 8, generator=gen).to(dtype),
        "model.layers.0.self_attn.q_proj.bias": torch.randn(8, generator=gen).to(dtype),
        "model.norm.weight": (1 + 0.1 * torch.randn(8, generator=gen)).to(dtype),
        "special": special.to(dtype),
        "cube": torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).to(dtype) / 7,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    expected = {}
    for name, dtype in [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]:
        ts = tensors_for(dtype, gen)
        meta = {"format": "pt", "fixture": name, "unicode": "température ü"}
        fname = f"tiny_{name}.safetensors"
        save_file(ts, os.path.join(OUT, fname), metadata=meta)
        expected[fname] = {
            "metadata": meta,
            "tensors": {k: {"dtype": {"f32": "F32", "f16": "F16", "bf16": "BF16"}[name],
                            "shape": list(v.shape), "f32_bits": [b & 0xFFFFFFFF for b in bits(v)]}
                        for k, v in ts.items()},
        }
    # mixed dtypes in one file, no metadata
    mixed = {"a": torch.randn(5, generator=gen), "b": torch.randn(3, 2, generator=gen).half(),
             "c": torch.randn(7, generator=gen).bfloat16()}
    save_file(mixed, os.path.join(OUT, "mixed.safetensors"))
    expected["mixed.safetensors"] = {
        "metadata": {},
        "tensors": {k: {"dtype": {torch.float32: "F32", torch.float16: "F16",
                                  torch.bfloat16: "BF16"}[v.dtype],
                        "shape": list(v.shape), "f32_bits": [b & 0xFFFFFFFF for b in bits(v)]}
                    for k, v in mixed.items()},
    }
    # an integer tensor: valid file, dtype we refuse by name
    save_file({"ids": torch.arange(4, dtype=torch.int64), "w": torch.ones(2)},
              os.path.join(OUT, "int64.safetensors"))
    expected["int64.safetensors"] = {"error": "tensor 'ids': dtype I64 is not supported"}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    for p in os.listdir(OUT):  # safetensors creates 0600 files
        os.chmod(os.path.join(OUT, p), 0o644)
    total = sum(os.path.getsize(os.path.join(OUT, p)) for p in os.listdir(OUT))
    print(f"wrote {len(expected)} fixtures to {OUT} ({total} bytes)")
    assert np.float32(1.0).tobytes() == b"\x00\x00\x80\x3f"  # little-endian host


if __name__ == "__main__":
    main()
