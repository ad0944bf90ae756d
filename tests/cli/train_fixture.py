#!/usr/bin/env python3
"""The fixture of the `rlpost train` CLI tests (tests/cli/check_train*.sh),
written into the folder given as the only argument: tok512.bin, a 512-piece ASCII llama2.c tokenizer that
stands in for stories260K's missing one; data.jsonl, 8 one-line stories
with their last word as the reference; config.json, 2 GRPO steps of 4
prompts x 4 samples with a regex reward and 1 thread (model.bin is the
caller's copy of stories260K.bin)."""
import json, struct, string, sys
d = sys.argv[1]
# llama2.c tokenizer.bin: int32 max_len, then per piece float32 score, int32 len, bytes
pieces = ["<unk>", "\n<s>\n", "\n</s>\n"] + [chr(c) for c in range(32, 127)]
letters = string.ascii_lowercase
for a in letters:
    for b in " " + letters:
        if len(pieces) < 512:
            pieces.append(a + b)
with open(d + "/tok512.bin", "wb") as f:
    f.write(struct.pack("<i", max(len(p) for p in pieces)))
    for i, p in enumerate(pieces):
        b = p.encode()
        f.write(struct.pack("<fi", -float(i), len(b)) + b)
words = ["cat", "dog", "sun", "tree", "fish", "bird", "moon", "star"]
with open(d + "/data.jsonl", "w") as f:
    for i, w in enumerate(words):
        f.write(json.dumps({"question": "Once upon a time there was a %s" % w, "answer": w}) + "\n")
cfg = {
    "model": d + "/model.bin", "tokenizer": d + "/tok512.bin", "threads": 1, "seed": 7,
    "output": d + "/runA", "steps": 2, "group_size": 4, "prompts_per_step": 4,
    "task": {"name": "jsonl", "path": d + "/data.jsonl", "options": {"chat": False}},
    "reward": {"name": "regex_match", "options": {"pattern": "[aeiou] [a-z]"}},
    "sampling": {"temperature": 1.0, "max_new_tokens": 24},
    "optimizer": {"lr": 1e-3},
    "eval": {"n": 4, "accuracy_reward": "regex_match"},
    "checkpoint": {"interval": 2},
    # fp32 rollouts: the tests compare runs bit for bit and check that the
    # 260K-parameter model learns; with `auto` the Q8_0 copy's share of the
    # decode depends on the CPU's int8 kernel (the switch to fp32 products
    # is at 24 rows with AVX512-VNNI, 12 with AVX2; scalar: f32), so each
    # CPU would run a different trajectory of this chaotic little model (one
    # seed of check_train_learns stalled at 0.39 with AVX2's mix). Q8_0
    # rollouts: tests/unit/test_rollout.c, test_qmatmul.c, and the real
    # model's runs in docs/evidence/.
    "rollout": {"weights": "f32"},
    # fp32 GEMMs for the same reason: the default is `auto` (bf16 on CPUs
    # with bf16 instructions, fp32 elsewhere). bf16 runs:
    # check_train_cli.sh (one step each of "bf16" and "auto"), and the real
    # model's held-out comparison in docs/evidence/default_run_bf16_zen4.
    "matmul_precision": "fp32",
}
json.dump(cfg, open(d + "/config.json", "w"), indent=1)
