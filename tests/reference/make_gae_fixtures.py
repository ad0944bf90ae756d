#!/usr/bin/python3
"""Reference values for Generalized Advantage Estimation (Schulman et al.
2016, arXiv:1506.02438, eqs. 11-16) with a loss mask, in float64 PyTorch.
Written from the paper, not from any framework's code: a loop over time on
padded [B, T] tensors, vectorised over the batch, with a response mask
whose 0 entries (observation tokens of a multi-turn episode, and padding)
the recursion passes over unchanged:

    delta_t = r_t + gamma * V_next - V_t
    A_t     = delta_t + gamma * lambda * A_next
    R_t     = A_t + V_t

V_next and A_next are those of the next model token (mask 1) of the same
sequence; after the last one V_next = the bootstrap value of a truncated
episode (0 for a terminal one) and A_next = 0. A masked token's reward and
value are never read; its advantage and return are exactly 0.

Each case is also checked here against the closed form
A_t = sum_l (gamma*lambda)^l delta_{t+l} over the model tokens (eq. 16) and,
for gamma = lambda = 1, against Monte Carlo G_t - V_t.

Writes tests/reference/fixtures/rl/gae_cases.json, which
tests/unit/test_gae.c compares against (|got - want| <= 1e-5 * (1 + |want|):
float32 outputs of double sums). Inputs are rounded to float32 first, as the
C side stores them; gamma and lambda too.

Regenerate: /work/venv-peft/bin/python tests/reference/make_gae_fixtures.py
(any torch >= 1.10 works; the output depends only on the seed below)."""
import json
import os
import random

import torch

torch.set_default_dtype(torch.float64)


def f32(x):
    """Round to float32, as the C side stores its inputs."""
    return float(torch.tensor(x, dtype=torch.float32))


def gae_padded(rewards, values, mask, bootstrap, gamma, lam):
    """rewards, values, mask: [B, T]; bootstrap: [B]. Returns (adv, ret), [B, T]."""
    B, T = rewards.shape
    m = mask.to(torch.float64)
    next_v = bootstrap.clone()
    next_a = torch.zeros(B)
    adv = torch.zeros(B, T)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        a = delta + gamma * lam * next_a
        # an observation (or padding) token leaves the running state as it was
        next_v = m[:, t] * values[:, t] + (1 - m[:, t]) * next_v
        next_a = m[:, t] * a + (1 - m[:, t]) * next_a
        adv[:, t] = torch.where(mask[:, t], a, torch.zeros(B))
    ret = torch.where(mask, adv + values, torch.zeros(B, T))
    return adv, ret


def closed_form(r, v, mask, boot, gamma, lam):
    """Eq. 16 directly on one sequence's model tokens (lists)."""
    steps = [t for t in range(len(r)) if mask[t]]
    vs = [v[t] for t in steps] + [boot]
    deltas = [r[t] + gamma * vs[j + 1] - vs[j] for j, t in enumerate(steps)]
    adv = [0.0] * len(r)
    for j, t in enumerate(steps):
        adv[t] = sum((gamma * lam) ** l * deltas[j + l] for l in range(len(steps) - j))
    return adv


def make_case(rng, name, lens, gamma, lam, masks=None, bootstrap=None, reward_style="outcome"):
    gamma, lam = f32(gamma), f32(lam)
    n = len(lens)
    if masks is None:
        masks_l = [[1] * L for L in lens]
    else:
        masks_l = masks
    rewards, values = [], []
    for i, L in enumerate(lens):
        mk = masks_l[i]
        model = [t for t in range(L) if mk[t]]
        r = []
        for t in range(L):
            if reward_style == "dense":
                x = rng.uniform(-1, 1)
            else:  # KL shaping at every model token, the outcome at the last one
                x = -0.05 * rng.random()
            if not mk[t]:
                x = rng.uniform(-5, 5)  # garbage at an observation token: must be ignored
            r.append(x)
        if model and reward_style == "outcome":
            r[model[-1]] += rng.choice([0.0, 1.0, -1.0, 0.5])
        rewards.append([f32(x) for x in r])
        values.append([f32(rng.uniform(-1.5, 1.5) if mk[t] else rng.uniform(-9, 9)) for t in range(L)])
    boot = [f32(b) for b in bootstrap] if bootstrap is not None else None

    T = max(lens) if lens and max(lens) > 0 else 1
    R = torch.zeros(n, T)
    V = torch.zeros(n, T)
    M = torch.zeros(n, T, dtype=torch.bool)
    for i, L in enumerate(lens):
        R[i, :L] = torch.tensor(rewards[i]) if L else R[i, :0]
        V[i, :L] = torch.tensor(values[i]) if L else V[i, :0]
        M[i, :L] = torch.tensor([bool(x) for x in masks_l[i]]) if L else M[i, :0]
        # padding keeps garbage values to prove the mask, not zeros, hides it
        V[i, L:] = 123.0
        R[i, L:] = -77.0
    Bt = torch.tensor(boot) if boot is not None else torch.zeros(n)
    adv, ret = gae_padded(R, V, M, Bt, gamma, lam)

    flat_adv, flat_ret = [], []
    for i, L in enumerate(lens):
        a = adv[i, :L].tolist()
        cf = closed_form(rewards[i], values[i], masks_l[i], boot[i] if boot else 0.0, gamma, lam)
        for x, y in zip(a, cf):
            assert abs(x - y) <= 1e-12 * (1 + abs(y)), (name, x, y)
        if gamma == 1.0 and lam == 1.0:  # Monte Carlo: A = G - V
            g = boot[i] if boot else 0.0
            for t in reversed(range(L)):
                if masks_l[i][t]:
                    g += rewards[i][t]
                    assert abs(a[t] - (g - values[i][t])) <= 1e-12 * (1 + abs(g)), name
        for t in range(L):
            if not masks_l[i][t]:
                assert a[t] == 0.0 and ret[i, t].item() == 0.0
        flat_adv += a
        flat_ret += ret[i, :L].tolist()

    flat = lambda xss: [x for xs in xss for x in xs]
    return {
        "name": name,
        "gamma": gamma,
        "lambda": lam,
        "lens": lens,
        "token_reward": flat(rewards),
        "values": flat(values),
        "mask": flat(masks_l) if masks is not None else None,
        "bootstrap": boot,
        "advantages": flat_adv,
        "returns": flat_ret,
    }


