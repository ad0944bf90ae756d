"""Policies on stories260K: inspect, logprobs, supervised steps with the
built-in and Python losses, clone, save/load, optimizer state, RL steps."""
import math

import pytest

import rlpost

from conftest import make_batch

SEQS = [([1, 45, 60, 72, 81, 99, 120], 3), ([1, 200, 201, 202], 1), [1, 7, 8, 9, 10]]
SCORED = (7 - 3) + (4 - 1) + (5 - 1)


def close(a, b, tol):
    a, b = list(a), list(b)
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))


def test_model_inspect(policy, stories_path):
    info = rlpost.model_inspect(stories_path)
    assert info.format == "llama2c" and info.architecture == "llama"
    assert info.vocab_size == 512 and info.n_layers == 5 and info.dim == 64
    assert info.n_params == policy.n_params == 260032
    assert policy.tokenizer is None  # llama2.c checkpoints have none
    # version 2: the architecture description (Llama: none of Gemma's extras)
    assert info.activation == "silu"
    assert not info.qk_norm and not info.post_norms and info.norm_offset == 0 and info.embed_scale == 0
    assert abs(info.attn_scale - info.head_dim ** -0.5) < 1e-6
    assert info.sliding_window == 0 and info.n_local_layers == 0 and info.final_softcap == 0
    with pytest.raises(rlpost.Error):
        rlpost.model_inspect(stories_path.parent / "no-such.bin")


def test_model_inspect_gemma3():
    # the real Gemma 3 270M GGUF (scripts/fetch-model.sh gemma3-270m), if fetched
    import os
    import pathlib
    d = os.environ.get("RLPOST_MODEL_DIR") or str(pathlib.Path(__file__).resolve().parents[3] / "models")
    path = pathlib.Path(d) / "gemma-3-270m-q4_k_m.gguf"
    if not path.exists():
        pytest.skip("%s is absent" % path)
    info = rlpost.model_inspect(path)
    assert info.architecture == "gemma3" and info.activation == "gelu_tanh"
    assert info.qk_norm and info.post_norms and info.norm_offset == 1
    assert info.n_layers == 18 and info.head_dim == 256 and info.dim == 640
    assert abs(info.embed_scale - 640 ** 0.5) < 1e-4 and abs(info.attn_scale - 1 / 16) < 1e-7
    # llama.cpp's Gemma 3: every 6th layer global, local RoPE base 10000
    assert info.sliding_window == 512 and info.n_local_layers == 15 and info.rope_theta_local == 10000


def test_logprobs(policy):
    lp, ent = policy.logprobs(SEQS, entropy=True)
    assert len(lp) == len(ent) == SCORED
    assert all(x < 0 for x in lp) and all(0 <= e <= math.log(512) + 1e-4 for e in ent)
    # a sequence scored alone gives the same numbers as inside the batch
    alone = policy.logprobs([SEQS[1]])
    assert close(alone, lp[4:7], 1e-5)
    # temperature: softer distribution, higher entropy
    _, ent_hot = policy.logprobs(SEQS, temperature=2.0, entropy=True)
    assert sum(ent_hot) > sum(ent)
    with pytest.raises(rlpost.InvalidArgumentError):
        policy.logprobs([[1, 2, 600]])  # id outside the vocabulary
    with pytest.raises(rlpost.InvalidArgumentError):
        policy.logprobs(SEQS, temperature=0.0)


def test_train_step_python_loss_equals_builtin(policy):
    a = policy.clone(trainable=True)
    b = policy.clone(trainable=True)
    for p in (a, b):
        p.set_optimizer(lr=1e-3, weight_decay=0.0)
    calls = []

    def nll(ctx):
        calls.append((ctx.n_seqs, ctx.n_tokens, ctx.step_n_tokens, list(ctx.token_start)))
        inv = 1.0 / ctx.step_n_tokens
        for t in range(ctx.n_tokens):
            ctx.dlogprobs[t] = -inv
        return -sum(float(x) for x in ctx.logprobs) * inv

    sa = a.train_step(SEQS)
    sb = b.train_step(SEQS, loss=nll)
    assert calls == [(3, SCORED, SCORED, [0, 4, 7, SCORED])]
    assert sa.loss == pytest.approx(sb.loss, rel=1e-6) and sa.grad_norm == pytest.approx(sb.grad_norm, rel=1e-6)
    assert sa.policy_version == sb.policy_version == 1 and a.version == b.version == 1
    assert sa.n_tokens == SCORED and sa.n_seqs == 3 and sa.skipped == 0
    assert sa.lr == pytest.approx(1e-3)
    assert close(a.logprobs(SEQS), b.logprobs(SEQS), 1e-6)
    # the step lowered the NLL of the trained tokens
    assert -sum(a.logprobs(SEQS)) / SCORED < sa.loss
    a.close()
    b.close()


def test_clone_to_another_context(policy):
    """rlp_policy_clone_to: the same weights on a context of its own (its own
    threads); the copy lives on that context and gives the same logprobs."""
    with rlpost.Context(n_threads=1) as other:
        c = policy.clone(context=other)
        assert c.context is other
        assert close(c.logprobs(SEQS), policy.logprobs(SEQS), 1e-6)
        c.close()
    with pytest.raises(TypeError):
        policy.clone(context="not a context")


def test_loss_context_nll_and_micro_batches(policy):
    p = policy.clone(trainable=True)
    seen = []

    def doubled(ctx):
        base = ctx.nll()
        seen.append((ctx.n_seqs, base))
        for t in range(ctx.n_tokens):
            ctx.dlogprobs[t] *= 2
        ctx.loss = 2 * base  # set instead of returned

    ref = policy.clone(trainable=True).train_step(SEQS, micro_batch_tokens=8)
    st = p.train_step(SEQS, loss=doubled, micro_batch_tokens=8)
    assert st.n_micro_batches == len(seen) > 1
    assert st.loss == pytest.approx(2 * ref.loss, rel=1e-6)
    assert sum(b for _, b in seen) == pytest.approx(ref.loss, rel=1e-6)


