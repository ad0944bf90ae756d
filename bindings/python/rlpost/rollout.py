"""Rollout engines (rlp_rollout_engine): local batched sampling on a
policy, or remote OpenAI-compatible servers."""
import ctypes
import enum
from ctypes import byref, c_int32, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, callback_scope, check
from ._util import (CArray, Record, StringArray, json_text, int_list, options, optional_str, server_stats,
                    string_list, struct_record, to_bytes, to_path)
from .batch import Batch, FinishReason
from .errors import CallbackError, STATUS_CALLBACK
from .tokenizer import Tokenizer

F = _ffi.F


class LogprobsMode(enum.IntEnum):
    """rlp_logprobs_mode"""
    SAMPLING = 0
    TEMPERED = 1
    RAW = 2


class InterruptMode(enum.IntEnum):
    """rlp_interrupt_mode"""
    RECOMPUTE = 0
    ABORT = 1
    DEFER = 2


class RolloutWeights(enum.IntEnum):
    """rlp_rollout_weights: what a local engine decodes with"""
    F32 = 0
    Q8_0 = 1
    AUTO = 2
    Q4_0 = 3


_SAMPLING_SPECIAL = {
    "stop": string_list("stop", "n_stop"),
    "stop_token_ids": int_list("stop_token_ids", "n_stop_token_ids"),
}


def sampling_options(values, keep):
    """An rlp_sampling_options from keywords: n, temperature, top_k, top_p,
    min_p, max_new_tokens, seed, stop (strings), stop_token_ids,
    include_stop_str, ignore_eos, logprobs_mode."""
    values = dict(values)
    if "logprobs_mode" in values:
        values["logprobs_mode"] = int(values["logprobs_mode"])
    return options(_ffi.SamplingOptions, "rlp_sampling_options_init", values, keep, _SAMPLING_SPECIAL,
                   what="sampling")


def _prompts(prompts, keep):
    """Python prompts -> (rlp_prompt array, count)."""
    if isinstance(prompts, (str, bytes, dict)):
        prompts = [prompts]
    items = list(prompts)
    arr = (_ffi.Prompt * max(len(items), 1))()
    for i, pr in enumerate(items):
        c = arr[i]
        if isinstance(pr, (str, bytes)):
            pr = {"text": pr}
        elif not isinstance(pr, dict):
            pr = {"tokens": pr}
        unknown = set(pr) - {"tokens", "text", "group_id", "metadata", "metadata_json", "sampling"}
        if unknown:
            raise TypeError("prompts[%d]: unknown key(s) %s" % (i, ", ".join(sorted(unknown))))
        if pr.get("tokens") is not None:
            a = CArray(pr["tokens"], c_int32, "prompts[%d].tokens" % i)
            keep.append(a)
            c.tokens, c.n_tokens = a.ptr, a.n
        if pr.get("text") is not None:
            b = to_bytes(pr["text"], "prompts[%d].text" % i)
            keep.append(b)
            c.text = b
        c.group_id = int(pr.get("group_id", 0))
        meta = pr.get("metadata", pr.get("metadata_json"))
        if meta is not None:
            b = json_text(meta, "metadata")
            keep.append(b)
            c.metadata_json = b
        if pr.get("sampling") is not None:
            so = sampling_options(pr["sampling"], keep)
            keep.append(so)
            c.sampling = ctypes.pointer(so)
    return arr, len(items)


class StreamEvent(Record):
    """One streamed token: prompt_index, sample_index, token (-1 on a final
    event without one), logprob, policy_version, text (safe to show),
    finish_reason (NONE while running)."""


