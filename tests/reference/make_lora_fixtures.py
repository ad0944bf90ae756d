#!/usr/bin/env python3
"""Reference fixtures for LoRA adapters in the transformer (tests/unit/test_lora.c).

Hugging Face PEFT's own LoRA (get_peft_model with a LoraConfig, dropout 0)
on transformers' LlamaForCausalLM / Qwen2ForCausalLM, built from config
objects (no download), random base weights and random NON-ZERO adapters
(B = 0 would hide every bug in the B·A path), run in float64, gives for a
packed batch of sequences of different lengths (each run on its own,
positions from 0):
  * per-token logprobs of the targets and entropies under softmax(logits / T);
  * the gradient of L = -sum_t w_t logp_t + sum_t u_t H_t for every adapter
    tensor (lora_A, lora_B), the base frozen as PEFT freezes it;
  * the merged model's logits (merge_and_unload) at every row;
  * for the Llama case, PEFT's own save_pretrained folder of the adapters
    (lora_llama_peft/: adapter_config.json, adapter_model.safetensors), for
    the loader test.

Files are in the format of make_transformer_fixtures.py (a JSON index + a
little-endian float32/int32 blob; tests/unit/model_fixture.h reads it):
"w:<name>" base weights, "l:<PEFT saved name>" adapter weights and
"lg:<name>" their gradients; the JSON "lora" holds rank, alpha, rslora and
the target list. Every number is rounded to float32 first, so both sides
start from the same values. HF's RMSNorm casts to float32 internally (for
half-precision models); its forward is patched to the same formula in the
input's dtype so the reference stays float64 end to end.

Rerun (needs torch, transformers 4.46 and peft 0.13; the dev box's
/work/venv-peft):
    python3 tests/reference/make_lora_fixtures.py tests/reference/fixtures
"""
import json
import struct
import sys

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.models.llama import modeling_llama
from transformers.models.qwen2 import modeling_qwen2

DT = torch.float64


