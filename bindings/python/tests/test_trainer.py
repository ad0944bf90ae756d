"""The trainer and the rollout worker (include/rlpost/trainer.h) on
stories260K with the 512-piece stand-in tokenizer and small K&K prompts:
the step record, the three modes agreeing bit for bit, checkpoint and
resume, misuse, on_batch, interrupt and stop, generation and evaluation,
the rollout worker with an in-process synchronizer and a replay buffer,
and the confidence intervals."""
import gc
import json
import math
import os
import subprocess
import threading
import time

import pytest

import rlpost

from conftest import ROOT

KK = {"seed": 1, "people": 2, "template": "none"}
OPTS = dict(prompts_per_step=2, seed=5, sampling={"n": 2, "max_new_tokens": 8})


def length_reward(req):
    """A cheap reward with spread inside a group: 0, 0.5 or 1 by completion length."""
    return len(req.completion) % 3 / 2.0


@pytest.fixture
def reward():
    with rlpost.RewardFn(length_reward, name="length") as r:
        yield r


def run(ctx, model, tok, reward, steps, **kw):
    """(records, trainer's step_json) of a fresh policy and task trained @p steps steps."""
    with rlpost.Policy(ctx, model) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok, **dict(OPTS, **kw)) as tr:
        recs = [tr.step() for _ in range(steps)]
        return recs, tr.step_json()


def test_sync_steps_and_their_record(ctx, stories_path, tok512, reward):
    seen = []

    def on_batch(batch, step):
        assert isinstance(batch, rlpost.BatchView) and not batch.closed
        rewards = [t.reward for t in batch if t.valid]
        seen.append((step, len(batch), sum(rewards) / len(rewards), {t.group_id for t in batch}))
        with pytest.raises(rlpost.StateError, match="read-only"):
            batch.set_reward(0, 1.0)
        with pytest.raises(rlpost.StateError):
            rlpost.Batch().extend(batch)
        seen.append(batch)

    fmt = rlpost.RewardFn(lambda r: float("a" in r.completion))
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, metrics=[(fmt, "has_a_mean", "has_a_rate", 0.5)],
                           on_batch=on_batch, **OPTS) as tr:
        assert tr.mode == rlpost.TrainMode.SYNC and tr.steps_done == 0
        with pytest.raises(rlpost.StateError):
            tr.step_json()  # no step yet
        with pytest.raises(rlpost.StateError, match="not in ASYNC"):
            tr.async_stats()
        r1, r2 = tr.step(), tr.step()
        assert isinstance(r1, rlpost.StepRecord)
        assert (r1.step, r2.step) == (1, 2) and (r1.policy_version, r2.policy_version) == (1, 2)
        assert pol.version == 2 and tr.steps_done == 2
        assert r1.prompt_index == [0, 1] and r2.prompt_index == [2, 3] and r1.n_prompts == 2 and r1.epoch == 0
        for r, (step, n, mean, groups) in zip((r1, r2), seen[0::2]):
            assert math.isfinite(r.reward_mean) and r.reward_mean == pytest.approx(mean)  # the batch on_batch saw
            assert r.reward_valid == r.completions == n == 4 and len(groups) == 2
            assert 0.0 <= r.reward_min <= r.reward_mean <= r.reward_max <= 1.0
            assert r.completion_tokens == 4 * 8 and r.truncated == 4 and r.reward_errors == 0
            assert len(r.metric_mean) == len(r.metric_rate) == 1
            assert r.metrics == {"has_a_mean": r.metric_mean[0], "has_a_rate": r.metric_rate[0]}
            assert 0.0 <= r.metrics["has_a_rate"] <= 1.0
            assert r.rl.n_seqs == 4 and r.rl.n_groups == 2 and r.rl.optimizer_steps == 1
            assert r.rl.policy_version == r.policy_version and math.isfinite(r.rl.loss)
            assert r.step_seconds > 0 and r.train_seconds > 0 and r.rollout_tokens == r.completion_tokens
        assert [s[0] for s in seen[0::2]] == [1, 2]
        assert all(b.closed for b in seen[1::2])  # the views end with their call
        assert r1.sampling_seed != r2.sampling_seed
        js = tr.step_json()
        assert js["step"] == 2 and js["policy_version"] == 2 and js["prompt_index"] == [2, 3]
        assert js["reward_mean"] == r2.reward_mean and js["has_a_rate"] == r2.metrics["has_a_rate"]
        assert js["sampling_seed"] == r2.sampling_seed and json.loads(json.dumps(js)) == js
    fmt.close()


