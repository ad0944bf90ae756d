"""LoRA through the bindings on stories260K: attaching adapters leaves the
model as it was (B = 0), training moves the adapters only, the PEFT folder
round-trips bit for bit, the merged save is the adapted model, and bad
requests raise the library's errors."""
import json

import pytest

import rlpost

from conftest import make_batch
from test_policy import SCORED, SEQS, close


def test_lora_train_save_load_merge(policy, ctx, stories_path, tmp_path):
    info = rlpost.model_inspect(stories_path)
    p = policy.clone(trainable=True)
    base = list(p.logprobs(SEQS))
    p.enable_lora(rank=4, alpha=8.0, targets=["q_proj", "v_proj", "down_proj"], seed=3)
    assert list(p.logprobs(SEQS)) == base  # B = 0: the base model bit for bit
    d, kv, f = info.dim, info.n_kv_heads * info.head_dim, info.ffn_dim
    q = info.n_heads * info.head_dim
    assert p.n_trainable == info.n_layers * 4 * ((d + q) + (d + kv) + (f + d))
    assert p.n_params == policy.n_params  # the base's count is unchanged
    mem = p.memory()
    assert mem.gradients == 4 * p.n_trainable  # no base gradients
    p.set_optimizer(lr=1e-2, weight_decay=0.0)
    first = p.train_step(SEQS)
    for _ in range(4):
        p.train_step(SEQS)
    tuned = list(p.logprobs(SEQS))
    assert -sum(tuned) / SCORED < first.loss  # the adapters learned
    assert p.memory().optimizer == 8 * p.n_trainable  # AdamW moments of the adapters only

    p.save_lora(tmp_path / "adapter", base_model="stories260K")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["lora_alpha"] == 8.0
    assert sorted(cfg["target_modules"]) == ["down_proj", "q_proj", "v_proj"]
    assert cfg["base_model_name_or_path"] == "stories260K"
    fresh = policy.clone(trainable=True)
    fresh.load_lora(tmp_path / "adapter")  # attaches from the config
    assert fresh.n_trainable == p.n_trainable
    assert list(fresh.logprobs(SEQS)) == tuned

    p.save(tmp_path / "merged")  # the merged model W + s·B·A, a plain HF folder
    with rlpost.Policy(ctx, tmp_path / "merged") as merged:
        assert close(merged.logprobs(SEQS), tuned, 2e-5)
    # the optimizer state follows the adapters: it round-trips into the reloaded copy
    p.save_optimizer(tmp_path / "opt.safetensors")
    fresh.load_optimizer(tmp_path / "opt.safetensors")
    fresh.set_optimizer(lr=1e-2, weight_decay=0.0)  # settings are not part of the state file
    a, b = p.train_step(SEQS), fresh.train_step(SEQS)
    assert a.loss == pytest.approx(b.loss, rel=1e-6) and list(p.logprobs(SEQS)) == list(fresh.logprobs(SEQS))
    for x in (p, fresh):
        x.close()


def test_lora_refusals(policy, tmp_path):
    p = policy.clone(trainable=True)
    with pytest.raises(rlpost.InvalidArgumentError, match="lm_head"):
        p.enable_lora(targets="q_proj,lm_head")
    with pytest.raises(rlpost.InvalidArgumentError):
        p.enable_lora(rank=0)
    with pytest.raises(rlpost.StateError):
        p.save_lora(tmp_path / "none")  # no adapters yet
    p.enable_lora(rank=2)
    with pytest.raises(rlpost.StateError):
        p.enable_lora(rank=2)  # already attached
    frozen = policy.clone(trainable=False)
    with pytest.raises(rlpost.StateError):
        frozen.enable_lora()
    assert frozen.n_trainable == 0
    with pytest.raises(rlpost.NotFoundError):
        policy.clone(trainable=True).load_lora(tmp_path / "missing")
    for x in (p, frozen):
        x.close()


def test_lora_policy_is_its_own_reference(policy):
    """ref = the policy itself: its base with the adapters off, no second copy."""
    p = policy.clone(trainable=True)
    with pytest.raises(rlpost.InvalidArgumentError, match="LoRA"):
        p.train_rl(make_batch(groups=1, group_size=2, rewards=[1, 0]), ref=p,
                   kl_estimator=rlpost.KLEstimator.K3, kl_coef=0.05)
    p.enable_lora(rank=4, alpha=16.0)
    p.set_optimizer(lr=5e-2, weight_decay=0.0)
    batch = make_batch(groups=2, group_size=4, rewards=[1, 0, 0, 1, 1, 0, 1, 0])
    kw = dict(kl_estimator=rlpost.KLEstimator.K3, kl_coef=0.05)
    first = p.train_rl(batch, ref=p, **kw)
    assert first.kl == pytest.approx(0.0, abs=1e-7)  # B = 0: the adapted policy is its base
    for _ in range(3):
        last = p.train_rl(batch, ref=p, **kw)
    assert last.kl > 1e-6  # the adapters moved it away from the base
    # the adapters are back on after the reference pass: p is not its base
    assert list(p.logprobs(SEQS)) != list(policy.logprobs(SEQS))
    p.close()


