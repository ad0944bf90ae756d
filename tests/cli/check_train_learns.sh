#!/bin/sh
# `rlpost train` must make a model better on held-out prompts, and this test
# must be able to tell when it does not. stories260K (token level, the
# fixture tokenizer) is trained with GRPO for 30 steps to start its
# completions with a vowel (regex reward); training and held-out prompts are
# different stories (checked disjoint here). Asserted on the held-out
# evaluations (8 prompts, greedy + 16 samples each):
#   - the sampled accuracy rises by ≥ 0.30 with a paired bootstrap 95 %
#     interval above 0, and greedy accuracy does not fall;
#   - the same run with the advantage sign flipped (reward "-1*regex_match")
#     fails that margin;
#   - the same run with lr 0 (a zeroed update) leaves every evaluation
#     exactly as it was, so it fails the margin too;
#   - samples.jsonl holds 4 training completions per step (prompt,
#     completion, reward, advantage) and every evaluation completion;
#   - no held-out question is among the run's training prompts, and an
#     evaluation on the training file is flagged as not held out.
# Usage: check_train_learns.sh RLPOST
set -u
rlpost=$1
. "$(dirname "$0")/train_setup.sh"

python3 - "$out" <<'PY' || fail "config"
import json, sys
d = sys.argv[1]
train = ["cat", "dog", "sun", "tree", "fish", "bird", "moon", "star", "frog", "cake", "ball", "boat", "car", "hat", "cup", "bed"]
held = ["lamp", "rose", "king", "duck", "kite", "milk", "rain", "ship"]
assert not set(train) & set(held)
for name, words in (("train", train), ("held", held)):
    with open("%s/%s.jsonl" % (d, name), "w") as f:
        for w in words:
            f.write(json.dumps({"question": "Once upon a time there was a %s" % w, "answer": w}) + "\n")
cfg = json.load(open(d + "/config.json"))
cfg.update({"steps": 30, "group_size": 8, "prompts_per_step": 8, "threads": 2, "seed": 7,
            "sampling": {"temperature": 1.0, "max_new_tokens": 8}, "optimizer": {"lr": 5e-4},
            "checkpoint": {"interval": 0}, "samples": {"per_step": 4}})
cfg["task"]["path"] = d + "/train.jsonl"
cfg["reward"] = {"name": "regex_match", "options": {"pattern": "^[aeiou]"}}
# (fp32 rollouts, from train_fixture.py: with f32 rollouts seeds 1-3 end
# at 1.0, 1.0 and 0.34, so this one seed is a fixed trajectory, not a
# property of every run)
cfg["eval"] = {"n": 8, "samples": 16, "greedy": True, "path": d + "/held.jsonl", "interval": 0,
               "accuracy_reward": "regex_match"}
json.dump(cfg, open(d + "/learn.json", "w"), indent=1)
PY
L() { "$rlpost" train "$out/learn.json" --set "model=\"$model\"" "$@"; }
L --set "output=\"$out/up\"" >"$out/up.json" 2>"$out/up.err" || { cat "$out/up.err"; fail "training run"; }
L --set "output=\"$out/flip\"" --set 'reward.name="-1*regex_match"' >"$out/flip.json" 2>"$out/flip.err" ||
  { cat "$out/flip.err"; fail "flipped run"; }
L --set "output=\"$out/zero\"" --set optimizer.lr=0 >"$out/zero.json" 2>"$out/zero.err" ||
  { cat "$out/zero.err"; fail "lr 0 run"; }

python3 - "$out" <<'PY' || fail "held-out accuracy"
import json, sys
d = sys.argv[1]
def change(run):
    return json.load(open("%s/%s.json" % (d, run)))["heldout_change"]
def learned(c):
    s, g = c["sampled"], c["greedy"]
    return s["delta"] >= 0.30 and s["delta_ci"][0] > 0 and g["last"] >= g["first"]
up, flip, zero = change("up"), change("flip"), change("zero")
print("sampled accuracy: trained %.3f -> %.3f (CI of the change %s), flipped sign %.3f -> %.3f, lr 0 %.3f -> %.3f"
      % (up["sampled"]["first"], up["sampled"]["last"], up["sampled"]["delta_ci"], flip["sampled"]["first"],
         flip["sampled"]["last"], zero["sampled"]["first"], zero["sampled"]["last"]))
assert learned(up), up
assert not learned(flip), flip
assert not learned(zero), zero
assert zero["sampled"]["delta"] == 0 and zero["greedy"]["delta"] == 0, zero
rows = [json.loads(l) for l in open(d + "/up/samples.jsonl")]
train = [r for r in rows if r["kind"] == "train"]
ev = [r for r in rows if r["kind"] == "eval"]
assert len(train) == 30 * 4, len(train)
for r in train:
    for k in ("prompt", "completion", "reward", "advantage", "correct", "step", "reference"):
        assert k in r, (k, r)
    assert r["reward"] in (0.0, 1.0) and r["correct"] == (r["reward"] == 1.0)
assert len(ev) == 2 * 8 * (1 + 16), len(ev)
assert {r["mode"] for r in ev} == {"greedy", "sampled"}
last = [r for r in ev if r["step"] == 30 and r["mode"] == "sampled"]
acc = sum(r["correct"] for r in last) / len(last)
# the summary on stdout carries 6 significant digits (127/128 = 0.9921875 prints as 0.992188)
assert abs(acc - up["sampled"]["last"]) <= 5e-7 * max(1.0, abs(acc)) + 1e-12, (acc, up["sampled"]["last"])
e = [json.loads(l) for l in open(d + "/up/eval.jsonl")]
assert e[0]["held_out"] and len(e[0]["sampled_correct"]) == 8 and len(e[0]["sampled_accuracy_ci"]) == 2
assert e[0]["train_overlap"] == 0 and e[0]["train_prompts_checked"] == 30 * 8, e[0]
PY

# an evaluation on the training prompts is flagged: not held out, with the count
L --set "output=\"$out/same\"" --set steps=2 --set "eval.path=\"$out/train.jsonl\"" >"$out/same.json" \
  2>"$out/same.err" || { cat "$out/same.err"; fail "eval on the training file"; }
grep -q "warning: 8 of the 8 held-out questions are among the 16 training prompts" "$out/same.err" ||
  { cat "$out/same.err"; fail "no overlap warning"; }
python3 -c "
import json, sys
e = json.loads(open(sys.argv[1]).readline())
assert e['held_out'] is False and e['train_overlap'] == 8, e
" "$out/same/eval.jsonl" || fail "overlap not recorded"
echo "ok: held-out accuracy rises, and a flipped sign or a zeroed update is caught"
