#!/usr/bin/env python3
"""Reference fixtures for the GGUF reader, the dequantizers and the GGUF model
loader, produced by an independent implementation: the `gguf` package that
ships with llama.cpp (gguf-py, numpy dequantizers).

Regenerate (from the repository root):
    python3 -m pip install gguf==0.19.0 numpy
    scripts/fetch-model.sh            # for (a); (b) and (c) need no model
    python3 tests/reference/make_gguf_fixtures.py

Writes into tests/reference/fixtures/:
  (a) smollm2_q4_1.txt  per-tensor float64 sums and 8 sampled dequantized
      values of every tensor of SmolLM2-135M-Instruct.Q4_1.gguf, both in the
      file's layout and in Hugging Face layout (q/k rows un-permuted here with
      numpy, independently of the C code).
  (b) quant_types.gguf  one random-but-valid tensor per ggml type we
      dequantize, each followed by `<name>.expected` (F32) holding
      gguf.quants.dequantize() of it.
  (c) tiny_tied.gguf / tiny_untied.gguf  public-bugs.md case #3 repro A: a
      llama model with dim 4, vocab 6, one layer, written without and with
      `output.weight` (a byte copy of token_embd.weight), plus tiny_hf.txt,
      every tensor of it in HF names/layout.
Random data come from a fixed seed, so reruns give identical files.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = os.path.join(os.environ.get("RLPOST_MODEL_DIR", os.path.join(ROOT, "models")),
                     "SmolLM2-135M-Instruct.Q4_1.gguf")


def g(x):
    """Shortest text that reads back (strtof) as the same float32."""
    return np.format_float_positional(np.float32(x), unique=True, trim="-") if np.isfinite(x) else repr(float(x))


def converter_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (HF -> GGUF rows)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    """Inverse of converter_permute (GGUF -> HF rows)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(name):
    top = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight",
           "output_norm.weight": "model.norm.weight"}
    if name in top:
        return top[name]
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{HF_NAMES[rest]}"


def to_hf(name, x, arch, n_head, n_head_kv):
    """x: dequantized (rows, cols) or (n,) in GGUF order -> HF layout."""
    if arch in ("llama", "mistral"):
        if name.endswith(("attn_q.weight", "attn_q.bias")):
            return unpermute(x, n_head)
        if name.endswith(("attn_k.weight", "attn_k.bias")):
            return unpermute(x, n_head_kv)
    return x