class RolloutEngine(Handle):
    """Generates n sampled completions per prompt with behaviour logprobs
    and version tags.

    RolloutEngine(policy, max_batch=32, max_seq_len=0,
                  interrupt_mode=InterruptMode.RECOMPUTE, share_weights=False,
                  weights=RolloutWeights.F32)
    makes a local engine; RolloutEngine.remote(urls, tokenizer, ...) one on
    OpenAI-compatible servers. A local engine keeps its policy alive and
    is closed with it.
    """

    _free = "rlp_rollout_engine_free"

    def __init__(self, policy, max_batch=32, max_seq_len=0, interrupt_mode=InterruptMode.RECOMPUTE,
                 share_weights=False, weights=RolloutWeights.F32):
        opts = options(_ffi.RolloutOptions, "rlp_rollout_options_init",
                       {"max_batch": max_batch, "max_seq_len": max_seq_len,
                        "interrupt_mode": int(interrupt_mode), "share_weights": share_weights,
                        "weights": int(weights)}, [],
                       what="RolloutEngine")
        out = c_void_p()
        with policy._use() as p:
            check(F.rlp_rollout_engine_create(byref(out), p, byref(opts)), "rlp_rollout_engine_create")
            Handle.__init__(self, out.value, parents=(policy,))
        self.policy = policy
        self._given_tokenizer = None
        self._tokenizer = None

    @classmethod
    def remote(cls, urls, tokenizer=None, model=None, api_key=None, timeout_ms=0, max_retries=3,
               max_in_flight=0, max_response_bytes=0):
        """An engine on OpenAI-compatible `POST {url}/v1/completions`
        servers (round-robin over @p urls). @p tokenizer encodes text
        prompts and decodes completions (None: token prompts only); it is
        kept alive by the engine."""
        keep = []
        opts = options(_ffi.RemoteOptions, "rlp_remote_options_init",
                       {"urls": urls, "model": model, "api_key": api_key, "timeout_ms": timeout_ms,
                        "max_retries": max_retries, "max_in_flight": max_in_flight,
                        "max_response_bytes": max_response_bytes}, keep,
                       {"urls": string_list("urls", "n_urls"), "model": optional_str("model"),
                        "api_key": optional_str("api_key")}, what="RolloutEngine.remote")
        out = c_void_p()
        eng = cls.__new__(cls)
        if tokenizer is not None:
            with tokenizer._use() as t:
                check(F.rlp_rollout_engine_create_remote(byref(out), t, byref(opts)),
                      "rlp_rollout_engine_create_remote")
                Handle.__init__(eng, out.value, parents=(tokenizer,))
        else:
            check(F.rlp_rollout_engine_create_remote(byref(out), None, byref(opts)),
                  "rlp_rollout_engine_create_remote")
            Handle.__init__(eng, out.value)
        eng.policy = None
        eng._given_tokenizer = tokenizer
        eng._tokenizer = None
        return eng

    def _before_free(self, ptr):
        if self._busy:
            F.rlp_rollout_engine_abort(ptr)  # a generate call on another thread ends at once

    def generate(self, prompts, sampling=None, on_token=None, **sampling_kw):
        """Generates completions; returns a Batch, prompt-major and
        sample-minor (trajectory i*n + j is sample j of prompt i).

        prompts: a PromptSet (from Task.next_batch), or a list whose items
        are a str (text, encoded as plain text), a sequence of token ids, or
        a dict with "tokens"/"text", "group_id", "metadata" (dict or JSON
        text) and "sampling" (that prompt's own options).
        Sampling options as a dict or keywords: n, temperature, top_k,
        top_p, min_p, max_new_tokens, seed, stop, stop_token_ids,
        include_stop_str, ignore_eos, logprobs_mode.
        on_token(event: StreamEvent) is called on this thread for every
        token; a true return aborts that sequence. If it raises, the
        sequence is aborted and generate raises CallbackError from it.
        """
        return self._generate(prompts, sampling, on_token, sampling_kw, None)

    def generate_episodes(self, prompts, sampling=None, env=None, max_turns=None, max_tokens=None, overlap=True,
                          on_token=None, **sampling_kw):
        """Runs multi-turn episodes against @p env (an rlpost.Env): like
        generate(), but each sample is an episode whose turns end where a
        completion would (a stop string such as "</calculator>", a stop
        token, EOS) and whose observations are appended as token ids with
        loss mask 0 (rlp_rollout_generate_episodes). max_turns (default
        8), max_tokens (0: the KV capacity), overlap (other sequences keep
        decoding while an environment call runs)."""
        from .env import Env, multiturn_options
        if not isinstance(env, Env):
            raise TypeError("generate_episodes needs env=, an rlpost.Env")
        mt = multiturn_options(env, max_turns, max_tokens, 1 if overlap else 0)
        with env._use() as e:
            mt.env = e
            return self._generate(prompts, sampling, on_token, sampling_kw, mt)

    def _generate(self, prompts, sampling, on_token, sampling_kw, mt):
        fname = "rlp_rollout_generate" if mt is None else "rlp_rollout_generate_episodes"
        keep = []
        values = dict(sampling or {})
        values.update(sampling_kw)
        so = sampling_options(values, keep)
        from .task import PromptSet
        prompt_set = prompts if isinstance(prompts, PromptSet) else None
        if prompt_set is None:
            arr, n = _prompts(prompts, keep)
        failure = []
        fn = _ffi.StreamFn()  # NULL: no stream callback
        if on_token is not None:
            if not callable(on_token):
                raise TypeError("on_token must be callable")
            owner = self

            def trampoline(ev_ptr, payload):
                try:
                    with callback_scope(owner):
                        e = ev_ptr.contents
                        ev = StreamEvent(prompt_index=e.prompt_index, sample_index=e.sample_index,
                                         token=e.token, logprob=e.logprob, policy_version=e.policy_version,
                                         text=ctypes.string_at(e.text, e.text_len).decode("utf-8", "replace")
                                         if e.text else "",
                                         finish_reason=FinishReason(e.finish_reason))
                        return 1 if on_token(ev) else 0
                except BaseException as exc:
                    if not failure:
                        failure.append(exc)
                    return 1
            fn = _ffi.StreamFn(trampoline)
        out = c_void_p()

        def call(p, prompts_ptr, n):
            if mt is None:
                return F.rlp_rollout_generate(byref(out), p, prompts_ptr, n, byref(so), fn, None)
            return F.rlp_rollout_generate_episodes(byref(out), p, prompts_ptr, n, byref(so), byref(mt), fn, None)
        with self._use() as p:
            if prompt_set is not None:
                with prompt_set._use() as ps:
                    rc = call(p, F.rlp_prompt_set_prompts(ps), len(prompt_set))
            else:
                rc = call(p, arr, n)
        check(rc, fname)
        batch = Batch(_ptr=out.value)
        if failure:
            batch.close()
            raise CallbackError("%s: on_token raised %s: %s"
                                % (fname, type(failure[0]).__name__, failure[0]), STATUS_CALLBACK,
                                fname) from failure[0]
        return batch

    def update_weights(self, policy):
        """Copies @p policy's weights (and version) into a local engine;
        safe while another thread generates (interrupt mode applies)."""
        with self._use() as p, policy._use() as q:
            check(F.rlp_rollout_engine_update_weights(p, q), "rlp_rollout_engine_update_weights")

    def load_weights(self, path, version):
        """Loads a folder written by Policy.save() and takes @p version."""
        with self._use() as p:
            check(F.rlp_rollout_engine_load_weights(p, to_path(path), int(version)),
                  "rlp_rollout_engine_load_weights")

    @property
    def version(self):
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_rollout_engine_version(byref(v), p), "rlp_rollout_engine_version")
        return v.value

    def set_version(self, version):
        """Tells a remote engine which version its servers now hold."""
        with self._use() as p:
            check(F.rlp_rollout_engine_set_version(p, int(version)), "rlp_rollout_engine_set_version")

    def set_urls(self, urls):
        """Replaces a remote engine's servers while it runs (an empty list
        is allowed: requests then wait for one up to their timeout);
        StateError on a local engine. Thread-safe."""
        arr = StringArray(urls, "urls")
        with self._use() as p:
            check(F.rlp_rollout_engine_set_urls(p, arr.ptr, arr.n), "rlp_rollout_engine_set_urls")

    def server_stats(self):
        """A remote engine's counters per server ever in its set: url,
        in_set, requests_ok, requests_failed, completions,
        completion_tokens, last_weight_version (-1: none), versioned,
        staleness_max, staleness_sum. StateError on a local engine."""
        with self._use() as p:
            return server_stats("rlp_rollout_engine_server_stats", p)

    def abort(self):
        """Ends every sequence in flight (FinishReason.ABORT); thread-safe."""
        with self._use() as p:
            check(F.rlp_rollout_engine_abort(p), "rlp_rollout_engine_abort")

    @property
    def tokenizer(self):
        """The tokenizer the engine decodes with (borrowed), or None."""
        with self._use() as p:
            ptr = F.rlp_rollout_engine_tokenizer(p)
            if not ptr:
                return None
            t = self._given_tokenizer
            if t is not None and not t.closed and t._ptr == ptr:
                return t
            if self._tokenizer is None or self._tokenizer.closed or self._tokenizer._ptr != ptr:
                self._tokenizer = Tokenizer._borrowed(ptr, self)
            return self._tokenizer

    def stats(self):
        """Counters since creation: prompts, completions, prefill/decode
        tokens, decode steps, interrupts, remote errors, seconds."""
        s = _ffi.RolloutStats()
        s.version = s._version_
        with self._use() as p:
            check(F.rlp_rollout_engine_stats(byref(s), p), "rlp_rollout_engine_stats")
        return struct_record(s)
