"""Every negative status becomes the exception class of its family,
carrying rlp_error_last(); the raw error functions work as in C."""
import builtins
import math

import pytest

import rlpost
from rlpost import _ffi, errors
from rlpost._handle import check

from conftest import make_batch

CLASSES = {
    -1: rlpost.InvalidArgumentError, -2: rlpost.OutOfMemoryError, -3: rlpost.IOError, -4: rlpost.FormatError,
    -5: rlpost.UnsupportedError, -6: rlpost.BackendError, -7: rlpost.TimeoutError, -8: rlpost.NetworkError,
    -9: rlpost.CallbackError, -10: rlpost.ClosedError, -11: rlpost.AgainError, -12: rlpost.NotFoundError,
    -13: rlpost.StateError, -14: rlpost.OverflowError, -15: rlpost.InternalError,
}


@pytest.mark.parametrize("status", sorted(CLASSES))
def test_each_status_maps_to_its_class(status):
    rlpost.error_clear()
    with pytest.raises(CLASSES[status]) as ei:
        check(status, "rlp_some_function")
    e = ei.value
    assert type(e) is CLASSES[status] and isinstance(e, rlpost.Error)
    assert e.status == status and e.function == "rlp_some_function"
    # no message recorded: the status description stands in
    assert rlpost.status_str(status) in str(e)
    assert check(0, "f") == 0 and check(3, "f") == 3


def test_unknown_negative_status_is_the_base_class():
    e = errors.error_for(-99, "f", "m")
    assert type(e) is rlpost.Error and e.status == -99


def test_builtin_families():
    assert issubclass(rlpost.TimeoutError, builtins.TimeoutError)
    assert issubclass(rlpost.IOError, OSError)
    assert issubclass(rlpost.OverflowError, builtins.OverflowError)
    assert issubclass(rlpost.InvalidArgumentError, ValueError)
    assert issubclass(rlpost.NotFoundError, LookupError)
    assert issubclass(rlpost.NetworkError, ConnectionError)
    assert issubclass(rlpost.OutOfMemoryError, MemoryError)
    assert issubclass(rlpost.StateError, RuntimeError)
    e = rlpost.IOError("rlp_x: cannot open 'a'", -3, "rlp_x")
    assert str(e) == "rlp_x: cannot open 'a'" and e.errno is None


def test_raw_error_functions():
    rlpost.error_clear()
    assert rlpost.error_last() == "" and rlpost.error_last_code() == 0
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Context(backend=7)
    assert rlpost.error_last_code() == -1
    assert "backend" in rlpost.error_last()
    rlpost.error_clear()
    assert rlpost.error_last() == "" and rlpost.error_last_code() == 0
    assert rlpost.status_str(0) and rlpost.status_str(-12345) == "unknown status"


def test_message_is_rlp_error_last(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    with rlpost.Context(n_threads=1) as ctx:
        with pytest.raises(rlpost.Error) as ei:
            rlpost.Policy(ctx, missing)
    e = ei.value
    assert e.function == "rlp_policy_load" and isinstance(e, (rlpost.IOError, rlpost.NotFoundError))
    assert str(missing) in e.message and e.message == rlpost.error_last()


# ---- real failures of the library, one per family the bindings can provoke -------------

def test_invalid_argument():
    with pytest.raises(rlpost.InvalidArgumentError, match="backend"):
        rlpost.Context(backend=9)


def test_io_and_format(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{ not json")
    with pytest.raises(rlpost.FormatError):
        rlpost.Tokenizer(bad)
    with pytest.raises(rlpost.Error) as ei:
        rlpost.Tokenizer(tmp_path / "absent.json")
    assert isinstance(ei.value, (rlpost.IOError, rlpost.NotFoundError))
    d = tmp_path / "dir"
    d.mkdir()
    with pytest.raises(rlpost.Error):
        rlpost.Task.open_jsonl(d)


def test_unsupported_and_not_found(tok512):
    with pytest.raises(rlpost.UnsupportedError):
        tok512.set_chat_template("no-such-template")
    with pytest.raises(rlpost.NotFoundError):
        rlpost.RewardFn.builtin("no_such_reward")


def test_backend():
    if rlpost.backend_available(rlpost.Backend.CUDA):
        pytest.skip("a GPU is visible: CUDA contexts succeed here")
    with pytest.raises(rlpost.BackendError):
        rlpost.Context(backend=rlpost.Backend.CUDA)


def test_again_timeout_closed_state():
    with rlpost.ReplayBuffer() as buf:
        with pytest.raises(rlpost.AgainError):
            buf.pull(1, 0, timeout_ms=0)
        with pytest.raises(rlpost.TimeoutError):
            buf.pull(1, 0, timeout_ms=30)
        buf.shutdown()
        with pytest.raises(rlpost.ClosedError):
            buf.push(make_batch(rewards=[1.0] * 6))
    with rlpost.Synchronizer() as sync:
        with pytest.raises(rlpost.StateError):
            sync.release()


def test_callback(policy):
    def broken(ctx):
        raise ArithmeticError("lost the sign")
    v = policy.version
    with pytest.raises(rlpost.CallbackError) as ei:
        policy.train_step([([1, 2, 3, 4], 1)], loss=broken)
    assert isinstance(ei.value.__cause__, ArithmeticError) and "lost the sign" in str(ei.value)
    assert policy.version == v  # nothing applied


def test_network(tmp_path, policy):
    # a port nobody listens on: telling the server about the published version fails
    with rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.HTTP,
                             dir=tmp_path / "w", urls=["http://127.0.0.1:9"], max_retries=0,
                             timeout_ms=2000) as sync:
        sync.publish(policy)
        with pytest.raises(rlpost.NetworkError) as ei:
            sync.pull(None)
        # an empty set of servers: a pull tells nobody
        sync.set_urls([])
        sync.pull(None)
        with pytest.raises(rlpost.InvalidArgumentError):
            sync.set_urls(["localhost:9"])
    assert "127.0.0.1:9" in str(ei.value)
    with rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE,
                             dir=tmp_path / "f") as fsync:
        with pytest.raises(rlpost.StateError):
            fsync.set_urls([])


def test_overflow_and_invalid_values(tok512):
    # the bindings size buffers themselves, so overflow only shows where a value does not fit the C type
    with pytest.raises(OverflowError):
        tok512.decode([2 ** 40])
    with pytest.raises(rlpost.InvalidArgumentError):
        tok512.decode([10 ** 6])
    b = rlpost.Batch()
    with pytest.raises(rlpost.InvalidArgumentError, match="logprob"):
        b.append(completion_tokens=[1, 2], logprobs=[0.5, -1.0])
    with pytest.raises(rlpost.InvalidArgumentError):
        b.set_reward(0, math.nan)
    b.close()


def test_missing_function_stands_in():
    m = _ffi._Missing("rlp_future_thing", None, [])
    with pytest.raises(rlpost.UnsupportedError, match="rlp_future_thing"):
        m()