def _norm(self, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


modeling_llama.LlamaRMSNorm.forward = _norm
modeling_qwen2.Qwen2RMSNorm.forward = _norm


def f32(t):
    return t.float().double()


def randomise_base(model):
    ours = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                t = f32(1.0 + 0.2 * torch.randn(p.shape, dtype=DT))
            elif name.endswith("bias"):
                t = f32(0.1 * torch.randn(p.shape, dtype=DT))
            else:
                fan = p.shape[-1] if "embed_tokens" not in name else 4.0
                t = f32(torch.randn(p.shape, dtype=DT) * (0.5 / fan ** 0.5))
            p.copy_(t)
            ours[name] = t
    return ours


def make_case(name, model, ours_cfg, lcfg, seq_lens, inv_temp, out, peft_dir=None):
    model = model.double()
    model.config._attn_implementation = "eager"
    base = randomise_base(model)
    pm = get_peft_model(model, LoraConfig(r=lcfg["rank"], lora_alpha=lcfg["alpha"], use_rslora=lcfg["rslora"],
                                          target_modules=lcfg["targets"], lora_dropout=0.0, bias="none"))
    pm.eval()
    adapters = {}
    with torch.no_grad():
        for pname, p in pm.named_parameters():
            if "lora_" not in pname:
                continue
            fan = p.shape[-1]
            t = f32(torch.randn(p.shape, dtype=DT) * (0.5 / fan ** 0.5))
            p.copy_(t)
            adapters[pname.replace(".default", "")] = p  # PEFT's saved name

    V = ours_cfg["vocab_size"]
    seq_start = [0]
    for L in seq_lens:
        seq_start.append(seq_start[-1] + L)
    n = seq_start[-1]
    tokens = torch.randint(0, V, (n,))
    positions = torch.cat([torch.arange(L) for L in seq_lens])
    targets = torch.full((n,), -1, dtype=torch.long)
    for s in range(len(seq_lens)):
        a, b = seq_start[s], seq_start[s + 1]
        for i in range(a + 1, b - 1):
            targets[i] = tokens[i + 1]
        targets[b - 1] = torch.randint(0, V, (1,)).item()
    w = f32(torch.randn(n, dtype=DT))
    u = f32(0.3 * torch.randn(n, dtype=DT))

    def run(m):
        logits = []
        for s in range(len(seq_lens)):
            a, b = seq_start[s], seq_start[s + 1]
            o = m(input_ids=tokens[a:b][None], position_ids=positions[a:b][None], use_cache=False)
            logits.append(o.logits[0])
        return torch.cat(logits)

    logits = run(pm)
    logsm = (logits * inv_temp).log_softmax(-1)
    sel = targets >= 0
    logp = torch.zeros(n, dtype=DT)
    ent = torch.zeros(n, dtype=DT)
    logp[sel] = logsm[sel].gather(1, targets[sel][:, None])[:, 0]
    ent[sel] = -(logsm[sel].exp() * logsm[sel]).sum(-1)
    loss = (-(w * logp) + u * ent).mul(sel.to(DT)).sum()
    loss.backward()
    frozen_grads = [p for p in pm.parameters() if not p.requires_grad and p.grad is not None]
    assert not frozen_grads, "PEFT left the base trainable"

    if peft_dir:  # PEFT's own folder of these adapters (float32, as save_pretrained writes them)
        import os
        pm.float().save_pretrained(f"{out}/{peft_dir}")
        pm.double()
        readme = f"{out}/{peft_dir}/README.md"
        if os.path.exists(readme):
            os.remove(readme)
    with torch.no_grad():
        merged_logits = run(pm.merge_and_unload())

    blob = bytearray()
    index = {}

    def put(key, arr, kind):
        flat = arr.detach().reshape(-1).tolist()
        index[key] = {"offset": len(blob), "count": len(flat), "dtype": kind}
        blob.extend(struct.pack("<%d%s" % (len(flat), "f" if kind == "f32" else "i"), *flat))

    shapes = {}
    for k, t in base.items():
        if k == "lm_head.weight" and ours_cfg["tie_embeddings"]:
            continue
        shapes[k] = list(t.shape)
        put("w:" + k, t, "f32")
    for k, p in adapters.items():
        put("l:" + k, p, "f32")
        put("lg:" + k, p.grad, "f32")
    put("tokens", tokens, "i32")
    put("positions", positions, "i32")
    put("targets", targets, "i32")
    put("dlogp", -w, "f32")
    put("dentropy", u, "f32")
    put("logp", logp, "f32")
    put("entropy", ent, "f32")
    put("merged_logits", merged_logits, "f32")
    meta = {"config": ours_cfg, "lora": lcfg, "adapters": {k: list(p.shape) for k, p in adapters.items()},
            "seq_start": seq_start, "inv_temp": inv_temp, "loss": loss.item(), "shapes": shapes, "arrays": index,
            "generator": "tests/reference/make_lora_fixtures.py (peft %s, transformers %s %s, torch %s, float64)"
                         % (peft.__version__, transformers.__version__, type(model).__name__, torch.__version__)}
    with open(f"{out}/{name}.bin", "wb") as f:
        f.write(blob)
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: {n} tokens, {len(adapters)} adapter tensors, loss {loss.item():.6f}")


def llama_case(out):
    d, H, KV, hd, F, V, nl = 32, 4, 2, 8, 48, 64, 2
    hf = LlamaConfig(vocab_size=V, hidden_size=d, intermediate_size=F, num_hidden_layers=nl, num_attention_heads=H,
                     num_key_value_heads=KV, rms_norm_eps=1e-5, tie_word_embeddings=False,
                     max_position_embeddings=64, rope_theta=10000.0, pad_token_id=None)
    ours = dict(arch="llama", n_layers=nl, dim=d, n_heads=H, n_kv_heads=KV, head_dim=hd, ffn_dim=F, vocab_size=V,
                max_seq_len=64, rope_theta=10000.0, rms_eps=1e-5, tie_embeddings=False, attention_bias=False)
    lcfg = dict(rank=4, alpha=8.0, rslora=False,
                targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    make_case("lora_llama_all", LlamaForCausalLM(hf), ours, lcfg, [7, 12, 9], 1.0 / 0.8, out, "lora_llama_peft")


def qwen2_case(out):
    d, H, KV, hd, F, V, nl = 32, 4, 2, 8, 40, 64, 2
    hf = Qwen2Config(vocab_size=V, hidden_size=d, intermediate_size=F, num_hidden_layers=nl, num_attention_heads=H,
                     num_key_value_heads=KV, rms_norm_eps=1e-6, tie_word_embeddings=True,
                     max_position_embeddings=64, rope_theta=1000000.0, pad_token_id=None, use_sliding_window=False)
    ours = dict(arch="qwen2", n_layers=nl, dim=d, n_heads=H, n_kv_heads=KV, head_dim=hd, ffn_dim=F, vocab_size=V,
                max_seq_len=64, rope_theta=1000000.0, rms_eps=1e-6, tie_embeddings=True, attention_bias=True)
    lcfg = dict(rank=3, alpha=5.0, rslora=True, targets=["q_proj", "v_proj", "down_proj"])
    make_case("lora_qwen2_rslora", Qwen2ForCausalLM(hf), ours, lcfg, [6, 11, 8], 1.0, out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/reference/fixtures"
    torch.manual_seed(2323)
    llama_case(out)
    qwen2_case(out)


if __name__ == "__main__":
    main()
