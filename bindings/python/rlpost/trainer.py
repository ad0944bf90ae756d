"""The run loop as library code (include/rlpost/trainer.h): the trainer
(rlp_trainer: synchronous, sequential-pull and asynchronous RL runs over
a policy, a task and a reward), its producer half on its own (the rollout
worker, rlp_rollout_worker), and the confidence intervals of evaluations
(rlp_stats_*).

    with rlpost.Trainer(policy, task, reward, mode=rlpost.TrainMode.ASYNC, max_staleness=1,
                        prompts_per_step=8, seed=1, sampling={"n": 4, "max_new_tokens": 64},
                        rl={"kl_coef": 0.0}) as trainer:
        for _ in range(100):
            rec = trainer.step()
            print(rec.step, rec.reward_mean, rec.rl.loss)
        trainer.checkpoint("ckpt")
"""
import contextlib
import ctypes
import enum
import json
import threading
import weakref
from ctypes import byref, c_char_p, c_double, c_size_t, c_uint64, c_void_p

from . import _ffi
from ._handle import Handle, callback_scope, check
from ._util import (CArray, Record, StringArray, json_text, optional_str, options, server_stats, string_list,
                    struct_record, to_path)
from .batch import Batch
from .context import make_log_fn
from .errors import CallbackError, STATUS_CALLBACK, STATUS_OVERFLOW
from .policy import DType, rl_options
from .rollout import sampling_options
from .task import PromptSet

F = _ffi.F


class TrainMode(enum.IntEnum):
    """rlp_train_mode: how the rollout side keeps in step with training."""
    SYNC = 0   #: a co-located engine sharing the weights: generate, score, train (staleness 0)
    PULL = 1   #: Echo's sequential pull: a separate engine pulls each version before generating
    ASYNC = 2  #: Echo push-pull / AReaL: a rollout thread feeds a replay buffer under the staleness gate


class StepRecord(Record):
    """What one Trainer.step() did (rlp_step_record): step (1-based),
    policy_version (after it), epoch, sampling_seed, prompt_index (the
    task record indices of its prompts, a list), n_prompts, reward_mean /
    _std / _min / _max (NaN when no sample was valid), reward_valid,
    reward_errors / _timeouts / _nonfinite / _crashed, completions,
    completion_tokens, truncated, metric_mean and metric_rate (one entry
    per metric, in the order given; NaN when none valid), metrics (the
    same keyed by their mean_key / rate_key), rl (the RL step's stats, as
    Policy.train_rl() returns them), buffer_dropped, buffer_dropped_total,
    buffer_size, rollout_seconds, reward_seconds, train_seconds,
    publish_seconds, trainer_idle_seconds, rollout_idle_seconds,
    step_seconds, rollout_tokens, tokens_per_second."""


class EvalResult(Record):
    """What Trainer.evaluate() measured (rlp_eval_result): prompts,
    completions, correct, accuracy with its 95 % interval (accuracy_low,
    accuracy_high), reward_mean, mean_completion_tokens, truncated,
    seconds, per_prompt (each prompt's share of correct samples) and batch
    (the scored completions when asked for, else None)."""


class BatchView(Batch):
    """The scored batch an on_batch callable receives: readable like any
    Batch (len, [i], iteration, advantages()), not changeable, and closed
    when the call returns (copy what you need: Batch().append(t))."""

    _read_only = True

    def __init__(self, ptr):
        Handle.__init__(self, ptr, owned=False)


def _record(rec, keys):
    """A StepRecord of an rlp_step_record; @p keys: (mean_key, rate_key) per metric."""
    out = {}
    n = len(keys)
    for name, _ in rec._fields_:
        if name == "version":
            continue
        if name == "prompt_index":
            out[name] = [int(rec.prompt_index[i]) for i in range(rec.n_prompts)] if rec.prompt_index else []
        elif name in ("metric_mean", "metric_rate"):
            out[name] = list(getattr(rec, name))[:n]
        elif name == "rl":
            out[name] = struct_record(rec.rl)
        else:
            out[name] = getattr(rec, name)
    metrics = {}
    for i, (mean_key, rate_key) in enumerate(keys):
        if mean_key:
            metrics[mean_key] = out["metric_mean"][i]
        if rate_key:
            metrics[rate_key] = out["metric_rate"][i]
    out["metrics"] = metrics
    return StepRecord(**out)


