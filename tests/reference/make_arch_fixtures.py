#!/usr/bin/env python3
"""Reference fixtures for Qwen3 and Gemma 3 in the transformer (tests/unit/test_transformer_arch.c).

Hugging Face transformers' own Qwen3ForCausalLM and Gemma3ForCausalLM, built
from config objects (no download), with random weights from a fixed seed,
run in float64 (.double()), give for a packed batch of sequences of
different lengths (each sequence run on its own, positions from 0):
  * full logits (n, vocab): after Gemma's final soft-cap, before any temperature;
  * per-token logprobs of the targets and entropies under softmax(logits / T);
  * the gradient of L = -sum_t w_t logp_t + sum_t u_t H_t for every parameter.

Files are in the format of make_transformer_fixtures.py (a JSON index +
little-endian float32/int32 blob; tests/unit/model_fixture.h reads it);
the JSON "config" also holds the family fields of rlpi_model_config
(qk_norm, post_norms, activation, embed_scale, attn_scale, final_softcap,
sliding_window, rope_theta_local, local_layers) under those names.

Weights are in OUR convention: every norm weight is the effective scale. For
Gemma (HF Gemma3RMSNorm scales by 1 + w) the fixture stores 1 + w, and the
gradient stored for it is the gradient w.r.t. w (the same number, since
d(1+w)/dw = 1). Every weight is rounded to float32 first so both sides start
from identical numbers.

Two details of HF's code are set aside so that the reference is float64 end
to end and matches what our model computes:
  * Qwen3RMSNorm and Gemma3RMSNorm cast to float32 internally (for half-
    precision models); their forward is patched to the same formula in the
    input's dtype.
  * pad_token_id is None: nn.Embedding would otherwise zero the gradient of
    the padding row.
Norm weights, q_norm/k_norm included, are random (not ones).

Rerun (needs torch + transformers; /work/venv-ref/env.sh on the dev box):
    python3 tests/reference/make_arch_fixtures.py tests/reference/fixtures
"""
import json
import struct
import sys

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, Qwen3Config, Qwen3ForCausalLM
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.qwen3 import modeling_qwen3

DT = torch.float64


def _qwen3_norm(self, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


def _gemma3_norm(self, x):
    return self._norm(x) * (1.0 + self.weight)


modeling_qwen3.Qwen3RMSNorm.forward = _qwen3_norm
modeling_gemma3.Gemma3RMSNorm.forward = _gemma3_norm


def randomise(model, gemma):
    """Matrices ~ N(0, 0.25/fan_in), embeddings ~ N(0, 0.25), norms 1 + 0.2 N(0, 1)
    (as effective scales); all rounded to float32. Returns {our name: tensor}."""
    ours = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                eff = (1.0 + 0.2 * torch.randn(p.shape, dtype=DT)).float().double()
                p.copy_(eff - 1.0 if gemma else eff)
                ours[name] = eff
            else:
                fan = p.shape[-1] if "embed_tokens" not in name else 4.0
                t = (torch.randn(p.shape, dtype=DT) * (0.5 / fan ** 0.5)).float().double()
                p.copy_(t)
                ours[name] = t
    return ours


def random_batch(seq_lens, V):
    seq_start = [0]
    for L in seq_lens:
        seq_start.append(seq_start[-1] + L)
    tokens = torch.randint(0, V, (seq_start[-1],))
    positions = torch.cat([torch.arange(L) for L in seq_lens])
    return seq_start, seq_start[-1], tokens, positions


def make_case(name, model, ours_cfg, gemma, seq_lens, inv_temp, out):
    model = model.double()
    model.config._attn_implementation = "eager"
    model.eval()
    ours = randomise(model, gemma)
    V = ours_cfg["vocab_size"]
    seq_start, n, tokens, positions = random_batch(seq_lens, V)
    targets = torch.full((n,), -1, dtype=torch.long)
    for s in range(len(seq_lens)):
        a, b = seq_start[s], seq_start[s + 1]
        for i in range(a + 1, b - 1):  # the first token of each sequence is prompt
            targets[i] = tokens[i + 1]
        targets[b - 1] = torch.randint(0, V, (1,)).item()
    w = torch.randn(n, dtype=DT).float().double()
    u = (0.3 * torch.randn(n, dtype=DT)).float().double()

    logits = []
    for s in range(len(seq_lens)):
        a, b = seq_start[s], seq_start[s + 1]
        o = model(input_ids=tokens[a:b][None], position_ids=positions[a:b][None], use_cache=False)
        logits.append(o.logits[0])
    logits = torch.cat(logits)
    logsm = (logits * inv_temp).log_softmax(-1)
    sel = targets >= 0
    logp = torch.zeros(n, dtype=DT)
    ent = torch.zeros(n, dtype=DT)
    logp[sel] = logsm[sel].gather(1, targets[sel][:, None])[:, 0]
    ent[sel] = -(logsm[sel].exp() * logsm[sel]).sum(-1)
    loss = (-(w * logp) + u * ent).mul(sel.to(DT)).sum()
    loss.backward()

    params = dict(model.named_parameters())
    shapes = {}
    blob = bytearray()
    index = {}

    def put(key, arr, kind):
        flat = arr.detach().reshape(-1).tolist()
        index[key] = {"offset": len(blob), "count": len(flat), "dtype": kind}
        blob.extend(struct.pack("<%d%s" % (len(flat), "f" if kind == "f32" else "i"), *flat))

    for k, t in ours.items():
        if k == "lm_head.weight" and ours_cfg["tie_embeddings"]:
            continue  # tied: HF lists it once as the embedding
        shapes[k] = list(t.shape)
        put("w:" + k, t, "f32")
        put("g:" + k, params[k].grad, "f32")
    put("tokens", tokens, "i32")
    put("positions", positions, "i32")
    put("targets", targets, "i32")
    put("dlogp", -w, "f32")
    put("dentropy", u, "f32")
    put("logp", logp, "f32")
    put("entropy", ent, "f32")
    put("logits", logits, "f32")
    meta = {"config": ours_cfg, "seq_start": seq_start, "inv_temp": inv_temp, "loss": loss.item(),
            "shapes": shapes, "arrays": index,
            "generator": "tests/reference/make_arch_fixtures.py (transformers %s %s, torch %s, float64)"
                         % (__import__("transformers").__version__, type(model).__name__, torch.__version__)}
    with open(f"{out}/{name}.bin", "wb") as f:
        f.write(blob)
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{name}: {n} tokens, {sum(t.numel() for t in ours.values())} params, loss {loss.item():.6f}, "
          f"max |logit| {logits.abs().max().item():.3f}")


