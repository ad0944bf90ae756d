#!/usr/bin/python3
"""Reference logprobs of llama2.c's stories260K.bin (shared/data/llama2c) for
tests/unit/test_stories260k.c, from a float64 PyTorch port of llama2.c's own
run.c forward: the checkpoint read as run.c reads it, RoPE on interleaved
pairs (i, i+1) of the raw wq/wk rows — independent of our loader's row
permutation to the Hugging Face layout.

The sequence is token 1 (BOS) followed by the greedy 48-token continuation
of this reference; the fixture holds the logprob of every token given the
ones before it and the entropy at each position.

Rerun:  apt-get install python3-torch
        /usr/bin/python3 tests/reference/make_stories_fixtures.py ../shared/data/llama2c/stories260K.bin tests/reference/fixtures
"""
import json
import math
import struct
import sys

import numpy as np
import torch

DT = torch.float64


def load(path):
    raw = open(path, "rb").read()
    dim, hidden, L, H, KV, V, T = struct.unpack("<7i", raw[:28])
    shared = V > 0
    V = abs(V)
    f = np.frombuffer(raw, dtype="<f4", offset=28).astype(np.float64)
    hd, kvd = dim // H, dim // H * KV
    o = 0

    def take(*shape):
        nonlocal o
        n = int(np.prod(shape))
        a = torch.from_numpy(f[o:o + n].reshape(shape).copy())
        o += n
        return a

    W = dict(emb=take(V, dim), rms_att=take(L, dim), wq=take(L, dim, dim), wk=take(L, kvd, dim),
             wv=take(L, kvd, dim), wo=take(L, dim, dim), rms_ffn=take(L, dim), w1=take(L, hidden, dim),
             w2=take(L, dim, hidden), w3=take(L, hidden, dim), rms_final=take(dim))
    take(T, hd // 2)  # freq_cis_real (legacy, unused by run.c)
    take(T, hd // 2)  # freq_cis_imag
    W["wcls"] = W["emb"] if shared else take(V, dim)
    return dict(dim=dim, hidden=hidden, L=L, H=H, KV=KV, V=V, T=T, hd=hd), W


def rms(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w


def rope_interleaved(x, pos, hd):  # x (n, heads, hd): pairs (i, i+1) as run.c
    i = torch.arange(0, hd, 2, dtype=DT)
    freq = 1.0 / (10000.0 ** (i / hd))
    ang = pos.to(DT)[:, None] * freq[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def logits_all(cfg, W, ids):
    n, H, KV, hd = len(ids), cfg["H"], cfg["KV"], cfg["hd"]
    x = W["emb"][ids]
    pos = torch.arange(n)
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=DT), 1)
    for l in range(cfg["L"]):
        h = rms(x, W["rms_att"][l])
        q = rope_interleaved((h @ W["wq"][l].T).view(n, H, hd), pos, hd)
        k = rope_interleaved((h @ W["wk"][l].T).view(n, KV, hd), pos, hd).repeat_interleave(H // KV, 1)
        v = (h @ W["wv"][l].T).view(n, KV, hd).repeat_interleave(H // KV, 1)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd) + mask
        x = x + torch.einsum("hij,jhd->ihd", s.softmax(-1), v).reshape(n, H * hd) @ W["wo"][l].T
        h = rms(x, W["rms_ffn"][l])
        x = x + (torch.nn.functional.silu(h @ W["w1"][l].T) * (h @ W["w3"][l].T)) @ W["w2"][l].T
    return rms(x, W["rms_final"]) @ W["wcls"].T


def main():
    cfg, W = load(sys.argv[1])
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "tests/reference/fixtures"
    ids = [1]
    with torch.no_grad():
        for _ in range(48):
            ids.append(int(torch.argmax(logits_all(cfg, W, torch.tensor(ids))[-1])))
        ls = logits_all(cfg, W, torch.tensor(ids)).log_softmax(-1)
    t = torch.tensor(ids)
    logp = ls[:-1].gather(1, t[1:, None])[:, 0]
    ent = -(ls.exp() * ls).sum(-1)[:-1]
    json.dump({"model": "stories260K.bin", "config": cfg, "ids": ids, "logprobs": logp.tolist(),
               "entropy": ent.tolist(), "generator": "tests/reference/make_stories_fixtures.py (run.c port, "
               "torch %s float64)" % torch.__version__}, open(f"{out_dir}/stories260k_logprobs.json", "w"))
    print(f"stories260K: {len(ids)} tokens, mean logprob {logp.mean().item():.4f}, ids {ids[:12]}...")


if __name__ == "__main__":
    main()
