"""rlpost.Env: Python environments through the C callbacks (state, every
reply form, exceptions and deadlines marking the call failed), the HTTP
environment against examples/env_server.py, built-ins, the synchronous
Episode API, and multi-turn generation on an engine."""
import subprocess
import sys
import threading
import time

import pytest

import rlpost
from rlpost import env as env_mod
from rlpost.env import EnvReply

from conftest import ROOT

SERVER = ROOT / "examples" / "env_server.py"


def _wait_for(cond, seconds=5.0):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.01)


def calculator():
    """A small calculator environment; returns (env, closed states)."""
    closed = []

    def reset(metadata):
        return {"turns": 0, "answer": (metadata or {}).get("answer")}, "Solve it.\n"

    def step(action, action_ids, state=None):
        state["turns"] += 1
        if "<answer>" in action:
            got = action.split("<answer>")[1].split("</answer>")[0]
            return EnvReply(done=True, tool_call=False, reward=1.0 if got == state["answer"] else 0.0,
                            metadata={"turns": state["turns"]})
        expr = action.split("<calc>")[1].split("</calc>")[0]
        a, b = expr.split("+")
        return {"observation": "<result>%d</result>" % (int(a) + int(b)), "tool_call": True,
                "metadata": {"ids": list(action_ids)}}

    env = rlpost.Env.from_callbacks(reset, step, close=closed.append, name="calc", timeout_ms=5000)
    return env, closed


def test_callbacks_episode():
    envs_before = env_mod.registered_environments()[0]
    env, closed = calculator()
    assert env.name == "calc"
    ep = env.start({"answer": "4"})
    assert ep.first["status"] == 0 and ep.first["observation"] == "Solve it.\n"
    out = ep.step("<calc>2+2</calc>", [5, 6])
    assert out["status"] == 0 and out["observation"] == "<result>4</result>"
    assert out["tool_call"] and not out["done"] and out["reward"] is None
    assert out["metadata"] == {"ids": [5, 6]}
    out = ep.step("<answer>4</answer>")
    assert out["done"] and out["reward"] == 1.0 and not out["tool_call"]
    assert out["metadata"] == {"turns": 2}
    with pytest.raises(rlpost.StateError):
        ep.step("after the end")
    ep.close()
    ep.close()  # safe twice
    _wait_for(lambda: closed)  # close runs on the environment's worker
    assert closed == [{"turns": 2, "answer": "4"}]
    # a wrong answer in a second episode; metadata None
    ep = env.start()
    assert ep.first["status"] == 0
    out = ep.step("<answer>x</answer>")
    assert out["done"] and out["reward"] == 0.0
    ep.close()
    env.close()
    with pytest.raises(rlpost.ClosedError):
        env.start()
    # the library has released the callables
    _wait_for(lambda: env_mod.registered_environments()[0] == envs_before)
    assert env_mod.registered_environments()[0] == envs_before


def test_exceptions_mark_the_call_failed():
    def reset(metadata):
        if metadata and metadata.get("fail"):
            raise KeyError("no such task")
        return None

    def step(action, action_ids):
        if action == "bad type":
            return 42
        if action == "bad key":
            return {"observation": "x", "colour": "red"}
        raise ValueError("boom")

    with rlpost.Env.from_callbacks(reset, step) as env:
        ep = env.start({"fail": True})
        assert ep.first["status"] != 0 and "KeyError" in ep.first["error"]
        assert "no such task" in ep.first["error"]
        ep.close()
        for action, want in (("x", "ValueError: boom"), ("bad type", "TypeError"), ("bad key", "colour")):
            ep = env.start()
            assert ep.first["status"] == 0 and ep.first["observation"] == ""
            out = ep.step(action)
            assert out["status"] == rlpost.errors.STATUS_CALLBACK, out
            assert want in out["error"]
            with pytest.raises(rlpost.StateError):
                ep.step("a failed episode takes no more steps")
            ep.close()


def test_deadline():
    release = threading.Event()

    def step(action, action_ids):
        release.wait(5)
        return "late"

    env = rlpost.Env.from_callbacks(lambda m: None, step, timeout_ms=200)
    ep = env.start()
    t0 = time.monotonic()
    out = ep.step("slow")
    took = time.monotonic() - t0
    assert out["status"] == rlpost.errors.STATUS_TIMEOUT and took < 2.0
    release.set()
    ep.close()
    env.close()