def _multiturn(opts, multiturn):
    """Fills opts.multiturn from {"env": Env, "max_turns", "max_tokens", "overlap"}; returns the Env (or None)."""
    if multiturn is None:
        return None
    from .env import Env, multiturn_options
    mt = dict(multiturn)
    env = mt.pop("env", None)
    if not isinstance(env, Env):
        raise TypeError("multiturn needs \"env\": an rlpost.Env")
    opts.multiturn = multiturn_options(env, **mt)  # an unknown key is a TypeError
    return env


def _metric(i, m):
    """(fn, mean_key, rate_key, threshold) from a tuple or dict of the metrics option."""
    if isinstance(m, dict):
        unknown = set(m) - {"fn", "mean_key", "rate_key", "threshold"}
        if unknown:
            raise TypeError("metrics[%d]: unknown key(s) %s" % (i, ", ".join(sorted(unknown))))
        m = (m.get("fn"), m.get("mean_key"), m.get("rate_key"), m.get("threshold", 0.5))
    m = tuple(m)
    if not 2 <= len(m) <= 4:
        raise TypeError("metrics[%d] must be (RewardFn, mean_key, rate_key, threshold)" % i)
    fn, mean_key, rate_key, threshold = m + (None, 0.5)[len(m) - 2:]
    if not hasattr(fn, "_use"):
        raise TypeError("metrics[%d]: the first item must be a RewardFn, not %s" % (i, type(fn).__name__))
    if mean_key is None and rate_key is None:
        raise ValueError("metrics[%d]: give a mean_key, a rate_key or both" % i)
    return fn, mean_key, rate_key, float(threshold)


