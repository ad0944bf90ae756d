#!/usr/bin/env python3
"""Reference logprobs of SmolLM2-135M-Instruct (the GGUF of scripts/fetch-model.sh)
for tests/unit/test_smollm2.c.

Stage 1 (python with `gguf`, `numpy`, `tokenizers` from pip): dequantize every
tensor with gguf-py (an implementation independent of ours), undo llama.cpp's
Q/K row permutation (written here from convert_hf_to_gguf's `permute`), and
tokenize four prompts (two ChatML-templated, two plain, >= 64 tokens each)
with Hugging Face `tokenizers` and the SmolLM2 tokenizer.json.
Stage 2 (Debian's python3-torch): the float64 PyTorch decoder of
make_transformer_fixtures.py on those weights gives the logprob of every next
token and the entropy at every position, and a greedy 32-token continuation.

Rerun:
    pip install gguf numpy tokenizers; apt-get install python3-torch
    scripts/fetch-model.sh
    python3 tests/reference/make_smollm2_fixtures.py models/SmolLM2-135M-Instruct.Q4_1.gguf tests/reference/fixtures
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PROMPTS = [
    ("chat", "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May? Think step by step, "
             "and put the final number inside <answer></answer> tags at the end of your reply."),
    ("chat", "Explain in a few sentences why the sky looks blue during the day and red at sunset, "
             "and mention what Rayleigh scattering is, who first described it, and how it depends on the wavelength of light."),
    ("plain", "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea, "
              "there lived an old fisherman who told stories to the children every evening about the stars. "
              "He spoke of sailors who crossed the ocean guided only by the light of the north star, and of storms "
              "that came without warning from beyond the horizon."),
    ("plain", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
              "# Print the first ten Fibonacci numbers\nfor i in range(10):\n    print(fibonacci(i))\n\nassert fibonacci(10) == 55\n"),
]


def stage1(gguf_path, out_dir):
    import gguf
    import numpy as np
    from tokenizers import Tokenizer

    r = gguf.GGUFReader(gguf_path)
    field = lambda k: r.fields[k].parts[r.fields[k].data[0]]
    n_head, n_kv = int(field("llama.attention.head_count")[0]), int(field("llama.attention.head_count_kv")[0])
    names = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    per_layer = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                 "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                 "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    arrays = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        base, kind = t.name.rsplit(".", 1)
        if base.startswith("blk."):
            _, l, part = base.split(".", 2)
            name = f"model.layers.{l}.{per_layer[part]}.{kind}"
            if part in ("attn_q", "attn_k"):
                h = n_head if part == "attn_q" else n_kv
                # inverse of permute(): (h, 2, hd/2, in) <- (h, hd/2, 2, in)
                w = w.reshape(h, w.shape[0] // h // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
        else:
            name = f"{names[base]}.{kind}"
        arrays[name] = w
    tok = Tokenizer.from_file(os.path.join(HERE, "fixtures", "smollm2", "tokenizer.json"))
    seqs = []
    for kind, text in PROMPTS:
        if kind == "chat":
            text = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
                    "<|im_start|>assistant\n")
        ids = tok.encode(text, add_special_tokens=False).ids
        assert len(ids) >= 64, (kind, len(ids))
        seqs.append({"kind": kind, "text": text, "ids": ids})
    cfg = {"n_layers": int(field("llama.block_count")[0]), "dim": int(field("llama.embedding_length")[0]),
           "n_heads": n_head, "n_kv_heads": n_kv, "head_dim": int(field("llama.embedding_length")[0]) // n_head,
           "ffn_dim": int(field("llama.feed_forward_length")[0]), "vocab_size": arrays["model.embed_tokens.weight"].shape[0],
           "rope_theta": float(field("llama.rope.freq_base")[0]),
           "rms_eps": float(field("llama.attention.layer_norm_rms_epsilon")[0]),
           "tie_embeddings": "lm_head.weight" not in arrays, "attention_bias": False}
    npz = os.path.join("/tmp", "smollm2_dequant.npz")
    np.savez(npz, **arrays)
    with open("/tmp/smollm2_stage1.json", "w") as f:
        json.dump({"config": cfg, "seqs": seqs, "npz": npz}, f)
    subprocess.check_call(["/usr/bin/python3", os.path.abspath(__file__), "--stage2", out_dir])


def stage2(out_dir):
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    from make_transformer_fixtures import forward  # the same float64 reference decoder

    meta = json.load(open("/tmp/smollm2_stage1.json"))
    cfg = meta["config"]
    data = np.load(meta["npz"])
    P = {k: torch.from_numpy(data[k]).double() for k in data.files}
    out = {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "generator": "tests/reference/make_smollm2_fixtures.py "
           "(gguf-py dequantization, torch %s float64)" % torch.__version__, "seqs": []}
    for s in meta["seqs"]:
        ids = torch.tensor(s["ids"])
        n = len(ids)
        targets = torch.full((n,), -1, dtype=torch.long)
        targets[:-1] = ids[1:]
        with torch.no_grad():
            logp, ent = forward(cfg, P, ids, torch.arange(n), [0, n], targets, 1.0)
            greedy = []
            cur = ids.clone()
            for _ in range(32):
                nxt = int(torch.argmax(last_logits(cfg, P, cur)))
                greedy.append(nxt)
                cur = torch.cat([cur, torch.tensor([nxt])])
        out["seqs"].append({"kind": s["kind"], "ids": s["ids"], "logprobs": logp[:-1].tolist(),
                            "entropy": ent[:-1].tolist(), "greedy32": greedy})
        print(f"{s['kind']}: {n} tokens, mean logprob {logp[:-1].mean().item():.4f}, greedy {greedy[:8]}...")
    with open(os.path.join(out_dir, "smollm2_logprobs.json"), "w") as f:
        json.dump(out, f)


def last_logits(cfg, P, ids):
    """Logits at the last position, for greedy decoding (same decoder as forward())."""
    import math
    import torch
    from make_transformer_fixtures import inv_freq, rmsnorm, rotate_half
    d, H, KV, hd = cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    n = len(ids)
    x = P["model.embed_tokens.weight"][ids]
    freqs = torch.arange(n).double()[:, None] * inv_freq(cfg)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    mask = torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), diagonal=1)
    for l in range(cfg["n_layers"]):
        p = lambda name: P[f"model.layers.{l}.{name}"]
        h = rmsnorm(x, p("input_layernorm.weight"), cfg["rms_eps"])
        q = (h @ p("self_attn.q_proj.weight").T).view(n, H, hd)
        k = (h @ p("self_attn.k_proj.weight").T).view(n, KV, hd)
        v = (h @ p("self_attn.v_proj.weight").T).view(n, KV, hd)
        q = q * cos + rotate_half(q) * sin
        k = (k * cos + rotate_half(k) * sin).repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd) + mask
        x = x + torch.einsum("hij,jhd->ihd", s.softmax(-1), v).reshape(n, H * hd) @ p("self_attn.o_proj.weight").T
        h = rmsnorm(x, p("post_attention_layernorm.weight"), cfg["rms_eps"])
        x = x + (torch.nn.functional.silu(h @ p("mlp.gate_proj.weight").T) * (h @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
    h = rmsnorm(x[-1:], P["model.norm.weight"], cfg["rms_eps"])
    head = P["model.embed_tokens.weight"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    return (h @ head.T)[0]


if __name__ == "__main__":
    if sys.argv[1] == "--stage2":
        stage2(sys.argv[2])
    else:
        stage1(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "fixtures"))
