"""Replay buffers (staleness, blocking, durable spill, concurrency) and
synchronizers (transports, the gate, colocated borrowing)."""
import threading
import time

import pytest

import rlpost

from conftest import make_batch


def scored(groups=2, group_size=2, version=0, start=0):
    b = make_batch(groups=groups, group_size=group_size, version=version, rewards=[1.0] * (groups * group_size))
    if start:
        # distinct group ids
        out = rlpost.Batch()
        for t in b:
            out.append(t, group_id=t.group_id + start)
        b.close()
        return out
    return b


def test_push_pull_and_staleness():
    with rlpost.ReplayBuffer(max_staleness=1) as buf:
        b = scored(groups=2, version=0)
        buf.push(b)
        assert len(b) == 0  # the trajectories now belong to the buffer
        buf.push(scored(groups=1, version=2, start=10))
        st = buf.stats()
        assert (st.size, st.trajectories, st.accepted) == (3, 6, 3)
        got = buf.pull(1, version=2)  # the version-0 groups are too stale for v = 2 with η = 1
        assert len(got) == 2 and {t.group_id for t in got} == {11}
        st = buf.stats()
        assert st.dropped_stale == 2 and st.consumed == 1 and st.size == 0 and st.max_staleness_seen == 0
        assert len(st.staleness_hist) == 16 and st.staleness_hist[0] == 1
        with pytest.raises(rlpost.AgainError):
            buf.pull(1, 2, timeout_ms=0)
        with pytest.raises(rlpost.InvalidArgumentError):
            buf.push(make_batch())  # unscored


def test_blocked_pull_is_woken_by_a_push_and_by_shutdown():
    with rlpost.ReplayBuffer(max_staleness=rlpost.STALENESS_UNBOUNDED) as buf:
        out = []
        th = threading.Thread(target=lambda: out.append(len(buf.pull(2, 0, timeout_ms=20000))))
        th.start()
        time.sleep(0.1)
        buf.push(scored(groups=2))
        th.join(20)
        assert out == [4]
        errs = []

        def waiter():
            try:
                buf.pull(1, 0)  # WAIT_FOREVER
            except rlpost.ClosedError as e:
                errs.append(e)
        th = threading.Thread(target=waiter)
        th.start()
        time.sleep(0.3)  # past one wait slice
        buf.shutdown()
        th.join(20)
        assert not th.is_alive() and len(errs) == 1


def test_full_buffer_policies():
    with rlpost.ReplayBuffer(capacity=1, full_policy=rlpost.BufferFullPolicy.FAIL) as buf:
        buf.push(scored(groups=1))
        with pytest.raises(rlpost.AgainError):
            buf.push(scored(groups=1, start=5))
        assert buf.stats().rejected == 1
    with rlpost.ReplayBuffer(capacity=1, push_timeout_ms=50) as buf:
        buf.push(scored(groups=1))
        with pytest.raises(rlpost.TimeoutError):
            buf.push(scored(groups=1, start=5))