def test_async_at_staleness_0_and_pull_equal_sync(ctx, stories_path, tok512, reward):
    sync, _ = run(ctx, stories_path, tok512, reward, 2)
    for mode, kw in ((rlpost.TrainMode.ASYNC, {"max_staleness": 0}), (rlpost.TrainMode.PULL, {})):
        other, _ = run(ctx, stories_path, tok512, reward, 2, mode=mode, **kw)
        for a, b in zip(sync, other):
            # bit for bit by design (trainer.h): exact comparisons
            assert (b.step, b.policy_version, b.prompt_index, b.sampling_seed) == \
                (a.step, a.policy_version, a.prompt_index, a.sampling_seed)
            assert b.reward_mean == a.reward_mean and b.rl.loss == a.rl.loss
            assert b.rl.grad_norm == a.rl.grad_norm and b.rl.entropy == a.rl.entropy
            assert b.rl.staleness_max == 0


@pytest.fixture
def serve_url(stories_path, tmp_path):
    """An `rlpost serve` worker process on stories260K (skips without the driver)."""
    driver = os.environ.get("RLPOST_DRIVER") or str(ROOT / "build" / "examples" / "rlpost" / "rlpost")
    if not os.access(driver, os.X_OK):
        pytest.skip("no rlpost driver (RLPOST_DRIVER)")
    weights = tmp_path / "weights"
    weights.mkdir()
    proc = subprocess.Popen([driver, "serve", str(stories_path), "--port", "0", "--weights-dir", str(weights),
                             "--threads", "1", "--max-seq-len", "512"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read()
            if "needs libmicrohttpd" in err:
                pytest.skip("the driver was built without libmicrohttpd")
            pytest.fail("rlpost serve did not start: " + err)
        yield json.loads(line)["listening"], weights
    finally:
        proc.terminate()
        proc.wait(30)


def test_http_pull_at_least_holds_requests_at_the_server(policy, serve_url):
    """pull_at_least over HTTP returns at once; the remote engine's requests
    carry min_weight_version, and `rlpost serve` holds them until the
    version it is being told to load has arrived."""
    url, weights = serve_url
    with rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.HTTP, dir=weights,
                             urls=[url], timeout_ms=30000) as sync, rlpost.RolloutEngine.remote([url]) as eng:
        policy.train_step([([1, 2, 3, 4], 1)])
        sync.publish(policy)
        v = policy.version
        assert v >= 1
        sync.pull_at_least(eng, v)
        b = eng.generate([[1, 2, 3]], n=2, max_new_tokens=4)
        assert all(t.policy_version == v for t in b)
        assert b.logprob_mismatch(policy).max_abs < 1e-3  # generated with the published weights
        # the servers can change; an empty set tells nobody
        sync.set_urls([])
        sync.pull_at_least(eng, 0)
        sync.set_urls([url])
        with pytest.raises(rlpost.InvalidArgumentError):
            sync.set_urls(["ftp://nowhere"])


def test_remote_workers_async_at_staleness_0_equals_pull(ctx, stories_path, tok512, reward, serve_url):
    url, weights = serve_url
    texts = []
    records = []
    for mode, kw in ((rlpost.TrainMode.PULL, {}), (rlpost.TrainMode.ASYNC, {"max_staleness": 0})):
        recs, _ = run(ctx, stories_path, tok512, reward, 2, mode=mode, worker_urls=[url], weights_dir=weights,
                      on_batch=lambda b, step: texts.append([t.completion_text for t in b]), **kw)
        records.append(recs)
    for a, b in zip(*records):
        assert (b.step, b.policy_version, b.prompt_index) == (a.step, a.policy_version, a.prompt_index)
        assert b.reward_mean == a.reward_mean and b.rl.grad_norm == a.rl.grad_norm
    # the server has no tokenizer for stories260K: the completions are decoded with the host's
    assert texts[:2] == texts[2:] and all(any(t for t in step) for step in texts)
    with pytest.raises(rlpost.InvalidArgumentError, match="weights_dir"):
        rlpost.Trainer(rlpost.Policy(ctx, stories_path), rlpost.Task("kk", KK), reward, tokenizer=tok512,
                       mode=rlpost.TrainMode.PULL, worker_urls=[url])


def test_remote_workers_join_later(ctx, stories_path, tok512, reward, serve_url):
    # a swarm's trainer: remote workers, none at creation; the worker joins before the first step
    url, weights = serve_url
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, mode=rlpost.TrainMode.PULL, prompts_per_step=2,
                           sampling={"n": 2, "max_new_tokens": 8}, weights_dir=weights,
                           remote_workers=True) as tr:
        assert tr.server_stats() == []
        tr.set_worker_urls([url])
        rec = tr.step()
        assert rec.completions == 4
        st = tr.server_stats()
        assert [(s.url, s.in_set) for s in st] == [(url, 1)]
        assert st[0].requests_ok == 2 and st[0].completions == 4 and st[0].last_weight_version == 0
        tr.set_worker_urls([])
        assert tr.server_stats()[0].in_set == 0
        with pytest.raises(rlpost.InvalidArgumentError):
            tr.set_worker_urls(["nope"])
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, prompts_per_step=2) as local:
        with pytest.raises(rlpost.StateError):
            local.set_worker_urls([url])
        with pytest.raises(rlpost.StateError):
            local.server_stats()


