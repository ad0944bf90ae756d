"""Without numpy every array is a plain list (and a Python loss writes its
gradient into a ctypes array). Runs in a fresh interpreter where
`import numpy` fails; numpy inputs are checked in the other tests."""
import os
import subprocess
import sys
import textwrap

from conftest import HERE

SCRIPT = textwrap.dedent(r"""
    import sys
    sys.modules["numpy"] = None  # import numpy now raises ImportError
    import rlpost
    assert not rlpost.HAVE_NUMPY
    stories, tok_path = sys.argv[1], sys.argv[2]
    tok = rlpost.Tokenizer(tok_path)
    ids = tok.encode("hello")
    assert type(ids) is list and all(type(i) is int for i in ids), ids
    assert tok.decode(ids) == "hello"
    with rlpost.Context(n_threads=1) as ctx:
        pol = rlpost.Policy(ctx, stories)
        lp = pol.logprobs([([1, 2, 3, 4], 1)])
        assert type(lp) is list and len(lp) == 3 and all(type(x) is float for x in lp)
        lp2, ent = pol.logprobs([([1, 2, 3, 4], 1)], entropy=True)
        assert type(ent) is list and lp2 == lp

        def nll(c):
            assert type(c.logprobs) is list and type(c.seq_index) is list
            for t in range(c.n_tokens):
                c.dlogprobs[t] = -1.0 / c.step_n_tokens
            c.dlogprobs[0:1] = [-1.0 / c.step_n_tokens]  # slices work too
            return -sum(c.logprobs) / c.step_n_tokens
        st = pol.train_step([([1, 2, 3, 4], 1)], loss=nll)
        assert st.policy_version == 1
        eng = rlpost.RolloutEngine(pol, max_batch=2, max_seq_len=32)
        b = eng.generate([[1, 2, 3]], n=2, max_new_tokens=4, ignore_eos=True)
        t = b[0]
        for a in (t.prompt_tokens, t.completion_tokens, t.logprobs, t.token_versions):
            assert type(a) is list, type(a)
        seen = []

        def reward(req):
            seen.append(type(req.completion_tokens))
            return float(sum(req.completion_tokens) % 2)
        with rlpost.RewardFn(reward, n_threads=1) as rf:
            rf.score(b)
        assert seen == [list, list]
        b.set_token_rewards(0, [0.5] * 4)
        assert b[0].token_rewards == [0.5] * 4
        assert pol.train_rl(b).n_seqs == 2
        assert rlpost.refine([1.0, 0.5], rlpost.RefineMode.DELTA) == [0.5, 0.5]
        ps = rlpost.Task("kk", {"seed": 1}).next_batch(1, tokenizer=tok)
        assert type(ps[0].tokens) is list
    print("ok")
""")


def test_lists_without_numpy(stories_path, tok512_path):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(stories_path), str(tok512_path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
