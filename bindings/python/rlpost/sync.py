"""Synchronizers (rlp_synchronizer): policy versions, weight transports
(in-process, file, HTTP) and the AReaL staleness gate."""
import enum
import weakref
from ctypes import byref, c_char_p, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import StringArray, optional_str, options, string_list, struct_record
from .buffer import WAIT_FOREVER, sliced_wait
from .context import make_log_fn

F = _ffi.F


class SyncMode(enum.IntEnum):
    """rlp_sync_mode"""
    COLOCATED = 0
    SEQUENTIAL_PULL = 1
    ASYNC = 2


class SyncTransport(enum.IntEnum):
    """rlp_sync_transport"""
    IN_PROCESS = 0
    FILE = 1
    HTTP = 2
    COLLECTIVE = 3
    RELAY = 4


class Synchronizer(Handle):
    """Owns the version counter, the weight transport and the gate.

    Synchronizer(mode=SyncMode.SEQUENTIAL_PULL, transport=SyncTransport.IN_PROCESS,
                 max_staleness=1, batch_groups=1, max_concurrent=0, initial_version=0,
                 dir=None, keep_versions=3, dtype=DType.F32, urls=None, api_key=None,
                 timeout_ms=0, max_retries=3, verify_retries=5, log=None, comm=None, root=0)

    Thread-safe like the C handle. In COLOCATED mode publish() borrows the
    policy: the synchronizer then keeps it alive and is closed with it. With
    the in-process transport otherwise, publish() keeps a copy of the
    weights on the policy's context: the synchronizer then keeps that
    context alive and is closed with it.
    close() first closes the gate (waking acquire()) and frees the handle
    once running calls have returned.
    """

    _free = "rlp_synchronizer_free"

    def __init__(self, mode=SyncMode.SEQUENTIAL_PULL, transport=SyncTransport.IN_PROCESS, max_staleness=1,
                 batch_groups=1, max_concurrent=0, initial_version=0, dir=None, keep_versions=3, dtype=0,
                 urls=None, api_key=None, timeout_ms=0, max_retries=3, verify_retries=5, log=None, comm=None,
                 root=0):
        keep = []
        holder = [None]
        opts = options(_ffi.SyncOptions, "rlp_sync_options_init",
                       {"mode": int(mode), "transport": int(transport), "max_staleness": max_staleness,
                        "batch_groups": batch_groups, "max_concurrent": max_concurrent,
                        "initial_version": initial_version, "keep_versions": keep_versions,
                        "dtype": int(dtype), "timeout_ms": timeout_ms, "max_retries": max_retries,
                        "verify_retries": verify_retries, "dir": None if dir is None else str(dir),
                        "urls": urls or [], "api_key": api_key, "root": root}, keep,
                       {"dir": optional_str("dir"), "urls": string_list("urls", "n_urls"),
                        "api_key": optional_str("api_key")}, what="Synchronizer")
        if log is not None:
            fn = make_log_fn(holder, log, "the synchronizer's log callback")
            keep.append(fn)
            opts.log_fn = fn
        if comm is not None:
            with comm._use() as c:
                opts.comm = c
        out = c_void_p()
        check(F.rlp_synchronizer_create(byref(out), byref(opts)), "rlp_synchronizer_create")
        Handle.__init__(self, out.value)
        keep.append(comm)  # COLLECTIVE borrows the group: keep it alive as long as this
        self._keep = keep
        self.mode = SyncMode(mode)
        self.transport = SyncTransport(transport)
        self._borrowed = None
        holder[0] = weakref.ref(self)

    def _before_free(self, ptr):
        F.rlp_synchronizer_close(ptr)  # wake acquire() calls waiting at the gate

    def publish(self, policy):
        """Publishes the policy's weights as version policy.version (call it
        after each train step); wakes rollouts waiting at the gate."""
        with self._use() as p, policy._use() as q:
            check(F.rlp_synchronizer_publish(p, q), "rlp_synchronizer_publish")
            if self.mode == SyncMode.COLOCATED and self._borrowed is not policy:
                policy._adopt(self)  # the C side now points at the policy
                self._borrowed = policy
            elif self.transport == SyncTransport.IN_PROCESS and policy.context not in self._parents:
                # the published snapshot is a clone on the policy's context: it must
                # outlive the synchronizer, which is closed with it
                policy.context._adopt(self)
                self._parents += (policy.context,)

    def pull(self, engine=None):
        """Brings a rollout engine to the latest published version (None:
        HTTP transport, just tell the servers; RELAY, just update the mirror
        from the parent)."""
        with self._use() as p:
            if engine is None:
                check(F.rlp_synchronizer_pull(p, None), "rlp_synchronizer_pull")
            else:
                with engine._use() as e:
                    check(F.rlp_synchronizer_pull(p, e), "rlp_synchronizer_pull")

    def set_urls(self, urls):
        """Replaces the servers the HTTP transport tells to load each
        version (a swarm whose servers join and leave; an empty list is
        allowed); servers that stay keep what they are known to hold.
        StateError for another transport. Thread-safe."""
        arr = StringArray(urls, "urls")
        with self._use() as p:
            check(F.rlp_synchronizer_set_urls(p, arr.ptr, arr.n), "rlp_synchronizer_set_urls")

    def pull_at_least(self, engine, min_version):
        """Like pull(), but generation needs only weights of min_version or
        newer: with a remote engine over the HTTP transport it returns at
        once, the servers get the latest version from a thread of the
        synchronizer, and the engine's requests ask each server for
        min_version at least ("min_weight_version"). Other engines and
        transports: pull()."""
        with self._use() as p, engine._use() as e:
            check(F.rlp_synchronizer_pull_at_least(p, e, int(min_version)), "rlp_synchronizer_pull_at_least")

    def acquire(self, timeout_ms=WAIT_FOREVER):
        """Admits one rollout group through the staleness gate, waiting up
        to @p timeout_ms; AgainError (timeout 0), TimeoutError, ClosedError."""
        with self._use() as p:
            check(sliced_wait(lambda ms: F.rlp_synchronizer_acquire(p, ms), timeout_ms),
                  "rlp_synchronizer_acquire")

    def release(self, accepted=True):
        """Ends an admitted group: accepted (pushed to the buffer) or not."""
        with self._use() as p:
            check(F.rlp_synchronizer_release(p, 1 if accepted else 0), "rlp_synchronizer_release")

    @property
    def version(self):
        """The latest published version (here, or read from the manifest)."""
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_synchronizer_version(byref(v), p), "rlp_synchronizer_version")
        return v.value

    def shutdown(self):
        """rlp_synchronizer_close(): closes the gate for good (acquire()
        raises ClosedError); publish and pull keep working. (close() frees
        the synchronizer.)"""
        with self._use() as p:
            check(F.rlp_synchronizer_close(p), "rlp_synchronizer_close")

    def stats(self):
        """Counters: mode, transport, policy_version, accepted, running,
        admitted, gate_waits, publishes, pulls, weight_loads, ..."""
        s = _ffi.SyncStats()
        s.version = s._version_
        with self._use() as p:
            check(F.rlp_synchronizer_stats(byref(s), p), "rlp_synchronizer_stats")
        return struct_record(s)
