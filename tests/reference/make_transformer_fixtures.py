#!/usr/bin/python3
"""Reference fixtures for the transformer forward/backward (tests/unit/test_transformer.c).

An independent PyTorch implementation of the Hugging Face Llama/Qwen2
decoder (RMSNorm, rotate_half RoPE with optional Llama-3 scaling, GQA by
repeat_kv, SwiGLU, tied or untied head, optional QKV bias), run in float64,
gives per-token logprobs and entropies of the next tokens at temperature T
over packed variable-length sequences, and the gradients of the loss

    L = -sum_t w_t * logp_t  +  sum_t u_t * H_t

for every parameter. The fixture holds the random weights, the batch, w, u
and those values.

Rerun (Debian's PyTorch is enough; no network):
    apt-get install python3-torch
    /usr/bin/python3 tests/reference/make_transformer_fixtures.py tests/reference/fixtures
"""
import json
import math
import struct
import sys

import torch

torch.manual_seed(1234)
DT = torch.float64


def inv_freq(cfg):
    hd = cfg["head_dim"]
    f = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=DT) / hd))
    sc = cfg.get("rope_scaling")
    if sc and sc["type"] == "llama3":
        old, lo, hi, factor = sc["original_max_position_embeddings"], sc["low_freq_factor"], sc["high_freq_factor"], sc["factor"]
        wavelen = 2 * math.pi / f
        low_wl, high_wl = old / lo, old / hi
        scaled = torch.where(wavelen > low_wl, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * scaled / factor + smooth * scaled
        is_mid = (wavelen <= low_wl) & (wavelen >= high_wl)
        f = torch.where(is_mid, mid, scaled)
    return f


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def forward(cfg, P, tokens, positions, seq_start, targets, inv_temp):
    d, H, KV, hd = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    x = P["model.embed_tokens.weight"][tokens]
    freqs = positions.to(DT)[:, None] * inv_freq(cfg)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    n = tokens.shape[0]
    mask = torch.full((n, n), float("-inf"), dtype=DT)
    for s in range(len(seq_start) - 1):
        a, b = seq_start[s], seq_start[s + 1]
        mask[a:b, a:b] = torch.triu(torch.full((b - a, b - a), float("-inf"), dtype=DT), diagonal=1)
    for l in range(cfg["n_layers"]):
        p = lambda name: P[f"model.layers.{l}.{name}"]
        h = rmsnorm(x, p("input_layernorm.weight"), cfg["rms_eps"])
        q = h @ p("self_attn.q_proj.weight").T
        k = h @ p("self_attn.k_proj.weight").T
        v = h @ p("self_attn.v_proj.weight").T
        if cfg["attention_bias"]:
            q = q + p("self_attn.q_proj.bias")
            k = k + p("self_attn.k_proj.bias")
            v = v + p("self_attn.v_proj.bias")
        q, k, v = q.view(n, H, hd), k.view(n, KV, hd), v.view(n, KV, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)  # repeat_kv
        v = v.repeat_interleave(H // KV, dim=1)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd) + mask
        att = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v).reshape(n, H * hd)
        x = x + att @ p("self_attn.o_proj.weight").T
        h = rmsnorm(x, p("post_attention_layernorm.weight"), cfg["rms_eps"])
        g = h @ p("mlp.gate_proj.weight").T
        u = h @ p("mlp.up_proj.weight").T
        x = x + (torch.nn.functional.silu(g) * u) @ p("mlp.down_proj.weight").T
    h = rmsnorm(x, P["model.norm.weight"], cfg["rms_eps"])
    head = P["model.embed_tokens.weight"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    logits = (h @ head.T) * inv_temp
    logsm = logits.log_softmax(-1)
    sel = targets >= 0
    logp = torch.zeros(n, dtype=DT)
    ent = torch.zeros(n, dtype=DT)
    logp[sel] = logsm[sel].gather(1, targets[sel][:, None])[:, 0]
    ent[sel] = -(logsm[sel].exp() * logsm[sel]).sum(-1)
    return logp, ent


def param_shapes(cfg):
    """HF names and PyTorch shapes of a Llama/Qwen2 decoder's parameters."""
    d, H, KV, hd, F, V = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], cfg["ffn_dim"], cfg["vocab_size"]
    shapes = {"model.embed_tokens.weight": (V, d)}
    for l in range(cfg["n_layers"]):
        pre = f"model.layers.{l}."
        shapes[pre + "input_layernorm.weight"] = (d,)
        shapes[pre + "self_attn.q_proj.weight"] = (H * hd, d)
        shapes[pre + "self_attn.k_proj.weight"] = (KV * hd, d)
        shapes[pre + "self_attn.v_proj.weight"] = (KV * hd, d)
        if cfg["attention_bias"]:
            shapes[pre + "self_attn.q_proj.bias"] = (H * hd,)
            shapes[pre + "self_attn.k_proj.bias"] = (KV * hd,)
            shapes[pre + "self_attn.v_proj.bias"] = (KV * hd,)
        shapes[pre + "self_attn.o_proj.weight"] = (d, H * hd)
        shapes[pre + "post_attention_layernorm.weight"] = (d,)
        shapes[pre + "mlp.gate_proj.weight"] = (F, d)
        shapes[pre + "mlp.up_proj.weight"] = (F, d)
        shapes[pre + "mlp.down_proj.weight"] = (d, F)
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def random_params(shapes):
    """Norms near 1, matrices ~ N(0, 0.25/fan_in), rounded to fp32 so that the
    C side starts from the same numbers; float64 leaves with gradients."""
    P = {}
    for k, s in shapes.items():
        if k.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(s, dtype=DT)
        else:
            t = torch.randn(s, dtype=DT) * (0.5 / math.sqrt(s[-1]))
        P[k] = t.float().double().requires_grad_(True)
    return P


def random_batch(seq_lens, V):
    """Packed sequences: seq_start, random tokens, per-sequence positions."""
    seq_start = [0]
    for L in seq_lens:
        seq_start.append(seq_start[-1] + L)
    tokens = torch.randint(0, V, (seq_start[-1],))
    positions = torch.cat([torch.arange(L) for L in seq_lens])
    return seq_start, seq_start[-1], tokens, positions


def make_case(name, cfg, seq_lens, inv_temp, out):
    V = cfg["vocab_size"]
    shapes = param_shapes(cfg)
    P = random_params(shapes)
    seq_start, n, tokens, positions = random_batch(seq_lens, V)
    targets = torch.full((n,), -1, dtype=torch.long)
    for s in range(len(seq_lens)):
        a, b = seq_start[s], seq_start[s + 1]
        # the first two tokens of each sequence act as the prompt (no target)
        for i in range(a + 1, b - 1):
            targets[i] = tokens[i + 1]
        targets[b - 1] = torch.randint(0, V, (1,)).item()
    w = torch.randn(n, dtype=DT).float().double()
    u = (0.3 * torch.randn(n, dtype=DT)).float().double()
    logp, ent = forward(cfg, P, tokens, positions, seq_start, targets, inv_temp)
    sel = (targets >= 0).to(DT)
    loss = (-(w * logp) + u * ent).mul(sel).sum()
    loss.backward()

    # finite-difference spot checks of the reference itself, in float64:
    # central differences at the largest-gradient coordinate of every tensor
    with torch.no_grad():
        for k, t in P.items():
            i = int(t.grad.abs().argmax())
            flat = t.view(-1)
            old = flat[i].item()
            h = 1e-6
            flat[i] = old + h
            lp_, en_ = forward(cfg, P, tokens, positions, seq_start, targets, inv_temp)
            lplus = (-(w * lp_) + u * en_).mul(sel).sum().item()
            flat[i] = old - h
            lp_, en_ = forward(cfg, P, tokens, positions, seq_start, targets, inv_temp)
            lminus = (-(w * lp_) + u * en_).mul(sel).sum().item()
            flat[i] = old
            fd, an = (lplus - lminus) / (2 * h), t.grad.view(-1)[i].item()
            assert abs(fd - an) <= 1e-6 * max(1.0, abs(an)), (k, fd, an)

    blob = bytearray()
    index = {}

    def put(key, arr, kind):
        flat = arr.detach().reshape(-1).tolist()
        index[key] = {"offset": len(blob), "count": len(flat), "dtype": kind}
        blob.extend(struct.pack("<%d%s" % (len(flat), "f" if kind == "f32" else "i"), *flat))

    for k, t in P.items():
        put("w:" + k, t, "f32")
        put("g:" + k, t.grad, "f32")
    put("tokens", tokens, "i32")
    put("positions", positions, "i32")
    put("targets", targets, "i32")
    put("dlogp", -w, "f32")
    put("dentropy", u, "f32")
    put("logp", logp, "f32")
    put("entropy", ent, "f32")
    meta = {"config": cfg, "seq_start": seq_start, "inv_temp": inv_temp, "loss": loss.item(),
            "shapes": {k: list(s) for k, s in shapes.items()}, "arrays": index,
            "generator": "tests/reference/make_transformer_fixtures.py (torch %s, float64)" % torch.__version__}
    with open(f"{out}/{name}.bin", "wb") as f:
        f.write(blob)
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: {n} tokens, {sum(t.numel() for t in P.values())} params, loss {loss.item():.6f}")


def adamw_case(name, cfg, seq_lens, n_prompt, steps, opt, out):
    """`steps` AdamW steps of token-mean NLL on one batch, as torch.optim.AdamW
    does them: parameter groups without weight decay for norms, biases and
    embeddings; global-norm clipping by torch.nn.utils.clip_grad_norm_.
    Records the loss and the pre-clipping gradient norm of every step."""
    torch.manual_seed(99)
    shapes = param_shapes(cfg)
    P = random_params(shapes)
    initial = {k: t.detach().clone() for k, t in P.items()}
    seq_start, n, tokens, positions = random_batch(seq_lens, cfg["vocab_size"])
    targets = torch.full((n,), -1, dtype=torch.long)
    for s_ in range(len(seq_lens)):
        a, b = seq_start[s_], seq_start[s_ + 1]
        for i in range(a + n_prompt - 1, b - 1):
            targets[i] = tokens[i + 1]
    is_nd = lambda k: k.endswith("norm.weight") or k.endswith(".bias") or "embed_tokens" in k
    o = torch.optim.AdamW([{"params": [t for k, t in P.items() if not is_nd(k)], "weight_decay": opt["weight_decay"]},
                           {"params": [t for k, t in P.items() if is_nd(k)], "weight_decay": 0.0}],
                          lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    losses, norms = [], []
    for _ in range(steps):
        o.zero_grad()
        logp, _ = forward(cfg, P, tokens, positions, seq_start, targets, 1.0)
        sel = targets >= 0
        loss = -logp[sel].sum() / sel.sum()
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(list(P.values()), opt["max_grad_norm"]).item())
        losses.append(loss.item())
        o.step()
    blob = bytearray()
    index = {}
    for k, t in initial.items():
        flat = t.reshape(-1).tolist()
        index["w:" + k] = {"offset": len(blob), "count": len(flat), "dtype": "f32"}
        blob.extend(struct.pack("<%df" % len(flat), *flat))
    flat = tokens.tolist()
    index["tokens"] = {"offset": len(blob), "count": len(flat), "dtype": "i32"}
    blob.extend(struct.pack("<%di" % len(flat), *flat))
    meta = {"config": cfg, "seq_start": seq_start, "n_prompt": n_prompt, "optimizer": opt, "losses": losses,
            "grad_norms": norms, "shapes": {k: list(v) for k, v in shapes.items()}, "arrays": index,
            "generator": "tests/reference/make_transformer_fixtures.py (torch %s, float64)" % torch.__version__}
    with open(f"{out}/{name}.bin", "wb") as f:
        f.write(blob)
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: {steps} AdamW steps, loss {losses[0]:.6f} -> {losses[-1]:.6f}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/reference/fixtures"
    base = dict(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=96, vocab_size=300,
                max_seq_len=64, rope_theta=10000.0, rms_eps=1e-5, tie_embeddings=False, attention_bias=False)
    make_case("transformer_llama_gqa", dict(base, arch="llama"), [5, 9, 3], 1.0 / 0.7, out)
    qwen = dict(base, arch="qwen2", n_kv_heads=1, tie_embeddings=True, attention_bias=True, rope_theta=500000.0,
                rope_scaling=dict(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=16))
    make_case("transformer_qwen2_tied_bias_llama3rope", qwen, [12, 4], 1.0, out)
    adamw_case("adamw_llama_10_steps", dict(base, arch="llama"), [7, 11, 6, 9], 3, 10,
               dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_grad_norm=1.0), out)


if __name__ == "__main__":
    main()
