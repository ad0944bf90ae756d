"""Process groups (rlp_comm): data-parallel training across processes and
weight broadcast from a trainer rank to rollout ranks."""
import enum
import weakref
from ctypes import byref, c_char, c_double, c_int32, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import optional_str, options, to_bytes

F = _ffi.F


class CommTransport(enum.IntEnum):
    """rlp_comm_transport"""
    AUTO = 0
    SHM = 1
    NCCL = 2
    MPI = 3
    GLOO = 4


class ReduceOp(enum.IntEnum):
    """rlp_reduce_op"""
    SUM = 0
    MAX = 1
    MIN = 2


class Comm(Handle):
    """Joins a process group of world_size ranks (blocks until all joined).

    Comm(context, rank=-1, world_size=0, rendezvous=None,
         transport=CommTransport.AUTO, timeout_ms=0)

    rank -1 / world_size 0 / rendezvous None come from the environment
    (RLPOST_RANK or RANK, RLPOST_WORLD_SIZE or WORLD_SIZE, RLPOST_RENDEZVOUS;
    under mpirun the launcher's). rendezvous: a file path (one machine),
    "env://" (MASTER_ADDR, MASTER_PORT) or "tcp://HOST:PORT" (any hosts;
    CommTransport.GLOO on the CPU); CommTransport.MPI takes none.
    Every collective is called by all ranks in the same order. Keeps its
    context alive; policies attached with Policy.set_comm() are detached
    when the group is closed.
    """

    _free = "rlp_comm_free"

    def __init__(self, context, rank=-1, world_size=0, rendezvous=None, transport=CommTransport.AUTO,
                 timeout_ms=0):
        keep = []
        opts = options(_ffi.CommOptions, "rlp_comm_options_init",
                       {"transport": int(transport), "rank": rank, "world_size": world_size,
                        "timeout_ms": timeout_ms, "rendezvous": None if rendezvous is None else str(rendezvous)},
                       keep, {"rendezvous": optional_str("rendezvous")}, what="Comm")
        out = c_void_p()
        with context._use() as c:
            check(F.rlp_comm_create(byref(out), c, byref(opts)), "rlp_comm_create")
            Handle.__init__(self, out.value, parents=(context,))
        self.context = context
        self._attached = weakref.WeakSet()

    def _before_free(self, ptr):
        for policy in list(self._attached):
            if not policy.closed and getattr(policy, "_comm", None) is self:
                policy.set_comm(None)

    def info(self):
        """(rank, world_size, transport)"""
        r, w, t = c_int32(), c_int32(), c_int32()
        with self._use() as p:
            check(F.rlp_comm_info(p, byref(r), byref(w), byref(t)), "rlp_comm_info")
        return r.value, w.value, CommTransport(t.value)

    @property
    def rank(self):
        return self.info()[0]

    @property
    def world_size(self):
        return self.info()[1]

    def barrier(self):
        """Waits for every rank (TimeoutError, ClosedError)."""
        with self._use() as p:
            check(F.rlp_comm_barrier(p), "rlp_comm_barrier")

    def all_reduce(self, values, op=ReduceOp.SUM):
        """Returns op over all ranks of a sequence of floats (as a list of
        float64 values, combined in rank order)."""
        vals = [float(v) for v in values]
        arr = (c_double * max(len(vals), 1))(*vals)
        with self._use() as p:
            check(F.rlp_comm_all_reduce(p, arr, len(vals), int(op)), "rlp_comm_all_reduce")
        return list(arr[:len(vals)])

    def broadcast(self, data, root):
        """Returns rank @p root's bytes on every rank; the others pass a
        buffer of the same length (its content is ignored)."""
        b = to_bytes(data, "data")
        buf = (c_char * max(len(b), 1)).from_buffer_copy(b if b else b"\0")
        with self._use() as p:
            check(F.rlp_comm_broadcast(p, buf, len(b), int(root)), "rlp_comm_broadcast")
        return bytes(buf.raw[:len(b)])
