"""Reward functions: Python callables (single and batch forms) called from
the library's worker threads, their failures, deadlines and lifetime;
built-ins, HTTP verifiers, combinations and refinements."""
import http.server
import json
import math
import threading
import time

import pytest

import rlpost
from rlpost import reward as reward_mod

from conftest import make_batch


def scored_batch():
    b = rlpost.Batch()
    for i, text in enumerate(["<answer>42</answer>", "no answer", "<answer>41</answer>", "#### 42"]):
        b.append(group_id=1 + i // 2, sample_index=i % 2, prompt_tokens=[1, 2], prompt_text="Q: 6*7?",
                 completion_tokens=[10 + i, 20, 30], logprobs=[-1.0, -1.0, -1.0], completion_text=text,
                 policy_version=i, metadata={"reference": "42", "i": i})
    return b


def test_single_reward_sees_every_field_on_worker_threads():
    seen = []
    main = threading.get_ident()

    def fn(req):
        seen.append((req, threading.get_ident()))
        return float("42" in req.completion)

    with rlpost.RewardFn(fn, name="has42", n_threads=2) as rf:
        assert rf.name == "has42" and rf.callable is fn
        b = scored_batch()
        st = rf.score(b)
    assert (st.scored, st.valid, st.invalid, st.errors, st.skipped) == (4, 4, 0, 0, 0)
    assert st.mean_score == pytest.approx(0.5) and st.min_score == 0 and st.max_score == 1
    assert [t.reward for t in b] == [1.0, 0.0, 0.0, 1.0] and all(t.valid for t in b)
    assert all(tid != main for _, tid in seen)  # the calling thread never runs a callback
    reqs = sorted((r for r, _ in seen), key=lambda r: r.batch_index)
    assert [r.batch_index for r in reqs] == [0, 1, 2, 3]
    r = reqs[2]
    assert r.prompt == "Q: 6*7?" and r.completion == "<answer>41</answer>" and list(r.completion_tokens) == [12, 20, 30]
    assert r.reference == "42" and r.metadata == {"reference": "42", "i": 2}
    assert (r.group_id, r.sample_index, r.policy_version) == (2, 0, 2)


def test_every_answer_form():
    def fn(req):
        i = req.metadata["i"]
        if i == 0:
            return (0.5, "half right")
        if i == 1:
            return None
        if i == 2:
            raise rlpost.InvalidSample("no reference in this one")
        return rlpost.Reward(2.0, token_scores=[0.1, 0.2, 0.3], step_ends=[0, 1, 1])

    b = scored_batch()
    with rlpost.RewardFn(fn, n_threads=1) as rf:
        st = rf.score(b)
        one = rf.score_one("x", reference="42", metadata={"i": 0})
    assert one.valid and one.score == 0.5 and one.reason == "half right"
    assert (st.valid, st.invalid, st.errors) == (2, 2, 0)
    t = list(b)
    assert t[0].valid and t[0].reward == 0.5
    assert not t[1].valid and "no score" in t[1].error and math.isnan(t[1].reward)
    assert not t[2].valid and "no reference in this one" in t[2].error
    assert t[3].valid and t[3].reward == 2.0 and list(t[3].token_rewards) == pytest.approx([0.1, 0.2, 0.3])
    with rlpost.RewardFn(lambda r: {"score": 1.5, "reason": "dict"}) as rf:
        assert rf.score_one("a").score == 1.5


def test_an_exception_marks_the_sample_invalid_and_the_run_goes_on():
    def fn(req):
        i = req.metadata["i"]
        if i == 1:
            return 1 / 0
        if i == 2:
            raise ValueError("é" * 200)  # reason longer than RLP_REWARD_REASON_MAX, multi-byte
        if i == 3:
            return "not a number"
        return 1.0

    b = scored_batch()
    with rlpost.RewardFn(fn, n_threads=2) as rf:
        st = rf.score(b)
        assert (st.scored, st.valid, st.invalid, st.errors) == (4, 1, 3, 3)
        t = list(b)
        assert t[0].valid and t[0].reward == 1.0
        assert "ZeroDivisionError: division by zero" in t[1].error
        assert t[2].error.startswith("callback: ValueError: é")  # the handle's name prefixes reasons
        assert len(t[2].error.encode("utf-8", "replace")) <= 130
        assert "TypeError" in t[3].error
        # the handle keeps working
        again = scored_batch()
        assert rf.score(again).errors == 3
        bad = rf.score_one("x", metadata={"i": 1})
        assert not bad.valid and "ZeroDivisionError" in bad.reason


def test_reason_is_cut_at_a_character_boundary():
    res = rlpost._ffi.RewardResult()
    reward_mod._set_reason(res, "x" + "é" * 100)  # 201 bytes
    raw = res.reason
    assert len(raw) == 127 and raw.decode("utf-8") == "x" + "é" * 63
    reward_mod._set_reason(res, "short")
    assert res.reason == b"short"


