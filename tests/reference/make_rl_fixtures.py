#!/usr/bin/python3
"""Reference values for the RL formulas (advantages, per-token policy losses,
KL, aggregation) written from the papers with PyTorch autograd, in float64.
Not derived from any framework's code: each formula is the equation cited
next to it. Writes tests/reference/fixtures/rl/cases.json, which
tests/unit/test_rl_math.c compares against (tolerance 1e-6), and
masked_cases.json: multi-turn sequences whose observation tokens (loss
mask 0) are context only. The masked formulas are the same equations over
the model tokens alone: a masked token has advantage 0 and gradient 0,
counts in no mean (batch normalisation, token-mean's T, seq-mean-token-mean's
|y_i|, GSPO's mean log-ratio, Dr. GRPO's constant = the most model tokens),
and is no step of REINFORCE++'s return (no discount across it, its token
reward and KL ignored, the outcome reward at the last model token).

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


def advantages(opt, groups, rewards, lens, old, ref, tokr, mask=None):
    n_tok = sum(lens)
    if mask is None:
        mask = [1] * n_tok
    on = torch.tensor(mask, dtype=torch.bool)
    adv = torch.zeros(n_tok)
    starts = [sum(lens[:i]) for i in range(len(lens))]
    if opt["advantage"] == "reinforce_pp":
        # REINFORCE++ (Hu 2025, §3): r_t = -beta*KL_t (+ process reward) and the
        # outcome reward at the last token; G_t = r_t + gamma*G_{t+1}; then
        # (G - mean)/(std + 1e-8) over every token of the batch (population std).
        for i, L in enumerate(lens):
            g = 0.0
            steps = [t for t in range(L) if mask[starts[i] + t]]  # the model's tokens are the steps
            for t in reversed(steps):
                k = starts[i] + t
                r = (rewards[i] if t == steps[-1] else 0.0) + tokr[k]
                if opt["kl_in_reward"] and opt["kl_estimator"]:
                    r -= opt["kl_coef"] * kl(opt["kl_estimator"], torch.tensor(old[k] - ref[k])).item()
                g = r + opt["gamma"] * g
                adv[k] = g
        return normalise(adv, on, 1e-8, opt.get("whiten", 0))
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
    adv = torch.where(on, adv, torch.zeros_like(adv))
    if opt["adv_batch_norm"] and opt["advantage"] != "reinforce":
        adv = normalise(adv, on, opt["adv_eps"], opt.get("whiten", 0))
    return adv


def normalise(adv, on, eps, whiten=0):
    """(x - mean)/(std + eps) over the model tokens (population std); masked ones stay 0.
    whiten 1: verl's masked_whiten, (x - mean) * rsqrt(var + 1e-8) with the unbiased variance."""
    x = adv[on]
    m = x.mean()
    if whiten:
        n = x.numel()
        var = ((x - m) ** 2).sum() / (n - 1) if n > 1 else torch.tensor(0.0)
        return torch.where(on, (adv - m) * torch.rsqrt(var + 1e-8), torch.zeros_like(adv))
    sd = ((x - m) ** 2).mean().sqrt()
    return torch.where(on, (adv - m) / (sd + eps), torch.zeros_like(adv))


LEVELS = {"off": 0, "token": 1, "sequence": 2, "geometric": 3}


def is_raw(level, lens, old, behav, mask):
    """verl's rollout correction weight per token, before truncation: the log-ratio
    log pi_old - log pi_behav per token, summed (sequence) or averaged (geometric)
    over the sequence's model tokens, clamped to +-20 (SAFETY_BOUND), exponentiated."""
    lr = torch.tensor(old) - torch.tensor(behav)
    out = torch.zeros(len(old))
    logx = torch.zeros(len(old))
    start = 0
    for L in lens:
        sl = slice(start, start + L)
        m = torch.tensor(mask[start:start + L], dtype=torch.bool)
        if level == 1:
            x = lr[sl]
        else:
            tot = lr[sl][m].sum()
            x = (tot / max(int(m.sum()), 1) if level == 3 else tot).expand(L)
        logx[sl] = x
        out[sl] = torch.exp(torch.clamp(x, -20, 20))
        start += L
    return out, logx


