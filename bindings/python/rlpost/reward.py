"""Reward functions (rlp_reward_fn): Python callables (single-sample and
batch forms), built-in verifiers, HTTP verifiers, weighted combinations,
and the Clip/Delta process-reward refinements.

How a Python reward runs. rlp_reward_fn_score() releases the GIL (every
ctypes call does) and the library calls the callable from its own worker
threads; the ctypes trampoline takes the GIL for each call. The GIL
serialises the Python code itself, so extra threads help only a callable
that waits (I/O, a subprocess, numpy work that releases the GIL).

What a callable returns, per sample:
- a number: the score;
- (score, reason): a score and a short reason (e.g. "wrong answer");
- a Reward(score, reason=..., valid=..., token_scores=..., step_ends=...);
- None: the sample cannot be scored (invalid, reason "no score").
Raising InvalidSample(reason) marks the sample invalid with that reason.
Any other exception marks it invalid with the last line of its traceback
(e.g. "ZeroDivisionError: division by zero") as the reason and is counted
in the stats' errors; the run goes on. Nothing ever propagates into C.

Lifetime. The C handle may call a callable after its Python object is
gone: a call that overran its deadline keeps running on an abandoned
thread. So the trampoline and the callable live in a module registry,
handed to the library with payload_free, and leave it only when the
library says nothing can call them any more (the handle is freed and
every abandoned call has returned). Closing the RewardFn is therefore
always safe, as is combining it into another.
"""
import ctypes
import enum
import itertools
import json
import math
import numbers
import threading
import traceback
import weakref
from ctypes import byref, c_float, c_int32, c_uint8, c_void_p

from . import _ffi
from ._handle import Handle, callback_scope, check
from ._util import (CArray, Record, from_c, json_text, options, optional_str, struct_record, to_bytes,
                    utf8_truncate)

# isolated() has a parameter named options
_options_struct = options

F = _ffi.F


class RefineMode(enum.IntEnum):
    """rlp_reward_refine_mode"""
    NONE = 0
    CLIP = 1
    DELTA = 2
    CLIP_DELTA = 3


class InvalidSample(Exception):
    """Raise it from a reward callable to mark the sample invalid with a
    reason, without counting an error."""


class Reward:
    """A reward callable's full answer for one sample."""

    __slots__ = ("score", "reason", "valid", "token_scores", "step_ends")

    def __init__(self, score, reason="", valid=True, token_scores=None, step_ends=None):
        self.score = score
        self.reason = reason
        self.valid = valid
        self.token_scores = token_scores
        self.step_ends = step_ends

    def __repr__(self):
        return "Reward(score=%r, reason=%r, valid=%r)" % (self.score, self.reason, self.valid)


class RewardRequest(Record):
    """One sample as a reward callable sees it (a copy, yours to keep):
    prompt, completion (str), completion_tokens, reference (str or None),
    metadata_json (str or None; `metadata` parses it), group_id,
    sample_index, policy_version, batch_index."""

    @property
    def metadata(self):
        return None if self.metadata_json is None else json.loads(self.metadata_json)


def _str_at(ptr, n):
    return ctypes.string_at(ptr, n).decode("utf-8", "replace") if ptr else ""


def _request(r):
    return RewardRequest(
        prompt=_str_at(r.prompt_text, r.prompt_len), completion=_str_at(r.completion_text, r.completion_len),
        completion_tokens=from_c(r.completion_tokens, r.n_completion_tokens, c_int32),
        reference=None if r.reference is None else r.reference.decode("utf-8", "replace"),
        metadata_json=None if r.metadata_json is None else r.metadata_json.decode("utf-8", "replace"),
        group_id=r.group_id, sample_index=r.sample_index, policy_version=r.policy_version,
        batch_index=r.batch_index)


def _set_reason(res, reason):
    res.reason = utf8_truncate(to_bytes(str(reason)), _ffi.REWARD_REASON_MAX - 1)


def _last_line():
    """The last line of the exception being handled, e.g. "KeyError: 'x'"."""
    lines = traceback.format_exc().strip().splitlines()
    return lines[-1] if lines else "exception in the reward callable"


