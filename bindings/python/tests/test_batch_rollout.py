"""Batches of trajectories, and rollout engines (local on stories260K with
token prompts, remote against a port nobody listens on)."""
import json
import math
import threading
import time

import pytest

import rlpost
from rlpost import HAVE_NUMPY

from conftest import make_batch


def test_batch_roundtrip():
    b = rlpost.Batch()
    assert len(b) == 0 and b.size == 0
    b.append(group_id=7, sample_index=2, prompt_tokens=[1, 2, 3], completion_tokens=[4, 5],
             logprobs=[-0.25, -1.5], token_versions=[3, 4], prompt_text="p", completion_text="c ü",
             policy_version=3, finish_reason=rlpost.FinishReason.LENGTH, stop_index=-1, temperature=0.7,
             reward=1.5, metadata={"reference": "42", "k": [1, 2]}, token_rewards=[0.5, -0.5])
    t = b[0]
    assert (type(t.completion_tokens).__name__ == "ndarray") == HAVE_NUMPY
    assert t.group_id == 7 and t.sample_index == 2 and list(t.prompt_tokens) == [1, 2, 3]
    assert list(t.completion_tokens) == [4, 5] and list(t.logprobs) == [-0.25, -1.5]
    assert list(t.token_versions) == [3, 4] and list(t.token_rewards) == [0.5, -0.5]
    assert t.prompt_text == "p" and t.completion_text == "c ü" and t.policy_version == 3
    assert t.finish_reason == rlpost.FinishReason.LENGTH and t.temperature == pytest.approx(0.7)
    assert t.reward == 1.5 and t.valid and t.error is None
    assert t.metadata == {"reference": "42", "k": [1, 2]} and json.loads(t.metadata_json)["reference"] == "42"
    assert b[-1] == t
    with pytest.raises(IndexError):
        b[1]
    # a copy through another batch is the same trajectory
    c = rlpost.Batch()
    c.append(t)
    assert c[0] == t
    # defaults: unscored, valid, version tags = policy_version
    b.append(completion_tokens=[9], logprobs=[-1.0], policy_version=5)
    u = b[1]
    assert math.isnan(u.reward) and u.valid and list(u.token_versions) == [5] and u.token_rewards is None
    assert u.finish_reason == rlpost.FinishReason.STOP and u.stop_index == -1
    with pytest.raises(TypeError, match="unknown"):
        b.append(completion_tokens=[1], logprobs=[-1.0], colour="red")
    with pytest.raises(ValueError, match="entries"):
        b.append(completion_tokens=[1, 2], logprobs=[-1.0])
    with pytest.raises(rlpost.InvalidArgumentError):
        b.append(completion_tokens=[1])  # logprobs missing
    assert len(b) == 2


