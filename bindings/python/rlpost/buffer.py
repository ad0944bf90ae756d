"""Replay buffers (rlp_replay_buffer): a thread-safe, staleness-bounded,
optionally durable store of scored trajectory groups."""
import enum
import time
import weakref
from ctypes import byref, c_size_t, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import optional_str, options, struct_record, to_path
from .batch import Batch
from .context import make_log_fn
from .errors import STATUS_TIMEOUT

F = _ffi.F

#: RLP_WAIT_FOREVER: wait as long as it takes (or until the handle is shut down)
WAIT_FOREVER = 0xFFFFFFFF
#: RLP_STALENESS_UNBOUNDED: never drop a group for its age
STALENESS_UNBOUNDED = 0xFFFFFFFF

# Long waits are made of C waits of at most this many ms, so that Ctrl-C
# (KeyboardInterrupt) reaches the Python thread that waits.
WAIT_SLICE_MS = 250


class BufferFullPolicy(enum.IntEnum):
    """rlp_buffer_full_policy"""
    BLOCK = 0
    FAIL = 1


def sliced_wait(call, timeout_ms):
    """Runs call(slice_ms) -> status until it is not RLP_E_TIMEOUT or
    @p timeout_ms has passed; returns the last status."""
    timeout_ms = int(timeout_ms)
    if timeout_ms <= WAIT_SLICE_MS:
        return call(timeout_ms)
    forever = timeout_ms == WAIT_FOREVER
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        left = WAIT_SLICE_MS if forever else int((deadline - time.monotonic()) * 1000)
        rc = call(max(min(left, WAIT_SLICE_MS), 1))
        if rc != STATUS_TIMEOUT or (not forever and time.monotonic() >= deadline):
            return rc


class ReplayBuffer(Handle):
    """A replay buffer of trajectory groups (trajectories sharing a
    group_id), tagged with their policy version.

    ReplayBuffer(capacity=0, max_staleness=1, full_policy=BufferFullPolicy.BLOCK,
                 push_timeout_ms=WAIT_FOREVER, spill_path=None, compact_bytes=0, log=None, sync=None)

    With @p sync (a Synchronizer) the buffer takes η from it: one bound for
    the gate and the buffer (max_staleness must then be left at 1 or equal
    the synchronizer's; another value raises InvalidArgumentError). The buffer
    keeps the synchronizer alive, and closing the synchronizer closes the
    buffer first.

    push() and pull() may run on any number of threads at once. close()
    first shuts the buffer down (waking blocked pushes and pulls) and then
    frees it once they have returned.
    """

    _free = "rlp_replay_buffer_free"

    def __init__(self, capacity=0, max_staleness=1, full_policy=BufferFullPolicy.BLOCK,
                 push_timeout_ms=WAIT_FOREVER, spill_path=None, compact_bytes=0, log=None, sync=None):
        keep = []
        holder = [None]
        opts = options(_ffi.BufferOptions, "rlp_buffer_options_init",
                       {"capacity": capacity, "max_staleness": max_staleness, "full_policy": int(full_policy),
                        "push_timeout_ms": push_timeout_ms, "compact_bytes": compact_bytes,
                        "spill_path": None if spill_path is None else str(spill_path)},
                       keep, {"spill_path": optional_str("spill_path")}, what="ReplayBuffer")
        if log is not None:
            fn = make_log_fn(holder, log, "the replay buffer's log callback")
            keep.append(fn)
            opts.log_fn = fn
        out = c_void_p()
        if sync is not None:
            with sync._use() as s:
                opts.sync = s
                check(F.rlp_replay_buffer_create(byref(out), byref(opts)), "rlp_replay_buffer_create")
        else:
            check(F.rlp_replay_buffer_create(byref(out), byref(opts)), "rlp_replay_buffer_create")
        # the C buffer borrows the synchronizer: as its parent, closing it closes the buffer first
        Handle.__init__(self, out.value, parents=(sync,))
        self._keep = keep
        holder[0] = weakref.ref(self)

    def _before_free(self, ptr):
        F.rlp_replay_buffer_close(ptr)  # wake every blocked push and pull

    def push(self, batch):
        """Adds the batch's trajectories as whole groups (all or none). On
        success the batch is left empty."""
        batch._check_writable("push")
        with self._use() as p, batch._use() as b:
            check(F.rlp_replay_buffer_push(p, b), "rlp_replay_buffer_push")

    def ingest_dir(self, path):
        """rlp_replay_buffer_ingest_dir(): pushes every batch file of the
        folder (*.rlpb, in name order) and removes it; a malformed one is
        set aside as NAME.bad. Returns the number of groups taken in."""
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_replay_buffer_ingest_dir(p, to_path(path), byref(n)), "rlp_replay_buffer_ingest_dir")
        return n.value

    def pull(self, n_groups, version, timeout_ms=WAIT_FOREVER):
        """Takes @p n_groups whole groups for a consumer at policy
        @p version (dropping groups staler than max_staleness), waiting up
        to @p timeout_ms; returns a new Batch. AgainError (timeout 0),
        TimeoutError, ClosedError (shut down and not enough left)."""
        out = c_void_p()
        with self._use() as p:
            rc = sliced_wait(lambda ms: F.rlp_replay_buffer_pull(byref(out), p, int(n_groups), int(version), ms),
                             timeout_ms)
            check(rc, "rlp_replay_buffer_pull")
        return Batch(_ptr=out.value)

    def shutdown(self):
        """rlp_replay_buffer_close(): blocked and later pushes fail with
        ClosedError; pulls still take what is there. Idempotent. (close()
        frees the buffer.)"""
        with self._use() as p:
            check(F.rlp_replay_buffer_close(p), "rlp_replay_buffer_close")

    def stats(self):
        """Counters: size, trajectories, accepted, restored, consumed,
        dropped_stale, rejected, staleness_hist, max_staleness_seen, spill_*."""
        s = _ffi.BufferStats()
        s.version = s._version_
        with self._use() as p:
            check(F.rlp_replay_buffer_stats(byref(s), p), "rlp_replay_buffer_stats")
        return struct_record(s)
