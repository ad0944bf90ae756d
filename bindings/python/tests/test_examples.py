"""The examples end to end: the GRPO loop with a Python reward on
stories260K (fast) and SmolLM2 (when fetched), the async swarm with
in-process rollout threads and with `rlpost serve` worker processes."""
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE, ROOT

EXAMPLES = HERE.parent / "examples"


def run_example(name, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    r = subprocess.run([sys.executable, str(EXAMPLES / name)] + [str(a) for a in args], env=env,
                       capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    return r, lines


def test_grpo_example_on_stories260k(stories_path, tok512_path):
    r, lines = run_example("grpo_smollm2.py", stories_path, "--tokenizer", tok512_path, "--steps", 2, "--prompts", 2,
                           "--group", 4, "--max-new-tokens", 16, "--threads", 1, "--raise-every", 5)
    assert r.returncode == 0, r.stderr
    assert [x["step"] for x in lines] == [0, 1] and [x["version"] for x in lines] == [1, 2]
    for x in lines:
        assert x["valid"] + x["invalid"] == 8
        assert 0 <= x["format_rate"] <= 1 and x["tokens"] > 0
    # every 5th call raised: those samples were invalid, the run went on
    assert sum(x["errors"] for x in lines) == 16 // 5
    assert "RuntimeError: flaky judge" in r.stderr


def test_grpo_example_on_smollm2(smollm2_path):
    r, lines = run_example("grpo_smollm2.py", smollm2_path, "--steps", 1, "--prompts", 1, "--group", 2,
                           "--max-new-tokens", 16, "--threads", 2)
    assert r.returncode == 0, r.stderr
    assert len(lines) == 1 and lines[0]["version"] == 1 and lines[0]["valid"] == 2
    assert 0 <= lines[0]["mean_reward"] <= 2 and lines[0]["errors"] == 0


def test_grpo_example_needs_a_tokenizer(stories_path):
    r, _ = run_example("grpo_smollm2.py", stories_path, "--steps", 1)
    assert r.returncode == 2 and "--tokenizer" in r.stderr


def check_swarm(r, lines, steps):
    assert r.returncode == 0, r.stderr
    summary = lines[-1]
    assert summary["summary"] and summary["ok"], summary
    assert [x["version"] for x in lines[:-1]] == list(range(1, steps + 1))
    assert summary["duplicates"] == 0 and summary["consumed"] == 4 * steps
    assert summary["accepted"] == summary["consumed"] + summary["dropped_stale"] + summary["held"]
    assert all(x["staleness_max"] <= 1 for x in lines[:-1])
    return summary


def test_swarm_example_in_process(stories_path, tok512_path):
    r, lines = run_example("swarm.py", stories_path, "--tokenizer", tok512_path, "--local", "--workers", 2, "--steps", 4, "--eta", 1,
                           "--max-new-tokens", 16)
    s = check_swarm(r, lines, 4)
    assert s["mode"] == "local" and s["weight_loads"] >= 1 and s["rollout_threads"] == 2


def test_swarm_example_needs_a_tokenizer(stories_path):
    r, _ = run_example("swarm.py", stories_path, "--local", "--steps", 1)
    assert r.returncode == 2 and "--tokenizer" in r.stderr


def test_swarm_example_with_worker_processes(stories_path, tok512_path):
    driver = os.environ.get("RLPOST_DRIVER") or str(ROOT / "build" / "examples" / "rlpost" / "rlpost")
    if not os.access(driver, os.X_OK):
        pytest.skip("no rlpost driver (RLPOST_DRIVER)")
    r, lines = run_example("swarm.py", stories_path, "--tokenizer", tok512_path, "--rlpost", driver, "--workers", 2, "--steps", 4,
                           "--max-new-tokens", 16)
    if r.returncode != 0 and "needs libmicrohttpd" in r.stderr:
        pytest.skip("the driver was built without libmicrohttpd")
    s = check_swarm(r, lines, 4)
    assert s["mode"] == "processes" and s["publishes"] == 5
