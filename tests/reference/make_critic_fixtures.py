#!/usr/bin/env python3
"""The PPO critic's values and clipped value loss, for tests/unit/test_critic.c.

Reads the committed LlamaForTokenClassification folder (num_labels 1, with
bias) tests/reference/fixtures/hf/score_llama_token (make_score_fixtures.py)
in float64 and writes tests/reference/fixtures/hf/critic_expected.json:

  sequences, n_prompt   two sequences (n_prompt 3 and 2)
  values                V(s_t) for every completion token t: the score head
                        at position n_prompt - 1 + t (verl's critic
                        values[:, -T-1:-1]), sequences concatenated
  returns, old_values, on
                        random GAE returns, the values the clip is around and
                        the train mask, indexed like values
  cases                 for clip 0.2 and clip 0 (no clipping): the value loss
                        L = 1/N sum_{on} 1/2 max((V-R)^2, (clamp(V, Vold-c, Vold+c)-R)^2),
                        N = trained tokens (verl compute_value_loss, token-mean),
                        vf_clipfrac = mean over trained tokens of [clipped term > unclipped],
                        the mean V over trained tokens, and the gradient of L of
                        every parameter (autograd; written here from the formula)

The returns and old values are drawn so that, with clip 0.2, trained tokens
fall in all three regimes (clip inactive; active with the clipped term
larger, where the gradient is 0; active with the unclipped term larger);
the script asserts it.

Regenerate (deterministic given the versions; commit the result):
    /work/venv-peft/bin/python tests/reference/make_critic_fixtures.py
Last generated with torch 2.15.0 and transformers 4.46.3.
"""
import json
import os

import torch
import transformers
from transformers import LlamaForTokenClassification

HF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "hf")
SEQS = [[1, 5, 9, 2, 17, 30, 4], [3, 8, 8, 21, 11]]
N_PROMPT = [3, 2]
CLIP = 0.2


def values_of(model):
    """V at positions n_prompt - 1 + t, t < n_tokens - n_prompt, concatenated."""
    out = []
    for s, p in zip(SEQS, N_PROMPT):
        v = model(input_ids=torch.tensor([s])).logits[0, :, 0]  # (T,)
        out.append(v[p - 1:len(s) - 1])
    return torch.cat(out)


def value_loss(v, returns, old, on, clip):
    """verl's compute_value_loss (token-mean), from its formula."""
    unclipped = (v - returns) ** 2
    if clip > 0:
        vc = torch.clamp(v, old - clip, old + clip)
        clipped = (vc - returns) ** 2
    else:
        clipped = unclipped
    term = 0.5 * torch.maximum(unclipped, clipped)
    n = on.sum()
    loss = (term * on).sum() / n
    clipfrac = ((clipped > unclipped).double() * on).sum() / n
    return loss, clipfrac, unclipped, clipped


def main():
    model = LlamaForTokenClassification.from_pretrained(os.path.join(HF, "score_llama_token"),
                                                        torch_dtype=torch.float32).double().eval()
    with torch.no_grad():
        v0 = values_of(model)
    n = v0.numel()
    gen = torch.Generator().manual_seed(3)
    old = v0 + 0.4 * torch.randn(n, generator=gen, dtype=torch.float64)
    returns = v0 + 0.6 * torch.randn(n, generator=gen, dtype=torch.float64)
    on = torch.tensor([1, 1, 0, 1, 1, 1, 0], dtype=torch.float64)
    assert on.numel() == n

    # every regime present among the trained tokens with clip 0.2
    active = ((v0 < old - CLIP) | (v0 > old + CLIP)) & (on > 0)
    _, _, u, c = value_loss(v0, returns, old, on, CLIP)
    regimes = {"inactive": int(((~active) & (on > 0)).sum()),
               "clipped_larger": int((active & (c > u)).sum()),
               "unclipped_larger": int((active & (c < u)).sum())}
    assert all(k > 0 for k in regimes.values()), regimes

    expected = {"generator": "tests/reference/make_critic_fixtures.py", "torch": torch.__version__,
                "transformers": transformers.__version__, "model": "score_llama_token",
                "sequences": SEQS, "n_prompt": N_PROMPT, "values": v0.tolist(), "returns": returns.tolist(),
                "old_values": old.tolist(), "on": [int(x) for x in on.tolist()], "regimes": regimes,
                "cases": []}
    for clip in (CLIP, 0.0):
        model.zero_grad()
        v = values_of(model)
        loss, clipfrac, _, _ = value_loss(v, returns, old, on, clip)
        loss.backward()
        expected["cases"].append({
            "clip": clip, "loss": loss.item(), "clipfrac": clipfrac.item(),
            "vpred_mean": ((v * on).sum() / on.sum()).item(),
            "grads": {k: p.grad.flatten().tolist() for k, p in model.named_parameters()}})
    with open(os.path.join(HF, "critic_expected.json"), "w") as f:
        json.dump(expected, f)
        f.write("\n")


if __name__ == "__main__":
    main()
