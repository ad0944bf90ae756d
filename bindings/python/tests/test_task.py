"""Tasks: generators, JSONL datasets, prompt sets, the resumable cursor, and
prompts served straight into a rollout engine."""
import json

import pytest

import rlpost


def test_generator_and_prompt_set():
    with rlpost.Task("kk", {"seed": 3, "people": 3}) as t:
        assert (t.size, t.epoch, t.position, t.skipped) == (0, 0, 0, 0)
        ps = t.next_batch(2)
        assert t.position == 2 and len(ps) == 2
        p0 = ps[0]
        assert p0.tokens is None and p0.group_id == 0 and p0.text.endswith("<think>")
        it = ps.item(0)
        assert it.epoch == 0 and it.position == 0 and it.index == 0
        assert it.question in p0.text and it.reference.startswith("(1) ")
        assert it.metadata["task"] == "kk" and len(it.metadata["names"]) == 3
        assert json.loads(p0.metadata_json)["reference"] == it.reference
        assert [p.text for p in ps] == [ps[0].text, ps[1].text] and ps[-1] == ps[1]
        with pytest.raises(IndexError):
            ps[2]
        with pytest.raises(rlpost.InvalidArgumentError):
            ps.item(5)
    # a prompt set outlives its task
    assert ps.item(1).index == 1
    ps.close()
    with pytest.raises(rlpost.InvalidArgumentError, match="colour"):
        rlpost.Task("countdown", {"colour": "red"})
    with pytest.raises(rlpost.InvalidArgumentError):
        rlpost.Task("sudoku")


def test_cursor_resume_continues_with_the_unserved_items():
    opts = {"seed": 1, "size": 5}
    with rlpost.Task("countdown", opts) as a:
        a.next_batch(3)
        cur = a.cursor_save()
        assert json.loads(cur)["position"] == 3
        rest = [a.next_batch(1).item(0).index for _ in range(4)]  # 2 of epoch 0, then epoch 1
        assert a.epoch == 1
    with rlpost.Task("countdown", opts) as b:
        b.cursor_restore(cur)
        assert (b.epoch, b.position) == (0, 3)
        assert [b.next_batch(1).item(0).index for _ in range(4)] == rest
        b.cursor_restore(json.loads(cur))  # a dict works too
        assert b.position == 3
    with rlpost.Task("countdown", {"seed": 2, "size": 5}) as other:
        with pytest.raises(rlpost.InvalidArgumentError):
            other.cursor_restore(cur)
        with pytest.raises(rlpost.FormatError):
            other.cursor_restore("{broken")


def test_jsonl_dataset(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text('{"question": "1+1?", "answer": 2}\n'
                    'not json\n'
                    '{"question": "2+2?", "answer": "4", "level": "easy"}\n')
    with pytest.raises(rlpost.FormatError, match="line 2"):
        rlpost.Task.open_jsonl(path)
    with rlpost.Task.open_jsonl(path, {"skip_invalid": True, "shuffle": False,
                                       "metadata_fields": ["level"]}) as t:
        assert t.size == 2 and t.skipped == 1
        ps = t.next_batch(2)
        assert ps[0].text == "1+1?" and ps.item(0).reference == "2"
        assert ps.item(1).metadata["level"] == "easy" and ps.item(1).metadata["line"] == 3
        assert t.epoch == 1 and t.position == 0
    with pytest.raises(rlpost.NotFoundError):
        rlpost.Task.open_jsonl(tmp_path / "absent.jsonl")


def test_chat_rendered_prompts_feed_the_engine(ctx, smollm2_path):
    with rlpost.Policy(ctx, smollm2_path, trainable=False) as pol, \
            rlpost.Task("countdown", {"seed": 4, "chat": True}) as task:
        ps = task.next_batch(1, tokenizer=pol.tokenizer)
        assert ps[0].tokens is not None and "<|im_start|>assistant" in ps[0].text
        eng = rlpost.RolloutEngine(pol, max_batch=2, max_seq_len=512)
        b = eng.generate(ps, n=2, max_new_tokens=4, seed=1)
        assert len(b) == 2 and b[0].metadata["task"] == "countdown"
        assert list(b[0].prompt_tokens) == list(ps[0].tokens)
        # stop strings: stop greedy decoding at a piece of its own output
        g = eng.generate(ps, temperature=0.0, max_new_tokens=12)[0]
        text = g.completion_text
        assert g.completion_text and g.finish_reason in (rlpost.FinishReason.LENGTH, rlpost.FinishReason.STOP)
        cut = text[len(text) // 2:len(text) // 2 + 2]
        s = eng.generate(ps, temperature=0.0, max_new_tokens=12, stop=["zzzz-never", cut])[0]
        assert s.finish_reason == rlpost.FinishReason.STOP and s.stop_index == 1
        assert s.completion_text == text[:text.index(cut)]
        k = eng.generate(ps, temperature=0.0, max_new_tokens=12, stop=cut, include_stop_str=True)[0]
        assert k.completion_text == text[:text.index(cut) + len(cut)] and k.stop_index == 0


def test_prompt_set_feeds_a_token_engine(policy, tok512):
    with rlpost.Task("kk", {"seed": 1, "people": 2, "template": "none"}) as task, \
            rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=512) as eng:
        ps = task.next_batch(2, tokenizer=tok512)  # rendered with tok512's (llama2) chat template
        assert ps[0].text.startswith("<s>[INST]") and ps[0].tokens[0] == 1
        b = eng.generate(ps, n=2, max_new_tokens=3)
        assert len(b) == 4 and b[3].metadata["task"] == "kk" and list(b[0].prompt_tokens) == list(ps[0].tokens)
    with rlpost.Task("kk", {"seed": 1, "people": 2, "template": "none", "chat": False}) as task, \
            rlpost.RolloutEngine(policy, max_batch=4, max_seq_len=512) as eng:
        ps = task.next_batch(2, tokenizer=tok512)
        assert ps[0].tokens is None
        with pytest.raises(rlpost.StateError):
            eng.generate(ps, max_new_tokens=2)  # text prompts need the engine's own tokenizer
        b = eng.generate([{"tokens": tok512.encode(p.text, add_bos=True), "metadata": p.metadata_json}
                          for p in ps], max_new_tokens=3)
        assert len(b) == 2 and b[1].metadata["task"] == "kk"