def qwen3_case(name, tied, out):
    d, H, KV, hd, F, V, nl, theta = 32, 4, 2, 16, 48, 64, 2, 1000000.0
    hf = Qwen3Config(vocab_size=V, hidden_size=d, intermediate_size=F, num_hidden_layers=nl,
                     num_attention_heads=H, num_key_value_heads=KV, head_dim=hd, rms_norm_eps=1e-6,
                     tie_word_embeddings=tied, max_position_embeddings=64, pad_token_id=None,
                     rope_parameters={"rope_type": "default", "rope_theta": theta})
    ours = dict(arch="qwen3", n_layers=nl, dim=d, n_heads=H, n_kv_heads=KV, head_dim=hd, ffn_dim=F, vocab_size=V,
                max_seq_len=64, rope_theta=theta, rms_eps=1e-6, tie_embeddings=tied, attention_bias=False,
                activation=0, qk_norm=True, post_norms=False, norm_offset=0.0, embed_scale=0.0, attn_scale=0.0,
                final_softcap=0.0, sliding_window=0, rope_theta_local=0.0, local_layers=[0] * nl)
    make_case(name, Qwen3ForCausalLM(hf), ours, False, [7, 12, 9], 1.0 / 0.8, out)


def gemma3_case(name, softcap, window, rope_linear, out):
    """rope_linear: linear RoPE scaling factor of the global layers (Gemma 3
    1B and up use 8; the local layers stay unscaled), or None."""
    d, H, KV, hd, F, V, nl = 32, 4, 2, 16, 40, 64, 3
    theta, theta_local, qpas = 100000.0, 10000.0, 24
    layer_types = ["sliding_attention", "sliding_attention", "full_attention"]
    hf = Gemma3TextConfig(vocab_size=V, hidden_size=d, intermediate_size=F, num_hidden_layers=nl,
                          num_attention_heads=H, num_key_value_heads=KV, head_dim=hd, rms_norm_eps=1e-6,
                          tie_word_embeddings=True, max_position_embeddings=64, pad_token_id=None,
                          query_pre_attn_scalar=qpas, sliding_window=window, layer_types=layer_types,
                          final_logit_softcapping=softcap, attn_logit_softcapping=None,
                          rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": theta_local},
                                           "full_attention": dict({"rope_type": "default", "rope_theta": theta},
                                                                  **({"rope_type": "linear", "factor": rope_linear}
                                                                     if rope_linear else {}))})
    ours = dict(arch="gemma3", n_layers=nl, dim=d, n_heads=H, n_kv_heads=KV, head_dim=hd, ffn_dim=F, vocab_size=V,
                max_seq_len=64, rope_theta=theta, rms_eps=1e-6, tie_embeddings=True, attention_bias=False,
                activation=1, qk_norm=True, post_norms=True, norm_offset=1.0, embed_scale=d ** 0.5,
                attn_scale=qpas ** -0.5, final_softcap=softcap or 0.0, sliding_window=window,
                rope_theta_local=theta_local, local_layers=[1 if t == "sliding_attention" else 0 for t in layer_types])
    if rope_linear:  # not "rope_scaling": model_fixture.h reads that as Llama 3 scaling
        ours["rope_linear_factor"] = rope_linear
    make_case(name, Gemma3ForCausalLM(hf), ours, True, [6, 11, 8], 1.0 / 0.7, out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/reference/fixtures"
    torch.manual_seed(2121)
    qwen3_case("arch_qwen3_tied", True, out)
    qwen3_case("arch_qwen3_untied", False, out)
    gemma3_case("arch_gemma3", None, 4, 8.0, out)
    gemma3_case("arch_gemma3_softcap", 2.5, 3, None, out)


if __name__ == "__main__":
    main()