def test_checkpoint_and_resume(ctx, stories_path, tok512, reward, tmp_path):
    straight, _ = run(ctx, stories_path, tok512, reward, 3)
    ck = tmp_path / "ck"
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, **OPTS) as tr:
        tr.step(), tr.step()
        tr.checkpoint(ck, host={"note": "two steps"})
        with pytest.raises(rlpost.InvalidArgumentError):
            tr.checkpoint(tmp_path / "bad", host="[1, 2]")  # not a JSON object
        with pytest.raises(rlpost.StateError, match="before the first step"):
            tr.resume(ck)  # a step already ran
    assert "two steps" in "".join(p.read_text() for p in ck.glob("*.json"))
    with rlpost.Policy(ctx, ck) as pol, rlpost.Task("kk", KK) as task:
        with rlpost.Trainer(pol, task, reward, tokenizer=tok512, **dict(OPTS, prompts_per_step=3)) as other:
            with pytest.raises(rlpost.InvalidArgumentError, match="prompts_per_step"):
                other.resume(ck)
            with pytest.raises(rlpost.NotFoundError):
                other.resume(tmp_path)  # not a checkpoint
        with rlpost.Trainer(pol, task, reward, tokenizer=tok512, **OPTS) as tr:
            tr.resume(ck)
            assert tr.steps_done == 2 and pol.version == 2
            r3 = tr.step()
            assert tr.steps_done == 3
    # the resumed run goes on as if it had never stopped (weights saved as F32)
    s3 = straight[2]
    assert (r3.step, r3.policy_version, r3.prompt_index) == (3, 3, [4, 5]) == (s3.step, s3.policy_version,
                                                                                s3.prompt_index)
    assert r3.reward_mean == s3.reward_mean and r3.rl.loss == s3.rl.loss and r3.rl.grad_norm == s3.rl.grad_norm


def test_misuse_is_refused_with_clear_errors(ctx, policy, tok512, reward):
    with rlpost.Task("kk", KK) as task:
        with pytest.raises(rlpost.InvalidArgumentError, match="max_staleness"):
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, max_staleness=1)
        with pytest.raises(rlpost.InvalidArgumentError, match="tokenizer"):
            rlpost.Trainer(policy, task, reward)  # stories260K has none
        with pytest.raises(rlpost.InvalidArgumentError, match="prompts_per_step"):
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, prompts_per_step=0)
        with pytest.raises(TypeError, match="unexpected option"):
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, sampling={"colour": 1})
        with pytest.raises(TypeError, match="RewardFn"):
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, metrics=[(length_reward, "m", None, 0.5)])
        with pytest.raises(TypeError):
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, on_batch="not callable")
        with rlpost.Trainer(policy, task, reward, tokenizer=tok512, **OPTS) as tr:
            with pytest.raises(TypeError, match="PromptSet"):
                tr.generate(["a prompt"])


