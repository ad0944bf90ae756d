#!/usr/bin/env python3
"""Checks that Hugging Face `transformers` loads what our writer saves.

Rerun:
    meson setup build && ninja -C build            # builds tests/hf_roundtrip_writer
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install torch transformers safetensors numpy
    /tmp/venv/bin/python tests/reference/check_hf_roundtrip.py [--build build] \
        [--stories ../shared/data/llama2c/stories260K.bin]

What it checks, per model folder written by build/tests/hf_roundtrip_writer
(Llama untied with llama3 RoPE scaling, tied Llama, Qwen2 with q/k/v bias tied
and untied, Mistral, Llama in BF16 and in F16, Qwen3 tied and untied, Gemma 3
tied and untied with one local layer, and with linear RoPE scaling on its global
layers and a logit soft-cap):
  * AutoModelForCausalLM.from_pretrained loads it as the right class with no
    missing, unexpected or mismatched keys;
  * every tensor equals our raw fp32 dump bit for bit (F32 files), or torch's
    own rounding of that dump (.to(bfloat16/float16)) bit for bit; Gemma's
    norm weights equal dump - 1 (our weights hold the effective scale 1 + w);
  * tied models share one tensor for embed_tokens and lm_head;
  * config values (sizes, RoPE scaling, eps) read back as written.
And for stories260K.bin converted from llama2.c (our q/k row permutation):
  * transformers' logits on the converted folder match an independent float64
    NumPy port of llama2.c's run.c forward pass on the original file
    (interleaved RoPE, no permutation) within 1e-4 absolute (fp32 vs fp64 over
    5 layers; logits are O(10)).
Exit status 0 when everything holds.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

failures = []


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what)
    if not cond:
        failures.append(what)


def raw_tensors(d):
    meta = json.load(open(os.path.join(d, "raw.json")))
    flat = np.fromfile(os.path.join(d, "raw.bin"), dtype="<f4")
    out = {}
    for m in meta:
        n = int(np.prod(m["shape"]))
        out[m["name"]] = torch.from_numpy(flat[m["offset"]:m["offset"] + n].reshape(m["shape"]).copy())
    return out


def check_folder(d, name):
    print(f"[{name}]")
    cfg = json.load(open(os.path.join(d, "config.json")))
    try:  # transformers >= 4.56 spells it dtype
        model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True,
                                                           dtype=torch.float32)
    except TypeError:
        model, info = AutoModelForCausalLM.from_pretrained(d, output_loading_info=True,
                                                           torch_dtype=torch.float32)
    check(type(model).__name__ == cfg["architectures"][0],
          f"{name}: class {type(model).__name__}")
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        check(k in info and len(info[k]) == 0, f"{name}: {k} = {info.get(k, 'not reported')}")
    sd = model.state_dict()
    raw = raw_tensors(d)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(name.rsplit("_", 1)[-1])
    n_exact = 0
    for k, v in raw.items():
        if k not in sd:
            check(False, f"{name}: {k} not in transformers' state_dict")
            continue
        want = v if dtype is None else v.to(dtype).float()
        if cfg.get("model_type") == "gemma3_text" and (k.endswith(("layernorm.weight", "_norm.weight"))
                                                       or k == "model.norm.weight"):
            want = want - 1.0  # fp32, as our writer subtracts
        got = sd[k].detach().float()
        same = got.shape == want.shape and torch.equal(got.view(torch.int32), want.view(torch.int32))
        if not same:
            check(False, f"{name}: {k} differs")
        n_exact += same
    check(n_exact == len(raw), f"{name}: {n_exact}/{len(raw)} tensors bit-exact "
          f"({'F32' if dtype is None else str(dtype).split('.')[-1] + ' rounding of our fp32'})")
    extra = set(sd) - set(raw)
    check(not extra, f"{name}: transformers has no tensors we did not write ({sorted(extra)[:3]})")
    if cfg.get("tie_word_embeddings"):
        check(model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(),
              f"{name}: lm_head is tied to embed_tokens")
    hc = AutoConfig.from_pretrained(d)
    check(hc.hidden_size == cfg["hidden_size"] and hc.num_key_value_heads == cfg["num_key_value_heads"]
          and abs(hc.rms_norm_eps - cfg["rms_norm_eps"]) == 0, f"{name}: config sizes and eps")
    rp = getattr(hc, "rope_parameters", None) or {}  # transformers 5
    rp = rp.get("full_attention", rp)  # Gemma 3: per layer kind
    theta = rp.get("rope_theta", getattr(hc, "rope_theta", None))
    check(theta == cfg["rope_theta"], f"{name}: rope_theta {theta} as transformers reads it")
    if cfg.get("rope_scaling"):
        rs = rp if rp.get("rope_type") else hc.rope_scaling
        check(rs.get("rope_type") == cfg["rope_scaling"]["rope_type"]
              and rs["factor"] == cfg["rope_scaling"]["factor"]
              and rs.get("low_freq_factor") == cfg["rope_scaling"].get("low_freq_factor"),
              f"{name}: rope scaling as transformers reads it {rs}")
    if cfg.get("model_type") == "gemma3_text":
        lt = getattr(hc, "layer_types", None)
        check(lt == cfg["layer_types"] and hc.sliding_window == cfg["sliding_window"]
              and hc.query_pre_attn_scalar == cfg["query_pre_attn_scalar"],
              f"{name}: layer_types {lt}, window {hc.sliding_window}, query_pre_attn_scalar as written")
        rpl = (getattr(hc, "rope_parameters", None) or {}).get("sliding_attention", {})
        check(rpl.get("rope_theta") == cfg["rope_local_base_freq"] and rpl.get("rope_type") == "default",
              f"{name}: local rope {rpl} as transformers reads it (no scaling on local layers)")
        check(hc.final_logit_softcapping == cfg["final_logit_softcapping"],
              f"{name}: final_logit_softcapping {hc.final_logit_softcapping}")
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 9, 3]])).logits
    check(bool(torch.isfinite(logits).all()), f"{name}: forward pass gives finite logits")
    return model


def run_c_forward(path, tokens):
    """llama2.c run.c forward in float64 on the original legacy file."""
    data = open(path, "rb").read()
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    f = np.frombuffer(data, dtype="<f4", offset=28).astype(np.float64)
    hs = dim // n_heads
    kv_dim = hs * n_kv
    pos = 0

    def take(n, shape):
        nonlocal pos
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a
    emb = take(vocab * dim, (vocab, dim))
    rms_att = take(n_layers * dim, (n_layers, dim))
    wq = take(n_layers * dim * dim, (n_layers, dim, dim))
    wk = take(n_layers * kv_dim * dim, (n_layers, kv_dim, dim))
    wv = take(n_layers * kv_dim * dim, (n_layers, kv_dim, dim))
    wo = take(n_layers * dim * dim, (n_layers, dim, dim))
    rms_ffn = take(n_layers * dim, (n_layers, dim))
    w1 = take(n_layers * hidden * dim, (n_layers, hidden, dim))
    w2 = take(n_layers * dim * hidden, (n_layers, dim, hidden))
    w3 = take(n_layers * hidden * dim, (n_layers, hidden, dim))
    rms_final = take(dim, (dim,))
    pos += seq * hs  # freq_cis_real + freq_cis_imag
    wcls = emb if shared else take(vocab * dim, (vocab, dim))

    def rmsnorm(x, w):
        return x * w / np.sqrt(np.mean(x * x) + 1e-5)

    def rope(v, p, n):
        v = v.copy()
        for i in range(0, n, 2):
            fr = 1.0 / 10000.0 ** ((i % hs) / hs)
            c, s = np.cos(p * fr), np.sin(p * fr)
            v[i], v[i + 1] = v[i] * c - v[i + 1] * s, v[i] * s + v[i + 1] * c
        return v
    kc = np.zeros((n_layers, len(tokens), kv_dim))
    vc = np.zeros((n_layers, len(tokens), kv_dim))
    out = []
    for p, tok in enumerate(tokens):
        x = emb[tok].copy()
        for l in range(n_layers):
            xb = rmsnorm(x, rms_att[l])
            q = rope(wq[l] @ xb, p, dim)
            kc[l, p] = rope(wk[l] @ xb, p, kv_dim)
            vc[l, p] = wv[l] @ xb
            att_out = np.zeros(dim)
            for h in range(n_heads):
                g = h // (n_heads // n_kv)
                qh = q[h * hs:(h + 1) * hs]
                sc = np.array([qh @ kc[l, t, g * hs:(g + 1) * hs] for t in range(p + 1)]) / np.sqrt(hs)
                a = np.exp(sc - sc.max())
                a /= a.sum()
                att_out[h * hs:(h + 1) * hs] = sum(a[t] * vc[l, t, g * hs:(g + 1) * hs]
                                                   for t in range(p + 1))
            x = x + wo[l] @ att_out
            xb = rmsnorm(x, rms_ffn[l])
            h1 = w1[l] @ xb
            x = x + w2[l] @ ((h1 / (1 + np.exp(-h1))) * (w3[l] @ xb))
        out.append(wcls @ rmsnorm(x, rms_final))
    return np.array(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--stories", default=os.path.join(ROOT, "..", "shared", "data", "llama2c",
                                                      "stories260K.bin"))
    args = ap.parse_args()
    writer = os.path.join(args.build, "tests", "hf_roundtrip_writer")
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    with tempfile.TemporaryDirectory() as out:
        cmd = [writer, out] + ([args.stories] if os.path.exists(args.stories) else [])
        subprocess.run(cmd, check=True)
        for name in sorted(os.listdir(out)):
            model = check_folder(os.path.join(out, name), name)
            if name == "stories260K":
                tokens = [1, 403, 73, 290, 36, 511, 2, 100]
                ref = run_c_forward(args.stories, tokens)
                with torch.no_grad():
                    hf = model(torch.tensor([tokens])).logits[0].double().numpy()
                err = np.abs(hf - ref).max()
                check(err < 1e-4, f"stories260K: transformers logits vs run.c port, max abs diff "
                      f"{err:.2e} (logit scale {np.abs(ref).max():.1f})")
                # negative control: undo our q/k row permutation (back to the
                # file's interleaved order) and the match must break
                with torch.no_grad():
                    for name_, p_ in model.named_parameters():
                        if name_.endswith(("q_proj.weight", "k_proj.weight")):
                            hd = model.config.head_dim
                            h = p_.shape[0] // hd
                            p_.copy_(p_.view(h, 2, hd // 2, -1).transpose(1, 2).reshape(p_.shape))
                    bad = model(torch.tensor([tokens])).logits[0].double().numpy()
                err_bad = np.abs(bad - ref).max()
                check(err_bad > 1e-2, f"stories260K: without the permutation the diff is "
                      f"{err_bad:.2e} (so the comparison can tell)")
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