def test_reply_forms():
    def step(action, action_ids):
        if action == "tokens":
            return EnvReply(observation_tokens=[3, 4, 5])
        if action == "pieces":
            return {"observation_pieces": [("<|im_start|>user\n", True), {"text": "42", "special": False}]}
        if action == "error":
            return {"observation": "no such tool", "tool_call": True, "tool_error": "unknown tool"}
        return "plain text"

    with rlpost.Env.from_callbacks(lambda m: "", step, max_observation_bytes=4) as env:
        ep = env.start()
        out = ep.step("error")
        assert out["status"] == 0 and out["tool_error"] == "unknown tool" and out["tool_call"]
        out = ep.step("plain")
        assert out["observation"] == "plai" and out["truncated"]
        ep.close()
    with rlpost.Env.from_callbacks(lambda m: "", step) as env:
        ep = env.start()
        out = ep.step("tokens")
        assert out["n_observation_tokens"] == 3 and out["observation"] == ""
        out = ep.step("pieces")
        assert out["observation"] == "<|im_start|>user\n42"
        ep.close()
    with pytest.raises(TypeError):
        rlpost.Env.from_callbacks(None, step)
    with pytest.raises(TypeError):
        rlpost.Env.from_callbacks(lambda m: None, step, timeout=3)


@pytest.fixture
def server(request):
    """The reference server on a free port, with extra arguments; yields its URL."""
    procs = []

    def start(*args):
        p = subprocess.Popen([sys.executable, str(SERVER), "--port", "0"] + list(args), stdout=subprocess.PIPE)
        procs.append(p)
        port = int(p.stdout.readline())
        return "http://127.0.0.1:%d" % port
    yield start
    for p in procs:
        p.kill()
        p.wait()
        p.stdout.close()


def _http(url, **kw):
    try:
        return rlpost.Env.http(url, **kw)
    except rlpost.UnsupportedError:
        pytest.skip("librlpost built without libcurl")


def test_http_environment(server):
    url = server()
    with _http(url, api_key="secret", timeout_ms=10000) as env:
        assert url in env.name
        ep = env.start({"answer": "12"})
        assert ep.first["status"] == 0 and ep.first["observation"] == ""
        out = ep.step("<calculator>3*4</calculator>", [1, 2, 3])
        assert out["status"] == 0 and out["observation"] == "\n<result>12</result>\n" and out["tool_call"]
        out = ep.step("<calculator>import os</calculator>")
        assert out["status"] == 0 and "SyntaxError" in out["tool_error"]
        out = ep.step("<answer>12</answer>")
        assert out["done"] and out["reward"] == 1.0
        ep.close()
    with _http(server("--fail-mode", "500"), timeout_ms=10000) as env:
        ep = env.start()
        assert ep.first["status"] != 0 and "HTTP 500" in ep.first["error"]
        ep.close()
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Env.http("ftp://127.0.0.1/")


def test_builtin_tools():
    with pytest.raises(rlpost.NotFoundError):
        rlpost.Env.builtin("no-such-environment", {})
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Env.builtin("tools", {"template": "search"})  # no corpus
    docs = [{"id": 1, "title": "Zorbia", "text": "The capital of Zorbia is Quux."},
            {"id": 2, "title": "Blip", "text": "Blip is a river."}]
    with rlpost.Env.builtin("tools", {"template": "search", "corpus_inline": docs, "top_k": 1},
                            timeout_ms=5000) as env:
        ep = env.start()
        assert ep.first["status"] == 0
        out = ep.step("I will look it up. <search>capital of Zorbia</search>")
        assert out["status"] == 0 and out["tool_call"] and "Quux" in out["observation"]
        out = ep.step("<answer>Quux</answer>")
        assert out["status"] == 0 and out["done"]
        ep.close()


def test_generate_episodes_needs_a_tokenizer(policy):
    with rlpost.Env.from_callbacks(lambda m: None, lambda a, i: {"done": True}) as env, \
            rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=32) as engine:
        with pytest.raises(TypeError):
            engine.generate_episodes([[1, 2, 3]], {"max_new_tokens": 4})
        # stories260K's engine has no tokenizer to decode actions with
        with pytest.raises(rlpost.StateError):
            engine.generate_episodes([[1, 2, 3]], {"max_new_tokens": 4}, env=env, max_turns=2)