def sample_indices(n):
    """The 8 fixed flat indices the C test reads back (kept in sync by value)."""
    return sorted({0, 1, n // 7, n // 3, n // 2, (5 * n) // 8, (12345 % n), n - 1})


def field(r, key):
    return r.fields[key].contents()


def make_smollm2():
    if not os.path.exists(MODEL):
        print(f"skip (a): {MODEL} absent (run scripts/fetch-model.sh)", file=sys.stderr)
        return
    r = gguf.GGUFReader(MODEL)
    arch = field(r, "general.architecture")
    nh = field(r, f"{arch}.attention.head_count")
    nkv = field(r, f"{arch}.attention.head_count_kv")
    lines = ["# gguf-py %s reference for SmolLM2-135M-Instruct.Q4_1.gguf (make_gguf_fixtures.py)" %
             getattr(gguf, "__version__", "0.19.0"),
             "# T gguf_name hf_name type n_elems sum_f64 sum_abs_f64 k (index raw_value hf_value)*k"]
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        x = x.reshape(x.shape[0], -1) if x.ndim > 1 else x
        h = to_hf(t.name, x, arch, nh, nkv)
        assert np.array_equal(converter_permute(h, nh if "attn_q" in t.name else nkv), x) or h is x
        xf, hf = x.reshape(-1), np.ascontiguousarray(h).reshape(-1)
        n = xf.size
        idx = sample_indices(n)
        s = float(np.sum(xf, dtype=np.float64))
        sa = float(np.sum(np.abs(xf), dtype=np.float64))
        parts = [f"T {t.name} {hf_name(t.name)} {t.tensor_type.name} {n} {s!r} {sa!r} {len(idx)}"]
        parts += [f"{i} {g(xf[i])} {g(hf[i])}" for i in idx]
        lines.append(" ".join(parts))
    with open(os.path.join(OUT, "smollm2_q4_1.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def rand_f16(rng, n, lo=-6, hi=0):
    """Finite half floats of varied magnitude (scales of quant blocks)."""
    v = rng.uniform(0.5, 1.0, n) * np.exp2(rng.integers(lo, hi + 1, n)) * rng.choice([-1, 1], n)
    return v.astype(np.float16)


# (type, byte offsets of fp16 scale fields inside a block)
QTYPES = [
    (Q.Q4_0, [0]), (Q.Q4_1, [0, 2]), (Q.Q5_0, [0]), (Q.Q5_1, [0, 2]), (Q.Q8_0, [0]),
    (Q.Q4_K, [0, 2]), (Q.Q5_K, [0, 2]), (Q.Q6_K, [208]),
]


def make_quant_types(rng):
    w = gguf.GGUFWriter(os.path.join(OUT, "quant_types.gguf"), "quant-test")
    w.add_string("general.description", "random valid blocks + gguf-py dequantized values")
    rows, cols = 2, 512
    for qt, scale_offs in QTYPES:
        blck, tsize = gguf.GGML_QUANT_SIZES[qt]
        nb = rows * cols // blck
        raw = rng.integers(0, 256, (nb, tsize), dtype=np.uint8)
        for off in scale_offs:
            raw[:, off:off + 2] = rand_f16(rng, nb).view(np.uint8).reshape(nb, 2)
        raw = raw.reshape(rows, cols // blck * tsize)
        w.add_tensor(qt.name.lower(), raw, raw_dtype=qt)
        w.add_tensor(qt.name.lower() + ".expected", gguf.quants.dequantize(raw, qt).astype(np.float32))
    # F16 / BF16: every finite bit pattern class, incl. subnormals and zeros
    bits = rng.integers(0, 1 << 16, rows * cols, dtype=np.uint16)
    f16 = bits.copy()
    f16[(f16 & 0x7C00) == 0x7C00] &= 0xBFFF  # drop inf/NaN
    f16[:4] = [0x0001, 0x83FF, 0x8000, 0x7BFF]  # min subnormal, -max subnormal, -0, max
    f16 = f16.reshape(rows, cols)
    w.add_tensor("f16", f16.view(np.float16))
    w.add_tensor("f16.expected", f16.view(np.float16).astype(np.float32))
    bf = bits.copy()
    bf[(bf & 0x7F80) == 0x7F80] &= 0xBFFF
    bf[:3] = [0x0001, 0x8000, 0x7F7F]
    bf = bf.reshape(rows, cols)
    w.add_tensor("bf16", bf, raw_dtype=Q.BF16)
    w.add_tensor("bf16.expected", gguf.quants.dequantize(bf.view(np.uint8), Q.BF16).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_tiny(rng):
    """Case #3 repro A: dim 4, vocab 6, 1 layer, 1 head of dim 4 (so the q/k
    row permutation is not the identity), FFN 8."""
    dim, vocab, ffn, nh, nkv = 4, 6, 8, 1, 1
    t = {}
    f = lambda *s: rng.standard_normal(s).astype(np.float32)
    hf = {
        "model.embed_tokens.weight": f(vocab, dim),
        "model.layers.0.input_layernorm.weight": f(dim),
        "model.layers.0.self_attn.q_proj.weight": f(dim, dim),
        "model.layers.0.self_attn.k_proj.weight": f(dim, dim),
        "model.layers.0.self_attn.v_proj.weight": f(dim, dim),
        "model.layers.0.self_attn.o_proj.weight": f(dim, dim),
        "model.layers.0.post_attention_layernorm.weight": f(dim),
        "model.layers.0.mlp.gate_proj.weight": f(ffn, dim),
        "model.layers.0.mlp.up_proj.weight": f(ffn, dim),
        "model.layers.0.mlp.down_proj.weight": f(dim, ffn),
        "model.norm.weight": f(dim),
    }
    inv = {v: k for k, v in HF_NAMES.items()}
    for name, x in hf.items():
        if name.startswith("model.layers.0."):
            key = "blk.0." + inv[name[len("model.layers.0."):]]
        else:
            key = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}[name]
        if key.startswith("blk.0.attn_q"):
            x = converter_permute(x, nh)
        elif key.startswith("blk.0.attn_k"):
            x = converter_permute(x, nkv)
        t[key] = x
    for tied in (True, False):
        path = os.path.join(OUT, "tiny_tied.gguf" if tied else "tiny_untied.gguf")
        w = gguf.GGUFWriter(path, "llama")
        w.add_block_count(1)
        w.add_context_length(32)
        w.add_embedding_length(dim)
        w.add_feed_forward_length(ffn)
        w.add_head_count(nh)
        w.add_head_count_kv(nkv)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["<unk>", "a", "b", "ab", "\u00e9", "<eos>"])
        w.add_token_scores([0.0, -1.0, -2.0, -3.5, -4.25, 0.5])
        w.add_token_types([2, 1, 1, 1, 1, 3])
        w.add_token_merges(["a b"])
        w.add_bos_token_id(0)
        w.add_eos_token_id(5)
        for k, x in t.items():
            w.add_tensor(k, x)
        if not tied:
            w.add_tensor("output.weight", t["token_embd.weight"].copy())
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    with open(os.path.join(OUT, "tiny_hf.txt"), "w") as fo:
        fo.write("# HF-layout tensors of tiny_*.gguf: name n values... (make_gguf_fixtures.py)\n")
        for name, x in hf.items():
            fo.write(f"{name} {x.size} " + " ".join(g(v) for v in x.reshape(-1)) + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20261129)
    make_quant_types(rng)
    make_tiny(rng)
    make_smollm2()


if __name__ == "__main__":
    main()
