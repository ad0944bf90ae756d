"""Batches of trajectories (rlp_batch): what rollout, reward, replay buffer
and the RL step share."""
import enum
import json
import math
from ctypes import byref, c_float, c_int32, c_size_t, c_uint8, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, check
from .errors import STATUS_STATE, StateError
from ._util import CArray, Record, from_c, json_text, struct_record, text, to_bytes, to_path
from .policy import rl_options

F = _ffi.F


class FinishReason(enum.IntEnum):
    """rlp_finish_reason"""
    NONE = 0
    STOP = 1
    LENGTH = 2
    ABORT = 3
    ERROR = 4


class EpisodeEnd(enum.IntEnum):
    """rlp_episode_end: how a multi-turn episode ended"""
    RUNNING = 0
    DONE = 1
    MAX_TURNS = 2
    BUDGET = 3
    ERROR = 4
    ABORT = 5


class Episode(Record):
    """What happened in one multi-turn episode (rlp_episode_stats): turns
    (model turns), tool_calls, tool_errors, tool_timeouts,
    observation_tokens (appended with loss mask 0), observations_cut, end
    (an EpisodeEnd) and tool_seconds (the environment's wall time)."""


_EPISODE_KEYS = ("turns", "tool_calls", "tool_errors", "tool_timeouts", "observation_tokens", "observations_cut",
                 "end", "tool_seconds")


def _c_episode(value, what):
    """An Episode or a dict -> rlp_episode_stats (missing fields 0, end DONE)."""
    values = dict(value if isinstance(value, dict) else vars(value))
    unknown = set(values) - set(_EPISODE_KEYS)
    if unknown:
        raise TypeError("%s: unknown episode field(s) %s" % (what, ", ".join(sorted(unknown))))
    e = _ffi.EpisodeStats()
    e.version = e._version_
    for key in _EPISODE_KEYS[:6]:
        v = int(values.get(key, 0))
        if not 0 <= v < 2 ** 32:
            raise ValueError("%s: episode %s = %d is outside 0 .. 2**32 - 1" % (what, key, v))
        setattr(e, key, v)
    e.end = int(values.get("end", EpisodeEnd.DONE))
    e.tool_seconds = float(values.get("tool_seconds", 0.0))
    return e


class Provenance(Record):
    """Where a trajectory came from (rlp_provenance): prompt_index (the
    prompt's record index in its task), epoch and position (the task epoch
    it was served in and its place in that epoch's order), sampling_seed
    (the seed its group was drawn with) and batch (the producer's 0-based
    batch number: the RL step it was made for, - 1)."""


_PROVENANCE_KEYS = ("prompt_index", "epoch", "position", "sampling_seed", "batch")


def _c_provenance(value, fields, what):
    """A Provenance, a dict and/or keywords -> rlp_provenance (missing fields 0)."""
    values = {}
    if value is not None:
        values.update(value if isinstance(value, dict) else vars(value))
    values.update(fields)
    unknown = set(values) - set(_PROVENANCE_KEYS)
    if unknown:
        raise TypeError("%s: unknown provenance field(s) %s" % (what, ", ".join(sorted(unknown))))
    p = _ffi.Provenance()
    p.version = p._version_
    for key in _PROVENANCE_KEYS:
        v = int(values.get(key, 0))
        if not 0 <= v < 2 ** 64:
            raise ValueError("%s: provenance %s = %d is outside 0 .. 2**64 - 1" % (what, key, v))
        setattr(p, key, v)
    return p


class Trajectory(Record):
    """One prompt and one sampled completion, copied out of a batch:
    group_id, prompt_tokens, completion_tokens, logprobs (behaviour, nats),
    token_versions, prompt_text, completion_text, policy_version,
    finish_reason, stop_index, temperature, reward (NaN until scored),
    valid, error, metadata_json, sample_index, token_rewards (or None),
    provenance (a Provenance, or None when the producer set none),
    loss_mask (one 0/1 per completion token: 0 for an observation token of
    a multi-turn episode, which gets no gradient; None = all the model's)
    and episode (an Episode, or None for a single-turn sample).
    `metadata` parses metadata_json."""

    @property
    def metadata(self):
        return None if self.metadata_json is None else json.loads(self.metadata_json)


_APPEND_KEYS = ("group_id", "prompt_tokens", "completion_tokens", "logprobs", "token_versions", "prompt_text",
                "completion_text", "policy_version", "finish_reason", "stop_index", "temperature", "reward",
                "valid", "error", "metadata_json", "metadata", "sample_index", "token_rewards", "provenance",
                "loss_mask", "episode")


def _or_empty(v):
    return () if v is None else v