def test_the_trainer_copies_what_its_options_point_to(ctx, policy, tok512, reward):
    """trainer.h: what the options point to is copied at create. The stop
    token ids still apply after the memory the caller passed says otherwise."""
    from rlpost._util import CArray
    finishes = []
    stop_ids = list(range(100, 300))  # 200 of the 512 ids: every completion of 16 tokens meets one
    sampling = {"n": 2, "max_new_tokens": 16, "stop_token_ids": stop_ids}
    with rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, **dict(OPTS, sampling=sampling),
                           on_batch=lambda b, step: finishes.extend(t.finish_reason for t in b)) as tr:
        ids = next(k for k in tr._keep if isinstance(k, CArray) and k.n == len(stop_ids))
        for i in range(ids.n):
            ids.owner[i] = 100000  # the caller's array now holds ids no model has
        tr.step()
    assert finishes == [rlpost.FinishReason.STOP] * 4


def test_on_batch_raising_fails_the_step_then_the_trainer(ctx, policy, tok512, reward):
    calls = []

    def on_batch(batch, step):
        calls.append(step)
        raise RuntimeError("cannot write samples")

    with rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, on_batch=on_batch, **OPTS) as tr:
        with pytest.raises(rlpost.CallbackError, match="RuntimeError: cannot write samples") as ei:
            tr.step()
        assert isinstance(ei.value.__cause__, RuntimeError) and calls == [1]
        assert policy.version == 0 and tr.steps_done == 0  # nothing was trained
        with pytest.raises(rlpost.StateError, match="earlier step failed"):
            tr.step()
        assert calls == [1]


def test_generate_and_evaluate(ctx, policy, tok512, reward):
    even = rlpost.RewardFn(lambda r: float(len(r.completion) % 2 == 0))
    with rlpost.Task("kk", KK) as task, rlpost.Task("kk", dict(KK, seed=99)) as held_out, \
            rlpost.Trainer(policy, task, reward, tokenizer=tok512, **OPTS) as tr:
        ps = held_out.next_batch(3)
        b = tr.generate(ps, n=2, max_new_tokens=4)
        assert len(b) == 6 and all(math.isnan(t.reward) for t in b)  # not scored
        assert b[5].metadata["index"] == ps.item(2).index
        ev = tr.evaluate(ps, even, 0.5, n=2, max_new_tokens=4, return_batch=True)
        assert isinstance(ev, rlpost.EvalResult)
        assert (ev.prompts, ev.completions, len(ev.per_prompt), len(ev.batch)) == (3, 6, 3, 6)
        assert ev.correct == sum(t.reward >= 0.5 for t in ev.batch) == round(sum(ev.per_prompt) * 2)
        assert ev.accuracy == ev.correct / 6 and ev.accuracy_low <= ev.accuracy <= ev.accuracy_high
        assert ev.mean_completion_tokens == 4.0 and ev.truncated == 6
        greedy = tr.evaluate(ps, even, 0.5, sampling={"n": 1, "temperature": 0.0, "max_new_tokens": 4})
        assert greedy.batch is None and greedy.completions == 3
        # one sample per prompt: the Wilson interval
        assert (greedy.accuracy_low, greedy.accuracy_high) == rlpost.stats_wilson(greedy.correct, 3)
        ev.batch.close()
    even.close()


