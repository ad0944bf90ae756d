#!/bin/sh
# `rlpost train` with a reward library that dereferences NULL on every
# sample whose completion contains "an" (tests/unit/reward_crashy.c):
# with reward.isolation "process" the run completes, exactly those samples
# are invalid with "reward worker killed by SIGSEGV" in samples.jsonl and
# the others are scored; with "thread" (the default) the same run dies of
# the signal (exit 139, 134 under ASan); a library that crashes on every
# sample fails the run (exit 1) at reward.max_restarts instead of spinning;
# a resume may switch isolation (also from a checkpoint written before
# these keys); bad isolation keys exit 2 naming the key. Skips (77) without the shared
# data or python3.
# Usage: check_train_isolation.sh RLPOST CRASHY_MODULE
set -u
rlpost=$1
crashy=$2
. "$(dirname "$0")/train_setup.sh"

lib() { T --set "reward.library=\"$crashy\"" --set samples.per_step=16 --set eval.n=0 "$@"; }

# --- process isolation: the run goes on, the right samples carry the signal
lib --set "output=\"$out/proc\"" --set 'reward.options={"segv_if": "an"}' --set 'reward.isolation="process"' \
  --set reward.workers=2 --set reward.max_restarts=1000 >"$out/sum.json" 2>"$out/err" || { cat "$out/err"; fail "process-isolated run"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
m = [json.loads(l) for l in open(d + "/proc/metrics.jsonl")]
assert [r["step"] for r in m] == [1, 2], m
s = [json.loads(l) for l in open(d + "/proc/samples.jsonl")]
assert len(s) == 32, len(s)
crashed = 0
for r in s:
    if "an" in r["completion"]:
        assert r.get("invalid", "").endswith("reward worker killed by SIGSEGV"), r
        crashed += 1
    else:
        assert "invalid" not in r and r["reward"] is not None, r
assert 0 < crashed < 32, crashed  # both kinds occur, or the check proves nothing
# the metrics count them per step: reward_crashed, and reward_valid the rest
assert sum(r["reward_crashed"] for r in m) == crashed, (crashed, [r["reward_crashed"] for r in m])
assert all(r["reward_crashed"] + r["reward_valid"] == 16 for r in m), m
assert all(r["reward_errors"] == r["reward_timeouts"] == r["reward_nonfinite"] == 0 for r in m), m
assert json.load(open(d + "/sum.json"))["steps_completed"] == 2
PY
[ $? -eq 0 ] || fail "process isolation: samples"
grep -q "samples invalid: their reward worker died" "$out/err" || fail "no crash notice on stderr"

# --- resume: how the reward runs may change (thread ↔ process), and a
# checkpoint from before the isolation keys existed resumes too
lib --set "output=\"$out/res\"" --set 'reward.options={"segv_if": "zzzz"}' --set 'reward.isolation="process"' \
  >/dev/null 2>"$out/err" || { cat "$out/err"; fail "run to resume"; }
lib --set "output=\"$out/res\"" --set 'reward.options={"segv_if": "zzzz"}' --set steps=3 --resume "$out/res" \
  >/dev/null 2>"$out/err" || { cat "$out/err"; fail "resume in thread isolation"; }
python3 - "$out/res/checkpoints/step_2/state.json" <<'PY' || exit 1
import json, sys
p = sys.argv[1]
st = json.load(open(p))
for k in ("isolation", "workers", "timeout_ms", "batch_size", "max_restarts"):
    del st["config"]["reward"][k]
json.dump(st, open(p, "w"))
PY
echo step_2 >"$out/res/checkpoints/latest"
lib --set "output=\"$out/res\"" --set 'reward.options={"segv_if": "zzzz"}' --set steps=3 --resume "$out/res/checkpoints/step_2" \
  >/dev/null 2>"$out/err" || { cat "$out/err"; fail "resume of a checkpoint without the isolation keys"; }
lib --set "output=\"$out/res\"" --set 'reward.options={"segv_if": "yyyy"}' --set steps=3 --resume "$out/res/checkpoints/step_2" \
  >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q '"reward" differs' "$out/err" || { cat "$out/err"; fail "a changed reward.options was resumed"; }

# --- thread isolation: the same library kills the run
lib --set "output=\"$out/thr\"" --set 'reward.options={"segv_if": "an"}' >/dev/null 2>"$out/err"
st=$?
[ "$st" -eq 139 ] || [ "$st" -eq 134 ] || { cat "$out/err"; fail "thread isolation exited $st, expected 139"; }

# --- a library that always crashes: exit 1 with the reason, after max_restarts
lib --set "output=\"$out/cap\"" --set 'reward.options={"segv_if": ""}' --set 'reward.isolation="process"' \
  --set reward.workers=1 --set reward.max_restarts=3 >/dev/null 2>"$out/err"
st=$?
[ "$st" -eq 1 ] || { cat "$out/err"; fail "always-crashing library exited $st, expected 1"; }
grep -q "more than 3 restarts within 60 s" "$out/err" || { cat "$out/err"; fail "no restart-cap message"; }

# --- bad keys: exit 2, nothing written
bad() {
  want=$1; shift
  T --set "output=\"$out/bad\"" "$@" >/dev/null 2>"$out/err"
  st=$?
  [ "$st" -eq 2 ] || { cat "$out/err"; fail "$want: exit $st, expected 2"; }
  grep -q "$want" "$out/err" || { cat "$out/err"; fail "message lacks '$want'"; }
  [ ! -e "$out/bad" ] || fail "$want: the output folder was created"
}
bad "reward.isolation" --set 'reward.isolation="fork"' --set "reward.library=\"$crashy\""
bad "reward.isolation" --set 'reward.isolation="process"'
bad "reward.workers" --set reward.workers=65
bad "reward.timeout_ms" --set reward.timeout_ms=-1
bad "reward.batch_size" --set reward.batch_size=0
bad "reward.max_restarts" --set reward.max_restarts=-1
bad "reward.library: .*/nonexistent/r.so: cannot open" --set 'reward.isolation="process"' --set 'reward.library="/nonexistent/r.so"'
echo "ok"