class Trainer(Handle):
    """Runs RL steps over a trainable policy, a task and a reward, and owns
    the rollout side (engines, synchronizer, replay buffer, the ASYNC
    rollout thread): rlp_trainer.

    Trainer(policy, task, reward, mode=TrainMode.SYNC, max_staleness=None,
            prompts_per_step=8, seed=0, sampling=None, rl=None, ref=None,
            tokenizer=None, max_seq_len=0, max_batch=0, rollout_threads=0,
            worker_urls=None, api_key=None, weights_dir=None,
            worker_timeout_ms=0, worker_retries=2, metrics=None,
            on_batch=None, comm=None, stall_polls=10, rollout_inbox=None,
            multiturn=None, rollout_weights=None, max_gen_batches=0, critic_path=None,
            critic_lr=0.0, critic_warmup=0, value_clip=0.5, gae_lambda=1.0)

    The keywords are the fields of rlp_trainer_options (trainer.h):
    - mode: a TrainMode. max_staleness: η of ASYNC (None: 1 in ASYNC, 0
      otherwise; SYNC and PULL refuse a non-zero η).
    - prompts_per_step: groups per RL step; seed: step k samples with a
      seed that is a pure function of (seed, k).
    - sampling: a dict of the sampling options of RolloutEngine.generate()
      (n is the group size; its seed is ignored); rl: a dict of the options
      of Policy.train_rl() (advantage, policy_loss, kl_coef, ppo_epochs...).
    - ref: a frozen Policy for a KL; tokenizer: a Tokenizer for a model
      without one (llama2.c checkpoints); rollout_threads: ASYNC with a local
      engine, 0 = the rollout side works on the policy's context, N = on a
      context of its own with N threads (same backend, device and seed).
    - worker_urls, api_key, weights_dir, worker_timeout_ms: `rlpost serve`
      workers for PULL and ASYNC; worker_retries: failed groups are
      generated again this many times; remote_workers=True: remote workers
      even with no worker_urls (they join later: set_worker_urls()).
    - metrics: a list of (RewardFn, mean_key, rate_key, threshold) scored
      on each step's batch for the record only (mean_key / rate_key may be
      None; at most 8); the record has them as rec.metrics[key].
    - on_batch(batch: BatchView, step: int): called on the stepping thread
      with each step's scored batch before it trains. If it raises, the
      step fails with CallbackError from that exception (and the trainer
      is failed, as after any failed step).
    - comm: a Comm for data parallelism (set it on the policy too).
    - stall_polls: ASYNC, 200 ms waits at a closed gate before a step
      fails as stalled.
    - multiturn: {"env": an rlpost.Env, "max_turns", "max_tokens",
      "overlap"}: every sample is a multi-turn episode against the
      environment (docs/environments.md); the record's episodes, turns_mean,
      tool_call_rate, ... say how they went. The trainer keeps the Env alive.
    - rollout_inbox: ASYNC fed by rollout workers of other processes
      (RolloutWorker(..., buffer=None, outbox_dir=that folder)): each step
      takes in their batch files; versions go to weights_dir as files.
    - rollout_weights: a RolloutWeights for the local engines (None: the
      library's default, F32).
    - max_gen_batches: DAPO dynamic sampling with rl={"filter_equal_groups":
      True}, SYNC and PULL on one rank: a step generates up to this many
      batches of prompts_per_step prompts until that many groups have
      unequal rewards (record: gen_batches, dynamic_dropped_groups); past it
      the step fails with StateError. 0: the filter alone.
    - critic_path: PPO with a critic, with rl={"advantage": "gae"} (which
      needs one): "policy" (a copy of the policy with a zero-initialised
      value head) or a saved critic's folder (an HF *ForTokenClassification
      with one output, e.g. a checkpoint's critic/); critic_lr (0: the
      policy's), critic_warmup (first steps train the critic only),
      value_clip (the value loss's clip, 0: none) and gae_lambda (GAE's λ).
      The record's value_loss, values_mean, returns_mean,
      value_explained_var, ... say how the critic does.

    The trainer keeps policy, task, reward, the metrics' functions, ref,
    tokenizer and comm alive while it exists (the
    C trainer borrows them), and closing any of them closes the trainer
    first. A trainer is used by one thread at a time; interrupt() may come
    from any thread.
    """

    _free = "rlp_trainer_free"

    def __init__(self, policy, task, reward, mode=TrainMode.SYNC, max_staleness=None, prompts_per_step=8, seed=0,
                 sampling=None, rl=None, ref=None, tokenizer=None, max_seq_len=0, max_batch=0, rollout_threads=0,
                 worker_urls=None, api_key=None, weights_dir=None, worker_timeout_ms=0, worker_retries=2,
                 metrics=None, on_batch=None, comm=None, stall_polls=10, rollout_inbox=None, multiturn=None,
                 rollout_weights=None, max_gen_batches=0, critic_path=None, critic_lr=0.0, critic_warmup=0,
                 value_clip=0.5, gae_lambda=1.0, remote_workers=False):
        keep = []
        if max_staleness is None:
            max_staleness = 1 if int(mode) == TrainMode.ASYNC else 0
        opts = options(_ffi.TrainerOptions, "rlp_trainer_options_init",
                       {"mode": int(mode), "max_staleness": max_staleness, "prompts_per_step": prompts_per_step,
                        "seed": seed, "max_seq_len": max_seq_len, "max_batch": max_batch, "rollout_threads": rollout_threads,
                        "worker_timeout_ms": worker_timeout_ms, "worker_retries": worker_retries,
                        "stall_polls": stall_polls, "worker_urls": worker_urls or [], "api_key": api_key,
                        "max_gen_batches": max_gen_batches, "critic_lr": critic_lr,
                        "critic_warmup": critic_warmup, "value_clip": value_clip, "gae_lambda": gae_lambda,
                        "remote_workers": bool(remote_workers),
                        "critic_path": None if critic_path is None else str(critic_path),
                        "weights_dir": None if weights_dir is None else str(weights_dir),
                        "rollout_inbox": None if rollout_inbox is None else str(rollout_inbox)}, keep,
                       {"worker_urls": string_list("worker_urls", "n_worker_urls"),
                        "api_key": optional_str("api_key"), "weights_dir": optional_str("weights_dir"),
                        "rollout_inbox": optional_str("rollout_inbox"), "critic_path": optional_str("critic_path")},
                       what="Trainer")
        opts.sampling = sampling_options(sampling or {}, keep)
        opts.rl = rl_options(rl, what="Trainer rl")
        if rollout_weights is not None:
            opts.rollout_weights = int(rollout_weights)
        mt_env = _multiturn(opts, multiturn)
        metrics = [_metric(i, m) for i, m in enumerate(metrics or ())]
        if metrics:
            arr = (_ffi.TrainerMetric * len(metrics))()
            keep.append(arr)
            opts.metrics = ctypes.cast(arr, ctypes.POINTER(_ffi.TrainerMetric))
            opts.n_metrics = len(metrics)
        self._metric_keys = [(m[1], m[2]) for m in metrics]
        failure = []
        holder = [None]
        if on_batch is not None:
            if not callable(on_batch):
                raise TypeError("on_batch must be callable, not %s" % type(on_batch).__name__)

            def trampoline(batch_ptr, step, payload):
                try:
                    with callback_scope(holder[0]() if holder[0] is not None else None):
                        view = BatchView(batch_ptr)
                        try:
                            on_batch(view, int(step))
                        finally:
                            view.close()
                    return 0
                except BaseException as e:
                    failure.append(e)
                    return 1
            fn = _ffi.TrainerBatchFn(trampoline)
            keep.append(fn)
            opts.on_batch = fn
        self._failure = failure
        parents = [policy, task, reward] + [m[0] for m in metrics] + [ref, tokenizer, comm, mt_env]
        out = c_void_p()
        with contextlib.ExitStack() as uses:
            p, t, r = (uses.enter_context(h._use()) for h in (policy, task, reward))
            for i, m in enumerate(metrics):
                arr[i].fn = uses.enter_context(m[0]._use())
                for field, key in (("mean_key", m[1]), ("rate_key", m[2])):
                    b = None if key is None else str(key).encode()
                    keep.append(b)
                    setattr(arr[i], field, b)
                arr[i].threshold = m[3]
            for field, h in (("ref", ref), ("tokenizer", tokenizer), ("comm", comm)):
                if h is not None:
                    setattr(opts, field, uses.enter_context(h._use()))
            if mt_env is not None:
                opts.multiturn.env = uses.enter_context(mt_env._use())
            check(F.rlp_trainer_create(byref(out), p, t, r, byref(opts)), "rlp_trainer_create")
            Handle.__init__(self, out.value, parents=parents)
        self._keep = keep  # the on_batch trampoline (C calls it) and the options' memory
        holder[0] = weakref.ref(self)
        self.policy, self.task, self.reward = policy, task, reward
        self.mode = TrainMode(mode)

    def _before_free(self, ptr):
        if self._busy:
            F.rlp_trainer_interrupt(ptr)  # a step waiting for rollouts on another thread returns

    def step(self):
        """Runs one RL step (rlp_trainer_step()): takes the step's groups
        (SYNC, PULL: generated and scored now; ASYNC: the rollout thread's,
        at most η versions old), scores the metrics, calls on_batch, trains
        and publishes the new version. Returns a StepRecord.

        Raises ClosedError when interrupt() stopped a step waiting for
        rollouts (nothing was trained; the trainer stays usable) or after
        stop(); CallbackError when on_batch raised; StateError once an
        earlier step failed (close the trainer and resume the run from a
        checkpoint); TimeoutError when the ASYNC staleness gate can never
        open again; otherwise the failing part's error. After any error but
        ClosedError the trainer is failed."""
        rec = _ffi.StepRecord()
        rec.version = rec._version_
        del self._failure[:]
        with self._use() as p:
            rc = F.rlp_trainer_step(p, byref(rec))
            if rc == STATUS_CALLBACK and self._failure:
                exc = self._failure[0]
                del self._failure[:]
                raise CallbackError("rlp_trainer_step: on_batch raised %s: %s" % (type(exc).__name__, exc),
                                    STATUS_CALLBACK, "rlp_trainer_step") from exc
            check(rc, "rlp_trainer_step")
            return _record(rec, self._metric_keys)  # prompt_index is valid until the next step

    def step_json(self):
        """The last step's record as the dict of one metrics.jsonl line
        (rlp_trainer_step_json()); StateError before the first step."""
        n = c_size_t()
        cap = 4096
        with self._use() as p:
            while True:
                buf = ctypes.create_string_buffer(cap)
                rc = F.rlp_trainer_step_json(p, buf, cap, byref(n))
                if rc == STATUS_OVERFLOW and n.value + 1 > cap:
                    cap = n.value + 1
                    continue
                check(rc, "rlp_trainer_step_json")
                return json.loads(buf.raw[:n.value].decode("utf-8"))

    def interrupt(self):
        """Makes a step waiting for rollouts (ASYNC) return with
        ClosedError, nothing trained. Safe from any thread."""
        with self._use() as p:
            check(F.rlp_trainer_interrupt(p), "rlp_trainer_interrupt")

    def stop(self):
        """Stops the rollout side (ASYNC: the rollout thread ends, a
        generation in flight is aborted, nothing half-done is pushed), e.g.
        before a final evaluate(). Later steps raise ClosedError."""
        with self._use() as p:
            check(F.rlp_trainer_stop(p), "rlp_trainer_stop")

    @property
    def steps_done(self):
        """Steps done, resumed ones included."""
        v = c_uint64()
        with self._use() as p:
            check(F.rlp_trainer_steps_done(byref(v), p), "rlp_trainer_steps_done")
        return v.value

    def async_stats(self):
        """ASYNC: (buffer, rollout) counters since creation: the replay
        buffer's (as ReplayBuffer.stats()) and the rollout worker's (as
        RolloutWorker.stats()); accepted + restored = consumed +
        dropped_stale + size. StateError on a trainer that is not ASYNC."""
        b, w = _ffi.BufferStats(), _ffi.RolloutWorkerStats()
        b.version, w.version = b._version_, w._version_
        with self._use() as p:
            check(F.rlp_trainer_async_stats(byref(b), byref(w), p), "rlp_trainer_async_stats")
        r = struct_record(w)
        r.at_gate, r.running = bool(r.at_gate), bool(r.running)
        return struct_record(b), r

    def set_worker_urls(self, urls):
        """Replaces the remote workers of a running trainer (worker_urls or
        remote_workers=True): the rollout engine's servers and those told to
        load each version. Thread-safe against step() on another thread."""
        arr = StringArray(urls, "urls")
        with self._use() as p:
            check(F.rlp_trainer_set_worker_urls(p, arr.ptr, arr.n), "rlp_trainer_set_worker_urls")

    def server_stats(self):
        """Per-worker counters of a trainer with remote workers (as
        RolloutEngine.server_stats()); StateError otherwise."""
        with self._use() as p:
            return server_stats("rlp_trainer_server_stats", p)

    def checkpoint(self, dir, dtype=DType.F32, host=None):
        """Writes a checkpoint into folder @p dir (created; files replaced
        atomically): the weights (Policy.save() with @p dtype), the
        optimizer state and the trainer's state (step, task cursor, the
        options a resume must match), with @p host (a dict or JSON object
        text) stored under "host". Load a policy from @p dir and resume()
        a trainer over it to continue."""
        with self._use() as p:
            check(F.rlp_trainer_checkpoint(p, to_path(dir), int(dtype), json_text(host, "host")),
                  "rlp_trainer_checkpoint")

    def resume(self, dir):
        """Continues the run of checkpoint folder @p dir: restores the
        optimizer state, the task cursor and the step count. The policy
        must hold the checkpoint's weights (load it from @p dir); call it
        before the first step (else StateError). InvalidArgumentError names
        the option the checkpoint was taken with otherwise."""
        with self._use() as p:
            check(F.rlp_trainer_resume(p, to_path(dir)), "rlp_trainer_resume")

    def _sampling(self, sampling, kw, keep):
        values = dict(sampling or {})
        values.update(kw)
        return sampling_options(values, keep)

    def generate(self, prompt_set, sampling=None, **sampling_kw):
        """Generates completions of a PromptSet (Task.next_batch()) with the
        trainer's current weights; returns a Batch (unscored). Sampling
        options as for RolloutEngine.generate() (n, temperature,
        max_new_tokens, seed...). Not while a step runs."""
        if not isinstance(prompt_set, PromptSet):
            raise TypeError("generate takes a PromptSet (Task.next_batch()), not %s" % type(prompt_set).__name__)
        keep = []
        so = self._sampling(sampling, sampling_kw, keep)
        out = c_void_p()
        with self._use() as p, prompt_set._use() as ps:
            check(F.rlp_trainer_generate(byref(out), p, ps, byref(so)), "rlp_trainer_generate")
        return Batch(_ptr=out.value)

    def evaluate(self, prompt_set, verifier, threshold, sampling=None, return_batch=False, **sampling_kw):
        """Evaluates the current weights on held-out prompts: generates
        (generate()) and scores every completion with @p verifier (a
        RewardFn); a completion is correct when it scores ≥ @p threshold.
        Returns an EvalResult (with per_prompt, and the scored Batch as
        .batch when @p return_batch). Sampling options as for generate()
        (n samples per prompt; temperature 0 is greedy)."""
        if not isinstance(prompt_set, PromptSet):
            raise TypeError("evaluate takes a PromptSet (Task.next_batch()), not %s" % type(prompt_set).__name__)
        keep = []
        so = self._sampling(sampling, sampling_kw, keep)
        res = _ffi.EvalResult()
        res.version = res._version_
        out = c_void_p()
        with self._use() as p, prompt_set._use() as ps, verifier._use() as v:
            n = len(prompt_set)
            per = (c_double * max(n, 1))()
            check(F.rlp_trainer_evaluate(byref(res), p, ps, byref(so), v, float(threshold), per,
                                         byref(out) if return_batch else None), "rlp_trainer_evaluate")
        r = struct_record(res)
        return EvalResult(per_prompt=[per[i] for i in range(n)],
                          batch=Batch(_ptr=out.value) if return_batch else None, **vars(r))