def test_lora_merged_gguf_and_hf(ctx, tmp_path):
    """The merged model leaves as GGUF (llama.cpp) and as an HF folder, and
    both load back with the adapted policy's logprobs."""
    from test_gguf_out import TINY
    seq = [([0, 1, 2, 3, 4, 5, 1, 2], 1), ([3, 2, 1, 0, 5], 2)]
    with rlpost.Policy(ctx, TINY) as p:
        base = list(p.logprobs(seq))
        p.enable_lora(rank=2, alpha=4.0, seed=5)
        p.set_optimizer(lr=5e-2, weight_decay=0.0)
        for _ in range(3):
            p.train_step(seq)
        want = list(p.logprobs(seq))
        assert max(abs(a - b) for a, b in zip(want, base)) > 1e-3  # the adapters changed the model
        p.save_gguf(tmp_path / "merged.gguf", type="f32")
        p.save(tmp_path / "merged_hf")
        p.save_lora(tmp_path / "adapter")
    with rlpost.Policy(ctx, tmp_path / "merged.gguf") as g, rlpost.Policy(ctx, tmp_path / "merged_hf") as h:
        assert close(g.logprobs(seq), want, 1e-5)
        assert close(h.logprobs(seq), want, 1e-5)
    with rlpost.Policy(ctx, TINY) as fresh:  # the base + the PEFT folder = the same model
        fresh.load_lora(tmp_path / "adapter")
        assert list(fresh.logprobs(seq)) == want


def test_engine_takes_adapter_folders(policy, tmp_path):
    """rlp_rollout_engine_load_weights on a PEFT folder: the adapters go onto
    the engine's base, unmerged, and it decodes what an engine holding the
    merged model decodes; whole weights drop them again."""
    p = policy.clone(trainable=True)
    p.enable_lora(rank=4, alpha=16.0, seed=2)
    p.set_optimizer(lr=5e-2, weight_decay=0.0)
    for _ in range(3):
        p.train_step(SEQS)
    p.save_lora(tmp_path / "adapter")
    p.save(tmp_path / "merged")
    policy.save(tmp_path / "base")
    prompts = [[1, 45, 60], [1, 7, 8, 9]]
    kw = dict(n=1, temperature=0.0, max_new_tokens=12, ignore_eos=True)
    with rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=64) as a, \
            rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=64) as m:
        before = [list(t.completion_tokens) for t in a.generate(prompts, **kw)]
        a.load_weights(tmp_path / "adapter", version=7)
        m.load_weights(tmp_path / "merged", version=7)
        ga, gm = list(a.generate(prompts, **kw)), list(m.generate(prompts, **kw))
        assert [list(t.completion_tokens) for t in ga] == [list(t.completion_tokens) for t in gm]
        assert [list(t.completion_tokens) for t in ga] != before  # the adapters changed what it writes
        for x, y in zip(ga, gm):
            assert close(x.logprobs, y.logprobs, 1e-4) and x.policy_version == 7
        a.load_weights(tmp_path / "adapter", version=8)  # the next version's adapters replace these
        a.load_weights(tmp_path / "base", version=9)  # whole weights: the adapters are gone
        assert [list(t.completion_tokens) for t in a.generate(prompts, **kw)] == before
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "use_dora": true,'
                                                 ' "target_modules": ["q_proj"]}')
        with pytest.raises(rlpost.UnsupportedError, match="use_dora"):
            a.load_weights(bad, version=10)
        assert [list(t.completion_tokens) for t in a.generate(prompts, **kw)] == before  # unchanged
    p.close()


def test_file_transport_ships_adapters_only(policy, tmp_path, ctx, stories_path):
    """A LoRA policy publishes its PEFT folder, not the model: a reader that
    runs the same base decodes what the trainer's merged model decodes."""
    p = policy.clone(trainable=True)
    p.enable_lora(rank=4, alpha=16.0, seed=4)
    p.set_optimizer(lr=5e-2, weight_decay=0.0)
    d = tmp_path / "weights"
    with rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE, dir=d,
                             keep_versions=2) as trainer:
        for _ in range(3):
            p.train_step(SEQS)
            trainer.publish(p)
        names = sorted(x.name for x in (d / "v3").iterdir())
        assert names == ["adapter_config.json", "adapter_model.safetensors"], names
        lora_bytes = trainer.stats().bytes_published / 3
    p.save(tmp_path / "merged")
    full = sum(x.stat().st_size for x in (tmp_path / "merged").iterdir())
    assert lora_bytes * 10 < full  # stories260K at r = 4: a fraction of the model per version
    prompts = [[1, 45, 60], [1, 7, 8, 9]]
    kw = dict(n=1, temperature=0.0, max_new_tokens=10, ignore_eos=True)
    with rlpost.Policy(ctx, stories_path, trainable=False) as base, \
            rlpost.RolloutEngine(base, max_batch=2, max_seq_len=32) as eng, \
            rlpost.RolloutEngine(base, max_batch=2, max_seq_len=32) as merged, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE, dir=d) as reader:
        reader.pull(eng)  # the latest version: base + its adapters, nothing earlier needed
        assert eng.version == 3
        merged.load_weights(tmp_path / "merged", version=3)
        a, b = list(eng.generate(prompts, **kw)), list(merged.generate(prompts, **kw))
        assert [list(t.completion_tokens) for t in a] == [list(t.completion_tokens) for t in b]
        assert eng.generate(prompts, **kw).logprob_mismatch(p).max_abs < 1e-3
    p.close()