def test_batch_edits_and_extend():
    a = make_batch(groups=1, group_size=2)
    a.set_reward(0, 0.25)
    a.set_token_rewards(1, [1.0, 2.0, 3.0, 4.0])
    assert a[0].reward == 0.25 and list(a[1].token_rewards) == [1.0, 2.0, 3.0, 4.0]
    a.set_token_rewards(1, None)
    assert a[1].token_rewards is None
    with pytest.raises(rlpost.InvalidArgumentError):
        a.set_token_rewards(1, [1.0])
    with pytest.raises(rlpost.InvalidArgumentError):
        a.set_reward(5, 1.0)
    a.set_invalid(0, "judge was down")
    assert not a[0].valid and a[0].error == "judge was down" and len(a[0].completion_tokens) == 4
    b = make_batch(groups=2, group_size=2)
    a.extend(b)
    assert len(a) == 6 and len(b) == 0
    assert [t.group_id for t in a] == [1, 1, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        a.extend(a)


def test_batch_provenance():
    a = make_batch(groups=2, group_size=2)
    assert all(t.provenance is None for t in a)
    a.set_group_provenance(2, prompt_index=17, epoch=3, position=5, sampling_seed=2 ** 64 - 1, batch=9)
    a.set_provenance(0, {"prompt_index": 4})
    assert a[0].provenance == rlpost.Provenance(prompt_index=4, epoch=0, position=0, sampling_seed=0, batch=0)
    assert a[1].provenance is None
    for t in (a[2], a[3]):
        assert t.provenance == rlpost.Provenance(prompt_index=17, epoch=3, position=5, sampling_seed=2 ** 64 - 1,
                                                 batch=9)
    # copies keep it, given as a Provenance or a dict
    c = rlpost.Batch()
    for t in a:
        c.append(t)
    c.append(a[1], provenance={"epoch": 8})
    assert [t.provenance for t in c][:4] == [t.provenance for t in a]
    assert c[4].provenance.epoch == 8 and c[4].provenance.prompt_index == 0
    with pytest.raises(rlpost.NotFoundError, match="group_id 7"):
        a.set_group_provenance(7, prompt_index=1)
    with pytest.raises(rlpost.InvalidArgumentError, match="outside the batch"):
        a.set_provenance(4, prompt_index=1)
    with pytest.raises(TypeError, match="unknown provenance"):
        a.set_provenance(0, seed=1)
    with pytest.raises(ValueError, match="outside"):
        a.set_provenance(0, batch=-1)
    assert a[1].provenance is None


def test_batch_multiturn_mask_and_episode(tmp_path):
    """rlp_trajectory version 3: a loss mask (observation tokens 0) and the
    episode record survive append, get, copies, extend and batch files."""
    b = rlpost.Batch()
    b.append(group_id=3, prompt_tokens=[1, 2], completion_tokens=[4, 5, 6, 7, 8],
             logprobs=[-0.5, -1.0, 0.0, 0.0, -2.0], loss_mask=[1, 1, 0, 0, 1], reward=1.0,
             episode=rlpost.Episode(turns=2, tool_calls=1, tool_errors=0, tool_timeouts=1, observation_tokens=2,
                                    observations_cut=1, end=rlpost.EpisodeEnd.MAX_TURNS, tool_seconds=0.25))
    b.append(group_id=3, sample_index=1, prompt_tokens=[1, 2], completion_tokens=[9], logprobs=[-1.0], reward=0.0,
             episode={"turns": 1, "end": rlpost.EpisodeEnd.DONE})
    t, u = b[0], b[1]
    assert list(t.loss_mask) == [1, 1, 0, 0, 1]
    assert t.episode == rlpost.Episode(turns=2, tool_calls=1, tool_errors=0, tool_timeouts=1, observation_tokens=2,
                                       observations_cut=1, end=rlpost.EpisodeEnd.MAX_TURNS, tool_seconds=0.25)
    assert t.episode.end is rlpost.EpisodeEnd.MAX_TURNS
    assert u.loss_mask is None and u.episode.turns == 1 and u.episode.tool_calls == 0
    assert u.episode.end == rlpost.EpisodeEnd.DONE
    # copies (append of a Trajectory, extend) and a batch file keep both
    c = rlpost.Batch()
    c.append(t)
    c.append(u)
    assert c[0] == t and c[1] == u
    d = rlpost.Batch()
    d.extend(c)
    assert d[0] == t and len(c) == 0
    path = tmp_path / "multiturn.rlpb"
    b.write_file(path)
    back = rlpost.Batch.read_file(path)
    assert back[0] == t and back[1] == u
    # a single-turn sample has neither
    b.append(completion_tokens=[1], logprobs=[-1.0])
    assert b[2].loss_mask is None and b[2].episode is None
    # refused: a mask value other than 0 and 1, a mask of the wrong length, an unknown end or field
    with pytest.raises(rlpost.InvalidArgumentError, match="loss_mask"):
        b.append(completion_tokens=[1, 2], logprobs=[-1.0, -1.0], loss_mask=[1, 2])
    with pytest.raises(ValueError, match="entries"):
        b.append(completion_tokens=[1, 2], logprobs=[-1.0, -1.0], loss_mask=[1])
    with pytest.raises(rlpost.InvalidArgumentError, match="episode"):
        b.append(completion_tokens=[1], logprobs=[-1.0], episode={"end": 17})
    with pytest.raises(TypeError, match="unknown episode"):
        b.append(completion_tokens=[1], logprobs=[-1.0], episode={"calls": 1})
    assert len(b) == 3


PROMPTS = [[1, 45, 60], {"tokens": [1, 7, 8], "group_id": 42, "metadata": {"reference": "x"}}]


@pytest.fixture
def engine(policy):
    with rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=64) as e:
        yield e



