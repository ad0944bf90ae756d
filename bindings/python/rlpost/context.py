"""Version, status strings, thread-local errors, backends, and the
execution context (rlp_context)."""
import enum
import sys
import traceback
import weakref
from ctypes import byref, c_int, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, callback_scope, check, last_error
from ._util import options, text

F = _ffi.F


class Backend(enum.IntEnum):
    """rlp_backend_kind"""
    CPU = 0
    CUDA = 1


class MatmulPrecision(enum.IntEnum):
    """rlp_matmul_precision: the number format of a context's GEMMs
    (weights, gradients and optimizer state stay fp32 in every mode)."""
    FP32 = 0
    TF32 = 1  # CUDA only; a CPU context runs it as FP32
    BF16 = 2  # operands rounded to bfloat16, fp32 sums (CPU: oneDNN on AMX/AVX512-BF16, else emulated)
    AUTO = 3  # BF16 on a CPU with bf16 instructions (and oneDNN), FP32 elsewhere


class LogLevel(enum.IntEnum):
    """rlp_log_level"""
    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3
    NONE = 4


# -- version and errors -----------------------------------------------------

def version_number():
    """rlp_version_number(): MAJOR*10000 + MINOR*100 + PATCH of the loaded library."""
    return F.rlp_version_number()


def version_string():
    """rlp_version_string(): "MAJOR.MINOR.PATCH" of the loaded library."""
    return F.rlp_version_string().decode()


def abi_version():
    """rlp_abi_version(): the library's SOVERSION."""
    return F.rlp_abi_version()


def status_str(status):
    """rlp_status_str(): an English description of any status code."""
    return F.rlp_status_str(int(status)).decode()


def error_last():
    """rlp_error_last(): this thread's last failure message ("" if none).
    The exceptions already carry it; this is for code that wants it raw."""
    return text(F.rlp_error_last())


def error_last_code():
    """rlp_error_last_code(): the status that went with error_last()."""
    return F.rlp_error_last_code()


def error_clear():
    """rlp_error_clear(): forgets this thread's last error."""
    F.rlp_error_clear()


# -- backends -------------------------------------------------------------

def backend_available(kind):
    """Whether a backend can be used here (rlp_backend_available()); the
    reason it cannot is in error_last()."""
    return bool(check(F.rlp_backend_available(int(kind)), "rlp_backend_available"))


def backend_name(kind):
    """"cpu", "cuda", or None for a value that is not a backend kind."""
    return text(F.rlp_backend_name(int(kind)))


def backend_device_count(kind):
    """Devices of a backend kind visible here (1 for the CPU)."""
    n = c_int()
    check(F.rlp_backend_device_count(byref(n), int(kind)), "rlp_backend_device_count")
    return n.value


# -- callbacks that cannot report failure --------------------------------------

def report_callback_exception(what):
    """Prints the exception being handled (a log callback cannot fail)."""
    try:
        sys.stderr.write("rlpost: exception in %s (ignored):\n" % what)
        traceback.print_exc()
    except Exception:
        pass


def make_log_fn(holder, fn, what):
    """An rlp_log_fn calling fn(level, message) on whatever thread logs.
    @p holder is a one-item list with a weak reference to the owning handle once it exists
    (a log callback may run while the handle is being created). The caller
    keeps the returned object alive as long as C may call it."""
    if not callable(fn):
        raise TypeError("%s must be callable" % what)

    def trampoline(level, message, payload):
        try:
            with callback_scope(holder[0]() if holder[0] else None):
                fn(LogLevel(level) if 0 <= level <= 4 else level, text(message) or "")
        except BaseException:
            report_callback_exception(what)
    return _ffi.LogFn(trampoline)


class Context(Handle):
    """An execution context: backend, device, CPU threads, seed, logging.

    Context(backend=Backend.CPU, device=0, n_threads=0, seed=0x5eed,
            log=None, log_level=LogLevel.WARN, matmul_precision=MatmulPrecision.FP32)

    matmul_precision: a MatmulPrecision for every GEMM run on the context
    (see rlp_matmul_precision in rlpost.h).
    log: a callable(level, message), called from any thread the library
    runs (with the GIL taken); exceptions in it are printed and ignored.
    Every handle created from a context keeps it alive; closing the
    context closes them first.
    """

    _free = "rlp_context_free"

    def __init__(self, backend=Backend.CPU, device=0, n_threads=0, seed=0x5eed, log=None,
                 log_level=LogLevel.WARN, matmul_precision=MatmulPrecision.FP32):
        keep = []
        log_fn = None
        holder = [None]
        if log is not None:
            log_fn = make_log_fn(holder, log, "the context's log callback")
            keep.append(log_fn)
        opts = options(_ffi.ContextOptions, "rlp_context_options_init",
                       {"backend": int(backend), "device": device, "n_threads": n_threads,
                        "seed": seed, "log_level": int(log_level),
                        "matmul_precision": int(matmul_precision)}, keep, what="Context")
        if log_fn is not None:
            opts.log_fn = log_fn
        out = c_void_p()
        check(F.rlp_context_create(byref(out), byref(opts)), "rlp_context_create")
        Handle.__init__(self, out.value)
        self._keep = keep
        holder[0] = weakref.ref(self)  # weak: no cycle through the callback

    @property
    def backend(self):
        """The Backend it runs on."""
        k = c_int()
        with self._use() as p:
            check(F.rlp_context_backend(byref(k), p), "rlp_context_backend")
        return Backend(k.value)

    @property
    def n_threads(self):
        """CPU threads it uses (0 resolved to the core count)."""
        k = c_int()
        with self._use() as p:
            check(F.rlp_context_n_threads(byref(k), p), "rlp_context_n_threads")
        return k.value

    @property
    def matmul_precision(self):
        """The MatmulPrecision its GEMMs run in (AUTO resolved at creation;
        TF32 reads FP32 on the CPU)."""
        k = c_int()
        with self._use() as p:
            check(F.rlp_context_matmul_precision(byref(k), p), "rlp_context_matmul_precision")
        return MatmulPrecision(k.value)

    @property
    def seed(self):
        s = c_uint64()
        with self._use() as p:
            check(F.rlp_context_seed(byref(s), p), "rlp_context_seed")
        return s.value

    @property
    def device_name(self):
        """e.g. "cpu: 2 threads, OpenBLAS 0.3.21"."""
        with self._use() as p:
            name = F.rlp_context_device_name(p)
        if name is None:
            raise last_error(F.rlp_error_last_code() or -1, "rlp_context_device_name")
        return text(name)

    def set_log_level(self, level):
        with self._use() as p:
            check(F.rlp_context_set_log_level(p, int(level)), "rlp_context_set_log_level")