def test_generate_episodes(smollm2_path):
    calls = []

    def step(action, action_ids):
        calls.append((action, list(action_ids)))
        if len(calls) % 2:
            return {"observation": "\n<result>7</result>\n", "tool_call": True, "reward": 0.5}
        return {"done": True, "reward": 1.0}

    with rlpost.Context(n_threads=2, seed=1) as ctx, rlpost.Policy(ctx, smollm2_path) as policy, \
            rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=256) as engine, \
            rlpost.Env.from_callbacks(lambda m: None, step, serialize=1) as env:
        b = engine.generate_episodes(["What is 3+4? Use the calculator."], {"n": 1, "max_new_tokens": 6,
                                                                           "temperature": 0.0},
                                     env=env, max_turns=4)
        assert len(b) == 1 and len(calls) == 2
        t = b[0]
        # the first turn's ids are what the environment was given
        assert list(t.completion_tokens[:len(calls[0][1])]) == calls[0][1]
        assert "<result>7</result>" in t.completion_text


def test_generate_episodes_over_http(smollm2_path, server):
    url = server()
    with rlpost.Context(n_threads=2, seed=1) as ctx, rlpost.Policy(ctx, smollm2_path) as policy, \
            rlpost.RolloutEngine(policy, max_batch=2, max_seq_len=256) as engine, \
            _http(url, timeout_ms=10000) as env:
        prompts = [{"text": "What is 2+2?", "metadata": {"answer": "4"}}]
        b = engine.generate_episodes(prompts, {"n": 2, "max_new_tokens": 5, "temperature": 0.0}, env=env,
                                     max_turns=2)
        assert len(b) == 2
        for t in b:
            # no turn called a tool: the server's hint follows the first, and the turn limit ends it
            assert t.valid, t.error
            assert t.completion_text.count("Use <calculator>expr</calculator>") >= 1


def test_trainer_runs_episodes(smollm2_path):
    turns = []

    def step(action, action_ids):
        turns.append(len(action_ids))
        if len(turns) % 2:
            return {"observation": " ok", "tool_call": True}
        return {"done": True, "tool_call": False}

    with rlpost.Context(n_threads=2, seed=1) as ctx, \
            rlpost.Env.from_callbacks(lambda m: None, step, serialize=True) as env, \
            rlpost.RewardFn(lambda r: float(len(r.completion) % 2)) as reward, \
            rlpost.Policy(ctx, smollm2_path) as pol, \
            rlpost.Task("kk", {"seed": 1, "people": 2, "template": "none"}) as task:
        with pytest.raises(TypeError):
            rlpost.Trainer(pol, task, reward, multiturn={"max_turns": 2})
        with pytest.raises(TypeError):
            rlpost.Trainer(pol, task, reward, multiturn={"env": env, "turns": 2})
        with rlpost.Trainer(pol, task, reward, prompts_per_step=1, seed=3, max_seq_len=512,
                            sampling={"n": 2, "max_new_tokens": 4}, multiturn={"env": env, "max_turns": 3}) as tr:
            rec = tr.step()
        assert rec.episodes == 2 and len(turns) >= 2
        assert rec.turns_mean >= 1 and rec.tool_calls >= 1 and 0 < rec.masked_token_share < 1


def test_rollout_worker_runs_episodes(smollm2_path):
    def step(action, action_ids):
        return {"observation": "\n<result>1</result>\n", "tool_call": True}

    with rlpost.Context(n_threads=2, seed=1) as ctx, rlpost.Policy(ctx, smollm2_path) as pol, \
            rlpost.Env.from_callbacks(lambda m: None, step) as env, \
            rlpost.RewardFn(lambda r: 1.0) as reward, \
            rlpost.Task("kk", {"seed": 1, "people": 2, "template": "none"}) as task, \
            rlpost.RolloutEngine(pol, max_batch=4, max_seq_len=512) as eng, \
            rlpost.Synchronizer(mode=rlpost.SyncMode.ASYNC, max_staleness=1, batch_groups=1) as sync, \
            rlpost.ReplayBuffer(sync=sync) as buf:
        sync.publish(pol)
        w = rlpost.RolloutWorker(eng, task, reward, sync, buf, prompts_per_batch=1, seed=3,
                                 sampling={"n": 2, "max_new_tokens": 3}, multiturn={"env": env, "max_turns": 2})
        w.run_once()
        assert w.error is None
        b = buf.pull(1, 0, timeout_ms=0)
        assert len(b) == 2
        for t in b:
            assert t.episode is not None and t.episode.turns == 2 and t.episode.end == rlpost.EpisodeEnd.MAX_TURNS
            assert "<result>1</result>" in t.completion_text
            assert 0 in list(t.loss_mask) and 1 in list(t.loss_mask)
        w.close()
