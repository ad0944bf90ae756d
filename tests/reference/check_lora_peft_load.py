#!/usr/bin/env python3
"""Checks that an adapter folder written by librlpost (rlp_policy_save_lora /
rlpi_lora_save_peft) loads in Hugging Face PEFT and computes what the
fixture says.

test_lora (peft_folders) saves the fixture's adapters with our writer; with
RLPOST_LORA_EXPORT_DIR set it leaves them there. This script builds the
fixture's base model in transformers (LlamaForCausalLM, the fixture's fp32
base weights), loads that folder with PeftModel.from_pretrained, and
compares the per-token logprobs with the fixture's (PEFT's own, float64).

    RLPOST_SOURCE_ROOT=$PWD RLPOST_LORA_EXPORT_DIR=/tmp/ours build/tests/test_lora
    python3 tests/reference/check_lora_peft_load.py /tmp/ours [tests/reference/fixtures]

Needs torch, transformers 4.46 and peft 0.13 (the dev box's /work/venv-peft).
Exit status 0 when every logprob is within 1e-5 (fp32 adapters against the
float64 reference).
"""
import json
import struct
import sys

import torch
from peft import PeftModel
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama


def _norm(self, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))


modeling_llama.LlamaRMSNorm.forward = _norm


def main():
    ours = sys.argv[1]
    fx = sys.argv[2] if len(sys.argv) > 2 else "tests/reference/fixtures"
    meta = json.load(open(f"{fx}/lora_llama_all.json"))
    blob = open(f"{fx}/lora_llama_all.bin", "rb").read()

    def arr(key):
        a = meta["arrays"][key]
        fmt = "<%d%s" % (a["count"], "f" if a["dtype"] == "f32" else "i")
        return torch.tensor(struct.unpack_from(fmt, blob, a["offset"]))

    c = meta["config"]
    hf = LlamaConfig(vocab_size=c["vocab_size"], hidden_size=c["dim"], intermediate_size=c["ffn_dim"],
                     num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
                     num_key_value_heads=c["n_kv_heads"], rms_norm_eps=c["rms_eps"],
                     tie_word_embeddings=c["tie_embeddings"], max_position_embeddings=c["max_seq_len"],
                     rope_theta=c["rope_theta"], pad_token_id=None)
    model = LlamaForCausalLM(hf).double()
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(arr("w:" + name).double().view(p.shape))
    pm = PeftModel.from_pretrained(model, ours).double()
    pm.eval()
    tokens, positions, targets = arr("tokens").long(), arr("positions").long(), arr("targets").long()
    ss = meta["seq_start"]
    with torch.no_grad():
        logits = torch.cat([pm(input_ids=tokens[a:b][None], position_ids=positions[a:b][None],
                               use_cache=False).logits[0] for a, b in zip(ss[:-1], ss[1:])])
    logsm = (logits * meta["inv_temp"]).log_softmax(-1)
    sel = targets >= 0
    lp = logsm[sel].gather(1, targets[sel][:, None])[:, 0]
    ref = arr("logp").double()[sel]
    worst = (lp - ref).abs().max().item()
    print(f"PEFT {__import__('peft').__version__} loaded {ours}: {len(lp)} logprobs, max |Δ| {worst:.2e}")
    sys.exit(0 if worst <= 1e-5 else 1)


if __name__ == "__main__":
    main()
