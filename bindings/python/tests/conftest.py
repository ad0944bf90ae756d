"""Shared fixtures of the binding tests, and the check that the whole
suite calls every public C function through the bindings.

Environment (set by tests/meson.build; defaults for a run by hand from
the source tree): RLPOST_LIBRARY (the built librlpost.so),
RLPOST_SOURCE_ROOT, RLPOST_SHARED_DATA (stories260K.bin), RLPOST_MODEL_DIR
(SmolLM2; default <source root>/models), RLPOST_DRIVER (the `rlpost`
executable, for the swarm example), RLPOST_REQUIRE_COVERAGE=1 (fail the
session when a public function was never called).
"""
import os
import string
import struct
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("RLPOST_SOURCE_ROOT") or HERE.parents[2])
sys.path.insert(0, str(HERE.parent))

import rlpost  # noqa: E402
from rlpost import _ffi  # noqa: E402

SHARED = Path(os.environ.get("RLPOST_SHARED_DATA") or ROOT.parent / "shared" / "data")
STORIES = SHARED / "llama2c" / "stories260K.bin"
SMOLLM2 = Path(os.environ.get("RLPOST_MODEL_DIR") or ROOT / "models") / "SmolLM2-135M-Instruct.Q4_1.gguf"

# ---- every public function must be called by the suite ----------------------------

CALLED = set()


def _counting(name, f):
    def wrapper(*args):
        CALLED.add(name)
        return f(*args)
    wrapper.__name__ = name
    wrapper.argtypes = f.argtypes
    wrapper.restype = f.restype
    wrapper.wrapped = f
    return wrapper


for _name, _rt, _at in _ffi.FUNCTIONS:
    setattr(_ffi.F, _name, _counting(_name, getattr(_ffi.F, _name)))
# rlp_loss_nll is also called by the library through the LOSS_NLL pointer: that is not a Python call.


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("RLPOST_REQUIRE_COVERAGE") != "1" or exitstatus != 0:
        return
    if session.config.option.keyword or session.config.option.markexpr or session.testsfailed:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    shared = os.environ.get("RLPOST_SHARED_DATA")
    if not shared or not os.path.isdir(shared):
        # the tests that reach the rest of the API skip without ../shared/data
        # (the project must work without it): nothing to require then
        if reporter:
            reporter.write_line("coverage of the public functions not checked: no shared data "
                                "(RLPOST_SHARED_DATA)")
        return
    missing = [n for n, _, _ in _ffi.FUNCTIONS if n not in CALLED]
    if missing:
        if reporter:
            reporter.write_line("FAILED: public functions never called through the bindings: "
                                + ", ".join(missing), red=True)
        session.exitstatus = 1
    elif reporter:
        reporter.write_line("all %d public functions were called through the bindings" % len(_ffi.FUNCTIONS))


# ---- data ------------------------------------------------------------------


def write_tok512(path):
    """A 512-piece llama2.c tokenizer.bin (ASCII characters and letter
    pairs) standing in for stories260K's own (same as
    tests/cli/check_train_cli.sh)."""
    pieces = ["<unk>", "\n<s>\n", "\n</s>\n"] + [chr(c) for c in range(32, 127)]
    for a in string.ascii_lowercase:
        for b in " " + string.ascii_lowercase:
            if len(pieces) < 512:
                pieces.append(a + b)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            b = p.encode()
            f.write(struct.pack("<fi", -float(i), len(b)) + b)
    return path


@pytest.fixture(scope="session")
def stories_path():
    if not STORIES.is_file():
        pytest.skip("no %s (shared data folder)" % STORIES)
    return STORIES


@pytest.fixture(scope="session")
def smollm2_path():
    if not SMOLLM2.is_file():
        pytest.skip("no %s (scripts/fetch-model.sh)" % SMOLLM2)
    return SMOLLM2


@pytest.fixture(scope="session")
def tok512_path(tmp_path_factory):
    return write_tok512(tmp_path_factory.mktemp("tok") / "tok512.bin")


@pytest.fixture
def ctx():
    with rlpost.Context(n_threads=1, seed=1234) as c:
        yield c


@pytest.fixture
def policy(ctx, stories_path):
    with rlpost.Policy(ctx, stories_path) as p:
        yield p


@pytest.fixture
def tok512(tok512_path):
    with rlpost.Tokenizer(tok512_path) as t:
        yield t


def make_batch(groups=2, group_size=3, n_tokens=4, version=0, rewards=None):
    """A Batch of hand-made trajectories: group g (ids 1..groups), sample j."""
    b = rlpost.Batch()
    k = 0
    for g in range(groups):
        for j in range(group_size):
            b.append(group_id=g + 1, sample_index=j, prompt_tokens=[1, 2, 3],
                     completion_tokens=[(5 + g + j + t) % 500 for t in range(n_tokens)],
                     logprobs=[-0.5] * n_tokens, policy_version=version,
                     completion_text="g%d s%d" % (g, j),
                     reward=None if rewards is None else rewards[k])
            k += 1
    return b