def test_concurrent_producers_and_consumer():
    n_producers, per = 3, 20
    with rlpost.ReplayBuffer(capacity=8, max_staleness=rlpost.STALENESS_UNBOUNDED) as buf:
        def produce(k):
            for i in range(per):
                buf.push(scored(groups=1, start=1000 * (k + 1) + i))
        ths = [threading.Thread(target=produce, args=(k,)) for k in range(n_producers)]
        for t in ths:
            t.start()
        seen = []
        for _ in range(n_producers * per // 4):
            seen += [t.group_id for t in buf.pull(4, 0, timeout_ms=30000)][::2]
        for t in ths:
            t.join()
        assert len(seen) == len(set(seen)) == n_producers * per


def test_durable_spill_survives_and_reports_a_torn_record(tmp_path):
    spill = tmp_path / "spill.bin"
    with rlpost.ReplayBuffer(spill_path=spill) as buf:
        buf.push(scored(groups=3))
        buf.pull(1, 0)
        assert buf.stats().spill_records >= 2
    with spill.open("ab") as f:
        f.write(b"\x07" * 13)  # a push that never returned
    logs = []
    with rlpost.ReplayBuffer(spill_path=spill, log=lambda level, msg: logs.append((level, msg))) as buf:
        st = buf.stats()
        assert st.restored == 2 and st.size == 2 and st.torn_bytes == 13
        assert len(buf.pull(2, 0)) == 4
        with pytest.raises(rlpost.StateError):
            rlpost.ReplayBuffer(spill_path=spill)  # locked by this one
    assert any(level == rlpost.LogLevel.WARN and "truncating 13 bytes" in msg for level, msg in logs), logs


def test_provenance_survives_push_pull_and_a_restart(tmp_path):
    spill = tmp_path / "spill.bin"
    b = scored(groups=3)
    for g in (1, 3):
        b.set_group_provenance(g, prompt_index=100 + g, epoch=1, position=g, sampling_seed=7 * g, batch=4)
    with rlpost.ReplayBuffer(spill_path=spill) as buf:
        buf.push(b)
        first = buf.pull(1, 0)
        assert [t.provenance.prompt_index for t in first] == [101, 101]
    with rlpost.ReplayBuffer(spill_path=spill) as buf:
        rest = buf.pull(2, 0)
    assert [t.group_id for t in rest] == [2, 2, 3, 3]
    assert rest[0].provenance is None and rest[1].provenance is None
    assert rest[2].provenance == rlpost.Provenance(prompt_index=103, epoch=1, position=3, sampling_seed=21, batch=4)


def test_synchronizer_in_process(policy):
    engine = rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=32)
    with rlpost.Synchronizer(max_staleness=1, batch_groups=2) as sync:
        assert sync.version == 0 and sync.mode == rlpost.SyncMode.SEQUENTIAL_PULL
        policy.set_optimizer(lr=1e-2)
        policy.train_step([([1, 2, 3, 4], 1)])
        sync.publish(policy)
        assert sync.version == 1 and engine.version == 0
        sync.pull(engine)
        assert engine.version == 1
        # the gate: accepted + running < (η + v + 1)·B = 6
        accepted0 = sync.stats().accepted
        for _ in range(6 - accepted0):
            sync.acquire(timeout_ms=0)
        with pytest.raises(rlpost.AgainError):
            sync.acquire(timeout_ms=0)
        with pytest.raises(rlpost.TimeoutError):
            sync.acquire(timeout_ms=30)
        sync.release(accepted=True)
        sync.release(accepted=False)
        sync.acquire(timeout_ms=0)  # the discarded slot is free again
        st = sync.stats()
        assert (st.accepted, st.running) == (accepted0 + 1, 6 - accepted0 - 1)
        assert (st.publishes, st.weight_loads, st.pulls) == (1, 1, 1)
        assert st.mode == rlpost.SyncMode.SEQUENTIAL_PULL and st.transport == rlpost.SyncTransport.IN_PROCESS
        sync.shutdown()
        with pytest.raises(rlpost.ClosedError):
            sync.acquire()
        sync.publish(policy)  # publish still works
    engine.close()


def test_buffer_takes_eta_from_its_synchronizer():
    with rlpost.Synchronizer(max_staleness=2, batch_groups=1) as sync:
        # the buffer's own η left at its default (1): the synchronizer's η = 2 applies
        with rlpost.ReplayBuffer(sync=sync) as buf:
            buf.push(scored(groups=1, version=0))
            buf.push(scored(groups=1, version=0, start=10))
            assert len(buf.pull(1, version=2, timeout_ms=0)) == 2  # staleness 2 ≤ η = 2: kept
            with pytest.raises(rlpost.AgainError):
                buf.pull(1, version=3, timeout_ms=0)  # staleness 3 > η: dropped
            assert buf.stats().dropped_stale == 1
        with pytest.raises(rlpost.InvalidArgumentError, match="max_staleness is 3 .* is 2"):
            rlpost.ReplayBuffer(max_staleness=3, sync=sync)
        with rlpost.ReplayBuffer(max_staleness=2, sync=sync):
            pass
        buf = rlpost.ReplayBuffer(sync=sync)
    assert buf.closed  # closing the synchronizer closed the buffer that borrows it


