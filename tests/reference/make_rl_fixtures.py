#!/usr/bin/python3
"""Reference values for the RL formulas (advantages, per-token policy losses,
KL, aggregation) written from the papers with PyTorch autograd, in float64.
Not derived from any framework's code: each formula is the equation cited
next to it. Writes tests/reference/fixtures/rl/cases.json, which
tests/unit/test_rl_math.c compares against (tolerance 1e-6).

Regenerate: /usr/bin/python3 tests/reference/make_rl_fixtures.py
(Debian python3-torch; any torch >= 1.10 works)."""
import json
import math
import os
import random

import torch

torch.set_default_dtype(torch.float64)
ADV = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce"]
LOSS = ["ppo_clip", "decoupled_ppo", "gspo"]
AGG = ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


def f32(x):
    """Round to float32, as the C side stores its inputs."""
    return float(torch.tensor(x, dtype=torch.float32))


def advantages(opt, groups, rewards, lens, old, ref, tokr):
    n_tok = sum(lens)
    adv = torch.zeros(n_tok)
    starts = [sum(lens[:i]) for i in range(len(lens))]
    if opt["advantage"] == "reinforce_pp":
        # REINFORCE++ (Hu 2025, §3): r_t = -beta*KL_t (+ process reward) and the
        # outcome reward at the last token; G_t = r_t + gamma*G_{t+1}; then
        # (G - mean)/(std + 1e-8) over every token of the batch (population std).
        for i, L in enumerate(lens):
            g = 0.0
            for t in reversed(range(L)):
                k = starts[i] + t
                r = (rewards[i] if t == L - 1 else 0.0) + tokr[k]
                if opt["kl_in_reward"] and opt["kl_estimator"]:
                    r -= opt["kl_coef"] * kl(opt["kl_estimator"], torch.tensor(old[k] - ref[k])).item()
                g = r + opt["gamma"] * g
                adv[k] = g
        m = adv.mean()
        sd = ((adv - m) ** 2).mean().sqrt()
        return (adv - m) / (sd + 1e-8)
    by_group = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, []).append(i)
    for g, members in by_group.items():
        r = torch.tensor([rewards[i] for i in members])
        G = len(members)
        equal = all(rewards[i] == rewards[members[0]] for i in members)
        for j, i in enumerate(members):
            if equal and opt["advantage"] != "reinforce":
                a = 0.0  # identical rewards: no signal (verl PR #4597)
            elif opt["advantage"] == "grpo":  # DeepSeekMath eq. (GRPO outcome supervision)
                a = ((r[j] - r.mean()) / (r.std(unbiased=True) + opt["adv_eps"])).item() if G > 1 else 0.0
            elif opt["advantage"] == "dr_grpo":  # Dr. GRPO: no std
                a = (r[j] - r.mean()).item()
            elif opt["advantage"] == "rloo":  # leave-one-out baseline
                a = (r[j] - (r.sum() - r[j]) / (G - 1)).item() if G > 1 else 0.0
            else:
                a = rewards[i]
            adv[starts[i]:starts[i] + lens[i]] = a
    if opt["adv_batch_norm"] and opt["advantage"] != "reinforce":
        m = adv.mean()
        sd = ((adv - m) ** 2).mean().sqrt()
        adv = (adv - m) / (sd + opt["adv_eps"])
    return adv


def kl(est, x):
    """Schulman (2020), 'Approximating KL divergence': x = log p - log q."""
    if est == 1:
        return x
    if est == 2:
        return 0.5 * x * x
    return torch.exp(-x) + x - 1


def clip_obj(opt, rho, A):
    """-min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A), dual clip min(., -c*A) for A < 0."""
    lo, hi = 1 - opt["clip_low"], 1 + opt["clip_high"]
    v = torch.maximum(-rho * A, -torch.clamp(rho, lo, hi) * A)
    if opt["dual_clip"] > 0:
        v = torch.where(A < 0, torch.minimum(v, -opt["dual_clip"] * A), v)
    return v


def loss_and_grads(opt, lens, logp, ent, adv, old, behav, ref):
    lp = torch.tensor(logp, requires_grad=True)
    H = torch.tensor(ent, requires_grad=True)
    oldt, behavt, reft = torch.tensor(old), torch.tensor(behav), torch.tensor(ref)
    S = len(lens)
    starts = [sum(lens[:i]) for i in range(S)]
    T = sum(lens)
    C = opt["agg_norm_constant"] if opt["agg_norm_constant"] > 0 else max(lens)
    total = 0.0
    for i, L in enumerate(lens):
        sl = slice(starts[i], starts[i] + L)
        A = adv[sl]
        if opt["policy_loss"] == "gspo":  # GSPO eq. (5)-(7): s_i = exp(mean log-ratio)
            s = torch.exp((lp[sl] - oldt[sl]).mean())
            pg = clip_obj(opt, s, A[0]).expand(L)
        else:
            rho = torch.exp(lp[sl] - oldt[sl])
            pg = clip_obj(opt, rho, A)
            if opt["policy_loss"] == "decoupled_ppo":  # AReaL eq. (5): w = pi_prox / pi_behav
                w = torch.exp(oldt[sl] - behavt[sl])
                if opt["behav_cap"] > 0:
                    w = torch.where(w > opt["behav_cap"],
                                    torch.zeros_like(w) if opt["behav_mask"] else torch.full_like(w, opt["behav_cap"]),
                                    w)
                pg = w * pg
            elif opt["tis_cap"] > 0:  # truncated IS: min(pi_old/pi_behav, C)
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
        ell = pg
        if opt["kl_estimator"] and not opt["kl_in_reward"]:
            ell = ell + opt["kl_coef"] * kl(opt["kl_estimator"], lp[sl] - reft[sl])
        ell = ell - opt["entropy_coef"] * H[sl]
        agg = opt["loss_agg"]
        if agg == "token_mean":
            total = total + ell.sum() / T
        elif agg == "seq_mean_token_sum":
            total = total + ell.sum() / S
        elif agg == "seq_mean_token_mean":
            total = total + ell.mean() / S
        else:
            total = total + ell.sum() / (S * C)
    total.backward()
    return total.item(), lp.grad.tolist(), H.grad.tolist()


