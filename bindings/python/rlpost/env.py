"""Environments (rlp_env) for multi-turn, tool-using episodes: Python
callables, HTTP services and built-in tool sets, and the synchronous
episode API (Env.start -> EnvEpisode.step) for harnesses and tests.

How a Python environment runs. The library calls reset/step/close on its
own worker threads (several episodes at once unless serialize=True; calls
of one episode never overlap) under a deadline (timeout_ms); the ctypes
trampoline takes the GIL for each call.

    def reset(metadata):              # the prompt's metadata (dict) or None
        return None                   # or an observation str, a dict, an EnvReply,
                                      # or (state, any of those)
    def step(action, action_ids, state=None):
        return {"observation": "<result>42</result>", "tool_call": True}

    env = rlpost.Env.from_callbacks(reset, step)

A reply (dict keys or EnvReply attributes): observation (str, appended as
plain text), observation_pieces ([(text, special)], special pieces encoded
with RLP_ENCODE_PARSE_SPECIAL: chat-template markers the environment wrote
itself), observation_tokens (ids), reward, done, tool_call, tool_error,
metadata (a dict, merged into the trajectory's metadata under "env").
The per-episode state is what reset returns first in a (state, reply)
tuple (else the metadata); step gets it as state= when its signature has
a `state` parameter, close(state) gets it at the end.

Failures. An exception in a callable marks that sample invalid with the
exception's last line as the reason (the callback returns non-zero); it
never reaches C and the run goes on. A call that overruns timeout_ms is
abandoned by the library and finishes on its own thread.

Lifetime. The trampolines are module-level and the callables live in a
registry entry that the library releases through free_user, after the
environment is freed and every abandoned call has returned: closing the
Env is always safe.
"""
import ctypes
import inspect
import itertools
import json
import numbers
import threading
import traceback
from ctypes import byref, c_int32, c_void_p

from . import _ffi
from ._handle import Handle, check
from ._util import CArray, json_text, options, text, to_bytes

F = _ffi.F

#: rlp_encode_flags RLP_ENCODE_PARSE_SPECIAL
_PARSE_SPECIAL = 1


class EnvReply:
    """A callable's full answer to one reset or step."""

    __slots__ = ("observation", "observation_pieces", "observation_tokens", "reward", "done", "tool_call",
                 "tool_error", "metadata", "state")

    def __init__(self, observation=None, observation_pieces=None, observation_tokens=None, reward=None,
                 done=False, tool_call=None, tool_error=None, metadata=None, state=None):
        self.observation = observation
        self.observation_pieces = observation_pieces
        self.observation_tokens = observation_tokens
        self.reward = reward
        self.done = done
        self.tool_call = tool_call
        self.tool_error = tool_error
        self.metadata = metadata
        self.state = state

    def __repr__(self):
        return "EnvReply(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__
                                          if getattr(self, k) not in (None, False))


def _as_reply(value):
    if value is None:
        return EnvReply()
    if isinstance(value, EnvReply):
        return value
    if isinstance(value, (str, bytes)):
        return EnvReply(observation=value)
    if isinstance(value, dict):
        return EnvReply(**value)  # an unknown key is a TypeError: the sample fails with it
    raise TypeError("an environment reply must be None, a str, a dict or an EnvReply, not %s"
                    % type(value).__name__)


def _rc(rc, what):
    if rc != 0:
        raise ValueError("%s refused (%s): %s" % (what, rc, text(F.rlp_error_last()) or ""))


def _write(reply, r):
    """Writes an EnvReply into the library's rlp_env_reply."""
    if r.observation is not None:
        b = to_bytes(r.observation, "observation")
        _rc(F.rlp_env_reply_add_text(reply, b, len(b), 0), "observation")
    for piece in r.observation_pieces or ():
        if isinstance(piece, dict):
            t, special = piece.get("text", ""), piece.get("special", False)
        elif isinstance(piece, (str, bytes)):
            t, special = piece, False
        else:
            t, special = piece
        b = to_bytes(t, "observation_pieces")
        _rc(F.rlp_env_reply_add_text(reply, b, len(b), _PARSE_SPECIAL if special else 0), "observation_pieces")
    if r.observation_tokens is not None:
        a = CArray(r.observation_tokens, c_int32, "observation_tokens")
        if a.n:
            _rc(F.rlp_env_reply_add_tokens(reply, a.ptr, a.n), "observation_tokens")
    if r.reward is not None:
        if not isinstance(r.reward, numbers.Real):
            raise TypeError("reward must be a number, not %s" % type(r.reward).__name__)
        _rc(F.rlp_env_reply_set_reward(reply, float(r.reward)), "reward")
    if r.done:
        _rc(F.rlp_env_reply_set_done(reply, 1), "done")
    if r.tool_call is not None:
        _rc(F.rlp_env_reply_set_tool_call(reply, 1 if r.tool_call else 0), "tool_call")
    if r.metadata is not None:
        _rc(F.rlp_env_reply_set_metadata(reply, json_text(r.metadata, "metadata")), "metadata")
    if r.tool_error is not None:
        _rc(F.rlp_env_reply_set_tool_error(reply, to_bytes(str(r.tool_error))), "tool_error")


