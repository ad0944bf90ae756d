"""Value and reward models: a policy loaded from an HF score-head folder
(rlp_policy_score, rlp_policy_score_labels, rlp_model_info v3) and the
reward_model built-in, on the tiny fixtures written by transformers
(tests/reference/make_score_fixtures.py, make_reward_model_fixtures.py)."""
import json
import math
import pathlib

import pytest

import rlpost

HF = pathlib.Path(__file__).resolve().parents[3] / "tests" / "reference" / "fixtures" / "hf"


def test_score_head_matches_transformers(ctx):
    exp = json.loads((HF / "score_expected.json").read_text())
    info = rlpost.model_inspect(HF / "score_llama_token")
    assert info.score_labels == 1 and info.score_per_token == 1
    info = rlpost.model_inspect(HF / "score_qwen2_seq")
    assert info.score_labels == 1 and info.score_per_token == 0
    with rlpost.Policy(ctx, HF / "score_qwen2_prm2", trainable=False) as p:
        assert p.score_labels == 2
        pi = p.info  # the loaded policy described without reading the folder again
        assert pi.score_labels == 2 and pi.score_per_token == 1 and pi.architecture == "qwen2" and pi.format == ""
        assert pi.n_params == rlpost.model_inspect(HF / "score_qwen2_prm2").n_params
        out = p.score(exp["sequences"])
        for got, want in zip(out, exp["score_qwen2_prm2"]["per_token"]):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert all(abs(a - b) <= 1e-4 * max(1.0, abs(b)) for a, b in zip(g, w))


def test_language_model_has_no_score_head(policy):
    assert policy.score_labels == 0
    with pytest.raises(rlpost.Error) as e:
        policy.score([[1, 2, 3]])
    assert "language model" in str(e.value)


def test_reward_model_builtin():
    exp = json.loads((HF / "rm_expected.json").read_text())
    with rlpost.RewardFn.builtin("reward_model", {"model": str(HF / "rm_orm"), "model_threads": 1}) as fn:
        r = fn.score_one(exp["samples"][0], prompt=exp["prompt"])
        want = exp["rm_orm"]["samples"][0]["score"]
        assert r.valid and math.isclose(r.score, want, rel_tol=1e-4, abs_tol=1e-4)
    with pytest.raises(rlpost.Error):
        rlpost.RewardFn.builtin("reward_model", {"model": str(HF / "rm_orm"), "kind": "value"})
