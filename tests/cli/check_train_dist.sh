#!/bin/sh
# `rlpost train` on several ranks (data parallelism over the SHM process
# group) on stories260K (train_fixture.py: 4 prompts x 4 samples, 1 thread):
# - distributed.world_size = 2: each rank generates 2 of the 4 prompts; the
#   metrics cover all 16 completions and 4 groups, rank 0 alone writes the
#   run folder, and two runs give the same metrics bit for bit;
# - the same ranks started torchrun-style by hand (RLPOST_RANK,
#   RLPOST_WORLD_SIZE, RLPOST_RENDEZVOUS) train exactly the same;
# - a checkpoint at step 2, then --resume: step 3 equals the uninterrupted
#   run's;
# - rendezvous files of killed launchers are swept from TMPDIR;
# - a rank killed with -9: the launcher stops the other and exits non-zero
#   at once (not after the group's timeout);
# - Ctrl-C to the whole process group, or to one rank: all stop at the same
#   step, rank 0 checkpoints it, exit 0;
# - settings several ranks cannot run are refused with one line, exit 2;
# - with the CPU emulator of the CUDA module (second argument): one step
#   with "backend": "cuda" samples the same tokens as the CPU run and
#   matches its loss and gradient norm; two ranks share the one (emulated)
#   GPU over shared memory.
# Skips (77) without the shared data or python3.
# Usage: check_train_dist.sh RLPOST [EMULATED_CUDA_MODULE]
set -u
rlpost=$1
emu=${2:-}
. "$(dirname "$0")/train_setup.sh"
DP="distributed.world_size=2"

T --set "output=\"$out/a\"" --set "$DP" --set steps=3 >"$out/a.json" 2>"$out/err" || { cat "$out/err"; fail "2 ranks"; }
# the second run's launcher sweeps the rendezvous file a killed launcher
# left in TMPDIR (its pid has exited), and keeps a live one's
mkdir -p "$out/tmpd"
sh -c 'exit 0' & deadpid=$!
wait "$deadpid"
: >"$out/tmpd/rlpost-train-$deadpid.rendezvous"
: >"$out/tmpd/rlpost-train-$$.rendezvous"
TMPDIR="$out/tmpd" T --set "output=\"$out/b\"" --set "$DP" --set steps=3 >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "2 ranks again"; }
[ -e "$out/tmpd/rlpost-train-$deadpid.rendezvous" ] && fail "a dead launcher's rendezvous file was left"
[ -e "$out/tmpd/rlpost-train-$$.rendezvous" ] || fail "a live launcher's rendezvous file was removed"
T --set "output=\"$out/one\"" --set steps=1 >/dev/null 2>"$out/err1" || { cat "$out/err1"; fail "1 rank"; }
[ "$(grep -c '^step ' "$out/err")" -eq 3 ] || { cat "$out/err"; fail "progress lines: one per step (rank 0's)"; }

# torchrun-style: the two ranks by hand, same rendezvous file
for r in 0 1; do
  RLPOST_RANK=$r RLPOST_WORLD_SIZE=2 RLPOST_RENDEZVOUS="$out/rdv" \
    "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/env\"" --set steps=3 \
    >"$out/env$r.json" 2>"$out/env$r.err" &
  eval "pid$r=\$!"
done
wait "$pid0" || { cat "$out/env0.err"; fail "rank 0 by hand"; }
wait "$pid1" || { cat "$out/env1.err"; fail "rank 1 by hand"; }
[ -s "$out/env1.json" ] && fail "rank 1 printed a summary"
# ranks by hand that disagree on the configuration stop at once, naming the key
for r in 0 1; do
  RLPOST_RANK=$r RLPOST_WORLD_SIZE=2 RLPOST_RENDEZVOUS="$out/rdv2" \
    "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/mix\"" --set steps=3 \
    --set prompts_per_step=$((4 + 2 * r)) >/dev/null 2>"$out/mix$r.err" &
  eval "pid$r=\$!"
