"""Process groups through the bindings: ranks as threads of this process
(the SHM transport maps the same shared memory in each), collectives,
weight broadcast and a data-parallel train step against one policy on the
whole batch, and argument errors."""
import threading

import pytest

import rlpost
from rlpost import CommTransport, ReduceOp

SEQS = [([1, 50, 60, 70, 80, 90], 2), ([1, 33, 44, 55], 1), ([1, 7, 8, 9, 10, 11, 12], 3), ([1, 20, 21], 1)]


def run_ranks(world, fn, tmp_path, rendezvous=None, transport=CommTransport.SHM):
    """fn(rank, ctx, comm) on `world` threads; returns their results."""
    rdv = rendezvous or tmp_path / "rendezvous.json"
    results, errors = [None] * world, []

    def body(r):
        try:
            with rlpost.Context(n_threads=1, seed=5) as ctx:
                with rlpost.Comm(ctx, rank=r, world_size=world, rendezvous=rdv, transport=transport,
                                 timeout_ms=30000) as comm:
                    results[r] = fn(r, ctx, comm)
        except BaseException as e:  # re-raised on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return results


def test_collectives(tmp_path):
    def fn(r, ctx, comm):
        assert comm.info() == (r, 3, CommTransport.SHM)
        assert comm.rank == r and comm.world_size == 3
        comm.barrier()
        s = comm.all_reduce([r + 0.5, -r, 1e-3 * r])
        hi = comm.all_reduce([r], ReduceOp.MAX)
        lo = comm.all_reduce([r], ReduceOp.MIN)
        b = comm.broadcast(b"from rank 2" if r == 2 else b"x" * 11, root=2)
        return s, hi, lo, b

    for s, hi, lo, b in run_ranks(3, fn, tmp_path):
        assert s == [0.5 + 1.5 + 2.5, -3.0, 0.0 + 1e-3 + 2e-3]
        assert hi == [2.0] and lo == [0.0] and b == b"from rank 2"


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_collectives_over_gloo_and_tcp_rendezvous(tmp_path):
    """The same collectives over Gloo, meeting at tcp://127.0.0.1:PORT (the
    TCP store rank 0 serves); skipped where the Gloo module was not built."""
    try:
        with rlpost.Context(n_threads=1) as ctx:
            rlpost.Comm(ctx, rank=0, world_size=2, rendezvous="/nonexistent/rdv", transport=CommTransport.GLOO)
    except rlpost.Error as e:
        if "could not be loaded" in str(e):
            pytest.skip("no librlpost-gloo.so: " + str(e))
        assert "TCP rendezvous" in str(e), e  # a file is refused for Gloo, by name

    def fn(r, ctx, comm):
        assert comm.info() == (r, 3, CommTransport.GLOO)
        comm.barrier()
        s = comm.all_reduce([r + 0.5, -r, 1e-3 * r])
        hi = comm.all_reduce([r], ReduceOp.MAX)
        b = comm.broadcast(b"from rank 1" if r == 1 else b"x" * 11, root=1)
        return s, hi, b

    out = run_ranks(3, fn, tmp_path, rendezvous="tcp://127.0.0.1:%d" % free_port(), transport=CommTransport.GLOO)
    assert len({repr(o) for o in out}) == 1  # the same bits on every rank
    s, hi, b = out[0]
    assert s[:2] == [4.5, -3.0] and abs(s[2] - 3e-3) < 1e-15 and hi == [2.0] and b == b"from rank 1"


def test_data_parallel_train_step_matches_one_policy(tmp_path, stories_path):
    def fn(r, ctx, comm):
        with rlpost.Policy(ctx, stories_path, trainable=r == 0) as drift:
            if r == 0:
                drift.train_step(SEQS[:1])  # rank 0's weights move; the broadcast brings rank 1's along
            drift.broadcast(comm, root=0)
            assert drift.version == 1
            probe = list(drift.logprobs([([1, 9, 8, 7], 1)]))
            assert comm.broadcast(repr(probe).encode(), 0) == repr(probe).encode()
        with rlpost.Policy(ctx, stories_path) as p:  # same file, fresh optimizers on every rank
            p.set_comm(comm)
            share = SEQS[:2] if r == 0 else SEQS[2:]
            st = p.train_step(share)
            p.set_comm(None)
            return st.loss, st.grad_norm, p.version, list(p.logprobs([([1, 5, 6, 7, 8], 1)]))

    (l0, g0, v0, lp0), (l1, g1, v1, lp1) = run_ranks(2, fn, tmp_path)
    assert (l0, g0, v0) == (l1, g1, v1) and v0 == 1
    assert lp0 == lp1  # bit-identical weights on both ranks
    with rlpost.Context(n_threads=1, seed=5) as ctx, rlpost.Policy(ctx, stories_path) as one:
        st = one.train_step(SEQS, micro_batch_tokens=13)  # cut where the ranks split: 6 + 4 | 7 + 3
        lp = list(one.logprobs([([1, 5, 6, 7, 8], 1)]))
    assert abs(st.loss - l0) <= 1e-6 * abs(st.loss) and abs(st.grad_norm - g0) <= 1e-6 * st.grad_norm
    assert max(abs(a - b) for a, b in zip(lp, lp0)) <= 1e-5


def test_closing_the_group_detaches_policies(tmp_path, ctx, policy):
    comm = rlpost.Comm(ctx, rank=0, world_size=1)
    policy.set_comm(comm)
    comm.close()
    assert policy.train_step(SEQS).grad_norm > 0  # alone again, no dangling group


def test_arguments(ctx, monkeypatch, tmp_path):
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Comm(ctx, rank=2, world_size=2, rendezvous=tmp_path / "r")
    with pytest.raises(rlpost.UnsupportedError):
        rlpost.Comm(ctx, rank=0, world_size=2, rendezvous=tmp_path / "r", transport=CommTransport.NCCL)
    for name in ("RLPOST_RANK", "RANK"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(rlpost.InvalidArgumentError, match="RLPOST_RANK"):
        rlpost.Comm(ctx)
    monkeypatch.setenv("RLPOST_RANK", "0")
    monkeypatch.setenv("RLPOST_WORLD_SIZE", "1")
    with rlpost.Comm(ctx) as alone:
        assert alone.info() == (0, 1, CommTransport.SHM)
        assert alone.all_reduce([]) == [] and alone.broadcast(b"", 0) == b""
        with pytest.raises(rlpost.InvalidArgumentError):
            alone.broadcast(b"abc", 3)
        with pytest.raises(rlpost.InvalidArgumentError):
            alone.all_reduce([1.0], op=7)
    with pytest.raises(TypeError):
        rlpost.Comm(ctx, rank=0, world_size=1, ranks=2)


def test_collective_synchronizer(tmp_path, stories_path):
    def fn(r, ctx, comm):
        with rlpost.Policy(ctx, stories_path, trainable=r == 0) as p, \
                rlpost.Synchronizer(transport=rlpost.SyncTransport.COLLECTIVE, comm=comm, root=0) as sync:
            if r == 0:
                for _ in range(2):
                    p.train_step(SEQS)
                    sync.publish(p)
                return p.version, list(p.logprobs([([1, 5, 6, 7, 8], 1)]))
            with rlpost.RolloutEngine(p, share_weights=False, max_batch=1, max_seq_len=16) as eng:
                for k in (1, 2):
                    sync.pull(eng)
                    assert eng.version == k and sync.version == k
                return p.version, None

    (v0, lp0), (v1, _) = run_ranks(2, fn, tmp_path)
    assert v0 == 2 and v1 == 0  # the receiving rank's own policy is untouched: the engine got the weights