def reject(opt, lens, old, behav, mask):
    """verl's compute_rollout_rejection_mask and the token veto: 1 = trains."""
    keep = [1] * len(old)
    hi = opt.get("rollout_rs_threshold", 2.0)
    lo = opt.get("rollout_rs_threshold_lower", 0.0) or 1.0 / hi
    level = LEVELS[opt.get("rollout_rs", "off")]
    veto = opt.get("rollout_token_veto", 0.0)
    w = is_raw(level, lens, old, behav, mask)[0] if level else None
    start = 0
    for L in lens:
        ks = [start + t for t in range(L) if mask[start + t]]
        vetoed = veto > 0 and any(old[k] - behav[k] < math.log(veto) for k in ks)
        for k in ks:
            bad = vetoed or (level and not (lo <= w[k].item() <= hi))
            if bad:
                keep[k] = 0
        start += L
    return keep


def cov_pick(opt, lens, adv, old, on):
    """The covariance selection of verl's clip_cov / kl_cov over the step's tokens
    that train, with log pi_old in place of the detached current logprobs (equal at
    the step's first optimizer step); clip_cov's fixtures take every candidate."""
    idx = [k for k in range(len(old)) if on[k]]
    a = torch.tensor([float(adv[k]) for k in idx])
    lp = torch.tensor([old[k] for k in idx])
    cov = (a - a.mean()) * (lp - lp.mean())
    pick = [0] * len(old)
    if opt["policy_loss"] == "kl_cov":
        k = max(1, int(len(idx) * opt["kl_cov_ratio"]))
        # torch.topk, with ties (a batch of all-zero advantages) broken toward the earlier token
        for j in sorted(range(len(idx)), key=lambda j: (-cov[j].item(), j))[:k]:
            pick[idx[j]] = 1
    else:
        k = max(1, int(len(idx) * opt["clip_cov_ratio"]))
        cand = [j for j in range(len(idx)) if opt["clip_cov_lb"] < cov[j].item() < opt["clip_cov_ub"]]
        assert len(cand) <= k, "a clip_cov fixture must take every candidate"
        for j in cand:
            pick[idx[j]] = 1
    return pick


def kl(est, x):
    """Schulman (2020), 'Approximating KL divergence': x = log p - log q, as
    verl's kl_penalty_forward computes each: k3 (low_var_kl) clamps the
    log-ratio to [-20, 20] and the value to [-10, 10]; 4 is "abs"."""
    if est == 1:
        return x
    if est == 2:
        return 0.5 * x * x
    if est == 4:
        return x.abs()
    y = torch.clamp(-x, min=-20, max=20)
    return torch.clamp(torch.exp(y) - y - 1, min=-10, max=10)


def clip_obj(opt, rho, A):
    """-min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A), dual clip min(., -c*A) for A < 0."""
    lo, hi = 1 - opt["clip_low"], 1 + opt["clip_high"]
    v = torch.maximum(-rho * A, -torch.clamp(rho, lo, hi) * A)
    if opt["dual_clip"] > 0:
        v = torch.where(A < 0, torch.minimum(v, -opt["dual_clip"] * A), v)
    return v


