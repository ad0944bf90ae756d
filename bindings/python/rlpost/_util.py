"""Conversions between Python values and C memory: token and logprob
arrays (numpy arrays when numpy is installed, plain lists otherwise),
strings, options structs, and the records that stats come back as."""
import ctypes
import json
import os
import types
from ctypes import c_char_p, c_float, c_int32, c_size_t, c_uint8, c_uint64

try:  # optional: every array comes back as a list without it
    import numpy as _np
except ImportError:
    _np = None

from . import _ffi
from ._handle import check

F = _ffi.F
HAVE_NUMPY = _np is not None

_NP_TYPES = {}
if HAVE_NUMPY:
    _NP_TYPES = {c_int32: _np.int32, c_float: _np.float32, c_uint64: _np.uint64, c_uint8: _np.uint8,
                 c_size_t: _np.uintp, ctypes.c_double: _np.float64}

_NUMERIC = (ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, c_uint64, c_size_t, c_float, ctypes.c_double)

_INT_RANGES = {c_int32: (-2 ** 31, 2 ** 31 - 1), c_uint64: (0, 2 ** 64 - 1), c_uint8: (0, 255),
               c_size_t: (0, 2 ** (8 * ctypes.sizeof(c_size_t)) - 1)}


def _plain(v):
    """A value as comparable plain data: arrays as lists, NaN as a marker."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


class Record(types.SimpleNamespace):
    """Plain data (stats, infos, trajectories): attributes, repr, as_dict(),
    and == that compares arrays by value and NaN as equal to NaN."""

    def as_dict(self):
        return dict(vars(self))

    def __eq__(self, other):
        if not isinstance(other, types.SimpleNamespace):
            return NotImplemented
        a, b = vars(self), vars(other)
        return a.keys() == b.keys() and all(_plain(a[k]) == _plain(b[k]) for k in a)

    __hash__ = None


def struct_record(s, skip=("version",)):
    """A Record of a ctypes struct's fields (char arrays as str, int arrays as lists)."""
    out = {}
    for name, ctype in s._fields_:
        if name in skip:
            continue
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, ctypes.Array):
            v = list(v)
        out[name] = v
    return Record(**out)


def to_bytes(s, what="string"):
    """str (UTF-8) or bytes -> bytes; None stays None."""
    if s is None or isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    if isinstance(s, (bytearray, memoryview)):
        return bytes(s)
    raise TypeError("%s must be str or bytes, not %s" % (what, type(s).__name__))


def to_path(p, what="path"):
    """A file name (str, bytes or os.PathLike) -> bytes for C."""
    if p is None:
        raise TypeError("%s must be a file name, not None" % what)
    return os.fsencode(p)


def text(b):
    """bytes from C -> str (ill-formed UTF-8 as U+FFFD); None stays None."""
    return None if b is None else b.decode("utf-8", "replace")


def json_text(v, what="options"):
    """A JSON object given as dict or as text -> bytes for C (None stays None)."""
    if v is None:
        return None
    if isinstance(v, (dict, list)):
        return json.dumps(v).encode("utf-8")
    return to_bytes(v, what)


def from_c(ptr, n, ctype):
    """Copies @p n items from C memory: a numpy array (or a list without numpy)."""
    n = int(n)
    if HAVE_NUMPY:
        if n == 0 or not ptr:
            return _np.zeros(0, dtype=_NP_TYPES[ctype])
        return _np.ctypeslib.as_array(ptr, shape=(n,)).copy()
    if n == 0 or not ptr:
        return []
    return ptr[:n]


def empty(n, ctype):
    """A zeroed output array of @p n items and a C pointer to it."""
    if HAVE_NUMPY:
        arr = _np.zeros(max(n, 1), dtype=_NP_TYPES[ctype])
        return arr, arr.ctypes.data_as(ctypes.POINTER(ctype))
    arr = (ctype * max(n, 1))()
    return arr, ctypes.cast(arr, ctypes.POINTER(ctype))


def finish(arr, n):
    """The first @p n items of an array made by empty(), as returned to the caller."""
    if HAVE_NUMPY:
        return arr[:n].copy()
    return list(arr[:n])