def test_async_interrupt_and_stop(ctx, policy, tok512):
    gate = threading.Event()

    def slow(req):
        gate.wait(60)
        return 1.0 if len(req.completion) % 2 else 0.0

    with rlpost.RewardFn(slow, timeout_ms=120000) as rw, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(policy, task, rw, tokenizer=tok512, mode=rlpost.TrainMode.ASYNC, **OPTS) as tr:
        threading.Timer(0.5, tr.interrupt).start()
        with pytest.raises(rlpost.ClosedError, match="interrupted"):
            tr.step()  # the rollouts are still being scored
        assert tr.steps_done == 0
        gate.set()
        rec = tr.step()  # nothing was lost: the trainer goes on
        assert rec.step == 1 and rec.policy_version == 1 and rec.n_prompts == 2
        assert rec.rl.staleness_max <= 1  # η defaults to 1 in ASYNC
        tr.stop()
        buf, ro = tr.async_stats()  # every accepted group consumed, dropped or held
        assert buf.consumed == 2 and buf.accepted + buf.restored == buf.consumed + buf.dropped_stale + buf.size
        assert ro.groups_pushed >= buf.accepted and ro.batches >= 1 and not ro.running
        with pytest.raises(rlpost.ClosedError):
            tr.step()


def test_close_while_another_thread_steps(ctx, policy, tok512):
    slow = rlpost.RewardFn(lambda r: time.sleep(0.25) or 1.0, n_threads=1)
    tr = rlpost.Trainer(policy, rlpost.Task("kk", KK), slow, tokenizer=tok512, mode=rlpost.TrainMode.ASYNC, **OPTS)
    raised = []

    def stepper():
        try:
            tr.step()
        except rlpost.Error as e:
            raised.append(e)
    th = threading.Thread(target=stepper)
    th.start()
    time.sleep(0.3)  # the step waits for rollouts still being scored
    tr.close()  # interrupts the step, waits for it, then stops the rollout thread and frees
    th.join(60)
    assert not th.is_alive() and tr.closed
    assert len(raised) == 1 and isinstance(raised[0], rlpost.ClosedError)
    assert policy.version == 0


def test_trainer_keeps_what_c_borrows_alive(ctx, stories_path, tok512_path):
    pol = rlpost.Policy(ctx, stories_path)
    tr = rlpost.Trainer(pol, rlpost.Task("kk", KK), rlpost.RewardFn(length_reward),
                        tokenizer=rlpost.Tokenizer(tok512_path),
                        metrics=[(rlpost.RewardFn(lambda r: 1.0), None, "one_rate", 0.5)], **OPTS)
    gc.collect()
    rec = tr.step()  # task, reward, metric and tokenizer only live through the trainer
    assert rec.metrics == {"one_rate": 1.0} and math.isfinite(rec.reward_mean)
    pol.close()  # closing what the trainer borrows closes the trainer first
    assert tr.closed
    with pytest.raises(rlpost.ClosedError):
        tr.step()


# ---- the rollout worker -----------------------------------------------------------------


def test_rollout_worker(ctx, policy, tok512, reward):
    with rlpost.Task("kk", KK) as task, rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=512) as eng, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=1, batch_groups=2) as sync, \
            rlpost.ReplayBuffer(sync=sync) as buf:
        sync.publish(policy)  # version 0
        logs = []
        w = rlpost.RolloutWorker(eng, task, reward, sync, buf, prompts_per_batch=2, seed=3, tokenizer=tok512,
                                 sampling={"n": 2, "max_new_tokens": 6}, log=lambda lvl, msg: logs.append(msg))
        w.run_once()
        assert buf.stats().size == 2 and w.error is None and task.position == 2
        st = w.stats()
        assert (st.batches, st.groups_pushed, st.groups_released) == (1, 2, 0)
        assert st.running is False and st.at_gate is False and st.generate_seconds > 0
        b = buf.pull(2, 0, timeout_ms=0)
        assert len(b) == 4 and len({t.group_id for t in b}) == 2
        assert st.tokens == sum(len(t.completion_tokens) for t in b) > 0
        assert all(t.reward == length_reward(rlpost.RewardRequest(completion=t.completion_text)) for t in b)
        assert sorted(t.metadata["index"] for t in b) == [0, 0, 1, 1]
        # its own thread: runs batches until the gate (η = 1, B = 2: 4 groups at version 0) closes
        w.start()
        with pytest.raises(rlpost.StateError):
            w.start()
        deadline = time.monotonic() + 60
        while w.stats().groups_pushed < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = w.stats()
        assert st.groups_pushed == 4 and st.running
        t0 = time.monotonic()
        w.stop()
        assert time.monotonic() - t0 < 10  # at the gate: closed and joined at once
        st = w.stats()
        assert not st.running and st.batches == 2 and w.error is None and logs == []
        with pytest.raises(rlpost.ClosedError):
            w.run_once()
        with pytest.raises(rlpost.ClosedError):
            sync.acquire(timeout_ms=0)  # stop() closed the gate
        w.close()
        w.close()