def _write(res, value, n_tokens):
    """Writes a callable's answer into an rlp_reward_result."""
    if value is None:
        res.valid = 0
        _set_reason(res, "no score")
        return
    if isinstance(value, Reward):
        r = value
    elif isinstance(value, tuple) and len(value) == 2:
        r = Reward(value[0], value[1])
    elif isinstance(value, dict):
        r = Reward(**value)
    elif isinstance(value, numbers.Real):
        res.score = float(value)
        return
    else:
        raise TypeError("a reward must be a number, (score, reason), a Reward, a dict or None, not %s"
                        % type(value).__name__)
    if r.reason:
        _set_reason(res, r.reason)
    if not r.valid or r.score is None:
        res.valid = 0
        if not r.reason:
            _set_reason(res, "no score")
        return
    res.score = float(r.score)
    for key, buf, conv in (("token_scores", res.token_scores, float), ("step_ends", res.step_ends,
                                                                        lambda v: 1 if v else 0)):
        vals = getattr(r, key)
        if vals is None:
            continue
        vals = list(vals)
        if len(vals) != n_tokens:
            raise ValueError("%s has %d entries for %d completion tokens" % (key, len(vals), n_tokens))
        for i, v in enumerate(vals):
            buf[i] = conv(v)
        if key == "token_scores":
            res.has_token_scores = 1


# ---- the registry of callables the library may still call ---------------------

_registry = {}
_registry_lock = threading.Lock()
_keys = itertools.count(1)


def _payload_free(payload):
    try:
        with _registry_lock:
            _registry.pop(payload, None)
    except BaseException:
        pass


_PAYLOAD_FREE = _ffi.PayloadFreeFn(_payload_free)  # module-global: lives as long as the process


def registered_callables():
    """How many Python reward trampolines the library may still call
    (for tests and leak checks)."""
    with _registry_lock:
        return len(_registry)


def _single_trampoline(fn, owner_ref):
    def trampoline(res_ptr, req_ptr, payload):
        try:
            res = res_ptr.contents
            try:
                req = req_ptr.contents
                with callback_scope(owner_ref()):
                    _write(res, fn(_request(req)), req.n_completion_tokens)
                return 0
            except InvalidSample as e:
                res.valid = 0
                _set_reason(res, str(e) or "invalid sample")
                return 0
            except BaseException:
                _set_reason(res, _last_line())
                return 1
        except BaseException:
            return 1
    return _ffi.RewardCallback(trampoline)


def _batch_trampoline(fn, owner_ref):
    def trampoline(res_ptr, req_ptr, n, payload):
        try:
            try:
                reqs = [req_ptr[i] for i in range(n)]
                with callback_scope(owner_ref()):
                    values = fn([_request(r) for r in reqs])
                    values = list(values) if values is not None else None
                    if values is None or len(values) != n:
                        raise ValueError("the batch reward returned %s results for %d samples"
                                         % ("no" if values is None else len(values), n))
                    for i, v in enumerate(values):
                        res = res_ptr[i]
                        if isinstance(v, InvalidSample):  # the batch form's way to mark one sample
                            res.valid = 0
                            _set_reason(res, str(v) or "invalid sample")
                        else:
                            _write(res, v, reqs[i].n_completion_tokens)
                return 0
            except BaseException:
                reason = _last_line()
                for i in range(n):
                    _set_reason(res_ptr[i], reason)
                return 1
        except BaseException:
            return 1
    return _ffi.RewardBatchCallback(trampoline)