def _fail(reply):
    """Reports the exception being handled as the call's failure."""
    try:
        lines = traceback.format_exc().strip().splitlines()
        msg = lines[-1] if lines else "exception in the environment"
        F.rlp_env_reply_set_tool_error(reply, msg.encode("utf-8", "replace"))
    except BaseException:
        pass
    return 1


# ---- the registry of callables the library may still call ---------------------

_lock = threading.Lock()
_envs = {}       # user key -> _Callables
_episodes = {}   # episode handle -> (user key, state)
_keys = itertools.count(1)


class _Callables:
    __slots__ = ("reset", "step", "close", "step_state")

    def __init__(self, reset, step, close):
        self.reset, self.step, self.close = reset, step, close
        try:
            params = inspect.signature(step).parameters.values()
            self.step_state = any(p.name == "state" or p.kind == p.VAR_KEYWORD for p in params)
        except (TypeError, ValueError):
            self.step_state = False


def _reset(episode, reply, metadata_json, user):
    try:
        with _lock:
            cb = _envs[user]
        meta = None if metadata_json is None else json.loads(metadata_json.decode("utf-8", "replace"))
        value = cb.reset(meta)
        state = meta
        if isinstance(value, tuple) and len(value) == 2:
            state, value = value
        r = _as_reply(value)
        if r.state is not None:
            state = r.state
        _write(reply, r)
        handle = next(_keys)
        with _lock:
            _episodes[handle] = (user, state)
        episode[0] = handle
        return 0
    except BaseException:
        return _fail(reply)


def _step(reply, episode, action, action_len, ids, n_ids, user):
    try:
        with _lock:
            cb = _envs[user]
            state = _episodes[episode][1] if episode else None
        a = ctypes.string_at(action, action_len).decode("utf-8", "replace") if action_len else ""
        action_ids = ids[:n_ids] if n_ids else []
        value = cb.step(a, action_ids, state=state) if cb.step_state else cb.step(a, action_ids)
        _write(reply, _as_reply(value))
        return 0
    except BaseException:
        return _fail(reply)


def _close(episode, user):
    try:
        with _lock:
            cb = _envs.get(user)
            entry = _episodes.pop(episode, None) if episode else None
        if cb is not None and cb.close is not None and entry is not None:
            cb.close(entry[1])
    except BaseException:
        pass  # close has no way to fail


def _free_user(user):
    try:
        with _lock:
            _envs.pop(user, None)
    except BaseException:
        pass


# module-global: these live as long as the process, so the library may call
# them whenever it likes
_RESET = _ffi.EnvResetFn(_reset)
_STEP = _ffi.EnvStepFn(_step)
_CLOSE = _ffi.EnvCloseFn(_close)
_FREE_USER = _ffi.EnvFreeUserFn(_free_user)


def registered_environments():
    """(environments, episodes) the library may still call back (for tests and leak checks)."""
    with _lock:
        return len(_envs), len(_episodes)


def _env_options(values, keep, what):
    values = {k: v for k, v in values.items() if v is not None}
    return options(_ffi.EnvOptions, "rlp_env_options_init", values, keep, what=what)


def _outcome(o):
    obs = ctypes.string_at(o.observation, o.observation_len).decode("utf-8", "replace") if o.observation else ""
    meta = text(o.metadata_json)
    return {"status": o.status, "error": text(o.error), "observation": obs,
            "n_observation_tokens": o.n_observation_tokens, "done": bool(o.done), "tool_call": bool(o.tool_call),
            "reward": float(o.reward) if o.has_reward else None, "tool_error": text(o.tool_error),
            "metadata": None if meta is None else json.loads(meta), "truncated": bool(o.truncated),
            "seconds": o.seconds}


