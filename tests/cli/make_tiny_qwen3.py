#!/usr/bin/env python3
"""A tiny random Qwen3 model as a Hugging Face folder, for the CLI checks of
the Qwen3 family (tests/cli/check_qwen3_cli.sh): config.json
(Qwen3ForCausalLM: q/k norms, head_dim 16 independent of hidden 32 / 2
heads, GQA 2:1, tied head), model.safetensors (bf16, pseudo-random values
from a fixed seed, so every run writes the same bytes) and the real Qwen3
tokenizer files copied from the shared data (its vocabulary fixes the
embedding size, 151936 rows as in Qwen3's own configs).

Usage: make_tiny_qwen3.py OUT_DIR QWEN3_TOKENIZER_DIR
Standard library only (no torch, no numpy): CI runs it."""
import json
import random
import shutil
import struct
import sys

out, tokdir = sys.argv[1], sys.argv[2]
V, D, L, H, KV, HD, F = 151936, 32, 2, 2, 1, 16, 64
cfg = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V, "hidden_size": D,
    "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
    "head_dim": HD, "hidden_act": "silu", "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "rope_scaling": None, "attention_bias": False, "tie_word_embeddings": True,
    "use_sliding_window": False, "sliding_window": None, "bos_token_id": 151643, "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
rng = random.Random(21)


def bf16(vals):
    # round-to-nearest-even of the float32 bit pattern's upper half
    b = bytearray()
    for v in vals:
        u = struct.unpack("<I", struct.pack("<f", v))[0]
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        b += struct.pack("<H", u & 0xFFFF)
    return bytes(b)


def rand(n, scale):
    return [rng.uniform(-scale, scale) for _ in range(n)]


tensors = [("model.embed_tokens.weight", [V, D], 0.5), ("model.norm.weight", [D], None)]
for i in range(L):
    p = "model.layers.%d." % i
    tensors += [
        (p + "input_layernorm.weight", [D], None), (p + "post_attention_layernorm.weight", [D], None),
        (p + "self_attn.q_proj.weight", [H * HD, D], 0.3), (p + "self_attn.k_proj.weight", [KV * HD, D], 0.3),
        (p + "self_attn.v_proj.weight", [KV * HD, D], 0.3), (p + "self_attn.o_proj.weight", [D, H * HD], 0.3),
        (p + "self_attn.q_norm.weight", [HD], None), (p + "self_attn.k_norm.weight", [HD], None),
        (p + "mlp.gate_proj.weight", [F, D], 0.3), (p + "mlp.up_proj.weight", [F, D], 0.3),
        (p + "mlp.down_proj.weight", [D, F], 0.3),
    ]
header, blobs, off = {}, [], 0
for name, shape, scale in tensors:
    n = 1
    for s in shape:
        n *= s
    vals = [1.0 + rng.uniform(-0.2, 0.2) for _ in range(n)] if scale is None else rand(n, scale)
    blob = bf16(vals)
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(blob)]}
    blobs.append(blob)
    off += len(blob)
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(out + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
json.dump(cfg, open(out + "/config.json", "w"), indent=1)
for name in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copyfile(tokdir + "/" + name, out + "/" + name)
