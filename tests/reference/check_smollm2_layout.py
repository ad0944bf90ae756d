#!/usr/bin/env python3
"""End-to-end check of the GGUF -> HF weight layout on the real model, with
no C code involved: a plain numpy forward pass of SmolLM2-135M-Instruct using
Hugging Face's rotate_half RoPE on weights read by gguf-py and un-permuted by
make_gguf_fixtures.unpermute (the same layout the C loader is tested to
produce). If the un-permutation were wrong, HF-style RoPE would scramble
positions and the model would not complete a trivial prompt.

Run: python3 -m pip install gguf numpy; scripts/fetch-model.sh;
     python3 tests/reference/check_smollm2_layout.py
Prints the next-token NLL and greedy accuracy on "A B C ... Z" with and
without the un-permutation; exits 1 unless the un-permuted weights predict at
least half of the letters and have under half the NLL of the GGUF-order ones.
"""
import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gguf_fixtures import MODEL, unpermute  # noqa: E402


def load(r, name):
    t = next(t for t in r.tensors if t.name == name)
    x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
    return x.reshape(x.shape[0], -1) if x.ndim > 1 else x


def main():
    r = gguf.GGUFReader(MODEL)
    f = lambda k: r.fields[k].contents()
    L, nh, nkv = f("llama.block_count"), f("llama.attention.head_count"), f("llama.attention.head_count_kv")
    dim, theta, eps = f("llama.embedding_length"), f("llama.rope.freq_base"), f("llama.attention.layer_norm_rms_epsilon")
    hd = dim // nh
    tokens = f("tokenizer.ggml.tokens")
    vocab = {t: i for i, t in enumerate(tokens)}
    emb = load(r, "token_embd.weight")
    layers = []
    for l in range(L):
        g = lambda s: load(r, f"blk.{l}.{s}")
        layers.append({s: g(s + ".weight") for s in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                    "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})
    out_norm = load(r, "output_norm.weight")

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def rope(x, pos):  # HF rotate_half: pairs (i, i + hd/2)
        inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
        ang = np.outer(pos, inv)
        cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def forward(seq, fix):
        """Logits at every position (teacher forcing)."""
        T = len(seq)
        x = emb[seq].astype(np.float64)
        pos = np.arange(T)
        for p in layers:
            wq = unpermute(p["attn_q"], nh) if fix else p["attn_q"]
            wk = unpermute(p["attn_k"], nkv) if fix else p["attn_k"]
            h = rms(x, p["attn_norm"])
            q = rope((h @ wq.T).reshape(T, nh, hd), pos)
            k = rope((h @ wk.T).reshape(T, nkv, hd), pos)
            v = (h @ p["attn_v"].T).reshape(T, nkv, hd)
            k, v = np.repeat(k, nh // nkv, 1), np.repeat(v, nh // nkv, 1)
            s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
            s = s + np.triu(np.full((T, T), -np.inf), 1)
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", a, v).reshape(T, dim) @ p["attn_output"].T
            h = rms(x, p["ffn_norm"])
            gt = h @ p["ffn_gate"].T
            x = x + ((gt / (1 + np.exp(-gt))) * (h @ p["ffn_up"].T)) @ p["ffn_down"].T
        return rms(x, out_norm) @ emb.T  # tied head

    def score(seq, fix):
        """Mean next-token NLL, and the fraction of positions whose greedy
        prediction is the actual next token."""
        full = forward(seq, fix)[:-1]
        lg = full - full.max(-1, keepdims=True)
        lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        nxt = np.array(seq[1:])
        if os.environ.get("VERBOSE"):
            print([tokens[i] for i in np.argmax(full, -1)], np.round(-lp[np.arange(len(nxt)), nxt], 2))
        return float(-np.mean(lp[np.arange(len(nxt)), nxt])), float(np.mean(np.argmax(full, -1) == nxt))

    # order-sensitive text: a model with scrambled RoPE positions cannot continue it
    letters = ["A"] + ["Ġ" + c for c in "BCDEFGHIJKLMNOPQRSTUVWXYZ"]
    seq = [vocab[w] for w in letters]
    good_nll, good_acc = score(seq, True)
    bad_nll, bad_acc = score(seq, False)
    print("text: A B C ... Z (%d tokens)" % len(seq))
    print(f"HF RoPE, un-permuted q/k: mean NLL {good_nll:.3f}, greedy next-token accuracy {good_acc:.2f}")
    print(f"HF RoPE, GGUF-order q/k : mean NLL {bad_nll:.3f}, greedy next-token accuracy {bad_acc:.2f}")
    return 0 if good_acc >= 0.5 and good_nll < 0.5 * bad_nll else 1


if __name__ == "__main__":
    sys.exit(main())