def loss_and_grads(opt, lens, logp, ent, adv, old, behav, ref, mask=None, keep=None, pick=None):
    if mask is None:
        mask = [1] * sum(lens)
    model_mask = mask
    if keep is not None:  # rejected tokens train no more than observations
        mask = [m and k for m, k in zip(mask, keep)]
    # the rollout correction's IS weights (verl's compute_rollout_correction_weights): detached,
    # truncated at the threshold, optionally divided by their batch mean over the model tokens
    # (token) or the sequences (sequence); computed over the loss mask before rejection
    isw = torch.ones(sum(lens))
    level = LEVELS[opt.get("rollout_is", "off")]
    if level:
        raw = is_raw(level, lens, old, behav, model_mask)[0]
        isw = torch.clamp(raw, max=opt["rollout_is_threshold"])
        if opt.get("rollout_is_batch_normalize"):
            mm = torch.tensor(model_mask, dtype=torch.bool)
            if level == 1:
                mean = isw[mm].mean()
            else:
                starts0 = [sum(lens[:i]) for i in range(len(lens))]
                firsts = [next(st + t for t in range(L) if model_mask[st + t]) for st, L in zip(starts0, lens)]
                mean = isw[torch.tensor(firsts)].mean()
            if mean > 1e-8:
                isw = isw / mean
    lp = torch.tensor(logp, requires_grad=True)
    H = torch.tensor(ent, requires_grad=True)
    oldt, behavt, reft = torch.tensor(old), torch.tensor(behav), torch.tensor(ref)
    S = len(lens)
    starts = [sum(lens[:i]) for i in range(S)]
    # every length below counts model tokens: the observations are only context
    model = [[starts[i] + t for t in range(L) if mask[starts[i] + t]] for i, L in enumerate(lens)]
    T = sum(len(m) for m in model)
    C = opt["agg_norm_constant"] if opt["agg_norm_constant"] > 0 else max(len(m) for m in model)
    S = sum(1 for m in model if m)  # a sequence without a token that trains is in no mean
    total = 0.0
    for i in range(len(lens)):
        if not model[i]:
            continue
        sl = torch.tensor(model[i], dtype=torch.long)
        L = len(model[i])
        A = adv[sl]
        if opt["policy_loss"] == "gspo":  # GSPO eq. (5)-(7): s_i = exp(mean log-ratio)
            s = torch.exp((lp[sl] - oldt[sl]).mean())
            pg = clip_obj(opt, s, A[0]).expand(L)
        elif opt["policy_loss"] == "gmpo":  # GMPO as verl's geo_mean: clipped log-ratios, geometric mean
            x = lp[sl] - oldt[sl]
            sgn = torch.sign(A)
            m = sgn * torch.minimum(sgn * x, sgn * torch.clamp(x, -opt["clip_low"], opt["clip_high"]))
            r = torch.exp(m.mean())
            pg = (-A.mean() * r).expand(L)
        elif opt["policy_loss"] == "gpg":  # GPG: -A * log pi, no ratio
            pg = -A * lp[sl]
            if opt["tis_cap"] > 0:
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
        elif opt["policy_loss"] == "sapo":  # SAPO eq. (5)-(6): -f(rho) A, f = sigmoid(tau (rho - 1)) 4/tau
            rho = torch.exp(torch.clamp(lp[sl] - oldt[sl], -20, 20))
            tau = torch.where(A > 0, torch.full_like(A, opt["sapo_tau_pos"]), torch.full_like(A, opt["sapo_tau_neg"]))
            pg = -torch.sigmoid(tau * (rho - 1.0)) * (4.0 / tau) * A
            if opt["tis_cap"] > 0:
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
        elif opt["policy_loss"] == "kl_cov":  # KL-Cov: -rho A, + coef |log-ratio| on the picked tokens
            x = lp[sl] - oldt[sl]
            pk = torch.tensor([float(pick[k]) for k in model[i]])
            pg = -A * torch.exp(x) + pk * opt["ppo_kl_coef"] * x.abs()
            if opt["tis_cap"] > 0:
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
        elif opt["policy_loss"] == "clip_cov":  # Clip-Cov: PPO-clip (no dual clip), picked tokens detached
            rho = torch.exp(lp[sl] - oldt[sl])
            lo, hi = 1 - opt["clip_low"], 1 + opt["clip_high"]
            corr = torch.tensor([0.0 if pick[k] else 1.0 for k in model[i]])
            pg = torch.maximum(-rho * A, -torch.clamp(rho, lo, hi) * A) * corr
            if opt["tis_cap"] > 0:
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
        elif opt["policy_loss"] == "cispo":  # CISPO eq. (4)-(5): -sg(clip(rho)) * A * log pi
            rho = torch.exp(torch.clamp(lp[sl] - oldt[sl], -20, 20))
            c = torch.clamp(rho, 1 - opt["clip_low"], 1 + opt["clip_high"]).detach()
            pg = -c * A * lp[sl]
            if opt["tis_cap"] > 0:
                pg = torch.clamp(torch.exp(oldt[sl] - behavt[sl]), max=opt["tis_cap"]) * pg
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
        pg = pg * isw[sl]
        rest = -opt["entropy_coef"] * H[sl]
        if opt["kl_estimator"] and not opt["kl_in_reward"]:
            rest = rest + opt["kl_coef"] * kl(opt["kl_estimator"], lp[sl] - reft[sl])

        def agg(ell, mode):
            if mode == "token_mean":
                return ell.sum() / T
            if mode == "seq_mean_token_sum":
                return ell.sum() / S
            if mode == "seq_mean_token_mean":
                return ell.mean() / S
            return ell.sum() / (S * C)
        # SAPO's policy term is seq-mean-token-mean (its paper; verl's compute_policy_loss_sapo)
        total = total + agg(pg, "seq_mean_token_mean" if opt["policy_loss"] == "sapo" else opt["loss_agg"])
        total = total + agg(rest, opt["loss_agg"])
    total.backward()
    return total.item(), lp.grad.tolist(), H.grad.tolist()