def test_nonfinite_scores_are_counted():
    with rlpost.RewardFn(lambda r: math.nan if r.metadata["i"] % 2 else math.inf * (r.metadata["i"] - 1)) as rf:
        st = rf.score(scored_batch())
    assert st.nonfinite == 4 and st.valid == 0


def test_batch_form():
    sizes = []

    def fn(reqs):
        sizes.append(len(reqs))
        out = []
        for r in reqs:
            if r.metadata["i"] == 3:
                out.append(rlpost.InvalidSample("skip me"))
            else:
                out.append(len(r.completion))
        return out

    b = scored_batch()
    with rlpost.RewardFn.batched(fn, batch_size=3, n_threads=1) as rf:
        st = rf.score(b)
    assert sorted(sizes) == [1, 3] and st.valid == 3 and st.invalid == 1
    assert [t.reward for t in list(b)[:3]] == [len("<answer>42</answer>"), len("no answer"), len("<answer>41</answer>")]
    assert list(b)[3].error == "callback: skip me"

    def broken(reqs):
        if any(r.metadata["i"] == 0 for r in reqs):
            raise RuntimeError("judge crashed")
        return [1.0] * (len(reqs) + 1)  # wrong length

    b = scored_batch()
    with rlpost.RewardFn.batched(broken, batch_size=2, n_threads=2) as rf:
        st = rf.score(b)
    assert st.valid == 0 and st.errors == 4
    t = list(b)
    assert all("RuntimeError: judge crashed" in x.error for x in t[:2])
    assert all("ValueError: the batch reward returned 3 results for 2 samples" in x.error for x in t[2:])


def test_deadline_abandons_the_call_and_the_callable_outlives_its_handle():
    release = threading.Event()
    before = reward_mod.registered_callables()

    def slow(req):
        if req.metadata["i"] == 0:
            release.wait(30)
            return 1.0
        return 0.0

    rf = rlpost.RewardFn(slow, n_threads=2, timeout_ms=200)
    assert reward_mod.registered_callables() == before + 1
    b = scored_batch()
    t0 = time.monotonic()
    st = rf.score(b)
    assert time.monotonic() - t0 < 10
    assert st.timeouts == 1 and st.valid == 3 and st.abandoned_running == 1
    assert "timed out" in b[0].error
    rf.close()  # the abandoned call still runs Python code: its trampoline must stay
    assert reward_mod.registered_callables() == before + 1
    release.set()
    deadline = time.monotonic() + 30
    while reward_mod.registered_callables() != before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reward_mod.registered_callables() == before  # payload_free ran once nothing could call it


def test_builtins():
    names = rlpost.builtin_names()
    for n in ("logic_rl_format", "kk_answer", "logic_rl", "gsm8k", "boxed_math", "countdown", "exact_match",
              "regex_match", "lookup_em", "search_format", "tool_call_format"):
        assert n in names
    with rlpost.RewardFn.builtin("gsm8k") as g:
        assert g.name == "gsm8k"
        assert g.score_one("so #### 42", reference="42").score == 1.0
        assert g.score_one("so #### 41", reference="42").score == 0.0
        b = scored_batch()
        st = g.score(b)
        assert st.scored == 4 and b[3].reward == 1.0
    with rlpost.RewardFn.builtin("regex_match", {"pattern": "^<answer>\\d+</answer>$", "full": True}) as rx:
        assert rx.score_one("<answer>7</answer>").score == 1.0 and rx.score_one("7").score == 0.0
    with pytest.raises(rlpost.InvalidArgumentError, match="nonsense"):
        rlpost.RewardFn.builtin("gsm8k", '{"nonsense": 1}')


def test_combine_owns_its_members():
    before = reward_mod.registered_callables()
    py = rlpost.RewardFn(lambda r: 0.5, name="half")
    em = rlpost.RewardFn.builtin("exact_match", {"extract": "answer_tag"})
    combo = rlpost.RewardFn.combine([py, em], weights=[2.0, 1.0])
    assert py.closed and em.closed and combo.name == "combine"
    with pytest.raises(rlpost.ClosedError):
        py.score_one("x")
    b = scored_batch()
    combo.score(b)
    assert [t.reward for t in b] == [2.0, 1.0, 1.0, 1.0]
    assert reward_mod.registered_callables() == before + 1  # the member's callable, kept by the combination
    combo.close()
    assert reward_mod.registered_callables() == before
    a, c = rlpost.RewardFn(lambda r: 1.0), rlpost.RewardFn(lambda r: 1.0)
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.RewardFn.combine([a, a])
    assert not a.closed  # a failed combine leaves the members to the caller
    with pytest.raises(ValueError):
        rlpost.RewardFn.combine([a, c], weights=[1.0])
    a.close()
    c.close()