def test_generate(engine):
    b = engine.generate(PROMPTS, n=3, max_new_tokens=10, seed=5, ignore_eos=True)
    assert len(b) == 6
    ts = list(b)
    assert [t.sample_index for t in ts] == [0, 1, 2, 0, 1, 2]
    assert all(t.group_id == 42 and t.metadata == {"reference": "x"} for t in ts[3:])
    assert len({t.group_id for t in ts[:3]}) == 1 and ts[0].group_id != 42
    for t in ts:
        assert len(t.completion_tokens) == 10 and t.finish_reason == rlpost.FinishReason.LENGTH
        assert all(x <= 0 for x in t.logprobs) and list(t.token_versions) == [0] * 10 and t.policy_version == 0
    assert list(ts[0].prompt_tokens) == [1, 45, 60]
    again = engine.generate(PROMPTS, {"n": 3, "max_new_tokens": 10, "seed": 5, "ignore_eos": True})
    assert [list(t.completion_tokens) for t in again] == [list(t.completion_tokens) for t in ts]
    greedy = engine.generate([[1, 45, 60]], n=2, temperature=0.0, max_new_tokens=6, ignore_eos=True)
    assert list(greedy[0].completion_tokens) == list(greedy[1].completion_tokens)
    # a stop token id ends the completion where greedy decoding produces it
    stop = int(greedy[0].completion_tokens[3])
    first = list(greedy[0].completion_tokens).index(stop)
    s = engine.generate([[1, 45, 60]], temperature=0.0, max_new_tokens=6, ignore_eos=True, stop_token_ids=[stop])
    assert s[0].finish_reason == rlpost.FinishReason.STOP and len(s[0].completion_tokens) == first + 1
    m = b.logprob_mismatch(engine.policy)
    assert m.n_tokens == 60 and m.mean_abs < 1e-4 and m.max_abs < 1e-3
    st = engine.stats()
    assert st.completions >= 6 + 6 + 2 + 1 and st.decode_tokens > 0
    with pytest.raises(rlpost.StateError, match="no tokenizer"):
        engine.generate(["a text prompt needs a tokenizer"], max_new_tokens=4)
    with pytest.raises(TypeError):
        engine.generate(PROMPTS, nucleus=0.9)
    with pytest.raises(TypeError, match="unknown key"):
        engine.generate([{"ids": [1, 2]}])


def test_per_prompt_sampling(engine):
    b = engine.generate([{"tokens": [1, 2], "sampling": {"n": 2, "max_new_tokens": 3, "ignore_eos": True}},
                         {"tokens": [1, 3], "sampling": {"n": 1, "max_new_tokens": 5, "ignore_eos": True}}],
                        max_new_tokens=1)
    assert [len(t.completion_tokens) for t in b] == [3, 3, 5]


