#!/bin/sh
# `rlpost train`'s sync modes on stories260K (the fixture of
# train_fixture.py: 4 prompts x 4 samples, 1 thread):
# - pull (an engine with its own copy, refreshed before each generate) and
#   async with η = 0 (a rollout thread on its own context and weights, the
#   replay buffer, the staleness gate) train on exactly what sync trains on:
#   their metrics equal sync's for 3 steps, bit for bit;
# - async with η = 1: 2 records, staleness ≤ 1, nothing dropped, the
#   prompts in the same order as sync, the idle times recorded;
# - async, kill -9 after a checkpoint, then --resume: steps k+1, k+2 equal
#   the uninterrupted async run's (η = 0: which version generates each
#   batch does not depend on thread timing);
# - async with η = 1, Ctrl-C: exit 0 and a checkpoint at the trainer's step
#   and cursor (the rollout thread had served prompts beyond it); the
#   resumed run serves every prompt once per epoch;
# - versions count RL steps, so the gate opens after every step whatever
#   it applied: async with a reward that refuses every sample (no
#   optimizer step) runs to the end, and so does async with η = 0,
#   ppo_epochs × mini_batches = 2 and filter_equal_groups, with a constant
#   reward (every group filtered: no optimizer step) and with a varied one
#   (2 optimizer steps a step); policy_version is the step in each.
# Skips (77) without the shared data or python3.
# Usage: check_train_modes.sh RLPOST REWARD_MODULE
set -u
rlpost=$1
reward_so=$2
. "$(dirname "$0")/train_setup.sh"
ASYNC="sync.mode=\"async\""

# --- the same 3 steps in each mode
for m in sync pull async; do
  T --set "output=\"$out/$m\"" --set steps=3 --set "sync.mode=\"$m\"" >"$out/$m.json" 2>"$out/err" ||
    { cat "$out/err"; fail "3 steps in $m mode"; }
done
T --set "output=\"$out/eta1\"" --set "$ASYNC" --set sync.staleness=1 >"$out/eta1.json" 2>"$out/err" ||
  { cat "$out/err"; fail "async with η = 1"; }