class CArray:
    """Python items copied into C memory: .ptr (POINTER(ctype), None when
    empty), .n, and the object that owns the memory (kept by this one)."""

    __slots__ = ("ptr", "n", "owner")

    def __init__(self, seq, ctype, what="array", allow_none=False):
        if seq is None:
            if not allow_none:
                raise TypeError("%s must be a sequence, not None" % what)
            self.ptr, self.n, self.owner = None, 0, None
            return
        if HAVE_NUMPY and isinstance(seq, _np.ndarray):
            want = _NP_TYPES[ctype]
            if seq.ndim != 1:
                raise ValueError("%s must be one-dimensional, not of shape %s" % (what, seq.shape))
            if seq.dtype != want:
                if ctype in _INT_RANGES and seq.size:
                    if seq.dtype.kind not in "iub":
                        raise TypeError("%s must hold integers, not %s" % (what, seq.dtype))
                    lo, hi = _INT_RANGES[ctype]
                    if int(seq.min()) < lo or int(seq.max()) > hi:
                        raise OverflowError("%s: a value is outside [%d, %d]" % (what, lo, hi))
                seq = seq.astype(want)
            arr = _np.ascontiguousarray(seq)
            self.n = int(arr.shape[0])
            self.owner = arr
            self.ptr = arr.ctypes.data_as(ctypes.POINTER(ctype)) if self.n else None
            return
        items = list(seq)
        if ctype in _INT_RANGES:
            lo, hi = _INT_RANGES[ctype]
            for i, v in enumerate(items):
                if isinstance(v, bool) or not isinstance(v, int):
                    try:
                        v = items[i] = int(v.__index__())
                    except AttributeError:
                        raise TypeError("%s[%d] must be an integer, not %s" % (what, i, type(v).__name__)) \
                            from None
                if v < lo or v > hi:
                    raise OverflowError("%s[%d] = %d is outside [%d, %d]" % (what, i, v, lo, hi))
        self.n = len(items)
        arr = (ctype * self.n)(*items) if self.n else None
        self.owner = arr
        self.ptr = ctypes.cast(arr, ctypes.POINTER(ctype)) if self.n else None


class StringArray:
    """A list of str as a C `const char *const *` (.ptr, .n)."""

    __slots__ = ("ptr", "n", "owner")

    def __init__(self, strings, what="strings"):
        if isinstance(strings, (str, bytes)):
            strings = [strings]
        items = [to_bytes(s, what) for s in (strings or ())]
        self.n = len(items)
        self.owner = (c_char_p * max(self.n, 1))(*items)
        self.ptr = ctypes.cast(self.owner, ctypes.POINTER(c_char_p)) if self.n else None


def server_stats(fn_name, ptr):
    """The per-server counters that @p fn_name (rlp_*_server_stats) fills, as a list of Records."""
    n = ctypes.c_size_t()
    fn = getattr(F, fn_name)
    check(fn(None, 0, ctypes.byref(n), ptr), fn_name)
    while True:
        cap = n.value
        arr = (_ffi.ServerStats * max(cap, 1))()
        check(fn(arr, cap, ctypes.byref(n), ptr), fn_name)
        if n.value <= cap:  # servers may have been added between the two calls
            return [struct_record(arr[i]) for i in range(n.value)]


def options(struct_cls, init_name, values, keep, special=None, what=None):
    """Fills an options struct: rlp_*_options_init() defaults, then the
    given keyword values. Unknown keys raise TypeError. @p special maps a
    key to a function (struct, value, keep) that sets fields itself (strings,
    arrays, callbacks); plain fields take numbers. Returns the struct."""
    opts = struct_cls()
    check(getattr(F, init_name)(ctypes.byref(opts), struct_cls._version_), init_name)
    fields = {n for n, _ in struct_cls._fields_} - {"version"}
    special = special or {}
    for key, value in values.items():
        if key in special:
            special[key](opts, value, keep)
        elif key in fields:
            ctype = dict(struct_cls._fields_)[key]
            if ctype not in _NUMERIC:
                raise TypeError("%s: %s is set through its own argument" % (what or struct_cls._c_name_, key))
            if isinstance(value, bool):
                value = int(value)
            try:
                setattr(opts, key, value)
            except TypeError:
                raise TypeError("%s: %s must be a number, not %s"
                                % (what or struct_cls._c_name_, key, type(value).__name__)) from None
        else:
            raise TypeError("%s got an unexpected option %r (known: %s)"
                            % (what or struct_cls._c_name_, key, ", ".join(sorted(fields | set(special)))))
    return opts


def optional_str(field):
    """An options setter for a `const char *` field."""
    def set_(opts, value, keep):
        b = to_bytes(value, field)
        keep.append(b)
        setattr(opts, field, b)
    return set_


def string_list(field, count_field):
    """An options setter for a `const char *const *` field with its count."""
    def set_(opts, value, keep):
        arr = StringArray(value, field)
        keep.append(arr)
        setattr(opts, field, arr.ptr)
        setattr(opts, count_field, arr.n)
    return set_


def int_list(field, count_field, ctype=c_int32):
    def set_(opts, value, keep):
        arr = CArray(value, ctype, field)
        keep.append(arr)
        setattr(opts, field, arr.ptr)
        setattr(opts, count_field, arr.n)
    return set_


def utf8_truncate(b, limit):
    """At most @p limit bytes of @p b, not cutting a UTF-8 character."""
    if len(b) <= limit:
        return b
    cut = limit
    while cut > 0 and (b[cut] & 0xC0) == 0x80:
        cut -= 1
    return b[:cut]
