"""Lifetimes: close() twice, use after close, `with`, __del__, parents
closing their children, closing while other threads are inside calls,
closing from inside a callback, and the garbage collector running on
another thread while the library calls Python."""
import gc
import threading
import time

import pytest

import rlpost
from rlpost import reward as reward_mod

from conftest import make_batch


def _every_handle(ctx, stories_path, tok512_path):
    pol = rlpost.Policy(ctx, stories_path)
    tok = rlpost.Tokenizer(tok512_path)
    task = rlpost.Task("countdown", {"seed": 1})
    eng = rlpost.RolloutEngine(pol, max_batch=2, max_seq_len=16)
    rew = rlpost.RewardFn(lambda r: 1.0)
    buf = rlpost.ReplayBuffer()
    sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC)
    return [
        (rlpost.Context(n_threads=1), lambda h: h.n_threads),
        (tok, lambda h: h.encode("a")),
        (tok.detokenizer(), lambda h: h.push(5)),
        (pol, lambda h: h.version),
        (pol.clone(), lambda h: h.logprobs([[1, 2, 3]])),
        (rlpost.Batch(), lambda h: len(h)),
        (eng, lambda h: h.version),
        (task, lambda h: h.position),
        (task.next_batch(1), lambda h: len(h)),
        (rew, lambda h: h.score_one("x")),
        (rlpost.RewardFn.builtin("gsm8k"), lambda h: h.name),
        (buf, lambda h: h.stats()),
        (sync, lambda h: h.version),
        (rlpost.Trainer(pol, task, rew, tokenizer=tok), lambda h: h.steps_done),
        (rlpost.RolloutWorker(eng, rlpost.Task("kk", {"seed": 1}), rew, sync, buf, tokenizer=tok),
         lambda h: h.stats()),
    ]


def test_close_twice_and_use_after_close(ctx, stories_path, tok512_path):
    handles = _every_handle(ctx, stories_path, tok512_path)
    assert len({type(h) for h, _ in handles}) == 13  # every handle class
    for h, use in reversed(handles):
        use(h)  # works while open
        assert not h.closed
        h.close()
        h.close()  # safe twice
        assert h.closed and "closed" in repr(h)
        with pytest.raises(rlpost.ClosedError, match="is closed"):
            use(h)


def test_with_blocks_close(ctx, stories_path):
    with rlpost.Policy(ctx, stories_path) as p, rlpost.Batch() as b:
        assert p.version == 0 and len(b) == 0
    assert p.closed and b.closed


def test_parent_closes_its_children_first(stories_path, tok512_path):
    ctx = rlpost.Context(n_threads=1)
    pol = rlpost.Policy(ctx, stories_path)
    ref = pol.clone()
    eng = rlpost.RolloutEngine(pol, max_batch=2, max_seq_len=16)
    batch = eng.generate([[1, 2, 3]], max_new_tokens=2)
    ctx.close()
    assert pol.closed and ref.closed and eng.closed
    assert not batch.closed and len(batch) == 1  # a batch belongs to no handle
    with pytest.raises(rlpost.ClosedError):
        rlpost.Policy(ctx, stories_path)
    tok = rlpost.Tokenizer(tok512_path)
    det = tok.detokenizer()
    tok.close()
    assert det.closed


def test_del_frees_the_c_handle(tmp_path):
    spill = tmp_path / "spill"
    buf = rlpost.ReplayBuffer(spill_path=spill)
    with pytest.raises(rlpost.StateError):
        rlpost.ReplayBuffer(spill_path=spill)  # the file is locked while the first buffer lives
    del buf
    gc.collect()
    rlpost.ReplayBuffer(spill_path=spill).close()  # freed by __del__: the lock is gone
    before = reward_mod.registered_callables()
    rf = rlpost.RewardFn(lambda r: 1.0)
    assert reward_mod.registered_callables() == before + 1
    del rf
    assert reward_mod.registered_callables() == before


def test_close_from_inside_a_callback_is_refused(policy):
    holder = {}

    def closes_itself(req):
        holder["rf"].close()
        return 1.0

    rf = holder["rf"] = rlpost.RewardFn(closes_itself, n_threads=1)
    b = make_batch(groups=1, group_size=1)
    rf.score(b)
    assert not b[0].valid and "StateError" in b[0].error and "own calls or callbacks" in b[0].error
    assert not rf.closed
    rf.close()
    eng = rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=16)

    def closes_engine(ev):
        eng.close()
    with pytest.raises(rlpost.CallbackError) as ei:
        eng.generate([[1, 2]], max_new_tokens=3, on_token=closes_engine)
    assert isinstance(ei.value.__cause__, rlpost.StateError)
    assert not eng.closed

    def closes_parent(ev):
        policy.close()
    with pytest.raises(rlpost.CallbackError):
        eng.generate([[1, 2]], max_new_tokens=3, on_token=closes_parent)
    assert not policy.closed
    eng.close()


def test_close_while_another_thread_waits_or_generates(policy):
    buf = rlpost.ReplayBuffer()
    errs = []

    def waiter():
        try:
            buf.pull(1, 0)
        except rlpost.ClosedError as e:
            errs.append(e)
    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.1)
    buf.close()  # shuts the buffer down, waits for the pull to return, then frees it
    th.join(10)
    assert not th.is_alive() and len(errs) == 1 and buf.closed

    eng = rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=256)
    started = threading.Event()
    out = []
    def slow(ev):  # generation outlasts the close() below on any machine
        started.set()
        time.sleep(0.005)
    th = threading.Thread(target=lambda: out.append(eng.generate([[1, 2, 3]], n=4, max_new_tokens=200,
                                                                 ignore_eos=True, on_token=slow)))
    th.start()
    assert started.wait(30)
    policy.close()  # closes the engine first: it aborts the generation and waits for it
    th.join(30)
    assert not th.is_alive() and eng.closed and policy.closed
    assert all(t.finish_reason == rlpost.FinishReason.ABORT for t in out[0])


def test_gc_on_another_thread_while_callbacks_run(policy):
    stop = threading.Event()
    collections = [0]

    def collector():
        while not stop.is_set():
            gc.collect()
            collections[0] += 1

    class Node:
        def __init__(self):
            self.me = self  # cyclic garbage for the collector to chase

    def reward(req):
        junk = [Node() for _ in range(20)]
        del junk
        return float(len(req.completion_tokens))

    def batch_reward(reqs):
        Node()
        return [float(r.completion_tokens[0]) for r in reqs]

    th = threading.Thread(target=collector)
    th.start()
    before = reward_mod.registered_callables()
    try:
        eng = rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=64)
        for i in range(25):
            rf = rlpost.RewardFn(reward, n_threads=2)
            bf = rlpost.RewardFn.batched(batch_reward, batch_size=3, n_threads=2)
            events = []
            b = eng.generate([[1, 2, 3], [1, 4, 5]], n=3, max_new_tokens=6, seed=i, ignore_eos=True,
                             on_token=lambda ev, seen=events: seen.append(Node()) and False)
            st = rf.score(b)
            assert st.valid == 6 and all(t.reward == 6.0 for t in b)
            st = bf.score(b)
            assert st.valid == 6 and [t.reward for t in b] == [float(t.completion_tokens[0]) for t in b]
            assert len(events) >= 36
            # dropped without close(): __del__ frees them, maybe on the collector thread
            del rf, bf, b, events
        eng.close()
    finally:
        stop.set()
        th.join()
    gc.collect()
    assert collections[0] > 0
    assert reward_mod.registered_callables() == before