grep -q "^step 2/2 .*| idle trainer .* s, rollout .* s | buffer " "$out/err" || { cat "$out/err"; fail "progress line"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
# timing, and what only async measures where it waits
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size"}
sync = load("/sync/metrics.jsonl")
assert [r["step"] for r in sync] == [1, 2, 3]
for mode in ("pull", "async"):
    other = load("/%s/metrics.jsonl" % mode)
    assert len(other) == 3, (mode, other)
    for a, b in zip(sync, other):
        assert set(a) == set(b), (mode, set(a) ^ set(b))
        for k in a:
            if k not in loose:
                assert a[k] == b[k], (mode, a["step"], k, a[k], b[k])
    assert load("/%s/eval.jsonl" % mode)[-1]["accuracy"] == load("/sync/eval.jsonl")[-1]["accuracy"]
for r in load("/async/metrics.jsonl"):
    assert r["staleness_max"] == 0 and r["buffer_dropped"] == 0, r
assert json.load(open(d + "/async.json"))["sync_mode"] == "async"

e1 = load("/eta1/metrics.jsonl")
assert [r["step"] for r in e1] == [1, 2] and [r["policy_version"] for r in e1] == [1, 2], e1
for r, s in zip(e1, sync):
    assert r["n_seqs"] == 16 and r["n_groups"] == 4 and r["completions"] == 16, r
    assert 0 <= r["staleness_mean"] <= r["staleness_max"] <= 1, r
    assert r["buffer_dropped"] == 0 and r["buffer_dropped_total"] == 0, r
    assert r["trainer_idle_seconds"] >= 0 and r["rollout_idle_seconds"] >= 0 and r["rollout_seconds"] >= 0, r
    assert r["prompt_index"] == s["prompt_index"] and r["sampling_seed"] == s["sampling_seed"], (r, s)
# a step's rollout figures are what the rollout side did since the previous
# step: with η = 1 it may have generated step 2's batch before step 1 ended
# (0 s at step 2, seen once under load); over the run it generated
assert sum(r["rollout_seconds"] for r in e1) > 0, e1
assert e1[0]["staleness_max"] == 0  # nothing older than version 0 exists
assert [r["step"] for r in load("/eta1/eval.jsonl")] == [0, 2]
st = json.load(open(d + "/eta1/checkpoints/step_2/state.json"))
assert st["step"] == 2 and st["version"] == 2 and st["sync_mode"] == "async", st
assert st["cursor"]["epoch"] == 1 and st["cursor"]["position"] == 0, st  # the trainer's, not the rollout thread's
PY
[ $? -eq 0 ] || fail "the modes differ"

# --- async: kill -9 after a checkpoint, resume, steps k+1 and k+2 against the uninterrupted run
# (the driver itself in the background, not the function T: kill must reach it)
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/k9\"" --set "$ASYNC" --set steps=400 \
  --set checkpoint.interval=2 --set eval.n=0 >/dev/null 2>&1 &
pid=$!
i=0
while [ ! -f "$out/k9/checkpoints/latest" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
k=$(sed 's/step_//' "$out/k9/checkpoints/latest")
[ -n "$k" ] || fail "no checkpoint before kill -9"
T --set "output=\"$out/k9\"" --set "$ASYNC" --set steps=$((k + 2)) --set checkpoint.interval=2 --set eval.n=0 \
  --resume "$out/k9" >"$out/k9.json" 2>"$out/err" || { cat "$out/err"; fail "async resume after kill -9"; }
T --set "output=\"$out/k9full\"" --set "$ASYNC" --set steps=$((k + 2)) --set checkpoint.interval=2 --set eval.n=0 \
  >/dev/null 2>"$out/err" || { cat "$out/err"; fail "uninterrupted async run"; }
python3 - "$out" "$k" <<'PY' || exit 1
import json, sys
d, k = sys.argv[1], int(sys.argv[2])
load = lambda p: [json.loads(l) for l in open(d + p)]
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size"}
full, resumed = load("/k9full/metrics.jsonl"), load("/k9/metrics.jsonl")
assert [r["step"] for r in resumed] == list(range(1, k + 3)), [r["step"] for r in resumed]
for a, b in zip(full[k:], resumed[k:]):
    for key in a:
        if key not in loose:
            assert a[key] == b[key], (a["step"], key, a[key], b[key])  # bit-exact: η = 0, 1 thread each
s = json.load(open(d + "/k9.json"))
assert s["resumed_from"] == k and s["steps_completed"] == k + 2, s
PY
[ $? -eq 0 ] || fail "resumed async metrics differ from the uninterrupted run"

# --- async η = 1, Ctrl-C: the checkpoint holds the trainer's step and cursor; resume serves each prompt once per epoch
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/int\"" --set "$ASYNC" --set sync.staleness=1 \
  --set steps=100000 --set eval.n=0 >"$out/int.json" 2>"$out/int.err" &
pid=$!
i=0
while ! grep -q "^step 3/" "$out/int.err" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 0 ] || { cat "$out/int.err"; fail "async SIGINT: exit $rc"; }
grep -q '"interrupted":true' "$out/int.json" || fail "async SIGINT: no interrupted summary"
n=$(wc -l <"$out/int/metrics.jsonl")
T --set "output=\"$out/int\"" --set "$ASYNC" --set sync.staleness=1 --set steps=$((n + 3)) --set eval.n=0 --set checkpoint.keep=0 \
  --resume "$out/int" >/dev/null 2>"$out/err" || { cat "$out/err"; fail "resume after SIGINT"; }
python3 - "$out" "$n" <<'PY' || exit 1
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
st = json.load(open(d + "/int/checkpoints/step_%d/state.json" % n))
assert st["step"] == n and st["version"] == n, st
assert (st["cursor"]["epoch"], st["cursor"]["position"]) == divmod(4 * n, 8), st
m = [json.loads(l) for l in open(d + "/int/metrics.jsonl")]
assert [r["step"] for r in m] == list(range(1, n + 4)), [r["step"] for r in m]
ids = [i for r in m for i in r["prompt_index"]]
for e in range(len(ids) // 8):
    assert sorted(ids[8 * e:8 * e + 8]) == list(range(8)), (e, ids)  # each prompt once per epoch
PY
[ $? -eq 0 ] || fail "async Ctrl-C and resume"

# --- versions count RL steps: steps that apply no optimizer step, or two, each advance the version by one,
# so the gate (B = prompts_per_step groups per version) opens after each; every run reaches its last step
T --set "output=\"$out/invalid\"" --set "$ASYNC" --set steps=3 --set eval.n=0 --set "reward.library=\"$reward_so\"" \
  --set 'reward.options={"invalid": true}' >/dev/null 2>"$out/err" || { cat "$out/err"; fail "async, every sample invalid"; }
for scale in 0 1; do
  T --set "output=\"$out/filter$scale\"" --set "$ASYNC" --set sync.staleness=0 --set steps=3 --set eval.n=0 \
    --set algorithm.ppo_epochs=2 --set algorithm.mini_batches=1 --set algorithm.filter_equal_groups=true \
    --set "reward.library=\"$reward_so\"" --set "reward.options={\"scale\": $scale}" >/dev/null 2>"$out/err" ||
    { cat "$out/err"; fail "async, η = 0, k = 2, filter_equal_groups, reward scale $scale"; }
done
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
for run in ("invalid", "filter0", "filter1"):
    m = load("/%s/metrics.jsonl" % run)
    assert [r["step"] for r in m] == [1, 2, 3], (run, m)
    assert [r["policy_version"] for r in m] == [1, 2, 3], (run, [r["policy_version"] for r in m])
    for r in m:
        if run == "invalid":
            assert r["invalid_seqs"] == 16 and r["optimizer_steps"] == 0, r
        elif run == "filter0":  # reward 0 everywhere: every group filtered
            assert r["filtered_groups"] == 4 and r["optimizer_steps"] == 0, r
        else:  # rewards = token counts: a group is filtered when all its samples hit max_new_tokens
            assert r["optimizer_steps"] == (0 if r["filtered_groups"] == 4 else 2), r
        assert r["buffer_dropped"] == 0, (run, r)
        if run != "invalid":
            assert r["staleness_max"] == 0, (run, r)  # η = 0 in RL steps: each batch made by the version it trains
assert any(r["optimizer_steps"] == 2 for r in load("/filter1/metrics.jsonl"))
PY
[ $? -eq 0 ] || fail "RL-step versions in async mode"
echo "ok"
