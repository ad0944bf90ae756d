#!/bin/sh
# The swarm's control plane across emulated WAN hosts (issue #26): workers
# join a running trainer instead of being listed in rollout.urls.
# 5 network-namespace hosts (tests/cli/netns_hosts.sh) joined by the
# userspace WAN switch (tests/net/wan_switch.c) at 50 ms ± 10 ms each way,
# 1 % frame loss and 100 Mbit/s on every crossing (check_swarm_wan.sh's
# profile).
# - host 0: `rlpost train` (stories260K with train_fixture.py's config,
#   sync.mode async, η = 1, 8 prompts x 4 samples a step, NO rollout.urls)
#   with its coordinator on swarm.listen (heartbeat 1 s, suspect 3 s, dead
#   20 s, swarm.min_workers 2), publishing into a folder that `rlpost
#   weights-serve` on host 0 serves as the relay origin;
# - hosts 1-4: workers w0-w3, `rlpost serve --host 0.0.0.0 --token-file
#   --weights-dir MIRROR --weights-from ORIGIN --join COORDINATOR
#   --advertise URL`; w0 and w1 start with the trainer (step 1 waits for
#   them), w2 and w3 join once step 2 is done;
# - churn: once step 4 is done, w1 is killed with SIGKILL: the ledger
#   (GET /v1/rlpost/workers) marks it suspect (out of the dispatch set)
#   within suspect_s plus a sweep, and at least one more step completes
#   without it; then it is restarted with the same mirror (so the same
#   worker id), rejoins (joins = 2) and is alive again; a step later w3
#   gets SIGTERM: it says leave (the ledger: left) and the run goes on.
# - asserted: exit 0 and every step; per step 8 groups, 32 valid samples,
#   staleness_max ≤ η; no group trained twice (samples.jsonl); the groups
#   add up (accepted = consumed + dropped + held, pushed = accepted); the
#   summary's "swarm" ledger: 4 workers, w1 with 2 joins and suspected once,
#   the others 1 join, w3 left and the others alive, every one having served
#   requests (the late joiners too), each its worker id from its mirror's
#   .rlpost-worker-id; every worker still up (the restarted one too) ends at
#   the trainer's last version (its /health). About 45 s.
# Usage: check_swarm_join.sh RLPOST WAN_SWITCH. Skips (77) without
# root/namespaces, the shared data, python3 or curl.
set -u
rlpost=$1
wan=$2
eta=1 steps=24 mnt=24 prompts=8
profile="--delay-ms 50 --jitter-ms 10 --loss 1 --rate-mbit 100"
here=$(cd "$(dirname "$0")" && pwd)
data=${RLPOST_SHARED_DATA:-}/llama2c/stories260K.bin
[ -n "${RLPOST_SHARED_DATA:-}" ] && [ -f "$data" ] || { echo "no stories260K.bin: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "curl not found: skipped"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() {
  echo "FAIL: $*"
  for f in "$out"/train.log "$out"/w*.log "$out"/origin.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -8 "$f"; }
  done
  [ -n "${SWARM_JOIN_KEEP:-}" ] && { rm -rf "$SWARM_JOIN_KEEP"; cp -r "$out" "$SWARM_JOIN_KEEP"; }
  exit 1
}
. "$here/../cli/netns_hosts.sh"
. "$here/swarm_lib.sh"
swarm_fixture swarm-join-token-26
NW=4
# shellcheck disable=SC2086
hosts_make_wan $((NW + 1)) "$wan" $profile
O="http://$(host_ip 0):8100"
C="http://$(host_ip 0):8200"
d=$out
mkdir -p "$d/weights"