def test_rollout_worker_lanes(ctx, policy, tok512, reward):
    """Two engines (lanes) generate batches at once; batches are drawn and
    pushed in one order, group ids never collide, and stop() joins both."""
    with rlpost.Task("kk", KK) as task, rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=512) as e0, \
            rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=512) as e1, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=2, batch_groups=2) as sync, \
            rlpost.ReplayBuffer(sync=sync) as buf:
        sync.publish(policy)  # version 0
        sync.pull_at_least(e1, 0)  # a local engine: a plain pull
        w = rlpost.RolloutWorker(e0, task, reward, sync, buf, prompts_per_batch=2, seed=3, tokenizer=tok512,
                                 sampling={"n": 2, "max_new_tokens": 6})
        w.add_engine(e1)
        with pytest.raises(rlpost.InvalidArgumentError):
            w.add_engine(e1)  # already the worker's
        # η = 2, B = 2: the gate admits 6 groups at version 0, three batches
        w.start()
        with pytest.raises(rlpost.StateError):
            w.add_engine(e0)
        deadline = time.monotonic() + 60
        while w.stats().groups_pushed < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        w.stop()
        st = w.stats()
        assert st.groups_pushed == 6 and st.batches == 3 and not st.running and w.error is None
        b = buf.pull(6, 0, timeout_ms=0)
        assert len(b) == 12 and len({t.group_id for t in b}) == 6
        # pushed in draw order: the task's prompts 0..5 in order, a batch at a time
        idx = [t.metadata["index"] for t in b]
        assert idx == sorted(idx) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
        w.close()
        assert not e1.closed  # the worker went first


def test_worker_outbox_feeds_a_trainer_inbox(ctx, stories_path, tok512, reward, tmp_path):
    """A rollout worker writes batch files into a folder (as one in another
    process would: a FILE synchronizer reading weights_dir); an ASYNC
    trainer with rollout_inbox takes them in and trains on them; the files
    themselves round-trip through Batch.write_file / read_file, and a
    damaged one is refused with FormatError."""
    wdir, inbox = tmp_path / "weights", tmp_path / "inbox"
    wdir.mkdir()
    inbox.mkdir()
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, mode=rlpost.TrainMode.ASYNC, max_staleness=1,
                           weights_dir=wdir, rollout_inbox=inbox, **OPTS) as tr, \
            rlpost.Policy(ctx, stories_path, trainable=False) as wpol, rlpost.Task("kk", KK) as wtask, \
            rlpost.RolloutEngine(wpol, max_batch=8, max_seq_len=512) as eng, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, transport=rlpost.SyncTransport.FILE, dir=wdir,
                                max_staleness=1, batch_groups=2) as sync:
        w = rlpost.RolloutWorker(eng, wtask, reward, sync, None, prompts_per_batch=2, seed=5, tokenizer=tok512,
                                 sampling=OPTS["sampling"], outbox_dir=inbox)
        w.run_once()
        files = sorted(inbox.iterdir())
        assert len(files) == 1 and files[0].suffix == ".rlpb"
        b = rlpost.Batch.read_file(files[0])
        assert len(b) == 4 and all(t.provenance is not None for t in b)
        copy = tmp_path / "copy.rlpb"
        b.write_file(copy)
        assert [list(t.completion_tokens) for t in rlpost.Batch.read_file(copy)] == \
            [list(t.completion_tokens) for t in b]
        side = tmp_path / "side"
        side.mkdir()
        b.write_file(side / "a.rlpb")
        (side / "b.rlpb").write_bytes(b"junk")
        with rlpost.ReplayBuffer(max_staleness=1) as b2:
            assert b2.ingest_dir(side) == 2 and b2.stats().size == 2  # the junk is set aside
        assert sorted(p.name for p in side.iterdir()) == ["b.rlpb.bad"]
        copy.write_bytes(copy.read_bytes()[:40])
        with pytest.raises(rlpost.FormatError):
            rlpost.Batch.read_file(copy)
        rec = tr.step()  # takes the file in, trains on the worker's groups
        assert rec.step == 1 and rec.reward_valid == 4 and rec.prompt_index == [0, 1]
        assert list(inbox.iterdir()) == []
        w.close()
    with pytest.raises(rlpost.InvalidArgumentError):
        with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task:
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, rollout_inbox=inbox, **OPTS)  # not ASYNC


