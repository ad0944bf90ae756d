#!/usr/bin/env python3
"""The real Gemma 3 270M GGUF through our transformer against Hugging Face's Gemma3ForCausalLM.

The reference is transformers' Gemma3ForCausalLM in float64 fed the GGUF's
own weights dequantized by gguf-py (so quantization is not part of the
comparison; llama.cpp is not used because it multiplies Q4_K weights by
8-bit-quantized activations, which moves logprobs by up to ~0.8 here).
GGUF stores Gemma's norm weights as 1 + w (llama.cpp's converter adds the
1), so w = stored - 1 for HF. Gemma3RMSNorm's internal float32 cast is
patched away as in make_arch_fixtures.py.

For each prompt (BOS + token ids: two short ones and one of 700 tokens, longer
than the 512-token sliding window) it compares the per-token logprobs and
entropies that `rlpost logprobs MODEL --tokens ...` prints with the
reference, and prints the largest differences. Exit status 1 when any
exceeds --tol (default 2e-3, the SmolLM2 check's tolerance).

Run (needs a build with the Gemma 3 loader, torch, transformers, gguf;
about 3 minutes on 2 cores, 4 GB of memory):
    python3 tests/reference/check_gemma3_gguf_hf.py build/examples/rlpost/rlpost \\
        models/gemma-3-270m-q4_k_m.gguf

Observed (issue 21, 2026-12-04, fp32 CPU backend): max |Δlogp| 1.2e-5 /
3.4e-5 / 1.2e-4 and max |Δentropy| 1.4e-5 / 1.1e-5 / 5.7e-4 on the 43-, 25-
and 701-token prompts (the CLI prints 6 decimals).
"""
import argparse
import json
import subprocess
import sys

import numpy as np
import torch
from gguf import GGUFReader
from gguf.quants import dequantize
from transformers import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.models.gemma3 import modeling_gemma3


def _norm(self, x):
    return self._norm(x) * (1.0 + self.weight)


modeling_gemma3.Gemma3RMSNorm.forward = _norm

NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
         "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
         "ffn_norm": "pre_feedforward_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj", "post_ffw_norm": "post_feedforward_layernorm"}

# Gemma 3 270M: what llama.cpp assumes for keys the file lacks (local RoPE
# base 10000, every 6th layer global, query_pre_attn_scalar = head_dim)
N_LAYERS = 18


def reference_model(path):
    r = GGUFReader(path)
    types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(N_LAYERS)]
    cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=N_LAYERS,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=256, rms_norm_eps=1e-6,
                           tie_word_embeddings=True, max_position_embeddings=32768, pad_token_id=None,
                           query_pre_attn_scalar=256, sliding_window=512, layer_types=types,
                           final_logit_softcapping=None, attn_logit_softcapping=None,
                           rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})
    m = Gemma3ForCausalLM(cfg).double().eval()
    m.config._attn_implementation = "eager"
    sd = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            hf = "model.norm.weight"
        else:
            hf = f"model.layers.{parts[1]}.{NAMES[parts[2]]}.weight"
        w = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float64))
        sd[hf] = w - 1.0 if hf.endswith("norm.weight") else w
    sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return m


def prompts():
    g = torch.Generator().manual_seed(3)
    # ordinary ids below 236000 (text pieces); a repeated block makes the
    # long prompt predictable, so its logprobs are not all near -12
    block = torch.randint(1000, 200000, (97,), generator=g).tolist()
    return [[2] + torch.randint(1000, 200000, (42,), generator=g).tolist(),
            [2, 1995, 236769, 236760, 236769, 236778, 236770, 1223, 107] + block[:16],
            [2] + (block * 8)[:700]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rlpost")
    ap.add_argument("model")
    ap.add_argument("--tol", type=float, default=2e-3)
    a = ap.parse_args()
    m = reference_model(a.model)
    worst = 0.0
    for toks in prompts():
        out = subprocess.run([a.rlpost, "logprobs", a.model, "--tokens", ",".join(map(str, toks)), "--threads", "2"],
                             check=True, capture_output=True, text=True).stdout
        ours = json.loads(out)["tokens"]
        with torch.no_grad():
            ls = m(input_ids=torch.tensor(toks)[None], use_cache=False).logits[0].log_softmax(-1)
        dl = max(abs(ours[i + 1]["logprob"] - ls[i, toks[i + 1]].item()) for i in range(len(toks) - 1))
        dh = max(abs(ours[i + 1]["entropy"] + (ls[i].exp() * ls[i]).sum().item()) for i in range(len(toks) - 1))
        print(f"{len(toks)} tokens: max |Δlogp| {dl:.2e}, max |Δentropy| {dh:.2e}")
        worst = max(worst, dl, dh)
    print("OK" if worst <= a.tol else f"FAIL: {worst:.3e} > {a.tol}")
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