# worker_start K: worker wK on host K+1, port 8000, mirror $d/mK, joining the coordinator
worker_start() {
  _k=$1
  ip netns exec "$(host_ns $((_k + 1)))" "$rlpost" serve "$model" --host 0.0.0.0 --port 8000 --threads 1 \
    --token-file "$out/token" --weights-dir "$d/m$_k" --weights-from "$O" --weights-poll-s 0.2 \
    --join "$C" --advertise "http://$(host_ip $((_k + 1))):8000" >"$d/w$_k.out" 2>>"$d/w$_k.log" &
  eval "wpid$_k=\$!"
}
# wait_steps N, failing when the trainer ended first
wait_steps_or_fail() {
  wait_steps "$1"
  [ "$(steps_done)" -ge "$1" ] || fail "the trainer ended at step $(steps_done), before step $1"
}
# ledger K FIELD: worker wK's FIELD in the coordinator's ledger (its id from its mirror)
ledger() {
  host_run 0 curl -s -m 5 -H "Authorization: Bearer $TOKEN" "$C/v1/rlpost/workers" |
    python3 -c 'import json,sys
l = json.load(sys.stdin); wid = open(sys.argv[1]).read().strip()
print([w[sys.argv[2]] for w in l["workers"] if w["id"] == wid][0])' "$d/m$1/.rlpost-worker-id" "$2" 2>/dev/null
}

ip netns exec "$(host_ns 0)" "$rlpost" weights-serve "$d/weights" --host "$(host_ip 0)" --port 8100 \
  --token-file "$out/token" >"$d/origin.out" 2>"$d/origin.log" &
wait_listening "$d/origin.out" origin
t0=$(date +%s)
ip netns exec "$(host_ns 0)" "$rlpost" train "$cfg" --set "model=\"$model\"" \
  --set "sync.weights_dir=\"$d/weights\"" --set "output=\"$d/run\"" \
  --set 'sync.mode="async"' --set sync.staleness="$eta" --set steps="$steps" --set eval.n=0 \
  --set prompts_per_step="$prompts" --set samples.per_step=$((prompts * 4)) --set checkpoint.interval=0 \
  --set sampling.max_new_tokens="$mnt" --set "swarm.listen=\"$(host_ip 0):8200\"" \
  --set "swarm.token_file=\"$out/token\"" --set swarm.min_workers=2 --set swarm.join_timeout_s=60 \
  --set swarm.heartbeat_s=1 --set swarm.suspect_s=3 --set swarm.dead_s=20 >"$d/train.json" 2>"$d/train.log" &
train_pid=$!
worker_start 0
worker_start 1
wait_steps_or_fail 1
grep -q "swarm: 2 workers in the dispatch set" "$d/train.log" || fail "step 1 did not wait for swarm.min_workers"
wait_steps_or_fail 2
worker_start 2
worker_start 3
wait_steps_or_fail 4
kill -9 "$wpid1"
wait "$wpid1" 2>/dev/null
killed_at=$(steps_done)
# suspect within suspect_s (3 s) plus a sweep and a heartbeat period
j=0
while [ "$(ledger 1 state)" != suspect ]; do
  j=$((j + 1))
  [ $j -lt 100 ] || fail "w1 was not marked suspect within 10 s of its kill (state $(ledger 1 state))"
  sleep 0.1
done
suspect_at=$(steps_done)
grep -q "worker $(cut -c1-12 "$d/m1/.rlpost-worker-id") .* suspect" "$d/train.log" || fail "no suspect line for w1"
# the run goes on without it
wait_steps_or_fail $((suspect_at + 1))
worker_start 1
j=0
while [ "$(ledger 1 joins)" != 2 ] || [ "$(ledger 1 state)" != alive ]; do
  j=$((j + 1))
  [ $j -lt 300 ] || fail "w1 did not rejoin within 30 s (joins $(ledger 1 joins), state $(ledger 1 state))"
  sleep 0.1
done
rejoined_at=$(steps_done)
kill -0 "$train_pid" 2>/dev/null || fail "the trainer ended before w1 rejoined"
# a worker shut down cleanly says leave, and the run goes on without it
wait_steps_or_fail $((rejoined_at + 1))
kill -TERM "$wpid3"
wait "$wpid3" 2>/dev/null
grep -q "left the swarm at $C" "$d/w3.log" || fail "w3 did not leave on SIGTERM"
[ "$(ledger 3 state)" = left ] || fail "w3 is $(ledger 3 state) in the ledger, not left"
left_at=$(steps_done)
wait_steps_or_fail $((left_at + 1))
wait "$train_pid"
rc=$?
t1=$(date +%s)
[ $rc -eq 0 ] || fail "rlpost train exited $rc"
echo "churn: w2, w3 joined after step 2; w1 killed after step $killed_at, suspect after step $suspect_at," \
  "rejoined after step $rejoined_at; w3 left after step $left_at; training took $((t1 - t0)) s"