NEW_KEYS = ("sapo_tau_pos", "sapo_tau_neg", "whiten", "rollout_is", "rollout_is_threshold",
            "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold", "rollout_rs_threshold_lower",
            "rollout_token_veto", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")
EXTREME = [-30.0, -25.0, -20.5, -3.0, -0.7, 0.0, 0.4, 2.5, 20.5, 25.0, 30.0]


def finish(opt, extra, groups, rewards, lens, logp, old, behav, ref, ent, tokr, mask=None):
    """The version-2 options, rejection, advantages, covariance picks, loss and gradients of a case."""
    for k in NEW_KEYS:
        if k in extra:
            opt[k] = extra[k]
    if opt["policy_loss"] == "sapo":
        opt.setdefault("sapo_tau_pos", 1.0)
        opt.setdefault("sapo_tau_neg", 1.05)
    model_mask = mask if mask is not None else [1] * sum(lens)
    keep = None
    if opt.get("rollout_rs", "off") != "off" or opt.get("rollout_token_veto", 0) > 0:
        keep = reject(opt, lens, old, behav, model_mask)
    eff = [m and k for m, k in zip(model_mask, keep)] if keep is not None else mask
    adv = advantages(opt, groups, rewards, lens, old, ref, tokr, eff)
    adv32 = torch.tensor(adv.tolist(), dtype=torch.float32).to(torch.float64)  # C keeps advantages as float
    pick = None
    if opt["policy_loss"] in ("clip_cov", "kl_cov"):
        on = eff if eff is not None else [1] * sum(lens)
        pick = cov_pick(opt, lens, adv32.tolist(), old, on)
    loss, dlogp, dent = loss_and_grads(opt, lens, logp, ent, adv32, old, behav, ref, mask, keep, pick)
    case = {"options": opt, "groups": groups, "rewards": rewards, "lens": lens}
    if mask is not None:
        case["mask"] = mask
    case.update({"logp": logp, "old": old, "behav": behav, "ref": ref, "entropy": ent, "token_rewards": tokr,
                 "advantages": adv.tolist(), "loss": loss, "dlogp": dlogp, "dentropy": dent})
    if keep is not None:
        case["keep"] = keep
    if pick is not None:
        case["pick"] = pick
    return case


def make_case(rng, adv_kind, loss_kind, agg, extra):
    n_groups = rng.randint(1, 4)
    groups, rewards, lens = [], [], []
    for g in range(n_groups):
        G = 1 if extra.get("single") and rng.random() < 0.5 else rng.randint(2, 5)
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
    old = [f32(x + rng.gauss(0, 0.3 if extra.get("wide_old") else 0.15)) for x in logp]
    if extra.get("extreme_old"):  # log-ratios out to +-30: where SAPO's clamp holds
        old = [f32(x - (rng.choice(EXTREME) if rng.random() < 0.3 else 0.0) + rng.gauss(0, 0.3)) for x in logp]
    behav = [f32(x + rng.gauss(0, extra.get("behav_sd", 0.3))) for x in old]
    if extra.get("extreme_behav"):  # rollout log-ratios out to +-30: the correction's clamps and rejections
        behav = [f32(x - (rng.choice(EXTREME) if rng.random() < 0.1 else 0.0) + rng.gauss(0, 0.1)) for x in old]
    ref = [f32(x + rng.gauss(0, 0.2)) for x in logp]
    if extra.get("extreme_ref"):  # log-ratios out to +-30: where k3's clamps hold
        ref = [f32(x - rng.choice([-30.0, -25.0, -20.5, -11.5, -3.0, -2.7, -2.5, 0.0, 0.3, 2.5, 2.7, 11.5, 20.5,
                                   25.0, 30.0]) + rng.gauss(0, 0.01)) for x in logp]
    ent = [f32(abs(rng.gauss(1.5, 0.5))) for _ in range(T)]
    tokr = [f32(rng.gauss(0, 0.1)) if extra.get("token_rewards") else 0.0 for _ in range(T)]
    opt = {"advantage": adv_kind, "adv_eps": 1e-6, "adv_batch_norm": extra.get("adv_batch_norm", 0), "gamma":
           extra.get("gamma", 1.0), "policy_loss": loss_kind, "clip_low": 0.2, "clip_high": extra.get("clip_high", 0.28),
           "dual_clip": extra.get("dual_clip", 0.0), "tis_cap": extra.get("tis_cap", 0.0),
           "behav_cap": extra.get("behav_cap", 0.0), "behav_mask": extra.get("behav_mask", 0),
           "kl_estimator": extra.get("kl_estimator", 0), "kl_coef": extra.get("kl_coef", 0.0),
           "kl_in_reward": extra.get("kl_in_reward", 0), "entropy_coef": extra.get("entropy_coef", 0.0),
           "loss_agg": agg, "agg_norm_constant": extra.get("agg_norm_constant", 0.0)}
    return finish(opt, extra, groups, rewards, lens, logp, old, behav, ref, ent, tokr)


def make_masked_case(rng, adv_kind, loss_kind, agg, extra):
    """A multi-turn batch: each completion is turns and observations; the
    observation tokens get arbitrary logprobs and token rewards, which the
    formulas must ignore."""
    n_groups = rng.randint(1, 3)
    groups, rewards, lens, mask = [], [], [], []
    for g in range(n_groups):
        G = rng.randint(2, 4)
        for _ in range(G):
            groups.append(2000 + g)
            rewards.append(f32(rng.choice([0.0, 1.0, 0.3, -0.5, rng.uniform(-2, 2)])))
            m = []
            for turn in range(rng.randint(1, 3)):
                if turn > 0:
                    m += [0] * rng.randint(1, 5)  # the tool's answer before the next turn
                m += [1] * rng.randint(1, 5)
            if rng.random() < 0.3:
                m += [0] * rng.randint(1, 3)  # cut by the budget after an observation
            lens.append(len(m))
            mask += m
    T = sum(lens)
    logp = [f32(-abs(rng.gauss(1.0, 0.8)) - 0.01) for _ in range(T)]
    old = [f32(x + rng.gauss(0, 0.3 if extra.get("wide_old") else 0.15)) for x in logp]
    behav = [f32(x + rng.gauss(0, 0.3)) if mask[k] else 0.0 for k, x in enumerate(old)]
    ref = [f32(x + rng.gauss(0, 0.2)) for x in logp]
    ent = [f32(abs(rng.gauss(1.5, 0.5))) for _ in range(T)]
    tokr = [f32(rng.gauss(0, 0.1) if mask[k] else rng.uniform(-5, 5)) if extra.get("token_rewards") else 0.0
            for k in range(T)]
    opt = {"advantage": adv_kind, "adv_eps": 1e-6, "adv_batch_norm": extra.get("adv_batch_norm", 0), "gamma":
           extra.get("gamma", 1.0), "policy_loss": loss_kind, "clip_low": 0.2, "clip_high": extra.get("clip_high", 0.28),
           "dual_clip": extra.get("dual_clip", 0.0), "tis_cap": extra.get("tis_cap", 0.0),
           "behav_cap": extra.get("behav_cap", 0.0), "behav_mask": extra.get("behav_mask", 0),
           "kl_estimator": extra.get("kl_estimator", 0), "kl_coef": extra.get("kl_coef", 0.0),
           "kl_in_reward": extra.get("kl_in_reward", 0), "entropy_coef": extra.get("entropy_coef", 0.0),
           "loss_agg": agg, "agg_norm_constant": extra.get("agg_norm_constant", 0.0)}
    return finish(opt, extra, groups, rewards, lens, logp, old, behav, ref, ent, tokr, mask)


def write(name, cases):
    import re
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rl", name)
    with open(out, "w") as f:
        text = json.dumps({"generator": "tests/reference/make_rl_fixtures.py", "torch": torch.__version__,
                           "cases": cases}, separators=(",", ":"))
        # 12 significant digits are plenty for a 1e-6 comparison
        text = re.sub(r"-?\d+\.\d{13,}(e-?\d+)?", lambda m: "%.12g" % float(m.group(0)), text)
        f.write(text)
    print(f"{len(cases)} cases -> {out} ({os.path.getsize(out)} bytes)")


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
    write("cases.json", cases)
    # multi-turn: one case per estimator x loss x aggregation, extras rotating
    rng = random.Random(20261203)
    masked = []
    for a in ADV:
        for l in LOSS:
            for g in AGG:
                masked.append(make_masked_case(rng, a, l, g, extras[len(masked) % len(extras)]))
    write("masked_cases.json", masked)
    # the KL estimators at extreme log-ratios (+-30, around k3's clamps), as a loss term and in the reward
    rng = random.Random(20261204)
    klc = []
    for est in (3, 4):
        for in_reward in (0, 1):
            for l in LOSS:
                for j, a in enumerate(ADV):
                    extra = {"extreme_ref": 1, "kl_estimator": est, "kl_coef": 0.05, "kl_in_reward": in_reward}
                    if in_reward:
                        extra.update({"gamma": 0.9, "token_rewards": 1})
                    klc.append(make_case(rng, a, l, AGG[(len(klc) + j) % len(AGG)], extra))
    write("kl_cases.json", klc)
    # CISPO, GMPO and GPG: every advantage estimator x aggregation, with and without the extras; log-ratios
    # wide enough (old drawn 0.3 from logp) that the clips hold on some tokens
    rng = random.Random(20261205)
    new = []
    for l in ("cispo", "gmpo", "gpg"):
        for a in ADV:
            for g in AGG:
                extra = [{}, {"tis_cap": 1.5}, {"kl_estimator": 3, "kl_coef": 0.04, "entropy_coef": 0.01}][len(new) % 3]
                new.append(make_case(rng, a, l, g, dict(extra, wide_old=1)))
    write("loss2_cases.json", new)
    # SAPO, Clip-Cov and KL-Cov: every advantage estimator x aggregation; SAPO at log-ratios out to +-30
    rng = random.Random(20261206)
    l3 = []
    for l in ("sapo", "clip_cov", "kl_cov"):
        for a in ADV:
            for g in AGG:
                j = len(l3) % 3
                extra = [{}, {"tis_cap": 1.5}, {"kl_estimator": 3, "kl_coef": 0.04, "entropy_coef": 0.01}][j]
                extra = dict(extra, wide_old=1)
                if l == "sapo":
                    extra.update({"extreme_old": j == 0, "sapo_tau_pos": [1.0, 2.0, 0.5][j],
                                  "sapo_tau_neg": [1.05, 3.0, 1.0][j]})
                elif l == "clip_cov":  # every candidate taken (ratio 1): the draw is verl's randperm
                    extra.update({"clip_cov_ratio": 1.0, "clip_cov_lb": [0.0, 0.05, -0.1][j],
                                  "clip_cov_ub": [0.5, 5.0, 0.2][j]})
                else:
                    extra.update({"kl_cov_ratio": [0.2, 0.0002, 0.5][j], "ppo_kl_coef": [1.0, 0.5, 2.0][j]})
                l3.append(make_case(rng, a, l, g, extra))
    write("loss3_cases.json", l3)
    # the rollout correction (verl's rollout_is / rollout_rs / veto) and verl's whitening, over
    # losses, estimators and aggregations; rollout log-ratios out to +-30, single-sample groups,
    # multi-turn masks, sequences rejected whole
    rng = random.Random(20261207)
    corr = []
    settings = [
        {"rollout_is": "token", "rollout_is_threshold": 2.0},
        {"rollout_is": "sequence", "rollout_is_threshold": 2.0},
        {"rollout_is": "token", "rollout_is_threshold": 1.5, "rollout_is_batch_normalize": 1},
        {"rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_is_batch_normalize": 1},
        {"rollout_rs": "token", "rollout_rs_threshold": 1.5},
        {"rollout_rs": "sequence", "rollout_rs_threshold": 2.0, "rollout_rs_threshold_lower": 0.3},
        {"rollout_rs": "geometric", "rollout_rs_threshold": 1.1},
        {"rollout_token_veto": 0.5},
        {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "geometric",
         "rollout_rs_threshold": 1.2, "rollout_token_veto": 1e-4},
        {"whiten": 1, "adv_batch_norm": 1},
        # the sequence weight is over the loss mask, before rejection (verl computes IS before RS)
        {"rollout_is": "sequence", "rollout_is_threshold": 5.0, "rollout_rs": "token", "rollout_rs_threshold": 1.3},
    ]
    losses = ["ppo_clip", "gspo", "cispo", "gmpo", "gpg", "sapo"]
    for si, st in enumerate(settings):
        for j in range(6):
            a = ADV[(si + j) % len(ADV)]
            if st.get("whiten"):
                a = ["reinforce_pp", "grpo", "rloo", "reinforce_pp", "dr_grpo", "reinforce_pp"][j]
            l = losses[(si * 2 + j) % len(losses)]
            g = AGG[(si + 2 * j) % len(AGG)]
            extra = dict(st, extreme_behav=j % 2 == 0, single=j == 3, behav_sd=0.3)
            if j == 5:
                corr.append(make_masked_case(rng, a, l, g, extra))
            else:
                corr.append(make_case(rng, a, l, g, extra))
    write("correction_cases.json", corr)


if __name__ == "__main__":
    main()