def test_rollout_worker_stop_aborts_a_generation(ctx, policy, tok512, reward):
    with rlpost.Task("kk", KK) as task, rlpost.RolloutEngine(policy, max_batch=8, max_seq_len=512) as eng, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=4, batch_groups=2) as sync, \
            rlpost.ReplayBuffer(sync=sync) as buf:
        sync.publish(policy)
        w = rlpost.RolloutWorker(eng, task, reward, sync, buf, prompts_per_batch=2, tokenizer=tok512,
                                 sampling={"n": 4, "max_new_tokens": 200, "ignore_eos": True})
        w.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        w.stop()
        assert time.monotonic() - t0 < 10
        st = w.stats()
        assert not st.running and w.error is None and st.groups_pushed == 2 * st.batches
        assert buf.stats().size == st.groups_pushed  # whole batches only: nothing half-done was pushed
        w.close()


def test_two_rollout_workers_push_distinct_groups(ctx, policy, tok512, reward):
    """Each engine numbers its groups from 0: the workers keep them apart, so
    that the RL step (which groups trajectories by id) never merges two."""
    with rlpost.Task("kk", KK) as t1, rlpost.Task("kk", dict(KK, seed=2)) as t2, \
            rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=512) as e1, \
            rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=512) as e2, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=1, batch_groups=2) as sync, \
            rlpost.ReplayBuffer(sync=sync) as buf:
        sync.publish(policy)
        kw = dict(prompts_per_batch=2, tokenizer=tok512, sampling={"n": 2, "max_new_tokens": 4})
        with rlpost.RolloutWorker(e1, t1, reward, sync, buf, **kw) as w1, \
                rlpost.RolloutWorker(e2, t2, reward, sync, buf, **kw) as w2:
            w1.run_once()
            w2.run_once()
        b = buf.pull(4, 0, timeout_ms=0)
        ids = [t.group_id for t in b]
        assert len(set(ids)) == 4 and all(ids.count(g) == 2 for g in ids)
        assert all(g >> 63 for g in ids)  # still engine-numbered (the upper half)


def test_rollout_worker_keeps_its_handles_alive(stories_path, tok512_path):
    ctx = rlpost.Context(n_threads=1)
    pol = rlpost.Policy(ctx, stories_path)
    sync = rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=1, batch_groups=1)
    sync.publish(pol)  # a copy of the weights on ctx
    buf = rlpost.ReplayBuffer(sync=sync)
    w = rlpost.RolloutWorker(rlpost.RolloutEngine(pol, max_batch=4, max_seq_len=512), rlpost.Task("kk", KK),
                             rlpost.RewardFn(length_reward), sync, buf, prompts_per_batch=1,
                             tokenizer=rlpost.Tokenizer(tok512_path), sampling={"n": 2, "max_new_tokens": 4})
    gc.collect()
    w.run_once()  # engine, task, reward and tokenizer only live through the worker
    assert w.stats().groups_pushed == 1 and len(buf.pull(1, 0, timeout_ms=0)) == 2
    buf.close()  # closes the worker first
    assert w.closed
    ctx.close()  # closes the synchronizer, whose published copy lives on it, before freeing it
    assert sync.closed and pol.closed


# ---- confidence intervals ---------------------------------------------------------------