def test_stream_events_match_the_batch(engine):
    events = []
    b = engine.generate(PROMPTS, n=2, max_new_tokens=8, seed=3, ignore_eos=True, on_token=events.append)
    for i, t in enumerate(b):
        mine = [e for e in events if e.prompt_index == i // 2 and e.sample_index == i % 2 and e.token >= 0]
        assert [e.token for e in mine] == list(t.completion_tokens)
        assert [e.logprob for e in mine] == pytest.approx(list(t.logprobs))
        last = [e for e in events if e.prompt_index == i // 2 and e.sample_index == i % 2][-1]
        assert last.finish_reason == rlpost.FinishReason.LENGTH
        assert all(e.finish_reason == rlpost.FinishReason.NONE for e in mine[:-1])
        assert all(e.policy_version == 0 for e in mine)


def test_stream_abort_and_exception(engine):
    counts = {}

    def stop_third(ev):  # a true return aborts that sequence
        if ev.token < 0:
            return False
        k = (ev.prompt_index, ev.sample_index)
        counts[k] = counts.get(k, 0) + 1
        return k == (0, 1) and counts[k] == 3
    b = engine.generate(PROMPTS, n=2, max_new_tokens=8, seed=3, ignore_eos=True, on_token=stop_third)
    assert b[1].finish_reason == rlpost.FinishReason.ABORT and len(b[1].completion_tokens) == 3
    assert all(b[i].finish_reason == rlpost.FinishReason.LENGTH for i in (0, 2, 3))

    def broken(ev):
        raise KeyError("no such slot")
    with pytest.raises(rlpost.CallbackError) as ei:
        engine.generate(PROMPTS, n=2, max_new_tokens=8, on_token=broken)
    assert isinstance(ei.value.__cause__, KeyError)
    assert len(engine.generate(PROMPTS, max_new_tokens=2)) == 2  # the engine still works


def test_abort_from_another_thread(engine):
    started = threading.Event()
    b = [None]

    def slow(ev):  # ~1 s of generation left when the abort arrives, however loaded the machine
        started.set()
        time.sleep(0.005)

    def run():
        b[0] = engine.generate([[1, 2, 3]], n=4, max_new_tokens=50, ignore_eos=True, on_token=slow)
    th = threading.Thread(target=run)
    th.start()
    assert started.wait(30)
    engine.abort()
    th.join(60)
    assert not th.is_alive()
    assert all(t.finish_reason == rlpost.FinishReason.ABORT for t in b[0])
    assert all(len(t.completion_tokens) < 50 for t in b[0])


def test_weights_and_versions(policy, engine, tmp_path):
    with pytest.raises(rlpost.StateError):  # a local engine has no servers
        engine.set_urls(["http://127.0.0.1:9"])
    with pytest.raises(rlpost.StateError):
        engine.server_stats()
    assert engine.version == 0 and engine.tokenizer is None
    policy.set_optimizer(lr=1e-2)
    policy.train_step([([1, 2, 3, 4, 5, 6], 1)])
    before = engine.generate([[1, 45, 60]], temperature=0.0, max_new_tokens=5, ignore_eos=True)[0]
    engine.update_weights(policy)
    assert engine.version == 1
    after = engine.generate([[1, 45, 60]], temperature=0.0, max_new_tokens=5, ignore_eos=True)[0]
    assert after.policy_version == 1 and list(after.token_versions) == [1] * 5
    assert engine.generate([[1, 45, 60]], max_new_tokens=3).logprob_mismatch(policy).max_abs < 1e-3
    assert before.policy_version == 0
    policy.save(tmp_path / "w")
    engine.load_weights(tmp_path / "w", 7)
    assert engine.version == 7
    with pytest.raises(rlpost.StateError):
        engine.set_version(3)  # only remote engines are told versions
    engine.abort()  # nothing running: fine
    shared = rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=32, share_weights=True,
                                  interrupt_mode=rlpost.InterruptMode.DEFER)
    with pytest.raises(rlpost.StateError):
        shared.update_weights(policy)
    assert shared.version == 1
    shared.close()


@pytest.mark.parametrize("weights", [rlpost.RolloutWeights.Q8_0, rlpost.RolloutWeights.Q4_0])
def test_quantized_rollout_weights(policy, weights):
    # a Q8_0 / Q4_0 copy of the linear weights: behaviour logprobs near the trainer's, not equal
    with rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=32, weights=weights) as q:
        b = q.generate([[1, 45, 60]], n=2, max_new_tokens=8, seed=3, ignore_eos=True)
        m = b.logprob_mismatch(policy)
        assert m.n_tokens == 16 and 0 < m.max_abs < (0.5 if weights == rlpost.RolloutWeights.Q8_0 else 1.5)
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.RolloutEngine(policy, weights=7)


