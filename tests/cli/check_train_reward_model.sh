#!/bin/sh
# `rlpost train` with a learned reward model in the reward: stories260K
# (train_fixture.py) scored by "regex_match+0.5*reward_model", the model a
# tiny ORM written by transformers (tests/reference/fixtures/hf/rm_orm,
# LlamaForSequenceClassification with its byte-level tokenizer.json), with
# per-term options. Checked: the run trains; every training sample's reward
# is regex + 0.5 x the reward model's term (samples.jsonl reward_terms),
# which varies between samples; a misconfigured term exits 2 naming it.
# (That the term is the ORM's score of prompt + completion, as transformers
# computes it, is tests/unit/test_reward_model.c's.) Skips (77) without the shared data or python3.
# Usage: check_train_reward_model.sh RLPOST SOURCE_ROOT
set -u
rlpost=$1
src=$2
. "$(dirname "$0")/train_setup.sh"
rm_dir="$src/tests/reference/fixtures/hf/rm_orm"
opts="{\"regex_match\": {\"pattern\": \"[aeiou] [a-z]\"}, \"reward_model\": {\"model\": \"$rm_dir\", \"model_threads\": 1}}"

T --set 'reward.name="regex_match+0.5*reward_model"' --set "reward.options=$opts" --set 'samples.per_step=16' \
  --set 'checkpoint.interval=0' >"$out/sum.json" 2>"$out/err" || { cat "$out/err"; fail "run with reward_model"; }
python3 - "$out" <<'PY' || fail "rewards of the run"
import json, sys
d = sys.argv[1]
m = [json.loads(l) for l in open(d + "/runA/metrics.jsonl")]
assert [r["step"] for r in m] == [1, 2], m
rows = [json.loads(l) for l in open(d + "/runA/samples.jsonl")]
train = [r for r in rows if r["kind"] == "train"]
assert len(train) == 32, len(train)
distinct = set()
for r in train:
    t = r["reward_terms"]
    assert set(t) == {"regex_match", "reward_model"}, t
    assert abs(r["reward"] - (t["regex_match"] + 0.5 * t["reward_model"])) < 1e-5, r
    distinct.add(round(t["reward_model"], 6))
assert len(distinct) > 8, distinct  # a model's score, not a constant
print("reward_model terms:", min(distinct), max(distinct))
PY

# --set of a key inside reward.options keeps the object's other keys
T --set "output=\"$out/runC\"" --set 'reward.name="regex_match+0.5*reward_model"' \
  --set 'reward.options={"regex_match": {"pattern": "[aeiou] [a-z]"}}' \
  --set "reward.options.reward_model.model=$rm_dir" --set reward.options.reward_model.model_threads=1 \
  --set steps=1 --set eval.n=0 --set checkpoint.interval=0 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "reward.options.reward_model.model by --set"; }
python3 - "$out" <<'PY' || fail "the options object after --set of keys inside it"
import json, sys
o = json.load(open(sys.argv[1] + "/runC/config.json"))["reward"]["options"]
assert o["regex_match"] == {"pattern": "[aeiou] [a-z]"} and o["reward_model"]["model_threads"] == 1, o
PY

# a term's options that do not fit it: exit 2, the term named
T --set "output=\"$out/runB\"" --set 'reward.name="regex_match+reward_model"' --set "reward.options={\"reward_model\": {\"model\": \"$out\"}}" \
  >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "reward_model" "$out/err" || { cat "$out/err"; fail "a bad reward_model term"; }
echo "reward_model in rlpost train: ok"