class RolloutWorker(Handle):
    """The producer half of an asynchronous run (rlp_rollout_worker): per
    batch it admits prompts_per_batch groups through the synchronizer's
    staleness gate, pulls the latest version into the engine, draws the
    prompts from the task, generates (retrying failed groups), scores with
    the reward and pushes the groups whole, each tagged with where it came
    from, into the replay buffer.

    RolloutWorker(engine, task, reward, synchronizer, buffer,
                  prompts_per_batch=8, seed=0, first_batch=0, sampling=None,
                  tokenizer=None, retries=2, remote=None, log=None, outbox_dir=None,
                  multiturn=None)

    sampling: a dict of the sampling options of RolloutEngine.generate() (n
    is the group size; its seed is ignored: batch j draws with a seed that
    is a pure function of (seed, j + 1), and first_batch is the j of the
    first batch). tokenizer: renders prompts and decodes completions for an
    engine without a tokenizer. remote: the engine is `rlpost serve`
    workers (None: whether it was made by RolloutEngine.remote()). log: a
    callable(level, message) for warnings (None: stderr). outbox_dir: a
    worker in another process than its trainer writes each batch there as
    a batch file (buffer None; the trainer's rollout_inbox). The buffer
    should judge staleness by the synchronizer's η: make it with
    ReplayBuffer(sync=synchronizer). multiturn: as for Trainer, {"env":
    an rlpost.Env, "max_turns", "max_tokens", "overlap"}: batches are
    multi-turn episodes against the environment.

    The worker keeps engine, task, reward, synchronizer, buffer,
    tokenizer and the multiturn Env alive, and closing any of them closes it first. run_once()
    works on the calling thread; start() runs batches on a thread of the
    worker until stop() or a failure (see error).
    """

    _free = "rlp_rollout_worker_free"

    def __init__(self, engine, task, reward, synchronizer, buffer, prompts_per_batch=8, seed=0, first_batch=0,
                 sampling=None, tokenizer=None, retries=2, remote=None, log=None, outbox_dir=None,
                 multiturn=None):
        keep = []
        holder = [None]
        if remote is None:
            remote = getattr(engine, "policy", None) is None
        opts = options(_ffi.RolloutWorkerOptions, "rlp_rollout_worker_options_init",
                       {"prompts_per_batch": prompts_per_batch, "seed": seed, "first_batch": first_batch,
                        "retries": retries, "remote": bool(remote),
                        "outbox_dir": None if outbox_dir is None else str(outbox_dir)}, keep,
                       {"outbox_dir": optional_str("outbox_dir")}, what="RolloutWorker")
        opts.sampling = sampling_options(sampling or {}, keep)
        mt_env = _multiturn(opts, multiturn)
        if log is not None:
            fn = make_log_fn(holder, log, "the rollout worker's log callback")
            keep.append(fn)
            opts.log_fn = fn
        out = c_void_p()
        with contextlib.ExitStack() as uses:
            ptrs = [uses.enter_context(h._use()) if h is not None else None
                    for h in (engine, task, reward, synchronizer, buffer)]
            if tokenizer is not None:
                opts.tokenizer = uses.enter_context(tokenizer._use())
            if mt_env is not None:
                opts.multiturn.env = uses.enter_context(mt_env._use())
            check(F.rlp_rollout_worker_create(byref(out), *ptrs, byref(opts)), "rlp_rollout_worker_create")
            Handle.__init__(self, out.value,
                            parents=(engine, task, reward, synchronizer, buffer, tokenizer, mt_env))
        self._keep = keep
        self._stop_lock = threading.Lock()
        holder[0] = weakref.ref(self)
        self.engine, self.task, self.reward = engine, task, reward
        self.synchronizer, self.buffer = synchronizer, buffer

    def _before_free(self, ptr):
        if self._busy:
            # a run_once() on another thread may wait at the gate or on a full
            # buffer: closing them (what stop() does for the worker's thread)
            # and aborting the engine make it return
            with self._stop_lock:
                F.rlp_rollout_worker_stop(ptr)
            for h, close in ((self.synchronizer, F.rlp_synchronizer_close),
                             (self.buffer, F.rlp_replay_buffer_close),
                             (self.engine, F.rlp_rollout_engine_abort)):
                if h is not None and h._ptr is not None:
                    close(h._ptr)
        else:
            with self._stop_lock:
                F.rlp_rollout_worker_stop(ptr)

    def run_once(self):
        """Produces one batch on this thread (admit, pull, generate, score,
        push). ClosedError when the gate or the buffer was closed or the
        worker stopped; the failing part's error otherwise."""
        with self._use() as p:
            check(F.rlp_rollout_worker_run_once(p), "rlp_rollout_worker_run_once")

    def add_engine(self, engine):
        """Another engine (a lane) before start(): one thread per engine,
        each producing whole batches, drawn and pushed in one order (see
        rlp_rollout_worker_add_engine). The engine is kept alive with the
        worker."""
        with self._use() as p, engine._use() as e:
            check(F.rlp_rollout_worker_add_engine(p, e), "rlp_rollout_worker_add_engine")
        engine._adopt(self)  # the engine outlives the worker (it is closed first)
        self._parents += (engine,)

    def start(self):
        """Starts the worker's thread(s): batches until stop() or a failure
        (StateError when it runs already)."""
        with self._use() as p:
            check(F.rlp_rollout_worker_start(p), "rlp_rollout_worker_start")

    def stop(self):
        """Stops the worker's thread: closes the synchronizer's gate and the
        buffer (for good: a later run_once() raises ClosedError), aborts a
        generation in flight and joins; nothing half-done is pushed."""
        with self._use() as p, self._stop_lock:
            check(F.rlp_rollout_worker_stop(p), "rlp_rollout_worker_stop")

    @property
    def error(self):
        """None while the worker is healthy, else the message of the
        failure that ended its thread (or a run_once())."""
        msg = c_char_p()
        with self._use() as p:
            rc = F.rlp_rollout_worker_error(p, byref(msg))
            if rc == 0:
                return None
            text = msg.value.decode("utf-8", "replace") if msg.value else ""
        if not text:
            s = F.rlp_status_str(rc)
            text = s.decode() if s else "status %d" % rc
        return text

    def stats(self):
        """Counters since creation: batches, groups_pushed, groups_released
        (admitted but not pushed), tokens, generate_seconds,
        reward_seconds, idle_seconds (at the gate or a full buffer),
        reward_errors / _timeouts / _nonfinite / _crashed, at_gate and
        running (bools). Thread-safe."""
        s = _ffi.RolloutWorkerStats()
        s.version = s._version_
        with self._use() as p:
            check(F.rlp_rollout_worker_stats_get(byref(s), p), "rlp_rollout_worker_stats_get")
        r = struct_record(s)
        r.at_gate, r.running = bool(r.at_gate), bool(r.running)
        return r