def make_case(rng, adv_kind, loss_kind, agg, extra):
    n_groups = rng.randint(1, 4)
    groups, rewards, lens = [], [], []
    for g in range(n_groups):
        G = rng.randint(2, 5)
        mode = rng.random()
        for _ in range(G):
            groups.append(1000 + g)
            if mode < 0.25:
                rewards.append(f32(0.2))  # an all-equal, non-dyadic group (case #8)
            else:
                rewards.append(f32(rng.choice([0.0, 1.0, 0.1, -0.5, 3.0, rng.uniform(-2, 2)])))
            lens.append(rng.randint(1, 9))
    T = sum(lens)
    logp = [f32(-abs(rng.gauss(1.0, 0.8)) - 0.01) for _ in range(T)]
    old = [f32(x + rng.gauss(0, 0.15)) for x in logp]
    behav = [f32(x + rng.gauss(0, 0.3)) for x in old]
    ref = [f32(x + rng.gauss(0, 0.2)) for x in logp]
    ent = [f32(abs(rng.gauss(1.5, 0.5))) for _ in range(T)]
    tokr = [f32(rng.gauss(0, 0.1)) if extra.get("token_rewards") else 0.0 for _ in range(T)]
    opt = {"advantage": adv_kind, "adv_eps": 1e-6, "adv_batch_norm": extra.get("adv_batch_norm", 0), "gamma":
           extra.get("gamma", 1.0), "policy_loss": loss_kind, "clip_low": 0.2, "clip_high": extra.get("clip_high", 0.28),
           "dual_clip": extra.get("dual_clip", 0.0), "tis_cap": extra.get("tis_cap", 0.0),
           "behav_cap": extra.get("behav_cap", 0.0), "behav_mask": extra.get("behav_mask", 0),
           "kl_estimator": extra.get("kl_estimator", 0), "kl_coef": extra.get("kl_coef", 0.0),
           "kl_in_reward": extra.get("kl_in_reward", 0), "entropy_coef": extra.get("entropy_coef", 0.0),
           "loss_agg": agg, "agg_norm_constant": extra.get("agg_norm_constant", 0.0)}
    adv = advantages(opt, groups, rewards, lens, old, ref, tokr)
    adv32 = torch.tensor(adv.tolist(), dtype=torch.float32).to(torch.float64)  # C keeps advantages as float
    loss, dlogp, dent = loss_and_grads(opt, lens, logp, ent, adv32, old, behav, ref)
    return {"options": opt, "groups": groups, "rewards": rewards, "lens": lens, "logp": logp, "old": old,
            "behav": behav, "ref": ref, "entropy": ent, "token_rewards": tokr, "advantages": adv.tolist(),
            "loss": loss, "dlogp": dlogp, "dentropy": dent}


def main():
    rng = random.Random(20261129)
    extras = [{}, {"dual_clip": 3.0}, {"kl_estimator": 1, "kl_coef": 0.05}, {"kl_estimator": 2, "kl_coef": 0.1},
              {"kl_estimator": 3, "kl_coef": 0.04, "entropy_coef": 0.01}, {"tis_cap": 1.5}, {"behav_cap": 1.3},
              {"behav_cap": 1.3, "behav_mask": 1}, {"adv_batch_norm": 1}, {"agg_norm_constant": 12.0},
              {"kl_estimator": 3, "kl_coef": 0.1, "kl_in_reward": 1, "gamma": 0.9, "token_rewards": 1}]
    cases = []
    combo = 0
    for a in ADV:
        for l in LOSS:
            for g in AGG:
                # three of the extras per combination, rotating, so every extra
                # meets every estimator, loss and aggregation somewhere
                for j in range(3):
                    cases.append(make_case(rng, a, l, g, extras[(combo * 3 + j) % len(extras)]))
                combo += 1
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rl", "cases.json")
    with open(out, "w") as f:
        text = json.dumps({"generator": "tests/reference/make_rl_fixtures.py", "torch": torch.__version__,
                           "cases": cases}, separators=(",", ":"))
        # 12 significant digits are plenty for a 1e-6 comparison
        import re
        text = re.sub(r"-?\d+\.\d{13,}(e-?\d+)?", lambda m: "%.12g" % float(m.group(0)), text)
        f.write(text)
    print(f"{len(cases)} cases -> {out} ({os.path.getsize(out)} bytes)")


if __name__ == "__main__":
    main()
