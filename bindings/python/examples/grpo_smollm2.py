#!/usr/bin/env python3
"""The synchronous GRPO loop from Python, with the reward written in Python.

    grpo_smollm2.py [MODEL] [--tokenizer PATH] [--steps N] [--prompts P]
                    [--group G] [--max-new-tokens T] [--lr LR] [--threads T]
                    [--raise-every K]

MODEL defaults to models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh).
A model without a tokenizer of its own (a llama2.c checkpoint such as
stories260K.bin) needs --tokenizer (a tokenizer.json or llama2.c
tokenizer.bin).

Each step: generate a group of completions per question with the current
weights (a co-located engine sharing the policy's weights: staleness 0),
score them with `reward` below -- a plain Python function that the library
calls on its worker threads -- and run one GRPO step. As in Logic-RL the
assistant turn is opened with "<think>", and the reward is graded so that
a 135M model gets a signal before it writes the whole format: 0.25 per tag
of <think> </think> <answer> </answer> found once and in order, plus 1 for
the right number inside <answer>. --raise-every K makes the reward raise
on every K-th sample, to show that such a sample is marked invalid (with
the exception's last line as the reason) and the run goes on.

stdout: one JSON line per step (mean reward, strict format rate, valid and
invalid samples, loss, grad norm, entropy, version, seconds); stderr:
progress. Exit 0, 2 on bad arguments.
"""
import argparse
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


from _host import import_rlpost  # noqa: E402  (beside this file)

rlpost = import_rlpost()

QUESTIONS = [("What is 12 + 30?", 42), ("What is 7 times 8?", 56), ("How many legs do 3 cats have?", 12),
             ("What is 100 minus 37?", 63), ("What is half of 50?", 25), ("What is 9 squared?", 81),
             ("How many days are in two weeks?", 14), ("What is 15 divided by 3?", 5)]
SYSTEM = ("You are a helpful assistant. First think about the question inside <think> </think> tags, then give "
          "the final answer inside <answer> </answer> tags, like this: <think> reasoning </think> <answer> "
          "answer </answer>.")
PREFIX = "<think>"  # the assistant turn opens with it (Logic-RL)
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def format_progress(text):
    """How far along the tag sequence the text gets (0, 0.25, ..., 1); a tag
    written twice gets no credit (Logic-RL fails the format)."""
    score, at = 0.0, 0
    for tag in TAGS:
        p = text.find(tag, at)
        if p < 0:
            break
        if text.find(tag, p + 1) >= 0:
            return 0.0
        score += 0.25
        at = p + len(tag)
    return score


def strict_format(text):
    """Logic-RL's format rule: each tag exactly once, in order."""
    pos = [text.find(t) for t in TAGS]
    return all(p >= 0 and text.count(t) == 1 for p, t in zip(pos, TAGS)) and pos == sorted(pos)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokenizer", help="tokenizer file for a model without one")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=4, help="questions per step")
    ap.add_argument("--group", type=int, default=8, help="samples per question (GRPO group)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0 = one per core)")
    ap.add_argument("--raise-every", type=int, default=0, metavar="K",
                    help="the reward raises on every K-th sample (a demonstration)")
    args = ap.parse_args()
    if args.steps < 1 or args.prompts < 1 or args.group < 2 or args.max_new_tokens < 1:
        ap.error("--steps and --prompts must be >= 1, --group >= 2, --max-new-tokens >= 1")

    # 1. context, policy (trainable) and its optimizer
    ctx = rlpost.Context(n_threads=args.threads)
    policy = rlpost.Policy(ctx, args.model)
    policy.set_optimizer(lr=args.lr, weight_decay=0.0)
    tok = policy.tokenizer
    if args.tokenizer:
        tok = rlpost.Tokenizer(args.tokenizer)
    if tok is None:
        ap.error("%s has no tokenizer of its own: give --tokenizer" % args.model)

    # 2. a co-located engine on the same weights (no copy, staleness 0)
    engine = rlpost.RolloutEngine(policy, max_batch=args.prompts * args.group, max_seq_len=512, share_weights=True)

    # 3. prompts through the chat template (content is never parsed for special tokens)
    prompts = []
    for q, answer in QUESTIONS:
        ids = list(tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]))
        ids += list(tok.encode(PREFIX))
        prompts.append({"tokens": ids, "metadata": {"reference": str(answer)}})

    # 4. the reward, in Python; the library calls it on its worker threads
    calls = [0]
    lock = threading.Lock()

    def reward(req):
        with lock:
            calls[0] += 1
            k = calls[0]
        if args.raise_every and k % args.raise_every == 0:
            raise RuntimeError("flaky judge (sample %d)" % k)
        # an engine without a tokenizer of its own leaves completion text empty: decode here
        # (calling another handle from a reward is allowed; tokenizers are thread-safe)
        text = PREFIX + (req.completion if req.completion else tok.decode(req.completion_tokens))
        score = format_progress(text)
        m = re.findall(r"<answer>\s*(-?\d+)\s*</answer>", text)
        if m and m[-1] == req.reference:
            score += 1.0
        return score

    scorer = rlpost.RewardFn(reward, name="python_format_answer", timeout_ms=30000)

    for step in range(args.steps):
        t0 = time.monotonic()
        chosen = [prompts[(step * args.prompts + i) % len(prompts)] for i in range(args.prompts)]
        batch = engine.generate(chosen, n=args.group, temperature=1.0, max_new_tokens=args.max_new_tokens,
                                seed=step + 1)
        rs = scorer.score(batch)
        texts = [PREFIX + (t.completion_text or tok.decode(t.completion_tokens)) for t in batch]
        st = policy.train_rl(batch, advantage=rlpost.Advantage.GRPO)
        rec = {"step": step, "mean_reward": rs.mean_score, "format_rate": sum(map(strict_format, texts)) / len(texts),
               "valid": rs.valid, "invalid": rs.invalid, "errors": rs.errors, "loss": st.loss,
               "grad_norm": st.grad_norm, "entropy": st.entropy, "zero_std_groups": st.zero_std_groups,
               "tokens": st.n_tokens, "version": st.policy_version, "seconds": round(time.monotonic() - t0, 3)}
        print(json.dumps(rec), flush=True)
        errors = [t.error for t in batch if not t.valid]
        if errors:
            print("step %d: %d invalid samples, e.g. %s" % (step, len(errors), errors[0]), file=sys.stderr)
        batch.close()
    scorer.close()
    engine.close()
    if tok is not policy.tokenizer:
        tok.close()
    policy.close()
    ctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