done
wait "$pid0" && fail "ranks with different prompts_per_step: rank 0 exited 0"
wait "$pid1" && fail "ranks with different prompts_per_step: rank 1 exited 0"
grep -q '"prompts_per_step" differs between the ranks' "$out/mix0.err" || { cat "$out/mix0.err"; fail "mismatch message"; }

# checkpoint at step 2, resume to 3
T --set "output=\"$out/r\"" --set "$DP" --set steps=2 >/dev/null 2>"$out/err" || { cat "$out/err"; fail "2 steps"; }
T --set "output=\"$out/r\"" --set "$DP" --set steps=3 --resume "$out/r" >/dev/null 2>"$out/err" ||
  { cat "$out/err"; fail "resume on 2 ranks"; }

python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(d + p)]
loose = {"rollout_seconds", "reward_seconds", "train_seconds", "publish_seconds", "step_seconds", "tokens_per_second",
         "elapsed_seconds", "trainer_idle_seconds", "rollout_idle_seconds", "buffer_size"}
a = load("/a/metrics.jsonl")
assert [r["step"] for r in a] == [1, 2, 3], a
for r in a:
    assert r["completions"] == 16 and r["n_seqs"] == 16 and r["n_groups"] == 4 and r["reward_valid"] == 16, r
    assert r["policy_version"] == r["step"] and r["optimizer_steps"] == 1 and r["grad_norm"] > 0, r
def same(x, y, what):
    assert len(x) == len(y), (what, len(x), len(y))
    for p, q in zip(x, y):
        for k in p:
            if k not in loose:
                assert p[k] == q[k], (what, p["step"], k, p[k], q[k])
same(a, load("/b/metrics.jsonl"), "a second run")
same(a, load("/env/metrics.jsonl"), "ranks started by hand")
same(a, load("/r/metrics.jsonl"), "resumed at step 2")
ev = load("/a/eval.jsonl")
assert [e["step"] for e in ev] == [0, 3] and all(e["n"] == 4 for e in ev), ev
one = load("/one/eval.jsonl")[0]  # same weights, greedy: rank 0 evaluates the whole set, as one process does
for k in ("accuracy", "reward_mean", "mean_completion_tokens"):
    assert ev[0][k] == one[k], (k, ev[0][k], one[k])
s = json.load(open(d + "/a.json"))
assert s["steps_completed"] == 3 and s["checkpoint"].endswith("step_3"), s
PY
[ $? -eq 0 ] || fail "2-rank metrics"
for f in "$out/a/checkpoints/step_3/model.safetensors" "$out/b/checkpoints/step_3/model.safetensors"; do
  [ -f "$f" ] || fail "no checkpoint $f"
done
cmp -s "$out/a/checkpoints/step_3/model.safetensors" "$out/b/checkpoints/step_3/model.safetensors" ||
  fail "two 2-rank runs ended with different weights"

# a rank killed: the launcher stops the other at once
"$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/k\"" --set "$DP" --set steps=100000 \
  --set eval.n=0 --set distributed.timeout_s=120 >/dev/null 2>"$out/k.err" &
pid=$!
i=0
while ! grep -q "^step 2/" "$out/k.err" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
victim=$(pgrep -P $pid | tail -n 1)
[ -n "$victim" ] || fail "no rank processes under the launcher"
t0=$(date +%s)
kill -9 "$victim"
wait $pid
rc=$?
t1=$(date +%s)
[ $rc -ne 0 ] || fail "a killed rank: the launcher exited 0"
[ $((t1 - t0)) -lt 60 ] || fail "a killed rank: the launcher took $((t1 - t0)) s"
grep -q "rank 1 was killed by signal 9; stopping the other ranks" "$out/k.err" || { cat "$out/k.err"; fail "kill message"; }