class Env(Handle):
    """An environment: Env.from_callbacks(reset, step, ...), Env.http(url, ...),
    Env.builtin(name, options). Options (keywords): timeout_ms,
    max_threads, max_abandoned, max_observation_bytes, serialize."""

    _free = "rlp_env_free"

    def __init__(self, *a, **kw):
        raise TypeError("use Env.from_callbacks, Env.http or Env.builtin")

    @classmethod
    def _wrap(cls, ptr):
        self = cls.__new__(cls)
        Handle.__init__(self, ptr)
        return self

    @classmethod
    def from_callbacks(cls, reset, step, close=None, name=None, **opts):
        """An environment of Python callables (module doc)."""
        if not callable(reset) or not callable(step) or (close is not None and not callable(close)):
            raise TypeError("reset and step (and close, if given) must be callable")
        keep = []
        o = _env_options(opts, keep, "Env.from_callbacks")
        cb = _ffi.EnvCallbacks(_ffi.EnvCallbacks._version_, _RESET, _STEP, _CLOSE, _FREE_USER)
        key = next(_keys)
        with _lock:
            _envs[key] = _Callables(reset, step, close)
        out = c_void_p()
        rc = F.rlp_env_create(byref(out), to_bytes(name, "name"), byref(cb), c_void_p(key), byref(o))
        if rc < 0:
            _free_user(key)  # harmless if the library already did
        check(rc, "rlp_env_create")
        self = cls._wrap(out.value)
        self.callables = (reset, step, close)
        return self

    @classmethod
    def http(cls, url, api_key=None, **opts):
        """An environment served over HTTP (docs/environments.md; examples/env_server.py)."""
        keep = []
        o = _env_options(opts, keep, "Env.http")
        out = c_void_p()
        check(F.rlp_env_create_http(byref(out), to_bytes(url, "url"), to_bytes(api_key, "api_key"), byref(o)),
              "rlp_env_create_http")
        return cls._wrap(out.value)

    @classmethod
    def builtin(cls, name, options=None, **opts):
        """A built-in environment ("tools"); options as a dict or JSON text."""
        keep = []
        o = _env_options(opts, keep, "Env.builtin")
        out = c_void_p()
        check(F.rlp_env_create_builtin(byref(out), to_bytes(name, "name"), json_text(options), byref(o)),
              "rlp_env_create_builtin")
        return cls._wrap(out.value)

    @property
    def name(self):
        with self._use() as p:
            return text(F.rlp_env_name(p))

    def start(self, metadata=None):
        """Starts an episode (runs reset under the deadline): an EnvEpisode
        whose .first is reset's outcome (a dict: status, error,
        observation, n_observation_tokens, done, tool_call, reward or None,
        tool_error, metadata, truncated, seconds)."""
        o = _ffi.EnvOutcome()
        out = c_void_p()
        with self._use() as p:
            check(F.rlp_env_episode_start(byref(out), p, json_text(metadata, "metadata"), byref(o)),
                  "rlp_env_episode_start")
        ep = EnvEpisode(out.value, self)
        ep.first = _outcome(o)
        return ep


class EnvEpisode(Handle):
    """One episode of the synchronous API (Env.start); what an episode of a
    batch went through is rlpost.Episode (Trajectory.episode)."""

    _free = "rlp_env_episode_free"

    def __init__(self, ptr, env):
        Handle.__init__(self, ptr, parents=(env,))
        self.first = None

    def step(self, action, ids=None):
        """Runs one step under the deadline; returns its outcome (a dict,
        see Env.start). StateError after the episode ended or failed."""
        b = to_bytes(action, "action")
        a = CArray(ids or [], c_int32, "ids")
        o = _ffi.EnvOutcome()
        with self._use() as p:
            check(F.rlp_env_episode_step(byref(o), p, b, len(b), a.ptr, a.n), "rlp_env_episode_step")
        return _outcome(o)


def multiturn_options(env, max_turns=None, max_tokens=None, overlap=None):
    """An rlp_multiturn_options for @p env (its pointer must stay in use by the caller)."""
    keep = []
    values = {k: v for k, v in (("max_turns", max_turns), ("max_tokens", max_tokens),
                                ("overlap", overlap)) if v is not None}
    return options(_ffi.MultiturnOptions, "rlp_multiturn_options_init", values, keep, what="multiturn")