def rand_mask(rng, L, tail_obs=False):
    """A multi-turn mask: model turns separated by observation runs."""
    m = [1] * L
    t = rng.randint(1, 4)
    while t < L:
        run = rng.randint(1, 4)
        for k in range(t, min(L, t + run)):
            m[k] = 0
        t += run + rng.randint(1, 5)
    if tail_obs and L >= 2:
        m[-1] = 0
        m[-2] = 0
    return m


def main():
    rng = random.Random(20250614)
    cases = []
    settings = [(1.0, 1.0), (1.0, 0.95), (0.99, 0.9), (0.99, 0.0), (1.0, 0.0), (0.9, 0.5), (0.0, 0.7)]
    # single-token sequences
    for g, l in settings:
        cases.append(make_case(rng, "single_token", [1, 1, 1], g, l))
        cases.append(make_case(rng, "single_token_bootstrap", [1, 1], g, l, bootstrap=[0.7, -0.3]))
    # several sequences of different lengths, terminal and truncated, outcome and dense rewards
    for g, l in settings:
        for style in ("outcome", "dense"):
            lens = [rng.randint(1, 40) for _ in range(5)]
            cases.append(make_case(rng, "lengths_" + style, lens, g, l, reward_style=style))
            boot = [rng.uniform(-1, 1) for _ in lens]
            cases.append(make_case(rng, "truncated_" + style, lens, g, l, bootstrap=boot, reward_style=style))
    # multi-turn: observations in the middle and at the end, an all-masked sequence, an empty one
    for g, l in settings:
        for style in ("outcome", "dense"):
            lens = [rng.randint(6, 40) for _ in range(4)] + [3, 0]
            masks = [rand_mask(rng, L, tail_obs=(i % 2 == 1)) for i, L in enumerate(lens[:4])]
            masks += [[0, 0, 0], []]  # a sequence with no model token; a zero-length one
            cases.append(make_case(rng, "multi_turn_" + style, lens, g, l, masks=masks, reward_style=style))
            boot = [rng.uniform(-1, 1) for _ in lens]
            cases.append(make_case(rng, "multi_turn_truncated_" + style, lens, g, l, masks=masks, bootstrap=boot,
                                   reward_style=style))
    # an observation token first, then one model token, then observations
    cases.append(make_case(rng, "obs_around_one", [5], 0.99, 0.95, masks=[[0, 0, 1, 0, 0]], bootstrap=[0.25]))
    # a long sequence: double accumulation against float64
    lens = [512, 300]
    masks = [rand_mask(rng, L, tail_obs=True) for L in lens]
    cases.append(make_case(rng, "long", lens, 1.0, 1.0, masks=masks, reward_style="dense"))
    cases.append(make_case(rng, "long_truncated", lens, 0.999, 0.95, masks=masks, bootstrap=[1.5, -2.0],
                           reward_style="dense"))

    def fmt(o):
        if isinstance(o, float):
            return float("%.12g" % o)
        if isinstance(o, list):
            return [fmt(x) for x in o]
        if isinstance(o, dict):
            return {k: fmt(v) for k, v in o.items()}
        return o

    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rl", "gae_cases.json")
    with open(out, "w") as f:
        json.dump({"generator": "tests/reference/make_gae_fixtures.py", "torch": torch.__version__,
                   "cases": fmt(cases)}, f, separators=(",", ":"))
        f.write("\n")
    print("%d cases -> %s" % (len(cases), out))


if __name__ == "__main__":
    main()