def test_blocked_acquire_is_woken_by_publish(policy):
    with rlpost.Synchronizer(max_staleness=0, batch_groups=1) as sync:
        sync.acquire(0)
        sync.release(True)
        ok = []
        th = threading.Thread(target=lambda: ok.append(sync.acquire(20000)))
        th.start()
        time.sleep(0.2)
        assert not ok
        policy.train_step([([1, 2, 3, 4], 1)])
        sync.publish(policy)
        th.join(20)
        assert ok == [None]


def test_synchronizer_file_transport(policy, tmp_path, ctx, stories_path):
    d = tmp_path / "weights"
    with rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE, dir=d,
                             keep_versions=2, dtype=rlpost.DType.F32) as trainer:
        for _ in range(3):
            policy.train_step([([1, 2, 3, 4], 1)])
            trainer.publish(policy)
        assert sorted(p.name for p in d.iterdir() if p.is_dir()) == ["v2", "v3"]
        assert trainer.stats().bytes_published > 0
    # another reader, as another process would: it learns the version from the manifest
    with rlpost.Policy(ctx, stories_path) as other, \
            rlpost.RolloutEngine(other, max_batch=2, max_seq_len=32) as eng, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE, dir=d) as reader:
        assert reader.version == 3
        reader.pull(eng)
        assert eng.version == 3
        b = eng.generate([[1, 2, 3]], max_new_tokens=4)
        assert b.logprob_mismatch(policy).max_abs < 1e-3


def test_colocated_publish_borrows_the_policy(ctx, stories_path):
    pol = rlpost.Policy(ctx, stories_path)
    eng = rlpost.RolloutEngine(pol, max_batch=2, max_seq_len=32, share_weights=True)
    sync = rlpost.Synchronizer(mode=rlpost.SyncMode.COLOCATED)
    sync.publish(pol)
    sync.pull(eng)
    pol.close()  # the synchronizer points into the policy: it is closed first, with the engine
    assert sync.closed and eng.closed
    with pytest.raises(rlpost.ClosedError):
        sync.pull(eng)
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Synchronizer(mode=rlpost.SyncMode.COLOCATED, transport=rlpost.SyncTransport.FILE, dir="x")
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Synchronizer(transport=rlpost.SyncTransport.FILE)  # no dir


# ---- issue 26: the relay transport (SyncTransport.RELAY) -------------------

def test_synchronizer_relay_transport(policy, tmp_path, ctx, stories_path):
    """A FILE-published folder served by `rlpost weights-serve`, mirrored
    over HTTP by a RELAY synchronizer and loaded into an engine."""
    import json
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    driver = os.environ.get("RLPOST_DRIVER") or str(root / "build" / "examples" / "rlpost" / "rlpost")
    if not os.access(driver, os.X_OK):
        pytest.skip("no rlpost driver (RLPOST_DRIVER)")
    origin, mirror = tmp_path / "origin", tmp_path / "mirror"
    with rlpost.Synchronizer(transport=rlpost.SyncTransport.FILE, dir=origin, keep_versions=2) as trainer:
        for _ in range(2):
            policy.train_step([([1, 2, 3, 4], 1)])
            trainer.publish(policy)
    srv = subprocess.Popen([driver, "weights-serve", str(origin), "--port", "0"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
    try:
        url = json.loads(srv.stdout.readline())["listening"]
        with rlpost.Policy(ctx, stories_path) as other, \
                rlpost.RolloutEngine(other, max_batch=2, max_seq_len=32) as eng, \
                rlpost.Synchronizer(transport=rlpost.SyncTransport.RELAY, dir=mirror, urls=[url],
                                    keep_versions=2, timeout_ms=5000) as relay:
            relay.pull()  # the mirror only
            assert relay.version == 2
            assert (mirror / "latest.json").read_bytes() == (origin / "latest.json").read_bytes()
            relay.pull(eng)
            assert eng.version == 2
            b = eng.generate([[1, 2, 3]], max_new_tokens=4)
            assert b.logprob_mismatch(policy).max_abs < 1e-3
            with pytest.raises(rlpost.StateError):
                relay.publish(policy)  # a relay only pulls
    finally:
        srv.terminate()
        srv.wait(timeout=30)