# Ctrl-C: to the launcher's whole process group (as a terminal sends it), then to one rank only: every
# rank stops at the same step, rank 0 checkpoints it, exit 0
for who in group rank; do
  setsid "$rlpost" train "$cfg" --set "model=\"$model\"" --set "output=\"$out/i$who\"" --set "$DP" \
    --set steps=100000 --set eval.n=0 >"$out/i$who.json" 2>"$out/i$who.err" &
  pid=$!
  i=0
  while ! grep -q "^step 3/" "$out/i$who.err" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
  if [ $who = group ]; then /bin/kill -s INT -- "-$pid"; else kill -INT "$(pgrep -P $pid | tail -n 1)"; fi
  wait $pid
  rc=$?
  [ $rc -eq 0 ] || { cat "$out/i$who.err"; fail "Ctrl-C to the $who: exit $rc"; }
  grep -q '"interrupted":true' "$out/i$who.json" || fail "Ctrl-C to the $who: no interrupted summary"
  n=$(wc -l <"$out/i$who/metrics.jsonl")
  [ -f "$out/i$who/checkpoints/step_$n/state.json" ] || fail "Ctrl-C to the $who: no checkpoint of step $n"
done

# refused before anything starts
for bad in "sync.mode=\"async\"" "prompts_per_step=1" "distributed.transport=\"infiniband\"" "backend=\"tpu\"" \
  "distributed.rendezvous=\"\"" "distributed.timeout_s=0.5"; do
  T --set "output=\"$out/bad\"" --set "$DP" --set "$bad" >/dev/null 2>"$out/err"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$out/err")" -eq 1 ] || { cat "$out/err"; fail "$bad: exit $rc"; }
  [ -e "$out/bad" ] && fail "$bad: wrote the output folder"
done
RLPOST_RANK=0 RLPOST_WORLD_SIZE=x T --set "output=\"$out/bad\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] || { cat "$out/err"; fail "a bad RLPOST_WORLD_SIZE"; }
# "backend": "cuda" on the CPU emulator of the CUDA module (one step: the emulator is slow)
if [ -n "$emu" ] && [ -f "$emu" ]; then
  # fp32 rollouts on both: the CUDA backend has no quantized decode, and the
  # comparison is of the kernels, not of rollout.weights' auto choice
  ONE="--set steps=1 --set eval.n=0 --set sampling.max_new_tokens=8 --set rollout.weights=\"f32\""
  T --set "output=\"$out/c_cpu\"" $ONE >/dev/null 2>"$out/err" || { cat "$out/err"; fail "1 CPU step"; }
  RLPOST_CUDA_MODULE="$emu" T --set "output=\"$out/c_gpu\"" --set 'backend="cuda"' $ONE >/dev/null 2>"$out/err" ||
    { cat "$out/err"; fail "1 step with backend cuda (emulated)"; }
  RLPOST_CUDA_MODULE="$emu" T --set "output=\"$out/c_dp\"" --set 'backend="cuda"' --set "$DP" $ONE >/dev/null \
    2>"$out/err" || { cat "$out/err"; fail "2 ranks with backend cuda (emulated)"; }
  python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
cpu, gpu, dp = (json.loads(open(d + "/%s/metrics.jsonl" % n).readline()) for n in ("c_cpu", "c_gpu", "c_dp"))
# the GPU sampler replays the CPU's draws: the same tokens, so the same rewards
for k in ("completion_tokens", "reward_mean", "prompt_index", "truncated"):
    assert cpu[k] == gpu[k], (k, cpu[k], gpu[k])
for k in ("grad_norm", "entropy"):
    assert abs(cpu[k] - gpu[k]) <= 1e-4 * abs(cpu[k]), (k, cpu[k], gpu[k])
assert abs(cpu["loss"] - gpu["loss"]) <= 1e-6, (cpu["loss"], gpu["loss"])
assert dp["completions"] == 16 and dp["n_groups"] == 4 and dp["policy_version"] == 1, dp
PY
  [ $? -eq 0 ] || fail "backend cuda (emulated) against the CPU"
else
  echo "no emulated CUDA module: the backend cuda runs were not done"
fi
echo "ok"
