"""Exceptions: one class per status family of rlp_status, each carrying the
status code, the C function that failed and rlp_error_last() of the thread
that called it.

Classes whose name is also a built-in exception (TimeoutError, IOError,
OverflowError) derive from that built-in too, so `except TimeoutError`
catches rlpost's as well; likewise InvalidArgumentError is a ValueError,
OutOfMemoryError a MemoryError, NotFoundError a LookupError, NetworkError a
ConnectionError.
"""
import builtins

STATUS_OK = 0
STATUS_INVALID_ARG = -1
STATUS_NOMEM = -2
STATUS_IO = -3
STATUS_FORMAT = -4
STATUS_UNSUPPORTED = -5
STATUS_BACKEND = -6
STATUS_TIMEOUT = -7
STATUS_NETWORK = -8
STATUS_CALLBACK = -9
STATUS_CLOSED = -10
STATUS_AGAIN = -11
STATUS_NOT_FOUND = -12
STATUS_STATE = -13
STATUS_OVERFLOW = -14
STATUS_INTERNAL = -15


class Error(Exception):
    """A librlpost call failed.

    Attributes: status (the negative rlp_status code), function (the C
    function, e.g. "rlp_policy_load"), message (rlp_error_last() after the
    failure, or the status description when the library left none).
    """

    status = None

    def __init__(self, message, status=None, function=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.function = function

    def __str__(self):
        return self.message


class InvalidArgumentError(Error, ValueError):
    """RLP_E_INVALID_ARG: a NULL, a bad enum value, a value out of range."""
    status = STATUS_INVALID_ARG


class OutOfMemoryError(Error, MemoryError):
    """RLP_E_NOMEM: an allocation failed (host or device)."""
    status = STATUS_NOMEM


class IOError(Error, builtins.OSError):  # noqa: A001 - deliberately rlpost.IOError, an OSError
    """RLP_E_IO: a file could not be opened, read, written or synced."""
    status = STATUS_IO

    def __init__(self, message, status=None, function=None):
        Error.__init__(self, message, status, function)

    def __str__(self):
        return self.message


class FormatError(Error):
    """RLP_E_FORMAT: a file or message is malformed."""
    status = STATUS_FORMAT


class UnsupportedError(Error):
    """RLP_E_UNSUPPORTED: valid, but not supported here (dtype, option, build)."""
    status = STATUS_UNSUPPORTED


class BackendError(Error):
    """RLP_E_BACKEND: the compute backend failed or is not available."""
    status = STATUS_BACKEND


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """RLP_E_TIMEOUT: a wait, peer or callback ran past its deadline."""
    status = STATUS_TIMEOUT

    def __init__(self, message, status=None, function=None):
        Error.__init__(self, message, status, function)

    def __str__(self):
        return self.message


class NetworkError(Error, builtins.ConnectionError):
    """RLP_E_NETWORK: a peer could not be reached or answered badly."""
    status = STATUS_NETWORK

    def __init__(self, message, status=None, function=None):
        Error.__init__(self, message, status, function)

    def __str__(self):
        return self.message


class CallbackError(Error):
    """RLP_E_CALLBACK: a callback failed. When it was a Python callable that
    raised, that exception is the __cause__."""
    status = STATUS_CALLBACK


class ClosedError(Error):
    """RLP_E_CLOSED: the handle was shut down, or (raised by the bindings)
    the Python object was closed and its C handle freed."""
    status = STATUS_CLOSED


class AgainError(Error):
    """RLP_E_AGAIN: would block (full, empty, busy); try again later."""
    status = STATUS_AGAIN


class NotFoundError(Error, LookupError):
    """RLP_E_NOT_FOUND: a named item (tensor, key, token, file) does not exist."""
    status = STATUS_NOT_FOUND


class StateError(Error, RuntimeError):
    """RLP_E_STATE: the call is not valid in the handle's current state."""
    status = STATUS_STATE


class OverflowError(Error, builtins.OverflowError):  # noqa: A001
    """RLP_E_OVERFLOW: a size or count does not fit."""
    status = STATUS_OVERFLOW


class InternalError(Error):
    """RLP_E_INTERNAL: a bug in librlpost; please report it."""
    status = STATUS_INTERNAL


#: status code -> exception class
BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, OutOfMemoryError, IOError, FormatError, UnsupportedError, BackendError,
    TimeoutError, NetworkError, CallbackError, ClosedError, AgainError, NotFoundError, StateError,
    OverflowError, InternalError)}


def error_for(status, function, message):
    """The exception object for a negative status (Error itself for a code
    this version does not know)."""
    cls = BY_STATUS.get(status, Error)
    return cls(message, status, function)