def test_stats_intervals():
    z = 1.959963984540054
    lo, hi = rlpost.stats_wilson(5, 10)
    p, n = 0.5, 10
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert lo == pytest.approx(c - h, rel=1e-12) and hi == pytest.approx(c + h, rel=1e-12)
    assert all(math.isnan(v) for v in rlpost.stats_wilson(0, 0))
    assert rlpost.stats_bootstrap_mean([0.25]) == (0.25, 0.25)
    x = [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.5]
    a = rlpost.stats_bootstrap_mean(x, resamples=500, seed=7)
    assert a == rlpost.stats_bootstrap_mean(x, resamples=500, seed=7)  # reproducible
    assert 0.0 <= a[0] <= sum(x) / len(x) <= a[1] <= 1.0
    d = rlpost.stats_bootstrap_paired(x, [v + 0.25 for v in x], resamples=500, seed=7)
    assert d[0] == pytest.approx(0.25) and d[1] == pytest.approx(0.25)  # a constant difference
    with pytest.raises(ValueError):
        rlpost.stats_bootstrap_paired([1.0], [1.0, 2.0])


def test_dynamic_sampling_and_the_second_wave_options(ctx, stories_path, tok512):
    """DAPO over-sampling through Trainer(max_gen_batches=...), the rollout correction and SAPO named by
    strings, the record's fields; a reward that no group varies in hits the cap with StateError."""
    with rlpost.RewardFn(lambda r: float(r.sample_index % 2) if r.reference and len(r.reference) % 2 else 1.0,
                         name="half") as half:
        recs, js = run(ctx, stories_path, tok512, half, 2, max_gen_batches=20,
                       rl={"filter_equal_groups": True, "policy_loss": "sapo", "rollout_is": "token",
                           "overlong_filter": True})
    for r in recs:
        assert r.gen_batches >= 1 and r.rl.filtered_groups == 0 and r.rl.n_groups == 2, r
        assert r.rollout_is_mean > 0 and r.overlong_filtered <= r.truncated
    assert sum(r.dynamic_dropped_groups for r in recs) > 0  # about half the prompts give all-equal groups
    assert js["gen_batches"] == recs[-1].gen_batches
    with rlpost.RewardFn(lambda r: 1.0, name="constant") as const, rlpost.Policy(ctx, stories_path) as pol, \
            rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, const, tokenizer=tok512, max_gen_batches=2, rl={"filter_equal_groups": True},
                           **OPTS) as tr:
        with pytest.raises(rlpost.StateError, match="max_gen_batches: 2 batches"):
            tr.step()
    with pytest.raises(ValueError, match="rollout_is must be one of off, token, sequence, geometric"):
        rlpost.policy.rl_options({"rollout_is": "tokens"})


def test_ppo_with_a_critic(ctx, stories_path, tok512, reward, tmp_path):
    """rl advantage GAE with critic_path "policy": the record's critic figures,
    sync = async at η = 0 bit for bit, the checkpoint's critic/ folder, and the
    refusals (GAE without a critic, a critic without GAE)."""
    kw = dict(rl={"advantage": "gae"}, critic_path="policy", critic_lr=1e-3, value_clip=0.2, gae_lambda=0.95)
    sync, _ = run(ctx, stories_path, tok512, reward, 3, **kw)
    assert sync[0].values_mean == 0.0 and sync[0].value_loss > 0  # a zero-initialised head
    assert all(math.isfinite(r.critic_grad_norm) and r.critic_seconds > 0 for r in sync)
    asy, _ = run(ctx, stories_path, tok512, reward, 3, mode=rlpost.TrainMode.ASYNC, max_staleness=0, **kw)
    for a, b in zip(sync, asy):
        assert (a.value_loss, a.values_mean, a.returns_mean, a.rl.loss) == \
            (b.value_loss, b.values_mean, b.returns_mean, b.rl.loss)
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task, \
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, **dict(OPTS, **kw)) as tr:
        tr.step()
        tr.checkpoint(tmp_path / "ck")
    assert (tmp_path / "ck" / "critic" / "optimizer.safetensors").is_file()
    info = rlpost.model_inspect(tmp_path / "ck" / "critic")
    assert info.score_labels == 1 and info.score_per_token == 1
    with rlpost.Policy(ctx, stories_path) as pol, rlpost.Task("kk", KK) as task:
        with pytest.raises(rlpost.InvalidArgumentError, match="critic"):
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, rl={"advantage": "gae"}, **OPTS)
        with pytest.raises(rlpost.InvalidArgumentError, match="GAE"):
            rlpost.Trainer(pol, task, reward, tokenizer=tok512, critic_path="policy", **OPTS)