# every worker still up at the last version (the relay brings it)
k=0
while [ $k -lt 3 ]; do
  j=0
  while [ "$(health $k)" != "$steps" ]; do
    j=$((j + 1))
    [ $j -lt 100 ] || fail "w$k is at weight version $(health $k), not $steps"
    sleep 0.2
  done
  k=$((k + 1))
done

python3 - "$d" "$eta" "$steps" "$prompts" "$NW" <<'PY' || fail "swarm accounting"
import collections, json, sys
d, eta, steps, P, NW = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
G = 4  # group_size of train_fixture.py
s = json.load(open(d + "/train.json"))
assert s["steps_completed"] == steps and s["sync_mode"] == "async" and not s["interrupted"], s
assert s["staleness_max"] <= eta, s
m = [json.loads(l) for l in open(d + "/run/metrics.jsonl")]
assert [r["step"] for r in m] == list(range(1, steps + 1)), [r["step"] for r in m]
for r in m:
    # a full step of valid samples: a group on the killed worker was generated again, not lost
    assert r["n_groups"] == P and r["completions"] == P * G and r["n_seqs"] == P * G, r
    assert r["reward_valid"] == P * G and r["invalid_seqs"] == 0, r
    assert 0 <= r["staleness_max"] <= eta, r
dropped = m[-1]["buffer_dropped_total"]
g = s["groups"]
assert g["accepted"] + g["restored"] == g["consumed"] + g["dropped_stale"] + g["held"], g
assert g["consumed"] == steps * P and g["dropped_stale"] >= dropped, (g, dropped)
assert g["pushed"] == g["accepted"], g
# no group trained twice
by_group = collections.defaultdict(list)
for l in open(d + "/run/samples.jsonl"):
    x = json.loads(l)
    if x["kind"] == "train":
        by_group[x["group_id"]].append(x["step"])
assert sum(len(v) for v in by_group.values()) == steps * P * G
for gid, st in by_group.items():
    assert len(st) == G and len(set(st)) == 1, ("group %d trained in steps %s" % (gid, st))
# the ledger
sw = s["swarm"]
assert sw["static"] == [] and sw["min_workers"] == 2 and sw["registered"] == NW and sw["live"] == NW - 1, sw
assert sw["requests"]["leave"] == 1 and sw["requests"]["register"] == NW + 1, sw
assert sw["dispatch_update_errors"] == 0, sw
ids = [open("%s/m%d/.rlpost-worker-id" % (d, k)).read().strip() for k in range(NW)]
by_id = {w["id"]: w for w in sw["workers"]}
assert sorted(by_id) == sorted(ids), (sorted(by_id), ids)
for k, wid in enumerate(ids):
    w = by_id[wid]
    assert w["state"] == ("left" if k == 3 else "alive"), (k, w)
    assert w["joins"] == (2 if k == 1 else 1), (k, w)
    assert w["suspected"] == (1 if k == 1 else 0), (k, w)
    assert w["url"].endswith(".%d:8000" % (k + 2)), (k, w)
    assert w["requests_ok"] > 0 and w["completions"] > 0, (k, w)
    assert w["heartbeats"] > 0, (k, w)
    assert w["staleness_max"] is not None and w["last_weight_version"] is not None, (k, w)
print("swarm join over WAN: %d steps, %d groups trained once each, %d dropped as stale, staleness max %g (eta %d); "
      "requests per worker %s, joins %s; wall %.1f s"
      % (steps, len(by_group), dropped, s["staleness_max"], eta,
         [by_id[i]["requests_ok"] for i in ids], [by_id[i]["joins"] for i in ids], s["wall_seconds"]))
PY
grep -q "joined the swarm at $C as $(cat "$d/m1/.rlpost-worker-id")" "$d/w1.log" || fail "w1's log has no join line"
[ "$(grep -c "joined the swarm at" "$d/w1.log")" -ge 2 ] || fail "w1 did not join twice (its log)"
echo ok