def test_train_step_refuses_frozen_and_bad_loss(policy):
    frozen = policy.clone()
    with pytest.raises(rlpost.StateError):
        frozen.train_step(SEQS)
    with pytest.raises(TypeError):
        policy.train_step(SEQS, loss=42)
    assert frozen.memory().gradients == 0 and policy.memory().gradients > 0


def test_clone_save_load(policy, ctx, tmp_path):
    policy.set_optimizer(lr=1e-3, weight_decay=0.0, schedule=rlpost.LRSchedule.CONSTANT)
    policy.train_step(SEQS)
    assert policy.version == 1 and policy.memory().optimizer > 0
    clone = policy.clone()
    assert clone.version == 1 and clone.memory().optimizer == 0
    assert close(clone.logprobs(SEQS), policy.logprobs(SEQS), 0)
    policy.save(tmp_path / "hf")
    policy.save_optimizer(tmp_path / "opt.safetensors")
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()
    with rlpost.Policy(ctx, tmp_path / "hf") as loaded:
        assert close(loaded.logprobs(SEQS), policy.logprobs(SEQS), 1e-6)
        assert loaded.version == 0
        loaded.load_optimizer(tmp_path / "opt.safetensors")
        assert loaded.version == 1
        # same weights, same moments: the next steps agree
        s1 = loaded.train_step(SEQS)
        s2 = policy.train_step(SEQS)
        assert s1.loss == pytest.approx(s2.loss, rel=1e-5) and s1.policy_version == s2.policy_version == 2
    with pytest.raises(rlpost.Error):
        policy.load_optimizer(tmp_path / "missing.safetensors")
    policy.save(tmp_path / "bf16", dtype=rlpost.DType.BF16)
    with rlpost.Policy(ctx, tmp_path / "bf16") as half:
        assert close(half.logprobs(SEQS), policy.logprobs(SEQS), 0.1)
    with pytest.raises(TypeError):
        policy.set_optimizer(learning_rate=1.0)


def test_train_rl_grpo_and_kl(policy):
    policy.set_optimizer(lr=1e-3)
    ref = policy.clone()
    batch = make_batch(groups=2, group_size=4, rewards=[1, 0, 0, 1, 0.5, 0.5, 0.5, 0.5])
    st = policy.train_rl(batch, ref=ref, advantage=rlpost.Advantage.GRPO, kl_estimator=rlpost.KLEstimator.K3,
                         kl_coef=0.05, loss_agg=rlpost.LossAgg.TOKEN_MEAN, policy_loss=rlpost.PolicyLoss.PPO_CLIP)
    assert st.n_groups == 2 and st.n_seqs == 8 and st.zero_std_groups == 1
    assert st.optimizer_steps == 1 and st.policy_version == policy.version == 1
    assert st.kl == pytest.approx(0.0, abs=1e-6)  # π = π_ref at the first step
    assert st.reward_mean == pytest.approx(0.5)
    # DAPO dynamic sampling drops the group with equal rewards
    st2 = policy.train_rl(batch, filter_equal_groups=True, mini_batches=1, ppo_epochs=2)
    assert st2.filtered_groups == 1 and st2.n_seqs == 4 and st2.optimizer_steps == 2
    unscored = make_batch()
    with pytest.raises(rlpost.InvalidArgumentError):
        policy.train_rl(unscored)
    with pytest.raises(rlpost.InvalidArgumentError):
        policy.train_rl(batch, kl_estimator=rlpost.KLEstimator.K1, kl_coef=0.1)  # KL without a reference
    with pytest.raises(TypeError):
        policy.train_rl(batch, clip=0.3)


def test_train_rl_second_wave_options(policy):
    """rlp_rl_options version 2 through the bindings: SAPO, KL-Cov, verl's rollout correction and whitening
    each take a step; options that contradict each other are refused by name."""
    policy.set_optimizer(lr=1e-3)
    batch = make_batch(groups=2, group_size=4, rewards=[1, 0, 0, 1, 0.2, 0.9, 0.5, 0.1])
    st = policy.train_rl(batch, policy_loss=rlpost.PolicyLoss.SAPO, sapo_tau_pos=1.0, sapo_tau_neg=1.05)
    assert st.optimizer_steps == 1 and st.n_seqs == 8
    st = policy.train_rl(batch, policy_loss=rlpost.PolicyLoss.KL_COV, kl_cov_ratio=0.1, ppo_kl_coef=1.0)
    assert st.optimizer_steps == 1
    st = policy.train_rl(batch, rollout_is=rlpost.ISLevel.SEQUENCE, rollout_is_threshold=2.0,
                         rollout_is_batch_normalize=True, whiten=rlpost.Whiten.UNBIASED,
                         advantage=rlpost.Advantage.REINFORCE_PP)
    assert st.optimizer_steps == 1
    # a veto above every weight rejects every sequence: nothing trains, the version still advances
    v = policy.version
    st = policy.train_rl(batch, rollout_token_veto=10.0)
    assert st.n_tokens == 0 and policy.version == v + 1
    with pytest.raises(rlpost.InvalidArgumentError, match="rollout_is and tis_cap"):
        policy.train_rl(batch, rollout_is=rlpost.ISLevel.TOKEN, tis_cap=2.0)
    with pytest.raises(rlpost.InvalidArgumentError, match="rollout_is must be"):
        policy.train_rl(batch, rollout_is=rlpost.ISLevel.GEOMETRIC)