class RewardFn(Handle):
    """A reward function.

    RewardFn(fn, name=None, n_threads=0, timeout_ms=10000, max_abandoned=16)
        fn(request: RewardRequest) -> score (see the module doc).
    RewardFn.batched(fn, batch_size=64, ...)
        fn(requests: list[RewardRequest]) -> list of scores, same order.
    RewardFn.builtin(name, options=None), RewardFn.http(url, ...),
    RewardFn.isolated(library, options=None, ...) (worker processes),
    RewardFn.combine(fns, weights=None).
    """

    _free = "rlp_reward_fn_free"

    def __init__(self, fn, name=None, n_threads=0, timeout_ms=10000, max_abandoned=16):
        self._create(fn, False, name, n_threads, timeout_ms, 0, max_abandoned)

    @classmethod
    def batched(cls, fn, batch_size=64, name=None, n_threads=0, timeout_ms=10000, max_abandoned=16):
        """A reward scoring up to @p batch_size samples per call of @p fn;
        several calls run in parallel on the workers."""
        self = cls.__new__(cls)
        self._create(fn, True, name, n_threads, timeout_ms, batch_size, max_abandoned)
        return self

    def _create(self, fn, batch, name, n_threads, timeout_ms, batch_size, max_abandoned):
        if not callable(fn):
            raise TypeError("the reward must be callable, not %s" % type(fn).__name__)
        keep = []
        opts = options(_ffi.RewardOptions, "rlp_reward_options_init",
                       {"name": name, "n_threads": n_threads, "timeout_ms": timeout_ms, "batch_size": batch_size,
                        "max_abandoned": max_abandoned}, keep, {"name": optional_str("name")}, what="RewardFn")
        opts.payload_free = _PAYLOAD_FREE
        holder = [None]
        owner_ref = lambda: holder[0]() if holder[0] is not None else None  # noqa: E731
        tramp = (_batch_trampoline if batch else _single_trampoline)(fn, owner_ref)
        key = next(_keys)
        with _registry_lock:
            _registry[key] = (tramp, fn)
        out = c_void_p()
        create = F.rlp_reward_fn_create_batch_callback if batch else F.rlp_reward_fn_create_callback
        # on failure the library has already called payload_free (the entry is gone)
        check(create(byref(out), tramp, byref(opts), c_void_p(key)),
              "rlp_reward_fn_create_batch_callback" if batch else "rlp_reward_fn_create_callback")
        Handle.__init__(self, out.value)
        holder[0] = weakref.ref(self)
        self.callable = fn

    @classmethod
    def builtin(cls, name, options=None):
        """A built-in reward: "logic_rl_format", "kk_answer", "logic_rl",
        "gsm8k", "boxed_math", "countdown", "exact_match", "regex_match",
        "lookup_em", "search_format", "tool_call_format", or "reward_model"
        (a learned ORM/PRM folder: {"model": DIR, ...}, docs/rewards.md);
        builtin_names() lists them. Options as a dict or JSON text."""
        out = c_void_p()
        check(F.rlp_reward_fn_create_builtin(byref(out), to_bytes(name, "name"), json_text(options)),
              "rlp_reward_fn_create_builtin")
        self = cls.__new__(cls)
        Handle.__init__(self, out.value)
        self.callable = None
        return self

    @classmethod
    def http(cls, url, api_key=None, name=None, **kw):
        """An HTTP verifier (protocol in rlpost.h, rlp_http_reward_options).
        Keywords: timeout_ms, connect_timeout_ms, max_retries, backoff_ms,
        batch_size, max_in_flight, max_response_bytes, send_tokens."""
        keep = []
        values = dict(kw, url=url, api_key=api_key, name=name)
        opts = options(_ffi.HttpRewardOptions, "rlp_http_reward_options_init", values, keep,
                       {"url": optional_str("url"), "api_key": optional_str("api_key"),
                        "name": optional_str("name")}, what="RewardFn.http")
        out = c_void_p()
        check(F.rlp_reward_fn_create_http(byref(out), byref(opts)), "rlp_reward_fn_create_http")
        self = cls.__new__(cls)
        Handle.__init__(self, out.value)
        self.callable = None
        return self

    @classmethod
    def isolated(cls, library, options=None, name=None, worker_path=None, **kw):
        """A reward library (a shared object exporting rlpost_reward_create,
        as `reward.library` of `rlpost train`) run in worker processes: a
        crash or hang marks the samples in flight invalid ("reward worker
        killed by SIGSEGV") instead of killing Python (rlpost.h,
        rlp_reward_fn_create_isolated). options as a dict or JSON text.
        Keywords: n_workers, timeout_ms, batch_size, max_restarts."""
        keep = []
        values = dict(kw, name=name, worker_path=worker_path)
        opts = _options_struct(_ffi.IsolationOptions, "rlp_isolation_options_init", values, keep,
                              {"name": optional_str("name"), "worker_path": optional_str("worker_path")},
                              what="RewardFn.isolated")
        out = c_void_p()
        check(F.rlp_reward_fn_create_isolated(byref(out), to_bytes(str(library), "library"), json_text(options),
                                              byref(opts)), "rlp_reward_fn_create_isolated")
        self = cls.__new__(cls)
        Handle.__init__(self, out.value)
        self.callable = None
        return self

    @classmethod
    def combine(cls, fns, weights=None):
        """The weighted sum of reward functions. On success the combination
        owns the members: their Python objects are closed (further use
        raises ClosedError) and only the combination is to be closed."""
        fns = list(fns)
        if weights is not None and len(weights) != len(fns):
            raise ValueError("combine: %d weights for %d reward functions" % (len(weights), len(fns)))
        w = CArray(weights, ctypes.c_double, "weights", allow_none=True)
        out = c_void_p()
        uses = [f._use() for f in fns]
        ptrs = []
        try:
            for u in uses:
                ptrs.append(u.__enter__())
            arr = (c_void_p * max(len(ptrs), 1))(*ptrs)
            rc = F.rlp_reward_fn_combine(byref(out), arr, w.ptr, len(ptrs))
        finally:
            for u in uses[:len(ptrs)]:
                u.__exit__(None, None, None)
        check(rc, "rlp_reward_fn_combine")
        self = cls.__new__(cls)
        Handle.__init__(self, out.value)
        self.callable = None
        for f in fns:
            f._owned = False  # freed by the combination
            f.close()
        return self

    def set_refine(self, mode, eta=0.0):
        """Refine the per-token rewards the scorers give (RefineMode)."""
        with self._use() as p:
            check(F.rlp_reward_fn_set_refine(p, int(mode), float(eta)), "rlp_reward_fn_set_refine")

    def score(self, batch):
        """Scores every trajectory of a Batch (rewards set, or invalid with
        a reason); returns the call's counts: scored, skipped, valid,
        invalid, errors, timeouts, nonfinite, abandoned_running,
        mean_score, min_score, max_score, seconds, crashed."""
        batch._check_writable("score")
        st = _ffi.RewardStats()
        st.version = st._version_
        with self._use() as p, batch._use() as b:
            check(F.rlp_reward_fn_score(p, b, byref(st)), "rlp_reward_fn_score")
        return struct_record(st)

    def score_one(self, completion, prompt=None, reference=None, metadata=None, completion_tokens=None,
                  group_id=0, sample_index=0, policy_version=0):
        """Scores one sample outside a batch: Record(score, valid, reason)."""
        keep = []
        req = _ffi.RewardRequest()
        req.version = req._version_
        for field, length, value in (("prompt_text", "prompt_len", prompt),
                                     ("completion_text", "completion_len", completion or "")):
            if value is None:
                continue
            b = to_bytes(value, field)
            buf = ctypes.create_string_buffer(b, len(b) + 1)
            keep.append(buf)
            setattr(req, field, ctypes.cast(buf, ctypes.POINTER(ctypes.c_char)))
            setattr(req, length, len(b))
        if completion_tokens is not None:
            a = CArray(completion_tokens, c_int32, "completion_tokens")
            keep.append(a)
            req.completion_tokens, req.n_completion_tokens = a.ptr, a.n
        ref = to_bytes(reference, "reference")
        meta = json_text(metadata, "metadata")
        keep += [ref, meta]
        req.reference, req.metadata_json = ref, meta
        req.group_id, req.sample_index, req.policy_version = int(group_id), int(sample_index), int(policy_version)
        res = _ffi.RewardResult()
        with self._use() as p:
            check(F.rlp_reward_fn_score_one(byref(res), p, byref(req)), "rlp_reward_fn_score_one")
        return Record(score=res.score if res.valid else math.nan, valid=bool(res.valid),
                      reason=res.reason.decode("utf-8", "replace"))

    @property
    def name(self):
        """The handle's label (a built-in's name, the name option, "combine")."""
        with self._use() as p:
            n = F.rlp_reward_fn_name(p)
        return None if n is None else n.decode("utf-8", "replace")


def builtin_names():
    """Names of the built-in verifiers (rlp_reward_builtin_name())."""
    out = []
    for i in itertools.count():
        n = F.rlp_reward_builtin_name(i)
        if n is None:
            return out
        out.append(n.decode())


def refine(rewards, mode, eta=0.0, step_mask=None):
    """rlp_reward_refine() on a copy of @p rewards: Clip r_k <- min(r_k - eta, 0),
    Delta r_k <- r_k - r_{k+1} over the steps (entries where step_mask is
    true, or all). Returns the refined array (the argument is not changed)."""
    a = CArray(list(rewards), c_float, "rewards")  # a copy: the C function works in place
    m = CArray(None if step_mask is None else [1 if v else 0 for v in step_mask], c_uint8, "step_mask",
               allow_none=True)
    if m.ptr is not None and m.n != a.n:
        raise ValueError("step_mask has %d entries for %d rewards" % (m.n, a.n))
    check(F.rlp_reward_refine(a.ptr, a.n, m.ptr, int(mode), float(eta)), "rlp_reward_refine")
    return from_c(a.ptr, a.n, c_float)