QLORA_TEXT = ("Alice has three apples. She gives one to Bob, who already had two, so now Bob has three apples "
              "and Alice has two. The answer is that they have five apples together.")


def test_quantized_base_smollm2(ctx, smollm2_path, tmp_path):
    """LoRA over a base kept in GGUF blocks (base_dtype), on SmolLM2-135M:
    with B = 0 the policy is the base up to what the format costs
    (logprobs of real text against the fp32 base: mean and max |Δ| stated
    below), the weights take a fraction of the memory, the adapters train,
    and their PEFT folder reloads onto another policy with the same
    quantized base bit for bit, and onto the fp32 base (which checks its
    own q8_0 rounding against the file's CRC) within the format's cost; a
    base that moved refuses it."""
    with rlpost.Policy(ctx, smollm2_path) as p32:
        ids = p32.tokenizer.encode(QLORA_TEXT)
        seq = [(ids, 4)]
        ref = list(p32.logprobs(seq))
        w32 = p32.memory().weights
    # mean/max |Δlogp| allowed; measured on these 33 tokens 0.036/0.17
    # (q8_0: weights off by 0.6 % in Frobenius norm, Q8_0's usual), 0.67/3.5
    # (q4_0) and 0.43/2.0 (q4_k): a 135M model pays heavily for 4 bits, and
    # this file's Q4_1 levels do not sit on Q4_0's grid; about 2x margin
    bounds = {"q8_0": (0.08, 0.4), "q4_0": (1.4, 7.0), "q4_k": (0.9, 4.0)}
    for dt, (mean_tol, max_tol) in bounds.items():
        with rlpost.Policy(ctx, smollm2_path) as p:
            p.enable_lora(rank=8, alpha=16.0, base_dtype=dt, seed=1)
            got = list(p.logprobs(seq))
            d = [abs(a - b) for a, b in zip(got, ref)]
            mean, mx = sum(d) / len(d), max(d)
            w = p.memory().weights
            print("base %s: |dlogp| mean %.2e max %.2e over %d tokens; weights %.1f MB of %.1f"
                  % (dt, mean, mx, len(d), w / 1e6, w32 / 1e6))
            assert 0 < mean <= mean_tol and mx <= max_tol
            assert w < (0.5 if dt == "q8_0" else 0.38) * w32  # the tied 113 MB embedding stays fp32
    with rlpost.Policy(ctx, smollm2_path) as p:
        p.enable_lora(rank=8, alpha=16.0, base_dtype="q8_0", seed=1)
        p.set_optimizer(lr=2e-3, weight_decay=0.0)
        before = sum(p.logprobs(seq))
        for _ in range(3):
            p.train_step(seq)
        after = list(p.logprobs(seq))
        assert sum(after) > before + 1.0  # the adapters learn the text
        p.save_lora(tmp_path / "adapter")
        with pytest.raises(rlpost.StateError):  # adapters are attached (and stay: no fp32 base)
            p.enable_lora(rank=8)
    with rlpost.Policy(ctx, smollm2_path) as q:
        q.enable_lora(rank=8, alpha=16.0, base_dtype="q8_0", seed=2)
        q.load_lora(tmp_path / "adapter")
        assert list(q.logprobs(seq)) == after
    with rlpost.Policy(ctx, smollm2_path) as f:
        # the fp32 base takes them (QLoRA's deployment: it checks itself quantized as q8_0), and
        # computes what the q8_0 policy does up to the format's cost
        f.load_lora(tmp_path / "adapter")
        d = [abs(a - b) for a, b in zip(f.logprobs(seq), after)]
        assert sum(d) / len(d) <= bounds["q8_0"][0] and max(d) <= bounds["q8_0"][1], (sum(d) / len(d), max(d))
    with rlpost.Policy(ctx, smollm2_path) as moved:
        moved.set_optimizer(lr=1e-3, weight_decay=0.0)
        moved.train_step(seq)  # another base now
        with pytest.raises(rlpost.InvalidArgumentError, match="another base"):
            moved.load_lora(tmp_path / "adapter")
    with rlpost.Policy(ctx, smollm2_path) as bad:
        with pytest.raises(rlpost.InvalidArgumentError):
            bad.enable_lora(rank=8, base_dtype="nf4")
        assert bad.n_trainable == bad.n_params  # refused: nothing attached
