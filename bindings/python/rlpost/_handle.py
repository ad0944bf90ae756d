"""What every handle class shares: the C pointer, close() (safe twice, also
from __del__ and at interpreter exit), `with` support, use-after-close
checks, and the order in which handles are freed.

Rules that keep a Python program from crashing the process:
- A handle keeps a strong reference to every handle it needs alive (its
  parents: a policy its context, an engine its policy...), so the garbage
  collector can never free a parent first.
- A parent knows its children weakly; closing a parent closes its live
  children first, newest first (the C API requires children freed first).
- Every C call on a handle goes through `with self._use() as ptr:`, which
  raises ClosedError once close() has begun and counts the call, and
  close() waits for running calls to return before it frees the C object,
  so a close() from one thread never frees memory another thread is using.
- close() from inside a callback of the handle (or of a handle it owns)
  would wait for itself: it raises StateError instead.
"""
import atexit
import itertools
import threading
import weakref

from . import _ffi
from .errors import ClosedError, StateError, STATUS_CLOSED, STATUS_STATE, error_for

F = _ffi.F

# Handles alive now, in creation order, for the exit hook.
_live = weakref.WeakValueDictionary()
_serial = itertools.count()
_tls = threading.local()


def check(rc, function):
    """Raises the exception of a negative status, with rlp_error_last()."""
    if rc < 0:
        raise last_error(rc, function)
    return rc


def last_error(rc, function):
    msg = F.rlp_error_last()
    msg = msg.decode("utf-8", "replace") if msg else ""
    if not msg:
        s = F.rlp_status_str(rc)
        msg = "%s: %s" % (function, s.decode() if s else "status %d" % rc)
    return error_for(rc, function, msg)


class callback_scope:
    """Marks the current thread as running a callback owned by @p owner
    (a Handle) for the duration of the `with` block."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    def __enter__(self):
        stack = getattr(_tls, "owners", None)
        if stack is None:
            stack = _tls.owners = []
        stack.append(self.owner)

    def __exit__(self, *exc):
        _tls.owners.pop()
        return False


class _Use:
    __slots__ = ("h", "ptr")

    def __init__(self, h):
        self.h = h

    def __enter__(self):
        h = self.h
        with h._cv:
            if h._ptr is None or h._closing:
                raise ClosedError("%s is closed" % h._describe(), STATUS_CLOSED, None)
            h._busy += 1
            tid = threading.get_ident()
            h._users[tid] = h._users.get(tid, 0) + 1
            self.ptr = h._ptr
        return self.ptr

    def __exit__(self, *exc):
        h = self.h
        with h._cv:
            h._busy -= 1
            tid = threading.get_ident()
            left = h._users[tid] - 1
            if left:
                h._users[tid] = left
            else:
                del h._users[tid]
            if h._busy == 0:
                h._cv.notify_all()
        return False


class Handle:
    """Base of every handle class. Subclasses set _free (the rlp_*_free
    function name) and call Handle.__init__ with the pointer."""

    _free = None

    def __init__(self, ptr, parents=(), owned=True):
        self._cv = threading.Condition(threading.Lock())
        self._ptr = None
        self._closing = False
        self._busy = 0
        self._users = {}
        self._owned = owned
        self._children = weakref.WeakValueDictionary()
        self._parents = tuple(p for p in parents if p is not None)
        self._keep = []          # Python objects the C handle points into (callbacks, buffers)
        self._serial = next(_serial)
        try:
            for p in self._parents:
                p._adopt(self)
        except BaseException:
            if owned and self._free:
                self._free_ptr(ptr)
            raise
        self._ptr = ptr
        _live[self._serial] = self

    # -- bookkeeping ------------------------------------------------------
    def _adopt(self, child):
        with self._cv:
            if self._ptr is None or self._closing:
                raise ClosedError("%s is closed" % self._describe(), STATUS_CLOSED, None)
            self._children[child._serial] = child

    def _describe(self):
        return type(self).__name__

    def _use(self):
        return _Use(self)

    @property
    def closed(self):
        """True once close() has begun (the C handle is or is being freed)."""
        return self._ptr is None or self._closing

    def _before_free(self, ptr):
        """Hook run by close() before waiting for running calls (e.g. wake
        blocked waiters); may call thread-safe C functions on @p ptr."""

    def _free_ptr(self, ptr):
        getattr(F, self._free)(ptr)

    def _owned_by_callback(self):
        for owner in getattr(_tls, "owners", ()):
            if owner is None:
                continue
            h = owner
            seen = set()
            stack = [h]
            while stack:
                h = stack.pop()
                if h is self:
                    return True
                if id(h) in seen:
                    continue
                seen.add(id(h))
                stack.extend(h._parents)
        return False

    # -- public -----------------------------------------------------------
    def close(self):
        """Frees the C handle (after closing the handles made from it). Safe
        to call twice; later calls on the object raise ClosedError."""
        with self._cv:
            if self._ptr is None or self._closing:
                if self._ptr is not None and self._closing:
                    # another thread is closing it: wait until it is done
                    while self._ptr is not None:
                        self._cv.wait()
                return
            if self._owned_by_callback() or self._users.get(threading.get_ident()):
                raise StateError("%s cannot be closed from inside one of its own calls or callbacks"
                                 % self._describe(), STATUS_STATE, None)
            self._closing = True
            ptr = self._ptr
        try:
            for child in reversed(list(self._children.values())):
                child.close()
            self._before_free(ptr)
        finally:
            with self._cv:
                while self._busy:
                    self._cv.wait()
                self._ptr = None
                self._cv.notify_all()
            if self._owned and self._free:
                self._free_ptr(ptr)
            _live.pop(self._serial, None)
            self._after_free()

    def _after_free(self):
        self._keep = []
        self._parents = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            if getattr(self, "_ptr", None) is not None:
                self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self.closed else "0x%x" % self._ptr
        return "<rlpost.%s %s>" % (type(self).__name__, state)


def _close_all_at_exit():
    # newest first, so children go before their parents even where the
    # garbage collector would have taken them in another order
    for serial in sorted(list(_live.keys()), reverse=True):
        h = _live.get(serial)
        if h is not None:
            try:
                h.close()
            except Exception:
                pass


atexit.register(_close_all_at_exit)