class Batch(Handle):
    """A batch of trajectories. Batch() is empty; RolloutEngine.generate()
    and ReplayBuffer.pull() return full ones. len(batch), batch[i] (a
    Trajectory copy) and iteration read it."""

    _free = "rlp_batch_free"
    _read_only = False  # a batch borrowed from the library for a callback (trainer.BatchView)

    def _check_writable(self, what):
        if self._read_only:
            raise StateError("%s: this batch is borrowed read-only for a callback; copy its trajectories into "
                             "a Batch of your own (Batch().append(t))" % what, STATUS_STATE, None)

    def __init__(self, _ptr=None):
        if _ptr is None:
            out = c_void_p()
            check(F.rlp_batch_create(byref(out)), "rlp_batch_create")
            _ptr = out.value
        Handle.__init__(self, _ptr)

    def __len__(self):
        n = c_size_t()
        with self._use() as p:
            check(F.rlp_batch_size(byref(n), p), "rlp_batch_size")
        return n.value

    @property
    def size(self):
        return len(self)

    def __getitem__(self, index):
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("trajectory index %d out of range (batch of %d)" % (index, n))
        t = _ffi.Trajectory()
        t.version = t._version_
        with self._use() as p:
            check(F.rlp_batch_get(byref(t), p, index), "rlp_batch_get")
            nc = t.n_completion_tokens
            return Trajectory(
                group_id=t.group_id, prompt_tokens=from_c(t.prompt_tokens, t.n_prompt_tokens, c_int32),
                completion_tokens=from_c(t.completion_tokens, nc, c_int32),
                logprobs=from_c(t.logprobs, nc, c_float), token_versions=from_c(t.token_versions, nc, c_uint64),
                prompt_text=text(t.prompt_text), completion_text=text(t.completion_text),
                policy_version=t.policy_version, finish_reason=FinishReason(t.finish_reason),
                stop_index=t.stop_index, temperature=t.temperature, reward=t.reward, valid=bool(t.valid),
                error=text(t.error), metadata_json=text(t.metadata_json), sample_index=t.sample_index,
                token_rewards=from_c(t.token_rewards, nc, c_float) if t.token_rewards else None,
                provenance=Provenance(**{k: getattr(t.provenance, k) for k in _PROVENANCE_KEYS})
                if t.has_provenance else None,
                loss_mask=from_c(t.loss_mask, nc, c_uint8) if t.loss_mask else None,
                episode=Episode(**{k: getattr(t.episode, k) for k in _EPISODE_KEYS[:6]},
                                end=EpisodeEnd(t.episode.end), tool_seconds=t.episode.tool_seconds)
                if t.has_episode else None)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def write_file(self, path):
        """rlp_batch_write_file(): the batch's scored groups as one batch
        file (spill format, checksummed, written atomically): how a rollout
        worker in another process hands groups to a trainer's inbox."""
        with self._use() as p:
            check(F.rlp_batch_write_file(p, to_path(path)), "rlp_batch_write_file")

    @classmethod
    def read_file(cls, path):
        """rlp_batch_read_file(): a batch file as a new Batch (every length,
        count and checksum checked: FormatError on a damaged file)."""
        out = c_void_p()
        check(F.rlp_batch_read_file(byref(out), to_path(path)), "rlp_batch_read_file")
        return cls(_ptr=out.value)

    def append(self, trajectory=None, **fields):
        """Appends a copy of a trajectory: a Trajectory (e.g. another batch's
        batch[i]), a dict, or keywords (group_id, prompt_tokens,
        completion_tokens, logprobs, token_versions, prompt_text,
        completion_text, policy_version, finish_reason, stop_index,
        temperature, reward, valid, error, metadata / metadata_json,
        sample_index, token_rewards, provenance: a Provenance or a dict,
        loss_mask: one 0/1 per completion token, episode: an Episode or a
        dict). Defaults: finish STOP, stop_index -1, temperature 1, reward
        NaN (unscored), valid, no provenance, no mask, no episode."""
        self._check_writable("append")
        values = {}
        if trajectory is not None:
            values.update(trajectory if isinstance(trajectory, dict) else vars(trajectory))
        values.update(fields)
        unknown = set(values) - set(_APPEND_KEYS)
        if unknown:
            raise TypeError("append: unknown trajectory field(s) %s" % ", ".join(sorted(unknown)))
        t = _ffi.Trajectory()
        t.version = t._version_
        keep = []
        comp = CArray(_or_empty(values.get("completion_tokens")), c_int32, "completion_tokens")
        prm = CArray(_or_empty(values.get("prompt_tokens")), c_int32, "prompt_tokens")
        keep += [comp, prm]
        t.prompt_tokens, t.n_prompt_tokens = prm.ptr, prm.n
        t.completion_tokens, t.n_completion_tokens = comp.ptr, comp.n
        for key, ctype in (("logprobs", c_float), ("token_versions", c_uint64), ("token_rewards", c_float),
                           ("loss_mask", c_uint8)):
            v = values.get(key)
            if v is not None:
                a = CArray(v, ctype, key)
                if a.n != comp.n:
                    raise ValueError("append: %s has %d entries for %d completion tokens" % (key, a.n, comp.n))
                keep.append(a)
                setattr(t, key, a.ptr)
        for key in ("prompt_text", "completion_text", "error"):
            b = to_bytes(values.get(key), key)
            keep.append(b)
            setattr(t, key, b)
        meta = values.get("metadata_json")
        if values.get("metadata") is not None:
            meta = values["metadata"]
        meta = json_text(meta, "metadata")
        keep.append(meta)
        t.metadata_json = meta
        t.group_id = int(values.get("group_id", 0))
        t.policy_version = int(values.get("policy_version", 0))
        t.finish_reason = int(values.get("finish_reason", FinishReason.STOP))
        t.stop_index = int(values.get("stop_index", -1))
        t.temperature = float(values.get("temperature", 1.0))
        r = values.get("reward")
        t.reward = math.nan if r is None else float(r)
        t.valid = 1 if values.get("valid", True) else 0
        t.sample_index = int(values.get("sample_index", 0))
        if values.get("provenance") is not None:
            t.has_provenance = 1
            t.provenance = _c_provenance(values["provenance"], {}, "append")
        if values.get("episode") is not None:
            t.has_episode = 1
            t.episode = _c_episode(values["episode"], "append")
        with self._use() as p:
            check(F.rlp_batch_append(p, byref(t)), "rlp_batch_append")

    def extend(self, other):
        """Moves every trajectory of another Batch to the end of this one
        (the other becomes empty)."""
        self._check_writable("extend")
        if other is self:
            raise ValueError("extend: a batch cannot be extended with itself")
        other._check_writable("extend")
        with self._use() as p, other._use() as o:
            check(F.rlp_batch_extend(p, o), "rlp_batch_extend")

    def set_reward(self, index, reward):
        self._check_writable("set_reward")
        with self._use() as p:
            check(F.rlp_batch_set_reward(p, int(index), float(reward)), "rlp_batch_set_reward")

    def set_token_rewards(self, index, rewards):
        """Per-token (process) rewards of trajectory @p index, one per
        completion token; None clears them."""
        self._check_writable("set_token_rewards")
        a = CArray(rewards, c_float, "rewards", allow_none=True)
        with self._use() as p:
            check(F.rlp_batch_set_token_rewards(p, int(index), a.ptr, a.n), "rlp_batch_set_token_rewards")

    def set_invalid(self, index, reason):
        self._check_writable("set_invalid")
        with self._use() as p:
            check(F.rlp_batch_set_invalid(p, int(index), to_bytes(reason, "reason")), "rlp_batch_set_invalid")

    def set_provenance(self, index, provenance=None, **fields):
        """Sets where trajectory @p index came from: a Provenance, a dict
        and/or keywords (prompt_index, epoch, position, sampling_seed,
        batch; missing ones are 0). An index outside the batch raises
        InvalidArgumentError."""
        self._check_writable("set_provenance")
        c = _c_provenance(provenance, fields, "set_provenance")
        with self._use() as p:
            check(F.rlp_batch_set_provenance(p, int(index), byref(c)), "rlp_batch_set_provenance")

    def set_group_provenance(self, group_id, provenance=None, **fields):
        """Sets the provenance (as set_provenance) of every trajectory of
        group @p group_id; NotFoundError when the batch has none."""
        self._check_writable("set_group_provenance")
        c = _c_provenance(provenance, fields, "set_group_provenance")
        with self._use() as p:
            check(F.rlp_batch_set_group_provenance(p, int(group_id), byref(c)), "rlp_batch_set_group_provenance")

    def advantages(self, **kw):
        """The advantage each trajectory gets from the RL step's estimator
        (rlp_rl_advantages()): a list of floats, NaN where the step would
        drop the trajectory. Keywords are rlp_rl_options fields (advantage,
        adv_eps, adv_batch_norm, gamma, ...), as for Policy.train_rl()."""
        opts = rl_options(kw, what="advantages")
        n = len(self)
        out = (c_float * max(n, 1))()
        with self._use() as p:
            check(F.rlp_rl_advantages(out, n, p, byref(opts)), "rlp_rl_advantages")
        return [float(out[i]) for i in range(n)]

    def logprob_mismatch(self, policy):
        """Recomputes the completions' logprobs with @p policy and compares
        them with the behaviour logprobs: n_tokens, mean_abs, max_abs,
        mean_ratio_dev."""
        m = _ffi.MismatchStats()
        m.version = m._version_
        with self._use() as p, policy._use() as q:
            check(F.rlp_batch_logprob_mismatch(byref(m), p, q), "rlp_batch_logprob_mismatch")
        return struct_record(m)
