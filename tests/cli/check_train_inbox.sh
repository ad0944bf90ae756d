#!/bin/sh
# `rlpost train` fed by `rlpost rollout-worker` processes through
# rollout.inbox (stories260K, the fixture of train_fixture.py): two worker
# processes (seeds 7 and 8) write batch files, an async trainer (η = 1)
# takes them in for 3 steps: every step trains on G whole groups at most
# one version old, with their prompt indices; the workers loaded versions
# the trainer published (their summary's version ≥ 1) and stop on SIGTERM
# with exit 0. Misuse: rollout.inbox outside async, a worker without an
# inbox, a bad --batches: exit 2 naming the key. Skips (77) without the
# shared data or python3. Usage: check_train_inbox.sh RLPOST
set -u
rlpost=$1
. "$(dirname "$0")/train_setup.sh"
inbox="$out/inbox"
mkdir -p "$inbox"
W() { "$rlpost" rollout-worker "$cfg" --set "model=\"$model\"" --set 'sync.mode="async"' --set sync.staleness=1 \
        --set "rollout.inbox=\"$inbox\"" --set "output=\"$out/run\"" "$@"; }

# --- misuse
T --set "rollout.inbox=\"$inbox\"" --set "output=\"$out/bad\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "rollout.inbox: needs sync.mode" "$out/err" || { cat "$out/err"; fail "inbox without async"; }
"$rlpost" rollout-worker "$cfg" --set "model=\"$model\"" >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q "rollout.inbox" "$out/err" || { cat "$out/err"; fail "worker without inbox"; }
W --batches 0 >/dev/null 2>"$out/err"
[ $? -eq 2 ] && grep -q -- "--batches" "$out/err" || { cat "$out/err"; fail "--batches 0"; }

# --- two workers, one trainer
# (not through W: $! must be the worker's own pid for the SIGTERM below)
for s in 7 8; do
  "$rlpost" rollout-worker "$cfg" --set "model=\"$model\"" --set 'sync.mode="async"' --set sync.staleness=1 \
    --set "rollout.inbox=\"$inbox\"" --set "output=\"$out/run\"" --set seed=$s >"$out/w$s.json" 2>"$out/w$s.err" &
  eval "w$s=\$!"
done
w1=$w7
w2=$w8
T --set 'sync.mode="async"' --set sync.staleness=1 --set "rollout.inbox=\"$inbox\"" --set "output=\"$out/run\"" \
  --set steps=3 --set eval.n=0 >"$out/train.json" 2>"$out/err"
rc=$?
kill -TERM $w1 $w2 2>/dev/null
wait $w1; r1=$?
wait $w2; r2=$?
[ $rc -eq 0 ] || { cat "$out/err" "$out/w7.err" "$out/w8.err"; fail "trainer exit $rc"; }
[ $r1 -eq 0 ] && [ $r2 -eq 0 ] || { cat "$out/w7.err" "$out/w8.err"; fail "workers exit $r1 $r2"; }
python3 - "$out" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(d + "/run/metrics.jsonl")]
assert [r["step"] for r in recs] == [1, 2, 3], recs
for r in recs:
    assert r["policy_version"] == r["step"] and r["staleness_max"] <= 1, r
    assert r["n_groups"] == 4 and r["reward_valid"] == 16 and len(r["prompt_index"]) == 4, r
w = [json.loads(open(d + "/w%d.json" % i).read()) for i in (7, 8)]
assert all(x["batches"] >= 0 and x["groups"] == 4 * x["batches"] for x in w), w  # a slow starter may have none
assert max(x["version"] for x in w) >= 1, w  # a worker took weights the trainer published
assert sum(x["batches"] for x in w) >= 3, w
PY
echo ok