def test_refine():
    r = [1.0, 0.5, 0.2]
    assert list(rlpost.refine(r, rlpost.RefineMode.CLIP, eta=0.6)) == pytest.approx([0.0, -0.1, -0.4])
    assert list(rlpost.refine(r, rlpost.RefineMode.DELTA)) == pytest.approx([0.5, 0.3, 0.2])
    assert list(rlpost.refine(r, rlpost.RefineMode.DELTA, step_mask=[1, 0, 1])) == pytest.approx([0.8, 0.5, 0.2])
    assert r == [1.0, 0.5, 0.2]
    assert list(rlpost.refine([], rlpost.RefineMode.NONE)) == []
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.refine(r, 9)
    with pytest.raises(ValueError):
        rlpost.refine(r, rlpost.RefineMode.CLIP, step_mask=[1])

    with rlpost.RewardFn(lambda q: rlpost.Reward(1.0, token_scores=[1.0, 0.5, 0.2])) as rf:
        rf.set_refine(rlpost.RefineMode.DELTA)
        b = make_batch(groups=1, group_size=1, n_tokens=3)
        rf.score(b)
        assert list(b[0].token_rewards) == pytest.approx([0.5, 0.3, 0.2]) and b[0].reward == 1.0
        with pytest.raises(rlpost.InvalidArgumentError):
            rf.set_refine(rlpost.RefineMode.CLIP, eta=math.nan)


class _Judge(http.server.BaseHTTPRequestHandler):
    bodies = []
    fail = False

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.bodies.append((body, self.headers.get("Authorization")))
        if _Judge.fail:
            self.send_response(500)
            self.end_headers()
            return
        scores = [len(s["completion"]) if s["id"] % 2 == 0 else {"score": 0, "valid": False, "reason": "odd"}
                  for s in body["samples"]]
        out = json.dumps({"scores": scores}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def test_http_verifier():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        url = "http://127.0.0.1:%d/score" % srv.server_address[1]
        with rlpost.RewardFn.http(url, api_key="sekrit", name="judge", batch_size=2, send_tokens=True,
                                  max_retries=1, backoff_ms=10) as rf:
            assert rf.name == "judge"
            b = scored_batch()
            st = rf.score(b)
            assert st.valid == 2 and st.invalid == 2
            assert b[0].reward == len("<answer>42</answer>") and b[1].error == "judge: odd"
            # the two batches are sent concurrently: find the one that holds sample 0
            assert len(_Judge.bodies) == 2
            body, auth = next(x for x in _Judge.bodies if x[0]["samples"][0]["completion_tokens"][0] == 10)
            assert auth == "Bearer sekrit" and body["version"] == 1 and len(body["samples"]) == 2
            assert body["samples"][0]["completion_tokens"] == [10, 20, 30]
            assert body["samples"][1]["completion_tokens"] == [11, 20, 30]
            _Judge.fail = True
            b = scored_batch()
            st = rf.score(b)
            assert st.errors == 4 and all(url in t.error or "500" in t.error for t in b)
    finally:
        _Judge.fail = False
        srv.shutdown()
        srv.server_close()
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.RewardFn.http("ftp://example.invalid/")


def _crashy_library():
    """tests/unit/reward_crashy.c as built by meson (RLPOST_BUILD_ROOT)."""
    import os
    from pathlib import Path
    build = os.environ.get("RLPOST_BUILD_ROOT")
    lib = Path(build) / "tests" / "reward_crashy.so" if build else None
    if not lib or not lib.exists():
        pytest.skip("no reward_crashy.so (set RLPOST_BUILD_ROOT to a meson build folder)")
    return lib


def test_isolated_reward_survives_a_crashing_library():
    lib = _crashy_library()
    b = rlpost.Batch()
    for i, text in enumerate(["fine", "segv", "abc"]):
        b.append(group_id=1, sample_index=i, prompt_tokens=[1], completion_tokens=[7, 8],
                 logprobs=[-1.0, -1.0], completion_text=text)
    with rlpost.RewardFn.isolated(lib, name="iso", n_workers=1, timeout_ms=20000) as rf:
        assert rf.name == "iso"
        st = rf.score(b)  # in-process, "segv" would end this interpreter
        assert (st.scored, st.valid, st.invalid, st.crashed) == (3, 2, 1, 1)
        assert [t.reward for t in (b[0], b[2])] == [4.0, 3.0]
        assert not b[1].valid and b[1].error.endswith("reward worker killed by SIGSEGV")
        assert rf.score_one("ref", reference="2.5").score == 2.5
    with pytest.raises(rlpost.InvalidArgumentError, match="n_workers"):
        rlpost.RewardFn.isolated(lib, n_workers=1000)
    with pytest.raises(rlpost.CallbackError, match="nonexistent"):
        rlpost.RewardFn.isolated("/nonexistent/reward.so")