# ---- confidence intervals of evaluations -----------------------------------------------

#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054


def stats_wilson(hits, n, z=Z95):
    """The Wilson score interval (Wilson 1927) of @p hits successes in @p n
    trials at normal quantile @p z: (low, high), both NaN when n = 0."""
    lo, hi = c_double(), c_double()
    check(F.rlp_stats_wilson(byref(lo), byref(hi), int(hits), int(n), float(z)), "rlp_stats_wilson")
    return lo.value, hi.value


def stats_bootstrap_mean(x, resamples=2000, seed=0):
    """The percentile-bootstrap 95 % interval of the mean of @p x (a
    sequence of numbers), with @p resamples resamples from a splitmix64
    stream started at @p seed (reproducible): (low, high); NaN for no
    values, (x0, x0) for one."""
    a = CArray(x, c_double, "x")
    lo, hi = c_double(), c_double()
    check(F.rlp_stats_bootstrap_mean(byref(lo), byref(hi), a.ptr, a.n, int(resamples), int(seed)),
          "rlp_stats_bootstrap_mean")
    return lo.value, hi.value


def stats_bootstrap_paired(a, b, resamples=2000, seed=0):
    """The same for the mean of the paired differences b[i] − a[i] (two
    evaluations of the same prompts, e.g. EvalResult.per_prompt before
    and after training): (low, high)."""
    ca, cb = CArray(a, c_double, "a"), CArray(b, c_double, "b")
    if ca.n != cb.n:
        raise ValueError("stats_bootstrap_paired: %d values in a, %d in b" % (ca.n, cb.n))
    lo, hi = c_double(), c_double()
    check(F.rlp_stats_bootstrap_paired(byref(lo), byref(hi), ca.ptr, cb.ptr, ca.n, int(resamples), int(seed)),
          "rlp_stats_bootstrap_paired")
    return lo.value, hi.value