def test_remote_engine_failures_come_back_as_trajectories(tok512):
    eng = rlpost.RolloutEngine.remote(["http://127.0.0.1:9"], tokenizer=tok512, max_retries=0, timeout_ms=2000,
                                      model="m", api_key="k")
    assert eng.tokenizer is tok512 and eng.version == 0
    b = eng.generate([[1, 2, 3]], n=2, max_new_tokens=4)
    assert len(b) == 2
    assert all(t.finish_reason == rlpost.FinishReason.ERROR and not t.valid and "127.0.0.1:9" in t.error for t in b)
    assert eng.stats().remote_errors >= 1
    eng.set_version(3)
    assert eng.version == 3
    with pytest.raises(rlpost.StateError):
        eng.load_weights("/nonexistent", 1)
    assert [(s.url, s.in_set, s.requests_failed) for s in eng.server_stats()] == [("http://127.0.0.1:9", 1, 1)]
    eng.close()
    # no server at first: requests wait for one up to their timeout, then fail alone
    eng = rlpost.RolloutEngine.remote([], tokenizer=tok512, max_retries=0, timeout_ms=300)
    assert eng.server_stats() == []
    b = eng.generate([[1, 2, 3]], n=1, max_new_tokens=4)
    assert not b[0].valid and "stayed empty" in b[0].error
    eng.set_urls(["http://127.0.0.1:9", "http://127.0.0.1:7"])
    eng.set_urls(["http://127.0.0.1:7"])
    st = eng.server_stats()
    assert [(s.url, s.in_set, s.last_weight_version) for s in st] == \
        [("http://127.0.0.1:9", 0, -1), ("http://127.0.0.1:7", 1, -1)]
    with pytest.raises(rlpost.InvalidArgumentError):
        eng.set_urls(["ftp://x"])
    eng.close()


def test_advantages_match_the_estimators():
    """rlp_rl_advantages against the formulas (docs/algorithms.md): GRPO
    (r − mean)/(std + ε) with the unbiased std, Dr.GRPO r − mean, RLOO
    r − mean of the others; invalid and empty trajectories get NaN, and a
    group whose rewards are all equal gets exactly 0."""
    b = rlpost.Batch()
    rewards = [1.0, 0.0, 0.0, 1.0, 2.0, 2.0]
    for i, r in enumerate(rewards):
        b.append(group_id=i // 3, sample_index=i % 3, prompt_tokens=[1, 2], completion_tokens=[3, 4, 5],
                 logprobs=[-1.0, -1.0, -1.0], reward=r)
    b.append(group_id=2, sample_index=0, prompt_tokens=[1], completion_tokens=[3], logprobs=[-1.0], reward=5.0)
    b.set_invalid(6, "refused")
    b.append(group_id=2, sample_index=1, prompt_tokens=[1], completion_tokens=[], logprobs=[], reward=5.0)
    g = [1.0, 0.0, 0.0]
    m = sum(g) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in g) / 2)
    grpo = b.advantages(advantage=rlpost.Advantage.GRPO)
    for i in range(3):
        assert grpo[i] == pytest.approx((g[i] - m) / (sd + 1e-6), rel=1e-5)
    dr = b.advantages(advantage=rlpost.Advantage.DR_GRPO)
    assert dr[:3] == pytest.approx([x - m for x in g], rel=1e-6)
    rloo = b.advantages(advantage=rlpost.Advantage.RLOO)
    assert rloo[0] == pytest.approx(1.0 - 0.0, rel=1e-6) and rloo[1] == pytest.approx(0.0 - 0.5, rel=1e-6)
    # group 1 = [1, 2, 2]: not all equal; group of equal rewards → exactly 0
    # public-bugs case #8: equal non-dyadic rewards (0.1 is not exact in
    # binary) must give exactly 0, for every estimator
    for value in (0.1, 0.2, 0.7):
        e = rlpost.Batch()
        for i in range(8):
            e.append(group_id=0, sample_index=i, prompt_tokens=[1], completion_tokens=[2], logprobs=[-1.0],
                     reward=value)
        for adv in (rlpost.Advantage.GRPO, rlpost.Advantage.DR_GRPO, rlpost.Advantage.RLOO):
            assert e.advantages(advantage=adv) == [0.0] * 8, (value, adv)
    assert math.isnan(grpo[6]) and math.isnan(grpo[7])
    unscored = rlpost.Batch()
    unscored.append(group_id=0, prompt_tokens=[1], completion_tokens=[2], logprobs=[-1.0])
    with pytest.raises(rlpost.Error):
        unscored.advantages()
